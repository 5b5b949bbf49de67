//! What every handler writes and reads the same way: JSON bodies in, dates out.

use axum::body::Bytes;
use walletgate::envelope::DataApiError;

/// Parses a JSON body, answering 400 in the Area A envelope.
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, DataApiError> {
    serde_json::from_slice(body)
        .map_err(|error| DataApiError::bad_request(format!("invalid JSON body: {error}")))
}

/// Unix seconds as RFC 3339 UTC, e.g. `2026-11-21T12:00:00.000Z`.
pub(crate) fn rfc3339(unix_secs: u64) -> String {
    let millis = i64::try_from(unix_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    walletgate::siwe::Timestamp::from_unix_millis(millis).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_800_000_000), "2027-01-15T08:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00.000Z");
    }
}

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

/// The JSON Schemas of the wire formats above, for fields whose Rust type is
/// a plain `String` (or a library type) but whose text has a shape. Body
/// types name them with `#[schemars(with = "…")]`, so the OpenAPI document is
/// derived from the types (see `openapi.rs`).
pub(crate) mod schema {
    use std::borrow::Cow;

    use rmcp::schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
    use walletgate::wallet_jwt::Scope;

    /// A `0x`-prefixed 20-byte wallet or contract address: one shared component.
    pub(crate) struct Address;

    impl JsonSchema for Address {
        fn schema_name() -> Cow<'static, str> {
            "Address".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({ "type": "string", "pattern": "^0x[0-9a-fA-F]{40}$" })
        }
    }

    /// An RFC 3339 date, as [`rfc3339`](super::rfc3339) writes it: inlined.
    pub(crate) struct DateTime;

    impl JsonSchema for DateTime {
        fn inline_schema() -> bool {
            true
        }

        fn schema_name() -> Cow<'static, str> {
            "DateTime".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({ "type": "string", "format": "date-time" })
        }
    }

    /// The scope names a personal access token can carry: one shared component.
    pub(crate) struct Scopes;

    impl JsonSchema for Scopes {
        fn schema_name() -> Cow<'static, str> {
            "Scopes".into()
        }

        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            let names = [
                Scope::ReadFavorites,
                Scope::ReadWallets,
                Scope::WriteWallets,
            ]
            .map(|scope| scope.as_str().to_owned());
            json_schema!({ "type": "array", "items": { "type": "string", "enum": names } })
        }
    }
}

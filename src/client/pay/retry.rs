//! The retry policy, the sleeper it waits with, and reading an error answer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::envelope::ErrorCode;
use crate::store::BoxFuture;
use crate::x402::{
    facilitator::code_for_reason,
    wire::{PaymentRequired, codec},
};

/// Waits between retries; tests inject one that records and returns at once.
pub trait Sleeper: Send + Sync + 'static {
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// Sleeps on the tokio timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A shareable sleeper.
pub type SharedSleeper = Arc<dyn Sleeper>;

/// The retry rules, explicit and bounded (specification 7 B rules 1, 4, 5).
///
/// * `PAYMENT_VERIFICATION_UNAVAILABLE` (503): resend the **same** signed
///   payment, at most [`verification_retries`](Self::with_verification_retries)
///   times, waiting `Retry-After` or else the backoff (doubling from
///   [`backoff`](Self::with_backoff) up to [`max_backoff`](Self::max_backoff));
/// * `PAYMENT_BLOCKHASH_STALE` (402): sign afresh once, if
///   [`resign_on_stale_blockhash`](Self::resign_on_stale_blockhash);
/// * any other 429 / 503 with `Retry-After` of at most
///   [`max_retry_after`](Self::max_retry_after): wait it and resend, at
///   most [`retry_after_waits`](Self::retry_after_waits) times;
/// * `MODEL_UNAVAILABLE` / `RATE_LIMITED`: fail over once to a same-tier
///   model of another provider, when failover is on (before waiting).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Resends of the same payment after `PAYMENT_VERIFICATION_UNAVAILABLE`.
    pub verification_retries: u32,
    /// The first backoff.
    pub backoff: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
    /// Waits on `Retry-After` for other 429 / 503 answers.
    pub retry_after_waits: u32,
    /// The longest `Retry-After` the client waits; a longer one is returned as the error.
    pub max_retry_after: Duration,
    /// Re-sign once on `PAYMENT_BLOCKHASH_STALE`.
    pub resign_on_stale_blockhash: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            verification_retries: 3,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            retry_after_waits: 1,
            max_retry_after: Duration::from_secs(60),
            resign_on_stale_blockhash: true,
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            verification_retries: 0,
            retry_after_waits: 0,
            resign_on_stale_blockhash: false,
            ..Self::default()
        }
    }

    /// `verification_retries` resends of the same payment after `PAYMENT_VERIFICATION_UNAVAILABLE`.
    pub fn with_verification_retries(mut self, retries: u32) -> Self {
        self.verification_retries = retries;
        self
    }

    /// The first and the longest backoff.
    pub fn with_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = first;
        self.max_backoff = max.max(first);
        self
    }

    /// `waits` waits on `Retry-After` of at most `max` each.
    pub fn with_retry_after(mut self, waits: u32, max: Duration) -> Self {
        self.retry_after_waits = waits;
        self.max_retry_after = max;
        self
    }

    /// Whether to re-sign once on `PAYMENT_BLOCKHASH_STALE`.
    pub fn resign_on_stale_blockhash(mut self, resign: bool) -> Self {
        self.resign_on_stale_blockhash = resign;
        self
    }

    /// The backoff before retry number `retry` (0-based).
    pub(crate) fn backoff_for(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        self.backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// `Retry-After` in whole seconds (the HTTP-date form is not honoured).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// The x402 quote of a 402 answer: `PAYMENT-REQUIRED`, else the JSON body's
/// mirror (a walletgate body carries no `extensions`: those are the header's).
pub fn parse_quote(headers: &HeaderMap, body: &[u8]) -> Option<PaymentRequired> {
    if let Some(value) = headers.get("payment-required")
        && let Ok(quote) = codec::decode::<PaymentRequired>(value.as_bytes())
    {
        return Some(quote);
    }
    if body.len() > codec::MAX_HEADER_BYTES * 4 {
        return None;
    }
    serde_json::from_slice::<PaymentRequired>(body).ok()
}

/// What an error answer says, for the retry rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ErrorAnswer {
    /// The code the body (or a 402's quote) names, as sent.
    pub(crate) code: Option<String>,
    /// The same code, if it is one of the gateway's.
    pub(crate) known: Option<ErrorCode>,
}

impl fmt::Display for ErrorAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code.as_deref().unwrap_or("(no code)"))
    }
}

/// Reads the code of an error answer: the body's `code` or `error.code`;
/// else (the messages envelope names no code) its `error.message` matched
/// against the gateway's default messages; else, on a 402, the reason its
/// quote carries; else `error.type`.
pub(crate) fn read_error(
    status: StatusCode,
    body: &[u8],
    quote: Option<&PaymentRequired>,
) -> ErrorAnswer {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let named = json.as_ref().and_then(|json| {
        text(json.get("code")).or_else(|| text(json.get("error").and_then(|e| e.get("code"))))
    });
    let by_message = || {
        let message = json.as_ref()?.get("error")?.get("message")?.as_str()?;
        ErrorCode::ALL
            .iter()
            .find(|code| code.status() == status && code.default_message() == message)
            .map(|code| code.as_str().to_owned())
    };
    let by_quote = || {
        let reason = quote?.error.as_deref()?;
        (status == StatusCode::PAYMENT_REQUIRED && reason != crate::x402::server::QUOTE_ERROR)
            .then(|| code_for_reason(reason).as_str().to_owned())
    };
    let by_type = || text(json.as_ref()?.get("error")?.get("type"));
    let code = named.or_else(by_message).or_else(by_quote).or_else(by_type);
    let known = code.as_deref().and_then(ErrorCode::from_wire);
    ErrorAnswer { code, known }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let policy = RetryPolicy::default();
        let waits: Vec<u64> = (0..6)
            .map(|retry| policy.backoff_for(retry).as_millis() as u64)
            .collect();
        assert_eq!(waits, [500, 1_000, 2_000, 4_000, 8_000, 8_000]);
        assert_eq!(RetryPolicy::none().verification_retries, 0);
    }

    #[test]
    fn codes_are_read_from_every_envelope() {
        let status = StatusCode::SERVICE_UNAVAILABLE;
        let chat = br#"{"error":{"code":"MODEL_UNAVAILABLE","type":"api_error"},"code":"MODEL_UNAVAILABLE"}"#;
        assert_eq!(
            read_error(status, chat, None).known,
            Some(ErrorCode::ModelUnavailable)
        );
        let message = ErrorCode::PaymentVerificationUnavailable.default_message();
        let messages =
            serde_json::json!({"type":"error","error":{"type":"api_error","message":message}});
        assert_eq!(
            read_error(status, messages.to_string().as_bytes(), None).known,
            Some(ErrorCode::PaymentVerificationUnavailable)
        );
        let other = br#"{"error":{"type":"overloaded"}}"#;
        let answer = read_error(status, other, None);
        assert_eq!(
            (answer.code.as_deref(), answer.known),
            (Some("overloaded"), None)
        );
        let mut quote: PaymentRequired = serde_json::from_value(serde_json::json!({
            "x402Version": 2, "error": "insufficient_funds",
            "resource": {"url": "http://x/"}, "accepts": []
        }))
        .unwrap();
        let answer = read_error(StatusCode::PAYMENT_REQUIRED, b"{}", Some(&quote));
        assert_eq!(answer.known, Some(ErrorCode::PaymentUnfunded));
        quote.error = Some(crate::x402::server::QUOTE_ERROR.into());
        let answer = read_error(StatusCode::PAYMENT_REQUIRED, b"{}", Some(&quote));
        assert_eq!(answer.known, None);
    }

    #[test]
    fn retry_after_is_whole_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(http::header::RETRY_AFTER, "5".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(5)));
    }
}

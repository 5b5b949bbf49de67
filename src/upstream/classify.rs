//! Sorting upstream failures into the gateway's error codes.
//!
//! A model provider fails in its own words: a status (sometimes only inside
//! the text, when a router wrapped it), and a description. [`classify_upstream`]
//! turns that into the [`ErrorCode`] a client can act on, so that a rejected
//! parameter stays a 400 the client can fix, capacity problems become 429/503
//! the client can fail over from, and only the truly unknown is a 500.
//!
//! ```
//! use http::StatusCode;
//! use walletgate::envelope::ErrorCode;
//! use walletgate::upstream::classify_upstream;
//!
//! let code = classify_upstream(
//!     Some(StatusCode::BAD_REQUEST),
//!     "prompt is too long: 214532 tokens > 200000 maximum",
//! );
//! assert_eq!(code, ErrorCode::ContextLengthExceeded);
//!
//! // No status from the transport: the one inside the text counts.
//! let code = classify_upstream(None, "Error code: 529 - {'error': {'type': 'overloaded_error'}}");
//! assert_eq!(code, ErrorCode::ModelUnavailable);
//! ```
//!
//! The gateway adds what only it knows: a free model's capacity failure is
//! `FREE_MODEL_FAILED` / `STREAM_FAILED`, and its own timer's expiry is `TIMEOUT`.

use std::sync::LazyLock;

use http::StatusCode;
use regex_lite::Regex;

use crate::envelope::ErrorCode;

/// Patterns that find an HTTP status inside error text, most specific first.
static STATUS_PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // "Error code: 400 - …" (OpenAI and Anthropic SDKs, litellm).
        r"(?i)\berror code:?\s*([1-5]\d{2})\b",
        // JSON bodies of routers: {"error":{"code":429,…}}.
        r#""code"\s*:\s*([1-5]\d{2})\b"#,
        // "400 Bad Request: …", "429 RESOURCE_EXHAUSTED: …" at the start.
        r"^\s*([1-5]\d{2})\b",
        // "Together AI error 503: …", "upstream 402: …", "Fireworks 400: …".
        r"\b([45]\d{2})\s*:",
        // "… failed: 401 Unauthorized".
        r"\b([45]\d{2})\s+[A-Z][A-Za-z_-]+",
    ]
    .iter()
    // The patterns are constants checked by the tests below.
    .map(|pattern| Regex::new(pattern).expect("status pattern compiles"))
    .collect()
});

/// The HTTP status an upstream error text names, e.g. 429 in
/// `"Error code: 429 - Rate limit reached"`.
pub fn status_in_text(text: &str) -> Option<StatusCode> {
    STATUS_PATTERNS.iter().find_map(|pattern| {
        let digits = pattern.captures(text)?.get(1)?.as_str();
        StatusCode::from_bytes(digits.as_bytes()).ok()
    })
}

/// Classifies an upstream failure by its status (when the transport gave one;
/// else the status named in `text`) and its text.
///
/// | upstream | code |
/// |---|---|
/// | 408, 504, 524, or "timed out" without a status | `TIMEOUT` |
/// | 401, 402, 403, or an invalid key / missing credits | `PROVIDER_CONFIG_ERROR` |
/// | 404, 502, 503, 529, overloaded, connection failures | `MODEL_UNAVAILABLE` |
/// | 429 | `RATE_LIMITED` |
/// | other 4xx | by text: context length, content filter, image URL, reasoning block, tool id, message shape; else `INVALID_PARAMETER` |
/// | 500 and anything else | `INTERNAL_ERROR` |
pub fn classify_upstream(status: Option<StatusCode>, text: &str) -> ErrorCode {
    let lower = text.to_ascii_lowercase();
    let Some(status) = status.or_else(|| status_in_text(text)) else {
        return classify_transport(&lower);
    };
    match status.as_u16() {
        408 | 504 | 524 => ErrorCode::Timeout,
        401..=403 => ErrorCode::ProviderConfigError,
        404 | 502 | 503 | 529 => ErrorCode::ModelUnavailable,
        429 if mentions(&lower, PROVIDER_ACCOUNT) => ErrorCode::ProviderConfigError,
        429 => ErrorCode::RateLimited,
        400..=499 => classify_rejection(&lower).unwrap_or(ErrorCode::InvalidParameter),
        _ if mentions(&lower, UNAVAILABLE) => ErrorCode::ModelUnavailable,
        _ => ErrorCode::InternalError,
    }
}

/// A free model's capacity failure in the codes a client of the free tier acts on.
///
/// `RATE_LIMITED` and `MODEL_UNAVAILABLE` name a provider's capacity; on a free
/// model the client's answer is a paid model or a later retry, not another free
/// provider, so they become `STREAM_FAILED` (the stream was asked for) or
/// `FREE_MODEL_FAILED`. Every other code passes unchanged.
///
/// ```
/// use walletgate::envelope::ErrorCode;
/// use walletgate::upstream::free_model_override;
///
/// assert_eq!(free_model_override(ErrorCode::RateLimited, false), ErrorCode::FreeModelFailed);
/// assert_eq!(free_model_override(ErrorCode::ModelUnavailable, true), ErrorCode::StreamFailed);
/// assert_eq!(free_model_override(ErrorCode::Timeout, false), ErrorCode::Timeout);
/// ```
pub fn free_model_override(code: ErrorCode, streaming: bool) -> ErrorCode {
    match code {
        ErrorCode::RateLimited | ErrorCode::ModelUnavailable if streaming => {
            ErrorCode::StreamFailed
        }
        ErrorCode::RateLimited | ErrorCode::ModelUnavailable => ErrorCode::FreeModelFailed,
        other => other,
    }
}

/// Whether a client facing `code` should be pointed at same-tier models of
/// other providers: the failure is one provider's capacity or setup, not the request.
pub fn suggests_failover(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::RateLimited
            | ErrorCode::ModelUnavailable
            | ErrorCode::ProviderConfigError
            | ErrorCode::StreamFailed
            | ErrorCode::FreeModelFailed
    )
}

/// A failure with no status at all: the connection, not the provider, failed.
fn classify_transport(lower: &str) -> ErrorCode {
    if mentions(lower, CONNECTION) || mentions(lower, UNAVAILABLE) {
        ErrorCode::ModelUnavailable
    } else if mentions(lower, TIMED_OUT) {
        ErrorCode::Timeout
    } else {
        // Unknown text without a status is not evidence of a bad request.
        classify_rejection(lower).unwrap_or(ErrorCode::InternalError)
    }
}

/// What a rejected request's text says is wrong with it, when it says.
fn classify_rejection(lower: &str) -> Option<ErrorCode> {
    let code = if mentions(lower, CONTEXT_LENGTH) {
        ErrorCode::ContextLengthExceeded
    } else if mentions(lower, IMAGE_URL) {
        // Before the filter and account checks: image URLs carry words like
        // "Credential" in their signed query strings.
        ErrorCode::InvalidImageUrl
    } else if mentions(lower, CONTENT_FILTER) {
        ErrorCode::ContentFiltered
    } else if mentions(lower, REASONING) {
        ErrorCode::ReasoningFormatError
    } else if mentions(lower, TOOL_ID) {
        ErrorCode::ToolIdFormatError
    } else if mentions(lower, PROVIDER_ACCOUNT) {
        ErrorCode::ProviderConfigError
    } else if mentions(lower, MESSAGE_SHAPE) {
        ErrorCode::InvalidRequest
    } else if mentions(lower, PARAMETER) {
        ErrorCode::InvalidParameter
    } else {
        return None;
    };
    Some(code)
}

fn mentions(lower: &str, phrases: &[&str]) -> bool {
    phrases.iter().any(|phrase| lower.contains(phrase))
}

const CONTEXT_LENGTH: &[&str] = &[
    "context length",
    "context_length",
    "context window",
    "maximum context",
    "prompt is too long",
    "input is too long",
    "too many input tokens",
    "reduce the length",
];

const IMAGE_URL: &[&str] = &[
    "image url",
    "image_url",
    "invalid_image",
    "could not fetch image",
    "failed to download image",
    "unable to download image",
    "image could not be",
];

const CONTENT_FILTER: &[&str] = &[
    "safety",
    "content_policy",
    "content policy",
    "content management policy",
    "content_filter",
    "content filter",
    "was filtered",
    "flagged",
    "moderation",
];

const REASONING: &[&str] = &[
    "`thinking`",
    "thinking block",
    "redacted_thinking",
    "reasoning_content",
    "reasoning_details",
    "reasoning block",
    "reasoning item",
];

const TOOL_ID: &[&str] = &[
    "tool_use.id",
    "tool_use_id",
    "tool_call_id",
    "tool call id",
    "tool_call.id",
    "tool_calls.id",
];

const PROVIDER_ACCOUNT: &[&str] = &[
    "api key not valid",
    "invalid api key",
    "incorrect api key",
    "invalid x-api-key",
    "invalid_api_key",
    "authentication",
    "unauthorized",
    "permission denied",
    "permission_denied",
    "does not have permission",
    "insufficient credits",
    "insufficient_quota",
    "credit balance",
    "billing",
];

const MESSAGE_SHAPE: &[&str] = &[
    "messages",
    "message must",
    "'role'",
    "`role`",
    "roles must",
    "must alternate",
    "tool result",
    "tool_result",
];

const PARAMETER: &[&str] = &[
    "parameter",
    "invalid argument",
    "invalid_argument",
    "invalid value",
    "unsupported value",
    "must be between",
    "above maximum",
    "below minimum",
    "is not supported",
    "not allowed",
];

const UNAVAILABLE: &[&str] = &[
    "overloaded",
    "unavailable",
    "at capacity",
    "model not found",
    "no endpoints found",
];

const CONNECTION: &[&str] = &[
    "connect error",
    "connection refused",
    "connection reset",
    "disconnect/reset",
    "dns error",
    "broken pipe",
];

const TIMED_OUT: &[&str] = &["timed out", "timeout", "time-out"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_models_turn_capacity_failures_into_their_own_codes() {
        for code in [ErrorCode::RateLimited, ErrorCode::ModelUnavailable] {
            assert_eq!(free_model_override(code, false), ErrorCode::FreeModelFailed);
            assert_eq!(free_model_override(code, true), ErrorCode::StreamFailed);
            assert!(suggests_failover(free_model_override(code, false)));
        }
        for code in [
            ErrorCode::InvalidParameter,
            ErrorCode::Timeout,
            ErrorCode::InternalError,
        ] {
            assert_eq!(free_model_override(code, true), code);
            assert!(!suggests_failover(code));
        }
    }

    #[test]
    fn finds_status_in_router_texts() {
        let cases = [
            ("Error code: 401 - {'error': 'x'}", Some(401)),
            (r#"{"error":{"message":"x","code":429}}"#, Some(429)),
            ("429 RESOURCE_EXHAUSTED: Quota exceeded", Some(429)),
            ("Together AI error 503: Model is unavailable", Some(503)),
            (
                "POST /v1 failed: 401 Unauthorized (Authorization: …)",
                Some(401),
            ),
            (
                "at 12:30:45 reset reason: connection timeout 10.0.12.45:8080",
                None,
            ),
            ("your messages resulted in 131234 tokens", None),
        ];
        for (text, expected) in cases {
            assert_eq!(
                status_in_text(text).map(|status| status.as_u16()),
                expected,
                "{text}"
            );
        }
    }

    #[test]
    fn explicit_status_wins_over_text() {
        let code = classify_upstream(Some(StatusCode::TOO_MANY_REQUESTS), "Error code: 400 - x");
        assert_eq!(code, ErrorCode::RateLimited);
    }

    #[test]
    fn parameter_rejections_never_become_500() {
        for status in [400u16, 409, 413, 415, 422] {
            let status = StatusCode::from_u16(status).unwrap();
            let code = classify_upstream(Some(status), "something nobody anticipated");
            assert_eq!(code.status(), StatusCode::BAD_REQUEST, "{status}");
        }
    }

    #[test]
    fn quota_429_is_a_gateway_account_problem() {
        let text = "You exceeded your current quota, please check your plan and billing details. insufficient_quota";
        assert_eq!(
            classify_upstream(Some(StatusCode::TOO_MANY_REQUESTS), text),
            ErrorCode::ProviderConfigError
        );
    }

    #[test]
    fn transport_failures() {
        assert_eq!(
            classify_upstream(
                None,
                "client error (Connect): tcp connect error: Connection refused"
            ),
            ErrorCode::ModelUnavailable
        );
        assert_eq!(
            classify_upstream(None, "operation timed out"),
            ErrorCode::Timeout
        );
        assert_eq!(
            classify_upstream(None, "something odd happened"),
            ErrorCode::InternalError
        );
        // Even without any status, a parameter rejection stays a 400.
        assert_eq!(
            classify_upstream(None, "Invalid 'max_tokens': integer above maximum value"),
            ErrorCode::InvalidParameter
        );
    }

    /// Every realistic upstream error of the fixture corpus, with the code a
    /// client should see; keyed by a distinctive piece of its text.
    const EXPECTED: &[(&str, ErrorCode)] = &[
        ("Incorrect API key provided", ErrorCode::ProviderConfigError),
        (
            "maximum context length is 128000",
            ErrorCode::ContextLengthExceeded,
        ),
        ("Rate limit reached for gpt-4o", ErrorCode::RateLimited),
        ("Invalid 'max_tokens'", ErrorCode::InvalidParameter),
        ("The server had an error", ErrorCode::InternalError),
        ("failed: 401 Unauthorized", ErrorCode::ProviderConfigError),
        ("Invalid image URL", ErrorCode::InvalidImageUrl),
        ("our safety system", ErrorCode::ContentFiltered),
        ("invalid x-api-key", ErrorCode::ProviderConfigError),
        ("'Overloaded'", ErrorCode::ModelUnavailable),
        ("prompt is too long", ErrorCode::ContextLengthExceeded),
        ("tool_use.id", ErrorCode::ToolIdFormatError),
        ("redacted_thinking", ErrorCode::ReasoningFormatError),
        ("per-minute rate limit", ErrorCode::RateLimited),
        ("API key not valid", ErrorCode::ProviderConfigError),
        ("RESOURCE_EXHAUSTED", ErrorCode::RateLimited),
        ("503 UNAVAILABLE", ErrorCode::ModelUnavailable),
        (
            "temperature must be between 0 and 2",
            ErrorCode::InvalidParameter,
        ),
        ("403 PERMISSION_DENIED", ErrorCode::ProviderConfigError),
        ("blocked due to SAFETY", ErrorCode::ContentFiltered),
        ("temporarily rate-limited upstream", ErrorCode::RateLimited),
        ("support image input", ErrorCode::ModelUnavailable),
        (
            "maximum context length is 65536",
            ErrorCode::ContextLengthExceeded,
        ),
        ("Insufficient credits", ErrorCode::ProviderConfigError),
        ("'tool_choice' is only allowed", ErrorCode::InvalidParameter),
        ("Invalid API Key gsk_", ErrorCode::ProviderConfigError),
        (
            "does not have permission to use model",
            ErrorCode::ProviderConfigError,
        ),
        ("upstream connect error", ErrorCode::ModelUnavailable),
        ("504 Gateway Time-out", ErrorCode::Timeout),
        ("is currently unavailable", ErrorCode::ModelUnavailable),
        ("`logprobs` must be between", ErrorCode::InvalidParameter),
        ("Mistral API error 401", ErrorCode::ProviderConfigError),
        (
            "does not support the parameter `temperature`",
            ErrorCode::InvalidParameter,
        ),
        ("content management policy", ErrorCode::ContentFiltered),
        ("ThrottlingException 429", ErrorCode::RateLimited),
        (
            "message must be at least 1 token long",
            ErrorCode::InvalidRequest,
        ),
    ];

    #[test]
    fn fixture_corpus_classifies_as_a_client_expects() {
        let raw = include_str!("../../tests/fixtures/upstream_errors.json");
        let cases: Vec<serde_json::Value> = serde_json::from_str(raw).unwrap();
        let mut wrong = Vec::new();
        for case in &cases {
            let text = case["text"].as_str().unwrap();
            let matching: Vec<_> = EXPECTED
                .iter()
                .filter(|(needle, _)| text.contains(needle))
                .collect();
            assert_eq!(matching.len(), 1, "one expectation per fixture: {text}");
            let expected = matching[0].1;
            let got = classify_upstream(None, text);
            if got != expected {
                wrong.push(format!("{got} instead of {expected}: {text}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert_eq!(
            cases.len(),
            EXPECTED.len(),
            "an expectation without a fixture"
        );
    }
}

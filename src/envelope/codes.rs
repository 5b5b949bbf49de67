//! The one table of gateway error codes.

use std::fmt;

use http::StatusCode;
use serde::{Deserialize, Serialize};

/// The `error.type` of a gateway error body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorType {
    /// `invalid_request_error`: the client can fix the request.
    #[serde(rename = "invalid_request_error")]
    InvalidRequest,
    /// `rate_limit_error`: retry later, honouring `Retry-After`.
    #[serde(rename = "rate_limit_error")]
    RateLimit,
    /// `api_error`: the gateway or its upstream failed.
    #[serde(rename = "api_error")]
    Api,
    /// `payment_required`: the payment is missing or was refused.
    #[serde(rename = "payment_required")]
    PaymentRequired,
}

impl ErrorType {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request_error",
            Self::RateLimit => "rate_limit_error",
            Self::Api => "api_error",
            Self::PaymentRequired => "payment_required",
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which stage of a paid request a payment code belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PaymentPhase {
    /// Refused before anything was consumed ("Payment verification failed").
    Verify,
    /// The authorization was already used.
    Replay,
    /// The facilitator could not be asked; the same payment may be resent.
    Unavailable,
    /// Settlement failed after the upstream answered; nothing was charged.
    Settle,
    /// The `payment-identifier` extension's id was refused.
    Identifier,
}

impl PaymentPhase {
    /// The payment rejection body's `error` title.
    pub(crate) const fn title(self) -> &'static str {
        match self {
            Self::Verify => "Payment verification failed",
            Self::Replay => "Payment authorization already used",
            Self::Unavailable => "Payment verification unavailable",
            Self::Settle => "Payment settlement failed",
            Self::Identifier => "Payment identifier refused",
        }
    }
}

/// One row of the code table.
struct Row {
    code: ErrorCode,
    name: &'static str,
    status: StatusCode,
    error_type: ErrorType,
    retry_after_secs: Option<u64>,
    payment_phase: Option<PaymentPhase>,
    message: &'static str,
}

macro_rules! code_table {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, $status:ident, $ty:ident,
        retry $retry:expr, phase $phase:expr, $message:literal; )*) => {
        /// A machine-readable gateway error code (specification, section 7 B).
        ///
        /// Status, `error.type`, default message and `Retry-After` of every code
        /// live in one table; read them with the methods below.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )*
        }

        const TABLE: &[Row] = &[
            $( Row {
                code: ErrorCode::$variant,
                name: $name,
                status: StatusCode::$status,
                error_type: ErrorType::$ty,
                retry_after_secs: $retry,
                payment_phase: $phase,
                message: $message,
            }, )*
        ];

        impl ErrorCode {
            /// Every code, in table order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )* ];
        }
    };
}

use PaymentPhase::{Identifier, Replay, Settle, Unavailable, Verify};

code_table! {
    /// Body is not valid JSON.
    InvalidJson => "INVALID_JSON", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "Request body is not valid JSON";
    /// Schema validation failed; `details` lists the offending paths.
    InvalidRequestBody => "INVALID_REQUEST_BODY", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "Request body failed validation";
    /// `messages` contained only system entries.
    EmptyConversation => "EMPTY_CONVERSATION", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "messages must contain at least one non-system message";
    /// The upstream rejected a sampling or tool parameter.
    InvalidParameter => "INVALID_PARAMETER", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "The model rejected a request parameter";
    /// The prompt does not fit the model's context window.
    ContextLengthExceeded => "CONTEXT_LENGTH_EXCEEDED", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "The prompt does not fit the model's context window";
    /// An `image_url` could not be fetched.
    InvalidImageUrl => "INVALID_IMAGE_URL", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "An image_url could not be fetched";
    /// The body is over the size limit.
    RequestTooLarge => "REQUEST_TOO_LARGE", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "Request body is over the size limit";
    /// The upstream safety filter blocked the request.
    ContentFiltered => "CONTENT_FILTERED", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "The request was blocked by the model's safety filter";
    /// `stream: true` on a model that serves only non-streaming requests.
    StreamUnsupported => "STREAM_UNSUPPORTED", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "This model does not support stream: true";
    /// A reasoning block in the message history has the wrong shape.
    ReasoningFormatError => "REASONING_FORMAT_ERROR", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "A reasoning entry in messages has the wrong format";
    /// A tool call id in the message history has the wrong shape.
    ToolIdFormatError => "TOOL_ID_FORMAT_ERROR", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "A tool call id in messages has the wrong format";
    /// Another message-history shape problem.
    InvalidRequest => "INVALID_REQUEST", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "The message history has an invalid shape";
    /// A trusted proxy's forwarding header (`X-Forwarded-For`, `Forwarded`,
    /// `X-Real-IP`) names a hop that is not an IP address, so the client
    /// cannot be told; refused rather than limited in a shared bucket.
    ///
    /// Not in the specification's table: its codes are about the body.
    InvalidForwardedHeader => "INVALID_FORWARDED_HEADER", BAD_REQUEST, InvalidRequest,
        retry None, phase None, "A forwarding header names a hop that is not an IP address";
    /// Any other verification failure: bad signature, wrong network or asset, malformed payload.
    PaymentInvalid => "PAYMENT_INVALID", PAYMENT_REQUIRED, PaymentRequired,
        retry None, phase Some(Verify), "Payment is invalid; sign exactly the quoted requirements";
    /// Transfer simulation reverted: insufficient USDC, or outside validAfter/validBefore.
    PaymentUnfunded => "PAYMENT_UNFUNDED", PAYMENT_REQUIRED, PaymentRequired,
        retry None, phase Some(Verify), "Payment cannot be funded; fund the wallet and check the clock";
    /// A Solana payment pinned to an expired blockhash; nothing charged.
    PaymentBlockhashStale => "PAYMENT_BLOCKHASH_STALE", PAYMENT_REQUIRED, PaymentRequired,
        retry None, phase Some(Verify), "Payment uses an expired blockhash; re-sign and resend";
    /// The authorization nonce was already used.
    PaymentReplay => "PAYMENT_REPLAY", PAYMENT_REQUIRED, PaymentRequired,
        retry None, phase Some(Replay), "This payment authorization was already used; sign a fresh one";
    /// The facilitator is unreachable; retry the same signed payment.
    ///
    /// The specification leaves the status open; walletgate answers 503 with
    /// `Retry-After`, since nothing was consumed and a retry can succeed.
    PaymentVerificationUnavailable => "PAYMENT_VERIFICATION_UNAVAILABLE", SERVICE_UNAVAILABLE, Api,
        retry Some(5), phase Some(Unavailable), "Payment verification is unavailable; retry the same signed payment";
    /// Settlement failed after a successful answer; the answer was withheld and nothing charged.
    ///
    /// Not in the specification's table; it is the code the gateway's clients
    /// know for this case and never retry blindly.
    SettlementFailed => "SETTLEMENT_FAILED", PAYMENT_REQUIRED, PaymentRequired,
        retry None, phase Some(Settle), "Payment settlement failed; nothing was charged";
    /// The `payment-identifier` id is malformed (not 16-128 characters of
    /// `[A-Za-z0-9_-]`), or missing where the server requires one; nothing charged.
    ///
    /// Not in the specification's table (its `INVALID_REQUEST` is about message history).
    PaymentIdentifierInvalid => "PAYMENT_IDENTIFIER_INVALID", BAD_REQUEST, InvalidRequest,
        retry None, phase Some(Identifier), "The payment identifier is missing or malformed; send 16-128 characters of A-Z, a-z, 0-9, _ or -";
    /// The `payment-identifier` id was used for another request or by another payer; nothing charged.
    ///
    /// Not in the specification's table.
    PaymentIdentifierConflict => "PAYMENT_IDENTIFIER_CONFLICT", CONFLICT, InvalidRequest,
        retry None, phase Some(Identifier), "This payment identifier was used for another request or payer; use a fresh one";
    /// Upstream capacity for the model family is exhausted.
    RateLimited => "RATE_LIMITED", TOO_MANY_REQUESTS, RateLimit,
        retry Some(60), phase None, "Upstream capacity for this model is exhausted; retry later or use another provider";
    /// The per-IP free-tier limit was reached.
    FreeTierRateLimited => "FREE_TIER_RATE_LIMITED", TOO_MANY_REQUESTS, RateLimit,
        retry None, phase None, "Free-tier rate limit reached for this IP address";
    /// Free-model streaming capacity is exhausted.
    StreamFailed => "STREAM_FAILED", TOO_MANY_REQUESTS, RateLimit,
        retry Some(30), phase None, "Free-model capacity is exhausted; retry later";
    /// Free-model capacity is exhausted.
    FreeModelFailed => "FREE_MODEL_FAILED", TOO_MANY_REQUESTS, RateLimit,
        retry Some(30), phase None, "Free-model capacity is exhausted; retry later";
    /// The shared rate-limit store (Redis) could not answer; the request was not served.
    ///
    /// Not in the specification's table: a rate-limited request is never
    /// served unlimited, so it fails closed, and may be retried.
    RateLimitUnavailable => "RATE_LIMIT_UNAVAILABLE", SERVICE_UNAVAILABLE, Api,
        retry Some(5), phase None, "Rate limiting is unavailable, so the request was not served; retry later";
    /// The upstream reports the model missing, overloaded or at capacity; not settled.
    ModelUnavailable => "MODEL_UNAVAILABLE", SERVICE_UNAVAILABLE, Api,
        retry None, phase None, "The model is unavailable; retry or use another provider";
    /// An upstream credential or quota problem on the gateway side.
    ProviderConfigError => "PROVIDER_CONFIG_ERROR", SERVICE_UNAVAILABLE, Api,
        retry None, phase None, "The model's provider is misconfigured on the gateway; retry or use another provider";
    /// No upstream answer within the timeout (120 s).
    Timeout => "TIMEOUT", GATEWAY_TIMEOUT, Api,
        retry None, phase None, "The model did not answer in time; nothing was charged";
    /// Unclassified.
    InternalError => "INTERNAL_ERROR", INTERNAL_SERVER_ERROR, Api,
        retry None, phase None, "Internal error";
}

impl ErrorCode {
    fn row(self) -> &'static Row {
        // The table is generated from the enum in the same order.
        &TABLE[self as usize]
    }

    /// The wire spelling, e.g. `"INVALID_JSON"`.
    pub fn as_str(self) -> &'static str {
        self.row().name
    }

    /// The HTTP status the code is answered with.
    pub fn status(self) -> StatusCode {
        self.row().status
    }

    /// The body's `error.type`.
    pub fn error_type(self) -> ErrorType {
        self.row().error_type
    }

    /// The message used when a layer has nothing more specific to say.
    pub fn default_message(self) -> &'static str {
        self.row().message
    }

    /// A fixed `Retry-After` the code implies, in seconds.
    pub fn retry_after_secs(self) -> Option<u64> {
        self.row().retry_after_secs
    }

    /// Whether the code is a payment rejection (answered 402, or 503 when unverifiable).
    pub fn is_payment(self) -> bool {
        self.row().payment_phase.is_some()
    }

    pub(crate) fn payment_phase(self) -> Option<PaymentPhase> {
        self.row().payment_phase
    }

    /// Looks a code up by its wire spelling.
    pub fn from_wire(name: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|row| row.name == name)
            .map(|row| row.code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::from_wire(&name)
            .ok_or_else(|| serde::de::Error::custom(format_args!("unknown error code {name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_follow_enum_order() {
        for (index, row) in TABLE.iter().enumerate() {
            assert_eq!(row.code as usize, index, "{} is out of order", row.name);
        }
        assert_eq!(ErrorCode::ALL.len(), TABLE.len());
    }

    #[test]
    fn wire_names_round_trip() {
        for &code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_wire(code.as_str()), Some(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
        }
        assert_eq!(ErrorCode::from_wire("NOT_A_CODE"), None);
    }
}

//! The wire shapes, one serde type each.
//!
//! These are plain data: build them directly when writing a handler, or let
//! [`GatewayError`](super::GatewayError) and [`DataApiError`](super::DataApiError)
//! fill them in. Field names and nesting follow the specification exactly.

use serde::{Deserialize, Serialize};

use super::{ErrorCode, ErrorType};

/// The chat-style error body (specification, "Error envelope (chat-style endpoints)").
///
/// ```json
/// {"error":{"message":"…","type":"invalid_request_error","code":"INVALID_JSON","param":null},
///  "message":"…","code":"INVALID_JSON"}
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatErrorBody {
    /// The nested error object.
    pub error: ChatErrorDetail,
    /// Mirror of `error.message`, for older clients.
    pub message: String,
    /// Mirror of `error.code`.
    pub code: ErrorCode,
    /// Redacted upstream error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug: Option<String>,
    /// Schema validation failures (`INVALID_REQUEST_BODY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Vec<ValidationDetail>>,
    /// On `RATE_LIMITED`: the model family limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// On `RATE_LIMITED`: seconds to wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// On payment rejections: the paying address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// The `error` object of [`ChatErrorBody`] and [`ResponsesErrorBody`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatErrorDetail {
    /// Human-readable text.
    pub message: String,
    /// The error type.
    #[serde(rename = "type")]
    pub error_type: ErrorType,
    /// The machine-readable code.
    pub code: ErrorCode,
    /// The offending request parameter, or `null`.
    pub param: Option<String>,
}

/// One schema validation failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationDetail {
    /// Path to the offending field, e.g. `["messages", 0, "role"]`.
    pub path: Vec<DetailPathSegment>,
    /// What is wrong with it.
    pub message: String,
}

impl ValidationDetail {
    /// A failure at `path` described by `message`.
    pub fn new(path: Vec<DetailPathSegment>, message: impl Into<String>) -> Self {
        Self {
            path,
            message: message.into(),
        }
    }
}

/// One step of a [`ValidationDetail`] path: an object key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DetailPathSegment {
    /// An array index.
    Index(usize),
    /// An object key.
    Key(String),
}

impl From<&str> for DetailPathSegment {
    fn from(key: &str) -> Self {
        Self::Key(key.to_owned())
    }
}

impl From<String> for DetailPathSegment {
    fn from(key: String) -> Self {
        Self::Key(key)
    }
}

impl From<usize> for DetailPathSegment {
    fn from(index: usize) -> Self {
        Self::Index(index)
    }
}

/// The `/v1/messages` error body: `{"type":"error","error":{"type":…,"message":…}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagesErrorBody {
    /// Always `"error"`.
    #[serde(rename = "type")]
    pub kind: MessagesErrorTag,
    /// The error object.
    pub error: MessagesErrorDetail,
}

/// The literal `"error"` tag of [`MessagesErrorBody`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessagesErrorTag {
    /// `"error"`.
    #[default]
    #[serde(rename = "error")]
    Error,
}

/// The `error` object of [`MessagesErrorBody`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagesErrorDetail {
    /// The error type.
    #[serde(rename = "type")]
    pub error_type: ErrorType,
    /// Human-readable text.
    pub message: String,
}

/// The `/v1/responses` error body: `{"error":{"message","type","param","code"}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResponsesErrorBody {
    /// The error object.
    pub error: ChatErrorDetail,
}

/// The unknown-model body: one string that suggests valid ids and points to `GET /v1/models`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownModelBody {
    /// The text.
    pub error: String,
}

impl UnknownModelBody {
    /// The body for `model`, suggesting `close_matches` (best first).
    pub fn new<I, S>(model: &str, close_matches: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let suggestions: Vec<String> = close_matches
            .into_iter()
            .map(|id| id.as_ref().to_owned())
            .collect();
        let mut error = format!("Unknown model '{model}'.");
        if !suggestions.is_empty() {
            error.push_str(" Did you mean: ");
            error.push_str(&suggestions.join(", "));
            error.push('?');
        }
        error.push_str(
            " Model ids have the form <provider>/<model_name>; \
             GET /v1/models lists the valid ones.",
        );
        Self { error }
    }

    /// The 400 response.
    pub fn into_response(self) -> http::Response<bytes::Bytes> {
        super::json_response(http::StatusCode::BAD_REQUEST, &self)
    }
}

/// The payment rejection body: `{"error","code","message","debug","payer"}`.
///
/// `error` is a short title ("Payment verification failed" for verify-phase
/// codes), `debug` the facilitator's reason, `payer` the paying address when
/// the payload named one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaymentRejectionBody {
    /// The title.
    pub error: String,
    /// The machine-readable code.
    pub code: ErrorCode,
    /// Human-readable text: what to fix.
    pub message: String,
    /// The verifier's reason, redacted.
    pub debug: String,
    /// The paying address, or `null` when the payload was unreadable.
    pub payer: Option<String>,
}

/// The JSON body of a 402 quote (specification, "Payment requirements").
///
/// Generic over the requirement and resource types, which the
/// [`x402`](crate) module defines; `x402Version` and `accepts` must equal the
/// decoded `PAYMENT-REQUIRED` header. The quote's `extensions` are not
/// repeated here: the specification asks the body for `x402Version` and
/// `accepts` only, and x402 v2 clients read (and echo) the declarations from
/// `PAYMENT-REQUIRED` alone, so a copy would only double their bytes on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuoteBody<Req, Res> {
    /// Always 2.
    #[serde(rename = "x402Version")]
    pub x402_version: u8,
    /// The offers; clients sign the first.
    pub accepts: Vec<Req>,
    /// Text stating that payment is required.
    pub error: String,
    /// Text stating that the endpoint requires payment.
    pub message: String,
    /// The first offer's price, fee included, as a decimal.
    pub price: QuotePrice,
    /// The first offer's network and asset.
    #[serde(rename = "paymentInfo")]
    pub payment_info: PaymentInfo,
    /// The resource being paid for.
    pub resource: Res,
}

/// `price` of a [`QuoteBody`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotePrice {
    /// Decimal amount, e.g. `"0.001"`; equals the signed amount.
    pub amount: String,
    /// Currency, e.g. `"USDC"`.
    pub currency: String,
}

/// `paymentInfo` of a [`QuoteBody`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentInfo {
    /// CAIP-2 network id.
    pub network: String,
    /// Token contract (or mint) address.
    pub asset: String,
    /// Always 2.
    #[serde(rename = "x402Version")]
    pub x402_version: u8,
}

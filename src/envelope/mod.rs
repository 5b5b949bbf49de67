//! Every error body walletgate puts on the wire.
//!
//! One table, [`ErrorCode`], owns the gateway's error codes: each code's HTTP
//! status, its `error.type`, its default message and the headers it implies.
//! Everything else in the crate reads that table; nothing restates a status.
//!
//! Each wire shape is one serde type of this module, and one function renders it:
//!
//! | shape | type | used by |
//! |---|---|---|
//! | chat-style | [`ChatErrorBody`] | `/v1/chat/completions` and every other gateway route |
//! | message-style | [`MessagesErrorBody`] | `/v1/messages` |
//! | responses-style | [`ResponsesErrorBody`] | `/v1/responses` |
//! | unknown model | [`UnknownModelBody`] | every gateway route, 400 |
//! | payment rejection | [`PaymentRejectionBody`] | chat-style routes, 402 with a code |
//! | 402 quote | [`QuoteBody`] | [`X402Layer`](crate) quotes |
//! | data API | [`DataApiError`] | every Area A rejection (401, 403, 429, 400, …); typed ones implement [`DataApiRejection`] |
//! | missing extension | [`MissingExtension`] | every extractor whose layer is not in front of its route: 500 in the route's shape |
//!
//! A gateway layer describes a failure once, as a [`GatewayError`], and the
//! route's [`EnvelopeStyle`] picks the shape. The router sets the style once
//! per route ([`SetEnvelopeStyleLayer`]); nothing guesses it from the path. A
//! caller who wants other answers owns them with a [`RenderRejection`]
//! (`with_rejection` on the layers). The data API's gates (`ApiKeyLayer`,
//! `WalletJwtLayer`, `RequireScopesLayer`) do the same with their typed
//! rejections ([`DataApiRejection`], [`RenderDataApiRejection`]):
//!
//! ```
//! use walletgate::envelope::{EnvelopeStyle, ErrorCode, GatewayError};
//!
//! let response = GatewayError::new(ErrorCode::RateLimited)
//!     .with_source("anthropic")
//!     .into_response(EnvelopeStyle::Chat);
//! assert_eq!(response.status(), 429);
//! assert_eq!(response.headers()["retry-after"], "60");
//! assert_eq!(response.headers()["x-ratelimit-source"], "anthropic");
//! ```

mod codes;
mod data_api;
mod gateway;
mod missing;
mod redact;
mod shapes;
mod style;

pub use codes::{ErrorCode, ErrorType};
#[allow(unused_imports)] // no data API gate compiled in
pub(crate) use data_api::data_api_rejection;
#[allow(unused_imports)] // no data API gate compiled in
pub(crate) use data_api::{
    API_KEY_CHALLENGE, INVALID_TOKEN_CHALLENGE, insufficient_scope_challenge,
};
pub use data_api::{DataApiError, DataApiRejection, RenderDataApiRejection};
pub use gateway::{GatewayError, RateLimitInfo, RenderRejection};
pub use missing::MissingExtension;
pub use redact::redact;
pub use shapes::{
    ChatErrorBody, ChatErrorDetail, DetailPathSegment, MessagesErrorBody, PaymentInfo,
    PaymentRejectionBody, QuoteBody, QuotePrice, ResponsesErrorBody, UnknownModelBody,
    ValidationDetail,
};
pub use style::{EnvelopeStyle, SetEnvelopeStyle, SetEnvelopeStyleLayer};

/// Header names the envelopes write, in their canonical lowercase form.
pub mod header {
    use http::HeaderName;

    /// `Retry-After`, whole seconds.
    pub const RETRY_AFTER: HeaderName = http::header::RETRY_AFTER;
    /// `X-RateLimit-Source`: the model family whose upstream capacity ran out.
    pub const X_RATELIMIT_SOURCE: HeaderName = HeaderName::from_static("x-ratelimit-source");
    /// `X-RateLimit-Limit`: requests allowed in the tighter window.
    pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
    /// `X-RateLimit-Remaining`: requests left in the tighter window.
    pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
    /// `X-RateLimit-Reset`: when the tighter window is full again, Unix epoch milliseconds.
    pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
    /// `PAYMENT-REQUIRED`: the base64 x402 quote.
    pub const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");
    /// `X-Payment-Required`: the same value, for clients that read the older name.
    pub const X_PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("x-payment-required");
    /// `PAYMENT-SIGNATURE`: the client's base64 x402 payment.
    pub const PAYMENT_SIGNATURE: HeaderName = HeaderName::from_static("payment-signature");
    /// `PAYMENT-RESPONSE`: the base64 settlement receipt.
    pub const PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("payment-response");
    /// `X-API-KEY`: the data API's application key.
    pub const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
}

/// Serialises `body` as compact JSON into a response with `status`.
///
/// The one place a JSON rejection is assembled, so every shape carries
/// `Content-Type: application/json` and `Cache-Control: no-store`.
pub(crate) fn json_response<T: serde::Serialize>(
    status: http::StatusCode,
    body: &T,
) -> http::Response<bytes::Bytes> {
    // The shapes are plain structs of strings and numbers: serialising cannot fail.
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = http::Response::new(bytes::Bytes::from(bytes));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
}

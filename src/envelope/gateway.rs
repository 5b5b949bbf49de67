//! A gateway failure, described once and rendered in its route's shape.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response};

use super::codes::ErrorCode;
use super::header;
use super::json_response;
use super::redact::redact;
use super::shapes::{
    ChatErrorBody, ChatErrorDetail, MessagesErrorBody, MessagesErrorDetail, MessagesErrorTag,
    PaymentRejectionBody, ResponsesErrorBody, ValidationDetail,
};
use super::style::EnvelopeStyle;

/// The `X-RateLimit-*` figures of a limited (or limit-counted) request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitInfo {
    /// Requests allowed in the tighter window.
    pub limit: u32,
    /// Requests left in it.
    pub remaining: u32,
    /// When it is full again, in Unix epoch milliseconds.
    pub reset_unix_millis: u64,
}

impl RateLimitInfo {
    /// Writes the three `X-RateLimit-*` headers.
    pub fn write_headers(&self, headers: &mut http::HeaderMap) {
        headers.insert(header::X_RATELIMIT_LIMIT, HeaderValue::from(self.limit));
        headers.insert(
            header::X_RATELIMIT_REMAINING,
            HeaderValue::from(self.remaining),
        );
        headers.insert(
            header::X_RATELIMIT_RESET,
            HeaderValue::from(self.reset_unix_millis),
        );
    }
}

/// A gateway failure: a code from the table plus what the layer knows.
///
/// Build with [`GatewayError::new`] and the `with_*` methods, then render with
/// [`into_response`](Self::into_response) in the route's [`EnvelopeStyle`].
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct GatewayError {
    code: ErrorCode,
    message: Cow<'static, str>,
    param: Option<String>,
    debug: Option<String>,
    details: Vec<ValidationDetail>,
    source: Option<String>,
    retry_after_secs: Option<u64>,
    payer: Option<String>,
    rate_limit: Option<RateLimitInfo>,
}

impl GatewayError {
    /// A failure with `code` and its default message.
    pub fn new(code: ErrorCode) -> Self {
        Self {
            code,
            message: Cow::Borrowed(code.default_message()),
            param: None,
            debug: None,
            details: Vec::new(),
            source: None,
            retry_after_secs: code.retry_after_secs(),
            payer: None,
            rate_limit: None,
        }
    }

    /// Replaces the message.
    pub fn with_message(mut self, message: impl Into<Cow<'static, str>>) -> Self {
        self.message = message.into();
        self
    }

    /// Names the offending request parameter (`error.param`).
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// Attaches upstream error text; it is [redacted](super::redact()) here, so raw text never
    /// reaches a body.
    pub fn with_debug(mut self, upstream_text: &str) -> Self {
        self.debug = Some(redact(upstream_text));
        self
    }

    /// Adds schema validation failures (`details`).
    pub fn with_details(mut self, details: impl IntoIterator<Item = ValidationDetail>) -> Self {
        self.details.extend(details);
        self
    }

    /// Names the limited model family (`source`, `X-RateLimit-Source`).
    pub fn with_source(mut self, family: impl Into<String>) -> Self {
        self.source = Some(family.into());
        self
    }

    /// Overrides the code's `Retry-After`, in whole seconds (at least 1).
    pub fn with_retry_after_secs(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs.max(1));
        self
    }

    /// Names the paying address (payment rejections).
    pub fn with_payer(mut self, payer: impl Into<String>) -> Self {
        self.payer = Some(payer.into());
        self
    }

    /// Adds the `X-RateLimit-*` headers.
    pub fn with_rate_limit(mut self, info: RateLimitInfo) -> Self {
        self.rate_limit = Some(info);
        self
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The paying address of a payment rejection, if any.
    pub fn payer(&self) -> Option<&str> {
        self.payer.as_deref()
    }

    /// The `Retry-After` the response will carry, if any.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_secs
    }

    /// Renders the response in `style`: status from the table, JSON body,
    /// `Retry-After` and `X-RateLimit-*` headers; the error itself rides in the
    /// response extensions so outer layers and logs can see why.
    pub fn into_response(self, style: EnvelopeStyle) -> Response<Bytes> {
        let status = self.code.status();
        let mut response = match (style, self.code.payment_phase()) {
            (EnvelopeStyle::Chat, Some(_)) => json_response(status, &self.payment_rejection_body()),
            (EnvelopeStyle::Chat, None) => json_response(status, &self.chat_body()),
            (EnvelopeStyle::Messages, _) => json_response(status, &self.messages_body()),
            (EnvelopeStyle::Responses, _) => json_response(status, &self.responses_body()),
        };
        let headers = response.headers_mut();
        if let Some(secs) = self.retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(family) = self.source.as_deref()
            && let Ok(value) = HeaderValue::from_str(family)
        {
            headers.insert(header::X_RATELIMIT_SOURCE, value);
        }
        if let Some(info) = &self.rate_limit {
            info.write_headers(headers);
        }
        response.extensions_mut().insert(self);
        response
    }

    fn detail(&self) -> ChatErrorDetail {
        ChatErrorDetail {
            message: self.message.clone().into_owned(),
            error_type: self.code.error_type(),
            code: self.code,
            param: self.param.clone(),
        }
    }

    /// The chat-style body.
    pub fn chat_body(&self) -> ChatErrorBody {
        let rate_limited = self.code == ErrorCode::RateLimited;
        ChatErrorBody {
            error: self.detail(),
            message: self.message.clone().into_owned(),
            code: self.code,
            debug: self.debug.clone(),
            details: (!self.details.is_empty()).then(|| self.details.clone()),
            source: self.source.clone(),
            retry_after_seconds: rate_limited.then_some(self.retry_after_secs).flatten(),
            payer: self.payer.clone(),
        }
    }

    /// The `/v1/messages` body.
    pub fn messages_body(&self) -> MessagesErrorBody {
        MessagesErrorBody {
            kind: MessagesErrorTag::Error,
            error: MessagesErrorDetail {
                error_type: self.code.error_type(),
                message: self.message.clone().into_owned(),
            },
        }
    }

    /// The `/v1/responses` body.
    pub fn responses_body(&self) -> ResponsesErrorBody {
        ResponsesErrorBody {
            error: self.detail(),
        }
    }

    /// The payment rejection body; `debug` falls back to the code's name.
    pub fn payment_rejection_body(&self) -> PaymentRejectionBody {
        let title = self
            .code
            .payment_phase()
            .map_or("Payment failed", |phase| phase.title());
        PaymentRejectionBody {
            error: title.to_owned(),
            code: self.code,
            message: self.message.clone().into_owned(),
            debug: self
                .debug
                .clone()
                .unwrap_or_else(|| self.code.as_str().to_ascii_lowercase()),
            payer: self.payer.clone(),
        }
    }
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for GatewayError {}

type RenderFn = dyn Fn(GatewayError, EnvelopeStyle) -> Response<Bytes> + Send + Sync;

/// How a layer turns its failure into a response: by default the route's
/// envelope ([`GatewayError::into_response`]); a caller who wants another
/// answer owns it, as with tower-http's `ValidateRequest`.
///
/// Layers take one with `with_rejection(..)`; it gets the failure (code,
/// message, headers to write) and the route's style.
#[derive(Clone)]
pub struct RenderRejection(Arc<RenderFn>);

impl RenderRejection {
    /// Rejections rendered by `render`.
    pub fn new<F>(render: F) -> Self
    where
        F: Fn(GatewayError, EnvelopeStyle) -> Response<Bytes> + Send + Sync + 'static,
    {
        Self(Arc::new(render))
    }

    /// The response for `error` on a route answering in `style`.
    pub fn render(&self, error: GatewayError, style: EnvelopeStyle) -> Response<Bytes> {
        (self.0)(error, style)
    }
}

impl Default for RenderRejection {
    /// The route's envelope.
    fn default() -> Self {
        Self::new(GatewayError::into_response)
    }
}

impl fmt::Debug for RenderRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenderRejection").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rendering_is_the_routes_envelope_and_a_caller_can_own_it() {
        use crate::envelope::ErrorCode;
        let error = || GatewayError::new(ErrorCode::InvalidJson);
        let default = RenderRejection::default().render(error(), EnvelopeStyle::Messages);
        let expected = error().into_response(EnvelopeStyle::Messages);
        assert_eq!(default.status(), expected.status());
        assert_eq!(default.body(), expected.body());
        let own =
            RenderRejection::new(|error, _style| Response::new(Bytes::from(error.code().as_str())));
        assert_eq!(
            own.render(error(), EnvelopeStyle::Chat).body(),
            "INVALID_JSON"
        );
    }
}

//! The data API's (Area A) error body.
//!
//! The specification leaves Area A's error bodies open; walletgate uses the
//! shape the reference data API documents for its auth endpoints, everywhere:
//!
//! ```json
//! {"error":{"message":"JWT lacks scope read:favorites","status":403,"code":7}}
//! ```
//!
//! `status` repeats the HTTP status; `code` is the gRPC canonical status code
//! of the same condition (16 unauthenticated, 7 permission denied, 8 resource
//! exhausted, 3 invalid argument, …), the integer that shape documents.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use serde::{Deserialize, Serialize};

use super::{header, json_response};

/// An Area A rejection: status, message and the headers the status implies.
#[derive(Clone, PartialEq, Eq)]
#[must_use]
pub struct DataApiError {
    status: StatusCode,
    message: Cow<'static, str>,
    www_authenticate: Option<HeaderValue>,
    retry_after_secs: Option<u64>,
}

/// The serialised body of a [`DataApiError`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataApiErrorBody {
    /// The error object.
    pub error: DataApiErrorDetail,
}

/// The `error` object of [`DataApiErrorBody`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataApiErrorDetail {
    /// Human-readable text; never contains a credential.
    pub message: String,
    /// The HTTP status.
    pub status: u16,
    /// The gRPC canonical code of the condition.
    pub code: u8,
}

impl DataApiError {
    /// A rejection with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            message: message.into(),
            www_authenticate: None,
            retry_after_secs: None,
        }
    }

    /// 400 with `message`.
    pub fn bad_request(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 401 for a missing, unknown or revoked API key.
    pub fn unauthorized(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
            .with_www_authenticate(HeaderValue::from_static("ApiKey header=\"X-API-KEY\""))
    }

    /// 401 for a missing or invalid bearer token, with
    /// `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750).
    pub fn invalid_token(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
            .with_www_authenticate(HeaderValue::from_static("Bearer error=\"invalid_token\""))
    }

    /// 403 for a token that lacks `scopes` (space-separated), with
    /// `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`.
    pub fn insufficient_scope(scopes: &str, message: impl Into<Cow<'static, str>>) -> Self {
        let challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{scopes}\"");
        let value = HeaderValue::from_str(&challenge)
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer error=\"insufficient_scope\""));
        Self::new(StatusCode::FORBIDDEN, message).with_www_authenticate(value)
    }

    /// 403 with `message` (e.g. the path names another wallet).
    pub fn forbidden(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    /// 404 with `message`.
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 409 with `message`.
    pub fn conflict(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 429 with `Retry-After` (whole seconds, at least 1).
    pub fn too_many_requests(retry_after_secs: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Rate limit exceeded for this API key; honour Retry-After",
        )
        .with_retry_after_secs(retry_after_secs)
    }

    /// 500 naming a wiring fault (a layer's value is missing from the request).
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// Sets the `WWW-Authenticate` challenge.
    pub fn with_www_authenticate(mut self, challenge: HeaderValue) -> Self {
        self.www_authenticate = Some(challenge);
        self
    }

    /// Sets `Retry-After`, in whole seconds (at least 1).
    pub fn with_retry_after_secs(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs.max(1));
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The body.
    pub fn body(&self) -> DataApiErrorBody {
        DataApiErrorBody {
            error: DataApiErrorDetail {
                message: self.message.clone().into_owned(),
                status: self.status.as_u16(),
                code: grpc_code(self.status),
            },
        }
    }

    /// Renders the response; the error rides in its extensions.
    pub fn into_response(self) -> Response<Bytes> {
        let mut response = json_response(self.status, &self.body());
        let headers = response.headers_mut();
        if let Some(challenge) = &self.www_authenticate {
            headers.insert(http::header::WWW_AUTHENTICATE, challenge.clone());
        }
        if let Some(secs) = self.retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// The gRPC canonical code for an HTTP status (the usual HTTP mapping).
fn grpc_code(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 => 3,
        401 => 16,
        403 => 7,
        404 => 5,
        409 => 6,
        412 => 9,
        429 => 8,
        501 => 12,
        503 => 14,
        504 => 4,
        _ => 13,
    }
}

impl fmt::Debug for DataApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataApiError")
            .field("status", &self.status)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for DataApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for DataApiError {}

impl axum_core::response::IntoResponse for DataApiError {
    fn into_response(self) -> axum_core::response::Response {
        DataApiError::into_response(self).map(axum_core::body::Body::from)
    }
}

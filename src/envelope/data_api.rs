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
//!
//! Every typed rejection of the data API's layers and extractors
//! (`ApiKeyError`, `JwtError`, `ScopeError`, `WalletMismatch`,
//! `WalletClaimsRejection`, `RequireScopesRejection`) is made one way, as
//! axum-core's `define_rejection!` makes its own: it implements
//! [`DataApiRejection`] (kind, status, message, the headers the status
//! implies), and one macro derives the rest from that: `Display`, `Error`,
//! `From<_> for DataApiError` and axum's `IntoResponse`. The default response
//! is [`DataApiRejection::into_data_api_response`]; a layer's
//! `with_rejection(..)` replaces it through a [`RenderDataApiRejection`].

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
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
        Self::new(StatusCode::UNAUTHORIZED, message).with_www_authenticate(API_KEY_CHALLENGE)
    }

    /// 401 for a missing or invalid bearer token, with
    /// `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750).
    pub fn invalid_token(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message).with_www_authenticate(INVALID_TOKEN_CHALLENGE)
    }

    /// 403 for a token that lacks `scopes` (space-separated), with
    /// `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`.
    pub fn insufficient_scope(scopes: &str, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
            .with_www_authenticate(insufficient_scope_challenge(scopes))
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

    /// The `WWW-Authenticate` challenge, if the status implies one.
    pub fn www_authenticate(&self) -> Option<&HeaderValue> {
        self.www_authenticate.as_ref()
    }

    /// The `Retry-After` the response carries, in whole seconds, if any: a
    /// 503 without one set carries [`Self::UNAVAILABLE_RETRY_AFTER_SECS`]
    /// (a store that is down or failing over: retry soon, never give up).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_secs.or_else(|| {
            (self.status == StatusCode::SERVICE_UNAVAILABLE)
                .then_some(Self::UNAVAILABLE_RETRY_AFTER_SECS)
        })
    }

    /// `Retry-After` of a 503 that set none.
    pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;

    /// Writes the headers the status implies (`WWW-Authenticate`,
    /// `Retry-After`) into `headers`: what a caller's own rendering keeps
    /// when it replaces the body.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        if let Some(challenge) = &self.www_authenticate {
            headers.insert(http::header::WWW_AUTHENTICATE, challenge.clone());
        }
        if let Some(secs) = self.retry_after_secs() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
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
        self.write_headers(response.headers_mut());
        response.extensions_mut().insert(self);
        response
    }
}

/// `WWW-Authenticate` of a missing, doubled, unknown or revoked API key.
pub(crate) const API_KEY_CHALLENGE: HeaderValue =
    HeaderValue::from_static("ApiKey header=\"X-API-KEY\"");

/// `WWW-Authenticate` of a missing or invalid bearer token (RFC 6750).
pub(crate) const INVALID_TOKEN_CHALLENGE: HeaderValue =
    HeaderValue::from_static("Bearer error=\"invalid_token\"");

/// `WWW-Authenticate` of a token lacking `scopes` (space-separated, RFC 6750).
pub(crate) fn insufficient_scope_challenge(scopes: &str) -> HeaderValue {
    let challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{scopes}\"");
    HeaderValue::from_str(&challenge)
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer error=\"insufficient_scope\""))
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

/// A typed rejection of a data API (Area A) layer or extractor.
///
/// An implementation says what the rejection is (its [`kind`](Self::kind),
/// status, message and the headers its status implies); the rest is derived:
/// the [`DataApiError`] it is answered with, the default response (which
/// also carries the rejection itself in its extensions) and a trace event
/// naming it (feature `tracing`, target `walletgate::rejection`, level
/// `TRACE`, as axum's `axum::rejection`).
///
/// A caller who wants other answers owns them with `with_rejection(..)` on
/// the layer ([`RenderDataApiRejection`]); one generic function serves every
/// layer:
///
/// ```
/// use bytes::Bytes;
/// use http::Response;
/// use walletgate::envelope::DataApiRejection;
///
/// fn plain_text<E: DataApiRejection>(rejection: E) -> Response<Bytes> {
///     let error = rejection.to_data_api_error();
///     let mut response = Response::new(Bytes::from(error.message().to_owned()));
///     *response.status_mut() = error.status();
///     error.write_headers(response.headers_mut());
///     response
/// }
/// # let _ = plain_text::<walletgate::api_key::ApiKeyError>;
/// ```
///
/// Messages never contain a credential.
pub trait DataApiRejection: fmt::Debug + Clone + Send + Sync + 'static {
    /// The rejection's kind, snake_case (`"quota_exceeded"`, `"expired"`),
    /// for logs and traces.
    fn kind(&self) -> &'static str;

    /// The HTTP status it is answered with.
    fn status(&self) -> StatusCode;

    /// Human-readable text, never a credential. It is also the `Display`.
    fn message(&self) -> Cow<'static, str>;

    /// The `WWW-Authenticate` challenge its status implies, if any.
    fn www_authenticate(&self) -> Option<HeaderValue> {
        None
    }

    /// The `Retry-After` it carries, in whole seconds, if any.
    fn retry_after_secs(&self) -> Option<u64> {
        None
    }

    /// The Area A error it is answered with: status, message and headers.
    fn to_data_api_error(&self) -> DataApiError {
        let mut error = DataApiError::new(self.status(), self.message());
        error.www_authenticate = self.www_authenticate();
        error.retry_after_secs = self.retry_after_secs();
        error
    }

    /// The default response: the Area A envelope, with the [`DataApiError`]
    /// and the rejection itself in the response extensions; traced.
    fn into_data_api_response(self) -> Response<Bytes> {
        trace_rendered(&self);
        let mut response = self.to_data_api_error().into_response();
        response.extensions_mut().insert(self);
        response
    }
}

/// One trace event per rendered rejection, naming it (never a secret: the
/// kind and status only).
fn trace_rendered<E: DataApiRejection>(_rejection: &E) {
    #[cfg(feature = "tracing")]
    {
        let full = std::any::type_name::<E>();
        let name = full.rsplit("::").next().unwrap_or(full);
        tracing::event!(
            target: "walletgate::rejection",
            tracing::Level::TRACE,
            rejection = name,
            kind = _rejection.kind(),
            status = _rejection.status().as_u16(),
            "rejected",
        );
    }
}

/// Derives, for a [`DataApiRejection`] type, what every data API rejection
/// has: `Display` (its message), `Error`, `From<_> for DataApiError` and
/// axum's `IntoResponse` (the default response).
// Unused when no data API gate is compiled in.
#[allow(unused_macros)]
macro_rules! data_api_rejection {
    ($ty:ty) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&$crate::envelope::DataApiRejection::message(self))
            }
        }

        impl ::std::error::Error for $ty {}

        impl ::std::convert::From<$ty> for $crate::envelope::DataApiError {
            fn from(rejection: $ty) -> Self {
                $crate::envelope::DataApiRejection::to_data_api_error(&rejection)
            }
        }

        impl ::axum_core::response::IntoResponse for $ty {
            fn into_response(self) -> ::axum_core::response::Response {
                $crate::envelope::DataApiRejection::into_data_api_response(self)
                    .map(::axum_core::body::Body::from)
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use data_api_rejection;

type RenderFn<E> = dyn Fn(E) -> Response<Bytes> + Send + Sync;

/// How a data API layer turns its typed rejection `E` into a response: by
/// default the Area A envelope
/// ([`DataApiRejection::into_data_api_response`]); a caller who wants another
/// answer (a JSON-RPC error on an MCP endpoint, say) owns it, as with
/// tower-http's `ValidateRequest`.
///
/// Layers take one with `with_rejection(..)`. Whoever renders, the response
/// carries the typed rejection in its extensions and the rendering is
/// traced. The default holds no closure; a caller's is one `Arc`, cloned
/// with the layer, never per request.
pub struct RenderDataApiRejection<E> {
    render: Option<Arc<RenderFn<E>>>,
    /// Auth-params a layer adds to every `Bearer` challenge, whoever renders
    /// (the wallet JWT layers' RFC 9728 `resource_metadata="…"`).
    bearer_params: Option<Arc<str>>,
}

impl<E: DataApiRejection> RenderDataApiRejection<E> {
    /// Rejections rendered by `render`.
    pub fn new<F>(render: F) -> Self
    where
        F: Fn(E) -> Response<Bytes> + Send + Sync + 'static,
    {
        Self {
            render: Some(Arc::new(render)),
            bearer_params: None,
        }
    }

    /// The response for `rejection`.
    pub fn render(&self, rejection: E) -> Response<Bytes> {
        let mut response = match &self.render {
            None => rejection.into_data_api_response(),
            Some(render) => {
                trace_rendered(&rejection);
                let kept = rejection.clone();
                let mut response = render(rejection);
                response.extensions_mut().insert(kept);
                response
            }
        };
        if let Some(params) = &self.bearer_params {
            add_bearer_params(response.headers_mut(), params);
        }
        response
    }
}

impl<E> RenderDataApiRejection<E> {
    /// The same rendering, with `render` in place of the current one (the
    /// layer's bearer auth-params stay).
    #[cfg_attr(not(feature = "wallet-jwt"), allow(dead_code))]
    pub(crate) fn replace_render(&mut self, render: Self) {
        self.render = render.render;
    }

    /// Adds `params` (`name="value"`, comma-separated) to every `Bearer`
    /// challenge this renders, also a caller's.
    #[cfg_attr(not(feature = "wallet-jwt"), allow(dead_code))]
    pub(crate) fn set_bearer_params(&mut self, params: Option<Arc<str>>) {
        self.bearer_params = params;
    }
}

/// Appends `params` to a `Bearer` challenge in `headers`; other challenges
/// (an API key's) stay as they are.
fn add_bearer_params(headers: &mut HeaderMap, params: &str) {
    let Some(challenge) = headers.get(http::header::WWW_AUTHENTICATE) else {
        return;
    };
    let Ok(text) = challenge.to_str() else {
        return;
    };
    let is_bearer = text
        .get(..6)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer"))
        && (text.len() == 6 || text.as_bytes()[6] == b' ');
    if !is_bearer {
        return;
    }
    let joined = if text.len() == 6 {
        format!("{text} {params}")
    } else {
        format!("{text}, {params}")
    };
    if let Ok(value) = HeaderValue::from_str(&joined) {
        headers.insert(http::header::WWW_AUTHENTICATE, value);
    }
}

impl<E> Default for RenderDataApiRejection<E> {
    /// The Area A envelope.
    fn default() -> Self {
        Self {
            render: None,
            bearer_params: None,
        }
    }
}

impl<E> Clone for RenderDataApiRejection<E> {
    fn clone(&self) -> Self {
        Self {
            render: self.render.clone(),
            bearer_params: self.bearer_params.clone(),
        }
    }
}

impl<E> fmt::Debug for RenderDataApiRejection<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = if self.render.is_some() {
            "caller"
        } else {
            "default"
        };
        f.debug_tuple("RenderDataApiRejection").field(&who).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rejection made the one way, for the tests.
    #[derive(Clone, Debug, PartialEq)]
    struct Probe;

    impl DataApiRejection for Probe {
        fn kind(&self) -> &'static str {
            "probe"
        }
        fn status(&self) -> StatusCode {
            StatusCode::UNAUTHORIZED
        }
        fn message(&self) -> Cow<'static, str> {
            Cow::Borrowed("probe refused")
        }
        fn www_authenticate(&self) -> Option<HeaderValue> {
            Some(HeaderValue::from_static("Bearer error=\"invalid_token\""))
        }
        fn retry_after_secs(&self) -> Option<u64> {
            Some(3)
        }
    }

    data_api_rejection!(Probe);

    #[test]
    fn a_rejection_gets_display_error_and_the_area_a_error_from_its_parts() {
        assert_eq!(Probe.to_string(), "probe refused");
        let _: &dyn std::error::Error = &Probe;
        let error = DataApiError::from(Probe);
        assert_eq!(error.status(), 401);
        assert_eq!(error.message(), "probe refused");
        assert_eq!(error.retry_after_secs(), Some(3));
        assert_eq!(
            error.www_authenticate().unwrap(),
            "Bearer error=\"invalid_token\""
        );
    }

    #[test]
    fn the_default_response_is_the_area_a_envelope_with_the_rejection_inside() {
        let response = RenderDataApiRejection::default().render(Probe);
        let expected = Probe.to_data_api_error().into_response();
        assert_eq!(response.status(), expected.status());
        assert_eq!(response.headers(), expected.headers());
        assert_eq!(response.body(), expected.body());
        assert_eq!(response.extensions().get::<Probe>(), Some(&Probe));
        assert!(response.extensions().get::<DataApiError>().is_some());
    }

    #[test]
    fn a_callers_rendering_owns_the_answer_and_the_rejection_still_rides_along() {
        let render = RenderDataApiRejection::new(|probe: Probe| {
            let error = probe.to_data_api_error();
            let mut response = Response::new(Bytes::from_static(b"own"));
            *response.status_mut() = error.status();
            error.write_headers(response.headers_mut());
            response
        });
        let response = render.clone().render(Probe);
        assert_eq!(response.status(), 401);
        assert_eq!(response.body(), "own");
        assert_eq!(response.headers()["retry-after"], "3");
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer error=\"invalid_token\""
        );
        assert_eq!(response.extensions().get::<Probe>(), Some(&Probe));
        assert_eq!(format!("{render:?}"), "RenderDataApiRejection(\"caller\")");
    }

    #[test]
    fn bearer_params_reach_bearer_challenges_only_whoever_renders() {
        let params: Arc<str> = Arc::from(
            "resource_metadata=\"https://api.test/.well-known/oauth-protected-resource\"",
        );
        let mut render = RenderDataApiRejection::default();
        render.set_bearer_params(Some(params.clone()));
        let response = render.render(Probe);
        assert_eq!(
            response.headers()["www-authenticate"],
            format!("Bearer error=\"invalid_token\", {params}").as_str()
        );
        render.replace_render(RenderDataApiRejection::new(|probe: Probe| {
            let mut response = Response::new(Bytes::new());
            probe
                .to_data_api_error()
                .write_headers(response.headers_mut());
            response
        }));
        let response = render.render(Probe);
        assert!(
            response.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .ends_with(&*params)
        );
        let mut headers = HeaderMap::new();
        headers.insert(http::header::WWW_AUTHENTICATE, API_KEY_CHALLENGE);
        add_bearer_params(&mut headers, &params);
        assert_eq!(headers["www-authenticate"], API_KEY_CHALLENGE);
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
        add_bearer_params(&mut headers, "a=\"b\"");
        assert_eq!(headers["www-authenticate"], "Bearer a=\"b\"");
        headers.insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearerish x"),
        );
        add_bearer_params(&mut headers, "a=\"b\"");
        assert_eq!(headers["www-authenticate"], "Bearerish x");
    }

    #[test]
    fn every_503_carries_retry_after_unless_it_set_its_own() {
        let unavailable =
            DataApiError::new(StatusCode::SERVICE_UNAVAILABLE, "nonce store unavailable");
        let mut headers = HeaderMap::new();
        unavailable.write_headers(&mut headers);
        assert_eq!(headers[header::RETRY_AFTER], "1");
        let own = unavailable.with_retry_after_secs(7);
        assert_eq!(own.retry_after_secs(), Some(7));
        let forbidden = DataApiError::new(StatusCode::FORBIDDEN, "no");
        assert_eq!(forbidden.retry_after_secs(), None);
    }
}

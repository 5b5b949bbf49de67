//! [`JsonBodyLayer`]: the body limit and the one JSON parse of a request.
//!
//! Shaped like tower-http's `limit`: a declared `Content-Length` over the
//! limit is refused before anything is read; a body without one is read
//! through [`http_body_util::Limited`], so a chunked body is cut off at the
//! limit too. The body is read once and parsed once: the value goes into the
//! request extensions as [`ParsedJson`], and the bytes stay the body for any
//! inner service that wants them.
//!
//! Rejections are the library's codes in the route's
//! [`EnvelopeStyle`]: `REQUEST_TOO_LARGE` and `INVALID_JSON` (both 400, as the code table says). A
//! caller who wants another answer owns it with
//! [`with_rejection`](JsonBodyLayer::with_rejection).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use serde_json::Value;
use tower_layer::Layer;
use tower_service::Service;

use super::{JsonBodyBytes, ParsedJson};
use crate::body::{ReadError, ResponseBody};
use crate::envelope::{EnvelopeStyle, ErrorCode, GatewayError, RenderRejection};

/// Limits a request body to `limit_bytes` and parses it as JSON, once.
#[derive(Clone)]
#[must_use]
pub struct JsonBodyLayer {
    limit_bytes: usize,
    reject: RenderRejection,
}

impl JsonBodyLayer {
    /// Bodies up to `limit_bytes` are read; larger ones are `REQUEST_TOO_LARGE`.
    pub fn new(limit_bytes: usize) -> Self {
        Self {
            limit_bytes,
            reject: RenderRejection::default(),
        }
    }

    /// Renders rejections with `reject` instead of the route's envelope: it
    /// gets the failure (code and message) and the route's style.
    pub fn with_rejection<F>(mut self, reject: F) -> Self
    where
        F: Fn(GatewayError, EnvelopeStyle) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.reject = RenderRejection::new(reject);
        self
    }

    /// The limit, in bytes.
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    fn too_large(&self, style: EnvelopeStyle) -> Response<Bytes> {
        self.reject.render(
            GatewayError::new(ErrorCode::RequestTooLarge).with_message(format!(
                "Request body is over the size limit of {} bytes",
                self.limit_bytes
            )),
            style,
        )
    }
}

impl fmt::Debug for JsonBodyLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonBodyLayer")
            .field("limit_bytes", &self.limit_bytes)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for JsonBodyLayer {
    type Service = JsonBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        JsonBody {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`JsonBodyLayer`]: the inner service gets the bytes read,
/// as a body of the same type (`From<Bytes>`), and the value as [`ParsedJson`].
#[derive(Clone, Debug)]
pub struct JsonBody<S> {
    inner: S,
    layer: JsonBodyLayer,
}

impl<S> JsonBody<S> {
    /// Wraps `inner`; same as `JsonBody::layer(limit_bytes).layer(inner)`.
    pub fn new(inner: S, limit_bytes: usize) -> Self {
        Layer::layer(&JsonBodyLayer::new(limit_bytes), inner)
    }

    define_inner_service_accessors!();
}

impl JsonBody<()> {
    /// Makes the layer of this service (tower-http's `Foo::layer`): the same
    /// as [`JsonBodyLayer::new`].
    pub fn layer(limit_bytes: usize) -> JsonBodyLayer {
        JsonBodyLayer::new(limit_bytes)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for JsonBody<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let style = EnvelopeStyle::of_request(&request);
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        let limit = u64::try_from(self.layer.limit_bytes).unwrap_or(u64::MAX);
        if declared.is_some_and(|length| length > limit) {
            return ResponseFuture::rejected(self.layer.too_large(style));
        }
        // Move the service that was polled ready into the future; keep a fresh clone.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::reading(Box::pin(read_then_call(
            inner,
            self.layer.clone(),
            style,
            request,
        )))
    }
}

async fn read_then_call<S, ReqBody, ResBody>(
    mut inner: S,
    layer: JsonBodyLayer,
    style: EnvelopeStyle,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: Body + From<Bytes>,
    ReqBody::Error: std::error::Error + Send + Sync + 'static,
{
    let (mut parts, body) = request.into_parts();
    let bytes = match crate::body::read_within(body, layer.limit_bytes).await {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge) => {
            return Ok(crate::body::rejection(layer.too_large(style)));
        }
        Err(ReadError::Unreadable) => {
            let error = GatewayError::new(ErrorCode::InvalidJson)
                .with_message("Request body could not be read");
            return Ok(crate::body::rejection(layer.reject.render(error, style)));
        }
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value) => {
            parts.extensions.insert(ParsedJson(value));
            parts.extensions.insert(JsonBodyBytes(bytes.clone()));
            let response = inner
                .call(Request::from_parts(parts, ReqBody::from(bytes)))
                .await?;
            Ok(response.map(ResponseBody::inner))
        }
        Err(error) => {
            let error = GatewayError::new(ErrorCode::InvalidJson)
                .with_message(format!("Request body is not valid JSON: {error}"));
            Ok(crate::body::rejection(layer.reject.render(error, style)))
        }
    }
}

type Reading<B, E> = Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

pin_project! {
    /// The response future of [`JsonBody`]: a refusal by `Content-Length`, or
    /// the read, the parse and the inner call.
    pub struct ResponseFuture<B, E> {
        #[pin]
        kind: Kind<B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B, E> {
        Rejected { response: Option<Response<Bytes>> },
        Reading { future: Reading<B, E> },
    }
}

impl<B, E> ResponseFuture<B, E> {
    fn rejected(response: Response<Bytes>) -> Self {
        Self {
            kind: Kind::Rejected {
                response: Some(response),
            },
        }
    }

    fn reading(future: Reading<B, E>) -> Self {
        Self {
            kind: Kind::Reading { future },
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Rejected { response } => {
                let response = response
                    .take()
                    .expect("JsonBody's ResponseFuture polled after completion");
                Poll::Ready(Ok(crate::body::rejection(response)))
            }
            KindProj::Reading { future } => future.as_mut().poll(cx),
        }
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http::StatusCode;
    use http_body_util::{BodyExt, Full};
    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::envelope::SetEnvelopeStyleLayer;

    /// Answers with the parsed value's `model` and the bytes it got.
    async fn echo(request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
        let model = match request.extensions().get::<ParsedJson>() {
            Some(ParsedJson(value)) => value["model"].to_string(),
            None => "none".to_owned(),
        };
        let bytes = request.into_body().collect().await?.to_bytes();
        Ok(Response::new(Full::new(Bytes::from(format!(
            "{model} {}",
            bytes.len()
        )))))
    }

    async fn send(layer: JsonBodyLayer, request: Request<Full<Bytes>>) -> (StatusCode, String) {
        let response = layer
            .layer(service_fn(echo))
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn post(body: &'static str) -> Request<Full<Bytes>> {
        Request::new(Full::new(Bytes::from_static(body.as_bytes())))
    }

    #[tokio::test]
    async fn parses_once_and_hands_value_and_bytes_on() {
        let (status, body) = send(JsonBodyLayer::new(64), post(r#"{"model":"m"}"#)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, r#""m" 13"#);
    }

    #[tokio::test]
    async fn refuses_a_declared_length_over_the_limit_before_reading() {
        let mut request = post(r#"{"model":"m"}"#);
        request
            .headers_mut()
            .insert(CONTENT_LENGTH, http::HeaderValue::from_static("100"));
        let (status, body) = send(JsonBodyLayer::new(64), request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("REQUEST_TOO_LARGE"), "{body}");
        assert!(body.contains("size limit of 64 bytes"), "{body}");
    }

    #[tokio::test]
    async fn cuts_an_undeclared_body_off_at_the_limit() {
        let (status, body) = send(JsonBodyLayer::new(8), post(r#"{"model":"m"}"#)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("REQUEST_TOO_LARGE"), "{body}");
    }

    #[tokio::test]
    async fn invalid_json_in_the_routes_envelope() {
        let service = SetEnvelopeStyleLayer::new(EnvelopeStyle::Messages)
            .layer(JsonBodyLayer::new(64).layer(service_fn(echo)));
        let response = service.oneshot(post("{not json")).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Request body is not valid JSON")
        );
    }

    #[tokio::test]
    async fn the_caller_owns_the_rejection() {
        let layer = JsonBodyLayer::new(64).with_rejection(|error, _style| {
            let mut response = Response::new(Bytes::from(error.code().as_str()));
            *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
            response
        });
        let (status, body) = send(layer, post("[")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body, "INVALID_JSON");
    }
}

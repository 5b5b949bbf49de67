//! `x-request-id` on every request and answer.
//!
//! A caller's id is kept when it is at most 64 of `[A-Za-z0-9._-]` (so it is
//! safe in logs and headers), else one is generated. It is set on the request
//! before any gate (the x402 layer hands it to the settlement hook), returned
//! on the answer, and every log event of the request is inside a `request`
//! span carrying it.
//!
//! A tower layer rather than `axum::middleware::from_fn`: it runs on every
//! request, and `from_fn` boxes a clone of the inner service and its future
//! per request.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use http::{HeaderName, HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

/// The header, its name checked once at compile time (a `&str` name is
/// parsed again at every use).
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Whether a caller's id is kept as it is.
pub(crate) fn acceptable(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(byte))
}

/// A fresh id, 32 hex digits: this process's random 128-bit start plus a
/// counter. Ids only correlate log lines, so they need to be unique, not
/// unpredictable: a random start read once (servers start apart) and a
/// counter give that without a system call per request.
fn generate() -> HeaderValue {
    static START: OnceLock<u128> = OnceLock::new();
    static ISSUED: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(|| {
        let mut bytes = [0u8; 16];
        // Unique enough to correlate lines; a failed read still yields ids.
        let _ = getrandom::fill(&mut bytes);
        u128::from_ne_bytes(bytes)
    });
    let n = ISSUED.fetch_add(1, Ordering::Relaxed);
    let mut digits = [0u8; 32];
    let _ = alloy_primitives::hex::encode_to_slice(
        start.wrapping_add(u128::from(n)).to_be_bytes(),
        &mut digits,
    );
    HeaderValue::from_bytes(&digits).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// Sets the id on every request and its answer (`router.layer(RequestIdLayer)`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RequestIdLayer;

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestId<S>;

    fn layer(&self, inner: S) -> RequestId<S> {
        RequestId { inner }
    }
}

/// The service [`RequestIdLayer`] wraps around `S`.
#[derive(Clone, Debug)]
pub(crate) struct RequestId<S> {
    inner: S,
}

impl<S, B, ResBody> Service<Request<B>> for RequestId<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let id = match request.headers().get(&X_REQUEST_ID) {
            Some(id) if acceptable(id.as_bytes()) => id.clone(),
            _ => generate(),
        };
        request.headers_mut().insert(X_REQUEST_ID, id.clone());
        let span = tracing::info_span!("request", request_id = id.to_str().unwrap_or_default());
        let inner = span.in_scope(|| self.inner.call(request));
        ResponseFuture {
            inner,
            span,
            id: Some(id),
        }
    }
}

pin_project! {
    /// The inner service's answer, polled inside the request's span, with
    /// the id set on it.
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: F,
        span: tracing::Span,
        id: Option<HeaderValue>,
    }
}

impl<F, ResBody, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = Result<Response<ResBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some(id) = this.id.take() {
            response.headers_mut().insert(X_REQUEST_ID, id);
        }
        Poll::Ready(Ok(response))
    }
}

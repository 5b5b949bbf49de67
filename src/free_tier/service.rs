//! [`FreeTierLimit`], the service of [`FreeTierLimitLayer`].

use std::fmt;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::client_ip::{ClientIp, ClientIpError};
use super::future::ResponseFuture;
use super::layer::{FreeTierLimitLayer, IsFreeRequest};
use super::limiter::{FreeTierStore, InMemoryLimiter};
use super::window::Verdict;
use crate::body::ResponseBody;
use crate::envelope::{EnvelopeStyle, ErrorCode, GatewayError};
use crate::store::{BoxFuture, StoreError};

/// The service of [`FreeTierLimitLayer`].
pub struct FreeTierLimit<S, P, L = InMemoryLimiter> {
    inner: S,
    layer: FreeTierLimitLayer<P, L>,
}

impl<P> FreeTierLimit<(), P> {
    /// Makes the layer of this service (tower-http's `Foo::layer`): the same
    /// as [`FreeTierLimitLayer::new`].
    pub fn layer(predicate: P) -> FreeTierLimitLayer<P> {
        FreeTierLimitLayer::new(predicate)
    }
}

impl<S, P> FreeTierLimit<S, P> {
    /// Wraps `inner`, counting the requests `predicate` calls free with the
    /// default quotas in memory: the same as
    /// `FreeTierLimitLayer::new(predicate).layer(inner)`, which a service with
    /// other quotas, a store or a rejection is built from.
    pub fn new(inner: S, predicate: P) -> Self {
        Self::from_layer(inner, FreeTierLimitLayer::new(predicate))
    }
}

impl<S, P, L> FreeTierLimit<S, P, L> {
    /// Wraps `inner` with `layer`'s configuration (what `Layer::layer` does).
    pub(super) fn from_layer(inner: S, layer: FreeTierLimitLayer<P, L>) -> Self {
        Self { inner, layer }
    }

    define_inner_service_accessors!();
}

impl<S: Clone, P: Clone, L> Clone for FreeTierLimit<S, P, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, P, L: fmt::Debug> fmt::Debug for FreeTierLimit<S, P, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreeTierLimit")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, P, L, ReqBody, ResBody> Service<Request<ReqBody>> for FreeTierLimit<S, P, L>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    P: IsFreeRequest<ReqBody>,
    L: FreeTierStore,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, BoxFuture<'static, Result<Verdict, StoreError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        if !self.layer.predicate.is_free(&request) {
            return ResponseFuture::pass_through(self.inner.call(request));
        }
        let style = EnvelopeStyle::of_request(&request);
        let client = match self.layer.resolver.resolve(&request) {
            Ok(client) => client,
            Err(fault) => {
                // Never a shared bucket. A forwarded hop that is no address
                // is the request's fault (a proxy passes on what it got), a
                // missing peer address the server's wiring.
                let code = match fault {
                    ClientIpError::MalformedForwardingHeader { .. } => {
                        ErrorCode::InvalidForwardedHeader
                    }
                    _ => ErrorCode::InternalError,
                };
                let error = GatewayError::new(code).with_message(format!(
                    "free-tier limit cannot identify the client: {fault}"
                ));
                let response = self.layer.render.render(error, style);
                return ResponseFuture::rejected(response, fault);
            }
        };
        request.extensions_mut().insert(ClientIp(client));
        let check = self.layer.store.check(self.layer.prefixes.key(client));
        // Call the instance that was polled ready; leave a fresh clone behind.
        let ready = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, ready);
        ResponseFuture::checking(check, ready, request, (style, self.layer.render.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::Full;
    use std::sync::Arc;

    use tower::{Layer, ServiceExt, service_fn};

    use super::*;

    type Body = Full<Bytes>;

    fn request(path: &str) -> Request<Body> {
        let mut request = Request::post(path).body(Body::default()).unwrap();
        request
            .extensions_mut()
            .insert(SocketAddr::from(([198, 51, 100, 7], 4000)));
        request
    }

    #[tokio::test]
    async fn layer_constructor_limits_free_requests_and_passes_the_rest_untouched() {
        let is_free = |request: &Request<Body>| request.uri().path() == "/free";
        let layer = FreeTierLimit::layer(is_free);
        let service = layer.layer(service_fn(|_request: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::default()))
        }));
        let free = service.clone().oneshot(request("/free")).await.unwrap();
        assert_eq!(free.headers()["x-ratelimit-limit"], "30");
        assert_eq!(free.headers()["x-ratelimit-remaining"], "29");
        let paid = service.oneshot(request("/paid")).await.unwrap();
        assert!(paid.headers().get("x-ratelimit-limit").is_none());
        assert_eq!(layer.store().len(), 1);
    }

    /// A trusted proxy passing on an X-Forwarded-For hop that is no address:
    /// the request's fault, answered 400 in the route's envelope, never 500
    /// and never a shared bucket.
    #[tokio::test]
    async fn a_malformed_forwarded_hop_is_a_400_with_its_own_code() {
        use super::super::{ClientIpResolver, TrustedProxies};
        use http_body_util::BodyExt;
        let is_free = |_: &Request<Body>| true;
        let called = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = Arc::clone(&called);
        let proxies = TrustedProxies::from_cidrs(["10.0.0.0/8"]).unwrap();
        let layer = FreeTierLimitLayer::new(is_free)
            .with_client_ip(ClientIpResolver::new().with_trusted_proxies(proxies));
        let service = layer.layer(service_fn(move |_request: Request<Body>| {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Body::default())) }
        }));
        let mut forwarded = Request::post("/free")
            .header("x-forwarded-for", "198.51.100.7, not-an-ip")
            .body(Body::default())
            .unwrap();
        forwarded
            .extensions_mut()
            .insert(SocketAddr::from(([10, 0, 0, 2], 443)));
        forwarded.extensions_mut().insert(EnvelopeStyle::Chat);
        let refused = service.oneshot(forwarded).await.unwrap();
        assert_eq!(refused.status(), 400);
        assert!(matches!(
            refused.extensions().get::<ClientIpError>(),
            Some(ClientIpError::MalformedForwardingHeader { .. })
        ));
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "INVALID_FORWARDED_HEADER");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(!called.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(layer.store().len(), 0);
    }

    /// A store that cannot answer (Redis down).
    struct Down;

    impl FreeTierStore for Down {
        fn check(
            &self,
            _key: super::super::ClientKey,
        ) -> BoxFuture<'static, Result<Verdict, StoreError>> {
            Box::pin(std::future::ready(Err(StoreError::new(
                "limiter store down",
            ))))
        }
    }

    #[tokio::test]
    async fn a_store_that_cannot_answer_fails_closed_with_a_503() {
        use http_body_util::BodyExt;
        let is_free = |request: &Request<Body>| request.uri().path() == "/free";
        let called = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = Arc::clone(&called);
        let service = FreeTierLimitLayer::new(is_free)
            .with_store(Down)
            .layer(service_fn(move |_request: Request<Body>| {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                async { Ok::<_, Infallible>(Response::new(Body::default())) }
            }));
        let mut free = request("/free");
        free.extensions_mut().insert(EnvelopeStyle::Messages);
        let refused = service.clone().oneshot(free).await.unwrap();
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.headers()["retry-after"], "5");
        let (refused, body) = refused.into_parts();
        let refused = http::Response::from_parts(refused, ());
        let body = body.collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        // The route's envelope (Anthropic messages here: type and message).
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "api_error");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("Rate limiting is unavailable"),
            "{message}"
        );
        assert!(matches!(
            refused
                .extensions()
                .get::<crate::envelope::GatewayError>()
                .map(|e| e.code()),
            Some(ErrorCode::RateLimitUnavailable)
        ));
        assert!(!called.load(std::sync::atomic::Ordering::SeqCst));
        // Paid requests never ask the store.
        let paid = service.oneshot(request("/paid")).await.unwrap();
        assert_eq!(paid.status(), 200);
    }
}

//! The `reqwest-middleware` adapter (feature `reqwest`): the same payment
//! rules as [`X402PaymentLayer`], for a `reqwest_middleware::ClientWithMiddleware`.
//!
//! ```no_run
//! use alloy_signer_local::PrivateKeySigner;
//! use walletgate::client::pay::{X402PaymentLayer, reqwest::X402Middleware};
//! use walletgate::tls::ClientTls;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let key: PrivateKeySigner = std::env::var("WALLETGATE_PRIVATE_KEY")?.parse()?;
//! let http = walletgate::client::pay::reqwest::reqwest_client(&ClientTls::webpki_roots())?;
//! let client = reqwest_middleware::ClientBuilder::new(http)
//!     .with(X402Middleware::new(X402PaymentLayer::new(key)))
//!     .build();
//! let response = client
//!     .post("http://127.0.0.1:8080/v1/chat/completions")
//!     .header("content-type", "application/json")
//!     .body(r#"{"model":"openai/gpt-5-mini","messages":[{"role":"user","content":"hi"}]}"#)
//!     .send()
//!     .await?;
//! if let Some(receipt) = X402Middleware::receipt(&response) {
//!     eprintln!("{}", receipt.summary());
//! }
//! println!("{}", response.text().await?);
//! # Ok(())
//! # }
//! ```
//!
//! Payment and API failures come back as `reqwest_middleware::Error::Middleware`
//! wrapping a [`ClientError`] (`error.downcast_ref::<ClientError>()`); a
//! network failure stays `reqwest_middleware::Error::Reqwest`. A request with
//! a streaming body cannot be resent, so it is not paid for.
//!
//! TLS: the feature builds reqwest with rustls and no crypto provider of its
//! own (its default, aws-lc-rs, would need cmake), so a plain
//! `reqwest::Client::new()` panics; build the client with [`reqwest_client`]
//! (walletgate's rustls setup: the `ring` provider, [`ClientTls`]'s roots),
//! or install a process-wide provider first.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Extensions;
use http_body_util::Full;
use reqwest_middleware::{Middleware, Next};
use tower_service::Service;

use super::error::{BoxError, ClientError, PaymentError, PaymentErrorKind};
use super::layer::{Shared, X402PaymentLayer};
use super::receipt::Receipt;
use super::service::pay;
use crate::tls::ClientTls;

/// A reqwest client whose HTTPS is walletgate's rustls setup (`ring`, `tls`'s roots).
pub fn reqwest_client(tls: &ClientTls) -> Result<reqwest::Client, BoxError> {
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured(tls.client_config()?)
        .build()?)
}

/// Pays x402 quotes for a `reqwest_middleware` client.
#[derive(Clone, Debug)]
pub struct X402Middleware {
    layer: X402PaymentLayer,
}

impl X402Middleware {
    /// The middleware paying as `layer` is configured (signer, policy, retries, failover).
    pub fn new(layer: X402PaymentLayer) -> Self {
        Self { layer }
    }

    /// The receipt of a paid response.
    pub fn receipt(response: &reqwest::Response) -> Option<&Receipt> {
        response.extensions().get::<Receipt>()
    }

    async fn run(
        shared: Arc<Shared>,
        request: reqwest::Request,
        extensions: Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let Some(body) = request
            .body()
            .map_or(Some(&[][..]), reqwest::Body::as_bytes)
            .map(Bytes::copy_from_slice)
        else {
            return Err(reqwest_middleware::Error::middleware(ClientError::Payment(
                PaymentError {
                    kind: PaymentErrorKind::StreamingBody,
                    status: None,
                    attempts: Default::default(),
                },
            )));
        };
        let mut http_request = http::Request::builder()
            .method(request.method().clone())
            .uri(request.url().as_str())
            .version(request.version())
            .body(Full::new(body))
            .map_err(|error| reqwest_middleware::Error::Middleware(error.into()))?;
        *http_request.headers_mut() = request.headers().clone();
        let service = NextService { next, extensions };
        match pay(service, shared, http_request).await {
            Ok(response) => {
                let (head, body) = response.into_parts();
                let body = reqwest::Body::wrap(body);
                Ok(reqwest::Response::from(http::Response::from_parts(
                    head, body,
                )))
            }
            Err(ClientError::Transport(error)) => match error.downcast::<reqwest::Error>() {
                Ok(error) => Err(reqwest_middleware::Error::Reqwest(*error)),
                Err(error) => Err(reqwest_middleware::Error::middleware(
                    ClientError::Transport(error),
                )),
            },
            Err(error) => Err(reqwest_middleware::Error::middleware(error)),
        }
    }
}

impl Middleware for X402Middleware {
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        request: reqwest::Request,
        extensions: &'life1 mut Extensions,
        next: Next<'life2>,
    ) -> Pin<
        Box<
            dyn Future<Output = reqwest_middleware::Result<reqwest::Response>>
                + Send
                + 'async_trait,
        >,
    >
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        let shared = self.layer.shared();
        let extensions = extensions.clone();
        Box::pin(Self::run(shared, request, extensions, next))
    }
}

/// The rest of the middleware chain as a tower service.
#[derive(Clone)]
struct NextService<'a> {
    next: Next<'a>,
    extensions: Extensions,
}

impl<'a> Service<http::Request<Full<Bytes>>> for NextService<'a> {
    type Response = http::Response<reqwest::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send + 'a>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Full<Bytes>>) -> Self::Future {
        let next = self.next.clone();
        let mut extensions = self.extensions.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = http_body_util::BodyExt::collect(body)
                .await
                .map(http_body_util::Collected::to_bytes)
                .unwrap_or_default();
            let request = reqwest::Request::try_from(http::Request::from_parts(parts, bytes))?;
            match next.run(request, &mut extensions).await {
                Ok(response) => Ok(http::Response::from(response)),
                Err(reqwest_middleware::Error::Reqwest(error)) => Err(Box::new(error) as BoxError),
                Err(reqwest_middleware::Error::Middleware(error)) => Err(error.into()),
            }
        })
    }
}

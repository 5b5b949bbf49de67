//! How the wallet client reaches the server: any tower `Service` that takes
//! `Request<Full<Bytes>>` (an axum `Router` in tests, a counting wrapper, …)
//! or, by default, hyper-util's pooled client.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use tower_service::Service;

use super::WalletError;

/// The error a transport reports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Largest response body the client reads (API pages are far smaller).
pub const MAX_RESPONSE_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A buffered request/response round trip.
///
/// Implemented for every cloneable tower `Service<Request<Full<Bytes>>>`
/// whose response body yields `Bytes`; implement it directly for anything else.
pub trait Transport: Clone + Send + Sync + 'static {
    /// Sends `request` and reads the whole response body.
    fn round_trip(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, BoxError>> + Send + 'static>>;
}

impl<S, B> Transport for S
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    fn round_trip(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, BoxError>> + Send + 'static>> {
        let mut service = self.clone();
        Box::pin(async move {
            std::future::poll_fn(|cx| service.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            let response = service.call(request).await.map_err(Into::into)?;
            let (parts, body) = response.into_parts();
            let bytes = Limited::new(body, MAX_RESPONSE_BODY_BYTES)
                .collect()
                .await?
                .to_bytes();
            Ok(Response::from_parts(parts, bytes))
        })
    }
}

/// The connector of the default transport: HTTPS and HTTP with feature
/// `rustls`, plain HTTP without.
#[cfg(feature = "rustls")]
pub type DefaultConnector = crate::tls::HttpsConnector;
/// The connector of the default transport: HTTPS and HTTP with feature
/// `rustls`, plain HTTP without.
#[cfg(not(feature = "rustls"))]
pub type DefaultConnector = hyper_util::client::legacy::connect::HttpConnector;

/// The default transport: hyper-util's pooled HTTP/1 client.
pub type DefaultTransport = hyper_util::client::legacy::Client<DefaultConnector, Full<Bytes>>;

/// A [`DefaultTransport`] (with Mozilla's roots when HTTPS is built in).
pub fn default_transport() -> Result<DefaultTransport, WalletError> {
    let builder = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
    #[cfg(feature = "rustls")]
    {
        let connector = crate::tls::ClientTls::webpki_roots()
            .https_connector()
            .map_err(|error| WalletError::Config(format!("TLS: {error}")))?;
        Ok(builder.build(connector))
    }
    #[cfg(not(feature = "rustls"))]
    {
        Ok(builder.build_http())
    }
}

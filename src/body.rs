//! The response body every walletgate layer returns.
//!
//! A layer either passes the inner service's body through or answers with its
//! own JSON rejection. [`ResponseBody`] holds one or the other, in the way
//! tower-http's `limit` middleware does, so layers stay generic over the inner
//! body type and never box it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

pin_project! {
    /// A response body: the inner service's, or a rejection written by a layer.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Rejection { #[pin] body: Full<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// Wraps the inner service's body.
    pub fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// A complete body written by a layer.
    pub fn rejection(bytes: impl Into<Bytes>) -> Self {
        Self {
            kind: Kind::Rejection {
                body: Full::new(bytes.into()),
            },
        }
    }

    /// Whether this body was written by a layer rather than the inner service.
    pub fn is_rejection(&self) -> bool {
        matches!(self.kind, Kind::Rejection { .. })
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Rejection { body } => body.poll_frame(cx).map_err(|never| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Rejection { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Rejection { body } => body.size_hint(),
        }
    }
}

/// Turns a rendered rejection (an envelope's response) into a layer's response.
pub fn rejection<B>(response: http::Response<Bytes>) -> http::Response<ResponseBody<B>> {
    response.map(ResponseBody::rejection)
}

/// Why a request body was not read whole.
// Only the layers that read request bodies (the gateway's JSON body, x402's
// MCP payment flow) use it: a data API build has neither.
#[cfg(any(feature = "gateway", feature = "x402"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// Over the limit: nothing past it was read.
    TooLarge,
    /// The body broke off.
    Unreadable,
}

/// A request body, read whole when it is at most `limit` bytes.
#[cfg(any(feature = "gateway", feature = "x402"))]
pub(crate) async fn read_within<B>(body: B, limit: usize) -> Result<Bytes, ReadError>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use http_body_util::{BodyExt, LengthLimitError, Limited};
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(ReadError::TooLarge),
        Err(_) => Err(ReadError::Unreadable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn rejection_body_yields_its_bytes() {
        let body: ResponseBody<Full<Bytes>> = ResponseBody::rejection("{}");
        assert!(body.is_rejection());
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{}");
    }

    #[tokio::test]
    async fn rejection_keeps_status_and_headers() {
        let rendered = http::Response::builder()
            .status(401)
            .header("x-test", "1")
            .body(Bytes::from_static(b"{}"))
            .unwrap();
        let response = rejection::<Full<Bytes>>(rendered);
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["x-test"], "1");
        assert!(response.body().is_rejection());
    }

    #[tokio::test]
    async fn inner_body_passes_through() {
        let body = ResponseBody::inner(Full::new(Bytes::from_static(b"hello")));
        assert!(!body.is_rejection());
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello");
    }
}

//! [`ResponseFuture`] of the [`X402Mcp`](super::X402Mcp) service.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use crate::body::ResponseBody;
use crate::store::BoxFuture;

pin_project! {
    /// The response future of [`X402Mcp`](super::X402Mcp): the inner future
    /// of a request it does not read (not a POST), or the boxed read, price
    /// and payment flow.
    ///
    /// # Panics
    ///
    /// Polling it again after it completed panics, as tower-http's futures do.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Passthrough { #[pin] future: F },
        Read { future: BoxFuture<'static, Result<Response<ResponseBody<B>>, E>> },
        Done,
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(super) fn passthrough(future: F) -> Self {
        Self {
            kind: Kind::Passthrough { future },
        }
    }

    pub(super) fn read(future: BoxFuture<'static, Result<Response<ResponseBody<B>>, E>>) -> Self {
        Self {
            kind: Kind::Read { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        let output = match kind.as_mut().project() {
            KindProj::Passthrough { future } => {
                std::task::ready!(future.poll(cx)).map(|response| response.map(ResponseBody::inner))
            }
            KindProj::Read { future } => std::task::ready!(future.as_mut().poll(cx)),
            KindProj::Done => panic!("x402 MCP ResponseFuture polled after completion"),
        };
        kind.set(Kind::Done);
        Poll::Ready(output)
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

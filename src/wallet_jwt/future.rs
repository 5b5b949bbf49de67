//! The response future of the synchronous wallet gates.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

use crate::body::{ResponseBody, rejection};

const POLLED_AFTER_COMPLETION: &str = "wallet gate ResponseFuture polled after completion";

pin_project! {
    /// Response future of [`WalletJwt`](super::WalletJwt) and
    /// [`RequireScopes`](super::RequireScopes): a rejection decided before
    /// the inner service was called, or the inner service's future.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Rejected { response: Option<Response<Bytes>> },
        Inner { #[pin] future: F },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn rejected(response: Response<Bytes>) -> Self {
        Self {
            kind: Kind::Rejected {
                response: Some(response),
            },
        }
    }

    pub(super) fn inner(future: F) -> Self {
        Self {
            kind: Kind::Inner { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Rejected { response } => {
                let response = response.take().expect(POLLED_AFTER_COMPLETION);
                Poll::Ready(Ok(rejection(response)))
            }
            KindProj::Inner { future } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(response.map(ResponseBody::inner)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::Ready;
    use std::task::Waker;

    use super::*;

    #[test]
    #[should_panic(expected = "wallet gate ResponseFuture polled after completion")]
    fn polling_a_finished_future_panics() {
        let mut future = Box::pin(
            ResponseFuture::<Ready<Result<Response<()>, Infallible>>>::rejected(Response::new(
                Bytes::new(),
            )),
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_ready());
        let _ = future.as_mut().poll(&mut cx);
    }
}

//! [`ResponseFuture`] of the [`X402`](super::X402) service.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use super::stream::X402Body;
use crate::body::ResponseBody;
use crate::store::BoxFuture;

pin_project! {
    /// The response future of [`X402`](super::X402): a free request's inner
    /// future, a ready rejection or quote, or the boxed payment flow.
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
        Ready { response: Option<Response<X402Body<B>>> },
        Paid { future: BoxFuture<'static, Result<Response<X402Body<B>>, E>> },
        Done,
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn passthrough(future: F) -> Self {
        Self {
            kind: Kind::Passthrough { future },
        }
    }

    pub(crate) fn ready(response: Response<X402Body<B>>) -> Self {
        Self {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }

    pub(crate) fn paid(future: BoxFuture<'static, Result<Response<X402Body<B>>, E>>) -> Self {
        Self {
            kind: Kind::Paid { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<X402Body<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        let output = match kind.as_mut().project() {
            KindProj::Passthrough { future } => std::task::ready!(future.poll(cx))
                .map(|response| response.map(|body| X402Body::plain(ResponseBody::inner(body)))),
            KindProj::Ready { response } => Ok(response
                .take()
                .expect("x402 ResponseFuture polled after completion")),
            KindProj::Paid { future } => std::task::ready!(future.as_mut().poll(cx)),
            KindProj::Done => panic!("x402 ResponseFuture polled after completion"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    type Answer = Result<Response<()>, Infallible>;

    fn poll_twice(
        mut future: Pin<&mut ResponseFuture<std::future::Ready<Answer>, (), Infallible>>,
    ) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_ready());
        let _ = future.as_mut().poll(&mut cx);
    }

    #[test]
    #[should_panic(expected = "polled after completion")]
    fn a_passthrough_polled_after_completion_panics() {
        let future = ResponseFuture::passthrough(std::future::ready(Ok(Response::new(()))));
        poll_twice(std::pin::pin!(future));
    }

    #[test]
    #[should_panic(expected = "polled after completion")]
    fn a_ready_answer_polled_after_completion_panics() {
        let response = Response::new(X402Body::plain(ResponseBody::inner(())));
        let future = ResponseFuture::<std::future::Ready<Answer>, (), Infallible>::ready(response);
        poll_twice(std::pin::pin!(future));
    }

    #[test]
    #[should_panic(expected = "polled after completion")]
    fn a_paid_flow_polled_after_completion_panics() {
        let future =
            ResponseFuture::<std::future::Ready<Answer>, (), Infallible>::paid(Box::pin(async {
                Ok(Response::new(X402Body::plain(ResponseBody::inner(()))))
            }));
        poll_twice(std::pin::pin!(future));
    }
}

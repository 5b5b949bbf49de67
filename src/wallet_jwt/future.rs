//! The response future of the synchronous wallet gates.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use pin_project_lite::pin_project;

use crate::body::{ResponseBody, rejection};
use crate::envelope::DataApiError;

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
                let response = response.take().unwrap_or_else(|| {
                    DataApiError::internal("wallet gate response future polled after completion")
                        .into_response()
                });
                Poll::Ready(Ok(rejection(response)))
            }
            KindProj::Inner { future } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(response.map(ResponseBody::inner)))
            }
        }
    }
}

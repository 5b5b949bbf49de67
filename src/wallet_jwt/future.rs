//! The response futures of the wallet gates.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::{JwtError, WalletClaims};
use crate::body::{ResponseBody, rejection};
use crate::envelope::RenderDataApiRejection;

const POLLED_AFTER_COMPLETION: &str = "wallet gate future polled after completion";

pin_project! {
    /// Response future of [`RequireScopes`](super::RequireScopes): a
    /// rejection decided before the inner service was called, or the inner
    /// service's future.
    pub struct RequireScopesFuture<F> {
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

impl<F> RequireScopesFuture<F> {
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

impl<F, B, E> Future for RequireScopesFuture<F>
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

/// The verifier's answer for one bearer token, computed asynchronously
/// (revocation list, key refresh).
pub(super) type Verdict = Pin<Box<dyn Future<Output = Result<WalletClaims, JwtError>> + Send>>;

pin_project! {
    /// Response future of [`WalletJwt`](super::WalletJwt): the token's
    /// verification, then the inner service's future with the claims in the
    /// request, or the 401 rejection.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: AuthState<S, B>,
    }
}

pin_project! {
    #[project = AuthStateProj]
    enum AuthState<S, B>
    where
        S: Service<Request<B>>,
    {
        Verifying {
            verdict: Verdict,
            pending: Option<(Request<B>, S)>,
            reject: RenderDataApiRejection<JwtError>,
        },
        Inner { #[pin] future: S::Future },
        Rejected { response: Option<Response<Bytes>> },
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    pub(super) fn verifying(
        verdict: Verdict,
        request: Request<B>,
        inner: S,
        reject: RenderDataApiRejection<JwtError>,
    ) -> Self {
        Self {
            state: AuthState::Verifying {
                verdict,
                pending: Some((request, inner)),
                reject,
            },
        }
    }

    pub(super) fn inner(future: S::Future) -> Self {
        Self {
            state: AuthState::Inner { future },
        }
    }

    pub(super) fn rejected(response: Response<Bytes>) -> Self {
        Self {
            state: AuthState::Rejected {
                response: Some(response),
            },
        }
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project().state.project() {
                AuthStateProj::Verifying {
                    verdict,
                    pending,
                    reject,
                } => {
                    let verdict = ready!(verdict.as_mut().poll(cx));
                    let (mut request, mut inner) = pending.take().expect(POLLED_AFTER_COMPLETION);
                    match verdict {
                        Ok(claims) => {
                            trace_decision!(
                                DEBUG,
                                "wallet_jwt",
                                wallet = %claims.wallet(),
                                scopes = %claims.scopes(),
                                outcome = "authenticated",
                            );
                            crate::metrics::count(
                                crate::metrics::WALLET_JWT_AUTHENTICATED_TOTAL,
                                [],
                            );
                            request.extensions_mut().insert(claims);
                            let future = inner.call(request);
                            self.as_mut()
                                .project()
                                .state
                                .set(AuthState::Inner { future });
                        }
                        Err(error) => {
                            trace_decision!(
                                INFO,
                                "wallet_jwt",
                                outcome = "invalid_token",
                                reason = ?error,
                            );
                            error.count_refusal();
                            return Poll::Ready(Ok(rejection(reject.render(error))));
                        }
                    }
                }
                AuthStateProj::Inner { future } => {
                    let response = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
                AuthStateProj::Rejected { response } => {
                    let response = response.take().expect(POLLED_AFTER_COMPLETION);
                    return Poll::Ready(Ok(rejection(response)));
                }
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
    #[should_panic(expected = "wallet gate future polled after completion")]
    fn polling_a_finished_future_panics() {
        let mut future = Box::pin(
            RequireScopesFuture::<Ready<Result<Response<()>, Infallible>>>::rejected(
                Response::new(Bytes::new()),
            ),
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_ready());
        let _ = future.as_mut().poll(&mut cx);
    }
}

//! The response future of [`ApiKey`](super::ApiKey): the key lookup, then
//! the inner service.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::ApiKeyId;
use super::gate::{Config, Found, Lookup, QuotaCheck, admit};
use super::quota::{InMemoryQuotas, KeyQuota, QuotaStore};
use super::store::KeyStore;
use crate::body::{ResponseBody, rejection};

const POLLED_AFTER_COMPLETION: &str = "ApiKey ResponseFuture polled after completion";

pin_project! {
    /// Response future of [`ApiKey`](super::ApiKey).
    pub struct ResponseFuture<S, K, ReqBody, Q = InMemoryQuotas>
    where
        S: Service<Request<ReqBody>>,
        K: KeyStore,
        Q: QuotaStore,
    {
        #[pin]
        state: State<Lookup, QuotaCheck, S::Future>,
        inner: Option<S>,
        request: Option<Request<ReqBody>>,
        config: Option<Arc<Config<K, Q>>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<L, C, F> {
        Rejected { response: Option<Response<Bytes>> },
        Lookup { #[pin] lookup: L },
        // The key was found; its quota is being spent.
        Quota { #[pin] check: C, id: Option<ApiKeyId>, quota: KeyQuota },
        Inner { #[pin] future: F },
    }
}

impl<S, K, ReqBody, Q> ResponseFuture<S, K, ReqBody, Q>
where
    S: Service<Request<ReqBody>>,
    K: KeyStore,
    Q: QuotaStore,
{
    pub(super) fn rejected(response: Response<Bytes>) -> Self {
        Self {
            state: State::Rejected {
                response: Some(response),
            },
            inner: None,
            request: None,
            config: None,
        }
    }

    pub(super) fn lookup(
        lookup: Lookup,
        inner: S,
        request: Request<ReqBody>,
        config: Arc<Config<K, Q>>,
    ) -> Self {
        Self {
            state: State::Lookup { lookup },
            inner: Some(inner),
            request: Some(request),
            config: Some(config),
        }
    }
}

impl<S, K, ReqBody, ResBody, Q> Future for ResponseFuture<S, K, ReqBody, Q>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    K: KeyStore,
    Q: QuotaStore,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let admitted = match this.state.as_mut().project() {
                StateProj::Rejected { response } => {
                    let response = response.take().expect(POLLED_AFTER_COMPLETION);
                    return Poll::Ready(Ok(rejection(response)));
                }
                StateProj::Inner { future } => {
                    let response = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
                StateProj::Lookup { lookup } => {
                    let looked_up = ready!(lookup.poll(cx));
                    // Kept until the end: a refusal is rendered with it.
                    let config = this.config.as_ref().expect(POLLED_AFTER_COMPLETION);
                    match config.found(looked_up) {
                        Ok(Found {
                            id,
                            quota_check: Some((quota, check)),
                        }) => {
                            this.state.set(State::Quota {
                                check,
                                id: Some(id),
                                quota,
                            });
                            continue;
                        }
                        Ok(Found {
                            id,
                            quota_check: None,
                        }) => admit(id, None),
                        Err(error) => Err(error),
                    }
                }
                StateProj::Quota { check, id, quota } => {
                    let verdict = ready!(check.poll(cx));
                    admit(
                        id.take().expect(POLLED_AFTER_COMPLETION),
                        Some((*quota, verdict)),
                    )
                }
            };
            let next = match admitted {
                Ok((id, usage)) => {
                    let mut inner = this.inner.take().expect(POLLED_AFTER_COMPLETION);
                    let mut request = this.request.take().expect(POLLED_AFTER_COMPLETION);
                    request.extensions_mut().insert(id);
                    if let Some(usage) = usage {
                        request.extensions_mut().insert(usage);
                    }
                    State::Inner {
                        future: inner.call(request),
                    }
                }
                Err(error) => {
                    let config = this.config.take().expect(POLLED_AFTER_COMPLETION);
                    State::Rejected {
                        response: Some(config.reject.render(error)),
                    }
                }
            };
            this.state.set(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::Ready;
    use std::task::Waker;

    use tower::util::ServiceFn;

    use super::*;
    use crate::api_key::InMemoryKeyStore;

    #[test]
    #[should_panic(expected = "ApiKey ResponseFuture polled after completion")]
    fn polling_a_finished_future_panics() {
        type Inner = ServiceFn<fn(Request<()>) -> Ready<Result<Response<()>, Infallible>>>;
        let mut future = Box::pin(ResponseFuture::<Inner, InMemoryKeyStore, ()>::rejected(
            Response::new(Bytes::new()),
        ));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_ready());
        let _ = future.as_mut().poll(&mut cx);
    }
}

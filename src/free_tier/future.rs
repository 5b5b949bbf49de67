//! The response future of [`FreeTierLimit`](super::FreeTierLimit).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::client_ip::ClientIpError;
use super::window::Verdict;
use crate::body::{ResponseBody, rejection};
use crate::envelope::{EnvelopeStyle, ErrorCode, GatewayError, RateLimitInfo, RenderRejection};
use crate::store::StoreError;

pin_project! {
    /// The response future of [`FreeTierLimit`](super::FreeTierLimit).
    pub struct ResponseFuture<S, ReqBody, CheckFuture>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        kind: Kind<CheckFuture, S::Future, S, ReqBody>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<CheckFuture, F, S, ReqBody> {
        // Not free: the inner service's answer, untouched.
        PassThrough { #[pin] future: F },
        // Waiting for the limiter; the ready service and the request wait too.
        Checking {
            #[pin]
            check: CheckFuture,
            call: Option<(S, Request<ReqBody>)>,
            answer: (EnvelopeStyle, RenderRejection),
        },
        // Admitted: the inner answer gets the X-RateLimit-* headers.
        Admitted { #[pin] future: F, rate_limit: RateLimitInfo },
        Rejected { response: Option<Response<Bytes>> },
        // The output was returned.
        Done,
    }
}

const POLLED_AFTER_COMPLETION: &str = "`FreeTierLimit`'s ResponseFuture polled after completion";

impl<S, ReqBody, CheckFuture> ResponseFuture<S, ReqBody, CheckFuture>
where
    S: Service<Request<ReqBody>>,
{
    pub(super) fn pass_through(future: S::Future) -> Self {
        Self {
            kind: Kind::PassThrough { future },
        }
    }

    pub(super) fn checking(
        check: CheckFuture,
        service: S,
        request: Request<ReqBody>,
        answer: (EnvelopeStyle, RenderRejection),
    ) -> Self {
        Self {
            kind: Kind::Checking {
                check,
                call: Some((service, request)),
                answer,
            },
        }
    }

    pub(super) fn rejected(mut response: Response<Bytes>, fault: ClientIpError) -> Self {
        response.extensions_mut().insert(fault);
        Self {
            kind: Kind::Rejected {
                response: Some(response),
            },
        }
    }
}

/// The 429 of a refused free request.
fn refusal(retry_after: std::time::Duration, rate_limit: RateLimitInfo) -> GatewayError {
    // Whole seconds, rounded up, at least 1: `Retry-After: 0` invites a retry storm.
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    GatewayError::new(ErrorCode::FreeTierRateLimited)
        .with_retry_after_secs(secs.max(1))
        .with_rate_limit(rate_limit)
}

/// The 503 of a limiter store that could not answer: fail closed, never
/// serve a free request unlimited.
fn store_failure(error: &StoreError) -> GatewayError {
    GatewayError::new(ErrorCode::RateLimitUnavailable).with_message(format!(
        "{} ({error})",
        ErrorCode::RateLimitUnavailable.default_message()
    ))
}

impl<S, ReqBody, ResBody, CheckFuture> Future for ResponseFuture<S, ReqBody, CheckFuture>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    CheckFuture: Future<Output = Result<Verdict, StoreError>>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        loop {
            let (next, output) = match kind.as_mut().project() {
                KindProj::PassThrough { future } => {
                    let response = ready!(future.poll(cx));
                    (Kind::Done, response.map(|r| r.map(ResponseBody::inner)))
                }
                KindProj::Admitted { future, rate_limit } => {
                    let rate_limit = *rate_limit;
                    let response = ready!(future.poll(cx)).map(|mut response| {
                        rate_limit.write_headers(response.headers_mut());
                        response.map(ResponseBody::inner)
                    });
                    (Kind::Done, response)
                }
                KindProj::Rejected { response } => {
                    let response = response.take().expect(POLLED_AFTER_COMPLETION);
                    (Kind::Done, Ok(rejection(response)))
                }
                KindProj::Done => panic!("{POLLED_AFTER_COMPLETION}"),
                KindProj::Checking {
                    check,
                    call,
                    answer: (style, render),
                } => {
                    let verdict = ready!(check.poll(cx));
                    report_verdict(call.as_ref().map(|(_, request)| request), &verdict);
                    let reject = |error| Some(render.render(error, *style));
                    let next = match verdict {
                        Ok(Verdict::Allowed { rate_limit }) => {
                            let (mut service, request) =
                                call.take().expect(POLLED_AFTER_COMPLETION);
                            Kind::Admitted {
                                future: service.call(request),
                                rate_limit,
                            }
                        }
                        Ok(Verdict::Refused {
                            retry_after,
                            rate_limit,
                        }) => Kind::Rejected {
                            response: reject(refusal(retry_after, rate_limit)),
                        },
                        Ok(Verdict::AtCapacity) => Kind::Rejected {
                            response: reject(GatewayError::new(ErrorCode::FreeModelFailed)),
                        },
                        Err(error) => Kind::Rejected {
                            response: reject(store_failure(&error)),
                        },
                    };
                    kind.set(next);
                    continue;
                }
            };
            kind.set(next);
            return Poll::Ready(output);
        }
    }
}

/// The layer's decision, counted (`walletgate_free_tier_requests_total`)
/// and traced with the client IP and the model an earlier step resolved ([`RequestModel`](crate::gateway::RequestModel)): read from
/// that, not from the parsed body, which a pipeline may have taken apart.
fn report_verdict<B>(_request: Option<&http::Request<B>>, verdict: &Result<Verdict, StoreError>) {
    use crate::envelope::ErrorCode as Code;
    let (outcome, code) = match verdict {
        Ok(Verdict::Allowed { .. }) => ("admitted", None),
        Ok(Verdict::Refused { .. }) => ("refused", Some(Code::FreeTierRateLimited)),
        Ok(Verdict::AtCapacity) => ("refused", Some(Code::FreeModelFailed)),
        // Answered 503 RATE_LIMIT_UNAVAILABLE (`store_failure`): counted as answered.
        Err(_) => ("refused", Some(Code::RateLimitUnavailable)),
    };
    match code.map(Code::as_str) {
        Some(code) => crate::metrics::count(
            crate::metrics::FREE_TIER_REQUESTS_TOTAL,
            [("outcome", outcome), ("code", code)],
        ),
        None => crate::metrics::count(
            crate::metrics::FREE_TIER_REQUESTS_TOTAL,
            [("outcome", outcome)],
        ),
    }
    #[cfg(feature = "tracing")]
    {
        use super::client_ip::ClientIp;
        let extensions = _request.map(http::Request::extensions);
        let client_ip = extensions.and_then(|e| e.get::<ClientIp>()).map(|ip| ip.0);
        let model = extensions
            .and_then(|e| e.get::<crate::gateway::RequestModel>())
            .map(crate::gateway::RequestModel::as_str);
        let client_ip = client_ip.map(tracing::field::display);
        match verdict {
            Ok(Verdict::Allowed { rate_limit }) => trace_decision!(
                DEBUG,
                "free_tier",
                client_ip,
                model,
                outcome = "admitted",
                remaining = rate_limit.remaining,
            ),
            Ok(Verdict::Refused { rate_limit, .. }) => trace_decision!(
                INFO,
                "free_tier",
                client_ip,
                model,
                outcome = "refused",
                error = ErrorCode::FreeTierRateLimited.as_str(),
                remaining = rate_limit.remaining,
            ),
            Ok(Verdict::AtCapacity) => trace_decision!(
                WARN,
                "free_tier",
                client_ip,
                model,
                outcome = "refused",
                error = ErrorCode::FreeModelFailed.as_str(),
            ),
            // A store away (as in a Redis failover) is a WARN, as the payment
            // layer's is: the answer is a retryable 503, nothing is lost.
            Err(error) => trace_decision!(
                WARN,
                "free_tier",
                client_ip,
                model,
                outcome = "refused",
                error = ErrorCode::RateLimitUnavailable.as_str(),
                reason = %error,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::task::Waker;

    use super::*;

    type Body = http_body_util::Full<Bytes>;
    type Inner =
        tower::util::ServiceFn<fn(Request<Body>) -> Ready<Result<Response<Body>, Infallible>>>;
    type Check = Ready<Result<Verdict, StoreError>>;

    fn ok(_request: Request<Body>) -> Ready<Result<Response<Body>, Infallible>> {
        ready(Ok(Response::new(Body::default())))
    }

    fn poll_twice(future: ResponseFuture<Inner, Body, Check>) {
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_ready());
        let _ = future.as_mut().poll(&mut cx);
    }

    #[test]
    #[should_panic(expected = "`FreeTierLimit`'s ResponseFuture polled after completion")]
    fn an_admitted_future_polled_again_panics_with_a_clear_message() {
        let check = ready(Ok(Verdict::Allowed {
            rate_limit: RateLimitInfo {
                limit: 30,
                remaining: 29,
                reset_unix_millis: 1,
            },
        }));
        let inner: Inner = tower::service_fn(ok);
        let request = Request::new(Body::default());
        poll_twice(ResponseFuture::checking(
            check,
            inner,
            request,
            (EnvelopeStyle::Chat, RenderRejection::default()),
        ));
    }

    #[test]
    #[should_panic(expected = "`FreeTierLimit`'s ResponseFuture polled after completion")]
    fn a_rejected_future_polled_again_panics_with_a_clear_message() {
        let response = Response::new(Bytes::new());
        poll_twice(ResponseFuture::rejected(
            response,
            ClientIpError::MissingPeerAddr,
        ));
    }
}

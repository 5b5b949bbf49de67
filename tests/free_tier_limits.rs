//! FreeTierLimitLayer end to end with a fake clock: sliding windows, headers.
#![cfg(feature = "free-tier")]

mod free_tier_support;
use free_tier_support as support;
use support::{Body, echo_client_ip, json, text};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt, service_fn};
use walletgate::body::ResponseBody;
use walletgate::clock::FakeClock;
use walletgate::envelope::{EnvelopeStyle, SetEnvelopeStyleLayer};
use walletgate::free_tier::{FreeTierLimitLayer, FreeTierQuotas, InMemoryLimiter, KeyPrefixes};

const WALL_START_SECS: u64 = 1_800_000_000;
const WALL_START_MILLIS: u64 = WALL_START_SECS * 1000;

type Predicate = fn(&Request<Body>) -> bool;
type TestLayer = FreeTierLimitLayer<Predicate, InMemoryLimiter>;

fn is_free(request: &Request<Body>) -> bool {
    request.uri().path().ends_with("/free")
}

struct Harness {
    clock: FakeClock,
    limiter: InMemoryLimiter,
    layer: TestLayer,
}

fn harness(quotas: FreeTierQuotas) -> Harness {
    let clock = FakeClock::at_unix_secs(WALL_START_SECS);
    let limiter = InMemoryLimiter::new_with_clock(quotas, Arc::new(clock.clone()));
    let layer = FreeTierLimitLayer::new(is_free as Predicate).with_store(limiter.clone());
    Harness {
        clock,
        limiter,
        layer,
    }
}

impl Harness {
    async fn send(&self, path: &str, peer: &str) -> Response<ResponseBody<Body>> {
        self.send_request(request(path, peer)).await
    }

    async fn send_request(&self, request: Request<Body>) -> Response<ResponseBody<Body>> {
        let service = self.layer.layer(service_fn(echo_client_ip));
        service.oneshot(request).await.unwrap()
    }

    /// Sends free requests from `peer` until one is refused; returns how many passed.
    async fn admitted_until_refused(&self, peer: &str, at_most: usize) -> usize {
        for admitted in 0..at_most {
            if self.send("/v1/free", peer).await.status() != StatusCode::OK {
                return admitted;
            }
        }
        at_most
    }
}

fn request(path: &str, peer: &str) -> Request<Body> {
    support::request(path, Some(peer), &[])
}

fn header(response: &Response<ResponseBody<Body>>, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

const CLIENT: &str = "198.51.100.7:50000";

#[tokio::test]
async fn thirty_admitted_then_refused_within_the_minute() {
    let h = harness(FreeTierQuotas::default());
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 30);
    h.clock.advance(Duration::from_millis(1500));
    assert_eq!(
        h.send("/v1/free", CLIENT).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_burst_of_thirty_waits_a_whole_minute() {
    let h = harness(FreeTierQuotas::default());
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 30);
    // Not 15 more at 30 s, as a bucket refilling one every 2 s would allow.
    h.clock.advance(Duration::from_secs(30));
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 0);
    h.clock.advance(Duration::from_secs(30));
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 0);
    h.clock.advance(Duration::from_millis(1));
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 30);
}

#[tokio::test]
async fn three_hundred_over_fifty_minutes_then_refused_before_the_hour_ends() {
    let h = harness(FreeTierQuotas::default());
    for _ in 0..300 {
        assert_eq!(h.send("/v1/free", CLIENT).await.status(), StatusCode::OK);
        h.clock.advance(Duration::from_secs(10));
    }
    // 50 minutes have passed; nine more go by.
    h.clock.advance(Duration::from_secs(9 * 60));
    let refused = h.send("/v1/free", CLIENT).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "x-ratelimit-limit"), "300");
}

#[tokio::test]
async fn hour_quota_is_reached_across_minutes() {
    let h = harness(FreeTierQuotas::default());
    let mut admitted = 0;
    // 30 a minute for ten minutes reaches 300; nothing more within the hour.
    for minute in 0..20 {
        if minute > 0 {
            h.clock.advance(Duration::from_secs(61));
        }
        admitted += h.admitted_until_refused(CLIENT, 100).await;
    }
    assert_eq!(admitted, 300);
    let refused = h.send("/v1/free", CLIENT).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // The hour quota refuses now: it describes itself.
    assert_eq!(header(&refused, "x-ratelimit-limit"), "300");
}

#[tokio::test]
async fn minute_refusals_do_not_spend_the_hour_quota() {
    let h = harness(FreeTierQuotas::default());
    let client = KeyPrefixes::default().key("198.51.100.7".parse().unwrap());
    assert_eq!(h.admitted_until_refused(CLIENT, 30).await, 30);
    for _ in 0..200 {
        let response = h.send("/v1/free", CLIENT).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&response, "x-ratelimit-limit"), "30");
    }
    let usage = h.limiter.peek(client);
    assert_eq!(usage.remaining_per_minute, 0);
    assert_eq!(usage.remaining_per_hour, 270);
}

#[tokio::test]
async fn hour_refusals_do_not_spend_the_minute_quota() {
    let h = harness(FreeTierQuotas::new(30, 40).unwrap());
    let client = KeyPrefixes::default().key("198.51.100.7".parse().unwrap());
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 30);
    h.clock.advance(Duration::from_secs(61));
    // 10 left in the hour; then the hour quota refuses while the minute has 20.
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 10);
    for _ in 0..50 {
        let response = h.send("/v1/free", CLIENT).await;
        assert_eq!(header(&response, "x-ratelimit-limit"), "40");
    }
    assert_eq!(h.limiter.peek(client).remaining_per_minute, 20);
}

#[tokio::test]
async fn admitted_headers_describe_the_tighter_quota_exactly() {
    let h = harness(FreeTierQuotas::default());
    let first = h.send("/v1/free", CLIENT).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "x-ratelimit-limit"), "30");
    assert_eq!(header(&first, "x-ratelimit-remaining"), "29");
    // Full again when this request leaves the closed 60 s window, in epoch
    // milliseconds.
    assert_eq!(
        header(&first, "x-ratelimit-reset"),
        (WALL_START_MILLIS + 60_001).to_string()
    );
    assert!(first.headers().get("retry-after").is_none());
    assert_eq!(text(first).await, "198.51.100.7");
}

#[tokio::test]
async fn refusal_headers_and_body_are_exact() {
    let h = harness(FreeTierQuotas::default());
    assert_eq!(h.admitted_until_refused(CLIENT, 30).await, 30);
    h.clock.advance(Duration::from_millis(500));
    let refused = h.send("/v1/chat/completions/free", CLIENT).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // 59.501 s to wait rounds up to 60.
    assert_eq!(header(&refused, "retry-after"), "60");
    assert_eq!(header(&refused, "x-ratelimit-limit"), "30");
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    assert_eq!(
        header(&refused, "x-ratelimit-reset"),
        (WALL_START_MILLIS + 60_001).to_string()
    );
    assert_eq!(header(&refused, "content-type"), "application/json");
    let body = json(refused).await;
    assert_eq!(body["error"]["code"], "FREE_TIER_RATE_LIMITED");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["code"], "FREE_TIER_RATE_LIMITED");
    assert_eq!(
        body["message"],
        "Free-tier rate limit reached for this IP address"
    );
}

#[tokio::test]
async fn sub_second_waits_round_up_to_one_second() {
    let h = harness(FreeTierQuotas::default());
    assert_eq!(h.admitted_until_refused(CLIENT, 30).await, 30);
    h.clock.advance(Duration::from_millis(59_999));
    let refused = h.send("/v1/free", CLIENT).await;
    assert_eq!(header(&refused, "retry-after"), "1");
    h.clock.advance(Duration::from_millis(2));
    assert_eq!(h.send("/v1/free", CLIENT).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn reset_moves_with_the_wall_clock() {
    let h = harness(FreeTierQuotas::default());
    h.clock.advance(Duration::from_secs(10));
    let response = h.send("/v1/free", CLIENT).await;
    assert_eq!(
        header(&response, "x-ratelimit-reset"),
        (WALL_START_MILLIS + 70_001).to_string()
    );
}

#[tokio::test]
async fn messages_route_refuses_in_its_own_envelope() {
    let h = harness(FreeTierQuotas::new(1, 10).unwrap());
    let path = "/v1/messages";
    let is_messages: Predicate = |_| true;
    let layer = FreeTierLimitLayer::new(is_messages).with_store(h.limiter.clone());
    // The router sets the route's envelope once; the limit reads it.
    let service = SetEnvelopeStyleLayer::new(EnvelopeStyle::Messages)
        .layer(layer.layer(service_fn(echo_client_ip)));
    assert_eq!(
        service
            .clone()
            .oneshot(request(path, CLIENT))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let refused = service.oneshot(request(path, CLIENT)).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), "61");
    let body = json(refused).await;
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");
}

#[tokio::test]
async fn non_free_requests_are_never_limited_or_annotated() {
    let h = harness(FreeTierQuotas::new(1, 1).unwrap());
    for _ in 0..100 {
        let response = h.send("/v1/paid", CLIENT).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("x-ratelimit-limit").is_none());
        // Not even resolved: the handler sees no ClientIp.
        assert_eq!(text(response).await, "none");
    }
    // A paid request without any peer address passes too: nothing to resolve.
    let mut bare = Request::builder()
        .uri("/v1/paid")
        .body(Full::new(Bytes::new()))
        .unwrap();
    bare.extensions_mut().clear();
    assert_eq!(h.send_request(bare).await.status(), StatusCode::OK);
    assert!(h.limiter.is_empty());
    // The free quota is still whole.
    assert_eq!(h.send("/v1/free", CLIENT).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn clients_are_limited_independently() {
    let h = harness(FreeTierQuotas::default());
    assert_eq!(h.admitted_until_refused(CLIENT, 100).await, 30);
    assert_eq!(h.admitted_until_refused("198.51.100.8:1", 100).await, 30);
    assert_eq!(h.limiter.len(), 2);
}

#[tokio::test]
async fn sweep_forgets_idle_clients_and_len_reports_it() {
    let h = harness(FreeTierQuotas::default());
    for i in 1..=50 {
        h.send("/v1/free", &format!("203.0.113.{i}:1")).await;
    }
    assert_eq!(h.limiter.len(), 50);
    h.clock.advance(Duration::from_secs(3600));
    assert_eq!(h.limiter.sweep().removed, 0);
    h.clock.advance(Duration::from_millis(1));
    let report = h.limiter.sweep();
    assert_eq!((report.removed, report.remaining), (50, 0));
    assert!(h.limiter.is_empty());
}

#[tokio::test]
async fn service_calls_the_instance_that_was_polled_ready() {
    let h = harness(FreeTierQuotas::default());
    let mut service = h.layer.layer(service_fn(echo_client_ip));
    let ready = service.ready().await.unwrap();
    let response = ready.call(request("/v1/free", CLIENT)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_full_store_refuses_new_clients_as_free_capacity_exhausted() {
    let h = harness(FreeTierQuotas::default());
    // One key per shard at most; fill until a new client is turned away.
    h.limiter.set_max_tracked_keys(Some(1));
    let mut refused = None;
    for i in 1..=250u32 {
        let peer = format!("203.0.{}.{}:1", i / 200, i % 200);
        let response = h.send("/v1/free", &peer).await;
        if response.status() != StatusCode::OK {
            refused = Some(response);
            break;
        }
    }
    let refused = refused.expect("some new client meets a full shard");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), "30");
    let body = json(refused).await;
    assert_eq!(body["error"]["code"], "FREE_MODEL_FAILED");
}

#[tokio::test]
async fn the_caller_owns_the_refusal_and_keeps_its_figures() {
    let h = harness(FreeTierQuotas::new(1, 10).unwrap());
    let layer = h.layer.clone().with_rejection(|error, _style| {
        let mut response = Response::new(Bytes::from(error.code().as_str()));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let secs = error.retry_after_secs().unwrap_or_default();
        response.headers_mut().insert("retry-after", secs.into());
        response
    });
    let service = layer.layer(service_fn(echo_client_ip));
    let admitted = service.clone().oneshot(request("/v1/free", CLIENT)).await;
    assert_eq!(admitted.unwrap().status(), StatusCode::OK);
    let refused = service.oneshot(request("/v1/free", CLIENT)).await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Strict window: the next slot opens 60 s + 1 ms after the admitted call, rounded up.
    assert_eq!(header(&refused, "retry-after"), "61");
    assert_eq!(text(refused).await, "FREE_TIER_RATE_LIMITED");
}

//! Two gateway replicas sharing only a Redis (`GATEWAY_REDIS_URL`), over
//! TCP: the free tier holds across them, and a Redis that goes away fails
//! closed and comes back.

use std::time::Duration;

use http::StatusCode;
use walletgate::envelope::ErrorCode;

use crate::config::Config;
use crate::redis_settings::RedisSettings;
use crate::request::Endpoint;
use crate::tests::{ENDPOINTS, Server, body, path};

#[path = "../../tests/redis_support/mod.rs"]
#[allow(unreachable_pub, clippy::all)]
mod redis_support;

const FREE_MODEL: &str = "nvidia/nemotron-super";

/// A replica on `url` under `prefix`, otherwise the embedded defaults.
async fn replica(url: &str, prefix: &str) -> Server {
    Server::start(Config {
        redis: Some(RedisSettings::new(url, prefix)),
        ..Config::default()
    })
    .await
}

async fn free_call(server: &Server, endpoint: Endpoint) -> crate::tests::Reply {
    server
        .post_once(
            path(endpoint),
            body(endpoint, FREE_MODEL, "hi", false).to_string(),
            None,
        )
        .await
}

#[tokio::test]
async fn thirty_one_free_calls_alternating_two_replicas_admit_exactly_thirty() {
    let url = redis_support::shared_url();
    let prefix = redis_support::unique_prefix("gw_free_tier");
    let replicas = [replica(&url, &prefix).await, replica(&url, &prefix).await];
    let mut admitted = 0;
    for call in 0..31 {
        let reply = free_call(&replicas[call % 2], Endpoint::Chat).await;
        match reply.status {
            StatusCode::OK => {
                admitted += 1;
                // Both replicas count down one quota.
                assert_eq!(reply.header("x-ratelimit-limit"), Some("30"));
                let remaining = (30 - admitted).to_string();
                assert_eq!(
                    reply.header("x-ratelimit-remaining"),
                    Some(remaining.as_str())
                );
            }
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(call, 30, "refused early: {}", reply.text());
                assert_eq!(
                    reply.json()["code"],
                    ErrorCode::FreeTierRateLimited.as_str()
                );
                let retry: u64 = reply.header("retry-after").unwrap().parse().unwrap();
                assert!((55..=61).contains(&retry), "Retry-After {retry}");
            }
            other => panic!("unexpected {other}: {}", reply.text()),
        }
    }
    assert_eq!(admitted, 30);
    // Whichever replica is asked next, the quota is spent.
    for replica in &replicas {
        assert_eq!(free_call(replica, Endpoint::Chat).await.status, 429);
    }
}

#[tokio::test]
async fn redis_stopped_answers_503_in_each_envelope_and_service_resumes() {
    let mut redis = redis_support::RedisServer::start();
    let prefix = redis_support::unique_prefix("gw_down");
    let server = replica(&redis.url(), &prefix).await;
    assert_eq!(free_call(&server, Endpoint::Chat).await.status, 200);

    redis.stop();
    let code = ErrorCode::RateLimitUnavailable;
    for endpoint in ENDPOINTS {
        let reply = free_call(&server, endpoint).await;
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.text()
        );
        assert_eq!(reply.header("retry-after"), Some("5"));
        let body = reply.json();
        match endpoint {
            Endpoint::Chat => assert_eq!(body["code"], code.as_str()),
            Endpoint::Messages => {
                assert_eq!(body["type"], "error");
                assert_eq!(body["error"]["type"], "api_error");
            }
            Endpoint::Responses => assert_eq!(body["error"]["code"], code.as_str()),
        }
    }

    let _restarted = redis_support::RedisServer::start_on(redis.port());
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..50 {
        status = free_call(&server, Endpoint::Chat).await.status;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, StatusCode::OK, "the free tier did not come back");
}

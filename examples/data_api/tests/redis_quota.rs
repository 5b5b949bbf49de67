//! Two data API replicas sharing only a Redis (`DATA_API_REDIS_URL`), over
//! TCP: one API key's quota holds across them; a Redis that goes away fails
//! closed (503 in the Area A envelope) and comes back.

use super::*;
use crate::redis_settings::RedisSettings;

#[path = "../../../tests/redis_support/mod.rs"]
#[allow(unreachable_pub, clippy::all)]
mod redis_support;

/// A replica with 3 requests a minute on the key, sharing `url` under `prefix`.
async fn replica(url: &str, prefix: &str) -> Server {
    let (url, prefix) = (url.to_owned(), prefix.to_owned());
    start_configured(START, move |config| {
        config.key_per_minute = std::num::NonZeroU32::new(3).unwrap();
        config.redis = Some(RedisSettings::new(url, prefix));
    })
    .await
}

fn keyed_path() -> String {
    format!("/api/v2/accounts/{DEV_WALLET_0}/agent-relationships")
}

#[tokio::test]
async fn one_key_quota_holds_across_two_replicas() {
    let url = redis_support::shared_url();
    let prefix = redis_support::unique_prefix("data_api_quota");
    let replicas = [replica(&url, &prefix).await, replica(&url, &prefix).await];
    let path = keyed_path();
    let mut statuses = Vec::new();
    for call in 0..5 {
        let reply = replicas[call % 2]
            .keyed(Method::GET, &path, &[], None)
            .await;
        statuses.push(reply.status.as_u16());
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            // A burst of 3 a minute: the next one 20 s after the first.
            let retry: u64 = reply.headers[header::RETRY_AFTER]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((15..=20).contains(&retry), "Retry-After {retry}");
            assert_eq!(reply.body["error"]["status"], 429);
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
}

#[tokio::test]
async fn redis_stopped_answers_503_and_service_resumes() {
    let mut redis = redis_support::RedisServer::start();
    let server = replica(&redis.url(), &redis_support::unique_prefix("data_api_down")).await;
    let path = keyed_path();
    assert_eq!(
        server.keyed(Method::GET, &path, &[], None).await.status,
        200
    );

    redis.stop();
    let down = server.keyed(Method::GET, &path, &[], None).await;
    assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(down.headers[header::RETRY_AFTER], "5");
    assert_eq!(down.body["error"]["status"], 503);
    assert_eq!(down.body["error"]["code"], 14);

    let _restarted = redis_support::RedisServer::start_on(redis.port());
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..50 {
        status = server.keyed(Method::GET, &path, &[], None).await.status;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status,
        StatusCode::OK,
        "the API key quota did not come back"
    );
}

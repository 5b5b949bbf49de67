//! The rate-limit seams' contracts, one generic suite per trait, run against
//! the in-memory default and the Redis backend with the same assertions:
//! `free_tier::FreeTierStore` (`InMemoryLimiter`, `RedisFreeTier`) and
//! `api_key::QuotaStore` (`InMemoryQuotas`, `RedisQuotas`).
//!
//! Time: the in-memory stores read a `FakeClock`, which the suite advances;
//! Redis takes its time from the server (`TIME`), so there the suite waits
//! for real, on small windows (3 per 2 s and 5 per 6 s; 2 per 2 s), as the
//! scale-out issue asks. Then: Redis failing (stopped, then restarted on the
//! same port) fails closed through each layer and recovers.

mod redis_support;

use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{Layer, ServiceExt, service_fn};
use walletgate::api_key::{
    ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, InMemoryQuotas, KeyQuota, QuotaStore,
    QuotaVerdict,
};
use walletgate::clock::Clock;
use walletgate::clock::FakeClock;
use walletgate::free_tier::{
    ClientKey, FreeTierLimitLayer, FreeTierQuotas, FreeTierStore, InMemoryLimiter, KeyPrefixes,
    Verdict,
};
use walletgate::redis::{RedisConfig, RedisConnection, RedisFreeTier, RedisQuotas};

/// How a backend's time moves: a fake clock, or the real one.
#[derive(Clone)]
enum Time {
    Fake(FakeClock),
    Real,
}

impl Time {
    async fn advance(&self, by: Duration) {
        match self {
            Self::Fake(clock) => clock.advance(by),
            Self::Real => tokio::time::sleep(by).await,
        }
    }

    fn now_unix_millis(&self) -> u64 {
        match self {
            Self::Fake(clock) => clock.now_unix_millis(),
            Self::Real => u64::try_from(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_millis(),
            )
            .unwrap(),
        }
    }
}

/// On real time a step between two calls may take this long (a loaded
/// machine); the fake clock takes none.
const SLACK: Duration = Duration::from_millis(250);

/// The shared Redis of this run: a Redis Cluster when
/// `WALLETGATE_TEST_REDIS_TOPOLOGY=cluster`, else one redis-server.
fn shared_config() -> RedisConfig {
    if redis_support::on_cluster() {
        RedisConfig::cluster(redis_support::shared_cluster_seeds())
    } else {
        RedisConfig::new(redis_support::shared_url())
    }
}

fn redis_conn(test: &str) -> RedisConnection {
    let config = shared_config()
        .with_prefix(redis_support::unique_prefix(test))
        .with_timeout(Duration::from_secs(2));
    RedisConnection::open(&config).unwrap()
}

fn fake_time() -> (FakeClock, Time) {
    let clock = FakeClock::at_unix_secs(1_800_000_000);
    (clock.clone(), Time::Fake(clock))
}

// ---------------------------------------------------------------- free tier

/// 3 per 2 s and 5 per 6 s.
fn small_quotas() -> FreeTierQuotas {
    FreeTierQuotas::new(3, 5)
        .unwrap()
        .with_windows(Duration::from_secs(2), Duration::from_secs(6))
        .unwrap()
}

fn client(n: u32) -> ClientKey {
    KeyPrefixes::default().key(std::net::Ipv4Addr::from(0xc633_6400 + n).into())
}

fn admitted(verdict: &Verdict) -> Option<(u32, u32)> {
    match verdict {
        Verdict::Allowed { rate_limit } => Some((rate_limit.limit, rate_limit.remaining)),
        _ => None,
    }
}

/// The free-tier contract, whatever the store.
async fn free_tier_contract<S: FreeTierStore>(store: S, time: Time) {
    // A burst of 3: admitted, each describing the tighter quota.
    let remaining: Vec<_> = [
        store.check(client(1)).await.unwrap(),
        store.check(client(1)).await.unwrap(),
        store.check(client(1)).await.unwrap(),
    ]
    .iter()
    .map(admitted)
    .collect();
    assert_eq!(remaining, [Some((3, 2)), Some((3, 1)), Some((3, 0))]);

    // The 4th: refused by the 2 s window, truthful about when.
    let refused_at = time.now_unix_millis();
    let Verdict::Refused {
        retry_after,
        rate_limit,
    } = store.check(client(1)).await.unwrap()
    else {
        panic!("a 4th request within 2 s was admitted");
    };
    assert_eq!((rate_limit.limit, rate_limit.remaining), (3, 0));
    assert!(
        retry_after <= Duration::from_millis(2001),
        "{retry_after:?}"
    );
    assert!(
        retry_after + SLACK >= Duration::from_millis(2001),
        "{retry_after:?}"
    );
    let ready_at = refused_at + u64::try_from(retry_after.as_millis()).unwrap();
    assert!(rate_limit.reset_unix_millis.abs_diff(ready_at) <= SLACK.as_millis() as u64);

    // Other clients are not affected; refusals spent nothing.
    assert_eq!(
        admitted(&store.check(client(2)).await.unwrap()),
        Some((3, 2))
    );
    for _ in 0..5 {
        assert!(admitted(&store.check(client(1)).await.unwrap()).is_none());
    }

    // After Retry-After the 2 s window admits again; the 6 s window (5)
    // is the tighter one now, and refuses the 6th.
    time.advance(retry_after + Duration::from_millis(20)).await;
    assert_eq!(
        admitted(&store.check(client(1)).await.unwrap()),
        Some((5, 1))
    );
    assert_eq!(
        admitted(&store.check(client(1)).await.unwrap()),
        Some((5, 0))
    );
    match store.check(client(1)).await.unwrap() {
        Verdict::Refused { rate_limit, .. } => assert_eq!(rate_limit.limit, 5),
        other => panic!("a 6th request within 6 s: {other:?}"),
    }
}

/// Many requests of one client at once: exactly the quota is admitted.
async fn free_tier_concurrency_contract<S: FreeTierStore>(store: S) {
    let store = Arc::new(store);
    let checks = (0..20).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.check(client(7)).await.unwrap() })
    });
    let mut admitted_count = 0;
    for check in checks {
        admitted_count += usize::from(admitted(&check.await.unwrap()).is_some());
    }
    assert_eq!(admitted_count, 3);
}

#[tokio::test]
async fn free_tier_in_memory() {
    let (clock, time) = fake_time();
    let store = InMemoryLimiter::new_with_clock(small_quotas(), Arc::new(clock.clone()));
    free_tier_contract(store, time).await;
    let store = InMemoryLimiter::new_with_clock(small_quotas(), Arc::new(clock));
    free_tier_concurrency_contract(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_tier_redis() {
    let store = RedisFreeTier::new(redis_conn("free_tier"), small_quotas());
    free_tier_contract(store.clone(), Time::Real).await;
    free_tier_concurrency_contract(store).await;
}

/// The free tier as the gateway holds it: an `Arc<dyn FreeTierStore>`,
/// memory or Redis chosen at start; the same contract through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_tier_behind_a_trait_object() {
    let (clock, time) = fake_time();
    let memory: Arc<dyn FreeTierStore> = Arc::new(InMemoryLimiter::new_with_clock(
        small_quotas(),
        Arc::new(clock),
    ));
    free_tier_contract(memory, time).await;
    let redis: Arc<dyn FreeTierStore> = Arc::new(RedisFreeTier::new(
        redis_conn("free_tier_dyn"),
        small_quotas(),
    ));
    free_tier_contract(Arc::clone(&redis), Time::Real).await;
    free_tier_concurrency_contract(redis).await;
}

// ------------------------------------------------------------ API-key quota

fn app(name: &str) -> ApiKeyId {
    ApiKeyId::new(name).unwrap()
}

/// 2 per 2 s: a burst of 2, then one every second.
fn two_per_two_secs() -> KeyQuota {
    KeyQuota::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(2)).unwrap()
}

fn retry_after(verdict: QuotaVerdict) -> Option<Duration> {
    match verdict {
        QuotaVerdict::Exceeded { retry_after } => Some(retry_after),
        _ => None,
    }
}

/// The API-key quota contract, whatever the store.
async fn quota_contract<Q: QuotaStore>(store: Q, time: Time) {
    let quota = two_per_two_secs();
    assert_eq!(
        store.check(&app("a"), quota).await.unwrap(),
        QuotaVerdict::Allowed { remaining: 1 }
    );
    assert_eq!(
        store.check(&app("a"), quota).await.unwrap(),
        QuotaVerdict::Allowed { remaining: 0 }
    );
    let wait = retry_after(store.check(&app("a"), quota).await.unwrap())
        .expect("a 3rd request within the burst was admitted");
    assert!(wait <= Duration::from_secs(1), "{wait:?}");
    assert!(wait + SLACK >= Duration::from_secs(1), "{wait:?}");

    // Other keys, and the same key under a changed quota, are fresh buckets.
    assert_eq!(
        store.check(&app("b"), quota).await.unwrap(),
        QuotaVerdict::Allowed { remaining: 1 }
    );
    let roomier = KeyQuota::new(NonZeroU32::new(3).unwrap(), Duration::from_secs(3)).unwrap();
    assert_eq!(
        store.check(&app("a"), roomier).await.unwrap(),
        QuotaVerdict::Allowed { remaining: 2 }
    );

    // Refusals spend nothing: after the wait, one more; then refused again.
    let quota = two_per_two_secs();
    let id = app("c");
    assert_eq!(
        store.check(&id, quota).await.unwrap(),
        QuotaVerdict::Allowed { remaining: 1 }
    );
    assert_eq!(
        store.check(&id, quota).await.unwrap(),
        QuotaVerdict::Allowed { remaining: 0 }
    );
    let mut wait = Duration::ZERO;
    for _ in 0..5 {
        wait = retry_after(store.check(&id, quota).await.unwrap()).expect("over the burst");
    }
    time.advance(wait + Duration::from_millis(20)).await;
    assert_eq!(
        store.check(&id, quota).await.unwrap(),
        QuotaVerdict::Allowed { remaining: 0 }
    );
    assert!(retry_after(store.check(&id, quota).await.unwrap()).is_some());
}

async fn quota_concurrency_contract<Q: QuotaStore>(store: Q) {
    let store = Arc::new(store);
    let checks = (0..20).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .check(&app("burst"), two_per_two_secs())
                .await
                .unwrap()
        })
    });
    let mut admitted_count = 0;
    for check in checks {
        admitted_count += usize::from(matches!(check.await.unwrap(), QuotaVerdict::Allowed { .. }));
    }
    assert_eq!(admitted_count, 2);
}

#[tokio::test]
async fn api_key_quota_in_memory() {
    let (clock, time) = fake_time();
    quota_contract(InMemoryQuotas::new(Arc::new(clock.clone())), time).await;
    quota_concurrency_contract(InMemoryQuotas::new(Arc::new(clock))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_quota_redis() {
    let store = RedisQuotas::new(redis_conn("api_quota"));
    quota_contract(store.clone(), Time::Real).await;
    quota_concurrency_contract(store).await;
}

/// The quota buckets as the data API holds them: an `Arc<dyn QuotaStore>`,
/// memory or Redis chosen at start; the same contract through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_quota_behind_a_trait_object() {
    let (clock, time) = fake_time();
    let memory: Arc<dyn QuotaStore> = Arc::new(InMemoryQuotas::new(Arc::new(clock)));
    quota_contract(memory, time).await;
    let redis: Arc<dyn QuotaStore> = Arc::new(RedisQuotas::new(redis_conn("api_quota_dyn")));
    quota_contract(Arc::clone(&redis), Time::Real).await;
    quota_concurrency_contract(redis).await;
}

// ------------------------------------------------ Redis down: fail closed

type Body = Full<Bytes>;

async fn ok(_request: Request<Body>) -> Result<Response<Body>, std::convert::Infallible> {
    Ok(Response::new(Body::from("served")))
}

fn free_request() -> Request<Body> {
    let mut request = Request::post("/v1/chat/completions")
        .body(Body::default())
        .unwrap();
    request
        .extensions_mut()
        .insert(SocketAddr::from(([198, 51, 100, 9], 4000)));
    request
}

const KEY: &str = "contract-api-key-0123456789";

fn keyed_request() -> Request<Body> {
    Request::get("/api/v2/collections")
        .header("x-api-key", KEY)
        .body(Body::default())
        .unwrap()
}

async fn json_of(
    response: Response<impl http_body::Body<Error: std::fmt::Debug>>,
) -> serde_json::Value {
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

/// Polls `call` until it answers `want` (Redis coming back takes a
/// reconnect), at most 5 s.
async fn eventually<F, Fut>(want: StatusCode, mut call: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = StatusCode>,
{
    for _ in 0..50 {
        if call().await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never answered {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fails_closed_and_recovers() {
    let mut server = redis_support::RedisServer::start();
    let config = RedisConfig::new(server.url())
        .with_prefix(redis_support::unique_prefix("down"))
        .with_timeout(Duration::from_millis(250));
    let conn = RedisConnection::open(&config).unwrap();

    let free = FreeTierLimitLayer::new(|_: &Request<Body>| true)
        .with_store(RedisFreeTier::new(conn.clone(), FreeTierQuotas::default()))
        .layer(service_fn(ok));
    let keys = InMemoryKeyStore::new();
    keys.insert(
        KEY,
        ApiKeyRecord::new(app("app"))
            .with_quota(KeyQuota::per_minute(NonZeroU32::new(100).unwrap())),
    )
    .unwrap();
    let keyed = ApiKeyLayer::new(keys)
        .with_quota_store(RedisQuotas::new(conn))
        .layer(service_fn(ok));

    assert_eq!(
        free.clone().oneshot(free_request()).await.unwrap().status(),
        200
    );
    assert_eq!(
        keyed
            .clone()
            .oneshot(keyed_request())
            .await
            .unwrap()
            .status(),
        200
    );

    server.stop();
    // Gateway envelope, chat style (the route set none): 503, the one code.
    let refused = free.clone().oneshot(free_request()).await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body = json_of(refused).await;
    assert_eq!(body["error"]["code"], "RATE_LIMIT_UNAVAILABLE");
    assert_eq!(body["error"]["type"], "api_error");
    // Area A envelope.
    let refused = keyed.clone().oneshot(keyed_request()).await.unwrap();
    assert_eq!(refused.status(), 503);
    let body = json_of(refused).await;
    assert_eq!(body["error"]["status"], 503);
    assert_eq!(body["error"]["code"], 14);

    let _restarted = redis_support::RedisServer::start_on(server.port());
    eventually(StatusCode::OK, || {
        let free = free.clone();
        async move { free.oneshot(free_request()).await.unwrap().status() }
    })
    .await;
    eventually(StatusCode::OK, || {
        let keyed = keyed.clone();
        async move { keyed.oneshot(keyed_request()).await.unwrap().status() }
    })
    .await;
}

// ------------------------------------------------------- round trips

/// Calls per command the server has run (scripts' own commands included).
async fn commands_run(conn: &RedisConnection) -> std::collections::HashMap<String, u64> {
    let info: String = conn
        .call("info", |mut c| async move {
            redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut c)
                .await
        })
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// One command from the client (`EVALSHA` of the decision script) per
/// decision, once the script is loaded; inside it only GET, SET and TIME.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_decision_is_one_round_trip() {
    let server = redis_support::RedisServer::start();
    let config = RedisConfig::new(server.url()).with_prefix("round-trips");
    let conn = RedisConnection::open(&config).unwrap();
    let free = RedisFreeTier::new(conn.clone(), FreeTierQuotas::default());
    let quotas = RedisQuotas::new(conn.clone());
    let quota = KeyQuota::per_minute(NonZeroU32::new(5).unwrap());
    // The first call of each script loads it (EVALSHA, SCRIPT LOAD, EVALSHA).
    free.check(client(1)).await.unwrap();
    quotas.check(&app("a"), quota).await.unwrap();
    let before = commands_run(&conn).await;
    for n in 0..40 {
        free.check(client(n % 3)).await.unwrap();
        quotas.check(&app("a"), quota).await.unwrap();
    }
    let after = commands_run(&conn).await;
    let delta = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    assert_eq!(delta("evalsha"), 80);
    for name in after.keys() {
        let script_side = ["evalsha", "get", "set", "time", "info"].contains(&name.as_str());
        assert!(
            script_side || delta(name) == 0,
            "{name} ran {} times",
            delta(name)
        );
    }
}

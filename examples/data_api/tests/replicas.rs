//! Two data API replicas over TCP on one redis-server (`DATA_API_REDIS_URL`),
//! signing with one key file, as behind a load balancer: whatever one replica
//! records (nonce, session, PAT, revocation) holds on the other; and a Redis
//! that stops answers 503 in the Area A envelope until it is back.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use walletgate::clock::{Clock as _, FakeClock, SystemClock};

use super::{
    API_KEY, DEV_KEY_0, DEV_WALLET_0, NowSecs as _, Reply, Server, bearer, favorites_path,
    session_cookie, sign, siwe_fields, siwe_text,
};
use crate::build_with_clock;
use crate::config::Config;
use crate::redis_settings::RedisSettings;

#[path = "../../../tests/redis_support/mod.rs"]
mod redis_support;

/// The origin both replicas serve (the load balancer's): JWT `iss` and
/// `aud`, SIWE domain and URI.
const ORIGIN: &str = "http://data.replicas.test";

/// Whether the JWT verifier consults the revocation list on this branch.
/// TODO(lead): set to true once branch `jwt` (RevocationCheck wired into the
/// verifier and the issuer) is merged and `stores.rs` hands it the Redis list.
const VERIFIER_CONSULTS_REVOCATIONS: bool = true;

/// A signing key file both replicas load (32 bytes, a fixed test seed).
fn shared_key_file(test: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "walletgate-replica-key-{test}-{}",
        std::process::id()
    ));
    std::fs::write(&path, [42u8; 32]).unwrap();
    path
}

/// One replica on its own loopback port, serving [`ORIGIN`], its stores in
/// the Redis at `url` under `prefix`.
async fn replica(url: &str, prefix: &str, key_file: &Path) -> Server {
    replica_on(RedisSettings::new(url, prefix), key_file).await
}

/// One replica on its own loopback port, serving [`ORIGIN`], its stores in
/// the Redis `redis` names.
async fn replica_on(redis: RedisSettings, key_file: &Path) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address: SocketAddr = listener.local_addr().unwrap();
    let mut config = Config::for_origin(address, ORIGIN).unwrap();
    config.api_key = Some(API_KEY.to_owned());
    config.redis = Some(redis);
    config.signing_key_file = Some(key_file.to_path_buf());
    // Real time: Redis expires keys on its own clock.
    let clock = FakeClock::at_unix_secs(SystemClock.now_unix_secs());
    let (router, _) = build_with_clock(&config, Arc::new(clock.clone())).unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    Server {
        base: format!("http://{address}"),
        clock,
        client: Client::builder(TokioExecutor::new()).build_http(),
    }
}

impl Server {
    async fn nonce(&self) -> Reply {
        self.keyed(Method::POST, "/api/v2/auth/siwe/nonce", &[], None)
            .await
    }

    /// Verifies a SIWE sign-in for [`ORIGIN`] with `nonce`.
    async fn verify(&self, nonce: &str) -> Reply {
        let fields = siwe_fields(ORIGIN, DEV_WALLET_0, nonce, self.clock.now_secs());
        let signature = sign(DEV_KEY_0, &siwe_text(&fields));
        self.keyed(
            Method::POST,
            "/api/v2/auth/siwe/verify",
            &[],
            Some(json!({"message": fields, "signature": signature, "chainArch": "EVM"})),
        )
        .await
    }

    async fn create_pat(&self, cookie: &str) -> Reply {
        self.keyed(
            Method::POST,
            "/api/v2/auth/tokens",
            &[("cookie", cookie)],
            Some(json!({"label": "replicas", "scopes": ["read:favorites"], "expiresInDays": 1})),
        )
        .await
    }

    async fn favorites(&self, jwt: &str) -> StatusCode {
        self.with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &bearer(jwt))
            .await
            .status
    }
}

/// A 503 in the Area A envelope.
fn assert_unavailable(reply: &Reply) {
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.body
    );
    assert_eq!(reply.body["error"]["status"], 503, "{}", reply.body);
    assert_eq!(reply.body["error"]["code"], 14, "{}", reply.body);
    assert!(reply.body["error"]["message"].is_string(), "{}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_sign_in_tokens_and_revocation() {
    let url = redis_support::shared_url();
    let prefix = redis_support::unique_prefix("data-api-replicas");
    let key_file = shared_key_file("share");
    let a = replica(&url, &prefix, &key_file).await;
    let b = replica(&url, &prefix, &key_file).await;

    // SIWE nonce on A, verify on B; the nonce is spent for both.
    let nonce = a.nonce().await;
    assert_eq!(nonce.status, StatusCode::OK);
    let nonce = nonce.body["nonce"].as_str().unwrap().to_owned();
    let verified = b.verify(&nonce).await;
    assert_eq!(verified.status, StatusCode::OK, "{}", verified.body);
    assert_eq!(
        a.verify(&nonce).await.status,
        StatusCode::UNAUTHORIZED,
        "a nonce spent on B is spent on A"
    );
    let cookie = session_cookie(&verified.headers);

    // The session started on B manages tokens on A; the PAT is created on B.
    let created = b.create_pat(&cookie).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let pat = created.body["token"].as_str().unwrap().to_owned();
    let id = created.body["id"].as_str().unwrap().to_owned();
    let listed = a.list_tokens(&cookie).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    assert_eq!(listed.body[0]["id"], id.as_str());

    // Exchanged on A, the JWT is accepted on both (one key file).
    let exchanged = a.exchange(&pat).await;
    assert_eq!(exchanged.status, StatusCode::OK, "{}", exchanged.body);
    let jwt = exchanged.body["accessToken"].as_str().unwrap().to_owned();
    assert_eq!(a.favorites(&jwt).await, StatusCode::OK);
    assert_eq!(b.favorites(&jwt).await, StatusCode::OK);
    assert_eq!(b.exchange(&pat).await.status, StatusCode::OK);

    // Revoked on A: B mints nothing from it any more.
    let revoked = a
        .keyed(
            Method::DELETE,
            &format!("/api/v2/auth/tokens/{id}"),
            &[("cookie", &cookie)],
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    assert_eq!(b.exchange(&pat).await.status, StatusCode::UNAUTHORIZED);
    // Revocation signed the wallet out on every replica.
    let listed = b.list_tokens(&cookie).await;
    assert_eq!(listed.status, StatusCode::UNAUTHORIZED);
    if VERIFIER_CONSULTS_REVOCATIONS {
        assert_eq!(b.favorites(&jwt).await, StatusCode::UNAUTHORIZED);
        assert_eq!(a.favorites(&jwt).await, StatusCode::UNAUTHORIZED);
    }
}

/// `DATA_API_REDIS_WAIT_REPLICAS` on a primary with one replica: a sign-in
/// whose spent nonce one replica acknowledged goes through; one waiting for
/// two (more than there are) is a 503 with Retry-After, never a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_waits_for_the_replicas_asked_for_and_fewer_is_a_503() {
    let primary = redis_support::RedisServer::start();
    let _replica = redis_support::RedisServer::start_replica_of(primary.port());
    let key_file = shared_key_file("wait-replicas");
    let prefix = redis_support::unique_prefix("data-api-wait-replicas");
    // A busy test machine's replica may take longer than 250 ms to answer.
    let settings = |replicas| {
        RedisSettings::new(primary.url(), &prefix)
            .with_wait_replicas(replicas)
            .with_timeout(Duration::from_secs(2))
    };
    for (replicas, signed_in) in [(1, true), (2, false)] {
        let server = replica_on(settings(replicas), &key_file).await;
        let nonce = server.nonce().await;
        assert_eq!(nonce.status, StatusCode::OK, "{}", nonce.body);
        let verified = server.verify(nonce.body["nonce"].as_str().unwrap()).await;
        if signed_in {
            assert_eq!(verified.status, StatusCode::OK, "{}", verified.body);
        } else {
            assert_unavailable(&verified);
            assert!(verified.headers.contains_key("retry-after"));
            assert!(!verified.headers.contains_key("set-cookie"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_answers_503_and_service_resumes() {
    let mut redis = redis_support::RedisServer::start();
    let key_file = shared_key_file("failure");
    let server = replica(&redis.url(), "data-api-failure", &key_file).await;
    let nonce = server.nonce().await;
    assert_eq!(nonce.status, StatusCode::OK);
    let verified = server.verify(nonce.body["nonce"].as_str().unwrap()).await;
    assert_eq!(verified.status, StatusCode::OK, "{}", verified.body);
    let cookie = session_cookie(&verified.headers);
    let created = server.create_pat(&cookie).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let pat = created.body["token"].as_str().unwrap().to_owned();

    redis.stop();
    // Every route that needs the stores answers 503, never a decision.
    assert_unavailable(&server.nonce().await);
    assert_unavailable(&server.verify("UnknownNonce12345").await);
    assert_unavailable(&server.create_pat(&cookie).await);
    assert_unavailable(&server.exchange(&pat).await);
    // Routes that need no store still answer.
    let jwks = server
        .call(Method::GET, "/.well-known/jwks.json", &[], None)
        .await;
    assert_eq!(jwks.status, StatusCode::OK);

    let _restarted = redis_support::RedisServer::start_on(redis.port());
    // The connection reconnects on the next command; the first may still
    // meet the broken socket.
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..20 {
        status = server.nonce().await.status;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, StatusCode::OK, "the replica recovers with Redis");
    // This Redis keeps nothing on disk, so the old PAT is unknown; a fresh
    // sign-in works end to end.
    assert_eq!(server.exchange(&pat).await.status, StatusCode::UNAUTHORIZED);
    let nonce = server.nonce().await;
    let verified = server.verify(nonce.body["nonce"].as_str().unwrap()).await;
    assert_eq!(verified.status, StatusCode::OK, "{}", verified.body);
}

/// The status of `GET path` without credentials.
async fn probe(server: &Server, path: &str) -> StatusCode {
    let request = http::Request::builder().uri(format!("{}{path}", server.base));
    server.send(request, bytes::Bytes::new()).await.status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_redis_and_health_does_not() {
    let mut redis = redis_support::RedisServer::start();
    let key_file = shared_key_file("readiness");
    let server = replica(&redis.url(), "data-api-readiness", &key_file).await;
    assert_eq!(probe(&server, "/healthz").await, StatusCode::OK);
    assert_eq!(probe(&server, "/readyz").await, StatusCode::OK);

    redis.stop();
    assert_eq!(
        probe(&server, "/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(probe(&server, "/healthz").await, StatusCode::OK);

    let _restarted = redis_support::RedisServer::start_on(redis.port());
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..20 {
        status = probe(&server, "/readyz").await;
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, StatusCode::OK, "ready again once Redis answers");
}

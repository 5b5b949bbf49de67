//! One contract per Area A storage trait, run against the in-memory default
//! and the Redis backend with the same assertions, so the two cannot drift.
//!
//! Every suite takes two handles, `a` and `b`: in memory they are the same
//! store; on Redis they are two stores on two connections, as two replicas
//! would hold them, so "issued on one, spent on the other" is part of the
//! contract. Times are real (the trait's `now` around the system clock), so
//! Redis's own expiry agrees with them. The Redis runs also check that every
//! key they leave has an expiry.
#![cfg(all(feature = "redis", feature = "siwe", feature = "tokens"))]

mod redis_support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, address};
use walletgate::clock::{Clock as _, SystemClock};
use walletgate::redis::{
    RedisConfig, RedisConnection, RedisPatStore, RedisRevocations, RedisSessionStore,
    RedisSiweNonceStore,
};
use walletgate::siwe::{InMemoryNonceStore, NonceConsumption, NonceStore, NonceStoreError};
use walletgate::tokens::{
    InMemoryPatStore, InMemorySessionStore, PatRecord, PatStore, Revocation, RotateOutcome,
    SecretDigest, SessionRecord, SessionSecrets, SessionStore,
};
use walletgate::wallet_jwt::{InMemoryRevocations, RevocationCheck, Scope, ScopeSet};

const WALLET: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
const OTHER: Address = address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
const RACERS: usize = 16;

fn now_secs() -> u64 {
    SystemClock.now_unix_secs()
}

/// The shared Redis of this run: a Redis Cluster when
/// `WALLETGATE_TEST_REDIS_TOPOLOGY=cluster`, else one redis-server.
fn shared_config() -> RedisConfig {
    if redis_support::on_cluster() {
        RedisConfig::cluster(redis_support::shared_cluster_seeds())
    } else {
        RedisConfig::new(redis_support::shared_url())
    }
}

/// Two replicas' handles on one Redis under a fresh prefix, and a third
/// connection to inspect the keys.
fn redis_pair<S>(test: &str, make: impl Fn(RedisConnection) -> S) -> (Arc<S>, Arc<S>, Keys) {
    let config = shared_config()
        .with_prefix(redis_support::unique_prefix(test))
        .with_timeout(Duration::from_secs(2));
    let open = || RedisConnection::open(&config).expect("Redis URL");
    (Arc::new(make(open())), Arc::new(make(open())), Keys(open()))
}

/// Runs `call` [`RACERS`] times at once, alternating the two replicas; how
/// many calls answered `wanted`.
async fn race<S, T, F, Fut>(a: &Arc<S>, b: &Arc<S>, wanted: T, call: F) -> usize
where
    S: Send + Sync + ?Sized + 'static,
    T: PartialEq + Send + 'static,
    F: Fn(Arc<S>, usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(call(store, i))
        })
        .collect();
    let mut count = 0;
    for racer in racers {
        if racer.await.unwrap() == wanted {
            count += 1;
        }
    }
    count
}

/// The contract `$suite` against the in-memory store `$memory` and the Redis
/// backend `$redis` (which leaves `$keys` keys, each with an expiry).
macro_rules! contract_tests {
    ($memory_test:ident, $redis_test:ident, $suite:ident, $memory:expr, $redis:expr, keys: $keys:pat) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory_test() {
            let store = Arc::new($memory);
            $suite(store.clone(), store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis_test() {
            let (a, b, keys) = redis_pair(stringify!($redis_test), $redis);
            $suite(a, b).await;
            let left = keys.assert_all_expire().await;
            assert!(matches!(left, $keys), "{left} keys left");
        }
    };
}

/// Inspects the keys under one prefix.
struct Keys(RedisConnection);

impl Keys {
    /// Every key under the prefix has an expiry; how many there are.
    async fn assert_all_expire(&self) -> usize {
        let pattern = format!("{}:*", self.0.prefix());
        let keys: Vec<String> = self
            .0
            .call("keys", |mut c| async move {
                redis::cmd("KEYS").arg(&pattern).query_async(&mut c).await
            })
            .await
            .unwrap();
        for key in &keys {
            let key = key.clone();
            let ttl: i64 = self
                .0
                .call("ttl", |mut c| async move {
                    redis::cmd("TTL").arg(&key).query_async(&mut c).await
                })
                .await
                .unwrap();
            assert!(ttl > 0, "a key without expiry: TTL {ttl}");
        }
        keys.len()
    }
}

// ---------------------------------------------------------------- SIWE nonces

async fn nonce_contract<S: NonceStore + ?Sized>(a: Arc<S>, b: Arc<S>) {
    let now = SystemClock.now_unix_millis();
    let expires = now + 60_000;

    // Issued on one replica, spent once on the other.
    let nonce = a.issue(now, expires).await.unwrap();
    assert_eq!(
        b.consume(&nonce, now + 1).await.unwrap(),
        NonceConsumption::Fresh
    );
    assert_eq!(
        a.consume(&nonce, now + 2).await.unwrap(),
        NonceConsumption::AlreadyUsed
    );
    assert_eq!(
        b.consume("NeverIssued123456", now).await.unwrap(),
        NonceConsumption::Unknown
    );

    // A collision is refused, whichever replica inserts second.
    a.insert("collide0123456789", now, expires).await.unwrap();
    assert!(matches!(
        b.insert("collide0123456789", now, expires).await,
        Err(NonceStoreError::Duplicate)
    ));

    // Expired at its expiry (exclusive), then forgotten.
    a.insert("expiring012345678", now, now + 1_000)
        .await
        .unwrap();
    assert_eq!(
        b.consume("expiring012345678", now + 1_000).await.unwrap(),
        NonceConsumption::Expired
    );
    assert_eq!(
        a.consume("expiring012345678", now + 1_000).await.unwrap(),
        NonceConsumption::Unknown
    );

    // Racing replicas: exactly one spends it.
    let nonce = a.issue(now, expires).await.unwrap();
    let fresh = race(&a, &b, NonceConsumption::Fresh, |store, _| {
        let nonce = nonce.clone();
        async move { store.consume(&nonce, now + 5).await.unwrap() }
    })
    .await;
    assert_eq!(fresh, 1);
}

// The collision and two spent nonces are still held.
contract_tests!(
    nonces_in_memory,
    nonces_in_redis,
    nonce_contract,
    InMemoryNonceStore::new(),
    RedisSiweNonceStore::new,
    keys: 3
);

// ----------------------------------------------------------------------- PATs

fn pat(id: &str, wallet: Address, family: &str, now: u64) -> PatRecord {
    PatRecord {
        id: id.to_owned(),
        label: format!("label of {id}"),
        wallet,
        scopes: [Scope::ReadFavorites, Scope::WriteWallets]
            .into_iter()
            .collect::<ScopeSet>(),
        created_at: now,
        expires_at: now + 86_400,
        last_used_at: None,
        revoked_at: None,
        revoked_because: None,
        family_id: family.to_owned(),
        digest: SecretDigest::of(&format!("wg_pat_secret_{id}_{now}")),
    }
}

async fn pat_contract<S: PatStore + ?Sized>(a: Arc<S>, b: Arc<S>) {
    let now = now_secs();
    let first = pat("1001", WALLET, "fam1", now);
    let second = PatRecord {
        label: String::new(),
        scopes: Scope::ReadWallets.into(),
        ..pat("1002", WALLET, "fam2", now)
    };
    let others = pat("2001", OTHER, "fam3", now);
    a.insert(first.clone()).await.unwrap();
    b.insert(second.clone()).await.unwrap();
    a.insert(others.clone()).await.unwrap();

    // Read back whole, on either replica, oldest first.
    assert_eq!(
        b.find_by_digest(&first.digest).await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        a.find_by_digest(&SecretDigest::of("never issued"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        b.list(WALLET).await.unwrap(),
        vec![first.clone(), second.clone()]
    );
    assert_eq!(a.list(OTHER).await.unwrap(), vec![others.clone()]);
    assert!(a.list(Address::ZERO).await.unwrap().is_empty());

    // Touch records a use; an unknown id is no error.
    b.touch("1001", now + 5).await.unwrap();
    b.touch("9999", now + 5).await.unwrap();
    let touched = a.find_by_digest(&first.digest).await.unwrap().unwrap();
    assert_eq!(touched.last_used_at, Some(now + 5));

    // Revoke: only the owner's, once (the first time and reason stay).
    assert_eq!(
        a.revoke(OTHER, "1002", Revocation::Revoked, now + 10)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        a.revoke(WALLET, "9999", Revocation::Revoked, now + 10)
            .await
            .unwrap(),
        None
    );
    let revoked = a
        .revoke(WALLET, "1002", Revocation::Revoked, now + 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        revoked,
        PatRecord {
            revoked_at: Some(now + 10),
            revoked_because: Some(Revocation::Revoked),
            ..second.clone()
        }
    );
    let again = b
        .revoke(WALLET, "1002", Revocation::FamilyReuse, now + 20)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, revoked);

    // Rotate: an active token of the wallet, once.
    let successor = pat("1003", WALLET, "fam1", now + 30);
    assert_eq!(
        b.rotate("1002", pat("1099", WALLET, "fam2", now), now + 30)
            .await
            .unwrap(),
        RotateOutcome::NotActive,
        "a revoked token does not rotate"
    );
    assert_eq!(
        b.rotate("1001", pat("1098", OTHER, "fam1", now), now + 30)
            .await
            .unwrap(),
        RotateOutcome::NotActive,
        "another wallet's token does not rotate"
    );
    assert_eq!(
        b.rotate("1001", successor.clone(), now + 86_400)
            .await
            .unwrap(),
        RotateOutcome::NotActive,
        "an expired token does not rotate"
    );
    assert_eq!(
        b.rotate("1001", successor.clone(), now + 30).await.unwrap(),
        RotateOutcome::Rotated
    );
    let retired = a.find_by_digest(&first.digest).await.unwrap().unwrap();
    assert_eq!(retired.revoked_at, Some(now + 30));
    assert_eq!(retired.revoked_because, Some(Revocation::Rotated));
    assert_eq!(
        a.find_by_digest(&successor.digest).await.unwrap(),
        Some(successor.clone())
    );
    assert_eq!(
        a.list(WALLET)
            .await
            .unwrap()
            .iter()
            .map(|record| record.id.as_str())
            .collect::<Vec<_>>(),
        ["1001", "1002", "1003"]
    );

    // Racing rotations of one token: exactly one wins.
    let rotated = race(&a, &b, RotateOutcome::Rotated, |store, i| {
        let new = pat(&format!("3{i:03}"), WALLET, "fam1", now + 40);
        async move { store.rotate("1003", new, now + 40).await.unwrap() }
    })
    .await;
    assert_eq!(rotated, 1);

    // Revoking the family revokes its active member; retired ones keep their reason.
    a.revoke_family("fam1", now + 50).await.unwrap();
    let family: Vec<PatRecord> = b
        .list(WALLET)
        .await
        .unwrap()
        .into_iter()
        .filter(|record| record.family_id == "fam1")
        .collect();
    assert_eq!(family.len(), 3);
    assert!(family.iter().all(|record| !record.is_active(now + 50)));
    let mut reasons: Vec<_> = family
        .iter()
        .map(|record| (record.revoked_at, record.revoked_because))
        .collect();
    reasons.sort_by_key(|(at, _)| *at);
    assert_eq!(
        reasons,
        [
            (Some(now + 30), Some(Revocation::Rotated)),
            (Some(now + 40), Some(Revocation::Rotated)),
            (Some(now + 50), Some(Revocation::FamilyReuse)),
        ]
    );
    // Other families are untouched.
    assert!(a.list(OTHER).await.unwrap()[0].is_active(now + 50));
}

// Five records with their digest index, two wallet lists, three families.
contract_tests!(
    pats_in_memory,
    pats_in_redis,
    pat_contract,
    InMemoryPatStore::new(),
    RedisPatStore::new,
    keys: 15
);

// ------------------------------------------------------------------- sessions

fn secrets(tag: &str, now: u64) -> SessionSecrets {
    SessionSecrets {
        access_digest: SecretDigest::of(&format!("access {tag} {now}")),
        access_expires_at: now + 3_600,
        refresh_digest: SecretDigest::of(&format!("refresh {tag} {now}")),
        refresh_expires_at: now + 7 * 86_400,
    }
}

async fn session_contract<S: SessionStore + ?Sized>(a: Arc<S>, b: Arc<S>) {
    let now = now_secs();
    let mine = SessionRecord {
        wallet: WALLET,
        secrets: secrets("mine", now),
    };
    let second = SessionRecord {
        wallet: WALLET,
        secrets: secrets("second", now),
    };
    let theirs = SessionRecord {
        wallet: OTHER,
        secrets: secrets("theirs", now),
    };
    a.insert(mine.clone()).await.unwrap();
    b.insert(second.clone()).await.unwrap();
    a.insert(theirs.clone()).await.unwrap();
    assert_eq!(
        b.find_by_access(&mine.secrets.access_digest).await.unwrap(),
        Some(mine.clone())
    );
    assert_eq!(
        b.find_by_access(&SecretDigest::of("unknown"))
            .await
            .unwrap(),
        None
    );

    // A refresh cookie rotates once, on whichever replica; the old cookies stop.
    let fresh = secrets("fresh", now);
    assert_eq!(
        b.rotate(&mine.secrets.refresh_digest, fresh.clone(), now + 1)
            .await
            .unwrap(),
        Some(WALLET)
    );
    assert_eq!(
        a.find_by_access(&mine.secrets.access_digest).await.unwrap(),
        None
    );
    assert_eq!(
        a.find_by_access(&fresh.access_digest).await.unwrap(),
        Some(SessionRecord {
            wallet: WALLET,
            secrets: fresh.clone(),
        })
    );
    assert_eq!(
        a.rotate(&mine.secrets.refresh_digest, secrets("again", now), now + 2)
            .await
            .unwrap(),
        None
    );
    // An expired refresh cookie buys nothing.
    assert_eq!(
        a.rotate(
            &second.secrets.refresh_digest,
            secrets("late", now),
            second.secrets.refresh_expires_at
        )
        .await
        .unwrap(),
        None
    );

    // Racing refreshes of one cookie: exactly one wins.
    let refresh = fresh.refresh_digest;
    let won = race(&a, &b, Some(WALLET), |store, i| {
        let new = secrets(&format!("racer {i}"), now);
        async move { store.rotate(&refresh, new, now + 3).await.unwrap() }
    })
    .await;
    assert_eq!(won, 1);

    // Sign-out everywhere removes every session of the wallet, only of it.
    b.remove_wallet(WALLET).await.unwrap();
    assert_eq!(
        a.find_by_access(&second.secrets.access_digest)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        a.rotate(
            &second.secrets.refresh_digest,
            secrets("gone", now),
            now + 4
        )
        .await
        .unwrap(),
        None
    );
    assert_eq!(
        a.find_by_access(&theirs.secrets.access_digest)
            .await
            .unwrap(),
        Some(theirs)
    );
}

// Only the other wallet's session is left: record, refresh index, wallet set.
contract_tests!(
    sessions_in_memory,
    sessions_in_redis,
    session_contract,
    InMemorySessionStore::new(),
    RedisSessionStore::new,
    keys: 3
);

// ---------------------------------------------------------- JWT revocations

async fn revocation_contract<S: RevocationCheck + ?Sized>(a: Arc<S>, b: Arc<S>) {
    let now = now_secs();
    let until = now + 900;
    a.revoke("pat_1", until).await.unwrap();
    assert!(b.is_revoked("pat_1", now).await.unwrap());
    assert!(b.is_revoked("pat_1", until - 1).await.unwrap());
    assert!(!b.is_revoked("pat_1", until).await.unwrap());
    assert!(!a.is_revoked("pat_2", now).await.unwrap());

    // A later deadline extends; an earlier one never shortens.
    b.revoke("pat_1", until - 600).await.unwrap();
    assert!(a.is_revoked("pat_1", until - 1).await.unwrap());
    b.revoke("pat_1", until + 600).await.unwrap();
    assert!(a.is_revoked("pat_1", until + 599).await.unwrap());
    assert!(!a.is_revoked("pat_1", until + 600).await.unwrap());
}

contract_tests!(
    revocations_in_memory,
    revocations_in_redis,
    revocation_contract,
    InMemoryRevocations::new(),
    RedisRevocations::new,
    keys: 1
);

// ------------------------------------------------------ behind trait objects

/// The data API's stores as its server holds them: one `Arc<dyn …>` per
/// seam, memory or Redis chosen at start (`examples/data_api/stores.rs`).
struct DynStores {
    nonces: Arc<dyn NonceStore>,
    pats: Arc<dyn PatStore>,
    sessions: Arc<dyn SessionStore>,
    revocations: Arc<dyn RevocationCheck>,
}

impl DynStores {
    fn in_memory() -> Self {
        Self {
            nonces: Arc::new(InMemoryNonceStore::new()),
            pats: Arc::new(InMemoryPatStore::new()),
            sessions: Arc::new(InMemorySessionStore::new()),
            revocations: Arc::new(InMemoryRevocations::new()),
        }
    }

    fn redis(conn: RedisConnection) -> Self {
        Self {
            nonces: Arc::new(RedisSiweNonceStore::new(conn.clone())),
            pats: Arc::new(RedisPatStore::new(conn.clone())),
            sessions: Arc::new(RedisSessionStore::new(conn.clone())),
            revocations: Arc::new(RedisRevocations::new(conn)),
        }
    }

    fn share(&self) -> Self {
        Self {
            nonces: Arc::clone(&self.nonces),
            pats: Arc::clone(&self.pats),
            sessions: Arc::clone(&self.sessions),
            revocations: Arc::clone(&self.revocations),
        }
    }
}

/// Every suite above, called through the trait objects (`S = dyn …`).
async fn every_contract_through_trait_objects(a: DynStores, b: DynStores) {
    nonce_contract(a.nonces, b.nonces).await;
    pat_contract(a.pats, b.pats).await;
    session_contract(a.sessions, b.sessions).await;
    revocation_contract(a.revocations, b.revocations).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trait_objects_in_memory() {
    let stores = DynStores::in_memory();
    every_contract_through_trait_objects(stores.share(), stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trait_objects_in_redis() {
    let config = shared_config()
        .with_prefix(redis_support::unique_prefix("trait_objects"))
        .with_timeout(Duration::from_secs(2));
    let open = || RedisConnection::open(&config).expect("Redis URL");
    every_contract_through_trait_objects(DynStores::redis(open()), DynStores::redis(open())).await;
    // The four suites' keys (3 + 15 + 3 + 1), each with an expiry.
    assert_eq!(Keys(open()).assert_all_expire().await, 22);
}

// ------------------------------------------------------------------- failure

/// Redis stopped: every backend answers a store error within its timeout
/// (never a decision); Redis back on the same port: they answer again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_is_a_store_error_and_service_resumes() {
    let mut server = redis_support::RedisServer::start();
    let config = RedisConfig::new(server.url())
        .with_prefix("failure")
        .with_timeout(Duration::from_millis(250));
    let conn = RedisConnection::open(&config).unwrap();
    let nonces = RedisSiweNonceStore::new(conn.clone());
    let pats = RedisPatStore::new(conn.clone());
    let sessions = RedisSessionStore::new(conn.clone());
    let revocations = RedisRevocations::new(conn);
    let now = now_secs();
    let nonce = nonces.issue(now * 1000, now * 1000 + 60_000).await.unwrap();

    server.stop();
    assert!(matches!(
        nonces.consume(&nonce, now * 1000).await,
        Err(NonceStoreError::Backend(_))
    ));
    assert!(matches!(
        nonces.issue(now * 1000, now * 1000 + 60_000).await,
        Err(NonceStoreError::Backend(_))
    ));
    assert!(pats.find_by_digest(&SecretDigest::of("x")).await.is_err());
    assert!(pats.insert(pat("1", WALLET, "f", now)).await.is_err());
    assert!(
        sessions
            .find_by_access(&SecretDigest::of("x"))
            .await
            .is_err()
    );
    assert!(revocations.is_revoked("pat_1", now).await.is_err());

    let _restarted = redis_support::RedisServer::start_on(server.port());
    // The connection reconnects on the next command; the first may still see
    // the broken socket.
    let mut answered = None;
    for _ in 0..20 {
        if let Ok(found) = nonces.consume("NeverIssued123456", now * 1000).await {
            answered = Some(found);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answered, Some(NonceConsumption::Unknown));
    pats.insert(pat("1", WALLET, "f", now)).await.unwrap();
    assert_eq!(pats.list(WALLET).await.unwrap().len(), 1);
    assert!(!revocations.is_revoked("pat_1", now).await.unwrap());
}

/// A record that does not read back (another writer, a hand edit) is a store
/// error, which the routes answer 503, never a decision about the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_record_is_a_store_error() {
    // Two replicas, each with its PAT (.0) and session (.1) store.
    let (a, b, keys) = redis_pair("corrupted", |conn| {
        (
            RedisPatStore::new(conn.clone()),
            RedisSessionStore::new(conn),
        )
    });
    let now = now_secs();
    let record = pat("4001", WALLET, "fam4", now);
    a.0.insert(record.clone()).await.unwrap();
    let session = SessionRecord {
        wallet: WALLET,
        secrets: secrets("corrupted", now),
    };
    b.1.insert(session.clone()).await.unwrap();
    // On a Redis Cluster PATs and sessions each have their group's slot.
    let pat_key = keys.0.grouped_key("pat", "pat", "4001");
    let session_key = keys.0.grouped_key(
        "session",
        "session",
        &alloy_primitives::hex::encode(session.secrets.access_digest.as_bytes()),
    );
    for (key, field, value) in [(pat_key, "exp", "soon"), (session_key, "w", "not a wallet")] {
        let () = keys
            .0
            .call("corrupt", |mut c| async move {
                redis::cmd("HSET")
                    .arg(key)
                    .arg(field)
                    .arg(value)
                    .query_async(&mut c)
                    .await
            })
            .await
            .unwrap();
    }
    assert!(b.0.find_by_digest(&record.digest).await.is_err());
    assert!(a.0.list(WALLET).await.is_err());
    assert!(
        a.1.find_by_access(&session.secrets.access_digest)
            .await
            .is_err()
    );
}

/// With `with_wait_replicas`, a SIWE nonce spent and a revocation are done
/// only once that many replicas acknowledged them: on a primary with one
/// replica, waiting for one works and waiting for two is a store failure
/// (the data API answers it 503 with Retry-After).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spent_nonces_and_revocations_wait_for_the_replicas_asked_for() {
    let primary = redis_support::RedisServer::start();
    let _replica = redis_support::RedisServer::start_replica_of(primary.port());
    let open = |replicas| {
        let config = RedisConfig::new(primary.url())
            .with_prefix(redis_support::unique_prefix("wait_replicas"))
            // A busy test machine's replica may take longer than 250 ms.
            .with_timeout(Duration::from_secs(2))
            .with_wait_replicas(replicas);
        RedisConnection::open(&config).unwrap()
    };
    let now_ms = now_secs() * 1000;
    for (replicas, acknowledged) in [(1, true), (2, false)] {
        let conn = open(replicas);
        let nonces = RedisSiweNonceStore::new(conn.clone());
        nonces
            .insert("nonce-1", now_ms, now_ms + 60_000)
            .await
            .unwrap();
        let consumed = nonces.consume("nonce-1", now_ms).await;
        let revoked = RedisRevocations::new(conn)
            .revoke("pat-1", now_secs() + 60)
            .await;
        if acknowledged {
            assert_eq!(consumed.unwrap(), NonceConsumption::Fresh);
            revoked.unwrap();
        } else {
            assert!(
                matches!(consumed, Err(NonceStoreError::Backend(_))),
                "{consumed:?}"
            );
            let error = walletgate::error_chain(&revoked.unwrap_err());
            assert!(error.contains("replicas"), "{error}");
        }
    }
}

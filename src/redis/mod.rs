//! Redis backends for the storage seams (feature `redis`).
//!
//! Several replicas of a service share their state through one Redis: every
//! backend here implements the same trait as its in-memory default (see
//! [`crate::store`]) over one [`RedisConnection`]. The connection is a
//! `redis::aio::ConnectionManager` on one Redis, or redis-rs's cluster client
//! on a Redis Cluster ([`RedisConfig::cluster`]): cheap to clone, multiplexed,
//! reconnecting on its own after Redis comes back (on a cluster, following a
//! failover to the promoted replica). Every call is bounded by the configured
//! timeout, and a Redis that cannot answer in time is a [`StoreError`], which
//! the layers answer with a 503 and never turn into a decision (a payment is
//! neither served free nor charged twice).
//!
//! Keys are namespaced by a prefix (`walletgate` by default), so several
//! services can share one Redis: `{prefix}:{seam}:{id}`.
//!
//! On a Redis Cluster every script must touch keys of one slot. Keys a
//! script reads or writes together carry a hash tag naming their group
//! (`{prefix}:{group}:{seam}:{id}`, see [`RedisConnection::grouped_key`]): API
//! keys, PATs, sessions and the development ledger (with the replay keys of
//! a nonce store paired to it) each live in one slot; every other key is
//! alone in its scripts and spreads over the shards by its whole name. On one
//! Redis (standalone) the layout is unchanged, without tags.
//!
//! Payments (with the `x402` feature): [`RedisNonceStore`] (claims, releases,
//! settling and spent authorizations), [`RedisAnswerStore`] (paid answers kept
//! for a resend) and [`RedisLedger`] (the development ledger); with
//! `evm-settler`, `RedisSettlementRecords` (what the on-chain settler
//! broadcast, written before it is sent). Paired
//! with [`RedisNonceStore::with_ledger_prefetch`], a paid request costs two round
//! trips: the claim, which also reads what the ledger's check needs, and the
//! transfer, which also writes the spent record.

#[cfg(feature = "x402")]
mod answers;
#[cfg(feature = "siwx")]
mod entitlements;
#[cfg(feature = "x402")]
mod ledger;
#[cfg(feature = "x402")]
mod replay;
#[cfg(feature = "evm-settler")]
mod settlement_records;
#[cfg(feature = "evm-settler")]
mod settler_nonces;
#[cfg(feature = "x402")]
mod spent;

#[cfg(feature = "x402")]
pub use answers::RedisAnswerStore;
#[cfg(feature = "siwx")]
pub use entitlements::RedisEntitlementStore;
#[cfg(feature = "x402")]
pub use ledger::RedisLedger;
#[cfg(feature = "x402")]
pub use replay::RedisNonceStore;
#[cfg(feature = "evm-settler")]
pub use settlement_records::RedisSettlementRecords;
#[cfg(feature = "evm-settler")]
pub use settler_nonces::RedisNonceAllocator;

#[cfg(any(
    feature = "siwe",
    feature = "wallet-jwt",
    feature = "api-key",
    feature = "evm-settler"
))]
mod lua;
#[cfg(feature = "tokens")]
mod pats;
#[cfg(feature = "tokens")]
mod records;
#[cfg(feature = "wallet-jwt")]
mod revocation;
#[cfg(feature = "tokens")]
mod sessions;
#[cfg(feature = "siwe")]
mod siwe;

#[cfg(feature = "tokens")]
pub use pats::RedisPatStore;
#[cfg(feature = "wallet-jwt")]
pub use revocation::RedisRevocations;
#[cfg(feature = "tokens")]
pub use sessions::RedisSessionStore;
#[cfg(feature = "siwe")]
pub use siwe::RedisSiweNonceStore;
#[cfg(feature = "api-key")]
mod api_key;
#[cfg(feature = "free-tier")]
mod free_tier;
#[cfg(feature = "api-key")]
mod key_store;

#[cfg(feature = "api-key")]
pub use api_key::RedisQuotas;
#[cfg(feature = "free-tier")]
pub use free_tier::RedisFreeTier;
#[cfg(feature = "api-key")]
pub use key_store::RedisKeyStore;

/// The tests' redis-server (`WALLETGATE_TEST_REDIS_URL`, or one started once
/// per test binary), shared with the integration tests.
#[cfg(test)]
#[path = "../../tests/redis_support/mod.rs"]
#[allow(unreachable_pub, clippy::all)]
mod redis_support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use crate::store::StoreError;

/// How a Redis setting names its servers ([`RedisConfig::from_setting`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisMode {
    /// One Redis (or a primary behind one address).
    #[default]
    Standalone,
    /// A Redis Cluster: the URL is a comma-separated list of seed nodes.
    Cluster,
}

impl std::str::FromStr for RedisMode {
    type Err = RedisUrlError;

    /// `standalone` (or empty) or `cluster`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "" | "standalone" => Ok(Self::Standalone),
            "cluster" => Ok(Self::Cluster),
            _ => Err(RedisUrlError::UnknownMode),
        }
    }
}

/// Why a Redis setting names no Redis ([`RedisConfig::from_setting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisUrlError {
    /// Not a `redis://` or `rediss://` URL (or, standalone, several).
    NotRedisUrl {
        /// Whether a list of cluster seeds was expected.
        cluster: bool,
    },
    /// Cluster seeds mixing `redis://` and `rediss://`.
    MixedSchemes,
    /// `rediss://` in a build without feature `redis-tls`.
    TlsNotBuilt,
    /// A mode other than `standalone` or `cluster`.
    UnknownMode,
}

impl std::fmt::Display for RedisUrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotRedisUrl { cluster: true } => {
                "expected seed URLs redis://host:port, comma-separated"
            }
            Self::NotRedisUrl { cluster: false } => {
                "expected redis://host:port[/db] (several URLs need REDIS_MODE=cluster)"
            }
            Self::MixedSchemes => "mixes redis:// and rediss:// seeds",
            Self::TlsNotBuilt => {
                "rediss:// needs the build's `redis-tls` feature (--features redis-tls)"
            }
            Self::UnknownMode => "expected standalone or cluster",
        })
    }
}

impl std::error::Error for RedisUrlError {}

/// Where the Redis is and how long to wait for it.
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    /// Seed nodes of a Redis Cluster; `None`: one Redis at `url`.
    cluster_seeds: Option<Vec<String>>,
    prefix: String,
    timeout: Duration,
    /// Replicas a write that guards money or replay waits for (`WAIT`); 0: none.
    wait_replicas: u32,
    /// PEM roots that replace Mozilla's for `rediss://` (a private CA).
    #[cfg(feature = "redis-tls")]
    ca_certificates: Option<Vec<u8>>,
}

impl RedisConfig {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "walletgate";
    /// The default bound on one call (connect or command).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

    /// A Redis at `url` (`redis://host:port/db`, or `rediss://` over TLS with
    /// feature `redis-tls`), with the default prefix and timeout.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            cluster_seeds: None,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            wait_replicas: 0,
            #[cfg(feature = "redis-tls")]
            ca_certificates: None,
        }
    }

    /// A Redis Cluster reached through `seeds` (node URLs, `redis://host:port`
    /// or `rediss://` with feature `redis-tls`; any reachable node is
    /// enough, the client learns the others and follows failovers). The
    /// seeds are checked at [`RedisConnection::open`]: an empty list, or one
    /// mixing `redis://` and `rediss://`, is refused there.
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Self {
        let seeds: Vec<String> = seeds.into_iter().map(Into::into).collect();
        Self {
            cluster_seeds: Some(seeds),
            ..Self::new(String::new())
        }
    }

    /// Whether this is a Redis Cluster ([`Self::cluster`]).
    pub fn is_cluster(&self) -> bool {
        self.cluster_seeds.is_some()
    }

    /// The Redis a setting names (a server's `*_REDIS_URL`, a command's
    /// `--redis-url`): one `redis://host:port[/db]` (`rediss://` over TLS
    /// with feature `redis-tls`) or, in [`RedisMode::Cluster`], a
    /// comma-separated list of seed nodes, all of one scheme.
    pub fn from_setting(urls: &str, mode: RedisMode) -> Result<Self, RedisUrlError> {
        let cluster = mode == RedisMode::Cluster;
        let seeds: Vec<&str> = if cluster {
            urls.split(',').map(str::trim).collect()
        } else {
            vec![urls.trim()]
        };
        for seed in &seeds {
            let scheme = seed.starts_with("redis://") || seed.starts_with("rediss://");
            if !scheme || seed.contains(',') {
                return Err(RedisUrlError::NotRedisUrl { cluster });
            }
        }
        let tls = seeds[0].starts_with("rediss://");
        if seeds
            .iter()
            .any(|seed| seed.starts_with("rediss://") != tls)
        {
            return Err(RedisUrlError::MixedSchemes);
        }
        if tls && !cfg!(feature = "redis-tls") {
            return Err(RedisUrlError::TlsNotBuilt);
        }
        Ok(if cluster {
            Self::cluster(seeds)
        } else {
            Self::new(seeds[0])
        })
    }

    /// Trusts only the CA certificates in `pem` (one or more PEM blocks) for
    /// a `rediss://` URL, instead of Mozilla's roots: a Redis whose
    /// certificate a private CA signed. Checked when the connection opens.
    #[cfg(feature = "redis-tls")]
    #[must_use]
    pub fn with_ca_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_certificates = Some(pem.into());
        self
    }

    /// Namespaces every key under `prefix` (no trailing colon).
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Bounds every call to Redis; past it the call is a [`StoreError`].
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// After each write that guards money or replay (a payment's claim, its
    /// settling and spent records, the on-chain settler's records, a SIWE
    /// nonce spent, a revocation), waits until `replicas` replicas of the
    /// primary written to acknowledged it (Redis's `WAIT`, within the
    /// timeout); fewer is a [`StoreError`], as if Redis could not answer.
    /// A failover then cannot lose those writes unless every one of the
    /// replicas is lost too. Costs one round trip per such write; 0 (the
    /// default) waits for none. On a Redis Cluster the wait goes to the
    /// primary of the key written.
    #[must_use]
    pub fn with_wait_replicas(mut self, replicas: u32) -> Self {
        self.wait_replicas = replicas;
        self
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("RedisConfig")
            .field("cluster", &self.is_cluster())
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("wait_replicas", &self.wait_replicas)
            .finish_non_exhaustive()
    }
}

/// One shared, reconnecting connection to Redis, with the key prefix and the
/// call timeout every backend uses. Clones share the connection.
#[derive(Clone)]
pub struct RedisConnection {
    source: Source,
    prefix: Arc<str>,
    timeout: Duration,
    /// [`RedisConfig::with_wait_replicas`].
    wait_replicas: u32,
    /// Calls made through this connection and its clones.
    calls: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: it is never kept, so never printed.
        f.debug_struct("RedisConnection")
            .field("cluster", &self.is_cluster())
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisConnection {
    /// Opens the connection lazily: a service starts while Redis is down and
    /// its stores answer [`StoreError`] until Redis is reachable.
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// A `rediss://` URL needs feature `redis-tls`: without it the URL is
    /// refused here rather than failing on every call.
    pub fn open(config: &RedisConfig) -> Result<Self, StoreError> {
        let source = match &config.cluster_seeds {
            Some(seeds) => Source::Cluster(Arc::new(open_cluster(config, seeds)?)),
            None => Source::Standalone(open_manager(config)?),
        };
        Ok(Self {
            source,
            prefix: config.prefix.as_str().into(),
            timeout: config.timeout,
            wait_replicas: config.wait_replicas,
            calls: Arc::default(),
        })
    }

    /// Whether this connection is to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.source, Source::Cluster(_))
    }

    /// The prefix of a group of keys that scripts touch together:
    /// `{prefix}:{group}` on a Redis Cluster, so they share one hash slot
    /// (one shard runs the script); the bare prefix on one Redis (its layout
    /// is unchanged) or when the prefix carries a hash tag already (then
    /// every key shares that one slot).
    pub fn group(&self, group: &str) -> String {
        if !self.is_cluster() || has_hash_tag(&self.prefix) {
            return self.prefix.to_string();
        }
        format!("{}:{{{group}}}", self.prefix)
    }

    /// `{group}:{seam}:{id}` with [`group`](Self::group)'s prefix: a key of
    /// the slot its group's scripts run on.
    pub fn grouped_key(&self, group: &str, seam: &str, id: &str) -> String {
        format!("{}:{seam}:{id}", self.group(group))
    }
}

/// The reconnecting connection to one Redis at `config.url`, opened lazily.
fn open_manager(config: &RedisConfig) -> Result<ConnectionManager, StoreError> {
    let client = client(config)?;
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.timeout))
        .set_response_timeout(Some(config.timeout))
        // Reconnect attempts happen on the next command, not in a loop
        // that would hold a request past its timeout.
        .set_number_of_retries(1);
    ConnectionManager::new_lazy_with_config(client, manager_config)
        .map_err(|err| StoreError::new("Redis connection could not be set up").with_source(err))
}

/// Where a call's [`RedisLink`] comes from.
#[derive(Clone)]
enum Source {
    Standalone(ConnectionManager),
    Cluster(Arc<ClusterSource>),
}

impl Source {
    fn link(&self) -> RedisLink {
        RedisLink(match self {
            Self::Standalone(manager) => Link::Standalone(manager.clone()),
            Self::Cluster(cluster) => Link::Cluster(cluster.current()),
        })
    }

    /// A call failed or timed out.
    fn failed(&self) {
        if let Self::Cluster(cluster) = self {
            cluster.rediscover();
        }
    }
}

/// The cluster client and its current connection. redis-rs's cluster
/// connection follows `MOVED` answers, but when a primary dies it keeps
/// reconnecting to that address and never asks the survivors who took its
/// slots over: after a failed call the connection is replaced by a fresh one
/// that learns the topology from the seeds again (at most every
/// [`REDISCOVER_EVERY`]), so calls reach the promoted replica once the
/// cluster has promoted it, without a restart.
struct ClusterSource {
    client: redis::cluster::ClusterClient,
    config: redis::cluster::ClusterConfig,
    current: std::sync::Mutex<(ClusterConnection, std::time::Instant)>,
}

/// The shortest time between two rediscoveries of a cluster's topology.
const REDISCOVER_EVERY: Duration = Duration::from_millis(500);

impl ClusterSource {
    fn lock(&self) -> std::sync::MutexGuard<'_, (ClusterConnection, std::time::Instant)> {
        // Replaced whole under the lock: a poisoned one is still consistent.
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn current(&self) -> ClusterConnection {
        self.lock().0.clone()
    }

    fn rediscover(&self) {
        let mut current = self.lock();
        if current.1.elapsed() >= REDISCOVER_EVERY {
            let fresh = self
                .client
                .get_pending_async_connection_with_config(self.config.clone());
            *current = (fresh, std::time::Instant::now());
        }
    }
}

/// The cluster client on `seeds`, connecting in the background: like the
/// standalone connection, a service starts while the cluster is down.
fn open_cluster(config: &RedisConfig, seeds: &[String]) -> Result<ClusterSource, StoreError> {
    if seeds.is_empty() {
        return Err(StoreError::new("Redis Cluster needs at least one seed URL"));
    }
    let tls = uses_tls(&seeds[0]);
    if seeds.iter().any(|seed| uses_tls(seed) != tls) {
        return Err(StoreError::new(
            "Redis Cluster seeds mix redis:// and rediss://",
        ));
    }
    if tls && !cfg!(feature = "redis-tls") {
        return Err(StoreError::new(TLS_NEEDS_FEATURE));
    }
    #[cfg(feature = "redis-tls")]
    if tls {
        install_ring_provider();
    }
    let builder = redis::cluster::ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(config.timeout)
        .response_timeout(config.timeout)
        // A request never waits past the store timeout anyway: few retries,
        // short waits, so a slot that moved is followed within one call.
        .retries(2)
        .min_retry_wait(10)
        .max_retry_wait(100);
    #[cfg(feature = "redis-tls")]
    let builder = match &config.ca_certificates {
        Some(pem) => builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        }),
        None => builder,
    };
    let client = builder
        .build()
        .map_err(|err| StoreError::new("invalid Redis Cluster seed URLs").with_source(err))?;
    let cluster_config = redis::cluster::ClusterConfig::new()
        .set_connection_timeout(config.timeout)
        .set_response_timeout(config.timeout);
    let connection = client.get_pending_async_connection_with_config(cluster_config.clone());
    Ok(ClusterSource {
        client,
        config: cluster_config,
        current: std::sync::Mutex::new((connection, std::time::Instant::now())),
    })
}

/// Whether `key` has a Redis Cluster hash tag: a `{…}` with something inside.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// The handle a [`RedisConnection::call`] hands its closure: a clone of the
/// shared connection (one Redis, or a Redis Cluster), usable wherever
/// redis-rs takes an async connection (`query_async`, `invoke_async`).
#[derive(Clone)]
pub struct RedisLink(Link);

#[derive(Clone)]
enum Link {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Link::Standalone(_) => "RedisLink::Standalone",
            Link::Cluster(_) => "RedisLink::Cluster",
        })
    }
}

impl redis::aio::ConnectionLike for RedisLink {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match &mut self.0 {
            Link::Standalone(manager) => manager.req_packed_command(cmd),
            Link::Cluster(cluster) => cluster.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match &mut self.0 {
            Link::Standalone(manager) => manager.req_packed_commands(pipeline, offset, count),
            Link::Cluster(cluster) => cluster.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Link::Standalone(manager) => manager.get_db(),
            Link::Cluster(cluster) => cluster.get_db(),
        }
    }
}

impl RedisConnection {
    /// `{prefix}:{seam}:{id}`.
    pub fn key(&self, seam: &str, id: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + seam.len() + id.len() + 2);
        key.push_str(&self.prefix);
        key.push(':');
        key.push_str(seam);
        key.push(':');
        key.push_str(id);
        key
    }

    /// The configured key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether Redis answers now (`PING`, within the timeout): a readiness probe's question.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.call("ping", |mut c| async move {
            redis::cmd("PING").query_async::<()>(&mut c).await
        })
        .await
    }

    /// Round trips made so far through this connection and its clones (one
    /// per [`call`](Self::call): a command or a script), for metrics and for
    /// tests that count what a request costs.
    pub fn round_trips(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Runs one Redis call on a clone of the connection, bounded by the
    /// timeout; a Redis error or a timeout becomes a [`StoreError`] that
    /// names `what` (never a key or a value: they may hold digests of secrets).
    pub async fn call<T, F, Fut>(&self, what: &'static str, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(RedisLink) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.call_within(what, self.timeout, call).await
    }

    /// `SET key value EX ttl_secs` as one [`call`](Self::call) named `what`.
    #[cfg(feature = "x402")]
    pub(crate) async fn set_expiring<V>(
        &self,
        what: &'static str,
        key: String,
        value: V,
        ttl_secs: u64,
    ) -> Result<(), StoreError>
    where
        V: redis::ToRedisArgs + Send,
    {
        self.call(what, |mut c| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("EX")
                .arg(ttl_secs)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// `SET key value NX EX ttl_secs`: whether `key` was new (and is now set).
    #[cfg(feature = "x402")]
    pub(crate) async fn set_new_expiring<V>(
        &self,
        what: &'static str,
        key: String,
        value: V,
        ttl_secs: u64,
    ) -> Result<bool, StoreError>
    where
        V: redis::ToRedisArgs + Send,
    {
        let set: Option<String> = self
            .call(what, |mut c| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("EX")
                    .arg(ttl_secs)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(set.is_some())
    }

    /// Waits until the configured number of replicas
    /// ([`RedisConfig::with_wait_replicas`]) acknowledged this connection's
    /// writes so far, `key`'s among them: Redis's `WAIT`, on a cluster sent to
    /// the primary of `key`'s slot (where the write went; redis-rs would send
    /// a keyless `WAIT` to every primary). Fewer acknowledgements within the
    /// timeout is a [`StoreError`] naming `what`, as a Redis that cannot
    /// answer. Nothing to wait for: `Ok` at once, no round trip.
    #[cfg(any(
        feature = "x402",
        feature = "siwe",
        feature = "wallet-jwt",
        feature = "tokens"
    ))]
    pub(crate) async fn replicated(&self, what: &'static str, key: &str) -> Result<(), StoreError> {
        let wanted = self.wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        // Redis waits half the timeout, leaving the rest for the answer's
        // way back and for Redis noticing the wait is over (its timers tick
        // every 100 ms by default): the call stays within the timeout, as
        // every call does (the connection's response timeout is that timeout
        // too). `WAIT n 0` would block for ever: at least a millisecond.
        let wait_ms = u64::try_from(self.timeout.as_millis() / 2)
            .unwrap_or(u64::MAX)
            .max(1);
        let slot = redis::cluster_routing::Slot::for_key(key);
        let acknowledged: u64 = self
            .call(what, |link| async move {
                let mut wait = redis::cmd("WAIT");
                wait.arg(wanted).arg(wait_ms);
                match link.0 {
                    Link::Standalone(mut manager) => wait.query_async(&mut manager).await,
                    Link::Cluster(mut cluster) => {
                        use redis::cluster_routing::{
                            Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
                        };
                        let primary = Route::with_slot(slot, SlotAddr::Master);
                        let routing =
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(primary));
                        let answer = cluster.route_command(wait, routing).await?;
                        redis::from_redis_value(answer).map_err(Into::into)
                    }
                }
            })
            .await?;
        if acknowledged < u64::from(wanted) {
            return Err(StoreError::new(what).with_source(TooFewReplicas {
                wanted,
                acknowledged,
            }));
        }
        Ok(())
    }

    /// [`call`](Self::call) bounded by `timeout` instead of the configured
    /// one: for background work no request waits on (a compensation that
    /// must outlast a stall of Redis).
    pub async fn call_within<T, F, Fut>(
        &self,
        what: &'static str,
        timeout: Duration,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(RedisLink) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let result = match tokio::time::timeout(timeout, call(self.source.link())).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(err)) => Err(StoreError::new(what).with_source(err)),
            Err(_) => {
                crate::metrics::count(crate::metrics::STORE_TIMEOUTS_TOTAL, [("store", "redis")]);
                Err(StoreError::new(what).with_source(TimedOut(timeout)))
            }
        };
        self.source.failed();
        result
    }
}

/// The client for `config.url`: plain, or TLS for `rediss://`.
/// The longest lifetime given to an entry (Redis refuses lifetimes past its range).
#[cfg(feature = "x402")]
const MAX_TTL_SECS: u64 = 365 * 24 * 3600;

/// Seconds from `clock`'s now until `unix_secs`: at least one (Redis refuses
/// zero), at most [`MAX_TTL_SECS`].
#[cfg(feature = "x402")]
fn ttl_secs(clock: &crate::clock::SharedClock, unix_secs: u64) -> u64 {
    unix_secs
        .saturating_sub(clock.now_unix_secs())
        .clamp(1, MAX_TTL_SECS)
}

fn client(config: &RedisConfig) -> Result<redis::Client, StoreError> {
    let tls = uses_tls(&config.url);
    if tls && !cfg!(feature = "redis-tls") {
        return Err(StoreError::new(TLS_NEEDS_FEATURE));
    }
    #[cfg(feature = "redis-tls")]
    if tls {
        install_ring_provider();
    }
    #[cfg(feature = "redis-tls")]
    if let Some(pem) = &config.ca_certificates {
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        };
        return redis::Client::build_with_tls(config.url.as_str(), certificates).map_err(|err| {
            StoreError::new("Redis CA certificates unusable (or the URL is not rediss://)")
                .with_source(err)
        });
    }
    redis::Client::open(config.url.as_str())
        .map_err(|err| StoreError::new("invalid Redis URL").with_source(err))
}

/// What [`RedisConnection::open`] answers for `rediss://` in a build without TLS.
const TLS_NEEDS_FEATURE: &str = "rediss:// needs walletgate's `redis-tls` feature";

/// `rediss://`: Redis over TLS.
fn uses_tls(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
}

/// redis-rs builds its rustls config from the process-wide provider: make it
/// `ring` (this crate's only one) unless the application chose one already.
#[cfg(feature = "redis-tls")]
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is set.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A Redis call that did not answer within the configured timeout.
#[derive(Debug)]
struct TimedOut(Duration);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redis did not answer within {} ms", self.0.as_millis())
    }
}

impl std::error::Error for TimedOut {}

/// A write fewer replicas acknowledged than [`RedisConfig::with_wait_replicas`] asks.
#[cfg(any(
    feature = "x402",
    feature = "siwe",
    feature = "wallet-jwt",
    feature = "tokens"
))]
#[derive(Debug)]
struct TooFewReplicas {
    wanted: u32,
    acknowledged: u64,
}

#[cfg(any(
    feature = "x402",
    feature = "siwe",
    feature = "wallet-jwt",
    feature = "tokens"
))]
impl std::fmt::Display for TooFewReplicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of the {} replicas asked for acknowledged the write in time",
            self.acknowledged, self.wanted
        )
    }
}

#[cfg(any(
    feature = "x402",
    feature = "siwe",
    feature = "wallet-jwt",
    feature = "tokens"
))]
impl std::error::Error for TooFewReplicas {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_namespaced_by_the_prefix() {
        let conn =
            RedisConnection::open(&RedisConfig::new("redis://127.0.0.1:1").with_prefix("gw1"))
                .unwrap();
        assert_eq!(conn.key("replay", "abc"), "gw1:replay:abc");
    }

    #[test]
    fn a_setting_names_one_redis_or_a_clusters_seeds_of_one_scheme() {
        let one = RedisConfig::from_setting("redis://127.0.0.1:6379/2", RedisMode::Standalone);
        assert!(!one.unwrap().is_cluster());
        let seeds = "redis://a:7000, redis://b:7001";
        assert!(
            RedisConfig::from_setting(seeds, RedisMode::Cluster)
                .unwrap()
                .is_cluster()
        );
        assert_eq!(
            RedisConfig::from_setting(seeds, RedisMode::Standalone).err(),
            Some(RedisUrlError::NotRedisUrl { cluster: false })
        );
        assert_eq!(
            RedisConfig::from_setting("http://a:1", RedisMode::Cluster).err(),
            Some(RedisUrlError::NotRedisUrl { cluster: true })
        );
        assert_eq!(
            RedisConfig::from_setting("redis://a:1,rediss://b:2", RedisMode::Cluster).err(),
            Some(RedisUrlError::MixedSchemes)
        );
        assert_eq!("cluster".parse(), Ok(RedisMode::Cluster));
        assert_eq!("".parse(), Ok(RedisMode::Standalone));
        assert_eq!(
            "sentinel".parse::<RedisMode>(),
            Err(RedisUrlError::UnknownMode)
        );
    }

    #[tokio::test]
    async fn an_unreachable_redis_is_a_store_error_within_the_timeout() {
        // Port 1 on loopback refuses at once; the call must fail, not hang.
        let config =
            RedisConfig::new("redis://127.0.0.1:1").with_timeout(Duration::from_millis(200));
        let conn = RedisConnection::open(&config).unwrap();
        let result: Result<String, _> = conn
            .call("ping", |mut c| async move {
                redis::cmd("PING").query_async(&mut c).await
            })
            .await;
        let err = result.unwrap_err();
        assert_eq!(err.to_string(), "ping");
    }

    #[tokio::test]
    async fn rediss_without_the_tls_feature_is_refused_at_open_naming_the_feature() {
        let opened = RedisConnection::open(&RedisConfig::new("rediss://127.0.0.1:1"));
        if cfg!(feature = "redis-tls") {
            opened.unwrap();
        } else {
            let err = opened.unwrap_err().to_string();
            assert!(err.contains("`redis-tls`"), "{err}");
        }
        assert!(uses_tls("REDISS://host:6380"));
        assert!(!uses_tls("redis://host:6379"));
    }

    #[cfg(feature = "redis-tls")]
    async fn ping(config: &RedisConfig) -> Result<String, StoreError> {
        let conn = RedisConnection::open(config)?;
        conn.call("ping", |mut c| async move {
            redis::cmd("PING").query_async(&mut c).await
        })
        .await
    }

    #[cfg(feature = "redis-tls")]
    #[tokio::test]
    async fn rediss_reaches_a_tls_redis_whose_certificate_a_private_ca_signed() {
        let (server, ca_pem) = redis_support::RedisServer::start_tls();
        let trusted = RedisConfig::new(server.tls_url())
            .with_ca_certificates(ca_pem)
            .with_timeout(Duration::from_secs(2));
        assert_eq!(ping(&trusted).await.unwrap(), "PONG");
        // Mozilla's roots do not know the test CA: the handshake fails.
        let untrusted = RedisConfig::new(server.tls_url()).with_timeout(Duration::from_secs(2));
        assert!(ping(&untrusted).await.is_err());
        // The plain scheme on the TLS port gets no answer either.
        let plain = RedisConfig::new(server.url()).with_timeout(Duration::from_millis(500));
        assert!(ping(&plain).await.is_err());
    }

    /// A Redis Cluster connection that never connects (no node listens on
    /// port 1): enough to build keys.
    fn cluster_conn(prefix: &str) -> RedisConnection {
        RedisConnection::open(&RedisConfig::cluster(["redis://127.0.0.1:1"]).with_prefix(prefix))
            .unwrap()
    }

    fn slot(key: &str) -> u16 {
        // CRC16/XMODEM of the hash tag (or the whole key) modulo 16384, as
        // Redis Cluster computes it; checked against redis-rs's below.
        let tagged = key
            .find('{')
            .and_then(|open| {
                let rest = &key[open + 1..];
                rest.find('}')
                    .filter(|&len| len > 0)
                    .map(|len| &rest[..len])
            })
            .unwrap_or(key);
        let mut crc: u16 = 0;
        for byte in tagged.bytes() {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc % 16384
    }

    /// Asserts every key of one script hashes to one slot.
    #[track_caller]
    fn one_slot(script: &str, keys: &[String]) {
        let slots: Vec<u16> = keys.iter().map(|key| slot(key)).collect();
        assert!(
            slots.windows(2).all(|pair| pair[0] == pair[1]),
            "{script}: keys {keys:?} hash to slots {slots:?}"
        );
    }

    #[test]
    fn the_slot_function_is_redis_clusters() {
        // Redis's documented example, its hash-tag rules, and redis-rs's routing.
        assert_eq!(slot("123456789"), 0x31c3);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        // An empty tag hashes the whole key; a tag ends at the first `}`.
        assert_ne!(slot("foo{}{bar}"), slot("foo{}{bar}x"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        for key in [
            "walletgate:x402-replay:abc",
            "p:{pat}:pat:1",
            "{a}b",
            "x{}y",
            "foo{{bar}}",
        ] {
            assert_eq!(
                redis::cluster_routing::Slot::new(slot(key)),
                Some(redis::cluster_routing::Slot::for_key(key)),
                "{key}"
            );
        }
    }

    #[tokio::test]
    async fn groups_are_tagged_only_on_a_cluster_and_only_once() {
        let standalone = RedisConnection::open(&RedisConfig::new("redis://127.0.0.1:1")).unwrap();
        assert_eq!(standalone.group("pat"), "walletgate");
        assert_eq!(
            standalone.grouped_key("pat", "pat", "1"),
            "walletgate:pat:1"
        );
        let cluster = cluster_conn("walletgate");
        assert!(cluster.is_cluster());
        assert_eq!(cluster.group("pat"), "walletgate:{pat}");
        assert_eq!(
            cluster.grouped_key("pat", "pat", "1"),
            "walletgate:{pat}:pat:1"
        );
        // A prefix with its own hash tag puts every key in its slot already.
        assert_eq!(cluster_conn("{gw}").group("pat"), "{gw}");
        assert_eq!(cluster_conn("gw{}").group("pat"), "gw{}:{pat}");
    }

    #[test]
    fn a_cluster_needs_seeds_of_one_scheme() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _inside = runtime.enter();
        let empty = RedisConnection::open(&RedisConfig::cluster(Vec::<String>::new()));
        assert!(empty.unwrap_err().to_string().contains("seed"));
        let mixed = RedisConnection::open(&RedisConfig::cluster([
            "redis://127.0.0.1:1",
            "rediss://127.0.0.1:2",
        ]));
        assert!(mixed.unwrap_err().to_string().contains("mix"));
    }

    /// Every script's keys, as the stores build them on a cluster, hash to
    /// one slot: each script runs on one shard (no `CROSSSLOT`). Scripts that
    /// derive their keys from the group's prefix in Lua are checked on the
    /// keys they derive (the names below follow their Lua).
    #[tokio::test]
    async fn every_scripts_keys_hash_to_one_slot_on_a_cluster() {
        let conn = cluster_conn("walletgate");
        // Scripts given one key (free tier, API-key quotas, SIWE nonces,
        // revocations, answers, replay without a ledger) and the settlement
        // records' one key per call: nothing to share.
        for (group, derived) in [
            ("api_key", vec!["api_key:0f0f", "api_key_ids"]),
            (
                "pat",
                vec![
                    "pat:id1",
                    "pat-digest:0f0f",
                    "pat-wallet:0xab",
                    "pat-family:f1",
                ],
            ),
            (
                "session",
                vec![
                    "session:0f0f",
                    "session-refresh:0e0e",
                    "session-wallet:0xab",
                ],
            ),
        ] {
            let prefix = conn.group(group);
            let mut keys = vec![conn.routing_key(group)];
            keys.extend(derived.iter().map(|name| format!("{prefix}:{name}")));
            one_slot(group, &keys);
        }
        #[cfg(feature = "x402")]
        {
            use alloy_primitives::{Address, B256};
            let ledger = RedisLedger::new(conn.clone());
            let store =
                RedisNonceStore::new(conn.clone(), std::sync::Arc::new(crate::clock::SystemClock))
                    .with_ledger_prefetch(&ledger);
            let (payer, payee, nonce) = (
                Address::repeat_byte(1),
                Address::repeat_byte(2),
                B256::repeat_byte(3),
            );
            let key = crate::x402::server::AuthorizationKey::new(
                &crate::x402::wire::Network::base_sepolia(),
                payer,
                nonce,
            );
            let replay = store.redis_key(&key);
            let (from, to, used) = (
                ledger.balance_key(payer),
                ledger.balance_key(payee),
                ledger.used_key(payer, nonce),
            );
            let settlements = conn.grouped_key(ledger::GROUP, "x402-ledger", "settlements");
            let unused = conn.grouped_key(ledger::GROUP, "x402-ledger", "unused");
            one_slot(
                "replay claim and peek",
                &[replay.clone(), from.clone(), used.clone()],
            );
            one_slot("ledger check", &[from.clone(), used.clone()]);
            one_slot(
                "ledger transfer",
                &[
                    from.clone(),
                    to.clone(),
                    used.clone(),
                    settlements.clone(),
                    replay,
                ],
            );
            one_slot(
                "ledger transfer, no paired store",
                &[from, to, used, settlements, unused],
            );
            // Without a ledger a replay key stands alone, spread by its name.
            let alone =
                RedisNonceStore::new(conn.clone(), std::sync::Arc::new(crate::clock::SystemClock));
            assert!(!has_hash_tag(&alone.redis_key(&key)));
        }
    }

    #[test]
    fn debug_never_shows_the_url() {
        let config = RedisConfig::new("redis://:hunter2@127.0.0.1:1");
        let shown = format!("{config:?}");
        assert!(shown.contains("walletgate"));
        assert!(!shown.contains("hunter2"));
    }
}

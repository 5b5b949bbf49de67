//! The data API's configuration: embedded defaults, overridable from the
//! environment (`DATA_API_*`). Parsing only: `main.rs` builds from it.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `DATA_API_LISTEN` | `127.0.0.1:8080` | listen address |
//! | `DATA_API_ORIGIN` | `http://` + the bound address | this server's public origin: JWT `iss` and `aud`, the SIWE domain and URI (set it behind a proxy or on a wildcard bind) |
//! | `DATA_API_KEY` | generated | the development API key (with Redis, keys from `data_api keys create` are accepted too) |
//! | `DATA_API_DRAIN_SECS` | `30` | on SIGTERM/SIGINT: how long requests in flight may take before the server exits 1 anyway (open `/mcp` streams are closed at once) |
//! | `DATA_API_SIWE_DOMAIN` | the origin's authority | SIWE `domain` to accept |
//! | `DATA_API_SIWE_URI` | the origin | SIWE `URI` to accept |
//! | `DATA_API_SIWE_CHAIN_ID` | `1` | SIWE `Chain ID` to accept |
//! | `DATA_API_JWT_LIFETIME_SECS` | `900` | wallet JWT lifetime |
//! | `DATA_API_KEY_PER_MINUTE` | `600` | requests per minute of the API key, and of issued keys without their own quota |
//! | `DATA_API_SIGNING_KEY_FILE` | none | the Ed25519 key that signs JWTs: a 32-byte seed or a PKCS#8 PEM (required with Redis: every replica signs with it) |
//! | `DATA_API_PREVIOUS_SIGNING_KEY_FILE` | none | the key rotated out (same formats): its JWTs still verify and it stays in the JWKS, but it signs nothing; drop it once the longest JWT it signed has expired |
//! | `DATA_API_CORS_ORIGINS` | none | comma-separated browser origins (`https://app.example`) allowed to call the API with a key or token (no cookies); none: no CORS |
//! | `DATA_API_TRUSTED_PROXIES` | none | comma-separated CIDRs of proxies whose forwarding header names the client (the access log's `client`); without them the socket peer is the client |
//! | `DATA_API_FORWARDED_HEADER` | `x-forwarded-for` | the header those proxies write: `x-forwarded-for` or `forwarded` (RFC 7239) |
//! | `DATA_API_ACCESS_LOG` | standard error | file for the log (access lines and the layers' events) |
//! | `DATA_API_REDIS_URL` | none | `redis://host:port/db` (feature `redis`): replicas share nonces, sessions, PATs, revocations, API-key quotas and the keys `data_api keys create` issues there |
//! | `DATA_API_REDIS_MODE` | `standalone` | `cluster`: `DATA_API_REDIS_URL` is a comma-separated list of Redis Cluster seed node URLs (`rediss://` with the CA file as for one Redis); every store works on both (keys in `docs/operations.md`) |
//! | `DATA_API_REDIS_PREFIX` | `walletgate` | key prefix in that Redis (one per data API deployment) |
//! | `DATA_API_REDIS_CA_FILE` | none (Mozilla's roots) | `rediss://` (feature `redis-tls`): PEM of the private CA that signed the Redis certificate |
//! | `DATA_API_REDIS_WAIT_REPLICAS` | `0` (none) | after each SIWE nonce spent and each revocation (a PAT's, its JWTs'), wait until this many replicas acknowledged it (Redis `WAIT`, within the store timeout); fewer is a 503 with `Retry-After`, as Redis away (see `docs/operations.md`) |
//! | `DATA_API_METRICS_LISTEN` | none (off) | `host:port` (feature `metrics`): Prometheus text at `GET /metrics` there (counters and histograms of `walletgate::metrics`), apart from the API |
//! | `DATA_API_JWKS_URL` | none | an external issuer's JWKS URL: its JWTs are accepted too |
//! | `DATA_API_JWT_ISSUER` | none (required with the URL) | that issuer's `iss` |
//! | `DATA_API_JWT_AUDIENCE` | the origin | the `aud` its tokens must name |
//! | `DATA_API_SCOPES_CLAIM` | `scope` | its scopes claim (e.g. `opensea_scopes`; string or array) |
//! | `DATA_API_WALLET_CLAIM` | `wallet` | its wallet claim (e.g. `linked_wallets`: the first entry) |
//! | `RUST_LOG` | `info` | log filter (`tracing-subscriber`'s `EnvFilter`) |
//! | `LOG_FORMAT` | text | `json`: one JSON object per line |

use std::net::SocketAddr;

use crate::redis_settings::RedisSettings;
use crate::shutdown::Draining;
use crate::{cors, metrics_endpoint, proxies, shutdown};

/// Settings read from the environment.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) listen: SocketAddr,
    pub(crate) origin: String,
    pub(crate) api_key: Option<String>,
    pub(crate) siwe_domain: String,
    pub(crate) siwe_uri: String,
    pub(crate) siwe_chain_id: u64,
    pub(crate) jwt_lifetime_secs: u64,
    pub(crate) key_per_minute: std::num::NonZeroU32,
    pub(crate) signing_key_file: Option<std::path::PathBuf>,
    /// The key rotated out: verifies and is published, never signs.
    pub(crate) previous_signing_key_file: Option<std::path::PathBuf>,
    /// Where `/metrics` is served (`DATA_API_METRICS_LISTEN`); `None`: off.
    pub(crate) metrics_listen: Option<SocketAddr>,
    pub(crate) access_log: Option<std::path::PathBuf>,
    /// The Redis the replicas share (`DATA_API_REDIS_URL`); `None`: in memory.
    pub(crate) redis: Option<RedisSettings>,
    /// An external issuer whose JWTs are accepted besides this server's own.
    pub(crate) external_issuer: Option<ExternalIssuer>,
    /// Browser origins allowed (`DATA_API_CORS_ORIGINS`); empty: no CORS.
    pub(crate) cors_origins: Vec<http::HeaderValue>,
    /// Who the client is: the peer, or what a trusted proxy says.
    pub(crate) client_ip: walletgate::free_tier::ClientIpResolver,
    /// How long a drain may take (`DATA_API_DRAIN_SECS`).
    pub(crate) drain: std::time::Duration,
    /// Set on SIGTERM/SIGINT: `GET /readyz` answers 503 from then on.
    pub(crate) draining: Draining,
}

/// An external issuer's JWTs (`DATA_API_JWKS_URL` and friends).
#[derive(Clone, Debug)]
pub(crate) struct ExternalIssuer {
    pub(crate) jwks_url: String,
    pub(crate) issuer: String,
    pub(crate) audience: Option<String>,
    pub(crate) scopes_claim: Option<String>,
    pub(crate) wallet_claim: Option<String>,
}

impl Config {
    /// The settings from the environment.
    pub(crate) fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings from `lookup` (the environment, or a test's table).
    pub(crate) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        Self::from_lookup_bound(lookup, None)
    }

    /// The configuration once the listener is bound to `bound`: without
    /// `DATA_API_ORIGIN` the origin is the bound address, so
    /// `DATA_API_LISTEN=127.0.0.1:0` names the port it got, not `:0`.
    pub(crate) fn from_lookup_bound(
        lookup: impl Fn(&str) -> Option<String>,
        bound: Option<SocketAddr>,
    ) -> Result<Self, String> {
        let var = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let listen: SocketAddr = var("DATA_API_LISTEN")
            .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
            .parse()
            .map_err(|_| "DATA_API_LISTEN must be an address such as 127.0.0.1:8080")?;
        let origin =
            var("DATA_API_ORIGIN").unwrap_or_else(|| format!("http://{}", bound.unwrap_or(listen)));
        let mut config = Self::for_origin(listen, &origin)?;
        config.api_key = var("DATA_API_KEY");
        if let Some(domain) = var("DATA_API_SIWE_DOMAIN") {
            config.siwe_domain = domain;
        }
        if let Some(uri) = var("DATA_API_SIWE_URI") {
            config.siwe_uri = uri;
        }
        if let Some(chain) = var("DATA_API_SIWE_CHAIN_ID") {
            config.siwe_chain_id = chain
                .parse()
                .map_err(|_| "DATA_API_SIWE_CHAIN_ID must be an integer")?;
        }
        if let Some(secs) = var("DATA_API_JWT_LIFETIME_SECS") {
            config.jwt_lifetime_secs = secs
                .parse()
                .map_err(|_| "DATA_API_JWT_LIFETIME_SECS must be an integer")?;
        }
        if let Some(per_minute) = var("DATA_API_KEY_PER_MINUTE") {
            config.key_per_minute = per_minute
                .parse()
                .map_err(|_| "DATA_API_KEY_PER_MINUTE must be a positive integer")?;
        }
        config.cors_origins = cors::origins_from_vars(&var, "DATA_API")
            .map_err(|(variable, reason)| format!("{variable}: {reason}"))?;
        config.client_ip = proxies::client_ip_from_vars(&var, "DATA_API")
            .map_err(|(variable, reason)| format!("{variable}: {reason}"))?;
        config.drain = shutdown::drain_secs(var("DATA_API_DRAIN_SECS"), "DATA_API_DRAIN_SECS")?;
        config.signing_key_file = var("DATA_API_SIGNING_KEY_FILE").map(Into::into);
        config.previous_signing_key_file =
            var("DATA_API_PREVIOUS_SIGNING_KEY_FILE").map(Into::into);
        config.metrics_listen = metrics_endpoint::parse_listen(
            "DATA_API_METRICS_LISTEN",
            var("DATA_API_METRICS_LISTEN"),
        )?;
        config.access_log = var("DATA_API_ACCESS_LOG").map(Into::into);
        config.redis = RedisSettings::from_vars(&var, "DATA_API")
            .map_err(|(variable, reason)| format!("{variable}: {reason}"))?;
        config.check_replicas()?;
        if let Some(jwks_url) = var("DATA_API_JWKS_URL") {
            config.external_issuer = Some(ExternalIssuer {
                jwks_url,
                issuer: var("DATA_API_JWT_ISSUER")
                    .ok_or("DATA_API_JWT_ISSUER is required with DATA_API_JWKS_URL")?,
                audience: var("DATA_API_JWT_AUDIENCE"),
                scopes_claim: var("DATA_API_SCOPES_CLAIM"),
                wallet_claim: var("DATA_API_WALLET_CLAIM"),
            });
        }
        Ok(config)
    }

    /// Replicas sharing a Redis must also share the signing key: a key
    /// generated per process would make each refuse the others' JWTs.
    pub(crate) fn check_replicas(&self) -> Result<(), String> {
        if self.redis.is_some() && self.signing_key_file.is_none() {
            return Err("DATA_API_REDIS_URL needs DATA_API_SIGNING_KEY_FILE: \
                        every replica must sign with the same key"
                .into());
        }
        Ok(())
    }

    /// Defaults for a server reachable at `origin`.
    pub(crate) fn for_origin(listen: SocketAddr, origin: &str) -> Result<Self, String> {
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'))
            .filter(|authority| !authority.is_empty() && !authority.contains('/'))
            .ok_or("DATA_API_ORIGIN must look like http://host:port")?;
        Ok(Self {
            listen,
            origin: origin.trim_end_matches('/').to_owned(),
            api_key: None,
            siwe_domain: authority.to_owned(),
            siwe_uri: origin.trim_end_matches('/').to_owned(),
            siwe_chain_id: 1,
            jwt_lifetime_secs: walletgate::tokens::IssuerConfig::DEFAULT_JWT_LIFETIME_SECS,
            key_per_minute: std::num::NonZeroU32::new(600).ok_or("zero quota")?,
            signing_key_file: None,
            previous_signing_key_file: None,
            metrics_listen: None,
            access_log: None,
            redis: None,
            external_issuer: None,
            cors_origins: Vec::new(),
            client_ip: walletgate::free_tier::ClientIpResolver::new(),
            drain: std::time::Duration::from_secs(shutdown::DEFAULT_DRAIN_SECS),
            draining: Draining::default(),
        })
    }
}

//! Where the data API keeps its state: in this process (the default), or in
//! one Redis that every replica shares (`DATA_API_REDIS_URL`, built with the
//! `redis` feature).
//!
//! Each store is an `Arc<dyn …>` of its seam, chosen once at start, so the
//! handlers and the issuer have one type whichever backend was configured.

use std::sync::Arc;

#[cfg(feature = "redis")]
use walletgate::redis::{RedisPatStore, RedisRevocations, RedisSessionStore, RedisSiweNonceStore};
use walletgate::siwe::{InMemoryNonceStore, NonceStore};
use walletgate::tokens::{InMemoryPatStore, InMemorySessionStore, PatStore, SessionStore};
use walletgate::wallet_jwt::{InMemoryRevocations, RevocationCheck};

use crate::config::Config;

/// PATs, in memory or on Redis.
pub(crate) type Pats = Arc<dyn PatStore>;

/// SIWE sessions, in memory or on Redis.
pub(crate) type Sessions = Arc<dyn SessionStore>;

/// Every store of the data API.
pub(crate) struct Stores {
    /// SIWE nonces.
    pub(crate) nonces: Arc<dyn NonceStore>,
    pub(crate) pats: Pats,
    pub(crate) sessions: Sessions,
    /// Revoked PATs, whose JWTs the verifier refuses.
    pub(crate) revocations: Arc<dyn RevocationCheck>,
    /// The Redis behind them, if any: `/readyz` asks it.
    pub(crate) redis: Option<crate::health::Redis>,
}

impl Stores {
    /// In this process: one replica only.
    pub(crate) fn in_memory() -> Self {
        Self {
            nonces: Arc::new(InMemoryNonceStore::new()),
            pats: Arc::new(InMemoryPatStore::new()),
            sessions: Arc::new(InMemorySessionStore::new()),
            revocations: Arc::new(InMemoryRevocations::new()),
            redis: None,
        }
    }

    /// What `config` asks for: Redis when it names one, else in memory.
    ///
    /// The Redis connection is lazy: a replica starts while Redis is down and
    /// answers 503 on the routes that need it until Redis is back.
    pub(crate) fn from_config(config: &Config) -> Result<Self, String> {
        let Some(settings) = &config.redis else {
            return Ok(Self::in_memory());
        };
        #[cfg(feature = "redis")]
        {
            let conn = settings.open().map_err(|error| error.to_string())?;
            Ok(Self {
                nonces: Arc::new(RedisSiweNonceStore::new(conn.clone())),
                pats: Arc::new(RedisPatStore::new(conn.clone())),
                sessions: Arc::new(RedisSessionStore::new(conn.clone())),
                revocations: Arc::new(RedisRevocations::new(conn.clone())),
                redis: Some(conn),
            })
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = settings;
            Err("DATA_API_REDIS_URL needs the data API built with the redis feature".to_owned())
        }
    }
}

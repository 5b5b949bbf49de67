//! Where the API key's quota counts: this process, or the Redis every
//! replica shares (`DATA_API_REDIS_URL`, feature `redis`), so one key's
//! quota holds across replicas.

use std::sync::Arc;

#[cfg(feature = "redis")]
use walletgate::api_key::ChainedKeyStore;
use walletgate::api_key::{
    ApiKey, ApiKeyLayer, InMemoryKeyStore, InMemoryQuotas, KeyStore, QuotaStore,
};
use walletgate::clock::SharedClock;

use crate::config::Config;

/// The quota buckets, in memory or on the shared Redis, chosen at start.
pub(crate) type KeyQuotas = Arc<dyn QuotaStore>;

/// The keys accepted: the configured one, and with Redis every issued one.
pub(crate) type KeyStores = Arc<dyn KeyStore>;

/// The API-key layer as the REST routes and `/mcp` share it.
pub(crate) type ApiKeys = ApiKeyLayer<KeyStores, KeyQuotas>;

/// `S` behind [`ApiKeys`].
pub(crate) type Keyed<S> = ApiKey<S, KeyStores, KeyQuotas>;

/// `configured` (the development key), and with a Redis the keys
/// `data_api keys create` issued there (`walletgate::redis::RedisKeyStore`).
pub(crate) fn key_stores(
    config: &Config,
    configured: InMemoryKeyStore,
) -> Result<KeyStores, Box<dyn std::error::Error>> {
    match &config.redis {
        None => Ok(Arc::new(configured)),
        #[cfg(feature = "redis")]
        Some(settings) => Ok(Arc::new(ChainedKeyStore::new(
            configured,
            walletgate::redis::RedisKeyStore::new(settings.open()?),
        ))),
        #[cfg(not(feature = "redis"))]
        Some(_) => Err("DATA_API_REDIS_URL needs the `redis` feature".into()),
    }
}

/// The quota buckets `config` asks for: on its Redis if it names one (opened
/// lazily: the server starts while Redis is down, and keyed requests answer
/// 503 until it is up), else in memory on `clock`.
pub(crate) fn key_quotas(
    config: &Config,
    clock: SharedClock,
) -> Result<KeyQuotas, Box<dyn std::error::Error>> {
    match &config.redis {
        None => Ok(Arc::new(InMemoryQuotas::new(clock))),
        #[cfg(feature = "redis")]
        Some(settings) => Ok(Arc::new(walletgate::redis::RedisQuotas::new(
            settings.open()?,
        ))),
        #[cfg(not(feature = "redis"))]
        Some(_) => Err("DATA_API_REDIS_URL needs the `redis` feature".into()),
    }
}

//! Where the API key's quota counts: this process, or the Redis every
//! replica shares (`DATA_API_REDIS_URL`, feature `redis`), so one key's
//! quota holds across replicas.

use std::future::{Future, Ready};
use std::pin::Pin;
use std::task::{Context, Poll};

use walletgate::api_key::{
    ApiKey, ApiKeyId, ApiKeyLayer, InMemoryKeyStore, InMemoryQuotas, KeyQuota, QuotaStore,
    QuotaVerdict,
};
use walletgate::clock::SharedClock;
use walletgate::store::StoreError;

use crate::Config;

/// The API-key layer as the REST routes and `/mcp` share it.
pub(crate) type ApiKeys = ApiKeyLayer<InMemoryKeyStore, KeyQuotas>;

/// `S` behind [`ApiKeys`].
pub(crate) type Keyed<S> = ApiKey<S, InMemoryKeyStore, KeyQuotas>;

/// The quota buckets: in memory, or on the shared Redis.
pub(crate) enum KeyQuotas {
    Memory(InMemoryQuotas),
    #[cfg(feature = "redis")]
    Redis(walletgate::redis::RedisQuotas),
}

/// The decision of either backend (both futures are `Unpin`).
pub(crate) enum KeyQuotaCheck {
    Memory(Ready<Result<QuotaVerdict, StoreError>>),
    #[cfg(feature = "redis")]
    Redis(walletgate::redis::QuotaCheck),
}

impl Future for KeyQuotaCheck {
    type Output = Result<QuotaVerdict, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Memory(ready) => Pin::new(ready).poll(cx),
            #[cfg(feature = "redis")]
            Self::Redis(check) => check.as_mut().poll(cx),
        }
    }
}

impl QuotaStore for KeyQuotas {
    type Future = KeyQuotaCheck;

    fn check(&self, id: &ApiKeyId, quota: KeyQuota) -> Self::Future {
        match self {
            Self::Memory(quotas) => KeyQuotaCheck::Memory(quotas.check(id, quota)),
            #[cfg(feature = "redis")]
            Self::Redis(quotas) => KeyQuotaCheck::Redis(quotas.check(id, quota)),
        }
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
        None => Ok(KeyQuotas::Memory(InMemoryQuotas::new(clock))),
        #[cfg(feature = "redis")]
        Some(settings) => Ok(KeyQuotas::Redis(walletgate::redis::RedisQuotas::new(
            settings.open()?,
        ))),
        #[cfg(not(feature = "redis"))]
        Some(_) => Err("DATA_API_REDIS_URL needs the `redis` feature".into()),
    }
}

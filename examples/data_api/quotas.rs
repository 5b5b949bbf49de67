//! Where the API key's quota counts: this process, or the Redis every
//! replica shares (`DATA_API_REDIS_URL`, feature `redis`), so one key's
//! quota holds across replicas; and `GET /api/v2/key/quota`, what is left
//! of it (the console shows it).

use std::sync::Arc;

use axum::{Extension, Json};
use rmcp::schemars::{self, JsonSchema};
use serde::Serialize;

#[cfg(feature = "redis")]
use walletgate::api_key::ChainedKeyStore;
use walletgate::api_key::{
    ApiKey, ApiKeyId, ApiKeyLayer, InMemoryKeyStore, InMemoryQuotas, KeyStore, QuotaStore,
    QuotaUsage,
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

/// The calling key's quota once this request is counted.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "KeyQuota")]
pub(crate) struct QuotaView {
    /// The key's id (never the key)
    key_id: String,
    /// Requests per window; absent for a key without a quota
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    /// Requests spent, this one included; one refills every `windowSeconds / limit`
    #[serde(skip_serializing_if = "Option::is_none")]
    used: Option<u32>,
    /// Requests the key may still make now
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_seconds: Option<u64>,
}

/// `GET /api/v2/key/quota` (API key): the quota `ApiKeyLayer` left in the
/// request, this request counted.
pub(crate) async fn quota(
    Extension(id): Extension<ApiKeyId>,
    usage: Option<Extension<QuotaUsage>>,
) -> Json<QuotaView> {
    let usage = usage.map(|Extension(usage)| usage);
    Json(QuotaView {
        key_id: id.to_string(),
        limit: usage.map(|usage| usage.quota().requests().get()),
        used: usage.map(|usage| usage.used()),
        remaining: usage.map(|usage| usage.remaining()),
        window_seconds: usage.map(|usage| usage.quota().window().as_secs()),
    })
}

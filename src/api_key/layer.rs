//! `ApiKeyLayer`: the configuration every [`ApiKey`] service shares.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::quota::QuotaBook;
use super::service::ApiKey;
use super::store::{ApiKeyRecord, InMemoryKeyStore, KeyStore};
use super::{ApiKeyError, ApiKeyId, KeyQuota};
use crate::clock::{SharedClock, SystemClock};
use crate::store::StoreError;

/// What the layer and each of its services share: the store, the quota
/// buckets and the default quota.
pub(super) struct Config<K> {
    store: Arc<K>,
    quotas: Arc<QuotaBook>,
    default_quota: Option<KeyQuota>,
}

impl<K> Clone for Config<K> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            quotas: Arc::clone(&self.quotas),
            default_quota: self.default_quota,
        }
    }
}

impl<K> fmt::Debug for Config<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("default_quota", &self.default_quota)
            .finish_non_exhaustive()
    }
}

impl<K: KeyStore> Config<K> {
    pub(super) fn store(&self) -> &K {
        &self.store
    }

    /// The verdict on a looked-up key: its id, or why it is refused.
    pub(super) fn admit(
        &self,
        looked_up: Result<Option<ApiKeyRecord>, StoreError>,
    ) -> Result<ApiKeyId, ApiKeyError> {
        let record = looked_up
            .map_err(|_| ApiKeyError::StoreUnavailable)?
            .ok_or(ApiKeyError::Unknown)?;
        if let Some(quota) = record.quota.or(self.default_quota) {
            self.quotas
                .check(&record.id, quota)
                .map_err(|retry_after_secs| ApiKeyError::QuotaExceeded { retry_after_secs })?;
        }
        Ok(record.id)
    }
}

/// Requires a valid `X-API-KEY` on every request; see the [module docs](super).
///
/// Cheap to clone; clones share the store and the quota buckets.
#[must_use]
pub struct ApiKeyLayer<K = InMemoryKeyStore> {
    config: Arc<Config<K>>,
}

impl<K> Clone for ApiKeyLayer<K> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<K> fmt::Debug for ApiKeyLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeyLayer")
            .field("config", &self.config)
            .finish()
    }
}

impl<K: KeyStore> ApiKeyLayer<K> {
    /// Checks keys against `store`, with no quota unless a key has its own.
    pub fn new(store: K) -> Self {
        Self {
            config: Arc::new(Config {
                store: Arc::new(store),
                quotas: Arc::new(QuotaBook::new(Arc::new(SystemClock))),
                default_quota: None,
            }),
        }
    }

    /// The quota of keys whose record names none.
    pub fn with_default_quota(mut self, quota: KeyQuota) -> Self {
        Arc::make_mut(&mut self.config).default_quota = Some(quota);
        self
    }

    /// Reads time from `clock` (tests use [`FakeClock`](crate::FakeClock)).
    /// Starts fresh quota buckets.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        Arc::make_mut(&mut self.config).quotas = Arc::new(QuotaBook::new(clock));
        self
    }
}

impl<S, K> Layer<S> for ApiKeyLayer<K> {
    type Service = ApiKey<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiKey::from_config(inner, Arc::clone(&self.config))
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    #[test]
    fn clones_share_one_configuration() {
        let layer = ApiKeyLayer::new(InMemoryKeyStore::new())
            .with_default_quota(KeyQuota::per_minute(NonZeroU32::MIN));
        let clone = layer.clone();
        assert!(Arc::ptr_eq(&layer.config, &clone.config));
        assert_eq!(
            clone.config.default_quota,
            Some(KeyQuota::per_minute(NonZeroU32::MIN))
        );
    }
}

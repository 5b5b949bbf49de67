//! `ApiKeyLayer`: builds the configuration every [`ApiKey`] service shares.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::KeyQuota;
use super::gate::Config;
use super::quota::QuotaBook;
use super::service::ApiKey;
use super::store::{InMemoryKeyStore, KeyStore};
use crate::clock::{SharedClock, SystemClock};

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

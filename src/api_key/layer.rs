//! `ApiKeyLayer`: builds the configuration every [`ApiKey`] service shares.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tower_layer::Layer;

use super::KeyQuota;
use super::gate::{ApiKeyError, Config};
use super::quota::{InMemoryQuotas, QuotaStore};
use super::service::ApiKey;
use super::store::{InMemoryKeyStore, KeyStore};
use crate::clock::{SharedClock, SystemClock};
use crate::envelope::RenderDataApiRejection;

/// Requires a valid `X-API-KEY` on every request; see the [module docs](super).
///
/// Cheap to clone; clones share the store and the quota buckets.
#[must_use]
pub struct ApiKeyLayer<K = InMemoryKeyStore, Q = InMemoryQuotas> {
    config: Arc<Config<K, Q>>,
}

impl<K, Q> Clone for ApiKeyLayer<K, Q> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
        }
    }
}

impl<K, Q> fmt::Debug for ApiKeyLayer<K, Q> {
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
                quotas: Arc::new(InMemoryQuotas::new(Arc::new(SystemClock))),
                default_quota: None,
                reject: RenderDataApiRejection::default(),
            }),
        }
    }

    /// Reads time from `clock` (tests use [`FakeClock`](crate::clock::FakeClock)).
    /// Starts fresh in-memory quota buckets.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        Arc::make_mut(&mut self.config).quotas = Arc::new(InMemoryQuotas::new(clock));
        self
    }
}

impl<K: KeyStore, Q: QuotaStore> ApiKeyLayer<K, Q> {
    /// The quota of keys whose record names none.
    pub fn with_default_quota(mut self, quota: KeyQuota) -> Self {
        Arc::make_mut(&mut self.config).default_quota = Some(quota);
        self
    }

    /// Keeps the quota buckets in `quotas` (a store shared by several
    /// replicas, such as `walletgate::redis::RedisQuotas`) instead of this
    /// process's memory. A quota store that cannot answer makes the request
    /// a 503 ([`ApiKeyError::QuotaUnavailable`](super::ApiKeyError::QuotaUnavailable)).
    pub fn with_quota_store<Q2: QuotaStore>(self, quotas: Q2) -> ApiKeyLayer<K, Q2> {
        let config = &self.config;
        ApiKeyLayer {
            config: Arc::new(Config {
                store: Arc::clone(&config.store),
                quotas: Arc::new(quotas),
                default_quota: config.default_quota,
                reject: config.reject.clone(),
            }),
        }
    }

    /// Renders refusals with `render` instead of the Area A envelope: it
    /// gets the typed [`ApiKeyError`] (status, message and headers through
    /// [`DataApiRejection`](crate::envelope::DataApiRejection)) and returns
    /// the response; the error still rides in the response extensions.
    /// Clones made before this call keep their own rendering; the key store
    /// and the quota buckets stay shared.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::Response;
    /// use walletgate::api_key::{ApiKeyLayer, InMemoryKeyStore};
    /// use walletgate::envelope::DataApiRejection;
    ///
    /// let layer = ApiKeyLayer::new(InMemoryKeyStore::new()).with_rejection(|error| {
    ///     let mut response = Response::new(Bytes::from(error.message().into_owned()));
    ///     *response.status_mut() = error.status();
    ///     error.to_data_api_error().write_headers(response.headers_mut());
    ///     response
    /// });
    /// # let _ = layer;
    /// ```
    pub fn with_rejection<F>(mut self, render: F) -> Self
    where
        F: Fn(ApiKeyError) -> Response<Bytes> + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.config).reject = RenderDataApiRejection::new(render);
        self
    }
}

impl<S, K, Q> Layer<S> for ApiKeyLayer<K, Q> {
    type Service = ApiKey<S, K, Q>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiKey::from_config(inner, Arc::clone(&self.config))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::num::NonZeroU32;

    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::envelope::DataApiRejection;

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

    #[tokio::test]
    async fn with_rejection_renders_refusals_and_keeps_the_error_in_the_extensions() {
        let layer = ApiKeyLayer::new(InMemoryKeyStore::new()).with_rejection(|error| {
            let mut response = Response::new(Bytes::from(error.kind()));
            *response.status_mut() = error.status();
            error
                .to_data_api_error()
                .write_headers(response.headers_mut());
            response
        });
        let inner = service_fn(|_: http::Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        });
        let response = layer
            .layer(inner)
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(
            response.headers()["www-authenticate"],
            "ApiKey header=\"X-API-KEY\""
        );
        assert_eq!(
            response.extensions().get::<ApiKeyError>(),
            Some(&ApiKeyError::Missing)
        );
        use http_body_util::BodyExt;
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "missing");
    }

    #[test]
    fn with_rejection_keeps_the_store_and_the_quota_buckets_shared() {
        let layer = ApiKeyLayer::new(InMemoryKeyStore::new());
        let own = layer
            .clone()
            .with_rejection(|_| Response::new(Bytes::new()));
        assert!(Arc::ptr_eq(&layer.config.store, &own.config.store));
        assert!(Arc::ptr_eq(&layer.config.quotas, &own.config.quotas));
    }
}

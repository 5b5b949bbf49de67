//! `ApiKey`, the service [`ApiKeyLayer`] wraps around another.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Request, Response};
use tower_service::Service;

use super::future::ResponseFuture;
use super::gate::{ApiKeyError, Config, refused};
use super::layer::ApiKeyLayer;
use super::quota::{InMemoryQuotas, QuotaStore};
use super::store::{InMemoryKeyStore, KeyDigest, KeyStore};
use crate::body::ResponseBody;
use crate::envelope::header::X_API_KEY;

/// The service [`ApiKeyLayer`] wraps around `S`.
pub struct ApiKey<S, K = InMemoryKeyStore, Q = InMemoryQuotas> {
    inner: S,
    config: Arc<Config<K, Q>>,
}

impl<S, K, Q> ApiKey<S, K, Q> {
    pub(super) fn from_config(inner: S, config: Arc<Config<K, Q>>) -> Self {
        Self { inner, config }
    }

    define_inner_service_accessors!();
}

impl<S, K: KeyStore> ApiKey<S, K> {
    /// Wraps `inner`; same as `ApiKey::layer(store).layer(inner)`.
    pub fn new(inner: S, store: K) -> Self {
        tower_layer::Layer::layer(&ApiKeyLayer::new(store), inner)
    }
}

impl<K: KeyStore> ApiKey<(), K> {
    /// Makes the layer of this service (tower-http's `Foo::layer`): the same
    /// as [`ApiKeyLayer::new`].
    pub fn layer(store: K) -> ApiKeyLayer<K> {
        ApiKeyLayer::new(store)
    }
}

impl<S: Clone, K, Q> Clone for ApiKey<S, K, Q> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, K, Q> fmt::Debug for ApiKey<S, K, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

/// The digest of the one `X-API-KEY` header. The header is not kept.
fn presented_digest(headers: &HeaderMap) -> Result<KeyDigest, ApiKeyError> {
    let mut values = headers.get_all(X_API_KEY).iter();
    let value = values.next().ok_or(ApiKeyError::Missing)?;
    if values.next().is_some() {
        return Err(ApiKeyError::Ambiguous);
    }
    if value.is_empty() {
        return Err(ApiKeyError::Missing);
    }
    Ok(KeyDigest::of(value.as_bytes()))
}

impl<S, K, Q, ReqBody, ResBody> Service<Request<ReqBody>> for ApiKey<S, K, Q>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: KeyStore,
    Q: QuotaStore,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, K, ReqBody, Q>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let digest = match presented_digest(request.headers()) {
            Ok(digest) => digest,
            Err(error) => {
                let response = self.config.reject.render(refused(None, error));
                return ResponseFuture::rejected(response);
            }
        };
        // The secret goes no further than this layer.
        request.headers_mut().remove(X_API_KEY);
        let lookup = self.config.store().lookup(&digest);
        // Call the instance that was polled ready, leave the clone behind.
        let clone = self.inner.clone();
        let ready_inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::lookup(lookup, ready_inner, request, Arc::clone(&self.config))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::num::NonZeroU32;

    use http::StatusCode;
    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::api_key::{ApiKeyId, ApiKeyRecord, KeyQuota};
    use crate::clock::FakeClock;

    const KEY: &str = "test-api-key-0123456789";

    /// Answers 200 with the id the gate admitted, and whether the key header reached it.
    async fn echo(request: Request<()>) -> Result<Response<String>, Infallible> {
        let id = request
            .extensions()
            .get::<ApiKeyId>()
            .map(ApiKeyId::to_string);
        let leaked = request.headers().contains_key(X_API_KEY);
        Ok(Response::new(format!("{id:?} {leaked}")))
    }

    fn store(quota: Option<KeyQuota>) -> InMemoryKeyStore {
        let store = InMemoryKeyStore::new();
        let mut record = ApiKeyRecord::new(ApiKeyId::new("app").unwrap());
        if let Some(quota) = quota {
            record = record.with_quota(quota);
        }
        store.insert(KEY, record).unwrap();
        store
    }

    fn request(keys: &[&'static str]) -> Request<()> {
        let mut builder = Request::builder();
        for key in keys {
            builder = builder.header(X_API_KEY, *key);
        }
        builder.body(()).unwrap()
    }

    async fn status_and_body(
        service: ApiKey<
            impl Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone,
            InMemoryKeyStore,
        >,
        request: Request<()>,
    ) -> (StatusCode, String) {
        use http_body_util::BodyExt;
        let response = service.oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_valid_key_reaches_the_inner_service_as_its_id_never_as_the_secret() {
        let service = ApiKey::new(service_fn(echo), store(None));
        let (status, body) = status_and_body(service, request(&[KEY])).await;
        assert_eq!(status, 200);
        assert_eq!(body, "Some(\"app\") false");
    }

    #[tokio::test]
    async fn an_admitted_request_carries_what_is_left_of_its_quota() {
        use crate::api_key::QuotaUsage;
        async fn remaining(request: Request<()>) -> Result<Response<String>, Infallible> {
            let usage = request.extensions().get::<QuotaUsage>().copied();
            Ok(Response::new(format!(
                "{:?}",
                usage.map(|u| (u.used(), u.remaining()))
            )))
        }
        let quota = KeyQuota::per_minute(NonZeroU32::new(3).unwrap());
        let service = ApiKey::new(service_fn(remaining), store(Some(quota)));
        let (_, body) = status_and_body(service.clone(), request(&[KEY])).await;
        assert_eq!(body, "Some((1, 2))");
        let (_, body) = status_and_body(service, request(&[KEY])).await;
        assert_eq!(body, "Some((2, 1))");
        // A key without a quota has no usage to show.
        let service = ApiKey::new(service_fn(remaining), store(None));
        assert_eq!(status_and_body(service, request(&[KEY])).await.1, "None");
    }

    #[tokio::test]
    async fn a_missing_empty_doubled_or_unknown_key_is_401() {
        for keys in [&[][..], &[""], &[KEY, KEY], &["unknown-key-0123456789"]] {
            let service = ApiKey::new(service_fn(echo), store(None));
            let (status, body) = status_and_body(service, request(keys)).await;
            assert_eq!(status, 401, "{keys:?}");
            assert!(body.contains("\"status\":401"), "Area A envelope: {body}");
        }
    }

    #[tokio::test]
    async fn a_spent_quota_is_429_with_retry_after() {
        let clock = Arc::new(FakeClock::at_unix_secs(1_800_000_000));
        let quota = KeyQuota::per_minute(NonZeroU32::MIN);
        let layer = ApiKey::layer(store(Some(quota))).with_clock(clock);
        let service = tower_layer::Layer::layer(&layer, service_fn(echo));
        let first = service.clone().oneshot(request(&[KEY])).await.unwrap();
        assert_eq!(first.status(), 200);
        let second = service.oneshot(request(&[KEY])).await.unwrap();
        assert_eq!(second.status(), 429);
        assert!(second.headers().contains_key(http::header::RETRY_AFTER));
        assert!(matches!(
            second.extensions().get::<ApiKeyError>(),
            Some(ApiKeyError::QuotaExceeded { .. })
        ));
    }

    #[tokio::test]
    async fn a_failing_store_is_503() {
        struct Down;
        impl KeyStore for Down {
            fn lookup(
                &self,
                _: &KeyDigest,
            ) -> crate::store::BoxFuture<
                'static,
                Result<Option<super::super::ApiKeyRecord>, crate::store::StoreError>,
            > {
                Box::pin(std::future::ready(Err(crate::store::StoreError::new(
                    "down",
                ))))
            }
        }
        let response = ApiKey::new(service_fn(echo), Down)
            .oneshot(request(&[KEY]))
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
    }

    #[tokio::test]
    async fn a_failing_quota_store_is_503_and_the_request_is_not_served() {
        use crate::api_key::{QuotaStore, QuotaVerdict};
        struct Down;
        impl QuotaStore for Down {
            fn check(
                &self,
                _: &ApiKeyId,
                _: KeyQuota,
            ) -> crate::store::BoxFuture<'static, Result<QuotaVerdict, crate::store::StoreError>>
            {
                Box::pin(std::future::ready(Err(crate::store::StoreError::new(
                    "down",
                ))))
            }
        }
        let quota = KeyQuota::per_minute(NonZeroU32::MIN);
        let layer = ApiKey::layer(store(Some(quota))).with_quota_store(Down);
        let service = tower_layer::Layer::layer(&layer, service_fn(echo));
        let response = service.clone().oneshot(request(&[KEY])).await.unwrap();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "5");
        assert_eq!(
            response.extensions().get::<ApiKeyError>(),
            Some(&ApiKeyError::QuotaUnavailable)
        );
        // A key without a quota never asks the quota store.
        let layer = ApiKey::layer(store(None)).with_quota_store(Down);
        let service = tower_layer::Layer::layer(&layer, service_fn(echo));
        assert_eq!(
            service.oneshot(request(&[KEY])).await.unwrap().status(),
            200
        );
    }
}

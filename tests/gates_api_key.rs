//! ApiKeyLayer, one behaviour per test.

mod gates_support;

use std::future::ready;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gates_support::*;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{ServiceBuilder, ServiceExt, service_fn};
use walletgate::api_key::{
    ApiKeyError, ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyDigest, KeyQuota,
    KeyStore,
};
use walletgate::clock::FakeClock;
use walletgate::store::{BoxFuture, StoreError};

fn store() -> InMemoryKeyStore {
    let store = InMemoryKeyStore::new();
    store
        .insert(API_KEY, ApiKeyRecord::new(ApiKeyId::new("app-1").unwrap()))
        .unwrap();
    store
}

async fn call<K: KeyStore>(
    layer: ApiKeyLayer<K>,
    key: Option<&str>,
) -> Response<impl http_body::Body<Data = Bytes, Error: std::fmt::Debug>> {
    let service = ServiceBuilder::new().layer(layer).service(service_fn(
        |request: Request<Full<Bytes>>| async move {
            let app = request
                .extensions()
                .get::<ApiKeyId>()
                .map(ApiKeyId::to_string);
            let key_seen = request.headers().contains_key("x-api-key");
            let body = format!("{} key_seen={key_seen}", app.unwrap_or_default());
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(body))))
        },
    ));
    let mut request = Request::get("/api/v2/collections");
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    service
        .oneshot(request.body(Full::default()).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn missing_key_is_401() {
    let response = call(ApiKeyLayer::new(store()), None).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.extensions().get::<ApiKeyError>(),
        Some(&ApiKeyError::Missing)
    );
}

#[tokio::test]
async fn unknown_key_is_401() {
    let response = call(
        ApiKeyLayer::new(store()),
        Some("wg_test_key_not_in_the_store"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.extensions().get::<ApiKeyError>(),
        Some(&ApiKeyError::Unknown)
    );
    let body: serde_json::Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(body["error"]["status"], 401);
}

#[tokio::test]
async fn right_key_passes_with_its_application_id_and_without_the_header() {
    let response = call(ApiKeyLayer::new(store()), Some(API_KEY)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, "app-1 key_seen=false");
}

#[tokio::test]
async fn revoked_key_is_401() {
    let store = store();
    let layer = ApiKeyLayer::new(store.clone());
    assert!(store.revoke(&ApiKeyId::new("app-1").unwrap()));
    let response = call(layer, Some(API_KEY)).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn quota_exceeded_is_429_with_retry_after() {
    let clock = FakeClock::at_unix_secs(NOW);
    let layer = ApiKeyLayer::new(store())
        .with_default_quota(
            KeyQuota::new(NonZeroU32::new(2).unwrap(), Duration::from_secs(5)).unwrap(),
        )
        .with_clock(Arc::new(clock.clone()));
    for _ in 0..2 {
        assert_eq!(
            call(layer.clone(), Some(API_KEY)).await.status(),
            StatusCode::OK
        );
    }
    // One request every 2.5 s refills: 1.5 s after the burst the wait is 1 s.
    clock.advance(Duration::from_millis(1500));
    let response = call(layer.clone(), Some(API_KEY)).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "1");
    // 0.5 s before the refill, the wait still rounds up to 1 s, never 0.
    clock.advance(Duration::from_millis(500));
    let response = call(layer.clone(), Some(API_KEY)).await;
    assert_eq!(response.headers()["retry-after"], "1");
    clock.advance(Duration::from_millis(500));
    assert_eq!(call(layer, Some(API_KEY)).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_keys_own_quota_overrides_the_default() {
    let clock = FakeClock::at_unix_secs(NOW);
    let store = InMemoryKeyStore::new();
    let one_per_minute = KeyQuota::per_minute(NonZeroU32::new(1).unwrap());
    store
        .insert(
            API_KEY,
            ApiKeyRecord::new(ApiKeyId::new("tight").unwrap()).with_quota(one_per_minute),
        )
        .unwrap();
    let layer = ApiKeyLayer::new(store)
        .with_default_quota(KeyQuota::per_minute(NonZeroU32::new(100).unwrap()))
        .with_clock(Arc::new(clock));
    assert_eq!(
        call(layer.clone(), Some(API_KEY)).await.status(),
        StatusCode::OK
    );
    let response = call(layer, Some(API_KEY)).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "60");
}

/// A networked store stands in: it can fail, and then the layer answers 503.
struct DownStore;

impl KeyStore for DownStore {
    fn lookup(
        &self,
        _digest: &KeyDigest,
    ) -> BoxFuture<'static, Result<Option<ApiKeyRecord>, StoreError>> {
        Box::pin(ready(Err(StoreError::new("connection refused"))))
    }
}

#[tokio::test]
async fn unavailable_store_is_503() {
    let response = call(ApiKeyLayer::new(DownStore), Some(API_KEY)).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn two_key_headers_are_401() {
    let service = ServiceBuilder::new()
        .layer(ApiKeyLayer::new(store()))
        .service(service_fn(echo));
    let request = Request::get("/")
        .header("x-api-key", API_KEY)
        .header("x-api-key", "wg_test_key_another_one_0000")
        .body(Full::default())
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

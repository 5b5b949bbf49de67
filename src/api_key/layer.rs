//! `ApiKeyLayer`, its service and its future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::quota::QuotaBook;
use super::store::{ApiKeyRecord, InMemoryKeyStore, KeyDigest, KeyStore};
use super::{ApiKeyId, KeyQuota};
use crate::body::{ResponseBody, rejection};
use crate::clock::{SharedClock, SystemClock};
use crate::envelope::DataApiError;
use crate::envelope::header::X_API_KEY;
use crate::store::StoreError;

/// Why [`ApiKeyLayer`] refused a request. It rides in the rejection's
/// response extensions, next to the rendered [`DataApiError`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiKeyError {
    /// No `X-API-KEY` header, or an empty one.
    Missing,
    /// Several `X-API-KEY` headers.
    Ambiguous,
    /// No valid key has this digest (unknown or revoked).
    Unknown,
    /// The key's quota is spent; retry after this many whole seconds.
    QuotaExceeded {
        /// `Retry-After`, rounded up, at least 1.
        retry_after_secs: u64,
    },
    /// The key store could not answer.
    StoreUnavailable,
}

impl ApiKeyError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.to_data_api_error().status()
    }

    /// The Area A rejection for this error.
    pub fn to_data_api_error(&self) -> DataApiError {
        match self {
            Self::Missing => DataApiError::unauthorized("Missing X-API-KEY header"),
            Self::Ambiguous => DataApiError::unauthorized("Send exactly one X-API-KEY header"),
            Self::Unknown => DataApiError::unauthorized("Invalid or revoked API key"),
            Self::QuotaExceeded { retry_after_secs } => {
                DataApiError::too_many_requests(*retry_after_secs)
            }
            Self::StoreUnavailable => DataApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "API key store unavailable; retry later",
            ),
        }
    }

    fn into_response(self) -> Response<Bytes> {
        let mut response = self.to_data_api_error().into_response();
        response.extensions_mut().insert(self);
        response
    }
}

impl fmt::Display for ApiKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.to_data_api_error().message())
    }
}

impl std::error::Error for ApiKeyError {}

struct Gate<K> {
    store: Arc<K>,
    quotas: Arc<QuotaBook>,
    default_quota: Option<KeyQuota>,
}

impl<K> Clone for Gate<K> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            quotas: Arc::clone(&self.quotas),
            default_quota: self.default_quota,
        }
    }
}

impl<K: KeyStore> Gate<K> {
    fn admit(
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
    gate: Gate<K>,
}

impl<K> Clone for ApiKeyLayer<K> {
    fn clone(&self) -> Self {
        Self {
            gate: self.gate.clone(),
        }
    }
}

impl<K> fmt::Debug for ApiKeyLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeyLayer")
            .field("default_quota", &self.gate.default_quota)
            .finish_non_exhaustive()
    }
}

impl<K: KeyStore> ApiKeyLayer<K> {
    /// Checks keys against `store`, with no quota unless a key has its own.
    pub fn new(store: K) -> Self {
        Self {
            gate: Gate {
                store: Arc::new(store),
                quotas: Arc::new(QuotaBook::new(Arc::new(SystemClock))),
                default_quota: None,
            },
        }
    }

    /// The quota of keys whose record names none.
    pub fn with_default_quota(mut self, quota: KeyQuota) -> Self {
        self.gate.default_quota = Some(quota);
        self
    }

    /// Reads time from `clock` (tests use [`FakeClock`](crate::FakeClock)).
    /// Starts fresh quota buckets.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.gate.quotas = Arc::new(QuotaBook::new(clock));
        self
    }
}

impl<S, K> Layer<S> for ApiKeyLayer<K> {
    type Service = ApiKey<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiKey {
            inner,
            gate: self.gate.clone(),
        }
    }
}

/// The service [`ApiKeyLayer`] wraps around `S`.
pub struct ApiKey<S, K = InMemoryKeyStore> {
    inner: S,
    gate: Gate<K>,
}

impl<S, K> ApiKey<S, K> {
    define_inner_service_accessors!();
}

impl<S, K: KeyStore> ApiKey<S, K> {
    /// Wraps `inner`; same as `ApiKeyLayer::new(store).layer(inner)`.
    pub fn new(inner: S, store: K) -> Self {
        ApiKeyLayer::new(store).layer(inner)
    }
}

impl<S: Clone, K> Clone for ApiKey<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
        }
    }
}

impl<S: fmt::Debug, K> fmt::Debug for ApiKey<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("inner", &self.inner)
            .field("default_quota", &self.gate.default_quota)
            .finish_non_exhaustive()
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

impl<S, K, ReqBody, ResBody> Service<Request<ReqBody>> for ApiKey<S, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: KeyStore,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, K, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let digest = match presented_digest(request.headers()) {
            Ok(digest) => digest,
            Err(error) => return ResponseFuture::rejected(error.into_response()),
        };
        // The secret goes no further than this layer.
        request.headers_mut().remove(X_API_KEY);
        let lookup = self.gate.store.lookup(&digest);
        // Call the instance that was polled ready, leave the clone behind.
        let clone = self.inner.clone();
        let ready_inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            state: State::Lookup { lookup },
            inner: Some(ready_inner),
            request: Some(request),
            gate: Some(self.gate.clone()),
        }
    }
}

pin_project! {
    /// Response future of [`ApiKey`]: the key lookup, then the inner service.
    pub struct ResponseFuture<S, K, ReqBody>
    where
        S: Service<Request<ReqBody>>,
        K: KeyStore,
    {
        #[pin]
        state: State<K::Lookup, S::Future>,
        inner: Option<S>,
        request: Option<Request<ReqBody>>,
        gate: Option<Gate<K>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<L, F> {
        Rejected { response: Option<Response<Bytes>> },
        Lookup { #[pin] lookup: L },
        Inner { #[pin] future: F },
    }
}

impl<S, K, ReqBody> ResponseFuture<S, K, ReqBody>
where
    S: Service<Request<ReqBody>>,
    K: KeyStore,
{
    fn rejected(response: Response<Bytes>) -> Self {
        Self {
            state: State::Rejected {
                response: Some(response),
            },
            inner: None,
            request: None,
            gate: None,
        }
    }
}

impl<S, K, ReqBody, ResBody> Future for ResponseFuture<S, K, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    K: KeyStore,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Rejected { response } => {
                    let response = response.take().unwrap_or_else(polled_after_completion);
                    return Poll::Ready(Ok(rejection(response)));
                }
                StateProj::Lookup { lookup } => {
                    let looked_up = ready!(lookup.poll(cx));
                    let admitted = match this.gate.as_ref() {
                        Some(gate) => gate.admit(looked_up),
                        None => Err(ApiKeyError::StoreUnavailable),
                    };
                    let next = match (admitted, this.inner.take(), this.request.take()) {
                        (Ok(id), Some(mut inner), Some(mut request)) => {
                            request.extensions_mut().insert(id);
                            State::Inner {
                                future: inner.call(request),
                            }
                        }
                        (Err(error), _, _) => State::Rejected {
                            response: Some(error.into_response()),
                        },
                        _ => State::Rejected {
                            response: Some(polled_after_completion()),
                        },
                    };
                    this.state.set(next);
                }
                StateProj::Inner { future } => {
                    let response = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
            }
        }
    }
}

fn polled_after_completion() -> Response<Bytes> {
    DataApiError::internal("ApiKey response future polled after completion").into_response()
}

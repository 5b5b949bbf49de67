//! The verdict on a presented key: what the layer and its services share
//! (store, quota buckets, default quota), and why a key is refused.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use http::{HeaderValue, StatusCode};

use super::quota::{QuotaStore, QuotaUsage, QuotaVerdict, retry_after_secs};
use super::store::{ApiKeyRecord, KeyStore};
use super::{ApiKeyId, KeyQuota};
use crate::envelope::{
    API_KEY_CHALLENGE, DataApiRejection, RenderDataApiRejection, data_api_rejection,
};
use crate::store::{BoxFuture, StoreError};

/// Why [`ApiKeyLayer`](super::ApiKeyLayer) refused a request. It rides in the rejection's
/// response extensions (next to the rendered
/// [`DataApiError`](crate::envelope::DataApiError) by default); a caller
/// renders it with [`ApiKeyLayer::with_rejection`](super::ApiKeyLayer::with_rejection).
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
    /// The quota store could not answer; the request was not served.
    QuotaUnavailable,
}

impl ApiKeyError {
    /// A short snake_case name of the error, for logs (its
    /// [`kind`](DataApiRejection::kind)).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Ambiguous => "ambiguous",
            Self::Unknown => "unknown",
            Self::QuotaExceeded { .. } => "quota_exceeded",
            Self::StoreUnavailable => "store_unavailable",
            Self::QuotaUnavailable => "quota_unavailable",
        }
    }
}

/// 401 with `WWW-Authenticate: ApiKey header="X-API-KEY"` for a missing,
/// doubled or unknown key; 429 with `Retry-After` over quota; 503 when a
/// store cannot answer (`Retry-After: 5` for the quota store: it fails closed).
impl DataApiRejection for ApiKeyError {
    fn kind(&self) -> &'static str {
        self.code()
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::Missing | Self::Ambiguous | Self::Unknown => StatusCode::UNAUTHORIZED,
            Self::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::StoreUnavailable | Self::QuotaUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn message(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Self::Missing => "Missing X-API-KEY header",
            Self::Ambiguous => "Send exactly one X-API-KEY header",
            Self::Unknown => "Invalid or revoked API key",
            Self::QuotaExceeded { .. } => {
                "Rate limit exceeded for this API key; honour Retry-After"
            }
            Self::StoreUnavailable => "API key store unavailable; retry later",
            // Fails closed: a key's quota is never skipped.
            Self::QuotaUnavailable => {
                "API key quota unavailable, so the request was not served; retry later"
            }
        })
    }

    fn www_authenticate(&self) -> Option<HeaderValue> {
        match self {
            Self::Missing | Self::Ambiguous | Self::Unknown => Some(API_KEY_CHALLENGE),
            _ => None,
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::QuotaExceeded { retry_after_secs } => Some((*retry_after_secs).max(1)),
            Self::QuotaUnavailable => Some(QUOTA_UNAVAILABLE_RETRY_SECS),
            _ => None,
        }
    }
}

data_api_rejection!(ApiKeyError);

/// `Retry-After` of [`ApiKeyError::QuotaUnavailable`] (the gateway's
/// `RATE_LIMIT_UNAVAILABLE` says the same).
const QUOTA_UNAVAILABLE_RETRY_SECS: u64 = 5;

/// What the layer and each of its services share: the key store, the quota
/// store and the default quota.
pub(super) struct Config<K, Q> {
    pub(super) store: Arc<K>,
    pub(super) quotas: Arc<Q>,
    pub(super) default_quota: Option<KeyQuota>,
    /// How a refusal is answered.
    pub(super) reject: RenderDataApiRejection<ApiKeyError>,
}

impl<K, Q> Clone for Config<K, Q> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            quotas: Arc::clone(&self.quotas),
            default_quota: self.default_quota,
            reject: self.reject.clone(),
        }
    }
}

impl<K, Q> fmt::Debug for Config<K, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("default_quota", &self.default_quota)
            .field("reject", &self.reject)
            .finish_non_exhaustive()
    }
}

/// A key store's lookup, as the response future holds it.
pub(super) type Lookup = BoxFuture<'static, Result<Option<ApiKeyRecord>, StoreError>>;

/// A quota store's decision, as the response future holds it.
pub(super) type QuotaCheck = BoxFuture<'static, Result<QuotaVerdict, StoreError>>;

/// A key that was found: its id, and its quota with its check when it has one.
pub(super) struct Found<F> {
    pub(super) id: ApiKeyId,
    pub(super) quota_check: Option<(KeyQuota, F)>,
}

impl<K: KeyStore, Q: QuotaStore> Config<K, Q> {
    pub(super) fn store(&self) -> &K {
        &self.store
    }

    /// The verdict on a looked-up key: found (its quota still to spend), or
    /// why it is refused.
    pub(super) fn found(
        &self,
        looked_up: Result<Option<ApiKeyRecord>, StoreError>,
    ) -> Result<Found<QuotaCheck>, ApiKeyError> {
        let record = match looked_up {
            Ok(Some(record)) => record,
            Ok(None) => return Err(refused(None, ApiKeyError::Unknown)),
            Err(_error) => {
                trace_warn!(error = %_error, "API key store lookup failed");
                return Err(refused(None, ApiKeyError::StoreUnavailable));
            }
        };
        let quota_check = record
            .quota
            .or(self.default_quota)
            .map(|quota| (quota, self.quotas.check(&record.id, quota)));
        Ok(Found {
            id: record.id,
            quota_check,
        })
    }
}

/// The verdict on a found key once its quota answered (`None`: it has
/// none), with what is left of the quota.
pub(super) fn admit(
    id: ApiKeyId,
    quota: Option<(KeyQuota, Result<QuotaVerdict, StoreError>)>,
) -> Result<(ApiKeyId, Option<QuotaUsage>), ApiKeyError> {
    let mut usage = None;
    match quota {
        None => {}
        Some((quota, Ok(QuotaVerdict::Allowed { remaining }))) => {
            usage = Some(QuotaUsage::new(quota, remaining));
        }
        Some((_, Ok(QuotaVerdict::Exceeded { retry_after }))) => {
            let error = ApiKeyError::QuotaExceeded {
                retry_after_secs: retry_after_secs(retry_after),
            };
            return Err(refused(Some(&id), error));
        }
        Some((_, Err(_error))) => {
            trace_warn!(error = %_error, "API key quota store failed");
            return Err(refused(Some(&id), ApiKeyError::QuotaUnavailable));
        }
    }
    trace_decision!(DEBUG, "api_key", key_id = %id, outcome = "admitted");
    crate::metrics::count(crate::metrics::API_KEY_ADMITTED_TOTAL, []);
    Ok((id, usage))
}

/// `error`, traced as the layer's refusal (of the key `_key_id` once it is known).
pub(super) fn refused(_key_id: Option<&ApiKeyId>, error: ApiKeyError) -> ApiKeyError {
    trace_decision!(
        INFO,
        "api_key",
        key_id = _key_id.map(ApiKeyId::as_str),
        outcome = "refused",
        error = error.code(),
        status = DataApiRejection::status(&error).as_u16(),
    );
    crate::metrics::count(
        crate::metrics::API_KEY_REFUSALS_TOTAL,
        [("reason", error.code())],
    );
    error
}

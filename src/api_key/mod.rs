//! `X-API-KEY` on every request: [`ApiKeyLayer`].
//!
//! The layer reads the one `X-API-KEY` header, hashes it with SHA-256 and asks
//! a [`KeyStore`] for the record with that digest. Stores keep digests only;
//! [`InMemoryKeyStore`] compares them in constant time. A missing, unknown or
//! revoked key gets 401 in the Area A envelope ([`DataApiError`]); a key over
//! its [`KeyQuota`] gets 429 with `Retry-After` (whole seconds, rounded up, at
//! least 1). A valid key's [`ApiKeyId`] (the application, never the secret)
//! goes into the request extensions, and the header itself is removed before
//! the inner service sees the request, so no handler can log it.
//!
//! The key never appears in a response, a `Debug` output or an error.
//!
//! A caller who wants other answers than the Area A envelope (a JSON-RPC
//! error on an MCP endpoint, say) renders the typed [`ApiKeyError`] itself
//! with [`ApiKeyLayer::with_rejection`]; status and headers come with the
//! error ([`DataApiRejection`](crate::envelope::DataApiRejection)).
//!
//! Keys to issue are [`ApiKeySecret`]s (`wg_key_…`, prefixed and
//! checksummed like PATs, so secret scanners can spot a leaked one); several
//! replicas share their keys through `walletgate::redis::RedisKeyStore`
//! (feature `redis`), which also creates, lists and revokes them.
//!
//! Quota buckets live in a [`QuotaStore`]: [`InMemoryQuotas`] by default,
//! or a store several replicas share (`walletgate::redis::RedisQuotas`,
//! feature `redis`) through [`ApiKeyLayer::with_quota_store`]. A quota store
//! that cannot answer fails closed: 503 with `Retry-After: 5`
//! ([`ApiKeyError::QuotaUnavailable`]), never an unlimited request.
//!
//! ```
//! use std::convert::Infallible;
//! use std::num::NonZeroU32;
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use walletgate::clock::FakeClock;
//! use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = InMemoryKeyStore::new();
//! let quota = KeyQuota::per_minute(NonZeroU32::new(1).unwrap());
//! store.insert(
//!     "demo-key-0123456789abcdef",
//!     ApiKeyRecord::new(ApiKeyId::new("demo-app")?).with_quota(quota),
//! )?;
//!
//! let service = ServiceBuilder::new()
//!     .layer(ApiKeyLayer::new(store).with_clock(Arc::new(FakeClock::at_unix_secs(0))))
//!     .service_fn(|request: Request<Full<Bytes>>| async move {
//!         let app = request.extensions().get::<ApiKeyId>().cloned();
//!         let app = app.map(|id| id.to_string()).unwrap_or_default();
//!         Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(app))))
//!     });
//!
//! let with_key = || {
//!     Request::get("/api/v2/collections")
//!         .header("x-api-key", "demo-key-0123456789abcdef")
//!         .body(Full::default())
//! };
//! assert_eq!(service.clone().oneshot(with_key()?).await?.status(), 200);
//! // One request per minute: the second one waits.
//! let over = service.clone().oneshot(with_key()?).await?;
//! assert_eq!(over.status(), 429);
//! assert_eq!(over.headers()["retry-after"], "60");
//!
//! let no_key = Request::get("/api/v2/collections").body(Full::default())?;
//! assert_eq!(service.oneshot(no_key).await?.status(), 401);
//! # Ok(())
//! # }
//! ```
//!
//! [`DataApiError`]: crate::envelope::DataApiError

use std::fmt;

mod future;
mod gate;
mod id;
mod layer;
mod quota;
mod secret;
mod service;
mod store;

pub use future::ResponseFuture;
pub use gate::ApiKeyError;
pub use id::ApiKeyId;
pub use layer::ApiKeyLayer;
pub use quota::{InMemoryQuotas, KeyQuota, QuotaStore, QuotaUsage, QuotaVerdict};
pub use secret::{API_KEY_PREFIX, ApiKeySecret};
pub use service::ApiKey;
pub use store::{ApiKeyRecord, ChainedKeyStore, InMemoryKeyStore, KeyDigest, KeyStore};

/// A refused API key configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key shorter than the store's minimum.
    KeyTooShort {
        /// The minimum, in bytes.
        min_bytes: usize,
    },
    /// The key or its application id is already in the store.
    DuplicateKey,
    /// An application id that is empty, too long or has control characters.
    InvalidKeyId,
    /// A quota whose window is too short for its request count.
    InvalidQuota,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KeyTooShort { min_bytes } => {
                write!(f, "API key shorter than {min_bytes} bytes")
            }
            Self::DuplicateKey => f.write_str("API key or application id already present"),
            Self::InvalidKeyId => {
                f.write_str("application id must be 1 to 128 bytes without control characters")
            }
            Self::InvalidQuota => f.write_str("quota window too short for its request count"),
        }
    }
}

impl std::error::Error for ConfigError {}

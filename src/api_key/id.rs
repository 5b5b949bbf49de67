//! The application identity a valid key stands for, and its extractor.

use std::fmt;
use std::sync::Arc;

use axum_core::extract::FromRequestParts;
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;

use super::ConfigError;
use crate::envelope::DataApiError;

/// The application a valid API key belongs to: never the key itself.
///
/// [`ApiKeyLayer`](super::ApiKeyLayer) puts it in the request extensions;
/// handlers take it as an extractor:
///
/// ```
/// use walletgate::api_key::ApiKeyId;
///
/// async fn handler(app: ApiKeyId) -> String {
///     format!("hello {app}")
/// }
/// # let _ = handler;
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApiKeyId(Arc<str>);

impl ApiKeyId {
    /// Longest accepted id, in bytes.
    pub const MAX_BYTES: usize = 128;

    /// An id: 1 to [`Self::MAX_BYTES`] bytes, no control characters.
    ///
    /// # Errors
    /// [`ConfigError::InvalidKeyId`] otherwise.
    pub fn new(id: impl Into<String>) -> Result<Self, ConfigError> {
        let id = id.into();
        if id.is_empty() || id.len() > Self::MAX_BYTES || id.chars().any(char::is_control) {
            return Err(ConfigError::InvalidKeyId);
        }
        Ok(Self(id.into()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ApiKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ApiKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ApiKeyId").field(&&*self.0).finish()
    }
}

/// The extractor found no [`ApiKeyId`]: `ApiKeyLayer` is not in front of
/// this handler. A wiring fault, answered with 500.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingApiKeyId;

impl fmt::Display for MissingApiKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "ApiKeyId missing from request extensions: is ApiKeyLayer in front of this route?",
        )
    }
}

impl std::error::Error for MissingApiKeyId {}

impl From<MissingApiKeyId> for DataApiError {
    fn from(missing: MissingApiKeyId) -> Self {
        DataApiError::internal(missing.to_string())
    }
}

impl IntoResponse for MissingApiKeyId {
    fn into_response(self) -> Response {
        DataApiError::from(self)
            .into_response()
            .map(axum_core::body::Body::from)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ApiKeyId {
    type Rejection = MissingApiKeyId;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<ApiKeyId>()
            .cloned()
            .ok_or(MissingApiKeyId)
    }
}

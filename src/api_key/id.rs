//! The application identity a valid key stands for, and its extractor.

use std::fmt;
use std::sync::Arc;

use axum_core::extract::FromRequestParts;
use http::request::Parts;

use super::ConfigError;
use crate::envelope::MissingExtension;

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

impl<S: Send + Sync> FromRequestParts<S> for ApiKeyId {
    type Rejection = MissingExtension;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<ApiKeyId>()
            .cloned()
            .ok_or_else(|| MissingExtension::data_api::<Self>("ApiKeyLayer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn extracts_the_id_the_layer_put_there() {
        let mut request = http::Request::new(());
        request
            .extensions_mut()
            .insert(ApiKeyId::new("app").unwrap());
        let (mut parts, ()) = request.into_parts();
        let id = <ApiKeyId as FromRequestParts<()>>::from_request_parts(&mut parts, &())
            .await
            .unwrap();
        assert_eq!(id.as_str(), "app");
    }

    #[tokio::test]
    async fn missing_id_is_a_500_naming_the_layer() {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        let missing = <ApiKeyId as FromRequestParts<()>>::from_request_parts(&mut parts, &())
            .await
            .unwrap_err();
        assert_eq!(missing.type_name(), "ApiKeyId");
        assert_eq!(missing.layer(), "ApiKeyLayer");
        assert_eq!(missing.into_response().status(), 500);
    }
}

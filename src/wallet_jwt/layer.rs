//! `WalletJwtLayer`: the configuration every [`WalletJwt`] service shares.

use std::fmt;
use std::sync::Arc;

use http::HeaderMap;
use tower_layer::Layer;

use super::service::{WalletJwt, bearer_token};
use super::{JwtError, JwtVerifier, WalletClaims};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BearerMode {
    Required,
    Optional,
}

/// What the layer and each of its services share: the verifier and whether
/// a bearer is required.
#[derive(Clone)]
pub(super) struct Config {
    verifier: JwtVerifier,
    mode: BearerMode,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("verifier", &self.verifier)
            .field("mode", &self.mode)
            .finish()
    }
}

impl Config {
    /// The verified claims of the request's bearer; `None` when an optional
    /// bearer is absent.
    pub(super) fn authenticate(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<WalletClaims>, JwtError> {
        match bearer_token(headers)? {
            Some(token) => self.verifier.verify(token).map(Some),
            None if self.mode == BearerMode::Optional => Ok(None),
            None => Err(JwtError::Missing),
        }
    }
}

/// Verifies `Authorization: Bearer <wallet JWT>`; see the [module docs](super).
///
/// Cheap to clone; clones share the verifier.
#[derive(Clone)]
#[must_use]
pub struct WalletJwtLayer {
    config: Arc<Config>,
}

impl WalletJwtLayer {
    /// Requires a valid wallet JWT on every request.
    pub fn new(verifier: JwtVerifier) -> Self {
        Self {
            config: Arc::new(Config {
                verifier,
                mode: BearerMode::Required,
            }),
        }
    }

    /// Lets requests without any `Authorization` header through without
    /// claims (the MCP endpoint, whose non-wallet tools need only the API
    /// key). A present but invalid bearer is still 401.
    pub fn optional_bearer(mut self) -> Self {
        Arc::make_mut(&mut self.config).mode = BearerMode::Optional;
        self
    }

    /// The verifier.
    pub fn verifier(&self) -> &JwtVerifier {
        &self.config.verifier
    }
}

impl fmt::Debug for WalletJwtLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalletJwtLayer")
            .field("config", &self.config)
            .finish()
    }
}

impl<S> Layer<S> for WalletJwtLayer {
    type Service = WalletJwt<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WalletJwt::from_config(inner, Arc::clone(&self.config))
    }
}

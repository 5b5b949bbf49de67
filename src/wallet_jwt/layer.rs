//! `WalletJwtLayer`: the configuration every [`WalletJwt`] service shares.

use std::fmt;
use std::sync::Arc;

use tower_layer::{Layer, Stack};

use super::service::WalletJwt;
use super::{JwtVerifier, RequireScopesLayer, ScopeSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BearerMode {
    Required,
    Optional,
}

/// What the layer and each of its services share: the verifier and whether
/// a bearer is required.
#[derive(Clone)]
pub(super) struct Config {
    pub(super) verifier: JwtVerifier,
    pub(super) mode: BearerMode,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("verifier", &self.verifier)
            .field("mode", &self.mode)
            .finish()
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

    /// This layer followed by [`RequireScopesLayer`] for `scopes`: a valid
    /// wallet JWT granting them, else 401 / 403 `insufficient_scope`.
    ///
    /// ```
    /// # use walletgate::wallet_jwt::{JwtVerifier, KeySet, Scope, WalletJwtLayer};
    /// let verifier = JwtVerifier::new(KeySet::new(), "https://auth.example", "https://api.example")?;
    /// let layer = WalletJwtLayer::new(verifier).require(Scope::ReadFavorites);
    /// # let _ = layer;
    /// # Ok::<(), walletgate::wallet_jwt::ConfigError>(())
    /// ```
    pub fn require(self, scopes: impl Into<ScopeSet>) -> Stack<RequireScopesLayer, WalletJwtLayer> {
        Stack::new(RequireScopesLayer::new(scopes), self)
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

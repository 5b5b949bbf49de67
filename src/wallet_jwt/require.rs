//! `RequireScopesLayer`: scopes and the path's wallet, per route.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use super::extract::WalletClaimsRejection;
use super::future::ResponseFuture;
use super::layer::NoBearer;
use super::{ScopeSet, WalletClaims};
use crate::body::ResponseBody;
use crate::envelope::DataApiError;

/// Requires the wallet JWT's scopes (and optionally the wallet a path names)
/// on the routes it wraps; see the [module docs](super).
///
/// Sits inside [`WalletJwtLayer`](super::WalletJwtLayer), which supplies the
/// claims; use it as an axum `route_layer` so 404s stay 404s:
///
/// ```
/// use axum::Router;
/// use axum::routing::{get, post};
/// use walletgate::wallet_jwt::{
///     JwtVerifier, KeySet, RequireScopesLayer, Scope, Wallet, WalletJwtLayer,
/// };
///
/// async fn favorites(Wallet(wallet): Wallet) -> String {
///     format!("favorites of {wallet}")
/// }
/// async fn declare_agent() -> &'static str {
///     "declared"
/// }
///
/// let verifier = JwtVerifier::new(KeySet::new(), "https://auth.example", "https://api.example")?;
/// let app: Router = Router::new()
///     .route(
///         "/api/v2/account/{wallet}/favorites",
///         get(favorites).route_layer(
///             RequireScopesLayer::new(Scope::ReadFavorites).wallet_in_path_after("account"),
///         ),
///     )
///     .route(
///         "/api/v2/accounts/agent",
///         post(declare_agent).route_layer(RequireScopesLayer::new(Scope::WriteWallets)),
///     )
///     .layer(WalletJwtLayer::new(verifier));
/// # let _ = app;
/// # Ok::<(), walletgate::wallet_jwt::ConfigError>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct RequireScopesLayer {
    scopes: ScopeSet,
    wallet_after_segment: Option<Arc<str>>,
}

impl RequireScopesLayer {
    /// Requires every scope of `scopes` (403 `insufficient_scope` otherwise).
    pub fn new(scopes: impl Into<ScopeSet>) -> Self {
        Self {
            scopes: scopes.into(),
            wallet_after_segment: None,
        }
    }

    /// Also requires that the path segment after the segment `segment`
    /// (`account` for `/api/v2/account/{wallet}/favorites`) is the JWT's
    /// wallet, compared case-insensitively: 403 otherwise. Paths without that
    /// segment pass. Matching by segment name keeps working under a nested
    /// router, which strips the prefix.
    pub fn wallet_in_path_after(mut self, segment: &str) -> Self {
        self.wallet_after_segment = Some(segment.into());
        self
    }

    /// The scopes this layer requires, e.g. to publish them in an API
    /// description generated from the same value that guards the route.
    ///
    /// ```
    /// use walletgate::wallet_jwt::{RequireScopesLayer, Scope};
    ///
    /// let guard = RequireScopesLayer::new(Scope::ReadFavorites).wallet_in_path_after("account");
    /// let names: Vec<&str> = guard.scopes().iter().map(Scope::as_str).collect();
    /// assert_eq!(names, ["read:favorites"]);
    /// assert_eq!(guard.wallet_path_segment(), Some("account"));
    /// ```
    pub fn scopes(&self) -> &ScopeSet {
        &self.scopes
    }

    /// The segment set by [`wallet_in_path_after`](Self::wallet_in_path_after):
    /// the path segment after it must be the token's wallet.
    pub fn wallet_path_segment(&self) -> Option<&str> {
        self.wallet_after_segment.as_deref()
    }

    fn check<B>(&self, request: &Request<B>) -> Result<(), DataApiError> {
        let extensions = request.extensions();
        let Some(claims) = extensions.get::<WalletClaims>() else {
            let rejection = if extensions.get::<NoBearer>().is_some() {
                WalletClaimsRejection::MissingToken
            } else {
                WalletClaimsRejection::missing_layer()
            };
            return Err(rejection.into_data_api_error());
        };
        claims.require_all(&self.scopes)?;
        if let Some(segment) = &self.wallet_after_segment
            && let Some(named) = segment_after(request.uri().path(), segment)
        {
            claims.require_wallet(named)?;
        }
        Ok(())
    }
}

/// The non-empty path segment right after the first segment equal to `name`.
fn segment_after<'p>(path: &'p str, name: &str) -> Option<&'p str> {
    let mut segments = path.split('/');
    segments.by_ref().find(|s| *s == name)?;
    segments.next().filter(|s| !s.is_empty())
}

impl fmt::Debug for RequireScopesLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequireScopesLayer")
            .field("scopes", &self.scopes)
            .field("wallet_after_segment", &self.wallet_after_segment)
            .finish()
    }
}

impl<S> Layer<S> for RequireScopesLayer {
    type Service = RequireScopes<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequireScopes {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`RequireScopesLayer`] wraps around `S`.
#[derive(Clone)]
pub struct RequireScopes<S> {
    inner: S,
    layer: RequireScopesLayer,
}

impl<S> RequireScopes<S> {
    /// Wraps `inner`; same as `RequireScopesLayer::new(scopes).layer(inner)`.
    pub fn new(inner: S, scopes: impl Into<ScopeSet>) -> Self {
        RequireScopesLayer::new(scopes).layer(inner)
    }

    define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for RequireScopes<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequireScopes")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequireScopes<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        match self.layer.check(&request) {
            Ok(()) => ResponseFuture::inner(self.inner.call(request)),
            Err(error) => ResponseFuture::rejected(error.into_response()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_after_finds_the_wallet() {
        let path = "/api/v2/account/0xabc/favorites";
        assert_eq!(segment_after(path, "account"), Some("0xabc"));
        assert_eq!(segment_after("/0xabc/favorites", "account"), None);
        assert_eq!(segment_after("/api/v2/account/", "account"), None);
        assert_eq!(segment_after("/api/v2/accounts/0xabc", "account"), None);
    }
}

//! `RequireScopesLayer`: scopes and the path's wallet, per route.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use super::extract::NoBearer;
use super::extract::WalletClaimsRejection;
use super::future::RequireScopesFuture;
use super::{ResourceMetadataUrl, ScopeError, ScopeSet, WalletClaims, WalletMismatch};
use crate::body::ResponseBody;
use crate::envelope::{DataApiRejection, RenderDataApiRejection, data_api_rejection};

/// Why [`RequireScopesLayer`] refused a request (axum-core's composite
/// rejection: one variant per cause, each a data API rejection of its own).
/// It rides in the rejection's response extensions; a caller renders it with
/// [`RequireScopesLayer::with_rejection`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequireScopesRejection {
    /// No claims: no bearer behind an optional-bearer `WalletJwtLayer`
    /// (401 `invalid_token`), or no `WalletJwtLayer` at all (500).
    NoClaims(WalletClaimsRejection),
    /// The token lacks scopes: 403 `insufficient_scope`.
    InsufficientScope(ScopeError),
    /// The path names another wallet than the token's: 403.
    WalletMismatch(WalletMismatch),
}

/// `method` of the rejection inside.
macro_rules! delegate {
    ($self:ident, $method:ident) => {
        match $self {
            Self::NoClaims(rejection) => DataApiRejection::$method(rejection),
            Self::InsufficientScope(error) => DataApiRejection::$method(error),
            Self::WalletMismatch(error) => DataApiRejection::$method(error),
        }
    };
}

/// Its cause's status, message and headers.
impl DataApiRejection for RequireScopesRejection {
    fn kind(&self) -> &'static str {
        delegate!(self, kind)
    }

    fn status(&self) -> StatusCode {
        delegate!(self, status)
    }

    fn message(&self) -> Cow<'static, str> {
        delegate!(self, message)
    }

    fn www_authenticate(&self) -> Option<HeaderValue> {
        delegate!(self, www_authenticate)
    }
}

data_api_rejection!(RequireScopesRejection);

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
///             RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account"),
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
    config: Arc<Config>,
}

/// What the layer and each of its services share.
#[derive(Clone, Debug)]
struct Config {
    scopes: ScopeSet,
    wallet_after_segment: Option<Box<str>>,
    reject: RenderDataApiRejection<RequireScopesRejection>,
}

impl RequireScopesLayer {
    /// Requires every scope of `scopes` (403 `insufficient_scope` otherwise).
    pub fn new(scopes: impl Into<ScopeSet>) -> Self {
        Self {
            config: Arc::new(Config {
                scopes: scopes.into(),
                wallet_after_segment: None,
                reject: RenderDataApiRejection::default(),
            }),
        }
    }

    /// Renders refusals with `render` instead of the Area A envelope: it
    /// gets the typed [`RequireScopesRejection`] (status, message and the
    /// RFC 6750 challenge through [`DataApiRejection`]) and returns the
    /// response; the rejection still rides in the response extensions.
    pub fn with_rejection<F>(mut self, render: F) -> Self
    where
        F: Fn(RequireScopesRejection) -> Response<Bytes> + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.config)
            .reject
            .replace_render(RenderDataApiRejection::new(render));
        self
    }

    /// Names the protected resource's metadata document (RFC 9728) in the
    /// `Bearer` challenge of every 401 and 403 `insufficient_scope`, also
    /// one a [`with_rejection`](Self::with_rejection) renders.
    pub fn with_resource_metadata(mut self, url: ResourceMetadataUrl) -> Self {
        Arc::make_mut(&mut self.config)
            .reject
            .set_bearer_params(Some(url.param()));
        self
    }

    /// Also requires that the path segment after the segment `segment`
    /// (`account` for `/api/v2/account/{wallet}/favorites`) is the JWT's
    /// wallet, compared case-insensitively: 403 otherwise. Paths without that
    /// segment pass. Matching by segment name keeps working under a nested
    /// router, which strips the prefix.
    pub fn with_wallet_in_path_after(mut self, segment: &str) -> Self {
        Arc::make_mut(&mut self.config).wallet_after_segment = Some(segment.into());
        self
    }

    /// The scopes this layer requires, e.g. to publish them in an API
    /// description generated from the same value that guards the route.
    ///
    /// ```
    /// use walletgate::wallet_jwt::{RequireScopesLayer, Scope};
    ///
    /// let guard = RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account");
    /// let names: Vec<&str> = guard.scopes().iter().map(Scope::as_str).collect();
    /// assert_eq!(names, ["read:favorites"]);
    /// assert_eq!(guard.wallet_path_segment(), Some("account"));
    /// ```
    pub fn scopes(&self) -> &ScopeSet {
        &self.config.scopes
    }

    /// The segment set by [`wallet_in_path_after`](Self::with_wallet_in_path_after):
    /// the path segment after it must be the token's wallet.
    pub fn wallet_path_segment(&self) -> Option<&str> {
        self.config.wallet_after_segment.as_deref()
    }
}

impl Config {
    fn check<B>(&self, request: &Request<B>) -> Result<(), RequireScopesRejection> {
        let extensions = request.extensions();
        let Some(claims) = extensions.get::<WalletClaims>() else {
            let rejection = if extensions.get::<NoBearer>().is_some() {
                WalletClaimsRejection::MissingToken
            } else {
                WalletClaimsRejection::missing_layer()
            };
            trace_decision!(INFO, "require_scopes", required = %self.scopes, outcome = "invalid_token");
            return Err(RequireScopesRejection::NoClaims(rejection));
        };
        match self.check_claims(claims, request.uri().path()) {
            Ok(()) => {
                trace_decision!(
                    DEBUG,
                    "require_scopes",
                    wallet = %claims.wallet(),
                    scopes = %claims.scopes(),
                    outcome = "allowed",
                );
                Ok(())
            }
            Err((_outcome, error)) => {
                trace_decision!(
                    INFO,
                    "require_scopes",
                    wallet = %claims.wallet(),
                    scopes = %claims.scopes(),
                    required = %self.scopes,
                    outcome = _outcome,
                );
                Err(error)
            }
        }
    }

    /// The verdict on present claims; a refusal with its outcome's name.
    fn check_claims(
        &self,
        claims: &WalletClaims,
        path: &str,
    ) -> Result<(), (&'static str, RequireScopesRejection)> {
        claims.require_all(&self.scopes).map_err(|error| {
            let rejection = RequireScopesRejection::InsufficientScope(error);
            ("insufficient_scope", rejection)
        })?;
        if let Some(segment) = &self.wallet_after_segment
            && let Some(named) = segment_after(path, segment)
        {
            claims.require_wallet(named).map_err(|error| {
                let rejection = RequireScopesRejection::WalletMismatch(error);
                ("wallet_mismatch", rejection)
            })?;
        }
        Ok(())
    }
}

/// The non-empty path segment right after the first segment equal to `name`.
fn segment_after<'p>(path: &'p str, name: &str) -> Option<&'p str> {
    // Split as bytes: `str::split('/')` runs a memchr per segment, whose
    // setup cost more than these short segments (most of a guard's check).
    let mut segments = path.as_bytes().split(|&byte| byte == b'/');
    segments.by_ref().find(|s| *s == name.as_bytes())?;
    let segment = segments.next().filter(|s| !s.is_empty())?;
    // Cut at an ASCII '/', so always UTF-8.
    std::str::from_utf8(segment).ok()
}

impl fmt::Debug for RequireScopesLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequireScopesLayer")
            .field("config", &self.config)
            .finish()
    }
}

impl<S> Layer<S> for RequireScopesLayer {
    type Service = RequireScopes<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequireScopes {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service [`RequireScopesLayer`] wraps around `S`.
#[derive(Clone)]
pub struct RequireScopes<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RequireScopes<S> {
    /// Wraps `inner`; same as `RequireScopes::layer(scopes).layer(inner)`.
    pub fn new(inner: S, scopes: impl Into<ScopeSet>) -> Self {
        RequireScopesLayer::new(scopes).layer(inner)
    }

    define_inner_service_accessors!();
}

impl RequireScopes<()> {
    /// Makes the layer of this service (tower-http's `Foo::layer`): the same
    /// as [`RequireScopesLayer::new`].
    pub fn layer(scopes: impl Into<ScopeSet>) -> RequireScopesLayer {
        RequireScopesLayer::new(scopes)
    }
}

impl<S: fmt::Debug> fmt::Debug for RequireScopes<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequireScopes")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequireScopes<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = RequireScopesFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        match self.config.check(&request) {
            Ok(()) => RequireScopesFuture::inner(self.inner.call(request)),
            Err(rejection) => RequireScopesFuture::rejected(self.config.reject.render(rejection)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::wallet_jwt::Scope;

    const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    const OTHER: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    fn claims(scope: &str) -> WalletClaims {
        let wallet = WALLET.parse().unwrap();
        WalletClaims::new(
            wallet,
            scope.parse().unwrap(),
            "jti".into(),
            "pat".into(),
            1,
            2,
        )
    }

    /// The status `layer` answers for `path` with `extension` in the request.
    async fn status(
        layer: RequireScopesLayer,
        path: &str,
        extension: Option<impl Clone + Send + Sync + 'static>,
    ) -> u16 {
        let mut request = Request::get(path).body(()).unwrap();
        if let Some(extension) = extension {
            request.extensions_mut().insert(extension);
        }
        let inner = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
        let service = tower_layer::Layer::layer(&layer, inner);
        service.oneshot(request).await.unwrap().status().as_u16()
    }

    #[tokio::test]
    async fn granted_scopes_pass_and_missing_ones_are_403() {
        let guard = RequireScopes::layer(Scope::ReadFavorites);
        assert_eq!(
            status(guard.clone(), "/", Some(claims("read:favorites"))).await,
            200
        );
        assert_eq!(status(guard, "/", Some(claims("read:wallets"))).await, 403);
    }

    #[tokio::test]
    async fn the_path_wallet_must_be_the_tokens() {
        let guard =
            RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account");
        let mine = format!("/api/v2/account/{}/favorites", WALLET.to_lowercase());
        let other = format!("/api/v2/account/{OTHER}/favorites");
        assert_eq!(
            status(guard.clone(), &mine, Some(claims("read:favorites"))).await,
            200
        );
        assert_eq!(
            status(guard, &other, Some(claims("read:favorites"))).await,
            403
        );
    }

    #[tokio::test]
    async fn no_bearer_is_401_and_no_wallet_jwt_layer_is_500() {
        let guard = RequireScopes::layer(Scope::ReadFavorites);
        assert_eq!(status(guard.clone(), "/", Some(NoBearer)).await, 401);
        assert_eq!(status(guard, "/", None::<NoBearer>).await, 500);
    }

    #[tokio::test]
    async fn the_resource_metadata_url_is_in_every_bearer_challenge() {
        let url = "https://api.test/.well-known/oauth-protected-resource";
        let guard = RequireScopesLayer::new(Scope::ReadFavorites)
            .with_resource_metadata(ResourceMetadataUrl::new(url).unwrap());
        let inner = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
        let service = tower_layer::Layer::layer(&guard, inner);
        let challenge = |extension: Result<WalletClaims, NoBearer>| {
            let mut request = Request::get("/").body(()).unwrap();
            match extension {
                Ok(claims) => {
                    request.extensions_mut().insert(claims);
                }
                Err(none) => {
                    request.extensions_mut().insert(none);
                }
            }
            let service = service.clone();
            async move {
                let response = service.oneshot(request).await.unwrap();
                let value = response.headers()["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .to_owned();
                (response.status().as_u16(), value)
            }
        };
        assert_eq!(
            challenge(Err(NoBearer)).await,
            (
                401,
                format!("Bearer error=\"invalid_token\", resource_metadata=\"{url}\"")
            )
        );
        assert_eq!(
            challenge(Ok(claims("read:wallets"))).await,
            (
                403,
                format!(
                    "Bearer error=\"insufficient_scope\", scope=\"read:favorites\", resource_metadata=\"{url}\""
                )
            )
        );
    }

    #[test]
    fn segment_after_finds_the_wallet() {
        let path = "/api/v2/account/0xabc/favorites";
        assert_eq!(segment_after(path, "account"), Some("0xabc"));
        assert_eq!(segment_after("/0xabc/favorites", "account"), None);
        assert_eq!(segment_after("/api/v2/account/", "account"), None);
        assert_eq!(segment_after("/api/v2/accounts/0xabc", "account"), None);
        assert_eq!(segment_after("/café/account/ünï/x", "account"), Some("ünï"));
        assert_eq!(segment_after("/account//0xabc", "account"), None);
    }

    #[tokio::test]
    async fn with_rejection_renders_each_refusal_and_keeps_it_in_the_extensions() {
        let guard = RequireScopesLayer::new(Scope::ReadFavorites)
            .with_wallet_in_path_after("account")
            .with_rejection(|rejection| {
                let mut response = Response::new(Bytes::from(rejection.kind()));
                *response.status_mut() = rejection.status();
                rejection
                    .to_data_api_error()
                    .write_headers(response.headers_mut());
                response
            });
        let inner = service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        });
        let service = tower_layer::Layer::layer(&guard, inner);
        let call = |path: String, granted: Option<WalletClaims>| {
            let mut request = Request::get(path).body(()).unwrap();
            if let Some(granted) = granted {
                request.extensions_mut().insert(granted);
            } else {
                request.extensions_mut().insert(NoBearer);
            }
            service.clone().oneshot(request)
        };
        let other = format!("/api/v2/account/{OTHER}/favorites");
        let cases = [
            (call("/".into(), None).await.unwrap(), 401, "missing_token"),
            (
                call("/".into(), Some(claims("read:wallets")))
                    .await
                    .unwrap(),
                403,
                "insufficient_scope",
            ),
            (
                call(other, Some(claims("read:favorites"))).await.unwrap(),
                403,
                "wallet_mismatch",
            ),
        ];
        for (response, status, kind) in cases {
            use http_body_util::BodyExt;
            assert_eq!(response.status(), status, "{kind}");
            let rejection = response.extensions().get::<RequireScopesRejection>();
            assert_eq!(rejection.map(DataApiRejection::kind), Some(kind));
            let challenge = response.headers().get("www-authenticate").cloned();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, kind);
            match kind {
                "missing_token" => {
                    assert_eq!(challenge.unwrap(), "Bearer error=\"invalid_token\"");
                }
                "insufficient_scope" => assert_eq!(
                    challenge.unwrap(),
                    "Bearer error=\"insufficient_scope\", scope=\"read:favorites\""
                ),
                _ => assert_eq!(challenge, None),
            }
        }
    }
}

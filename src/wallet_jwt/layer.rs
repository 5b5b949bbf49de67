//! `WalletJwtLayer`: the configuration every [`WalletJwt`] service shares.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tower_layer::{Layer, Stack};

use super::service::WalletJwt;
use super::{JwtError, JwtVerifier, RequireScopesLayer, ResourceMetadataUrl, ScopeSet};
use crate::envelope::RenderDataApiRejection;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BearerMode {
    Required,
    Optional,
}

/// What the layer and each of its services share: the verifier, whether
/// a bearer is required and how a refusal is answered.
#[derive(Clone)]
pub(super) struct Config {
    pub(super) verifier: JwtVerifier,
    pub(super) mode: BearerMode,
    pub(super) reject: RenderDataApiRejection<JwtError>,
    pub(super) resource_metadata: Option<ResourceMetadataUrl>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("verifier", &self.verifier)
            .field("mode", &self.mode)
            .field("reject", &self.reject)
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
                reject: RenderDataApiRejection::default(),
                resource_metadata: None,
            }),
        }
    }

    /// Renders refusals with `render` instead of the Area A envelope: it
    /// gets the typed [`JwtError`] (status, message and the RFC 6750
    /// challenge through [`DataApiRejection`](crate::envelope::DataApiRejection))
    /// and returns the response; the error still rides in the response
    /// extensions.
    pub fn with_rejection<F>(mut self, render: F) -> Self
    where
        F: Fn(JwtError) -> Response<Bytes> + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.config)
            .reject
            .replace_render(RenderDataApiRejection::new(render));
        self
    }

    /// Names the protected resource's metadata document (RFC 9728) in every
    /// `Bearer` challenge of a 401, also one a
    /// [`with_rejection`](Self::with_rejection) renders:
    /// `WWW-Authenticate: Bearer error="invalid_token", resource_metadata="<url>"`.
    /// [`require`](Self::require) hands it to its scope guard.
    pub fn with_resource_metadata(mut self, url: ResourceMetadataUrl) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.reject.set_bearer_params(Some(url.param()));
        config.resource_metadata = Some(url);
        self
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
    /// wallet JWT granting them, else 401 / 403 `insufficient_scope`. The
    /// guard answers in the Area A envelope; to render its refusals too,
    /// stack a [`RequireScopesLayer::with_rejection`] yourself.
    ///
    /// ```
    /// # use walletgate::wallet_jwt::{JwtVerifier, KeySet, Scope, WalletJwtLayer};
    /// let verifier = JwtVerifier::new(KeySet::new(), "https://auth.example", "https://api.example")?;
    /// let layer = WalletJwtLayer::new(verifier).require(Scope::ReadFavorites);
    /// # let _ = layer;
    /// # Ok::<(), walletgate::wallet_jwt::ConfigError>(())
    /// ```
    pub fn require(self, scopes: impl Into<ScopeSet>) -> Stack<RequireScopesLayer, WalletJwtLayer> {
        self.require_guard(RequireScopesLayer::new(scopes))
    }

    /// This layer followed by `guard`, a scope guard configured beyond its
    /// scopes (say [`with_wallet_in_path_after`](RequireScopesLayer::with_wallet_in_path_after)),
    /// which gets this layer's resource metadata URL as with
    /// [`require`](Self::require).
    ///
    /// On one axum handler, `handler.layer(…)` puts both gates inside that
    /// handler's route: as `route_layer`s each would be a boxed route of its
    /// own, and axum clones every boxed route below the one it calls on each
    /// request (two allocations or more per gate).
    pub fn require_guard(
        self,
        guard: RequireScopesLayer,
    ) -> Stack<RequireScopesLayer, WalletJwtLayer> {
        let guard = match &self.config.resource_metadata {
            Some(url) => guard.with_resource_metadata(url.clone()),
            None => guard,
        };
        Stack::new(guard, self)
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::Ready;

    use http::Request;
    use http::header::AUTHORIZATION;
    use http_body_util::BodyExt;
    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::envelope::DataApiRejection;
    use crate::wallet_jwt::{KeySet, Scope};

    const ORIGIN: &str = "https://api.walletgate.test";

    fn verifier() -> JwtVerifier {
        JwtVerifier::new(KeySet::new(), ORIGIN, ORIGIN).unwrap()
    }

    type Inner =
        tower::util::ServiceFn<fn(Request<()>) -> Ready<Result<Response<String>, Infallible>>>;

    fn ok(_: Request<()>) -> Ready<Result<Response<String>, Infallible>> {
        std::future::ready(Ok(Response::new("served".to_owned())))
    }

    /// The status, `WWW-Authenticate` and body `layer` answers to a request
    /// with `authorization`.
    async fn answer<L, B>(layer: L, authorization: Option<&'static str>) -> (u16, String, String)
    where
        L: Layer<Inner>,
        L::Service: tower::Service<Request<()>, Response = Response<B>, Error = Infallible>,
        B: http_body::Body,
        B::Error: std::fmt::Debug,
    {
        let mut request = Request::new(());
        if let Some(value) = authorization {
            request
                .headers_mut()
                .insert(AUTHORIZATION, http::HeaderValue::from_static(value));
        }
        let inner: Inner = service_fn(ok as fn(_) -> _);
        let response = layer.layer(inner).oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get("www-authenticate")
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            challenge,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[test]
    fn clones_share_one_configuration() {
        let layer = WalletJwtLayer::new(verifier());
        let clone = layer.clone();
        assert!(Arc::ptr_eq(&layer.config, &clone.config));
        assert_eq!(clone.config.mode, BearerMode::Required);
    }

    #[test]
    fn optional_bearer_changes_only_the_mode() {
        let layer = WalletJwtLayer::new(verifier()).optional_bearer();
        assert_eq!(layer.config.mode, BearerMode::Optional);
        assert_eq!(layer.verifier().keys().len(), 0);
    }

    #[tokio::test]
    async fn the_resource_metadata_url_rides_every_401_and_reaches_the_scope_guard() {
        let url = ResourceMetadataUrl::new(&format!(
            "{ORIGIN}/.well-known/oauth-protected-resource/mcp"
        ))
        .unwrap();
        let expected = format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{}\"",
            url.as_str()
        );
        let layer = WalletJwtLayer::new(verifier()).with_resource_metadata(url.clone());
        for authorization in [None, Some("Bearer not.a.jwt"), Some("Basic abc")] {
            let (status, challenge, _) = answer(layer.clone(), authorization).await;
            assert_eq!((status, challenge.as_str()), (401, expected.as_str()));
        }
        // A caller's rendering keeps it, whichever setter came first.
        let rendered = WalletJwtLayer::new(verifier())
            .with_resource_metadata(url.clone())
            .with_rejection(|error| {
                let mut response = Response::new(Bytes::new());
                *response.status_mut() = error.status();
                error
                    .to_data_api_error()
                    .write_headers(response.headers_mut());
                response
            });
        assert_eq!(answer(rendered, None).await.1, expected);
        let guarded = WalletJwtLayer::new(verifier())
            .with_resource_metadata(url.clone())
            .require(Scope::ReadFavorites);
        assert_eq!(answer(guarded, None).await.1, expected);
        let configured =
            RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account");
        let guarded = WalletJwtLayer::new(verifier())
            .with_resource_metadata(url)
            .require_guard(configured);
        assert_eq!(answer(guarded, None).await.1, expected);
    }

    #[tokio::test]
    async fn by_default_a_refusal_is_the_area_a_401() {
        let (status, challenge, body) = answer(WalletJwtLayer::new(verifier()), None).await;
        assert_eq!(status, 401);
        assert_eq!(challenge, "Bearer error=\"invalid_token\"");
        assert_eq!(
            body,
            r#"{"error":{"message":"Missing bearer token: send Authorization: Bearer <wallet JWT>","status":401,"code":16}}"#
        );
    }

    #[tokio::test]
    async fn with_rejection_renders_the_typed_error() {
        let layer = WalletJwtLayer::new(verifier()).with_rejection(|error| {
            let mut response = Response::new(Bytes::from(error.kind()));
            *response.status_mut() = error.status();
            error
                .to_data_api_error()
                .write_headers(response.headers_mut());
            response
        });
        let (status, challenge, body) = answer(layer.clone(), None).await;
        assert_eq!((status, body.as_str()), (401, "missing"));
        assert_eq!(challenge, "Bearer error=\"invalid_token\"");
        let (status, _, body) = answer(layer, Some("Basic abc")).await;
        assert_eq!((status, body.as_str()), (401, "malformed"));
    }

    #[tokio::test]
    async fn require_stacks_the_scope_guard_inside() {
        let layer = WalletJwtLayer::new(verifier()).optional_bearer();
        let (status, _, body) = answer(layer.require(Scope::ReadFavorites), None).await;
        assert_eq!(status, 401, "no bearer passes the gate, the guard refuses");
        assert!(body.contains("Missing bearer token"), "{body}");
    }
}

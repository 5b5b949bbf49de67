//! `WalletJwt`, the service [`WalletJwtLayer`] wraps around another.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Request, Response, header::AUTHORIZATION};
use tower_service::Service;

use super::extract::NoBearer;
use super::future::{ResponseFuture, Verdict};
use super::layer::{BearerMode, Config, WalletJwtLayer};
use super::{JwtError, JwtVerifier};
use crate::body::ResponseBody;

/// The service [`WalletJwtLayer`] wraps around `S`.
#[derive(Clone)]
pub struct WalletJwt<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> WalletJwt<S> {
    pub(super) fn from_config(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// Wraps `inner`; same as `WalletJwt::layer(verifier).layer(inner)`.
    pub fn new(inner: S, verifier: JwtVerifier) -> Self {
        tower_layer::Layer::layer(&WalletJwtLayer::new(verifier), inner)
    }

    define_inner_service_accessors!();
}

impl WalletJwt<()> {
    /// Makes the layer of this service (tower-http's `Foo::layer`): the same
    /// as [`WalletJwtLayer::new`].
    pub fn layer(verifier: JwtVerifier) -> WalletJwtLayer {
        WalletJwtLayer::new(verifier)
    }
}

impl<S: fmt::Debug> fmt::Debug for WalletJwt<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalletJwt")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

/// The bearer token of the one `Authorization` header; `None` without one.
/// The scheme is case-insensitive (RFC 7235).
pub(super) fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, JwtError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(JwtError::Malformed);
    }
    let value = value.to_str().map_err(|_| JwtError::Malformed)?;
    let (scheme, token) = value.split_once(' ').ok_or(JwtError::Malformed)?;
    let token = token.trim_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(JwtError::Malformed);
    }
    Ok(Some(token))
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for WalletJwt<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let token = match bearer_token(request.headers()) {
            Ok(Some(token)) => token.to_owned(),
            Ok(None) if self.config.mode == BearerMode::Optional => {
                trace_decision!(DEBUG, "wallet_jwt", outcome = "no_bearer");
                request.extensions_mut().insert(NoBearer);
                return ResponseFuture::inner(self.inner.call(request));
            }
            Ok(None) => return rejected(&self.config, JwtError::Missing),
            Err(error) => return rejected(&self.config, error),
        };
        // The token goes no further: handlers get the verified claims.
        request.headers_mut().remove(AUTHORIZATION);
        let config = Arc::clone(&self.config);
        let verdict: Verdict = Box::pin(async move { config.verifier.authenticate(&token).await });
        // The clone takes the place of the service that was polled ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let reject = self.config.reject.clone();
        ResponseFuture::verifying(verdict, request, inner, reject)
    }
}

fn rejected<S: Service<Request<B>>, B>(config: &Config, error: JwtError) -> ResponseFuture<S, B> {
    trace_decision!(INFO, "wallet_jwt", outcome = "invalid_token", reason = ?error);
    error.count_refusal();
    ResponseFuture::rejected(config.reject.render(error))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http::HeaderValue;
    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::clock::FakeClock;
    use crate::wallet_jwt::jwt::{self, AccessTokenClaims, Audience};
    use crate::wallet_jwt::{KeySet, VerificationKey, WalletClaims};

    const ORIGIN: &str = "https://api.walletgate.test";
    const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    const NOW: u64 = 1_800_000_000;

    fn headers(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, HeaderValue::from_static(value));
        }
        headers
    }

    /// A verifier and a token it accepts (public test key, fixed seed).
    fn verifier_and_token() -> (JwtVerifier, String) {
        let key = ed25519_dalek::SigningKey::from_bytes(&[0x11; 32]);
        let keys = KeySet::new();
        keys.insert("k", VerificationKey::ed25519(key.verifying_key()))
            .unwrap();
        let verifier = JwtVerifier::new(keys, ORIGIN, ORIGIN)
            .unwrap()
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)));
        let claims = AccessTokenClaims {
            iss: ORIGIN.into(),
            aud: Audience::One(ORIGIN.into()),
            sub: WALLET.into(),
            wallet: WALLET.into(),
            client_id: "pat".into(),
            scope: "read:favorites".into(),
            iat: NOW,
            nbf: NOW,
            exp: NOW + 600,
            jti: "jti".into(),
        };
        (verifier, jwt::sign_eddsa("k", &claims, &key).unwrap())
    }

    /// Answers what the gate handed on: the wallet, the marker, the header.
    async fn echo(request: Request<()>) -> Result<Response<String>, Infallible> {
        let wallet = request
            .extensions()
            .get::<WalletClaims>()
            .map(|c| c.wallet().to_string());
        let no_bearer = request.extensions().get::<NoBearer>().is_some();
        let header = request.headers().contains_key(AUTHORIZATION);
        Ok(Response::new(format!("{wallet:?} {no_bearer} {header}")))
    }

    async fn call(layer: WalletJwtLayer, authorization: Option<&str>) -> (u16, String) {
        use http_body_util::BodyExt;
        let mut request = Request::new(());
        if let Some(value) = authorization {
            request
                .headers_mut()
                .insert(AUTHORIZATION, value.parse().unwrap());
        }
        let service = tower_layer::Layer::layer(&layer, service_fn(echo));
        let response = service.oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token(&headers(&["bEaReR abc"])), Ok(Some("abc")));
        assert_eq!(bearer_token(&headers(&["Bearer  abc "])), Ok(Some("abc")));
    }

    #[test]
    fn other_schemes_and_duplicates_are_malformed() {
        assert_eq!(
            bearer_token(&headers(&["Basic abc"])),
            Err(JwtError::Malformed)
        );
        assert_eq!(
            bearer_token(&headers(&["Bearer"])),
            Err(JwtError::Malformed)
        );
        assert_eq!(
            bearer_token(&headers(&["Bearer a", "Bearer b"])),
            Err(JwtError::Malformed)
        );
        assert_eq!(bearer_token(&headers(&[])), Ok(None));
    }

    #[tokio::test]
    async fn a_valid_bearer_reaches_the_inner_service_as_claims_never_as_the_token() {
        let (verifier, token) = verifier_and_token();
        let bearer = format!("Bearer {token}");
        let (status, body) = call(WalletJwt::layer(verifier), Some(&bearer)).await;
        assert_eq!(status, 200);
        assert_eq!(body, format!("Some({WALLET:?}) false false"));
    }

    #[tokio::test]
    async fn a_missing_or_invalid_bearer_is_401_invalid_token() {
        let (verifier, token) = verifier_and_token();
        let tampered = format!("Bearer {token}x");
        for authorization in [None, Some("Basic abc"), Some(tampered.as_str())] {
            let (status, body) = call(WalletJwtLayer::new(verifier.clone()), authorization).await;
            assert_eq!(status, 401, "{body}");
            assert!(body.contains("\"status\":401"), "Area A envelope: {body}");
        }
    }

    #[tokio::test]
    async fn an_optional_bearer_lets_a_request_without_one_through_marked() {
        let (verifier, token) = verifier_and_token();
        let layer = WalletJwtLayer::new(verifier).optional_bearer();
        assert_eq!(
            call(layer.clone(), None).await,
            (200, "None true false".into())
        );
        let (status, _) = call(layer, Some(&format!("Bearer {token}x"))).await;
        assert_eq!(status, 401, "a present but invalid bearer is still refused");
    }
}

//! `WalletJwtLayer` and its service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Request, Response, header::AUTHORIZATION};
use tower_layer::Layer;
use tower_service::Service;

use super::future::ResponseFuture;
use super::{JwtError, JwtVerifier, WalletClaims};
use crate::body::ResponseBody;

/// Marks a request that passed an optional-bearer [`WalletJwtLayer`] without
/// a bearer, so extractors can tell "no token" (401) from "no layer" (500).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoBearer;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BearerMode {
    Required,
    Optional,
}

/// Verifies `Authorization: Bearer <wallet JWT>`; see the [module docs](super).
#[derive(Clone)]
#[must_use]
pub struct WalletJwtLayer {
    verifier: Arc<JwtVerifier>,
    mode: BearerMode,
}

impl WalletJwtLayer {
    /// Requires a valid wallet JWT on every request.
    pub fn new(verifier: JwtVerifier) -> Self {
        Self {
            verifier: Arc::new(verifier),
            mode: BearerMode::Required,
        }
    }

    /// Lets requests without any `Authorization` header through without
    /// claims (the MCP endpoint, whose non-wallet tools need only the API
    /// key). A present but invalid bearer is still 401.
    pub fn optional_bearer(mut self) -> Self {
        self.mode = BearerMode::Optional;
        self
    }

    /// The verifier.
    pub fn verifier(&self) -> &JwtVerifier {
        &self.verifier
    }
}

impl fmt::Debug for WalletJwtLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalletJwtLayer")
            .field("verifier", &self.verifier)
            .field("mode", &self.mode)
            .finish()
    }
}

impl<S> Layer<S> for WalletJwtLayer {
    type Service = WalletJwt<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WalletJwt {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`WalletJwtLayer`] wraps around `S`.
#[derive(Clone)]
pub struct WalletJwt<S> {
    inner: S,
    layer: WalletJwtLayer,
}

impl<S> WalletJwt<S> {
    /// Wraps `inner`; same as `WalletJwtLayer::new(verifier).layer(inner)`.
    pub fn new(inner: S, verifier: JwtVerifier) -> Self {
        WalletJwtLayer::new(verifier).layer(inner)
    }

    /// Gets a reference to the inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Gets a mutable reference to the inner service.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for WalletJwt<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalletJwt")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

/// The bearer token of the one `Authorization` header; `None` without one.
/// The scheme is case-insensitive (RFC 7235).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, JwtError> {
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

impl WalletJwtLayer {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Option<WalletClaims>, JwtError> {
        match bearer_token(headers)? {
            Some(token) => self.verifier.verify(token).map(Some),
            None if self.mode == BearerMode::Optional => Ok(None),
            None => Err(JwtError::Missing),
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for WalletJwt<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        match self.layer.authenticate(request.headers()) {
            Ok(Some(claims)) => {
                // The token goes no further: handlers get the verified claims.
                request.headers_mut().remove(AUTHORIZATION);
                request.extensions_mut().insert(claims);
            }
            Ok(None) => {
                request.extensions_mut().insert(NoBearer);
            }
            Err(error) => return ResponseFuture::rejected(error.into_response()),
        }
        ResponseFuture::inner(self.inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, HeaderValue::from_static(value));
        }
        headers
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
}

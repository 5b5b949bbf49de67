//! Extractors: [`WalletClaims`], `Option<WalletClaims>` and [`Wallet`].

use std::borrow::Cow;

use alloy_primitives::Address;
use axum_core::extract::{FromRequestParts, OptionalFromRequestParts};
use http::request::Parts;
use http::{HeaderValue, StatusCode};

use super::{JwtError, WalletClaims};
use crate::envelope::{DataApiRejection, MissingExtension, data_api_rejection};

/// Marks a request that passed an optional-bearer [`WalletJwtLayer`] without
/// a bearer, so extractors can tell "no token" (401) from "no layer" (500).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoBearer;

/// Why the claims extractor found no claims.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalletClaimsRejection {
    /// An optional-bearer `WalletJwtLayer` saw no bearer: 401 `invalid_token`.
    MissingToken,
    /// No `WalletJwtLayer` ran in front of this route: a wiring fault, 500.
    MissingLayer(MissingExtension),
}

impl WalletClaimsRejection {
    /// The claims are missing because no `WalletJwtLayer` ran.
    pub(crate) fn missing_layer() -> Self {
        Self::MissingLayer(MissingExtension::data_api::<WalletClaims>("WalletJwtLayer"))
    }
}

/// No bearer: [`JwtError::Missing`]'s 401; no layer: 500 naming it.
impl DataApiRejection for WalletClaimsRejection {
    fn kind(&self) -> &'static str {
        match self {
            Self::MissingToken => "missing_token",
            Self::MissingLayer(_) => "missing_layer",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::MissingToken => DataApiRejection::status(&JwtError::Missing),
            Self::MissingLayer(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn message(&self) -> Cow<'static, str> {
        match self {
            Self::MissingToken => Cow::Borrowed(JwtError::Missing.message()),
            Self::MissingLayer(missing) => Cow::Owned(missing.to_string()),
        }
    }

    fn www_authenticate(&self) -> Option<HeaderValue> {
        match self {
            Self::MissingToken => DataApiRejection::www_authenticate(&JwtError::Missing),
            Self::MissingLayer(_) => None,
        }
    }
}

data_api_rejection!(WalletClaimsRejection);

impl<S: Send + Sync> FromRequestParts<S> for WalletClaims {
    type Rejection = WalletClaimsRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<WalletClaims>() {
            Some(claims) => Ok(claims.clone()),
            None if parts.extensions.get::<NoBearer>().is_some() => {
                Err(WalletClaimsRejection::MissingToken)
            }
            None => Err(WalletClaimsRejection::missing_layer()),
        }
    }
}

/// `Option<WalletClaims>`: `None` when an optional-bearer layer saw no
/// bearer; still 500 when no layer ran.
impl<S: Send + Sync> OptionalFromRequestParts<S> for WalletClaims {
    type Rejection = WalletClaimsRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        match parts.extensions.get::<WalletClaims>() {
            Some(claims) => Ok(Some(claims.clone())),
            None if parts.extensions.get::<NoBearer>().is_some() => Ok(None),
            None => Err(WalletClaimsRejection::missing_layer()),
        }
    }
}

/// The verified wallet alone, for handlers that need no scope details.
///
/// ```
/// use walletgate::wallet_jwt::Wallet;
///
/// async fn whoami(Wallet(wallet): Wallet) -> String {
///     wallet.to_string() // checksummed
/// }
/// # let _ = whoami;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wallet(pub Address);

impl<S: Send + Sync> FromRequestParts<S> for Wallet {
    type Rejection = WalletClaimsRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let claims =
            <WalletClaims as FromRequestParts<S>>::from_request_parts(parts, state).await?;
        Ok(Self(claims.wallet()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_layer_is_a_500_naming_wallet_jwt_layer() {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        let rejection = <WalletClaims as FromRequestParts<()>>::from_request_parts(&mut parts, &())
            .await
            .unwrap_err();
        assert!(rejection.to_string().contains("WalletJwtLayer"));
        assert_eq!(DataApiRejection::status(&rejection), 500);
        let optional =
            <WalletClaims as OptionalFromRequestParts<()>>::from_request_parts(&mut parts, &())
                .await;
        assert!(matches!(
            optional,
            Err(WalletClaimsRejection::MissingLayer(_))
        ));
    }

    #[tokio::test]
    async fn optional_bearer_without_token_is_401_or_none() {
        let mut request = http::Request::new(());
        request.extensions_mut().insert(NoBearer);
        let (mut parts, ()) = request.into_parts();
        let rejection = <WalletClaims as FromRequestParts<()>>::from_request_parts(&mut parts, &())
            .await
            .unwrap_err();
        assert_eq!(DataApiRejection::status(&rejection), 401);
        let optional =
            <WalletClaims as OptionalFromRequestParts<()>>::from_request_parts(&mut parts, &())
                .await
                .unwrap();
        assert_eq!(optional, None);
    }
}

//! Extractors: [`WalletClaims`], `Option<WalletClaims>` and [`Wallet`].

use std::fmt;

use alloy_primitives::Address;
use axum_core::extract::{FromRequestParts, OptionalFromRequestParts};
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;

use super::service::NoBearer;
use super::{JwtError, WalletClaims};
use crate::envelope::{DataApiError, MissingExtension};

/// Renders an Area A rejection as an axum response.
pub(crate) fn axum_response(error: DataApiError) -> Response {
    error.into_response().map(axum_core::body::Body::from)
}

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

    /// The Area A rejection.
    pub fn into_data_api_error(self) -> DataApiError {
        match self {
            Self::MissingToken => JwtError::Missing.to_data_api_error(),
            Self::MissingLayer(missing) => missing.into(),
        }
    }
}

impl fmt::Display for WalletClaimsRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingToken => f.write_str(JwtError::Missing.message()),
            Self::MissingLayer(missing) => missing.fmt(f),
        }
    }
}

impl std::error::Error for WalletClaimsRejection {}

impl From<WalletClaimsRejection> for DataApiError {
    fn from(rejection: WalletClaimsRejection) -> Self {
        rejection.into_data_api_error()
    }
}

impl IntoResponse for WalletClaimsRejection {
    fn into_response(self) -> Response {
        axum_response(self.into_data_api_error())
    }
}

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
        assert_eq!(rejection.into_data_api_error().status(), 500);
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
        assert_eq!(rejection.into_data_api_error().status(), 401);
        let optional =
            <WalletClaims as OptionalFromRequestParts<()>>::from_request_parts(&mut parts, &())
                .await
                .unwrap();
        assert_eq!(optional, None);
    }
}

//! [`JwtError`]: why a bearer token was refused, and its Area A rendering.

use std::borrow::Cow;

use http::{HeaderValue, StatusCode};

use crate::envelope::{DataApiRejection, INVALID_TOKEN_CHALLENGE, data_api_rejection};

/// Why a bearer token was refused (401 `invalid_token`). It rides in the
/// rejection's response extensions; a caller renders it with
/// [`WalletJwtLayer::with_rejection`](super::WalletJwtLayer::with_rejection).
/// Never contains the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JwtError {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A personal access token was sent where a JWT belongs.
    PatNotAccepted,
    /// Not a compact JWS, a header that is not JSON, a `crit` header,
    /// several `Authorization` headers or another scheme.
    Malformed,
    /// `alg` is `none`, unknown, not allowed, or not the key's algorithm.
    UnsupportedAlgorithm,
    /// `typ` is not `at+jwt`.
    WrongType,
    /// No key with this `kid` (or no `kid`).
    UnknownKey,
    /// The signature does not verify.
    BadSignature,
    /// The claims are not a wallet JWT's (missing, mistyped, bad address or scope).
    InvalidClaims,
    /// `iss` is not the expected issuer.
    WrongIssuer,
    /// `aud` does not name this service.
    WrongAudience,
    /// `exp` has passed (beyond the leeway).
    Expired,
    /// `nbf` or `iat` lies in the future (beyond the leeway).
    NotYetValid,
    /// The PAT (or the token) was revoked: refused before its `exp`.
    Revoked,
    /// The revocation list could not be read (503; the token may be fine).
    RevocationUnavailable,
}

impl JwtError {
    /// The HTTP status: 401, or 503 when the revocation list is unreachable.
    pub fn status(self) -> StatusCode {
        match self {
            Self::RevocationUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNAUTHORIZED,
        }
    }

    /// The message of the 401 body.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "Missing bearer token: send Authorization: Bearer <wallet JWT>",
            Self::PatNotAccepted => {
                "Personal access tokens are only exchanged for wallet JWTs: \
                 exchange it and send the JWT as the bearer token"
            }
            Self::Malformed => "Malformed bearer token",
            Self::UnsupportedAlgorithm => "Wallet JWT algorithm not accepted",
            Self::WrongType => "Bearer token is not an access token (typ must be at+jwt)",
            Self::UnknownKey => "Wallet JWT signed with an unknown key",
            Self::BadSignature => "Wallet JWT signature does not verify",
            Self::InvalidClaims => "Wallet JWT claims are invalid",
            Self::WrongIssuer => "Wallet JWT issuer not accepted",
            Self::WrongAudience => "Wallet JWT audience is not this service",
            Self::Expired => "Wallet JWT expired: refresh it",
            Self::NotYetValid => "Wallet JWT not valid yet",
            Self::Revoked => "Wallet JWT revoked: its personal access token was revoked",
            Self::RevocationUnavailable => "Token revocation list unavailable: retry",
        }
    }

    /// One refusal into `walletgate_wallet_jwt_refusals_total` (feature
    /// `metrics`), labelled by [`code`](Self::code).
    pub(crate) fn count_refusal(self) {
        crate::metrics::count(
            crate::metrics::WALLET_JWT_REFUSALS_TOTAL,
            [("reason", self.code())],
        );
    }

    /// A short snake_case name of the error (its
    /// [`kind`](DataApiRejection::kind)).
    pub fn code(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::PatNotAccepted => "pat_not_accepted",
            Self::Malformed => "malformed",
            Self::UnsupportedAlgorithm => "unsupported_algorithm",
            Self::WrongType => "wrong_type",
            Self::UnknownKey => "unknown_key",
            Self::BadSignature => "bad_signature",
            Self::InvalidClaims => "invalid_claims",
            Self::WrongIssuer => "wrong_issuer",
            Self::WrongAudience => "wrong_audience",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::Revoked => "revoked",
            Self::RevocationUnavailable => "revocation_unavailable",
        }
    }
}

/// 401 with `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750), or
/// 503 when the revocation list is unreachable.
impl DataApiRejection for JwtError {
    fn kind(&self) -> &'static str {
        JwtError::code(*self)
    }

    fn status(&self) -> StatusCode {
        JwtError::status(*self)
    }

    fn message(&self) -> Cow<'static, str> {
        Cow::Borrowed(JwtError::message(*self))
    }

    fn www_authenticate(&self) -> Option<HeaderValue> {
        (JwtError::status(*self) == StatusCode::UNAUTHORIZED).then_some(INVALID_TOKEN_CHALLENGE)
    }
}

data_api_rejection!(JwtError);

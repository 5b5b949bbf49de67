//! [`JwtVerifier`]: the checks a wallet JWT must pass.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use http::StatusCode;

use super::claims::parse_wallet;
use super::jwt::{self, ACCESS_TOKEN_TYPE, AccessTokenClaims};
use super::{ConfigError, KeySet, PAT_PREFIX, ScopeSet, WalletClaims};
use crate::clock::{SharedClock, SystemClock};
use crate::envelope::DataApiError;

/// A signature algorithm walletgate verifies. `none` is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// `EdDSA` with Ed25519 (the default for minted tokens).
    EdDsa,
    /// `ES256`: ECDSA on P-256 with SHA-256.
    Es256,
    /// `HS256`: HMAC-SHA-256; only when the verifier allows it.
    Hs256,
}

impl Algorithm {
    /// The JOSE name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EdDsa => "EdDSA",
            Self::Es256 => "ES256",
            Self::Hs256 => "HS256",
        }
    }

    /// The algorithm named `name` in a header (exact, case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "EdDSA" => Some(Self::EdDsa),
            "ES256" => Some(Self::Es256),
            "HS256" => Some(Self::Hs256),
            _ => None,
        }
    }
}

/// Why a bearer token was refused (401 `invalid_token`). It rides in the
/// rejection's response extensions. Never contains the token.
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
}

impl JwtError {
    /// The HTTP status: always 401.
    pub fn status(self) -> StatusCode {
        StatusCode::UNAUTHORIZED
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
        }
    }

    /// The Area A rejection, with `WWW-Authenticate: Bearer error="invalid_token"`.
    pub fn to_data_api_error(self) -> DataApiError {
        DataApiError::invalid_token(self.message())
    }

    pub(crate) fn into_response(self) -> http::Response<bytes::Bytes> {
        let mut response = self.to_data_api_error().into_response();
        response.extensions_mut().insert(self);
        response
    }
}

impl fmt::Display for JwtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for JwtError {}

impl From<JwtError> for DataApiError {
    fn from(error: JwtError) -> Self {
        error.to_data_api_error()
    }
}

/// Verifies wallet JWTs: signature by `kid` with an algorithm allow-list,
/// `typ`, `iss`, `aud`, `exp`, `nbf`, `iat` with leeway, and the claims of
/// the [contract](super#the-token-contract).
///
/// Usable on its own (an MCP tool, a WebSocket upgrade) or through
/// [`WalletJwtLayer`](super::WalletJwtLayer).
#[derive(Clone)]
pub struct JwtVerifier {
    keys: KeySet,
    issuer: Arc<str>,
    audience: Arc<str>,
    leeway_secs: u64,
    allow_hs256: bool,
    pat_prefix: Cow<'static, str>,
    clock: SharedClock,
}

impl JwtVerifier {
    /// Default clock-skew leeway, in seconds.
    pub const DEFAULT_LEEWAY_SECS: u64 = 30;
    /// Largest accepted leeway: RFC 7519 asks for "no more than a few minutes".
    pub const MAX_LEEWAY_SECS: u64 = 300;

    /// Tokens from `issuer` for `audience`, signed with a key of `keys`;
    /// EdDSA and ES256 only, 30 s leeway, system clock.
    ///
    /// # Errors
    /// [`ConfigError::EmptyIssuerOrAudience`].
    pub fn new(
        keys: KeySet,
        issuer: impl Into<String>,
        audience: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        let (issuer, audience) = (issuer.into(), audience.into());
        if issuer.is_empty() || audience.is_empty() {
            return Err(ConfigError::EmptyIssuerOrAudience);
        }
        Ok(Self {
            keys,
            issuer: issuer.into(),
            audience: audience.into(),
            leeway_secs: Self::DEFAULT_LEEWAY_SECS,
            allow_hs256: false,
            pat_prefix: Cow::Borrowed(PAT_PREFIX),
            clock: Arc::new(SystemClock),
        })
    }

    /// Sets the leeway applied to `exp`, `nbf` and `iat`.
    ///
    /// # Errors
    /// [`ConfigError::LeewayTooLarge`] above [`Self::MAX_LEEWAY_SECS`].
    pub fn with_leeway_secs(mut self, leeway_secs: u64) -> Result<Self, ConfigError> {
        if leeway_secs > Self::MAX_LEEWAY_SECS {
            return Err(ConfigError::LeewayTooLarge);
        }
        self.leeway_secs = leeway_secs;
        Ok(self)
    }

    /// Reads time from `clock` (tests use [`FakeClock`](crate::FakeClock)).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Accepts HS256 tokens signed with an HS256 key of the key set. Only for
    /// an issuer in the same process: the verifier then holds the secret.
    #[must_use]
    pub fn allow_hs256(mut self) -> Self {
        self.allow_hs256 = true;
        self
    }

    /// Bearer tokens starting with `prefix` are refused as PATs, with a hint
    /// (default [`PAT_PREFIX`]).
    ///
    /// # Errors
    /// [`ConfigError::EmptyPatPrefix`].
    pub fn with_pat_prefix(
        mut self,
        prefix: impl Into<Cow<'static, str>>,
    ) -> Result<Self, ConfigError> {
        let prefix = prefix.into();
        if prefix.is_empty() {
            return Err(ConfigError::EmptyPatPrefix);
        }
        self.pat_prefix = prefix;
        Ok(self)
    }

    /// The key set (a shared handle: rotate through it).
    pub fn keys(&self) -> &KeySet {
        &self.keys
    }

    /// Verifies `token` and returns its claims.
    ///
    /// # Errors
    /// The first check that fails, as a [`JwtError`].
    pub fn verify(&self, token: &str) -> Result<WalletClaims, JwtError> {
        if token.starts_with(&*self.pat_prefix) {
            return Err(JwtError::PatNotAccepted);
        }
        let decoded = jwt::decode(token)?;
        let header = decoded.header();
        if header.crit.is_some() {
            return Err(JwtError::Malformed);
        }
        let algorithm = Algorithm::from_name(&header.alg).ok_or(JwtError::UnsupportedAlgorithm)?;
        if algorithm == Algorithm::Hs256 && !self.allow_hs256 {
            return Err(JwtError::UnsupportedAlgorithm);
        }
        if !header.typ.as_deref().is_some_and(is_access_token_type) {
            return Err(JwtError::WrongType);
        }
        let kid = header.kid.as_deref().ok_or(JwtError::UnknownKey)?;
        let key = self.keys.get(kid).ok_or(JwtError::UnknownKey)?;
        // The key decides the algorithm; a header naming another one (HS256
        // against a public key) is refused before any verification.
        if key.algorithm() != algorithm {
            return Err(JwtError::UnsupportedAlgorithm);
        }
        if !key.verifies(decoded.signing_input().as_bytes(), decoded.signature()) {
            return Err(JwtError::BadSignature);
        }
        let claims: AccessTokenClaims = decoded.claims()?;
        self.check_claims(claims)
    }

    fn check_claims(&self, claims: AccessTokenClaims) -> Result<WalletClaims, JwtError> {
        if claims.iss != *self.issuer {
            return Err(JwtError::WrongIssuer);
        }
        if !claims.aud.contains(&self.audience) {
            return Err(JwtError::WrongAudience);
        }
        let now = self.clock.now_unix_secs();
        if now >= claims.exp.saturating_add(self.leeway_secs) {
            return Err(JwtError::Expired);
        }
        let latest_start = now.saturating_add(self.leeway_secs);
        if claims.nbf > latest_start || claims.iat > latest_start {
            return Err(JwtError::NotYetValid);
        }
        let wallet = parse_wallet(&claims.wallet).ok_or(JwtError::InvalidClaims)?;
        if parse_wallet(&claims.sub) != Some(wallet) {
            return Err(JwtError::InvalidClaims);
        }
        let scopes: ScopeSet = claims.scope.parse().map_err(|_| JwtError::InvalidClaims)?;
        if claims.jti.is_empty() || claims.client_id.is_empty() {
            return Err(JwtError::InvalidClaims);
        }
        Ok(WalletClaims::new(
            wallet,
            scopes,
            claims.jti,
            claims.client_id,
            claims.iat,
            claims.exp,
        ))
    }
}

/// `at+jwt`, or its full media type, case-insensitively (RFC 9068 §2.1).
fn is_access_token_type(typ: &str) -> bool {
    typ.eq_ignore_ascii_case(ACCESS_TOKEN_TYPE) || typ.eq_ignore_ascii_case("application/at+jwt")
}

impl fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("keys", &self.keys)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("leeway_secs", &self.leeway_secs)
            .field("allow_hs256", &self.allow_hs256)
            .field("pat_prefix", &self.pat_prefix)
            .finish_non_exhaustive()
    }
}

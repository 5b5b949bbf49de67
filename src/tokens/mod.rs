//! Token issuance: SIWE sessions, personal access tokens (PATs), the PAT ->
//! wallet JWT exchange, and the signing keys behind `/.well-known/jwks.json`.
//!
//! The credential lifecycle of the specification (Area A, sections 2, 3, 5):
//!
//! 1. A wallet signs in with SIWE (the `siwe` module checks the message); [`TokenIssuer::start_session`]
//!    gives it two cookies, `access_token` and `refresh_token`
//!    ([`SessionCookies::set_cookie_headers`]). Only a session authorises PAT
//!    management, never a JWT: handlers take the [`SessionWallet`] extractor.
//! 2. [`TokenIssuer::create_pat`] makes a scoped PAT (`wg_pat_…`, a base62
//!    CRC32 at the end so leaks are recognisable offline); only its SHA-256
//!    digest is stored, and it must expire.
//! 3. [`TokenIssuer::exchange`] mints a short-lived (15 minutes by default)
//!    RFC 9068 JWT from the PAT, signed EdDSA with a `kid` that
//!    [`WalletJwtLayer`](crate::wallet_jwt::WalletJwtLayer) verifies. A PAT
//!    is never accepted anywhere else.
//! 4. When the JWT expires, the exchange runs again. A revoked or expired PAT
//!    mints nothing; rotating a PAT retires the old one at once, and a
//!    retired PAT used again revokes its whole family.
//! 5. Revoking a PAT also signs its wallet out of every session.
//!
//! Stores sit behind async traits ([`PatStore`], [`SessionStore`]) whose
//! multi-record changes are single calls, so a Redis or SQL backend can make
//! them atomic; the in-memory ones serve one process and the tests.
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::tokens::{IssuerConfig, NewPat, SigningKeys, TokenIssuer};
//! use walletgate::wallet_jwt::{JwtVerifier, KeySet, Scope};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = Arc::new(FakeClock::at_unix_secs(1_800_000_000));
//! let keys = SigningKeys::generate(KeySet::new())?;
//! let verifier = JwtVerifier::new(keys.published().clone(), "https://api.example", "https://api.example")?
//!     .with_clock(clock.clone());
//! let issuer = TokenIssuer::in_memory(IssuerConfig::new("https://api.example", "https://api.example")?, keys)
//!     .with_clock(clock);
//!
//! let wallet = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".parse()?;
//! let (record, pat) = issuer
//!     .create_pat(wallet, NewPat {
//!         label: "docs".into(),
//!         scopes: Scope::ReadFavorites.into(),
//!         expires_in_days: Some(1),
//!     })
//!     .await?;
//! let token = issuer.exchange(pat.expose()).await?;
//! let claims = verifier.verify(&token.access_token)?;
//! assert_eq!(claims.wallet(), wallet);
//! assert_eq!(claims.pat_id(), record.id);
//! # Ok(())
//! # }
//! ```

use std::fmt;

use http::StatusCode;

use crate::envelope::DataApiError;
use crate::store::StoreError;
use crate::wallet_jwt::Scope;

mod issuer;
mod keys;
mod pat;
mod session;
mod store;

pub use issuer::{
    AccessToken, IssuerConfig, IssuerConfigError, NewPat, SessionCookies, TokenIssuer,
};
pub use keys::{SigningKeyFile, SigningKeyFileError, SigningKeys};
pub use pat::{PatSecret, SecretDigest, is_well_formed};
pub use session::{
    ACCESS_COOKIE, HasTokenIssuer, REFRESH_COOKIE, SessionWallet, refuse_cross_site, request_cookie,
};
pub use store::{
    InMemoryPatStore, InMemorySessionStore, PatRecord, PatStore, Revocation, RotateOutcome,
    SessionRecord, SessionSecrets, SessionStore,
};

/// Why an issuance step was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum TokenError {
    /// Not a PAT this server issued (bad format, checksum, or unknown).
    InvalidPat,
    /// The PAT was revoked (or retired by rotation).
    PatRevoked,
    /// The PAT has expired.
    PatExpired,
    /// No active PAT with that id belongs to the wallet.
    PatNotFound,
    /// A PAT needs at least one scope.
    NoScopes,
    /// The scope cannot be granted to this wallet.
    ScopeNotGrantable(Scope),
    /// A PAT must have an expiry.
    ExpiryRequired,
    /// The expiry is zero days or beyond the cap.
    ExpiryTooLong {
        /// The cap, in days.
        max_days: u32,
    },
    /// The wallet already has the most active PATs allowed.
    TooManyTokens {
        /// The cap.
        max: usize,
    },
    /// The session cookie is missing, unknown or expired.
    SessionInvalid,
    /// The operating system gave no randomness.
    Randomness,
    /// The JWT could not be signed.
    Signing,
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for TokenError {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidPat => f.write_str("not a valid personal access token"),
            Self::PatRevoked => f.write_str("the personal access token was revoked; sign in again"),
            Self::PatExpired => f.write_str("the personal access token has expired; sign in again"),
            Self::PatNotFound => f.write_str("no active personal access token with that id"),
            Self::NoScopes => f.write_str("scopes must name at least one scope"),
            Self::ScopeNotGrantable(scope) => write!(f, "the scope {scope} cannot be granted"),
            Self::ExpiryRequired => f.write_str("expiresInDays is required"),
            Self::ExpiryTooLong { max_days } => {
                write!(f, "expiresInDays must be between 1 and {max_days}")
            }
            Self::TooManyTokens { max } => {
                write!(
                    f,
                    "create up to {max} scoped tokens per account; revoke one first"
                )
            }
            Self::SessionInvalid => {
                f.write_str("a valid SIWE session is required; sign in with SIWE again")
            }
            Self::Randomness => f.write_str("no randomness available"),
            Self::Signing => f.write_str("the token could not be signed"),
            Self::Store(_) => f.write_str("token storage is unavailable"),
        }
    }
}

impl std::error::Error for TokenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(error) => Some(error),
            _ => None,
        }
    }
}

impl TokenError {
    /// The HTTP status it answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidPat | Self::PatRevoked | Self::PatExpired | Self::SessionInvalid => {
                StatusCode::UNAUTHORIZED
            }
            Self::PatNotFound => StatusCode::NOT_FOUND,
            Self::NoScopes
            | Self::ScopeNotGrantable(_)
            | Self::ExpiryRequired
            | Self::ExpiryTooLong { .. }
            | Self::TooManyTokens { .. } => StatusCode::BAD_REQUEST,
            Self::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Randomness | Self::Signing => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<TokenError> for DataApiError {
    fn from(error: TokenError) -> Self {
        let message = error.to_string();
        match error.status() {
            StatusCode::UNAUTHORIZED => DataApiError::unauthorized(message),
            status => DataApiError::new(status, message),
        }
    }
}

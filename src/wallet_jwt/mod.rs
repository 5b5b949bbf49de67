//! Wallet JWTs: [`WalletJwtLayer`], [`RequireScopesLayer`], [`WalletClaims`].
//!
//! [`WalletJwtLayer`] reads `Authorization: Bearer <JWT>` (scheme
//! case-insensitive), verifies the token with a [`JwtVerifier`] and puts the
//! [`WalletClaims`] in the request extensions, where the [`WalletClaims`],
//! `Option<WalletClaims>` and [`Wallet`] extractors read them. A missing,
//! malformed, expired or badly signed token gets 401 with
//! `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750) in the Area A
//! envelope; a personal access token sent as the bearer (it starts with
//! [`PAT_PREFIX`]) gets the same 401 with a message saying PATs are only
//! exchanged for JWTs. The `Authorization` header is removed before the
//! inner service runs: handlers see claims, never the token.
//!
//! [`RequireScopesLayer`] then requires scopes per route (403
//! `insufficient_scope` with `scope="…"`) and, optionally, that the wallet a
//! path names is the token's (403). Inside a handler or an MCP tool,
//! [`WalletClaims::require`] does the same check.
//!
//! Both layers answer in the Area A envelope unless the caller renders their
//! typed rejections ([`JwtError`], [`RequireScopesRejection`]) itself with
//! `with_rejection(..)` ([`DataApiRejection`](crate::envelope::DataApiRejection)
//! gives status, message and the RFC 6750 challenge).
//!
//! # The token contract
//!
//! Wallet JWTs are RFC 9068 access tokens; the PAT exchange mints exactly
//! these, and this module verifies exactly these:
//!
//! - header: `{"alg": "EdDSA", "typ": "at+jwt", "kid": "<key id>"}`
//!   (`ES256` verifies too; `HS256` only with [`JwtVerifier::allow_hs256`];
//!   `none` never). The key named by `kid` fixes the algorithm: a header
//!   naming another one is refused, so a public key can never act as an
//!   HMAC secret.
//! - claims ([`jwt::AccessTokenClaims`]), all required:
//!   `iss` (the issuer), `aud` (a string or an array naming this service),
//!   `sub` and `wallet` (the same wallet address, EIP-55 checksummed; the
//!   reference clients read `wallet`), `client_id` (the PAT's id), `scope`
//!   (space-separated, e.g. `read:favorites write:wallets`), `iat`, `nbf`,
//!   `exp` (Unix seconds) and `jti` (the token id).
//! - checks: signature, `typ` `at+jwt` (or `application/at+jwt`), `iss`,
//!   `aud`, `exp`, `nbf` and `iat` against an injected [`Clock`] with a
//!   leeway (30 s by default, at most 300 s).
//! - keys: a [`KeySet`] by `kid`, several at once for rotation, loadable from
//!   and publishable as a JWKS document.
//!
//! `jsonwebtoken` (pure-Rust `rust_crypto` backend) decodes the header and
//! checks the signature; walletgate decides which algorithm a key allows,
//! `typ`, `crit`, the size cap, leeway, `iss`/`aud` and the claim mapping.
//!
//! # External issuers, revocation, cache
//!
//! - [`JwtVerifier::from_jwks_url`] (feature `jwks-url`) trusts an external
//!   issuer's JWKS URL ([`JwksUrl`]: RS256, ES256, EdDSA; refreshed every 10
//!   minutes, at most once per 30 s on unknown `kid`s, last good set kept
//!   when the issuer is down) under relaxed rules: `typ` `JWT` accepted,
//!   `client_id`/`jti` optional, `sub` an account id, scopes and wallet in
//!   configurable claims (`opensea_scopes`, `linked_wallets[0]`).
//!   [`JwtVerifier::also_accept`] joins it to walletgate's own issuer.
//! - [`JwtVerifier::with_revocations`] consults a [`RevocationCheck`] after
//!   each verification and each cache hit; the token issuer's PAT revocations
//!   feed the same list, so a revoked PAT's JWTs fail on the next request.
//! - [`JwtVerifier::with_cache`] skips the signature check for a token
//!   verified before (bounded, until its `exp`).
//! - [`WalletJwtLayer::require`] adds the scope guard in one step.
//!
//! Personal access tokens start with [`PAT_PREFIX`] (`wg_pat_`); the
//! token-issuing code uses the same constant.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use ed25519_dalek::SigningKey;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{ServiceBuilder, ServiceExt};
//! use walletgate::clock::FakeClock;
//! use walletgate::wallet_jwt::jwt::{self, AccessTokenClaims, Audience};
//! use walletgate::wallet_jwt::{
//!     JwtVerifier, KeySet, RequireScopesLayer, Scope, VerificationKey, WalletClaims,
//!     WalletJwtLayer,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A throwaway signing key; the issuer keeps the real one secret.
//! let signing_key = SigningKey::from_bytes(&[1u8; 32]);
//! let keys = KeySet::new();
//! keys.insert("2026-11", VerificationKey::ed25519(signing_key.verifying_key()))?;
//! let clock = FakeClock::at_unix_secs(1_800_000_000);
//! let verifier = JwtVerifier::new(keys, "https://auth.example", "https://api.example")?
//!     .with_clock(Arc::new(clock));
//!
//! let service = ServiceBuilder::new()
//!     .layer(WalletJwtLayer::new(verifier))
//!     .layer(RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account"))
//!     .service_fn(|request: Request<Full<Bytes>>| async move {
//!         let wallet = request.extensions().get::<WalletClaims>().map(|c| c.wallet());
//!         let body = wallet.map(|w| w.to_string()).unwrap_or_default();
//!         Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
//!     });
//!
//! let wallet = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
//! let token = jwt::sign_eddsa("2026-11", &AccessTokenClaims {
//!     iss: "https://auth.example".into(),
//!     aud: Audience::One("https://api.example".into()),
//!     sub: wallet.into(),
//!     wallet: wallet.into(),
//!     client_id: "pat_1".into(),
//!     scope: "read:favorites".into(),
//!     iat: 1_800_000_000,
//!     nbf: 1_800_000_000,
//!     exp: 1_800_000_600,
//!     jti: "jwt_1".into(),
//! }, &signing_key)?;
//!
//! let request = |path: &str| {
//!     Request::get(path)
//!         .header("authorization", format!("Bearer {token}"))
//!         .body(Full::default())
//! };
//! let own = format!("/api/v2/account/{}/favorites", wallet.to_lowercase());
//! assert_eq!(service.clone().oneshot(request(&own)?).await?.status(), 200);
//!
//! let other = "/api/v2/account/0x70997970C51812dc3A010C7d01b50e0d17dc79C8/favorites";
//! assert_eq!(service.clone().oneshot(request(other)?).await?.status(), 403);
//!
//! let anonymous = Request::get(own.as_str()).body(Full::default())?;
//! let refused = service.oneshot(anonymous).await?;
//! assert_eq!(refused.status(), 401);
//! assert_eq!(refused.headers()["www-authenticate"], "Bearer error=\"invalid_token\"");
//! # Ok(())
//! # }
//! ```
//!
//! [`Clock`]: crate::clock::Clock

use std::fmt;

mod algorithm;
mod cache;
mod claims;
mod error;
mod extract;
mod future;
#[cfg(feature = "jwks-url")]
mod jwks;
pub mod jwt;
mod keys;
mod layer;
mod require;
mod resource_metadata;
mod revocation;
mod scope;
mod service;
mod verifier;

pub use algorithm::Algorithm;
pub use claims::{WalletClaims, WalletMismatch};
pub use error::JwtError;
pub use extract::{Wallet, WalletClaimsRejection};
pub use future::{RequireScopesFuture, ResponseFuture};
#[cfg(feature = "jwks-url")]
pub use jwks::JwksUrl;
pub use keys::{KeySet, VerificationKey};
pub use layer::WalletJwtLayer;
pub use require::{RequireScopes, RequireScopesLayer, RequireScopesRejection};
pub use resource_metadata::ResourceMetadataUrl;
pub use revocation::{InMemoryRevocations, RevocationCheck};
pub use scope::{CustomScope, InvalidScope, Scope, ScopeError, ScopeSet};
pub use service::WalletJwt;
pub use verifier::JwtVerifier;

/// The prefix of every walletgate personal access token.
///
/// The verifier refuses bearers that start with it (PATs only buy JWTs);
/// the token-issuing code writes it. Distinct prefixes let secret scanners
/// recognise leaked tokens.
pub const PAT_PREFIX: &str = "wg_pat_";

/// A refused wallet JWT configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Key bytes that are not a valid public key.
    InvalidKey,
    /// An HS256 secret shorter than 32 bytes.
    WeakSecret,
    /// An empty `kid`.
    InvalidKid,
    /// A JWKS document that could not be loaded, and why.
    InvalidJwks(String),
    /// An empty issuer or audience.
    EmptyIssuerOrAudience,
    /// A leeway above [`JwtVerifier::MAX_LEEWAY_SECS`].
    LeewayTooLarge,
    /// An empty PAT prefix (it would match every token).
    EmptyPatPrefix,
    /// A JWKS URL that is not an absolute `http(s)://` URL, and why.
    InvalidJwksUrl(String),
    /// A JWKS URL could not be fetched, and why.
    JwksUnavailable(String),
    /// A protected resource metadata URL (RFC 9728) that is not an absolute
    /// `http(s)://` URL a challenge can quote.
    InvalidResourceMetadataUrl(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidKey => f.write_str("not a valid public key"),
            Self::WeakSecret => f.write_str("HS256 secret shorter than 32 bytes"),
            Self::InvalidKid => f.write_str("empty kid"),
            Self::InvalidJwks(reason) => write!(f, "invalid JWKS: {reason}"),
            Self::EmptyIssuerOrAudience => f.write_str("issuer and audience must not be empty"),
            Self::LeewayTooLarge => {
                write!(f, "leeway above {} seconds", JwtVerifier::MAX_LEEWAY_SECS)
            }
            Self::EmptyPatPrefix => f.write_str("empty PAT prefix"),
            Self::InvalidJwksUrl(url) => write!(f, "invalid JWKS URL: {url}"),
            Self::JwksUnavailable(reason) => write!(f, "JWKS unavailable: {reason}"),
            Self::InvalidResourceMetadataUrl(url) => write!(
                f,
                "invalid protected resource metadata URL (absolute http(s), no quotes, spaces, query or fragment): {url}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

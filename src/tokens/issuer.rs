//! [`TokenIssuer`]: sessions, PAT management and the PAT -> JWT exchange.

use std::fmt;
use std::sync::Arc;

use alloy_primitives::Address;
use serde::Serialize;

use super::TokenError;
use super::keys::SigningKeys;
use super::pat::{PatSecret, SecretDigest, is_well_formed};
use super::store::{
    InMemoryPatStore, InMemorySessionStore, PatRecord, PatStore, Revocation, RotateOutcome,
    SessionRecord, SessionSecrets, SessionStore,
};
use crate::clock::{SharedClock, SystemClock};
use crate::random;
use crate::wallet_jwt::jwt::{AccessTokenClaims, Audience};
use crate::wallet_jwt::{JwtVerifier, RevocationCheck, Scope, ScopeSet};

/// Settings of a [`TokenIssuer`]; build with [`IssuerConfig::new`].
#[derive(Clone, Debug)]
pub struct IssuerConfig {
    issuer: String,
    audience: String,
    jwt_lifetime_secs: u64,
    pat_max_days: u32,
    max_active_pats: usize,
    grantable: ScopeSet,
    session_lifetime_secs: u64,
    refresh_lifetime_secs: u64,
    last_used_every_secs: u64,
}

/// A setting out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IssuerConfigError {
    /// Issuer or audience is empty.
    EmptyIssuerOrAudience,
    /// A lifetime of zero.
    ZeroLifetime,
    /// No scope can be granted.
    NothingGrantable,
}

impl fmt::Display for IssuerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyIssuerOrAudience => f.write_str("issuer and audience must not be empty"),
            Self::ZeroLifetime => {
                f.write_str("lifetimes must be at least one second (one day for PATs)")
            }
            Self::NothingGrantable => f.write_str("at least one scope must be grantable"),
        }
    }
}

impl std::error::Error for IssuerConfigError {}

impl IssuerConfig {
    /// JWT lifetime when not set: 15 minutes.
    pub const DEFAULT_JWT_LIFETIME_SECS: u64 = 15 * 60;
    /// The longest [`jwks_max_age_secs`](Self::jwks_max_age_secs).
    pub const MAX_JWKS_MAX_AGE_SECS: u64 = 5 * 60;
    /// Longest PAT lifetime when not set: 90 days.
    pub const DEFAULT_PAT_MAX_DAYS: u32 = 90;

    /// Settings for tokens issued by `issuer` for `audience`: JWTs live 15
    /// minutes, PATs at most 90 days, 10 active PATs per wallet, sessions an
    /// hour (refreshable for a week), the three named scopes grantable.
    ///
    /// # Errors
    /// [`IssuerConfigError::EmptyIssuerOrAudience`].
    pub fn new(issuer: &str, audience: &str) -> Result<Self, IssuerConfigError> {
        if issuer.is_empty() || audience.is_empty() {
            return Err(IssuerConfigError::EmptyIssuerOrAudience);
        }
        Ok(Self {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            jwt_lifetime_secs: Self::DEFAULT_JWT_LIFETIME_SECS,
            pat_max_days: Self::DEFAULT_PAT_MAX_DAYS,
            max_active_pats: 10,
            grantable: [
                Scope::ReadFavorites,
                Scope::ReadWallets,
                Scope::WriteWallets,
            ]
            .into_iter()
            .collect(),
            session_lifetime_secs: 60 * 60,
            refresh_lifetime_secs: 7 * 24 * 60 * 60,
            last_used_every_secs: 5 * 60,
        })
    }

    /// Sets the JWT lifetime.
    ///
    /// # Errors
    /// [`IssuerConfigError::ZeroLifetime`].
    pub fn with_jwt_lifetime_secs(mut self, secs: u64) -> Result<Self, IssuerConfigError> {
        if secs == 0 {
            return Err(IssuerConfigError::ZeroLifetime);
        }
        self.jwt_lifetime_secs = secs;
        Ok(self)
    }

    /// Caps PAT lifetimes.
    ///
    /// # Errors
    /// [`IssuerConfigError::ZeroLifetime`].
    pub fn with_pat_max_days(mut self, days: u32) -> Result<Self, IssuerConfigError> {
        if days == 0 {
            return Err(IssuerConfigError::ZeroLifetime);
        }
        self.pat_max_days = days;
        Ok(self)
    }

    /// Caps the active PATs of one wallet.
    pub fn with_max_active_pats(mut self, count: usize) -> Self {
        self.max_active_pats = count;
        self
    }

    /// The scopes a PAT may carry.
    ///
    /// # Errors
    /// [`IssuerConfigError::NothingGrantable`] for an empty set.
    pub fn with_grantable(mut self, scopes: ScopeSet) -> Result<Self, IssuerConfigError> {
        if scopes.is_empty() {
            return Err(IssuerConfigError::NothingGrantable);
        }
        self.grantable = scopes;
        Ok(self)
    }

    /// Sets the session and refresh cookie lifetimes.
    ///
    /// # Errors
    /// [`IssuerConfigError::ZeroLifetime`].
    pub fn with_session_lifetimes_secs(
        mut self,
        session_secs: u64,
        refresh_secs: u64,
    ) -> Result<Self, IssuerConfigError> {
        if session_secs == 0 || refresh_secs == 0 {
            return Err(IssuerConfigError::ZeroLifetime);
        }
        self.session_lifetime_secs = session_secs;
        self.refresh_lifetime_secs = refresh_secs;
        Ok(self)
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audience (`aud`).
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// How long a verifier may cache the JWKS (`Cache-Control: max-age`):
    /// half the JWT lifetime, at most five minutes. A rotation keeps the
    /// previous key published for at least a JWT lifetime, so a cached
    /// document always expires while both keys are in it.
    pub fn jwks_max_age_secs(&self) -> u64 {
        (self.jwt_lifetime_secs / 2).clamp(1, Self::MAX_JWKS_MAX_AGE_SECS)
    }

    /// The JWT lifetime, in seconds.
    pub fn jwt_lifetime_secs(&self) -> u64 {
        self.jwt_lifetime_secs
    }

    /// The session cookie lifetime.
    pub fn session_lifetime_secs(&self) -> u64 {
        self.session_lifetime_secs
    }

    /// The refresh cookie lifetime.
    pub fn refresh_lifetime_secs(&self) -> u64 {
        self.refresh_lifetime_secs
    }
}

/// The two cookies of a SIWE session. `Debug` hides them.
#[derive(Clone)]
pub struct SessionCookies {
    /// `access_token`: authorises PAT management.
    pub access: String,
    /// `refresh_token`: rotates the session.
    pub refresh: String,
}

impl fmt::Debug for SessionCookies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionCookies(…)")
    }
}

/// What a PAT owner asks for when creating one.
#[derive(Clone, Debug)]
pub struct NewPat {
    /// A label of the owner's choosing.
    pub label: String,
    /// The scopes; each must be grantable.
    pub scopes: ScopeSet,
    /// Lifetime in days: required, at most the configured cap.
    pub expires_in_days: Option<u32>,
}

/// A minted wallet JWT, as the exchange answers it (`accessToken`,
/// `tokenType`, `expiresIn`, `scope`). `Debug` hides the token.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccessToken {
    /// The JWT.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds until it expires.
    pub expires_in: u64,
    /// Space-separated scopes.
    pub scope: String,
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Issues sessions, PATs and wallet JWTs.
///
/// Clones share stores, keys and clock.
pub struct TokenIssuer<P = InMemoryPatStore, S = InMemorySessionStore> {
    config: Arc<IssuerConfig>,
    pats: Arc<P>,
    sessions: Arc<S>,
    keys: SigningKeys,
    clock: SharedClock,
    revocations: Option<Arc<dyn RevocationCheck>>,
}

impl<P, S> Clone for TokenIssuer<P, S> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
            pats: Arc::clone(&self.pats),
            sessions: Arc::clone(&self.sessions),
            keys: self.keys.clone(),
            clock: Arc::clone(&self.clock),
            revocations: self.revocations.clone(),
        }
    }
}

impl<P, S> fmt::Debug for TokenIssuer<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("config", &self.config)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl TokenIssuer {
    /// An issuer with in-memory stores and the system clock.
    pub fn in_memory(config: IssuerConfig, keys: SigningKeys) -> Self {
        Self::new(
            config,
            InMemoryPatStore::new(),
            InMemorySessionStore::new(),
            keys,
        )
    }
}

fn random_id(len: usize) -> Result<String, TokenError> {
    random::base62(len).map_err(|_| TokenError::Randomness)
}

fn numeric_id() -> Result<String, TokenError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|_| TokenError::Randomness)?;
    // Below 2^53, so JavaScript clients read it without loss.
    Ok((u64::from_le_bytes(bytes) >> 11).to_string())
}

impl<P: PatStore, S: SessionStore> TokenIssuer<P, S> {
    /// An issuer over the given stores, with the system clock.
    pub fn new(config: IssuerConfig, pats: P, sessions: S, keys: SigningKeys) -> Self {
        Self {
            config: Arc::new(config),
            pats: Arc::new(pats),
            sessions: Arc::new(sessions),
            keys,
            clock: Arc::new(SystemClock),
            revocations: None,
        }
    }

    /// Records every PAT revocation (and family revocation) in
    /// `revocations`, the list the verifier consults
    /// ([`JwtVerifier::with_revocations`]), so the JWTs already minted from
    /// a revoked PAT are refused on their next request, not at their `exp`.
    pub fn with_revocations(mut self, revocations: Arc<dyn RevocationCheck>) -> Self {
        self.revocations = Some(revocations);
        self
    }

    /// Refuses the JWTs of PAT `id` until the last one minted could expire
    /// (the JWT lifetime, plus the largest leeway a verifier may allow).
    async fn refuse_jwts_of(&self, id: &str) -> Result<(), TokenError> {
        if let Some(revocations) = &self.revocations {
            let until = self
                .now()
                .saturating_add(self.config.jwt_lifetime_secs)
                .saturating_add(JwtVerifier::MAX_LEEWAY_SECS);
            revocations.revoke(id, until).await?;
        }
        Ok(())
    }

    /// Replaces the clock (tests use [`FakeClock`](crate::clock::FakeClock)).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The settings.
    pub fn config(&self) -> &IssuerConfig {
        &self.config
    }

    /// The signing keys (rotate them, publish their JWKS).
    pub fn keys(&self) -> &SigningKeys {
        &self.keys
    }

    fn now(&self) -> u64 {
        self.clock.now_unix_secs()
    }

    fn new_session_cookies(&self) -> Result<(SessionSecrets, SessionCookies), TokenError> {
        let now = self.now();
        let cookies = SessionCookies {
            access: random_id(43)?,
            refresh: random_id(43)?,
        };
        let secrets = SessionSecrets {
            access_digest: SecretDigest::of(&cookies.access),
            access_expires_at: now.saturating_add(self.config.session_lifetime_secs),
            refresh_digest: SecretDigest::of(&cookies.refresh),
            refresh_expires_at: now.saturating_add(self.config.refresh_lifetime_secs),
        };
        Ok((secrets, cookies))
    }

    /// Starts a session for a wallet that just proved itself with SIWE.
    ///
    /// # Errors
    /// [`TokenError::Store`] or [`TokenError::Randomness`].
    pub async fn start_session(&self, wallet: Address) -> Result<SessionCookies, TokenError> {
        let (secrets, cookies) = self.new_session_cookies()?;
        self.sessions
            .insert(SessionRecord { wallet, secrets })
            .await?;
        Ok(cookies)
    }

    /// The wallet of the session whose access cookie is `access`.
    ///
    /// # Errors
    /// [`TokenError::SessionInvalid`] for an unknown or expired session.
    pub async fn session_wallet(&self, access: &str) -> Result<Address, TokenError> {
        let session = self
            .sessions
            .find_by_access(&SecretDigest::of(access))
            .await?
            .filter(|session| self.now() < session.secrets.access_expires_at)
            .ok_or(TokenError::SessionInvalid)?;
        Ok(session.wallet)
    }

    /// Rotates a session: the refresh cookie buys new cookies once.
    ///
    /// # Errors
    /// [`TokenError::SessionInvalid`] for an unknown, used or expired refresh cookie.
    pub async fn refresh_session(
        &self,
        refresh: &str,
    ) -> Result<(Address, SessionCookies), TokenError> {
        let (fresh, cookies) = self.new_session_cookies()?;
        let wallet = self
            .sessions
            .rotate(&SecretDigest::of(refresh), fresh, self.now())
            .await?
            .ok_or(TokenError::SessionInvalid)?;
        Ok((wallet, cookies))
    }

    /// Creates a PAT for `wallet`; the secret is returned once.
    ///
    /// # Errors
    /// [`TokenError::NoScopes`], [`TokenError::ScopeNotGrantable`],
    /// [`TokenError::ExpiryRequired`], [`TokenError::ExpiryTooLong`],
    /// [`TokenError::TooManyTokens`], [`TokenError::Store`].
    pub async fn create_pat(
        &self,
        wallet: Address,
        request: NewPat,
    ) -> Result<(PatRecord, PatSecret), TokenError> {
        self.check_scopes(&request.scopes)?;
        let days = request.expires_in_days.ok_or(TokenError::ExpiryRequired)?;
        if days == 0 || days > self.config.pat_max_days {
            return Err(TokenError::ExpiryTooLong {
                max_days: self.config.pat_max_days,
            });
        }
        let now = self.now();
        let active = self
            .pats
            .list(wallet)
            .await?
            .iter()
            .filter(|record| record.is_active(now))
            .count();
        if active >= self.config.max_active_pats {
            return Err(TokenError::TooManyTokens {
                max: self.config.max_active_pats,
            });
        }
        let (record, secret) = self.new_pat(
            wallet,
            request.label,
            request.scopes,
            now.saturating_add(u64::from(days) * 86_400),
            random_id(16)?,
        )?;
        self.pats.insert(record.clone()).await?;
        Ok((record, secret))
    }

    fn check_scopes(&self, scopes: &ScopeSet) -> Result<(), TokenError> {
        if scopes.is_empty() {
            return Err(TokenError::NoScopes);
        }
        match scopes.missing_from(&self.config.grantable).iter().next() {
            Some(scope) => Err(TokenError::ScopeNotGrantable(scope.clone())),
            None => Ok(()),
        }
    }

    fn new_pat(
        &self,
        wallet: Address,
        label: String,
        scopes: ScopeSet,
        expires_at: u64,
        family_id: String,
    ) -> Result<(PatRecord, PatSecret), TokenError> {
        let secret = PatSecret::generate().map_err(|_| TokenError::Randomness)?;
        let record = PatRecord {
            id: numeric_id()?,
            label,
            wallet,
            scopes,
            created_at: self.now(),
            expires_at,
            last_used_at: None,
            revoked_at: None,
            revoked_because: None,
            family_id,
            digest: secret.digest(),
        };
        Ok((record, secret))
    }

    /// Every PAT of `wallet`, in any state.
    ///
    /// # Errors
    /// [`TokenError::Store`].
    pub async fn list_pats(&self, wallet: Address) -> Result<Vec<PatRecord>, TokenError> {
        Ok(self.pats.list(wallet).await?)
    }

    /// Replaces PAT `id` of `wallet` with a new one of the same family, scopes
    /// and expiry; the old one stops working at once.
    ///
    /// # Errors
    /// [`TokenError::PatNotFound`] unless `id` is an active PAT of `wallet`.
    pub async fn rotate_pat(
        &self,
        wallet: Address,
        id: &str,
    ) -> Result<(PatRecord, PatSecret), TokenError> {
        let now = self.now();
        let old = self
            .pats
            .list(wallet)
            .await?
            .into_iter()
            .find(|record| record.id == id && record.is_active(now))
            .ok_or(TokenError::PatNotFound)?;
        let (record, secret) =
            self.new_pat(wallet, old.label, old.scopes, old.expires_at, old.family_id)?;
        match self.pats.rotate(id, record.clone(), now).await? {
            RotateOutcome::Rotated => Ok((record, secret)),
            _ => Err(TokenError::PatNotFound),
        }
    }

    /// Revokes PAT `id` of `wallet`, refuses the JWTs minted from it (with
    /// [`with_revocations`](Self::with_revocations)) and signs the wallet out
    /// everywhere.
    ///
    /// # Errors
    /// [`TokenError::PatNotFound`] unless `id` is a PAT of `wallet`.
    pub async fn revoke_pat(&self, wallet: Address, id: &str) -> Result<PatRecord, TokenError> {
        let record = self
            .pats
            .revoke(wallet, id, Revocation::Revoked, self.now())
            .await?
            .ok_or(TokenError::PatNotFound)?;
        self.refuse_jwts_of(&record.id).await?;
        self.sessions.remove_wallet(wallet).await?;
        Ok(record)
    }

    /// Signs `wallet` out everywhere: every session of it ends, its PATs
    /// stay (as revoking a PAT signs out, with the same store call).
    ///
    /// # Errors
    /// [`TokenError::Store`].
    pub async fn sign_out(&self, wallet: Address) -> Result<(), TokenError> {
        self.sessions.remove_wallet(wallet).await?;
        Ok(())
    }

    /// Exchanges a PAT for a wallet JWT.
    ///
    /// A revoked or expired PAT mints nothing; a PAT retired by rotation that
    /// is used again revokes its whole family (it has leaked).
    ///
    /// # Errors
    /// [`TokenError::InvalidPat`], [`TokenError::PatRevoked`],
    /// [`TokenError::PatExpired`], [`TokenError::Store`], [`TokenError::Signing`].
    pub async fn exchange(&self, pat: &str) -> Result<AccessToken, TokenError> {
        let verdict = self.exchange_pat(pat).await;
        if let Err(_error) = &verdict {
            trace_decision!(INFO, "token_exchange", outcome = "refused", error = %_error);
        }
        verdict
    }

    /// [`exchange`](Self::exchange), which traces its refusals.
    async fn exchange_pat(&self, pat: &str) -> Result<AccessToken, TokenError> {
        if !is_well_formed(pat) {
            return Err(TokenError::InvalidPat);
        }
        let now = self.now();
        let record = self
            .pats
            .find_by_digest(&SecretDigest::of(pat))
            .await?
            .ok_or(TokenError::InvalidPat)?;
        if record.revoked_because == Some(Revocation::Rotated) {
            self.pats.revoke_family(&record.family_id, now).await?;
            // The family leaked: the JWTs of all its PATs go too.
            for member in self.pats.list(record.wallet).await? {
                if member.family_id == record.family_id {
                    self.refuse_jwts_of(&member.id).await?;
                }
            }
            return Err(TokenError::PatRevoked);
        }
        if record.revoked_at.is_some() {
            return Err(TokenError::PatRevoked);
        }
        if now >= record.expires_at {
            return Err(TokenError::PatExpired);
        }
        let stale = record
            .last_used_at
            .is_none_or(|last| now.saturating_sub(last) >= self.config.last_used_every_secs);
        if stale {
            self.pats.touch(&record.id, now).await?;
        }
        let token = self.mint(&record, now)?;
        trace_decision!(
            INFO,
            "token_exchange",
            wallet = %record.wallet,
            pat_id = record.id.as_str(),
            scopes = %record.scopes,
            outcome = "exchanged",
        );
        Ok(token)
    }

    fn mint(&self, record: &PatRecord, now: u64) -> Result<AccessToken, TokenError> {
        // A JWT never outlives the PAT it was minted from.
        let exp = now
            .saturating_add(self.config.jwt_lifetime_secs)
            .min(record.expires_at);
        let wallet = record.wallet.to_checksum(None);
        let scope = record.scopes.to_string();
        let claims = AccessTokenClaims {
            iss: self.config.issuer.clone(),
            aud: Audience::One(self.config.audience.clone()),
            sub: wallet.clone(),
            wallet,
            client_id: record.id.clone(),
            scope: scope.clone(),
            iat: now,
            nbf: now,
            exp,
            jti: random_id(22)?,
        };
        let access_token = self.keys.sign(&claims).map_err(|_| TokenError::Signing)?;
        Ok(AccessToken {
            access_token,
            token_type: "Bearer",
            expires_in: exp - now,
            scope,
        })
    }
}

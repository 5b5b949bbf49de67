//! [`JwtVerifier`]: the checks a wallet JWT must pass.
//!
//! `jsonwebtoken` decodes the header and checks the signature with the key
//! the `kid` names; walletgate decides everything around it: the size cap,
//! the algorithm (the key's, never the header's), `crit`, `typ`, `iss`,
//! `aud`, the times against an injected clock with leeway, the wallet and
//! scope claims, the revocation list and the verified-token cache.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::cache::VerifiedCache;
use super::claims::parse_wallet;
use super::jwt::{ACCESS_TOKEN_TYPE, MAX_TOKEN_BYTES};
use super::{
    Algorithm, ConfigError, JwtError, KeySet, PAT_PREFIX, RevocationCheck, ScopeSet,
    VerificationKey, WalletClaims,
};
use crate::clock::{SharedClock, SystemClock};

/// Where an issuer's verification keys come from.
#[derive(Clone, Debug)]
enum KeySource {
    /// Keys held in process (walletgate's own issuer, a static JWKS).
    Set(KeySet),
    /// An external issuer's JWKS URL, fetched and refreshed.
    #[cfg(feature = "jwks-url")]
    Url(super::JwksUrl),
}

impl KeySource {
    fn key_set(&self) -> &KeySet {
        match self {
            Self::Set(keys) => keys,
            #[cfg(feature = "jwks-url")]
            Self::Url(url) => url.keys(),
        }
    }
}

/// How one issuer's claims become [`WalletClaims`].
#[derive(Clone, Debug)]
struct ClaimRules {
    /// The claim holding the scopes: a space-separated string or an array.
    scopes_claim: Cow<'static, str>,
    /// The claim holding the wallet: a string, or an array whose first entry counts.
    wallet_claim: Cow<'static, str>,
    /// `typ` must be `at+jwt`; else `JWT` and no `typ` are accepted too.
    access_token_typ_only: bool,
    require_client_id: bool,
    require_jti: bool,
    /// `sub` must be the wallet too (walletgate's own tokens).
    sub_is_wallet: bool,
}

impl ClaimRules {
    /// walletgate's own tokens, exactly as its issuer mints them.
    fn strict() -> Self {
        Self {
            scopes_claim: Cow::Borrowed("scope"),
            wallet_claim: Cow::Borrowed("wallet"),
            access_token_typ_only: true,
            require_client_id: true,
            require_jti: true,
            sub_is_wallet: true,
        }
    }

    /// An external issuer's tokens: `typ` `JWT` accepted, `client_id` and
    /// `jti` optional, `sub` an account id.
    #[cfg_attr(not(feature = "jwks-url"), allow(dead_code))]
    fn foreign() -> Self {
        Self {
            access_token_typ_only: false,
            require_client_id: false,
            require_jti: false,
            sub_is_wallet: false,
            ..Self::strict()
        }
    }

    fn typ_accepted(&self, typ: Option<&str>) -> bool {
        match typ {
            Some(typ) if is_access_token_type(typ) => true,
            Some(typ) => !self.access_token_typ_only && typ.eq_ignore_ascii_case("JWT"),
            None => !self.access_token_typ_only,
        }
    }
}

/// One issuer the verifier trusts: its keys, `iss`, `aud` and claim rules.
#[derive(Clone, Debug)]
struct TrustedIssuer {
    keys: KeySource,
    issuer: Arc<str>,
    audience: Arc<str>,
    rules: ClaimRules,
}

/// Verifies wallet JWTs: signature by `kid` with an algorithm allow-list,
/// `typ`, `iss`, `aud`, `exp`, `nbf`, `iat` with leeway, and the claims of
/// the [contract](super#the-token-contract); with
/// [`authenticate`](Self::authenticate), also the revocation list and the
/// verified-token cache.
///
/// One verifier can trust several issuers: walletgate's own
/// ([`JwtVerifier::new`], strict claim rules) and external ones
/// ([`JwtVerifier::from_jwks_url`], relaxed rules), joined with
/// [`also_accept`](Self::also_accept). The token's `kid` picks the issuer.
/// The claim-mapping options (`scopes_claim`, `wallet_claim`, …) apply to
/// the verifier's first issuer: set them before joining.
///
/// Usable on its own (an MCP tool, a WebSocket upgrade) or through
/// [`WalletJwtLayer`](super::WalletJwtLayer).
#[derive(Clone)]
pub struct JwtVerifier {
    issuers: Vec<TrustedIssuer>,
    leeway_secs: u64,
    allow_hs256: bool,
    pat_prefix: Cow<'static, str>,
    clock: SharedClock,
    revocations: Option<Arc<dyn RevocationCheck>>,
    cache: Option<Arc<VerifiedCache>>,
}

impl JwtVerifier {
    /// Default clock-skew leeway, in seconds.
    pub const DEFAULT_LEEWAY_SECS: u64 = 30;
    /// Largest accepted leeway: RFC 7519 asks for "no more than a few minutes".
    pub const MAX_LEEWAY_SECS: u64 = 300;

    /// Tokens from `issuer` for `audience`, signed with a key of `keys`,
    /// under the strict rules of walletgate's own tokens; EdDSA, ES256 and
    /// RS256 (HS256 only with [`allow_hs256`](Self::allow_hs256)), 30 s
    /// leeway, system clock, no revocation list, no cache.
    ///
    /// # Errors
    /// [`ConfigError::EmptyIssuerOrAudience`].
    pub fn new(
        keys: KeySet,
        issuer: impl Into<String>,
        audience: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        Self::with_source(KeySource::Set(keys), issuer, audience, ClaimRules::strict())
    }

    /// Tokens of an external issuer whose keys are at a JWKS URL, under the
    /// relaxed rules of a foreign issuer: `typ` `JWT` or `at+jwt` (or none),
    /// `client_id` and `jti` optional, `sub` free (an account id). Scopes
    /// are read from `scope` and the wallet from `wallet` unless
    /// [`scopes_claim`](Self::with_scopes_claim) and
    /// [`wallet_claim`](Self::with_wallet_claim) say otherwise.
    ///
    /// # Errors
    /// [`ConfigError::EmptyIssuerOrAudience`].
    #[cfg(feature = "jwks-url")]
    pub fn from_jwks_url(
        jwks: super::JwksUrl,
        issuer: impl Into<String>,
        audience: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        Self::with_source(
            KeySource::Url(jwks),
            issuer,
            audience,
            ClaimRules::foreign(),
        )
    }

    fn with_source(
        keys: KeySource,
        issuer: impl Into<String>,
        audience: impl Into<String>,
        rules: ClaimRules,
    ) -> Result<Self, ConfigError> {
        let (issuer, audience) = (issuer.into(), audience.into());
        if issuer.is_empty() || audience.is_empty() {
            return Err(ConfigError::EmptyIssuerOrAudience);
        }
        Ok(Self {
            issuers: vec![TrustedIssuer {
                keys,
                issuer: issuer.into(),
                audience: audience.into(),
                rules,
            }],
            leeway_secs: Self::DEFAULT_LEEWAY_SECS,
            allow_hs256: false,
            pat_prefix: Cow::Borrowed(PAT_PREFIX),
            clock: Arc::new(SystemClock),
            revocations: None,
            cache: None,
        })
    }

    /// Also accepts the tokens `other` accepts (its issuers, keys and claim
    /// rules); leeway, clock, revocation list and cache stay this verifier's.
    #[must_use]
    pub fn also_accept(mut self, other: JwtVerifier) -> Self {
        self.issuers.extend(other.issuers);
        self
    }

    fn rules_mut(&mut self) -> &mut ClaimRules {
        // `issuers` is never empty: every constructor adds one.
        &mut self.issuers[0].rules
    }

    /// The claim holding the scopes (default `scope`), e.g.
    /// `opensea_scopes`: a space-separated string or an array of strings.
    #[must_use]
    pub fn with_scopes_claim(mut self, claim: impl Into<Cow<'static, str>>) -> Self {
        self.rules_mut().scopes_claim = claim.into();
        self
    }

    /// The claim holding the wallet (default `wallet`), e.g.
    /// `linked_wallets`: an address, or an array whose first entry is used.
    #[must_use]
    pub fn with_wallet_claim(mut self, claim: impl Into<Cow<'static, str>>) -> Self {
        self.rules_mut().wallet_claim = claim.into();
        self
    }

    /// Whether `typ` must be `at+jwt` (RFC 9068); when not, `JWT` and no
    /// `typ` are accepted too. Strict for [`new`](Self::new).
    #[must_use]
    pub fn require_access_token_typ(mut self, required: bool) -> Self {
        self.rules_mut().access_token_typ_only = required;
        self
    }

    /// Whether `client_id` (the PAT id) is required. Strict for [`new`](Self::new).
    #[must_use]
    pub fn require_client_id(mut self, required: bool) -> Self {
        self.rules_mut().require_client_id = required;
        self
    }

    /// Whether `jti` is required. Strict for [`new`](Self::new).
    #[must_use]
    pub fn require_jti(mut self, required: bool) -> Self {
        self.rules_mut().require_jti = required;
        self
    }

    /// Whether `sub` must name the wallet too (walletgate's own tokens do;
    /// an external issuer's `sub` is an account id).
    #[must_use]
    pub fn require_sub_is_wallet(mut self, required: bool) -> Self {
        self.rules_mut().sub_is_wallet = required;
        self
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

    /// Reads time from `clock` (tests use [`FakeClock`](crate::clock::FakeClock)).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Consults `revocations` after every successful verification and every
    /// cache hit ([`authenticate`](Self::authenticate)): a token whose
    /// `client_id` (PAT id), or without one its `jti`, is revoked is refused
    /// with [`JwtError::Revoked`].
    #[must_use]
    pub fn with_revocations(mut self, revocations: Arc<dyn RevocationCheck>) -> Self {
        self.revocations = Some(revocations);
        self
    }

    /// Remembers up to `capacity` verified tokens (keyed by the whole token,
    /// matched exactly; each until its `exp`; tokens over 4 KiB are not
    /// kept), so a repeated token skips the signature check in
    /// [`authenticate`](Self::authenticate). A hit still consults the
    /// revocation list; removing a key forgets what it verified. `0` turns
    /// the cache off.
    #[must_use]
    pub fn with_cache(mut self, capacity: usize) -> Self {
        self.cache = (capacity > 0).then(|| Arc::new(VerifiedCache::new(capacity)));
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

    /// The key set of the first issuer (a shared handle: rotate through it).
    pub fn keys(&self) -> &KeySet {
        self.issuers[0].keys.key_set()
    }

    /// Verifies `token` against the keys at hand and returns its claims:
    /// signature, header and claim checks only. No key is fetched, the
    /// revocation list and the cache are not consulted: requests go through
    /// [`authenticate`](Self::authenticate) (what the layer calls).
    ///
    /// # Errors
    /// The first check that fails, as a [`JwtError`].
    pub fn verify(&self, token: &str) -> Result<WalletClaims, JwtError> {
        let now = self.clock.now_unix_secs();
        let header = self.header(token)?;
        let (issuer, key) = self.find_key(&header)?;
        self.verify_with(token, &header, issuer, &key, now)
    }

    /// Verifies `token` as a request credential: the cache first (then the
    /// revocation list), else the full [`verify`](Self::verify), fetching
    /// an external issuer's keys when the `kid` is new to it (at most once
    /// per its refresh interval), then the revocation list.
    ///
    /// # Errors
    /// The first check that fails, as a [`JwtError`].
    pub async fn authenticate(&self, token: &str) -> Result<WalletClaims, JwtError> {
        let now = self.clock.now_unix_secs();
        if let Some(cache) = &self.cache
            && let Some(claims) = cache.get(token, now, |issuer| {
                self.issuers
                    .get(issuer)
                    .map(|i| i.keys.key_set().generation())
            })
        {
            self.check_revocation(&claims, now).await?;
            return Ok(claims);
        }
        let header = self.header(token)?;
        #[cfg(feature = "jwks-url")]
        self.refresh_sources(&header, now).await;
        let (issuer, key) = self.find_key(&header)?;
        let index = self
            .issuers
            .iter()
            .position(|candidate| std::ptr::eq(candidate, issuer))
            .unwrap_or_default();
        let generation = issuer.keys.key_set().generation();
        let claims = self.verify_with(token, &header, issuer, &key, now)?;
        self.check_revocation(&claims, now).await?;
        if let Some(cache) = &self.cache {
            cache.insert(token, &claims, index, generation, now);
        }
        Ok(claims)
    }

    /// Lets each external issuer refresh its keys if due (its interval, or
    /// an unknown `kid` at most once per its unknown-kid interval).
    #[cfg(feature = "jwks-url")]
    async fn refresh_sources(&self, header: &jsonwebtoken::Header, now: u64) {
        let kid = header.kid.as_deref().unwrap_or_default();
        let known = self.find_key(header).is_ok();
        for issuer in &self.issuers {
            if let KeySource::Url(url) = &issuer.keys {
                url.refresh_if_due(kid, known, now).await;
            }
        }
    }

    async fn check_revocation(&self, claims: &WalletClaims, now: u64) -> Result<(), JwtError> {
        let Some(revocations) = &self.revocations else {
            return Ok(());
        };
        let id = if claims.pat_id().is_empty() {
            claims.token_id()
        } else {
            claims.pat_id()
        };
        if id.is_empty() {
            return Ok(());
        }
        match revocations.is_revoked(id, now).await {
            Ok(false) => Ok(()),
            Ok(true) => Err(JwtError::Revoked),
            Err(_) => Err(JwtError::RevocationUnavailable),
        }
    }

    /// Size cap, PAT prefix, the header (`jsonwebtoken`), `crit` and the
    /// algorithm allow-list.
    fn header(&self, token: &str) -> Result<jsonwebtoken::Header, JwtError> {
        if token.starts_with(&*self.pat_prefix) {
            return Err(JwtError::PatNotAccepted);
        }
        // Three unpadded base64url segments, within the size cap.
        let base64url_or_dot =
            |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
        if token.len() > MAX_TOKEN_BYTES
            || !token.as_bytes().iter().all(base64url_or_dot)
            || token.bytes().filter(|b| *b == b'.').count() != 2
        {
            return Err(JwtError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| refused_header(token))?;
        if header.crit.is_some() {
            return Err(JwtError::Malformed);
        }
        match Algorithm::from_jws(header.alg) {
            Some(Algorithm::Hs256) if !self.allow_hs256 => Err(JwtError::UnsupportedAlgorithm),
            Some(_) => Ok(header),
            None => Err(JwtError::UnsupportedAlgorithm),
        }
    }

    /// The issuer holding the header's `kid`, and the key.
    fn find_key(
        &self,
        header: &jsonwebtoken::Header,
    ) -> Result<(&TrustedIssuer, Arc<VerificationKey>), JwtError> {
        let kid = header.kid.as_deref().ok_or(JwtError::UnknownKey)?;
        self.issuers
            .iter()
            .find_map(|issuer| Some((issuer, issuer.keys.key_set().get(kid)?)))
            .ok_or(JwtError::UnknownKey)
    }

    fn verify_with(
        &self,
        token: &str,
        header: &jsonwebtoken::Header,
        issuer: &TrustedIssuer,
        key: &VerificationKey,
        now: u64,
    ) -> Result<WalletClaims, JwtError> {
        if !issuer.rules.typ_accepted(header.typ.as_deref()) {
            return Err(JwtError::WrongType);
        }
        // The key decides the algorithm; a header naming another one (HS256
        // against a public key) is refused before any verification.
        let algorithm = key.algorithm();
        if algorithm.jws() != header.alg {
            return Err(JwtError::UnsupportedAlgorithm);
        }
        let mut validation = jsonwebtoken::Validation::new(algorithm.jws());
        // Times, issuer and audience are checked below, against our clock.
        validation.validate_exp = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let decoded =
            jsonwebtoken::decode::<Map<String, Value>>(token, key.decoding_key(), &validation)
                .map_err(|error| match error.kind() {
                    jsonwebtoken::errors::ErrorKind::InvalidSignature
                    | jsonwebtoken::errors::ErrorKind::InvalidEcdsaKey
                    | jsonwebtoken::errors::ErrorKind::InvalidRsaKey(_)
                    | jsonwebtoken::errors::ErrorKind::InvalidEddsaKey
                    | jsonwebtoken::errors::ErrorKind::InvalidKeyFormat => JwtError::BadSignature,
                    jsonwebtoken::errors::ErrorKind::InvalidAlgorithm
                    | jsonwebtoken::errors::ErrorKind::MissingAlgorithm => {
                        JwtError::UnsupportedAlgorithm
                    }
                    // The signature verified; the payload is not a JSON object.
                    jsonwebtoken::errors::ErrorKind::Json(_) => JwtError::InvalidClaims,
                    _ => JwtError::Malformed,
                })?;
        self.check_claims(&decoded.claims, issuer, now)
    }

    fn check_claims(
        &self,
        claims: &Map<String, Value>,
        issuer: &TrustedIssuer,
        now: u64,
    ) -> Result<WalletClaims, JwtError> {
        let text = |name: &str| claims.get(name).and_then(Value::as_str);
        let time = |name: &str| {
            claims
                .get(name)
                .map(|v| v.as_u64().ok_or(JwtError::InvalidClaims))
        };
        let iss = text("iss").ok_or(JwtError::InvalidClaims)?;
        if iss != &*issuer.issuer {
            return Err(JwtError::WrongIssuer);
        }
        let audience_named = match claims.get("aud") {
            Some(Value::String(one)) => one == &*issuer.audience,
            Some(Value::Array(many)) => many.iter().any(|a| a.as_str() == Some(&issuer.audience)),
            _ => return Err(JwtError::InvalidClaims),
        };
        if !audience_named {
            return Err(JwtError::WrongAudience);
        }
        let rules = &issuer.rules;
        let exp = time("exp").ok_or(JwtError::InvalidClaims)??;
        if now >= exp.saturating_add(self.leeway_secs) {
            return Err(JwtError::Expired);
        }
        let latest_start = now.saturating_add(self.leeway_secs);
        let iat = match time("iat") {
            Some(iat) => iat?,
            None if rules.sub_is_wallet => return Err(JwtError::InvalidClaims),
            None => 0,
        };
        let nbf = match time("nbf") {
            Some(nbf) => nbf?,
            None if rules.sub_is_wallet => return Err(JwtError::InvalidClaims),
            None => 0,
        };
        if nbf > latest_start || iat > latest_start {
            return Err(JwtError::NotYetValid);
        }
        let wallet = match claims.get(&*rules.wallet_claim) {
            Some(Value::String(one)) => parse_wallet(one),
            Some(Value::Array(many)) => many.first().and_then(Value::as_str).and_then(parse_wallet),
            _ => None,
        }
        .ok_or(JwtError::InvalidClaims)?;
        if rules.sub_is_wallet && text("sub").and_then(parse_wallet) != Some(wallet) {
            return Err(JwtError::InvalidClaims);
        }
        let scopes: ScopeSet = match claims.get(&*rules.scopes_claim) {
            Some(Value::String(spaced)) => spaced.parse().map_err(|_| JwtError::InvalidClaims)?,
            Some(Value::Array(many)) => many
                .iter()
                .map(|scope| scope.as_str().and_then(|s| s.parse().ok()))
                .collect::<Option<ScopeSet>>()
                .ok_or(JwtError::InvalidClaims)?,
            None if !rules.sub_is_wallet => ScopeSet::new(),
            _ => return Err(JwtError::InvalidClaims),
        };
        let optional_id = |name: &str, required: bool| match claims.get(name) {
            Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
            None if !required => Ok(String::new()),
            _ => Err(JwtError::InvalidClaims),
        };
        let jti = optional_id("jti", rules.require_jti)?;
        let client_id = optional_id("client_id", rules.require_client_id)?;
        Ok(WalletClaims::new(wallet, scopes, jti, client_id, iat, exp))
    }
}

/// Why `jsonwebtoken` could not read the header: an algorithm it does not
/// know (`none`, …) is [`JwtError::UnsupportedAlgorithm`], anything else
/// [`JwtError::Malformed`].
fn refused_header(token: &str) -> JwtError {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct AlgOnly {
        alg: String,
    }
    let named_alg = token
        .split('.')
        .next()
        .and_then(|segment| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(segment)
                .ok()
        })
        .and_then(|json| serde_json::from_slice::<AlgOnly>(&json).ok());
    match named_alg {
        Some(header) if Algorithm::from_name(&header.alg).is_none() => {
            JwtError::UnsupportedAlgorithm
        }
        _ => JwtError::Malformed,
    }
}

/// `at+jwt`, or its full media type, case-insensitively (RFC 9068 §2.1).
fn is_access_token_type(typ: &str) -> bool {
    typ.eq_ignore_ascii_case(ACCESS_TOKEN_TYPE) || typ.eq_ignore_ascii_case("application/at+jwt")
}

impl fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("issuers", &self.issuers)
            .field("leeway_secs", &self.leeway_secs)
            .field("allow_hs256", &self.allow_hs256)
            .field("pat_prefix", &self.pat_prefix)
            .field("revocations", &self.revocations.is_some())
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::json;

    use super::*;
    use crate::clock::FakeClock;
    use crate::store::{BoxFuture, StoreError};
    use crate::wallet_jwt::jwt::{self, Header};
    use crate::wallet_jwt::{InMemoryRevocations, Scope};

    const NOW: u64 = 1_800_000_000;
    const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

    fn now_or_never<F: Future>(future: F) -> F::Output {
        match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("in-process verification never waits"),
        }
    }

    fn key() -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[0x55; 32])
    }

    fn keys() -> KeySet {
        let keys = KeySet::new();
        keys.insert("k", VerificationKey::ed25519(key().verifying_key()))
            .unwrap();
        keys
    }

    fn own() -> JwtVerifier {
        JwtVerifier::new(keys(), "iss", "aud")
            .unwrap()
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
    }

    /// `claims` under `{alg: EdDSA, typ, kid: k}`, signed with the test key.
    fn signed(typ: Option<&str>, claims: &Value) -> String {
        use ed25519_dalek::Signer as _;
        let header = Header {
            alg: "EdDSA".into(),
            typ: typ.map(Into::into),
            kid: Some("k".into()),
            crit: None,
        };
        jwt::encode(&header, claims, |input| {
            key().sign(input).to_bytes().to_vec()
        })
        .unwrap()
    }

    fn own_claims() -> Value {
        json!({
            "iss": "iss", "aud": "aud", "sub": WALLET, "wallet": WALLET,
            "client_id": "pat_1", "scope": "read:favorites", "iat": NOW,
            "nbf": NOW, "exp": NOW + 600, "jti": "jwt_1",
        })
    }

    fn zitadel_claims() -> Value {
        json!({
            "iss": "iss", "aud": ["aud", "project"], "sub": "314159",
            "linked_wallets": [WALLET.to_lowercase()], "iat": NOW, "exp": NOW + 600,
            "opensea_scopes": ["read:favorites", "openid"],
        })
    }

    fn foreign() -> JwtVerifier {
        JwtVerifier::with_source(KeySource::Set(keys()), "iss", "aud", ClaimRules::foreign())
            .unwrap()
            .with_scopes_claim("opensea_scopes")
            .with_wallet_claim("linked_wallets")
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
    }

    #[test]
    fn foreign_claims_map_scopes_arrays_and_the_first_linked_wallet() {
        let claims = foreign()
            .verify(&signed(Some("JWT"), &zitadel_claims()))
            .unwrap();
        assert_eq!(claims.wallet().to_string(), WALLET);
        assert!(claims.require(Scope::ReadFavorites).is_ok());
        assert_eq!(claims.pat_id(), "", "client_id is optional");
        let mut spaced = zitadel_claims();
        spaced["opensea_scopes"] = json!("read:wallets openid");
        let claims = foreign().verify(&signed(None, &spaced)).unwrap();
        assert!(claims.require(Scope::ReadWallets).is_ok());
        assert!(claims.require(Scope::ReadFavorites).is_err());
    }

    #[test]
    fn our_own_rules_stay_strict() {
        assert!(own().verify(&signed(Some("at+jwt"), &own_claims())).is_ok());
        // The foreign shape is not ours: typ, wallet claim, sub, jti, client_id.
        assert_eq!(
            own().verify(&signed(Some("JWT"), &own_claims())),
            Err(JwtError::WrongType)
        );
        for missing in ["jti", "client_id", "nbf", "scope"] {
            let mut claims = own_claims();
            claims.as_object_mut().unwrap().remove(missing);
            assert_eq!(
                own().verify(&signed(Some("at+jwt"), &claims)),
                Err(JwtError::InvalidClaims),
                "{missing}"
            );
        }
        let relaxed = own().require_jti(false).require_client_id(false);
        let mut claims = own_claims();
        claims.as_object_mut().unwrap().remove("jti");
        claims.as_object_mut().unwrap().remove("client_id");
        assert!(relaxed.verify(&signed(Some("at+jwt"), &claims)).is_ok());
        let foreign_typ_only = foreign().require_access_token_typ(true);
        assert_eq!(
            foreign_typ_only.verify(&signed(Some("JWT"), &zitadel_claims())),
            Err(JwtError::WrongType)
        );
    }

    #[test]
    fn one_verifier_trusts_two_issuers_by_kid() {
        let other_key = ed25519_dalek::SigningKey::from_bytes(&[0x66; 32]);
        let other_keys = KeySet::new();
        other_keys
            .insert("other", VerificationKey::ed25519(other_key.verifying_key()))
            .unwrap();
        let other = JwtVerifier::new(other_keys, "other-iss", "aud").unwrap();
        let both = own().also_accept(other);
        assert!(both.verify(&signed(Some("at+jwt"), &own_claims())).is_ok());
        let mut claims = own_claims();
        claims["iss"] = json!("other-iss");
        let token = jwt::sign_eddsa("other", &claims, &other_key).unwrap();
        assert!(both.verify(&token).is_ok());
        // The other issuer's key does not vouch for our issuer name.
        let forged = jwt::sign_eddsa("other", &own_claims(), &other_key).unwrap();
        assert_eq!(both.verify(&forged), Err(JwtError::WrongIssuer));
    }

    #[test]
    fn crit_padding_size_and_segment_count_are_malformed() {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"EdDSA","kid":"k","crit":["exp"]}"#);
        let crit = format!("{header}.e30.AA");
        assert_eq!(own().verify(&crit), Err(JwtError::Malformed));
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"EdDSA","kid":"k"}"#);
        for token in [
            format!("{header}.e30=.AA"),
            format!("{header}.e30.e30.AA"),
            "a".repeat(jwt::MAX_TOKEN_BYTES + 1),
        ] {
            assert_eq!(own().verify(&token), Err(JwtError::Malformed));
        }
        let unknown_alg = URL_SAFE_NO_PAD.encode(br#"{"alg":"PS512","kid":"k"}"#);
        assert_eq!(
            own().verify(&format!("{unknown_alg}.e30.AA")),
            Err(JwtError::UnsupportedAlgorithm)
        );
    }

    #[test]
    fn revocation_is_consulted_on_a_miss_and_on_every_cache_hit() {
        let revocations = Arc::new(InMemoryRevocations::new());
        let verifier = own().with_revocations(revocations.clone()).with_cache(16);
        let token = signed(Some("at+jwt"), &own_claims());
        assert!(now_or_never(verifier.authenticate(&token)).is_ok());
        assert!(now_or_never(verifier.authenticate(&token)).is_ok(), "hit");
        now_or_never(RevocationCheck::revoke(&*revocations, "pat_1", u64::MAX)).unwrap();
        assert_eq!(
            now_or_never(verifier.authenticate(&token)),
            Err(JwtError::Revoked)
        );
        let uncached = own().with_revocations(revocations);
        assert_eq!(
            now_or_never(uncached.authenticate(&token)),
            Err(JwtError::Revoked)
        );
    }

    #[test]
    fn a_removed_key_empties_what_the_cache_vouched_for() {
        let verifier = own().with_cache(16);
        let token = signed(Some("at+jwt"), &own_claims());
        assert!(now_or_never(verifier.authenticate(&token)).is_ok());
        assert!(verifier.keys().remove("k"));
        assert_eq!(
            now_or_never(verifier.authenticate(&token)),
            Err(JwtError::UnknownKey)
        );
    }

    #[test]
    fn an_unreachable_revocation_list_is_503_not_401() {
        struct Down;
        impl RevocationCheck for Down {
            fn is_revoked<'a>(
                &'a self,
                _: &'a str,
                _: u64,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(std::future::ready(Err(StoreError::new("down"))))
            }
            fn revoke<'a>(&'a self, _: &'a str, _: u64) -> BoxFuture<'a, Result<(), StoreError>> {
                Box::pin(std::future::ready(Err(StoreError::new("down"))))
            }
        }
        let verifier = own().with_revocations(Arc::new(Down));
        let token = signed(Some("at+jwt"), &own_claims());
        let refused = now_or_never(verifier.authenticate(&token)).unwrap_err();
        assert_eq!(refused, JwtError::RevocationUnavailable);
        assert_eq!(refused.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    }
}

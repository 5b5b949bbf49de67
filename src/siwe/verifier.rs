//! The relying party's checks: EIP-191 signature, domain, URI, chain, nonce, time.

use std::fmt;
use std::sync::Arc;

use alloy_primitives::{Address, Signature};

use super::message::{AddressPolicy, ParseError, SiweMessage, SiweMessageFields};
use super::nonce::{InMemoryNonceStore, NonceConsumption, NonceStore, NonceStoreError};
use super::syntax;
use crate::clock::{SharedClock, SystemClock};

const NANOS_PER_MILLI: i128 = 1_000_000;
const MILLIS_PER_SEC: u64 = 1_000;

/// Why a sign-in was refused.
///
/// Messages say which check failed; none contains the signature.
#[derive(Debug)]
#[non_exhaustive]
pub enum VerifyError {
    /// The message (or its fields) is not valid EIP-4361.
    InvalidMessage(ParseError),
    /// The nonce was not issued by this server.
    NonceUnknown,
    /// The nonce was already used by an earlier sign-in attempt.
    NonceAlreadyUsed,
    /// The nonce outlived its time to live before it was used.
    NonceExpired,
    /// The nonce store failed; the sign-in could not be checked (a server fault).
    NonceStore(NonceStoreError),
    /// The message's scheme is not the one this server expects.
    SchemeMismatch,
    /// The message's domain is not this server's.
    DomainMismatch,
    /// The message's URI is not the one this server expects.
    UriMismatch,
    /// The message's chain id is not allowed here.
    ChainNotAllowed {
        /// The chain id the message names.
        chain_id: u64,
    },
    /// This server requires an EIP-55 checksummed address.
    AddressNotChecksummed,
    /// `Issued At` lies in the future (beyond the allowed clock skew).
    IssuedInFuture,
    /// `Issued At` is older than this server accepts.
    IssuedTooLongAgo,
    /// `Expiration Time` has passed.
    Expired,
    /// `Not Before` has not been reached.
    NotYetValid,
    /// The signature is not 65 bytes of hex with a valid recovery byte.
    MalformedSignature,
    /// The signature was not made by the message's address over this exact text.
    SignatureMismatch,
}

impl VerifyError {
    /// True when the server, not the client, is at fault (the nonce store failed).
    pub fn is_server_fault(&self) -> bool {
        matches!(self, Self::NonceStore(_))
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidMessage(e) => write!(f, "invalid SIWE message: {e}"),
            Self::NonceUnknown => f.write_str("the nonce was not issued by this server"),
            Self::NonceAlreadyUsed => f.write_str("the nonce was already used; request a new one"),
            Self::NonceExpired => f.write_str("the nonce has expired; request a new one"),
            Self::NonceStore(_) => f.write_str("the sign-in could not be checked; try again later"),
            Self::SchemeMismatch => f.write_str("the message's scheme is not this server's"),
            Self::DomainMismatch => f.write_str("the message's domain is not this server's"),
            Self::UriMismatch => {
                f.write_str("the message's URI is not the one this server expects")
            }
            Self::ChainNotAllowed { chain_id } => {
                write!(f, "chain id {chain_id} is not allowed here")
            }
            Self::AddressNotChecksummed => f.write_str("the address must be EIP-55 checksummed"),
            Self::IssuedInFuture => f.write_str("the message's issued-at time is in the future"),
            Self::IssuedTooLongAgo => f.write_str("the message was issued too long ago"),
            Self::Expired => f.write_str("the message has expired"),
            Self::NotYetValid => f.write_str("the message is not valid yet"),
            Self::MalformedSignature => {
                f.write_str("the signature must be 65 bytes in hex (r, s, v)")
            }
            Self::SignatureMismatch => {
                f.write_str("the signature does not match the message's address")
            }
        }
    }
}

impl std::error::Error for VerifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidMessage(e) => Some(e),
            Self::NonceStore(e) => Some(e),
            _ => None,
        }
    }
}

/// The data API's answer to a refused sign-in: 401
/// ([`DataApiError::unauthorized`](crate::envelope::DataApiError::unauthorized))
/// saying which check failed (`SIWE verification failed: …`), or 503 when
/// the nonce store failed (the server's fault: the client may retry).
impl From<VerifyError> for crate::envelope::DataApiError {
    fn from(error: VerifyError) -> Self {
        use crate::envelope::DataApiError;
        if error.is_server_fault() {
            DataApiError::new(http::StatusCode::SERVICE_UNAVAILABLE, error.to_string())
        } else {
            DataApiError::unauthorized(format!("SIWE verification failed: {error}"))
        }
    }
}

/// The data API's answer when no nonce could be issued: 503 (the store is
/// full or down; never the client's fault).
impl From<NonceStoreError> for crate::envelope::DataApiError {
    fn from(_error: NonceStoreError) -> Self {
        crate::envelope::DataApiError::new(
            http::StatusCode::SERVICE_UNAVAILABLE,
            "nonce store unavailable",
        )
    }
}

/// A [`SiweVerifierBuilder`] setting that cannot work.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No expected domain was set.
    MissingDomain,
    /// The expected domain is not an RFC 3986 authority.
    InvalidDomain,
    /// The expected scheme is not an RFC 3986 scheme.
    InvalidScheme,
    /// No expected URI was set.
    MissingUri,
    /// The expected URI is not an RFC 3986 URI.
    InvalidUri,
    /// No chain id is allowed, so no sign-in could pass.
    NoChainIds,
    /// A zero nonce time to live would expire every nonce at once.
    ZeroNonceTtl,
    /// A zero maximum issued-at age would refuse every message.
    ZeroMaxIssuedAge,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::MissingDomain => "SIWE verifier: set the expected domain",
            Self::InvalidDomain => "SIWE verifier: the domain is not an RFC 3986 authority",
            Self::InvalidScheme => "SIWE verifier: the scheme is not an RFC 3986 scheme",
            Self::MissingUri => "SIWE verifier: set the expected URI",
            Self::InvalidUri => "SIWE verifier: the URI is not an RFC 3986 URI",
            Self::NoChainIds => "SIWE verifier: allow at least one chain id",
            Self::ZeroNonceTtl => "SIWE verifier: the nonce time to live must be positive",
            Self::ZeroMaxIssuedAge => "SIWE verifier: the maximum issued-at age must be positive",
        })
    }
}

impl std::error::Error for ConfigError {}

/// A sign-in that passed every check.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct VerifiedSignIn {
    /// The wallet that signed (recovered, equal to the message's address).
    pub address: Address,
    /// The verified message.
    pub message: SiweMessage,
}

impl SiweMessage {
    /// Checks that `signature` (65 bytes: r, s, v with v 0/1 or 27/28) was made
    /// by this message's address over its exact text, per EIP-191.
    ///
    /// This is the signature check alone; [`SiweVerifier`] adds the relying
    /// party's checks.
    pub fn verify_eip191(&self, signature: &[u8]) -> Result<(), VerifyError> {
        let signature =
            Signature::from_raw(signature).map_err(|_| VerifyError::MalformedSignature)?;
        // Display is byte-exact: this is the text the wallet signed.
        let signer = signature
            .recover_address_from_msg(self.to_string())
            .map_err(|_| VerifyError::SignatureMismatch)?;
        if signer == self.address() {
            Ok(())
        } else {
            Err(VerifyError::SignatureMismatch)
        }
    }

    /// Checks `Expiration Time` and `Not Before` at `now_unix_millis`,
    /// allowing `leeway_secs` of clock skew either way.
    pub fn check_validity_window(
        &self,
        now_unix_millis: u64,
        leeway_secs: u64,
    ) -> Result<(), VerifyError> {
        let now = i128::from(now_unix_millis) * NANOS_PER_MILLI;
        let leeway = i128::from(leeway_secs) * 1_000 * NANOS_PER_MILLI;
        if self
            .expiration_time()
            .is_some_and(|expiration| now >= expiration.unix_nanos() + leeway)
        {
            return Err(VerifyError::Expired);
        }
        if self
            .not_before()
            .is_some_and(|not_before| now + leeway < not_before.unix_nanos())
        {
            return Err(VerifyError::NotYetValid);
        }
        Ok(())
    }
}

/// Decodes a `0x`-prefixed (or bare) hex signature of 65 bytes.
fn decode_signature_hex(signature_hex: &str) -> Result<[u8; 65], VerifyError> {
    let hex = signature_hex
        .strip_prefix("0x")
        .or_else(|| signature_hex.strip_prefix("0X"))
        .unwrap_or(signature_hex);
    if hex.len() != 130 {
        return Err(VerifyError::MalformedSignature);
    }
    alloy_primitives::hex::decode_to_array(hex).map_err(|_| VerifyError::MalformedSignature)
}

/// The relying party's SIWE configuration and checks; cheap to clone.
///
/// Built with [`SiweVerifier::builder`]; see the [module docs](super).
#[derive(Clone)]
pub struct SiweVerifier {
    config: Arc<Config>,
}

struct Config {
    scheme: String,
    domain: String,
    uri: String,
    chain_ids: Vec<u64>,
    max_issued_age_millis: u64,
    leeway_secs: u64,
    nonce_ttl_millis: u64,
    address_policy: AddressPolicy,
    clock: SharedClock,
    nonce_store: Arc<dyn NonceStore>,
}

impl fmt::Debug for SiweVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("SiweVerifier")
            .field("scheme", &c.scheme)
            .field("domain", &c.domain)
            .field("uri", &c.uri)
            .field("chain_ids", &c.chain_ids)
            .field("max_issued_age_millis", &c.max_issued_age_millis)
            .field("leeway_secs", &c.leeway_secs)
            .field("nonce_ttl_millis", &c.nonce_ttl_millis)
            .field("address_policy", &c.address_policy)
            .finish_non_exhaustive()
    }
}

impl SiweVerifier {
    /// Starts a configuration; domain, URI and at least one chain id are required.
    pub fn builder() -> SiweVerifierBuilder {
        SiweVerifierBuilder::default()
    }

    /// The domain messages must name.
    pub fn domain(&self) -> &str {
        &self.config.domain
    }

    /// The URI messages must name.
    pub fn uri(&self) -> &str {
        &self.config.uri
    }

    /// The chain ids messages may name.
    pub fn chain_ids(&self) -> &[u64] {
        &self.config.chain_ids
    }

    /// Issues a fresh nonce, valid for the configured time to live.
    pub async fn issue_nonce(&self) -> Result<String, NonceStoreError> {
        let now = self.config.clock.now_unix_millis();
        let expires_at = now.saturating_add(self.config.nonce_ttl_millis);
        self.config.nonce_store.issue(now, expires_at).await
    }

    /// Verifies a sign-in sent as message fields (the OpenSea SDK's form):
    /// rebuilds the exact signed text, then runs [`verify`](Self::verify).
    ///
    /// When the fields do not form a valid message, their nonce (if it looks
    /// like one) is still spent: a nonce serves one attempt, pass or fail.
    pub async fn verify_fields(
        &self,
        fields: &SiweMessageFields,
        signature_hex: &str,
    ) -> Result<VerifiedSignIn, VerifyError> {
        match SiweMessage::from_fields_with(fields, self.config.address_policy) {
            Ok(message) => self.verify(&message, signature_hex).await,
            Err(parse_error) => {
                if syntax::is_nonce(&fields.nonce) {
                    let now = self.config.clock.now_unix_millis();
                    // Best effort: the client's error is the message, whatever the store says.
                    if let Err(_error) = self.config.nonce_store.consume(&fields.nonce, now).await {
                        trace_warn!(error = %_error, "SIWE nonce store failed to spend a nonce");
                    }
                }
                let error = VerifyError::InvalidMessage(parse_error);
                trace_decision!(INFO, "siwe", outcome = "refused", error = %error);
                Err(error)
            }
        }
    }

    /// Verifies a parsed message and its hex signature (`0x` + 130 hex digits).
    ///
    /// The nonce is spent first, so it serves exactly one attempt whether the
    /// other checks pass or fail. Then: scheme, domain, URI, chain id, address
    /// policy, issued-at bounds, expiration and not-before, and finally the
    /// EIP-191 signature over the exact message text.
    pub async fn verify(
        &self,
        message: &SiweMessage,
        signature_hex: &str,
    ) -> Result<VerifiedSignIn, VerifyError> {
        let verdict = self.check(message, signature_hex).await;
        match &verdict {
            Ok(_) => {
                trace_decision!(INFO, "siwe", wallet = %message.address(), outcome = "verified");
            }
            Err(VerifyError::NonceStore(_error)) => {
                trace_warn!(error = %_error, "SIWE nonce store failed; sign-in refused");
            }
            Err(_error) => trace_decision!(
                INFO,
                "siwe",
                wallet = %message.address(),
                outcome = "refused",
                error = %_error,
            ),
        }
        verdict
    }

    /// [`verify`](Self::verify), which traces its verdict.
    async fn check(
        &self,
        message: &SiweMessage,
        signature_hex: &str,
    ) -> Result<VerifiedSignIn, VerifyError> {
        let config = &self.config;
        let now = config.clock.now_unix_millis();
        match config
            .nonce_store
            .consume(message.nonce(), now)
            .await
            .map_err(VerifyError::NonceStore)?
        {
            NonceConsumption::Fresh => {}
            NonceConsumption::AlreadyUsed => return Err(VerifyError::NonceAlreadyUsed),
            NonceConsumption::Expired => return Err(VerifyError::NonceExpired),
            NonceConsumption::Unknown => return Err(VerifyError::NonceUnknown),
        }
        self.check_fields(message, now)?;
        let signature = decode_signature_hex(signature_hex)?;
        message.verify_eip191(&signature)?;
        Ok(VerifiedSignIn {
            address: message.address(),
            message: message.clone(),
        })
    }

    fn check_fields(&self, message: &SiweMessage, now_unix_millis: u64) -> Result<(), VerifyError> {
        let config = &self.config;
        // Scheme and host are case-insensitive (RFC 3986 sections 3.1 and 3.2.2).
        if message
            .scheme()
            .is_some_and(|s| !s.eq_ignore_ascii_case(&config.scheme))
        {
            return Err(VerifyError::SchemeMismatch);
        }
        if !message.domain().eq_ignore_ascii_case(&config.domain) {
            return Err(VerifyError::DomainMismatch);
        }
        if message.uri() != config.uri {
            return Err(VerifyError::UriMismatch);
        }
        if !config.chain_ids.contains(&message.chain_id()) {
            return Err(VerifyError::ChainNotAllowed {
                chain_id: message.chain_id(),
            });
        }
        if config.address_policy == AddressPolicy::ChecksummedOnly
            && !message.is_address_checksummed()
        {
            return Err(VerifyError::AddressNotChecksummed);
        }
        let now = i128::from(now_unix_millis) * NANOS_PER_MILLI;
        let leeway = i128::from(config.leeway_secs) * i128::from(MILLIS_PER_SEC) * NANOS_PER_MILLI;
        let issued_at = message.issued_at().unix_nanos();
        if issued_at > now + leeway {
            return Err(VerifyError::IssuedInFuture);
        }
        if now - issued_at > i128::from(config.max_issued_age_millis) * NANOS_PER_MILLI {
            return Err(VerifyError::IssuedTooLongAgo);
        }
        message.check_validity_window(now_unix_millis, config.leeway_secs)
    }
}

/// Configuration for a [`SiweVerifier`]; [`build`](Self::build) validates it.
#[must_use]
pub struct SiweVerifierBuilder {
    scheme: String,
    domain: Option<String>,
    uri: Option<String>,
    chain_ids: Vec<u64>,
    max_issued_age_secs: u64,
    leeway_secs: u64,
    nonce_ttl_secs: u64,
    address_policy: AddressPolicy,
    clock: Option<SharedClock>,
    nonce_store: Option<Arc<dyn NonceStore>>,
}

/// Default bound on the age of `Issued At`: 10 minutes.
pub const DEFAULT_MAX_ISSUED_AGE_SECS: u64 = 600;
/// Default clock skew allowed on every time check: 30 seconds.
pub const DEFAULT_LEEWAY_SECS: u64 = 30;
/// Default nonce time to live: 10 minutes.
pub const DEFAULT_NONCE_TTL_SECS: u64 = 600;

impl Default for SiweVerifierBuilder {
    fn default() -> Self {
        Self {
            scheme: "https".to_owned(),
            domain: None,
            uri: None,
            chain_ids: Vec::new(),
            max_issued_age_secs: DEFAULT_MAX_ISSUED_AGE_SECS,
            leeway_secs: DEFAULT_LEEWAY_SECS,
            nonce_ttl_secs: DEFAULT_NONCE_TTL_SECS,
            address_policy: AddressPolicy::default(),
            clock: None,
            nonce_store: None,
        }
    }
}

impl fmt::Debug for SiweVerifierBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SiweVerifierBuilder")
            .field("scheme", &self.scheme)
            .field("domain", &self.domain)
            .field("uri", &self.uri)
            .field("chain_ids", &self.chain_ids)
            .finish_non_exhaustive()
    }
}

impl SiweVerifierBuilder {
    /// The domain (RFC 3986 authority, e.g. `example.com` or `127.0.0.1:8080`)
    /// messages must name: this server's own origin host.
    pub fn with_domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }

    /// The scheme a message may write before its domain (default `https`).
    /// Messages without a scheme are accepted, as EIP-4361 assumes `https`.
    pub fn with_scheme(mut self, scheme: impl Into<String>) -> Self {
        self.scheme = scheme.into();
        self
    }

    /// The URI messages must name, compared as exact text.
    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = Some(uri.into());
        self
    }

    /// Allows one more chain id.
    pub fn allow_chain_id(mut self, chain_id: u64) -> Self {
        if !self.chain_ids.contains(&chain_id) {
            self.chain_ids.push(chain_id);
        }
        self
    }

    /// Allows these chain ids (added to any already allowed).
    pub fn allow_chain_ids(self, chain_ids: impl IntoIterator<Item = u64>) -> Self {
        chain_ids.into_iter().fold(self, Self::allow_chain_id)
    }

    /// How old `Issued At` may be (default [`DEFAULT_MAX_ISSUED_AGE_SECS`]).
    pub fn with_max_issued_age_secs(mut self, secs: u64) -> Self {
        self.max_issued_age_secs = secs;
        self
    }

    /// Clock skew allowed on issued-at, expiration and not-before
    /// (default [`DEFAULT_LEEWAY_SECS`]).
    pub fn with_leeway_secs(mut self, secs: u64) -> Self {
        self.leeway_secs = secs;
        self
    }

    /// How long an issued nonce stays usable (default [`DEFAULT_NONCE_TTL_SECS`]).
    pub fn with_nonce_ttl_secs(mut self, secs: u64) -> Self {
        self.nonce_ttl_secs = secs;
        self
    }

    /// Which address spellings to accept (default: checksummed or one case).
    pub fn with_address_policy(mut self, policy: AddressPolicy) -> Self {
        self.address_policy = policy;
        self
    }

    /// The clock (default [`SystemClock`]).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The nonce store (default a fresh [`InMemoryNonceStore`]). Pass an `Arc`
    /// to keep a handle on it.
    pub fn with_nonce_store(mut self, store: impl NonceStore) -> Self {
        self.nonce_store = Some(Arc::new(store));
        self
    }

    /// Validates the configuration.
    pub fn build(self) -> Result<SiweVerifier, ConfigError> {
        let domain = self.domain.ok_or(ConfigError::MissingDomain)?;
        if !syntax::is_authority(&domain, true) {
            return Err(ConfigError::InvalidDomain);
        }
        if !syntax::is_scheme(&self.scheme) {
            return Err(ConfigError::InvalidScheme);
        }
        let uri = self.uri.ok_or(ConfigError::MissingUri)?;
        if !syntax::is_uri(&uri) {
            return Err(ConfigError::InvalidUri);
        }
        if self.chain_ids.is_empty() {
            return Err(ConfigError::NoChainIds);
        }
        if self.nonce_ttl_secs == 0 {
            return Err(ConfigError::ZeroNonceTtl);
        }
        if self.max_issued_age_secs == 0 {
            return Err(ConfigError::ZeroMaxIssuedAge);
        }
        Ok(SiweVerifier {
            config: Arc::new(Config {
                scheme: self.scheme,
                domain,
                uri,
                chain_ids: self.chain_ids,
                max_issued_age_millis: self.max_issued_age_secs.saturating_mul(MILLIS_PER_SEC),
                leeway_secs: self.leeway_secs,
                nonce_ttl_millis: self.nonce_ttl_secs.saturating_mul(MILLIS_PER_SEC),
                address_policy: self.address_policy,
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
                nonce_store: self
                    .nonce_store
                    .unwrap_or_else(|| Arc::new(InMemoryNonceStore::new())),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> SiweVerifierBuilder {
        SiweVerifier::builder()
            .with_domain("login.xyz")
            .with_uri("https://login.xyz")
            .allow_chain_id(1)
    }

    #[test]
    fn builder_requires_domain_uri_and_chains() {
        assert!(builder().build().is_ok());
        let partial = || SiweVerifier::builder();
        let cases = [
            (
                partial().with_uri("https://login.xyz").allow_chain_id(1),
                ConfigError::MissingDomain,
            ),
            (
                partial().with_domain("login.xyz").allow_chain_id(1),
                ConfigError::MissingUri,
            ),
            (
                partial()
                    .with_domain("login.xyz")
                    .with_uri("https://login.xyz"),
                ConfigError::NoChainIds,
            ),
            (builder().with_domain("#bad"), ConfigError::InvalidDomain),
            (builder().with_scheme("1http"), ConfigError::InvalidScheme),
            (builder().with_uri(":bad"), ConfigError::InvalidUri),
            (builder().with_nonce_ttl_secs(0), ConfigError::ZeroNonceTtl),
            (
                builder().with_max_issued_age_secs(0),
                ConfigError::ZeroMaxIssuedAge,
            ),
        ];
        for (candidate, expected) in cases {
            assert_eq!(candidate.build().err(), Some(expected));
        }
    }

    #[test]
    fn a_refused_sign_in_is_401_and_a_failed_nonce_store_503_in_the_area_a_envelope() {
        use crate::envelope::DataApiError;
        let refused = DataApiError::from(VerifyError::DomainMismatch);
        assert_eq!(refused.status(), 401);
        assert_eq!(
            refused.message(),
            "SIWE verification failed: the message's domain is not this server's"
        );
        let store = || NonceStoreError::Backend(crate::store::StoreError::new("down"));
        let unavailable = DataApiError::from(VerifyError::NonceStore(store()));
        assert_eq!(unavailable.status(), 503);
        assert_eq!(
            unavailable.message(),
            "the sign-in could not be checked; try again later"
        );
        let no_nonce = DataApiError::from(store());
        assert_eq!(
            (no_nonce.status().as_u16(), no_nonce.message()),
            (503, "nonce store unavailable")
        );
    }

    #[test]
    fn signature_hex_must_be_65_bytes() {
        assert!(decode_signature_hex(&format!("0x{}", "ab".repeat(65))).is_ok());
        assert!(decode_signature_hex(&"ab".repeat(65)).is_ok());
        for bad in [
            String::new(),
            "0x".to_owned(),
            "ab".repeat(64),
            format!("0x{}g", "a".repeat(129)),
        ] {
            assert!(matches!(
                decode_signature_hex(&bad),
                Err(VerifyError::MalformedSignature)
            ));
        }
    }

    #[test]
    fn errors_never_carry_the_signature() {
        let signature = format!("0x{}", "ab".repeat(65));
        for e in [
            VerifyError::MalformedSignature,
            VerifyError::SignatureMismatch,
        ] {
            assert!(!e.to_string().contains(&signature[2..12]));
            assert!(!format!("{e:?}").contains(&signature[2..12]));
        }
    }
}

//! The issuer's Ed25519 signing keys, rotated without invalidating tokens.
//!
//! The public half of every key lives in a [`KeySet`] shared with the
//! verifier (and published as the JWKS document). Rotation starts signing with
//! a new key at once and keeps the old public key until its last token has
//! expired; [`SigningKeys::prune`] then removes it.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::SigningKey;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::TokenError;
use crate::wallet_jwt::JwtError;
use crate::wallet_jwt::jwt;
use crate::wallet_jwt::{KeySet, VerificationKey};

/// The signing keys: one current, and the retired ones still published.
///
/// Clones share the keys, so a handle can rotate them while servers run.
#[derive(Clone)]
pub struct SigningKeys {
    state: Arc<RwLock<State>>,
    published: KeySet,
}

struct State {
    kid: String,
    /// The current key in `jsonwebtoken`'s form, which signs.
    encoding: jsonwebtoken::EncodingKey,
    /// Retired kids and when they may leave the key set (Unix seconds).
    retired: Vec<(String, u64)>,
}

/// The RFC 7638 thumbprint of an Ed25519 public key: its `kid`.
fn thumbprint(key: &ed25519_dalek::VerifyingKey) -> String {
    // Members in lexicographic order, no whitespace, as RFC 7638 requires.
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(key.as_bytes())
    );
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

fn random_key() -> Result<SigningKey, TokenError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|_| TokenError::Randomness)?;
    Ok(SigningKey::from_bytes(&seed))
}

impl SigningKeys {
    /// A fresh random key, published into `published`.
    ///
    /// # Errors
    /// [`TokenError::Randomness`] if the operating system has no randomness.
    pub fn generate(published: KeySet) -> Result<Self, TokenError> {
        Ok(Self::from_key(random_key()?, published))
    }

    /// A key from its 32-byte seed (for a key loaded from a file), published
    /// into `published`.
    pub fn from_seed(seed: &[u8; 32], published: KeySet) -> Self {
        Self::from_key(SigningKey::from_bytes(seed), published)
    }

    /// The key of a key file ([`SigningKeyFile`]), published into `published`.
    pub fn from_file(key: &SigningKeyFile, published: KeySet) -> Self {
        Self::from_key(key.0.clone(), published)
    }

    /// Keeps verifying tokens `previous` signed, and publishing it in the
    /// JWKS, without ever signing with it again: the key rotated out at the
    /// last restart. Drop it once the longest JWT it signed has expired.
    #[must_use]
    pub fn with_previous(self, previous: &SigningKeyFile) -> Self {
        let kid = publish(&self.published, &previous.0);
        let mut state = self.write();
        if kid != state.kid && !state.retired.iter().any(|(retired, _)| *retired == kid) {
            // Pruned never: it leaves when the configuration drops it.
            state.retired.push((kid, u64::MAX));
        }
        drop(state);
        self
    }

    fn from_key(key: SigningKey, published: KeySet) -> Self {
        let kid = publish(&published, &key);
        let encoding = jwt::eddsa_encoding_key(&key);
        Self {
            state: Arc::new(RwLock::new(State {
                kid,
                encoding,
                retired: Vec::new(),
            })),
            published,
        }
    }

    /// The current key's id.
    pub fn current_kid(&self) -> String {
        self.read().kid.clone()
    }

    /// The key set the verifier reads: current and retired-but-valid keys.
    pub fn published(&self) -> &KeySet {
        &self.published
    }

    /// The JWKS document for `/.well-known/jwks.json`.
    pub fn jwks(&self) -> serde_json::Value {
        self.published.to_jwks()
    }

    /// Signs with a new key from now on; the old public key stays published
    /// until `keep_until_unix_secs` (the expiry of the last token it signed).
    ///
    /// # Errors
    /// [`TokenError::Randomness`] if the operating system has no randomness.
    pub fn rotate(&self, keep_until_unix_secs: u64) -> Result<String, TokenError> {
        let key = random_key()?;
        let encoding = jwt::eddsa_encoding_key(&key);
        let kid = publish(&self.published, &key);
        let mut state = self.write();
        let old = std::mem::replace(&mut state.kid, kid.clone());
        state.encoding = encoding;
        state.retired.push((old, keep_until_unix_secs));
        Ok(kid)
    }

    /// Removes retired keys whose tokens have all expired at `now_unix_secs`.
    pub fn prune(&self, now_unix_secs: u64) {
        let mut state = self.write();
        let published = &self.published;
        state.retired.retain(|(kid, keep_until)| {
            let keep = now_unix_secs < *keep_until;
            if !keep {
                published.remove(kid);
            }
            keep
        });
    }

    /// Signs `claims` with the current key.
    pub(crate) fn sign(&self, claims: &impl Serialize) -> Result<String, JwtError> {
        let state = self.read();
        jwt::sign_with(&state.kid, claims, &state.encoding)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An Ed25519 signing key as a file holds it: its 32-byte seed, or a PKCS#8
/// PEM (`openssl genpkey -algorithm ed25519`). `Debug` shows nothing of it,
/// and the key is wiped when dropped.
pub struct SigningKeyFile(SigningKey);

impl SigningKeyFile {
    /// The key in `bytes`: exactly 32 bytes (a raw seed), or a PEM
    /// `PRIVATE KEY` block (PKCS#8, Ed25519).
    ///
    /// # Errors
    /// [`SigningKeyFileError`] for anything else.
    pub fn parse(bytes: &[u8]) -> Result<Self, SigningKeyFileError> {
        use ed25519_dalek::pkcs8::DecodePrivateKey as _;
        if let Ok(seed) = <&[u8; 32]>::try_from(bytes) {
            return Ok(Self(SigningKey::from_bytes(seed)));
        }
        let pem = std::str::from_utf8(bytes).map_err(|_| SigningKeyFileError)?;
        SigningKey::from_pkcs8_pem(pem.trim())
            .map(Self)
            .map_err(|_| SigningKeyFileError)
    }
}

impl fmt::Debug for SigningKeyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKeyFile(<redacted>)")
    }
}

/// A key file that is neither a 32-byte seed nor an Ed25519 PKCS#8 PEM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SigningKeyFileError;

impl fmt::Display for SigningKeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not an Ed25519 key: expected a 32-byte seed or a PKCS#8 PEM")
    }
}

impl std::error::Error for SigningKeyFileError {}

/// Adds `key`'s public half to `published` under its thumbprint; the kid.
fn publish(published: &KeySet, key: &SigningKey) -> String {
    let public = key.verifying_key();
    let kid = thumbprint(&public);
    // A thumbprint is never empty, the only reason insert can fail.
    let _ = published.insert(&kid, VerificationKey::ed25519(public));
    kid
}

impl fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.read();
        f.debug_struct("SigningKeys")
            .field("current_kid", &state.kid)
            .field("retired", &state.retired.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_8037_thumbprint_vector() {
        // RFC 8037, appendix A.3: the thumbprint of the example Ed25519 key.
        let x = URL_SAFE_NO_PAD
            .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
            .unwrap();
        let key = ed25519_dalek::VerifyingKey::from_bytes(&x.try_into().unwrap()).unwrap();
        assert_eq!(
            thumbprint(&key),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
    }

    #[test]
    fn rotation_keeps_the_old_key_until_pruned() {
        let keys = SigningKeys::generate(KeySet::new()).unwrap();
        let old = keys.current_kid();
        let new = keys.rotate(1_000).unwrap();
        assert_ne!(old, new);
        assert!(keys.published().contains(&old));
        assert!(keys.published().contains(&new));
        keys.prune(999);
        assert!(keys.published().contains(&old));
        keys.prune(1_000);
        assert!(!keys.published().contains(&old));
        assert_eq!(keys.jwks()["keys"].as_array().unwrap().len(), 1);
    }

    /// RFC 8410 section 10.3's example Ed25519 private key.
    /// RFC 8410 §10.3's example key (public).
    const RFC_8410_PEM: &str = include_str!("../../tests/fixtures/keys/rfc8410-ed25519.pem");

    #[test]
    fn a_key_file_is_a_raw_seed_or_a_pkcs8_pem_of_the_same_key() {
        let pem = SigningKeyFile::parse(RFC_8410_PEM.as_bytes()).unwrap();
        let seed = URL_SAFE_NO_PAD
            .decode("1O5y2_kTWErVttjx92n4rTr-fCjL8dT74Jeoj0R1WEI")
            .unwrap();
        let raw = SigningKeyFile::parse(&seed).unwrap();
        assert_eq!(pem.0.to_bytes(), raw.0.to_bytes());
        assert!(SigningKeyFile::parse(&[1u8; 31]).is_err());
        assert!(
            SigningKeyFile::parse(include_bytes!("../../tests/fixtures/keys/malformed.pem"))
                .is_err()
        );
        assert_eq!(format!("{pem:?}"), "SigningKeyFile(<redacted>)");
    }

    #[test]
    fn a_previous_key_stays_published_and_verifiable_but_never_signs() {
        let current = SigningKeyFile::parse(&[1u8; 32]).unwrap();
        let previous = SigningKeyFile::parse(&[2u8; 32]).unwrap();
        let old_kid = SigningKeys::from_file(&previous, KeySet::new()).current_kid();
        let keys = SigningKeys::from_file(&current, KeySet::new()).with_previous(&previous);
        assert_ne!(keys.current_kid(), old_kid);
        assert!(keys.published().contains(&old_kid));
        keys.prune(u64::MAX - 1);
        assert!(keys.published().contains(&old_kid), "never pruned by time");
        let signed = keys.sign(&serde_json::json!({"sub": "x"})).unwrap();
        assert!(!signed.is_empty());
        let header = jsonwebtoken::decode_header(&signed).unwrap();
        assert_eq!(header.kid.as_deref(), Some(keys.current_kid().as_str()));
        // The same key as current and previous is published once.
        let same = SigningKeys::from_file(&current, KeySet::new()).with_previous(&current);
        assert_eq!(same.jwks()["keys"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn debug_shows_no_key_material() {
        let keys = SigningKeys::from_seed(&[7u8; 32], KeySet::new());
        let shown = format!("{keys:?}");
        assert!(shown.contains(&keys.current_kid()));
        assert!(!shown.contains("0707"));
    }
}

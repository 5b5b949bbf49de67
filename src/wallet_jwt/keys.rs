//! Verification keys by `kid`: [`KeySet`], rotation and JWKS documents.
//!
//! Each [`VerificationKey`] holds its algorithm (fixed by the key type, never
//! by a token's header) and the `jsonwebtoken` decoding key that checks its
//! signatures; the typed public key is kept only to publish the JWKS.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::DecodingKey;
use serde::Deserialize;

use super::{Algorithm, ConfigError};

/// One verification key; its algorithm is fixed by its type, never by a
/// token's header (RFC 8725 §3.1).
#[derive(Clone)]
pub struct VerificationKey {
    material: Material,
    decoding: DecodingKey,
}

#[derive(Clone)]
enum Material {
    Ed25519(ed25519_dalek::VerifyingKey),
    Es256(p256::ecdsa::VerifyingKey),
    Rs256 { n: Arc<[u8]>, e: Arc<[u8]> },
    Hs256,
}

impl VerificationKey {
    /// Shortest accepted HS256 secret: the hash length (RFC 8725 §3.5).
    pub const MIN_HS256_SECRET_BYTES: usize = 32;
    /// Smallest accepted RSA modulus, in bits (RFC 7518 §3.3).
    pub const MIN_RSA_BITS: usize = 2048;
    /// Largest accepted RSA modulus, in bits (bounds the work per token).
    pub const MAX_RSA_BITS: usize = 8192;

    /// An Ed25519 public key (`EdDSA`).
    pub fn ed25519(key: ed25519_dalek::VerifyingKey) -> Self {
        Self {
            decoding: DecodingKey::from_ed_der(key.as_bytes()),
            material: Material::Ed25519(key),
        }
    }

    /// An Ed25519 public key from its 32 bytes.
    ///
    /// # Errors
    /// [`ConfigError::InvalidKey`] if the bytes are not a curve point.
    pub fn ed25519_from_bytes(bytes: &[u8; 32]) -> Result<Self, ConfigError> {
        ed25519_dalek::VerifyingKey::from_bytes(bytes)
            .map(Self::ed25519)
            .map_err(|_| ConfigError::InvalidKey)
    }

    /// A P-256 public key (`ES256`).
    pub fn es256(key: p256::ecdsa::VerifyingKey) -> Self {
        let point = key.to_encoded_point(false);
        Self {
            decoding: DecodingKey::from_ec_der(point.as_bytes()),
            material: Material::Es256(key),
        }
    }

    /// An RSA public key (`RS256`) from its big-endian modulus and exponent.
    ///
    /// # Errors
    /// [`ConfigError::InvalidKey`] for a modulus outside
    /// [`Self::MIN_RSA_BITS`]..=[`Self::MAX_RSA_BITS`] or an even or tiny exponent.
    pub fn rs256_from_components(modulus: &[u8], exponent: &[u8]) -> Result<Self, ConfigError> {
        let modulus = strip_leading_zeros(modulus);
        let exponent = strip_leading_zeros(exponent);
        let bits = modulus.len() * 8 - modulus.first().map_or(8, |b| b.leading_zeros() as usize);
        let exponent_ok = matches!(exponent, [.., last] if last & 1 == 1)
            && exponent.len() <= 8
            && exponent != [1];
        if !(Self::MIN_RSA_BITS..=Self::MAX_RSA_BITS).contains(&bits) || !exponent_ok {
            return Err(ConfigError::InvalidKey);
        }
        Ok(Self {
            decoding: DecodingKey::from_rsa_raw_components(modulus, exponent),
            material: Material::Rs256 {
                n: modulus.into(),
                e: exponent.into(),
            },
        })
    }

    /// An HS256 shared secret. Tokens with it verify only when the verifier
    /// allows HS256 explicitly.
    ///
    /// # Errors
    /// [`ConfigError::WeakSecret`] below [`Self::MIN_HS256_SECRET_BYTES`].
    pub fn hs256(secret: &[u8]) -> Result<Self, ConfigError> {
        if secret.len() < Self::MIN_HS256_SECRET_BYTES {
            return Err(ConfigError::WeakSecret);
        }
        Ok(Self {
            decoding: DecodingKey::from_secret(secret),
            material: Material::Hs256,
        })
    }

    /// The one algorithm this key verifies.
    pub fn algorithm(&self) -> Algorithm {
        match self.material {
            Material::Ed25519(_) => Algorithm::EdDsa,
            Material::Es256(_) => Algorithm::Es256,
            Material::Rs256 { .. } => Algorithm::Rs256,
            Material::Hs256 => Algorithm::Hs256,
        }
    }

    /// What `jsonwebtoken` checks signatures with.
    pub(crate) fn decoding_key(&self) -> &DecodingKey {
        &self.decoding
    }

    /// The public JWK of this key, or `None` for a shared secret.
    fn to_public_jwk(&self, kid: &str) -> Option<serde_json::Value> {
        match &self.material {
            Material::Ed25519(key) => Some(serde_json::json!({
                "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(key.as_bytes()),
            })),
            Material::Es256(key) => {
                let point = key.to_encoded_point(false);
                let (x, y) = (point.x()?, point.y()?);
                Some(serde_json::json!({
                    "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                    "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
                }))
            }
            Material::Rs256 { n, e } => Some(serde_json::json!({
                "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": URL_SAFE_NO_PAD.encode(n), "e": URL_SAFE_NO_PAD.encode(e),
            })),
            Material::Hs256 => None,
        }
    }
}

fn strip_leading_zeros(bytes: &[u8]) -> &[u8] {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    &bytes[first..]
}

impl fmt::Debug for VerificationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Public keys are not secret, but one Debug for all keeps HS256
        // secrets out without a special case.
        f.debug_struct("VerificationKey")
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

/// The verification keys by `kid`; several at once, so keys rotate without
/// downtime: add the new key, start signing with it, remove the old one when
/// its last token has expired.
///
/// Clones share the same keys, so a handle kept after building the layer can
/// rotate them at run time.
///
/// ```
/// use walletgate::wallet_jwt::KeySet;
///
/// let keys = KeySet::from_jwks(r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"2026-11",
///   "x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#)?;
/// assert!(keys.contains("2026-11"));
/// assert_eq!(keys.to_jwks()["keys"][0]["kid"], "2026-11");
/// # Ok::<(), walletgate::wallet_jwt::ConfigError>(())
/// ```
#[derive(Clone, Default)]
pub struct KeySet {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    keys: RwLock<HashMap<String, Arc<VerificationKey>>>,
    /// Bumped whenever a key leaves or is replaced, so what was verified with
    /// it (the verified-token cache) is not trusted any more.
    generation: AtomicU64,
}

impl KeySet {
    /// No keys: every token is refused until one is added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the key `kid`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidKid`] for an empty `kid`.
    pub fn insert(&self, kid: &str, key: VerificationKey) -> Result<(), ConfigError> {
        if kid.is_empty() {
            return Err(ConfigError::InvalidKid);
        }
        if self.write().insert(kid.to_owned(), Arc::new(key)).is_some() {
            self.bump();
        }
        Ok(())
    }

    /// Removes the key `kid`; tokens signed with it fail from then on (also
    /// those already in a verifier's verified-token cache).
    pub fn remove(&self, kid: &str) -> bool {
        let removed = self.write().remove(kid).is_some();
        if removed {
            self.bump();
        }
        removed
    }

    /// Whether a key `kid` is present.
    pub fn contains(&self, kid: &str) -> bool {
        self.read().contains_key(kid)
    }

    /// How many keys are present.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no key is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key `kid`.
    pub(crate) fn get(&self, kid: &str) -> Option<Arc<VerificationKey>> {
        self.read().get(kid).cloned()
    }

    /// Changes whenever a key is removed or replaced.
    pub(crate) fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    fn bump(&self) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// A key set holding the keys of a JWKS document (RFC 7517).
    ///
    /// # Errors
    /// See [`KeySet::load_jwks`].
    pub fn from_jwks(document: &str) -> Result<Self, ConfigError> {
        let keys = Self::new();
        keys.load_jwks(document)?;
        Ok(keys)
    }

    /// Adds every key of a JWKS document, replacing keys with the same `kid`.
    /// Nothing is added unless the whole document is valid.
    ///
    /// Accepted: `OKP`/`Ed25519`, `EC`/`P-256` and `RSA` (2048 to 8192 bits)
    /// public keys with a `kid`; `use`, if present, must be `sig`, and `alg`,
    /// if present, must match the key type. Shared secrets (`oct`) are never
    /// taken from a document: add them with [`VerificationKey::hs256`].
    ///
    /// # Errors
    /// [`ConfigError::InvalidJwks`] naming the first bad key.
    pub fn load_jwks(&self, document: &str) -> Result<(), ConfigError> {
        let loaded = parse_jwks(document, false)?;
        let mut keys = self.write();
        let replaced = loaded.iter().any(|(kid, _)| keys.contains_key(kid));
        keys.extend(loaded);
        drop(keys);
        if replaced {
            self.bump();
        }
        Ok(())
    }

    /// Replaces every key with those of an issuer's JWKS document, skipping
    /// keys walletgate does not verify with (`use: enc`, other curves);
    /// returns how many were loaded. A document that is not JWKS, or one
    /// with a supported key that is invalid, changes nothing.
    ///
    /// # Errors
    /// [`ConfigError::InvalidJwks`].
    pub fn replace_from_jwks(&self, document: &str) -> Result<usize, ConfigError> {
        let loaded: HashMap<String, Arc<VerificationKey>> =
            parse_jwks(document, true)?.into_iter().collect();
        let count = loaded.len();
        *self.write() = loaded;
        self.bump();
        Ok(count)
    }

    /// The public keys as a JWKS document, for `/.well-known/jwks.json`.
    /// Shared secrets are left out.
    pub fn to_jwks(&self) -> serde_json::Value {
        let keys = self.read();
        let mut kids: Vec<&String> = keys.keys().collect();
        kids.sort();
        let jwks: Vec<serde_json::Value> = kids
            .into_iter()
            .filter_map(|kid| keys.get(kid)?.to_public_jwk(kid))
            .collect();
        serde_json::json!({ "keys": jwks })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<VerificationKey>>> {
        self.inner
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<VerificationKey>>> {
        self.inner
            .keys
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The keys of a JWKS document; with `skip_unsupported`, keys of a type or
/// use walletgate does not verify with are left out instead of refused.
fn parse_jwks(
    document: &str,
    skip_unsupported: bool,
) -> Result<Vec<(String, Arc<VerificationKey>)>, ConfigError> {
    let parsed: JwkSet = serde_json::from_str(document)
        .map_err(|_| ConfigError::InvalidJwks("not a JWKS document".into()))?;
    let mut loaded = Vec::with_capacity(parsed.keys.len());
    for jwk in parsed.keys {
        let kid = jwk.kid.clone().unwrap_or_default();
        let key = match jwk.into_key() {
            Ok(key) => key,
            Err(JwkRefusal::Unsupported(_)) if skip_unsupported => continue,
            Err(JwkRefusal::Unsupported(reason) | JwkRefusal::Invalid(reason)) => {
                return Err(ConfigError::InvalidJwks(format!("key {kid:?}: {reason}")));
            }
        };
        if kid.is_empty() {
            return Err(ConfigError::InvalidJwks("a key has no kid".into()));
        }
        loaded.push((kid, Arc::new(key)));
    }
    Ok(loaded)
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.read();
        let mut kids: Vec<&String> = keys.keys().collect();
        kids.sort();
        f.debug_struct("KeySet").field("kids", &kids).finish()
    }
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    alg: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

enum JwkRefusal {
    /// A key walletgate does not verify with (skipped in an issuer's set).
    Unsupported(&'static str),
    /// A key of a supported type that is broken.
    Invalid(&'static str),
}

impl Jwk {
    fn into_key(self) -> Result<VerificationKey, JwkRefusal> {
        use JwkRefusal::{Invalid, Unsupported};
        if self.use_.as_deref().is_some_and(|u| u != "sig") {
            return Err(Unsupported("use is not sig"));
        }
        let key = match (self.kty.as_str(), self.crv.as_deref()) {
            ("OKP", Some("Ed25519")) => {
                let x: [u8; 32] = coordinate(self.x.as_deref()).map_err(Invalid)?;
                VerificationKey::ed25519_from_bytes(&x)
                    .map_err(|_| Invalid("x is not an Ed25519 key"))?
            }
            ("EC", Some("P-256")) => {
                let x: [u8; 32] = coordinate(self.x.as_deref()).map_err(Invalid)?;
                let y: [u8; 32] = coordinate(self.y.as_deref()).map_err(Invalid)?;
                let point =
                    p256::EncodedPoint::from_affine_coordinates(&x.into(), &y.into(), false);
                let key = p256::ecdsa::VerifyingKey::from_encoded_point(&point)
                    .map_err(|_| Invalid("x, y is not a P-256 point"))?;
                VerificationKey::es256(key)
            }
            ("RSA", _) => {
                let n = base64url(self.n.as_deref()).map_err(Invalid)?;
                let e = base64url(self.e.as_deref()).map_err(Invalid)?;
                VerificationKey::rs256_from_components(&n, &e)
                    .map_err(|_| Invalid("n, e is not a 2048 to 8192 bit RSA key"))?
            }
            ("oct", _) => return Err(Unsupported("shared secrets are not loaded from JWKS")),
            _ => {
                return Err(Unsupported(
                    "unsupported kty/crv (EdDSA on Ed25519, ES256 on P-256, RS256 only)",
                ));
            }
        };
        match self.alg.as_deref() {
            Some(alg) if Algorithm::from_name(alg) != Some(key.algorithm()) => {
                // An RSA key marked for PS256/RS512 is a key we do not use.
                Err(Unsupported("alg does not match the key type"))
            }
            _ => Ok(key),
        }
    }
}

fn base64url(encoded: Option<&str>) -> Result<Vec<u8>, &'static str> {
    URL_SAFE_NO_PAD
        .decode(encoded.ok_or("missing key member")?)
        .map_err(|_| "key member is not base64url")
}

fn coordinate(encoded: Option<&str>) -> Result<[u8; 32], &'static str> {
    base64url(encoded)?
        .try_into()
        .map_err(|_| "coordinate is not 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ed25519_key(seed: u8) -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn jwks_round_trips_public_keys() {
        let keys = KeySet::new();
        keys.insert(
            "a",
            VerificationKey::ed25519(ed25519_key(1).verifying_key()),
        )
        .unwrap();
        let p256_key = p256::ecdsa::SigningKey::from_slice(&[3u8; 32]).unwrap();
        keys.insert("b", VerificationKey::es256(*p256_key.verifying_key()))
            .unwrap();
        keys.insert("c", VerificationKey::hs256(&[9u8; 32]).unwrap())
            .unwrap();
        let document = keys.to_jwks().to_string();
        let reloaded = KeySet::from_jwks(&document).unwrap();
        assert!(reloaded.contains("a") && reloaded.contains("b"));
        assert!(!reloaded.contains("c"), "secrets never leave in a JWKS");
        assert_eq!(reloaded.get("b").unwrap().algorithm(), Algorithm::Es256);
    }

    #[test]
    fn jwks_with_mismatched_alg_is_refused() {
        let document = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k","alg":"HS256",
            "x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
        assert!(matches!(
            KeySet::from_jwks(document),
            Err(ConfigError::InvalidJwks(_))
        ));
    }

    #[test]
    fn jwks_oct_keys_are_refused() {
        let document = r#"{"keys":[{"kty":"oct","kid":"k","k":"c2VjcmV0"}]}"#;
        assert!(matches!(
            KeySet::from_jwks(document),
            Err(ConfigError::InvalidJwks(_))
        ));
    }

    #[test]
    fn short_hs256_secret_is_refused() {
        assert!(matches!(
            VerificationKey::hs256(b"short"),
            Err(ConfigError::WeakSecret)
        ));
    }

    #[test]
    fn debug_never_shows_key_material() {
        let secret = [0x41u8; 32];
        let keys = KeySet::new();
        keys.insert("hs", VerificationKey::hs256(&secret).unwrap())
            .unwrap();
        let shown = format!("{keys:?} {:?}", keys.get("hs").unwrap());
        assert!(!shown.contains("AAAA") && !shown.contains("65"), "{shown}");
    }
}

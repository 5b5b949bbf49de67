//! Verification keys by `kid`: [`KeySet`], rotation and JWKS documents.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use p256::ecdsa::signature::Verifier as _;
use serde::Deserialize;
use sha2::Sha256;

use super::{Algorithm, ConfigError};

/// One verification key; its algorithm is fixed by its type, never by a
/// token's header (RFC 8725 §3.1).
#[derive(Clone)]
pub struct VerificationKey {
    material: Material,
}

#[derive(Clone)]
enum Material {
    Ed25519(ed25519_dalek::VerifyingKey),
    Es256(p256::ecdsa::VerifyingKey),
    Hs256(Arc<[u8]>),
}

impl VerificationKey {
    /// Shortest accepted HS256 secret: the hash length (RFC 8725 §3.5).
    pub const MIN_HS256_SECRET_BYTES: usize = 32;

    /// An Ed25519 public key (`EdDSA`).
    pub fn ed25519(key: ed25519_dalek::VerifyingKey) -> Self {
        Self {
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
        Self {
            material: Material::Es256(key),
        }
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
            material: Material::Hs256(secret.into()),
        })
    }

    /// The one algorithm this key verifies.
    pub fn algorithm(&self) -> Algorithm {
        match self.material {
            Material::Ed25519(_) => Algorithm::EdDsa,
            Material::Es256(_) => Algorithm::Es256,
            Material::Hs256(_) => Algorithm::Hs256,
        }
    }

    /// Whether `signature` signs `input` under this key.
    pub(crate) fn verifies(&self, input: &[u8], signature: &[u8]) -> bool {
        match &self.material {
            Material::Ed25519(key) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|sig| key.verify_strict(input, &sig).is_ok()),
            Material::Es256(key) => p256::ecdsa::Signature::from_slice(signature)
                .is_ok_and(|sig| key.verify(input, &sig).is_ok()),
            Material::Hs256(secret) => Hmac::<Sha256>::new_from_slice(secret)
                .is_ok_and(|mac| mac.chain_update(input).verify_slice(signature).is_ok()),
        }
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
            Material::Hs256(_) => None,
        }
    }
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
    keys: Arc<RwLock<HashMap<String, Arc<VerificationKey>>>>,
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
        self.write().insert(kid.to_owned(), Arc::new(key));
        Ok(())
    }

    /// Removes the key `kid`; tokens signed with it fail from then on.
    pub fn remove(&self, kid: &str) -> bool {
        self.write().remove(kid).is_some()
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
    /// Accepted: `OKP`/`Ed25519` and `EC`/`P-256` public keys with a `kid`;
    /// `use`, if present, must be `sig`, and `alg`, if present, must match the
    /// key type. Shared secrets (`oct`) are never taken from a document: add
    /// them with [`VerificationKey::hs256`].
    ///
    /// # Errors
    /// [`ConfigError::InvalidJwks`] naming the first bad key.
    pub fn load_jwks(&self, document: &str) -> Result<(), ConfigError> {
        let parsed: JwkSet = serde_json::from_str(document)
            .map_err(|_| ConfigError::InvalidJwks("not a JWKS document".into()))?;
        let mut loaded = Vec::with_capacity(parsed.keys.len());
        for jwk in parsed.keys {
            let kid = jwk.kid.clone().unwrap_or_default();
            let key = jwk
                .into_key()
                .map_err(|reason| ConfigError::InvalidJwks(format!("key {kid:?}: {reason}")))?;
            if kid.is_empty() {
                return Err(ConfigError::InvalidJwks("a key has no kid".into()));
            }
            loaded.push((kid, Arc::new(key)));
        }
        self.write().extend(loaded);
        Ok(())
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
        self.keys.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<VerificationKey>>> {
        self.keys.write().unwrap_or_else(PoisonError::into_inner)
    }
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
}

impl Jwk {
    fn into_key(self) -> Result<VerificationKey, &'static str> {
        if self.use_.as_deref().is_some_and(|u| u != "sig") {
            return Err("use is not sig");
        }
        let key = match (self.kty.as_str(), self.crv.as_deref()) {
            ("OKP", Some("Ed25519")) => {
                let x: [u8; 32] = coordinate(self.x.as_deref())?;
                VerificationKey::ed25519_from_bytes(&x).map_err(|_| "x is not an Ed25519 key")?
            }
            ("EC", Some("P-256")) => {
                let x: [u8; 32] = coordinate(self.x.as_deref())?;
                let y: [u8; 32] = coordinate(self.y.as_deref())?;
                let point =
                    p256::EncodedPoint::from_affine_coordinates(&x.into(), &y.into(), false);
                let key = p256::ecdsa::VerifyingKey::from_encoded_point(&point)
                    .map_err(|_| "x, y is not a P-256 point")?;
                VerificationKey::es256(key)
            }
            ("oct", _) => return Err("shared secrets are not loaded from JWKS"),
            _ => return Err("unsupported kty/crv (EdDSA on Ed25519 and ES256 on P-256 only)"),
        };
        if let Some(alg) = self.alg.as_deref()
            && Algorithm::from_name(alg) != Some(key.algorithm())
        {
            return Err("alg does not match the key type");
        }
        Ok(key)
    }
}

fn coordinate(encoded: Option<&str>) -> Result<[u8; 32], &'static str> {
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded.ok_or("missing coordinate")?)
        .map_err(|_| "coordinate is not base64url")?;
    bytes.try_into().map_err(|_| "coordinate is not 32 bytes")
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

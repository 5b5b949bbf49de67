//! [`CdpAuth`]: the hosted CDP facilitator's authentication (feature `cdp`),
//! a [`FacilitatorAuth`] for [`HttpFacilitator`](super::HttpFacilitator).
//!
//! A hosted facilitator refuses a static token: CDP wants, on every call, a
//! fresh JWT (two minutes) bound to the call's method, host and path and
//! signed with the API key (ES256 from a PEM EC key, or EdDSA from a base64
//! Ed25519 key), with a random `nonce` in its header. The key never appears
//! in `Debug`, errors or logs.
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::x402::facilitator::{CdpAuth, HttpFacilitator};
//!
//! // An Ed25519 key as CDP issues it: base64 of seed and public key (64 bytes).
//! let key = r#"{"id": "organizations/org/apiKeys/key", "privateKey": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA7aie8zrakLWKjqNAqbw1zZTIVdx3iQ6Y6wEihi1naKQ=="}"#;
//! let auth = CdpAuth::from_json(key)?;
//! let facilitator = HttpFacilitator::new("http://127.0.0.1:4020/platform/v2/x402")?
//!     .with_auth(Arc::new(auth));
//! # let _ = facilitator;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::{HeaderValue, Method, Uri};
use serde::Deserialize;
use serde_json::json;

use super::auth::{AuthError, FacilitatorAuth};
use crate::x402::ConfigError;

/// Lifetime of one CDP JWT, as the official SDK mints it.
const CDP_JWT_LIFETIME_SECS: u64 = 120;

/// The hosted CDP facilitator's authentication: a fresh JWT per call.
pub struct CdpAuth {
    key_id: String,
    key: CdpKey,
}

enum CdpKey {
    Es256(p256::ecdsa::SigningKey),
    EdDsa(ed25519_dalek::SigningKey),
}

/// The API key file CDP lets one download (`cdp_api_key.json`).
#[derive(Deserialize)]
struct KeyFile {
    #[serde(alias = "name")]
    id: String,
    #[serde(rename = "privateKey")]
    private_key: String,
}

impl CdpAuth {
    /// The key `key_id` with its secret: a PEM (PKCS #8 or SEC1) EC P-256 key,
    /// or a base64 Ed25519 key (32-byte seed and 32-byte public key).
    pub fn new(key_id: &str, secret: &str) -> Result<Self, ConfigError> {
        let invalid =
            |why: &str| ConfigError::InvalidCredential(format!("CDP key {key_id}: {why}"));
        if key_id.is_empty() {
            return Err(invalid("the key id is empty"));
        }
        let key = if secret.trim_start().starts_with("-----BEGIN") {
            use p256::pkcs8::DecodePrivateKey as _;
            let pem = secret.replace("\\n", "\n");
            p256::ecdsa::SigningKey::from_pkcs8_pem(&pem)
                .or_else(|_| p256::SecretKey::from_sec1_pem(&pem).map(Into::into))
                .map(CdpKey::Es256)
                .map_err(|_| invalid("not a P-256 private key in PEM"))?
        } else {
            let bytes = STANDARD
                .decode(secret.trim())
                .map_err(|_| invalid("neither PEM nor base64"))?;
            let (seed, public) = match bytes.len() {
                64 => bytes.split_at(32),
                _ => return Err(invalid("an Ed25519 key is 64 bytes (seed and public key)")),
            };
            let seed: [u8; 32] = seed.try_into().expect("32 bytes");
            let key = ed25519_dalek::SigningKey::from_bytes(&seed);
            if key.verifying_key().as_bytes() != public {
                return Err(invalid("the Ed25519 public half does not match its seed"));
            }
            CdpKey::EdDsa(key)
        };
        Ok(Self {
            key_id: key_id.to_owned(),
            key,
        })
    }

    /// The key from CDP's JSON key file (`{"id", "privateKey"}`; older files
    /// name the id `name`).
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        let file: KeyFile = serde_json::from_str(json).map_err(|_| {
            ConfigError::InvalidCredential("CDP key file: expected {\"id\", \"privateKey\"}".into())
        })?;
        Self::new(&file.id, &file.private_key)
    }

    /// The JWT for a `method` call to `host` + `path` at `now_unix_secs`,
    /// with `nonce` in its header (the SDK's: 16 random bytes in hex).
    fn jwt(
        &self,
        method: &Method,
        host: &str,
        path: &str,
        now_unix_secs: u64,
        nonce: &str,
    ) -> String {
        let alg = match self.key {
            CdpKey::Es256(_) => "ES256",
            CdpKey::EdDsa(_) => "EdDSA",
        };
        let header = json!({"alg": alg, "kid": self.key_id, "typ": "JWT", "nonce": nonce});
        let claims = json!({
            "sub": self.key_id,
            "iss": "cdp",
            "uris": [format!("{method} {host}{path}")],
            "iat": now_unix_secs,
            "nbf": now_unix_secs,
            "exp": now_unix_secs + CDP_JWT_LIFETIME_SECS,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = match &self.key {
            CdpKey::Es256(key) => {
                use p256::ecdsa::signature::Signer as _;
                let signature: p256::ecdsa::Signature = key.sign(signing_input.as_bytes());
                signature.to_bytes().to_vec()
            }
            CdpKey::EdDsa(key) => {
                use ed25519_dalek::Signer as _;
                key.sign(signing_input.as_bytes()).to_bytes().to_vec()
            }
        };
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }
}

impl FacilitatorAuth for CdpAuth {
    fn authorization(&self, method: &Method, url: &Uri) -> Result<HeaderValue, AuthError> {
        let host = url
            .authority()
            .map(|authority| authority.as_str())
            .ok_or(AuthError::new("the facilitator URL has no host"))?;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|_| AuthError::new("the operating system gave no randomness"))?;
        let nonce: String = nonce.iter().map(|byte| format!("{byte:02x}")).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| AuthError::new("the clock is before 1970"))?
            .as_secs();
        let jwt = self.jwt(method, host, url.path(), now, &nonce);
        let mut value = HeaderValue::try_from(format!("Bearer {jwt}"))
            .map_err(|_| AuthError::new("the JWT is not a header value"))?;
        value.set_sensitive(true);
        Ok(value)
    }
}

impl fmt::Debug for CdpAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alg = match self.key {
            CdpKey::Es256(_) => "ES256",
            CdpKey::EdDsa(_) => "EdDSA",
        };
        f.debug_struct("CdpAuth")
            .field("key_id", &self.key_id)
            .field("alg", &alg)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::Value;

    use super::*;

    /// An Ed25519 key in CDP's format: base64 of seed and public key.
    fn ed25519_secret(seed: u8) -> String {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        let mut bytes = key.to_bytes().to_vec();
        bytes.extend_from_slice(key.verifying_key().as_bytes());
        STANDARD.encode(bytes)
    }

    /// A P-256 key in CDP's format: PKCS #8 PEM.
    fn es256_secret(seed: u8) -> String {
        use p256::pkcs8::{EncodePrivateKey as _, LineEnding};
        let key = p256::SecretKey::from_slice(&[seed; 32]).unwrap();
        key.to_pkcs8_pem(LineEnding::LF).unwrap().to_string()
    }

    fn parts(jwt: &str) -> (Value, Value, Vec<u8>, String) {
        let mut pieces = jwt.split('.');
        let (header, claims, signature) = (
            pieces.next().unwrap(),
            pieces.next().unwrap(),
            pieces.next().unwrap(),
        );
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).unwrap();
        (
            serde_json::from_slice(&decode(header)).unwrap(),
            serde_json::from_slice(&decode(claims)).unwrap(),
            decode(signature),
            format!("{header}.{claims}"),
        )
    }

    #[test]
    fn an_eddsa_jwt_is_bound_to_the_call_and_verifies() {
        let auth = CdpAuth::new("organizations/o/apiKeys/k", &ed25519_secret(3)).unwrap();
        let jwt = auth.jwt(
            &Method::POST,
            "api.cdp.coinbase.com",
            "/platform/v2/x402/settle",
            1_800_000_000,
            "00112233445566778899aabbccddeeff",
        );
        let (header, claims, signature, signed) = parts(&jwt);
        assert_eq!(
            header,
            json!({"alg": "EdDSA", "kid": "organizations/o/apiKeys/k", "typ": "JWT",
                   "nonce": "00112233445566778899aabbccddeeff"})
        );
        assert_eq!(
            claims,
            json!({"sub": "organizations/o/apiKeys/k", "iss": "cdp",
                   "uris": ["POST api.cdp.coinbase.com/platform/v2/x402/settle"],
                   "iat": 1_800_000_000u64, "nbf": 1_800_000_000u64, "exp": 1_800_000_120u64})
        );
        let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]).verifying_key();
        let signature = ed25519_dalek::Signature::from_slice(&signature).unwrap();
        key.verify_strict(signed.as_bytes(), &signature).unwrap();
    }

    #[test]
    fn an_es256_jwt_verifies_with_the_public_key() {
        let auth = CdpAuth::new("kid-1", &es256_secret(5)).unwrap();
        let jwt = auth.jwt(&Method::GET, "h.example", "/supported", 1, "n");
        let (header, _, signature, signed) = parts(&jwt);
        assert_eq!(header["alg"], "ES256");
        use p256::ecdsa::signature::Verifier as _;
        let key = p256::ecdsa::SigningKey::from(p256::SecretKey::from_slice(&[5; 32]).unwrap());
        let signature = p256::ecdsa::Signature::from_slice(&signature).unwrap();
        key.verifying_key()
            .verify(signed.as_bytes(), &signature)
            .unwrap();
    }

    #[test]
    fn each_call_gets_a_fresh_sensitive_header_and_debug_hides_the_key() {
        let secret = ed25519_secret(9);
        let auth =
            CdpAuth::from_json(&format!(r#"{{"id": "k", "privateKey": "{secret}"}}"#)).unwrap();
        let uri: Uri = "https://api.cdp.coinbase.com/platform/v2/x402/verify"
            .parse()
            .unwrap();
        let first = auth.authorization(&Method::POST, &uri).unwrap();
        let second = auth.authorization(&Method::POST, &uri).unwrap();
        assert!(first.is_sensitive());
        assert_ne!(first, second, "a fresh nonce per call");
        let (_, claims, _, _) = parts(first.to_str().unwrap().trim_start_matches("Bearer "));
        assert_eq!(
            claims["uris"][0],
            "POST api.cdp.coinbase.com/platform/v2/x402/verify"
        );
        let shown = format!("{auth:?}");
        assert!(!shown.contains(&secret[..16]), "{shown}");
    }

    #[test]
    fn unusable_keys_are_refused_without_echoing_them() {
        for secret in ["not a key", "AAAA", &STANDARD.encode([1u8; 64])] {
            let error = CdpAuth::new("k", secret).unwrap_err().to_string();
            assert!(error.contains("CDP key k"), "{error}");
            assert!(!error.contains(secret), "{error}");
        }
        assert!(CdpAuth::from_json("{}").is_err());
    }
}

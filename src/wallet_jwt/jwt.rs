//! The wallet JWT format both sides share: the claims walletgate's issuer
//! signs, and the encoding of tokens.
//!
//! Signing and verification are `jsonwebtoken`'s: [`sign_eddsa`] is the one
//! the minting code uses. [`encode`] writes a compact JWS with any header and
//! any signing function; it exists to craft tokens a correct signer never
//! makes (a header naming another algorithm than its key's, an HMAC over a
//! public key) for tests and fuzzing, and never verifies anything.
//!
//! ```
//! use ed25519_dalek::SigningKey;
//! use walletgate::wallet_jwt::jwt::{self, AccessTokenClaims, Audience};
//!
//! // A throwaway key for the example; real keys come from a secret store.
//! let key = SigningKey::from_bytes(&[7u8; 32]);
//! let claims = AccessTokenClaims {
//!     iss: "https://auth.example".into(),
//!     aud: Audience::One("https://api.example".into()),
//!     sub: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
//!     wallet: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
//!     client_id: "pat_1".into(),
//!     scope: "read:favorites".into(),
//!     iat: 1_700_000_000,
//!     nbf: 1_700_000_000,
//!     exp: 1_700_000_600,
//!     jti: "jwt_1".into(),
//! };
//! let token = jwt::sign_eddsa("key-1", &claims, &key)?;
//! let header = jsonwebtoken::decode_header(&token)?;
//! assert_eq!(header.alg, jsonwebtoken::Algorithm::EdDSA);
//! assert_eq!(header.kid.as_deref(), Some("key-1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::JwtError;

/// The `typ` of every wallet JWT (RFC 9068).
pub const ACCESS_TOKEN_TYPE: &str = "at+jwt";

/// Longest token the verifier reads, in bytes; longer ones are malformed
/// (bounds the work an unauthenticated request can cause).
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// A JOSE header, as walletgate writes and reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The algorithm name (`EdDSA`, `ES256`, `HS256`).
    pub alg: String,
    /// The token type; `at+jwt` for wallet JWTs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
    /// The signing key's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    /// Critical extensions; walletgate understands none, so any is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crit: Option<serde_json::Value>,
}

impl Header {
    /// `{alg, typ: "at+jwt", kid}`.
    pub fn access_token(alg: &str, kid: &str) -> Self {
        Self {
            alg: alg.to_owned(),
            typ: Some(ACCESS_TOKEN_TYPE.to_owned()),
            kid: Some(kid.to_owned()),
            crit: None,
        }
    }
}

/// `aud`: one audience or several (RFC 7519 allows both).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// A single audience string.
    One(String),
    /// An array of audiences.
    Many(Vec<String>),
}

impl Audience {
    /// Whether `audience` is among them.
    pub fn contains(&self, audience: &str) -> bool {
        match self {
            Self::One(one) => one == audience,
            Self::Many(many) => many.iter().any(|a| a == audience),
        }
    }
}

/// The claims of a wallet JWT (RFC 9068 plus `wallet`), exactly as signed.
///
/// `sub` and `wallet` both carry the wallet address, checksummed.
/// `scope` is space-separated. Times are Unix seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessTokenClaims {
    /// Issuer.
    pub iss: String,
    /// Audience(s): the resource server.
    pub aud: Audience,
    /// Subject: the wallet address.
    pub sub: String,
    /// The wallet address again; the reference clients read this claim.
    pub wallet: String,
    /// The id of the PAT the token was exchanged for.
    pub client_id: String,
    /// Space-separated scopes.
    pub scope: String,
    /// Issued at.
    pub iat: u64,
    /// Not before.
    pub nbf: u64,
    /// Expires at.
    pub exp: u64,
    /// Token id.
    pub jti: String,
}

/// `base64url(header) "." base64url(claims)`: the bytes to sign.
///
/// # Errors
/// [`JwtError::InvalidClaims`] if `claims` does not serialise.
pub fn encode_segments(header: &Header, claims: &impl Serialize) -> Result<String, JwtError> {
    let header = serde_json::to_vec(header).map_err(|_| JwtError::InvalidClaims)?;
    let claims = serde_json::to_vec(claims).map_err(|_| JwtError::InvalidClaims)?;
    let mut out = URL_SAFE_NO_PAD.encode(header);
    out.push('.');
    URL_SAFE_NO_PAD.encode_string(claims, &mut out);
    Ok(out)
}

/// A complete token: the segments signed with `sign`.
///
/// # Errors
/// [`JwtError::InvalidClaims`] if `claims` does not serialise.
pub fn encode(
    header: &Header,
    claims: &impl Serialize,
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<String, JwtError> {
    let mut token = encode_segments(header, claims)?;
    let signature = sign(token.as_bytes());
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(signature, &mut token);
    Ok(token)
}

/// A wallet JWT signed with Ed25519 by `jsonwebtoken`: header
/// `{alg: "EdDSA", typ: "at+jwt", kid}`.
///
/// # Errors
/// [`JwtError::InvalidClaims`] if `claims` does not serialise.
pub fn sign_eddsa(
    kid: &str,
    claims: &impl Serialize,
    key: &ed25519_dalek::SigningKey,
) -> Result<String, JwtError> {
    sign_with(kid, claims, &eddsa_encoding_key(key))
}

/// `jsonwebtoken`'s form of an Ed25519 signing key: the PKCS #8 DER of its
/// seed (RFC 8410 §7: a fixed 16-byte prefix, then the 32 seed bytes).
pub(crate) fn eddsa_encoding_key(key: &ed25519_dalek::SigningKey) -> jsonwebtoken::EncodingKey {
    const PKCS8_ED25519_PREFIX: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    let mut der = zeroize::Zeroizing::new([0u8; 48]);
    der[..16].copy_from_slice(&PKCS8_ED25519_PREFIX);
    der[16..].copy_from_slice(key.as_bytes());
    jsonwebtoken::EncodingKey::from_ed_der(&*der)
}

/// Signs `claims` as a wallet JWT (`EdDSA`, `typ: at+jwt`, `kid`) with an
/// Ed25519 key in `jsonwebtoken`'s form.
pub(crate) fn sign_with(
    kid: &str,
    claims: &impl Serialize,
    key: &jsonwebtoken::EncodingKey,
) -> Result<String, JwtError> {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.typ = Some(ACCESS_TOKEN_TYPE.to_owned());
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, key).map_err(|_| JwtError::InvalidClaims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_writes_the_header_and_signature_it_is_given() {
        let header = Header::access_token("HS256", "k");
        let token = encode(&header, &serde_json::json!({"a": 1}), |_| vec![1, 2, 3]).unwrap();
        let decoded = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(decoded.alg, jsonwebtoken::Algorithm::HS256);
        assert_eq!(decoded.typ.as_deref(), Some(ACCESS_TOKEN_TYPE));
        assert!(token.ends_with(".AQID"), "signature bytes 1 2 3");
    }

    #[test]
    fn sign_eddsa_verifies_with_the_public_key() {
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let token = sign_eddsa("k", &serde_json::json!({"a": 1}), &key).unwrap();
        let (input, signature) = token.rsplit_once('.').unwrap();
        let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
        let signature = ed25519_dalek::Signature::from_slice(&signature).unwrap();
        assert!(
            key.verifying_key()
                .verify_strict(input.as_bytes(), &signature)
                .is_ok()
        );
    }
}

//! The compact JWS encoding both sides share: the verifier here and the
//! token-minting code (PAT exchange) that signs wallet JWTs.
//!
//! Only what walletgate's tokens need: three base64url (unpadded) segments,
//! a JSON header and JSON claims. [`encode`] builds a token from any signing
//! function; [`sign_eddsa`] is the one the minting code uses.
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
//! let decoded = jwt::decode(&token)?;
//! assert_eq!(decoded.header().alg, "EdDSA");
//! assert_eq!(decoded.header().kid.as_deref(), Some("key-1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::de::DeserializeOwned;
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

/// A token split and decoded, signature not yet checked.
pub struct Decoded<'a> {
    header: Header,
    signing_input: &'a str,
    payload: Vec<u8>,
    signature: Vec<u8>,
}

impl<'a> Decoded<'a> {
    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// `base64url(header) "." base64url(payload)`: the signed bytes.
    pub fn signing_input(&self) -> &'a str {
        self.signing_input
    }

    /// The signature bytes.
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    /// Parses the payload. Call only after the signature verified.
    ///
    /// # Errors
    /// [`JwtError::InvalidClaims`] when it is not the expected JSON.
    pub fn claims<C: DeserializeOwned>(&self) -> Result<C, JwtError> {
        serde_json::from_slice(&self.payload).map_err(|_| JwtError::InvalidClaims)
    }
}

impl fmt::Debug for Decoded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoded")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// Splits `token` into its three segments and decodes header, payload and
/// signature. Checks nothing but the encoding.
///
/// # Errors
/// [`JwtError::Malformed`] for anything but three strict base64url segments
/// with a JSON object header, within [`MAX_TOKEN_BYTES`].
pub fn decode(token: &str) -> Result<Decoded<'_>, JwtError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwtError::Malformed);
    }
    let (signing_input, signature) = token.rsplit_once('.').ok_or(JwtError::Malformed)?;
    let (header, payload) = signing_input.split_once('.').ok_or(JwtError::Malformed)?;
    if payload.contains('.') {
        return Err(JwtError::Malformed);
    }
    let header = base64url(header)?;
    let header: Header = serde_json::from_slice(&header).map_err(|_| JwtError::Malformed)?;
    Ok(Decoded {
        header,
        signing_input,
        payload: base64url(payload)?,
        signature: base64url(signature)?,
    })
}

fn base64url(segment: &str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| JwtError::Malformed)
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

/// A wallet JWT signed with Ed25519: header `{alg: "EdDSA", typ: "at+jwt", kid}`.
///
/// # Errors
/// [`JwtError::InvalidClaims`] if `claims` does not serialise.
pub fn sign_eddsa(
    kid: &str,
    claims: &impl Serialize,
    key: &ed25519_dalek::SigningKey,
) -> Result<String, JwtError> {
    use ed25519_dalek::Signer as _;
    encode(&Header::access_token("EdDSA", kid), claims, |input| {
        key.sign(input).to_bytes().to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_segments_are_malformed() {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"EdDSA"}"#);
        let token = format!("{header}.e30=.AA");
        assert!(matches!(decode(&token), Err(JwtError::Malformed)));
    }

    #[test]
    fn four_segments_are_malformed() {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"EdDSA"}"#);
        let token = format!("{header}.e30.e30.AA");
        assert!(matches!(decode(&token), Err(JwtError::Malformed)));
    }

    #[test]
    fn oversized_tokens_are_malformed() {
        let token = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert!(matches!(decode(&token), Err(JwtError::Malformed)));
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let header = Header::access_token("HS256", "k");
        let token = encode(&header, &serde_json::json!({"a": 1}), |_| vec![1, 2, 3]).unwrap();
        let decoded = decode(&token).unwrap();
        assert_eq!(decoded.header(), &header);
        assert_eq!(decoded.signature(), &[1, 2, 3]);
        let claims: serde_json::Value = decoded.claims().unwrap();
        assert_eq!(claims["a"], 1);
    }
}

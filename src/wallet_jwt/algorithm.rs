//! [`Algorithm`]: the signature algorithms walletgate verifies.

/// A signature algorithm walletgate verifies. `none` is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// `EdDSA` with Ed25519 (the default for minted tokens).
    EdDsa,
    /// `ES256`: ECDSA on P-256 with SHA-256.
    Es256,
    /// `RS256`: RSASSA-PKCS1-v1_5 with SHA-256 (external issuers' JWKS).
    Rs256,
    /// `HS256`: HMAC-SHA-256; only when the verifier allows it.
    Hs256,
}

impl Algorithm {
    /// The JOSE name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EdDsa => "EdDSA",
            Self::Es256 => "ES256",
            Self::Rs256 => "RS256",
            Self::Hs256 => "HS256",
        }
    }

    pub(super) fn jws(self) -> jsonwebtoken::Algorithm {
        match self {
            Self::EdDsa => jsonwebtoken::Algorithm::EdDSA,
            Self::Es256 => jsonwebtoken::Algorithm::ES256,
            Self::Rs256 => jsonwebtoken::Algorithm::RS256,
            Self::Hs256 => jsonwebtoken::Algorithm::HS256,
        }
    }

    pub(super) fn from_jws(alg: jsonwebtoken::Algorithm) -> Option<Self> {
        match alg {
            jsonwebtoken::Algorithm::EdDSA => Some(Self::EdDsa),
            jsonwebtoken::Algorithm::ES256 => Some(Self::Es256),
            jsonwebtoken::Algorithm::RS256 => Some(Self::Rs256),
            jsonwebtoken::Algorithm::HS256 => Some(Self::Hs256),
            _ => None,
        }
    }

    /// The algorithm named `name` in a header (exact, case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "EdDSA" => Some(Self::EdDsa),
            "ES256" => Some(Self::Es256),
            "RS256" => Some(Self::Rs256),
            "HS256" => Some(Self::Hs256),
            _ => None,
        }
    }
}

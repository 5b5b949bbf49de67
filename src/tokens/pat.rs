//! The PAT format: `wg_pat_<30 random base62><6-char base62 CRC32>`.
//!
//! The checksum lets a scanner recognise a leaked token offline, without a
//! database; the server stores only a SHA-256 digest of the whole token.

use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::random::{checksummed_secret, is_checksummed_secret};
use crate::wallet_jwt::PAT_PREFIX;

/// Random base62 characters after the prefix (about 178 bits).
const RANDOM_LEN: usize = 30;

/// A PAT's secret text, shown to its owner once and never stored.
///
/// `Debug` and `Display` print only the prefix.
#[derive(Clone, PartialEq, Eq)]
pub struct PatSecret(String);

impl PatSecret {
    /// A fresh random token.
    pub(crate) fn generate() -> Result<Self, getrandom::Error> {
        checksummed_secret(PAT_PREFIX, RANDOM_LEN).map(Self)
    }

    /// The token text, to hand to its owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The digest the store keeps.
    pub fn digest(&self) -> SecretDigest {
        SecretDigest::of(&self.0)
    }
}

impl fmt::Debug for PatSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PatSecret({PAT_PREFIX}…)")
    }
}

/// SHA-256 of a secret (a PAT or a session cookie): what a store keeps and
/// looks up by.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SecretDigest([u8; 32]);

impl SecretDigest {
    /// The digest of `secret`.
    pub fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    /// The digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A digest read back from a store that kept [`as_bytes`](Self::as_bytes).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for SecretDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretDigest(…)")
    }
}

/// Whether `text` is a well-formed PAT whose checksum holds.
///
/// Offline: it says "this is one of ours", not "this is valid".
pub fn is_well_formed(text: &str) -> bool {
    is_checksummed_secret(text, PAT_PREFIX, RANDOM_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_well_formed_and_distinct() {
        let first = PatSecret::generate().unwrap();
        let second = PatSecret::generate().unwrap();
        assert!(is_well_formed(first.expose()));
        assert!(first.expose().starts_with(PAT_PREFIX));
        assert_eq!(first.expose().len(), PAT_PREFIX.len() + 36);
        assert_ne!(first, second);
        assert_ne!(first.digest(), second.digest());
    }

    #[test]
    fn checksum_detects_every_single_character_change() {
        let token = PatSecret::generate().unwrap();
        let text = token.expose();
        for index in PAT_PREFIX.len()..text.len() {
            let original = text.as_bytes()[index];
            let replacement = if original == b'a' { b'b' } else { b'a' };
            let mut changed = text.as_bytes().to_vec();
            changed[index] = replacement;
            let changed = String::from_utf8(changed).unwrap();
            assert!(
                !is_well_formed(&changed),
                "change at {index} went unnoticed"
            );
        }
    }

    #[test]
    fn other_shapes_are_not_pats() {
        assert!(!is_well_formed(""));
        assert!(!is_well_formed("wg_pat_short"));
        assert!(!is_well_formed("eyJhbGciOiJFZERTQSJ9.e30.AA"));
        let token = PatSecret::generate().unwrap();
        assert!(!is_well_formed(&format!("{} ", token.expose())));
    }

    #[test]
    fn debug_hides_the_secret() {
        let token = PatSecret::generate().unwrap();
        let shown = format!("{token:?} {:?}", token.digest());
        assert!(!shown.contains(&token.expose()[PAT_PREFIX.len()..]));
    }
}

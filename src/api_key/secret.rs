//! The issued API-key format: `wg_key_<30 random base62><6-char base62 CRC32>`.
//!
//! The prefix and checksum let a secret scanner recognise a leaked key
//! offline, as PATs (`wg_pat_…`) do; stores keep only its [`KeyDigest`]. The
//! layer accepts any key its store knows, so keys made before this format
//! (or by hand) keep working.

use std::fmt;

use super::KeyDigest;
use crate::random::{checksummed_secret, is_checksummed_secret};

/// What every issued API key starts with.
pub const API_KEY_PREFIX: &str = "wg_key_";

/// Random base62 characters after the prefix (about 178 bits).
const RANDOM_LEN: usize = 30;

/// A freshly issued API key, shown to its owner once and never stored.
///
/// `Debug` prints only the prefix.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeySecret(String);

impl ApiKeySecret {
    /// A fresh random key.
    ///
    /// # Errors
    /// The operating system's random generator failed.
    pub fn generate() -> Result<Self, getrandom::Error> {
        checksummed_secret(API_KEY_PREFIX, RANDOM_LEN).map(Self)
    }

    /// The key text, to hand to its owner (the `X-API-KEY` value).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The digest a store keeps and looks up by.
    pub fn digest(&self) -> KeyDigest {
        KeyDigest::of(self.0.as_bytes())
    }

    /// Whether `text` is a well-formed issued key whose checksum holds.
    /// Offline: it says "this is one of ours", not "this is valid".
    pub fn is_well_formed(text: &str) -> bool {
        is_checksummed_secret(text, API_KEY_PREFIX, RANDOM_LEN)
    }
}

impl fmt::Debug for ApiKeySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKeySecret({API_KEY_PREFIX}…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_keys_are_prefixed_checksummed_distinct_and_never_debug_printed() {
        let first = ApiKeySecret::generate().unwrap();
        let second = ApiKeySecret::generate().unwrap();
        assert!(first.expose().starts_with(API_KEY_PREFIX));
        assert_eq!(first.expose().len(), API_KEY_PREFIX.len() + 36);
        assert!(ApiKeySecret::is_well_formed(first.expose()));
        assert!(!ApiKeySecret::is_well_formed("wg_key_short"));
        assert_ne!(first, second);
        assert_ne!(first.digest(), second.digest());
        assert_eq!(first.digest(), KeyDigest::of(first.expose().as_bytes()));
        let shown = format!("{first:?}");
        assert!(
            !shown.contains(&first.expose()[API_KEY_PREFIX.len()..]),
            "{shown}"
        );
    }
}

//! The verified-token cache: a repeated JWT skips the signature check.
//!
//! Keyed by the SHA-256 of the whole token (the token itself is not kept),
//! bounded (expired entries are swept when it is full, then an arbitrary
//! one makes room), each entry valid until the token's `exp` and only while
//! the key set that verified it has not lost or replaced a key. Only tokens
//! that passed every check get in, so an attacker cannot fill it with
//! forgeries. The caller still consults the revocation list on a hit.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use sha2::{Digest as _, Sha256};

use super::WalletClaims;

struct Entry {
    claims: WalletClaims,
    /// Which of the verifier's issuers verified it, and that key set's
    /// generation then.
    issuer: usize,
    generation: u64,
}

pub(super) struct VerifiedCache {
    capacity: usize,
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl VerifiedCache {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::with_capacity(capacity.min(4096))),
        }
    }

    /// The claims of `token` if it was verified, has not expired at `now`,
    /// and its issuer's key set is still at the generation that verified it
    /// (`generation_of(issuer)`).
    pub(super) fn get(
        &self,
        token: &str,
        now: u64,
        generation_of: impl Fn(usize) -> Option<u64>,
    ) -> Option<WalletClaims> {
        let key = digest(token);
        let mut entries = self.lock();
        let entry = entries.get(&key)?;
        if now < entry.claims.expires_at_unix_secs()
            && generation_of(entry.issuer) == Some(entry.generation)
        {
            return Some(entry.claims.clone());
        }
        entries.remove(&key);
        None
    }

    /// Remembers a verified token.
    pub(super) fn insert(
        &self,
        token: &str,
        claims: &WalletClaims,
        issuer: usize,
        generation: u64,
        now: u64,
    ) {
        if now >= claims.expires_at_unix_secs() {
            return;
        }
        let key = digest(token);
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, entry| now < entry.claims.expires_at_unix_secs());
            if entries.len() >= self.capacity
                && let Some(victim) = entries.keys().next().copied()
            {
                entries.remove(&victim);
            }
        }
        entries.insert(
            key,
            Entry {
                claims: claims.clone(),
                issuer,
                generation,
            },
        );
    }

    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for VerifiedCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wallet_jwt::Scope;

    fn claims(exp: u64) -> WalletClaims {
        let wallet = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
            .parse()
            .unwrap();
        WalletClaims::new(
            wallet,
            Scope::ReadFavorites.into(),
            "jti".into(),
            "pat".into(),
            0,
            exp,
        )
    }

    #[test]
    fn a_hit_lasts_until_exp_and_only_at_the_same_key_generation() {
        let cache = VerifiedCache::new(4);
        cache.insert("token", &claims(100), 0, 7, 10);
        assert_eq!(cache.get("token", 99, |_| Some(7)), Some(claims(100)));
        assert_eq!(cache.get("other", 99, |_| Some(7)), None);
        assert_eq!(cache.get("token", 99, |_| Some(8)), None, "a key left");
        cache.insert("token", &claims(100), 0, 7, 10);
        assert_eq!(cache.get("token", 100, |_| Some(7)), None, "expired");
        assert_eq!(cache.len(), 0, "misses drop the entry");
    }

    #[test]
    fn it_never_holds_more_than_its_capacity() {
        let cache = VerifiedCache::new(2);
        cache.insert("a", &claims(50), 0, 0, 10);
        cache.insert("b", &claims(100), 0, 0, 10);
        // Full: the expired entry makes room first.
        cache.insert("c", &claims(100), 0, 0, 60);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("b", 60, |_| Some(0)).is_some());
        // Full of live entries: one of them goes.
        cache.insert("d", &claims(100), 0, 0, 60);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("d", 60, |_| Some(0)).is_some());
    }
}

//! The verified-token cache: a repeated JWT skips the signature check.
//!
//! Keyed by the whole token: a hit is an exact match of every byte (the map
//! compares the token itself, so no two tokens can share an entry), and no
//! digest is computed per request (a SHA-256 of a ~640-byte token was most
//! of a hit's cost). Bounded: at most `capacity` entries (expired ones are
//! swept when it is full, then an arbitrary one makes room), of tokens no
//! longer than [`MAX_CACHED_TOKEN_LEN`] (a longer one is verified each time),
//! so it holds at most `capacity` x 4 KiB of tokens. Each entry is valid until
//! the token's `exp` and only while the key set that verified it has not lost
//! or replaced a key. Only tokens that passed every check get in, so an
//! attacker cannot fill it with forgeries, nor choose its keys: it hashes
//! with foldhash (seeded per process), not SipHash, a third of the cost on a
//! ~640-byte token, and only the token's last [`HASHED_TAIL_LEN`] bytes, the
//! end of its signature, which spread entries as well as the whole token and
//! hash at a sixth of its cost. The caller still consults the revocation list
//! on a hit.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, PoisonError};

use super::WalletClaims;

struct Entry {
    claims: WalletClaims,
    /// Which of the verifier's issuers verified it, and that key set's
    /// generation then.
    issuer: usize,
    generation: u64,
}

/// The longest token the cache keeps (bytes): the bound on its memory. Wallet
/// JWTs are well under it (~640 bytes for this crate's issuer).
pub(super) const MAX_CACHED_TOKEN_LEN: usize = 4096;

pub(super) struct VerifiedCache {
    capacity: usize,
    entries: Mutex<Entries>,
}

type Entries = HashMap<Box<str>, Entry, TailHash>;

/// How many of a token's last bytes its hash reads: the signature's end
/// (an Ed25519 signature is 86 base64url characters).
pub(super) const HASHED_TAIL_LEN: usize = 64;

/// foldhash (seeded per process) over the last [`HASHED_TAIL_LEN`] bytes of
/// what is hashed; the map still compares whole tokens.
#[derive(Clone, Default)]
struct TailHash(foldhash::fast::RandomState);

struct TailHasher(<foldhash::fast::RandomState as BuildHasher>::Hasher);

impl BuildHasher for TailHash {
    type Hasher = TailHasher;

    fn build_hasher(&self) -> TailHasher {
        TailHasher(self.0.build_hasher())
    }
}

impl Hasher for TailHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0
            .write(&bytes[bytes.len().saturating_sub(HASHED_TAIL_LEN)..]);
    }

    fn finish(&self) -> u64 {
        self.0.finish()
    }
}

impl VerifiedCache {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::with_capacity_and_hasher(
                capacity.min(4096),
                TailHash::default(),
            )),
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
        let mut entries = self.lock();
        let entry = entries.get(token)?;
        if now < entry.claims.expires_at_unix_secs()
            && generation_of(entry.issuer) == Some(entry.generation)
        {
            return Some(entry.claims.clone());
        }
        entries.remove(token);
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
        if now >= claims.expires_at_unix_secs() || token.len() > MAX_CACHED_TOKEN_LEN {
            return;
        }
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(token) {
            entries.retain(|_, entry| now < entry.claims.expires_at_unix_secs());
            if entries.len() >= self.capacity
                && let Some(victim) = entries.keys().next().cloned()
            {
                entries.remove(&victim);
            }
        }
        entries.insert(
            token.into(),
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
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

    #[test]
    fn only_the_exact_token_hits_and_a_longer_one_than_the_bound_is_not_kept() {
        let cache = VerifiedCache::new(4);
        cache.insert("header.payload.signature", &claims(100), 0, 0, 10);
        for near in [
            "header.payload.signaturE",
            "header.payload.signatur",
            " header.payload.signature",
        ] {
            assert_eq!(cache.get(near, 20, |_| Some(0)), None, "{near}");
        }
        assert!(
            cache
                .get("header.payload.signature", 20, |_| Some(0))
                .is_some()
        );
        // The same signature's end is the same bucket, never the same entry.
        let tail = "s".repeat(HASHED_TAIL_LEN);
        cache.insert(&format!("header.one.{tail}"), &claims(100), 0, 0, 10);
        assert_eq!(
            cache.get(&format!("header.two.{tail}"), 20, |_| Some(0)),
            None
        );
        assert!(
            cache
                .get(&format!("header.one.{tail}"), 20, |_| Some(0))
                .is_some()
        );
        let long = "x".repeat(MAX_CACHED_TOKEN_LEN + 1);
        cache.insert(&long, &claims(100), 0, 0, 10);
        assert_eq!(cache.get(&long, 20, |_| Some(0)), None);
        assert_eq!(cache.len(), 2);
    }
}

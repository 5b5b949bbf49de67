//! [`ExpiringMap`]: a map whose entries expire, without pauses; the replay
//! store's shards, the development ledger's used authorizations, the kept
//! answers and the entitlements keep their entries in it, each under the
//! [`LocalDigest`] of its key.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::LazyLock;

use siphasher::sip128::{Hasher128, SipHasher13};

/// A 128-bit stand-in for a key in this process's maps: SipHash-1-3-128
/// under a key drawn once per process (from std's OS-seeded `RandomState`).
///
/// Keyed and secret, so no client can choose inputs that collide, or that
/// crowd one bucket of the map (which therefore hashes a digest by reading
/// its first bytes); and about 16 times cheaper than a Keccak-256 of the same
/// key (~390 instructions against ~6,400), which a paid request would
/// otherwise run once per store it touches. Not stable across processes:
/// never stored or sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LocalDigest([u8; 16]);

/// The [`LocalDigest`] of `bytes`.
pub(crate) fn local_digest(bytes: &[u8]) -> LocalDigest {
    static KEY: LazyLock<(u64, u64)> = LazyLock::new(|| {
        let seed = std::hash::RandomState::new();
        (seed.hash_one(0_u8), seed.hash_one(1_u8))
    });
    let mut hasher = SipHasher13::new_with_keys(KEY.0, KEY.1);
    hasher.write(bytes);
    LocalDigest(hasher.finish128().as_bytes())
}

impl LocalDigest {
    pub(crate) fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl Hash for LocalDigest {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut first = [0_u8; 8];
        first.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(first));
    }
}

/// The map's hasher: a [`LocalDigest`]'s first bytes are already uniform.
#[derive(Default)]
struct FirstBytes(u64);

impl Hasher for FirstBytes {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is ever called (by `LocalDigest`); fold anything else.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Entries with an expiry second, and a time-ordered index of them.
///
/// Every operation of its owner calls [`sweep`](Self::sweep), which removes a
/// few expired entries, oldest first: memory follows the live set and no call
/// pays for the whole backlog. An entry counts as gone once its second is
/// reached (`expires_at <= now`), swept or not.
///
/// The index keeps one list of keys per expiry second, and each entry its
/// place in its list: an insert appends to a list the recent inserts share
/// (no walk down an ordered tree to a leaf no other request touched), and a
/// removal swaps the list's last key into the hole.
#[derive(Debug)]
pub(crate) struct ExpiringMap<V> {
    entries: HashMap<LocalDigest, Timed<V>, BuildHasherDefault<FirstBytes>>,
    /// Per expiry second, its entries' keys: each entry listed once, removed with it.
    due: BTreeMap<u64, Vec<LocalDigest>>,
}

#[derive(Debug)]
struct Timed<V> {
    expires_at_unix_secs: u64,
    /// Where its key is in `due[expires_at_unix_secs]`.
    place: usize,
    value: V,
}

impl<V> Default for ExpiringMap<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::default(),
            due: BTreeMap::new(),
        }
    }
}

impl<V> ExpiringMap<V> {
    /// The value of `key` if it has not expired at `now_unix_secs`.
    pub(crate) fn get(&self, key: &LocalDigest, now_unix_secs: u64) -> Option<&V> {
        self.entries
            .get(key)
            .filter(|timed| timed.expires_at_unix_secs > now_unix_secs)
            .map(|timed| &timed.value)
    }

    /// The value of `key`, expired or not (until swept).
    pub(crate) fn peek(&self, key: &LocalDigest) -> Option<&V> {
        self.entries.get(key).map(|timed| &timed.value)
    }

    /// Sets `key` to `value` until `expires_at_unix_secs`, replacing what it held.
    pub(crate) fn insert(&mut self, key: LocalDigest, value: V, expires_at_unix_secs: u64) {
        let listed = self.due.entry(expires_at_unix_secs).or_default();
        let place = listed.len();
        listed.push(key);
        let timed = Timed {
            expires_at_unix_secs,
            place,
            value,
        };
        if let Some(old) = self.entries.insert(key, timed) {
            self.unlist(old.expires_at_unix_secs, old.place);
        }
    }

    /// Removes `key`.
    pub(crate) fn remove(&mut self, key: &LocalDigest) -> Option<V> {
        let old = self.entries.remove(key)?;
        self.unlist(old.expires_at_unix_secs, old.place);
        Some(old.value)
    }

    /// Takes the key at `place` out of second `expires`'s list (its entry is
    /// gone or listed elsewhere now); the list's last key moves into its place.
    fn unlist(&mut self, expires: u64, place: usize) {
        let Some(listed) = self.due.get_mut(&expires) else {
            return;
        };
        listed.swap_remove(place);
        if let Some(moved) = listed.get(place)
            && let Some(timed) = self.entries.get_mut(moved)
            && timed.expires_at_unix_secs == expires
        {
            timed.place = place;
        }
        if listed.is_empty() {
            self.due.remove(&expires);
        }
    }

    /// Removes up to `step` entries expired at `now_unix_secs`, oldest first.
    pub(crate) fn sweep(&mut self, now_unix_secs: u64, step: usize) {
        self.sweep_each(now_unix_secs, step, drop);
    }

    /// [`sweep`](Self::sweep), handing each removed value to `removed`.
    pub(crate) fn sweep_each(
        &mut self,
        now_unix_secs: u64,
        step: usize,
        mut removed: impl FnMut(V),
    ) {
        for _ in 0..step {
            match self.pop_due(Some(now_unix_secs)) {
                Some((_, value)) => removed(value),
                None => return,
            }
        }
    }

    /// Removes the entry that expires first, whatever the time.
    pub(crate) fn pop_first(&mut self) -> Option<(LocalDigest, V)> {
        self.pop_due(None)
    }

    /// Removes an entry of the earliest second, if that second has come
    /// (`None`: whatever the time). Taken from its list's end: no key moves.
    fn pop_due(&mut self, now_unix_secs: Option<u64>) -> Option<(LocalDigest, V)> {
        let mut first = self.due.first_entry()?;
        if now_unix_secs.is_some_and(|now| *first.key() > now) {
            return None;
        }
        let key = first.get_mut().pop()?;
        if first.get().is_empty() {
            first.remove();
        }
        let timed = self.entries.remove(&key)?;
        Some((key, timed.value))
    }

    /// Entries held, expired ones not yet swept included.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every value, expired or not.
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values().map(|timed| &timed.value)
    }

    /// Keys listed in the expiry index (as many as entries).
    #[cfg(test)]
    pub(crate) fn indexed(&self) -> usize {
        self.due.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> LocalDigest {
        local_digest(&n.to_be_bytes())
    }

    #[test]
    fn local_digests_are_stable_in_a_process_and_tell_inputs_apart() {
        assert_eq!(
            local_digest(b"eip155:8453/0xab/0x01"),
            local_digest(b"eip155:8453/0xab/0x01")
        );
        assert_ne!(
            local_digest(b"eip155:8453/0xab/0x01"),
            local_digest(b"eip155:8453/0xab/0x02")
        );
        let digest = local_digest(b"");
        assert_ne!(
            digest.0[..16],
            digest.0[16..],
            "the two halves use different keys"
        );
    }

    #[test]
    fn entries_expire_at_their_second_and_are_swept_a_few_at_a_time() {
        let mut map = ExpiringMap::default();
        for n in 0..20_u32 {
            map.insert(key(n), n * 10, 100 + u64::from(n % 2));
        }
        assert_eq!(map.get(&key(4), 99), Some(&40));
        assert_eq!(map.get(&key(4), 100), None, "gone at its second");
        assert_eq!(map.get(&key(5), 100), Some(&50));
        map.sweep(100, 3);
        assert_eq!(map.len(), 17);
        map.sweep(100, 100);
        assert_eq!(map.len(), 10, "only the even keys had expired");
        map.sweep(101, 100);
        assert_eq!((map.len(), map.indexed()), (0, 0));
    }

    #[test]
    fn churn_keeps_every_entry_listed_once_under_its_second() {
        // Inserts, replacements (same and other seconds) and removals in a
        // fixed pseudo-random order, against a plain map as the model.
        let mut map = ExpiringMap::default();
        let mut model = std::collections::HashMap::new();
        let mut state = 0x2545_f491_u64;
        for _ in 0..5_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let n = (state >> 33) as u32 % 64;
            let expires = 100 + (state >> 20) % 4;
            if (state >> 10).is_multiple_of(4) {
                assert_eq!(map.remove(&key(n)), model.remove(&n).map(|(v, _)| v));
            } else {
                map.insert(key(n), n, expires);
                model.insert(n, (n, expires));
            }
            assert_eq!((map.len(), map.indexed()), (model.len(), model.len()));
        }
        for (n, (value, expires)) in &model {
            assert_eq!(map.get(&key(*n), expires - 1), Some(value));
            assert_eq!(map.get(&key(*n), *expires), None);
        }
        map.sweep(102, 1_000);
        let left = model.values().filter(|(_, expires)| *expires > 102).count();
        assert_eq!((map.len(), map.indexed()), (left, left));
        while map.pop_first().is_some() {}
        assert_eq!((map.len(), map.indexed()), (0, 0));
    }

    #[test]
    fn replacing_or_removing_an_entry_leaves_no_index_item_behind() {
        let mut map = ExpiringMap::default();
        map.insert(key(1), "claimed", 50);
        map.insert(key(1), "spent", 500);
        assert_eq!(map.indexed(), 1);
        // The first expiry passes: the replacement stays.
        map.sweep(60, 10);
        assert_eq!(map.get(&key(1), 60), Some(&"spent"));
        map.insert(key(2), "claimed", 50);
        assert_eq!(map.remove(&key(2)), Some("claimed"));
        assert_eq!((map.len(), map.indexed()), (1, 1));
        assert_eq!(map.peek(&key(1)), Some(&"spent"));
    }
}

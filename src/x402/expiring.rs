//! [`ExpiringMap`]: a map whose entries expire, without pauses; the replay
//! store's shards and the development ledger's used authorizations keep their
//! fixed-size keys in it.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

/// Entries with an expiry second, and a time-ordered index of them.
///
/// Every operation of its owner calls [`sweep`](Self::sweep), which removes a
/// few expired entries, oldest first: memory follows the live set and no call
/// pays for the whole backlog. An entry counts as gone once its second is
/// reached (`expires_at <= now`), swept or not.
#[derive(Debug)]
pub(crate) struct ExpiringMap<K, V> {
    entries: HashMap<K, Timed<V>>,
    /// One item per entry, `(its expiry, its key)`: removed with it.
    due: BTreeSet<(u64, K)>,
}

#[derive(Debug)]
struct Timed<V> {
    expires_at_unix_secs: u64,
    value: V,
}

impl<K, V> Default for ExpiringMap<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            due: BTreeSet::new(),
        }
    }
}

impl<K: Copy + Eq + Hash + Ord, V> ExpiringMap<K, V> {
    /// The value of `key` if it has not expired at `now_unix_secs`.
    pub(crate) fn get(&self, key: &K, now_unix_secs: u64) -> Option<&V> {
        self.entries
            .get(key)
            .filter(|timed| timed.expires_at_unix_secs > now_unix_secs)
            .map(|timed| &timed.value)
    }

    /// The value of `key`, expired or not (until swept).
    pub(crate) fn peek(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|timed| &timed.value)
    }

    /// Sets `key` to `value` until `expires_at_unix_secs`, replacing what it held.
    pub(crate) fn insert(&mut self, key: K, value: V, expires_at_unix_secs: u64) {
        let timed = Timed {
            expires_at_unix_secs,
            value,
        };
        if let Some(old) = self.entries.insert(key, timed) {
            self.due.remove(&(old.expires_at_unix_secs, key));
        }
        self.due.insert((expires_at_unix_secs, key));
    }

    /// Removes `key`.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let old = self.entries.remove(key)?;
        self.due.remove(&(old.expires_at_unix_secs, *key));
        Some(old.value)
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
            match self.due.first() {
                Some(&(expires, key)) if expires <= now_unix_secs => {
                    self.due.pop_first();
                    if let Some(timed) = self.entries.remove(&key) {
                        removed(timed.value);
                    }
                }
                _ => return,
            }
        }
    }

    /// Removes the entry that expires first, whatever the time.
    pub(crate) fn pop_first(&mut self) -> Option<(K, V)> {
        let (_, key) = self.due.pop_first()?;
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

    /// Items of the expiry index (as many as entries).
    #[cfg(test)]
    pub(crate) fn indexed(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_at_their_second_and_are_swept_a_few_at_a_time() {
        let mut map = ExpiringMap::default();
        for key in 0..20_u32 {
            map.insert(key, key * 10, 100 + u64::from(key % 2));
        }
        assert_eq!(map.get(&4, 99), Some(&40));
        assert_eq!(map.get(&4, 100), None, "gone at its second");
        assert_eq!(map.get(&5, 100), Some(&50));
        map.sweep(100, 3);
        assert_eq!(map.len(), 17);
        map.sweep(100, 100);
        assert_eq!(map.len(), 10, "only the even keys had expired");
        map.sweep(101, 100);
        assert_eq!((map.len(), map.indexed()), (0, 0));
    }

    #[test]
    fn replacing_or_removing_an_entry_leaves_no_index_item_behind() {
        let mut map = ExpiringMap::default();
        map.insert(1_u8, "claimed", 50);
        map.insert(1, "spent", 500);
        assert_eq!(map.indexed(), 1);
        // The first expiry passes: the replacement stays.
        map.sweep(60, 10);
        assert_eq!(map.get(&1, 60), Some(&"spent"));
        map.insert(2, "claimed", 50);
        assert_eq!(map.remove(&2), Some("claimed"));
        assert_eq!((map.len(), map.indexed()), (1, 1));
        assert_eq!(map.peek(&1), Some(&"spent"));
    }
}

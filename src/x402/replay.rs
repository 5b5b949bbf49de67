//! The replay guard: one authorization, one charge.
//!
//! Before verification the layer claims the authorization's key (network,
//! payer, nonce) in a [`NonceStore`]. While the claim is held, a duplicate is
//! refused (`PAYMENT_REPLAY`). If nothing is settled (verification failed, the
//! inner service answered 4xx/5xx, the request was dropped) the claim is
//! released, so the client may resend the same signed payment. Once settled
//! the key is kept as spent until the authorization expires; a later duplicate
//! is refused, or, on routes that opted into paid replay, let through with the
//! original receipt and not charged again.
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::x402::{AuthorizationKey, Claim, InMemoryNonceStore, NonceStore, Network};
//!
//! # tokio_test_block_on(async {
//! let clock = Arc::new(FakeClock::at_unix_secs(1000));
//! let store = InMemoryNonceStore::new(clock);
//! let key = AuthorizationKey::new(&Network::base_sepolia(), "0xAbC", "0x01");
//! assert!(matches!(store.claim(&key, 1600).await?, Claim::Claimed));
//! assert!(matches!(store.claim(&key, 1600).await?, Claim::InFlight));
//! store.release(&key).await;
//! assert!(matches!(store.claim(&key, 1600).await?, Claim::Claimed));
//! # Ok::<(), walletgate::store::StoreError>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use crate::store::StoreError;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use super::facilitator::BoxFuture;
use super::receipt::PaymentReceipt;
use super::types::Network;
use crate::clock::SharedClock;

/// Identifies one authorization: network, payer and nonce, lowercased.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AuthorizationKey(String);

impl AuthorizationKey {
    /// The key of `payer`'s authorization `nonce` on `network`.
    pub fn new(network: &Network, payer: &str, nonce: &str) -> Self {
        Self(format!("{network}/{payer}/{nonce}").to_ascii_lowercase())
    }

    /// The key as text (usable as a storage key).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A settled authorization: its receipt and a fingerprint of the signed
/// payload, so only the very same payment can replay it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpentAuthorization {
    /// The receipt of the settlement.
    pub receipt: PaymentReceipt,
    /// A hash of the signed payload.
    pub fingerprint: [u8; 32],
}

/// The result of a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The caller now holds the authorization.
    Claimed,
    /// Another request holds it.
    InFlight,
    /// It was settled already.
    Spent(SpentAuthorization),
}

/// Where claims and spent authorizations live.
///
/// `claim` must be atomic: of two concurrent claims of one key, one gets
/// [`Claim::Claimed`].
pub trait NonceStore: Send + Sync + 'static {
    /// Claims `key`, holding it at most until `hold_until_unix_secs`.
    fn claim<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Gives a claim back (nothing was settled).
    ///
    /// Must not block, and must not lose the release when its future is
    /// dropped unpolled: the payment flow awaits it where it can (a failed
    /// verification, a 4xx/5xx answer, a failed settlement), but a request
    /// whose client went away releases from `Drop` and cannot await. So a
    /// store starts the release when called (in memory: done at once; on a
    /// network: sent on the runtime in the background) and the returned
    /// future only waits for it. A release that still cannot be delivered
    /// (no runtime, backend down) leaves the claim to expire at its
    /// hold-until time, the safety net every networked store sets.
    fn release(&self, key: &AuthorizationKey) -> BoxFuture<'static, ()>;

    /// Announces, just before the facilitator settles the claimed `key`,
    /// the record [`mark_spent`](Self::mark_spent) will be given if the
    /// settlement succeeds (its receipt without the transaction yet). A store
    /// that shares a backend with the ledger may write the record in the
    /// settlement's own step and then skip the separate write; `mark_spent` is
    /// called either way. Default: nothing.
    fn settling(
        &self,
        _key: &AuthorizationKey,
        _unsettled: &SpentAuthorization,
        _keep_until_unix_secs: u64,
    ) {
    }

    /// Records `key` as settled until `keep_until_unix_secs`.
    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

#[derive(Debug)]
enum State {
    InFlight,
    Spent(SpentAuthorization),
}

#[derive(Debug)]
struct Entry {
    state: State,
    expires_at_unix_secs: u64,
    /// Its place in the shard's expiry index.
    seq: u64,
}

/// Expired entries removed per store operation at most: more than an
/// operation adds (one), so the backlog drains while no call pays for all of it.
const SWEEP_STEP: usize = 8;

/// Independent maps, each behind its own lock: contention and every map's
/// growth are a sixteenth of the whole.
const SHARDS: usize = 16;

/// An in-process [`NonceStore`] with expiry, without pauses: every operation
/// removes a few expired entries (oldest first, from a time-ordered index), so
/// memory follows the live set and no call sweeps the whole map.
pub struct InMemoryNonceStore {
    clock: SharedClock,
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<AuthorizationKey, Entry>,
    /// Each entry's key under (expiry, sequence number): one index item per
    /// entry, removed with it, so the index is as large as the map.
    expiries: BTreeMap<(u64, u64), AuthorizationKey>,
    next_seq: u64,
}

impl Shard {
    fn insert(&mut self, key: &AuthorizationKey, state: State, expires_at_unix_secs: u64) {
        self.remove(key);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.expiries
            .insert((expires_at_unix_secs, seq), key.clone());
        self.entries.insert(
            key.clone(),
            Entry {
                state,
                expires_at_unix_secs,
                seq,
            },
        );
    }

    fn remove(&mut self, key: &AuthorizationKey) {
        if let Some(old) = self.entries.remove(key) {
            self.expiries.remove(&(old.expires_at_unix_secs, old.seq));
        }
    }

    /// Removes up to [`SWEEP_STEP`] entries expired at `now`, oldest first.
    fn sweep(&mut self, now: u64) {
        for _ in 0..SWEEP_STEP {
            match self.expiries.first_entry() {
                Some(due) if due.key().0 <= now => {
                    let key = due.remove();
                    self.entries.remove(&key);
                }
                _ => return,
            }
        }
    }
}

impl InMemoryNonceStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Entries held, live or not yet swept.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entries
                    .len()
            })
            .sum()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shard of `key` (FNV-1a of its text: the same shard in every run).
    fn shard(&self, key: &AuthorizationKey) -> std::sync::MutexGuard<'_, Shard> {
        let hash = key
            .as_str()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            });
        // Every update keeps the shard consistent: a poisoned lock holds consistent data.
        self.shards[(hash % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn claim_now(&self, key: &AuthorizationKey, hold_until_unix_secs: u64) -> Claim {
        let now = self.clock.now_unix_secs();
        let mut shard = self.shard(key);
        shard.sweep(now);
        if let Some(entry) = shard.entries.get(key)
            && entry.expires_at_unix_secs > now
        {
            return match &entry.state {
                State::InFlight => Claim::InFlight,
                State::Spent(spent) => Claim::Spent(spent.clone()),
            };
        }
        shard.insert(key, State::InFlight, hold_until_unix_secs);
        Claim::Claimed
    }
}

impl fmt::Debug for InMemoryNonceStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryNonceStore")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl NonceStore for InMemoryNonceStore {
    fn claim<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(std::future::ready(Ok(
            self.claim_now(key, hold_until_unix_secs)
        )))
    }

    fn release(&self, key: &AuthorizationKey) -> BoxFuture<'static, ()> {
        let mut shard = self.shard(key);
        if matches!(
            shard.entries.get(key),
            Some(Entry {
                state: State::InFlight,
                ..
            })
        ) {
            shard.remove(key);
        }
        Box::pin(std::future::ready(()))
    }

    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let now = self.clock.now_unix_secs();
        let mut shard = self.shard(key);
        shard.sweep(now);
        shard.insert(key, State::Spent(spent), keep_until_unix_secs);
        drop(shard);
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::FakeClock;
    use crate::x402::types::AtomicAmount;

    fn spent() -> SpentAuthorization {
        let receipt = PaymentReceipt::new(
            "0xa".into(),
            AtomicAmount::new(1),
            Network::base_sepolia(),
            "id".into(),
        );
        SpentAuthorization {
            receipt: receipt.settled("0xtx".into()),
            fingerprint: [7; 32],
        }
    }

    #[tokio::test]
    async fn spent_keys_stay_spent_until_they_expire() {
        let clock = FakeClock::at_unix_secs(1000);
        let store = InMemoryNonceStore::new(Arc::new(clock.clone()));
        let key = AuthorizationKey::new(&Network::base_sepolia(), "0xA", "0x1");
        assert_eq!(store.claim(&key, 2000).await.unwrap(), Claim::Claimed);
        store.mark_spent(&key, spent(), 1300).await.unwrap();
        // Releasing a spent key does nothing.
        store.release(&key).await;
        assert_eq!(
            store.claim(&key, 2000).await.unwrap(),
            Claim::Spent(spent())
        );
        clock.advance(Duration::from_secs(300));
        assert_eq!(store.claim(&key, 2000).await.unwrap(), Claim::Claimed);
    }

    #[tokio::test]
    async fn keys_compare_case_insensitively() {
        let store = InMemoryNonceStore::new(Arc::new(FakeClock::at_unix_secs(0)));
        let upper = AuthorizationKey::new(&Network::base_sepolia(), "0xABC", "0xFF");
        let lower = AuthorizationKey::new(&Network::base_sepolia(), "0xabc", "0xff");
        assert_eq!(store.claim(&upper, 10).await.unwrap(), Claim::Claimed);
        assert_eq!(store.claim(&lower, 10).await.unwrap(), Claim::InFlight);
    }

    #[tokio::test]
    async fn expired_entries_are_swept_a_few_per_operation() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryNonceStore::new(Arc::new(clock.clone()));
        let old = 1024;
        for n in 0..old {
            let key = AuthorizationKey::new(&Network::base_sepolia(), "0xa", &n.to_string());
            store.claim(&key, 10).await.unwrap();
        }
        clock.advance(Duration::from_secs(11));
        // One operation removes a few, never the whole backlog at once.
        let key = AuthorizationKey::new(&Network::base_sepolia(), "0xb", "0x0");
        store.claim(&key, 100).await.unwrap();
        assert!(store.len() >= old + 1 - SWEEP_STEP);
        // Enough operations drain it: memory follows the live set.
        let fresh = 1024;
        for n in 1..fresh {
            let key = AuthorizationKey::new(&Network::base_sepolia(), "0xb", &n.to_string());
            store.claim(&key, 100).await.unwrap();
        }
        assert_eq!(store.len(), fresh);
        // The expiry index holds one item per entry.
        let shards_indexed: usize = store
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap().expiries.len())
            .sum();
        assert_eq!(shards_indexed, fresh);
    }

    #[tokio::test]
    async fn released_claims_leave_nothing_behind() {
        let store = InMemoryNonceStore::new(Arc::new(FakeClock::at_unix_secs(0)));
        for n in 0..100 {
            let key = AuthorizationKey::new(&Network::base_sepolia(), "0xc", &n.to_string());
            store.claim(&key, 600).await.unwrap();
            store.release(&key).await;
        }
        assert!(store.is_empty());
        let indexed: usize = store
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap().expiries.len())
            .sum();
        assert_eq!(indexed, 0);
    }

    #[tokio::test]
    async fn an_entry_re_marked_later_outlives_its_first_index_time() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryNonceStore::new(Arc::new(clock.clone()));
        let key = AuthorizationKey::new(&Network::base_sepolia(), "0xA", "0x1");
        assert_eq!(store.claim(&key, 10).await.unwrap(), Claim::Claimed);
        store.mark_spent(&key, spent(), 500).await.unwrap();
        clock.advance(Duration::from_secs(20));
        // The claim's time (10) has passed; the spent entry (500) stays.
        for n in 0..64 {
            let other = AuthorizationKey::new(&Network::base_sepolia(), "0xA", &format!("0x1{n}"));
            store.claim(&other, 30).await.unwrap();
        }
        assert_eq!(store.claim(&key, 600).await.unwrap(), Claim::Spent(spent()));
    }
}

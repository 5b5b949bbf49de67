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
//! A settlement whose outcome is not known (the facilitator reported it
//! pending: a transaction broadcast without a receipt yet, or an answer lost)
//! is neither released nor spent: the key is marked *settling*
//! ([`NonceStore::mark_settling`]) until the authorization expires, and a
//! resend of the very same payment finds it there ([`Claim::Settling`]) on
//! any replica sharing the store, so the settlement is asked about again
//! instead of the transfer being charged twice or lost.
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::x402::server::{AuthorizationKey, Claim, InMemoryNonceStore, NonceStore};
//! use walletgate::x402::wire::Network;
//!
//! # tokio_test_block_on(async {
//! let clock = Arc::new(FakeClock::at_unix_secs(1000));
//! let store = InMemoryNonceStore::new(clock);
//! let payer = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".parse().expect("an address");
//! let nonce = "0x1111111111111111111111111111111111111111111111111111111111111111".parse().expect("32 bytes");
//! let key = AuthorizationKey::new(&Network::base_sepolia(), payer, nonce);
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

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use alloy_primitives::{Address, B256};

use super::joined::with_joined;
use super::receipt::PaymentReceipt;
use crate::clock::SharedClock;
use crate::store::BoxFuture;
use crate::store::StoreError;
use crate::x402::expiring::{ExpiringMap, LocalDigest, local_digest};
use crate::x402::wire::WrittenAddress;
use crate::x402::wire::eip712::parse_b256;
use crate::x402::wire::types::{AtomicAmount, Network};

/// Identifies one authorization: an exact-EVM payer and nonce on a network,
/// or, for another scheme, the payload's fingerprint on a network.
///
/// The typed parts are kept as they are; the text (`network/payer/nonce`,
/// lowercase, usable as a storage key) and its digest are derived once, when
/// the key is built: a request hands its key to the store several times
/// (claim, settling, spent).
#[derive(Clone, Debug)]
pub struct AuthorizationKey {
    network: Network,
    evm: Option<(Address, B256)>,
    /// Shared: a key is cloned into the claim and the stores, per request.
    text: Arc<str>,
    digest: KeyDigest,
}

impl AuthorizationKey {
    /// The key of `payer`'s authorization `nonce` on `network`.
    pub fn new(network: &Network, payer: Address, nonce: B256) -> Self {
        let text = key_text(
            network,
            alloy_primitives::hex::Buffer::<20, true>::new().format(&payer.0),
            &nonce.0,
        );
        Self::with_text(network, Some((payer, nonce)), text)
    }

    /// The key of a payment without an EVM payer and nonce (another scheme):
    /// its `fingerprint` on `network`.
    pub fn of_payload(network: &Network, fingerprint: &[u8; 32]) -> Self {
        let text = key_text(network, "payload", fingerprint);
        Self::with_text(network, None, text)
    }

    fn with_text(network: &Network, evm: Option<(Address, B256)>, text: Arc<str>) -> Self {
        let digest = local_digest(text.as_bytes());
        Self {
            network: network.clone(),
            evm,
            text,
            digest,
        }
    }

    /// The network.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The payer, for an exact-EVM authorization.
    pub fn payer(&self) -> Option<Address> {
        self.evm.map(|(payer, _)| payer)
    }

    /// The authorization's nonce, for an exact-EVM authorization.
    pub fn nonce(&self) -> Option<B256> {
        self.evm.map(|(_, nonce)| nonce)
    }

    /// The key as text (usable as a storage key).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A fixed-size stand-in for [`as_str`](Self::as_str) in this process's
    /// maps: keyed per process, so never stored or sent.
    pub fn digest(&self) -> &[u8; 16] {
        self.digest.as_bytes()
    }
}

/// `network/payer/0x{nonce}`, lowercase.
fn key_text(network: &Network, payer: &str, nonce: &[u8; 32]) -> Arc<str> {
    let mut nonce_hex = alloy_primitives::hex::Buffer::<32, true>::new();
    let parts = [network.as_str(), "/", payer, "/", nonce_hex.format(nonce)];
    // Joined on the stack: the shared text is the key's one allocation.
    with_joined(&parts, |text| {
        text.make_ascii_lowercase();
        Arc::from(&*text)
    })
}

impl PartialEq for AuthorizationKey {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest && self.text == other.text
    }
}

impl Eq for AuthorizationKey {}

impl std::hash::Hash for AuthorizationKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.digest.hash(state);
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
    /// Its settlement's outcome is not known yet: the transfer may still
    /// land. The receipt names the broadcast transaction when one is known.
    /// The caller now holds it too (to ask about the settlement again); a
    /// [`release`](NonceStore::release) gives this very record back.
    Settling(SpentAuthorization),
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

    /// Records `key` as settling (its outcome not known: the transfer may
    /// still land) until `keep_until_unix_secs`: later claims answer
    /// [`Claim::Settling`] with `settling` until it is marked spent, released
    /// or expired. The caller's claim becomes this record.
    fn mark_settling<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        settling: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Records `key` as settled until `keep_until_unix_secs`.
    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

forward_to_arc! { NonceStore {
    fn claim<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;
    fn release(&self, key: &AuthorizationKey) -> BoxFuture<'static, ()>;
    fn settling(
        &self,
        key: &AuthorizationKey,
        unsettled: &SpentAuthorization,
        keep_until_unix_secs: u64,
    );
    fn mark_settling<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        settling: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}}

/// A claim or a settlement, as a shard keeps it: fixed-size fields only.
#[derive(Debug)]
enum State {
    InFlight,
    /// Spent, or settling when its receipt says so (one variant, the flag in
    /// the receipt's padding: the entry stays as small as it was).
    Spent(Spent),
}

/// A spent authorization in about 100 bytes: the payload's fingerprint and its
/// receipt, compacted.
#[derive(Debug)]
struct Spent {
    fingerprint: [u8; 32],
    receipt: StoredReceipt,
}

/// A receipt without heap strings when it has the usual shape (an EVM payer
/// as `0x` and 40 hex digits, a 32-byte transaction hash, the key as its
/// authorization id, a network seen before); anything else is kept whole.
#[derive(Debug)]
enum StoredReceipt {
    Compact {
        /// Its text comes back exactly as written (EIP-55 or not) without
        /// hashing it either way.
        payer: WrittenAddress,
        transaction: [u8; 32],
        /// Little-endian atomic units below 2^96 (bytes: no alignment
        /// padding; a larger amount keeps the receipt whole).
        amount: [u8; 12],
        /// Index into the shard's networks.
        network: u8,
        replayed: bool,
        /// The settlement's outcome is not known yet.
        settling: bool,
    },
    Whole {
        receipt: Box<PaymentReceipt>,
        settling: bool,
    },
}

/// Networks a shard interns at most (their receipts are compacted).
const INTERNED_NETWORKS: usize = 16;

impl StoredReceipt {
    fn store(
        receipt: PaymentReceipt,
        key: &AuthorizationKey,
        networks: &mut Vec<Network>,
        settling: bool,
    ) -> Self {
        let compact = (|| {
            if receipt.authorization_id() != key.as_str() {
                return None;
            }
            let payer = WrittenAddress::read(receipt.payer())?;
            if receipt.amount().units() >> 96 != 0 {
                return None;
            }
            let transaction = receipt.transaction().and_then(|transaction| {
                let digits = transaction.strip_prefix("0x")?;
                let lowercase = digits
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                lowercase.then(|| parse_b256(transaction)).flatten()
            })?;
            let network = match networks.iter().position(|known| known == receipt.network()) {
                Some(index) => index,
                None if networks.len() < INTERNED_NETWORKS => {
                    networks.push(receipt.network().clone());
                    networks.len() - 1
                }
                None => return None,
            };
            Some(Self::Compact {
                payer,
                transaction: transaction.0,
                amount: receipt.amount().units().to_le_bytes()[..12]
                    .try_into()
                    .ok()?,
                network: u8::try_from(network).ok()?,
                replayed: receipt.is_replay(),
                settling,
            })
        })();
        compact.unwrap_or_else(|| Self::Whole {
            receipt: Box::new(receipt),
            settling,
        })
    }

    /// Whether it records a settlement whose outcome is not known yet.
    fn is_settling(&self) -> bool {
        match self {
            Self::Compact { settling, .. } | Self::Whole { settling, .. } => *settling,
        }
    }

    fn load(&self, key: &AuthorizationKey, networks: &[Network]) -> Option<PaymentReceipt> {
        match self {
            Self::Compact {
                payer,
                transaction,
                amount,
                network,
                replayed,
                settling: _,
            } => {
                let receipt = PaymentReceipt::new(
                    payer.to_text(),
                    AtomicAmount::new(amount_of(amount)),
                    networks.get(usize::from(*network))?.clone(),
                    key.as_str().to_owned(),
                )
                .settled(B256::from(*transaction).to_string());
                Some(if *replayed {
                    receipt.replayed()
                } else {
                    receipt
                })
            }
            Self::Whole { receipt, .. } => Some((**receipt).clone()),
        }
    }
}

/// The atomic units of a compact receipt's amount.
fn amount_of(bytes: &[u8; 12]) -> u128 {
    let mut units = [0u8; 16];
    units[..12].copy_from_slice(bytes);
    u128::from_le_bytes(units)
}

/// Expired entries removed per store operation at most: more than an
/// operation adds (one), so the backlog drains while no call pays for all of it.
const SWEEP_STEP: usize = 8;

/// Independent maps, each behind its own lock: contention and every map's
/// growth are a sixteenth of the whole.
const SHARDS: usize = 16;

/// A key as the store keeps it: the [`local_digest`] of its text.
type KeyDigest = LocalDigest;

/// An in-process [`NonceStore`] with expiry, without pauses: every operation
/// removes a few expired entries (oldest first, from a time-ordered index), so
/// memory follows the live set and no call sweeps the whole map.
///
/// Each entry is fixed-size: the key's 16-byte digest, the expiry, and for a
/// spent authorization its payload fingerprint and receipt without heap
/// strings (a receipt of another shape is kept whole). About 300 bytes per
/// spent authorization with the map's and the index's overhead (the `x402_memory`
/// bench `retained bytes per payment` measures it), held until the
/// authorization expires.
pub struct InMemoryNonceStore {
    clock: SharedClock,
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Default)]
struct Shard {
    entries: ExpiringMap<State>,
    /// The networks of compacted receipts.
    networks: Vec<Network>,
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

    /// `key`'s shard, locked (picked by its digest).
    fn shard(&self, key: &AuthorizationKey) -> std::sync::MutexGuard<'_, Shard> {
        let index = usize::from(key.digest()[0]) % SHARDS;
        // Every update keeps the shard consistent: a poisoned lock holds consistent data.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn claim_now(&self, key: &AuthorizationKey, hold_until_unix_secs: u64) -> Claim {
        let now = self.clock.now_unix_secs();
        let digest = key.digest;
        let mut shard = self.shard(key);
        shard.entries.sweep(now, SWEEP_STEP);
        let shard = &mut *shard;
        match shard.entries.get(&digest, now) {
            Some(State::InFlight) => return Claim::InFlight,
            Some(State::Spent(spent)) => {
                if let Some(receipt) = spent.receipt.load(key, &shard.networks) {
                    let record = SpentAuthorization {
                        receipt,
                        fingerprint: spent.fingerprint,
                    };
                    return match spent.receipt.is_settling() {
                        true => Claim::Settling(record),
                        false => Claim::Spent(record),
                    };
                }
            }
            None => {}
        }
        shard
            .entries
            .insert(digest, State::InFlight, hold_until_unix_secs);
        Claim::Claimed
    }
}

impl InMemoryNonceStore {
    /// Keeps `record` under `key` (spent, or settling) until `keep_until_unix_secs`.
    fn record(
        &self,
        key: &AuthorizationKey,
        record: SpentAuthorization,
        keep_until_unix_secs: u64,
        settling: bool,
    ) {
        let now = self.clock.now_unix_secs();
        let mut shard = self.shard(key);
        shard.entries.sweep(now, SWEEP_STEP);
        let shard = &mut *shard;
        let record = Spent {
            fingerprint: record.fingerprint,
            receipt: StoredReceipt::store(record.receipt, key, &mut shard.networks, settling),
        };
        shard
            .entries
            .insert(key.digest, State::Spent(record), keep_until_unix_secs);
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
        if matches!(shard.entries.peek(&key.digest), Some(State::InFlight))
            || shard.entries.peek(&key.digest).is_some_and(
                |state| matches!(state, State::Spent(spent) if spent.receipt.is_settling()),
            )
        {
            shard.entries.remove(&key.digest);
        }
        Box::pin(std::future::ready(()))
    }

    fn mark_settling<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        settling: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.record(key, settling, keep_until_unix_secs, true);
        Box::pin(std::future::ready(Ok(())))
    }

    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.record(key, spent, keep_until_unix_secs, false);
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::FakeClock;
    use crate::x402::wire::AtomicAmount;
    use alloy_primitives::U256;

    fn key_of(payer: u8, nonce: usize) -> AuthorizationKey {
        AuthorizationKey::new(
            &Network::base_sepolia(),
            Address::repeat_byte(payer),
            B256::from(U256::from(nonce)),
        )
    }

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
        let key = key_of(0x0a, 0x1);
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
    async fn a_settling_key_answers_settling_until_spent_or_released() {
        let clock = FakeClock::at_unix_secs(1000);
        let store = InMemoryNonceStore::new(Arc::new(clock.clone()));
        let key = key_of(0x0a, 0x2);
        assert_eq!(store.claim(&key, 2000).await.unwrap(), Claim::Claimed);
        store.mark_settling(&key, spent(), 1300).await.unwrap();
        assert_eq!(
            store.claim(&key, 2000).await.unwrap(),
            Claim::Settling(spent())
        );
        store.mark_spent(&key, spent(), 1300).await.unwrap();
        assert_eq!(
            store.claim(&key, 2000).await.unwrap(),
            Claim::Spent(spent())
        );
        // A settling record given back (its transfer can no longer land) is free again.
        let other = key_of(0x0a, 0x3);
        store.claim(&other, 2000).await.unwrap();
        store.mark_settling(&other, spent(), 1300).await.unwrap();
        store.release(&other).await;
        assert_eq!(store.claim(&other, 2000).await.unwrap(), Claim::Claimed);
        // Kept until the authorization expires, like a spent one.
        let third = key_of(0x0a, 0x4);
        store.claim(&third, 2000).await.unwrap();
        store.mark_settling(&third, spent(), 1300).await.unwrap();
        clock.advance(Duration::from_secs(301));
        assert_eq!(store.claim(&third, 2000).await.unwrap(), Claim::Claimed);
    }

    #[test]
    fn a_key_keeps_its_typed_parts_and_lowercase_text() {
        let key = key_of(0xab, 0xff);
        assert_eq!(key.payer(), Some(Address::repeat_byte(0xab)));
        assert_eq!(key.nonce(), Some(B256::from(U256::from(0xffu64))));
        assert_eq!(key.network(), &Network::base_sepolia());
        assert_eq!(
            key.as_str(),
            format!("eip155:84532/0x{}/0x{}ff", "ab".repeat(20), "0".repeat(62))
        );
        let payload = AuthorizationKey::of_payload(&Network::base_sepolia(), &[0xCD; 32]);
        assert_eq!((payload.payer(), payload.nonce()), (None, None));
        assert_eq!(
            payload.as_str(),
            format!("eip155:84532/payload/0x{}", "cd".repeat(32))
        );
    }

    #[test]
    fn a_key_carries_the_digest_of_its_text() {
        let key = key_of(0xab, 0xff);
        assert_eq!(
            key.digest(),
            local_digest(key.as_str().as_bytes()).as_bytes()
        );
        let other = key_of(0xab, 0xfe);
        assert_ne!(key.digest(), other.digest());
    }

    #[tokio::test]
    async fn expired_entries_are_swept_a_few_per_operation() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryNonceStore::new(Arc::new(clock.clone()));
        let old = 1024;
        for n in 0..old {
            let key = key_of(0x0a, n);
            store.claim(&key, 10).await.unwrap();
        }
        clock.advance(Duration::from_secs(11));
        // One operation removes a few, never the whole backlog at once.
        let key = key_of(0x0b, 0x0);
        store.claim(&key, 100).await.unwrap();
        assert!(store.len() >= old + 1 - SWEEP_STEP);
        // Enough operations drain it: memory follows the live set.
        let fresh = 1024;
        for n in 1..fresh {
            let key = key_of(0x0b, n);
            store.claim(&key, 100).await.unwrap();
        }
        assert_eq!(store.len(), fresh);
        // The expiry index holds one item per entry.
        let shards_indexed: usize = store
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap().entries.indexed())
            .sum();
        assert_eq!(shards_indexed, fresh);
    }

    #[tokio::test]
    async fn released_claims_leave_nothing_behind() {
        let store = InMemoryNonceStore::new(Arc::new(FakeClock::at_unix_secs(0)));
        for n in 0..100 {
            let key = key_of(0x0c, n);
            store.claim(&key, 600).await.unwrap();
            store.release(&key).await;
        }
        assert!(store.is_empty());
        let indexed: usize = store
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap().entries.indexed())
            .sum();
        assert_eq!(indexed, 0);
    }

    #[tokio::test]
    async fn an_entry_re_marked_later_outlives_its_first_index_time() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryNonceStore::new(Arc::new(clock.clone()));
        let key = key_of(0x0a, 0x1);
        assert_eq!(store.claim(&key, 10).await.unwrap(), Claim::Claimed);
        store.mark_spent(&key, spent(), 500).await.unwrap();
        clock.advance(Duration::from_secs(20));
        // The claim's time (10) has passed; the spent entry (500) stays.
        for n in 0..64 {
            let other = key_of(0x0a, 0x100 + n);
            store.claim(&other, 30).await.unwrap();
        }
        assert_eq!(store.claim(&key, 600).await.unwrap(), Claim::Spent(spent()));
    }

    /// A receipt as the payment flow makes it: checksummed payer, 32-byte transaction hash.
    fn usual_receipt(key: &AuthorizationKey) -> PaymentReceipt {
        PaymentReceipt::new(
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
            AtomicAmount::new(1_129),
            Network::base_sepolia(),
            key.as_str().to_owned(),
        )
        .settled(format!("0x{}", "ab".repeat(32)))
    }

    #[tokio::test]
    async fn a_usual_receipt_is_kept_compact_and_comes_back_exactly() {
        let store = InMemoryNonceStore::new(Arc::new(FakeClock::at_unix_secs(0)));
        let key = key_of(0x9f, 0x2);
        let spent = SpentAuthorization {
            receipt: usual_receipt(&key),
            fingerprint: [9; 32],
        };
        store.claim(&key, 10).await.unwrap();
        store.mark_spent(&key, spent.clone(), 100).await.unwrap();
        assert_eq!(store.claim(&key, 10).await.unwrap(), Claim::Spent(spent));
        let compact = store.shards.iter().any(|shard| {
            shard.lock().unwrap().entries.values().any(|state| {
                matches!(
                    state,
                    State::Spent(Spent {
                        receipt: StoredReceipt::Compact { .. },
                        ..
                    })
                )
            })
        });
        assert!(compact, "no heap strings for the usual shape");
        assert!(
            std::mem::size_of::<State>() <= 104,
            "{}",
            std::mem::size_of::<State>()
        );
    }

    #[tokio::test]
    async fn receipts_of_other_shapes_are_kept_whole_and_come_back_exactly() {
        let store = InMemoryNonceStore::new(Arc::new(FakeClock::at_unix_secs(0)));
        let key = key_of(0x0a, 0x3);
        let lowercase_payer = PaymentReceipt::new(
            "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266".into(),
            AtomicAmount::new(5),
            Network::base_sepolia(),
            key.as_str().to_owned(),
        )
        .settled(format!("0x{}", "cd".repeat(32)));
        let other_id = usual_receipt(&key);
        let other_id = PaymentReceipt::new(
            other_id.payer().to_owned(),
            other_id.amount(),
            Network::solana_mainnet(),
            "another id".into(),
        )
        .settled("5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnb".into())
        .replayed();
        for (n, receipt) in [lowercase_payer, other_id, spent().receipt]
            .into_iter()
            .enumerate()
        {
            let key = key_of(0x0a, n);
            // Above 2^96 units: kept whole, and exactly.
            let huge = key_of(0x0b, n);
            let usual = usual_receipt(&huge);
            let huge_amount = SpentAuthorization {
                receipt: PaymentReceipt::new(
                    usual.payer().to_owned(),
                    AtomicAmount::new(u128::MAX - 1),
                    Network::base_sepolia(),
                    huge.as_str().to_owned(),
                )
                .settled(format!("0x{}", "ef".repeat(32))),
                fingerprint: [2; 32],
            };
            store
                .mark_spent(&huge, huge_amount.clone(), 100)
                .await
                .unwrap();
            assert_eq!(
                store.claim(&huge, 10).await.unwrap(),
                Claim::Spent(huge_amount)
            );
            let spent = SpentAuthorization {
                receipt,
                fingerprint: [1; 32],
            };
            store.mark_spent(&key, spent.clone(), 100).await.unwrap();
            assert_eq!(store.claim(&key, 10).await.unwrap(), Claim::Spent(spent));
        }
    }
}

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
//! store.release(&key);
//! assert!(matches!(store.claim(&key, 1600).await?, Claim::Claimed));
//! # Ok::<(), walletgate::x402::NonceStoreError>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::collections::HashMap;
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

/// The store could not answer; nothing was claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonceStoreError(pub String);

impl fmt::Display for NonceStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nonce store unavailable: {}", self.0)
    }
}

impl std::error::Error for NonceStoreError {}

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
    ) -> BoxFuture<'a, Result<Claim, NonceStoreError>>;

    /// Gives a claim back (nothing was settled). Called from `Drop`, so it
    /// must not block: a networked store sends it in the background.
    fn release(&self, key: &AuthorizationKey);

    /// Records `key` as settled until `keep_until_unix_secs`.
    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), NonceStoreError>>;
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
}

/// Smallest map size at which expired entries are swept.
const SWEEP_MIN_LEN: usize = 1024;

/// An in-process [`NonceStore`] with expiry; entries past their time are
/// swept whenever the map doubles, so memory follows the live set.
pub struct InMemoryNonceStore {
    clock: SharedClock,
    state: Mutex<Inner>,
}

struct Inner {
    entries: HashMap<AuthorizationKey, Entry>,
    sweep_at_len: usize,
}

impl InMemoryNonceStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            state: Mutex::new(Inner {
                entries: HashMap::new(),
                sweep_at_len: SWEEP_MIN_LEN,
            }),
        }
    }

    /// Entries held, live or not yet swept.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update is a single map operation: a poisoned lock holds consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn claim_now(&self, key: &AuthorizationKey, hold_until_unix_secs: u64) -> Claim {
        let now = self.clock.now_unix_secs();
        let mut inner = self.lock();
        if inner.entries.len() >= inner.sweep_at_len {
            inner
                .entries
                .retain(|_, entry| entry.expires_at_unix_secs > now);
            inner.sweep_at_len = (inner.entries.len() * 2).max(SWEEP_MIN_LEN);
        }
        if let Some(entry) = inner.entries.get(key)
            && entry.expires_at_unix_secs > now
        {
            return match &entry.state {
                State::InFlight => Claim::InFlight,
                State::Spent(spent) => Claim::Spent(spent.clone()),
            };
        }
        inner.entries.insert(
            key.clone(),
            Entry {
                state: State::InFlight,
                expires_at_unix_secs: hold_until_unix_secs,
            },
        );
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
    ) -> BoxFuture<'a, Result<Claim, NonceStoreError>> {
        Box::pin(std::future::ready(Ok(
            self.claim_now(key, hold_until_unix_secs)
        )))
    }

    fn release(&self, key: &AuthorizationKey) {
        let mut inner = self.lock();
        if matches!(
            inner.entries.get(key),
            Some(Entry {
                state: State::InFlight,
                ..
            })
        ) {
            inner.entries.remove(key);
        }
    }

    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), NonceStoreError>> {
        self.lock().entries.insert(
            key.clone(),
            Entry {
                state: State::Spent(spent),
                expires_at_unix_secs: keep_until_unix_secs,
            },
        );
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
        store.release(&key);
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
    async fn expired_entries_are_swept_as_the_map_grows() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryNonceStore::new(Arc::new(clock.clone()));
        for n in 0..SWEEP_MIN_LEN {
            let key = AuthorizationKey::new(&Network::base_sepolia(), "0xa", &n.to_string());
            store.claim(&key, 10).await.unwrap();
        }
        clock.advance(Duration::from_secs(11));
        let key = AuthorizationKey::new(&Network::base_sepolia(), "0xb", "0x1");
        store.claim(&key, 100).await.unwrap();
        assert_eq!(store.len(), 1);
    }
}

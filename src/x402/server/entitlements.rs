//! The entitlement store of `sign-in-with-x`: which payer paid for which
//! operation, recorded at each settlement.
//!
//! An entitlement outlives what the answer store can hold: an answer too
//! large to keep, or evicted, still leaves its payer entitled, so a route
//! that opted into re-running (see
//! [`X402LayerBuilder::rerun_signed_in`](super::X402LayerBuilder::rerun_signed_in))
//! runs its handler again, uncharged, with the settled [`PaymentReceipt`].
//! Entitlements are kept for the answer retention
//! ([`AnswerLimits::retention_secs`](super::AnswerLimits::retention_secs)).
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::x402::server::{EntitlementStore, InMemoryEntitlementStore, PaymentReceipt};
//! use walletgate::x402::wire::{AtomicAmount, Network};
//!
//! # tokio_test_block_on(async {
//! let store = InMemoryEntitlementStore::new(Arc::new(FakeClock::at_unix_secs(1000)));
//! let network = Network::parse("eip155:84532").unwrap();
//! let receipt = PaymentReceipt::new("0xab".into(), AtomicAmount::new(1000), network, "id".into());
//! let operation = [7; 32];
//! store.entitle(&operation, &receipt, 4600).await?;
//! assert_eq!(store.entitlement("0xAB", &operation).await?, Some(receipt));
//! assert_eq!(store.entitlement("0xcd", &operation).await?, None);
//! # Ok::<(), walletgate::store::StoreError>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::fmt;
use std::sync::{Mutex, PoisonError};

use alloy_primitives::hex;

use super::receipt::PaymentReceipt;
use crate::clock::SharedClock;
use crate::store::{BoxFuture, StoreError};
use crate::x402::expiring::{ExpiringMap, LocalDigest, local_digest};

/// Default bound of the in-memory store: entitlements held at most.
pub const DEFAULT_ENTITLEMENT_CAPACITY: usize = 100_000;

/// Expired entries removed per operation at most.
const SWEEP_STEP: usize = 8;

/// Where entitlements are recorded: a payer's settled payment for an
/// operation (method, path and query, body digest).
pub trait EntitlementStore: Send + Sync + 'static {
    /// Records that `receipt`'s payer paid for `operation` (the settled
    /// receipt), until `until_unix_secs`; replaces an earlier record.
    fn entitle<'a>(
        &'a self,
        operation: &'a [u8; 32],
        receipt: &'a PaymentReceipt,
        until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The settled receipt with which `payer` (any case) paid for
    /// `operation`, if still recorded.
    fn entitlement<'a>(
        &'a self,
        payer: &'a str,
        operation: &'a [u8; 32],
    ) -> BoxFuture<'a, Result<Option<PaymentReceipt>, StoreError>>;
}

forward_to_arc! { EntitlementStore {
    fn entitle<'a>(
        &'a self,
        operation: &'a [u8; 32],
        receipt: &'a PaymentReceipt,
        until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn entitlement<'a>(
        &'a self,
        payer: &'a str,
        operation: &'a [u8; 32],
    ) -> BoxFuture<'a, Result<Option<PaymentReceipt>, StoreError>>;
}}

/// The id of `payer`'s entitlement to `operation` (its kept answer's key
/// is the same behind a prefix): `{payer, lower-case}:{operation, hex}`.
pub(crate) fn entitlement_key(payer: &str, operation: &[u8; 32]) -> String {
    format!("{}:{}", payer.to_ascii_lowercase(), hex::encode(operation))
}

/// An in-process [`EntitlementStore`], bounded in entries: when full, the
/// entitlement nearest its expiry makes room.
pub struct InMemoryEntitlementStore {
    clock: SharedClock,
    capacity: usize,
    held: Mutex<ExpiringMap<PaymentReceipt>>,
}

impl fmt::Debug for InMemoryEntitlementStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryEntitlementStore")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl InMemoryEntitlementStore {
    /// An empty store of [`DEFAULT_ENTITLEMENT_CAPACITY`] entries reading time from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            capacity: DEFAULT_ENTITLEMENT_CAPACITY,
            held: Mutex::default(),
        }
    }

    /// Bounds the store to `entries` (at least one).
    #[must_use]
    pub fn with_capacity(mut self, entries: usize) -> Self {
        self.capacity = entries.max(1);
        self
    }

    /// Entitlements held, live or not yet swept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ExpiringMap<PaymentReceipt>> {
        // Each update is one map call: a poisoned lock holds consistent data.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn digest(payer: &str, operation: &[u8; 32]) -> LocalDigest {
    local_digest(entitlement_key(payer, operation).as_bytes())
}

impl EntitlementStore for InMemoryEntitlementStore {
    fn entitle<'a>(
        &'a self,
        operation: &'a [u8; 32],
        receipt: &'a PaymentReceipt,
        until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = digest(receipt.payer(), operation);
        let now = self.clock.now_unix_secs();
        let mut held = self.lock();
        held.sweep(now, SWEEP_STEP);
        held.remove(&key);
        while held.len() >= self.capacity {
            if held.pop_first().is_none() {
                break;
            }
        }
        held.insert(key, receipt.clone(), until_unix_secs);
        Box::pin(std::future::ready(Ok(())))
    }

    fn entitlement<'a>(
        &'a self,
        payer: &'a str,
        operation: &'a [u8; 32],
    ) -> BoxFuture<'a, Result<Option<PaymentReceipt>, StoreError>> {
        let now = self.clock.now_unix_secs();
        let mut held = self.lock();
        held.sweep(now, SWEEP_STEP);
        let found = held.get(&digest(payer, operation), now).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::FakeClock;
    use crate::x402::wire::{AtomicAmount, Network};

    fn receipt(payer: &str) -> PaymentReceipt {
        PaymentReceipt::new(
            payer.into(),
            AtomicAmount::new(1000),
            Network::parse("eip155:84532").unwrap(),
            format!("auth-{payer}"),
        )
        .settled("0xfeed".into())
    }

    #[tokio::test]
    async fn an_entitlement_expires_on_the_clock_and_belongs_to_its_payer_and_operation() {
        let clock = FakeClock::at_unix_secs(1000);
        let store = InMemoryEntitlementStore::new(Arc::new(clock.clone()));
        store
            .entitle(&[1; 32], &receipt("0xAa"), 1100)
            .await
            .unwrap();
        let found = store.entitlement("0xaa", &[1; 32]).await.unwrap();
        assert_eq!(found, Some(receipt("0xAa")));
        assert_eq!(store.entitlement("0xaa", &[2; 32]).await.unwrap(), None);
        assert_eq!(store.entitlement("0xbb", &[1; 32]).await.unwrap(), None);
        clock.advance(std::time::Duration::from_secs(100));
        assert_eq!(store.entitlement("0xaa", &[1; 32]).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_full_store_drops_the_entitlement_nearest_its_expiry() {
        let clock = FakeClock::at_unix_secs(1000);
        let store = InMemoryEntitlementStore::new(Arc::new(clock)).with_capacity(2);
        store
            .entitle(&[1; 32], &receipt("0xaa"), 1500)
            .await
            .unwrap();
        store
            .entitle(&[2; 32], &receipt("0xaa"), 1200)
            .await
            .unwrap();
        store
            .entitle(&[3; 32], &receipt("0xaa"), 1900)
            .await
            .unwrap();
        assert_eq!(store.len(), 2);
        assert!(store.entitlement("0xaa", &[2; 32]).await.unwrap().is_none());
        assert!(store.entitlement("0xaa", &[1; 32]).await.unwrap().is_some());
        // Recording the same entitlement again replaces it, never grows the store.
        store
            .entitle(&[3; 32], &receipt("0xaa"), 2000)
            .await
            .unwrap();
        assert_eq!(store.len(), 2);
    }
}

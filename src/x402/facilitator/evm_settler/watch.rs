//! The state of the receipt watch the waiting settlements share
//! ([`receipts`](super::receipts) polls it): which transactions are awaited,
//! the receipts found, the last block read, and the settler's transactions
//! the chain has not passed yet.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use alloy_primitives::B256;

use super::rpc::Receipt;

/// What the settlements waiting for receipts share.
#[derive(Debug)]
pub(super) struct BlockWatch {
    pub(super) state: Mutex<WatchState>,
    /// Held by the waiter polling the node for everyone.
    pub(super) turn: tokio::sync::Mutex<()>,
    /// The latest head seen; waiters wake on each new one.
    pub(super) head: tokio::sync::watch::Sender<u64>,
    /// Whether the node answers `eth_getBlockReceipts`.
    pub(super) block_receipts: AtomicBool,
    pub(super) poll_interval: Duration,
}

#[derive(Debug, Default)]
pub(super) struct WatchState {
    /// Transactions awaited, with how many waiters each.
    pub(super) wanted: HashMap<B256, usize>,
    /// Receipts found for awaited transactions.
    pub(super) found: HashMap<B256, Receipt>,
    /// The last block whose receipts were read.
    pub(super) scanned_to: Option<u64>,
    /// The settler's transactions the chain has not passed yet, by nonce.
    pub(super) outstanding: BTreeMap<u64, Outstanding>,
    /// The chain's confirmed nonce while ours wait above it, and the head
    /// when that began.
    pub(super) waiting_on: Option<(u64, u64)>,
}

/// A transaction sent (or maybe sent) and not yet below the chain's nonce.
#[derive(Debug)]
pub(super) struct Outstanding {
    pub(super) raw: Arc<[u8]>,
    /// The first head seen after it was (last) sent: unknown until the
    /// watch's next look, as the head the watch last saw may be old.
    pub(super) sent_at: Option<u64>,
}

impl BlockWatch {
    pub(super) fn new(poll_interval: Duration) -> Self {
        Self {
            state: Mutex::default(),
            turn: tokio::sync::Mutex::new(()),
            head: tokio::sync::watch::Sender::new(0),
            block_receipts: AtomicBool::new(true),
            poll_interval,
        }
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The latest block seen (0 before the first poll).
    pub(super) fn head(&self) -> u64 {
        *self.head.borrow()
    }

    /// `nonce`'s transaction is about to be sent (or sent again): the
    /// chain is watched for stalling on it until its nonce is passed.
    pub(super) fn sending(&self, nonce: u64, raw: &[u8]) {
        self.state().outstanding.insert(
            nonce,
            Outstanding {
                raw: raw.into(),
                sent_at: None,
            },
        );
    }

    /// `nonce` is settled for good (mined, or never sent): no longer watched.
    pub(super) fn done_with(&self, nonce: u64) {
        self.state().outstanding.remove(&nonce);
    }

    /// Whether a transaction above `nonce` is outstanding (it waits behind `nonce`).
    pub(super) fn waits_behind(&self, nonce: u64) -> bool {
        self.state().outstanding.range(nonce + 1..).next().is_some()
    }

    pub(super) fn want(&self, hashes: &[B256]) -> Wanting<'_> {
        let mut state = self.state();
        for hash in hashes {
            *state.wanted.entry(*hash).or_default() += 1;
        }
        Wanting {
            watch: self,
            hashes: hashes.to_vec(),
        }
    }

    /// The first of `hashes` found mined with `confirmations` blocks on top.
    pub(super) fn confirmed(&self, hashes: &[B256], confirmations: u64) -> Option<Receipt> {
        let head = self.head();
        let state = self.state();
        hashes.iter().find_map(|hash| {
            let receipt = state.found.get(hash)?;
            (receipt.block_number.saturating_add(confirmations) <= head).then(|| receipt.clone())
        })
    }
}

/// A waiter's registration: dropped, its transactions are no longer awaited.
pub(super) struct Wanting<'a> {
    watch: &'a BlockWatch,
    hashes: Vec<B256>,
}

impl Drop for Wanting<'_> {
    fn drop(&mut self) {
        let mut state = self.watch.state();
        for hash in &self.hashes {
            if let Some(waiters) = state.wanted.get_mut(hash) {
                *waiters -= 1;
                if *waiters == 0 {
                    state.wanted.remove(hash);
                    state.found.remove(hash);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(hash: B256, block_number: u64) -> Receipt {
        Receipt {
            transaction: hash,
            success: true,
            block_number,
            gas_used: 21_000,
            logs: Vec::new(),
        }
    }

    #[test]
    fn a_receipt_counts_once_its_confirmations_are_on_top_and_is_forgotten_with_its_waiters() {
        let watch = BlockWatch::new(Duration::from_millis(10));
        let hash = B256::repeat_byte(1);
        let first = watch.want(&[hash]);
        let second = watch.want(&[hash]);
        watch.state().found.insert(hash, receipt(hash, 10));
        watch.head.send_replace(10);
        assert!(watch.confirmed(&[hash], 0).is_some());
        assert!(
            watch.confirmed(&[hash], 2).is_none(),
            "two blocks on top needed"
        );
        watch.head.send_replace(12);
        assert!(watch.confirmed(&[hash], 2).is_some());
        drop(first);
        assert!(watch.state().found.contains_key(&hash), "one waiter left");
        drop(second);
        assert!(watch.state().wanted.is_empty() && watch.state().found.is_empty());
    }

    #[test]
    fn outstanding_nonces_tell_what_waits_behind_a_gap() {
        let watch = BlockWatch::new(Duration::from_millis(10));
        watch.sending(4, &[1]);
        watch.sending(6, &[2]);
        assert!(watch.waits_behind(5));
        assert!(!watch.waits_behind(6));
        watch.done_with(6);
        assert!(!watch.waits_behind(5));
    }
}

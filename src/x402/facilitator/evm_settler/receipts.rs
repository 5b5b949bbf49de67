//! One receipt watch per block, not one poll per transaction: the settlements
//! waiting for receipts take turns polling the node's head
//! (`eth_blockNumber`), and each new block's receipts are read once
//! (`eth_getBlockReceipts`, or one JSON-RPC batch of the awaited receipts
//! where the node lacks it), waking every settlement that landed in it.
//!
//! No task runs in the background: the waiter holding the turn polls for
//! everyone ([`BlockWatch`](super::watch::BlockWatch)), and hands the turn on when its own receipt
//! arrives. Each new block also looks after the settler's nonces: gaps left
//! by refused sends are filled ([`nonce`](super::nonce)), and a transaction
//! the chain stalls on (dropped by the node, or never received) is sent again.

use std::sync::atomic::Ordering;
use std::time::Instant;

use alloy_primitives::B256;

use super::EvmSettler;
use super::rpc::{Receipt, RpcError, nonce_is_used};
use super::tx::{self, Fees};

/// More new blocks than this since the last scan: the awaited receipts are
/// read one by one (one batch) instead of every block's.
const MAX_SCANNED_BLOCKS: u64 = 8;

/// Blocks the chain may stay on a transaction of ours before it is sent again.
const STALL_BLOCKS: u64 = 2;

/// Blocks the chain may wait on a nonce no transaction of ours holds,
/// while ours wait behind it, before it is filled.
const ORPHAN_BLOCKS: u64 = 3;

/// Most nonces filled at one block.
const MAX_ORPHANS: u64 = 16;

/// Gas of a plain transfer: what a gap filler uses.
const FILLER_GAS: u64 = 21_000;

impl EvmSettler {
    /// Waits until one of `hashes` (a transaction and its replacements) is
    /// mined with the configured confirmations on top, or `deadline` passes
    /// (`None`). A node that cannot answer now is asked again at the next poll.
    pub(super) async fn watch_receipt(
        &self,
        hashes: &[B256],
        deadline: Instant,
    ) -> Option<Receipt> {
        let watch = &self.inner.watch;
        let confirmations = self.inner.confirmations;
        let _wanting = watch.want(hashes);
        let mut heads = watch.head.subscribe();
        loop {
            if let Some(receipt) = watch.confirmed(hashes, confirmations) {
                return Some(receipt);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let pause = watch.poll_interval.min(left);
            match watch.turn.try_lock() {
                Ok(_turn) => {
                    self.poll_head().await;
                    if watch.confirmed(hashes, confirmations).is_none() {
                        tokio::time::sleep(pause).await;
                    }
                }
                // Another waiter polls: wake on its news, or take over if it left.
                Err(_) => {
                    let _ = tokio::time::timeout(pause * 2, heads.changed()).await;
                }
            }
        }
    }

    /// One look at the node's head; on a new block, its receipts and the nonces.
    async fn poll_head(&self) {
        let inner = &*self.inner;
        let watch = &inner.watch;
        let Ok(head) = inner.rpc.block_number().await else {
            return;
        };
        let scanned_to = watch.state().scanned_to;
        if scanned_to.is_some_and(|scanned| scanned >= head) {
            return;
        }
        if self.read_receipts(scanned_to, head).await.is_err() {
            return;
        }
        watch.state().scanned_to = Some(head);
        watch.head.send_replace(head);
        self.look_after_nonces(head).await;
    }

    /// Reads the awaited receipts of the blocks after `scanned_to` up to `head`.
    async fn read_receipts(&self, scanned_to: Option<u64>, head: u64) -> Result<(), RpcError> {
        let inner = &*self.inner;
        let watch = &inner.watch;
        let wanted: Vec<B256> = {
            let state = watch.state();
            state
                .wanted
                .keys()
                .filter(|hash| !state.found.contains_key(*hash))
                .copied()
                .collect()
        };
        if wanted.is_empty() {
            return Ok(());
        }
        let by_block = scanned_to
            .filter(|scanned| head - scanned <= MAX_SCANNED_BLOCKS)
            .filter(|_| watch.block_receipts.load(Ordering::Relaxed));
        let mut receipts = Vec::new();
        match by_block {
            Some(scanned) => {
                for block in scanned + 1..=head {
                    match inner.rpc.block_receipts(block, &wanted).await {
                        Ok(mut mined) => receipts.append(&mut mined),
                        Err(error) if error.is_unsupported() => {
                            watch.block_receipts.store(false, Ordering::Relaxed);
                            receipts = inner.rpc.receipts(&wanted).await?;
                            break;
                        }
                        Err(error) => return Err(error),
                    }
                }
            }
            None => receipts = inner.rpc.receipts(&wanted).await?,
        }
        let mut state = watch.state();
        for receipt in receipts {
            state.found.insert(receipt.transaction, receipt);
        }
        Ok(())
    }

    /// At a new block: forgets what the chain passed, fills the gaps refused
    /// sends left, sends again a transaction of ours the chain stalls on,
    /// and fills nonces the chain waits on that no one sends (a replica
    /// sharing the key stopped between taking a nonce and sending it).
    async fn look_after_nonces(&self, head: u64) {
        let inner = &*self.inner;
        let address = inner.key.address();
        if inner.watch.state().outstanding.is_empty() {
            return;
        }
        let Ok(confirmed) = inner.rpc.transaction_count(address, false).await else {
            return;
        };
        let (stalled, orphans) = {
            let mut state = inner.watch.state();
            state.outstanding = state.outstanding.split_off(&confirmed);
            for sent in state.outstanding.values_mut() {
                sent.sent_at.get_or_insert(head);
            }
            let lowest_ours = state.outstanding.first_key_value().map(|(nonce, sent)| {
                let stalled = sent.sent_at.is_some_and(|at| at + STALL_BLOCKS <= head);
                (*nonce, stalled.then(|| sent.raw.clone()))
            });
            let orphans = match lowest_ours {
                Some((lowest, _)) if lowest > confirmed => {
                    let since = match state.waiting_on {
                        Some((nonce, since)) if nonce == confirmed => since,
                        _ => head,
                    };
                    state.waiting_on = Some((confirmed, since));
                    if since + ORPHAN_BLOCKS <= head {
                        (confirmed..lowest.min(confirmed + MAX_ORPHANS)).collect()
                    } else {
                        Vec::new()
                    }
                }
                _ => {
                    state.waiting_on = None;
                    Vec::new()
                }
            };
            let stalled = lowest_ours
                .filter(|(nonce, _)| *nonce == confirmed)
                .and_then(|(nonce, raw)| Some((nonce, raw?)));
            (stalled, orphans)
        };
        self.fill_gaps().await;
        if !orphans.is_empty() {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                first = orphans[0],
                count = orphans.len(),
                "the chain waits on settler nonces no one sent: filled"
            );
            self.fill(orphans).await;
        }
        if let Some((nonce, raw)) = stalled {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                nonce,
                "the chain stalls on a settlement transaction: sent again"
            );
            inner.watch.sending(nonce, &raw);
            // "already known" or "nonce too low" are fine: the node has it, or it landed.
            let _ = inner.rpc.send_raw(&raw).await;
        }
    }

    /// Fills every nonce given back and not taken since (later transactions
    /// wait behind it) with a zero-value transfer to the settler itself.
    pub(super) async fn fill_gaps(&self) {
        let inner = &*self.inner;
        if let Ok(gaps) = inner.nonces.take_gaps(inner.key.address()).await {
            self.fill(gaps).await;
        }
    }

    /// Sends a zero-value transfer to the settler itself at each of `nonces`.
    async fn fill(&self, nonces: Vec<u64>) {
        let inner = &*self.inner;
        let address = inner.key.address();
        if nonces.is_empty() {
            return;
        }
        let fees = self.current_fees().await.unwrap_or(Fees::from_node(0, 0));
        for nonce in nonces {
            let filler = tx::sign(
                &inner.key,
                inner.chain_id,
                nonce,
                FILLER_GAS,
                fees,
                address,
                Vec::new(),
            );
            inner.watch.sending(nonce, &filler.raw);
            #[cfg(feature = "tracing")]
            tracing::info!(nonce, transaction = %filler.hash, "a settler nonce filled with a zero-value transfer");
            match inner.rpc.send_raw(&filler.raw).await {
                Ok(()) => {}
                // Taken meanwhile (its owner sent it after all): nothing to fill.
                Err(RpcError::Node { message, .. }) if nonce_is_used(&message) => {
                    inner.watch.done_with(nonce);
                }
                Err(RpcError::Node { .. }) => {
                    inner.watch.done_with(nonce);
                    let _ = inner.nonces.give_back(address, nonce).await;
                }
                // Unknown: watched as any send; sent again if the chain stalls on it.
                Err(_) => {}
            }
        }
    }
}

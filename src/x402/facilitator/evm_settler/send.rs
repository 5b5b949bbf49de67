//! Sending a settlement transaction: its nonce (taken, seeded from the
//! node, given back when nothing was sent), the send itself (with its
//! receipt where the node offers `eth_sendRawTransactionSync`), and the same
//! bytes again after a send whose fate is unknown.

use std::time::Duration;

use super::EvmSettler;
use super::outcome::unavailable;
use super::records::SettlementRecord;
use super::rpc::{Receipt, RpcError, already_known, nonce_is_used};
use crate::x402::facilitator::api::FacilitatorError;

/// How long a send waits for its receipt in its own answer where the node
/// offers `eth_sendRawTransactionSync`: a block or two on a fast chain, and
/// a round trip; past it (a slower chain), the block watch takes over.
const SYNC_SEND_WAIT: Duration = Duration::from_secs(4);

/// Pauses before sending again a transaction whose send's fate is unknown.
const RESEND_PAUSES: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// What sending a transaction again found.
pub(super) enum Resent {
    /// The node has it (or it landed).
    Sent,
    /// The node refused it: it does not have it.
    Refused(String),
    /// Still no answer.
    Unknown,
}

impl EvmSettler {
    /// The next nonce, seeded from the node's pending count the first time.
    pub(super) async fn take_nonce(&self) -> Result<u64, FacilitatorError> {
        let inner = &*self.inner;
        let address = inner.key.address();
        for _ in 0..2 {
            if let Some(nonce) = inner.nonces.take(address).await.map_err(unavailable)? {
                return Ok(nonce);
            }
            // One seeding for every settlement that found it unseeded.
            let _seeding = inner.seeding.lock().await;
            if let Some(nonce) = inner.nonces.take(address).await.map_err(unavailable)? {
                return Ok(nonce);
            }
            self.catch_up_with_node().await?;
        }
        Err(FacilitatorError::unavailable(
            "the nonce allocator hands out no nonce once seeded",
        ))
    }

    /// Raises the allocator's counter to the node's pending count.
    pub(super) async fn catch_up_with_node(&self) -> Result<(), FacilitatorError> {
        let inner = &*self.inner;
        let address = inner.key.address();
        let pending = inner
            .rpc
            .transaction_count(address, true)
            .await
            .map_err(unavailable)?;
        inner
            .nonces
            .seed(address, pending)
            .await
            .map_err(unavailable)
    }

    /// `nonce` was taken and nothing was sent with it: given back, and
    /// filled at once if later transactions already wait behind it.
    pub(super) async fn never_sent(&self, nonce: u64) {
        let inner = &*self.inner;
        inner.watch.done_with(nonce);
        if inner
            .nonces
            .give_back(inner.key.address(), nonce)
            .await
            .is_ok()
            && inner.watch.waits_behind(nonce)
        {
            self.fill_gaps().await;
        }
    }

    /// Sends `record`'s transaction: with its receipt when the node offers
    /// `eth_sendRawTransactionSync` and mines it within [`SYNC_SEND_WAIT`].
    pub(super) async fn send(
        &self,
        record: &SettlementRecord,
    ) -> Result<Option<Receipt>, RpcError> {
        let inner = &*self.inner;
        if !inner.sync_send {
            return inner.rpc.send_raw(&record.raw).await.map(|()| None);
        }
        let wait = SYNC_SEND_WAIT.min(inner.receipt_timeout);
        match inner
            .rpc
            .send_raw_sync(&record.raw, record.latest(), wait)
            .await
        {
            // Not mined within the wait (a slower chain), or the node kept
            // it: the same bytes again make sure it has them.
            Err(RpcError::Timeout(_)) => match inner.rpc.send_raw(&record.raw).await {
                Err(RpcError::Node { message, .. })
                    if already_known(&message) || nonce_is_used(&message) =>
                {
                    Ok(None)
                }
                sent => sent.map(|()| None),
            },
            sent => sent,
        }
    }

    /// Sends `raw` again after a send whose fate is unknown, a few times.
    pub(super) async fn send_again(&self, raw: &[u8]) -> Resent {
        for pause in RESEND_PAUSES {
            tokio::time::sleep(pause).await;
            match self.inner.rpc.send_raw(raw).await {
                Ok(()) => return Resent::Sent,
                Err(RpcError::Node { message, .. })
                    if already_known(&message) || nonce_is_used(&message) =>
                {
                    // The first send arrived (pooled, or mined by now).
                    return Resent::Sent;
                }
                Err(RpcError::Node { message, .. }) => return Resent::Refused(message),
                Err(_) => {}
            }
        }
        Resent::Unknown
    }
}

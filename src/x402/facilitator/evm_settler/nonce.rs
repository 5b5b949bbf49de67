//! The settler's transaction nonces: one counter per process, seeded from
//! the node, held while a transaction is signed, recorded and sent, so
//! concurrent settlements never take the same nonce nor leave a gap.

use alloy_primitives::Address;
use tokio::sync::{Mutex, MutexGuard};

use super::rpc::{Rpc, RpcError};

/// The next nonce to use, `None` until read from the node (again).
#[derive(Debug, Default)]
pub(super) struct NonceManager {
    next: Mutex<Option<u64>>,
}

/// The right to send with one nonce: others wait until it is used or given back.
pub(super) struct NonceLease<'a> {
    guard: MutexGuard<'a, Option<u64>>,
    nonce: u64,
}

impl NonceManager {
    /// Waits for the counter, seeding it from the node's pending count if unknown.
    pub(super) async fn lease(
        &self,
        rpc: &Rpc,
        account: Address,
    ) -> Result<NonceLease<'_>, RpcError> {
        let mut guard = self.next.lock().await;
        let nonce = match *guard {
            Some(nonce) => nonce,
            None => {
                let nonce = rpc.transaction_count(account, true).await?;
                *guard = Some(nonce);
                nonce
            }
        };
        Ok(NonceLease { guard, nonce })
    }
}

impl NonceLease<'_> {
    pub(super) fn nonce(&self) -> u64 {
        self.nonce
    }

    /// The node took the transaction: the next one uses the following nonce.
    pub(super) fn used(mut self) {
        *self.guard = Some(self.nonce + 1);
    }

    /// The node's count is ahead of ours ("nonce too low", another sender on
    /// the key) or unknown (a send whose fate is unclear): read it again.
    pub(super) async fn reseed(&mut self, rpc: &Rpc, account: Address) -> Result<(), RpcError> {
        *self.guard = None;
        let nonce = rpc.transaction_count(account, true).await?;
        *self.guard = Some(nonce);
        self.nonce = nonce;
        Ok(())
    }

    /// Nothing was sent: the nonce stays free (dropping the lease does the same).
    pub(super) fn unused(self) {}

    /// Whether a send went through is unknown: the next lease asks the node.
    pub(super) fn unknown(mut self) {
        *self.guard = None;
    }
}

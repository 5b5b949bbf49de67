//! A sent settlement's outcome: waiting for its receipt (replacing a stuck
//! transaction once), what a mined one answers (status and the asset's exact
//! `Transfer` log), and the pending answer of one whose outcome is unknown.

use std::time::Instant;

use alloy_primitives::{Address, B256, U256};

use super::records::SettlementRecord;
use super::rpc::{Receipt, RpcError};
use super::tx::{self, Fees, TRANSFER_TOPIC};
use super::{Admitted, EvmSettler, reasons};
use crate::x402::facilitator::api::{FacilitatorError, FacilitatorErrorKind};
use crate::x402::wire::types::SettleResponse;

/// How a settlement ends for the caller.
pub(super) type Settled = Result<SettleResponse, FacilitatorError>;

/// What one look at the chain found for a record.
pub(super) enum Outcome {
    /// Mined: the answer to give.
    Done(Settled),
    /// Nothing mined yet.
    Waiting,
}

pub(super) fn unavailable(error: impl std::fmt::Display) -> FacilitatorError {
    FacilitatorError::unavailable(error.to_string())
}

impl EvmSettler {
    /// Waits for a receipt until `deadline`; replaces a stuck transaction
    /// once and waits again; then pending.
    /// Once sent, no failure to learn the outcome is "unavailable".
    pub(super) async fn await_outcome(
        &self,
        admitted: &Admitted,
        record: SettlementRecord,
        deadline: Instant,
    ) -> Settled {
        let latest = record.latest();
        self.follow(admitted, record, deadline)
            .await
            .map_err(|error| still_pending(latest, error))
    }

    pub(super) async fn follow(
        &self,
        admitted: &Admitted,
        mut record: SettlementRecord,
        deadline: Instant,
    ) -> Settled {
        let inner = &*self.inner;
        if let Outcome::Done(answer) = self.wait(admitted, &record, deadline).await? {
            return answer;
        }
        // Stuck: the same nonce, higher fees, recorded before it is sent.
        let now = match inner.rpc.fees().await {
            Ok((base, tip)) => Fees::from_node(base, tip),
            Err(_) => Fees::from_node(0, 0),
        };
        let fees = Fees {
            max_fee_per_gas: record.max_fee_per_gas,
            max_priority_fee_per_gas: record.max_priority_fee_per_gas,
        }
        .bumped(now);
        let signed = tx::sign(
            &inner.key,
            inner.chain_id,
            record.tx_nonce,
            record.gas_limit,
            fees,
            admitted.target,
            admitted.calldata.clone(),
        );
        let before = record.clone();
        record.transactions.push(signed.hash);
        record.raw = signed.raw;
        record.max_fee_per_gas = fees.max_fee_per_gas;
        record.max_priority_fee_per_gas = fees.max_priority_fee_per_gas;
        inner
            .records
            .update(&admitted.key, &record)
            .await
            .map_err(unavailable)?;
        #[cfg(feature = "tracing")]
        tracing::warn!(
            transaction = %signed.hash,
            nonce = record.tx_nonce,
            "settlement transaction stuck: replaced with the same nonce and higher fees"
        );
        let _awaited = inner.watch.want(&record.transactions);
        inner.watch.sending(record.tx_nonce, &record.raw);
        if let Err(RpcError::Node { .. }) = inner.rpc.send_raw(&record.raw).await {
            inner.watch.sending(before.tx_nonce, &before.raw);
            // Refused (the first one was mined meanwhile: "nonce too low";
            // or underpriced): never sent, so no longer a candidate.
            record = before;
            inner
                .records
                .update(&admitted.key, &record)
                .await
                .map_err(unavailable)?;
        }
        let deadline = Instant::now() + inner.receipt_timeout;
        if let Outcome::Done(answer) = self.wait(admitted, &record, deadline).await? {
            return answer;
        }
        Err(FacilitatorError::pending(
            format!("{:#x}", record.latest()),
            format!(
                "no receipt within {:?}, after one replacement",
                inner.receipt_timeout
            ),
        ))
    }

    /// Waits, with the block watch, until one of the record's transactions
    /// is mined (and confirmed) or `deadline` passes.
    pub(super) async fn wait(
        &self,
        admitted: &Admitted,
        record: &SettlementRecord,
        deadline: Instant,
    ) -> Result<Outcome, FacilitatorError> {
        match self.watch_receipt(&record.transactions, deadline).await {
            Some(receipt) => self
                .conclude(admitted, record, &receipt)
                .await
                .map(Outcome::Done),
            None => Ok(Outcome::Waiting),
        }
    }

    /// One look at the receipts of the record's transactions.
    pub(super) async fn look(
        &self,
        admitted: &Admitted,
        record: &SettlementRecord,
    ) -> Result<Outcome, FacilitatorError> {
        for hash in record.transactions.iter().rev() {
            let Some(receipt) = self.inner.rpc.receipt(*hash).await.map_err(unavailable)? else {
                continue;
            };
            if self.inner.confirmations > 0 {
                let head = self.inner.rpc.block_number().await.map_err(unavailable)?;
                if head
                    < receipt
                        .block_number
                        .saturating_add(self.inner.confirmations)
                {
                    return Ok(Outcome::Waiting);
                }
            }
            return self
                .conclude(admitted, record, &receipt)
                .await
                .map(Outcome::Done);
        }
        Ok(Outcome::Waiting)
    }

    /// The answer a mined transaction gives; the record says so.
    pub(super) async fn conclude(
        &self,
        admitted: &Admitted,
        record: &SettlementRecord,
        receipt: &Receipt,
    ) -> Result<Settled, FacilitatorError> {
        let inner = &*self.inner;
        // Mined: its nonce is used, whatever the outcome.
        inner.watch.done_with(record.tx_nonce);
        let failed = |reason: &'static str, message: String| {
            Ok(SettleResponse {
                error_message: Some(message),
                transaction: String::new(),
                ..SettleResponse::failure(
                    inner.network.clone(),
                    reason,
                    Some(admitted.payer.clone()),
                )
            })
        };
        trace_decision!(
            INFO,
            "x402",
            payer = admitted.payer.as_str(),
            transaction = %receipt.transaction,
            gas_used = receipt.gas_used,
            outcome = if receipt.success { "mined" } else { "reverted" },
        );
        if !receipt.success {
            // The simulation passed and the settler paid for a revert: the
            // payer (and a contract payer's code anywhere) is refused a while.
            let identities =
                super::standing::identities(admitted.transfer.from, admitted.code_hash);
            inner
                .standings
                .reverted(identities, inner.clock.now_unix_secs());
            inner
                .records
                .remove(&admitted.key)
                .await
                .map_err(unavailable)?;
            return Ok(failed(
                admitted.reverted_reason(),
                format!("transaction {:#x} reverted", receipt.transaction),
            ));
        }
        if !has_transfer_log(receipt, admitted) {
            return Ok(failed(
                reasons::TRANSFER_EVENT_MISMATCH,
                format!(
                    "transaction {:#x} succeeded without the asset's Transfer of the payment",
                    receipt.transaction
                ),
            ));
        }
        let mut mined = record.clone();
        mined.mined = Some(receipt.transaction);
        inner
            .records
            .update(&admitted.key, &mined)
            .await
            .map_err(unavailable)?;
        Ok(Ok(self.answer(admitted, receipt.transaction)))
    }

    pub(super) fn answer(&self, admitted: &Admitted, transaction: B256) -> SettleResponse {
        SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            payer: Some(admitted.payer.clone()),
            transaction: format!("{transaction:#x}"),
            network: self.inner.network.clone(),
            amount: Some(crate::x402::wire::AtomicAmount::new(
                admitted.transfer.value,
            )),
            extensions: None,
        }
    }
}
/// `error` met after `transaction` was sent: the outcome is not known, so pending.
pub(super) fn still_pending(transaction: B256, error: FacilitatorError) -> FacilitatorError {
    if error.kind() == &FacilitatorErrorKind::Pending {
        return error;
    }
    FacilitatorError::pending(format!("{transaction:#x}"), error.detail())
}

/// Landed, but whether this caller is the one to be told cannot be read
/// now: pending, so it asks again (never a second success, never a release).
pub(super) fn still_pending_text(
    transaction: &str,
    error: impl std::fmt::Display,
) -> FacilitatorError {
    FacilitatorError::pending(transaction, error.to_string())
}

/// Whether the receipt holds the asset's `Transfer(from, to, value)` with the exact values.
fn has_transfer_log(receipt: &Receipt, admitted: &Admitted) -> bool {
    let topic = |address: Address| B256::left_padding_from(address.as_slice());
    let value = U256::from(admitted.transfer.value).to_be_bytes::<32>();
    receipt.logs.iter().any(|log| {
        log.address == admitted.transfer.token.asset
            && log.topics.len() == 3
            && log.topics[0] == TRANSFER_TOPIC
            && log.topics[1] == topic(admitted.transfer.from)
            && log.topics[2] == topic(admitted.transfer.to)
            && log.data.as_slice() == value.as_slice()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::facilitator::evm_settler::SettlementKey;
    use crate::x402::facilitator::evm_settler::rpc::Log;
    use crate::x402::facilitator::ledger::Transfer;
    use crate::x402::wire::TokenId;

    fn admitted() -> Admitted {
        let transfer = Transfer {
            token: TokenId::base_sepolia_usdc(),
            from: Address::repeat_byte(0xf3),
            to: Address::repeat_byte(0x70),
            value: 10_000,
            nonce: B256::repeat_byte(0x11),
            valid_before_unix_secs: 1_750_000_300,
        };
        Admitted {
            key: SettlementKey {
                chain_id: transfer.token.chain_id,
                asset: transfer.token.asset,
                from: transfer.from,
                nonce: transfer.nonce,
            },
            transfer,
            payer: String::new(),
            code_hash: None,
            target: transfer.token.asset,
            calldata: Vec::new(),
            scheme: crate::x402::facilitator::evm_settler::Scheme::Exact,
        }
    }

    fn receipt(log: Log) -> Receipt {
        Receipt {
            gas_used: 80_000,
            transaction: B256::ZERO,
            success: true,
            block_number: 1,
            logs: vec![log],
        }
    }

    fn transfer_log(asset: Address, from: Address, to: Address, value: u64) -> Log {
        let topic = |address: Address| B256::left_padding_from(address.as_slice());
        Log {
            address: asset,
            topics: vec![TRANSFER_TOPIC, topic(from), topic(to)],
            data: U256::from(value).to_be_bytes::<32>().to_vec(),
        }
    }

    #[test]
    fn only_the_assets_own_exact_transfer_log_counts() {
        let payment = admitted();
        let (asset, from, to) = (
            payment.transfer.token.asset,
            payment.transfer.from,
            payment.transfer.to,
        );
        assert!(has_transfer_log(
            &receipt(transfer_log(asset, from, to, 10_000)),
            &payment
        ));
        // Another contract's look-alike event, another amount, another recipient.
        let other = Address::repeat_byte(0x99);
        assert!(!has_transfer_log(
            &receipt(transfer_log(other, from, to, 10_000)),
            &payment
        ));
        assert!(!has_transfer_log(
            &receipt(transfer_log(asset, from, to, 9_999)),
            &payment
        ));
        assert!(!has_transfer_log(
            &receipt(transfer_log(asset, from, other, 10_000)),
            &payment
        ));
    }
}

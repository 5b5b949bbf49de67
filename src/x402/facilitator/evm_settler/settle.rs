//! Settling: estimate, record, send, wait for the receipt, replace a stuck
//! transaction with the same nonce, and answer a repeated settle of the same
//! authorization from its record.

use std::time::{Duration, Instant};

use alloy_primitives::B256;

use super::outcome::{Outcome, Settled, still_pending, still_pending_text, unavailable};
use super::records::{SettlementKey, SettlementRecord};
use super::rpc::{CallRequest, RpcError, already_known, nonce_is_used};
use super::send::Resent;
use super::simulate::Simulation;
use super::tx::{self, Fees};
use super::{Admitted, EvmSettler, Stop, payment_id};
use crate::x402::facilitator::IdempotencyKey;
use crate::x402::facilitator::api::{FacilitatorError, FacilitatorErrorKind, FacilitatorRequest};
use crate::x402::wire::types::SettleResponse;

/// Gas estimate margin, in percent.
const GAS_MARGIN_PERCENT: u64 = 25;

/// Attempts at sending when the node says the nonce is already used.
const SEND_ATTEMPTS: usize = 3;

/// How long a settle waits for another one's claim of the same
/// authorization to hold its signed transaction (a round trip or two).
const PREPARING_WAIT: Duration = Duration::from_secs(5);

/// Between two looks at such a claim.
const PREPARING_POLL: Duration = Duration::from_millis(25);

impl EvmSettler {
    pub(super) async fn settle_payment(&self, request: &FacilitatorRequest) -> Settled {
        let network = request.payment_requirements().network.clone();
        let failure = |reason: &'static str, message: Option<String>, payer: Option<String>| {
            Ok(SettleResponse {
                error_message: message,
                ..SettleResponse::failure(network.clone(), reason, payer)
            })
        };
        let caller = request.idempotency_key().map(IdempotencyKey::digest);
        let admitted = match self.admit(request).await {
            Ok(admitted) => admitted,
            Err(Stop::Refused {
                reason,
                message,
                payer,
            }) => {
                // A retry of a settled payment can be past its window now:
                // its record still answers.
                if let Some(answer) = self.answer_from_record_only(request, caller).await {
                    return answer;
                }
                return failure(reason, message, payer);
            }
            Err(Stop::Unavailable(error)) => return Err(error),
        };
        self.settle_admitted(&admitted, caller).await
    }

    /// Settles a payment its scheme's checks admitted: once per
    /// authorization, recorded before it is sent, its record answering repeats.
    pub(super) async fn settle_admitted(
        &self,
        admitted: &Admitted,
        caller: Option<B256>,
    ) -> Settled {
        let records = &self.inner.records;
        let payment = payment_id(&admitted.calldata);
        // A copy is refused at once, without waiting for the settlement it copies.
        if let Some(record) = records.get(&admitted.key).await.map_err(unavailable)?
            && let Some(refusal) = self.refuse_copy(admitted, &record, payment, caller)
        {
            return refusal;
        }
        let lock = super::lock_in_flight(&self.inner.in_flight, admitted.key);
        let _guard = lock.lock().await;
        if let Some(record) = records.get(&admitted.key).await.map_err(unavailable)? {
            if let Some(refusal) = self.refuse_copy(admitted, &record, payment, caller) {
                return refusal;
            }
            // `None`: the recorded transaction cannot land, settle afresh.
            if let Some(answer) = self.reconcile(admitted, record).await? {
                return self.tell_once(admitted, caller, answer).await;
            }
        }
        let answer = self.settle_fresh(admitted, payment, caller).await;
        self.tell_once(admitted, caller, answer).await
    }

    /// The refusal of a `/settle` that is not the recorded settlement's
    /// caller: another payment with the same authorization nonce, or the
    /// same payment under another (or no) `Idempotency-Key` than the first
    /// `/settle`'s. `None`: it may go on.
    fn refuse_copy(
        &self,
        admitted: &Admitted,
        record: &SettlementRecord,
        payment: B256,
        caller: Option<B256>,
    ) -> Option<Settled> {
        if record.payment != payment {
            return Some(self.refused_as_used(
                admitted,
                "another payment with this authorization nonce was settled".into(),
            ));
        }
        match record.caller {
            Some(first) if caller != Some(first) => Some(
                self.refused_as_used(
                    admitted,
                    match record.mined.or_else(|| record.transactions.last().copied()) {
                        Some(transaction) => settled_by(transaction),
                        None => "the authorization is being settled by another /settle; \
                             only its Idempotency-Key reads the outcome"
                            .to_owned(),
                    },
                ),
            ),
            _ => None,
        }
    }

    /// A used authorization's refusal, as the official facilitator words it.
    fn refused_as_used(&self, admitted: &Admitted, message: String) -> Settled {
        Ok(SettleResponse {
            error_message: Some(message),
            ..SettleResponse::failure(
                self.inner.network.clone(),
                admitted.used_reason(),
                Some(admitted.payer.clone()),
            )
        })
    }

    /// At most one `success: true` per authorization: to the caller whose
    /// `Idempotency-Key` the record holds, as often as it asks; else, when
    /// the first `/settle` named no key, to the first that learns it landed.
    /// A pending or failed answer uses nothing up.
    async fn tell_once(
        &self,
        admitted: &Admitted,
        caller: Option<B256>,
        answer: Settled,
    ) -> Settled {
        let Ok(settled) = &answer else { return answer };
        if !settled.success {
            return answer;
        }
        let records = &self.inner.records;
        let owner = records
            .get(&admitted.key)
            .await
            .map_err(|error| still_pending_text(&settled.transaction, error))?
            .and_then(|record| record.caller);
        let first = match owner {
            Some(owner) => caller == Some(owner),
            None => records
                .claim_answer(&admitted.key, admitted.transfer.valid_before_unix_secs)
                .await
                .map_err(|error| still_pending_text(&settled.transaction, error))?,
        };
        if first {
            return answer;
        }
        let message = format!(
            "the authorization was settled by transaction {}",
            settled.transaction
        );
        self.refused_as_used(admitted, message)
    }

    /// A settle whose payment no longer passes the offline checks (its
    /// window closed, or nearly, after it was sent): what its record says
    /// (mined, still pending), or `None` if nothing of it was sent or can land.
    async fn answer_from_record_only(
        &self,
        request: &FacilitatorRequest,
        caller: Option<B256>,
    ) -> Option<Settled> {
        let admitted = self.exact_unchecked(request)?;
        self.answer_from_record(&admitted, caller).await
    }

    /// An exact payment as its record knows it, without its checks (only
    /// read, never simulated nor sent again).
    fn exact_unchecked(&self, request: &FacilitatorRequest) -> Option<Admitted> {
        let evm = request.exact_evm()?;
        let asset =
            crate::x402::wire::eip712::parse_evm_address(&request.payment_requirements().asset)?;
        let transfer = crate::x402::facilitator::ledger::Transfer {
            token: crate::x402::wire::TokenId {
                chain_id: self.inner.chain_id,
                asset,
            },
            from: evm.from,
            to: evm.to,
            value: evm.value.units(),
            nonce: evm.nonce,
            valid_before_unix_secs: evm.valid_before,
        };
        let admitted = Admitted {
            key: SettlementKey {
                chain_id: self.inner.chain_id,
                asset,
                from: evm.from,
                nonce: evm.nonce,
            },
            calldata: tx::transfer_calldata(
                &transfer,
                evm.valid_after,
                &super::raw_signature(request)?,
            ),
            payer: request
                .payer_text()
                .map_or_else(|| evm.from.to_checksum(None), str::to_owned),
            transfer,
            // Past its window it is only read, never simulated nor sent again.
            code_hash: None,
            target: asset,
            scheme: super::Scheme::Exact,
        };
        Some(admitted)
    }

    /// What the record of `admitted` (a payment past its checks) says, if
    /// anything of it was sent: mined, still pending; `None` otherwise.
    pub(super) async fn answer_from_record(
        &self,
        admitted: &Admitted,
        caller: Option<B256>,
    ) -> Option<Settled> {
        let lock = super::lock_in_flight(&self.inner.in_flight, admitted.key);
        let _guard = lock.lock().await;
        let record = self.inner.records.get(&admitted.key).await.ok()??;
        if record.payment != payment_id(&admitted.calldata) {
            return None;
        }
        if let Some(refusal) =
            self.refuse_copy(admitted, &record, payment_id(&admitted.calldata), caller)
        {
            return Some(refusal);
        }
        let answer = match self.reconcile(admitted, record).await {
            Ok(answer) => answer?,
            Err(error) => Err(error),
        };
        Some(self.tell_once(admitted, caller, answer).await)
    }

    /// Estimate (one call: the simulation, as it will be sent, and the gas
    /// cap's check), take a nonce, sign, record, send, wait. No lock is held
    /// across the node's round trips: concurrent settlements send in parallel.
    async fn settle_fresh(
        &self,
        admitted: &Admitted,
        payment: B256,
        caller: Option<B256>,
    ) -> Settled {
        let inner = &*self.inner;
        let network = inner.network.clone();
        let refused = |reason: &'static str, message: String| {
            Ok(SettleResponse {
                error_message: Some(message),
                ..SettleResponse::failure(network.clone(), reason, Some(admitted.payer.clone()))
            })
        };
        // A broke settler fails the estimate itself, in words a node may
        // make look like the payer's: say why first (read at most every 2 s).
        self.check_gas_money().await?;
        let call = self.call_as_sent(admitted).await?;
        let fees = call.fees.unwrap_or(Fees::from_node(0, 0));
        let gas = match inner.rpc.estimate_gas(&call).await {
            // The margin covers state that moves before it is mined; the cap bounds it.
            Ok(gas) => gas
                .saturating_add(gas * GAS_MARGIN_PERCENT / 100)
                .min(inner.gas_cap),
            Err(error) => {
                let verdict = self.verdict(admitted, Err(error)).await;
                if let Simulation::Refused { message, .. } = &verdict
                    && message.to_ascii_lowercase().contains("gas")
                {
                    // Some nodes cap the estimate at what the settler's
                    // balance buys: its gas money, asked now, tells which.
                    self.check_gas_money_since(Duration::ZERO).await?;
                }
                return match verdict {
                    Simulation::Refused { reason, message } => {
                        self.payer_failed(admitted, reason);
                        refused(reason, message)
                    }
                    Simulation::Unavailable(detail) => Err(FacilitatorError::unavailable(detail)),
                    Simulation::Passes => Err(FacilitatorError::unavailable("gas estimate failed")),
                };
            }
        };
        let address = inner.key.address();
        // The authorization is claimed before a nonce is taken: of several
        // processes settling it at once one takes a nonce, and the copies
        // losing the race leave no nonce behind to fill.
        let mut record = SettlementRecord {
            payment,
            transactions: Vec::new(),
            raw: Vec::new(),
            tx_nonce: 0,
            gas_limit: gas,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            valid_before: admitted.transfer.valid_before_unix_secs,
            mined: None,
            caller,
        };
        if !inner
            .records
            .begin(&admitted.key, &record)
            .await
            .map_err(unavailable)?
        {
            // Another process recorded a settlement of it first.
            return self.theirs(admitted, payment, caller).await;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let nonce = match self.take_nonce().await {
                Ok(nonce) => nonce,
                Err(error) => return self.abandon(admitted, error).await,
            };
            let signed = tx::sign(
                &inner.key,
                inner.chain_id,
                nonce,
                gas,
                fees,
                admitted.target,
                admitted.calldata.clone(),
            );
            record.transactions = vec![signed.hash];
            record.raw = signed.raw;
            record.tx_nonce = nonce;
            // Watched from now on: a refused send before it sees that this
            // one waits behind its nonce, and fills it.
            inner.watch.sending(nonce, &record.raw);
            if let Err(error) = inner.records.update(&admitted.key, &record).await {
                self.never_sent(nonce).await;
                return self.abandon(admitted, unavailable(error)).await;
            }
            // Awaited before it is sent: a block mined before the send's
            // answer arrives is read for it all the same.
            let _awaited = inner.watch.want(&record.transactions);
            let deadline = Instant::now() + inner.receipt_timeout;
            let refusal = match self.send(&record).await {
                Ok(Some(receipt)) => {
                    return self
                        .conclude(admitted, &record, &receipt)
                        .await
                        .unwrap_or_else(|error| Err(still_pending(record.latest(), error)));
                }
                Ok(None) => return self.await_outcome(admitted, record, deadline).await,
                Err(RpcError::Node { message, .. }) if already_known(&message) => {
                    return self.await_outcome(admitted, record, deadline).await;
                }
                Err(RpcError::Node { message, .. }) => message,
                // Sent or not is unknown: the same bytes again are harmless.
                Err(error) => match self.send_again(&record.raw).await {
                    Resent::Sent => return self.await_outcome(admitted, record, deadline).await,
                    Resent::Refused(message) => message,
                    // Still unknown: the record and the nonce stay; the
                    // transaction is sent again if the chain stalls on it.
                    Resent::Unknown => {
                        return Err(FacilitatorError::pending(
                            format!("{:#x}", record.latest()),
                            format!("sending it: {error}"),
                        ));
                    }
                },
            };
            // The node refused it: nothing was sent.
            if nonce_is_used(&refusal) {
                // Another sender used the key: catch up with the node (the
                // nonce is not ours to give back), and sign again, the
                // record back to "being prepared" meanwhile.
                inner.watch.done_with(nonce);
                if attempt < SEND_ATTEMPTS {
                    record.transactions.clear();
                    record.raw.clear();
                    let caught_up = match inner.records.update(&admitted.key, &record).await {
                        Ok(()) => self.catch_up_with_node().await,
                        Err(error) => Err(unavailable(error)),
                    };
                    if let Err(error) = caught_up {
                        return self.abandon(admitted, error).await;
                    }
                    continue;
                }
            } else {
                self.never_sent(nonce).await;
            }
            let lower = refusal.to_ascii_lowercase();
            let detail = if lower.contains("insufficient funds") {
                format!("settler {address} cannot pay for gas: {refusal}")
            } else {
                format!("the node refused the settlement transaction: {refusal}")
            };
            return self
                .abandon(admitted, FacilitatorError::unavailable(detail))
                .await;
        }
    }

    /// Nothing of `admitted` was sent: its record goes, so a retry settles
    /// afresh; `error` is the answer.
    async fn abandon(&self, admitted: &Admitted, error: FacilitatorError) -> Settled {
        self.inner
            .records
            .remove(&admitted.key)
            .await
            .map_err(unavailable)?;
        Err(error)
    }

    /// A record another settlement claimed and has not signed yet: waits
    /// (bounded) until it holds a transaction, or is abandoned (`None`).
    async fn prepared_elsewhere(
        &self,
        admitted: &Admitted,
        record: SettlementRecord,
    ) -> Result<Option<SettlementRecord>, FacilitatorError> {
        let inner = &*self.inner;
        let deadline = Instant::now() + PREPARING_WAIT;
        let mut record = Some(record);
        while let Some(preparing) = record.take_if(|record| record.transactions.is_empty()) {
            if inner.clock.now_unix_secs() >= preparing.valid_before {
                // Nothing can land any more: the claim is moot.
                inner
                    .records
                    .remove(&admitted.key)
                    .await
                    .map_err(unavailable)?;
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Err(FacilitatorError::pending(
                    String::new(),
                    "another settlement of this authorization is being prepared",
                ));
            }
            tokio::time::sleep(PREPARING_POLL).await;
            record = inner
                .records
                .get(&admitted.key)
                .await
                .map_err(unavailable)?;
            if record.is_none() {
                return Ok(None);
            }
        }
        Ok(record)
    }

    /// The settlement another process recorded first: its answer.
    async fn theirs(&self, admitted: &Admitted, payment: B256, caller: Option<B256>) -> Settled {
        let Some(theirs) = self
            .inner
            .records
            .get(&admitted.key)
            .await
            .map_err(unavailable)?
        else {
            return Err(FacilitatorError::unavailable("settlement record vanished"));
        };
        if let Some(refusal) = self.refuse_copy(admitted, &theirs, payment, caller) {
            return refusal;
        }
        match self.reconcile(admitted, theirs).await? {
            Some(answer) => answer,
            None => Err(FacilitatorError::unavailable(
                "a concurrent settlement was abandoned",
            )),
        }
    }

    /// A recorded settlement: its answer, or `None` when it can no longer
    /// land and nothing moved (settle afresh). Something sent may have
    /// landed: a node or store that cannot answer makes it pending, never
    /// unavailable (which would release the authorization).
    async fn reconcile(
        &self,
        admitted: &Admitted,
        record: SettlementRecord,
    ) -> Result<Option<Settled>, FacilitatorError> {
        // A claim not signed yet names no transaction: its pending names none.
        let latest = record.transactions.last().copied();
        self.reconcile_recorded(admitted, record)
            .await
            .map_err(|error| match latest {
                Some(latest) => still_pending(latest, error),
                None if error.kind() == &FacilitatorErrorKind::Pending => error,
                None => still_pending_text("", error),
            })
    }

    async fn reconcile_recorded(
        &self,
        admitted: &Admitted,
        record: SettlementRecord,
    ) -> Result<Option<Settled>, FacilitatorError> {
        let inner = &*self.inner;
        let Some(record) = self.prepared_elsewhere(admitted, record).await? else {
            return Ok(None);
        };
        if let Some(mined) = record.mined {
            return Ok(Some(Ok(self.answer(admitted, mined))));
        }
        if let Outcome::Done(answer) = self.look(admitted, &record).await? {
            return Ok(Some(answer));
        }
        let address = inner.key.address();
        let confirmed = inner
            .rpc
            .transaction_count(address, false)
            .await
            .map_err(unavailable)?;
        let used = self.authorization_used(admitted).await?;
        if confirmed > record.tx_nonce {
            // Its nonce went to a transaction whose receipt is not ours.
            if used {
                // Landed, but no receipt of ours says so (lost, or not ours):
                // never release what may have been charged.
                return Err(FacilitatorError::pending(
                    format!("{:#x}", record.latest()),
                    "the authorization is used but no receipt of the recorded transactions is available",
                ));
            }
            inner
                .records
                .remove(&admitted.key)
                .await
                .map_err(unavailable)?;
            return Ok(None);
        }
        if !used && inner.clock.now_unix_secs() >= record.valid_before {
            inner
                .records
                .remove(&admitted.key)
                .await
                .map_err(unavailable)?;
            return Ok(Some(Ok(SettleResponse {
                error_message: Some(
                    "the recorded transaction was not mined before validBefore".into(),
                ),
                ..SettleResponse::failure(
                    inner.network.clone(),
                    admitted.expired_reason(),
                    Some(admitted.payer.clone()),
                )
            })));
        }
        // Still pending: make sure the node has it, then wait as a first send would.
        inner.watch.sending(record.tx_nonce, &record.raw);
        let _ = inner.rpc.send_raw(&record.raw).await;
        let deadline = Instant::now() + inner.receipt_timeout;
        Ok(Some(self.await_outcome(admitted, record, deadline).await))
    }

    async fn authorization_used(&self, admitted: &Admitted) -> Result<bool, FacilitatorError> {
        if let super::Scheme::Upto { permit2_nonce } = admitted.scheme {
            return self
                .permit2_nonce_used(admitted.transfer.from, permit2_nonce)
                .await;
        }
        let data =
            tx::authorization_state_calldata(admitted.transfer.from, admitted.transfer.nonce);
        let answer = self
            .inner
            .rpc
            .eth_call(&CallRequest::new(
                self.inner.key.address(),
                admitted.transfer.token.asset,
                &data,
            ))
            .await
            .map_err(unavailable)?;
        Ok(answer.iter().any(|&byte| byte != 0))
    }
}

/// A copy's `errorMessage`: the transaction that settles the authorization,
/// so its caller can reconcile.
fn settled_by(transaction: B256) -> String {
    format!(
        "the authorization is settled (or being settled) by transaction {transaction:#x}; \
         only the Idempotency-Key of the first /settle reads its outcome"
    )
}

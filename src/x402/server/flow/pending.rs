//! A settlement first reported pending, asked about again on the resend of
//! the same payment: a settler answers for the transaction it broadcast; an
//! HTTP facilitator settles or refuses.

use std::sync::Arc;

use super::amount::SettleAmount;
use super::kept::{Keeper, kept_answer};
use super::payment::{ClaimGuard, Payment};
use super::settle::{Outcome, SettleJob, settle_header};
use crate::x402::server::answers::KeptAnswer;
use crate::x402::server::config::Config;
use crate::x402::server::receipt::PaymentReceipt;
use crate::x402::server::replay::SpentAuthorization;
use crate::x402::server::stream::receipt_event;
use crate::x402::wire::codec;
use crate::x402::wire::types::SettleResponse;

/// What asking again found.
pub(crate) enum Resolved {
    /// Landed: the kept answer, with its receipt.
    Kept(KeptAnswer),
    /// Landed, nothing kept (too large, or lost with a replica's memory):
    /// served again, charged once, with this receipt and settlement.
    ServeAgain(PaymentReceipt, SettleResponse),
    /// Still pending, failed or unavailable: nothing to serve.
    Unsettled(Outcome),
}

/// Asks the facilitator again about `payment`, whose settlement `settling`
/// was reported pending. Landed → its kept answer (kept on), or served
/// again; still pending → pending again; failed → released, nothing kept.
pub(crate) async fn resolve(
    config: &Arc<Config>,
    payment: Box<Payment>,
    settling: SpentAuthorization,
) -> Resolved {
    let pending = settling.receipt;
    let receipt = PaymentReceipt::new(
        pending.payer().to_owned(),
        pending.amount(),
        pending.network().clone(),
        pending.authorization_id().to_owned(),
    );
    // The transaction already broadcast, kept if the facilitator cannot answer now.
    let receipt = match pending.transaction() {
        Some(transaction) => receipt.settled(transaction.to_owned()),
        None => receipt,
    };
    trace_decision!(
        INFO,
        "x402",
        payer = receipt.payer(),
        transaction = pending.transaction(),
        outcome = "resolving",
    );
    let kept = kept_answer(config, &payment).await;
    let payer = receipt.payer().to_owned();
    // A resend that goes away mid-settlement must not give the record back.
    let claim = ClaimGuard::new(config, &payment.key).kept_on_drop();
    // What was decided when the answer ended (a metered payment's amount, not
    // its ceiling): the amount the first `/settle` asked for, asked again.
    let amount = SettleAmount::default();
    amount.set(pending.amount());
    let job = SettleJob {
        config: config.clone(),
        payment,
        claim,
        receipt,
        amount,
        // No transaction known: the first `/settle` was sent and its answer lost.
        after_lost_answer: pending.transaction().is_none(),
        resolving: true,
    };
    let (outcome, payment) = job.run().await;
    let keeper = Keeper::new(config.clone(), payment, None, &payer);
    match outcome {
        Outcome::Settled(settlement, receipt) => {
            let Some(mut answer) = kept else {
                return Resolved::ServeAgain(receipt, settlement);
            };
            if answer.is_event_stream() {
                answer = answer.with_appended(&receipt_event(&codec::encode(&settlement)));
            }
            if let Some(value) = settle_header(&settlement)
                .as_ref()
                .and_then(|v| v.to_str().ok())
            {
                answer = answer.with_payment_response(value);
            }
            keeper.keep_resolved(&answer).await;
            Resolved::Kept(answer)
        }
        Outcome::Failed(..) => {
            keeper.forget().await;
            Resolved::Unsettled(outcome)
        }
        // Never while resolving (an unavailable facilitator keeps it pending).
        Outcome::Pending(..) | Outcome::Unavailable(..) => Resolved::Unsettled(outcome),
    }
}

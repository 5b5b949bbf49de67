//! Settling a served payment once, for the amount decided when its answer
//! ended: the claim kept as spent (or as settling while the outcome is not
//! known), or given back.

use std::sync::Arc;

use http::HeaderValue;

use super::amount::{self, SettleAmount};
use super::payment::{ClaimGuard, Payment, payment_outcome};
#[cfg(feature = "siwx")]
use super::sign_in::entitle;
use crate::envelope::ErrorCode;
use crate::metrics;
use crate::x402::facilitator::{FacilitatorErrorKind, code_for_reason};
use crate::x402::server::config::Config;
use crate::x402::server::receipt::{PaymentReceipt, SettledPayment};
use crate::x402::server::replay::SpentAuthorization;
use crate::x402::wire::codec;
use crate::x402::wire::types::SettleResponse;

/// Seconds a spent authorization is remembered at least, whatever its
/// `validBefore` (for paid replay), unless its offer's `maxTimeoutSeconds` is
/// shorter: then that long (a server quoting short timeouts keeps its replay
/// store that short).
const MIN_SPENT_RETENTION_SECS: u64 = 120;

/// The `errorReason` of a settlement whose outcome is not known yet (its
/// `transaction` names the broadcast transaction when one is known): the
/// payer is told to resend the same payment for the outcome.
pub const SETTLEMENT_PENDING: &str = "settlement_pending";

/// A verified, served payment, its claim held, settled once.
pub(super) struct SettleJob {
    pub(super) config: Arc<Config>,
    pub(super) payment: Box<Payment>,
    pub(super) claim: ClaimGuard,
    pub(super) receipt: PaymentReceipt,
    /// What the inner call named to settle (read for a scheme that
    /// authorises a maximum).
    pub(super) amount: SettleAmount,
    /// Asking again after a `/settle` whose answer was lost: a refusal for a
    /// used authorization means that first settlement landed (the signed
    /// authorization pays only `payTo`, only this amount).
    pub(super) after_lost_answer: bool,
    /// Asking again about a settlement first reported pending: the transfer
    /// may still land, so a facilitator that cannot answer keeps it pending.
    pub(super) resolving: bool,
}

/// How a settlement ended.
pub(crate) enum Outcome {
    /// Landed: the authorization is marked spent and the hook told.
    Settled(SettleResponse, PaymentReceipt),
    /// Refused or failed: the claim was given back.
    Failed(SettleResponse, PaymentReceipt),
    /// Not known yet (the facilitator reported it pending): the claim is kept
    /// as a settling record until the authorization expires. The settlement
    /// says [`SETTLEMENT_PENDING`] and names the transaction if known.
    Pending(SettleResponse, PaymentReceipt),
    /// The facilitator could not be asked (nothing consumed, the operator's
    /// fault, e.g. a settler without gas): the claim was given back, so the
    /// same payment works once it can settle. The settlement says why.
    Unavailable(SettleResponse, PaymentReceipt),
}

/// Until when a settled (or settling) authorization is remembered: at least
/// its `validBefore`, and a floor for paid replay.
pub(super) fn spent_keep_until(config: &Config, payment: &Payment) -> u64 {
    let now = config.clock.now_unix_secs();
    let floor_secs = MIN_SPENT_RETENTION_SECS.min(payment.offer().max_timeout_seconds);
    payment
        .facilitation
        .exact_evm()
        .map_or(now, |evm| evm.valid_before)
        .max(now.saturating_add(floor_secs))
}

impl SettleJob {
    /// Settles; on success marks the authorization spent and tells the hook;
    /// on failure gives the claim back; when pending keeps it as settling.
    /// Gives the payment back with the outcome: what an answer is kept
    /// under is derived from it only when one is kept.
    pub(super) async fn run(self) -> (Outcome, Box<Payment>) {
        let Self {
            config,
            payment,
            claim,
            receipt,
            amount,
            after_lost_answer,
            resolving,
        } = self;
        // Boxed: its future is over 2 KiB, and unboxed it was copied whole
        // into each future that awaits it, up to the paid request's own.
        let outcome = Box::pin(settle(
            config,
            &payment,
            claim,
            receipt,
            &amount,
            after_lost_answer,
            resolving,
        ))
        .await;
        (outcome, payment)
    }
}

/// [`SettleJob::run`]'s work.
async fn settle(
    config: Arc<Config>,
    payment: &Payment,
    claim: ClaimGuard,
    receipt: PaymentReceipt,
    amount: &SettleAmount,
    after_lost_answer: bool,
    resolving: bool,
) -> Outcome {
    let offer = payment.offer();
    // Decided now, when the answer ended: what was signed, or what was used.
    let decision = amount::decide(offer, amount, config.units_of(offer));
    if let Some(_named) = decision.overrun {
        trace_warn!(
            named = %_named,
            authorised = %offer.amount,
            "the answer named more than was authorised: the authorised amount is settled",
        );
        config.count_overrun();
    }
    let metered;
    let (facilitation, receipt) = if decision.amount == offer.amount {
        (&payment.facilitation, receipt)
    } else {
        metered = payment.facilitation.with_settled_amount(decision.amount);
        (&metered, receipt.with_amount(decision.amount))
    };
    let keep_until = spent_keep_until(&config, payment);
    let unsettled = SpentAuthorization {
        receipt,
        fingerprint: payment.fingerprint,
    };
    config
        .nonce_store
        .settling(&payment.key, &unsettled, keep_until);
    let receipt = unsettled.receipt;
    let payer = Some(receipt.payer().to_owned()).filter(|payer| !payer.is_empty());
    let settling = metrics::Started::now();
    let settled = config.facilitator.settle(facilitation).await;
    settling.observe(metrics::X402_SETTLE_DURATION_SECONDS);
    let settlement = match settled {
        Ok(settlement) => settlement,
        Err(error)
            if *error.kind() == FacilitatorErrorKind::Pending
                || (resolving && *error.kind() == FacilitatorErrorKind::Unavailable) =>
        {
            let transaction = error
                .transaction()
                .or(receipt.transaction())
                .unwrap_or_default()
                .to_owned();
            trace_decision!(
                WARN,
                "x402",
                payer = receipt.payer(),
                amount = %receipt.amount(),
                network = %receipt.network(),
                transaction = transaction.as_str(),
                outcome = "settlement pending",
            );
            let mut record = receipt.clone();
            if !transaction.is_empty() {
                record = record.settled(transaction.clone());
            }
            let settling = SpentAuthorization {
                receipt: record,
                fingerprint: payment.fingerprint,
            };
            if let Err(_error) = config
                .nonce_store
                .mark_settling(&payment.key, settling, keep_until)
                .await
            {
                // The claim stays held until its hold-until: never charged twice,
                // but its resend is refused as in flight until then.
                trace_warn!(error = %_error, "the nonce store could not record a pending settlement");
            }
            claim.keep();
            let mut pending =
                SettleResponse::failure(offer.network.clone(), SETTLEMENT_PENDING, payer);
            pending.transaction = transaction;
            pending.error_message =
                Some("the transfer may still land: resend the same payment for its outcome".into());
            return Outcome::Pending(pending, receipt);
        }
        Err(error) if *error.kind() == FacilitatorErrorKind::Unavailable => {
            trace_decision!(
                WARN,
                "x402",
                payer = receipt.payer(),
                outcome = "unsettled",
                error = ErrorCode::PaymentVerificationUnavailable.as_str(),
            );
            payment_outcome("unsettled");
            claim.release().await;
            let failed = SettleResponse::failure(offer.network.clone(), error.to_string(), payer);
            return Outcome::Unavailable(failed, receipt);
        }
        Err(error) => SettleResponse::failure(offer.network.clone(), error.to_string(), payer),
    };
    let mut settlement = match settlement.error_reason.as_deref() {
        Some(why) if after_lost_answer && code_for_reason(why) == ErrorCode::PaymentReplay => {
            SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: Some(receipt.payer().to_owned()).filter(|payer| !payer.is_empty()),
                // Landed by the first call, whose answer (and transaction) was lost.
                transaction: String::new(),
                network: offer.network.clone(),
                amount: Some(decision.amount),
                extensions: None,
            }
        }
        _ => settlement,
    };
    if settlement.success && offer.scheme == crate::x402::wire::types::SCHEME_UPTO {
        // The usage statement, in one place: what the amount was for.
        if let Some(mut usage) = amount.usage() {
            usage.insert("fee".into(), config.flat_fee.to_string().into());
            usage.insert("amount".into(), decision.amount.to_string().into());
            settlement
                .extensions
                .get_or_insert_with(Default::default)
                .insert("usage".into(), usage.into());
        }
    }
    if settlement.success
        && let Some(signer) = &config.offer_signer
    {
        signer.sign_settlement(
            &mut settlement,
            &payment.quote.required().resource.url,
            receipt.payer(),
            config.units_of(offer).decimals,
            config.clock.now_unix_secs(),
        );
    }
    if !settlement.success {
        trace_decision!(
            WARN,
            "x402",
            payer = receipt.payer(),
            amount = %receipt.amount(),
            network = %receipt.network(),
            outcome = "unsettled",
            error = ErrorCode::SettlementFailed.as_str(),
            reason = settlement.error_reason.as_deref(),
        );
        payment_outcome("unsettled");
        claim.release().await;
        return Outcome::Failed(settlement, receipt);
    }
    trace_decision!(
        INFO,
        "x402",
        payer = receipt.payer(),
        amount = %receipt.amount(),
        network = %receipt.network(),
        transaction = settlement.transaction.as_str(),
        resource = payment.quote.required().resource.url.as_str(),
        outcome = "settled",
    );
    payment_outcome("settled");
    metrics::count(metrics::X402_SETTLEMENTS_TOTAL, []);
    let receipt = receipt.settled(settlement.transaction.clone());
    let spent = SpentAuthorization {
        receipt: receipt.clone(),
        fingerprint: payment.fingerprint,
    };
    // Settled on the ledger either way: a store failure here only weakens paid replay,
    // since the ledger itself refuses the used nonce.
    if let Err(_error) = config
        .nonce_store
        .mark_spent(&payment.key, spent, keep_until)
        .await
    {
        trace_warn!(
            error = %_error,
            transaction = settlement.transaction.as_str(),
            "settled, but the nonce store failed to mark the authorization spent",
        );
    }
    claim.keep();
    #[cfg(feature = "siwx")]
    if let Some(operation) = &payment.operation {
        entitle(&config, operation, &receipt).await;
    }
    config
        .report_settled(|| {
            SettledPayment::new(
                receipt.payer(),
                receipt.amount(),
                receipt.network().clone(),
                settlement.transaction.clone(),
                payment.quote.required().resource.url.clone(),
                payment.request_id.clone(),
            )
        })
        .await;
    Outcome::Settled(settlement, receipt)
}

/// The `PAYMENT-RESPONSE` value of a settlement.
pub(crate) fn settle_header(settlement: &SettleResponse) -> Option<HeaderValue> {
    // The encoded text becomes the header's bytes as it is (no copy).
    HeaderValue::from_maybe_shared(bytes::Bytes::from(codec::encode(settlement).into_bytes())).ok()
}

/// The settlement a receipt records, for the `PAYMENT-RESPONSE` of a paid replay.
pub(crate) fn receipt_settlement(receipt: &PaymentReceipt) -> SettleResponse {
    SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        payer: Some(receipt.payer().to_owned()),
        transaction: receipt.transaction().unwrap_or_default().to_owned(),
        network: receipt.network().clone(),
        amount: Some(receipt.amount()),
        extensions: None,
    }
}

impl Outcome {
    /// The receipt of the payment it settled (or did not).
    pub(crate) fn receipt(&self) -> &PaymentReceipt {
        match self {
            Self::Settled(_, receipt)
            | Self::Failed(_, receipt)
            | Self::Pending(_, receipt)
            | Self::Unavailable(_, receipt) => receipt,
        }
    }
}

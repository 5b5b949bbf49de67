//! The `payment-identifier` steps of the flow: the id looked up (and
//! marked in flight) before the claim, the answer kept under it given to
//! the same payer, and the marker given back unless an answer replaces it.

use super::kept::IdGuard;
use super::payment::{ClaimGuard, ID_IN_FLIGHT, Payment, Refusal};
use crate::envelope::ErrorCode;
use crate::x402::facilitator::{code_for_reason, reason};
use crate::x402::server::answers::{Begun, KeptAnswer};
use crate::x402::server::config::Config;
use crate::x402::server::payment_id::{self, IdBinding};
use crate::x402::server::replay::Claim;

/// What the payment identifier's lookup decided.
pub(super) enum IdStep {
    /// On to the claim; with the marker this request now holds, if it took one.
    Proceed(Option<IdGuard>),
    /// Refused: 409 for another request or payer, 503 while in flight, or
    /// the store could not answer.
    Refuse(ErrorCode, String),
    /// A kept answer for this request, and what it is bound to.
    Stored(KeptAnswer, IdBinding),
}

/// Looks the payment's id up (marking it in flight when new).
pub(super) async fn begin_id(
    config: &Config,
    payment: &Payment,
    id: &str,
    request: [u8; 32],
    hold_until: u64,
) -> IdStep {
    let key = payment_id::id_key(id);
    let binding = IdBinding {
        request,
        payer: payment
            .claimed_payer()
            .unwrap_or_default()
            .to_ascii_lowercase(),
        payment: payment.fingerprint,
    };
    let conflict = || {
        IdStep::Refuse(
            ErrorCode::PaymentIdentifierConflict,
            "payment_identifier_conflict".to_owned(),
        )
    };
    match config
        .answer_store
        .begin(&key, &binding.encode(), hold_until)
        .await
    {
        Err(error) => IdStep::Refuse(ErrorCode::PaymentVerificationUnavailable, error.to_string()),
        Ok(Begun::Started) => IdStep::Proceed(Some(IdGuard::new(config.answer_store.clone(), key))),
        Ok(Begun::InFlight(marker)) => match IdBinding::decode(&marker) {
            // The very payment (for this request, or a poll of what it paid for):
            // its claim decides (a pending settlement is resolved, a paid replay replayed).
            Some(other) if other.payment == binding.payment => IdStep::Proceed(None),
            Some(other) if other.same_request_and_payer(&binding) => IdStep::Refuse(
                ErrorCode::PaymentVerificationUnavailable,
                ID_IN_FLIGHT.to_owned(),
            ),
            _ => conflict(),
        },
        Ok(Begun::Kept(answer)) => match IdBinding::decode(answer.binding()) {
            Some(stored) if stored.request == binding.request => IdStep::Stored(answer, stored),
            Some(stored) if stored.payment == binding.payment => IdStep::Proceed(None),
            _ => conflict(),
        },
    }
}

/// Whether the answer kept under the payment's id may be given: for the
/// identical payment at once; for a fresh one once it verifies from the same
/// payer, its claim then released (never settled).
pub(super) async fn stored_answer(
    config: &Config,
    payment: &Payment,
    _answer: &KeptAnswer,
    stored: &IdBinding,
    hold_until: u64,
) -> Result<(), Refusal> {
    let refuse =
        |code: ErrorCode, why: &str, payer: Option<&str>| Err(Refusal::new(code, why, payer));
    if stored.payment == payment.fingerprint {
        trace_decision!(INFO, "x402", outcome = "stored answer");
        return Ok(());
    }
    match config.nonce_store.claim(&payment.key, hold_until).await {
        Ok(Claim::Claimed) => {}
        Ok(_) => {
            return refuse(
                ErrorCode::PaymentReplay,
                "authorization_already_used",
                payment.claimed_payer(),
            );
        }
        Err(error) => {
            return refuse(
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
                payment.claimed_payer(),
            );
        }
    }
    let claim = ClaimGuard::new(config, &payment.key);
    let verdict = config.facilitator.verify(&payment.facilitation).await;
    // Verified or not, this authorization is never settled.
    claim.release().await;
    let verdict = match verdict {
        Ok(verdict) => verdict,
        Err(error) => {
            return refuse(
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
                payment.claimed_payer(),
            );
        }
    };
    let payer = verdict
        .payer
        .clone()
        .or_else(|| payment.claimed_payer().map(str::to_owned))
        .unwrap_or_default();
    if !verdict.is_valid {
        let why = verdict
            .invalid_reason
            .as_deref()
            .unwrap_or(reason::INVALID_PAYLOAD);
        return refuse(code_for_reason(why), why, Some(&payer));
    }
    if payer.to_ascii_lowercase() != stored.payer {
        return refuse(
            ErrorCode::PaymentIdentifierConflict,
            "payment_identifier_conflict",
            Some(&payer),
        );
    }
    trace_decision!(
        INFO,
        "x402",
        payer = payer.as_str(),
        outcome = "stored answer"
    );
    Ok(())
}

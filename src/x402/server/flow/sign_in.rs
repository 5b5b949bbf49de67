//! `sign-in-with-x` in the flow: a wallet that paid for an operation signs
//! in to get its kept answer (or, on a route that opted in, a fresh one,
//! uncharged); a settled answer is kept for that, and its payer entitled.

use crate::x402::server::config::Config;
use crate::x402::server::receipt::PaymentReceipt;
use crate::x402::server::siwx::{self, Entitled};

/// What the signed-in wallet of `proof` is entitled to for `operation`, if
/// every check passes (`rerun`: the route serves it again, uncharged).
pub(crate) async fn signed_in_answer(
    config: &Config,
    proof: &http::HeaderValue,
    operation: &[u8; 32],
    rerun: bool,
) -> Option<Entitled> {
    let sign_in = config.sign_in.as_ref()?;
    siwx::entitled_answer(
        sign_in,
        config.entitlements.as_ref(),
        config.answer_store.as_ref(),
        proof,
        operation,
        rerun,
    )
    .await
}

/// Records that the payer of a settled `receipt` paid for `operation`, for
/// the answer retention; a failure only costs a later sign-in its answer.
pub(super) async fn entitle(config: &Config, operation: &[u8; 32], receipt: &PaymentReceipt) {
    let until = (config.clock.now_unix_secs()).saturating_add(config.answer_limits.retention_secs);
    if let Err(_error) = config.entitlements.entitle(operation, receipt, until).await {
        trace_warn!(error = %_error, "the entitlement store could not record a payment");
    }
}

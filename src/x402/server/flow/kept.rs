//! Kept answers: what a paid answer is kept under (its authorization, its
//! payer's sign-in, its payment-identifier), for how long, and the one
//! [`Keeper`] that keeps it once its settlement is known.

use std::sync::Arc;

use bytes::Bytes;

use super::payment::{Payment, id_binding};
use super::settle::spent_keep_until;
use crate::x402::server::answers::{AnswerStore, KeptAnswer};
use crate::x402::server::config::Config;
use crate::x402::server::payment_id::{self, IdBinding};
use crate::x402::server::replay::AuthorizationKey;

/// Where an authorization's answer is kept.
pub(super) fn answer_key(key: &AuthorizationKey) -> String {
    ["x402-authorization:", key.as_str()].concat()
}

/// What a kept answer is bound to: the very payment (its fingerprint) and
/// the request it paid for (a poll of a paid job, paid by the same payment,
/// is another request).
pub(crate) fn binding(payment: &Payment) -> String {
    let fingerprint = alloy_primitives::hex::encode(payment.fingerprint);
    [&fingerprint, " ", &payment.request_line].concat()
}

/// The answer kept for this very payment, if any (a store failure is none:
/// the resend is then served again, charged once).
pub(crate) async fn kept_answer(config: &Config, payment: &Payment) -> Option<KeptAnswer> {
    match config.answer_store.kept(&answer_key(&payment.key)).await {
        Ok(answer) => answer.filter(|answer| answer.binding() == binding(payment)),
        Err(_error) => {
            trace_warn!(error = %_error, "the answer store could not be read");
            None
        }
    }
}

/// Keeps `answer`; a failure only costs the resend a second upstream call.
pub(super) async fn keep_answer(config: &Config, key: &str, answer: &KeptAnswer, keep_until: u64) {
    if answer.size() > config.answer_limits.max_answer_bytes {
        return;
    }
    match config.answer_store.keep(key, answer, keep_until).await {
        Ok(true) => {}
        Ok(false) => trace_warn!("the answer store refused an answer as too large"),
        Err(_error) => trace_warn!(error = %_error, "the answer store could not keep an answer"),
    }
}

pub(super) async fn forget_answer(config: &Config, key: &str) {
    if let Err(_error) = config.answer_store.forget(key).await {
        trace_warn!(error = %_error, "the answer store could not forget an answer");
    }
}

/// Until when a payment's answer is kept: the retention, and at least as
/// long as its authorization is remembered.
pub(super) fn answer_keep_until(config: &Config, payment: &Payment) -> u64 {
    let now = config.clock.now_unix_secs();
    spent_keep_until(config, payment).max(now.saturating_add(config.answer_limits.retention_secs))
}

/// The body of an answer, if it ends within `limit` bytes without an error.
pub(crate) async fn collect_within<B: http_body::Body<Data = Bytes>>(
    body: B,
    limit: usize,
) -> Option<Bytes> {
    use http_body_util::BodyExt;
    let mut body = std::pin::pin!(body);
    let mut collected = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return None };
        if let Ok(data) = frame.into_data() {
            if collected.len() + data.len() > limit {
                return None;
            }
            collected.extend_from_slice(&data);
        }
    }
    Some(Bytes::from(collected))
}

/// Keeps a settled (or settling) payment's answer where the configuration
/// asks: under its authorization (paid replay, and for the resend of a
/// pending settlement), for its payer's sign-in, under its payment-identifier.
/// Dropped unused, the payment's id is free again.
pub(crate) struct Keeper {
    config: Arc<Config>,
    payment: Box<Payment>,
    id_guard: Option<IdGuard>,
    id_binding: Option<(String, IdBinding)>,
    keep_until: u64,
    /// Who paid, for the sign-in the answer is kept for.
    #[cfg(feature = "siwx")]
    payer: String,
}

impl Keeper {
    pub(super) fn new(
        config: Arc<Config>,
        payment: Box<Payment>,
        id_guard: Option<IdGuard>,
        payer: &str,
    ) -> Self {
        let keep_until = answer_keep_until(&config, &payment);
        let id_binding = id_binding(&payment, payer);
        Self {
            config,
            payment,
            id_guard,
            id_binding,
            keep_until,
            #[cfg(feature = "siwx")]
            payer: payer.to_owned(),
        }
    }

    /// The binding a kept answer of this payment carries.
    pub(crate) fn binding(&self) -> String {
        binding(&self.payment)
    }

    /// Whether a settled answer is kept anywhere (else it need not be read whole).
    pub(crate) fn keeps_settled(&self, under_authorization: bool) -> bool {
        (under_authorization && self.config.paid_replay)
            || self.id_guard.is_some()
            || self.for_sign_in()
    }

    /// Whether it is kept for its payer's sign-in.
    fn for_sign_in(&self) -> bool {
        #[cfg(feature = "siwx")]
        return self.payment.operation.is_some();
        #[cfg(not(feature = "siwx"))]
        false
    }

    /// A settled answer: under its authorization when `under_authorization`
    /// and the route replays paid answers, for its payer's sign-in, under its id.
    pub(crate) async fn keep_settled(self, answer: &KeptAnswer, under_authorization: bool) {
        let config = &self.config;
        if under_authorization && config.paid_replay {
            let key = answer_key(&self.payment.key);
            keep_answer(config, &key, answer, self.keep_until).await;
        }
        #[cfg(feature = "siwx")]
        if let Some(operation) = &self.payment.operation {
            keep_for_sign_in(config, &self.payer, operation, answer).await;
        }
        if let (Some(guard), Some((_, binding))) = (self.id_guard, &self.id_binding) {
            let answer = answer.clone().with_binding(binding.encode());
            guard.keep(config, &answer, self.keep_until).await;
        }
    }

    /// A pending settlement's answer (when it fitted): kept under its
    /// authorization for the resend that learns the outcome; the id stays in
    /// flight until then.
    pub(crate) async fn keep_pending(self, answer: Option<KeptAnswer>) {
        if let Some(answer) = answer {
            let key = answer_key(&self.payment.key);
            keep_answer(&self.config, &key, &answer, self.keep_until).await;
        }
        if let Some(guard) = self.id_guard {
            guard.hold();
        }
    }

    /// A resolved settlement's answer: kept on under its authorization (a
    /// resend that loses this answer too gets it again) and under its id.
    pub(super) async fn keep_resolved(self, answer: &KeptAnswer) {
        let config = &self.config;
        keep_answer(
            config,
            &answer_key(&self.payment.key),
            answer,
            self.keep_until,
        )
        .await;
        if let Some((id, binding)) = &self.id_binding {
            let answer = answer.clone().with_binding(binding.encode());
            keep_answer(config, &payment_id::id_key(id), &answer, self.keep_until).await;
        }
    }

    /// A failed resolution: nothing of it is kept any longer.
    pub(super) async fn forget(self) {
        forget_answer(&self.config, &answer_key(&self.payment.key)).await;
        if let Some((id, _)) = &self.id_binding {
            forget_answer(&self.config, &payment_id::id_key(id)).await;
        }
    }
}

/// Keeps a settled answer under its payer and operation for the payer's
/// `sign-in-with-x`, for the answer retention.
#[cfg(feature = "siwx")]
async fn keep_for_sign_in(config: &Config, payer: &str, operation: &[u8; 32], answer: &KeptAnswer) {
    let key = crate::x402::server::siwx::kept_key(payer, operation);
    let answer = answer
        .clone()
        .with_binding(crate::x402::server::siwx::KEPT_BINDING);
    let keep_until =
        (config.clock.now_unix_secs()).saturating_add(config.answer_limits.retention_secs);
    keep_answer(config, &key, &answer, keep_until).await;
}

/// The in-flight marker of a payment's id: given back (the id free again)
/// unless the answer is kept under it, or it is held for a pending
/// settlement; also when the request goes away.
pub(crate) struct IdGuard {
    store: Arc<dyn AnswerStore>,
    key: Option<String>,
}

impl IdGuard {
    /// The marker under `key` in `store`, this request's.
    pub(super) fn new(store: Arc<dyn AnswerStore>, key: String) -> Self {
        Self {
            store,
            key: Some(key),
        }
    }

    /// Keeps `answer` under the id in place of the marker.
    pub(super) async fn keep(mut self, config: &Config, answer: &KeptAnswer, keep_until: u64) {
        if let Some(key) = self.key.take() {
            keep_answer(config, &key, answer, keep_until).await;
        }
    }

    /// Leaves the marker until its hold-until: the settlement is pending.
    pub(super) fn hold(mut self) {
        self.key = None;
    }
}

impl Drop for IdGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // Started at once by the store; its hold-until is the safety net.
            drop(self.store.forget(&key));
        }
    }
}

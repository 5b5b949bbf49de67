//! The payment flow of one paid call, whichever front carries it (the HTTP
//! layer, a JSON-RPC tool call, another auth scheme): a decoded payment
//! against its quote becomes a [`Payment`]; [`admit`] claims and verifies it
//! (or answers from what is kept); the front runs the inner call; the
//! [`Serving`] settles it when the answer ends, for the amount decided then
//! ([`SettleAmount`]), and keeps the answer where the configuration asks.
//!
//! Settlement, replay, payment-identifier, answer keeping and the hook are
//! the flow's; a front only carries the payment in and the answer out.
//!
//! ```text
//! Payment::admit_header ─ admit ─┬─ Serve ── (inner call) ── settle ── keep
//!                                ├─ Kept / Replay        (answered, nothing settled)
//!                                ├─ Resolve              (a pending settlement asked again)
//!                                └─ Refused
//! ```

mod amount;
mod cuts;
mod identified;
mod kept;
mod payment;
mod pending;
mod settle;
#[cfg(feature = "siwx")]
mod sign_in;

use std::sync::Arc;

pub use amount::SettleAmount;
pub(crate) use amount::Units;
pub(crate) use cuts::CutStreams;
pub use cuts::{CutStreamLimit, METERED_PAYMENTS_SUSPENDED};
pub(crate) use kept::{Keeper, collect_within, kept_answer};
pub use payment::EXTENSION_ECHO_MISMATCH;
pub(crate) use payment::{ClaimGuard, ID_IN_FLIGHT, Paying, Payment, Refusal, payment_outcome};
pub(crate) use pending::Resolved;
pub(crate) use pending::resolve;
pub use settle::SETTLEMENT_PENDING;
pub(crate) use settle::{Outcome, receipt_settlement, settle_header};
#[cfg(feature = "siwx")]
pub(crate) use sign_in::signed_in_answer;

use self::identified::{IdStep, begin_id, stored_answer};
use self::kept::IdGuard;
use self::settle::SettleJob;
use super::config::Config;
use super::receipt::PaymentReceipt;
use super::replay::{Claim, SpentAuthorization};
use crate::envelope::{EnvelopeStyle, ErrorCode};
use crate::metrics;
use crate::x402::facilitator::{code_for_reason, reason};
use crate::x402::wire::types::SCHEME_UPTO;

/// What admitting a payment decided.
pub(crate) enum Admission {
    /// Claimed and verified: serve it, then [`Serving::settle`].
    Serve(Box<Serving>),
    /// The answer this very payment already paid for, kept.
    Kept(super::KeptAnswer),
    /// Paid replay: serve again, uncharged, with the settled payment's receipt.
    Replay(PaymentReceipt),
    /// A settlement of this payment first reported pending: ask again.
    Resolve(Box<Payment>, SpentAuthorization),
    /// Refused; nothing claimed, nothing charged.
    Refused(Box<Payment>, Refusal),
}

/// Claims the payment (after its payment-identifier, if any) and verifies it.
pub(crate) async fn admit(config: &Arc<Config>, payment: Box<Payment>) -> Admission {
    let refused = |payment: Box<Payment>, code: ErrorCode, why: &str| {
        let refusal = payment.refused(code, why);
        Admission::Refused(payment, refusal)
    };
    let now = config.clock.now_unix_secs();
    let hold_until = payment.hold_until(now);
    if payment.offer().scheme == SCHEME_UPTO
        && let Some(payer) = payment.claimed_payer()
        && config.cut_streams.exact_only(payer, now)
    {
        // Checked against the claimed payer, before anything is claimed: a
        // payment naming another's address is only refused, never served.
        return refused(
            payment,
            ErrorCode::PaymentInvalid,
            METERED_PAYMENTS_SUSPENDED,
        );
    }

    // The payment identifier is looked up before the claim.
    let mut id_guard = None;
    if let Some((id, request)) = payment.payment_id.clone() {
        match Box::pin(begin_id(config, &payment, &id, request, hold_until)).await {
            IdStep::Proceed(guard) => id_guard = guard,
            IdStep::Refuse(code, why) => return refused(payment, code, &why),
            IdStep::Stored(answer, stored) => {
                return match Box::pin(stored_answer(
                    config, &payment, &answer, &stored, hold_until,
                ))
                .await
                {
                    Ok(()) => Admission::Kept(answer),
                    Err(refusal) => Admission::Refused(payment, refusal),
                };
            }
        }
    }

    let claiming = metrics::Started::now();
    let claimed = config.nonce_store.claim(&payment.key, hold_until).await;
    claiming.observe(metrics::X402_CLAIM_DURATION_SECONDS);
    match claimed {
        Ok(Claim::Claimed) if payment.payment_id.is_some() && id_guard.is_none() => {
            // The id is held by another request, which pays under it: a copy
            // that claimed the authorization first gives it back, or the payment
            // would settle with no answer kept under its id.
            config.nonce_store.release(&payment.key).await;
            return refused(
                payment,
                ErrorCode::PaymentVerificationUnavailable,
                ID_IN_FLIGHT,
            );
        }
        Ok(Claim::Claimed) => {}
        // The same payment under its id, still in flight: the one rule clients follow.
        Ok(Claim::InFlight) if payment.payment_id.is_some() => {
            return refused(
                payment,
                ErrorCode::PaymentVerificationUnavailable,
                ID_IN_FLIGHT,
            );
        }
        Ok(Claim::InFlight) => {
            return refused(payment, ErrorCode::PaymentReplay, "authorization_in_flight");
        }
        Ok(Claim::Spent(spent)) if spent.fingerprint == payment.fingerprint => {
            // The very payment that was settled: its kept answer, if one was kept
            // (a settlement first reported pending), else the route's paid replay.
            if let Some(answer) = Box::pin(kept_answer(config, &payment)).await {
                trace_decision!(
                    INFO,
                    "x402",
                    payer = spent.receipt.payer(),
                    outcome = "kept answer"
                );
                payment_outcome("replayed");
                return Admission::Kept(answer);
            }
            if config.paid_replay {
                trace_decision!(
                    INFO,
                    "x402",
                    payer = spent.receipt.payer(),
                    transaction = spent.receipt.transaction(),
                    outcome = "replayed",
                );
                payment_outcome("replayed");
                return Admission::Replay(spent.receipt);
            }
            if payment.payment_id.is_some() && id_guard.is_none() {
                // Settled under an id another request still holds: its answer is
                // being stored under the id, so the resend will find it.
                return refused(
                    payment,
                    ErrorCode::PaymentVerificationUnavailable,
                    ID_IN_FLIGHT,
                );
            }
            return refused(
                payment,
                ErrorCode::PaymentReplay,
                "authorization_already_settled",
            );
        }
        Ok(Claim::Settling(settling)) if settling.fingerprint == payment.fingerprint => {
            return Admission::Resolve(payment, settling);
        }
        Ok(Claim::Settling(_)) => {
            return refused(payment, ErrorCode::PaymentReplay, "authorization_in_flight");
        }
        Ok(_) => {
            return refused(
                payment,
                ErrorCode::PaymentReplay,
                "authorization_already_settled",
            );
        }
        Err(error) => {
            return refused(
                payment,
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
            );
        }
    }
    let claim = ClaimGuard::new(config, &payment.key);

    let verifying = metrics::Started::now();
    let verified = config.facilitator.verify(&payment.facilitation).await;
    verifying.observe(metrics::X402_VERIFY_DURATION_SECONDS);
    let verdict = match verified {
        Ok(verdict) => verdict,
        Err(error) => {
            claim.release().await;
            return refused(
                payment,
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
            );
        }
    };
    let payer = verdict
        .payer
        .or_else(|| payment.claimed_payer().map(str::to_owned));
    if !verdict.is_valid {
        let why = verdict
            .invalid_reason
            .as_deref()
            .unwrap_or(reason::INVALID_PAYLOAD);
        claim.release().await;
        let refusal = Refusal::new(code_for_reason(why), why, payer.as_deref());
        return Admission::Refused(payment, refusal);
    }
    payment_outcome("verified");
    let offer = payment.offer();
    let receipt = PaymentReceipt::new(
        payer.unwrap_or_default(),
        offer.amount,
        offer.network.clone(),
        payment.key.as_str().to_owned(),
    );
    Admission::Serve(Box::new(Serving {
        config: config.clone(),
        payment,
        claim,
        receipt,
        id_guard,
        amount: SettleAmount::default(),
    }))
}

/// A verified payment whose claim is held while the front serves it.
pub(crate) struct Serving {
    config: Arc<Config>,
    payment: Box<Payment>,
    claim: ClaimGuard,
    receipt: PaymentReceipt,
    id_guard: Option<IdGuard>,
    amount: SettleAmount,
}

impl Serving {
    /// The receipt the inner call gets.
    pub(crate) fn receipt(&self) -> &PaymentReceipt {
        &self.receipt
    }

    /// The handle the inner call names a metered amount with.
    pub(crate) fn amount(&self) -> &SettleAmount {
        &self.amount
    }

    /// The payment's envelope style.
    pub(crate) fn style(&self) -> EnvelopeStyle {
        self.payment.style
    }

    /// The payer, when its payment authorised a maximum (`upto`): its
    /// stream, cut before its end, counts against it ([`CutStreamLimit`]).
    pub(crate) fn metered_payer(&self) -> Option<String> {
        (self.payment.offer().scheme == SCHEME_UPTO && !self.receipt.payer().is_empty())
            .then(|| self.receipt.payer().to_owned())
    }

    /// Whether a stream of this payment must be settled before its first
    /// byte: a contract payer's own code judges its signature again when
    /// the transfer is mined.
    pub(crate) fn settles_before_streaming(&self) -> bool {
        self.payment.facilitation.payer_is_contract()
    }

    /// The inner call answered without success: not served, not charged.
    pub(crate) async fn unserved(self, status: u16) {
        trace_decision!(
            INFO,
            "x402",
            payer = self.receipt.payer(),
            status,
            outcome = "unsettled",
        );
        let _ = status;
        payment_outcome("unsettled");
        self.claim.release().await;
    }

    /// Settles now, for the amount decided now; the [`Keeper`] keeps the
    /// answer where the configuration asks.
    pub(crate) async fn settle(self) -> (Outcome, Keeper) {
        let Self {
            config,
            payment,
            claim,
            receipt,
            id_guard,
            amount,
        } = self;
        let job = SettleJob {
            config: config.clone(),
            payment,
            claim,
            receipt,
            amount,
            after_lost_answer: false,
            resolving: false,
        };
        let (outcome, payment) = job.run().await;
        let keeper = Keeper::new(config, payment, id_guard, outcome.receipt().payer());
        (outcome, keeper)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::clock::FakeClock;
    use crate::store::BoxFuture;
    use crate::x402::facilitator::{Facilitator, FacilitatorError, FacilitatorRequest};
    use crate::x402::server::quote::Quote;
    use crate::x402::server::{PaymentOption, PriceTable, X402Layer};
    use crate::x402::wire::codec;
    use crate::x402::wire::types::{
        AtomicAmount, PaymentPayload, ResourceInfo, SCHEME_UPTO, SettleResponse, SupportedResponse,
        UsdAmount, VerifyResponse,
    };

    const NOW: u64 = 1_750_000_000;
    const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
    /// $0.004 + the $0.001 fee, in USDC units: the authorised maximum.
    const MAXIMUM: u128 = 5_000;

    /// Accepts any payment of a scheme that authorises a maximum, and
    /// settles the amount it is asked for (`paymentRequirements.amount`).
    #[derive(Default)]
    struct Metering {
        settled: Mutex<Vec<AtomicAmount>>,
        /// The first settlement's outcome is not known yet (no receipt).
        pending_first: std::sync::atomic::AtomicBool,
    }

    impl Facilitator for Metering {
        fn verify<'a>(
            &'a self,
            _request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
            Box::pin(async {
                Ok(VerifyResponse::valid(
                    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                ))
            })
        }

        fn settle<'a>(
            &'a self,
            request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
            let requirements = request.payment_requirements();
            let amount = requirements.amount;
            self.settled.lock().unwrap().push(amount);
            if self.pending_first.swap(false, Ordering::SeqCst) {
                return Box::pin(async {
                    Err(FacilitatorError::pending("0x02", "no receipt yet"))
                });
            }
            let settled = SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: None,
                transaction: "0x01".into(),
                network: requirements.network.clone(),
                amount: Some(amount),
                extensions: None,
            };
            Box::pin(async move { Ok(settled) })
        }

        fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
            Box::pin(async { Err(FacilitatorError::unavailable("not asked")) })
        }
    }

    /// The payer [`Metering`] verifies.
    const PAYER: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

    /// A layer's configuration for `upto` offers settled by `facilitator`.
    fn config(facilitator: Arc<Metering>) -> (X402Layer, Arc<Quote>) {
        config_at(facilitator, Arc::new(FakeClock::at_unix_secs(NOW)))
    }

    fn config_at(facilitator: Arc<Metering>, clock: Arc<FakeClock>) -> (X402Layer, Arc<Quote>) {
        let layer = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /tool", "0.004")
                    .unwrap(),
            )
            .with_shared_facilitator(facilitator)
            .with_payment_option(
                PaymentOption::base_sepolia_usdc(PAY_TO)
                    .unwrap()
                    .with_scheme(SCHEME_UPTO),
            )
            .with_clock(clock)
            .build()
            .unwrap();
        let config = layer.config.clone();
        let total: UsdAmount = "0.005".parse().unwrap();
        let quote = config
            .quotes
            .quote(
                &config.options,
                total,
                None,
                "tool",
                || "tool:echo".into(),
                |url| ResourceInfo {
                    url,
                    description: String::new(),
                    mime_type: String::new(),
                },
            )
            .unwrap();
        (layer, quote)
    }

    /// A client's signed ceiling for the quote's first offer (`nonce` tells payments apart).
    fn payment(quote: &Quote, nonce: u64) -> String {
        let offer = quote.required().accepts[0].clone();
        assert_eq!(offer.amount, AtomicAmount::new(MAXIMUM));
        codec::encode(&PaymentPayload {
            x402_version: 2,
            resource: None,
            accepted: offer,
            payload: serde_json::json!({
                "permit2Authorization": {"from": PAYER, "nonce": nonce.to_string()},
                "signature": "signed ceiling",
            }),
            extensions: None,
        })
    }

    /// What admitting the encoded payment `sent` for a tool call decides.
    async fn admit_sent(config: &Arc<Config>, quote: Arc<Quote>, sent: &str) -> Admission {
        let paying = Paying {
            request_line: "tools/call echo".into(),
            body_digest: &|| None,
            style: EnvelopeStyle::default(),
            request_id: None,
            sent: sent.as_bytes(),
        };
        match Payment::admit_encoded(config, quote, paying) {
            Ok(payment) => admit(config, payment).await,
            Err(refusal) => panic!("decoded: {}", refusal.why),
        }
    }

    /// A second front, not HTTP: a tool call's encoded payment in, the
    /// tool's answer (its chunks) and the settlement out. The tool streams
    /// its chunks through a channel and may name what it cost at any time.
    async fn pay_tool_call<F, Fut>(
        config: &Arc<Config>,
        quote: Arc<Quote>,
        sent: &str,
        tool: F,
    ) -> Result<(Vec<String>, SettleResponse), Refusal>
    where
        F: FnOnce(SettleAmount, tokio::sync::mpsc::Sender<String>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let serving = match admit_sent(config, quote, sent).await {
            Admission::Serve(serving) => serving,
            Admission::Refused(_, refusal) => return Err(refusal),
            _ => panic!("a fresh payment is served"),
        };
        let (chunks, mut received) = tokio::sync::mpsc::channel(8);
        let running = tokio::spawn(tool(serving.amount().clone(), chunks));
        let mut answer = Vec::new();
        while let Some(chunk) = received.recv().await {
            answer.push(chunk);
        }
        running.await.unwrap();
        // The answer ended: settled now, for what it named.
        let (outcome, _keeper) = serving.settle().await;
        match outcome {
            Outcome::Settled(settlement, receipt) => {
                assert_eq!(settlement.amount, Some(receipt.amount()));
                Ok((answer, settlement))
            }
            _ => panic!("the metering facilitator settles"),
        }
    }

    #[tokio::test]
    async fn a_second_front_settles_what_a_whole_answer_named_below_the_maximum() {
        let facilitator = Arc::new(Metering::default());
        let (layer, quote) = config(facilitator.clone());
        let sent = payment(&quote, 1);
        let (answer, settled) =
            pay_tool_call(&layer.config, quote, &sent, |amount, out| async move {
                amount.set(AtomicAmount::new(1_234));
                out.send("whole answer".into()).await.unwrap();
            })
            .await
            .unwrap();
        assert_eq!(answer, ["whole answer"]);
        assert_eq!(settled.amount, Some(AtomicAmount::new(1_234)));
        assert_eq!(
            *facilitator.settled.lock().unwrap(),
            [AtomicAmount::new(1_234)]
        );
        assert_eq!(layer.settlement_overruns(), 0);
    }

    #[tokio::test]
    async fn a_stream_settles_the_amount_its_last_chunk_named() {
        let facilitator = Arc::new(Metering::default());
        let (layer, quote) = config(facilitator.clone());
        let sent = payment(&quote, 2);
        let (answer, settled) =
            pay_tool_call(&layer.config, quote, &sent, |amount, out| async move {
                for (n, word) in ["metered", "live", "stream"].into_iter().enumerate() {
                    if n == 2 {
                        // Its usage is known with its last chunk.
                        amount.set(AtomicAmount::new(777));
                    }
                    out.send(word.into()).await.unwrap();
                }
            })
            .await
            .unwrap();
        assert_eq!(answer, ["metered", "live", "stream"]);
        assert_eq!(settled.amount, Some(AtomicAmount::new(777)));
        assert_eq!(
            *facilitator.settled.lock().unwrap(),
            [AtomicAmount::new(777)]
        );
    }

    #[tokio::test]
    async fn an_amount_above_the_maximum_settles_the_maximum_and_is_counted() {
        let facilitator = Arc::new(Metering::default());
        let (layer, quote) = config(facilitator.clone());
        let sent = payment(&quote, 3);
        let (_, settled) = pay_tool_call(
            &layer.config,
            quote.clone(),
            &sent,
            |amount, out| async move {
                amount.set(AtomicAmount::new(MAXIMUM + 1));
                out.send("too dear".into()).await.unwrap();
            },
        )
        .await
        .unwrap();
        assert_eq!(settled.amount, Some(AtomicAmount::new(MAXIMUM)));
        assert_eq!(layer.settlement_overruns(), 1);
        // Unnamed, the maximum is settled; and the same payment again is a replay.
        let sent = payment(&quote, 4);
        let (_, settled) =
            pay_tool_call(&layer.config, quote.clone(), &sent, |_, out| async move {
                out.send("unnamed".into()).await.unwrap();
            })
            .await
            .unwrap();
        assert_eq!(settled.amount, Some(AtomicAmount::new(MAXIMUM)));
        let replayed = pay_tool_call(&layer.config, quote, &sent, |_, _| async {}).await;
        assert_eq!(
            replayed.map(|_| ()).unwrap_err().code,
            ErrorCode::PaymentReplay
        );
        assert_eq!(
            facilitator.settled.lock().unwrap().len(),
            2,
            "the replay settled nothing"
        );
    }

    #[tokio::test]
    async fn a_pending_metered_settlement_is_asked_again_for_its_amount_not_its_maximum() {
        let facilitator = Arc::new(Metering::default());
        facilitator.pending_first.store(true, Ordering::SeqCst);
        let (layer, quote) = config(facilitator.clone());
        let config = &layer.config;
        let sent = payment(&quote, 5);
        let Admission::Serve(serving) = admit_sent(config, quote.clone(), &sent).await else {
            panic!("a fresh payment is served");
        };
        serving.amount().set(AtomicAmount::new(1_234));
        let (outcome, _keeper) = serving.settle().await;
        assert!(matches!(outcome, Outcome::Pending(..)));
        // The resend asks again, for what the answer used.
        let Admission::Resolve(payment, settling) = admit_sent(config, quote, &sent).await else {
            panic!("the resend of a pending settlement resolves it");
        };
        let Resolved::ServeAgain(receipt, settlement) = resolve(config, payment, settling).await
        else {
            panic!("landed, nothing kept");
        };
        assert_eq!(settlement.amount, Some(AtomicAmount::new(1_234)));
        assert_eq!(receipt.amount(), AtomicAmount::new(1_234));
        assert_eq!(
            *facilitator.settled.lock().unwrap(),
            [AtomicAmount::new(1_234), AtomicAmount::new(1_234)]
        );
    }

    #[tokio::test]
    async fn a_payer_that_cut_three_metered_streams_pays_them_no_more_for_ten_minutes() {
        let clock = Arc::new(FakeClock::at_unix_secs(NOW));
        let (layer, quote) = config_at(Arc::new(Metering::default()), clock.clone());
        let config = &layer.config;
        for _ in 0..3 {
            config.metered_stream_cut(&PAYER.to_lowercase());
        }
        let sent = payment(&quote, 6);
        let Admission::Refused(_, refusal) = admit_sent(config, quote.clone(), &sent).await else {
            panic!("refused while suspended");
        };
        assert_eq!(refusal.code, ErrorCode::PaymentInvalid);
        assert_eq!(refusal.why, METERED_PAYMENTS_SUSPENDED);
        assert_eq!(refusal.payer.as_deref(), Some(PAYER));
        clock.advance(std::time::Duration::from_secs(600));
        assert!(matches!(
            admit_sent(config, quote, &sent).await,
            Admission::Serve(_)
        ));
    }
}

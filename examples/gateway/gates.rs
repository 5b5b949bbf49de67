//! The gateway's two gates after validation: the free-tier limit for free
//! models and x402 payment for paid ones.
//!
//! Both read the one price the pipeline decided and left in the request
//! extensions ([`RequestPrice`]: the model step for inference, the image
//! steps for images), so neither re-parses the body and "free" is decided
//! once: the free tier limits what is priced [`Price::Free`](walletgate::x402::server::Price::Free)
//! ([`IsPricedFree`]), the payment layer charges the rest
//! ([`RequestPrice::pricing`]). The same request always gets the same price,
//! so a client's signed retry matches its quote.
//!
//! Embedded default: quotes in Base Sepolia USDC, verified and settled
//! in-process by [`LocalEvmFacilitator`] on a [`DevLedger`] that pre-funds
//! the ten public development accounts.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use walletgate::SharedClock;
use walletgate::free_tier::{
    ClientIpResolver, FreeTierLimitLayer, FreeTierQuotas, FreeTierStore, InMemoryLimiter,
    IsPricedFree,
};
use walletgate::store::BoxFuture;
use walletgate::tls::ClientTls;
use walletgate::x402::{
    ConfigError,
    facilitator::{
        Facilitator, FacilitatorAuth, FacilitatorError, FacilitatorRequest, HttpFacilitator,
        Ledger, LocalEvmFacilitator,
    },
    server::{
        AnswerLimits, AnswerStore, EntitlementStore, InMemoryAnswerStore, InMemoryEntitlementStore,
        InMemoryNonceStore, NonceStore, PaymentIdentifier, PaymentOption, RequestPrice,
        SettledPayment, SettlementHookError, SignInWithX, X402Layer,
    },
    wire::{SettleResponse, SupportedResponse, VerifyResponse},
};

use crate::config::{EvmSettings, PaymentFaults, SolanaSettings};
use crate::discovery::Bazaar;

/// The layers after validation, built once from the configuration.
pub(crate) struct Gates {
    /// Free models: per-client-IP limit.
    pub(crate) free_tier: FreeTier,
    /// Paid inference: priced by model and request.
    pub(crate) inference_payment: X402Layer,
    /// Paid image jobs, in paid-replay mode: polls reuse the paying signature.
    pub(crate) image_payment: X402Layer,
}

/// Where the free tier counts: this process, or the Redis every replica
/// shares (`GATEWAY_REDIS_URL`), chosen at start.
pub(crate) type FreeTierBackend = Arc<dyn FreeTierStore>;

/// The free-tier layer as the pipeline uses it: free is what the model step
/// priced free.
pub(crate) type FreeTier = FreeTierLimitLayer<IsPricedFree, FreeTierBackend>;

/// The free-tier limit for free models, keyed by the connection's peer;
/// counted on `redis` when the replicas share one, else in this process.
pub(crate) fn free_tier(
    quotas: FreeTierQuotas,
    client_ip: ClientIpResolver,
    redis: Option<&RedisConnection>,
) -> FreeTier {
    let backend: FreeTierBackend = match redis {
        None => Arc::new(InMemoryLimiter::new(quotas)),
        #[cfg(feature = "redis")]
        Some(conn) => Arc::new(walletgate::redis::RedisFreeTier::new(conn.clone(), quotas)),
        #[cfg(not(feature = "redis"))]
        Some(never) => match *never {},
    };
    FreeTierLimitLayer::new(IsPricedFree)
        .with_store(backend)
        .with_client_ip(client_ip)
}

/// The shared Redis connection (feature `redis`).
#[cfg(feature = "redis")]
pub(crate) type RedisConnection = walletgate::redis::RedisConnection;

/// Without the `redis` feature there is no connection to have.
#[cfg(not(feature = "redis"))]
pub(crate) enum RedisConnection {}

/// Bound on one verify or settle call to a facilitator.
const SETTLE_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The facilitator at `url`, over `tls`, each call signed by `auth` (a hosted
/// facilitator's per-call JWT) when given.
pub(crate) fn facilitator_client(
    url: &str,
    tls: &ClientTls,
    auth: Option<&Arc<dyn FacilitatorAuth>>,
    timeout: std::time::Duration,
) -> Result<HttpFacilitator<walletgate::tls::HttpsConnector>, ConfigError> {
    let client = HttpFacilitator::with_tls(url, tls)?.with_timeout(timeout);
    Ok(match auth {
        Some(auth) => client.with_auth(Arc::clone(auth)),
        None => client,
    })
}

/// Where payments go and who checks them.
#[derive(Clone)]
pub(crate) struct PaymentSettings {
    /// The offers of every quote, the first one preferred by clients.
    pub(crate) options: Vec<PaymentOption>,
    /// Verifies and settles.
    pub(crate) facilitator: Arc<dyn Facilitator>,
    /// Claims and spent authorizations, shared by every paid route.
    pub(crate) nonce_store: Arc<dyn NonceStore>,
    /// Paid answers kept for a resend, and their bounds.
    pub(crate) answer_store: Arc<dyn AnswerStore>,
    pub(crate) answer_limits: AnswerLimits,
    /// The `payment-identifier` extension of every paid route.
    pub(crate) payment_id: PaymentIdentifier,
    pub(crate) clock: SharedClock,
    /// Every settlement of every paid route, logged with a running total.
    pub(crate) settled: Arc<SettlementTally>,
    /// What every quote's `resource.url` starts with; never the client's `Host`.
    pub(crate) public_url: String,
    /// The `sign-in-with-x` extension of every paid route, when on.
    pub(crate) sign_in: Option<SignInWithX>,
    /// Who paid for which operation, for `sign-in-with-x`.
    pub(crate) entitlements: Arc<dyn EntitlementStore>,
}

impl PaymentSettings {
    /// `settings`' USDC paid to `pay_to`, verified and settled by the
    /// facilitator at `settings.facilitator_url`, or without one in-process on
    /// the development `ledger`.
    pub(crate) fn evm(
        settings: &EvmSettings,
        pay_to: &str,
        ledger: Arc<dyn Ledger>,
        tls: &ClientTls,
        auth: Option<&Arc<dyn FacilitatorAuth>>,
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        let facilitator: Arc<dyn Facilitator> = match &settings.facilitator_url {
            Some(url) => Arc::new(facilitator_client(url, tls, auth, SETTLE_CALL_TIMEOUT)?),
            None => Arc::new(LocalEvmFacilitator::new(ledger, clock.clone())),
        };
        let clock_for_entitlements = clock.clone();
        Ok(Self {
            options: vec![settings.option(pay_to)?],
            facilitator,
            nonce_store: Arc::new(InMemoryNonceStore::new(clock.clone())),
            answer_store: Arc::new(InMemoryAnswerStore::new(clock.clone())),
            answer_limits: AnswerLimits::default(),
            payment_id: PaymentIdentifier::Optional,
            clock,
            settled: Arc::default(),
            public_url: String::new(),
            sign_in: None,
            entitlements: Arc::new(InMemoryEntitlementStore::new(clock_for_entitlements)),
        })
    }

    /// Solana USDC paid to `settings.pay_to`, verified and settled by the
    /// facilitator at `settings.facilitator_url`; quotes carry `extra.feePayer`.
    ///
    /// An unreachable or failing facilitator is `PAYMENT_VERIFICATION_UNAVAILABLE`
    /// (503, nothing consumed); a stale blockhash it reports is
    /// `PAYMENT_BLOCKHASH_STALE`.
    pub(crate) fn solana(
        settings: &SolanaSettings,
        fee_payer: &str,
        tls: &ClientTls,
        auth: Option<&Arc<dyn FacilitatorAuth>>,
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        let facilitator =
            facilitator_client(&settings.facilitator_url, tls, auth, SETTLE_CALL_TIMEOUT)?;
        let clock_for_entitlements = clock.clone();
        Ok(Self {
            options: vec![PaymentOption::solana_usdc(&settings.pay_to, fee_payer)],
            facilitator: Arc::new(facilitator),
            nonce_store: Arc::new(InMemoryNonceStore::new(clock.clone())),
            answer_store: Arc::new(InMemoryAnswerStore::new(clock.clone())),
            answer_limits: AnswerLimits::default(),
            payment_id: PaymentIdentifier::Optional,
            clock,
            settled: Arc::default(),
            public_url: String::new(),
            sign_in: None,
            entitlements: Arc::new(InMemoryEntitlementStore::new(clock_for_entitlements)),
        })
    }

    /// The same settings verified and settled by `facilitator` (e.g. the
    /// gateway's own on-chain settler).
    pub(crate) fn with_facilitator(mut self, facilitator: Arc<dyn Facilitator>) -> Self {
        self.facilitator = facilitator;
        self
    }

    /// The same settings quoting `url` + the path as every `resource.url`.
    pub(crate) fn with_public_url(mut self, url: &str) -> Self {
        url.clone_into(&mut self.public_url);
        self
    }

    /// The same settings with paid answers kept in `store`, within `limits`.
    pub(crate) fn with_answer_store(
        mut self,
        store: Arc<dyn AnswerStore>,
        limits: AnswerLimits,
    ) -> Self {
        self.answer_store = store;
        self.answer_limits = limits;
        self
    }

    /// The same settings declaring `sign-in-with-x` when `sign_in` is given
    /// (its spent nonces in `spent_nonces` and its entitlements in
    /// `entitlements`, shared by the replicas).
    pub(crate) fn with_sign_in(
        mut self,
        sign_in: Option<SignInWithX>,
        spent_nonces: Arc<dyn walletgate::siwe::NonceStore>,
        entitlements: Arc<dyn EntitlementStore>,
    ) -> Self {
        self.sign_in = sign_in.map(|sign_in| sign_in.with_spent_nonce_store(spent_nonces));
        self.entitlements = entitlements;
        self
    }

    /// The same settings taking the `payment-identifier` extension as `mode` says.
    pub(crate) fn with_payment_id(mut self, mode: PaymentIdentifier) -> Self {
        self.payment_id = mode;
        self
    }

    /// The same settings with claims and spent authorizations kept in `store`.
    pub(crate) fn with_nonce_store(mut self, store: Arc<dyn NonceStore>) -> Self {
        self.nonce_store = store;
        self
    }

    /// The same settings with the facilitator behind `faults` (and its settle timeout).
    pub(crate) fn with_faults(mut self, faults: Arc<PaymentFaults>) -> Self {
        self.facilitator = Arc::new(FaultyFacilitator {
            inner: self.facilitator,
            faults,
            landed: Mutex::default(),
        });
        self
    }

    /// The same settings with every offer's `maxTimeoutSeconds` set to `secs`.
    pub(crate) fn with_max_timeout_secs(mut self, secs: u64) -> Result<Self, ConfigError> {
        self.options = self
            .options
            .into_iter()
            .map(|option| option.with_max_timeout_secs(secs))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// An x402 layer over these settings, charging the [`RequestPrice`] an
    /// earlier step decided (none there: refused as a wiring fault, 500).
    ///
    /// `paid_replay` (a job route) lets the very payment that was settled
    /// through again, uncharged: its request gets the answer kept in the
    /// answer store (a lost answer recovered), another request (a poll of
    /// the paid job) runs again with the original receipt; and a wallet that
    /// signs in for the job it paid for is served again (the job's state, its
    /// result once done). Inference routes re-run nothing for a sign-in.
    ///
    /// `bazaar`, when given, declares each 402's discovery extension.
    pub(crate) fn layer(
        &self,
        paid_replay: bool,
        description: &str,
        bazaar: Option<&Arc<Bazaar>>,
    ) -> Result<X402Layer, ConfigError> {
        let mut builder = X402Layer::builder()
            .with_pricing(RequestPrice::pricing)
            .with_shared_facilitator(self.facilitator.clone())
            .with_nonce_store(self.nonce_store.clone())
            .with_answer_store(self.answer_store.clone())
            .with_answer_limits(self.answer_limits)
            .with_payment_identifier(self.payment_id)
            .with_clock(self.clock.clone())
            .with_paid_replay(paid_replay)
            .with_description(description)
            .with_mime_type("application/json")
            .with_public_base_url(&self.public_url)?
            .on_settlement(self.settled.hook());
        for option in &self.options {
            builder = builder.with_payment_option(option.clone());
        }
        if let Some(sign_in) = &self.sign_in {
            builder = builder
                .with_sign_in_with_x(sign_in.clone())
                .with_entitlement_store(self.entitlements.clone());
            if paid_replay {
                builder = builder.rerun_signed_in(|_: &http::request::Parts| true);
            }
        }
        if let Some(bazaar) = bazaar {
            let bazaar = Arc::clone(bazaar);
            builder = builder.with_quote_extensions(
                move |request: &http::request::Parts, _: &walletgate::x402::server::Price| {
                    bazaar.entry(request)
                },
            );
        }
        builder.build()
    }

    /// The layer of the image routes: priced per image by `validate_image`,
    /// polls by their job (`find_job`).
    pub(crate) fn image_layer(
        &self,
        bazaar: Option<&Arc<Bazaar>>,
    ) -> Result<X402Layer, ConfigError> {
        self.layer(true, "Image generation", bazaar)
    }

    /// The layer of the inference routes: priced by model and request in the
    /// pipeline's model step.
    pub(crate) fn inference_layer(
        &self,
        bazaar: Option<&Arc<Bazaar>>,
    ) -> Result<X402Layer, ConfigError> {
        self.layer(false, "Model inference", bazaar)
    }
}

/// Counts settlements and their amounts; logs one line per settlement.
#[derive(Debug, Default)]
pub(crate) struct SettlementTally {
    /// Settlements and atomic units so far.
    total: Mutex<(u64, u128)>,
}

impl SettlementTally {
    /// The layers' settlement hook: adds to the total and logs the payment.
    fn hook(
        self: &Arc<Self>,
    ) -> impl Fn(SettledPayment) -> std::future::Ready<Result<(), SettlementHookError>>
    + Send
    + Sync
    + 'static {
        let tally = self.clone();
        move |payment: SettledPayment| {
            let (count, units) = {
                let mut total = tally.total.lock().unwrap_or_else(|p| p.into_inner());
                total.0 += 1;
                total.1 += payment.amount.units();
                *total
            };
            tracing::info!(
                target: "settlements",
                amount = %payment.amount,
                payer = %payment.payer,
                network = %payment.network,
                transaction = %payment.transaction,
                resource = %payment.resource,
                request_id = payment.request_id.as_deref().unwrap_or("-"),
                total_settlements = count,
                total_units = units,
                "settled",
            );
            std::future::ready(Ok(()))
        }
    }
}

/// A facilitator with [`PaymentFaults`] injected into its settlements.
struct FaultyFacilitator {
    inner: Arc<dyn Facilitator>,
    faults: Arc<PaymentFaults>,
    /// Settlements whose receipt was lost, by the payment's authorization.
    landed: Mutex<HashMap<String, SettleResponse>>,
}

impl Facilitator for FaultyFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        let unavailable = self.faults.unavailable_verifies.fetch_update(
            Ordering::SeqCst,
            Ordering::SeqCst,
            |left| left.checked_sub(1),
        );
        if unavailable.is_ok() {
            return Box::pin(std::future::ready(Err(FacilitatorError::unavailable(
                "verification unavailable (injected fault)",
            ))));
        }
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            if self.faults.refuse_settle.load(Ordering::SeqCst) {
                let network = request.payment_requirements().network.clone();
                return Ok(SettleResponse::failure(
                    network,
                    "invalid_exact_evm_transaction_failed",
                    None,
                ));
            }
            // Keyed by the payload as sent, built only while a lost receipt is
            // remembered or armed: every other settlement goes straight through.
            let authorization = || request.payment_payload().payload.to_string();
            let landed = {
                let landed = self.landed.lock().unwrap_or_else(|p| p.into_inner());
                if landed.is_empty() {
                    None
                } else {
                    landed.get(&authorization()).cloned()
                }
            };
            if let Some(landed) = landed {
                return Ok(landed);
            }
            let lose = self.faults.lost_settle_receipts.fetch_update(
                Ordering::SeqCst,
                Ordering::SeqCst,
                |left| left.checked_sub(1),
            );
            if lose.is_ok() {
                let settled = self.inner.settle(request).await?;
                if !settled.success {
                    return Ok(settled);
                }
                let transaction = settled.transaction.clone();
                self.landed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(authorization(), settled);
                return Err(FacilitatorError::pending(
                    transaction,
                    "no receipt within the wait (injected fault)",
                ));
            }
            let settle = async {
                if self.faults.hang_settle.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                self.inner.settle(request).await
            };
            // Given up mid-settlement: it may still land, so it is pending
            // (the claim kept, the resend asks again), never released.
            tokio::time::timeout(self.faults.settle_timeout, settle)
                .await
                .unwrap_or_else(|_| Err(FacilitatorError::answer_lost("settlement timed out")))
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        self.inner.supported()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use walletgate::x402::{
        facilitator::DevLedger,
        wire::{AtomicAmount, Network},
    };

    #[test]
    fn every_offer_quotes_the_configured_max_timeout() {
        let clock: SharedClock = Arc::new(walletgate::SystemClock);
        let settings = PaymentSettings::evm(
            &crate::config::EvmSettings::base_sepolia(),
            DevLedger::DEV_ACCOUNTS[9],
            Arc::new(DevLedger::new()),
            &walletgate::tls::ClientTls::webpki_roots(),
            None,
            clock,
        )
        .unwrap();
        let amount = AtomicAmount::new(1_000);
        assert_eq!(
            settings.options[0]
                .requirements_for_amount(amount)
                .max_timeout_seconds,
            300
        );
        let settings = settings.with_max_timeout_secs(20).unwrap();
        assert_eq!(
            settings.options[0]
                .requirements_for_amount(amount)
                .max_timeout_seconds,
            20
        );
        assert!(settings.with_max_timeout_secs(0).is_err());
    }

    #[tokio::test]
    async fn the_settlement_log_keeps_a_running_total() {
        let tally = Arc::new(SettlementTally::default());
        let hook = tally.hook();
        for units in [3_000, 1_500] {
            let payment = SettledPayment::new(
                DevLedger::DEV_ACCOUNTS[1],
                AtomicAmount::new(units),
                Network::base_sepolia(),
                "0xabc",
                "http://127.0.0.1/v1/chat/completions",
                None,
            );
            hook(payment).await.unwrap();
        }
        assert_eq!(*tally.total.lock().unwrap(), (2, 4_500));
    }
}

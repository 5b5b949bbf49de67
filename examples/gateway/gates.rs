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

use walletgate::clock::SharedClock;
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
        PaymentOption, Price, QuoteExtensions, RequestPrice, SettledPayment, SettlementHookError,
        X402Layer, X402LayerBuilder,
    },
    wire::{SettleResponse, SupportedResponse, VerifyResponse},
};

use crate::config::UptoPlace;
use crate::config::{PaymentFaults, PaymentNetwork};

/// The layers after validation, built once from the configuration.
pub(crate) struct Gates {
    /// Free models: per-client-IP limit.
    pub(crate) free_tier: FreeTier,
    /// Paid inference: priced by model and request.
    pub(crate) inference_payment: X402Layer,
    /// Paid image jobs, in paid-replay mode: polls reuse the paying signature.
    pub(crate) image_payment: X402Layer,
    /// Paid MCP tools (`/mcp`): priced by the same code as their REST routes.
    pub(crate) mcp_payment: walletgate::x402::server::mcp::X402McpLayer,
}

impl Gates {
    /// The free tier, and the two paid families' layers from what every paid
    /// route shares (`payment`), each 402 declaring `extensions` when given.
    /// Inference offers `inference_options` when given (the metered `upto`
    /// beside `exact`); images what every route shares.
    pub(crate) fn new(
        free_tier: FreeTier,
        payment: &X402LayerBuilder,
        inference_options: Option<&[PaymentOption]>,
        extensions: Option<&Arc<dyn QuoteExtensions>>,
        tool_pricing: impl walletgate::x402::server::mcp::ToolPricing,
    ) -> Result<Self, ConfigError> {
        let inference = match inference_options {
            Some(options) => payment.clone().with_payment_options(options.to_vec()),
            None => payment.clone(),
        };
        Ok(Self {
            free_tier,
            inference_payment: inference_layer(&inference, extensions)?,
            image_payment: image_layer(payment, extensions)?,
            mcp_payment: (payment.clone())
                .with_description("Model inference (MCP tool)")
                .build_mcp(tool_pricing)?,
        })
    }
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
    let client = HttpFacilitator::new_with_tls(url, tls)?.with_timeout(timeout);
    Ok(match auth {
        Some(auth) => client.with_auth(Arc::clone(auth)),
        None => client,
    })
}

/// The offers of every quote, the first one preferred by clients:
/// `network`'s USDC paid to `pay_to` (Solana: to its own wallet, with its fee
/// payer as `extra.feePayer`), each signed payment valid for
/// `max_timeout_secs` (`maxTimeoutSeconds`).
pub(crate) fn payment_options(
    network: &PaymentNetwork,
    pay_to: &str,
    max_timeout_secs: u64,
) -> Result<Vec<PaymentOption>, ConfigError> {
    let option = match network {
        PaymentNetwork::Evm(evm) => evm.option(pay_to)?,
        PaymentNetwork::Solana(settings) => {
            let Some(fee_payer) = settings.fee_payer.as_deref() else {
                return Err(ConfigError::InvalidFacilitatorUrl(format!(
                    "{}: no fee payer (set GATEWAY_SOLANA_FEE_PAYER or serve it in /supported)",
                    settings.facilitator_url
                )));
            };
            PaymentOption::solana_usdc(&settings.pay_to, fee_payer)
        }
    };
    Ok(vec![option.with_max_timeout_secs(max_timeout_secs)?])
}

/// `options` with the metered `upto` offer added where `upto` places it:
/// the EVM network's asset and payTo, its ceiling the same amount (the
/// layer quotes one total for every option), `extra` = `{facilitatorAddress}`.
pub(crate) fn with_upto(
    mut options: Vec<PaymentOption>,
    upto: Option<(UptoPlace, alloy_primitives::Address)>,
    evm: Option<&crate::config::EvmSettings>,
    pay_to: &str,
    max_timeout_secs: u64,
) -> Result<Vec<PaymentOption>, ConfigError> {
    let (Some((place, facilitator)), Some(evm)) = (upto, evm) else {
        return Ok(options);
    };
    // What an upto client reads (the official one reads this alone): Permit2's
    // domain is fixed, so no token domain; `assetTransferMethod` (the spec's
    // example has none) would push a chat's 402 headers past 8 KiB.
    let metered = PaymentOption::upto_permit2(evm.network.clone(), &evm.usdc, pay_to, facilitator)
        .with_max_timeout_secs(max_timeout_secs)?;
    match place {
        UptoPlace::Off => {}
        UptoPlace::Second => options.push(metered),
        UptoPlace::First => options.insert(0, metered),
    }
    Ok(options)
}

/// Who verifies and settles `network`'s payments, behind `faults` (and their
/// settle timeout): walletgate's own `settler` when given; else the
/// facilitator at the configured URL, each call signed by `auth` when given
/// (an unreachable or failing one is `PAYMENT_VERIFICATION_UNAVAILABLE`, 503,
/// nothing consumed; a stale Solana blockhash it reports is
/// `PAYMENT_BLOCKHASH_STALE`; its settlements' `Idempotency-Key`s derived
/// from `idempotency_secret` when given, which replicas share); else, Base
/// Sepolia only, in-process on the development `ledger`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn facilitator(
    network: &PaymentNetwork,
    settler: Option<Arc<dyn Facilitator>>,
    ledger: Arc<dyn Ledger>,
    tls: &ClientTls,
    auth: Option<&Arc<dyn FacilitatorAuth>>,
    idempotency_secret: Option<[u8; 32]>,
    clock: SharedClock,
    faults: Arc<PaymentFaults>,
) -> Result<Arc<dyn Facilitator>, ConfigError> {
    let url = match network {
        PaymentNetwork::Evm(evm) => evm.facilitator_url.as_deref(),
        PaymentNetwork::Solana(settings) => Some(settings.facilitator_url.as_str()),
    };
    let inner: Arc<dyn Facilitator> = match (settler, url) {
        (Some(settler), _) => settler,
        (None, Some(url)) => {
            let client = facilitator_client(url, tls, auth, SETTLE_CALL_TIMEOUT)?;
            Arc::new(match idempotency_secret {
                Some(secret) => client.with_idempotency_secret(secret),
                None => client,
            })
        }
        (None, None) => Arc::new(LocalEvmFacilitator::new(ledger, clock)),
    };
    Ok(Arc::new(FaultyFacilitator {
        inner,
        faults,
        landed: Mutex::default(),
    }))
}

/// What every paid route has in common, configured once and cloned per
/// route ([`inference_layer`], [`image_layer`]): each route charges the
/// [`RequestPrice`] an earlier step decided (none there: refused as a wiring
/// fault, 500), quotes `options` with `public_url` + the path as
/// `resource.url`, is settled by `facilitator`, and logs every settlement
/// with a running total of all of them.
pub(crate) fn payment(
    options: &[PaymentOption],
    facilitator: Arc<dyn Facilitator>,
    clock: SharedClock,
    public_url: &str,
) -> Result<X402LayerBuilder, ConfigError> {
    let settled = Arc::new(SettlementTally::default());
    let builder = X402Layer::builder()
        .with_pricing(RequestPrice::pricing)
        .with_shared_facilitator(facilitator)
        .with_clock(clock)
        .with_mime_type("application/json")
        .with_public_base_url(public_url)?
        .on_settlement(settled.hook());
    Ok(options.iter().fold(builder, |builder, option| {
        builder.with_payment_option(option.clone())
    }))
}

/// The layer of the inference routes, from the routes' common `payment`:
/// priced by model and request in the pipeline's model step. A sign-in
/// re-runs nothing. `extensions`, when given, are each 402's own
/// (discovery's `bazaar`).
pub(crate) fn inference_layer(
    payment: &X402LayerBuilder,
    extensions: Option<&Arc<dyn QuoteExtensions>>,
) -> Result<X402Layer, ConfigError> {
    declaring(payment.clone(), extensions)
        .with_description("Model inference")
        .build()
}

/// The layer of the image routes, from the routes' common `payment`: priced
/// per image by `validate_image`, polls by their job (`find_job`), in
/// paid-replay mode. The very payment that was settled goes through again,
/// uncharged: its request gets the answer kept in the answer store (a lost
/// answer recovered), another request (a poll of the paid job) runs again
/// with the original receipt; and a wallet that signs in for the job it paid
/// for is served again (the job's state, its result once done; without
/// `sign-in-with-x` no request signs in).
pub(crate) fn image_layer(
    payment: &X402LayerBuilder,
    extensions: Option<&Arc<dyn QuoteExtensions>>,
) -> Result<X402Layer, ConfigError> {
    declaring(payment.clone(), extensions)
        .with_paid_replay(true)
        .with_description("Image generation")
        .rerun_signed_in(|_: &http::request::Parts| true)
        .build()
}

/// `builder` declaring `extensions` in each 402, when given.
fn declaring(
    builder: X402LayerBuilder,
    extensions: Option<&Arc<dyn QuoteExtensions>>,
) -> X402LayerBuilder {
    match extensions {
        None => builder,
        Some(extensions) => {
            let extensions = Arc::clone(extensions);
            builder.with_quote_extensions(move |request: &http::request::Parts, price: &Price| {
                extensions.extensions(request, price)
            })
        }
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
        let network = PaymentNetwork::Evm(crate::config::EvmSettings::base_sepolia());
        let pay_to = DevLedger::DEV_ACCOUNTS[9];
        let amount = AtomicAmount::new(1_000);
        let evm = crate::config::EvmSettings::base_sepolia();
        let default = evm.option(pay_to).unwrap();
        assert_eq!(
            default.requirements_for_amount(amount).max_timeout_seconds,
            300
        );
        let max_timeout = |secs| {
            payment_options(&network, pay_to, secs).map(|options| {
                options[0]
                    .requirements_for_amount(amount)
                    .max_timeout_seconds
            })
        };
        assert_eq!(
            max_timeout(walletgate::x402::server::DEFAULT_MAX_TIMEOUT_SECS).unwrap(),
            300
        );
        assert_eq!(max_timeout(20).unwrap(), 20);
        assert!(max_timeout(0).is_err());
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

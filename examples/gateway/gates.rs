//! The gateway's two gates after validation: the free-tier limit for free
//! models and x402 payment for paid ones, with their pricing hooks.
//!
//! Both read what the pipeline put into the request extensions
//! ([`ResolvedModel`], [`ParsedRequest`]), so neither re-parses the body.
//! Prices come from [`request_price`] and [`image_price`]: the same request
//! always gets the same price, so a client's signed retry matches its quote.
//!
//! Embedded default: quotes in Base Sepolia USDC, verified and settled
//! in-process by [`LocalEvmFacilitator`] on a [`DevLedger`] that pre-funds
//! the ten public development accounts.

use std::sync::Arc;

use axum::extract::Request;
use http::request::Parts;
use walletgate::SharedClock;
use walletgate::free_tier::{FreeTierLimitLayer, FreeTierQuotas, InMemoryLimiter};
use walletgate::x402::{
    ConfigError, DevLedger, Facilitator, HttpFacilitator, InMemoryNonceStore, LocalEvmFacilitator,
    NonceStore, PaymentOption, Price, PriceRefusal, X402Layer,
};

use crate::config::SolanaSettings;
use crate::extensions::{ImagePrice, ParsedRequest, ResolvedModel};

/// The layers after validation, built once from the configuration.
pub(crate) struct Gates {
    /// Free models: per-client-IP limit.
    pub(crate) free_tier: FreeTier,
    /// Paid inference: priced by model and request.
    pub(crate) inference_payment: X402Layer,
    /// Paid image jobs, in paid-replay mode: polls reuse the paying signature.
    pub(crate) image_payment: X402Layer,
}

/// The free-tier predicate: the resolved model is free.
pub(crate) type IsFreeModel = fn(&Request) -> bool;

/// The free-tier layer as the pipeline uses it.
pub(crate) type FreeTier = FreeTierLimitLayer<IsFreeModel, InMemoryLimiter>;

/// Whether the pipeline resolved a free model for `request`.
fn is_free_model(request: &Request) -> bool {
    request
        .extensions()
        .get::<ResolvedModel>()
        .is_some_and(|ResolvedModel(model)| model.is_free())
}

/// The free-tier limit for free models, keyed by the connection's peer.
pub(crate) fn free_tier(quotas: FreeTierQuotas) -> FreeTier {
    FreeTierLimitLayer::with_quotas(is_free_model as IsFreeModel, quotas)
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
    pub(crate) clock: SharedClock,
}

impl PaymentSettings {
    /// Base Sepolia USDC paid to `pay_to`, settled on `ledger` in-process.
    pub(crate) fn local_evm(
        pay_to: &str,
        ledger: Arc<DevLedger>,
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            options: vec![PaymentOption::base_sepolia_usdc(pay_to)?],
            facilitator: Arc::new(LocalEvmFacilitator::new(ledger, clock.clone())),
            nonce_store: Arc::new(InMemoryNonceStore::new(clock.clone())),
            clock,
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
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        let facilitator = HttpFacilitator::new(&settings.facilitator_url)?
            .with_timeout(std::time::Duration::from_secs(10));
        Ok(Self {
            options: vec![PaymentOption::solana_usdc(&settings.pay_to, fee_payer)],
            facilitator: Arc::new(facilitator),
            nonce_store: Arc::new(InMemoryNonceStore::new(clock.clone())),
            clock,
        })
    }

    /// An x402 layer over these settings, pricing requests with `pricing`.
    ///
    /// `paid_replay` lets the very payment that was settled through again,
    /// uncharged: the image routes use it so clients poll a paid job (and
    /// recover a lost answer) with the signature they paid with.
    pub(crate) fn layer(
        &self,
        pricing: impl Fn(&Parts) -> Result<Price, PriceRefusal> + Send + Sync + 'static,
        paid_replay: bool,
        description: &str,
    ) -> Result<X402Layer, ConfigError> {
        let mut builder = X402Layer::builder()
            .pricing(pricing)
            .shared_facilitator(self.facilitator.clone())
            .nonce_store(self.nonce_store.clone())
            .clock(self.clock.clone())
            .paid_replay(paid_replay)
            .description(description)
            .mime_type("application/json");
        for option in &self.options {
            builder = builder.payment_option(option.clone());
        }
        builder.build()
    }

    /// The layer of the image routes: priced per image, polls by their job.
    pub(crate) fn image_layer(&self) -> Result<X402Layer, ConfigError> {
        self.layer(image_price, true, "Image generation")
    }

    /// The layer of the inference routes: priced by model and request.
    pub(crate) fn inference_layer(&self) -> Result<X402Layer, ConfigError> {
        self.layer(request_price, false, "Model inference")
    }
}

/// What a request costs before the flat fee: the payment layer's pricing hook.
///
/// Reads what the pipeline inserted, so it must run inside it; outside, it
/// refuses (a wiring fault, 500), never serves free.
pub(crate) fn request_price(parts: &Parts) -> Result<Price, PriceRefusal> {
    let Some(ParsedRequest(request)) = parts.extensions.get::<ParsedRequest>() else {
        return Err(PriceRefusal::missing("ParsedRequest"));
    };
    let Some(ResolvedModel(model)) = parts.extensions.get::<ResolvedModel>() else {
        return Err(PriceRefusal::missing("ResolvedModel"));
    };
    Ok(model.price(request))
}

/// The payment layer's pricing hook for the image routes.
pub(crate) fn image_price(parts: &Parts) -> Result<Price, PriceRefusal> {
    parts
        .extensions
        .get::<ImagePrice>()
        .map(|price| price.0)
        .ok_or_else(|| PriceRefusal::missing("ImagePrice"))
}

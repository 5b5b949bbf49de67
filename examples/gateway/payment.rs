//! The gateway's two gates after validation: the free-tier limit for free
//! models and x402 payment for paid ones.
//!
//! Both read what the pipeline put into the request extensions
//! ([`ResolvedModel`], [`ParsedRequest`](crate::pipeline::ParsedRequest)),
//! so neither re-parses the body. Prices come from
//! [`request_price`](crate::pipeline::request_price): the same request always
//! gets the same price, so a client's signed retry matches its quote.
//!
//! Embedded default: quotes in Base Sepolia USDC, verified and settled
//! in-process by [`LocalEvmFacilitator`] on a [`DevLedger`] that pre-funds
//! the ten public development accounts.

use std::sync::Arc;

use axum::extract::Request;
use http::request::Parts;
use serde_json::{Map, Value};
use walletgate::SharedClock;
use walletgate::free_tier::{FreeTierLimitLayer, FreeTierQuotas, InMemoryLimiter};
use walletgate::tls::ClientTls;
use walletgate::x402::{
    ConfigError, DevLedger, Facilitator, HttpFacilitator, InMemoryNonceStore, LocalEvmFacilitator,
    Network, NonceStore, PaymentOption, Price, UsdAmount, X402Layer,
};

use crate::catalogue::RequestPrice;
use crate::config::{SOLANA_MAINNET, SOLANA_USDC_MINT, SolanaSettings};
use crate::pipeline::{ResolvedModel, request_price};

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

/// What a priced request costs, as the payment layer takes it.
///
/// `None` means the pipeline inserted nothing (a wiring fault): the price is
/// then one no asset can express, which the layer answers with a 500, so a
/// miswired route is refused rather than served free.
pub(crate) fn x402_price(price: Option<RequestPrice>) -> Price {
    match price {
        Some(RequestPrice::Free) => Price::Free,
        Some(RequestPrice::UsdMicros(micros)) => {
            Price::Usd(UsdAmount::from_micros(u128::from(micros)))
        }
        None => Price::Usd(UsdAmount::from_micros(u128::MAX)),
    }
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
        tls: &ClientTls,
        clock: SharedClock,
    ) -> Result<Self, ConfigError> {
        let mut extra = Map::new();
        extra.insert("feePayer".into(), Value::from(fee_payer));
        let option = PaymentOption::other(
            Network::parse(SOLANA_MAINNET)?,
            SOLANA_USDC_MINT,
            &settings.pay_to,
            extra,
        );
        let facilitator = HttpFacilitator::with_tls(&settings.facilitator_url, tls)?
            .with_timeout(std::time::Duration::from_secs(10));
        Ok(Self {
            options: vec![option],
            facilitator: Arc::new(facilitator),
            nonce_store: Arc::new(InMemoryNonceStore::new(clock.clone())),
            clock,
        })
    }

    /// The facilitator's Solana fee payer, from its `GET /supported`, as the
    /// official servers read it at start.
    pub(crate) async fn solana_fee_payer(
        facilitator_url: &str,
        tls: &ClientTls,
    ) -> Result<String, String> {
        let facilitator =
            HttpFacilitator::with_tls(facilitator_url, tls).map_err(|error| error.to_string())?;
        let supported = facilitator
            .supported()
            .await
            .map_err(|error| error.to_string())?;
        supported
            .kinds
            .iter()
            .filter(|kind| kind.network.as_str() == SOLANA_MAINNET)
            .find_map(|kind| {
                kind.extra
                    .as_ref()?
                    .get("feePayer")?
                    .as_str()
                    .map(str::to_owned)
            })
            .ok_or_else(|| {
                format!("{facilitator_url}/supported lists no feePayer for {SOLANA_MAINNET}")
            })
    }

    /// An x402 layer over these settings, pricing requests with `pricing`.
    ///
    /// `paid_replay` lets the very payment that was settled through again,
    /// uncharged: the image routes use it so clients poll a paid job (and
    /// recover a lost answer) with the signature they paid with.
    pub(crate) fn layer(
        &self,
        pricing: impl Fn(&Parts) -> Price + Send + Sync + 'static,
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
        self.layer(crate::images::image_price, true, "Image generation")
    }

    /// The layer of the inference routes: priced by model and request.
    pub(crate) fn inference_layer(&self) -> Result<X402Layer, ConfigError> {
        self.layer(
            |parts: &Parts| x402_price(request_price(parts)),
            false,
            "Model inference",
        )
    }
}

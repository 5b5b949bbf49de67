//! [`X402Layer`] and its builder.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::Response;
use tower_layer::Layer;

use super::answers::{AnswerLimits, AnswerStore, InMemoryAnswerStore};
use super::config::Config;
#[cfg(feature = "siwx")]
use super::config::RerunRoutes;
use super::extensions::QuoteExtensions;
use super::flow::{CutStreamLimit, CutStreams};
use super::offer_receipt::OfferSigner;
use super::payment_id::{self, PaymentIdentifier};
use super::pricing::Pricing;
use super::quote::{PaymentOption, QuoteCache};
use super::receipt::SettlementHook;
use super::replay::{InMemoryNonceStore, NonceStore};
use super::service::X402;
use crate::clock::{SharedClock, SystemClock};
use crate::envelope::{EnvelopeStyle, GatewayError, RenderRejection};
use crate::x402::ConfigError;
use crate::x402::facilitator::Facilitator;
use crate::x402::wire::types::UsdAmount;

/// Applies x402 payment to a service: quote, verify before, settle after.
///
/// See the [module docs](super) for the flow and an example.
#[derive(Clone)]
#[must_use]
pub struct X402Layer {
    pub(crate) config: Arc<Config>,
}

impl X402Layer {
    /// Starts a configuration.
    pub fn builder() -> X402LayerBuilder {
        X402LayerBuilder::default()
    }

    /// The flat fee this layer adds to every [`Price::Usd`](super::Price::Usd)
    /// (set with [`with_flat_fee`](X402LayerBuilder::with_flat_fee)).
    pub fn flat_fee(&self) -> UsdAmount {
        self.config.flat_fee
    }

    /// How many calls of the [settlement hook](X402LayerBuilder::on_settlement)
    /// failed since the layer was built (shared by every service it made).
    pub fn settlement_hook_failures(&self) -> u64 {
        self.config.hook_failures.load(Ordering::Relaxed)
    }

    /// Settlements whose answer named more than its payment authorised
    /// ([`SettleAmount`](super::SettleAmount)): the authorised amount was
    /// settled, the overrun logged.
    pub fn settlement_overruns(&self) -> u64 {
        self.config.overruns.load(Ordering::Relaxed)
    }
}

impl<S> Layer<S> for X402Layer {
    type Service = X402<S>;

    fn layer(&self, inner: S) -> Self::Service {
        X402::from_config(inner, self.config.clone())
    }
}

impl fmt::Debug for X402Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X402Layer")
            .field("options", &self.options)
            .field("flat_fee", &self.flat_fee)
            .field("paid_replay", &self.paid_replay)
            .field("public_base_url", &self.public_base_url)
            .field("settlement_hook", &self.settlement_hook.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds an [`X402Layer`]; [`build`](Self::build) validates once.
///
/// It is `Clone` (every part is shared behind an `Arc`): configure what
/// routes have in common once, then clone it per route and set the rest.
#[derive(Clone)]
#[must_use]
pub struct X402LayerBuilder {
    pricing: Option<Arc<dyn Pricing>>,
    facilitator: Option<Arc<dyn Facilitator>>,
    nonce_store: Option<Arc<dyn NonceStore>>,
    answer_store: Option<Arc<dyn AnswerStore>>,
    answer_limits: AnswerLimits,
    payment_identifier: PaymentIdentifier,
    clock: Option<SharedClock>,
    options: Vec<PaymentOption>,
    flat_fee: UsdAmount,
    paid_replay: bool,
    public_base_url: Option<String>,
    host_derived_resource_url: bool,
    description: String,
    mime_type: String,
    quote_extensions: Option<Arc<dyn QuoteExtensions>>,
    settlement_hook: Option<Arc<dyn SettlementHook>>,
    reject: RenderRejection,
    cut_stream_limit: CutStreamLimit,
    offer_signer: Option<Arc<OfferSigner>>,
    /// The in-memory stores of layers built without their own: made at the
    /// first build and shared by every layer built from this builder or its
    /// clones, so a payment spent on one front (HTTP, MCP) is spent on all.
    defaults: Arc<std::sync::OnceLock<DefaultStores>>,
    #[cfg(feature = "mpp")]
    mpp: Option<super::mpp::Mpp>,
    #[cfg(feature = "siwx")]
    sign_in_with_x: Option<super::siwx::SignInWithX>,
    #[cfg(feature = "siwx")]
    entitlements: Option<Arc<dyn super::EntitlementStore>>,
    #[cfg(feature = "siwx")]
    rerun_signed_in: Option<Arc<RerunRoutes>>,
}

impl Default for X402LayerBuilder {
    fn default() -> Self {
        Self {
            pricing: None,
            facilitator: None,
            nonce_store: None,
            answer_store: None,
            answer_limits: AnswerLimits::default(),
            payment_identifier: PaymentIdentifier::Off,
            clock: None,
            options: Vec::new(),
            flat_fee: UsdAmount::FLAT_FEE,
            paid_replay: false,
            public_base_url: None,
            host_derived_resource_url: false,
            description: String::new(),
            mime_type: String::new(),
            quote_extensions: None,
            settlement_hook: None,
            reject: RenderRejection::default(),
            cut_stream_limit: CutStreamLimit::DEFAULT,
            offer_signer: None,
            defaults: Arc::default(),
            #[cfg(feature = "mpp")]
            mpp: None,
            #[cfg(feature = "siwx")]
            sign_in_with_x: None,
            #[cfg(feature = "siwx")]
            entitlements: None,
            #[cfg(feature = "siwx")]
            rerun_signed_in: None,
        }
    }
}

impl X402LayerBuilder {
    /// What each request costs (required).
    pub fn with_pricing(mut self, pricing: impl Pricing) -> Self {
        self.pricing = Some(Arc::new(pricing));
        self
    }

    /// Who verifies and settles (required).
    pub fn with_facilitator(mut self, facilitator: impl Facilitator) -> Self {
        self.facilitator = Some(Arc::new(facilitator));
        self
    }

    /// A facilitator shared with other layers, kept as the `Arc` it is.
    ///
    /// [`with_facilitator`](Self::with_facilitator) takes one too (an `Arc` of
    /// a facilitator is a facilitator), but wraps it in a second `Arc`, so
    /// every verify and settle goes through two pointers and two vtables; this
    /// setter stores the caller's `Arc` itself.
    pub fn with_shared_facilitator(mut self, facilitator: Arc<dyn Facilitator>) -> Self {
        self.facilitator = Some(facilitator);
        self
    }

    /// Where claims live (default: an [`InMemoryNonceStore`] on the layer's
    /// clock, shared by every layer built from this builder and its clones).
    /// Share one store between layers that take the same payments.
    pub fn with_nonce_store(mut self, store: Arc<dyn NonceStore>) -> Self {
        self.nonce_store = Some(store);
        self
    }

    /// Where paid answers are kept for a resend (default: an
    /// [`InMemoryAnswerStore`] on the layer's clock). A settlement whose
    /// outcome is not known keeps its answer here, so the resend of the same
    /// payment, on any replica sharing the store, gets it without a second
    /// upstream call. Share one store between replicas with the nonce store.
    pub fn with_answer_store(mut self, store: Arc<dyn AnswerStore>) -> Self {
        self.answer_store = Some(store);
        self
    }

    /// How large a kept answer may be and how long it is kept (default
    /// [`AnswerLimits::default`]: 1 MiB, an hour).
    pub fn with_answer_limits(mut self, limits: AnswerLimits) -> Self {
        self.answer_limits = limits;
        self
    }

    /// Takes the `payment-identifier` extension (default
    /// [`PaymentIdentifier::Off`]): declared in every 402, a payment's id
    /// makes its request pay once, its answer kept in the answer store (see
    /// the [`payment_id`](super::payment_id) module).
    pub fn with_payment_identifier(mut self, mode: PaymentIdentifier) -> Self {
        self.payment_identifier = mode;
        self
    }

    /// How many metered (`upto`) streams a payer may cut before its end
    /// before its metered payments are refused for a while
    /// ([`METERED_PAYMENTS_SUSPENDED`](super::METERED_PAYMENTS_SUSPENDED);
    /// default [`CutStreamLimit::DEFAULT`]). A metered stream pays when it
    /// ends, so a cut one is free; `exact` is paid before the answer.
    pub fn with_cut_stream_limit(mut self, limit: CutStreamLimit) -> Self {
        self.cut_stream_limit = limit;
        self
    }

    /// Signs offers, receipts and usage statements with `signer` (x402's
    /// `offer-receipt` extension, EIP-712): every 402 carries one signed
    /// offer per `accepts` entry, every successful settlement a signed
    /// receipt naming its transaction, and a metered one a signed usage
    /// statement (`walletgate-usage`). Without it nothing is signed and
    /// every 402 is as before, byte for byte.
    pub fn with_offer_signer(mut self, signer: OfferSigner) -> Self {
        self.offer_signer = Some(Arc::new(signer));
        self
    }

    /// Also takes MPP's `Payment` scheme (EVM `charge`, an EIP-3009
    /// `authorization` credential): every 402 carries a challenge per EVM
    /// `exact` offer beside the x402 quote, and a credential is paid through
    /// the same flow (one replay set for both), its answer carrying
    /// `Payment-Receipt`. A stream paid so is settled before its first byte.
    #[cfg(feature = "mpp")]
    pub fn with_mpp(mut self, mpp: super::mpp::Mpp) -> Self {
        self.mpp = Some(mpp);
        self
    }

    /// The time source (default: the system clock).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Adds a way to pay; offers are listed in the order added, and clients sign the first.
    pub fn with_payment_option(mut self, option: PaymentOption) -> Self {
        self.options.push(option);
        self
    }

    /// Sets every way to pay, in the order clients see them, in place of
    /// those set before (a route family that offers more than the others,
    /// from a builder they share).
    pub fn with_payment_options(
        mut self,
        options: impl IntoIterator<Item = PaymentOption>,
    ) -> Self {
        self.options = options.into_iter().collect();
        self
    }

    /// The fee added to every [`Price::Usd`](super::Price::Usd) (default
    /// [`UsdAmount::FLAT_FEE`], 0.001 USD); a [`Price::UsdAllIn`](super::Price::UsdAllIn)
    /// already includes it. The only fee a server configures: no pricing
    /// subtracts or adds it.
    pub fn with_flat_fee(mut self, fee: UsdAmount) -> Self {
        self.flat_fee = fee;
        self
    }

    /// Lets a duplicate of a settled authorization reach the inner service
    /// with the original receipt, uncharged (default off: `PAYMENT_REPLAY`).
    pub fn with_paid_replay(mut self, enabled: bool) -> Self {
        self.paid_replay = enabled;
        self
    }

    /// The public `http(s)://host[:port][/prefix]` every quote's `resource.url`
    /// starts with (required, unless
    /// [`with_host_derived_resource_url`](Self::with_host_derived_resource_url)):
    /// the request's path and query
    /// follow it. A path prefix is for a gateway served under one behind a
    /// proxy (`https://pay.example/gw`).
    pub fn with_public_base_url(mut self, base_url: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::InvalidBaseUrl(base_url.to_owned());
        let trimmed = base_url.trim_end_matches('/');
        let rest = trimmed
            .strip_prefix("https://")
            .or_else(|| trimmed.strip_prefix("http://"))
            .ok_or_else(invalid)?;
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        // Quotes are signed: anything a client could read two ways is refused.
        let clean = |text: &str| {
            !text.contains(|c: char| c.is_whitespace() || c.is_control() || "?#\\\"@".contains(c))
        };
        if host.is_empty() || !clean(host) || !clean(path) || path.contains("//") {
            return Err(invalid());
        }
        self.public_base_url = Some(trimmed.to_owned());
        Ok(self)
    }

    /// Builds `resource.url` from the request's `Host` header and `http://`
    /// when no public base URL is set. The client chooses that header, so a
    /// quote can then name any host: only for tests and loopback demos.
    pub fn with_host_derived_resource_url(mut self) -> Self {
        self.host_derived_resource_url = true;
        self
    }

    /// `resource.description` of quotes.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// `resource.mimeType` of quotes.
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = mime_type.into();
        self
    }

    /// Extensions every 402 declares besides the layer's own (discovery's
    /// `bazaar`, say), decided per request by `extensions` (see
    /// [`QuoteExtensions`]); default none. They ride in `PAYMENT-REQUIRED`
    /// only: not in the two older headers, nor in the body.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use walletgate::x402::server::{Price, QuoteExtensionMap, X402Layer};
    ///
    /// let bazaar: QuoteExtensionMap = Arc::new(
    ///     serde_json::json!({"bazaar": {"info": {"input": {"type": "http", "method": "GET"}}}})
    ///         .as_object()
    ///         .cloned()
    ///         .unwrap_or_default(),
    /// );
    /// let builder = X402Layer::builder().with_quote_extensions(
    ///     move |request: &http::request::Parts, _: &Price| {
    ///         (request.uri.path() == "/weather").then(|| bazaar.clone())
    ///     },
    /// );
    /// ```
    pub fn with_quote_extensions(mut self, extensions: impl QuoteExtensions) -> Self {
        self.quote_extensions = Some(Arc::new(extensions));
        self
    }

    /// Receives every settled payment once, right after settlement (see
    /// [`SettlementHook`]); default none.
    ///
    /// ```
    /// use walletgate::x402::server::{SettledPayment, SettlementHookError, X402Layer};
    ///
    /// let builder = X402Layer::builder().on_settlement(|payment: SettledPayment| async move {
    ///     println!("{} units from {} in {}", payment.amount, payment.payer, payment.transaction);
    ///     Ok::<_, SettlementHookError>(())
    /// });
    /// ```
    pub fn on_settlement(mut self, hook: impl SettlementHook) -> Self {
        self.settlement_hook = Some(Arc::new(hook));
        self
    }

    /// Renders the layer's rejections with `reject` instead of the route's
    /// envelope (tower-http's `ValidateRequest` idea): it gets the failure
    /// (code, message, payer, `Retry-After`) and the route's style. A 402
    /// still carries the quote headers, so clients can pay after it.
    pub fn with_rejection<F>(mut self, reject: F) -> Self
    where
        F: Fn(GatewayError, EnvelopeStyle) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.reject = RenderRejection::new(reject);
        self
    }

    /// Declares the `sign-in-with-x` extension: a wallet that paid for an
    /// operation signs in to get the kept answer again, uncharged (see
    /// [`SignInWithX`](super::SignInWithX)). Every settlement then records
    /// its payer's entitlement to the operation (see
    /// [`with_entitlement_store`](Self::with_entitlement_store)) and every
    /// settled answer within the answer limits (a stream: whole, once it
    /// settled) is kept under its payer and operation, both for the answer
    /// retention. Every 402, a refused payment's too, carries a fresh
    /// challenge. Declared only with a public base URL (never from the
    /// `Host` header) and only for EVM offers.
    #[cfg(feature = "siwx")]
    pub fn with_sign_in_with_x(mut self, sign_in: super::siwx::SignInWithX) -> Self {
        self.sign_in_with_x = Some(sign_in);
        self
    }

    /// Where `sign-in-with-x` entitlements are recorded (default: an
    /// [`InMemoryEntitlementStore`](super::InMemoryEntitlementStore) on the
    /// layer's clock): after each settlement, its payer and operation, for
    /// the answer retention. Replicas share one (e.g.
    /// `RedisEntitlementStore`), with the answer store.
    #[cfg(feature = "siwx")]
    pub fn with_entitlement_store(mut self, store: Arc<dyn super::EntitlementStore>) -> Self {
        self.entitlements = Some(store);
        self
    }

    /// Runs the handler again, uncharged, for a wallet that signs in for an
    /// operation it paid for when no answer was kept for it (too large, or
    /// evicted), or when the one kept is a job's `202 Accepted` (the job's
    /// state is the handler's to tell): on the requests `routes` accepts.
    /// The handler sees the settled [`PaymentReceipt`](super::PaymentReceipt),
    /// marked as a replay; the answer carries no `PAYMENT-RESPONSE`. Default:
    /// no route (a route whose handler spends per call should not opt in).
    ///
    /// ```
    /// use walletgate::x402::server::X402Layer;
    ///
    /// let builder = X402Layer::builder()
    ///     .rerun_signed_in(|request: &http::request::Parts| request.uri.path().starts_with("/v1/images/"));
    /// ```
    #[cfg(feature = "siwx")]
    pub fn rerun_signed_in(
        mut self,
        routes: impl Fn(&http::request::Parts) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.rerun_signed_in = Some(Arc::new(routes));
        self
    }

    /// For a front that prices calls itself and names its own resources
    /// (MCP's tools, `mcp://tool/<name>`): a request pricing it never asks,
    /// and no public base URL, so `build` needs neither.
    pub(crate) fn for_tools(mut self) -> Self {
        if self.pricing.is_none() {
            let unused = |_: &http::request::Parts| {
                Err(super::PriceRefusal::missing(
                    "a request pricing (an MCP-only layer)",
                ))
            };
            self.pricing = Some(Arc::new(unused));
        }
        self.host_derived_resource_url |= self.public_base_url.is_none();
        self
    }

    /// Validates and builds the layer.
    pub fn build(self) -> Result<X402Layer, ConfigError> {
        let pricing = self.pricing.ok_or(ConfigError::MissingPricing)?;
        let facilitator = self.facilitator.ok_or(ConfigError::MissingFacilitator)?;
        if self.options.is_empty() {
            return Err(ConfigError::NoPaymentOptions);
        }
        if self.public_base_url.is_none() && !self.host_derived_resource_url {
            return Err(ConfigError::MissingPublicBaseUrl);
        }
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let defaults = self.defaults.get_or_init(|| DefaultStores::new(&clock));
        let nonce_store = self.nonce_store.unwrap_or_else(|| defaults.nonces.clone());
        let answer_store = self
            .answer_store
            .unwrap_or_else(|| defaults.answers.clone());
        #[cfg(feature = "siwx")]
        let sign_in = match (self.sign_in_with_x, &self.public_base_url) {
            (Some(sign_in), Some(base)) => {
                let chains = self
                    .options
                    .iter()
                    .filter_map(|o| o.network().eip155_chain_id());
                super::siwx::SignIn::new(sign_in, base, chains, clock.clone()).map(Arc::new)
            }
            _ => None,
        };
        #[cfg(feature = "siwx")]
        let entitlements = self
            .entitlements
            .unwrap_or_else(|| defaults.entitlements.clone());
        let quotes = QuoteCache::with_extensions(layer_extensions(self.payment_identifier))
            .with_offer_signer(self.offer_signer.clone(), clock.clone());
        #[cfg(feature = "siwx")]
        let quotes = quotes.with_sign_in(sign_in.clone());
        Ok(X402Layer {
            config: Arc::new(Config {
                pricing,
                facilitator,
                nonce_store,
                answer_store,
                answer_limits: self.answer_limits,
                payment_identifier: self.payment_identifier,
                clock,
                options: self.options,
                flat_fee: self.flat_fee,
                paid_replay: self.paid_replay,
                public_base_url: self.public_base_url,
                description: self.description,
                mime_type: self.mime_type,
                quotes,
                quote_extensions: self.quote_extensions,
                settlement_hook: self.settlement_hook,
                reject: self.reject,
                hook_failures: AtomicU64::new(0),
                overruns: AtomicU64::new(0),
                cut_streams: CutStreams::new(self.cut_stream_limit),
                offer_signer: self.offer_signer,
                #[cfg(feature = "mpp")]
                mpp: self.mpp,
                #[cfg(feature = "siwx")]
                sign_in,
                #[cfg(feature = "siwx")]
                entitlements,
                #[cfg(feature = "siwx")]
                rerun_signed_in: self.rerun_signed_in,
            }),
        })
    }
}

/// The in-memory stores a builder's layers share when given none.
struct DefaultStores {
    nonces: Arc<dyn NonceStore>,
    answers: Arc<dyn AnswerStore>,
    #[cfg(feature = "siwx")]
    entitlements: Arc<dyn super::EntitlementStore>,
}

impl DefaultStores {
    fn new(clock: &SharedClock) -> Self {
        Self {
            nonces: Arc::new(InMemoryNonceStore::new(clock.clone())),
            answers: Arc::new(InMemoryAnswerStore::new(clock.clone())),
            #[cfg(feature = "siwx")]
            entitlements: Arc::new(super::InMemoryEntitlementStore::new(clock.clone())),
        }
    }
}

/// The `extensions` every quote of the layer declares (a request's own, from
/// [`QuoteExtensions`], are merged over them).
fn layer_extensions(
    payment_identifier: PaymentIdentifier,
) -> serde_json::Map<String, serde_json::Value> {
    let mut extensions = serde_json::Map::new();
    payment_id::advertise(payment_identifier, &mut extensions);
    extensions
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http::{Request, StatusCode};
    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::clock::FakeClock;
    use crate::envelope::header;
    use crate::x402::{
        facilitator::{DevLedger, LocalEvmFacilitator},
        server::{AuthorizationKey, Claim, PriceTable},
    };

    const NOW: u64 = 1_750_000_000;
    const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    fn clock() -> SharedClock {
        Arc::new(FakeClock::at_unix_secs(NOW))
    }

    fn facilitator() -> LocalEvmFacilitator {
        LocalEvmFacilitator::new(Arc::new(DevLedger::new()), clock())
    }

    fn pricing() -> PriceTable {
        PriceTable::by_route()
            .with_usd("POST /v1/chat/completions", "0.002")
            .unwrap()
    }

    /// Everything required: a price table, a facilitator and one offer.
    fn complete() -> X402LayerBuilder {
        X402Layer::builder()
            .with_host_derived_resource_url()
            .with_pricing(pricing())
            .with_facilitator(facilitator())
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_clock(clock())
    }

    /// Answers 200 "inner" to anything that reaches it.
    async fn inner(_request: Request<String>) -> Result<Response<String>, Infallible> {
        Ok(Response::new("inner".to_owned()))
    }

    fn request(method: &str, path: &str) -> Request<String> {
        Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, "gateway.test")
            .body(String::new())
            .unwrap()
    }

    #[test]
    fn build_names_what_is_missing() {
        let missing = |builder: X402LayerBuilder| builder.build().unwrap_err();
        assert_eq!(
            missing(X402Layer::builder().with_facilitator(facilitator())),
            ConfigError::MissingPricing
        );
        assert_eq!(
            missing(X402Layer::builder().with_pricing(pricing())),
            ConfigError::MissingFacilitator
        );
        assert_eq!(
            missing(
                X402Layer::builder()
                    .with_host_derived_resource_url()
                    .with_pricing(pricing())
                    .with_facilitator(facilitator())
            ),
            ConfigError::NoPaymentOptions
        );
        assert!(complete().build().is_ok());
    }

    /// Layers built from one builder (or its clones) without stores of
    /// their own share its in-memory ones: a payment claimed on one front is
    /// claimed on every other.
    #[tokio::test]
    async fn layers_of_one_builder_share_its_default_stores() {
        let same = |a: &X402Layer, b: &X402Layer| {
            std::ptr::eq(
                Arc::as_ptr(&a.config.nonce_store).cast::<()>(),
                Arc::as_ptr(&b.config.nonce_store).cast::<()>(),
            ) && std::ptr::eq(
                Arc::as_ptr(&a.config.answer_store).cast::<()>(),
                Arc::as_ptr(&b.config.answer_store).cast::<()>(),
            )
        };
        let builder = complete();
        let (first, second) = (builder.clone().build().unwrap(), builder.build().unwrap());
        assert!(same(&first, &second));
        let key = AuthorizationKey::new(
            &crate::x402::wire::Network::base_sepolia(),
            PAY_TO.parse().unwrap(),
            alloy_primitives::B256::ZERO,
        );
        let claimed = first.config.nonce_store.claim(&key, NOW + 60).await;
        assert!(matches!(claimed, Ok(Claim::Claimed)));
        let again = second.config.nonce_store.claim(&key, NOW + 60).await;
        assert!(
            matches!(again, Ok(Claim::InFlight)),
            "claimed through the other layer"
        );
        assert!(
            !same(&complete().build().unwrap(), &first),
            "another builder: its own"
        );
    }

    /// What routes share is set once; each clone then goes its own way.
    #[tokio::test]
    async fn a_builder_is_cloned_per_route() {
        let shared = complete();
        let cheap = shared.clone().build().unwrap();
        let dear = shared
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /v1/chat/completions", "0.5")
                    .unwrap(),
            )
            .build()
            .unwrap();
        let quote = |layer: X402Layer| async move {
            let response = layer
                .layer(service_fn(inner))
                .oneshot(request("POST", "/v1/chat/completions"))
                .await
                .unwrap();
            let required: crate::x402::wire::PaymentRequired = crate::x402::wire::codec::decode(
                response.headers()[header::PAYMENT_REQUIRED].as_bytes(),
            )
            .unwrap();
            required.accepts[0].amount.to_string()
        };
        assert_eq!(quote(cheap).await, "3000");
        assert_eq!(quote(dear).await, "501000");
    }

    #[test]
    fn a_base_url_is_a_scheme_a_host_and_an_optional_path() {
        let base = |url: &str| X402Layer::builder().with_public_base_url(url);
        for bad in [
            "gateway.test",
            "ftp://gateway.test",
            "https://",
            "https:///gw",
            "https://a b",
            "https://a/b c",
            "https://a/b?q=1",
            "https://a/b#f",
            "https://user@a/b",
            "https://a//b",
        ] {
            assert_eq!(
                base(bad).err(),
                Some(ConfigError::InvalidBaseUrl(bad.to_owned())),
                "{bad}"
            );
        }
        for (url, kept) in [
            ("https://gateway.test:8443/", "https://gateway.test:8443"),
            ("https://pay.example/gw", "https://pay.example/gw"),
            ("http://[::1]:8402/a/b/", "http://[::1]:8402/a/b"),
        ] {
            assert_eq!(base(url).unwrap().public_base_url.as_deref(), Some(kept));
        }
    }

    #[test]
    fn a_host_derived_resource_url_is_only_an_explicit_choice() {
        let without = X402Layer::builder()
            .with_pricing(pricing())
            .with_facilitator(facilitator())
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap());
        assert_eq!(
            without.build().err(),
            Some(ConfigError::MissingPublicBaseUrl)
        );
    }

    #[tokio::test]
    async fn a_quote_names_the_public_base_url_and_never_the_host() {
        let layer = complete()
            .with_public_base_url("https://pay.example/gw")
            .unwrap()
            .build()
            .unwrap();
        let mut request = request("POST", "/v1/chat/completions?x=1");
        request
            .headers_mut()
            .insert(http::header::HOST, "evil.example".parse().unwrap());
        let response = layer
            .layer(service_fn(inner))
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        let quote: crate::x402::wire::PaymentRequired =
            crate::x402::wire::codec::decode(response.headers()["payment-required"].as_bytes())
                .unwrap();
        assert_eq!(
            quote.resource.url,
            "https://pay.example/gw/v1/chat/completions?x=1"
        );
    }

    #[tokio::test]
    async fn a_free_request_reaches_the_inner_service() {
        let layer = complete().build().unwrap();
        let response = layer
            .layer(service_fn(inner))
            .oneshot(request("GET", "/v1/models"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!response.headers().contains_key(header::PAYMENT_REQUIRED));
        let body = http_body_util::BodyExt::collect(response.into_body()).await;
        assert_eq!(body.unwrap().to_bytes(), "inner");
    }

    #[tokio::test]
    async fn a_priced_request_without_payment_gets_the_quote_not_the_inner_service() {
        let layer = complete().build().unwrap();
        let reached = Arc::new(AtomicU64::new(0));
        let seen = reached.clone();
        // `X402::new` wraps as `Layer::layer` does.
        let service = X402::new(
            service_fn(move |request: Request<String>| {
                seen.fetch_add(1, Ordering::SeqCst);
                inner(request)
            }),
            layer,
        );
        let response = service
            .oneshot(request("POST", "/v1/chat/completions"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(response.headers().contains_key(header::PAYMENT_REQUIRED));
        assert_eq!(reached.load(Ordering::SeqCst), 0);
    }
}

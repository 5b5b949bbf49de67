//! Offers, the 402 quote, and matching a payment against the offers.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::{Map, Value};

use super::extensions::{QuoteExtensionMap, merge_extensions, same_extensions};
use super::offer_receipt::OfferSigner;
use crate::clock::SharedClock;
use crate::envelope::{PaymentInfo, QuoteBody, QuotePrice, header};
use crate::x402::ConfigError;
use crate::x402::facilitator::{AUTHORIZATION_CLOCK_SKEW_SECS, SOLANA_USDC_MINT, reason};
use crate::x402::wire::ExactEvmPayment;
use crate::x402::wire::eip712::parse_evm_address;
use crate::x402::wire::types::{
    AtomicAmount, Network, PaymentRequired, PaymentRequirements, ResourceInfo, SCHEME_EXACT,
    UsdAmount, ValueError, X402_VERSION,
};
use crate::x402::wire::{Echoes, OFFER_RECEIPT, codec};

/// Base Sepolia USDC, the embedded default asset.
pub const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

/// USDC's address on Base mainnet (`eip155:8453`).
pub const BASE_USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";

/// The quote body's `error`.
pub const QUOTE_ERROR: &str = "Payment required";

/// The quote body's `message`.
pub const QUOTE_MESSAGE: &str = "This endpoint requires payment; sign the first offer in PAYMENT-REQUIRED and resend with PAYMENT-SIGNATURE";

/// Default `maxTimeoutSeconds` of an offer (the TypeScript server's default).
pub const DEFAULT_MAX_TIMEOUT_SECS: u64 = 300;

/// One way to pay: network, asset, recipient and scheme data.
///
/// The layer turns each option into one `accepts[]` entry per request, in the
/// order given; clients sign the first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentOption {
    scheme: String,
    network: Network,
    asset: String,
    pay_to: String,
    max_timeout_secs: u64,
    decimals: u8,
    currency: String,
    extra: Map<String, Value>,
}

impl PaymentOption {
    /// USDC on Base Sepolia, EIP-712 domain `{name: "USDC", version: "2"}`, paid to `pay_to`.
    pub fn base_sepolia_usdc(pay_to: &str) -> Result<Self, ConfigError> {
        Self::evm(
            Network::base_sepolia(),
            BASE_SEPOLIA_USDC,
            pay_to,
            "USDC",
            "2",
        )
    }

    /// USDC on Base mainnet, paid to `pay_to`. Its EIP-712 domain is
    /// `{name: "USD Coin", version: "2"}`, not Base Sepolia's `"USDC"`: a
    /// payment signed for the wrong name recovers another signer.
    pub fn base_usdc(pay_to: &str) -> Result<Self, ConfigError> {
        Self::evm(Network::base(), BASE_USDC, pay_to, "USD Coin", "2")
    }

    /// An exact-EVM option for an EIP-3009 token (6 decimals, `USDC`).
    ///
    /// `eip712_name` and `eip712_version` are the token's EIP-712 domain; they
    /// go into `extra`, where clients and verifiers read them.
    pub fn evm(
        network: Network,
        asset: &str,
        pay_to: &str,
        eip712_name: &str,
        eip712_version: &str,
    ) -> Result<Self, ConfigError> {
        if network.eip155_chain_id().is_none() {
            return Err(ConfigError::NotEvmNetwork(network.as_str().to_owned()));
        }
        for address in [asset, pay_to] {
            if parse_evm_address(address).is_none() {
                return Err(ValueError::Address(address.to_owned()).into());
            }
        }
        let mut extra = Map::new();
        extra.insert("name".into(), Value::from(eip712_name));
        extra.insert("version".into(), Value::from(eip712_version));
        Ok(Self::other(network, asset, pay_to, extra))
    }

    /// An option of another scheme family (e.g. Solana), with its `extra` as given.
    ///
    /// Only a facilitator that knows the network can verify it.
    pub fn other(network: Network, asset: &str, pay_to: &str, extra: Map<String, Value>) -> Self {
        Self {
            scheme: SCHEME_EXACT.to_owned(),
            network,
            asset: asset.to_owned(),
            pay_to: pay_to.to_owned(),
            max_timeout_secs: DEFAULT_MAX_TIMEOUT_SECS,
            decimals: 6,
            currency: "USDC".to_owned(),
            extra,
        }
    }

    /// A metered (`upto`) option: a Permit2 permit of `asset` on `network`
    /// to x402's upto proxy, its amount a ceiling, paid to `pay_to` and
    /// settled by `facilitator` (`extra` = `{facilitatorAddress}`, the only
    /// member the official client reads; the witness must name it).
    pub fn upto_permit2(
        network: Network,
        asset: &str,
        pay_to: &str,
        facilitator: alloy_primitives::Address,
    ) -> Self {
        let mut extra = Map::new();
        extra.insert(
            "facilitatorAddress".into(),
            Value::from(facilitator.to_checksum(None)),
        );
        Self::other(network, asset, pay_to, extra).with_scheme(crate::x402::wire::SCHEME_UPTO)
    }

    /// USDC on Solana mainnet paid to `pay_to`, the transaction fee paid by
    /// the facilitator's `fee_payer` (`extra.feePayer`).
    ///
    /// Only a facilitator that knows Solana can verify it.
    pub fn solana_usdc(pay_to: &str, fee_payer: &str) -> Self {
        let mut extra = Map::new();
        extra.insert("feePayer".into(), Value::from(fee_payer));
        Self::other(Network::solana_mainnet(), SOLANA_USDC_MINT, pay_to, extra)
    }

    /// The scheme its offers name (default `exact`): with
    /// [`SCHEME_UPTO`](crate::x402::wire::SCHEME_UPTO) the signed amount is a
    /// maximum and the answer names what is settled
    /// ([`SettleAmount`](super::SettleAmount)); the facilitator must speak it.
    pub fn with_scheme(mut self, scheme: impl Into<String>) -> Self {
        self.scheme = scheme.into();
        self
    }

    /// Sets `maxTimeoutSeconds` (default 300).
    pub fn with_max_timeout_secs(mut self, secs: u64) -> Result<Self, ConfigError> {
        if secs == 0 {
            return Err(ConfigError::ZeroTimeout);
        }
        self.max_timeout_secs = secs;
        Ok(self)
    }

    /// Sets the asset's decimals and currency label (default 6, `USDC`).
    #[must_use]
    pub fn with_asset_units(mut self, decimals: u8, currency: impl Into<String>) -> Self {
        self.decimals = decimals;
        self.currency = currency.into();
        self
    }

    /// The network.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// `maxTimeoutSeconds`.
    pub fn max_timeout_secs(&self) -> u64 {
        self.max_timeout_secs
    }

    /// The asset's decimals.
    pub fn decimals(&self) -> u8 {
        self.decimals
    }

    /// The asset's currency label (`USDC`), as quotes name it.
    pub fn currency(&self) -> &str {
        &self.currency
    }

    /// The `accepts[]` entry for a total price; `None` if it is not a whole
    /// number of the asset's units.
    pub fn requirements(&self, total: UsdAmount) -> Option<PaymentRequirements> {
        Some(self.requirements_for_amount(total.to_atomic(self.decimals)?))
    }

    /// The `accepts[]` entry for `amount` atomic units.
    pub fn requirements_for_amount(&self, amount: AtomicAmount) -> PaymentRequirements {
        PaymentRequirements {
            scheme: self.scheme.clone(),
            network: self.network.clone(),
            amount,
            asset: self.asset.clone(),
            pay_to: self.pay_to.clone(),
            max_timeout_seconds: self.max_timeout_secs,
            extra: self.extra.clone(),
        }
    }

    /// Whether `offer` is one of this option's (its network and asset).
    pub(crate) fn offers(&self, offer: &PaymentRequirements) -> bool {
        self.network == offer.network && self.asset.eq_ignore_ascii_case(&offer.asset)
    }

    /// The quote body's `price` for `amount` atomic units.
    pub(crate) fn quote_price(&self, amount: AtomicAmount) -> QuotePrice {
        QuotePrice {
            amount: amount.to_decimal_string(self.decimals),
            currency: self.currency.clone(),
        }
    }
}

/// Writes the quote into the three headers: `PAYMENT-REQUIRED`,
/// `X-Payment-Required` and `WWW-Authenticate: X402 requirements="…"`.
///
/// Only `PAYMENT-REQUIRED` (what x402 v2 clients read and echo) carries the
/// `extensions`; the two older names repeat the rest, so a 402 with large
/// extensions stays within a proxy's header buffers. No body repeats them
/// (see [`QuoteBody`]).
pub(crate) fn write_quote_headers(headers: &mut HeaderMap, required: &PaymentRequired) {
    let encoded = codec::encode(required);
    let lean = required.extensions.as_ref().map(|_| {
        codec::encode(&PaymentRequired {
            extensions: None,
            ..required.clone()
        })
    });
    let repeated = lean.as_deref().unwrap_or(&encoded);
    // Base64 is always a valid header value.
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert(header::PAYMENT_REQUIRED, value);
    }
    if let Ok(value) = HeaderValue::from_str(repeated) {
        headers.insert(header::X_PAYMENT_REQUIRED, value);
    }
    if let Ok(value) = HeaderValue::from_str(&format!("X402 requirements=\"{repeated}\"")) {
        headers.insert(http::header::WWW_AUTHENTICATE, value);
    }
}

/// Headers the layers outside add to each 402 (`x-request-id`, CORS), room
/// for which is reserved in the cached quote's map: a clone keeps its room.
const QUOTE_HEADERS_ADDED: usize = 4;

/// The 402 quote: the three headers, `Cache-Control: no-store`, its
/// `Content-Length` (the body is fixed, so nothing counts it again per 402),
/// and the JSON body whose `x402Version` and `accepts` equal the decoded
/// header (its `extensions` ride in `PAYMENT-REQUIRED` only).
pub(crate) fn quote_response(required: &PaymentRequired, first: &PaymentOption) -> Response<Bytes> {
    let first_offer = required.accepts.first();
    let amount = first_offer.map_or(AtomicAmount::default(), |offer| offer.amount);
    let body = QuoteBody {
        x402_version: X402_VERSION,
        accepts: required.accepts.clone(),
        error: QUOTE_ERROR.to_owned(),
        message: QUOTE_MESSAGE.to_owned(),
        price: first.quote_price(amount),
        payment_info: PaymentInfo {
            network: first.network.as_str().to_owned(),
            asset: first.asset.clone(),
            x402_version: X402_VERSION,
        },
        resource: required.resource.clone(),
    };
    let mut response = crate::envelope::json_response(StatusCode::PAYMENT_REQUIRED, &body);
    let length = HeaderValue::from(response.body().len());
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_LENGTH, length);
    write_quote_headers(headers, required);
    headers.reserve(QUOTE_HEADERS_ADDED);
    response
}

/// A quote built once: the offers, and the 402's body and headers as bytes.
#[derive(Debug)]
pub(crate) struct Quote {
    required: PaymentRequired,
    /// `required.accepts`, shared with every payment made against them,
    /// each beside its JSON text (what a client's echo of it is read against).
    offers: Box<[(Box<str>, Arc<PaymentRequirements>)]>,
    /// `required.resource` and its JSON text, shared with payments likewise.
    resource: (Box<str>, Arc<ResourceInfo>),
    body: Bytes,
    headers: HeaderMap,
    /// The server's extensions it was built with (see `QuoteExtensions`).
    extensions: Option<QuoteExtensionMap>,
    /// The `sign-in-with-x` challenge spliced fresh into each 402.
    #[cfg(feature = "siwx")]
    sign_in: Option<(Arc<super::siwx::SignIn>, super::siwx::QuoteTemplate)>,
    /// When its signed offers are re-signed (half their window gone).
    resign_at: Option<u64>,
}

impl Quote {
    /// The quote of `options` at `total` for `resource`, declaring the
    /// layer's `declared` extensions and the request's `extensions` over them;
    /// `None` if no option can express `total` in whole units of its asset.
    /// With `signing`, its offers are signed at that time (`offer-receipt`).
    fn build(
        options: &[PaymentOption],
        total: UsdAmount,
        resource: ResourceInfo,
        declared: Option<&serde_json::Map<String, serde_json::Value>>,
        extensions: Option<QuoteExtensionMap>,
        signing: Option<(&OfferSigner, u64)>,
    ) -> Option<Self> {
        let offers: Vec<_> = options
            .iter()
            .filter_map(|option| option.requirements(total))
            .collect();
        let first = options.first().filter(|_| !offers.is_empty())?;
        let mut required = payment_required(resource, offers, QUOTE_ERROR);
        required.extensions = declared.cloned();
        if let Some(extensions) = &extensions {
            merge_extensions(&mut required, extensions);
        }
        let resign_at = signing.map(|(signer, now)| {
            let (signed, valid_until) =
                signer.offers(&required.resource.url, &required.accepts, now);
            required
                .extensions
                .get_or_insert_with(Default::default)
                .insert(OFFER_RECEIPT.to_owned(), signed);
            now + valid_until.saturating_sub(now) / 2
        });
        let (parts, body) = quote_response(&required, first).into_parts();
        Some(Self {
            offers: required.accepts.iter().map(with_text).collect(),
            resource: with_text(&required.resource),
            required,
            body,
            headers: parts.headers,
            extensions,
            #[cfg(feature = "siwx")]
            sign_in: None,
            resign_at,
        })
    }

    /// `PAYMENT-REQUIRED` decoded.
    pub(crate) fn required(&self) -> &PaymentRequired {
        &self.required
    }

    /// The offer `accepted` (a payment's echo) matches, shared.
    pub(crate) fn matching_offer(
        &self,
        accepted: &PaymentRequirements,
    ) -> Option<&Arc<PaymentRequirements>> {
        // An echo read as one of these offers (`Echoes`) is that offer.
        self.offers.iter().map(|(_, offer)| offer).find(|offer| {
            std::ptr::eq(Arc::as_ptr(offer), accepted) || offer_matches(offer, accepted)
        })
    }

    /// What a payment against this quote echoes, for [`PaymentHeader::read`].
    pub(crate) fn echoes(&self) -> Echoes<'_> {
        Echoes {
            offers: &self.offers,
            resource: &self.resource,
        }
    }

    /// The 402 quote, from the bytes built once.
    pub(crate) fn response(&self) -> Response<Bytes> {
        let mut response = Response::new(self.body.clone());
        *response.status_mut() = StatusCode::PAYMENT_REQUIRED;
        *response.headers_mut() = self.headers.clone();
        #[cfg(feature = "siwx")]
        if let Some((sign_in, template)) = &self.sign_in {
            return sign_in.fill(template, response);
        }
        response
    }
}

/// Quotes by resource (URL, or path and query under a public base URL), each for the price and server extensions it was
/// built with: a request for the same resource at the same price declaring
/// the same extensions gets the same bytes; anything else rebuilds the entry. The offers are the layer's own and never change.
#[derive(Debug, Default)]
pub(crate) struct QuoteCache {
    /// At most [`QUOTE_CACHE_LEN`] keys, seeded per process: foldhash, not SipHash.
    quotes: RwLock<HashMap<String, (UsdAmount, Arc<Quote>), foldhash::fast::RandomState>>,
    /// The `extensions` every quote declares (none: omitted).
    extensions: Option<serde_json::Map<String, serde_json::Value>>,
    /// `sign-in-with-x`, declared per resource with a fresh challenge per 402.
    #[cfg(feature = "siwx")]
    sign_in: Option<Arc<super::siwx::SignIn>>,
    /// Signs every quote's offers, at the clock's time.
    offer_signing: Option<OfferSigning>,
}

/// The signer of a cache's offers and the clock their windows start by.
struct OfferSigning {
    signer: Arc<OfferSigner>,
    clock: SharedClock,
}

impl std::fmt::Debug for OfferSigning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.signer.fmt(f)
    }
}

/// Resources quoted at most; past it the cache starts afresh (URLs carry the
/// query and the `Host`, which clients choose).
const QUOTE_CACHE_LEN: usize = 1024;

impl QuoteCache {
    /// A cache whose quotes declare `extensions` (when not empty).
    pub(crate) fn with_extensions(extensions: serde_json::Map<String, serde_json::Value>) -> Self {
        Self {
            extensions: (!extensions.is_empty()).then_some(extensions),
            ..Self::default()
        }
    }

    /// Also declares `sign-in-with-x` in every quote.
    #[cfg(feature = "siwx")]
    pub(crate) fn with_sign_in(mut self, sign_in: Option<Arc<super::siwx::SignIn>>) -> Self {
        self.sign_in = sign_in;
        self
    }

    /// Also signs every quote's offers with `signer` (`offer-receipt`).
    pub(crate) fn with_offer_signer(
        mut self,
        signer: Option<Arc<OfferSigner>>,
        clock: SharedClock,
    ) -> Self {
        self.offer_signing = signer.map(|signer| OfferSigning { signer, clock });
        self
    }

    /// The extensions every quote of this cache declares.
    pub(crate) fn declared(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.extensions.as_ref()
    }

    /// The quote of `options` at `total` for the resource `key` names (its
    /// URL, or what tells it apart from the layer's other resources),
    /// declaring the cache's extensions and the request's `extensions`,
    /// built on first use; `url` and `resource` build its URL and describe
    /// it only then, so a cached quote costs no URL and no copies of the
    /// layer's description.
    pub(crate) fn quote(
        &self,
        options: &[PaymentOption],
        total: UsdAmount,
        extensions: Option<QuoteExtensionMap>,
        key: &str,
        url: impl FnOnce() -> String,
        resource: impl FnOnce(String) -> ResourceInfo,
    ) -> Option<Arc<Quote>> {
        let now = self
            .offer_signing
            .as_ref()
            .map(|signing| signing.clock.now_unix_secs());
        let cached = self
            .quotes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .filter(|(price, quote)| {
                *price == total
                    && same_extensions(quote.extensions.as_ref(), extensions.as_ref())
                    && quote.resign_at.zip(now).is_none_or(|(at, now)| now < at)
            })
            .map(|(_, quote)| quote.clone());
        if cached.is_some() {
            return cached;
        }
        let url = url();
        // The layer's extensions, and `sign-in-with-x` for this resource.
        #[cfg(feature = "siwx")]
        let declared = self.sign_in.as_ref().map(|sign_in| {
            let mut declared = self.extensions.clone().unwrap_or_default();
            declared.insert(
                super::siwx::SIGN_IN_WITH_X.to_owned(),
                sign_in.declaration(&url),
            );
            declared
        });
        #[cfg(not(feature = "siwx"))]
        let declared: Option<serde_json::Map<String, serde_json::Value>> = None;
        #[cfg_attr(not(feature = "siwx"), allow(unused_mut))]
        let mut quote = Quote::build(
            options,
            total,
            resource(url.clone()),
            declared.as_ref().or(self.extensions.as_ref()),
            extensions,
            self.offer_signing
                .as_ref()
                .zip(now)
                .map(|(signing, now)| (&*signing.signer, now)),
        )?;
        #[cfg(feature = "siwx")]
        if let Some(sign_in) = &self.sign_in {
            quote.sign_in = super::siwx::QuoteTemplate::find(&quote.headers)
                .map(|template| (sign_in.clone(), template));
        }
        let quote = Arc::new(quote);
        let mut quotes = self.quotes.write().unwrap_or_else(PoisonError::into_inner);
        if quotes.len() >= QUOTE_CACHE_LEN && !quotes.contains_key(key) {
            quotes.clear();
        }
        quotes.insert(key.to_owned(), (total, quote.clone()));
        Some(quote)
    }
}

/// Builds the quote for `resource` from the offers.
pub(crate) fn payment_required(
    resource: ResourceInfo,
    accepts: Vec<PaymentRequirements>,
    error: &str,
) -> PaymentRequired {
    PaymentRequired {
        x402_version: X402_VERSION,
        error: Some(error.to_owned()),
        resource,
        accepts,
        extensions: None,
    }
}

/// The offer a payment's `accepted` echo matches, if any.
///
/// Every core field must be equal: scheme, network, amount and
/// `maxTimeoutSeconds` exactly, asset and `payTo` case-insensitively (clients
/// differ in checksum casing). The echo's `extra` may hold more than the
/// offer's, never less or different.
pub fn matching_offer<'a>(
    offers: &'a [PaymentRequirements],
    accepted: &PaymentRequirements,
) -> Option<&'a PaymentRequirements> {
    offers.iter().find(|offer| offer_matches(offer, accepted))
}

/// What is refused once a payment matched `offer`, before any facilitator
/// sees it (`PAYMENT_INVALID`): an exact-EVM authorization valid beyond now +
/// `maxTimeoutSeconds` + [`AUTHORIZATION_CLOCK_SKEW_SECS`] (so the replay
/// store remembers a nonce for at most that long), and a signature the chain
/// refuses (`v` other than 27/28, or high `s`). The rest of the window (a
/// future `validAfter`, an expired `validBefore`) is the facilitator's:
/// those answer `PAYMENT_UNFUNDED`.
pub(crate) fn check_authorization(
    offer: &PaymentRequirements,
    evm: Option<&ExactEvmPayment>,
    now_unix_secs: u64,
) -> Result<(), &'static str> {
    let Some(evm) = evm.filter(|_| offer.network.eip155_chain_id().is_some()) else {
        return Ok(());
    };
    let latest = now_unix_secs
        .saturating_add(offer.max_timeout_seconds)
        .saturating_add(AUTHORIZATION_CLOCK_SKEW_SECS);
    if evm.valid_before > latest {
        return Err(reason::AUTHORIZATION_TOO_LONG);
    }
    if evm.signature.is_none() {
        return Err(reason::SIGNATURE_NOT_CANONICAL);
    }
    Ok(())
}

/// `value` shared, beside its compact JSON text.
fn with_text<T: Clone + serde::Serialize>(value: &T) -> (Box<str>, Arc<T>) {
    let text = serde_json::to_string(value).unwrap_or_default();
    (text.into_boxed_str(), Arc::new(value.clone()))
}

fn offer_matches(offer: &PaymentRequirements, accepted: &PaymentRequirements) -> bool {
    offer.scheme == accepted.scheme
        && offer.network == accepted.network
        && offer.amount == accepted.amount
        && offer.max_timeout_seconds == accepted.max_timeout_seconds
        && offer.asset.eq_ignore_ascii_case(&accepted.asset)
        && offer.pay_to.eq_ignore_ascii_case(&accepted.pay_to)
        && offer
            .extra
            .iter()
            .all(|(key, value)| accepted.extra.get(key) == Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::wire::PaymentRequired;

    const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    fn offer() -> PaymentRequirements {
        PaymentOption::base_sepolia_usdc(PAY_TO)
            .unwrap()
            .requirements(UsdAmount::from_micros(11_000))
            .unwrap()
    }

    #[test]
    fn base_sepolia_offer_has_the_wire_shape() {
        let json = serde_json::to_string(&offer()).unwrap();
        assert_eq!(
            json,
            r#"{"scheme":"exact","network":"eip155:84532","amount":"11000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","maxTimeoutSeconds":300,"extra":{"name":"USDC","version":"2"}}"#
        );
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(matches!(
            PaymentOption::base_sepolia_usdc("0x1234"),
            Err(ConfigError::Value(ValueError::Address(_)))
        ));
        let solana = Network::parse("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp").unwrap();
        assert!(matches!(
            PaymentOption::evm(solana, BASE_SEPOLIA_USDC, PAY_TO, "USDC", "2"),
            Err(ConfigError::NotEvmNetwork(_))
        ));
        assert_eq!(
            PaymentOption::base_sepolia_usdc(PAY_TO)
                .unwrap()
                .with_max_timeout_secs(0),
            Err(ConfigError::ZeroTimeout)
        );
    }

    #[test]
    fn matching_compares_core_fields_and_addresses_case_insensitively() {
        let offers = [offer()];
        let mut echo = offer();
        echo.pay_to = echo.pay_to.to_lowercase();
        echo.asset = echo.asset.to_uppercase().replace("0X", "0x");
        echo.extra
            .insert("assetTransferMethod".into(), "eip3009".into());
        assert!(matching_offer(&offers, &echo).is_some());

        let mut off_by_one = offer();
        off_by_one.amount = AtomicAmount::new(10_999);
        let mut wrong_network = offer();
        wrong_network.network = Network::parse("eip155:8453").unwrap();
        let mut wrong_timeout = offer();
        wrong_timeout.max_timeout_seconds = 60;
        let mut wrong_domain = offer();
        wrong_domain.extra.insert("name".into(), "USD Coin".into());
        let mut no_extra = offer();
        no_extra.extra.clear();
        let mut wrong_pay_to = offer();
        wrong_pay_to.pay_to = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC".into();
        for echo in [
            off_by_one,
            wrong_network,
            wrong_timeout,
            wrong_domain,
            no_extra,
            wrong_pay_to,
        ] {
            assert!(matching_offer(&offers, &echo).is_none(), "{echo:?}");
        }
    }

    #[test]
    fn authorizations_are_bounded_by_the_offer_timeout_and_canonical() {
        let now = 1_750_000_000;
        let signature = "0xde455c78879fd9219b2b89a4b1e80bc039788cfb436f8550cad4cae17e35220a5a820f16fef5223f1e8b1cd8784f40707ec8e18283e8a1b357680fe6a9fa7abc1c";
        let evm = |valid_before: u64, signature: &str| ExactEvmPayment {
            from: parse_evm_address(PAY_TO).unwrap(),
            to: parse_evm_address(PAY_TO).unwrap(),
            value: AtomicAmount::new(11_000),
            valid_after: 0,
            valid_before,
            nonce: alloy_primitives::B256::repeat_byte(0x11),
            signature: crate::x402::wire::eip712::parse_signature(signature),
        };
        let limit = now + 300 + AUTHORIZATION_CLOCK_SKEW_SECS;
        assert_eq!(
            check_authorization(&offer(), Some(&evm(limit, signature)), now),
            Ok(())
        );
        assert_eq!(
            check_authorization(&offer(), Some(&evm(limit + 1, signature)), now),
            Err(reason::AUTHORIZATION_TOO_LONG)
        );
        // Three years out: refused.
        assert_eq!(
            check_authorization(&offer(), Some(&evm(now + 3 * 365 * 86_400, signature)), now),
            Err(reason::AUTHORIZATION_TOO_LONG)
        );
        // An expired one is the facilitator's to refuse (PAYMENT_UNFUNDED).
        assert_eq!(
            check_authorization(&offer(), Some(&evm(now - 1, signature)), now),
            Ok(())
        );
        let v_one = format!("{}01", &signature[..signature.len() - 2]);
        assert_eq!(
            check_authorization(&offer(), Some(&evm(limit, &v_one)), now),
            Err(reason::SIGNATURE_NOT_CANONICAL)
        );
        assert_eq!(check_authorization(&offer(), None, now), Ok(()));
        assert_eq!(
            crate::x402::facilitator::code_for_reason(reason::AUTHORIZATION_TOO_LONG),
            crate::envelope::ErrorCode::PaymentInvalid
        );
        assert_eq!(
            crate::x402::facilitator::code_for_reason(reason::SIGNATURE_NOT_CANONICAL),
            crate::envelope::ErrorCode::PaymentInvalid
        );
    }

    /// What builds `at` on a cache miss.
    fn url(at: &'static str) -> impl FnOnce() -> String {
        move || at.to_owned()
    }

    /// A resource described by its URL alone.
    fn bare(url: String) -> ResourceInfo {
        ResourceInfo {
            url,
            ..ResourceInfo::default()
        }
    }

    #[test]
    fn signed_offers_are_cached_and_signed_again_once_half_their_window_is_gone() {
        use crate::clock::FakeClock;
        use crate::x402::wire::offers_of;

        let clock = Arc::new(FakeClock::at_unix_secs(1_000));
        let signer = Arc::new(
            OfferSigner::from_hex(
                "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
            )
            .unwrap(),
        );
        let cache = QuoteCache::default().with_offer_signer(Some(signer.clone()), clock.clone());
        let options = [PaymentOption::base_sepolia_usdc(PAY_TO).unwrap()];
        let window = options[0].max_timeout_secs();
        let price = UsdAmount::from_micros(11_000);
        let quote = || {
            cache
                .quote(&options, price, None, "http://a/x", url("http://a/x"), bare)
                .unwrap()
        };
        let first = quote();
        assert!(Arc::ptr_eq(&first, &quote()), "signed once, not per 402");
        let offers = offers_of(first.required());
        assert_eq!(offers.len(), 1);
        let payload = offers[0].verify(signer.address()).unwrap();
        assert_eq!(payload.valid_until, 1_000 + window);
        assert_eq!(payload.resource_url, "http://a/x");
        assert_eq!(
            payload.amount,
            first.required().accepts[0].amount.to_string()
        );
        // PAYMENT-REQUIRED carries them; the older headers do not.
        let response = first.response();
        let header = |name| response.headers()[name].to_str().unwrap().to_owned();
        let decoded: PaymentRequired =
            codec::decode(header("payment-required").as_bytes()).unwrap();
        assert_eq!(offers_of(&decoded), offers);
        assert!(!header("www-authenticate").contains(&codec::encode(&offers[0].signature)));
        clock.advance(std::time::Duration::from_secs(window / 2 - 1));
        assert!(Arc::ptr_eq(&first, &quote()));
        clock.advance(std::time::Duration::from_secs(1));
        let resigned = quote();
        assert!(!Arc::ptr_eq(&first, &resigned), "half the window gone");
        let payload = offers_of(resigned.required())[0].payload.clone();
        assert_eq!(payload.valid_until, 1_000 + window / 2 + window);
    }

    #[test]
    fn quotes_are_built_once_per_resource_and_price() {
        let cache = QuoteCache::default();
        let options = [PaymentOption::base_sepolia_usdc(PAY_TO).unwrap()];
        let price = UsdAmount::from_micros(11_000);
        let first = cache
            .quote(&options, price, None, "http://a/x", url("http://a/x"), bare)
            .unwrap();
        let again = cache
            .quote(&options, price, None, "http://a/x", url("http://a/x"), bare)
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // Same bytes as building afresh.
        let fresh = quote_response(first.required(), &options[0]);
        let cached = again.response();
        assert_eq!(cached.status(), fresh.status());
        assert_eq!(cached.headers(), fresh.headers());
        assert_eq!(cached.body(), fresh.body());
        // The body and header bytes are shared, not copied.
        assert_eq!(cached.body().as_ptr(), again.response().body().as_ptr());

        // A new price rebuilds; another resource has its own entry.
        let dearer = cache
            .quote(
                &options,
                UsdAmount::from_micros(12_000),
                None,
                "http://a/x",
                url("http://a/x"),
                bare,
            )
            .unwrap();
        assert_eq!(dearer.required().accepts[0].amount.units(), 12_000);
        let other = cache
            .quote(&options, price, None, "http://a/y", url("http://a/y"), bare)
            .unwrap();
        assert_eq!(other.required().resource.url, "http://a/y");
        assert!(!Arc::ptr_eq(&other, &first));
        // A price no option can express in whole units gives no quote.
        let cents = [options[0].clone().with_asset_units(2, "USD")];
        assert!(
            cache
                .quote(
                    &cents,
                    UsdAmount::from_micros(1),
                    None,
                    "http://a/z",
                    url("http://a/z"),
                    bare
                )
                .is_none()
        );
    }

    #[test]
    fn other_extensions_rebuild_the_quote_and_only_payment_required_carries_them() {
        let cache = QuoteCache::default();
        let options = [PaymentOption::base_sepolia_usdc(PAY_TO).unwrap()];
        let price = UsdAmount::from_micros(11_000);
        let declare = |value: Value| -> Option<QuoteExtensionMap> {
            let mut map = Map::new();
            map.insert("bazaar".into(), value);
            Some(Arc::new(map))
        };
        let x = || url("http://a/x");
        let plain = cache
            .quote(&options, price, None, "http://a/x", x(), bare)
            .unwrap();
        let one = declare(Value::from(1));
        let first = cache
            .quote(&options, price, one.clone(), "http://a/x", x(), bare)
            .unwrap();
        assert!(!Arc::ptr_eq(&plain, &first));
        // Equal by value is the same quote; another value rebuilds it.
        let again = cache
            .quote(
                &options,
                price,
                declare(Value::from(1)),
                "http://a/x",
                x(),
                bare,
            )
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other = cache
            .quote(
                &options,
                price,
                declare(Value::from(2)),
                "http://a/x",
                x(),
                bare,
            )
            .unwrap();
        assert_eq!(other.required().extensions.as_ref().unwrap()["bazaar"], 2);

        let response = first.response();
        let headers = response.headers();
        let full: PaymentRequired = codec::decode(headers["payment-required"].as_bytes()).unwrap();
        assert_eq!(full.extensions.as_ref().unwrap()["bazaar"], 1);
        let lean: PaymentRequired =
            codec::decode(headers["x-payment-required"].as_bytes()).unwrap();
        assert_eq!(lean.extensions, None);
        assert_eq!(lean.accepts, full.accepts);
        let challenge = headers["www-authenticate"].to_str().unwrap();
        assert_eq!(
            challenge,
            format!(
                "X402 requirements=\"{}\"",
                headers["x-payment-required"].to_str().unwrap()
            )
        );
        // The body mirrors the offers, not the declarations.
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(
            body["accepts"],
            serde_json::to_value(&full.accepts).unwrap()
        );
        assert!(body.get("extensions").is_none(), "{body}");
    }

    #[test]
    fn the_quote_cache_is_bounded() {
        let cache = QuoteCache::default();
        let options = [PaymentOption::base_sepolia_usdc(PAY_TO).unwrap()];
        let price = UsdAmount::from_micros(11_000);
        for n in 0..QUOTE_CACHE_LEN + 5 {
            cache
                .quote(
                    &options,
                    price,
                    None,
                    &n.to_string(),
                    || format!("http://a/{n}"),
                    bare,
                )
                .unwrap();
        }
        assert!(cache.quotes.read().unwrap().len() <= QUOTE_CACHE_LEN);
    }

    #[test]
    fn quote_response_mirrors_the_header_in_the_body() {
        let option = PaymentOption::base_sepolia_usdc(PAY_TO).unwrap();
        let resource = ResourceInfo {
            url: "http://localhost/v1/chat/completions".into(),
            ..ResourceInfo::default()
        };
        let required = payment_required(resource, vec![offer()], QUOTE_ERROR);
        let response = quote_response(&required, &option);
        assert_eq!(response.status(), 402);
        let headers = response.headers();
        assert_eq!(headers["cache-control"], "no-store");
        assert_eq!(
            headers["content-length"],
            response.body().len().to_string().as_str()
        );
        let encoded = headers["payment-required"].to_str().unwrap();
        assert_eq!(headers["x-payment-required"], encoded);
        assert_eq!(
            headers["www-authenticate"],
            format!("X402 requirements=\"{encoded}\"").as_str()
        );
        let decoded: PaymentRequired = codec::decode(encoded.as_bytes()).unwrap();
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["x402Version"], 2);
        assert_eq!(
            body["accepts"],
            serde_json::to_value(&decoded.accepts).unwrap()
        );
        assert_eq!(
            body["price"],
            serde_json::json!({"amount": "0.011", "currency": "USDC"})
        );
        assert_eq!(
            body["paymentInfo"],
            serde_json::json!({"network": "eip155:84532", "asset": BASE_SEPOLIA_USDC, "x402Version": 2})
        );
        assert_eq!(
            body["resource"]["url"],
            "http://localhost/v1/chat/completions"
        );
        assert_eq!(body["error"], QUOTE_ERROR);
    }
}

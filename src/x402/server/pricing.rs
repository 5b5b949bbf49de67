//! What a request costs.
//!
//! [`X402Layer`](super::X402Layer) asks a [`Pricing`] for every request. It
//! sees the request head, including what earlier layers put in the extensions
//! (a parsed model, for instance), and answers [`Price::Free`], a USD price,
//! or a [`PriceRefusal`] when the request cannot be priced (what it reads is
//! missing: a wiring fault, answered 500, never served free). The quote and
//! the paid retry are priced by the same call, so the price must depend only
//! on the request, never on time or load.
//!
//! # The flat fee
//!
//! The layer owns the fee ([`with_flat_fee`](super::X402LayerBuilder::with_flat_fee),
//! default [`UsdAmount::FLAT_FEE`]); a pricing never subtracts or adds it. A
//! price says which side of the fee it is on, and [`Price::total`] is the one
//! place the two meet:
//!
//! * [`Price::usd`] / [`Price::Usd`]: the price **before** the fee; the client
//!   signs it plus the layer's configured fee (per-token, per-image, and most
//!   per-request prices).
//! * [`Price::usd_all_in`] / [`Price::UsdAllIn`]: the **signed total**, fee
//!   included; the layer adds nothing (a price listed to clients as what they
//!   pay, e.g. a flat per-request model). It stays the listed total whatever
//!   fee the server configures.
//!
//! # One decision, read twice
//!
//! A pipeline step that knows the request (its model, its size) can price it
//! once and leave the decision in the extensions as a [`RequestPrice`]: the
//! layer reads it with [`RequestPrice::pricing`], and the free tier reads the
//! same value with [`IsPricedFree`](crate::free_tier::IsPricedFree), so "free"
//! is decided in one place and the two layers cannot disagree.
//!
//! ```
//! use walletgate::x402::server::{Price, PriceTable, Pricing};
//! use walletgate::x402::wire::UsdAmount;
//!
//! /// What an earlier parse layer put in the extensions.
//! #[derive(Clone)]
//! struct Model(String);
//! impl AsRef<str> for Model {
//!     fn as_ref(&self) -> &str { &self.0 }
//! }
//!
//! let table = PriceTable::by_extension::<Model>()
//!     .with_usd("openai/gpt-4o", "0.002")?
//!     .with_price("acme/flat-model", Price::usd_all_in("0.005")?)
//!     .with_price("nvidia/free-model", Price::Free);
//!
//! let mut request = http::Request::new(());
//! request.extensions_mut().insert(Model("openai/gpt-4o".into()));
//! let (parts, ()) = request.into_parts();
//! let price = table.price(&parts).unwrap();
//! assert_eq!(price, Price::usd("0.002")?);
//! // Signed under a layer whose fee is 0.005 USD: the price plus that fee.
//! let fee: UsdAmount = "0.005".parse()?;
//! assert_eq!(price.total(fee), Some("0.007".parse()?));
//! assert_eq!(Price::usd_all_in("0.005")?.total(fee), Some("0.005".parse()?));
//! # Ok::<(), walletgate::x402::wire::ValueError>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use http::request::Parts;

use super::joined::with_joined;
use crate::envelope::{ErrorCode, GatewayError};
use crate::x402::wire::types::{UsdAmount, ValueError};

/// The price of one request, and which side of the flat fee it is on: the
/// layer adds its configured fee to a [`Usd`](Self::Usd) price and nothing to
/// a [`UsdAllIn`](Self::UsdAllIn) total ([`total`](Self::total)), so no
/// pricing ever subtracts or adds the fee itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Price {
    /// No payment: the request passes through untouched.
    Free,
    /// A USD price before the fee: the layer adds its configured flat fee.
    Usd(UsdAmount),
    /// The USD total the client signs, fee included: the layer adds nothing.
    UsdAllIn(UsdAmount),
}

impl Price {
    /// A USD price before the fee, parsed exactly from a decimal such as `"0.002"`.
    pub fn usd(decimal: &str) -> Result<Self, ValueError> {
        decimal.parse().map(Self::Usd)
    }

    /// A signed total, fee included, parsed exactly from a decimal such as `"0.005"`.
    pub fn usd_all_in(decimal: &str) -> Result<Self, ValueError> {
        decimal.parse().map(Self::UsdAllIn)
    }

    /// Whether the request is free (no payment asked).
    pub fn is_free(self) -> bool {
        self == Self::Free
    }

    /// What the client signs under a layer whose flat fee is `flat_fee`:
    /// zero when free, the price plus `flat_fee` for [`Usd`](Self::Usd), the
    /// price itself for [`UsdAllIn`](Self::UsdAllIn); `None` on overflow.
    #[must_use]
    pub fn total(self, flat_fee: UsdAmount) -> Option<UsdAmount> {
        match self {
            Self::Free => Some(UsdAmount::from_micros(0)),
            Self::Usd(before_fee) => before_fee.checked_add(flat_fee),
            Self::UsdAllIn(total) => Some(total),
        }
    }
}

/// The price a pipeline step decided for a request, left in its extensions
/// for the layers after it: the payment layer reads it through
/// [`RequestPrice::pricing`] and the free tier through
/// [`IsPricedFree`](crate::free_tier::IsPricedFree), so "free" is decided
/// once, where the request is priced.
///
/// ```
/// use walletgate::x402::server::{Price, RequestPrice};
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(RequestPrice(Price::Free));
/// let (parts, ()) = request.into_parts();
/// assert_eq!(RequestPrice::pricing(&parts), Ok(Price::Free));
/// assert!(RequestPrice::pricing(&http::Request::new(()).into_parts().0).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestPrice(pub Price);

impl RequestPrice {
    /// The [`Pricing`] that reads the `RequestPrice` in the extensions:
    /// `X402Layer::builder().with_pricing(RequestPrice::pricing)`. A request
    /// without one is refused (a wiring fault, 500), never served free.
    pub fn pricing(request: &Parts) -> Result<Price, PriceRefusal> {
        request
            .extensions
            .get::<Self>()
            .map(|Self(price)| *price)
            .ok_or_else(|| PriceRefusal::missing("RequestPrice"))
    }
}

/// Why a request has no price: the layer answers this instead of a quote.
///
/// The default is a wiring fault: what the pricing reads was not put into the
/// extensions by an earlier layer (500 `INTERNAL_ERROR`). Any other failure
/// of the code table can be given with [`PriceRefusal::new_with_error`].
#[derive(Clone, Debug, PartialEq)]
pub struct PriceRefusal {
    error: Box<GatewayError>,
}

impl PriceRefusal {
    /// `what` is missing from the request extensions: the pricing runs
    /// outside the layers that insert it.
    pub fn missing(what: &str) -> Self {
        Self::new_with_error(
            GatewayError::new(ErrorCode::InternalError)
                .with_message(format!("Internal error: {what} missing (pipeline wiring)")),
        )
    }

    /// Refuses with `error`, rendered in the route's envelope.
    pub fn new_with_error(error: GatewayError) -> Self {
        Self {
            error: Box::new(error),
        }
    }

    /// The failure the client is told.
    pub fn error(&self) -> &GatewayError {
        &self.error
    }

    /// The failure, to render.
    pub fn into_error(self) -> GatewayError {
        *self.error
    }
}

impl fmt::Display for PriceRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for PriceRefusal {}

/// Decides what a request costs.
///
/// Closures `Fn(&Parts) -> Result<Price, PriceRefusal>` implement it.
pub trait Pricing: Send + Sync + 'static {
    /// The price of the request whose head is `request`, or why it has none.
    fn price(&self, request: &Parts) -> Result<Price, PriceRefusal>;
}

impl<F> Pricing for F
where
    F: Fn(&Parts) -> Result<Price, PriceRefusal> + Send + Sync + 'static,
{
    fn price(&self, request: &Parts) -> Result<Price, PriceRefusal> {
        self(request)
    }
}

type KeyFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// How a request's key is found.
#[derive(Clone)]
enum Key {
    /// `"METHOD /path"`, looked up without building a `String`.
    Route,
    /// The caller's function.
    Of(KeyFn),
}

/// A fixed table of prices, keyed by route or by a value in the extensions.
///
/// A key that is missing from the table, or a request that has no key, gets
/// the fallback price ([`with_fallback`](Self::with_fallback)), which is
/// [`Price::Free`] unless set: list every paid key, or set a paid fallback.
#[derive(Clone)]
pub struct PriceTable {
    /// Keys the server wrote; a request only looks one up, so no SipHash.
    prices: HashMap<String, Price, foldhash::fast::RandomState>,
    key: Key,
    fallback: Price,
}

impl PriceTable {
    /// Keys are `"METHOD /path"`, e.g. `"POST /v1/chat/completions"`.
    pub fn by_route() -> Self {
        Self {
            prices: HashMap::default(),
            key: Key::Route,
            fallback: Price::Free,
        }
    }

    /// Keys are the string form of a `T` an earlier layer put in the extensions.
    pub fn by_extension<T>() -> Self
    where
        T: AsRef<str> + Send + Sync + 'static,
    {
        Self::by_key(|parts| {
            parts
                .extensions
                .get::<T>()
                .map(|value| value.as_ref().to_owned())
        })
    }

    /// Keys come from `key`; `None` means the fallback price.
    pub fn by_key<F>(key: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self {
            prices: HashMap::default(),
            key: Key::Of(Arc::new(key)),
            fallback: Price::Free,
        }
    }

    /// Sets the price for `key`.
    #[must_use]
    pub fn with_price(mut self, key: impl Into<String>, price: Price) -> Self {
        self.prices.insert(key.into(), price);
        self
    }

    /// Sets a USD price before the fee for `key`, parsed exactly.
    pub fn with_usd(self, key: impl Into<String>, usd: &str) -> Result<Self, ValueError> {
        Ok(self.with_price(key, Price::usd(usd)?))
    }

    /// The price of unlisted or keyless requests.
    #[must_use]
    pub fn with_fallback(mut self, price: Price) -> Self {
        self.fallback = price;
        self
    }
}

impl Pricing for PriceTable {
    fn price(&self, request: &Parts) -> Result<Price, PriceRefusal> {
        let price = match &self.key {
            Key::Route => {
                let route = [request.method.as_str(), " ", request.uri.path()];
                with_joined(&route, |key| self.prices.get(&*key).copied())
            }
            Key::Of(key) => key(request).and_then(|key| self.prices.get(&key).copied()),
        };
        Ok(price.unwrap_or(self.fallback))
    }
}

impl fmt::Debug for PriceTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PriceTable")
            .field("prices", &self.prices)
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, path: &str) -> Parts {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap();
        request.into_parts().0
    }

    #[test]
    fn route_table_prices_listed_routes_and_frees_the_rest() {
        let table = PriceTable::by_route()
            .with_usd("POST /v1/chat/completions", "0.01")
            .unwrap();
        assert_eq!(
            table.price(&parts("POST", "/v1/chat/completions")),
            Ok(Price::Usd(UsdAmount::from_micros(10_000)))
        );
        assert_eq!(table.price(&parts("GET", "/v1/models")), Ok(Price::Free));
        let strict = table.with_fallback(Price::usd("1").unwrap());
        assert_eq!(
            strict.price(&parts("GET", "/v1/models")),
            Ok(Price::usd("1").unwrap())
        );
    }

    #[test]
    fn the_fee_is_added_to_a_price_before_it_and_never_to_an_all_in_total() {
        let fee = UsdAmount::from_micros(5_000);
        assert_eq!(
            Price::usd("0.002").unwrap().total(fee),
            Some(UsdAmount::from_micros(7_000))
        );
        assert_eq!(
            Price::usd_all_in("0.002").unwrap().total(fee),
            Some(UsdAmount::from_micros(2_000))
        );
        assert_eq!(Price::Free.total(fee), Some(UsdAmount::from_micros(0)));
        assert_eq!(
            Price::Usd(UsdAmount::from_micros(u128::MAX)).total(fee),
            None
        );
        assert!(Price::Free.is_free());
        assert!(!Price::usd_all_in("0").unwrap().is_free());
    }

    #[test]
    fn request_price_reads_the_decision_and_refuses_without_one() {
        let mut request = http::Request::new(());
        request
            .extensions_mut()
            .insert(RequestPrice(Price::usd_all_in("0.005").unwrap()));
        let (with, ()) = request.into_parts();
        assert_eq!(
            RequestPrice::pricing(&with),
            Ok(Price::UsdAllIn(UsdAmount::from_micros(5_000)))
        );
        let refusal = RequestPrice::pricing(&parts("POST", "/x")).unwrap_err();
        assert_eq!(refusal.error().code(), ErrorCode::InternalError);
        assert!(refusal.error().message().contains("RequestPrice missing"));
    }

    #[test]
    fn closures_are_pricings() {
        let pricing = |parts: &Parts| {
            if parts.uri.path().starts_with("/paid") {
                Ok(Price::Usd(UsdAmount::from_micros(5)))
            } else if parts.uri.path().starts_with("/unwired") {
                Err(PriceRefusal::missing("Model"))
            } else {
                Ok(Price::Free)
            }
        };
        assert_eq!(
            Pricing::price(&pricing, &parts("GET", "/paid/x")),
            Ok(Price::Usd(UsdAmount::from_micros(5)))
        );
        assert_eq!(
            Pricing::price(&pricing, &parts("GET", "/x")),
            Ok(Price::Free)
        );
        let refusal = Pricing::price(&pricing, &parts("GET", "/unwired")).unwrap_err();
        assert_eq!(refusal.error().code(), ErrorCode::InternalError);
        assert!(refusal.error().message().contains("Model missing"));
    }

    #[tokio::test]
    async fn the_layer_answers_a_refusal_and_never_serves_free() {
        use std::sync::Arc;

        use bytes::Bytes;
        use http_body_util::Full;
        use tower::{Layer, ServiceExt, service_fn};

        use crate::clock::{FakeClock, SharedClock};
        use crate::envelope::{EnvelopeStyle, SetEnvelopeStyleLayer};
        use crate::x402::{
            facilitator::{DevLedger, LocalEvmFacilitator},
            server::{PaymentOption, X402Layer},
        };

        let clock: SharedClock = Arc::new(FakeClock::at_unix_secs(1_700_000_000));
        let layer = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(
                PaymentOption::base_sepolia_usdc("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
                    .unwrap(),
            )
            .with_pricing(|_: &Parts| Err(PriceRefusal::missing("ResolvedModel")))
            .with_facilitator(LocalEvmFacilitator::new(
                Arc::new(DevLedger::new()),
                clock.clone(),
            ))
            .with_clock(clock)
            .build()
            .unwrap();
        let service = SetEnvelopeStyleLayer::new(EnvelopeStyle::Responses).layer(layer.layer(
            service_fn(|_: http::Request<Full<Bytes>>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(
                    "served",
                ))))
            }),
        ));
        let response = service
            .oneshot(http::Request::new(Full::default()))
            .await
            .unwrap();
        assert_eq!(response.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.body().is_rejection());
        let error = response.extensions().get::<GatewayError>().unwrap();
        assert_eq!(error.code(), ErrorCode::InternalError);
        assert!(error.message().contains("ResolvedModel missing"));
    }
}

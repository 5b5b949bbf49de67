//! What a request costs.
//!
//! [`X402Layer`](super::X402Layer) asks a [`Pricing`] for every request. It
//! sees the request head, including what earlier layers put in the extensions
//! (a parsed model, for instance), and answers [`Price::Free`], a USD price,
//! or a [`PriceRefusal`] when the request cannot be priced (what it reads is
//! missing: a wiring fault, answered 500, never served free). The layer then
//! adds the flat fee ([`UsdAmount::FLAT_FEE`]) and turns the sum into each
//! offer's atomic amount. The quote and the paid retry are priced by the same
//! call, so the price must depend only on the request, never on time or load.
//!
//! ```
//! use walletgate::x402::server::{Price, PriceTable, Pricing};
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
//!     .with_price("nvidia/free-model", Price::Free);
//!
//! let mut request = http::Request::new(());
//! request.extensions_mut().insert(Model("openai/gpt-4o".into()));
//! let (parts, ()) = request.into_parts();
//! assert_eq!(table.price(&parts), Ok(Price::usd("0.002")?));
//! # Ok::<(), walletgate::x402::wire::ValueError>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use http::request::Parts;

use crate::envelope::{ErrorCode, GatewayError};
use crate::x402::wire::types::{UsdAmount, ValueError};

/// The price of one request, before the flat fee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Price {
    /// No payment: the request passes through untouched.
    Free,
    /// A USD price; the flat fee is added on top.
    Usd(UsdAmount),
}

impl Price {
    /// A USD price parsed exactly from a decimal such as `"0.002"`.
    pub fn usd(decimal: &str) -> Result<Self, ValueError> {
        decimal.parse().map(Self::Usd)
    }
}

/// Why a request has no price: the layer answers this instead of a quote.
///
/// The default is a wiring fault: what the pricing reads was not put into the
/// extensions by an earlier layer (500 `INTERNAL_ERROR`). Any other failure
/// of the code table can be given with [`PriceRefusal::with_error`].
#[derive(Clone, Debug, PartialEq)]
pub struct PriceRefusal {
    error: Box<GatewayError>,
}

impl PriceRefusal {
    /// `what` is missing from the request extensions: the pricing runs
    /// outside the layers that insert it.
    pub fn missing(what: &str) -> Self {
        Self::with_error(
            GatewayError::new(ErrorCode::InternalError)
                .with_message(format!("Internal error: {what} missing (pipeline wiring)")),
        )
    }

    /// Refuses with `error`, rendered in the route's envelope.
    pub fn with_error(error: GatewayError) -> Self {
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

/// A fixed table of prices, keyed by route or by a value in the extensions.
///
/// A key that is missing from the table, or a request that has no key, gets
/// the fallback price ([`otherwise`](Self::with_fallback)), which is
/// [`Price::Free`] unless set: list every paid key, or set a paid fallback.
#[derive(Clone)]
pub struct PriceTable {
    prices: HashMap<String, Price>,
    key: KeyFn,
    fallback: Price,
}

impl PriceTable {
    /// Keys are `"METHOD /path"`, e.g. `"POST /v1/chat/completions"`.
    pub fn by_route() -> Self {
        Self::by_key(|parts| Some(format!("{} {}", parts.method, parts.uri.path())))
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
            prices: HashMap::new(),
            key: Arc::new(key),
            fallback: Price::Free,
        }
    }

    /// Sets the price for `key`.
    #[must_use]
    pub fn with_price(mut self, key: impl Into<String>, price: Price) -> Self {
        self.prices.insert(key.into(), price);
        self
    }

    /// Sets a USD price for `key`, parsed exactly.
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
        Ok((self.key)(request)
            .and_then(|key| self.prices.get(&key).copied())
            .unwrap_or(self.fallback))
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
        use crate::envelope::{EnvelopeStyle, EnvelopeStyleLayer};
        use crate::x402::{
            facilitator::{DevLedger, LocalEvmFacilitator},
            server::{PaymentOption, X402Layer},
        };

        let clock: SharedClock = Arc::new(FakeClock::at_unix_secs(1_700_000_000));
        let layer = X402Layer::builder()
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
        let service = EnvelopeStyleLayer::new(EnvelopeStyle::Responses).layer(layer.layer(
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

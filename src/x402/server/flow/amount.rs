//! [`SettleAmount`]: what a metered answer costs, named by the service that
//! produced it, read by the flow when the answer ends.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use axum_core::extract::{FromRequestParts, OptionalFromRequestParts};
use http::request::Parts;

use crate::envelope::MissingExtension;
use serde_json::{Map, Value};

use crate::x402::server::pricing::Price;
use crate::x402::wire::types::{AtomicAmount, PaymentRequirements, SCHEME_UPTO, UsdAmount};

/// The amount to settle for this request, in the asset's atomic units: a
/// request-scoped handle in the extensions of every paid request that
/// reaches the inner service. For a scheme that authorises a maximum
/// (`upto`), the service sets it whenever it knows what its answer cost (a
/// stream: by its last chunk); the flow reads it once, when the answer ends.
/// Unset, the quoted amount is settled; above the authorised maximum, the
/// maximum is (the overrun is logged and counted). For `exact` it is ignored:
/// what was signed is settled.
///
/// As an axum extractor it answers 500 when missing (the route is not
/// behind `X402Layer`, or it was free).
#[derive(Clone, Debug, Default)]
pub struct SettleAmount(Arc<Slots>);

/// What the service named, in one allocation per paid request.
#[derive(Debug, Default)]
struct Slots {
    amount: Mutex<Option<Named>>,
    usage: Mutex<Option<Map<String, Value>>>,
}

/// What the service named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Named {
    /// Atomic units of the asset, all in.
    Units(AtomicAmount),
    /// A price in USD before the layer's flat fee.
    Usd(UsdAmount),
}

impl SettleAmount {
    /// Names the amount to settle in the asset's atomic units, fee included
    /// (the last call wins).
    pub fn set(&self, amount: AtomicAmount) {
        *self.0.amount.lock().unwrap_or_else(PoisonError::into_inner) = Some(Named::Units(amount));
    }

    /// Names what the answer cost in USD, before the layer's flat fee: the
    /// flow adds the fee and converts to the offer's units, rounded up (the
    /// one place the fee meets a price stays the layer's). The last call wins.
    pub fn set_usd(&self, price: UsdAmount) {
        *self.0.amount.lock().unwrap_or_else(PoisonError::into_inner) = Some(Named::Usd(price));
    }

    /// What the metered amount was for (e.g. a model's tokens and unit
    /// prices): a settled `upto` receipt carries it as `extensions.usage`,
    /// with the flat `fee` and the settled `amount` added by the flow. With
    /// an [`OfferSigner`](crate::x402::server::OfferSigner), a statement of
    /// `model`, `prompt_tokens`, `completion_tokens` (integers) and
    /// `input_usd_per_million`, `output_usd_per_million` (decimal text) is
    /// signed too (`walletgate-usage`).
    pub fn set_usage(&self, usage: Map<String, Value>) {
        *self.0.usage.lock().unwrap_or_else(PoisonError::into_inner) = Some(usage);
    }

    /// The usage statement named, if any.
    pub(crate) fn usage(&self) -> Option<Map<String, Value>> {
        self.0
            .usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn named(&self) -> Option<Named> {
        *self.0.amount.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How a price in USD becomes the offer's units: the layer's flat fee and the
/// asset's decimals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Units {
    pub(crate) flat_fee: UsdAmount,
    pub(crate) decimals: u8,
}

impl Units {
    /// `price` plus the fee in atomic units, rounded up to a whole unit.
    fn of(self, price: UsdAmount) -> Option<AtomicAmount> {
        let total = Price::Usd(price).total(self.flat_fee)?;
        // Micro-dollars, scaled to the asset's decimals and rounded up.
        let micros = total.micros();
        let units = match self.decimals {
            d if d >= 6 => micros.checked_mul(10u128.checked_pow(u32::from(d - 6))?)?,
            d => micros.div_ceil(10u128.pow(u32::from(6 - d))),
        };
        Some(AtomicAmount::new(units))
    }
}

/// What is settled for `offer` now, and the overrun beyond its maximum if
/// the service named more than was authorised.
pub(crate) fn decide(offer: &PaymentRequirements, named: &SettleAmount, units: Units) -> Decision {
    let quoted = Decision {
        amount: offer.amount,
        overrun: None,
    };
    if offer.scheme != SCHEME_UPTO {
        return quoted;
    }
    let named = match named.named() {
        None => return quoted,
        Some(Named::Units(amount)) => Some(amount),
        // A price too large to convert is above any ceiling.
        Some(Named::Usd(price)) => Some(units.of(price).unwrap_or(AtomicAmount::new(u128::MAX))),
    };
    match named {
        Some(amount) if amount.units() > offer.amount.units() => Decision {
            amount: offer.amount,
            overrun: Some(amount),
        },
        Some(amount) => Decision {
            amount,
            overrun: None,
        },
        None => Decision {
            amount: offer.amount,
            overrun: None,
        },
    }
}

/// The amount a settlement takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    /// What is settled.
    pub(crate) amount: AtomicAmount,
    /// What the service named, when it was above the authorised maximum.
    pub(crate) overrun: Option<AtomicAmount>,
}

impl<S: Send + Sync> FromRequestParts<S> for SettleAmount {
    type Rejection = MissingExtension;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or_else(|| MissingExtension::gateway::<Self>("X402Layer with a paid price", parts))
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for SettleAmount {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::server::PaymentOption;

    fn offer(scheme: &str) -> PaymentRequirements {
        let mut offer =
            PaymentOption::base_sepolia_usdc("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
                .unwrap()
                .requirements_for_amount(AtomicAmount::new(5_000));
        offer.scheme = scheme.to_owned();
        offer
    }

    const USDC: Units = Units {
        flat_fee: UsdAmount::from_micros(1_000),
        decimals: 6,
    };

    #[test]
    fn exact_settles_what_was_signed_whatever_is_named() {
        let named = SettleAmount::default();
        named.set(AtomicAmount::new(1));
        assert_eq!(
            decide(&offer("exact"), &named, USDC).amount,
            AtomicAmount::new(5_000)
        );
    }

    #[test]
    fn a_price_in_usd_settles_with_the_fee_in_the_assets_units_rounded_up() {
        let named = SettleAmount::default();
        named.set_usd(UsdAmount::from_micros(234));
        let upto = offer(SCHEME_UPTO);
        assert_eq!(decide(&upto, &named, USDC).amount, AtomicAmount::new(1_234));
        let two_decimals = Units {
            decimals: 2,
            ..USDC
        };
        assert_eq!(
            two_decimals.of(UsdAmount::from_micros(1)),
            Some(AtomicAmount::new(1)),
            "1 + 1,000 micro-dollars are a tenth of a cent: rounded up to one cent"
        );
        named.set_usd(UsdAmount::from_micros(u128::MAX / 2));
        assert_eq!(
            decide(&upto, &named, USDC).amount,
            AtomicAmount::new(5_000),
            "above the ceiling: the ceiling"
        );
    }

    #[test]
    fn a_maximum_settles_what_was_named_within_it() {
        let named = SettleAmount::default();
        let upto = offer(SCHEME_UPTO);
        assert_eq!(
            decide(&upto, &named, USDC).amount,
            AtomicAmount::new(5_000),
            "unset: the quote"
        );
        named.set(AtomicAmount::new(1_234));
        assert_eq!(
            decide(&upto, &named, USDC),
            Decision {
                amount: AtomicAmount::new(1_234),
                overrun: None
            }
        );
        named.set(AtomicAmount::new(9_000));
        assert_eq!(
            decide(&upto, &named, USDC),
            Decision {
                amount: AtomicAmount::new(5_000),
                overrun: Some(AtomicAmount::new(9_000))
            }
        );
    }
}

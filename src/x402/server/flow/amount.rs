//! [`SettleAmount`]: what a metered answer costs, named by the service that
//! produced it, read by the flow when the answer ends.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use axum_core::extract::{FromRequestParts, OptionalFromRequestParts};
use http::request::Parts;

use crate::envelope::MissingExtension;
use crate::x402::wire::types::{AtomicAmount, PaymentRequirements, SCHEME_UPTO};

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
pub struct SettleAmount(Arc<Mutex<Option<AtomicAmount>>>);

impl SettleAmount {
    /// Names the amount to settle (the last call wins).
    pub fn set(&self, amount: AtomicAmount) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(amount);
    }

    /// The amount named so far, if any.
    pub fn get(&self) -> Option<AtomicAmount> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What is settled for `offer` now, and the overrun beyond its maximum if
/// the service named more than was authorised.
pub(crate) fn decide(offer: &PaymentRequirements, named: &SettleAmount) -> Decision {
    if offer.scheme != SCHEME_UPTO {
        return Decision {
            amount: offer.amount,
            overrun: None,
        };
    }
    match named.get() {
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

    #[test]
    fn exact_settles_what_was_signed_whatever_is_named() {
        let named = SettleAmount::default();
        named.set(AtomicAmount::new(1));
        assert_eq!(
            decide(&offer("exact"), &named).amount,
            AtomicAmount::new(5_000)
        );
    }

    #[test]
    fn a_maximum_settles_what_was_named_within_it() {
        let named = SettleAmount::default();
        let upto = offer(SCHEME_UPTO);
        assert_eq!(
            decide(&upto, &named).amount,
            AtomicAmount::new(5_000),
            "unset: the quote"
        );
        named.set(AtomicAmount::new(1_234));
        assert_eq!(
            decide(&upto, &named),
            Decision {
                amount: AtomicAmount::new(1_234),
                overrun: None
            }
        );
        named.set(AtomicAmount::new(9_000));
        assert_eq!(
            decide(&upto, &named),
            Decision {
                amount: AtomicAmount::new(5_000),
                overrun: Some(AtomicAmount::new(9_000))
            }
        );
    }
}

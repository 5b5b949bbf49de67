//! Spend controls: what the client agrees to sign.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::Address;

use super::mpp::Protocol;

use crate::x402::{
    server::{BASE_SEPOLIA_USDC, BASE_USDC},
    wire::{
        AtomicAmount, Network, OfferPayload, PaymentRequired, PaymentRequirements, SCHEME_UPTO,
        UsdAmount, ValueError, offers_of,
    },
};

/// Whether a server's signed offers (x402 `offer-receipt`) are checked
/// before paying, and the key its offers, receipts and usage statements
/// must be signed with (the one it publishes, e.g. `offerSigner` in its
/// `/.well-known/x402`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OfferSignatures {
    /// Not checked (the default): what the official clients do.
    #[default]
    Ignore,
    /// A signed offer must be signed by this key; an unsigned one is paid.
    Prefer(Address),
    /// The offer must be signed by this key, or nothing is signed.
    Require(Address),
}

impl OfferSignatures {
    /// The server key checked against, if any.
    pub fn signer(&self) -> Option<Address> {
        match self {
            Self::Ignore => None,
            Self::Prefer(signer) | Self::Require(signer) => Some(*signer),
        }
    }
}

/// Whether a signed offer's payload is `offer`, field for field.
fn describes(payload: &OfferPayload, offer: &PaymentRequirements) -> bool {
    payload.scheme == offer.scheme
        && payload.network == offer.network.as_str()
        && payload.asset.eq_ignore_ascii_case(&offer.asset)
        && payload.pay_to.eq_ignore_ascii_case(&offer.pay_to)
        && payload.amount == offer.amount.to_string()
}

/// The default maximum per payment: 0.10 USD.
pub const DEFAULT_MAX_PER_PAYMENT: UsdAmount = UsdAmount::from_micros(100_000);

/// A hook that sees every quote's chosen offer before it is signed; an
/// `Err(reason)` refuses it.
pub type QuoteHook = Arc<dyn Fn(&PaymentRequirements) -> Result<(), String> + Send + Sync>;

/// An asset the client pays with: a token on a network and its decimals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedAsset {
    /// The CAIP-2 network, e.g. `eip155:84532`.
    pub network: Network,
    /// The token contract (compared case-insensitively).
    pub asset: String,
    /// Decimals of one unit; USDC has 6 (one unit is one micro-dollar).
    pub decimals: u8,
}

impl AllowedAsset {
    /// USDC on Base Sepolia and on Base: the deployments the crate knows.
    pub fn known_usdc() -> Vec<Self> {
        vec![
            Self {
                network: Network::base_sepolia(),
                asset: BASE_SEPOLIA_USDC.to_owned(),
                decimals: 6,
            },
            Self {
                network: Network::parse(Network::BASE).unwrap_or_else(|_| Network::base_sepolia()),
                asset: BASE_USDC.to_owned(),
                decimals: 6,
            },
        ]
    }

    fn matches(&self, offer: &PaymentRequirements) -> bool {
        self.network == offer.network && self.asset.eq_ignore_ascii_case(&offer.asset)
    }
}

/// Why an offer was refused before signing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The offer's network or asset is not allowed.
    NotAllowed {
        /// The offer's network.
        network: String,
        /// The offer's asset.
        asset: String,
    },
    /// The offer asks more than the maximum per payment.
    OverCap {
        /// Asked, in micro-dollars.
        asked_micros: u128,
        /// The cap, in micro-dollars.
        max_micros: u128,
    },
    /// The offer would take the budget past its total.
    OverBudget {
        /// Asked, in micro-dollars.
        asked_micros: u128,
        /// What is left, in micro-dollars.
        left_micros: u128,
    },
    /// The quote hook refused the offer.
    Hook(String),
    /// Signed offers are required and this one is not signed.
    UnsignedOffer,
    /// The offer's signature is not the server's, or it signs something else.
    OfferSignature(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAllowed { network, asset } => {
                write!(
                    f,
                    "no acceptable offer: {asset} on {network} is not allowed"
                )
            }
            Self::OverCap {
                asked_micros,
                max_micros,
            } => write!(
                f,
                "the quote asks {} USD, over the maximum per payment of {} USD",
                usd(*asked_micros),
                usd(*max_micros)
            ),
            Self::OverBudget {
                asked_micros,
                left_micros,
            } => write!(
                f,
                "the quote asks {} USD and the budget has {} USD left",
                usd(*asked_micros),
                usd(*left_micros)
            ),
            Self::Hook(reason) => write!(f, "the quote hook refused the offer: {reason}"),
            Self::UnsignedOffer => {
                f.write_str("the offer is not signed and signed offers are required")
            }
            Self::OfferSignature(reason) => {
                write!(f, "the offer's signature does not hold: {reason}")
            }
        }
    }
}

/// Micro-dollars as a decimal USD string.
pub(crate) fn usd(micros: u128) -> String {
    crate::x402::wire::AtomicAmount::new(micros).to_decimal_string(UsdAmount::DECIMALS)
}

/// A total spend shared by every clone of the policy (and so of the layer).
#[derive(Debug)]
struct Budget {
    total_micros: u64,
    spent_micros: AtomicU64,
}

/// The spend controls: on by default.
///
/// * at most [`DEFAULT_MAX_PER_PAYMENT`] (0.10 USD) per payment;
/// * only the assets in [`AllowedAsset::known_usdc`];
/// * no total budget unless [`budget_usd`](Self::with_budget_usd) sets one; the
///   budget counts every *signed* authorization, settled or not (a signed
///   authorization can be settled until its `validBefore`);
/// * an optional [`hook`](Self::hook) that sees each offer before signing.
#[derive(Clone)]
pub struct SpendPolicy {
    max_per_payment: UsdAmount,
    allowed: Vec<AllowedAsset>,
    budget: Option<Arc<Budget>>,
    hook: Option<QuoteHook>,
    prefer_upto: bool,
    offer_signatures: OfferSignatures,
    protocol: Protocol,
}

impl fmt::Debug for SpendPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpendPolicy")
            .field("max_per_payment", &self.max_per_payment)
            .field("allowed", &self.allowed)
            .field("budget", &self.budget)
            .field("hook", &self.hook.is_some())
            .field("prefer_upto", &self.prefer_upto)
            .field("offer_signatures", &self.offer_signatures)
            .field("protocol", &self.protocol)
            .finish()
    }
}

impl Default for SpendPolicy {
    fn default() -> Self {
        Self {
            max_per_payment: DEFAULT_MAX_PER_PAYMENT,
            allowed: AllowedAsset::known_usdc(),
            budget: None,
            hook: None,
            prefer_upto: false,
            offer_signatures: OfferSignatures::Ignore,
            protocol: Protocol::X402,
        }
    }
}

/// Parses a decimal USD amount such as `"0.10"`.
pub fn parse_usd(text: &str) -> Result<UsdAmount, ValueError> {
    text.trim().parse()
}

impl SpendPolicy {
    /// The default controls.
    pub fn new() -> Self {
        Self::default()
    }

    /// The maximum per payment.
    pub fn with_max_per_payment(mut self, max: UsdAmount) -> Self {
        self.max_per_payment = max;
        self
    }

    /// The maximum per payment, as a decimal USD string (`"0.25"`).
    pub fn with_max_per_payment_usd(self, max: &str) -> Result<Self, ValueError> {
        Ok(self.with_max_per_payment(parse_usd(max)?))
    }

    /// A total budget, shared by every clone of this policy.
    pub fn with_budget(mut self, total: UsdAmount) -> Self {
        self.budget = Some(Arc::new(Budget {
            total_micros: u64::try_from(total.micros()).unwrap_or(u64::MAX),
            spent_micros: AtomicU64::new(0),
        }));
        self
    }

    /// A total budget as a decimal USD string.
    pub fn with_budget_usd(self, total: &str) -> Result<Self, ValueError> {
        Ok(self.with_budget(parse_usd(total)?))
    }

    /// The assets the client pays with (replaces the default list).
    pub fn with_allowed_assets(mut self, allowed: Vec<AllowedAsset>) -> Self {
        self.allowed = allowed;
        self
    }

    /// A hook that sees every offer before it is signed.
    pub fn hook(
        mut self,
        hook: impl Fn(&PaymentRequirements) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Spent so far from the budget, in micro-dollars (`None` without a budget).
    pub fn spent_micros(&self) -> Option<u64> {
        self.budget
            .as_ref()
            .map(|budget| budget.spent_micros.load(Ordering::SeqCst))
    }

    /// Signs a quote's metered `upto` offer (its amount a ceiling, the
    /// answer's cost settled) when it has one, instead of its first offer;
    /// the ceiling passes the same checks as any amount.
    pub fn with_upto_preferred(mut self) -> Self {
        self.prefer_upto = true;
        self
    }

    /// Checks the server's signed offers ([`OfferSignatures`]); the key
    /// is also what receipts and usage statements are checked against.
    pub fn with_offer_signatures(mut self, mode: OfferSignatures) -> Self {
        self.offer_signatures = mode;
        self
    }

    /// The protocol that pays a 402 offering both x402 and MPP (x402 by
    /// default); a 402 offering one is paid through that one.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The preferred protocol.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// How signed offers are checked.
    pub fn offer_signatures(&self) -> OfferSignatures {
        self.offer_signatures
    }

    /// Checks the signature of `offer` (one of `quote`'s) at `now`, as
    /// [`OfferSignatures`] asks: signed by the server's key, for this offer
    /// and this resource, not expired.
    pub fn check_offer(
        &self,
        quote: &PaymentRequired,
        offer: &PaymentRequirements,
        now: u64,
    ) -> Result<(), Refusal> {
        let (signer, required) = match self.offer_signatures {
            OfferSignatures::Ignore => return Ok(()),
            OfferSignatures::Prefer(signer) => (signer, false),
            OfferSignatures::Require(signer) => (signer, true),
        };
        let index = quote.accepts.iter().position(|entry| entry == offer);
        let signed = offers_of(quote);
        let Some(candidate) = signed
            .iter()
            .find(|signed| signed.accept_index.is_some() && signed.accept_index == index)
            .or_else(|| {
                signed
                    .iter()
                    .find(|signed| describes(&signed.payload, offer))
            })
        else {
            return if required {
                Err(Refusal::UnsignedOffer)
            } else {
                Ok(())
            };
        };
        let bad = |why: &str| Err(Refusal::OfferSignature(why.to_owned()));
        let payload = candidate
            .verify(signer)
            .map_err(|error| Refusal::OfferSignature(error.to_string()))?;
        if !describes(payload, offer) {
            return bad("it signs another offer");
        }
        if payload.resource_url != quote.resource.url {
            return bad("it signs another resource");
        }
        if payload.valid_until < now {
            return bad("it has expired");
        }
        Ok(())
    }

    /// The offer of `quote` to sign: its first (as the official clients do),
    /// or its `upto` one when preferred and offered.
    pub fn choose<'a>(&self, quote: &'a PaymentRequired) -> Option<&'a PaymentRequirements> {
        let upto = || {
            quote.accepts.iter().find(|offer| {
                offer.scheme == SCHEME_UPTO && offer.extra_str("facilitatorAddress").is_some()
            })
        };
        self.prefer_upto
            .then(upto)
            .flatten()
            .or_else(|| quote.accepts.first())
    }

    /// Checks `offer` and, if it passes, takes its amount from the budget.
    pub fn authorize(&self, offer: &PaymentRequirements) -> Result<(), Refusal> {
        let allowed = self
            .allowed
            .iter()
            .find(|allowed| allowed.matches(offer))
            .ok_or_else(|| Refusal::NotAllowed {
                network: offer.network.as_str().to_owned(),
                asset: offer.asset.clone(),
            })?;
        let asked_micros = micros(offer.amount.units(), allowed.decimals);
        let max_micros = self.max_per_payment.micros();
        if asked_micros > max_micros {
            return Err(Refusal::OverCap {
                asked_micros,
                max_micros,
            });
        }
        if let Some(hook) = &self.hook {
            hook(offer).map_err(Refusal::Hook)?;
        }
        if let Some(budget) = &self.budget {
            let asked = u64::try_from(asked_micros).unwrap_or(u64::MAX);
            budget
                .spent_micros
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spent| {
                    spent
                        .checked_add(asked)
                        .filter(|total| *total <= budget.total_micros)
                })
                .map_err(|spent| Refusal::OverBudget {
                    asked_micros,
                    left_micros: u128::from(budget.total_micros.saturating_sub(spent)),
                })?;
        }
        Ok(())
    }
}

impl SpendPolicy {
    /// Gives back to the budget what a settlement of `offer` did not take
    /// (a metered `upto` payment reserves its ceiling, then costs what the
    /// answer used).
    pub(crate) fn refund(&self, offer: &PaymentRequirements, settled: AtomicAmount) {
        let (Some(budget), Some(allowed)) = (
            &self.budget,
            self.allowed.iter().find(|allowed| allowed.matches(offer)),
        ) else {
            return;
        };
        let reserved = micros(offer.amount.units(), allowed.decimals);
        let taken = micros(settled.units(), allowed.decimals);
        let back = u64::try_from(reserved.saturating_sub(taken)).unwrap_or(0);
        let _ = budget
            .spent_micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |spent| {
                Some(spent.saturating_sub(back))
            });
    }
}

/// `units` of a token with `decimals` as micro-dollars, rounded up.
fn micros(units: u128, decimals: u8) -> u128 {
    let decimals = u32::from(decimals);
    if decimals >= 6 {
        units.div_ceil(10u128.saturating_pow(decimals - 6))
    } else {
        units.saturating_mul(10u128.saturating_pow(6 - decimals))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::{facilitator::DevLedger, server::PaymentOption, wire::AtomicAmount};

    fn offer(units: u128) -> PaymentRequirements {
        PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9])
            .unwrap()
            .requirements_for_amount(AtomicAmount::new(units))
    }

    #[test]
    fn the_default_cap_is_ten_cents() {
        let policy = SpendPolicy::default();
        assert_eq!(policy.authorize(&offer(100_000)), Ok(()));
        assert_eq!(
            policy.authorize(&offer(100_001)),
            Err(Refusal::OverCap {
                asked_micros: 100_001,
                max_micros: 100_000
            })
        );
        let refusal = policy.authorize(&offer(250_000)).unwrap_err().to_string();
        assert!(
            refusal.contains("0.25 USD") && refusal.contains("0.1 USD"),
            "{refusal}"
        );
    }

    #[test]
    fn the_budget_is_shared_by_clones_and_never_overdrawn() {
        let policy = SpendPolicy::new().with_budget_usd("0.005").unwrap();
        let clone = policy.clone();
        assert_eq!(policy.authorize(&offer(3_000)), Ok(()));
        assert_eq!(
            clone.authorize(&offer(3_000)),
            Err(Refusal::OverBudget {
                asked_micros: 3_000,
                left_micros: 2_000
            })
        );
        assert_eq!(clone.authorize(&offer(2_000)), Ok(()));
        assert_eq!(policy.spent_micros(), Some(5_000));
    }

    #[test]
    fn the_first_offer_is_chosen_unless_upto_is_preferred_and_offered() {
        let mut upto = offer(5_000);
        upto.scheme = SCHEME_UPTO.to_owned();
        upto.extra.insert(
            "facilitatorAddress".into(),
            DevLedger::DEV_ACCOUNTS[9].into(),
        );
        let quote = |accepts: Vec<PaymentRequirements>| PaymentRequired {
            accepts,
            ..serde_json::from_value(serde_json::json!({
                "x402Version": 2, "accepts": [], "resource": {"url": "https://x.test"}
            }))
            .unwrap()
        };
        let both = quote(vec![offer(5_000), upto.clone()]);
        assert_eq!(SpendPolicy::new().choose(&both), Some(&both.accepts[0]));
        let preferring = SpendPolicy::new().with_upto_preferred();
        assert_eq!(preferring.choose(&both), Some(&both.accepts[1]));
        let exact_only = quote(vec![offer(5_000)]);
        assert_eq!(preferring.choose(&exact_only), Some(&exact_only.accepts[0]));
        // An upto offer naming no facilitator cannot be signed: not chosen.
        upto.extra.clear();
        let unsignable = quote(vec![offer(5_000), upto]);
        assert_eq!(preferring.choose(&unsignable), Some(&unsignable.accepts[0]));
    }

    #[test]
    fn other_assets_and_hook_refusals_are_not_signed() {
        let mut other = offer(1_000);
        other.asset = "0x0000000000000000000000000000000000000001".into();
        assert!(matches!(
            SpendPolicy::default().authorize(&other),
            Err(Refusal::NotAllowed { .. })
        ));
        let policy = SpendPolicy::new().hook(|offer| {
            if offer.amount.units() > 2_000 {
                Err("too dear for this job".into())
            } else {
                Ok(())
            }
        });
        assert_eq!(policy.authorize(&offer(2_000)), Ok(()));
        assert_eq!(
            policy.authorize(&offer(2_001)),
            Err(Refusal::Hook("too dear for this job".into()))
        );
        assert_eq!(micros(1_234_567, 9), 1_235);
        assert_eq!(micros(12, 4), 1_200);
    }
}

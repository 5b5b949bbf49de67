//! Solana USDC: the option a Solana gateway quotes and the fee payer it names.
//!
//! A Solana `exact` payment is a transaction the facilitator co-signs and pays
//! the fee for, so every quote names that fee payer in `extra.feePayer`. The
//! facilitator announces it in `GET /supported`; a server reads it once at
//! start ([`HttpFacilitator::fee_payer`], with the `http-facilitator`
//! feature) and quotes `PaymentOption::solana_usdc` (the server role).
//!
//! ```
//! use walletgate::x402::{facilitator::SOLANA_USDC_MINT, server::PaymentOption, wire::{Network, UsdAmount}};
//!
//! let option = PaymentOption::solana_usdc(
//!     "PayTo1111111111111111111111111111111111111",
//!     "FeePayer11111111111111111111111111111111111",
//! );
//! let offer = option.requirements(UsdAmount::FLAT_FEE).unwrap();
//! assert_eq!(offer.network, Network::solana_mainnet());
//! assert_eq!(offer.asset, SOLANA_USDC_MINT);
//! assert_eq!(offer.amount.units(), 1000);
//! assert_eq!(offer.extra["feePayer"], "FeePayer11111111111111111111111111111111111");
//! ```

use crate::x402::wire::types::{Network, SupportedResponse};

/// Solana mainnet (CAIP-2), as the specification's Solana gateway quotes it.
pub const SOLANA_MAINNET: &str = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";

/// USDC's mint on Solana mainnet.
pub const SOLANA_USDC_MINT: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";

impl Network {
    /// Solana mainnet ([`SOLANA_MAINNET`]).
    pub fn solana_mainnet() -> Self {
        // A constant with a namespace and a reference: always a valid id (tested below).
        Self::parse(SOLANA_MAINNET).expect("SOLANA_MAINNET is a CAIP-2 id")
    }
}

impl SupportedResponse {
    /// The fee payer the facilitator names for `network` (`extra.feePayer` of
    /// its first kind on that network that has one).
    pub fn fee_payer(&self, network: &Network) -> Option<&str> {
        self.kinds
            .iter()
            .filter(|kind| &kind.network == network)
            .find_map(|kind| kind.extra.as_ref()?.get("feePayer")?.as_str())
    }
}

#[cfg(feature = "http-facilitator")]
impl<C> super::HttpFacilitator<C>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    /// The fee payer this facilitator names for `network` in its
    /// `GET /supported`, as the official servers read it at start.
    ///
    /// A facilitator that names none answers a
    /// [protocol](super::FacilitatorErrorKind::Protocol) error.
    pub async fn fee_payer(&self, network: &Network) -> Result<String, super::FacilitatorError> {
        use super::Facilitator;
        let supported = self.supported().await?;
        supported
            .fee_payer(network)
            .map(str::to_owned)
            .ok_or_else(|| {
                super::FacilitatorError::protocol(format!(
                    "/supported lists no feePayer for {}",
                    network.as_str()
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_fee_payer_is_read_from_the_kind_of_the_network() {
        let supported: SupportedResponse = serde_json::from_value(json!({"kinds": [
            {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"},
            {"x402Version": 2, "scheme": "exact", "network": SOLANA_MAINNET, "extra": {"feePayer": "Payer1"}},
        ]}))
        .unwrap();
        assert_eq!(Network::solana_mainnet().as_str(), SOLANA_MAINNET);
        assert_eq!(
            supported.fee_payer(&Network::solana_mainnet()),
            Some("Payer1")
        );
        assert_eq!(supported.fee_payer(&Network::base_sepolia()), None);
    }
}

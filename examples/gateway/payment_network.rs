//! Where payments are quoted and settled: the network (`GATEWAY_NETWORK` and
//! the variables it reads), walletgate's own settler, and where the metered
//! `upto` offer goes beside `exact`.

use std::fmt;
use std::time::Duration;

use walletgate::x402::ConfigError as X402ConfigError;
use walletgate::x402::server::PaymentOption;
use walletgate::x402::wire::Network;

use crate::config_error::{ConfigError, invalid};

/// walletgate's own settler: where the chain is and which key pays gas.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SettlerSettings {
    pub(crate) rpc_url: String,
    pub(crate) key_file: String,
    pub(crate) receipt_timeout: Duration,
    pub(crate) confirmations: u64,
}

impl fmt::Debug for SettlerSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The RPC URL may carry a provider's API key.
        f.debug_struct("SettlerSettings")
            .field("key_file", &self.key_file)
            .field("receipt_timeout", &self.receipt_timeout)
            .field("confirmations", &self.confirmations)
            .finish_non_exhaustive()
    }
}

/// Which rail the gateway quotes, and who settles it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PaymentNetwork {
    /// USDC on an EVM network (EIP-3009).
    Evm(EvmSettings),
    /// Solana USDC, verified and settled by an x402 facilitator over HTTP.
    Solana(SolanaSettings),
}

/// An EVM network's USDC and the facilitator that settles it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EvmSettings {
    /// `GATEWAY_NETWORK` as given (`base-sepolia`, `base`, `eip155:<id>`).
    pub(crate) name: String,
    pub(crate) network: Network,
    pub(crate) usdc: String,
    pub(crate) eip712_name: String,
    pub(crate) eip712_version: String,
    /// `GATEWAY_FACILITATOR_URL`; `None`: settled in-process on the
    /// development ledger (Base Sepolia only).
    pub(crate) facilitator_url: Option<String>,
}

impl EvmSettings {
    /// Base Sepolia USDC (`"USDC"`, `"2"`), on the development ledger.
    pub(crate) fn base_sepolia() -> Self {
        Self {
            name: "base-sepolia".to_owned(),
            network: Network::base_sepolia(),
            usdc: walletgate::x402::server::BASE_SEPOLIA_USDC.to_owned(),
            eip712_name: "USDC".to_owned(),
            eip712_version: "2".to_owned(),
            facilitator_url: None,
        }
    }

    /// Base mainnet USDC (`"USD Coin"`, `"2"`).
    fn base() -> Self {
        Self {
            name: "base".to_owned(),
            network: Network::base(),
            usdc: walletgate::x402::server::BASE_USDC.to_owned(),
            eip712_name: "USD Coin".to_owned(),
            ..Self::base_sepolia()
        }
    }

    /// The offer of every quote: this USDC paid to `pay_to`.
    pub(crate) fn option(&self, pay_to: &str) -> Result<PaymentOption, X402ConfigError> {
        PaymentOption::evm(
            self.network.clone(),
            &self.usdc,
            pay_to,
            &self.eip712_name,
            &self.eip712_version,
        )
    }
}

/// Where the metered `upto` offer goes in a chat's 402 (`GATEWAY_UPTO`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum UptoPlace {
    /// Not offered: the specification's quote.
    Off,
    /// After `exact` (the specification's clients sign the first entry).
    #[default]
    Second,
    /// Before `exact`.
    First,
}

impl UptoPlace {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "off" => Some(Self::Off),
            "second" => Some(Self::Second),
            "first" => Some(Self::First),
            _ => None,
        }
    }
}

/// The Solana variant's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SolanaSettings {
    pub(crate) facilitator_url: String,
    pub(crate) pay_to: String,
    /// `extra.feePayer`; `None` until read from the facilitator's `/supported`.
    pub(crate) fee_payer: Option<String>,
}

/// `GATEWAY_EVM_RPC_URL` + `GATEWAY_SETTLER_KEY_FILE` (both or neither) and
/// the variables only they make meaningful.
pub(crate) fn settler_settings(
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Option<SettlerSettings>, ConfigError> {
    let (rpc_url, key_file) = match (var("GATEWAY_EVM_RPC_URL"), var("GATEWAY_SETTLER_KEY_FILE")) {
        (Some(rpc_url), Some(key_file)) => (rpc_url, key_file),
        (None, None) => {
            for variable in ["GATEWAY_RECEIPT_TIMEOUT_SECS", "GATEWAY_CONFIRMATIONS"] {
                if var(variable).is_some() {
                    return Err(invalid(
                        variable,
                        "is only read with GATEWAY_EVM_RPC_URL and GATEWAY_SETTLER_KEY_FILE",
                    ));
                }
            }
            return Ok(None);
        }
        (Some(_), None) => {
            return Err(invalid(
                "GATEWAY_SETTLER_KEY_FILE",
                "is required with GATEWAY_EVM_RPC_URL",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "GATEWAY_EVM_RPC_URL",
                "is required with GATEWAY_SETTLER_KEY_FILE",
            ));
        }
    };
    if var("GATEWAY_FACILITATOR_URL").is_some() {
        return Err(invalid(
            "GATEWAY_FACILITATOR_URL",
            "is not read with GATEWAY_EVM_RPC_URL: the gateway settles itself",
        ));
    }
    let receipt_timeout = match var("GATEWAY_RECEIPT_TIMEOUT_SECS") {
        None => walletgate::x402::facilitator::evm_settler::DEFAULT_RECEIPT_TIMEOUT,
        Some(secs) => {
            Duration::from_secs(secs.parse().ok().filter(|secs| *secs > 0).ok_or_else(|| {
                invalid(
                    "GATEWAY_RECEIPT_TIMEOUT_SECS",
                    "expected a positive number of seconds",
                )
            })?)
        }
    };
    let confirmations = match var("GATEWAY_CONFIRMATIONS") {
        None => 0,
        Some(count) => count
            .parse()
            .map_err(|_| invalid("GATEWAY_CONFIRMATIONS", "expected a number of blocks"))?,
    };
    Ok(Some(SettlerSettings {
        rpc_url,
        key_file,
        receipt_timeout,
        confirmations,
    }))
}

/// `GATEWAY_NETWORK` and the variables it reads. A variable the chosen
/// network would ignore is an error naming it, never silence.
pub(crate) fn payment_network(
    var: &impl Fn(&str) -> Option<String>,
    self_settling: bool,
) -> Result<PaymentNetwork, ConfigError> {
    let name = var("GATEWAY_NETWORK").unwrap_or_else(|| "base-sepolia".to_owned());
    let facilitator_url = var("GATEWAY_FACILITATOR_URL");
    let only_with = |variable: &str, network: &str| -> Result<(), ConfigError> {
        match var(variable) {
            Some(_) => Err(invalid(
                variable,
                format!("is only read with GATEWAY_NETWORK={network} (it is {name})"),
            )),
            None => Ok(()),
        }
    };
    if name != "solana" {
        for variable in ["GATEWAY_SOLANA_PAY_TO", "GATEWAY_SOLANA_FEE_PAYER"] {
            only_with(variable, "solana")?;
        }
    }
    if !name.starts_with("eip155:") {
        for variable in [
            "GATEWAY_USDC_ADDRESS",
            "GATEWAY_USDC_NAME",
            "GATEWAY_USDC_VERSION",
        ] {
            only_with(variable, "eip155:<id>")?;
        }
    }
    if name == "solana" && self_settling {
        return Err(invalid(
            "GATEWAY_EVM_RPC_URL",
            "settles EVM networks only (it is solana)",
        ));
    }
    if facilitator_url.is_some() || name == "solana" || self_settling {
        only_with(
            "GATEWAY_DEV_LEDGER",
            "base-sepolia without GATEWAY_FACILITATOR_URL",
        )?;
    }
    let mut evm = match name.as_str() {
        "base-sepolia" => EvmSettings::base_sepolia(),
        "base" => EvmSettings::base(),
        "solana" => {
            only_with(
                "GATEWAY_PAY_TO",
                "an EVM network; Solana reads GATEWAY_SOLANA_PAY_TO",
            )?;
            let required = |variable: &str| {
                var(variable)
                    .ok_or_else(|| invalid(variable, "is required with the solana network"))
            };
            return Ok(PaymentNetwork::Solana(SolanaSettings {
                facilitator_url: required("GATEWAY_FACILITATOR_URL")?,
                pay_to: required("GATEWAY_SOLANA_PAY_TO")?,
                fee_payer: var("GATEWAY_SOLANA_FEE_PAYER"),
            }));
        }
        custom if custom.starts_with("eip155:") => {
            let network = Network::parse(custom)
                .ok()
                .filter(|network| network.eip155_chain_id().is_some())
                .ok_or_else(|| {
                    invalid(
                        "GATEWAY_NETWORK",
                        format!("{custom:?} is not eip155:<chain id>"),
                    )
                })?;
            let required = |variable: &str| {
                var(variable).ok_or_else(|| {
                    invalid(
                        variable,
                        format!("is required with GATEWAY_NETWORK={custom}"),
                    )
                })
            };
            EvmSettings {
                name: custom.to_owned(),
                network,
                usdc: required("GATEWAY_USDC_ADDRESS")?,
                eip712_name: required("GATEWAY_USDC_NAME")?,
                eip712_version: required("GATEWAY_USDC_VERSION")?,
                facilitator_url: None,
            }
        }
        other => {
            return Err(invalid(
                "GATEWAY_NETWORK",
                format!(
                    "unknown network {other:?}; known: base-sepolia, base, solana, eip155:<chain id>"
                ),
            ));
        }
    };
    match facilitator_url {
        Some(url) => evm.facilitator_url = Some(url),
        // The development ledger funds public keys with Base Sepolia USDC only.
        None if name != "base-sepolia" && !self_settling => {
            return Err(invalid(
                "GATEWAY_FACILITATOR_URL",
                format!(
                    "is required with GATEWAY_NETWORK={name}: the development ledger settles Base \
                     Sepolia USDC only, for publicly known keys"
                ),
            ));
        }
        None => {}
    }
    Ok(PaymentNetwork::Evm(evm))
}

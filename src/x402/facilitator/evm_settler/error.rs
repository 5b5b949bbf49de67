//! [`SettlerError`]: why a settler could not be set up (its key, its node).

use std::fmt;

use alloy_primitives::Address;

/// Least gas cap accepted: no transfer fits below it.
pub(super) const MIN_GAS_CAP: u64 = 21_000;

/// Why a settler could not be set up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettlerError {
    /// The key file could not be used (never its contents).
    KeyFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The key is not a secp256k1 private key.
    InvalidKey,
    /// The RPC URL is not an `http(s)` URL.
    InvalidRpcUrl(String),
    /// The network is not `eip155:<id>`.
    InvalidNetwork(String),
    /// No asset to settle was configured.
    NoAsset,
    /// The node could not answer a startup check.
    Rpc(String),
    /// The node is on another chain than the configured network.
    ChainMismatch {
        /// The configured network's chain id.
        configured: u64,
        /// The node's `eth_chainId`.
        node: u64,
    },
    /// An asset has no code on the node's chain.
    AssetWithoutCode(Address),
    /// The gas cap is below what any transaction needs.
    GasCapTooLow(u64),
}

impl fmt::Display for SettlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KeyFile { path, reason } => write!(f, "settler key file {path}: {reason}"),
            Self::InvalidKey => f.write_str("the settler key is not a secp256k1 private key"),
            Self::InvalidRpcUrl(detail) => write!(f, "invalid RPC URL: {detail}"),
            Self::InvalidNetwork(network) => {
                write!(
                    f,
                    "the settler's network must be eip155:<chain id>, not {network}"
                )
            }
            Self::NoAsset => f.write_str("no asset to settle (add one with with_asset)"),
            Self::Rpc(detail) => write!(f, "RPC startup check failed: {detail}"),
            Self::ChainMismatch { configured, node } => write!(
                f,
                "the RPC node is on chain {node}, but the configured network is eip155:{configured}"
            ),
            Self::AssetWithoutCode(asset) => {
                write!(f, "asset {asset} has no code on the RPC node's chain")
            }
            Self::GasCapTooLow(cap) => {
                write!(
                    f,
                    "a gas cap of {cap} is below any transaction's {MIN_GAS_CAP}"
                )
            }
        }
    }
}

impl std::error::Error for SettlerError {}

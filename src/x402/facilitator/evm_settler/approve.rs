//! [`Permit2Approval`]: the one transaction an `upto` payer sends before its
//! first permit, `token.approve(Permit2, amount)` (`walletgate approve`).
//! It goes through the settler's own JSON-RPC and transaction code: the
//! node's chain id, pending nonce and fees, a gas estimate, an EIP-1559
//! transaction signed with the key, and its receipt.
//!
//! The amount is what the caller names, never `2²⁵⁶−1` unless asked for
//! (the official client's `createPermit2ApprovalTx` approves that): a
//! leaked Permit2 signature can then take at most the approved amount.

use std::fmt;
use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{SolCall, sol};

use super::SettlerKey;
use super::rpc::{CallRequest, Rpc, RpcError};
use super::tx::{self, Fees};
use crate::tls::ClientTls;
use crate::x402::wire::PERMIT2_ADDRESS;

sol! {
    function approve(address spender, uint256 amount) returns (bool);
    function allowance(address owner, address spender) returns (uint256);
    function decimals() returns (uint8);
}

/// Gas estimate margin, in percent.
const GAS_MARGIN_PERCENT: u64 = 25;

/// Why an approval could not be planned or sent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The RPC URL is unusable (never shown: it may carry an API key).
    InvalidRpcUrl(String),
    /// The node failed, or refused the transaction (its words).
    Rpc(String),
    /// The asset has no code, or no `decimals()`.
    NotAToken(Address),
    /// The approval was mined and reverted.
    Reverted(B256),
    /// No receipt within the wait: the transaction may still be mined.
    NoReceipt(B256),
}

impl fmt::Display for ApprovalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidRpcUrl(detail) => write!(f, "invalid RPC URL: {detail}"),
            Self::Rpc(detail) => write!(f, "the RPC node: {detail}"),
            Self::NotAToken(asset) => write!(f, "{asset} is not a token on this chain"),
            Self::Reverted(hash) => write!(f, "the approval {hash:#x} reverted"),
            Self::NoReceipt(hash) => write!(
                f,
                "no receipt for {hash:#x} yet: it may still be mined (check before sending again)"
            ),
        }
    }
}

impl std::error::Error for ApprovalError {}

impl From<RpcError> for ApprovalError {
    fn from(error: RpcError) -> Self {
        Self::Rpc(error.to_string())
    }
}

/// The approval as it would be sent: everything `--dry-run` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalPlan {
    /// The node's chain id.
    pub chain_id: u64,
    /// The key's address (the payer).
    pub from: Address,
    /// The token approved.
    pub asset: Address,
    /// The spender: Permit2.
    pub spender: Address,
    /// The amount, in the token's units.
    pub amount: U256,
    /// The payer's allowance to Permit2 now.
    pub current_allowance: U256,
    /// The transaction's nonce (the node's pending count).
    pub nonce: u64,
    /// Its gas limit (the estimate plus a margin).
    pub gas_limit: u64,
    /// Its fees.
    pub max_fee_per_gas: u128,
    /// Its priority fee.
    pub max_priority_fee_per_gas: u128,
    /// Its call data, `approve(Permit2, amount)`.
    pub data: Vec<u8>,
}

/// Approves Permit2 for a token with one key, on the chain an RPC node serves.
pub struct Permit2Approval {
    rpc: Rpc,
    key: SettlerKey,
}

impl fmt::Debug for Permit2Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit2Approval")
            .field("from", &self.key.address())
            .field("rpc", &self.rpc.origin())
            .finish()
    }
}

impl Permit2Approval {
    /// An approver reaching the node at `rpc_url` (`http(s)://`, never
    /// shown), signing with `key`, each call bounded by `timeout`.
    pub fn new(
        rpc_url: &str,
        key: SettlerKey,
        tls: &ClientTls,
        timeout: Duration,
    ) -> Result<Self, ApprovalError> {
        let rpc = Rpc::new(rpc_url, tls, timeout, super::DEFAULT_SIMULATION_WINDOW)
            .map_err(ApprovalError::InvalidRpcUrl)?;
        Ok(Self { rpc, key })
    }

    /// The key's address.
    pub fn address(&self) -> Address {
        self.key.address()
    }

    async fn read(&self, to: Address, data: &[u8]) -> Result<Vec<u8>, ApprovalError> {
        Ok(self
            .rpc
            .eth_call(&CallRequest::new(self.key.address(), to, data))
            .await?)
    }

    /// The token's `decimals()`.
    pub async fn decimals(&self, asset: Address) -> Result<u8, ApprovalError> {
        if self.rpc.code_len(asset).await? == 0 {
            return Err(ApprovalError::NotAToken(asset));
        }
        let answer = self
            .read(asset, &decimalsCall {}.abi_encode())
            .await
            .map_err(|_| ApprovalError::NotAToken(asset))?;
        decimalsCall::abi_decode_returns(&answer).map_err(|_| ApprovalError::NotAToken(asset))
    }

    /// The transaction that approves Permit2 for `amount` of `asset`, as it would be sent now.
    pub async fn plan(&self, asset: Address, amount: U256) -> Result<ApprovalPlan, ApprovalError> {
        let from = self.key.address();
        let chain_id = self.rpc.chain_id().await?;
        let allowance = self
            .read(
                asset,
                &allowanceCall {
                    owner: from,
                    spender: PERMIT2_ADDRESS,
                }
                .abi_encode(),
            )
            .await?;
        let current_allowance = allowanceCall::abi_decode_returns(&allowance)
            .map_err(|_| ApprovalError::NotAToken(asset))?;
        let data = approveCall {
            spender: PERMIT2_ADDRESS,
            amount,
        }
        .abi_encode();
        let (base, tip) = self.rpc.fees().await?;
        let fees = Fees::from_node(base, tip);
        let call = CallRequest::new(from, asset, &data);
        let gas = self.rpc.estimate_gas(&call).await?;
        let nonce = self.rpc.transaction_count(from, true).await?;
        Ok(ApprovalPlan {
            chain_id,
            from,
            asset,
            spender: PERMIT2_ADDRESS,
            amount,
            current_allowance,
            nonce,
            gas_limit: gas.saturating_add(gas * GAS_MARGIN_PERCENT / 100),
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            data,
        })
    }

    /// Signs and sends `plan`, then waits up to `wait` for its receipt:
    /// the transaction's hash once mined with status 1.
    pub async fn send(&self, plan: &ApprovalPlan, wait: Duration) -> Result<B256, ApprovalError> {
        let fees = Fees {
            max_fee_per_gas: plan.max_fee_per_gas,
            max_priority_fee_per_gas: plan.max_priority_fee_per_gas,
        };
        let signed = tx::sign(
            &self.key,
            plan.chain_id,
            plan.nonce,
            plan.gas_limit,
            fees,
            plan.asset,
            plan.data.clone(),
        );
        self.rpc.send_raw(&signed.raw).await?;
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some(receipt) = self.rpc.receipt(signed.hash).await? {
                return if receipt.success {
                    Ok(signed.hash)
                } else {
                    Err(ApprovalError::Reverted(signed.hash))
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ApprovalError::NoReceipt(signed.hash));
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_approves_permit2_for_the_amount_named() {
        let data = approveCall {
            spender: PERMIT2_ADDRESS,
            amount: U256::from(5_000_000u64),
        }
        .abi_encode();
        assert_eq!(
            data[..4],
            [0x09, 0x5e, 0xa7, 0xb3],
            "approve(address,uint256)"
        );
        assert_eq!(&data[16..36], PERMIT2_ADDRESS.as_slice());
        assert_eq!(U256::from_be_slice(&data[36..68]), U256::from(5_000_000u64));
    }
}

//! [`ContractSignatures`]: whether a contract wallet signed, asked of the
//! chain by whoever can reach it (the on-chain settler), for the server's
//! `sign-in-with-x`.

use alloy_primitives::{Address, B256};

use crate::store::BoxFuture;

/// Asks a contract wallet whether it signed (ERC-1271 `isValidSignature`),
/// for proofs whose signature does not recover their address; the gateway's
/// on-chain settler implements it through its node.
pub trait ContractSignatures: Send + Sync + 'static {
    /// Whether `wallet`, a contract on EIP-155 chain `chain_id`, accepts
    /// `signature` over `digest` (the EIP-191 hash of the signed text);
    /// `false` when it could not be asked.
    fn is_valid_signature<'a>(
        &'a self,
        chain_id: u64,
        wallet: Address,
        digest: B256,
        signature: &'a [u8],
    ) -> BoxFuture<'a, bool>;
}

forward_to_arc! { ContractSignatures {
    fn is_valid_signature<'a>(
        &'a self,
        chain_id: u64,
        wallet: Address,
        digest: B256,
        signature: &'a [u8],
    ) -> BoxFuture<'a, bool>;
}}

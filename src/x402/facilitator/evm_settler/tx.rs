//! Building and signing the settlement transaction: an EIP-1559 call of the
//! token's `transferWithAuthorization` (the `bytes` signature overload,
//! which also takes ERC-1271 wallets' signatures).

use alloy_consensus::{SignableTransaction, TxEip1559};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use alloy_sol_types::{SolCall, sol};

pub(super) use super::fees::Fees;
use super::key::SettlerKey;
use crate::x402::facilitator::ledger::Transfer;

sol! {
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes signature
    );
    function authorizationState(address authorizer, bytes32 nonce) returns (bool);
}

/// `Transfer(address,address,uint256)`'s topic.
pub(super) const TRANSFER_TOPIC: B256 =
    alloy_primitives::b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// The token call that moves `transfer` with `signature`.
pub(super) fn transfer_calldata(
    transfer: &Transfer,
    valid_after: u64,
    signature: &[u8],
) -> Vec<u8> {
    transferWithAuthorizationCall {
        from: transfer.from,
        to: transfer.to,
        value: U256::from(transfer.value),
        validAfter: U256::from(valid_after),
        validBefore: U256::from(transfer.valid_before_unix_secs),
        nonce: transfer.nonce,
        signature: Bytes::copy_from_slice(signature),
    }
    .abi_encode()
}

/// `authorizationState(from, nonce)`'s call data.
pub(super) fn authorization_state_calldata(from: Address, nonce: B256) -> Vec<u8> {
    authorizationStateCall {
        authorizer: from,
        nonce,
    }
    .abi_encode()
}

/// A signed transaction: its hash (known before it is sent) and its bytes.
pub(super) struct SignedTx {
    pub(super) hash: B256,
    pub(super) raw: Vec<u8>,
}

/// Signs a call of `to` with `data` at `nonce`.
pub(super) fn sign(
    key: &SettlerKey,
    chain_id: u64,
    nonce: u64,
    gas_limit: u64,
    fees: Fees,
    to: Address,
    data: Vec<u8>,
) -> SignedTx {
    let tx = TxEip1559 {
        chain_id,
        nonce,
        gas_limit,
        max_fee_per_gas: fees.max_fee_per_gas,
        max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
        to: TxKind::Call(to),
        value: U256::ZERO,
        access_list: Default::default(),
        input: data.into(),
    };
    let signature = key.sign_hash(tx.signature_hash());
    let signed = tx.into_signed(signature);
    SignedTx {
        hash: *signed.hash(),
        raw: signed.encoded_2718(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_signed_bytes_hash() {
        let key = SettlerKey::from_hex(
            "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
        )
        .unwrap();
        let signed = sign(
            &key,
            84532,
            3,
            100_000,
            Fees::from_node(1, 1),
            Address::ZERO,
            vec![1],
        );
        assert_eq!(signed.raw[0], 0x02, "EIP-1559 type byte");
        assert_eq!(signed.hash, alloy_primitives::keccak256(&signed.raw));
    }
}

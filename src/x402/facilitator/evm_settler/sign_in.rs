//! ERC-1271 for `sign-in-with-x`: a contract wallet's proof is judged by the
//! wallet itself, with an `eth_call` of `isValidSignature` through the
//! settler's node.

use alloy_primitives::{Address, B256};

use super::EvmSettler;
use super::rpc::CallRequest;
use crate::store::BoxFuture;
use crate::x402::facilitator::ContractSignatures;

/// `isValidSignature(bytes32,bytes)`, and the value a wallet answers to accept.
const IS_VALID_SIGNATURE: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];

/// The call data of `isValidSignature(digest, signature)`.
fn call_data(digest: B256, signature: &[u8]) -> Vec<u8> {
    let padded = signature.len().div_ceil(32) * 32;
    let mut data = Vec::with_capacity(4 + 96 + padded);
    data.extend_from_slice(&IS_VALID_SIGNATURE);
    data.extend_from_slice(digest.as_slice());
    // The bytes argument: its offset (two words in), its length, its words.
    data.extend_from_slice(&B256::left_padding_from(&[0x40]).0);
    data.extend_from_slice(&B256::left_padding_from(&signature.len().to_be_bytes()).0);
    data.extend_from_slice(signature);
    data.resize(4 + 96 + padded, 0);
    data
}

impl ContractSignatures for EvmSettler {
    fn is_valid_signature<'a>(
        &'a self,
        chain_id: u64,
        wallet: Address,
        digest: B256,
        signature: &'a [u8],
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            // Only the settler's own chain can be asked.
            if chain_id != self.inner.chain_id {
                return false;
            }
            let data = call_data(digest, signature);
            let call = CallRequest::new(self.address(), wallet, &data);
            match self.inner.rpc.eth_call(&call).await {
                Ok(answer) => answer.starts_with(&IS_VALID_SIGNATURE),
                // A revert, a wallet that is no contract, an unreachable node: not signed in.
                Err(_error) => {
                    trace_decision!(DEBUG, "x402", outcome = "contract signature not confirmed");
                    false
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_data_is_the_abi_encoding_of_digest_and_bytes() {
        let digest = B256::repeat_byte(0xaa);
        let data = call_data(digest, &[0x11; 65]);
        assert_eq!(data.len(), 4 + 32 * 3 + 96);
        assert_eq!(&data[..4], &IS_VALID_SIGNATURE);
        assert_eq!(&data[4..36], digest.as_slice());
        assert_eq!(data[67], 0x40);
        assert_eq!(data[99], 65);
        assert_eq!(&data[100..165], &[0x11; 65]);
        assert!(data[165..].iter().all(|&b| b == 0));
    }
}

//! An exact-EVM payment decoded once: the EIP-3009 authorization and its
//! signature as typed values, shared by the layer, the facilitators and the
//! stores, so no one parses the payload's hex again.

use std::fmt;

use alloy_primitives::{Address, B256, Signature, U256, keccak256};

use super::eip712::{TransferWithAuthorization, parse_b256, parse_evm_address, parse_signature};
use super::types::{AtomicAmount, ExactEvmPayloadRef, PaymentHeader, PaymentPayload};

/// An exact-EVM payload (`{signature, authorization}`) with every field typed.
///
/// `Debug` leaves the signature out.
#[derive(Clone, PartialEq, Eq)]
pub struct ExactEvmPayment {
    /// The payer.
    pub from: Address,
    /// The recipient.
    pub to: Address,
    /// Atomic units.
    pub value: AtomicAmount,
    /// Unix seconds; valid strictly after this.
    pub valid_after: u64,
    /// Unix seconds; valid strictly before this.
    pub valid_before: u64,
    /// The authorization's nonce.
    pub nonce: B256,
    /// The signature, if it is one the chain takes (65 bytes, `v` 27/28,
    /// low `s`); `None` is refused before any facilitator sees it.
    pub signature: Option<Signature>,
}

impl fmt::Debug for ExactEvmPayment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExactEvmPayment")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("value", &self.value)
            .field("valid_after", &self.valid_after)
            .field("valid_before", &self.valid_before)
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

impl ExactEvmPayment {
    /// The EIP-712 struct the signature signs.
    pub fn transfer(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: U256::from(self.value.units()),
            validAfter: U256::from(self.valid_after),
            validBefore: U256::from(self.valid_before),
            nonce: self.nonce,
        }
    }

    /// Keccak-256 of the payer, the nonce and the signature, fixed-size: the
    /// same payment always has the same fingerprint, whatever the JSON's
    /// spelling; `None` without a valid signature.
    ///
    /// The other signed fields add nothing: for one signer, a signature
    /// verifies against exactly one digest, so it already pins them (and a
    /// signature copied onto other fields never verifies). Left out, the
    /// input fits one Keccak block.
    pub fn fingerprint(&self) -> Option<[u8; 32]> {
        let signature = self.signature.as_ref()?.as_bytes();
        let mut bytes = [0u8; 20 + 32 + 65];
        bytes[..20].copy_from_slice(self.from.as_slice());
        bytes[20..52].copy_from_slice(self.nonce.as_slice());
        bytes[52..].copy_from_slice(&signature);
        Some(keccak256(bytes).0)
    }
}

/// What a payment's `payload` is, read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EvmDecoding {
    /// Not `{signature, authorization}` (another scheme's payload).
    NotExactEvm,
    /// Shaped so, but `from`, `to` or `nonce` is not `0x` hex of its length;
    /// the payer once `from` parsed.
    Malformed { payer: Option<Address> },
    /// Every field typed.
    Decoded(ExactEvmPayment),
}

impl EvmDecoding {
    /// Reads `payload.payload`, borrowing its strings, parsing each field once.
    pub(crate) fn of(payload: &PaymentPayload) -> Self {
        match payload.exact_evm_ref() {
            Some(evm) => Self::of_ref(&evm),
            None => Self::NotExactEvm,
        }
    }

    /// Reads a header's raw `payload` text; through a `Value` when a field
    /// has escapes (rare: hex needs none), so both read the same.
    pub(crate) fn of_header(header: &PaymentHeader) -> Self {
        match header.exact_evm_ref() {
            Some(evm) => Self::of_ref(&evm),
            None => Self::of(&header.to_payload()),
        }
    }

    fn of_ref(evm: &ExactEvmPayloadRef<'_>) -> Self {
        let authorization = &evm.authorization;
        let Some(from) = parse_evm_address(authorization.from) else {
            return Self::Malformed { payer: None };
        };
        let (Some(to), Some(nonce)) = (
            parse_evm_address(authorization.to),
            parse_b256(authorization.nonce),
        ) else {
            return Self::Malformed { payer: Some(from) };
        };
        Self::Decoded(ExactEvmPayment {
            from,
            to,
            value: authorization.value,
            valid_after: authorization.valid_after,
            valid_before: authorization.valid_before,
            nonce,
            signature: parse_signature(evm.signature),
        })
    }

    /// The typed payment, if the payload is one.
    pub(crate) fn payment(&self) -> Option<&ExactEvmPayment> {
        match self {
            Self::Decoded(payment) => Some(payment),
            _ => None,
        }
    }
}

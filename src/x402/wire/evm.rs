//! An exact-EVM payment decoded once: the EIP-3009 authorization and its
//! signature as typed values, shared by the layer, the facilitators and the
//! stores, so no one parses the payload's hex again.

use std::fmt;

use alloy_primitives::{Address, B256, Signature, U256, hex};
use sha2::{Digest as _, Sha256};

use super::eip712::{
    TransferWithAuthorization, parse_b256, parse_evm_address, parse_signature, prefixed_hex,
};
use super::types::{AtomicAmount, ExactEvmPayloadRef, PaymentPayload};

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

    /// SHA-256 of the payer, the nonce and the signature, fixed-size: the
    /// same payment always has the same fingerprint, whatever the JSON's
    /// spelling; `None` without a valid signature.
    ///
    /// The other signed fields add nothing: for one signer, a signature
    /// verifies against exactly one digest, so it already pins them (and a
    /// signature copied onto other fields never verifies). SHA-256, not
    /// Keccak: nothing on chain reads it, and CPUs hash it in hardware.
    pub fn fingerprint(&self) -> Option<[u8; 32]> {
        let signature = self.signature.as_ref()?.as_bytes();
        let mut bytes = [0u8; 20 + 32 + 65];
        bytes[..20].copy_from_slice(self.from.as_slice());
        bytes[20..52].copy_from_slice(self.nonce.as_slice());
        bytes[52..].copy_from_slice(&signature);
        Some(Sha256::digest(bytes).into())
    }
}

/// An EVM address as it was written: its 20 bytes and which of its 40 hex
/// digits were capitals, so its text comes back exactly (EIP-55 or not)
/// without hashing it either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WrittenAddress {
    bytes: [u8; 20],
    capitals: [u8; 5],
}

impl WrittenAddress {
    /// `0x` and 40 hex digits (either case); `None` otherwise.
    pub(crate) fn read(text: &str) -> Option<Self> {
        let bytes = prefixed_hex::<20>(text)?;
        // The digits are hex now: a capital is one of `A`..=`F`.
        let mut capitals = [0u8; 5];
        for (index, &digit) in text.as_bytes()[2..].iter().enumerate() {
            capitals[index / 8] |= u8::from(digit.wrapping_sub(b'A') < 6) << (index % 8);
        }
        Some(Self { bytes, capitals })
    }

    pub(crate) fn address(self) -> Address {
        Address::from(self.bytes)
    }

    /// The text it was read from.
    pub(crate) fn to_text(self) -> String {
        let mut text = [0u8; 42];
        text[..2].copy_from_slice(b"0x");
        let digits = &mut text[2..];
        // Lower case first; only a letter has a capital bit to undo it.
        hex::encode_to_slice(self.bytes, digits).expect("40 digits for 20 bytes");
        for (index, digit) in digits.iter_mut().enumerate() {
            *digit -= ((self.capitals[index / 8] >> (index % 8)) & 1) * (b'a' - b'A');
        }
        String::from_utf8(text.to_vec()).expect("hex is ASCII")
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
    /// Every field typed, and the payer as `from` wrote it.
    Decoded(ExactEvmPayment, WrittenAddress),
}

impl EvmDecoding {
    /// Reads `payload.payload`, borrowing its strings, parsing each field once.
    pub(crate) fn of(payload: &PaymentPayload) -> Self {
        match payload.exact_evm_ref() {
            Some(evm) => Self::of_ref(&evm),
            None => Self::NotExactEvm,
        }
    }

    pub(crate) fn of_ref(evm: &ExactEvmPayloadRef<'_>) -> Self {
        let authorization = &evm.authorization;
        let Some(written) = WrittenAddress::read(authorization.from) else {
            return Self::Malformed { payer: None };
        };
        let from = written.address();
        let (Some(to), Some(nonce)) = (
            parse_evm_address(authorization.to),
            parse_b256(authorization.nonce),
        ) else {
            return Self::Malformed { payer: Some(from) };
        };
        Self::Decoded(
            ExactEvmPayment {
                from,
                to,
                value: authorization.value,
                valid_after: authorization.valid_after,
                valid_before: authorization.valid_before,
                nonce,
                signature: parse_signature(evm.signature),
            },
            written,
        )
    }

    /// The payer as the payment wrote it, if the payload is one.
    pub(crate) fn written_payer(&self) -> Option<&WrittenAddress> {
        match self {
            Self::Decoded(_, written) => Some(written),
            _ => None,
        }
    }

    /// The typed payment, if the payload is one.
    pub(crate) fn payment(&self) -> Option<&ExactEvmPayment> {
        match self {
            Self::Decoded(payment, _) => Some(payment),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_comes_back_in_the_case_it_was_written_without_hashing() {
        for text in [
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
            "0xF39FD6E51AAD88F6F4CE6AB8827279CFFFB92266",
        ] {
            let written = WrittenAddress::read(text).unwrap();
            assert_eq!(written.address(), text.parse::<Address>().unwrap());
            assert_eq!(written.to_text(), text);
        }
        for text in [
            "f39fd6e51aad88f6f4ce6ab8827279cfffb92266",
            "0x12",
            "0xg39fd6e51aad88f6f4ce6ab8827279cfffb92266",
        ] {
            assert_eq!(WrittenAddress::read(text), None, "{text}");
        }
    }
}

//! EIP-712 hashing of EIP-3009 `TransferWithAuthorization`: the struct, the
//! token's domain, a small cache of domains, and strict hex parsers.
//!
//! ```
//! use walletgate::x402::wire::{ExactEvmDomain, TokenId};
//!
//! let token = TokenId::base_sepolia_usdc();
//! let domain = ExactEvmDomain::new("USDC", "2", token.chain_id, token.asset);
//! assert_eq!(domain, ExactEvmDomain::base_sepolia_usdc());
//! ```

use std::sync::{Mutex, PoisonError};

use alloy_primitives::{Address, B256, Signature, U256, keccak256};
use alloy_sol_types::{Eip712Domain, sol};

use super::types::{PaymentRequirements, SCHEME_EXACT};

sol! {
    /// EIP-3009 `TransferWithAuthorization`, the struct an exact-EVM payment signs.
    #[derive(Debug, PartialEq, Eq)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// Parses `0x` + 40 hex digits, any case.
pub(crate) fn parse_evm_address(text: &str) -> Option<Address> {
    prefixed_hex::<20>(text).map(Address::from)
}

/// Parses `0x` + 64 hex digits.
pub(crate) fn parse_b256(text: &str) -> Option<B256> {
    prefixed_hex::<32>(text).map(B256::from)
}

/// Parses a 65-byte `0x` signature (r, s, v) as USDC's
/// `transferWithAuthorization` accepts it on chain: `v` is 27 or 28 and `s`
/// is in the lower half of the curve order (EIP-2).
///
/// `v` = 0/1 is refused, not normalised: the chain refuses those bytes, and a
/// remote settler forwards the bytes the client signed. A high-`s` copy
/// (`s -> n - s`, `v` flipped) recovers the same signer, which is exactly why
/// it must not pass as a second, distinct payment.
pub(crate) fn parse_signature(text: &str) -> Option<Signature> {
    let raw = prefixed_hex::<65>(text)?;
    if !matches!(raw[64], 27 | 28) {
        return None;
    }
    let signature = Signature::from_raw_array(&raw).ok()?;
    signature.normalize_s().is_none().then_some(signature)
}

/// Exactly `N` bytes of `0x`-prefixed hex, either case.
///
/// const-hex checks and decodes the digits together (with AVX2 or SSSE3
/// where the CPU has them): a `match` per digit mispredicts on the mixed
/// case of EIP-55 text, and a payment has some 270 digits.
pub(crate) fn prefixed_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.strip_prefix("0x")?.as_bytes();
    if digits.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    alloy_primitives::hex::decode_to_slice(digits, &mut out).ok()?;
    Some(out)
}

/// An EIP-3009 token: its chain and contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenId {
    /// EVM chain id.
    pub chain_id: u64,
    /// Token contract.
    pub asset: Address,
}

impl TokenId {
    /// Base Sepolia USDC (`0x036C…CF7e` on chain 84532).
    pub const fn base_sepolia_usdc() -> Self {
        Self {
            chain_id: 84532,
            asset: Address::new([
                0x03, 0x6c, 0xbd, 0x53, 0x84, 0x2c, 0x54, 0x26, 0x63, 0x4e, 0x79, 0x29, 0x54, 0x1e,
                0xc2, 0x31, 0x8f, 0x3d, 0xcf, 0x7e,
            ]),
        }
    }
}

/// The EIP-712 domain of an EIP-3009 token: `{name, version, chainId, verifyingContract}`.
///
/// The separator is computed once, at construction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactEvmDomain {
    separator: B256,
}

impl ExactEvmDomain {
    /// The domain of token `name`/`version` at `verifying_contract` on `chain_id`.
    pub fn new(name: &str, version: &str, chain_id: u64, verifying_contract: Address) -> Self {
        let domain = Eip712Domain::new(
            Some(name.to_owned().into()),
            Some(version.to_owned().into()),
            Some(U256::from(chain_id)),
            Some(verifying_contract),
            None,
        );
        Self {
            separator: domain.separator(),
        }
    }

    /// Base Sepolia USDC: `{USDC, 2, 84532, 0x036C…CF7e}`.
    pub fn base_sepolia_usdc() -> Self {
        let token = TokenId::base_sepolia_usdc();
        Self::new("USDC", "2", token.chain_id, token.asset)
    }

    /// The domain an exact-EVM offer names: `extra.name`/`extra.version`,
    /// its chain and asset. `None` if the offer is not exact on an `eip155:`
    /// network or lacks any of them.
    pub fn for_offer(offer: &PaymentRequirements) -> Option<Self> {
        if offer.scheme != SCHEME_EXACT {
            return None;
        }
        Some(Self::new(
            offer.extra_str("name")?,
            offer.extra_str("version")?,
            offer.network.eip155_chain_id()?,
            parse_evm_address(&offer.asset)?,
        ))
    }

    /// The domain separator.
    pub fn separator(&self) -> B256 {
        self.separator
    }

    /// The EIP-712 digest a wallet signs for `transfer`:
    /// `keccak256(0x1901 ‖ separator ‖ hashStruct(transfer))`.
    pub fn signing_hash(&self, transfer: &TransferWithAuthorization) -> B256 {
        let mut preimage = [0u8; 66];
        preimage[..2].copy_from_slice(&[0x19, 0x01]);
        preimage[2..34].copy_from_slice(self.separator.as_slice());
        preimage[34..].copy_from_slice(hash_transfer(transfer).as_slice());
        keccak256(preimage)
    }
}

/// `keccak256("TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)")`,
/// the EIP-3009 constant; a test pins it to what `sol!` derives.
const TRANSFER_WITH_AUTHORIZATION_TYPEHASH: B256 = B256::new([
    0x7c, 0x7c, 0x6c, 0xdb, 0x67, 0xa1, 0x87, 0x43, 0xf4, 0x9e, 0xc6, 0xfa, 0x9b, 0x35, 0xf5, 0x0d,
    0x52, 0xed, 0x05, 0xcb, 0xed, 0x4c, 0xc5, 0x92, 0xe1, 0x3b, 0x44, 0x50, 0x1c, 0x1a, 0x22, 0x67,
]);

/// EIP-712 `hashStruct` of a transfer, with the type hash precomputed
/// (`eip712_hash_struct` rebuilds and hashes the type string on every call)
/// and the seven words laid out on the stack: no allocation.
fn hash_transfer(transfer: &TransferWithAuthorization) -> B256 {
    let mut preimage = [0u8; 7 * 32];
    let words = [
        TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
        transfer.from.into_word(),
        transfer.to.into_word(),
        B256::from(transfer.value),
        B256::from(transfer.validAfter),
        B256::from(transfer.validBefore),
        transfer.nonce,
    ];
    for (slot, word) in preimage.chunks_exact_mut(32).zip(words) {
        slot.copy_from_slice(word.as_slice());
    }
    keccak256(preimage)
}

/// Domains seen recently, so the separator's four hashes are not redone per payment.
#[derive(Default)]
pub(crate) struct DomainCache {
    domains: Mutex<Vec<CachedDomain>>,
}

struct CachedDomain {
    name: String,
    version: String,
    token: TokenId,
    domain: ExactEvmDomain,
}

/// Distinct domains kept; a server quotes a handful of tokens.
const DOMAIN_CACHE_LEN: usize = 64;

impl DomainCache {
    pub(crate) fn get(&self, name: &str, version: &str, token: TokenId) -> ExactEvmDomain {
        let mut domains = self.domains.lock().unwrap_or_else(PoisonError::into_inner);
        // A linear scan over a handful of entries, comparing borrowed strings: no allocation.
        let hit = domains.iter().find(|cached| {
            cached.token == token && cached.name == name && cached.version == version
        });
        if let Some(cached) = hit {
            return cached.domain.clone();
        }
        let domain = ExactEvmDomain::new(name, version, token.chain_id, token.asset);
        // Names come from the server's own offers; the bound only guards misuse.
        if domains.len() >= DOMAIN_CACHE_LEN {
            domains.clear();
        }
        domains.push(CachedDomain {
            name: name.to_owned(),
            version: version.to_owned(),
            token,
            domain: domain.clone(),
        });
        domain
    }
}

#[cfg(test)]
mod tests {
    use alloy_sol_types::SolStruct;

    use super::*;

    fn hex32(text: &str) -> B256 {
        parse_b256(text).unwrap()
    }

    fn addr(text: &str) -> Address {
        parse_evm_address(text).unwrap()
    }

    /// Reference vector B1/B2: account #0 pays account #1 10000 units, nonce 0x11…11.
    fn vector_b_transfer() -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: addr("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
            to: addr("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
            value: U256::from(10_000u64),
            validAfter: U256::ZERO,
            validBefore: U256::from(1_900_000_000u64),
            nonce: B256::repeat_byte(0x11),
        }
    }

    #[test]
    fn typehash_is_the_eip3009_constant() {
        let transfer = vector_b_transfer();
        assert_eq!(
            transfer.eip712_type_hash(),
            hex32("0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
        );
        assert_eq!(
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
            transfer.eip712_type_hash()
        );
        assert_eq!(hash_transfer(&transfer), transfer.eip712_hash_struct());
    }

    #[test]
    fn generated_vector_b1_base_sepolia() {
        let domain = ExactEvmDomain::base_sepolia_usdc();
        let transfer = vector_b_transfer();
        assert_eq!(
            domain.separator(),
            hex32("0x71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818")
        );
        assert_eq!(
            transfer.eip712_hash_struct(),
            hex32("0x26c13dd90e22a5c4e48a7473300d0b6b73e11f5f59586b70ae63f9051caff6e7")
        );
        let digest = domain.signing_hash(&transfer);
        assert_eq!(
            digest,
            hex32("0xdf256a12d1f4a964a555b5ad7c2472389ca3f6c1c80b695baeed82e6fdba4fbd")
        );
        let signature = parse_signature("0xac1eaff9461ee30b1a1fd0be4a95edee0c8fce2575e542521a9208339cc9f78a7837351aa0bfcd2c4d814d09dbd6586acef61f90fbb72c3fa0f36b34690256861b").unwrap();
        assert_eq!(
            signature.recover_address_from_prehash(&digest).unwrap(),
            transfer.from
        );
    }

    #[test]
    fn generated_vector_b2_base_mainnet() {
        let domain = ExactEvmDomain::new(
            "USD Coin",
            "2",
            8453,
            addr("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
        );
        let transfer = vector_b_transfer();
        let digest = domain.signing_hash(&transfer);
        assert_eq!(
            digest,
            hex32("0x9ec527fd101c51abac28dd7a60ae2408a450792bb8fc1f3bbe6bdde735f7f67d")
        );
        let signature = parse_signature("0x6e725dfdfd650e8bcc1e4d6a9bc8f356bd22539a082524440a510b34feeddc114b696490355cde865fc04df462ea8d5ad5e6edf18a89a8c4fe2ec809c885eb0e1b").unwrap();
        assert_eq!(
            signature.recover_address_from_prehash(&digest).unwrap(),
            transfer.from
        );
    }

    const SPEC_SIGNATURE: &str = "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c";

    fn spec_transfer() -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: addr("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
            to: addr("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            value: U256::from(10_000u64),
            validAfter: U256::from(1_740_672_089u64),
            validBefore: U256::from(1_740_672_154u64),
            nonce: hex32("0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
        }
    }

    #[test]
    fn published_spec_signature_recovers_its_signer() {
        let digest = ExactEvmDomain::base_sepolia_usdc().signing_hash(&spec_transfer());
        let signature = parse_signature(SPEC_SIGNATURE).unwrap();
        assert_eq!(
            signature.recover_address_from_prehash(&digest).unwrap(),
            spec_transfer().from
        );
    }

    #[test]
    fn wrong_domain_name_recovers_someone_else() {
        let token = TokenId::base_sepolia_usdc();
        let domain = ExactEvmDomain::new("USD Coin", "2", token.chain_id, token.asset);
        let digest = domain.signing_hash(&spec_transfer());
        let signature = parse_signature(SPEC_SIGNATURE).unwrap();
        assert_ne!(
            signature.recover_address_from_prehash(&digest).ok(),
            Some(spec_transfer().from)
        );
    }

    /// The order `n` of secp256k1's group.
    fn secp256k1_order() -> U256 {
        U256::from_be_bytes(
            prefixed_hex::<32>(
                "0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
            )
            .unwrap(),
        )
    }

    #[test]
    fn hex_parsers_are_strict() {
        assert!(parse_evm_address("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266").is_some());
        for bad in [
            "f39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "0xf39F",
            "0xg39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
        ] {
            assert!(parse_evm_address(bad).is_none(), "{bad}");
        }
        // The right length, not 40 digits: a second prefix, a sign, a space,
        // a non-ASCII digit, a capital prefix.
        for bad in [
            "0x0xf39Fd6e51aad88F6F4ce6aB8827279cffFb922",
            "0x-39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "0x f39Fd6e51aad88F6F4ce6aB8827279cffFb9226",
            "0x\u{663}39Fd6e51aad88F6F4ce6aB8827279cffFb9226",
            "0X39Fd6e51aad88F6F4ce6aB8827279cffFb922666",
        ] {
            assert_eq!(bad.len(), 42, "{bad}");
            assert!(parse_evm_address(bad).is_none(), "{bad}");
        }
        assert!(parse_signature("0x00").is_none());
        let canonical = SPEC_SIGNATURE;
        assert!(parse_signature(canonical).is_some());
        // v = 0/1 and v = 29 are refused (the chain only takes 27/28).
        for v in ["00", "01", "1d"] {
            let other_v = format!("{}{v}", &canonical[..canonical.len() - 2]);
            assert!(parse_signature(&other_v).is_none(), "{v}");
        }
        // The malleated twin: s -> n - s, v flipped. It recovers the same signer, and is refused.
        let signature = Signature::from_raw_array(&prefixed_hex::<65>(canonical).unwrap()).unwrap();
        let high_s = Signature::new(
            signature.r(),
            secp256k1_order() - signature.s(),
            !signature.v(),
        );
        let digest = ExactEvmDomain::base_sepolia_usdc().signing_hash(&spec_transfer());
        assert_eq!(
            high_s.recover_address_from_prehash(&digest).unwrap(),
            spec_transfer().from
        );
        let malleated = format!("0x{}", alloy_primitives::hex::encode(high_s.as_bytes()));
        assert!(parse_signature(&malleated).is_none());
        assert!(parse_b256("0x11").is_none());
    }
}

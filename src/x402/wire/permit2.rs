//! The `upto` scheme's payload: a Permit2 `PermitWitnessTransferFrom` whose
//! witness names the recipient and the facilitator, signed for a ceiling
//! (`permitted.amount`) that the facilitator settles any part of, once.
//!
//! ```
//! use walletgate::x402::wire::UptoPayment;
//!
//! let payload = serde_json::json!({
//!     "signature": format!("0x{}", "11".repeat(65)),
//!     "permit2Authorization": {
//!         "from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
//!         "permitted": {"token": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "amount": "5000"},
//!         "spender": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002",
//!         "nonce": "12345",
//!         "deadline": "1750000300",
//!         "witness": {
//!             "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
//!             "facilitator": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
//!             "validAfter": "0"
//!         }
//!     }
//! });
//! let upto = UptoPayment::read(&payload).unwrap();
//! assert_eq!(upto.ceiling, 5000);
//! assert_eq!(upto.deadline, 1_750_000_300);
//! ```

use alloy_primitives::{Address, B256, U256, address, keccak256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use serde_json::Value;

use super::eip712::parse_evm_address;

/// Permit2, at the same address on every chain.
pub const PERMIT2_ADDRESS: Address = address!("0x000000000022D473030F116dDEE9F6B43aC78BA3");

/// x402's `upto` proxy (`x402UptoPermit2Proxy`): the only spender an `upto`
/// permit may name; it settles any amount up to the ceiling, once.
pub const UPTO_PROXY_ADDRESS: Address = address!("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// The requirement's `extra.assetTransferMethod` of an `upto` offer.
pub const ASSET_TRANSFER_METHOD_PERMIT2: &str = "permit2";

sol! {
    /// Permit2's token and ceiling.
    #[derive(Debug, PartialEq, Eq)]
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    /// x402's `upto` witness: who is paid, who settles, from when.
    #[derive(Debug, PartialEq, Eq)]
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    /// What an `upto` payer signs (Permit2's signature transfer with a witness).
    #[derive(Debug, PartialEq, Eq)]
    struct PermitWitnessTransferFrom {
        TokenPermissions permitted;
        address spender;
        uint256 nonce;
        uint256 deadline;
        Witness witness;
    }
}

/// An `upto` payment's `payload`, typed: the permit, its witness and the signature.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UptoPayment {
    /// The payer (`permit2Authorization.from`).
    pub from: Address,
    /// The token permitted.
    pub token: Address,
    /// The ceiling, in the token's units (`permitted.amount`).
    pub ceiling: u128,
    /// Who may pull it (must be [`UPTO_PROXY_ADDRESS`]).
    pub spender: Address,
    /// Permit2's unordered nonce.
    pub nonce: U256,
    /// Unix seconds after which the permit is void.
    pub deadline: u64,
    /// The witness's recipient.
    pub to: Address,
    /// The witness's facilitator (the only caller the proxy accepts).
    pub facilitator: Address,
    /// Unix seconds before which it may not be settled.
    pub valid_after: u64,
    /// The signature bytes (65 for an EOA, any length for a contract wallet).
    pub signature: Vec<u8>,
}

/// A decimal (or `0x` hex) unsigned integer, as a string.
fn uint(value: &Value) -> Option<U256> {
    let text = value.as_str()?;
    match text.strip_prefix("0x") {
        Some(hex) => U256::from_str_radix(hex, 16).ok(),
        None if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            U256::from_str_radix(text, 10).ok()
        }
        None => None,
    }
}

fn address_at(value: &Value) -> Option<Address> {
    parse_evm_address(value.as_str()?)
}

impl UptoPayment {
    /// The typed payment of an `upto` `payload` (`{signature,
    /// permit2Authorization}`), if every field is there and well formed.
    pub fn read(payload: &Value) -> Option<Self> {
        let permit = payload.get("permit2Authorization")?;
        let permitted = permit.get("permitted")?;
        let witness = permit.get("witness")?;
        let signature = payload.get("signature")?.as_str()?.strip_prefix("0x")?;
        Some(Self {
            from: address_at(permit.get("from")?)?,
            token: address_at(permitted.get("token")?)?,
            ceiling: u128::try_from(uint(permitted.get("amount")?)?).ok()?,
            spender: address_at(permit.get("spender")?)?,
            nonce: uint(permit.get("nonce")?)?,
            deadline: u64::try_from(uint(permit.get("deadline")?)?).ok()?,
            to: address_at(witness.get("to")?)?,
            facilitator: address_at(witness.get("facilitator")?)?,
            valid_after: u64::try_from(uint(witness.get("validAfter")?)?).ok()?,
            signature: alloy_primitives::hex::decode(signature).ok()?,
        })
    }

    /// The struct the payer signed.
    pub fn permit(&self) -> PermitWitnessTransferFrom {
        PermitWitnessTransferFrom {
            permitted: TokenPermissions {
                token: self.token,
                amount: U256::from(self.ceiling),
            },
            spender: self.spender,
            nonce: self.nonce,
            deadline: U256::from(self.deadline),
            witness: Witness {
                to: self.to,
                facilitator: self.facilitator,
                validAfter: U256::from(self.valid_after),
            },
        }
    }

    /// The EIP-712 digest the payer signed on `chain_id`: Permit2's domain
    /// `{name: "Permit2", chainId, verifyingContract: Permit2}`, no version.
    pub fn signing_hash(&self, chain_id: u64) -> B256 {
        self.permit().eip712_signing_hash(&permit2_domain(chain_id))
    }

    /// The replay identity of the permit: Permit2 burns `nonce` for `from`,
    /// whatever amount is settled, so two permits with one nonce are one payment.
    pub fn replay_nonce(&self) -> B256 {
        keccak256([b"permit2".as_slice(), &self.nonce.to_be_bytes::<32>()].concat())
    }
}

/// Permit2's EIP-712 domain on `chain_id`.
pub fn permit2_domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some("Permit2".into()),
        None,
        Some(U256::from(chain_id)),
        Some(PERMIT2_ADDRESS),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The type hashes the reference gives (viem's and the proxy's).
    #[test]
    fn the_struct_hashes_as_permit2_and_the_proxy_expect() {
        let permit = PermitWitnessTransferFrom {
            permitted: TokenPermissions {
                token: Address::ZERO,
                amount: U256::ZERO,
            },
            spender: Address::ZERO,
            nonce: U256::ZERO,
            deadline: U256::ZERO,
            witness: Witness {
                to: Address::ZERO,
                facilitator: Address::ZERO,
                validAfter: U256::ZERO,
            },
        };
        assert_eq!(
            permit.eip712_type_hash(),
            "0x51dff6974ad4388c499e7fcfe838d2bd767162553a144098ce20ea661d70c2ee"
                .parse::<B256>()
                .unwrap()
        );
        assert_eq!(
            permit.witness.eip712_type_hash(),
            "0xd4171c445a74218b01d4fd8af34ff1106580ea1e36ff837e64484bfaa2253b75"
                .parse::<B256>()
                .unwrap()
        );
        // Permit2's domain separator on 84532, as the reference checked it on anvil.
        let expected = keccak256(
            [
                keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)")
                    .as_slice(),
                keccak256("Permit2").as_slice(),
                &U256::from(84532u64).to_be_bytes::<32>(),
                B256::left_padding_from(PERMIT2_ADDRESS.as_slice()).as_slice(),
            ]
            .concat(),
        );
        assert_eq!(permit2_domain(84532).separator(), expected);
    }

    #[test]
    fn a_payload_missing_or_malformed_in_any_field_is_not_read() {
        let good = serde_json::json!({
            "signature": "0x00",
            "permit2Authorization": {
                "from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                "permitted": {"token": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "amount": "5000"},
                "spender": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002",
                "nonce": "0x10",
                "deadline": "100",
                "witness": {"to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
                            "facilitator": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "validAfter": "0"}
            }
        });
        let read = UptoPayment::read(&good).unwrap();
        assert_eq!(read.nonce, U256::from(16));
        for (pointer, bad) in [
            ("/permit2Authorization/permitted/amount", Value::from("-1")),
            ("/permit2Authorization/nonce", Value::from("")),
            ("/permit2Authorization/deadline", Value::from(100)),
            ("/permit2Authorization/spender", Value::from("0x1234")),
            ("/signature", Value::from("00")),
        ] {
            let mut payload = good.clone();
            *payload.pointer_mut(pointer).unwrap() = bad;
            assert_eq!(UptoPayment::read(&payload), None, "{pointer}");
        }
    }
}

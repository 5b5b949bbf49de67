//! In-process exact-EVM verification and settlement.
//!
//! [`LocalEvmFacilitator`] checks an EIP-3009 `TransferWithAuthorization`
//! the way the reference facilitator does, in the same order: scheme, EIP-712
//! domain present, network, signature (signer recovery over the EIP-712
//! digest, domain taken from the server's offer), `to == payTo`,
//! `validBefore >= now + 6 s`, `validAfter <= now`, `value == amount`, then
//! the [`Ledger`]: nonce unused and balance sufficient. Settlement re-runs the
//! checks and moves the funds through the same ledger.
//!
//! [`DevLedger`] is an in-memory USDC ledger that pre-funds the ten public
//! Hardhat/Anvil development accounts on Base Sepolia, so the official
//! clients can pay a local server with a development key and nothing else.
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::x402::{DevLedger, LocalEvmFacilitator};
//!
//! let ledger = Arc::new(DevLedger::new());
//! let facilitator = LocalEvmFacilitator::new(ledger.clone(), Arc::new(FakeClock::at_unix_secs(1_750_000_000)));
//! assert_eq!(ledger.balance_of(&DevLedger::base_sepolia_usdc(), DevLedger::DEV_ACCOUNTS[0].parse()?), DevLedger::DEV_ACCOUNT_FUNDS);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use alloy_primitives::{Address, B256, Signature, U256, keccak256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};

use super::facilitator::{BoxFuture, Facilitator, FacilitatorError, FacilitatorRequest, reason};
use super::types::{
    Eip3009Authorization, ExactEvmPayload, Network, SCHEME_EXACT, SettleResponse, SupportedKind,
    SupportedResponse, VerifyResponse, X402_VERSION,
};
use crate::clock::SharedClock;

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
fn parse_b256(text: &str) -> Option<B256> {
    prefixed_hex::<32>(text).map(B256::from)
}

/// Parses a 65-byte `0x` signature (r, s, v with v in 0, 1, 27 or 28).
fn parse_signature(text: &str) -> Option<Signature> {
    Signature::from_raw_array(&prefixed_hex::<65>(text)?).ok()
}

/// Exactly `N` bytes of `0x`-prefixed hex, either case.
fn prefixed_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.strip_prefix("0x")?.as_bytes();
    if digits.len() != N * 2 {
        return None;
    }
    let nibble = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
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
        let token = DevLedger::base_sepolia_usdc();
        Self::new("USDC", "2", token.chain_id, token.asset)
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
        preimage[34..].copy_from_slice(transfer.eip712_hash_struct().as_slice());
        keccak256(preimage)
    }
}

/// Domains seen recently, so the separator's four hashes are not redone per payment.
#[derive(Default)]
struct DomainCache {
    domains: Mutex<HashMap<(String, String, u64, Address), ExactEvmDomain>>,
}

/// Distinct domains kept; a server quotes a handful of tokens.
const DOMAIN_CACHE_LEN: usize = 64;

impl DomainCache {
    fn get(&self, name: &str, version: &str, chain_id: u64, asset: Address) -> ExactEvmDomain {
        let key = (name.to_owned(), version.to_owned(), chain_id, asset);
        let mut domains = self.domains.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(domain) = domains.get(&key) {
            return domain.clone();
        }
        let domain = ExactEvmDomain::new(name, version, chain_id, asset);
        // Names come from the server's own offers; the bound only guards misuse.
        if domains.len() >= DOMAIN_CACHE_LEN {
            domains.clear();
        }
        domains.insert(key, domain.clone());
        domain
    }
}

/// A verified authorization, ready to settle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The token.
    pub token: TokenId,
    /// Payer (the recovered signer).
    pub from: Address,
    /// Recipient.
    pub to: Address,
    /// Atomic units.
    pub value: u128,
    /// The EIP-3009 nonce.
    pub nonce: B256,
}

/// Why a ledger refused or could not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LedgerError {
    /// The payer's balance is below the value.
    InsufficientFunds,
    /// The (payer, nonce) authorization was used already.
    AuthorizationUsed,
    /// The ledger does not hold this token.
    UnknownToken,
    /// The ledger could not be reached; nothing happened.
    Unavailable(String),
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InsufficientFunds => f.write_str("insufficient funds"),
            Self::AuthorizationUsed => f.write_str("authorization already used"),
            Self::UnknownToken => f.write_str("unknown token"),
            Self::Unavailable(detail) => write!(f, "ledger unavailable: {detail}"),
        }
    }
}

impl std::error::Error for LedgerError {}

/// Balances and EIP-3009 authorization state of tokens: a chain, or a stand-in.
pub trait Ledger: Send + Sync + 'static {
    /// Checks that `transfer` could happen now (nonce unused, funds sufficient) without moving anything.
    fn check<'a>(&'a self, transfer: &'a Transfer) -> BoxFuture<'a, Result<(), LedgerError>>;

    /// Performs `transfer` atomically and returns its transaction id.
    fn transfer_with_authorization<'a>(
        &'a self,
        transfer: &'a Transfer,
    ) -> BoxFuture<'a, Result<String, LedgerError>>;
}

/// An in-memory USDC ledger for development and tests.
///
/// Starts with [`DEV_ACCOUNT_FUNDS`](Self::DEV_ACCOUNT_FUNDS) on each of the
/// ten public development accounts on Base Sepolia USDC. Settlement checks
/// and debits atomically, marks the nonce used forever, and returns a
/// deterministic transaction id.
#[derive(Debug, Default)]
pub struct DevLedger {
    state: Mutex<DevLedgerState>,
}

#[derive(Debug, Default)]
struct DevLedgerState {
    balances: HashMap<(TokenId, Address), u128>,
    used: HashSet<(TokenId, Address, B256)>,
    settlements: u64,
}

impl DevLedger {
    /// The ten accounts of the public Hardhat/Anvil development mnemonic
    /// (`test test … junk`). Their keys are public: never fund them on a real chain.
    pub const DEV_ACCOUNTS: [&'static str; 10] = [
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
        "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
        "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
        "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
        "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
        "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
        "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
    ];

    /// Funds of each development account: 10,000 USDC.
    pub const DEV_ACCOUNT_FUNDS: u128 = 10_000 * 1_000_000;

    /// Base Sepolia USDC.
    pub fn base_sepolia_usdc() -> TokenId {
        TokenId {
            chain_id: 84532,
            asset: Address::new([
                0x03, 0x6c, 0xbd, 0x53, 0x84, 0x2c, 0x54, 0x26, 0x63, 0x4e, 0x79, 0x29, 0x54, 0x1e,
                0xc2, 0x31, 0x8f, 0x3d, 0xcf, 0x7e,
            ]),
        }
    }

    /// A ledger with the development accounts funded.
    pub fn new() -> Self {
        let ledger = Self::empty();
        let token = Self::base_sepolia_usdc();
        for account in Self::DEV_ACCOUNTS {
            if let Some(owner) = parse_evm_address(account) {
                ledger.fund(&token, owner, Self::DEV_ACCOUNT_FUNDS);
            }
        }
        ledger
    }

    /// A ledger with no balances.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Adds `amount` to `owner`'s balance of `token`.
    pub fn fund(&self, token: &TokenId, owner: Address, amount: u128) {
        let mut state = self.lock();
        let balance = state.balances.entry((*token, owner)).or_default();
        *balance = balance.saturating_add(amount);
    }

    /// `owner`'s balance of `token`.
    pub fn balance_of(&self, token: &TokenId, owner: Address) -> u128 {
        self.lock()
            .balances
            .get(&(*token, owner))
            .copied()
            .unwrap_or(0)
    }

    /// How many transfers settled.
    pub fn settlements(&self) -> u64 {
        self.lock().settlements
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DevLedgerState> {
        // A panic elsewhere cannot leave the maps half-updated: each update is one statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_now(state: &DevLedgerState, transfer: &Transfer) -> Result<(), LedgerError> {
        if state
            .used
            .contains(&(transfer.token, transfer.from, transfer.nonce))
        {
            return Err(LedgerError::AuthorizationUsed);
        }
        let balance = state
            .balances
            .get(&(transfer.token, transfer.from))
            .copied()
            .unwrap_or(0);
        if balance < transfer.value {
            return Err(LedgerError::InsufficientFunds);
        }
        Ok(())
    }
}

impl Ledger for DevLedger {
    fn check<'a>(&'a self, transfer: &'a Transfer) -> BoxFuture<'a, Result<(), LedgerError>> {
        let result = Self::check_now(&self.lock(), transfer);
        Box::pin(std::future::ready(result))
    }

    fn transfer_with_authorization<'a>(
        &'a self,
        transfer: &'a Transfer,
    ) -> BoxFuture<'a, Result<String, LedgerError>> {
        let mut state = self.lock();
        let result = Self::check_now(&state, transfer).map(|()| {
            let from = (transfer.token, transfer.from);
            if let Some(balance) = state.balances.get_mut(&from) {
                *balance -= transfer.value;
            }
            let to = state
                .balances
                .entry((transfer.token, transfer.to))
                .or_default();
            *to = to.saturating_add(transfer.value);
            state
                .used
                .insert((transfer.token, transfer.from, transfer.nonce));
            state.settlements += 1;
            let mut preimage = Vec::with_capacity(92);
            preimage.extend_from_slice(&transfer.token.chain_id.to_be_bytes());
            preimage.extend_from_slice(transfer.from.as_slice());
            preimage.extend_from_slice(transfer.nonce.as_slice());
            preimage.extend_from_slice(&state.settlements.to_be_bytes());
            keccak256(&preimage).to_string()
        });
        drop(state);
        Box::pin(std::future::ready(result))
    }
}

/// Seconds an authorization must still be valid for at verification, as the
/// reference facilitator requires (room for settlement).
pub const MIN_REMAINING_VALIDITY_SECS: u64 = 6;

/// Verifies and settles exact-EVM payments in-process, against a [`Ledger`].
#[derive(Clone)]
pub struct LocalEvmFacilitator {
    ledger: Arc<dyn Ledger>,
    clock: SharedClock,
    domains: Arc<DomainCache>,
}

impl fmt::Debug for LocalEvmFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEvmFacilitator")
            .finish_non_exhaustive()
    }
}

/// A refused payment: the reason and, once known, the payer.
struct Refusal {
    reason: &'static str,
    payer: Option<Address>,
}

fn refuse(reason: &'static str, payer: Option<Address>) -> Refusal {
    Refusal { reason, payer }
}

impl LocalEvmFacilitator {
    /// Checks against `ledger`, reading time from `clock`.
    pub fn new(ledger: Arc<dyn Ledger>, clock: SharedClock) -> Self {
        Self {
            ledger,
            clock,
            domains: Arc::default(),
        }
    }

    fn check_offline(&self, request: &FacilitatorRequest) -> Result<Transfer, Refusal> {
        let offer = &request.payment_requirements;
        let payment = &request.payment_payload;
        if payment.x402_version != X402_VERSION {
            return Err(refuse(reason::INVALID_X402_VERSION, None));
        }
        if offer.scheme != SCHEME_EXACT || payment.accepted.scheme != SCHEME_EXACT {
            return Err(refuse(reason::UNSUPPORTED_SCHEME, None));
        }
        let (Some(name), Some(version)) = (offer.extra_str("name"), offer.extra_str("version"))
        else {
            return Err(refuse(reason::MISSING_EIP712_DOMAIN, None));
        };
        if payment.accepted.network != offer.network {
            return Err(refuse(reason::INVALID_NETWORK, None));
        }
        let chain_id = offer
            .network
            .eip155_chain_id()
            .ok_or(refuse(reason::INVALID_NETWORK, None))?;
        let asset = parse_evm_address(&offer.asset)
            .ok_or(refuse(reason::INVALID_PAYMENT_REQUIREMENTS, None))?;
        let pay_to = parse_evm_address(&offer.pay_to)
            .ok_or(refuse(reason::INVALID_PAYMENT_REQUIREMENTS, None))?;
        let ExactEvmPayload {
            signature,
            authorization,
        } = payment
            .exact_evm()
            .ok_or(refuse(reason::INVALID_PAYLOAD, None))?;
        let Eip3009Authorization {
            from,
            to,
            value,
            valid_after,
            valid_before,
            nonce,
        } = authorization;
        let from = parse_evm_address(&from).ok_or(refuse(reason::INVALID_PAYLOAD, None))?;
        let payer = Some(from);
        let to = parse_evm_address(&to).ok_or(refuse(reason::INVALID_PAYLOAD, payer))?;
        let nonce = parse_b256(&nonce).ok_or(refuse(reason::INVALID_PAYLOAD, payer))?;
        let signature = parse_signature(&signature).ok_or(refuse(reason::SIGNATURE, payer))?;

        let domain = self.domains.get(name, version, chain_id, asset);
        let digest = domain.signing_hash(&TransferWithAuthorization {
            from,
            to,
            value: U256::from(value.units()),
            validAfter: U256::from(valid_after),
            validBefore: U256::from(valid_before),
            nonce,
        });
        match signature.recover_address_from_prehash(&digest) {
            Ok(signer) if signer == from => {}
            _ => return Err(refuse(reason::SIGNATURE, payer)),
        }
        if to != pay_to {
            return Err(refuse(reason::RECIPIENT_MISMATCH, payer));
        }
        let now = self.clock.now_unix_secs();
        if valid_before < now.saturating_add(MIN_REMAINING_VALIDITY_SECS) {
            return Err(refuse(reason::VALID_BEFORE, payer));
        }
        if valid_after > now {
            return Err(refuse(reason::VALID_AFTER, payer));
        }
        if value != offer.amount {
            return Err(refuse(reason::VALUE_MISMATCH, payer));
        }
        Ok(Transfer {
            token: TokenId { chain_id, asset },
            from,
            to,
            value: value.units(),
            nonce,
        })
    }
}

/// The reason string of a ledger refusal; `None` when the ledger is unreachable.
fn ledger_reason(error: &LedgerError) -> Option<&'static str> {
    match error {
        LedgerError::InsufficientFunds => Some(reason::INSUFFICIENT_FUNDS),
        LedgerError::AuthorizationUsed => Some(reason::NONCE_ALREADY_USED),
        LedgerError::UnknownToken => Some(reason::INVALID_NETWORK),
        LedgerError::Unavailable(_) => None,
    }
}

impl Facilitator for LocalEvmFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async move {
            let transfer = match self.check_offline(request) {
                Ok(transfer) => transfer,
                Err(refusal) => {
                    let payer = refusal.payer.map(|a| a.to_checksum(None));
                    return Ok(VerifyResponse::invalid(refusal.reason, payer));
                }
            };
            let payer = transfer.from.to_checksum(None);
            match self.ledger.check(&transfer).await {
                Ok(()) => Ok(VerifyResponse::valid(payer)),
                Err(error) => match ledger_reason(&error) {
                    Some(reason) => Ok(VerifyResponse::invalid(reason, Some(payer))),
                    None => Err(FacilitatorError::unavailable(error.to_string())),
                },
            }
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            let network = request.payment_requirements.network.clone();
            let transfer = match self.check_offline(request) {
                Ok(transfer) => transfer,
                Err(refusal) => {
                    let payer = refusal.payer.map(|a| a.to_checksum(None));
                    return Ok(SettleResponse::failure(network, refusal.reason, payer));
                }
            };
            let payer = transfer.from.to_checksum(None);
            match self.ledger.transfer_with_authorization(&transfer).await {
                Ok(transaction) => Ok(SettleResponse {
                    success: true,
                    error_reason: None,
                    error_message: None,
                    payer: Some(payer),
                    transaction,
                    network,
                    amount: Some(request.payment_requirements.amount),
                }),
                Err(error) => match ledger_reason(&error) {
                    Some(reason) => Ok(SettleResponse::failure(network, reason, Some(payer))),
                    None => Err(FacilitatorError::unavailable(error.to_string())),
                },
            }
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        let kinds = vec![SupportedKind {
            x402_version: X402_VERSION,
            scheme: SCHEME_EXACT.to_owned(),
            network: Network::base_sepolia(),
            extra: None,
        }];
        Box::pin(std::future::ready(Ok(SupportedResponse {
            kinds,
            ..SupportedResponse::default()
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::x402::quote::PaymentOption;
    use crate::x402::types::{AtomicAmount, PaymentPayload, PaymentRequirements};

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
        assert_eq!(
            vector_b_transfer().eip712_type_hash(),
            hex32("0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
        );
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
        let token = DevLedger::base_sepolia_usdc();
        let domain = ExactEvmDomain::new("USD Coin", "2", token.chain_id, token.asset);
        let digest = domain.signing_hash(&spec_transfer());
        let signature = parse_signature(SPEC_SIGNATURE).unwrap();
        assert_ne!(
            signature.recover_address_from_prehash(&digest).ok(),
            Some(spec_transfer().from)
        );
    }

    /// Reference vector B3: what `@x402/evm` 2.27 sends at `Date.now() = 1750000000000`.
    fn vector_b3_request(
        mutate: impl FnOnce(&mut PaymentRequirements, &mut serde_json::Value),
    ) -> FacilitatorRequest {
        let offer = PaymentOption::base_sepolia_usdc("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
            .unwrap()
            .requirements_for_amount(AtomicAmount::new(10_000));
        let mut payload = serde_json::json!({
            "signature": "0xde455c78879fd9219b2b89a4b1e80bc039788cfb436f8550cad4cae17e35220a5a820f16fef5223f1e8b1cd8784f40707ec8e18283e8a1b357680fe6a9fa7abc1c",
            "authorization": {
                "from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
                "value": "10000",
                "validAfter": "0",
                "validBefore": "1750000300",
                "nonce": "0x1111111111111111111111111111111111111111111111111111111111111111"
            }
        });
        let mut server_offer = offer.clone();
        mutate(&mut server_offer, &mut payload);
        FacilitatorRequest {
            x402_version: 2,
            payment_payload: PaymentPayload {
                x402_version: 2,
                resource: None,
                accepted: offer,
                payload,
                extensions: None,
            },
            payment_requirements: server_offer,
        }
    }

    fn facilitator_at(unix_secs: u64) -> (LocalEvmFacilitator, Arc<DevLedger>) {
        let ledger = Arc::new(DevLedger::new());
        let clock = Arc::new(FakeClock::at_unix_secs(unix_secs));
        (LocalEvmFacilitator::new(ledger.clone(), clock), ledger)
    }

    async fn verdict(
        facilitator: &LocalEvmFacilitator,
        request: &FacilitatorRequest,
    ) -> Option<String> {
        let response = facilitator.verify(request).await.unwrap();
        assert_eq!(response.is_valid, response.invalid_reason.is_none());
        response.invalid_reason
    }

    #[tokio::test]
    async fn official_client_vector_verifies_and_settles_once() {
        let (facilitator, ledger) = facilitator_at(1_750_000_000);
        let request = vector_b3_request(|_, _| {});
        assert_eq!(verdict(&facilitator, &request).await, None);
        let token = DevLedger::base_sepolia_usdc();
        let payer = addr(DevLedger::DEV_ACCOUNTS[0]);
        let payee = addr(DevLedger::DEV_ACCOUNTS[1]);
        let settled = facilitator.settle(&request).await.unwrap();
        assert!(settled.success);
        assert_eq!(settled.transaction.len(), 66);
        assert_eq!(settled.payer.as_deref(), Some(DevLedger::DEV_ACCOUNTS[0]));
        assert_eq!(
            ledger.balance_of(&token, payer),
            DevLedger::DEV_ACCOUNT_FUNDS - 10_000
        );
        assert_eq!(
            ledger.balance_of(&token, payee),
            DevLedger::DEV_ACCOUNT_FUNDS + 10_000
        );
        // The chain remembers the nonce.
        assert_eq!(
            verdict(&facilitator, &request).await.as_deref(),
            Some(reason::NONCE_ALREADY_USED)
        );
        let again = facilitator.settle(&request).await.unwrap();
        assert!(!again.success);
        assert_eq!(ledger.settlements(), 1);
    }

    #[tokio::test]
    async fn each_check_refuses_with_its_reason() {
        let at = |secs| facilitator_at(secs).0;
        let now = 1_750_000_000;
        let cases: Vec<(LocalEvmFacilitator, FacilitatorRequest, &str)> = vec![
            (
                at(now),
                vector_b3_request(|o, _| o.amount = AtomicAmount::new(10_001)),
                reason::VALUE_MISMATCH,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.pay_to = DevLedger::DEV_ACCOUNTS[2].into()),
                reason::RECIPIENT_MISMATCH,
            ),
            (
                at(now),
                vector_b3_request(|o, _| {
                    o.extra.insert("name".into(), "USD Coin".into());
                }),
                reason::SIGNATURE,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.extra.clear()),
                reason::MISSING_EIP712_DOMAIN,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.network = Network::parse("eip155:8453").unwrap()),
                reason::INVALID_NETWORK,
            ),
            (
                at(now),
                vector_b3_request(|_, p| p["authorization"]["value"] = "10001".into()),
                reason::SIGNATURE,
            ),
            (
                at(now),
                vector_b3_request(|_, p| p["signature"] = "0x12".into()),
                reason::SIGNATURE,
            ),
            (
                at(now),
                vector_b3_request(|_, p| p["authorization"] = 1.into()),
                reason::INVALID_PAYLOAD,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.scheme = "upto".into()),
                reason::UNSUPPORTED_SCHEME,
            ),
            // 294 s left is fine, 5 s left is not.
            (at(now + 6), vector_b3_request(|_, _| {}), "ok"),
            (
                at(now + 295),
                vector_b3_request(|_, _| {}),
                reason::VALID_BEFORE,
            ),
        ];
        for (facilitator, request, expected) in cases {
            let reason = verdict(&facilitator, &request).await;
            assert_eq!(reason.as_deref().unwrap_or("ok"), expected);
        }
    }

    #[tokio::test]
    async fn unfunded_payer_is_refused() {
        let ledger = Arc::new(DevLedger::empty());
        let facilitator =
            LocalEvmFacilitator::new(ledger, Arc::new(FakeClock::at_unix_secs(1_750_000_000)));
        let reason = verdict(&facilitator, &vector_b3_request(|_, _| {})).await;
        assert_eq!(reason.as_deref(), Some(reason::INSUFFICIENT_FUNDS));
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
        assert!(parse_signature("0x00").is_none());
        assert!(parse_b256("0x11").is_none());
    }
}

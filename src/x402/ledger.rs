//! Balances and authorization state: the [`Ledger`] a local facilitator
//! settles through, and [`DevLedger`], an in-memory stand-in for development.
//!
//! ```
//! use walletgate::x402::DevLedger;
//!
//! let ledger = DevLedger::new();
//! assert_eq!(ledger.balance_of(&DevLedger::base_sepolia_usdc(), DevLedger::DEV_ACCOUNTS[0].parse()?), DevLedger::DEV_ACCOUNT_FUNDS);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use alloy_primitives::{Address, B256, keccak256};

use super::eip712::{TokenId, parse_evm_address};
use super::facilitator::BoxFuture;

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
        TokenId::base_sepolia_usdc()
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

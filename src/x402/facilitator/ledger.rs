//! Balances and authorization state: the [`Ledger`] a local facilitator
//! settles through, and [`DevLedger`], an in-memory stand-in for development.
//!
//! ```
//! use walletgate::x402::facilitator::DevLedger;
//!
//! let ledger = DevLedger::new();
//! assert_eq!(ledger.balance_of(&DevLedger::base_sepolia_usdc(), DevLedger::DEV_ACCOUNTS[0].parse()?), DevLedger::DEV_ACCOUNT_FUNDS);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use alloy_primitives::{Address, B256};
use sha2::{Digest as _, Sha256};

use crate::clock::SharedClock;
use crate::store::BoxFuture;
use crate::x402::expiring::{ExpiringMap, LocalDigest, local_digest};
use crate::x402::wire::eip712::{TokenId, parse_evm_address};

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
    /// The authorization's `validBefore`: a transfer at or after it reverts on chain,
    /// so a ledger need not remember the nonce longer.
    pub valid_before_unix_secs: u64,
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
    /// The authorization's `validBefore` has passed.
    AuthorizationExpired,
    /// The ledger could not be reached; nothing happened.
    Unavailable(String),
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InsufficientFunds => f.write_str("insufficient funds"),
            Self::AuthorizationUsed => f.write_str("authorization already used"),
            Self::UnknownToken => f.write_str("unknown token"),
            Self::AuthorizationExpired => f.write_str("authorization expired"),
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

forward_to_arc! { Ledger {
    fn check<'a>(&'a self, transfer: &'a Transfer) -> BoxFuture<'a, Result<(), LedgerError>>;
    fn transfer_with_authorization<'a>(
        &'a self,
        transfer: &'a Transfer,
    ) -> BoxFuture<'a, Result<String, LedgerError>>;
}}

/// An in-memory USDC ledger for development and tests.
///
/// Starts with [`DEV_ACCOUNT_FUNDS`](Self::DEV_ACCOUNT_FUNDS) on each of the
/// ten public development accounts on Base Sepolia USDC. Settlement checks
/// and debits atomically, marks the nonce used, and returns a deterministic
/// transaction id.
///
/// Without a clock it remembers every used authorization. With one
/// ([`with_expiry_clock`](Self::with_expiry_clock)) it does what the chain does at
/// `validBefore`: refuses the transfer from then on, so it forgets the nonce
/// then (a few expired ones per transfer); memory follows the authorizations
/// still valid, about 100 bytes each (a 16-byte digest of token, payer and
/// nonce, the expiry, and the index).
///
/// The used authorizations live in sixteen shards, each behind its own lock:
/// a growing table rehashes a sixteenth of them at a time (one table of a
/// million entries stalled every settlement for tens of milliseconds).
pub struct DevLedger {
    state: Mutex<DevLedgerState>,
    /// The [`local_digest`] of (chain id, asset, payer, nonce), until `validBefore`
    /// (forever without a clock). Lock order: a shard, then `state`.
    used: Box<[Mutex<UsedShard>]>,
    clock: Option<SharedClock>,
}

type UsedShard = ExpiringMap<()>;

/// Shards of the used authorizations.
const USED_SHARDS: usize = 16;

#[derive(Debug, Default)]
struct DevLedgerState {
    /// The server funds and credits every account here (a payment credits
    /// only the offer's `payTo`): no client chooses a key, so no SipHash.
    balances: HashMap<(TokenId, Address), u128, foldhash::fast::RandomState>,
    settlements: u64,
}

impl Default for DevLedger {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            used: (0..USED_SHARDS).map(|_| Mutex::default()).collect(),
            clock: None,
        }
    }
}

impl fmt::Debug for DevLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let used = self.remembered_authorizations();
        let state = self.lock();
        f.debug_struct("DevLedger")
            .field("balances", &state.balances)
            .field("used", &used)
            .field("settlements", &state.settlements)
            .field("expiring", &self.clock.is_some())
            .finish()
    }
}

/// Used authorizations forgotten per transfer at most (more than one transfer adds).
const SWEEP_STEP: usize = 8;

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

    /// The same ledger reading time from `clock`: a transfer at or after its
    /// `validBefore` is refused ([`LedgerError::AuthorizationExpired`]) and a
    /// used authorization is forgotten once its `validBefore` has passed.
    #[must_use]
    pub fn with_expiry_clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// How many used authorizations are remembered (expired ones not yet forgotten included).
    pub fn remembered_authorizations(&self) -> usize {
        self.used
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
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

    /// The used-set key of `transfer`'s authorization, and its shard, locked.
    fn used_shard(&self, transfer: &Transfer) -> (LocalDigest, MutexGuard<'_, UsedShard>) {
        let key = local_digest(&authorization_id(transfer));
        let shard = self.used[usize::from(key.as_bytes()[0]) % USED_SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (key, shard)
    }

    /// The clock's now, or `None` without a clock (nothing expires).
    fn now(&self) -> Option<u64> {
        self.clock.as_ref().map(|clock| clock.now_unix_secs())
    }

    fn check_now(
        state: &DevLedgerState,
        used: &UsedShard,
        transfer: &Transfer,
        used_key: &LocalDigest,
        now: Option<u64>,
    ) -> Result<(), LedgerError> {
        if now.is_some_and(|now| transfer.valid_before_unix_secs <= now) {
            return Err(LedgerError::AuthorizationExpired);
        }
        if used.get(used_key, now.unwrap_or(0)).is_some() {
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

/// The transaction id of `transfer`: the SHA-256 of its authorization (it
/// settles once), the same in every process and in the Redis ledger.
pub(crate) fn transaction_id(transfer: &Transfer) -> String {
    let digest: [u8; 32] = Sha256::digest(authorization_id(transfer)).into();
    alloy_primitives::hex::encode_prefixed(digest)
}

/// (chain id, asset, payer, nonce): what identifies an authorization.
fn authorization_id(transfer: &Transfer) -> [u8; 80] {
    let mut id = [0_u8; 80];
    id[..8].copy_from_slice(&transfer.token.chain_id.to_be_bytes());
    id[8..28].copy_from_slice(transfer.token.asset.as_slice());
    id[28..48].copy_from_slice(transfer.from.as_slice());
    id[48..].copy_from_slice(transfer.nonce.as_slice());
    id
}

impl Ledger for DevLedger {
    fn check<'a>(&'a self, transfer: &'a Transfer) -> BoxFuture<'a, Result<(), LedgerError>> {
        let now = self.now();
        let (used_key, used) = self.used_shard(transfer);
        let result = Self::check_now(&self.lock(), &used, transfer, &used_key, now);
        drop(used);
        Box::pin(std::future::ready(result))
    }

    fn transfer_with_authorization<'a>(
        &'a self,
        transfer: &'a Transfer,
    ) -> BoxFuture<'a, Result<String, LedgerError>> {
        let now = self.now();
        // One authorization's shard, then the balances: the check, the debit
        // and the used mark are one step.
        let (used_key, mut used) = self.used_shard(transfer);
        if let Some(now) = now {
            used.sweep(now, SWEEP_STEP);
        }
        let mut state = self.lock();
        let result = Self::check_now(&state, &used, transfer, &used_key, now).map(|()| {
            let from = (transfer.token, transfer.from);
            if let Some(balance) = state.balances.get_mut(&from) {
                *balance -= transfer.value;
            }
            let to = state
                .balances
                .entry((transfer.token, transfer.to))
                .or_default();
            *to = to.saturating_add(transfer.value);
            let forget_at = if now.is_some() {
                transfer.valid_before_unix_secs
            } else {
                u64::MAX
            };
            used.insert(used_key, (), forget_at);
            state.settlements += 1;
        });
        drop(state);
        drop(used);
        let result = result.map(|()| transaction_id(transfer));
        Box::pin(std::future::ready(result))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::FakeClock;

    fn transfer(nonce: u8, valid_before_unix_secs: u64) -> Transfer {
        Transfer {
            token: DevLedger::base_sepolia_usdc(),
            from: DevLedger::DEV_ACCOUNTS[0].parse().unwrap(),
            to: DevLedger::DEV_ACCOUNTS[1].parse().unwrap(),
            value: 10,
            nonce: B256::repeat_byte(nonce),
            valid_before_unix_secs,
        }
    }

    #[tokio::test]
    async fn a_clockless_ledger_remembers_every_used_authorization() {
        let ledger = DevLedger::new();
        let once = transfer(1, 0);
        ledger.transfer_with_authorization(&once).await.unwrap();
        assert_eq!(
            ledger.transfer_with_authorization(&once).await,
            Err(LedgerError::AuthorizationUsed)
        );
        assert_eq!(
            ledger.check(&once).await,
            Err(LedgerError::AuthorizationUsed)
        );
    }

    #[tokio::test]
    async fn an_expiring_ledger_refuses_at_valid_before_and_then_forgets_the_nonce() {
        let clock = FakeClock::at_unix_secs(1_000);
        let ledger = DevLedger::new().with_expiry_clock(Arc::new(clock.clone()));
        let paid = transfer(1, 1_060);
        let id = ledger.transfer_with_authorization(&paid).await.unwrap();
        assert_eq!(id.len(), 66);
        assert_eq!(
            ledger.transfer_with_authorization(&paid).await,
            Err(LedgerError::AuthorizationUsed),
            "used until validBefore"
        );
        clock.advance(Duration::from_secs(60));
        // At validBefore the chain refuses it: the nonce need not be remembered.
        assert_eq!(
            ledger.transfer_with_authorization(&paid).await,
            Err(LedgerError::AuthorizationExpired)
        );
        assert_eq!(
            ledger.check(&paid).await,
            Err(LedgerError::AuthorizationExpired)
        );
        assert_eq!(
            ledger.remembered_authorizations(),
            0,
            "swept by that transfer"
        );
        // Only the first payment moved funds.
        let payer = DevLedger::DEV_ACCOUNTS[0].parse().unwrap();
        assert_eq!(
            ledger.balance_of(&DevLedger::base_sepolia_usdc(), payer),
            DevLedger::DEV_ACCOUNT_FUNDS - 10
        );
    }

    #[tokio::test]
    async fn used_authorizations_are_forgotten_a_few_per_transfer() {
        let clock = FakeClock::at_unix_secs(1_000);
        let ledger = DevLedger::new().with_expiry_clock(Arc::new(clock.clone()));
        for nonce in 0..40 {
            ledger
                .transfer_with_authorization(&transfer(nonce, 1_010))
                .await
                .unwrap();
        }
        clock.advance(Duration::from_secs(10));
        ledger
            .transfer_with_authorization(&transfer(100, 2_000))
            .await
            .unwrap();
        let left = ledger.remembered_authorizations();
        assert!(
            left >= 40 + 1 - SWEEP_STEP,
            "a few at a time, not all: {left}"
        );
        for nonce in 101..=250 {
            ledger
                .transfer_with_authorization(&transfer(nonce, 2_000))
                .await
                .unwrap();
        }
        assert_eq!(
            ledger.remembered_authorizations(),
            151,
            "only the live ones"
        );
    }
}

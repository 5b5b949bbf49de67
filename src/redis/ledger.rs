//! The development ledger on Redis: [`RedisLedger`].
//!
//! The same rules as [`DevLedger`](crate::x402::DevLedger), shared by every
//! replica:
//!
//! | key | holds |
//! |---|---|
//! | `{prefix}:x402-ledger:balance:{owner}` | a hash: `{chain id}:{asset}` → balance in atomic units |
//! | `{prefix}:x402-ledger:used:{chain id}:{asset}:{from}:{nonce}` | a used authorization, until the retention passes |
//! | `{prefix}:x402-ledger:settlements` | how many transfers settled |
//!
//! [`transfer_with_authorization`](Ledger::transfer_with_authorization) is one
//! Lua script, so one round trip and atomic: check the nonce is unused and the
//! balance suffices, debit, credit, mark the nonce used with an expiry, count.
//! Balances are Redis integers compared in Lua, exact up to 2^53 atomic units
//! (9 billion USDC); a transfer above that can never be covered and is
//! refused as insufficient funds.

use std::sync::LazyLock;
use std::time::Duration;

use alloy_primitives::{Address, keccak256};
use redis::Script;

use super::RedisConnection;
use crate::store::StoreError;
use crate::x402::{BoxFuture, DevLedger, Ledger, LedgerError, TokenId, Transfer};

/// The key seam of the ledger.
const SEAM: &str = "x402-ledger";

/// Largest balance or value the Lua comparison is exact for.
const MAX_EXACT: u128 = 1 << 53;

/// `-1` used, `-2` insufficient funds, else the settlement's number.
static TRANSFER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local balance = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if balance < tonumber(ARGV[2]) then return -2 end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[1], ARGV[2])
redis.call('SET', KEYS[3], '1', 'EX', ARGV[4])
return redis.call('INCR', KEYS[4])",
    )
});

/// `-1` used, `-2` insufficient funds, `0` could settle.
static CHECK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
local balance = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if balance < tonumber(ARGV[2]) then return -2 end
return 0",
    )
});

/// Balances and used authorizations in Redis, shared by every replica.
#[derive(Clone, Debug)]
pub struct RedisLedger {
    conn: RedisConnection,
    used_retention: Duration,
}

impl RedisLedger {
    /// How long a used authorization is remembered by default: a day, far
    /// beyond any quote's `maxTimeoutSeconds` (an authorization past its
    /// `validBefore` is refused before the ledger is asked).
    pub const DEFAULT_USED_RETENTION: Duration = Duration::from_secs(24 * 3600);

    /// A ledger on `conn`, with no balances of its own (see [`fund`](Self::fund)).
    pub fn new(conn: RedisConnection) -> Self {
        Self {
            conn,
            used_retention: Self::DEFAULT_USED_RETENTION,
        }
    }

    /// Remembers used authorizations for `retention` (at least one second);
    /// it must outlast the longest authorization the gateway accepts.
    #[must_use]
    pub fn used_retention(mut self, retention: Duration) -> Self {
        self.used_retention = retention.max(Duration::from_secs(1));
        self
    }

    /// Gives each of [`DevLedger::DEV_ACCOUNTS`] its
    /// [`DEV_ACCOUNT_FUNDS`](DevLedger::DEV_ACCOUNT_FUNDS) of Base Sepolia USDC,
    /// unless it has a balance already: replicas starting on one Redis fund
    /// the accounts once, and a restart does not refill them.
    pub async fn fund_dev_accounts(&self) -> Result<(), StoreError> {
        let field = token_field(&DevLedger::base_sepolia_usdc());
        for account in DevLedger::DEV_ACCOUNTS {
            let Ok(owner) = account.parse::<Address>() else {
                continue;
            };
            let key = self.balance_key(owner);
            let field = field.clone();
            self.conn
                .call("x402 ledger fund", |mut c| async move {
                    redis::cmd("HSETNX")
                        .arg(key)
                        .arg(field)
                        .arg(DevLedger::DEV_ACCOUNT_FUNDS.to_string())
                        .query_async::<()>(&mut c)
                        .await
                })
                .await?;
        }
        Ok(())
    }

    /// Adds `amount` to `owner`'s balance of `token` (up to 2^53 in all).
    pub async fn fund(
        &self,
        token: &TokenId,
        owner: Address,
        amount: u128,
    ) -> Result<(), StoreError> {
        let amount = i64::try_from(amount.min(MAX_EXACT)).unwrap_or(i64::MAX);
        let key = self.balance_key(owner);
        let field = token_field(token);
        self.conn
            .call("x402 ledger fund", |mut c| async move {
                redis::cmd("HINCRBY")
                    .arg(key)
                    .arg(field)
                    .arg(amount)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
    }

    /// `owner`'s balance of `token`.
    pub async fn balance_of(&self, token: &TokenId, owner: Address) -> Result<u128, StoreError> {
        let key = self.balance_key(owner);
        let field = token_field(token);
        let balance: Option<u128> = self
            .conn
            .call("x402 ledger balance", |mut c| async move {
                redis::cmd("HGET")
                    .arg(key)
                    .arg(field)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(balance.unwrap_or(0))
    }

    /// How many transfers settled on this ledger (every replica's).
    pub async fn settlements(&self) -> Result<u64, StoreError> {
        let key = self.conn.key(SEAM, "settlements");
        let count: Option<u64> = self
            .conn
            .call("x402 ledger settlements", |mut c| async move {
                redis::cmd("GET").arg(key).query_async(&mut c).await
            })
            .await?;
        Ok(count.unwrap_or(0))
    }

    fn balance_key(&self, owner: Address) -> String {
        self.conn
            .key(SEAM, &format!("balance:{}", lower_hex(owner.as_slice())))
    }

    fn used_key(&self, transfer: &Transfer) -> String {
        self.conn.key(
            SEAM,
            &format!(
                "used:{}:{}:{}",
                token_field(&transfer.token),
                lower_hex(transfer.from.as_slice()),
                lower_hex(transfer.nonce.as_slice()),
            ),
        )
    }
}

fn lower_hex(bytes: &[u8]) -> String {
    alloy_primitives::hex::encode_prefixed(bytes)
}

/// `{chain id}:{asset}`, the balance hash's field of a token.
fn token_field(token: &TokenId) -> String {
    format!("{}:{}", token.chain_id, lower_hex(token.asset.as_slice()))
}

/// The script's refusal codes as ledger errors.
fn refusal(code: i64) -> Option<LedgerError> {
    match code {
        -1 => Some(LedgerError::AuthorizationUsed),
        -2 => Some(LedgerError::InsufficientFunds),
        _ => None,
    }
}

fn unavailable(error: StoreError) -> LedgerError {
    LedgerError::Unavailable(error.to_string())
}

impl Ledger for RedisLedger {
    fn check<'a>(&'a self, transfer: &'a Transfer) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move {
            if transfer.value > MAX_EXACT {
                return Err(LedgerError::InsufficientFunds);
            }
            let balance = self.balance_key(transfer.from);
            let used = self.used_key(transfer);
            let field = token_field(&transfer.token);
            let value = transfer.value.to_string();
            let code: i64 = self
                .conn
                .call("x402 ledger check", |mut c| async move {
                    CHECK
                        .key(balance)
                        .key(used)
                        .arg(field)
                        .arg(value)
                        .invoke_async(&mut c)
                        .await
                })
                .await
                .map_err(unavailable)?;
            refusal(code).map_or(Ok(()), Err)
        })
    }

    fn transfer_with_authorization<'a>(
        &'a self,
        transfer: &'a Transfer,
    ) -> BoxFuture<'a, Result<String, LedgerError>> {
        Box::pin(async move {
            if transfer.value > MAX_EXACT {
                return Err(LedgerError::InsufficientFunds);
            }
            let from = self.balance_key(transfer.from);
            let to = self.balance_key(transfer.to);
            let used = self.used_key(transfer);
            let settlements = self.conn.key(SEAM, "settlements");
            let field = token_field(&transfer.token);
            let value = transfer.value.to_string();
            let debit = format!("-{value}");
            let retention = self.used_retention.as_secs().max(1);
            let code: i64 = self
                .conn
                .call("x402 ledger transfer", |mut c| async move {
                    TRANSFER
                        .key(from)
                        .key(to)
                        .key(used)
                        .key(settlements)
                        .arg(field)
                        .arg(value)
                        .arg(debit)
                        .arg(retention)
                        .invoke_async(&mut c)
                        .await
                })
                .await
                .map_err(unavailable)?;
            if let Some(error) = refusal(code) {
                return Err(error);
            }
            let mut preimage = Vec::with_capacity(92);
            preimage.extend_from_slice(&transfer.token.chain_id.to_be_bytes());
            preimage.extend_from_slice(transfer.from.as_slice());
            preimage.extend_from_slice(transfer.nonce.as_slice());
            preimage.extend_from_slice(&code.to_be_bytes());
            Ok(keccak256(&preimage).to_string())
        })
    }
}

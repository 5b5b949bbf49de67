//! The development ledger on Redis: [`RedisLedger`].
//!
//! The same rules as [`DevLedger`](crate::x402::facilitator::DevLedger), shared by every
//! replica:
//!
//! | key | holds |
//! |---|---|
//! | `{prefix}:x402-ledger:balance:{owner}` | a hash: `{chain id}:{asset}` → balance in atomic units |
//! | `{prefix}:x402-ledger:used:{from}:{nonce}` | a hash: `{chain id}:{asset}` of each token the authorization was used on, until the retention passes |
//! | `{prefix}:x402-ledger:settlements` | how many transfers settled |
//!
//! [`transfer_with_authorization`](Ledger::transfer_with_authorization) is one
//! Lua script, so one round trip and atomic: check the nonce is unused and the
//! balance suffices, debit, credit, mark the nonce used with an expiry, count.
//! Balances are Redis integers compared in Lua, exact up to 2^53 atomic units
//! (9 billion USDC); a transfer above that can never be covered and is
//! refused as insufficient funds.
//!
//! Paired with a [`RedisNonceStore`](super::RedisNonceStore) through
//! [`with_ledger_prefetch`](super::RedisNonceStore::with_ledger_prefetch), the claim's
//! script also reads the payer's balances and the nonce's used state, and
//! [`check`](Ledger::check) answers from that snapshot instead of asking
//! Redis again. The store also announces, just before settlement
//! ([`NonceStore::settling`](crate::x402::server::NonceStore::settling)), the spent
//! record it will be asked to write; the transfer script writes it with the
//! debit, and `mark_spent` skips its own write. A paid request then costs two
//! round trips (claim, transfer), not four (claim, check, transfer, mark
//! spent). The snapshot is as fresh as a separate check would be (taken
//! microseconds before it); the transfer script decides atomically either
//! way, so a stale snapshot can never overdraw or settle twice.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use alloy_primitives::{Address, B256};
use redis::Script;

use super::RedisConnection;
use super::spent::encode_spent;
use crate::store::{BoxFuture, StoreError};
use crate::x402::{
    facilitator::ledger::transaction_id,
    facilitator::{DevLedger, Ledger, LedgerError, Transfer},
    server::SpentAuthorization,
    wire::TokenId,
};

/// The key seam of the ledger.
const SEAM: &str = "x402-ledger";

/// The key group of the ledger (one hash slot on a Redis Cluster: a
/// transfer's script touches both balances, the used record, the counter and
/// the paired nonce store's replay key).
pub(crate) const GROUP: &str = SEAM;

/// Largest balance or value the Lua comparison is exact for.
const MAX_EXACT: u128 = 1 << 53;

/// `-1` used, `-2` insufficient funds, else the settlement's number; with
/// `ARGV[5]` also writes that spent record at the replay key `KEYS[5]`.
static TRANSFER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return -1 end
local balance = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if balance < tonumber(ARGV[2]) then return -2 end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], '1')
redis.call('EXPIRE', KEYS[3], ARGV[4])
if ARGV[5] ~= '' then redis.call('SET', KEYS[5], ARGV[5], 'EX', ARGV[6]) end
return redis.call('INCR', KEYS[4])",
    )
});

/// `-1` used, `-2` insufficient funds, `0` could settle.
static CHECK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return -1 end
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
    /// Ledger state a paired nonce store read with its claim.
    prefetched: Arc<Prefetched>,
}

/// A payer's balances (`{chain id}:{asset}` → units) and the tokens an
/// authorization nonce was used on, as a claim's script read them.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) balances: HashMap<String, u128>,
    pub(crate) used: Vec<String>,
}

/// What a paired nonce store shares with the ledger, by (payer, nonce):
/// snapshots its claims read (each taken once by the check it was read for),
/// spent records it announced before settling (written by the transfer
/// script), and the records so written (so `mark_spent` can skip its own write).
#[derive(Debug, Default)]
pub(crate) struct Prefetched {
    entries: Mutex<HashMap<(Address, B256), Snapshot>>,
    announced: Mutex<HashMap<(Address, B256), Announced>>,
    written: Mutex<HashMap<(Address, B256), SpentAuthorization>>,
}

/// A spent record to write in the transfer's script: its replay key, the
/// record without the transaction, and its lifetime.
#[derive(Debug)]
pub(crate) struct Announced {
    pub(crate) replay_key: String,
    pub(crate) unsettled: SpentAuthorization,
    pub(crate) ttl_secs: u64,
}

fn locked<T>(map: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // One insert or remove per update: a poisoned map is still consistent.
    map.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Inserts unless `map` holds [`MAX_PREFETCHED`] already.
fn bounded_insert<V>(map: &Mutex<HashMap<(Address, B256), V>>, key: (Address, B256), value: V) {
    let mut map = locked(map);
    if map.len() < MAX_PREFETCHED {
        map.insert(key, value);
    }
}

/// Snapshots held at most: claims whose check never came (a refused
/// signature, say) are forgotten on release; past this, checks ask Redis.
const MAX_PREFETCHED: usize = 65_536;

impl Prefetched {
    pub(crate) fn put(&self, payer: Address, nonce: B256, snapshot: Snapshot) {
        bounded_insert(&self.entries, (payer, nonce), snapshot);
    }

    fn take(&self, payer: Address, nonce: B256) -> Option<Snapshot> {
        locked(&self.entries).remove(&(payer, nonce))
    }

    pub(crate) fn announce(&self, payer: Address, nonce: B256, announced: Announced) {
        bounded_insert(&self.announced, (payer, nonce), announced);
    }

    /// Whether the transfer script wrote exactly `spent` for (payer, nonce).
    pub(crate) fn take_written(
        &self,
        payer: Address,
        nonce: B256,
        spent: &SpentAuthorization,
    ) -> bool {
        locked(&self.written).remove(&(payer, nonce)).as_ref() == Some(spent)
    }

    /// Drops everything held for (payer, nonce): its claim is over.
    pub(crate) fn forget(&self, payer: Address, nonce: B256) {
        locked(&self.entries).remove(&(payer, nonce));
        locked(&self.announced).remove(&(payer, nonce));
        locked(&self.written).remove(&(payer, nonce));
    }
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
            prefetched: Arc::default(),
        }
    }

    /// Remembers used authorizations for `retention` (at least one second);
    /// it must outlast the longest authorization the gateway accepts.
    #[must_use]
    pub fn with_used_retention(mut self, retention: Duration) -> Self {
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
        let key = self.conn.grouped_key(GROUP, SEAM, "settlements");
        let count: Option<u64> = self
            .conn
            .call("x402 ledger settlements", |mut c| async move {
                redis::cmd("GET").arg(key).query_async(&mut c).await
            })
            .await?;
        Ok(count.unwrap_or(0))
    }

    pub(crate) fn balance_key(&self, owner: Address) -> String {
        self.conn.grouped_key(
            GROUP,
            SEAM,
            &format!("balance:{}", lower_hex(owner.as_slice())),
        )
    }

    pub(crate) fn used_key(&self, from: Address, nonce: B256) -> String {
        self.conn.grouped_key(
            GROUP,
            SEAM,
            &format!(
                "used:{}:{}",
                lower_hex(from.as_slice()),
                lower_hex(nonce.as_slice()),
            ),
        )
    }

    pub(crate) fn prefetched(&self) -> &Prefetched {
        &self.prefetched
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
            let field = token_field(&transfer.token);
            if let Some(snapshot) = self.prefetched.take(transfer.from, transfer.nonce) {
                if snapshot.used.contains(&field) {
                    return Err(LedgerError::AuthorizationUsed);
                }
                let balance = snapshot.balances.get(&field).copied().unwrap_or(0);
                if balance < transfer.value {
                    return Err(LedgerError::InsufficientFunds);
                }
                return Ok(());
            }
            let balance = self.balance_key(transfer.from);
            let used = self.used_key(transfer.from, transfer.nonce);
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
            // One transfer per (token, payer, nonce) ever settles: its id is known before.
            let transaction = transaction_id(transfer);
            let announced =
                locked(&self.prefetched.announced).remove(&(transfer.from, transfer.nonce));
            let (replay_key, spent, spent_ttl) = match &announced {
                Some(announced) => {
                    let spent = SpentAuthorization {
                        receipt: announced
                            .unsettled
                            .receipt
                            .clone()
                            .settled(transaction.clone()),
                        fingerprint: announced.unsettled.fingerprint,
                    };
                    (
                        announced.replay_key.clone(),
                        Some(spent),
                        announced.ttl_secs,
                    )
                }
                None => (self.conn.grouped_key(GROUP, SEAM, "unused"), None, 1),
            };
            let from = self.balance_key(transfer.from);
            let to = self.balance_key(transfer.to);
            let used = self.used_key(transfer.from, transfer.nonce);
            let settlements = self.conn.grouped_key(GROUP, SEAM, "settlements");
            let field = token_field(&transfer.token);
            let value = transfer.value.to_string();
            let debit = format!("-{value}");
            let retention = self.used_retention.as_secs().max(1);
            let record = spent.as_ref().map(encode_spent).unwrap_or_default();
            let code: i64 = self
                .conn
                .call("x402 ledger transfer", |mut c| async move {
                    TRANSFER
                        .key(from)
                        .key(to)
                        .key(used)
                        .key(settlements)
                        .key(replay_key)
                        .arg(field)
                        .arg(value)
                        .arg(debit)
                        .arg(retention)
                        .arg(record)
                        .arg(spent_ttl)
                        .invoke_async(&mut c)
                        .await
                })
                .await
                .map_err(unavailable)?;
            if let Some(error) = refusal(code) {
                return Err(error);
            }
            if let Some(spent) = spent {
                bounded_insert(
                    &self.prefetched.written,
                    (transfer.from, transfer.nonce),
                    spent,
                );
            }
            Ok(transaction)
        })
    }
}

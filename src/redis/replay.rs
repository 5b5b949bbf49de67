//! The x402 replay guard on Redis: [`RedisNonceStore`].
//!
//! One key per authorization, `{prefix}:x402-replay:{network/payer/nonce}`
//! (on a Redis Cluster, when paired with a [`RedisLedger`], in the ledger's
//! slot: `{prefix}:{x402-ledger}:x402-replay:…`):
//!
//! | value | meaning | expires |
//! |---|---|---|
//! | `F` | claimed, in flight | at the claim's hold-until |
//! | `S{json}` | spent: the receipt and the payload's fingerprint | at keep-until (≥ `validBefore`) |
//! | `P{json}` | settling (outcome unknown): the receipt, the pending transaction if known, the fingerprint | at keep-until |
//!
//! Each operation is one round trip: the claim is a Lua script (read, and set
//! `F` only if absent), the release a script (delete only an `F`), marking
//! spent one `SET … EX`, or none when paired with a [`RedisLedger`] through
//! [`with_ledger_prefetch`](RedisNonceStore::with_ledger_prefetch): the claim then also
//! reads the ledger state the check needs, and the transfer script writes the
//! spent record (see the ledger's docs). Expiry is relative (seconds from the
//! store's clock), so the replicas' clocks never need to agree with Redis's.
//!
//! A release is sent on the tokio runtime as soon as it is asked for (see
//! [`NonceStore::release`]): a request dropped mid-flight still frees its
//! claim. A release Redis cannot take (it is away) waits in a bounded queue
//! and is sent again in the background, with backoff, until Redis takes it
//! or the claim's hold-until passes (the claim has expired then); a claim of
//! the same authorization by this store sends it first. Each release deletes
//! the claim only while it still holds this store's token, so a late one
//! never frees another request's claim. Without that, a payment answered 503
//! while Redis was away would be refused as in flight on every resend until
//! its hold-until, although nothing was charged.
//!
//! With [`RedisConfig::with_wait_replicas`](super::RedisConfig::with_wait_replicas),
//! a claim, a settling and a spent record each wait for that many replicas
//! (`WAIT`); a claim too few replicas acknowledged is given back and answered
//! as a store failure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use alloy_primitives::{Address, B256};
use redis::Script;

use super::RedisConnection;
use super::ledger::{Announced, RedisLedger, Snapshot};
use super::spent::{decode_spent, encode_record, encode_spent};
use crate::clock::SharedClock;
use crate::store::{BoxFuture, StoreError};
use crate::x402::server::{AuthorizationKey, Claim, NonceStore, SpentAuthorization};

/// The key seam of the replay guard.
const SEAM: &str = "x402-replay";

/// `ARGV[2]` (`F` and the claim's token) if absent (answer `C`), else the value as it is.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[1])
return 'C'",
    )
});

/// [`CLAIM`], and when claimed also the payer's balances (`KEYS[2]`, a hash)
/// and the tokens the nonce was used on (`KEYS[3]`): `{v}` or
/// `{'C', #balances, balance fields and values…, used tokens…}`.
static CLAIM_AND_PEEK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local v = redis.call('GET', KEYS[1])
if v then return {v} end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[1])
local balances = redis.call('HGETALL', KEYS[2])
local answer = {'C', tostring(#balances)}
for _, item in ipairs(balances) do table.insert(answer, item) end
for _, token in ipairs(redis.call('HKEYS', KEYS[3])) do table.insert(answer, token) end
return answer",
    )
});

/// Deletes the key only while it holds this claim (`ARGV[1]`): a spent key
/// stays spent, and another request's claim stays claimed.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0",
    )
});

/// Claims and spent authorizations in Redis, shared by every replica.
#[derive(Clone)]
pub struct RedisNonceStore {
    conn: RedisConnection,
    clock: SharedClock,
    /// The ledger whose check this store's claims read ahead for.
    ledger: Option<RedisLedger>,
    /// The token of each claim this store holds, by Redis key: a release
    /// deletes its own claim only.
    held: Arc<Mutex<HashMap<String, Held>>>,
    /// Releases Redis could not take yet.
    unreleased: Arc<Unreleased>,
}

/// A claim this store holds: its token, and when it expires on its own.
#[derive(Clone, Debug)]
struct Held {
    token: String,
    until_unix_secs: u64,
}

impl std::fmt::Debug for RedisNonceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisNonceStore")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

impl RedisNonceStore {
    /// A store on `conn`; `clock` turns the absolute times it is given into
    /// Redis lifetimes.
    pub fn new(conn: RedisConnection, clock: SharedClock) -> Self {
        Self {
            conn,
            clock,
            ledger: None,
            held: Arc::default(),
            unreleased: Arc::default(),
        }
    }

    /// Reads, in each claim's round trip, what `ledger`'s check needs (the
    /// payer's balances, the nonce's used state), so the check that follows
    /// costs no round trip of its own. `ledger` must be on the same Redis.
    #[must_use]
    pub fn with_ledger_prefetch(mut self, ledger: &RedisLedger) -> Self {
        self.ledger = Some(ledger.clone());
        self
    }

    /// The tokens of the claims this store holds.
    fn hold(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        // One insert or remove per update: a poisoned map is still consistent.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ledger to read ahead for, and the payer and nonce of an EVM `key`
    /// (its typed parts, as the key was built).
    fn read_ahead(&self, key: &AuthorizationKey) -> Option<(&RedisLedger, Address, B256)> {
        let ledger = self.ledger.as_ref()?;
        key.network().eip155_chain_id()?;
        Some((ledger, key.payer()?, key.nonce()?))
    }

    /// The Redis key of `key`: in the ledger's key group when paired with
    /// one (the claim and the transfer scripts touch it with the ledger's
    /// keys, so on a Redis Cluster it must share their slot).
    pub(crate) fn redis_key(&self, key: &AuthorizationKey) -> String {
        match &self.ledger {
            Some(_) => self
                .conn
                .grouped_key(super::ledger::GROUP, SEAM, key.as_str()),
            None => self.conn.key(SEAM, key.as_str()),
        }
    }

    /// Seconds from now until `unix_secs`: at least one (Redis refuses zero),
    /// at most a year (Redis refuses lifetimes past its range).
    fn ttl_secs(&self, unix_secs: u64) -> u64 {
        super::ttl_secs(&self.clock, unix_secs)
    }
}

impl NonceStore for RedisNonceStore {
    fn claim<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let redis_key = self.redis_key(key);
        let ttl = self.ttl_secs(hold_until_unix_secs);
        let read_ahead = self.read_ahead(key);
        Box::pin(async move {
            // This store's own claim of the same authorization whose release
            // Redis could not take (a resend after a 503): released first.
            if let Some(stale) = self.unreleased.take(&redis_key)
                && let Err(error) = release_once(&self.conn, &redis_key, &stale.token, None).await
            {
                let (conn, clock) = (&self.conn, &self.clock);
                self.unreleased.queue(conn, clock, redis_key, stale);
                return Err(error);
            }
            let Ok(random) = getrandom::u64() else {
                return Err(StoreError::new(
                    "x402 replay claim: no randomness for a claim token",
                ));
            };
            let token = format!("F{random:016x}");
            let (script_key, script_token) = (redis_key.clone(), token.clone());
            let answer: Result<Vec<String>, _> = match read_ahead {
                Some((ledger, payer, nonce)) => {
                    let (balances, used) =
                        (ledger.balance_key(payer), ledger.used_key(payer, nonce));
                    self.conn
                        .call("x402 replay claim", |mut c| async move {
                            CLAIM_AND_PEEK
                                .key(script_key)
                                .key(balances)
                                .key(used)
                                .arg(ttl)
                                .arg(script_token)
                                .invoke_async(&mut c)
                                .await
                        })
                        .await
                }
                None => {
                    self.conn
                        .call("x402 replay claim", |mut c| async move {
                            let value: String = CLAIM
                                .key(script_key)
                                .arg(ttl)
                                .arg(script_token)
                                .invoke_async(&mut c)
                                .await?;
                            Ok(vec![value])
                        })
                        .await
                }
            };
            let answer = match answer {
                Ok(answer) => answer,
                Err(error) => {
                    // Timed out, the claim may still land: take it back behind it
                    // (same connection, so in order), or the same signed payment
                    // would be refused as in flight until the claim expired.
                    let held = Held {
                        token,
                        until_unix_secs: hold_until_unix_secs,
                    };
                    self.take_back(redis_key, held);
                    return Err(error);
                }
            };
            let value = answer.first().map_or("", String::as_str);
            let claim = decode_claim(value)?;
            if matches!(claim, Claim::Settling(_)) {
                // Held as the record itself: a release deletes it only while unchanged.
                let held = Held {
                    token: value.to_owned(),
                    until_unix_secs: hold_until_unix_secs,
                };
                self.hold().insert(redis_key.clone(), held);
            }
            if claim == Claim::Claimed {
                let held = Held {
                    token,
                    until_unix_secs: hold_until_unix_secs,
                };
                if let Err(error) = self.conn.replicated("x402 replay claim", &redis_key).await {
                    // Written, but on too few replicas to survive a failover:
                    // given back, and answered as the store failing.
                    drop(self.send_release(redis_key, held));
                    return Err(error);
                }
                self.hold().insert(redis_key, held);
                if let Some((ledger, payer, nonce)) = read_ahead {
                    ledger
                        .prefetched()
                        .put(payer, nonce, decode_snapshot(&answer[1..]));
                }
            }
            Ok(claim)
        })
    }

    fn release(&self, key: &AuthorizationKey) -> BoxFuture<'static, ()> {
        if let Some((ledger, payer, nonce)) = self.read_ahead(key) {
            ledger.prefetched().forget(payer, nonce);
        }
        let redis_key = self.redis_key(key);
        let held = self.hold().remove(&redis_key);
        match held {
            Some(held) => self.send_release(redis_key, held),
            // Not a claim of this store: nothing of ours to give back.
            None => Box::pin(std::future::ready(())),
        }
    }

    fn settling(
        &self,
        key: &AuthorizationKey,
        unsettled: &SpentAuthorization,
        keep_until_unix_secs: u64,
    ) {
        if let Some((ledger, payer, nonce)) = self.read_ahead(key) {
            let announced = Announced {
                replay_key: self.redis_key(key),
                unsettled: unsettled.clone(),
                ttl_secs: self.ttl_secs(keep_until_unix_secs),
            };
            ledger.prefetched().announce(payer, nonce, announced);
        }
    }

    fn mark_settling<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        settling: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let redis_key = self.redis_key(key);
        // Kept, not held: this request no longer gives it back.
        self.hold().remove(&redis_key);
        if let Some((ledger, payer, nonce)) = self.read_ahead(key) {
            ledger.prefetched().forget(payer, nonce);
        }
        let ttl = self.ttl_secs(keep_until_unix_secs);
        let value = encode_record('P', &settling);
        Box::pin(async move {
            let what = "x402 replay mark settling";
            self.conn
                .set_expiring(what, redis_key.clone(), value, ttl)
                .await?;
            self.conn.replicated(what, &redis_key).await
        })
    }

    fn mark_spent<'a>(
        &'a self,
        key: &'a AuthorizationKey,
        spent: SpentAuthorization,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        // Spent now: the claim's token is no longer needed.
        self.hold().remove(&self.redis_key(key));
        if let Some((ledger, payer, nonce)) = self.read_ahead(key) {
            let written = ledger.prefetched().take_written(payer, nonce, &spent);
            ledger.prefetched().forget(payer, nonce);
            if written {
                // The transfer's script wrote this very record.
                return Box::pin(std::future::ready(Ok(())));
            }
        }
        let redis_key = self.redis_key(key);
        let ttl = self.ttl_secs(keep_until_unix_secs);
        let value = encode_spent(&spent);
        Box::pin(async move {
            let what = "x402 replay mark spent";
            self.conn
                .set_expiring(what, redis_key.clone(), value, ttl)
                .await?;
            self.conn.replicated(what, &redis_key).await
        })
    }
}

impl RedisNonceStore {
    /// Deletes the claim `held` at `redis_key`, sent on the runtime at once
    /// (whether or not the returned future is awaited: a dropped request
    /// still releases); without a runtime, when the future is polled. A
    /// release Redis cannot take waits for it in [`Unreleased`].
    fn send_release(&self, redis_key: String, held: Held) -> BoxFuture<'static, ()> {
        let (conn, clock, unreleased) = (
            self.conn.clone(),
            self.clock.clone(),
            self.unreleased.clone(),
        );
        spawn_or_return(async move {
            if let Err(_error) = release_once(&conn, &redis_key, &held.token, None).await {
                trace_warn!(
                    error = %_error,
                    "a claim could not be released; it is sent again when Redis answers",
                );
                unreleased.queue(&conn, &clock, redis_key, held);
            }
        })
    }

    /// Takes back a claim whose answer never came (Redis stalled past the
    /// timeout): it may still run once Redis moves again, and would then hold
    /// the same signed payment as in flight until its hold-until. Sent behind
    /// it on the same connection, patiently (a few tries, several seconds
    /// each), in the background: no request waits on it. If Redis still
    /// cannot take it, it waits in [`Unreleased`].
    fn take_back(&self, redis_key: String, held: Held) {
        let (conn, clock, unreleased) = (
            self.conn.clone(),
            self.clock.clone(),
            self.unreleased.clone(),
        );
        drop(spawn_or_return(async move {
            for _ in 0..3 {
                let patience = Some(COMPENSATION_TIMEOUT);
                if release_once(&conn, &redis_key, &held.token, patience)
                    .await
                    .is_ok()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            trace_warn!(
                "a timed-out claim could not be taken back yet; it is sent again when Redis answers"
            );
            unreleased.queue(&conn, &clock, redis_key, held);
        }));
    }
}

/// Releases Redis could not take, by Redis key, sent again in the
/// background until Redis takes them or their claims expire.
#[derive(Debug, Default)]
struct Unreleased {
    waiting: Mutex<HashMap<String, Held>>,
    /// Whether the task that sends them runs.
    retrying: AtomicBool,
}

/// The most releases kept waiting: past it, a claim expires at its
/// hold-until as before (a Redis away that long refuses payments anyway).
const MAX_UNRELEASED: usize = 10_000;
/// The first wait before sending the waiting releases again, and the
/// longest (the wait doubles while Redis stays away).
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_LONGEST: Duration = Duration::from_secs(1);

impl Unreleased {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        // One insert or remove per update: a poisoned map is still consistent.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the release waiting for `redis_key`, if any.
    fn take(&self, redis_key: &str) -> Option<Held> {
        let mut waiting = self.lock();
        if waiting.is_empty() {
            return None;
        }
        waiting.remove(redis_key)
    }

    /// Keeps `held` to send again, and starts the task that sends them.
    fn queue(
        self: &Arc<Self>,
        conn: &RedisConnection,
        clock: &SharedClock,
        key: String,
        held: Held,
    ) {
        {
            let mut waiting = self.lock();
            if waiting.len() >= MAX_UNRELEASED && !waiting.contains_key(&key) {
                trace_warn!(
                    "too many releases wait for Redis; this claim expires at its hold-until time"
                );
                return;
            }
            waiting.insert(key, held);
        }
        if self.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send it later on: a claim of the same
            // authorization by this store still sends it first.
            self.retrying.store(false, Ordering::Release);
            return;
        };
        runtime.spawn(self.clone().retry(conn.clone(), clock.clone()));
    }

    /// Sends the waiting releases until none is left, backing off while
    /// Redis stays away; bounded by the claims' hold-until times.
    async fn retry(self: Arc<Self>, conn: RedisConnection, clock: SharedClock) {
        let mut wait = RETRY_FIRST;
        loop {
            tokio::time::sleep(wait).await;
            let now = clock.now_unix_secs();
            let due: Vec<(String, Held)> = {
                let mut waiting = self.lock();
                // Expired on their own by now.
                waiting.retain(|_, held| held.until_unix_secs > now);
                waiting
                    .iter()
                    .map(|(key, held)| (key.clone(), held.clone()))
                    .collect()
            };
            let mut answered = true;
            for (key, held) in due {
                if release_once(&conn, &key, &held.token, None).await.is_err() {
                    answered = false;
                    break;
                }
                let mut waiting = self.lock();
                // Unless a newer release of the same key was queued meanwhile.
                if waiting.get(&key).is_some_and(|now| now.token == held.token) {
                    waiting.remove(&key);
                }
            }
            if self.lock().is_empty() {
                self.retrying.store(false, Ordering::Release);
                // A release queued after the check starts its own task,
                // unless this one takes it on.
                if self.lock().is_empty() || self.retrying.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
            wait = if answered {
                RETRY_FIRST
            } else {
                (wait * 2).min(RETRY_LONGEST)
            };
        }
    }
}

/// How long a take-back waits for Redis on each try.
const COMPENSATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

async fn release_once(
    conn: &RedisConnection,
    redis_key: &str,
    token: &str,
    patience: Option<std::time::Duration>,
) -> Result<i64, StoreError> {
    let script = |mut c: super::RedisLink| {
        let (redis_key, token) = (redis_key.to_owned(), token.to_owned());
        async move { RELEASE.key(redis_key).arg(token).invoke_async(&mut c).await }
    };
    match patience {
        Some(timeout) => {
            conn.call_within("x402 replay release", timeout, script)
                .await
        }
        None => conn.call("x402 replay release", script).await,
    }
}

/// Runs `work` on the tokio runtime now (the returned future only waits for
/// it), or, without a runtime, when the returned future is polled.
fn spawn_or_return(
    work: impl std::future::Future<Output = ()> + Send + 'static,
) -> BoxFuture<'static, ()> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let task = runtime.spawn(work);
            Box::pin(async move {
                let _ = task.await;
            })
        }
        Err(_) => Box::pin(work),
    }
}

fn decode_claim(value: &str) -> Result<Claim, StoreError> {
    match value.as_bytes().first() {
        Some(b'C') => Ok(Claim::Claimed),
        Some(b'F') => Ok(Claim::InFlight),
        Some(b'S') => decode_spent(&value[1..])
            .map(Claim::Spent)
            .ok_or_else(|| StoreError::new("x402 replay: unreadable spent entry")),
        Some(b'P') => decode_spent(&value[1..])
            .map(Claim::Settling)
            .ok_or_else(|| StoreError::new("x402 replay: unreadable settling entry")),
        _ => Err(StoreError::new("x402 replay: unknown entry")),
    }
}

/// `#balances`, balance fields and values, then used tokens; anything
/// unreadable counts as no balance (the transfer script decides anyway).
fn decode_snapshot(items: &[String]) -> Snapshot {
    let count = items
        .first()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0)
        .min(items.len().saturating_sub(1));
    let (balances, used) = items.get(1..).unwrap_or_default().split_at(count);
    Snapshot {
        balances: balances
            .chunks_exact(2)
            .filter_map(|pair| Some((pair[0].clone(), pair[1].parse().ok()?)))
            .collect(),
        used: used.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::{
        server::PaymentReceipt,
        wire::{AtomicAmount, Network},
    };

    #[test]
    fn a_spent_entry_reads_back_as_written() {
        let receipt = PaymentReceipt::new(
            "0xAbc".into(),
            AtomicAmount::new(u128::from(u64::MAX) * 3),
            Network::base_sepolia(),
            "eip155:84532/0xabc/0x01".into(),
        )
        .settled("0xtx".into());
        let spent = SpentAuthorization {
            receipt,
            fingerprint: [9; 32],
        };
        assert_eq!(
            decode_claim(&encode_spent(&spent)).unwrap(),
            Claim::Spent(spent.clone())
        );
        assert_eq!(
            decode_claim(&encode_record('P', &spent)).unwrap(),
            Claim::Settling(spent.clone())
        );
        assert_eq!(decode_claim("F").unwrap(), Claim::InFlight);
        assert_eq!(decode_claim("C").unwrap(), Claim::Claimed);
        assert!(decode_claim("S{}").is_err());
        assert!(decode_claim("").is_err());
    }
}

//! SIWE nonces in Redis: [`RedisSiweNonceStore`].
//!
//! One key per nonce, `{prefix}:siwe-nonce:{nonce}`, holding its expiry
//! (Unix milliseconds) until it is spent, then `spent`; the key expires with
//! the nonce, so nothing outlives its use. Issuing is `SET NX PX` (a
//! collision is [`NonceStoreError::Duplicate`]); consuming is one Lua script
//! that reads and spends in the same step, so of two replicas racing with the
//! same nonce exactly one sees [`NonceConsumption::Fresh`], and with
//! [`RedisConfig::with_wait_replicas`](super::RedisConfig::with_wait_replicas)
//! only once that many replicas acknowledged the spend.

use std::sync::LazyLock;

use redis::Script;

use super::RedisConnection;
use crate::siwe::{NonceConsumption, NonceStore, NonceStoreError};
use crate::store::BoxFuture;

const SEAM: &str = "siwe-nonce";

/// `KEYS[1]` the nonce, `ARGV[1]` now (Unix ms). Answers 0 unknown, 1 already
/// used, 2 expired, 3 fresh (now spent; the key keeps its expiry).
static CONSUME: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local held = redis.call('GET', KEYS[1])
if not held then return 0 end
if held == 'spent' then return 1 end
if tonumber(ARGV[1]) >= tonumber(held) then
  redis.call('DEL', KEYS[1])
  return 2
end
redis.call('SET', KEYS[1], 'spent', 'KEEPTTL')
return 3
",
    )
});

/// A [`NonceStore`] every replica shares through Redis.
///
/// Unlike [`InMemoryNonceStore`](crate::siwe::InMemoryNonceStore) it has no
/// entry cap: each nonce expires on its own and Redis's `maxmemory` bounds the
/// rest.
#[derive(Clone, Debug)]
pub struct RedisSiweNonceStore {
    conn: RedisConnection,
}

impl RedisSiweNonceStore {
    /// Nonces kept under `{prefix}:siwe-nonce:` on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self { conn }
    }
}

impl NonceStore for RedisSiweNonceStore {
    fn insert<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> BoxFuture<'a, Result<(), NonceStoreError>> {
        let key = self.conn.key(SEAM, nonce);
        // At least a millisecond: an already expired nonce is still stored, so
        // consuming it says `Expired` rather than `Unknown`, until Redis drops it.
        let ttl_ms = expires_at_unix_millis
            .saturating_sub(now_unix_millis)
            .max(1);
        Box::pin(async move {
            let stored: Option<String> = self
                .conn
                .call("SIWE nonce insert", |mut c| async move {
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(expires_at_unix_millis)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            match stored {
                Some(_) => Ok(()),
                None => Err(NonceStoreError::Duplicate),
            }
        })
    }

    fn consume<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
    ) -> BoxFuture<'a, Result<NonceConsumption, NonceStoreError>> {
        let key = self.conn.key(SEAM, nonce);
        let mut invocation = CONSUME.prepare_invoke();
        invocation.key(&key).arg(now_unix_millis);
        Box::pin(async move {
            let what = "SIWE nonce consume";
            let found: u8 = self.conn.invoke(what, invocation).await?;
            if found == 3 {
                // Spent on the replicas asked for, or the sign-in fails (it is
                // never accepted on a spend a failover could undo).
                self.conn.replicated(what, &key).await?;
            }
            Ok(match found {
                3 => NonceConsumption::Fresh,
                2 => NonceConsumption::Expired,
                1 => NonceConsumption::AlreadyUsed,
                _ => NonceConsumption::Unknown,
            })
        })
    }
}

//! The JWT revocation list in Redis: [`RedisRevocations`].
//!
//! One key per revoked PAT id, `{prefix}:jwt-revoked:{client_id}`, holding
//! the Unix second until which its tokens are refused and expiring at that
//! second (`EXAT`): once the last JWT minted from the PAT has expired the
//! entry has nothing left to refuse and Redis drops it. Checking is one `GET`.
//! With [`RedisConfig::with_wait_replicas`](super::RedisConfig::with_wait_replicas)
//! a revocation waits for that many replicas.

use std::sync::LazyLock;

use redis::Script;

use super::RedisConnection;
use crate::store::{BoxFuture, StoreError};
use crate::wallet_jwt::RevocationCheck;

const SEAM: &str = "jwt-revoked";

/// `KEYS[1]` the entry, `ARGV[1]` until (Unix secs): keeps the later of the
/// held and the new deadline, expiring with it.
static REVOKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local wanted = tonumber(ARGV[1])
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if wanted < 1 or held >= wanted then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EXAT', ARGV[1])
return 1
",
    )
});

/// A [`RevocationCheck`] every replica shares through Redis: a PAT revoked on
/// one replica refuses its JWTs on all of them at the next request.
#[derive(Clone, Debug)]
pub struct RedisRevocations {
    conn: RedisConnection,
}

impl RedisRevocations {
    /// Revocations kept under `{prefix}:jwt-revoked:` on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self { conn }
    }
}

impl RevocationCheck for RedisRevocations {
    fn is_revoked<'a>(
        &'a self,
        client_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let key = self.conn.key(SEAM, client_id);
            let until: Option<u64> = self
                .conn
                .call("JWT revocation check", |mut c| async move {
                    redis::cmd("GET").arg(&key).query_async(&mut c).await
                })
                .await?;
            Ok(until.is_some_and(|until| now < until))
        })
    }

    fn revoke<'a>(
        &'a self,
        client_id: &'a str,
        until: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = self.conn.key(SEAM, client_id);
            let mut invocation = REVOKE.prepare_invoke();
            invocation.key(&key).arg(until);
            let _stored: u8 = self.conn.invoke("JWT revocation", invocation).await?;
            // A revocation a failover could undo is not reported done.
            self.conn.replicated("JWT revocation", &key).await
        })
    }
}

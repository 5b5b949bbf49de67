//! SIWE sessions in Redis: [`RedisSessionStore`].
//!
//! Only digests of the cookies are stored, as in memory. Keys:
//!
//! | key | holds |
//! |---|---|
//! | `{prefix}:session:{access digest}` | hash: wallet, access expiry, refresh digest, refresh expiry |
//! | `{prefix}:session-refresh:{refresh digest}` | the access digest of its session |
//! | `{prefix}:session-wallet:{wallet}` | set of the wallet's access digests (sign-out everywhere) |
//!
//! A session's keys expire at the later of its two cookie expiries (Redis's
//! clock, Unix seconds); the wallet's set at its latest session's. Rotation
//! and sign-out are one Lua script each, so a refresh cookie buys new cookies
//! once even when two replicas receive it at the same time.

use std::sync::LazyLock;

use alloy_primitives::Address;
use redis::Script;

use super::RedisConnection;
use super::records::{Fields, digest_field, digest_hex, field, malformed, wallet_text};
use crate::store::{BoxFuture, StoreError};

/// The key group of sessions: one hash slot on a Redis Cluster.
const GROUP: &str = "session";
use crate::tokens::{SecretDigest, SessionRecord, SessionSecrets, SessionStore};

/// Stores one session: `put(P, wallet, base)` reads access digest, access
/// expiry, refresh digest, refresh expiry and expire-at from `ARGV[base..]`.
const PUT: &str = r"
local function extend(key, at)
  if redis.call('EXPIRETIME', key) < tonumber(at) then redis.call('EXPIREAT', key, at) end
end
local function put(P, wallet, base)
  local access, at = ARGV[base], ARGV[base + 4]
  local record = P .. 'session:' .. access
  redis.call('HSET', record, 'w', wallet, 'ae', ARGV[base + 1], 'rd', ARGV[base + 2], 're', ARGV[base + 3])
  redis.call('EXPIREAT', record, at)
  redis.call('SET', P .. 'session-refresh:' .. ARGV[base + 2], access, 'EXAT', at)
  local set = P .. 'session-wallet:' .. wallet
  for _, member in ipairs(redis.call('SMEMBERS', set)) do
    if redis.call('EXISTS', P .. 'session:' .. member) == 0 then redis.call('SREM', set, member) end
  end
  redis.call('SADD', set, access)
  extend(set, at)
end
local P = ARGV[1] .. ':'
";

/// `ARGV`: prefix, wallet, then the session as `put` reads it.
static INSERT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{PUT}put(P, ARGV[2], 3)")));

/// `ARGV`: prefix, refresh digest, now, then the fresh session as `put`
/// reads it (the wallet is the old session's). Answers the wallet, or nil.
static ROTATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{PUT}
local index = P .. 'session-refresh:' .. ARGV[2]
local access = redis.call('GET', index)
if not access then return false end
local old = P .. 'session:' .. access
local found = redis.call('HMGET', old, 'w', 're', 'rd')
if not found[1] or found[3] ~= ARGV[2] then
  redis.call('DEL', index)
  return false
end
if tonumber(ARGV[3]) >= tonumber(found[2]) then return false end
redis.call('DEL', old, index)
redis.call('SREM', P .. 'session-wallet:' .. found[1], access)
put(P, found[1], 4)
return found[1]
"
    ))
});

/// `ARGV`: prefix, wallet. Removes every session of the wallet.
static REMOVE_WALLET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local P = ARGV[1] .. ':'
local set = P .. 'session-wallet:' .. ARGV[2]
for _, access in ipairs(redis.call('SMEMBERS', set)) do
  local record = P .. 'session:' .. access
  local refresh = redis.call('HGET', record, 'rd')
  if refresh then redis.call('DEL', P .. 'session-refresh:' .. refresh) end
  redis.call('DEL', record)
end
redis.call('DEL', set)
",
    )
});

/// A [`SessionStore`] every replica shares through Redis (Redis 7 or later).
#[derive(Clone, Debug)]
pub struct RedisSessionStore {
    conn: RedisConnection,
}

impl RedisSessionStore {
    /// Sessions kept under `{prefix}:session…` on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self { conn }
    }
}

/// `ARGV[base..]` of `put`.
fn put_args(secrets: &SessionSecrets) -> [String; 5] {
    // `EXAT 0` is refused; an expiry at or before now drops the keys at once.
    let expire_at = secrets
        .access_expires_at
        .max(secrets.refresh_expires_at)
        .max(1);
    [
        digest_hex(&secrets.access_digest),
        secrets.access_expires_at.to_string(),
        digest_hex(&secrets.refresh_digest),
        secrets.refresh_expires_at.to_string(),
        expire_at.to_string(),
    ]
}

const MALFORMED: &str = "a stored session is malformed";

fn read_session(access_digest: SecretDigest, fields: &Fields) -> Result<SessionRecord, StoreError> {
    let wallet: Address = field(fields, "w", MALFORMED)?;
    Ok(SessionRecord {
        wallet,
        secrets: SessionSecrets {
            access_digest,
            access_expires_at: field(fields, "ae", MALFORMED)?,
            refresh_digest: digest_field(fields, "rd", MALFORMED)?,
            refresh_expires_at: field(fields, "re", MALFORMED)?,
        },
    })
}

impl SessionStore for RedisSessionStore {
    fn insert(&self, session: SessionRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let [access, access_expires, refresh, refresh_expires, expire_at] =
                put_args(&session.secrets);
            let mut invocation = self.conn.grouped_invocation(&INSERT, GROUP);
            invocation
                .arg(wallet_text(session.wallet))
                .arg(access)
                .arg(access_expires)
                .arg(refresh)
                .arg(refresh_expires)
                .arg(expire_at);
            let () = self.conn.invoke("session insert", invocation).await?;
            Ok(())
        })
    }

    fn find_by_access<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<SessionRecord>, StoreError>> {
        Box::pin(async move {
            let key = self.conn.grouped_key(GROUP, "session", &digest_hex(digest));
            let fields: Fields = self
                .conn
                .call("session lookup", |mut c| async move {
                    redis::cmd("HGETALL").arg(&key).query_async(&mut c).await
                })
                .await?;
            if fields.is_empty() {
                return Ok(None);
            }
            read_session(*digest, &fields).map(Some)
        })
    }

    fn rotate<'a>(
        &'a self,
        refresh: &'a SecretDigest,
        fresh: SessionSecrets,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<Address>, StoreError>> {
        Box::pin(async move {
            let [
                access,
                access_expires,
                fresh_refresh,
                refresh_expires,
                expire_at,
            ] = put_args(&fresh);
            let mut invocation = self.conn.grouped_invocation(&ROTATE, GROUP);
            invocation
                .arg(digest_hex(refresh))
                .arg(now)
                .arg(access)
                .arg(access_expires)
                .arg(fresh_refresh)
                .arg(refresh_expires)
                .arg(expire_at);
            let wallet: Option<String> = self.conn.invoke("session rotate", invocation).await?;
            wallet
                .map(|text| text.parse().map_err(|_| malformed(MALFORMED)))
                .transpose()
        })
    }

    fn remove_wallet(&self, wallet: Address) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&REMOVE_WALLET, GROUP);
            invocation.arg(wallet_text(wallet));
            let () = self.conn.invoke("session sign-out", invocation).await?;
            Ok(())
        })
    }
}

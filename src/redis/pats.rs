//! Personal access tokens in Redis: [`RedisPatStore`].
//!
//! Only the token's SHA-256 digest is stored, as in memory. Keys:
//!
//! | key | holds |
//! |---|---|
//! | `{prefix}:pat:{id}` | hash: the [`PatRecord`] |
//! | `{prefix}:pat-digest:{digest}` | the id of the token with that digest |
//! | `{prefix}:pat-wallet:{wallet}` | list of the wallet's ids, oldest first |
//! | `{prefix}:pat-family:{family}` | set of the ids of one rotation family |
//!
//! A record can matter until its PAT expires (after that it mints nothing),
//! and is kept a retention period longer so owners still see it listed and a
//! late exchange is told "expired" rather than "unknown"; then every key of
//! it expires (Redis's clock, Unix seconds). Every change that touches more
//! than one key (insert, rotate, revoke a family) is one Lua script: of two
//! replicas rotating the same token at once, exactly one succeeds.
//!
//! The scripts derive their keys from the prefix; on a Redis Cluster every
//! key here carries the `{pat}` hash tag (`{prefix}:{pat}:pat:…`) to keep
//! them in one slot.

use std::sync::LazyLock;

use alloy_primitives::Address;
use redis::Script;

use super::RedisConnection;
use super::records::{
    Fields, digest_field, digest_hex, field, malformed, optional_field, wallet_text,
};
use crate::store::{BoxFuture, StoreError};

/// The key group of PATs: one hash slot on a Redis Cluster.
const GROUP: &str = "pat";
use crate::tokens::{PatRecord, PatStore, Revocation, RotateOutcome, SecretDigest};

/// Stores one record: `put(P, base)` reads expire-at, id, wallet, digest,
/// family from `ARGV[base..base + 4]` and the hash's field/value pairs after.
const PUT: &str = r"
local function extend(key, at)
  if redis.call('EXPIRETIME', key) < tonumber(at) then redis.call('EXPIREAT', key, at) end
end
local function put(P, base)
  local at, id, wallet, digest, family = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  local record = P .. 'pat:' .. id
  redis.call('DEL', record)
  redis.call('HSET', record, unpack(ARGV, base + 5))
  redis.call('EXPIREAT', record, at)
  redis.call('SET', P .. 'pat-digest:' .. digest, id, 'EXAT', at)
  local list = P .. 'pat-wallet:' .. wallet
  for _, member in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if redis.call('EXISTS', P .. 'pat:' .. member) == 0 then redis.call('LREM', list, 0, member) end
  end
  redis.call('RPUSH', list, id)
  extend(list, at)
  local family_key = P .. 'pat-family:' .. family
  redis.call('SADD', family_key, id)
  extend(family_key, at)
end
local P = ARGV[1] .. ':'
";

/// `ARGV`: prefix, then the record as `put` reads it.
static INSERT: LazyLock<Script> = LazyLock::new(|| Script::new(&format!("{PUT}put(P, 2)")));

/// `ARGV`: prefix, old id, now, then the new record as `put` reads it.
/// Answers 1 when rotated, 0 when the old token is not active.
static ROTATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{PUT}
local old = P .. 'pat:' .. ARGV[2]
local found = redis.call('HMGET', old, 'w', 'rev_at', 'exp')
if found[1] ~= ARGV[6] or found[2] or tonumber(ARGV[3]) >= tonumber(found[3]) then return 0 end
redis.call('HSET', old, 'rev_at', ARGV[3], 'rev_why', 'rotated')
put(P, 4)
return 1
"
    ))
});

/// `ARGV`: prefix, digest. Answers the record's fields (empty if none).
static FIND_BY_DIGEST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local P = ARGV[1] .. ':'
local id = redis.call('GET', P .. 'pat-digest:' .. ARGV[2])
if not id then return {} end
return redis.call('HGETALL', P .. 'pat:' .. id)
",
    )
});

/// `ARGV`: prefix, wallet. Answers the records' fields, oldest first.
static LIST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local P = ARGV[1] .. ':'
local out = {}
for _, id in ipairs(redis.call('LRANGE', P .. 'pat-wallet:' .. ARGV[2], 0, -1)) do
  local fields = redis.call('HGETALL', P .. 'pat:' .. id)
  if #fields > 0 then out[#out + 1] = fields end
end
return out
",
    )
});

/// `ARGV`: prefix, wallet, id, reason, now. Answers the record's fields as
/// they now are (empty if the wallet has no such token).
static REVOKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local record = ARGV[1] .. ':pat:' .. ARGV[3]
if redis.call('HGET', record, 'w') ~= ARGV[2] then return {} end
if redis.call('HEXISTS', record, 'rev_at') == 0 then
  redis.call('HSET', record, 'rev_at', ARGV[5], 'rev_why', ARGV[4])
end
return redis.call('HGETALL', record)
",
    )
});

/// `ARGV`: prefix, family, now. Revokes every active token of the family.
static REVOKE_FAMILY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local P = ARGV[1] .. ':'
for _, id in ipairs(redis.call('SMEMBERS', P .. 'pat-family:' .. ARGV[2])) do
  local record = P .. 'pat:' .. id
  if redis.call('EXISTS', record) == 1 and redis.call('HEXISTS', record, 'rev_at') == 0 then
    redis.call('HSET', record, 'rev_at', ARGV[3], 'rev_why', 'family_reuse')
  end
end
",
    )
});

/// `ARGV`: prefix, id, now. Records a use of a token that still exists.
static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local record = ARGV[1] .. ':pat:' .. ARGV[2]
if redis.call('EXISTS', record) == 1 then redis.call('HSET', record, 'used', ARGV[3]) end
",
    )
});

/// A [`PatStore`] every replica shares through Redis (Redis 7 or later).
#[derive(Clone, Debug)]
pub struct RedisPatStore {
    conn: RedisConnection,
    retain_after_expiry_secs: u64,
}

impl RedisPatStore {
    /// How long a record is kept after its PAT expires when not set: 30 days.
    pub const DEFAULT_RETAIN_AFTER_EXPIRY_SECS: u64 = 30 * 86_400;

    /// PATs kept under `{prefix}:pat…` on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self {
            conn,
            retain_after_expiry_secs: Self::DEFAULT_RETAIN_AFTER_EXPIRY_SECS,
        }
    }

    /// Keeps each record `secs` after its PAT expires, then drops it.
    #[must_use]
    pub fn retain_after_expiry_secs(mut self, secs: u64) -> Self {
        self.retain_after_expiry_secs = secs;
        self
    }

    /// Adds `record` to `invocation` as `put` reads it.
    fn put_args(&self, invocation: &mut redis::ScriptInvocation<'static>, record: &PatRecord) {
        // `EXAT 0` is refused; a time already past drops the keys at once.
        let expire_at = record
            .expires_at
            .saturating_add(self.retain_after_expiry_secs)
            .max(1);
        let wallet = wallet_text(record.wallet);
        let digest = digest_hex(&record.digest);
        invocation
            .arg(expire_at)
            .arg(&record.id)
            .arg(&wallet)
            .arg(&digest)
            .arg(&record.family_id)
            .arg(&["id", &record.id][..])
            .arg(&["label", &record.label][..])
            .arg(&["w", &wallet][..])
            .arg(&["scopes", &record.scopes.to_string()][..])
            .arg(&["created", &record.created_at.to_string()][..])
            .arg(&["exp", &record.expires_at.to_string()][..])
            .arg(&["fam", &record.family_id][..])
            .arg(&["dg", &digest][..]);
        if let Some(used) = record.last_used_at {
            invocation.arg(&["used", &used.to_string()][..]);
        }
        if let Some(revoked) = record.revoked_at {
            invocation.arg(&["rev_at", &revoked.to_string()][..]);
        }
        if let Some(because) = record.revoked_because {
            invocation.arg(&["rev_why", reason_text(because)][..]);
        }
    }
}

fn reason_text(because: Revocation) -> &'static str {
    match because {
        Revocation::Revoked => "revoked",
        Revocation::Rotated => "rotated",
        Revocation::FamilyReuse => "family_reuse",
    }
}

fn reason_from_text(text: &str) -> Option<Revocation> {
    match text {
        "revoked" => Some(Revocation::Revoked),
        "rotated" => Some(Revocation::Rotated),
        "family_reuse" => Some(Revocation::FamilyReuse),
        _ => None,
    }
}

fn read_pat(fields: &Fields) -> Result<PatRecord, StoreError> {
    const WHAT: &str = "a stored PAT is malformed";
    let text = |name: &str| fields.get(name).cloned().ok_or_else(|| malformed(WHAT));
    let revoked_because = fields
        .get("rev_why")
        .map(|text| reason_from_text(text).ok_or_else(|| malformed(WHAT)))
        .transpose()?;
    Ok(PatRecord {
        id: text("id")?,
        label: text("label")?,
        wallet: field(fields, "w", WHAT)?,
        scopes: field(fields, "scopes", WHAT)?,
        created_at: field(fields, "created", WHAT)?,
        expires_at: field(fields, "exp", WHAT)?,
        last_used_at: optional_field(fields, "used", WHAT)?,
        revoked_at: optional_field(fields, "rev_at", WHAT)?,
        revoked_because,
        family_id: text("fam")?,
        digest: digest_field(fields, "dg", WHAT)?,
    })
}

fn read_optional_pat(fields: &Fields) -> Result<Option<PatRecord>, StoreError> {
    if fields.is_empty() {
        Ok(None)
    } else {
        read_pat(fields).map(Some)
    }
}

impl PatStore for RedisPatStore {
    fn insert(&self, record: PatRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&INSERT, GROUP);
            self.put_args(&mut invocation, &record);
            let () = self.conn.invoke("PAT insert", invocation).await?;
            Ok(())
        })
    }

    fn find_by_digest<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&FIND_BY_DIGEST, GROUP);
            invocation.arg(digest_hex(digest));
            let fields: Fields = self.conn.invoke("PAT lookup", invocation).await?;
            read_optional_pat(&fields)
        })
    }

    fn list(&self, wallet: Address) -> BoxFuture<'_, Result<Vec<PatRecord>, StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&LIST, GROUP);
            invocation.arg(wallet_text(wallet));
            let records: Vec<Fields> = self.conn.invoke("PAT list", invocation).await?;
            records.iter().map(read_pat).collect()
        })
    }

    fn revoke<'a>(
        &'a self,
        wallet: Address,
        id: &'a str,
        because: Revocation,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&REVOKE, GROUP);
            invocation
                .arg(wallet_text(wallet))
                .arg(id)
                .arg(reason_text(because))
                .arg(now);
            let fields: Fields = self.conn.invoke("PAT revoke", invocation).await?;
            let routing = self.conn.routing_key(GROUP);
            self.conn.replicated("PAT revoke", &routing).await?;
            read_optional_pat(&fields)
        })
    }

    fn rotate<'a>(
        &'a self,
        old_id: &'a str,
        new: PatRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<RotateOutcome, StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&ROTATE, GROUP);
            invocation.arg(old_id).arg(now);
            self.put_args(&mut invocation, &new);
            let rotated: u8 = self.conn.invoke("PAT rotate", invocation).await?;
            Ok(if rotated == 1 {
                RotateOutcome::Rotated
            } else {
                RotateOutcome::NotActive
            })
        })
    }

    fn revoke_family<'a>(
        &'a self,
        family_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&REVOKE_FAMILY, GROUP);
            invocation.arg(family_id).arg(now);
            let () = self.conn.invoke("PAT family revoke", invocation).await?;
            let routing = self.conn.routing_key(GROUP);
            self.conn.replicated("PAT family revoke", &routing).await
        })
    }

    fn touch<'a>(&'a self, id: &'a str, now: u64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut invocation = self.conn.grouped_invocation(&TOUCH, GROUP);
            invocation.arg(id).arg(now);
            let () = self.conn.invoke("PAT touch", invocation).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revocation_reasons_read_back() {
        for because in [
            Revocation::Revoked,
            Revocation::Rotated,
            Revocation::FamilyReuse,
        ] {
            assert_eq!(reason_from_text(reason_text(because)), Some(because));
        }
        assert_eq!(reason_from_text("other"), None);
    }
}

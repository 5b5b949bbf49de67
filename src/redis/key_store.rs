//! API keys on Redis: [`RedisKeyStore`], a [`KeyStore`] every replica of a
//! data API shares, which also issues, lists and revokes keys.
//!
//! Only each key's SHA-256 digest is stored, as in memory. Keys:
//!
//! | key | holds |
//! |---|---|
//! | `{prefix}:api_key:{digest}` | hash: `id`, and `requests` / `window_us` when the key has its own quota |
//! | `{prefix}:api_key_ids` | hash: application id -> digest (lowercase hex) |
//!
//! Issuing and revoking touch both in one Lua script; a lookup is one
//! `HGETALL`. The scripts derive their keys from the prefix; on a Redis
//! Cluster every key here carries the `{api_key}` hash tag
//! (`{prefix}:{api_key}:api_key:…`), so they run on one shard.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::RedisConnection;
use crate::api_key::{ApiKeyId, ApiKeyRecord, ApiKeySecret, KeyDigest, KeyQuota, KeyStore};
use crate::store::{BoxFuture, StoreError};

/// The key group of API keys: one hash slot on a Redis Cluster.
const GROUP: &str = "api_key";

/// `ARGV`: prefix, id, digest, then the record's field/value pairs.
/// Answers 1 when stored, 0 when the id or the digest is already there.
static INSERT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local P = ARGV[1] .. ':'
local record = P .. 'api_key:' .. ARGV[3]
if redis.call('HEXISTS', P .. 'api_key_ids', ARGV[2]) == 1 or redis.call('EXISTS', record) == 1 then
  return 0
end
redis.call('HSET', P .. 'api_key_ids', ARGV[2], ARGV[3])
redis.call('HSET', record, unpack(ARGV, 4))
return 1
",
    )
});

/// `ARGV`: prefix, id. Answers 1 when a key of that id was revoked.
static REVOKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local P = ARGV[1] .. ':'
local digest = redis.call('HGET', P .. 'api_key_ids', ARGV[2])
if not digest then return 0 end
redis.call('DEL', P .. 'api_key:' .. digest)
redis.call('HDEL', P .. 'api_key_ids', ARGV[2])
return 1
",
    )
});

/// `ARGV`: prefix. Answers every record's fields.
static LIST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local P = ARGV[1] .. ':'
local out = {}
for _, digest in ipairs(redis.call('HVALS', P .. 'api_key_ids')) do
  local fields = redis.call('HGETALL', P .. 'api_key:' .. digest)
  if #fields > 0 then out[#out + 1] = fields end
end
return out
",
    )
});

/// Issued API keys on Redis, shared by every replica on it.
///
/// The layer ([`ApiKeyLayer`](crate::api_key::ApiKeyLayer)) looks keys up
/// by digest; [`create`](Self::create) issues a `wg_key_…`
/// ([`ApiKeySecret`]) and stores its digest with the quota,
/// [`revoke`](Self::revoke) removes it (every replica refuses it on its next
/// request: nothing is cached). Redis unreachable: the lookup is a
/// [`StoreError`], which the layer answers with 503, never a refusal or a pass.
#[derive(Clone)]
pub struct RedisKeyStore {
    conn: RedisConnection,
}

impl fmt::Debug for RedisKeyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisKeyStore")
            .field("conn", &self.conn)
            .finish()
    }
}

impl RedisKeyStore {
    /// Keys on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self { conn }
    }

    /// Issues a fresh key for `quota` (`None`: the layer's default) under a
    /// new id (`key_` and 12 hex digits of its digest, never the secret).
    /// The secret is returned once and only its digest is stored.
    ///
    /// # Errors
    /// Redis failed, or the random generator did.
    pub async fn create(
        &self,
        quota: Option<KeyQuota>,
    ) -> Result<(ApiKeyId, ApiKeySecret), StoreError> {
        let secret = ApiKeySecret::generate()
            .map_err(|err| StoreError::new("random generator failed").with_source(err))?;
        let digest = secret.digest();
        let id = ApiKeyId::new(format!("key_{}", &digest_hex(&digest)[..12]))
            .map_err(|err| StoreError::new("API key id").with_source(err))?;
        let mut record = ApiKeyRecord::new(id.clone());
        record.quota = quota;
        if !self.insert_digest(digest, &record).await? {
            // The id is 48 bits of a fresh key's digest: a collision is
            // vanishingly rare, and creating again picks another.
            return Err(StoreError::new("API key id already taken; create again"));
        }
        Ok((id, secret))
    }

    /// Stores a key known by its digest for `record`; `Ok(false)` when its
    /// id or digest is already there (nothing changed).
    ///
    /// # Errors
    /// Redis failed.
    pub async fn insert_digest(
        &self,
        digest: KeyDigest,
        record: &ApiKeyRecord,
    ) -> Result<bool, StoreError> {
        let mut invocation = self.conn.grouped_invocation(&INSERT, GROUP);
        invocation
            .arg(record.id.as_str())
            .arg(digest_hex(&digest))
            .arg("id")
            .arg(record.id.as_str());
        if let Some(quota) = record.quota {
            invocation
                .arg("requests")
                .arg(quota.requests().get())
                .arg("window_us")
                .arg(u64::try_from(quota.window().as_micros()).unwrap_or(u64::MAX));
        }
        let stored: i64 = self
            .conn
            .invoke("API key insert on Redis failed", invocation)
            .await?;
        Ok(stored == 1)
    }

    /// Every stored key's record (id and quota; never a digest), by id.
    ///
    /// # Errors
    /// Redis failed, or a record does not read back.
    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let invocation = self.conn.grouped_invocation(&LIST, GROUP);
        let rows: Vec<HashMap<String, String>> = self
            .conn
            .invoke("API key list on Redis failed", invocation)
            .await?;
        let mut records = rows.iter().map(record).collect::<Result<Vec<_>, _>>()?;
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    /// Revokes the key of application `id`; whether one existed. Every
    /// replica refuses it from its next request on.
    ///
    /// # Errors
    /// Redis failed.
    pub async fn revoke(&self, id: &ApiKeyId) -> Result<bool, StoreError> {
        let mut invocation = self.conn.grouped_invocation(&REVOKE, GROUP);
        invocation.arg(id.as_str());
        let revoked: i64 = self
            .conn
            .invoke("API key revoke on Redis failed", invocation)
            .await?;
        Ok(revoked == 1)
    }
}

impl KeyStore for RedisKeyStore {
    fn lookup(
        &self,
        digest: &KeyDigest,
    ) -> BoxFuture<'static, Result<Option<ApiKeyRecord>, StoreError>> {
        let key = self.conn.grouped_key(GROUP, "api_key", &digest_hex(digest));
        let conn = self.conn.clone();
        Box::pin(async move {
            let fields: HashMap<String, String> = conn
                .call("API key lookup on Redis failed", |mut c| async move {
                    redis::cmd("HGETALL").arg(key).query_async(&mut c).await
                })
                .await?;
            if fields.is_empty() {
                return Ok(None);
            }
            record(&fields).map(Some)
        })
    }
}

/// Lowercase hex of a digest: the id part of its key.
fn digest_hex(digest: &KeyDigest) -> String {
    use std::fmt::Write as _;
    digest
        .as_bytes()
        .iter()
        .fold(String::with_capacity(64), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

/// A stored record's fields read back.
fn record(fields: &HashMap<String, String>) -> Result<ApiKeyRecord, StoreError> {
    let malformed = || StoreError::new("API key record on Redis does not read back");
    let id = fields
        .get("id")
        .and_then(|id| ApiKeyId::new(id.as_str()).ok())
        .ok_or_else(malformed)?;
    let mut record = ApiKeyRecord::new(id);
    if let (Some(requests), Some(window)) = (fields.get("requests"), fields.get("window_us")) {
        let requests: NonZeroU32 = requests.parse().map_err(|_| malformed())?;
        let window = Duration::from_micros(window.parse().map_err(|_| malformed())?);
        record.quota = Some(KeyQuota::new(requests, window).map_err(|_| malformed())?);
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::super::{RedisConfig, redis_support};
    use super::*;

    fn store(test: &str) -> RedisKeyStore {
        let config = RedisConfig::new(redis_support::shared_url())
            .with_prefix(redis_support::unique_prefix(test))
            .with_timeout(Duration::from_secs(2));
        RedisKeyStore::new(RedisConnection::open(&config).unwrap())
    }

    #[tokio::test]
    async fn an_issued_key_is_found_by_every_store_on_the_redis_until_revoked() {
        let issuer = store("api-key-issue");
        let replica = issuer.clone();
        let quota = KeyQuota::per_minute(NonZeroU32::new(7).unwrap());
        let (id, secret) = issuer.create(Some(quota)).await.unwrap();
        assert!(ApiKeySecret::is_well_formed(secret.expose()));
        assert!(id.as_str().starts_with("key_"));
        let found = replica.lookup(&secret.digest()).await.unwrap().unwrap();
        assert_eq!((found.id.clone(), found.quota), (id.clone(), Some(quota)));
        let (default_id, _) = issuer.create(None).await.unwrap();
        let listed = issuer.list().await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(
            listed
                .iter()
                .any(|r| r.id == default_id && r.quota.is_none())
        );
        assert!(issuer.revoke(&id).await.unwrap());
        assert!(!issuer.revoke(&id).await.unwrap());
        assert_eq!(replica.lookup(&secret.digest()).await.unwrap(), None);
        assert_eq!(issuer.list().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_taken_id_or_digest_is_not_stored_twice() {
        let keys = store("api-key-dup");
        let record = ApiKeyRecord::new(ApiKeyId::new("app").unwrap());
        let digest = KeyDigest::of(b"0123456789abcdef-one");
        assert!(keys.insert_digest(digest, &record).await.unwrap());
        assert!(
            !keys
                .insert_digest(KeyDigest::of(b"0123456789abcdef-two"), &record)
                .await
                .unwrap()
        );
        let other = ApiKeyRecord::new(ApiKeyId::new("other").unwrap());
        assert!(!keys.insert_digest(digest, &other).await.unwrap());
    }

    #[test]
    fn the_stored_digest_is_lowercase_hex() {
        let hex = digest_hex(&KeyDigest::from_bytes([0xab; 32]));
        assert_eq!(hex, "ab".repeat(32));
    }
}

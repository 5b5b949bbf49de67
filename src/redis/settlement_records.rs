//! The settler's broadcast records in Redis: [`RedisSettlementRecords`]
//! (features `redis` + `evm-settler`).
//!
//! | key | holds |
//! |---|---|
//! | `{prefix}:settlement:{chain id}:{asset}:{from}:{nonce}` | the [`SettlementRecord`] as JSON, until its `validBefore` + [`RECORD_RETENTION_SECS`] |
//! | `{prefix}:settlement-answered:{chain id}:{asset}:{from}:{nonce}` | `1` once a caller was told `success: true` (`SET … NX`), as long |
//!
//! `begin` is `SET … NX`: of several replicas settling the same
//! authorization, one records (and sends) a transaction; the others read its
//! record and report its outcome. A replica restarted mid-settlement finds
//! the record when the payment is settled again. With
//! [`RedisConfig::with_wait_replicas`](super::RedisConfig::with_wait_replicas)
//! `begin` and `update` wait for that many replicas; a record begun on too
//! few is removed again and nothing is sent.

use super::RedisConnection;
use crate::store::{BoxFuture, StoreError};
use crate::x402::facilitator::evm_settler::{
    RECORD_RETENTION_SECS, SettlementKey, SettlementRecord, SettlementRecords,
};

/// The key seam.
const SEAM: &str = "settlement";
/// The seam of the one-success marks.
const ANSWERED_SEAM: &str = "settlement-answered";

/// Settlement records shared by every replica through Redis.
#[derive(Clone, Debug)]
pub struct RedisSettlementRecords {
    conn: RedisConnection,
}

impl RedisSettlementRecords {
    /// Records on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self { conn }
    }

    fn key(&self, key: &SettlementKey) -> String {
        self.conn.key(SEAM, &key.id())
    }

    fn answered_key(&self, key: &SettlementKey) -> String {
        self.conn.key(ANSWERED_SEAM, &key.id())
    }

    /// `DEL redis_key`, one key per call (a cluster keeps keys on different shards).
    async fn del(&self, what: &'static str, redis_key: String) -> Result<(), StoreError> {
        self.conn
            .call(what, |mut c| async move {
                redis::cmd("DEL")
                    .arg(&redis_key)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
    }
}

/// Seconds until `record` may be forgotten (at least one minute).
fn ttl_secs(record: &SettlementRecord) -> u64 {
    retention_secs(record.valid_before)
}

/// Seconds until what is kept of an authorization valid before `valid_before` may go.
fn retention_secs(valid_before: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    valid_before
        .saturating_add(RECORD_RETENTION_SECS)
        .saturating_sub(now)
        .max(60)
}

fn encode(record: &SettlementRecord) -> Result<String, StoreError> {
    serde_json::to_string(record)
        .map_err(|error| StoreError::new("encoding a settlement record").with_source(error))
}

impl SettlementRecords for RedisSettlementRecords {
    fn begin<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let what = "settlement record begin";
            let (redis_key, json, ttl) = (self.key(key), encode(record)?, ttl_secs(record));
            let began = self
                .conn
                .set_new_expiring(what, redis_key.clone(), json, ttl)
                .await?;
            if began && let Err(error) = self.conn.replicated(what, &redis_key).await {
                // Nothing is sent on a record a failover could lose: it is
                // taken back (best effort), and the settlement fails unsent.
                let _ = self.del("settlement record removal", redis_key).await;
                return Err(error);
            }
            Ok(began)
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let what = "settlement record update";
            let (redis_key, json, ttl) = (self.key(key), encode(record)?, ttl_secs(record));
            self.conn
                .set_expiring(what, redis_key.clone(), json, ttl)
                .await?;
            self.conn.replicated(what, &redis_key).await
        })
    }

    fn get<'a>(
        &'a self,
        key: &'a SettlementKey,
    ) -> BoxFuture<'a, Result<Option<SettlementRecord>, StoreError>> {
        Box::pin(async move {
            let redis_key = self.key(key);
            let json: Option<String> = self
                .conn
                .call("settlement record read", |mut c| async move {
                    redis::cmd("GET").arg(&redis_key).query_async(&mut c).await
                })
                .await?;
            json.map(|json| {
                serde_json::from_str(&json).map_err(|error| {
                    StoreError::new("reading a settlement record").with_source(error)
                })
            })
            .transpose()
        })
    }

    fn remove<'a>(&'a self, key: &'a SettlementKey) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            for redis_key in [self.key(key), self.answered_key(key)] {
                self.del("settlement record removal", redis_key).await?;
            }
            Ok(())
        })
    }

    fn claim_answer<'a>(
        &'a self,
        key: &'a SettlementKey,
        valid_before: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            // Not waited for: a mark lost in a failover lets a second caller
            // be told `success` too; the transfer happened once either way.
            let (redis_key, ttl) = (self.answered_key(key), retention_secs(valid_before));
            self.conn
                .set_new_expiring("settlement answer claim", redis_key, 1, ttl)
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::redis::{RedisConfig, redis_support};

    #[tokio::test]
    async fn redis_records_keep_the_contract_and_expire() {
        let config = RedisConfig::new(redis_support::shared_url())
            .with_prefix(redis_support::unique_prefix("settlement-records"))
            .with_timeout(Duration::from_secs(2));
        let records = RedisSettlementRecords::new(RedisConnection::open(&config).unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        crate::x402::facilitator::evm_settler::records_contract(&records, now + 300).await;
        let (_, record) = crate::x402::facilitator::evm_settler::sample_record(now + 300);
        assert!(ttl_secs(&record) > RECORD_RETENTION_SECS);
    }

    #[tokio::test]
    async fn a_record_begun_on_too_few_replicas_is_an_error_and_is_gone() {
        // The shared server has no replica: waiting for one cannot succeed.
        let prefix = redis_support::unique_prefix("settlement-records-wait");
        let open = |replicas| {
            let config = RedisConfig::new(redis_support::shared_url())
                .with_prefix(&prefix)
                .with_timeout(Duration::from_secs(2))
                .with_wait_replicas(replicas);
            RedisSettlementRecords::new(RedisConnection::open(&config).unwrap())
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let (key, record) = crate::x402::facilitator::evm_settler::sample_record(now + 300);
        let error = open(1).begin(&key, &record).await.unwrap_err();
        let chain = crate::error_chain(&error);
        assert!(chain.contains("replicas"), "{chain}");
        // Nothing is left that another replica would take for a broadcast.
        assert_eq!(open(0).get(&key).await.unwrap(), None);
        assert!(open(0).begin(&key, &record).await.unwrap());
    }
}

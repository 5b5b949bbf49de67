//! What the settler broadcast for each authorization, written before the
//! transaction is sent: the seam [`SettlementRecords`], its in-memory default
//! [`MemorySettlementRecords`] (a Redis one is `RedisSettlementRecords`,
//! features `redis` + `evm-settler`).
//!
//! A record outlives the process that wrote it (with Redis), so a settlement
//! asked again after a restart finds the transaction it may have sent and
//! reports its outcome instead of sending a second one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use alloy_primitives::{Address, B256};
use serde::{Deserialize, Serialize};

use crate::store::{BoxFuture, StoreError};

/// How long a record is kept past its authorization's `validBefore`: after
/// it the transfer can no longer land, but a retried settle still finds the
/// answer for a while.
pub const RECORD_RETENTION_SECS: u64 = 3600;

/// One authorization: chain, token, payer, EIP-3009 nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SettlementKey {
    /// The chain id.
    pub chain_id: u64,
    /// The token.
    pub asset: Address,
    /// The payer.
    pub from: Address,
    /// The authorization's nonce.
    pub nonce: B256,
}

impl SettlementKey {
    /// `{chain id}:{asset}:{from}:{nonce}`, lowercase hex: a store's key.
    pub fn id(&self) -> String {
        format!(
            "{}:{:x}:{:x}:{:x}",
            self.chain_id, self.asset, self.from, self.nonce
        )
    }
}

/// The transaction(s) sent for one authorization.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementRecord {
    /// Keccak-256 of the token call that moves the payment: a settle of the
    /// same authorization with other fields or signature is not this payment.
    pub payment: B256,
    /// Every transaction hash sent, oldest first: the first and its
    /// same-nonce replacements. Any of them may be the one mined. Empty
    /// while the settlement is being prepared: the authorization is claimed
    /// before a nonce is taken, and this record names no transaction yet
    /// (`raw` is empty and `tx_nonce` means nothing).
    pub transactions: Vec<B256>,
    /// The latest signed transaction (EIP-2718 bytes), resent if the node lost it.
    #[serde(with = "hex_bytes")]
    pub raw: Vec<u8>,
    /// The settler's transaction nonce they share.
    pub tx_nonce: u64,
    /// Their gas limit.
    pub gas_limit: u64,
    /// The latest one's fee cap and priority fee (wei per gas).
    pub max_fee_per_gas: u128,
    /// The latest one's priority fee.
    pub max_priority_fee_per_gas: u128,
    /// The authorization's `validBefore`: after it the transfer cannot land.
    pub valid_before: u64,
    /// The transaction that landed (status 1, the exact Transfer log), once known.
    pub mined: Option<B256>,
    /// The digest of the first `/settle`'s `Idempotency-Key`: only that
    /// caller is told `success: true` again. `None`: it sent none, and the
    /// one success goes to whoever first learns the outcome
    /// ([`SettlementRecords::claim_answer`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<B256>,
}

impl SettlementRecord {
    /// The transaction most recently sent.
    pub fn latest(&self) -> B256 {
        self.transactions.last().copied().unwrap_or_default()
    }
}

mod hex_bytes {
    use alloy_primitives::hex;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("0x{}", hex::encode(bytes)))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        hex::decode(text).map_err(serde::de::Error::custom)
    }
}

/// Where the settler writes what it broadcast, before broadcasting it.
pub trait SettlementRecords: Send + Sync + 'static {
    /// Writes `record` under `key` unless one is there: `false` if another
    /// settlement of the authorization got there first.
    fn begin<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Replaces the record under `key` (a replacement sent, the outcome known).
    fn update<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The record under `key`, if any.
    fn get<'a>(
        &'a self,
        key: &'a SettlementKey,
    ) -> BoxFuture<'a, Result<Option<SettlementRecord>, StoreError>>;

    /// Forgets `key` (and whether its success was told): nothing was sent,
    /// or what was sent can no longer land.
    fn remove<'a>(&'a self, key: &'a SettlementKey) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Takes the one `success: true` of the authorization under `key`
    /// (kept until `valid_before` + [`RECORD_RETENTION_SECS`]): `true` for
    /// the first caller only, on every replica sharing the records.
    fn claim_answer<'a>(
        &'a self,
        key: &'a SettlementKey,
        valid_before: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<T: SettlementRecords + ?Sized> SettlementRecords for Arc<T> {
    fn begin<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).begin(key, record)
    }

    fn update<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).update(key, record)
    }

    fn get<'a>(
        &'a self,
        key: &'a SettlementKey,
    ) -> BoxFuture<'a, Result<Option<SettlementRecord>, StoreError>> {
        (**self).get(key)
    }

    fn remove<'a>(&'a self, key: &'a SettlementKey) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).remove(key)
    }

    fn claim_answer<'a>(
        &'a self,
        key: &'a SettlementKey,
        valid_before: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).claim_answer(key, valid_before)
    }
}

/// Records in this process's memory: enough for one replica that never
/// restarts mid-settlement. Records are dropped once their authorization's
/// `validBefore` is [`RECORD_RETENTION_SECS`] past (at the next `begin`).
#[derive(Debug, Default)]
pub struct MemorySettlementRecords {
    records: Mutex<HashMap<SettlementKey, SettlementRecord>>,
    /// Authorizations whose success was told, until when they are kept.
    answered: Mutex<HashMap<SettlementKey, u64>>,
}

impl MemorySettlementRecords {
    /// No records.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<SettlementKey, SettlementRecord>) -> R) -> R {
        f(&mut self.records.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn now_unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

impl SettlementRecords for MemorySettlementRecords {
    fn begin<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let now = now_unix_secs();
        let began = self.with(|records| {
            records.retain(|_, kept| kept.valid_before.saturating_add(RECORD_RETENTION_SECS) > now);
            if records.contains_key(key) {
                return false;
            }
            records.insert(*key, record.clone());
            true
        });
        Box::pin(std::future::ready(Ok(began)))
    }

    fn update<'a>(
        &'a self,
        key: &'a SettlementKey,
        record: &'a SettlementRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.with(|records| records.insert(*key, record.clone()));
        Box::pin(std::future::ready(Ok(())))
    }

    fn get<'a>(
        &'a self,
        key: &'a SettlementKey,
    ) -> BoxFuture<'a, Result<Option<SettlementRecord>, StoreError>> {
        let record = self.with(|records| records.get(key).cloned());
        Box::pin(std::future::ready(Ok(record)))
    }

    fn remove<'a>(&'a self, key: &'a SettlementKey) -> BoxFuture<'a, Result<(), StoreError>> {
        self.with(|records| records.remove(key));
        self.answered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        Box::pin(std::future::ready(Ok(())))
    }

    fn claim_answer<'a>(
        &'a self,
        key: &'a SettlementKey,
        valid_before: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let now = now_unix_secs();
        let mut answered = self.answered.lock().unwrap_or_else(PoisonError::into_inner);
        answered.retain(|_, until| *until > now);
        let until = valid_before.saturating_add(RECORD_RETENTION_SECS);
        let first = answered.insert(*key, until).is_none();
        Box::pin(std::future::ready(Ok(first)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample(valid_before: u64) -> (SettlementKey, SettlementRecord) {
        let key = SettlementKey {
            chain_id: 84532,
            asset: Address::repeat_byte(0x03),
            from: Address::repeat_byte(0xf3),
            nonce: B256::repeat_byte(0x11),
        };
        let record = SettlementRecord {
            payment: B256::repeat_byte(0x55),
            gas_limit: 120_000,
            transactions: vec![B256::repeat_byte(0xaa)],
            raw: vec![0x02, 0xf8],
            tx_nonce: 7,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            valid_before,
            mined: None,
            caller: Some(B256::repeat_byte(0xcc)),
        };
        (key, record)
    }

    /// The contract every implementation keeps (the Redis one runs it too).
    pub(crate) async fn contract(records: &dyn SettlementRecords, valid_before: u64) {
        let (key, mut record) = sample(valid_before);
        assert_eq!(records.get(&key).await.unwrap(), None);
        assert!(records.begin(&key, &record).await.unwrap());
        assert!(
            !records.begin(&key, &record).await.unwrap(),
            "one settlement begins"
        );
        record.transactions.push(B256::repeat_byte(0xbb));
        record.mined = Some(B256::repeat_byte(0xbb));
        records.update(&key, &record).await.unwrap();
        let kept = records.get(&key).await.unwrap().unwrap();
        assert_eq!(kept, record);
        assert_eq!(kept.latest(), B256::repeat_byte(0xbb));
        assert!(records.claim_answer(&key, valid_before).await.unwrap());
        assert!(
            !records.claim_answer(&key, valid_before).await.unwrap(),
            "one success per authorization"
        );
        records.remove(&key).await.unwrap();
        assert_eq!(records.get(&key).await.unwrap(), None);
        assert!(
            records.claim_answer(&key, valid_before).await.unwrap(),
            "a removed record was never answered: nothing of it landed"
        );
    }

    #[tokio::test]
    async fn memory_records_keep_the_contract() {
        contract(&MemorySettlementRecords::new(), now_unix_secs() + 300).await;
    }

    #[test]
    fn a_record_reads_back_from_json() {
        let (key, record) = sample(1_750_000_300);
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(
            serde_json::from_str::<SettlementRecord>(&text).unwrap(),
            record
        );
        assert!(key.id().starts_with("84532:0303"));
    }
}

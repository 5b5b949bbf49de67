//! Where API keys live: the [`KeyStore`] seam and its in-memory default.

use crate::store::{BoxFuture, StoreError};
use std::collections::HashMap;
use std::fmt;
use std::future::ready;
use std::sync::{Arc, PoisonError, RwLock};

use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use super::{ApiKeyId, ConfigError, KeyQuota};

/// The SHA-256 digest of an API key: what stores keep instead of the key.
///
/// `Debug` never shows the bytes, and equality is constant time.
#[derive(Clone, Copy)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// The digest of `secret` (the exact bytes of the `X-API-KEY` value).
    pub fn of(secret: &[u8]) -> Self {
        Self(Sha256::digest(secret).into())
    }

    /// A digest computed elsewhere (e.g. loaded from a database).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Constant-time comparison.
    pub fn ct_eq(&self, other: &Self) -> bool {
        bool::from(self.0.ct_eq(&other.0))
    }

    /// The first eight bytes, used only to pick a bucket: knowing them says
    /// nothing useful about the key (a SHA-256 preimage would be needed).
    fn bucket(&self) -> [u8; 8] {
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&self.0[..8]);
        prefix
    }
}

impl PartialEq for KeyDigest {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other)
    }
}

impl Eq for KeyDigest {}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(<redacted>)")
    }
}

/// What a store knows about a valid key: who it belongs to and its quota.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiKeyRecord {
    /// The application the key identifies.
    pub id: ApiKeyId,
    /// The key's own quota; `None` means the layer's default.
    pub quota: Option<KeyQuota>,
}

impl ApiKeyRecord {
    /// A record for application `id`, with the layer's default quota.
    pub fn new(id: ApiKeyId) -> Self {
        Self { id, quota: None }
    }

    /// Gives the key its own quota.
    #[must_use]
    pub fn with_quota(mut self, quota: KeyQuota) -> Self {
        self.quota = Some(quota);
        self
    }
}

/// Looks keys up by digest.
///
/// Asynchronous so a networked store (Redis, SQL) can implement it; the
/// in-memory store answers with a boxed ready future (one allocation).
/// The future is `'static` (it borrows neither the store nor the digest)
/// because the layer's response future holds it. Dyn-compatible: an
/// `Arc<dyn KeyStore>` is a `KeyStore`. A revoked key is simply not found.
pub trait KeyStore: Send + Sync + 'static {
    /// The record of the key whose digest is `digest`, if it is valid.
    fn lookup(
        &self,
        digest: &KeyDigest,
    ) -> BoxFuture<'static, Result<Option<ApiKeyRecord>, StoreError>>;
}

forward_to_arc! { KeyStore {
    fn lookup(
        &self,
        digest: &KeyDigest,
    ) -> BoxFuture<'static, Result<Option<ApiKeyRecord>, StoreError>>;
}}

#[derive(Clone)]
struct Entry {
    digest: KeyDigest,
    record: ApiKeyRecord,
}

type Buckets = HashMap<[u8; 8], Vec<Entry>>;

/// Keys held in memory as SHA-256 digests.
///
/// Clones share the same keys, so a handle kept after building the layer can
/// add and revoke keys at run time. A lookup hashes on the first eight bytes
/// of the digest and compares full digests in constant time.
#[derive(Clone, Default)]
pub struct InMemoryKeyStore {
    buckets: Arc<RwLock<Buckets>>,
}

impl InMemoryKeyStore {
    /// Keys shorter than this are refused: they could be guessed.
    pub const MIN_KEY_BYTES: usize = 16;

    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the key `secret` for `record`. Only its digest is kept.
    ///
    /// # Errors
    /// [`ConfigError::KeyTooShort`] below [`Self::MIN_KEY_BYTES`],
    /// [`ConfigError::DuplicateKey`] if the key or the id is already present.
    pub fn insert(&self, secret: &str, record: ApiKeyRecord) -> Result<(), ConfigError> {
        if secret.len() < Self::MIN_KEY_BYTES {
            return Err(ConfigError::KeyTooShort {
                min_bytes: Self::MIN_KEY_BYTES,
            });
        }
        self.insert_digest(KeyDigest::of(secret.as_bytes()), record)
    }

    /// Adds a key known only by its digest (e.g. loaded from a database).
    ///
    /// # Errors
    /// [`ConfigError::DuplicateKey`] if the digest or the id is already present.
    pub fn insert_digest(
        &self,
        digest: KeyDigest,
        record: ApiKeyRecord,
    ) -> Result<(), ConfigError> {
        let mut buckets = self.buckets.write().unwrap_or_else(PoisonError::into_inner);
        let taken = buckets
            .values()
            .flatten()
            .any(|entry| entry.record.id == record.id || entry.digest == digest);
        if taken {
            return Err(ConfigError::DuplicateKey);
        }
        buckets
            .entry(digest.bucket())
            .or_default()
            .push(Entry { digest, record });
        Ok(())
    }

    /// Revokes every key of application `id`; returns whether one existed.
    /// Requests with a revoked key get 401 from then on.
    pub fn revoke(&self, id: &ApiKeyId) -> bool {
        let mut buckets = self.buckets.write().unwrap_or_else(PoisonError::into_inner);
        let mut removed = false;
        buckets.retain(|_, entries| {
            let before = entries.len();
            entries.retain(|entry| entry.record.id != *id);
            removed |= entries.len() != before;
            !entries.is_empty()
        });
        removed
    }

    /// How many keys the store holds.
    pub fn len(&self) -> usize {
        let buckets = self.buckets.read().unwrap_or_else(PoisonError::into_inner);
        buckets.values().map(Vec::len).sum()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn find(&self, digest: &KeyDigest) -> Option<ApiKeyRecord> {
        let buckets = self.buckets.read().unwrap_or_else(PoisonError::into_inner);
        let entries = buckets.get(&digest.bucket())?;
        // Every entry of the bucket is compared, without an early exit.
        let mut found: Option<&Entry> = None;
        for entry in entries {
            let same: Choice = entry.digest.0.ct_eq(&digest.0);
            if bool::from(same) {
                found = Some(entry);
            }
        }
        found.map(|entry| entry.record.clone())
    }
}

impl fmt::Debug for InMemoryKeyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryKeyStore")
            .field("keys", &self.len())
            .finish()
    }
}

impl KeyStore for InMemoryKeyStore {
    fn lookup(
        &self,
        digest: &KeyDigest,
    ) -> BoxFuture<'static, Result<Option<ApiKeyRecord>, StoreError>> {
        Box::pin(ready(Ok(self.find(digest))))
    }
}

/// Two stores asked in turn: a key `first` does not know is looked up in
/// `second` (a few keys from the configuration in memory, the issued ones
/// on Redis). A store error of either is the answer: never a refusal.
#[derive(Clone, Debug)]
pub struct ChainedKeyStore<A, B> {
    first: A,
    second: B,
}

impl<A: KeyStore, B: KeyStore + Clone> ChainedKeyStore<A, B> {
    /// `first`, then `second`.
    pub fn new(first: A, second: B) -> Self {
        Self { first, second }
    }
}

impl<A: KeyStore, B: KeyStore + Clone> KeyStore for ChainedKeyStore<A, B> {
    fn lookup(
        &self,
        digest: &KeyDigest,
    ) -> BoxFuture<'static, Result<Option<ApiKeyRecord>, StoreError>> {
        let first = self.first.lookup(digest);
        let second = self.second.clone();
        let digest = *digest;
        Box::pin(async move {
            match first.await? {
                Some(record) => Ok(Some(record)),
                None => second.lookup(&digest).await,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    fn id(name: &str) -> ApiKeyId {
        ApiKeyId::new(name).unwrap()
    }

    #[test]
    fn finds_a_key_by_its_digest() {
        let store = InMemoryKeyStore::new();
        store
            .insert("0123456789abcdef-app", ApiKeyRecord::new(id("app")))
            .unwrap();
        let found = store.find(&KeyDigest::of(b"0123456789abcdef-app")).unwrap();
        assert_eq!(found.id, id("app"));
        assert!(
            store
                .find(&KeyDigest::of(b"0123456789abcdef-xxx"))
                .is_none()
        );
    }

    #[test]
    fn short_keys_are_refused() {
        let store = InMemoryKeyStore::new();
        let err = store
            .insert("short", ApiKeyRecord::new(id("app")))
            .unwrap_err();
        assert!(matches!(err, ConfigError::KeyTooShort { .. }));
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let store = InMemoryKeyStore::new();
        store
            .insert("0123456789abcdef-one", ApiKeyRecord::new(id("app")))
            .unwrap();
        let err = store
            .insert("0123456789abcdef-two", ApiKeyRecord::new(id("app")))
            .unwrap_err();
        assert!(matches!(err, ConfigError::DuplicateKey));
    }

    #[test]
    fn revoked_keys_are_not_found() {
        let store = InMemoryKeyStore::new();
        store
            .insert("0123456789abcdef-app", ApiKeyRecord::new(id("app")))
            .unwrap();
        assert!(store.revoke(&id("app")));
        assert!(store.is_empty());
        assert!(
            store
                .find(&KeyDigest::of(b"0123456789abcdef-app"))
                .is_none()
        );
    }

    #[test]
    fn an_arc_dyn_key_store_is_a_key_store() {
        fn found(store: &impl KeyStore, secret: &[u8]) -> Option<ApiKeyRecord> {
            let lookup = store.lookup(&KeyDigest::of(secret));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            match std::pin::pin!(lookup).poll(&mut cx) {
                std::task::Poll::Ready(found) => found.unwrap(),
                std::task::Poll::Pending => unreachable!("in memory never waits"),
            }
        }
        let memory = InMemoryKeyStore::new();
        memory
            .insert("0123456789abcdef-app", ApiKeyRecord::new(id("app")))
            .unwrap();
        let chosen: Arc<dyn KeyStore> = Arc::new(memory);
        assert_eq!(
            found(&chosen, b"0123456789abcdef-app").unwrap().id,
            id("app")
        );
        assert!(found(&chosen, b"0123456789abcdef-xxx").is_none());
    }

    #[test]
    fn a_chain_finds_a_key_in_either_store_and_the_first_wins() {
        fn found(store: &impl KeyStore, secret: &[u8]) -> Option<ApiKeyId> {
            let lookup = store.lookup(&KeyDigest::of(secret));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            match std::pin::pin!(lookup).poll(&mut cx) {
                std::task::Poll::Ready(found) => found.unwrap().map(|record| record.id),
                std::task::Poll::Pending => unreachable!("in memory never waits"),
            }
        }
        let (first, second) = (InMemoryKeyStore::new(), InMemoryKeyStore::new());
        first
            .insert("0123456789abcdef-one", ApiKeyRecord::new(id("one")))
            .unwrap();
        second
            .insert("0123456789abcdef-two", ApiKeyRecord::new(id("two")))
            .unwrap();
        second
            .insert("0123456789abcdef-one", ApiKeyRecord::new(id("shadowed")))
            .unwrap();
        let chain = ChainedKeyStore::new(first, second);
        assert_eq!(found(&chain, b"0123456789abcdef-one"), Some(id("one")));
        assert_eq!(found(&chain, b"0123456789abcdef-two"), Some(id("two")));
        assert_eq!(found(&chain, b"0123456789abcdef-xxx"), None);
    }

    #[test]
    fn debug_shows_no_digest() {
        let digest = KeyDigest::of(b"0123456789abcdef-app");
        assert_eq!(format!("{digest:?}"), "KeyDigest(<redacted>)");
    }
}

//! Where PATs and sessions live: async traits, so Redis or SQL can back them,
//! with in-memory implementations.
//!
//! Every method that changes more than one record is one call, so a networked
//! store can make it atomic (a transaction or a script): nothing here assumes
//! one process. Both traits are dyn-compatible (every method returns a
//! [`BoxFuture`]) and `Arc<dyn PatStore>` / `Arc<dyn SessionStore>` implement
//! them, so a server picks memory or Redis at start.

use std::collections::HashMap;
use std::future::ready;
use std::sync::{Mutex, MutexGuard, PoisonError};

use alloy_primitives::Address;

use super::pat::SecretDigest;
use crate::store::{BoxFuture, StoreError};
use crate::wallet_jwt::ScopeSet;

/// Why a PAT stopped working.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// Its owner revoked it.
    Revoked,
    /// It was rotated: a newer token of its family replaced it.
    Rotated,
    /// A rotated token of its family was used again, so the family was revoked.
    FamilyReuse,
}

/// What a store keeps of a PAT: never the token, only its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatRecord {
    /// Public id (numeric string).
    pub id: String,
    /// The owner's label.
    pub label: String,
    /// The wallet it acts for.
    pub wallet: Address,
    /// What the JWTs minted from it may do.
    pub scopes: ScopeSet,
    /// Creation, Unix seconds.
    pub created_at: u64,
    /// Expiry, Unix seconds (required).
    pub expires_at: u64,
    /// Last exchange, Unix seconds (updated at most every few minutes).
    pub last_used_at: Option<u64>,
    /// Revocation time, Unix seconds.
    pub revoked_at: Option<u64>,
    /// Why it was revoked.
    pub revoked_because: Option<Revocation>,
    /// Shared by a token and all its rotations.
    pub family_id: String,
    /// SHA-256 of the token.
    pub digest: SecretDigest,
}

impl PatRecord {
    /// Neither revoked nor expired at `now`.
    pub fn is_active(&self, now: u64) -> bool {
        self.revoked_at.is_none() && now < self.expires_at
    }
}

/// The outcome of [`PatStore::rotate`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RotateOutcome {
    /// The old token was revoked and the new one stored.
    Rotated,
    /// No token of that id belongs to the wallet, or it is no longer active.
    NotActive,
}

/// PAT storage.
pub trait PatStore: Send + Sync + 'static {
    /// Stores a new record.
    fn insert(&self, record: PatRecord) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The record whose token has `digest`, in any state.
    fn find_by_digest<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>>;

    /// Every record of `wallet`, in any state, oldest first.
    fn list(&self, wallet: Address) -> BoxFuture<'_, Result<Vec<PatRecord>, StoreError>>;

    /// Revokes token `id` of `wallet`; the record as it now is, or `None`.
    fn revoke<'a>(
        &'a self,
        wallet: Address,
        id: &'a str,
        because: Revocation,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>>;

    /// Atomically: if token `old_id` of `new.wallet` is active at `now`, marks
    /// it rotated and stores `new`.
    fn rotate<'a>(
        &'a self,
        old_id: &'a str,
        new: PatRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<RotateOutcome, StoreError>>;

    /// Revokes every active token of `family_id`.
    fn revoke_family<'a>(
        &'a self,
        family_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Records a use of token `id` at `now`.
    fn touch<'a>(&'a self, id: &'a str, now: u64) -> BoxFuture<'a, Result<(), StoreError>>;
}

forward_to_arc! { PatStore {
    fn insert(&self, record: PatRecord) -> BoxFuture<'_, Result<(), StoreError>>;
    fn find_by_digest<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>>;
    fn list(&self, wallet: Address) -> BoxFuture<'_, Result<Vec<PatRecord>, StoreError>>;
    fn revoke<'a>(
        &'a self,
        wallet: Address,
        id: &'a str,
        because: Revocation,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>>;
    fn rotate<'a>(
        &'a self,
        old_id: &'a str,
        new: PatRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<RotateOutcome, StoreError>>;
    fn revoke_family<'a>(
        &'a self,
        family_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn touch<'a>(&'a self, id: &'a str, now: u64) -> BoxFuture<'a, Result<(), StoreError>>;
}}

/// PATs in a mutex-guarded map; for one process and for tests.
#[derive(Debug, Default)]
pub struct InMemoryPatStore {
    records: Mutex<Vec<PatRecord>>,
}

impl InMemoryPatStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn records(&self) -> MutexGuard<'_, Vec<PatRecord>> {
        // Every change is a single assignment, so a poisoned lock holds no half-update.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PatStore for InMemoryPatStore {
    fn insert(&self, record: PatRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        self.records().push(record);
        Box::pin(ready(Ok(())))
    }

    fn find_by_digest<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>> {
        let found = self
            .records()
            .iter()
            .find(|record| record.digest == *digest)
            .cloned();
        Box::pin(ready(Ok(found)))
    }

    fn list(&self, wallet: Address) -> BoxFuture<'_, Result<Vec<PatRecord>, StoreError>> {
        let listed = self
            .records()
            .iter()
            .filter(|record| record.wallet == wallet)
            .cloned()
            .collect();
        Box::pin(ready(Ok(listed)))
    }

    fn revoke<'a>(
        &'a self,
        wallet: Address,
        id: &'a str,
        because: Revocation,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<PatRecord>, StoreError>> {
        let mut records = self.records();
        let found = records
            .iter_mut()
            .find(|record| record.wallet == wallet && record.id == id)
            .map(|record| {
                if record.revoked_at.is_none() {
                    record.revoked_at = Some(now);
                    record.revoked_because = Some(because);
                }
                record.clone()
            });
        Box::pin(ready(Ok(found)))
    }

    fn rotate<'a>(
        &'a self,
        old_id: &'a str,
        new: PatRecord,
        now: u64,
    ) -> BoxFuture<'a, Result<RotateOutcome, StoreError>> {
        let mut records = self.records();
        let old = records
            .iter_mut()
            .find(|record| record.id == old_id && record.wallet == new.wallet);
        let outcome = match old {
            Some(old) if old.is_active(now) => {
                old.revoked_at = Some(now);
                old.revoked_because = Some(Revocation::Rotated);
                records.push(new);
                RotateOutcome::Rotated
            }
            _ => RotateOutcome::NotActive,
        };
        Box::pin(ready(Ok(outcome)))
    }

    fn revoke_family<'a>(
        &'a self,
        family_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        for record in self.records().iter_mut() {
            if record.family_id == family_id && record.revoked_at.is_none() {
                record.revoked_at = Some(now);
                record.revoked_because = Some(Revocation::FamilyReuse);
            }
        }
        Box::pin(ready(Ok(())))
    }

    fn touch<'a>(&'a self, id: &'a str, now: u64) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Some(record) = self.records().iter_mut().find(|record| record.id == id) {
            record.last_used_at = Some(now);
        }
        Box::pin(ready(Ok(())))
    }
}

/// The secret half of a SIWE session: digests of its two cookies, never the
/// cookies, with their expiries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSecrets {
    /// Digest of the access cookie.
    pub access_digest: SecretDigest,
    /// Access cookie expiry, Unix seconds.
    pub access_expires_at: u64,
    /// Digest of the refresh cookie.
    pub refresh_digest: SecretDigest,
    /// Refresh cookie expiry, Unix seconds.
    pub refresh_expires_at: u64,
}

/// A SIWE session as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// The signed-in wallet.
    pub wallet: Address,
    /// Its cookies' digests and expiries.
    pub secrets: SessionSecrets,
}

/// Session storage.
pub trait SessionStore: Send + Sync + 'static {
    /// Stores a new session.
    fn insert(&self, session: SessionRecord) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The session whose access cookie has `digest`.
    fn find_by_access<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<SessionRecord>, StoreError>>;

    /// Atomically: if a session's refresh cookie has `refresh` and is unexpired
    /// at `now`, gives it the `fresh` cookies (the old ones stop working);
    /// the session's wallet, or `None`.
    fn rotate<'a>(
        &'a self,
        refresh: &'a SecretDigest,
        fresh: SessionSecrets,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<Address>, StoreError>>;

    /// Removes every session of `wallet` (sign-out everywhere).
    fn remove_wallet(&self, wallet: Address) -> BoxFuture<'_, Result<(), StoreError>>;
}

forward_to_arc! { SessionStore {
    fn insert(&self, session: SessionRecord) -> BoxFuture<'_, Result<(), StoreError>>;
    fn find_by_access<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<SessionRecord>, StoreError>>;
    fn rotate<'a>(
        &'a self,
        refresh: &'a SecretDigest,
        fresh: SessionSecrets,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<Address>, StoreError>>;
    fn remove_wallet(&self, wallet: Address) -> BoxFuture<'_, Result<(), StoreError>>;
}}

/// Sessions in a mutex-guarded map keyed by access digest; for one process
/// and for tests.
#[derive(Debug, Default)]
pub struct InMemorySessionStore {
    sessions: Mutex<HashMap<SecretDigest, SessionRecord>>,
}

impl InMemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<SecretDigest, SessionRecord>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SessionStore for InMemorySessionStore {
    fn insert(&self, session: SessionRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        self.sessions()
            .insert(session.secrets.access_digest, session);
        Box::pin(ready(Ok(())))
    }

    fn find_by_access<'a>(
        &'a self,
        digest: &'a SecretDigest,
    ) -> BoxFuture<'a, Result<Option<SessionRecord>, StoreError>> {
        Box::pin(ready(Ok(self.sessions().get(digest).cloned())))
    }

    fn rotate<'a>(
        &'a self,
        refresh: &'a SecretDigest,
        fresh: SessionSecrets,
        now: u64,
    ) -> BoxFuture<'a, Result<Option<Address>, StoreError>> {
        let mut sessions = self.sessions();
        let old_key = sessions
            .iter()
            .find(|(_, session)| {
                session.secrets.refresh_digest == *refresh
                    && now < session.secrets.refresh_expires_at
            })
            .map(|(key, _)| *key);
        let wallet = old_key.and_then(|key| sessions.remove(&key)).map(|old| {
            let wallet = old.wallet;
            sessions.insert(
                fresh.access_digest,
                SessionRecord {
                    wallet,
                    secrets: fresh,
                },
            );
            wallet
        });
        Box::pin(ready(Ok(wallet)))
    }

    fn remove_wallet(&self, wallet: Address) -> BoxFuture<'_, Result<(), StoreError>> {
        self.sessions()
            .retain(|_, session| session.wallet != wallet);
        Box::pin(ready(Ok(())))
    }
}

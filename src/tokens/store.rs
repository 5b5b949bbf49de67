//! Where PATs and sessions live: async traits, so Redis or SQL can back them,
//! with in-memory implementations.
//!
//! Every method that changes more than one record is one call, so a networked
//! store can make it atomic (a transaction or a script): nothing here assumes
//! one process.

use std::collections::HashMap;
use std::future::{Future, ready};
use std::sync::{Mutex, MutexGuard, PoisonError};

use alloy_primitives::Address;

use super::pat::SecretDigest;
use crate::store::StoreError;
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
    fn insert(&self, record: PatRecord) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The record whose token has `digest`, in any state.
    fn find_by_digest(
        &self,
        digest: &SecretDigest,
    ) -> impl Future<Output = Result<Option<PatRecord>, StoreError>> + Send;

    /// Every record of `wallet`, in any state, oldest first.
    fn list(
        &self,
        wallet: Address,
    ) -> impl Future<Output = Result<Vec<PatRecord>, StoreError>> + Send;

    /// Revokes token `id` of `wallet`; the record as it now is, or `None`.
    fn revoke(
        &self,
        wallet: Address,
        id: &str,
        because: Revocation,
        now: u64,
    ) -> impl Future<Output = Result<Option<PatRecord>, StoreError>> + Send;

    /// Atomically: if token `old_id` of `new.wallet` is active at `now`, marks
    /// it rotated and stores `new`.
    fn rotate(
        &self,
        old_id: &str,
        new: PatRecord,
        now: u64,
    ) -> impl Future<Output = Result<RotateOutcome, StoreError>> + Send;

    /// Revokes every active token of `family_id`.
    fn revoke_family(
        &self,
        family_id: &str,
        now: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Records a use of token `id` at `now`.
    fn touch(&self, id: &str, now: u64) -> impl Future<Output = Result<(), StoreError>> + Send;
}

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
    fn insert(&self, record: PatRecord) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.records().push(record);
        ready(Ok(()))
    }

    fn find_by_digest(
        &self,
        digest: &SecretDigest,
    ) -> impl Future<Output = Result<Option<PatRecord>, StoreError>> + Send {
        let found = self
            .records()
            .iter()
            .find(|record| record.digest == *digest)
            .cloned();
        ready(Ok(found))
    }

    fn list(
        &self,
        wallet: Address,
    ) -> impl Future<Output = Result<Vec<PatRecord>, StoreError>> + Send {
        let listed = self
            .records()
            .iter()
            .filter(|record| record.wallet == wallet)
            .cloned()
            .collect();
        ready(Ok(listed))
    }

    fn revoke(
        &self,
        wallet: Address,
        id: &str,
        because: Revocation,
        now: u64,
    ) -> impl Future<Output = Result<Option<PatRecord>, StoreError>> + Send {
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
        ready(Ok(found))
    }

    fn rotate(
        &self,
        old_id: &str,
        new: PatRecord,
        now: u64,
    ) -> impl Future<Output = Result<RotateOutcome, StoreError>> + Send {
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
        ready(Ok(outcome))
    }

    fn revoke_family(
        &self,
        family_id: &str,
        now: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        for record in self.records().iter_mut() {
            if record.family_id == family_id && record.revoked_at.is_none() {
                record.revoked_at = Some(now);
                record.revoked_because = Some(Revocation::FamilyReuse);
            }
        }
        ready(Ok(()))
    }

    fn touch(&self, id: &str, now: u64) -> impl Future<Output = Result<(), StoreError>> + Send {
        if let Some(record) = self.records().iter_mut().find(|record| record.id == id) {
            record.last_used_at = Some(now);
        }
        ready(Ok(()))
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
    fn insert(&self, session: SessionRecord)
    -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The session whose access cookie has `digest`.
    fn find_by_access(
        &self,
        digest: &SecretDigest,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Atomically: if a session's refresh cookie has `refresh` and is unexpired
    /// at `now`, gives it the `fresh` cookies (the old ones stop working);
    /// the session's wallet, or `None`.
    fn rotate(
        &self,
        refresh: &SecretDigest,
        fresh: SessionSecrets,
        now: u64,
    ) -> impl Future<Output = Result<Option<Address>, StoreError>> + Send;

    /// Removes every session of `wallet` (sign-out everywhere).
    fn remove_wallet(&self, wallet: Address)
    -> impl Future<Output = Result<(), StoreError>> + Send;
}

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
    fn insert(
        &self,
        session: SessionRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.sessions()
            .insert(session.secrets.access_digest, session);
        ready(Ok(()))
    }

    fn find_by_access(
        &self,
        digest: &SecretDigest,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send {
        ready(Ok(self.sessions().get(digest).cloned()))
    }

    fn rotate(
        &self,
        refresh: &SecretDigest,
        fresh: SessionSecrets,
        now: u64,
    ) -> impl Future<Output = Result<Option<Address>, StoreError>> + Send {
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
        ready(Ok(wallet))
    }

    fn remove_wallet(
        &self,
        wallet: Address,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.sessions()
            .retain(|_, session| session.wallet != wallet);
        ready(Ok(()))
    }
}

//! Where the data API keeps its state: in this process (the default), or in
//! one Redis that every replica shares (`DATA_API_REDIS_URL`, built with the
//! `redis` feature).
//!
//! Each store is an enum over the two backends, so the handlers and the
//! issuer have one concrete type whichever was configured.

#[cfg(feature = "redis")]
use walletgate::redis::{RedisPatStore, RedisRevocations, RedisSessionStore, RedisSiweNonceStore};
use walletgate::siwe::{InMemoryNonceStore, NonceConsumption, NonceFuture, NonceStore};
use walletgate::store::StoreError;
use walletgate::tokens::{
    InMemoryPatStore, InMemorySessionStore, PatRecord, PatStore, Revocation, RotateOutcome,
    SecretDigest, SessionRecord, SessionSecrets, SessionStore,
};

use walletgate::wallet_jwt::{InMemoryRevocations, RevocationCheck};

use crate::Config;

/// Calls the same method on whichever backend the enum holds.
macro_rules! each {
    ($store:expr, $inner:ident => $call:expr) => {
        match $store {
            Self::Memory($inner) => $call,
            #[cfg(feature = "redis")]
            Self::Redis($inner) => $call,
        }
    };
}

/// SIWE nonces.
pub(crate) enum Nonces {
    Memory(InMemoryNonceStore),
    #[cfg(feature = "redis")]
    Redis(RedisSiweNonceStore),
}

/// PATs.
pub(crate) enum Pats {
    Memory(InMemoryPatStore),
    #[cfg(feature = "redis")]
    Redis(RedisPatStore),
}

/// SIWE sessions.
pub(crate) enum Sessions {
    Memory(InMemorySessionStore),
    #[cfg(feature = "redis")]
    Redis(RedisSessionStore),
}

/// Revoked PATs, whose JWTs the verifier refuses.
pub(crate) enum Revocations {
    Memory(InMemoryRevocations),
    #[cfg(feature = "redis")]
    Redis(RedisRevocations),
}

/// Every store of the data API.
pub(crate) struct Stores {
    pub(crate) nonces: Nonces,
    pub(crate) pats: Pats,
    pub(crate) sessions: Sessions,
    pub(crate) revocations: Revocations,
}

impl Stores {
    /// In this process: one replica only.
    pub(crate) fn in_memory() -> Self {
        Self {
            nonces: Nonces::Memory(InMemoryNonceStore::new()),
            pats: Pats::Memory(InMemoryPatStore::new()),
            sessions: Sessions::Memory(InMemorySessionStore::new()),
            revocations: Revocations::Memory(InMemoryRevocations::new()),
        }
    }

    /// What `config` asks for: Redis when it names one, else in memory.
    ///
    /// The Redis connection is lazy: a replica starts while Redis is down and
    /// answers 503 on the routes that need it until Redis is back.
    pub(crate) fn from_config(config: &Config) -> Result<Self, String> {
        let Some(settings) = &config.redis else {
            return Ok(Self::in_memory());
        };
        #[cfg(feature = "redis")]
        {
            let conn = settings.open().map_err(|error| error.to_string())?;
            Ok(Self {
                nonces: Nonces::Redis(RedisSiweNonceStore::new(conn.clone())),
                pats: Pats::Redis(RedisPatStore::new(conn.clone())),
                sessions: Sessions::Redis(RedisSessionStore::new(conn.clone())),
                revocations: Revocations::Redis(RedisRevocations::new(conn)),
            })
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = settings;
            Err("DATA_API_REDIS_URL needs the data API built with the redis feature".to_owned())
        }
    }
}

impl NonceStore for Nonces {
    fn insert<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> NonceFuture<'a, ()> {
        each!(self, store => store.insert(nonce, now_unix_millis, expires_at_unix_millis))
    }

    fn consume<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
    ) -> NonceFuture<'a, NonceConsumption> {
        each!(self, store => store.consume(nonce, now_unix_millis))
    }
}

impl PatStore for Pats {
    async fn insert(&self, record: PatRecord) -> Result<(), StoreError> {
        each!(self, store => store.insert(record).await)
    }

    async fn find_by_digest(&self, digest: &SecretDigest) -> Result<Option<PatRecord>, StoreError> {
        each!(self, store => store.find_by_digest(digest).await)
    }

    async fn list(&self, wallet: alloy_primitives::Address) -> Result<Vec<PatRecord>, StoreError> {
        each!(self, store => store.list(wallet).await)
    }

    async fn revoke(
        &self,
        wallet: alloy_primitives::Address,
        id: &str,
        because: Revocation,
        now: u64,
    ) -> Result<Option<PatRecord>, StoreError> {
        each!(self, store => store.revoke(wallet, id, because, now).await)
    }

    async fn rotate(
        &self,
        old_id: &str,
        new: PatRecord,
        now: u64,
    ) -> Result<RotateOutcome, StoreError> {
        each!(self, store => store.rotate(old_id, new, now).await)
    }

    async fn revoke_family(&self, family_id: &str, now: u64) -> Result<(), StoreError> {
        each!(self, store => store.revoke_family(family_id, now).await)
    }

    async fn touch(&self, id: &str, now: u64) -> Result<(), StoreError> {
        each!(self, store => store.touch(id, now).await)
    }
}

impl SessionStore for Sessions {
    async fn insert(&self, session: SessionRecord) -> Result<(), StoreError> {
        each!(self, store => store.insert(session).await)
    }

    async fn find_by_access(
        &self,
        digest: &SecretDigest,
    ) -> Result<Option<SessionRecord>, StoreError> {
        each!(self, store => store.find_by_access(digest).await)
    }

    async fn rotate(
        &self,
        refresh: &SecretDigest,
        fresh: SessionSecrets,
        now: u64,
    ) -> Result<Option<alloy_primitives::Address>, StoreError> {
        each!(self, store => store.rotate(refresh, fresh, now).await)
    }

    async fn remove_wallet(&self, wallet: alloy_primitives::Address) -> Result<(), StoreError> {
        each!(self, store => store.remove_wallet(wallet).await)
    }
}

impl RevocationCheck for Revocations {
    async fn is_revoked(&self, client_id: &str, now: u64) -> Result<bool, StoreError> {
        each!(self, list => list.is_revoked(client_id, now).await)
    }

    async fn revoke(&self, client_id: &str, until: u64) -> Result<(), StoreError> {
        each!(self, list => list.revoke(client_id, until).await)
    }
}

//! Where the gateway keeps what its replicas must share: claimed, settling
//! and spent payment authorizations, paid answers kept for a resend, the
//! development ledger, paid image jobs, and `sign-in-with-x` entitlements.
//!
//! Without `GATEWAY_REDIS_URL` they live in this process (one replica). With
//! it they live in Redis under `GATEWAY_REDIS_PREFIX`, so any number of
//! replicas behind a load balancer settle one authorization once, share the
//! ledger, and recover a paid image job made on another replica. A Redis that
//! cannot answer within its timeout (250 ms) makes paid requests answer 503
//! `PAYMENT_VERIFICATION_UNAVAILABLE` (never served free, never charged);
//! the connection reconnects on its own when Redis is back.

use std::sync::Arc;

use walletgate::clock::SharedClock;
use walletgate::x402::{
    facilitator::{DevLedger, Ledger},
    server::{
        AnswerStore, EntitlementStore, InMemoryAnswerStore, InMemoryEntitlementStore,
        InMemoryNonceStore, NonceStore,
    },
};
#[cfg(feature = "redis")]
use {
    crate::catalogue::Catalogue,
    crate::images::redis_jobs::RedisJobs,
    walletgate::redis::{
        RedisAnswerStore, RedisConnection, RedisEntitlementStore, RedisLedger, RedisNonceStore,
    },
};

use crate::config::AnswerSettings;
use crate::images::jobs::{InMemoryJobs, JobStore};

/// The payment and job stores of one gateway process.
pub(crate) struct Stores {
    pub(crate) nonce_store: Arc<dyn NonceStore>,
    /// Paid answers kept for a resend (bounded per answer, and in memory in total).
    pub(crate) answer_store: Arc<dyn AnswerStore>,
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) jobs: Arc<dyn JobStore>,
    /// `sign-in-with-x` nonces spent, each for its life.
    pub(crate) spent_siwx_nonces: Arc<dyn walletgate::siwe::NonceStore>,
    /// `sign-in-with-x` entitlements (who paid for what), for the answer retention.
    pub(crate) entitlements: Arc<dyn EntitlementStore>,
}

impl Stores {
    /// This process's own stores, settling on `ledger`.
    pub(crate) fn in_memory(
        ledger: Arc<DevLedger>,
        clock: SharedClock,
        answers: &AnswerSettings,
    ) -> Self {
        Self {
            nonce_store: Arc::new(InMemoryNonceStore::new(clock.clone())),
            answer_store: Arc::new(
                InMemoryAnswerStore::new(clock.clone()).with_capacity_bytes(answers.store_bytes),
            ),
            entitlements: Arc::new(InMemoryEntitlementStore::new(clock)),
            ledger,
            jobs: Arc::new(InMemoryJobs::default()),
            spent_siwx_nonces: Arc::new(walletgate::siwe::InMemoryNonceStore::new()),
        }
    }

    /// Stores in the Redis of `conn`, shared by every replica on it (feature `redis`).
    ///
    /// The development accounts are funded once per Redis (a replica that
    /// starts later, or restarts, does not refill them), in the background
    /// until Redis answers: the gateway starts while Redis is down.
    #[cfg(feature = "redis")]
    pub(crate) fn redis(
        conn: &RedisConnection,
        catalogue: &Catalogue,
        clock: SharedClock,
        answers: &AnswerSettings,
    ) -> Self {
        let ledger = RedisLedger::new(conn.clone());
        let funding = ledger.clone();
        tokio::spawn(async move {
            while let Err(error) = funding.fund_dev_accounts().await {
                tracing::warn!(%error, "Redis: the development accounts are not funded yet");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        });
        Self {
            // The claim reads ahead for the ledger's check, the transfer marks spent: two round trips.
            nonce_store: Arc::new(
                RedisNonceStore::new(conn.clone(), clock.clone()).with_ledger_prefetch(&ledger),
            ),
            // Bounded per answer here; Redis's own maxmemory policy bounds the total.
            answer_store: Arc::new(
                RedisAnswerStore::new(conn.clone(), clock.clone())
                    .with_max_answer_bytes(answers.limits.max_answer_bytes),
            ),
            entitlements: Arc::new(RedisEntitlementStore::new(conn.clone(), clock)),
            ledger: Arc::new(ledger),
            jobs: Arc::new(RedisJobs::new(conn.clone(), catalogue.clone())),
            spent_siwx_nonces: Arc::new(walletgate::redis::RedisSiweNonceStore::new(conn.clone())),
        }
    }
}

//! `sign-in-with-x` entitlements on Redis: [`RedisEntitlementStore`].
//!
//! One key per payer and operation, `{prefix}:x402-entitlement:{payer}:{operation}`,
//! holding the settled receipt as JSON, expiring with the answer retention
//! (relative to the store's clock, so replicas' clocks never need to agree
//! with Redis's). Redis's own `maxmemory` policy bounds the total.

use super::RedisConnection;
use super::spent::{receipt_json, receipt_of};
use crate::clock::SharedClock;
use crate::store::{BoxFuture, StoreError};
use crate::x402::server::PaymentReceipt;
use crate::x402::server::entitlements::{EntitlementStore, entitlement_key};

const SEAM: &str = "x402-entitlement";

/// Entitlements in Redis, shared by every replica.
#[derive(Clone)]
pub struct RedisEntitlementStore {
    conn: RedisConnection,
    clock: SharedClock,
}

impl std::fmt::Debug for RedisEntitlementStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisEntitlementStore")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

impl RedisEntitlementStore {
    /// A store on `conn`; `clock` turns the absolute times it is given into Redis lifetimes.
    pub fn new(conn: RedisConnection, clock: SharedClock) -> Self {
        Self { conn, clock }
    }
}

impl EntitlementStore for RedisEntitlementStore {
    fn entitle<'a>(
        &'a self,
        operation: &'a [u8; 32],
        receipt: &'a PaymentReceipt,
        until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let redis_key = (self.conn).key(SEAM, &entitlement_key(receipt.payer(), operation));
        let ttl = super::ttl_secs(&self.clock, until_unix_secs);
        let value = receipt_json(receipt).to_string();
        Box::pin(async move {
            self.conn
                .set_expiring("x402 entitlement record", redis_key, value, ttl)
                .await
        })
    }

    fn entitlement<'a>(
        &'a self,
        payer: &'a str,
        operation: &'a [u8; 32],
    ) -> BoxFuture<'a, Result<Option<PaymentReceipt>, StoreError>> {
        let redis_key = self.conn.key(SEAM, &entitlement_key(payer, operation));
        Box::pin(async move {
            let found: Option<String> = self
                .conn
                .call("x402 entitlement read", |mut c| async move {
                    redis::cmd("GET").arg(redis_key).query_async(&mut c).await
                })
                .await?;
            let Some(found) = found else {
                return Ok(None);
            };
            serde_json::from_str(&found)
                .ok()
                .and_then(|body| receipt_of(&body))
                .map(Some)
                .ok_or_else(|| StoreError::new("x402 entitlement store: unreadable entry"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::wire::{AtomicAmount, Network};

    #[test]
    fn a_recorded_receipt_reads_back_whole() {
        let receipt = PaymentReceipt::new(
            "0xaa".into(),
            AtomicAmount::new(1000),
            Network::parse("eip155:84532").unwrap(),
            "auth".into(),
        )
        .settled("0xfeed".into());
        let value = receipt_json(&receipt).to_string();
        let body = serde_json::from_str(&value).unwrap();
        assert_eq!(receipt_of(&body), Some(receipt));
    }
}

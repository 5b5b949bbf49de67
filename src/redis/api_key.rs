//! The API-key quota on Redis: [`RedisQuotas`], a [`QuotaStore`] every
//! replica of a data API shares.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::RedisConnection;
use crate::api_key::{ApiKeyId, KeyQuota, QuotaStore, QuotaVerdict};
use crate::store::{BoxFuture, StoreError};

/// The GCRA step of [`KeyQuota`], in Lua.
const SPEND: &str = include_str!("api_key.lua");

/// The largest number of microseconds handed to the script (Lua numbers are
/// doubles: integers are exact below 2^53).
const MAX_MICROS: u64 = 1 << 52;

/// Per-key quota buckets on Redis.
///
/// The rule of [`KeyQuota`] (a GCRA bucket: a burst of `requests`, then one
/// every `window / requests`), the same arithmetic as the in-memory
/// [`InMemoryQuotas`](crate::api_key::InMemoryQuotas), in one Lua script: one
/// round trip per request, on the Redis server's clock (`TIME`), so one key's
/// quota holds across every replica whatever their clocks say. The bucket is
/// one integer (its theoretical arrival time) under
/// `{prefix}:api_quota:{requests}/{window in µs}:{key id}`, so a key whose
/// quota changes starts a fresh bucket, and it expires as soon as the bucket
/// is full again. Time is counted in microseconds (the in-memory store in
/// milliseconds).
///
/// Redis unreachable or slower than the connection's timeout: the check is a
/// [`StoreError`], which [`ApiKeyLayer`](crate::api_key::ApiKeyLayer)
/// answers with 503 in the Area A envelope; the request is never served
/// without its quota.
#[derive(Clone)]
pub struct RedisQuotas {
    conn: RedisConnection,
    script: Arc<Script>,
}

impl fmt::Debug for RedisQuotas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisQuotas")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

impl RedisQuotas {
    /// Quota buckets on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self {
            conn,
            script: Arc::new(Script::new(SPEND)),
        }
    }

    fn key(&self, id: &ApiKeyId, quota: KeyQuota) -> String {
        let window_micros = quota.window().as_micros().min(u128::from(MAX_MICROS));
        let bucket = format!("{}/{window_micros}:{id}", quota.requests());
        self.conn.key("api_quota", &bucket)
    }

    /// The decision at the server's time, or at `now_unix_micros` when given
    /// (the crate's tests only).
    fn spend(
        &self,
        id: &ApiKeyId,
        quota: KeyQuota,
        now_unix_micros: Option<u64>,
    ) -> BoxFuture<'static, Result<QuotaVerdict, StoreError>> {
        let key = self.key(id, quota);
        // At least 1 µs, as governor keeps it at least 1 ns.
        let micros = |d: Duration| {
            u64::try_from(d.as_micros())
                .unwrap_or(u64::MAX)
                .clamp(1, MAX_MICROS)
        };
        let interval = micros(quota.interval());
        let tolerance = interval
            .saturating_mul(u64::from(quota.requests().get() - 1))
            .min(MAX_MICROS);
        let script = Arc::clone(&self.script);
        let conn = self.conn.clone();
        Box::pin(async move {
            let (admitted, wait_or_remaining): (i64, i64) = conn
                .call("API key quota check on Redis failed", |mut c| async move {
                    let mut invocation = script.key(key);
                    invocation.arg(interval).arg(tolerance);
                    if let Some(now) = now_unix_micros {
                        invocation.arg(now);
                    }
                    invocation.invoke_async(&mut c).await
                })
                .await?;
            let malformed = || StoreError::new("API key quota script answered out of range");
            match admitted {
                1 => Ok(QuotaVerdict::Allowed {
                    remaining: u32::try_from(wait_or_remaining).map_err(|_| malformed())?,
                }),
                0 => {
                    let wait = u64::try_from(wait_or_remaining).map_err(|_| malformed())?;
                    Ok(QuotaVerdict::Exceeded {
                        retry_after: Duration::from_micros(wait),
                    })
                }
                _ => Err(malformed()),
            }
        })
    }
}

impl QuotaStore for RedisQuotas {
    fn check(
        &self,
        id: &ApiKeyId,
        quota: KeyQuota,
    ) -> BoxFuture<'static, Result<QuotaVerdict, StoreError>> {
        self.spend(id, quota, None)
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::api_key::InMemoryQuotas;
    use crate::clock::FakeClock;
    use crate::redis::{RedisConfig, redis_support};

    const T0_SECS: u64 = 1_800_000_000;

    fn store(test: &str) -> RedisQuotas {
        let config = RedisConfig::new(redis_support::shared_url())
            .with_prefix(redis_support::unique_prefix(test))
            .with_timeout(Duration::from_secs(2));
        RedisQuotas::new(RedisConnection::open(&config).unwrap())
    }

    /// xorshift64*.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The script and governor (the in-memory store) agree request by
    /// request, `Retry-After` included, over random bursts and pauses.
    #[tokio::test]
    async fn the_script_is_the_in_memory_rule() {
        let nz = |n| NonZeroU32::new(n).unwrap();
        for (seed, quota) in [
            (1u64, KeyQuota::per_minute(nz(2))),
            (2, KeyQuota::new(nz(4), Duration::from_secs(3)).unwrap()),
            // Intervals in whole microseconds: the script counts in µs, governor in ns.
            (3, KeyQuota::new(nz(4), Duration::from_secs(2)).unwrap()),
        ] {
            let redis = store("gcra");
            let clock = FakeClock::at_unix_secs(T0_SECS);
            let memory = InMemoryQuotas::new(Arc::new(clock.clone()));
            let id = ApiKeyId::new("app:one").unwrap();
            let mut rng = 0x9e37_79b9_7f4a_7c15 ^ seed;
            let mut now_millis = T0_SECS * 1000;
            let (mut allowed, mut refused) = (0, 0);
            for step in 0..400 {
                let step_millis = match next(&mut rng) % 10 {
                    0..=6 => next(&mut rng) % 300,
                    7..=8 => next(&mut rng) % 5_000,
                    _ => next(&mut rng) % 90_000,
                };
                clock.advance(Duration::from_millis(step_millis));
                now_millis += step_millis;
                let expected = memory.check_now(&id, quota);
                let got = redis
                    .spend(&id, quota, Some(now_millis * 1000))
                    .await
                    .unwrap();
                assert_eq!(got, expected, "seed {seed} step {step}");
                match got {
                    QuotaVerdict::Allowed { .. } => allowed += 1,
                    QuotaVerdict::Exceeded { .. } => refused += 1,
                }
            }
            assert!(
                allowed > 30 && refused > 30,
                "seed {seed}: {allowed}/{refused}"
            );
        }
    }

    #[tokio::test]
    async fn a_changed_quota_is_a_fresh_bucket_and_buckets_expire_when_full() {
        let redis = store("gcra_keys");
        let id = ApiKeyId::new("app").unwrap();
        let one = KeyQuota::per_minute(NonZeroU32::MIN);
        let now = T0_SECS * 1_000_000;
        assert_eq!(
            redis.spend(&id, one, Some(now)).await.unwrap(),
            QuotaVerdict::Allowed { remaining: 0 }
        );
        assert_eq!(
            redis.spend(&id, one, Some(now)).await.unwrap(),
            QuotaVerdict::Exceeded {
                retry_after: Duration::from_secs(60)
            }
        );
        let five = KeyQuota::per_minute(NonZeroU32::new(5).unwrap());
        assert_eq!(
            redis.spend(&id, five, Some(now)).await.unwrap(),
            QuotaVerdict::Allowed { remaining: 4 }
        );
        let ttl_millis: i64 = redis
            .conn
            .call("pttl", |mut c| {
                let key = redis.key(&id, five);
                async move { redis::cmd("PTTL").arg(key).query_async(&mut c).await }
            })
            .await
            .unwrap();
        // Full again one interval (12 s) after the only request.
        assert!((11_000..=12_000).contains(&ttl_millis), "{ttl_millis}");
    }
}

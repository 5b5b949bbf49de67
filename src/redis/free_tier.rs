//! The free tier on Redis: [`RedisFreeTier`], a [`FreeTierStore`] every
//! replica of a gateway shares.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::RedisConnection;
use crate::envelope::RateLimitInfo;
use crate::free_tier::{ClientKey, FreeTierQuotas, FreeTierStore, Verdict};
use crate::store::{BoxFuture, StoreError};

/// The Lua port of [`ClientWindows::decide`](crate::free_tier::ClientWindows::decide).
const DECIDE: &str = include_str!("free_tier.lua");

/// Both free-tier quotas of every client, decided on Redis.
///
/// The same rule as [`InMemoryLimiter`](crate::free_tier::InMemoryLimiter)
/// ([`ClientWindows`](crate::free_tier::ClientWindows): at most N in any
/// window of the quota's length, refusing early by at most one sub-window),
/// with the same 88 bytes of state per client, run as one Lua script: one
/// round trip per free request, both quotas counted or neither, whatever
/// replica asks. Time is the Redis server's (`TIME` inside the script), so
/// replicas whose clocks disagree still apply one sliding window. A client's
/// key (`{prefix}:free_tier:{network}`) expires when its newest request has
/// left both windows (an hour and a second after it, by default).
///
/// Redis unreachable or slower than the connection's timeout: the check is a
/// [`StoreError`], which [`FreeTierLimitLayer`](crate::free_tier::FreeTierLimitLayer)
/// answers with 503 `RATE_LIMIT_UNAVAILABLE`: free requests are never served
/// unlimited. The connection reconnects by itself when Redis is back.
///
/// Memory on Redis is bounded by the expiry: one 88-byte value per client
/// seen in the last hour. [`Verdict::AtCapacity`] is never answered (Redis's
/// own `maxmemory` policy is the operator's cap).
#[derive(Clone)]
pub struct RedisFreeTier {
    conn: RedisConnection,
    quotas: FreeTierQuotas,
    script: Arc<Script>,
}

impl fmt::Debug for RedisFreeTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFreeTier")
            .field("conn", &self.conn)
            .field("quotas", &self.quotas)
            .finish_non_exhaustive()
    }
}

impl RedisFreeTier {
    /// `quotas` for every client, on `conn`.
    pub fn new(conn: RedisConnection, quotas: FreeTierQuotas) -> Self {
        Self {
            conn,
            quotas,
            script: Arc::new(Script::new(DECIDE)),
        }
    }

    /// The quotas.
    pub fn quotas(&self) -> FreeTierQuotas {
        self.quotas
    }

    /// The Redis key of `client`.
    fn key(&self, client: ClientKey) -> String {
        self.conn.key("free_tier", &client.to_string())
    }

    /// The decision at the server's time, or at `now_unix_millis` when given
    /// (the crate's tests compare the script with the Rust rule on chosen
    /// times; production never passes one).
    fn decide(
        &self,
        client: ClientKey,
        now_unix_millis: Option<u64>,
    ) -> BoxFuture<'static, Result<Verdict, StoreError>> {
        let key = self.key(client);
        let quotas = self.quotas;
        let script = Arc::clone(&self.script);
        let conn = self.conn.clone();
        Box::pin(async move {
            let reply: [i64; 5] = conn
                .call("free-tier check on Redis failed", |mut c| async move {
                    let mut invocation = script.key(key);
                    invocation.arg(quotas.per_minute()).arg(quotas.per_hour());
                    for geometry in quotas.geometries() {
                        invocation
                            .arg(geometry.window_millis)
                            .arg(geometry.slot_millis)
                            .arg(geometry.unit_millis)
                            .arg(geometry.offset_bits);
                    }
                    if let Some(now) = now_unix_millis {
                        invocation.arg(now);
                    }
                    invocation.invoke_async(&mut c).await
                })
                .await?;
            verdict(reply)
        })
    }
}

/// The script's `{admitted, limit, remaining, reset, retry after}`.
fn verdict(
    [admitted, limit, remaining, reset, retry_after]: [i64; 5],
) -> Result<Verdict, StoreError> {
    let malformed = || StoreError::new("free-tier script answered out of range");
    let limit = u32::try_from(limit).map_err(|_| malformed())?;
    let remaining = u32::try_from(remaining).map_err(|_| malformed())?;
    let reset_unix_millis = u64::try_from(reset).map_err(|_| malformed())?;
    let rate_limit = RateLimitInfo {
        limit,
        remaining,
        reset_unix_millis,
    };
    match admitted {
        1 => Ok(Verdict::Allowed { rate_limit }),
        0 => Ok(Verdict::Refused {
            retry_after: Duration::from_millis(
                u64::try_from(retry_after).map_err(|_| malformed())?,
            ),
            rate_limit,
        }),
        _ => Err(malformed()),
    }
}

impl FreeTierStore for RedisFreeTier {
    fn check(&self, key: ClientKey) -> BoxFuture<'static, Result<Verdict, StoreError>> {
        self.decide(key, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::free_tier::{ClientWindows, KeyPrefixes};
    use crate::redis::{RedisConfig, redis_support};

    const T0: u64 = 1_800_000_000_000;

    fn store(test: &str, quotas: FreeTierQuotas) -> RedisFreeTier {
        let config = RedisConfig::new(redis_support::shared_url())
            .with_prefix(redis_support::unique_prefix(test))
            .with_timeout(Duration::from_secs(2));
        RedisFreeTier::new(RedisConnection::open(&config).unwrap(), quotas)
    }

    fn client(n: u32) -> ClientKey {
        KeyPrefixes::default().key(std::net::Ipv4Addr::from(0xc633_6400 + n).into())
    }

    /// xorshift64*.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The script and [`ClientWindows::decide`] give the same verdicts at the
    /// same times, over random bursts, pauses, a clock stepping back and
    /// both window sizes, and leave the same 88 bytes.
    #[tokio::test]
    async fn the_script_is_the_rust_rule() {
        let small = FreeTierQuotas::new(3, 5)
            .unwrap()
            .with_windows(Duration::from_secs(2), Duration::from_secs(6))
            .unwrap();
        for (seed, quotas) in [
            (1u64, FreeTierQuotas::new(10, 60).unwrap()),
            (2, FreeTierQuotas::new(5, 20).unwrap()),
            (3, small),
        ] {
            let redis = store("script_is_rule", quotas);
            let mut rng = 0x9e37_79b9_7f4a_7c15 ^ seed;
            let mut rust = ClientWindows::EMPTY;
            let mut now = T0;
            let mut refused = 0;
            for step in 0..600 {
                now = match next(&mut rng) % 10 {
                    0..=5 => now + next(&mut rng) % 1000,
                    6..=7 => now + next(&mut rng) % 15_000,
                    8 => now.saturating_sub(next(&mut rng) % 5_000),
                    _ => now + next(&mut rng) % 1_200_000,
                };
                let expected = rust.decide(quotas, now);
                let got = redis.decide(client(1), Some(now)).await.unwrap();
                assert_eq!(got, expected, "seed {seed} step {step} at {now}");
                refused += usize::from(matches!(got, Verdict::Refused { .. }));
            }
            assert!(
                (50..550).contains(&refused),
                "seed {seed}: {refused} refused"
            );
            let bytes: Vec<u8> = redis
                .conn
                .call("get", |mut c| {
                    let key = redis.key(client(1));
                    async move { redis::cmd("GET").arg(key).query_async(&mut c).await }
                })
                .await
                .unwrap();
            assert_eq!(bytes, rust.to_bytes().to_vec(), "seed {seed}");
        }
    }

    #[tokio::test]
    async fn keys_expire_once_the_newest_request_left_both_windows() {
        let redis = store("expiry", FreeTierQuotas::default());
        redis.check(client(2)).await.unwrap();
        let ttl_millis: i64 = redis
            .conn
            .call("pttl", |mut c| {
                let key = redis.key(client(2));
                async move { redis::cmd("PTTL").arg(key).query_async(&mut c).await }
            })
            .await
            .unwrap();
        // An hour, plus at most one 1 s unit of rounding and 1 ms.
        assert!(
            (3_600_000..=3_601_001).contains(&ttl_millis),
            "{ttl_millis}"
        );
    }

    #[test]
    fn a_reply_out_of_range_is_a_store_error() {
        assert!(verdict([2, 30, 0, 0, 0]).is_err());
        assert!(verdict([1, -1, 0, 0, 0]).is_err());
        assert_eq!(
            verdict([0, 30, 0, 5, 1500]).unwrap(),
            Verdict::Refused {
                retry_after: Duration::from_millis(1500),
                rate_limit: RateLimitInfo {
                    limit: 30,
                    remaining: 0,
                    reset_unix_millis: 5
                }
            }
        );
    }
}

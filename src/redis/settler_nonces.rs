//! The settler key's transaction nonces in Redis: [`RedisNonceAllocator`]
//! (features `redis` + `evm-settler`), so several settler processes share
//! one key without sending two transactions with one nonce.
//!
//! | key | holds |
//! |---|---|
//! | `{prefix}:settler-nonce:{<account>}` | hash: `next`, the next nonce never handed out |
//! | `{prefix}:settler-nonce:{<account>}:given-back` | sorted set of nonces given back, not taken since |
//!
//! Both keys carry the account as a hash tag (one slot on a Redis Cluster),
//! and every operation is one Lua script: atomic across replicas. They live
//! a day after their last change; a counter gone is seeded again from the
//! node's pending count, which is then exact.

use std::sync::LazyLock;

use alloy_primitives::Address;
use redis::Script;

use super::RedisConnection;
use crate::store::{BoxFuture, StoreError};
use crate::x402::facilitator::evm_settler::NonceAllocator;

/// How long an idle account's nonces are kept, in seconds.
const IDLE_SECS: u64 = 24 * 60 * 60;

/// The lowest nonce given back, else `next` (then raised); -1 unseeded.
static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local gap = redis.call('ZRANGE', KEYS[2], 0, 0)
if gap[1] then
  redis.call('ZREM', KEYS[2], gap[1])
  return tonumber(gap[1])
end
local next = redis.call('HGET', KEYS[1], 'next')
if not next then return -1 end
redis.call('HSET', KEYS[1], 'next', tonumber(next) + 1)
redis.call('EXPIRE', KEYS[1], ARGV[1])
return tonumber(next)",
    )
});

/// `next` raised to at least `ARGV[2]`; given-back nonces below it dropped.
static SEED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local next = redis.call('HGET', KEYS[1], 'next')
if (not next) or tonumber(next) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'next', ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[2])
return 1",
    )
});

/// `ARGV[2]` given back: below `next`, kept for the next take; at the top,
/// `next` comes down past it and any given back just below.
static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local current = redis.call('HGET', KEYS[1], 'next')
if not current then return 0 end
local next = tonumber(current)
local nonce = tonumber(ARGV[2])
if nonce >= next then return 0 end
redis.call('ZADD', KEYS[2], nonce, ARGV[2])
while next > 0 and redis.call('ZREM', KEYS[2], tostring(next - 1)) == 1 do
  next = next - 1
end
redis.call('HSET', KEYS[1], 'next', next)
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 1",
    )
});

/// Every given-back nonce, removed.
static TAKE_GAPS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local gaps = redis.call('ZRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[2])
return gaps",
    )
});

/// Settler nonces shared by every process settling with one key, through Redis.
#[derive(Clone, Debug)]
pub struct RedisNonceAllocator {
    conn: RedisConnection,
}

impl RedisNonceAllocator {
    /// Nonces on `conn`.
    pub fn new(conn: RedisConnection) -> Self {
        Self { conn }
    }

    /// `script` on `account`'s two keys, with the idle lifetime and `argument`.
    async fn run<T>(
        &self,
        what: &'static str,
        script: &'static Script,
        account: Address,
        argument: Option<u64>,
    ) -> Result<T, StoreError>
    where
        T: redis::FromRedisValue + Send,
    {
        let counter = self.conn.key("settler-nonce", &format!("{{{account:#x}}}"));
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&counter)
            .key(format!("{counter}:given-back"))
            .arg(IDLE_SECS);
        if let Some(argument) = argument {
            invocation.arg(argument);
        }
        self.conn.invoke(what, invocation).await
    }
}

impl NonceAllocator for RedisNonceAllocator {
    fn take(&self, account: Address) -> BoxFuture<'_, Result<Option<u64>, StoreError>> {
        Box::pin(async move {
            let nonce: i64 = self.run("settler nonce take", &TAKE, account, None).await?;
            Ok(u64::try_from(nonce).ok())
        })
    }

    fn seed(&self, account: Address, next: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.run::<i64>("settler nonce seed", &SEED, account, Some(next))
                .await
                .map(drop)
        })
    }

    fn give_back(&self, account: Address, nonce: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.run::<i64>("settler nonce give-back", &GIVE_BACK, account, Some(nonce))
                .await
                .map(drop)
        })
    }

    fn take_gaps(&self, account: Address) -> BoxFuture<'_, Result<Vec<u64>, StoreError>> {
        Box::pin(async move {
            let gaps: Vec<String> = self
                .run("settler nonce gaps", &TAKE_GAPS, account, None)
                .await?;
            gaps.iter()
                .map(|gap| {
                    gap.parse()
                        .map_err(|_| StoreError::new("a given-back settler nonce is not a number"))
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::redis::{RedisConfig, redis_support};

    /// The test server, and the test cluster when `.ci/run` started one.
    fn configs(test: &str) -> Vec<RedisConfig> {
        let prefix = redis_support::unique_prefix(test);
        let mut configs = vec![RedisConfig::new(redis_support::shared_url()).with_prefix(&prefix)];
        if let Ok(urls) = std::env::var("WALLETGATE_TEST_REDIS_CLUSTER_URLS") {
            configs.push(
                RedisConfig::cluster(urls.split(',').map(str::to_owned)).with_prefix(&prefix),
            );
        }
        configs
            .into_iter()
            .map(|config| config.with_timeout(Duration::from_secs(2)))
            .collect()
    }

    #[tokio::test]
    async fn redis_allocator_keeps_the_contract() {
        for config in configs("settler-nonces") {
            let allocator = RedisNonceAllocator::new(RedisConnection::open(&config).unwrap());
            crate::x402::facilitator::evm_settler::nonce_allocator_contract(&allocator).await;
        }
    }

    #[tokio::test]
    async fn two_processes_sharing_redis_never_take_one_nonce_twice() {
        for config in configs("settler-nonces-shared") {
            // Two connections: two replicas of one settler key.
            let replicas: [Arc<dyn NonceAllocator>; 2] = [
                Arc::new(RedisNonceAllocator::new(
                    RedisConnection::open(&config).unwrap(),
                )),
                Arc::new(RedisNonceAllocator::new(
                    RedisConnection::open(&config).unwrap(),
                )),
            ];
            let account = Address::repeat_byte(0x42);
            crate::x402::facilitator::evm_settler::nonce_allocator_concurrent_takes(
                &replicas, account, 100, 40,
            )
            .await;
            // One replica's refused send is the other's to take.
            replicas[0].give_back(account, 117).await.unwrap();
            assert_eq!(replicas[1].take(account).await.unwrap(), Some(117));
        }
    }
}

//! The x402 answer store on Redis: [`RedisAnswerStore`].
//!
//! One key per kept answer or in-flight marker, `{prefix}:x402-answer:{key}`:
//! `M{marker}` while a request is in flight (expires at its hold-until),
//! `A{answer}` once an answer is kept (expires at its keep-until; the
//! answer as [`KeptAnswer::encode`] writes it). `begin` is one Lua script
//! (read, and set the marker only if absent); the rest are single commands.
//! Expiry is relative (seconds from the store's clock), so the replicas'
//! clocks never need to agree with Redis's. Redis's own `maxmemory` policy
//! bounds the total; each answer is bounded here.

use std::sync::LazyLock;

use redis::Script;

use super::RedisConnection;
use crate::clock::SharedClock;
use crate::store::{BoxFuture, StoreError};
use crate::x402::server::{AnswerStore, Begun, DEFAULT_ANSWER_MAX_BYTES, KeptAnswer};

const SEAM: &str = "x402-answer";

/// The value if present, else sets `ARGV[2]` for `ARGV[1]` seconds and answers `''`.
static BEGIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[1])
return ''",
    )
});

/// Paid answers and in-flight markers in Redis, shared by every replica.
#[derive(Clone)]
pub struct RedisAnswerStore {
    conn: RedisConnection,
    clock: SharedClock,
    max_answer_bytes: usize,
}

impl std::fmt::Debug for RedisAnswerStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAnswerStore")
            .field("conn", &self.conn)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .finish_non_exhaustive()
    }
}

impl RedisAnswerStore {
    /// A store on `conn` taking answers up to [`DEFAULT_ANSWER_MAX_BYTES`];
    /// `clock` turns the absolute times it is given into Redis lifetimes.
    pub fn new(conn: RedisConnection, clock: SharedClock) -> Self {
        Self {
            conn,
            clock,
            max_answer_bytes: DEFAULT_ANSWER_MAX_BYTES,
        }
    }

    /// Takes answers up to `bytes` each (larger ones are not kept).
    #[must_use]
    pub fn with_max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// Seconds from now until `unix_secs`, at least one, at most a year.
    fn ttl_secs(&self, unix_secs: u64) -> u64 {
        super::ttl_secs(&self.clock, unix_secs)
    }
}

/// What a stored value holds; `None` for an unreadable one.
fn decode(value: &[u8]) -> Option<Begun> {
    match value.split_first()? {
        (b'M', marker) => Some(Begun::InFlight(String::from_utf8(marker.to_vec()).ok()?)),
        (b'A', answer) => KeptAnswer::decode(answer).map(Begun::Kept),
        _ => None,
    }
}

fn unreadable() -> StoreError {
    StoreError::new("x402 answer store: unreadable entry")
}

impl AnswerStore for RedisAnswerStore {
    fn begin<'a>(
        &'a self,
        key: &'a str,
        marker: &'a str,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Begun, StoreError>> {
        let redis_key = self.conn.key(SEAM, key);
        let ttl = self.ttl_secs(hold_until_unix_secs);
        let value = format!("M{marker}");
        Box::pin(async move {
            let found: Vec<u8> = self
                .conn
                .call("x402 answer begin", |mut c| async move {
                    BEGIN
                        .key(redis_key)
                        .arg(ttl)
                        .arg(value)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            if found.is_empty() {
                return Ok(Begun::Started);
            }
            decode(&found).ok_or_else(unreadable)
        })
    }

    fn keep<'a>(
        &'a self,
        key: &'a str,
        answer: &'a KeptAnswer,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        if answer.size() > self.max_answer_bytes {
            return Box::pin(std::future::ready(Ok(false)));
        }
        let redis_key = self.conn.key(SEAM, key);
        let ttl = self.ttl_secs(keep_until_unix_secs);
        let mut value = Vec::with_capacity(answer.size() + 64);
        value.push(b'A');
        value.extend_from_slice(&answer.encode());
        Box::pin(async move {
            self.conn
                .set_expiring("x402 answer keep", redis_key, value, ttl)
                .await?;
            Ok(true)
        })
    }

    fn kept<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>> {
        let redis_key = self.conn.key(SEAM, key);
        Box::pin(async move {
            let found: Option<Vec<u8>> = self
                .conn
                .call("x402 answer read", |mut c| async move {
                    redis::cmd("GET").arg(redis_key).query_async(&mut c).await
                })
                .await?;
            match found.as_deref().map(decode) {
                None => Ok(None),
                Some(Some(Begun::Kept(answer))) => Ok(Some(answer)),
                Some(Some(_)) => Ok(None),
                Some(None) => Err(unreadable()),
            }
        })
    }

    fn forget(&self, key: &str) -> BoxFuture<'static, Result<(), StoreError>> {
        let redis_key = self.conn.key(SEAM, key);
        let conn = self.conn.clone();
        let work = async move {
            conn.call("x402 answer forget", |mut c| async move {
                redis::cmd("DEL")
                    .arg(redis_key)
                    .query_async::<()>(&mut c)
                    .await
            })
            .await
        };
        // Sent now, so a request dropped mid-flight still gives its marker back.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn(work);
                Box::pin(async move {
                    task.await
                        .unwrap_or_else(|_| Err(StoreError::new("x402 answer forget: abandoned")))
                })
            }
            Err(_) => Box::pin(work),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_values_read_back_as_what_they_hold() {
        let answer = KeptAnswer::new(200, "b", bytes::Bytes::from_static(b"body"));
        let mut value = vec![b'A'];
        value.extend_from_slice(&answer.encode());
        assert_eq!(decode(&value), Some(Begun::Kept(answer)));
        assert_eq!(decode(b"Mowner"), Some(Begun::InFlight("owner".into())));
        assert_eq!(decode(b"Xjunk"), None);
        assert_eq!(decode(b"A\x00"), None);
    }
}

//! Per-key request quotas, enforced with `governor`.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::{ApiKeyId, ConfigError};
use crate::clock::SharedClock;

/// How many requests a key may make per window.
///
/// Enforced as a GCRA bucket (governor): a burst of `requests`, then one more
/// request every `window / requests`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyQuota {
    requests: NonZeroU32,
    window: Duration,
}

impl KeyQuota {
    /// `requests` per `window`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidQuota`] when `window / requests` is under one
    /// nanosecond (a zero window, say).
    pub fn new(requests: NonZeroU32, window: Duration) -> Result<Self, ConfigError> {
        if (window / requests.get()).is_zero() {
            return Err(ConfigError::InvalidQuota);
        }
        Ok(Self { requests, window })
    }

    /// `requests` per second.
    pub fn per_second(requests: NonZeroU32) -> Self {
        Self::whole_seconds(requests, 1)
    }

    /// `requests` per minute.
    pub fn per_minute(requests: NonZeroU32) -> Self {
        Self::whole_seconds(requests, 60)
    }

    /// `requests` per hour.
    pub fn per_hour(requests: NonZeroU32) -> Self {
        Self::whole_seconds(requests, 3600)
    }

    // Keeps `window / requests` at least 1 ns even for huge request counts.
    fn whole_seconds(requests: NonZeroU32, secs: u64) -> Self {
        let window = Duration::from_secs(secs).max(Duration::from_nanos(u64::from(requests.get())));
        Self { requests, window }
    }

    /// Requests allowed per window.
    pub fn requests(&self) -> NonZeroU32 {
        self.requests
    }

    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn governor_quota(&self) -> Option<Quota> {
        Quota::with_period(self.window / self.requests.get()).map(|q| q.allow_burst(self.requests))
    }
}

/// Governor time read from the crate's injectable clock (tests use `FakeClock`).
#[derive(Clone)]
struct ClockAdapter(SharedClock);

impl GovernorClock for ClockAdapter {
    type Instant = Duration;

    fn now(&self) -> Duration {
        Duration::from_millis(self.0.now_unix_millis())
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, ClockAdapter, NoOpMiddleware<Duration>>;

struct KeyLimiter {
    quota: KeyQuota,
    limiter: Limiter,
}

/// One limiter per key that has passed lookup, so its size is bounded by
/// the number of valid keys. A key whose quota changes gets a fresh limiter.
pub(super) struct QuotaBook {
    clock: ClockAdapter,
    limiters: RwLock<HashMap<ApiKeyId, Arc<KeyLimiter>>>,
}

impl QuotaBook {
    pub(super) fn new(clock: SharedClock) -> Self {
        Self {
            clock: ClockAdapter(clock),
            limiters: RwLock::default(),
        }
    }

    /// Spends one request of `id`'s quota; `Err` carries `Retry-After` in
    /// whole seconds, rounded up, at least 1.
    pub(super) fn check(&self, id: &ApiKeyId, quota: KeyQuota) -> Result<(), u64> {
        let limiter = self.limiter(id, quota);
        let Some(limiter) = limiter else {
            return Ok(());
        };
        limiter.limiter.check().map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            retry_after_secs(wait)
        })
    }

    fn limiter(&self, id: &ApiKeyId, quota: KeyQuota) -> Option<Arc<KeyLimiter>> {
        {
            let limiters = self.limiters.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(existing) = limiters.get(id).filter(|l| l.quota == quota) {
                return Some(Arc::clone(existing));
            }
        }
        let governor_quota = quota.governor_quota()?;
        let mut limiters = self
            .limiters
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = limiters.entry(id.clone()).or_insert_with(|| {
            Arc::new(KeyLimiter {
                quota,
                limiter: RateLimiter::direct_with_clock(governor_quota, self.clock.clone()),
            })
        });
        if entry.quota != quota {
            *entry = Arc::new(KeyLimiter {
                quota,
                limiter: RateLimiter::direct_with_clock(governor_quota, self.clock.clone()),
            });
        }
        Some(Arc::clone(entry))
    }

    /// How many keys have a limiter.
    pub(super) fn len(&self) -> usize {
        self.limiters
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl fmt::Debug for QuotaBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaBook")
            .field("keys", &self.len())
            .finish()
    }
}

/// Whole seconds, rounded up, at least 1 (a `0` would invite a hot retry loop).
fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
    }

    #[test]
    fn zero_window_is_refused() {
        assert!(matches!(
            KeyQuota::new(nz(10), Duration::ZERO),
            Err(ConfigError::InvalidQuota)
        ));
    }

    #[test]
    fn bucket_refills_with_the_clock() {
        let clock = FakeClock::at_unix_secs(1_000);
        let book = QuotaBook::new(Arc::new(clock.clone()));
        let id = ApiKeyId::new("app").unwrap();
        let quota = KeyQuota::per_minute(nz(2));
        assert!(book.check(&id, quota).is_ok());
        assert!(book.check(&id, quota).is_ok());
        assert_eq!(book.check(&id, quota), Err(30));
        clock.advance(Duration::from_secs(30));
        assert!(book.check(&id, quota).is_ok());
    }

    #[test]
    fn changed_quota_gets_a_fresh_bucket() {
        let book = QuotaBook::new(Arc::new(FakeClock::at_unix_secs(1_000)));
        let id = ApiKeyId::new("app").unwrap();
        assert!(book.check(&id, KeyQuota::per_minute(nz(1))).is_ok());
        assert!(book.check(&id, KeyQuota::per_minute(nz(1))).is_err());
        assert!(book.check(&id, KeyQuota::per_minute(nz(5))).is_ok());
        assert_eq!(book.len(), 1);
    }
}

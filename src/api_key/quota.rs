//! Per-key request quotas: the [`QuotaStore`] seam and its in-memory
//! default, [`InMemoryQuotas`] (`governor`).

use std::collections::HashMap;
use std::fmt;
use std::future::ready;
use std::num::NonZeroU32;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::{ApiKeyId, ConfigError};
use crate::clock::{SharedClock, SystemClock};
use crate::store::{BoxFuture, StoreError};

/// How many requests a key may make per window.
///
/// Enforced as a GCRA bucket: a burst of `requests`, then one more request
/// every `window / requests` (the emission interval); a request is admitted
/// when the bucket's theoretical arrival time is at most
/// `(requests - 1) * interval` ahead of now. [`InMemoryQuotas`] runs it with
/// `governor`, a shared store (Redis) with the same arithmetic.
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

    /// The emission interval, `window / requests`: one request refills in it.
    pub fn interval(&self) -> Duration {
        self.window / self.requests.get()
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

// The state-information middleware reports what is left after each admission.
type Limiter = RateLimiter<NotKeyed, InMemoryState, ClockAdapter, StateInformationMiddleware>;

struct KeyLimiter {
    quota: KeyQuota,
    limiter: Limiter,
}

/// A quota decision of a [`QuotaStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaVerdict {
    /// One request of the quota was spent.
    Allowed {
        /// How many more requests the quota would admit right now.
        remaining: u32,
    },
    /// The quota is spent; nothing changed.
    Exceeded {
        /// How long until the quota admits a request.
        retry_after: Duration,
    },
}

/// A key's quota as the request that carries it left it: what
/// [`ApiKeyLayer`](super::ApiKeyLayer) inserts into the request extensions
/// beside [`ApiKeyId`] when the key has a quota (so a handler can show it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaUsage {
    quota: KeyQuota,
    remaining: u32,
}

impl QuotaUsage {
    /// `remaining` of `quota`'s requests (at most its size).
    pub fn new(quota: KeyQuota, remaining: u32) -> Self {
        let remaining = remaining.min(quota.requests().get());
        Self { quota, remaining }
    }

    /// The key's quota.
    pub fn quota(&self) -> KeyQuota {
        self.quota
    }

    /// How many more requests it would admit now.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// How many of its requests are spent (this one included), the ones
    /// refilling one per [`KeyQuota::interval`].
    pub fn used(&self) -> u32 {
        self.quota.requests().get() - self.remaining
    }
}

/// Where per-key quota buckets live.
///
/// [`InMemoryQuotas`] is the in-process default; a shared store (Redis, for
/// several data API replicas: `walletgate::redis::RedisQuotas`) implements the
/// same trait with the same rule ([`KeyQuota`]), so one key's quota holds
/// across every replica. Plugged in with
/// [`ApiKeyLayer::with_quota_store`](super::ApiKeyLayer::with_quota_store).
/// A store that cannot answer returns [`StoreError`]: the layer answers 503,
/// never an unlimited request.
///
/// The future is `'static` because the layer's response future holds it.
/// Dyn-compatible: an `Arc<dyn QuotaStore>` is a `QuotaStore`, so a server
/// chooses memory or Redis at start.
pub trait QuotaStore: Send + Sync + 'static {
    /// Spends one request of `id`'s `quota` if it has one left. A key whose
    /// quota changes starts a fresh bucket.
    fn check(
        &self,
        id: &ApiKeyId,
        quota: KeyQuota,
    ) -> BoxFuture<'static, Result<QuotaVerdict, StoreError>>;
}

forward_to_arc! { QuotaStore {
    fn check(
        &self,
        id: &ApiKeyId,
        quota: KeyQuota,
    ) -> BoxFuture<'static, Result<QuotaVerdict, StoreError>>;
}}

/// Per-key quota buckets in this process (`governor`), on the crate's clock.
///
/// One bucket per key that has passed lookup, so its size is bounded by the
/// number of valid keys. A key whose quota changes gets a fresh bucket.
/// Clones share the buckets.
#[derive(Clone)]
pub struct InMemoryQuotas {
    clock: ClockAdapter,
    limiters: Arc<RwLock<HashMap<ApiKeyId, Arc<KeyLimiter>>>>,
}

impl Default for InMemoryQuotas {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl InMemoryQuotas {
    /// Buckets on `clock` (tests use [`FakeClock`](crate::clock::FakeClock)).
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock: ClockAdapter(clock),
            limiters: Arc::default(),
        }
    }

    /// Spends one request of `id`'s quota.
    pub fn check_now(&self, id: &ApiKeyId, quota: KeyQuota) -> QuotaVerdict {
        let Some(limiter) = self.limiter(id, quota) else {
            return QuotaVerdict::Allowed {
                remaining: quota.requests().get() - 1,
            };
        };
        match limiter.limiter.check() {
            Ok(state) => QuotaVerdict::Allowed {
                remaining: state.remaining_burst_capacity(),
            },
            Err(not_until) => QuotaVerdict::Exceeded {
                retry_after: not_until.wait_time_from(self.clock.now()),
            },
        }
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
                limiter: RateLimiter::direct_with_clock(governor_quota, self.clock.clone())
                    .with_middleware::<StateInformationMiddleware>(),
            })
        });
        if entry.quota != quota {
            *entry = Arc::new(KeyLimiter {
                quota,
                limiter: RateLimiter::direct_with_clock(governor_quota, self.clock.clone())
                    .with_middleware::<StateInformationMiddleware>(),
            });
        }
        Some(Arc::clone(entry))
    }

    /// How many keys have a bucket.
    pub fn len(&self) -> usize {
        self.limiters
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no key has a bucket.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl QuotaStore for InMemoryQuotas {
    fn check(
        &self,
        id: &ApiKeyId,
        quota: KeyQuota,
    ) -> BoxFuture<'static, Result<QuotaVerdict, StoreError>> {
        Box::pin(ready(Ok(self.check_now(id, quota))))
    }
}

impl fmt::Debug for InMemoryQuotas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryQuotas")
            .field("keys", &self.len())
            .finish()
    }
}

/// Whole seconds, rounded up, at least 1 (a `0` would invite a hot retry loop).
pub(super) fn retry_after_secs(wait: Duration) -> u64 {
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

    fn exceeded_secs(verdict: QuotaVerdict) -> Option<u64> {
        match verdict {
            QuotaVerdict::Allowed { .. } => None,
            QuotaVerdict::Exceeded { retry_after } => Some(retry_after_secs(retry_after)),
        }
    }

    #[test]
    fn bucket_refills_with_the_clock() {
        let clock = FakeClock::at_unix_secs(1_000);
        let book = InMemoryQuotas::new(Arc::new(clock.clone()));
        let id = ApiKeyId::new("app").unwrap();
        let quota = KeyQuota::per_minute(nz(2));
        assert_eq!(book.check_now(&id, quota), allowed(1));
        assert_eq!(book.check_now(&id, quota), allowed(0));
        assert_eq!(exceeded_secs(book.check_now(&id, quota)), Some(30));
        clock.advance(Duration::from_secs(30));
        assert_eq!(book.check_now(&id, quota), allowed(0));
    }

    fn allowed(remaining: u32) -> QuotaVerdict {
        QuotaVerdict::Allowed { remaining }
    }

    #[test]
    fn an_admission_says_how_many_remain() {
        let clock = FakeClock::at_unix_secs(1_000);
        let book = InMemoryQuotas::new(Arc::new(clock.clone()));
        let id = ApiKeyId::new("app").unwrap();
        let quota = KeyQuota::per_minute(nz(3));
        assert_eq!(book.check_now(&id, quota), allowed(2));
        assert_eq!(book.check_now(&id, quota), allowed(1));
        // One request refills every 20 s.
        clock.advance(Duration::from_secs(20));
        assert_eq!(book.check_now(&id, quota), allowed(1));
        let usage = QuotaUsage::new(quota, 1);
        assert_eq!((usage.used(), usage.remaining()), (2, 1));
    }

    #[test]
    fn changed_quota_gets_a_fresh_bucket() {
        let book = InMemoryQuotas::new(Arc::new(FakeClock::at_unix_secs(1_000)));
        let id = ApiKeyId::new("app").unwrap();
        assert_eq!(book.check_now(&id, KeyQuota::per_minute(nz(1))), allowed(0));
        assert!(exceeded_secs(book.check_now(&id, KeyQuota::per_minute(nz(1)))).is_some());
        assert_eq!(book.check_now(&id, KeyQuota::per_minute(nz(5))), allowed(4));
        assert_eq!(book.len(), 1);
    }
}

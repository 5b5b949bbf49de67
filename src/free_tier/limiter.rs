//! The two-quota decision and its storage seam.

use crate::store::StoreError;
use std::collections::HashMap;
use std::collections::hash_map::{Entry, RandomState};
use std::fmt;
use std::future::{Future, Ready, ready};
use std::hash::BuildHasher;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use governor::clock::{Clock as MonotonicTime, MonotonicClock, Reference};

use super::ConfigError;
use super::key::ClientKey;
use crate::clock::{SharedClock, SystemClock};
use crate::envelope::RateLimitInfo;

/// The free tier's two quotas: requests per minute and per hour.
///
/// Each is a GCRA bucket, not a fixed window: 30 per minute means a burst of
/// 30, then one more every 2 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FreeTierQuotas {
    per_minute: NonZeroU32,
    per_hour: NonZeroU32,
}

impl Default for FreeTierQuotas {
    /// 30 per minute and 300 per hour (specification, section 8).
    fn default() -> Self {
        Self {
            per_minute: NonZeroU32::MIN.saturating_add(29),
            per_hour: NonZeroU32::MIN.saturating_add(299),
        }
    }
}

impl FreeTierQuotas {
    /// `per_minute` and `per_hour` requests; both must be at least 1.
    pub fn new(per_minute: u32, per_hour: u32) -> Result<Self, ConfigError> {
        Ok(Self {
            per_minute: NonZeroU32::new(per_minute).ok_or(ConfigError::ZeroQuota)?,
            per_hour: NonZeroU32::new(per_hour).ok_or(ConfigError::ZeroQuota)?,
        })
    }

    /// Requests per minute.
    pub fn per_minute(&self) -> u32 {
        self.per_minute.get()
    }

    /// Requests per hour.
    pub fn per_hour(&self) -> u32 {
        self.per_hour.get()
    }
}

/// A limiter's answer for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Admitted; one cell of each quota was spent.
    Allowed {
        /// The tighter quota after this request.
        rate_limit: RateLimitInfo,
    },
    /// Refused; nothing was spent.
    Refused {
        /// How long until every refusing quota admits a request.
        retry_after: Duration,
        /// The refusing quota (remaining 0).
        rate_limit: RateLimitInfo,
    },
    /// Refused because the store tracks as many clients as it may and this
    /// one is new; nothing was spent.
    AtCapacity,
}

/// The storage seam: decides one request of one client.
///
/// [`InMemoryLimiter`] is the in-process implementation. A shared store (say
/// Redis, for several gateway replicas) implements the same trait, running the
/// same two-bucket GCRA atomically on the server (one script over both
/// arrival times), and plugs into
/// [`FreeTierLimitLayer::with_store`](super::FreeTierLimitLayer::with_store)
/// without any change to the layer. Implementations are cheap to clone
/// (handles to shared state).
pub trait FreeTierStore: Clone + Send + Sync + 'static {
    /// The decision, possibly after I/O.
    type Future: Future<Output = Result<Verdict, StoreError>> + Send + 'static;

    /// Decides a request from `key`, spending one cell of every quota only if
    /// all of them admit it.
    fn check(&self, key: ClientKey) -> Self::Future;
}

/// What is left of a client's quotas, without spending any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaUsage {
    /// Requests the minute quota would admit now.
    pub remaining_per_minute: u32,
    /// Requests the hour quota would admit now.
    pub remaining_per_hour: u32,
}

/// What a [`sweep`](InMemoryLimiter::sweep) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepReport {
    /// Idle keys dropped.
    pub removed: usize,
    /// Keys still tracked.
    pub remaining: usize,
}

/// One quota as GCRA parameters, in nanoseconds.
#[derive(Clone, Copy, Debug)]
struct Gcra {
    limit: u32,
    /// The emission interval: one cell comes back every `interval_nanos`.
    interval_nanos: u64,
    /// `limit * interval_nanos`: how far ahead of now the arrival time may run.
    capacity_nanos: u64,
}

/// One quota's answer at time `now`.
#[derive(Clone, Copy, Debug)]
enum Step {
    Allowed { next_arrival: u64, remaining: u32 },
    Refused { wait_nanos: u64, full_at: u64 },
}

impl Gcra {
    fn new(limit: NonZeroU32, period: Duration) -> Self {
        let period_nanos = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        let interval_nanos = (period_nanos / u64::from(limit.get())).max(1);
        Self {
            limit: limit.get(),
            interval_nanos,
            capacity_nanos: interval_nanos.saturating_mul(u64::from(limit.get())),
        }
    }

    /// The theoretical arrival time `tat` (nanoseconds since the limiter's
    /// start; at or before `now` means the bucket is full) meets a request.
    fn step(&self, tat: u64, now: u64) -> Step {
        let base = tat.max(now);
        let next_arrival = base.saturating_add(self.interval_nanos);
        let horizon = now.saturating_add(self.capacity_nanos);
        if next_arrival <= horizon {
            let remaining = (horizon - next_arrival) / self.interval_nanos;
            Step::Allowed {
                next_arrival,
                remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
            }
        } else {
            Step::Refused {
                wait_nanos: next_arrival - horizon,
                full_at: base,
            }
        }
    }

    fn remaining(&self, tat: u64, now: u64) -> u32 {
        let used = tat.saturating_sub(now);
        let left = self.capacity_nanos.saturating_sub(used) / self.interval_nanos;
        u32::try_from(left).unwrap_or(u32::MAX)
    }
}

/// Both quotas' arrival times of one client: `[minute, hour]`.
type Arrivals = [u64; 2];

struct Shard {
    entries: HashMap<ClientKey, Arrivals>,
    last_sweep_nanos: u64,
}

impl Shard {
    /// Drops entries whose buckets are all full at `now`, and gives memory
    /// back once the table is at most a quarter full (so a busy shard does not
    /// shrink and regrow every interval).
    fn sweep(&mut self, now: u64) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, arrivals| arrivals.iter().any(|&tat| tat > now));
        if self.entries.len().saturating_mul(4) <= self.entries.capacity() {
            self.entries.shrink_to_fit();
        }
        self.last_sweep_nanos = now;
        before - self.entries.len()
    }
}

/// Enough shards that two cores rarely meet on one lock, few enough that
/// empty shards cost nothing worth measuring.
const SHARD_COUNT: usize = 64;

struct Shared<C: MonotonicTime> {
    quotas: FreeTierQuotas,
    gcra: [Gcra; 2],
    clock: C,
    start: C::Instant,
    wall_clock: SharedClock,
    /// 0 disables automatic sweeping.
    auto_sweep_nanos: AtomicU64,
    /// The key cap divided among the shards; `usize::MAX` for none.
    max_keys_per_shard: AtomicUsize,
    hasher: RandomState,
    shards: Box<[Mutex<Shard>]>,
}

/// The in-process free-tier limiter: two GCRA quotas per client, decided
/// together. See the [module docs](super) for the whole layer.
///
/// Cloning is cheap and shares the state, so keep a clone to call
/// [`sweep`](Self::sweep) or read [`len`](Self::len) from a maintenance task.
///
/// # Why not two governor keyed limiters
///
/// governor's `check_key` spends a cell as soon as it allows and has no peek
/// (governor #15). With two independent keyed limiters one of the two orders
/// always leaks: checking the minute first means a request the hour quota
/// refuses has already spent a minute cell, and the other order the reverse.
/// [`InMemoryLimiter`] therefore keeps both quotas' state of a client in one
/// map entry and runs the algorithm governor uses (GCRA, virtual scheduling)
/// for both under the entry's lock: the request is admitted and both cells are spent, or
/// it is refused and nothing changes. Time comes from a governor
/// [`Clock`](governor::clock::Clock) (monotonic in production,
/// `FakeRelativeClock` in tests), so wall-clock steps cannot refill or drain a
/// bucket; the wall clock only dates `X-RateLimit-Reset`.
///
/// # Memory
///
/// An entry is a 16-byte [`ClientKey`] plus two 8-byte arrival times (32 bytes)
/// in a `HashMap`; with its control byte and load factor that is 37 to 75
/// bytes of table per tracked key. Measured with one million distinct clients
/// (`cargo bench --bench free_tier`): 69 bytes of heap per key, and the heap
/// back to its starting size after a sweep. An entry whose two buckets are
/// full again carries no information and is dropped by [`InMemoryLimiter::sweep`]; each shard also sweeps itself on
/// its first request after [`auto_sweep_interval`](InMemoryLimiter::set_auto_sweep_interval)
/// (60 s by default). So the table holds at most the clients seen in the last
/// hour plus one sweep interval.
pub struct InMemoryLimiter<C: MonotonicTime = MonotonicClock> {
    shared: Arc<Shared<C>>,
}

impl<C: MonotonicTime> Clone for InMemoryLimiter<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C: MonotonicTime> fmt::Debug for InMemoryLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryLimiter")
            .field("quotas", &self.shared.quotas)
            .finish_non_exhaustive()
    }
}

impl InMemoryLimiter {
    /// A limiter with `quotas`, the monotonic clock and the system wall clock.
    pub fn new(quotas: FreeTierQuotas) -> Self {
        Self::with_clocks(quotas, MonotonicClock, Arc::new(SystemClock))
    }
}

impl Default for InMemoryLimiter {
    fn default() -> Self {
        Self::new(FreeTierQuotas::default())
    }
}

impl<C: MonotonicTime> InMemoryLimiter<C> {
    /// A limiter reading buckets' time from `clock` (governor's
    /// `FakeRelativeClock` in tests) and dating `X-RateLimit-Reset` with
    /// `wall_clock`.
    pub fn with_clocks(quotas: FreeTierQuotas, clock: C, wall_clock: SharedClock) -> Self {
        let start = clock.now();
        let shards = (0..SHARD_COUNT)
            .map(|_| {
                Mutex::new(Shard {
                    entries: HashMap::new(),
                    last_sweep_nanos: 0,
                })
            })
            .collect();
        Self {
            shared: Arc::new(Shared {
                quotas,
                gcra: [
                    Gcra::new(quotas.per_minute, Duration::from_secs(60)),
                    Gcra::new(quotas.per_hour, Duration::from_secs(3600)),
                ],
                clock,
                start,
                wall_clock,
                auto_sweep_nanos: AtomicU64::new(60_000_000_000),
                max_keys_per_shard: AtomicUsize::new(usize::MAX),
                hasher: RandomState::new(),
                shards,
            }),
        }
    }

    /// The quotas.
    pub fn quotas(&self) -> FreeTierQuotas {
        self.shared.quotas
    }

    /// How often each shard sweeps itself, on the first request after the
    /// interval; `None` leaves sweeping to explicit [`sweep`](Self::sweep)
    /// calls.
    pub fn set_auto_sweep_interval(&self, every: Option<Duration>) {
        let nanos = every.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.shared.auto_sweep_nanos.store(nanos, Ordering::Relaxed);
    }

    /// Caps the tracked clients at about `max` (`None`: no cap, the default).
    ///
    /// With a cap, memory stays under `max` times the bytes per key even when
    /// more distinct clients arrive within an hour than the cap allows: a new
    /// client that finds its shard full (after sweeping it) gets
    /// [`Verdict::AtCapacity`], while clients already tracked keep their
    /// quotas. The cap is split evenly among the shards.
    pub fn set_max_tracked_keys(&self, max: Option<usize>) {
        let per_shard = max.map_or(usize::MAX, |max| max.div_ceil(SHARD_COUNT).max(1));
        self.shared
            .max_keys_per_shard
            .store(per_shard, Ordering::Relaxed);
    }

    /// Decides a request from `key` now.
    pub fn check_now(&self, key: ClientKey) -> Verdict {
        let shared = &*self.shared;
        let now = self.now_nanos();
        let [minute, hour] = shared.gcra;
        let mut shard = self.shard(&key);
        let auto_sweep = shared.auto_sweep_nanos.load(Ordering::Relaxed);
        if auto_sweep != 0 && now.saturating_sub(shard.last_sweep_nanos) >= auto_sweep {
            shard.sweep(now);
        }
        let max_keys = shared.max_keys_per_shard.load(Ordering::Relaxed);
        if shard.entries.len() >= max_keys && !shard.entries.contains_key(&key) {
            shard.sweep(now);
            if shard.entries.len() >= max_keys {
                return Verdict::AtCapacity;
            }
        }
        let entry = shard.entries.entry(key);
        let arrivals = match &entry {
            Entry::Occupied(found) => *found.get(),
            Entry::Vacant(_) => [now, now],
        };
        match (minute.step(arrivals[0], now), hour.step(arrivals[1], now)) {
            (
                Step::Allowed {
                    next_arrival: minute_next,
                    remaining: minute_left,
                },
                Step::Allowed {
                    next_arrival: hour_next,
                    remaining: hour_left,
                },
            ) => {
                entry.insert_entry([minute_next, hour_next]);
                drop(shard);
                // The tighter quota: fewer left; on a tie, the one full later.
                let (gcra, remaining, full_at) =
                    if (minute_left, hour_next) <= (hour_left, minute_next) {
                        (minute, minute_left, minute_next)
                    } else {
                        (hour, hour_left, hour_next)
                    };
                Verdict::Allowed {
                    rate_limit: self.info(gcra, remaining, full_at, now),
                }
            }
            (minute_step, hour_step) => {
                drop(shard);
                // Wait for the slowest refusing quota; describe that one.
                let refusals = [(minute, minute_step), (hour, hour_step)];
                let (gcra, wait_nanos, full_at) = refusals
                    .iter()
                    .filter_map(|(gcra, step)| match *step {
                        Step::Refused {
                            wait_nanos,
                            full_at,
                        } => Some((*gcra, wait_nanos, full_at)),
                        Step::Allowed { .. } => None,
                    })
                    .max_by_key(|(_, wait, _)| *wait)
                    .unwrap_or((minute, 1, now));
                Verdict::Refused {
                    retry_after: Duration::from_nanos(wait_nanos),
                    rate_limit: self.info(gcra, 0, full_at, now),
                }
            }
        }
    }

    /// What `key` has left, without spending anything.
    pub fn peek(&self, key: ClientKey) -> QuotaUsage {
        let now = self.now_nanos();
        let [minute, hour] = self.shared.gcra;
        let arrivals = self
            .shard(&key)
            .entries
            .get(&key)
            .copied()
            .unwrap_or([now, now]);
        QuotaUsage {
            remaining_per_minute: minute.remaining(arrivals[0], now),
            remaining_per_hour: hour.remaining(arrivals[1], now),
        }
    }

    /// Drops every idle key (both buckets full again) and releases table
    /// memory; returns what it did.
    pub fn sweep(&self) -> SweepReport {
        let now = self.now_nanos();
        let mut report = SweepReport {
            removed: 0,
            remaining: 0,
        };
        for shard in self.shared.shards.iter() {
            let mut shard = lock(shard);
            report.removed += shard.sweep(now);
            report.remaining += shard.entries.len();
        }
        report
    }

    /// How many keys are tracked.
    pub fn len(&self) -> usize {
        self.shared
            .shards
            .iter()
            .map(|shard| lock(shard).entries.len())
            .sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn now_nanos(&self) -> u64 {
        let shared = &*self.shared;
        shared.clock.now().duration_since(shared.start).as_u64()
    }

    fn shard(&self, key: &ClientKey) -> MutexGuard<'_, Shard> {
        let hash = self.shared.hasher.hash_one(key);
        // The high bits: the low ones also pick the bucket inside the shard's map.
        let index = usize::try_from(hash >> 58).unwrap_or(0) % SHARD_COUNT;
        lock(&self.shared.shards[index])
    }

    fn info(&self, gcra: Gcra, remaining: u32, full_at: u64, now: u64) -> RateLimitInfo {
        // Rounded up so a client waiting until the reset never arrives early.
        let until_full_millis = full_at.saturating_sub(now).div_ceil(1_000_000);
        RateLimitInfo {
            limit: gcra.limit,
            remaining,
            reset_unix_millis: self
                .shared
                .wall_clock
                .now_unix_millis()
                .saturating_add(until_full_millis),
        }
    }
}

/// A poisoned shard only means another request panicked mid-update; the
/// arrival times in it are still valid numbers, so keep serving.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<C> FreeTierStore for InMemoryLimiter<C>
where
    C: MonotonicTime + Send + Sync + 'static,
{
    type Future = Ready<Result<Verdict, StoreError>>;

    fn check(&self, key: ClientKey) -> Self::Future {
        ready(Ok(self.check_now(key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::free_tier::KeyPrefixes;
    use governor::clock::FakeRelativeClock;

    const WALL_START_SECS: u64 = 1_800_000_000;

    fn limiter(quotas: FreeTierQuotas) -> (InMemoryLimiter<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        let wall = FakeClock::at_unix_secs(WALL_START_SECS);
        (
            InMemoryLimiter::with_clocks(quotas, clock.clone(), Arc::new(wall)),
            clock,
        )
    }

    fn key(text: &str) -> ClientKey {
        KeyPrefixes::default().key(text.parse().unwrap())
    }

    fn allowed(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::Allowed { .. })
    }

    #[test]
    fn gcra_burst_then_one_per_interval() {
        let gcra = Gcra::new(NonZeroU32::new(30).unwrap(), Duration::from_secs(60));
        assert_eq!(gcra.interval_nanos, 2_000_000_000);
        let mut tat = 0;
        for expected_left in (0..30).rev() {
            match gcra.step(tat, 0) {
                Step::Allowed {
                    next_arrival,
                    remaining,
                } => {
                    assert_eq!(remaining, expected_left);
                    tat = next_arrival;
                }
                Step::Refused { .. } => panic!("refused within the burst"),
            }
        }
        assert!(matches!(
            gcra.step(tat, 0),
            Step::Refused {
                wait_nanos: 2_000_000_000,
                full_at: 60_000_000_000
            }
        ));
        assert!(matches!(
            gcra.step(tat, 2_000_000_000),
            Step::Allowed { .. }
        ));
    }

    #[test]
    fn hour_refusal_spends_no_minute_cell() {
        let (limiter, clock) = limiter(FreeTierQuotas::new(30, 3).unwrap());
        let client = key("198.51.100.1");
        for _ in 0..3 {
            assert!(allowed(&limiter.check_now(client)));
        }
        for _ in 0..50 {
            assert!(!allowed(&limiter.check_now(client)));
        }
        clock.advance(Duration::from_secs(60));
        assert_eq!(limiter.peek(client).remaining_per_minute, 30);
    }

    #[test]
    fn sweep_drops_only_idle_keys_and_shrinks() {
        let (limiter, clock) = limiter(FreeTierQuotas::default());
        limiter.set_auto_sweep_interval(None);
        for i in 0..1000u32 {
            limiter.check_now(key(&std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string()));
        }
        assert_eq!(limiter.len(), 1000);
        // Hour bucket of each key is full again 12 s after its one request.
        clock.advance(Duration::from_secs(11));
        limiter.check_now(key("192.0.2.1"));
        clock.advance(Duration::from_secs(2));
        let report = limiter.sweep();
        assert_eq!(
            report,
            SweepReport {
                removed: 1000,
                remaining: 1
            }
        );
        assert_eq!(limiter.len(), 1);
        clock.advance(Duration::from_secs(12));
        limiter.sweep();
        assert!(limiter.is_empty());
        assert!(
            limiter
                .shared
                .shards
                .iter()
                .all(|s| lock(s).entries.capacity() == 0)
        );
    }

    #[test]
    fn shards_sweep_themselves_after_the_interval() {
        let (limiter, clock) = limiter(FreeTierQuotas::default());
        limiter.set_auto_sweep_interval(Some(Duration::from_secs(60)));
        for i in 0..2000u32 {
            limiter.check_now(key(&std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string()));
        }
        clock.advance(Duration::from_secs(61));
        // Every shard is touched again by some fresh client.
        for i in 0..2000u32 {
            limiter.check_now(key(&std::net::Ipv4Addr::from(0x0b00_0000 + i).to_string()));
        }
        assert_eq!(limiter.len(), 2000);
    }

    #[test]
    fn key_cap_refuses_new_clients_but_not_tracked_ones() {
        let (limiter, clock) = limiter(FreeTierQuotas::default());
        limiter.set_auto_sweep_interval(None);
        limiter.set_max_tracked_keys(Some(SHARD_COUNT * 2));
        let keys: Vec<ClientKey> = (0..1000u32)
            .map(|i| key(&std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string()))
            .collect();
        let admitted: Vec<ClientKey> = keys
            .iter()
            .copied()
            .filter(|&k| allowed(&limiter.check_now(k)))
            .collect();
        assert!(limiter.len() <= SHARD_COUNT * 2);
        assert_eq!(admitted.len(), limiter.len());
        assert!(admitted.len() < keys.len());
        // Tracked clients keep being served.
        assert!(allowed(&limiter.check_now(admitted[0])));
        let refused_new = keys.iter().copied().find(|k| !admitted.contains(k));
        let refused_new = refused_new.unwrap_or(keys[0]);
        assert_eq!(limiter.check_now(refused_new), Verdict::AtCapacity);
        // Once tracked clients go idle, their places are free again.
        clock.advance(Duration::from_secs(3600));
        assert!(allowed(&limiter.check_now(refused_new)));
        limiter.set_max_tracked_keys(None);
        assert!(keys.iter().all(|&k| allowed(&limiter.check_now(k))));
    }

    #[test]
    fn concurrent_requests_of_one_client_never_overspend() {
        let (limiter, _clock) = limiter(FreeTierQuotas::new(30, 40).unwrap());
        let client = key("198.51.100.1");
        let admitted = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        if allowed(&limiter.check_now(client)) {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 30);
        assert_eq!(
            limiter.peek(client),
            QuotaUsage {
                remaining_per_minute: 0,
                remaining_per_hour: 10
            }
        );
    }

    #[test]
    fn store_error_keeps_its_source() {
        use std::error::Error as _;
        let io = std::io::Error::other("connection refused");
        let err = StoreError::new("redis unreachable").with_source(io);
        assert_eq!(err.to_string(), "redis unreachable");
        assert_eq!(err.source().unwrap().to_string(), "connection refused");
    }
}

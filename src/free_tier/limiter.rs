//! The two-quota decision and its storage seam.

use crate::store::{BoxFuture, StoreError};
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::ready;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::key::ClientKey;
use super::window::{ClientWindows, FreeTierQuotas, QuotaUsage, Verdict};
use crate::clock::{SharedClock, SystemClock};

/// The storage seam: decides one request of one client.
///
/// [`InMemoryLimiter`] is the in-process implementation. A shared store (say
/// Redis, for several gateway replicas) implements the same trait, applying
/// the same rule ([`ClientWindows::decide`] over the client's 88 bytes)
/// atomically on the server, and plugs into
/// [`FreeTierLimitLayer::with_store`](super::FreeTierLimitLayer::with_store)
/// without any change to the layer, which holds it in an `Arc`.
///
/// The future is `'static` because the layer's response future holds it.
/// Dyn-compatible: an `Arc<dyn FreeTierStore>` is a `FreeTierStore`, so a
/// server chooses memory or Redis at start.
pub trait FreeTierStore: Send + Sync + 'static {
    /// Decides a request from `key`, spending one cell of every quota only if
    /// all of them admit it.
    fn check(&self, key: ClientKey) -> BoxFuture<'static, Result<Verdict, StoreError>>;
}

forward_to_arc! { FreeTierStore {
    fn check(&self, key: ClientKey) -> BoxFuture<'static, Result<Verdict, StoreError>>;
}}

/// What a [`sweep`](InMemoryLimiter::sweep) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepReport {
    /// Idle keys dropped.
    pub removed: usize,
    /// Keys still tracked.
    pub remaining: usize,
}

struct Shard {
    entries: HashMap<ClientKey, ClientWindows>,
    last_sweep_millis: u64,
}

impl Shard {
    /// Drops entries with nothing counted at `now`, and gives memory
    /// back once the table is at most a quarter full (so a busy shard does not
    /// shrink and regrow every interval).
    fn sweep(&mut self, quotas: FreeTierQuotas, now: u64) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, windows| !windows.is_idle(quotas, now));
        if self.entries.len().saturating_mul(4) <= self.entries.capacity() {
            self.entries.shrink_to_fit();
        }
        self.last_sweep_millis = now;
        before - self.entries.len()
    }
}

/// Enough shards that two cores rarely meet on one lock, few enough that
/// empty shards cost nothing worth measuring.
const SHARD_COUNT: usize = 64;

struct Shared {
    quotas: FreeTierQuotas,
    clock: SharedClock,
    /// 0 disables automatic sweeping.
    auto_sweep_millis: AtomicU64,
    /// The key cap divided among the shards; `usize::MAX` for none.
    max_keys_per_shard: AtomicUsize,
    hasher: RandomState,
    shards: Box<[Mutex<Shard>]>,
}

/// The in-process free-tier limiter: both sliding-window quotas per client,
/// decided together. See the [module docs](super) for the whole layer and
/// [`ClientWindows`] for the rule.
///
/// Cloning is cheap and shares the state, so keep a clone to call
/// [`sweep`](Self::sweep) or read [`len`](Self::len) from a maintenance task.
///
/// # One decision for two quotas
///
/// Both quotas' state of a client lives in one map entry ([`ClientWindows`],
/// 88 bytes) and [`ClientWindows::decide`] runs under the entry's shard lock:
/// the request is counted in both quotas, or refused and nothing changes. (Two
/// independent limiters, governor's keyed ones say, always leak in one order:
/// checking the minute first spends a minute cell on a request the hour
/// refuses.) Time comes from the crate's [`Clock`](crate::clock::Clock): the system
/// clock in production, [`FakeClock`](crate::clock::FakeClock) in tests.
///
/// # Memory
///
/// An entry is a 16-byte [`ClientKey`] plus the 88-byte [`ClientWindows`] in
/// a `HashMap`; with its control byte and load factor that is 105 to 240
/// bytes of table per tracked key (measure with `cargo bench --bench
/// free_tier`, one million distinct clients). An entry with nothing left in
/// either window carries no information and is dropped by
/// [`InMemoryLimiter::sweep`]; each shard also sweeps itself on its first
/// request after [`auto_sweep_interval`](InMemoryLimiter::set_auto_sweep_interval)
/// (60 s by default). So the table holds at most the clients seen in the last
/// hour (and one sub-window) plus one sweep interval.
#[derive(Clone)]
pub struct InMemoryLimiter {
    shared: Arc<Shared>,
}

impl fmt::Debug for InMemoryLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryLimiter")
            .field("quotas", &self.shared.quotas)
            .finish_non_exhaustive()
    }
}

impl Default for InMemoryLimiter {
    fn default() -> Self {
        Self::new(FreeTierQuotas::default())
    }
}

impl InMemoryLimiter {
    /// A limiter with `quotas` on the system clock.
    pub fn new(quotas: FreeTierQuotas) -> Self {
        Self::new_with_clock(quotas, Arc::new(SystemClock))
    }

    /// A limiter with `quotas` reading time from `clock` (a
    /// [`FakeClock`](crate::clock::FakeClock) in tests).
    pub fn new_with_clock(quotas: FreeTierQuotas, clock: SharedClock) -> Self {
        let shards = (0..SHARD_COUNT)
            .map(|_| {
                Mutex::new(Shard {
                    entries: HashMap::new(),
                    last_sweep_millis: 0,
                })
            })
            .collect();
        Self {
            shared: Arc::new(Shared {
                quotas,
                clock,
                auto_sweep_millis: AtomicU64::new(60_000),
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
        let millis = every.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.shared
            .auto_sweep_millis
            .store(millis, Ordering::Relaxed);
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
        let now = shared.clock.now_unix_millis();
        let mut shard = self.shard(&key);
        let auto_sweep = shared.auto_sweep_millis.load(Ordering::Relaxed);
        if auto_sweep != 0 && now.saturating_sub(shard.last_sweep_millis) >= auto_sweep {
            shard.sweep(shared.quotas, now);
        }
        let max_keys = shared.max_keys_per_shard.load(Ordering::Relaxed);
        if shard.entries.len() >= max_keys && !shard.entries.contains_key(&key) {
            shard.sweep(shared.quotas, now);
            if shard.entries.len() >= max_keys {
                return Verdict::AtCapacity;
            }
        }
        match shard.entries.get_mut(&key) {
            Some(windows) => windows.decide(shared.quotas, now),
            None => {
                // A new client is only stored once it is admitted.
                let mut windows = ClientWindows::EMPTY;
                let verdict = windows.decide(shared.quotas, now);
                if matches!(verdict, Verdict::Allowed { .. }) {
                    shard.entries.insert(key, windows);
                }
                verdict
            }
        }
    }

    /// What `key` has left, without spending anything.
    pub fn peek(&self, key: ClientKey) -> QuotaUsage {
        let now = self.shared.clock.now_unix_millis();
        let windows = self
            .shard(&key)
            .entries
            .get(&key)
            .copied()
            .unwrap_or_default();
        windows.usage(self.shared.quotas, now)
    }

    /// Drops every idle key (nothing counted in either window) and releases
    /// table memory; returns what it did.
    pub fn sweep(&self) -> SweepReport {
        let now = self.shared.clock.now_unix_millis();
        let mut report = SweepReport {
            removed: 0,
            remaining: 0,
        };
        for shard in self.shared.shards.iter() {
            let mut shard = lock(shard);
            report.removed += shard.sweep(self.shared.quotas, now);
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

    fn shard(&self, key: &ClientKey) -> MutexGuard<'_, Shard> {
        let hash = self.shared.hasher.hash_one(key);
        // The high bits: the low ones also pick the bucket inside the shard's map.
        let index = usize::try_from(hash >> 58).unwrap_or(0) % SHARD_COUNT;
        lock(&self.shared.shards[index])
    }
}

/// A poisoned shard only means another request panicked mid-update; the
/// windows in it are still valid numbers, so keep serving.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FreeTierStore for InMemoryLimiter {
    fn check(&self, key: ClientKey) -> BoxFuture<'static, Result<Verdict, StoreError>> {
        Box::pin(ready(Ok(self.check_now(key))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::free_tier::{ConfigError, KeyPrefixes};

    const WALL_START_SECS: u64 = 1_800_000_000;

    fn limiter(quotas: FreeTierQuotas) -> (InMemoryLimiter, FakeClock) {
        let clock = FakeClock::at_unix_secs(WALL_START_SECS);
        (
            InMemoryLimiter::new_with_clock(quotas, Arc::new(clock.clone())),
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
    fn quotas_are_bounded_to_what_the_state_can_count() {
        assert_eq!(FreeTierQuotas::new(0, 10), Err(ConfigError::ZeroQuota));
        assert_eq!(
            FreeTierQuotas::new(30, 4_194_304),
            Err(ConfigError::QuotaTooLarge {
                requests: 4_194_304,
                max_requests: 4_194_303
            })
        );
        assert!(FreeTierQuotas::new(4_194_303, 4_194_303).is_ok());
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
        clock.advance(Duration::from_secs(61));
        assert_eq!(limiter.peek(client).remaining_per_minute, 30);
        assert_eq!(limiter.peek(client).remaining_per_hour, 0);
    }

    #[test]
    fn sweep_drops_only_idle_keys_and_shrinks() {
        let (limiter, clock) = limiter(FreeTierQuotas::default());
        limiter.set_auto_sweep_interval(None);
        for i in 0..1000u32 {
            limiter.check_now(key(&std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string()));
        }
        assert_eq!(limiter.len(), 1000);
        // Each key's one request leaves the hour window 3600 s + 1 ms later.
        clock.advance(Duration::from_secs(3599));
        limiter.check_now(key("192.0.2.1"));
        assert_eq!(limiter.sweep().removed, 0);
        clock.advance(Duration::from_millis(1001));
        let report = limiter.sweep();
        assert_eq!(
            report,
            SweepReport {
                removed: 1000,
                remaining: 1
            }
        );
        assert_eq!(limiter.len(), 1);
        clock.advance(Duration::from_secs(3600));
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
        clock.advance(Duration::from_secs(3601));
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
        clock.advance(Duration::from_secs(3601));
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

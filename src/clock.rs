//! Injectable wall-clock time.
//!
//! Every check that depends on "now" (JWT `exp`, SIWE `issued-at`, an x402
//! authorization's `validBefore`, nonce expiry) reads a [`Clock`], so tests can
//! use [`FakeClock`] and never sleep.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_unix_millis(&self) -> u64;

    /// Whole seconds since the Unix epoch (rounded down).
    fn now_unix_secs(&self) -> u64 {
        self.now_unix_millis() / 1000
    }
}

/// A shareable, type-erased clock, as layers store it.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Clone, Debug)]
pub struct FakeClock {
    unix_millis: Arc<AtomicU64>,
}

impl FakeClock {
    /// A clock standing at `unix_secs` seconds after the epoch.
    pub fn at_unix_secs(unix_secs: u64) -> Self {
        Self {
            unix_millis: Arc::new(AtomicU64::new(unix_secs.saturating_mul(1000))),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.unix_millis.fetch_add(millis, Ordering::SeqCst);
    }

    /// Sets the clock to `unix_secs` seconds after the epoch (it may go back).
    pub fn set_unix_secs(&self, unix_secs: u64) {
        self.unix_millis
            .store(unix_secs.saturating_mul(1000), Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_unix_millis(&self) -> u64 {
        self.unix_millis.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_clones_share_time() {
        let clock = FakeClock::at_unix_secs(100);
        let other = clock.clone();
        clock.advance(Duration::from_millis(1500));
        assert_eq!(other.now_unix_millis(), 101_500);
        assert_eq!(other.now_unix_secs(), 101);
    }

    #[test]
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now_unix_secs() > 1_700_000_000);
    }
}

//! The free-tier rule: [`ClientWindows`], a pure function over one client's
//! state, with its input ([`FreeTierQuotas`]) and its answers ([`Verdict`],
//! [`QuotaUsage`]).

use std::num::NonZeroU32;
use std::time::Duration;

use super::ConfigError;
use crate::envelope::RateLimitInfo;

/// Slots of the minute ring: six sub-windows of 10 s, plus one.
const MINUTE_SLOTS: usize = 7;
/// Slots of the hour ring: twelve sub-windows of 5 min, plus one.
const HOUR_SLOTS: usize = 13;

/// One quota's window geometry (the limit comes from [`FreeTierQuotas`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Geometry {
    pub(crate) window_millis: u64,
    pub(crate) slot_millis: u64,
    /// Resolution of a slot's last-request time.
    pub(crate) unit_millis: u64,
    /// Low bits of a slot's word holding that time in units; the high bits
    /// hold the count.
    pub(crate) offset_bits: u32,
}

/// How one ring cuts its window: sub-windows (its slots are one more) and
/// the most units of time a slot's word holds.
#[derive(Clone, Copy)]
struct Cut {
    sub_windows: u64,
    max_units: u64,
    offset_bits: u32,
}

/// The minute ring: six sub-windows; 1000 units (10 ms each for 60 s) in 10 bits,
/// so 22 bits of count.
const MINUTE_CUT: Cut = Cut {
    sub_windows: MINUTE_SLOTS as u64 - 1,
    max_units: 1000,
    offset_bits: 10,
};

/// The hour ring: twelve sub-windows; 300 units (1 s each for an hour) in 9
/// bits, so 23 bits of count.
const HOUR_CUT: Cut = Cut {
    sub_windows: HOUR_SLOTS as u64 - 1,
    max_units: 300,
    offset_bits: 9,
};

impl Cut {
    /// The geometry of a window of `window_millis`: sub-windows rounded up to
    /// whole milliseconds (so they cover the window), units rounded up so a
    /// sub-window holds at most `max_units`.
    const fn geometry(self, window_millis: u64) -> Geometry {
        let slot_millis = window_millis.div_ceil(self.sub_windows);
        Geometry {
            window_millis,
            slot_millis,
            unit_millis: slot_millis.div_ceil(self.max_units),
            offset_bits: self.offset_bits,
        }
    }
}

/// 60 s in sub-windows of 10 s, last times in units of 10 ms.
pub(crate) const MINUTE: Geometry = MINUTE_CUT.geometry(60_000);

/// An hour in sub-windows of 5 min, last times in units of 1 s.
pub(crate) const HOUR: Geometry = HOUR_CUT.geometry(3_600_000);

/// The shortest window (one millisecond per sub-window of the hour ring).
const MIN_WINDOW_MILLIS: u64 = HOUR_SLOTS as u64 - 1;

/// The longest window: 30 days.
const MAX_WINDOW_MILLIS: u64 = 30 * 24 * 3_600_000;

/// The largest quota both rings count: 2^22 - 1 (the minute ring's count bits).
pub(super) const MAX_REQUESTS: u32 = u32::MAX >> MINUTE.offset_bits;

/// One quota's ring of slots: per slot, one word with the count of admitted
/// requests (high bits) and the time of the last one, in `unit_millis` after
/// the slot's start (low `offset_bits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ring<const N: usize> {
    words: [u32; N],
}

/// One quota at one instant.
#[derive(Clone, Copy, Debug)]
struct Assessment {
    /// Admitted requests counted in the window.
    used: u32,
    /// When no counted request is left in the window.
    full_at: u64,
    /// When the window counts at most `limit - 1`, so a request is admitted.
    admits_at: u64,
}

impl<const N: usize> Ring<N> {
    const EMPTY: Self = Self { words: [0; N] };

    /// `(last request time, count)` of every occupied slot, given the
    /// client's last admitted time `anchor` (which fixes each slot's period).
    fn slots(&self, geometry: Geometry, anchor: u64) -> [(u64, u32); N] {
        let newest = anchor / geometry.slot_millis;
        let n = N as u64;
        std::array::from_fn(|i| {
            let age = (newest % n + n - i as u64) % n;
            let start = (newest - age.min(newest)) * geometry.slot_millis;
            let word = self.words[i];
            let offset = u64::from(word & ((1 << geometry.offset_bits) - 1));
            (
                start + offset * geometry.unit_millis,
                word >> geometry.offset_bits,
            )
        })
    }

    fn assess(&self, geometry: Geometry, limit: u32, anchor: u64, now: u64) -> Assessment {
        let mut counted = self.slots(geometry, anchor);
        // Slots whose last request left the closed window count nothing.
        for slot in &mut counted {
            if slot.0.saturating_add(geometry.window_millis) < now {
                slot.1 = 0;
            }
        }
        counted.sort_unstable();
        let used: u32 = counted.iter().map(|&(_, count)| count).sum();
        let leaves = |last: u64| last + geometry.window_millis + 1;
        let full_at = counted
            .iter()
            .filter(|slot| slot.1 > 0)
            .map(|&(last, _)| leaves(last))
            .max()
            .unwrap_or(now);
        // Oldest first: drop slots until the rest leaves room for one.
        let mut admits_at = now;
        let mut left = used;
        for &(last, count) in counted.iter().filter(|slot| slot.1 > 0) {
            if left < limit {
                break;
            }
            left -= count;
            admits_at = leaves(last);
        }
        Assessment {
            used,
            full_at,
            admits_at,
        }
    }

    /// Counts one request at `now`; `anchor` is the previous last admitted time.
    fn record(&mut self, geometry: Geometry, anchor: u64, now: u64) {
        let (old, new) = (anchor / geometry.slot_millis, now / geometry.slot_millis);
        // Slots of periods that ended a whole ring ago are reused: empty them.
        for period in (old + 1..=new).take(N) {
            let i = (period % N as u64) as usize;
            self.words[i] = 0;
        }
        let i = (new % N as u64) as usize;
        // At most `slot_millis / unit_millis`, which fits `offset_bits`.
        let offset = (now - new * geometry.slot_millis).div_ceil(geometry.unit_millis);
        let offset = u32::try_from(offset).unwrap_or(u32::MAX) & ((1 << geometry.offset_bits) - 1);
        // The count never passes the quota, which fits the high bits.
        let count = (self.words[i] >> geometry.offset_bits).saturating_add(1);
        self.words[i] = count << geometry.offset_bits | offset;
    }
}

/// One client's free-tier state: both quotas' rings and its last admitted
/// time, and the rule over it ([`decide`](Self::decide)).
///
/// # The rule
///
/// A request at time `t` (Unix milliseconds) is admitted when, for **both**
/// quotas, fewer than `limit` admitted requests are counted in the closed
/// window `[t - length, t]`; then it is counted in both, otherwise in neither.
///
/// # The algorithm: sub-windows that remember their last request
///
/// Each quota's window is cut into sub-windows (the minute into six of 10 s,
/// the hour into twelve of 5 min) and a ring of `sub-windows + 1` slots keeps,
/// per slot, how many requests were admitted in it and when the **last** of
/// them was. A slot is counted whole while its last request is inside the
/// window, and dropped as soon as that last request leaves it.
///
/// * **Never late (exact upper bound).** Every admitted request in
///   `[t - length, t]` sits in a slot whose last request is at or after it, so
///   that slot is counted at `t`; the ring has one slot more than the window
///   has sub-windows, so no slot still in the window is ever reused. Hence no
///   closed window of the quota's length ever holds more than `limit` admitted
///   requests.
/// * **Early by at most one sub-window.** A counted slot started less than one
///   sub-window before the window, so a refusal at `t` means `limit` requests
///   were admitted in `(t - length - sub-window, t]`: the minute quota refuses
///   only after 30 requests within the last 70 s, the hour quota only after 300
///   within the last 65 min (plus the rounding below). Requests that all fall in the same sub-window (a
///   burst) leave the window exactly `length` after the burst's last request.
/// * **Small.** The state is the client's last admitted time (8 bytes) plus
///   one `u32` per slot (count and last time packed):
///   [`SIZE_BYTES`](Self::SIZE_BYTES) = 88 bytes. The last time inside a slot is
///   kept in units of 10 ms (minute) and 1 s (hour), rounded up, which can
///   only keep a request counted that much longer; the count gets the other
///   22 (minute) and 23 (hour) bits, hence the largest quota of 4 194 303.
/// * **Time.** Wall-clock milliseconds from the crate's [`Clock`](crate::clock::Clock).
///   A clock that steps back is read as standing still at the last admitted
///   time, so a step back never frees quota.
///
/// A shared store (Redis) keeps the same 88 bytes per client (see
/// [`to_bytes`](Self::to_bytes)) and runs [`decide`](Self::decide) atomically
/// (a Lua port of it, or optimistic `WATCH`/`MULTI`), so every replica applies
/// the same rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientWindows {
    last_admitted_unix_millis: u64,
    minute: Ring<MINUTE_SLOTS>,
    hour: Ring<HOUR_SLOTS>,
}

impl Default for ClientWindows {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl ClientWindows {
    /// A client that has made no request.
    pub const EMPTY: Self = Self {
        last_admitted_unix_millis: 0,
        minute: Ring::EMPTY,
        hour: Ring::EMPTY,
    };

    /// The size of [`to_bytes`](Self::to_bytes).
    pub const SIZE_BYTES: usize = 8 + 4 * (MINUTE_SLOTS + HOUR_SLOTS);

    /// Decides a request at `now_unix_millis`: admitted (counted in both
    /// quotas) or refused (nothing changes).
    pub fn decide(&mut self, quotas: FreeTierQuotas, now_unix_millis: u64) -> Verdict {
        let anchor = self.last_admitted_unix_millis;
        let now = now_unix_millis.max(anchor);
        let (minute_limit, hour_limit) = (quotas.per_minute(), quotas.per_hour());
        let [minute, hour] = self.assess(quotas, now);
        if minute.used < minute_limit && hour.used < hour_limit {
            self.minute.record(quotas.minute, anchor, now);
            self.hour.record(quotas.hour, anchor, now);
            self.last_admitted_unix_millis = now;
            let minute_left = minute_limit - minute.used - 1;
            let hour_left = hour_limit - hour.used - 1;
            // The tighter quota: fewer left; on a tie, the hour (full later).
            let (limit, remaining, window) = if minute_left < hour_left {
                (minute_limit, minute_left, quotas.minute)
            } else {
                (hour_limit, hour_left, quotas.hour)
            };
            // This request is now the newest one counted.
            let full_at = window.stored(now) + window.window_millis + 1;
            return Verdict::Allowed {
                rate_limit: RateLimitInfo {
                    limit,
                    remaining,
                    reset_unix_millis: full_at,
                },
            };
        }
        // Wait for the slowest refusing quota and describe that one.
        let refusing = [(minute, minute_limit), (hour, hour_limit)]
            .into_iter()
            .filter(|(assessment, limit)| assessment.used >= *limit)
            .max_by_key(|(assessment, _)| assessment.admits_at);
        let (assessment, limit) = refusing.unwrap_or((minute, minute_limit));
        Verdict::Refused {
            retry_after: Duration::from_millis(
                assessment.admits_at.saturating_sub(now_unix_millis),
            ),
            rate_limit: RateLimitInfo {
                limit,
                remaining: 0,
                reset_unix_millis: assessment.full_at,
            },
        }
    }

    /// What the client has left at `now_unix_millis`, spending nothing.
    pub fn usage(&self, quotas: FreeTierQuotas, now_unix_millis: u64) -> QuotaUsage {
        let now = now_unix_millis.max(self.last_admitted_unix_millis);
        let [minute, hour] = self.assess(quotas, now);
        QuotaUsage {
            remaining_per_minute: quotas.per_minute().saturating_sub(minute.used),
            remaining_per_hour: quotas.per_hour().saturating_sub(hour.used),
        }
    }

    /// Whether nothing is counted at `now_unix_millis` in the windows of
    /// `quotas`: the state carries no information and may be forgotten.
    pub fn is_idle(&self, quotas: FreeTierQuotas, now_unix_millis: u64) -> bool {
        let now = now_unix_millis.max(self.last_admitted_unix_millis);
        self.assess(quotas, now).iter().all(|quota| quota.used == 0)
    }

    /// The state as [`SIZE_BYTES`](Self::SIZE_BYTES) little-endian bytes, for
    /// a shared store.
    pub fn to_bytes(&self) -> [u8; Self::SIZE_BYTES] {
        let mut bytes = [0; Self::SIZE_BYTES];
        bytes[..8].copy_from_slice(&self.last_admitted_unix_millis.to_le_bytes());
        let words = self.minute.words.iter().chain(&self.hour.words);
        for (chunk, word) in bytes[8..].chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    /// The state [`to_bytes`](Self::to_bytes) wrote.
    pub fn from_bytes(bytes: &[u8; Self::SIZE_BYTES]) -> Self {
        let mut millis = [0; 8];
        millis.copy_from_slice(&bytes[..8]);
        let mut words = bytes[8..]
            .chunks_exact(4)
            .map(|chunk| u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
        let mut next = || words.next().unwrap_or(0);
        let mut windows = Self::EMPTY;
        windows.last_admitted_unix_millis = u64::from_le_bytes(millis);
        windows.minute.words = std::array::from_fn(|_| next());
        windows.hour.words = std::array::from_fn(|_| next());
        windows
    }

    fn assess(&self, quotas: FreeTierQuotas, now: u64) -> [Assessment; 2] {
        let anchor = self.last_admitted_unix_millis;
        [
            self.minute
                .assess(quotas.minute, quotas.per_minute(), anchor, now),
            self.hour
                .assess(quotas.hour, quotas.per_hour(), anchor, now),
        ]
    }
}

impl Geometry {
    /// `at` as a ring stores it: rounded up to the ring's resolution.
    fn stored(&self, at: u64) -> u64 {
        let start = at - at % self.slot_millis;
        start + (at - start).div_ceil(self.unit_millis) * self.unit_millis
    }
}

/// The free tier's two quotas: requests per minute and per hour.
///
/// Sliding windows: 30 per minute means at most 30 admitted requests in any
/// 60 s, whenever they come (a burst of 30 waits a whole minute). The
/// algorithm and its small early-refusal margin are described in
/// [`ClientWindows`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FreeTierQuotas {
    per_minute: NonZeroU32,
    per_hour: NonZeroU32,
    minute: Geometry,
    hour: Geometry,
}

impl Default for FreeTierQuotas {
    /// 30 per minute and 300 per hour (specification, section 8).
    fn default() -> Self {
        Self {
            per_minute: NonZeroU32::MIN.saturating_add(29),
            per_hour: NonZeroU32::MIN.saturating_add(299),
            minute: MINUTE,
            hour: HOUR,
        }
    }
}

impl FreeTierQuotas {
    /// The largest quota, 4 194 303: what a client's state can count (see
    /// [`ClientWindows`]).
    pub const MAX_REQUESTS: u32 = MAX_REQUESTS;

    /// `per_minute` and `per_hour` requests; both must be from 1 to
    /// [`MAX_REQUESTS`](Self::MAX_REQUESTS).
    pub fn new(per_minute: u32, per_hour: u32) -> Result<Self, ConfigError> {
        let valid = |requests: u32| {
            if requests > Self::MAX_REQUESTS {
                return Err(ConfigError::QuotaTooLarge {
                    requests,
                    max_requests: Self::MAX_REQUESTS,
                });
            }
            NonZeroU32::new(requests).ok_or(ConfigError::ZeroQuota)
        };
        Ok(Self {
            per_minute: valid(per_minute)?,
            per_hour: valid(per_hour)?,
            minute: MINUTE,
            hour: HOUR,
        })
    }

    /// The same quotas counted over other window lengths than 60 s and 1 h:
    /// `per_minute` requests in any `minute`, `per_hour` in any `hour`.
    ///
    /// For tests of a store that runs on real time (Redis takes its time
    /// from the server): say 3 per 2 s and 5 per 6 s. The rule and its
    /// margin scale with the windows (six and twelve sub-windows, rounded up
    /// to whole milliseconds). Each window is from 12 ms to 30 days.
    pub fn with_windows(mut self, minute: Duration, hour: Duration) -> Result<Self, ConfigError> {
        let millis = |window: Duration| {
            u64::try_from(window.as_millis())
                .ok()
                .filter(|millis| (MIN_WINDOW_MILLIS..=MAX_WINDOW_MILLIS).contains(millis))
                .ok_or(ConfigError::InvalidWindow { window })
        };
        self.minute = MINUTE_CUT.geometry(millis(minute)?);
        self.hour = HOUR_CUT.geometry(millis(hour)?);
        Ok(self)
    }

    /// The length of the window `per_minute` counts in (60 s by default).
    pub fn minute_window(&self) -> Duration {
        Duration::from_millis(self.minute.window_millis)
    }

    /// The length of the window `per_hour` counts in (1 h by default).
    pub fn hour_window(&self) -> Duration {
        Duration::from_millis(self.hour.window_millis)
    }

    /// Both rings' geometry, for a store that runs the rule elsewhere.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn geometries(&self) -> [Geometry; 2] {
        [self.minute, self.hour]
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

/// What is left of a client's quotas, without spending any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaUsage {
    /// Requests the minute quota would admit now.
    pub remaining_per_minute: u32,
    /// Requests the hour quota would admit now.
    pub remaining_per_hour: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;
    const SEC: u64 = 1000;

    fn allowed(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::Allowed { .. })
    }

    /// Default quotas: refused at `at`, admitted one millisecond later.
    fn refused_at_then_admitted_just_after(w: &mut ClientWindows, at: u64) {
        refused_at_then_admitted_just_after_with(FreeTierQuotas::default(), w, at);
    }

    fn refused_at_then_admitted_just_after_with(q: FreeTierQuotas, w: &mut ClientWindows, at: u64) {
        assert!(!allowed(&w.decide(q, at)));
        assert!(allowed(&w.decide(q, at + 1)));
    }

    fn quotas(per_minute: u32, per_hour: u32) -> FreeTierQuotas {
        FreeTierQuotas::new(per_minute, per_hour).unwrap()
    }

    #[test]
    fn thirty_then_refused_at_thirty_seconds_and_admitted_just_after_a_minute() {
        let mut w = ClientWindows::EMPTY;
        for _ in 0..30 {
            assert!(allowed(&w.decide(FreeTierQuotas::default(), T0)));
        }
        let refused = w.decide(FreeTierQuotas::default(), T0 + 30 * SEC);
        assert_eq!(
            refused,
            Verdict::Refused {
                retry_after: Duration::from_millis(30_001),
                rate_limit: RateLimitInfo {
                    limit: 30,
                    remaining: 0,
                    reset_unix_millis: T0 + 60 * SEC + 1,
                },
            }
        );
        // The closed window [t - 60 s, t] still holds the burst at exactly 60 s.
        refused_at_then_admitted_just_after(&mut w, T0 + 60 * SEC);
    }

    #[test]
    fn three_hundred_over_fifty_minutes_then_refused_before_the_hour_ends() {
        let mut w = ClientWindows::EMPTY;
        // One every 10 s: well within the minute quota.
        for i in 0..300 {
            assert!(allowed(
                &w.decide(FreeTierQuotas::default(), T0 + i * 10 * SEC)
            ));
        }
        let at = T0 + 59 * 60 * SEC;
        match w.decide(FreeTierQuotas::default(), at) {
            Verdict::Refused {
                retry_after,
                rate_limit,
            } => {
                assert_eq!(rate_limit.limit, 300);
                // The first 5-min slot's last request (t0 + 290 s) leaves at
                // t0 + 3890 s + 1 ms: early by less than one sub-window.
                assert_eq!(
                    retry_after,
                    Duration::from_millis(3890 * SEC + 1 - 59 * 60 * SEC)
                );
            }
            other => panic!("admitted the 301st request in an hour: {other:?}"),
        }
        refused_at_then_admitted_just_after(&mut w, T0 + 3890 * SEC);
    }

    #[test]
    fn a_refusal_by_either_quota_spends_nothing() {
        let mut w = ClientWindows::EMPTY;
        let q = quotas(30, 3);
        for _ in 0..3 {
            assert!(allowed(&w.decide(q, T0)));
        }
        let before = w;
        for _ in 0..50 {
            assert!(!allowed(&w.decide(q, T0 + SEC)));
        }
        assert_eq!(w, before);
        assert_eq!(w.usage(q, T0 + 61 * SEC).remaining_per_minute, 30);
        assert_eq!(w.usage(q, T0 + 61 * SEC).remaining_per_hour, 0);
    }

    #[test]
    fn admitted_headers_describe_the_tighter_quota() {
        let mut w = ClientWindows::EMPTY;
        let Verdict::Allowed { rate_limit } = w.decide(FreeTierQuotas::default(), T0) else {
            panic!("first request refused");
        };
        assert_eq!(
            rate_limit,
            RateLimitInfo {
                limit: 30,
                remaining: 29,
                reset_unix_millis: T0 + 60 * SEC + 1,
            }
        );
        // 300 per hour and 300 per minute: equal, the hour describes itself.
        let mut w = ClientWindows::EMPTY;
        let Verdict::Allowed { rate_limit } = w.decide(quotas(300, 300), T0) else {
            panic!("first request refused");
        };
        assert_eq!((rate_limit.limit, rate_limit.remaining), (300, 299));
        assert_eq!(rate_limit.reset_unix_millis, T0 + 3600 * SEC + 1);
    }

    #[test]
    fn counts_beyond_sixteen_bits_in_one_slot() {
        let q = quotas(70_000, FreeTierQuotas::MAX_REQUESTS);
        let mut w = ClientWindows::EMPTY;
        for i in 0..70_000 {
            assert!(allowed(&w.decide(q, T0 + i / 8)), "request {i}");
        }
        assert!(!allowed(&w.decide(q, T0 + 9_999)));
        assert_eq!(
            w.usage(q, T0 + 9_999).remaining_per_hour,
            FreeTierQuotas::MAX_REQUESTS - 70_000
        );
    }

    #[test]
    fn a_clock_stepping_back_frees_nothing() {
        let mut w = ClientWindows::EMPTY;
        for _ in 0..30 {
            assert!(allowed(
                &w.decide(FreeTierQuotas::default(), T0 + 100 * SEC)
            ));
        }
        assert!(!allowed(&w.decide(FreeTierQuotas::default(), T0)));
        refused_at_then_admitted_just_after(&mut w, T0 + 160 * SEC);
    }

    #[test]
    fn idle_after_the_hour_and_bytes_round_trip() {
        let mut w = ClientWindows::EMPTY;
        assert!(w.is_idle(FreeTierQuotas::default(), T0));
        w.decide(FreeTierQuotas::default(), T0 + 123);
        w.decide(FreeTierQuotas::default(), T0 + 7 * 60 * SEC);
        assert_eq!(ClientWindows::from_bytes(&w.to_bytes()), w);
        assert!(!w.is_idle(FreeTierQuotas::default(), T0 + 67 * 60 * SEC));
        assert!(w.is_idle(FreeTierQuotas::default(), T0 + 67 * 60 * SEC + 1));
        assert_eq!(
            std::mem::size_of::<ClientWindows>(),
            ClientWindows::SIZE_BYTES
        );
    }

    #[test]
    fn windows_scale_the_rule_and_keep_the_default_geometry() {
        assert_eq!((MINUTE.slot_millis, MINUTE.unit_millis), (10_000, 10));
        assert_eq!((HOUR.slot_millis, HOUR.unit_millis), (300_000, 1000));
        let q = quotas(3, 5)
            .with_windows(Duration::from_secs(2), Duration::from_secs(6))
            .unwrap();
        assert_eq!(q.minute_window(), Duration::from_secs(2));
        assert_eq!((q.minute.slot_millis, q.minute.unit_millis), (334, 1));
        assert_eq!((q.hour.slot_millis, q.hour.unit_millis), (500, 2));
        // A burst of 3 leaves the 2 s window 2 s and 1 ms later.
        let mut w = ClientWindows::EMPTY;
        for _ in 0..3 {
            assert!(allowed(&w.decide(q, T0)));
        }
        match w.decide(q, T0 + 1000) {
            Verdict::Refused {
                retry_after,
                rate_limit,
            } => {
                assert_eq!(retry_after, Duration::from_millis(1001));
                assert_eq!(
                    (rate_limit.limit, rate_limit.reset_unix_millis),
                    (3, T0 + 2001)
                );
            }
            other => panic!("admitted a 4th request in 2 s: {other:?}"),
        }
        refused_at_then_admitted_just_after_with(q, &mut w, T0 + 2000);
        // Then the 6 s window holds 5 at most.
        assert!(allowed(&w.decide(q, T0 + 2001)));
        assert!(!allowed(&w.decide(q, T0 + 2002)));
        // Its last time is kept in the hour ring's 2 ms units, rounded up.
        assert!(!w.is_idle(q, T0 + 2002 + 6000));
        assert!(w.is_idle(q, T0 + 2002 + 6001));
        for bad in [
            Duration::from_millis(11),
            Duration::from_secs(31 * 24 * 3600),
        ] {
            assert_eq!(
                quotas(3, 5).with_windows(bad, Duration::from_secs(6)),
                Err(ConfigError::InvalidWindow { window: bad })
            );
        }
    }

    /// xorshift64*: a fixed, dependency-free pseudo-random sequence.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Admitted requests in the closed window `[end - length, end]`.
    fn in_window(admitted: &[u64], end: u64, length: u64) -> usize {
        // `admitted` is in time order.
        let from = admitted.partition_point(|&t| t + length < end);
        let to = admitted.partition_point(|&t| t <= end);
        to.saturating_sub(from)
    }

    /// Random bursts and gaps against the specification's rule, checked by
    /// brute force: never more than the limit in any window of either length;
    /// a refusal only when the limit was reached within one sub-window more;
    /// `Retry-After` exact (refused just before, admitted at it).
    #[test]
    fn random_arrivals_never_exceed_any_window_and_refuse_early_by_at_most_one_sub_window() {
        let small = |q: FreeTierQuotas| {
            q.with_windows(Duration::from_secs(2), Duration::from_secs(6))
                .unwrap()
        };
        for (seed, q) in [
            (1, quotas(30, 300)),
            (2, quotas(5, 20)),
            (3, quotas(3, 7)),
            (4, quotas(1, 2)),
            // The windows the Redis contract tests run on real time.
            (5, small(quotas(3, 5))),
            (6, small(quotas(4, 6))),
        ] {
            let (per_minute, per_hour) = (q.per_minute(), q.per_hour());
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
            let mut w = ClientWindows::EMPTY;
            let mut admitted: Vec<u64> = Vec::new();
            let mut refused = 0;
            let mut now = T0 + rng.below(3_600_000);
            for _ in 0..20_000 {
                // Mostly bursts, sometimes long pauses, sometimes the same instant.
                now += match rng.below(10) {
                    0..=5 => rng.below(SEC),
                    6..=7 => rng.below(15 * SEC),
                    8 => 0,
                    _ if rng.below(20) == 0 => rng.below(30 * 60 * SEC),
                    _ => rng.below(SEC),
                };
                let mut probe = w;
                match w.decide(q, now) {
                    Verdict::Allowed { .. } => admitted.push(now),
                    Verdict::Refused { retry_after, .. } => {
                        refused += 1;
                        let margin = |g: Geometry| g.window_millis + g.slot_millis + g.unit_millis;
                        let minute_full =
                            in_window(&admitted, now, margin(q.minute)) >= per_minute as usize;
                        let hour_full =
                            in_window(&admitted, now, margin(q.hour)) >= per_hour as usize;
                        assert!(minute_full || hour_full, "refused too early at {now}");
                        let at = now + u64::try_from(retry_after.as_millis()).unwrap();
                        assert!(allowed(&probe.decide(q, at)), "Retry-After too short");
                        let mut probe = w;
                        assert!(!allowed(&probe.decide(q, at - 1)), "Retry-After too long");
                    }
                    Verdict::AtCapacity => unreachable!(),
                }
                assert_eq!(ClientWindows::from_bytes(&w.to_bytes()), w);
            }
            assert!(
                admitted.len() > 50 && refused > 50,
                "seed {seed}: {} admitted, {refused} refused",
                admitted.len()
            );
            for &end in &admitted {
                assert!(in_window(&admitted, end, q.minute.window_millis) <= per_minute as usize);
                assert!(in_window(&admitted, end, q.hour.window_millis) <= per_hour as usize);
            }
        }
    }
}

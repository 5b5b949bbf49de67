//! Metered streams cut by their payer. A payment that authorises a maximum
//! (`upto`) pays only when its stream ends, so a client that reads a stream
//! and hangs up before its end pays nothing. One such cut is a network; many
//! in a row are a pattern: the payer is then served `exact` only (paid in
//! full before the answer) for a while.
//!
//! The count is this process's: replicas count apart, and a restart forgets
//! it (a documented limit; what the payer gains is bounded by `cuts` streams
//! per replica per window).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// The refusal reason of a metered payment from a payer served `exact` only.
pub const METERED_PAYMENTS_SUSPENDED: &str = "metered_payments_suspended";

/// Payers tracked at once; past it, expired entries go first, then the
/// payer seen longest ago (so memory stays bounded whatever the traffic).
const MAX_PAYERS: usize = 16_384;

/// How many metered streams a payer may cut before it is served `exact`
/// only, and for how long (set with
/// [`X402LayerBuilder::with_cut_stream_limit`](crate::x402::server::X402LayerBuilder::with_cut_stream_limit)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CutStreamLimit {
    /// Cuts in a row, within `within`, that suspend metered payments.
    pub cuts: u32,
    /// The window the cuts are counted in.
    pub within: Duration,
    /// How long the payer is then served `exact` only.
    pub exact_only_for: Duration,
}

impl CutStreamLimit {
    /// 3 cuts within 10 minutes → `exact` only for 10 minutes.
    pub const DEFAULT: Self = Self {
        cuts: 3,
        within: Duration::from_secs(600),
        exact_only_for: Duration::from_secs(600),
    };

    /// `cuts` cut streams within `within` → `exact` only for `exact_only_for`.
    pub fn new(cuts: u32, within: Duration, exact_only_for: Duration) -> Self {
        Self {
            cuts,
            within,
            exact_only_for,
        }
    }

    /// Never suspends (every cut stream is still free to its payer).
    pub fn off() -> Self {
        Self {
            cuts: 0,
            ..Self::DEFAULT
        }
    }
}

impl Default for CutStreamLimit {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[derive(Default)]
struct Payer {
    /// Unix seconds of the cuts in the current row, oldest first.
    cuts: VecDeque<u64>,
    suspended_until: u64,
    last_seen: u64,
}

/// The cut streams of each payer, by lowercase address.
pub(crate) struct CutStreams {
    limit: CutStreamLimit,
    payers: Mutex<HashMap<String, Payer>>,
}

impl CutStreams {
    pub(crate) fn new(limit: CutStreamLimit) -> Self {
        Self {
            limit,
            payers: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `payer`'s metered payments are refused at `now`.
    pub(crate) fn exact_only(&self, payer: &str, now: u64) -> bool {
        if self.limit.cuts == 0 {
            return false;
        }
        let payers = self.payers.lock().expect("cut streams lock");
        payers
            .get(&payer.to_ascii_lowercase())
            .is_some_and(|record| record.suspended_until > now)
    }

    /// `payer` cut a metered stream at `now`; true when that suspends it.
    pub(crate) fn cut(&self, payer: &str, now: u64) -> bool {
        if self.limit.cuts == 0 || payer.is_empty() {
            return false;
        }
        let mut payers = self.payers.lock().expect("cut streams lock");
        if payers.len() >= MAX_PAYERS {
            make_room(&mut payers, now);
        }
        let record = payers.entry(payer.to_ascii_lowercase()).or_default();
        record.last_seen = now;
        let window_start = now.saturating_sub(self.limit.within.as_secs());
        while record.cuts.front().is_some_and(|&at| at < window_start) {
            record.cuts.pop_front();
        }
        record.cuts.push_back(now);
        if record.cuts.len() < self.limit.cuts as usize {
            return false;
        }
        record.cuts.clear();
        record.suspended_until = now.saturating_add(self.limit.exact_only_for.as_secs());
        true
    }

    /// `payer` let a metered stream end: the row is broken.
    pub(crate) fn completed(&self, payer: &str) {
        if self.limit.cuts == 0 {
            return;
        }
        let mut payers = self.payers.lock().expect("cut streams lock");
        if let Some(record) = payers.get_mut(&payer.to_ascii_lowercase()) {
            record.cuts.clear();
        }
    }
}

/// Drops payers neither suspended nor cutting lately; if none is, the one
/// seen longest ago.
fn make_room(payers: &mut HashMap<String, Payer>, now: u64) {
    payers.retain(|_, record| record.suspended_until > now || !record.cuts.is_empty());
    if payers.len() >= MAX_PAYERS
        && let Some(oldest) = payers
            .iter()
            .min_by_key(|(_, record)| record.last_seen)
            .map(|(payer, _)| payer.clone())
    {
        payers.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYER: &str = "0xF39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

    #[test]
    fn three_cuts_in_a_row_serve_exact_only_for_ten_minutes() {
        let cuts = CutStreams::new(CutStreamLimit::DEFAULT);
        assert!(!cuts.cut(PAYER, 1_000));
        assert!(!cuts.cut(PAYER, 1_100));
        assert!(!cuts.exact_only(PAYER, 1_100));
        assert!(
            cuts.cut(&PAYER.to_lowercase(), 1_200),
            "any case of one address"
        );
        assert!(cuts.exact_only(PAYER, 1_200));
        assert!(cuts.exact_only(PAYER, 1_799));
        assert!(!cuts.exact_only(PAYER, 1_800), "for ten minutes only");
        assert!(!cuts.exact_only("0x70997970C51812dc3A010C7d01b50e0d17dc79C8", 1_200));
    }

    #[test]
    fn cuts_outside_the_window_or_broken_by_a_completed_stream_do_not_count() {
        let cuts = CutStreams::new(CutStreamLimit::DEFAULT);
        cuts.cut(PAYER, 1_000);
        cuts.cut(PAYER, 1_100);
        assert!(
            !cuts.cut(PAYER, 1_700),
            "the first is older than ten minutes"
        );
        cuts.completed(PAYER);
        assert!(!cuts.cut(PAYER, 1_710));
        assert!(!cuts.cut(PAYER, 1_720));
        assert!(cuts.cut(PAYER, 1_730));
    }

    #[test]
    fn off_never_suspends() {
        let cuts = CutStreams::new(CutStreamLimit::off());
        for at in 0..10 {
            assert!(!cuts.cut(PAYER, at));
        }
        assert!(!cuts.exact_only(PAYER, 10));
    }

    #[test]
    fn memory_stays_bounded_by_the_payers_it_tracks() {
        let cuts = CutStreams::new(CutStreamLimit::DEFAULT);
        for n in 0..MAX_PAYERS + 10 {
            cuts.cut(&format!("0x{n:040x}"), n as u64);
        }
        assert!(cuts.payers.lock().unwrap().len() <= MAX_PAYERS);
    }
}

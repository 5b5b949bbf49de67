//! Payers whose payments cost the settler gas or simulations for nothing,
//! refused for a while.
//!
//! Counted: the payer's own failed simulations, gas-cap refusals and
//! reverted transactions. Not counted: copies of an authorization already
//! used or out of its time window, since anyone holding a copy can send them.
//! A contract payer is also known by its code hash, so the same hostile
//! wallet deployed again at a fresh address is refused too.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use alloy_primitives::{Address, B256};

/// Failures within [`FAILURE_WINDOW_SECS`] above which a payer is refused.
pub const MAX_FAILURES: usize = 3;
/// The window failures are counted in.
pub const FAILURE_WINDOW_SECS: u64 = 600;
/// How long a payer over [`MAX_FAILURES`] is refused.
pub const FAILURE_DENIAL_SECS: u64 = 600;
/// How long a payer whose settlement reverted on chain is refused: the
/// settler paid for it, and the simulation had passed.
pub const REVERT_DENIAL_SECS: u64 = 3600;
/// Payers remembered at most: past it, those with nothing current are forgotten.
const MAX_TRACKED: usize = 100_000;

/// Who a payer is: its address, and its code's hash if it is a contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Identity {
    Address(Address),
    Code(B256),
}

#[derive(Debug, Default)]
struct Standing {
    /// When each counted failure happened, oldest first.
    failures: Vec<u64>,
    /// Refused until then.
    denied_until: u64,
}

/// The settler's memory of payers' failures (per process).
#[derive(Debug, Default)]
pub(super) struct PayerStandings {
    standings: Mutex<HashMap<Identity, Standing>>,
}

/// The identities of a payer at `from`, with code hash `code` if a contract.
pub(super) fn identities(from: Address, code: Option<B256>) -> impl Iterator<Item = Identity> {
    std::iter::once(Identity::Address(from)).chain(code.map(Identity::Code))
}

impl PayerStandings {
    /// Until when any of `identities` is refused, if it is now.
    pub(super) fn denied_until(
        &self,
        identities: impl Iterator<Item = Identity>,
        now: u64,
    ) -> Option<u64> {
        let standings = self
            .standings
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        identities
            .filter_map(|identity| standings.get(&identity))
            .map(|standing| standing.denied_until)
            .filter(|until| *until > now)
            .max()
    }

    /// One failure of the payer's own: past [`MAX_FAILURES`] in the window, refused.
    pub(super) fn failed(&self, identities: impl Iterator<Item = Identity>, now: u64) {
        self.update(identities, now, |standing| {
            standing
                .failures
                .retain(|at| at.saturating_add(FAILURE_WINDOW_SECS) > now);
            standing.failures.push(now);
            if standing.failures.len() > MAX_FAILURES {
                standing.denied_until = standing
                    .denied_until
                    .max(now.saturating_add(FAILURE_DENIAL_SECS));
            }
        });
    }

    /// A settlement of the payer's reverted on chain: refused at once.
    pub(super) fn reverted(&self, identities: impl Iterator<Item = Identity>, now: u64) {
        self.update(identities, now, |standing| {
            standing.denied_until = standing
                .denied_until
                .max(now.saturating_add(REVERT_DENIAL_SECS));
        });
    }

    fn update(
        &self,
        identities: impl Iterator<Item = Identity>,
        now: u64,
        change: impl Fn(&mut Standing),
    ) {
        let mut standings = self
            .standings
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if standings.len() >= MAX_TRACKED {
            standings.retain(|_, standing| {
                standing.denied_until > now
                    || standing
                        .failures
                        .last()
                        .is_some_and(|at| at.saturating_add(FAILURE_WINDOW_SECS) > now)
            });
        }
        for identity in identities {
            change(standings.entry(identity).or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYER: Address = Address::repeat_byte(0x11);

    #[test]
    fn a_payer_over_the_failure_rate_is_refused_for_a_while() {
        let standings = PayerStandings::default();
        let who = || identities(PAYER, None);
        for at in 0..MAX_FAILURES as u64 {
            standings.failed(who(), 1_000 + at);
            assert_eq!(standings.denied_until(who(), 1_000 + at), None);
        }
        standings.failed(who(), 1_010);
        assert_eq!(
            standings.denied_until(who(), 1_010),
            Some(1_010 + FAILURE_DENIAL_SECS)
        );
        assert_eq!(
            standings.denied_until(who(), 1_010 + FAILURE_DENIAL_SECS),
            None
        );
        let other = identities(Address::repeat_byte(0x22), None);
        assert_eq!(standings.denied_until(other, 1_010), None);
    }

    #[test]
    fn failures_spread_beyond_the_window_are_not_a_rate() {
        let standings = PayerStandings::default();
        for n in 0..10 {
            let at = 1_000 + n * FAILURE_WINDOW_SECS;
            standings.failed(identities(PAYER, None), at);
            assert_eq!(standings.denied_until(identities(PAYER, None), at), None);
        }
    }

    #[test]
    fn a_revert_refuses_the_payer_and_its_code_at_any_address() {
        let standings = PayerStandings::default();
        let code = B256::repeat_byte(0xcc);
        standings.reverted(identities(PAYER, Some(code)), 5_000);
        let redeployed = identities(Address::repeat_byte(0x33), Some(code));
        assert_eq!(
            standings.denied_until(redeployed, 5_001),
            Some(5_000 + REVERT_DENIAL_SECS)
        );
    }
}

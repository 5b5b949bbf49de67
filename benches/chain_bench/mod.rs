//! What the on-chain settlement benches share (`settler`, `settle_load`):
//! sizes from the environment, the wall clock, percentiles.

use std::time::Duration;

/// `variable` parsed, or `default` when unset or not a number.
pub(crate) fn count(variable: &str, default: u64) -> u64 {
    std::env::var(variable)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Unix seconds: the time a payment is signed at.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The `p` quantile (0..=1) of `sorted`, zero when it is empty.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

//! What the fuzz targets share.

/// Polls a future that never waits (in-memory stores and handlers), without
/// an executor; the benchmark's helper, so there is one of it.
#[path = "../../tests/x402_support/poll.rs"]
mod poll;
pub use poll::ready;

/// Splits `data` at its first `separator`: (before, after); all of it before
/// when there is none.
pub fn split_once(data: &[u8], separator: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == separator) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

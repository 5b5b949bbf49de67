//! What the fuzz targets share.

use std::future::Future;
use std::task::{Context, Poll, Waker};

/// Polls a future that never waits (in-memory stores and handlers), without
/// an executor; it must be ready.
pub fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-memory flow waited"),
    }
}

/// Splits `data` at its first `separator`: (before, after); all of it before
/// when there is none.
pub fn split_once(data: &[u8], separator: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == separator) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

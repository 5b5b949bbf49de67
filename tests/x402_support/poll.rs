//! Polling futures that never wait (in-memory ledger, store and handler),
//! without an executor: shared by the benchmark and the fuzz target.

use std::future::Future;
use std::task::{Context, Poll, Waker};

/// Polls `future` once; it must be ready (nothing in memory waits).
pub fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-memory payment flow waited"),
    }
}

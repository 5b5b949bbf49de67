//! The [`ResponseFuture`] of [`X402Payment`](super::X402Payment).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::error::ClientError;

pin_project! {
    /// The future of [`X402Payment`].
    pub struct ResponseFuture<T> {
        #[pin]
        pub(super) inner: Pin<Box<dyn Future<Output = Result<T, ClientError>> + Send>>,
    }
}

impl<T> Future for ResponseFuture<T> {
    type Output = Result<T, ClientError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

impl<T> fmt::Debug for ResponseFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

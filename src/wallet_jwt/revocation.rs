//! Instant revocation: [`RevocationCheck`].
//!
//! A JWT minted from a PAT stays cryptographically valid until its `exp`. So
//! that revoking the PAT refuses its JWTs on the very next request, the
//! verifier asks a [`RevocationCheck`] after every successful verification
//! (and on every verified-token cache hit). The token issuer records a
//! revocation for the PAT's id (the JWT's `client_id`) until the latest `exp`
//! any of its JWTs can have; after that the entry has nothing left to refuse
//! and expires. [`InMemoryRevocations`] serves one process; the `redis`
//! feature shares the list between replicas.

use std::collections::HashMap;
use std::future::ready;
use std::sync::{Mutex, PoisonError};

use crate::clock::Clock as _;
use crate::store::{BoxFuture, StoreError};

/// The revocation list the JWT verifier consults.
///
/// Dyn-compatible: the verifier and the token issuer hold an
/// `Arc<dyn RevocationCheck>`, which implements the trait too.
pub trait RevocationCheck: Send + Sync + 'static {
    /// Whether tokens minted for `client_id` (a PAT id) are refused at `now`
    /// (Unix seconds).
    fn is_revoked<'a>(
        &'a self,
        client_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Refuses every token of `client_id` until `until` (Unix seconds: the
    /// latest `exp` a token minted from it can carry).
    fn revoke<'a>(
        &'a self,
        client_id: &'a str,
        until: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

forward_to_arc! { RevocationCheck {
    fn is_revoked<'a>(
        &'a self,
        client_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn revoke<'a>(
        &'a self,
        client_id: &'a str,
        until: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}}

/// A process-local revocation list; entries are dropped once they expire.
#[derive(Debug, Default)]
pub struct InMemoryRevocations {
    revoked_until: Mutex<HashMap<String, u64>>,
}

impl InMemoryRevocations {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many revocations are held (expired ones are dropped on `revoke`).
    pub fn len(&self) -> usize {
        self.revoked_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no revocation is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RevocationCheck for InMemoryRevocations {
    fn is_revoked<'a>(
        &'a self,
        client_id: &'a str,
        now: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let revoked = self
            .revoked_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Box::pin(ready(Ok(revoked
            .get(client_id)
            .is_some_and(|until| now < *until))))
    }

    fn revoke<'a>(
        &'a self,
        client_id: &'a str,
        until: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut revoked = self
            .revoked_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Revocations are rare: sweeping on each keeps the map to the live ones.
        let now = crate::clock::SystemClock.now_unix_secs();
        revoked.retain(|_, held_until| *held_until > now);
        let held = revoked.entry(client_id.to_owned()).or_insert(until);
        *held = (*held).max(until);
        Box::pin(ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        // The in-memory list never awaits anything.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut future = std::pin::pin!(future);
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => unreachable!("in-memory revocations never wait"),
        }
    }

    #[test]
    fn a_revoked_client_is_refused_until_its_last_token_expires() {
        let list = InMemoryRevocations::new();
        let far = crate::clock::SystemClock.now_unix_secs() + 3600;
        block_on(list.revoke("pat_1", far)).unwrap();
        assert!(block_on(list.is_revoked("pat_1", far - 1)).unwrap());
        assert!(!block_on(list.is_revoked("pat_1", far)).unwrap());
        assert!(!block_on(list.is_revoked("pat_2", far - 1)).unwrap());
    }

    #[test]
    fn expired_revocations_are_dropped() {
        let list = InMemoryRevocations::new();
        block_on(list.revoke("old", 1)).unwrap();
        block_on(list.revoke("new", u64::MAX)).unwrap();
        assert_eq!(list.len(), 1);
    }
}

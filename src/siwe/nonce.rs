//! Server-issued, single-use SIWE nonces.
//!
//! The store is a seam: the in-memory one serves a single process, and a
//! shared backend (Redis) implements the same two calls. Nothing here assumes
//! one process: the caller passes "now", and consuming is one atomic call that
//! both checks and spends the nonce.

use crate::store::{BoxFuture, StoreError};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// Length of generated nonces: 17 alphanumerics (about 101 bits), as siwe-rs.
pub const NONCE_LEN: usize = 17;

/// A fresh random nonce of [`NONCE_LEN`] ASCII letters and digits.
///
/// # Errors
/// [`NonceStoreError::Backend`] if the operating system gives no randomness.
pub fn generate_nonce() -> Result<String, NonceStoreError> {
    crate::random::base62(NONCE_LEN).map_err(|_| {
        NonceStoreError::Backend(StoreError::new("the operating system gave no randomness"))
    })
}

/// What consuming a nonce found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NonceConsumption {
    /// Issued, unexpired and unused: it is now spent.
    Fresh,
    /// Issued and already spent. A store that keeps no record of spent nonces
    /// may report [`NonceConsumption::Unknown`] instead.
    AlreadyUsed,
    /// Issued, but its time to live has passed.
    Expired,
    /// Never issued by this server (or forgotten after expiry).
    Unknown,
}

/// Why a nonce store could not answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum NonceStoreError {
    /// The store holds its maximum number of live nonces.
    Full,
    /// The nonce is already stored (a collision; generate another).
    Duplicate,
    /// The backend failed (connection, protocol...).
    Backend(StoreError),
}

impl fmt::Display for NonceStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.write_str("the nonce store is full"),
            Self::Duplicate => f.write_str("the nonce is already stored"),
            Self::Backend(_) => f.write_str("the nonce store backend failed"),
        }
    }
}

impl From<StoreError> for NonceStoreError {
    fn from(error: StoreError) -> Self {
        Self::Backend(error)
    }
}

impl std::error::Error for NonceStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Backend(source) => Some(source),
            _ => None,
        }
    }
}

/// Where issued nonces live until they are spent or expire.
///
/// Implementations must make [`consume`](NonceStore::consume) atomic: of two
/// concurrent calls with the same nonce, at most one sees
/// [`NonceConsumption::Fresh`], even across processes.
pub trait NonceStore: Send + Sync + 'static {
    /// Records `nonce`, issued at `now_unix_millis`, as valid until
    /// `expires_at_unix_millis` (exclusive).
    fn insert<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> BoxFuture<'a, Result<(), NonceStoreError>>;

    /// Spends `nonce` if it is fresh at `now_unix_millis`, and says what it found.
    fn consume<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
    ) -> BoxFuture<'a, Result<NonceConsumption, NonceStoreError>>;

    /// Generates a fresh random nonce ([`generate_nonce`]) and records it.
    ///
    /// A collision of 17 random alphanumerics is practically impossible, so a
    /// [`NonceStoreError::Duplicate`] is retried twice rather than surfaced.
    fn issue(
        &self,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> BoxFuture<'_, Result<String, NonceStoreError>> {
        Box::pin(async move {
            let mut attempts_left = 3;
            loop {
                let nonce = generate_nonce()?;
                match self
                    .insert(&nonce, now_unix_millis, expires_at_unix_millis)
                    .await
                {
                    Ok(()) => return Ok(nonce),
                    Err(NonceStoreError::Duplicate) if attempts_left > 1 => attempts_left -= 1,
                    Err(e) => return Err(e),
                }
            }
        })
    }
}

forward_to_arc! { NonceStore {
    fn insert<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> BoxFuture<'a, Result<(), NonceStoreError>>;
    fn consume<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
    ) -> BoxFuture<'a, Result<NonceConsumption, NonceStoreError>>;
    fn issue(
        &self,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> BoxFuture<'_, Result<String, NonceStoreError>>;
}}

/// Default bound on live nonces in an [`InMemoryNonceStore`].
pub const DEFAULT_MAX_NONCES: usize = 100_000;

/// A [`NonceStore`] in this process's memory, for one-process servers and tests.
///
/// Spent nonces are remembered until they expire, so a replay is reported as
/// [`NonceConsumption::AlreadyUsed`]. Expired entries are swept when the map
/// grows; the number of live entries is capped (anyone may ask for a nonce).
#[derive(Debug)]
pub struct InMemoryNonceStore {
    state: Mutex<State>,
    max_entries: usize,
}

#[derive(Debug)]
struct State {
    entries: HashMap<String, Entry>,
    sweep_at_len: usize,
}

#[derive(Debug)]
struct Entry {
    expires_at_unix_millis: u64,
    spent: bool,
}

const MIN_SWEEP_LEN: usize = 1024;

impl InMemoryNonceStore {
    /// An empty store holding at most [`DEFAULT_MAX_NONCES`] live nonces.
    pub fn new() -> Self {
        Self::new_with_max_entries(DEFAULT_MAX_NONCES)
    }

    /// An empty store holding at most `max_entries` live nonces (at least 1).
    pub fn new_with_max_entries(max_entries: usize) -> Self {
        Self {
            state: Mutex::new(State {
                entries: HashMap::new(),
                sweep_at_len: MIN_SWEEP_LEN,
            }),
            max_entries: max_entries.max(1),
        }
    }

    /// How many nonces (spent or not) are held, expired ones included until swept.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether the store holds no nonce.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the map half-updated: every update is
        // one map call, so the data is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert_now(
        &self,
        nonce: &str,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> Result<(), NonceStoreError> {
        let mut state = self.lock();
        let len = state.entries.len();
        if len >= state.sweep_at_len.min(self.max_entries) {
            state
                .entries
                .retain(|_, entry| entry.expires_at_unix_millis > now_unix_millis);
            // Sweep again only after the live set doubles: amortised O(1) per insert.
            state.sweep_at_len = (state.entries.len() * 2).max(MIN_SWEEP_LEN);
        }
        if state.entries.len() >= self.max_entries {
            return Err(NonceStoreError::Full);
        }
        if state.entries.contains_key(nonce) {
            return Err(NonceStoreError::Duplicate);
        }
        state.entries.insert(
            nonce.to_owned(),
            Entry {
                expires_at_unix_millis,
                spent: false,
            },
        );
        Ok(())
    }

    fn consume_now(&self, nonce: &str, now_unix_millis: u64) -> NonceConsumption {
        let mut state = self.lock();
        let Some(entry) = state.entries.get_mut(nonce) else {
            return NonceConsumption::Unknown;
        };
        if entry.spent {
            NonceConsumption::AlreadyUsed
        } else if now_unix_millis >= entry.expires_at_unix_millis {
            state.entries.remove(nonce);
            NonceConsumption::Expired
        } else {
            entry.spent = true;
            NonceConsumption::Fresh
        }
    }
}

impl Default for InMemoryNonceStore {
    fn default() -> Self {
        Self::new()
    }
}

impl NonceStore for InMemoryNonceStore {
    fn insert<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
        expires_at_unix_millis: u64,
    ) -> BoxFuture<'a, Result<(), NonceStoreError>> {
        let result = self.insert_now(nonce, now_unix_millis, expires_at_unix_millis);
        Box::pin(std::future::ready(result))
    }

    fn consume<'a>(
        &'a self,
        nonce: &'a str,
        now_unix_millis: u64,
    ) -> BoxFuture<'a, Result<NonceConsumption, NonceStoreError>> {
        let found = self.consume_now(nonce, now_unix_millis);
        Box::pin(std::future::ready(Ok(found)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_nonces_are_long_alphanumeric_and_distinct() {
        let a = generate_nonce().unwrap();
        let b = generate_nonce().unwrap();
        assert_eq!(a.len(), NONCE_LEN);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn an_issued_nonce_is_spent_once() {
        let store = InMemoryNonceStore::new();
        let nonce = store.issue(0, 1_000).await.unwrap();
        assert_eq!(nonce.len(), NONCE_LEN);
        let mut found = Vec::new();
        for (candidate, now) in [(nonce.as_str(), 1), (nonce.as_str(), 2), ("neverissued", 3)] {
            found.push(store.consume(candidate, now).await.unwrap());
        }
        assert_eq!(
            found,
            [
                NonceConsumption::Fresh,
                NonceConsumption::AlreadyUsed,
                NonceConsumption::Unknown
            ]
        );
    }

    #[tokio::test]
    async fn an_expired_nonce_is_refused() {
        let store = InMemoryNonceStore::new();
        store.insert("abcdefgh1", 0, 1_000).await.unwrap();
        assert_eq!(
            store.consume("abcdefgh1", 1_000).await.unwrap(),
            NonceConsumption::Expired
        );
        assert!(store.is_empty());
    }

    #[tokio::test]
    async fn duplicates_are_refused() {
        let store = InMemoryNonceStore::new();
        store.insert("abcdefgh1", 0, 1_000).await.unwrap();
        assert!(matches!(
            store.insert("abcdefgh1", 0, 1_000).await,
            Err(NonceStoreError::Duplicate)
        ));
    }

    #[tokio::test]
    async fn the_store_is_bounded_and_sweeps_expired_entries() {
        let store = InMemoryNonceStore::new_with_max_entries(3);
        for i in 0..3 {
            store.insert(&format!("nonce000{i}"), 0, 100).await.unwrap();
        }
        assert!(matches!(
            store.insert("nonce0003", 50, 150).await,
            Err(NonceStoreError::Full)
        ));
        // Once the first three expire, a sweep makes room.
        store.insert("nonce0003", 100, 200).await.unwrap();
        assert_eq!(store.len(), 1);
    }
}

//! Storage seams.
//!
//! Every piece of state walletgate keeps sits behind a small async trait with
//! an in-memory implementation, so a shared backend (Redis, SQL) can replace
//! it without touching a layer:
//!
//! | trait | holds | in memory |
//! |---|---|---|
//! | `api_key::KeyStore` | API key digests and quotas | `InMemoryKeyStore` |
//! | `api_key::QuotaStore` | per-key quota buckets (GCRA) | `InMemoryQuotas` (Redis: `redis::RedisQuotas`) |
//! | `free_tier::FreeTierStore` | per-client sliding-window counts | `InMemoryLimiter` (Redis: `redis::RedisFreeTier`) |
//! | `siwe::NonceStore` | issued sign-in nonces | `siwe::InMemoryNonceStore` |
//! | `tokens::PatStore`, `tokens::SessionStore` | PAT and session digests | `InMemoryPatStore`, `InMemorySessionStore` |
//! | `x402::NonceStore` | claimed and spent payment authorizations | `x402::InMemoryNonceStore` |
//!
//! They all report a backend that could not answer with one error type,
//! [`StoreError`]; the layers turn it into a 5xx and never into a decision.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

/// The future every storage and verification seam returns: boxed, so each
/// seam is dyn-compatible and a server can hold `Arc<dyn Seam>` and choose
/// its backend at start; `Send`, so it crosses threads with the request.
///
/// An in-memory store answers with `Box::pin(std::future::ready(..))`: one
/// small allocation, no lock held across it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A storage backend could not answer (connection, protocol, timeout).
///
/// Its message must not contain a credential: layers may log it.
#[derive(Debug)]
pub struct StoreError {
    message: Cow<'static, str>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl StoreError {
    /// A failure described by `message`.
    pub fn new(message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the backend's own error.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_message_and_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = StoreError::new("redis unreachable").with_source(io);
        assert_eq!(error.to_string(), "redis unreachable");
        let source = std::error::Error::source(&error).unwrap();
        assert_eq!(source.to_string(), "refused");
    }
}

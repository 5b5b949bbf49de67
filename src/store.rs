//! Storage seams.
//!
//! Every piece of state walletgate keeps, and every verification it hands
//! out, sits behind a small async trait with an in-memory implementation, so
//! a shared backend (Redis, SQL) can replace it without touching a layer.
//! The seams have one shape:
//!
//! * every method returns a [`BoxFuture`] (this module's, the only one);
//! * every trait is dyn-compatible, and `Arc<T>` implements it for any
//!   `T: Trait + ?Sized`, so a layer or issuer generic over a seam takes an
//!   `Arc<dyn Trait>` as it is: a server holds one `Arc<dyn …>` per seam and
//!   chooses memory or Redis at start, with no dispatch enum;
//! * an in-memory store answers `Box::pin(std::future::ready(..))`: one small
//!   allocation, no lock held across an await.
//!
//! The futures of the three gate stores are `'static` (the layer's response
//! future owns them); the others borrow the call's arguments (`'a`).
//!
//! | trait | holds | future | error | in memory | Redis (`redis::`) |
//! |---|---|---|---|---|---|
//! | `api_key::KeyStore` | API key digests and quotas | `BoxFuture<'static, _>` | [`StoreError`] | `InMemoryKeyStore` | |
//! | `api_key::QuotaStore` | per-key quota buckets (GCRA) | `BoxFuture<'static, _>` | [`StoreError`] | `InMemoryQuotas` | `RedisQuotas` |
//! | `free_tier::FreeTierStore` | per-client sliding-window counts | `BoxFuture<'static, _>` | [`StoreError`] | `InMemoryLimiter` | `RedisFreeTier` |
//! | `siwe::NonceStore` | issued sign-in nonces | `BoxFuture<'a, _>` | `NonceStoreError` (`Backend(StoreError)`, `From<StoreError>`) | `siwe::InMemoryNonceStore` | `RedisSiweNonceStore` |
//! | `tokens::PatStore` | PAT digests and records | `BoxFuture<'a, _>` | [`StoreError`] | `InMemoryPatStore` | `RedisPatStore` |
//! | `tokens::SessionStore` | session cookie digests | `BoxFuture<'a, _>` | [`StoreError`] | `InMemorySessionStore` | `RedisSessionStore` |
//! | `wallet_jwt::RevocationCheck` | revoked PATs, until their last JWT expires | `BoxFuture<'a, _>` | [`StoreError`] | `InMemoryRevocations` | `RedisRevocations` |
//! | `x402::server::AnswerStore` | paid answers kept for a resend, in-flight markers | `BoxFuture<'a, _>` | [`StoreError`] | `x402::server::InMemoryAnswerStore` | `RedisAnswerStore` |
//! | `x402::server::NonceStore` | claimed, settling and spent payment authorizations | `BoxFuture<'a, _>` (`release`: `BoxFuture<'static, ()>`) | [`StoreError`] | `x402::server::InMemoryNonceStore` | `RedisNonceStore` |
//! | `x402::facilitator::Ledger` | balances and used EIP-3009 authorizations | `BoxFuture<'a, _>` | `LedgerError` | `DevLedger` | `RedisLedger` |
//! | `x402::facilitator::Facilitator` | verifies and settles payments | `BoxFuture<'a, _>` | `FacilitatorError` | `LocalEvmFacilitator` | (`HttpFacilitator`: the HTTP API) |
//!
//! A backend that could not answer is a [`StoreError`] (or the seam's own
//! error wrapping one, or saying "unavailable"); the layers turn it into a
//! 5xx and never into a decision. `x402::server::SettlementHook` and `x402::server::Pricing`
//! are hooks, not seams: the hook returns a `BoxFuture<'static, _>` too, the
//! pricing is synchronous, and both take closures.

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

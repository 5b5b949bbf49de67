//! [`FreeTierLimitLayer`] (configuration), [`IsFreeRequest`] and [`IsPricedFree`].

use std::fmt;
use std::sync::Arc;

use http::{Request, Response};
use tower_layer::Layer;

use super::client_ip::ClientIpResolver;
use super::key::KeyPrefixes;
use super::limiter::{FreeTierStore, InMemoryLimiter};
use super::service::FreeTierLimit;
use super::window::FreeTierQuotas;
use crate::envelope::{EnvelopeStyle, GatewayError, RenderRejection};

/// Decides whether a request is free, and so limited by the free tier.
///
/// Implemented for every `Fn(&Request<B>) -> bool`, so the layer works on its
/// own with any predicate. A gateway that also takes x402 payments uses
/// `IsPricedFree` (feature `x402`) instead, so the free tier and the payment
/// layer read one decision.
pub trait IsFreeRequest<B> {
    /// Whether `request` is free.
    fn is_free(&self, request: &Request<B>) -> bool;
}

impl<B, F> IsFreeRequest<B> for F
where
    F: Fn(&Request<B>) -> bool,
{
    fn is_free(&self, request: &Request<B>) -> bool {
        self(request)
    }
}

/// Free exactly when the request's [`RequestPrice`](crate::x402::server::RequestPrice)
/// is [`Price::Free`](crate::x402::server::Price::Free): the price a pipeline step
/// decided once, which the payment layer reads too
/// ([`RequestPrice::pricing`](crate::x402::server::RequestPrice::pricing)), so the two
/// layers cannot disagree on "free".
///
/// A request without a `RequestPrice` is not free: it goes on to the payment
/// layer, which refuses it as a wiring fault, so a missing step never serves
/// unlimited free requests.
///
/// ```
/// use walletgate::free_tier::{FreeTierLimitLayer, IsFreeRequest, IsPricedFree};
/// use walletgate::x402::{server::Price, server::RequestPrice};
///
/// let layer = FreeTierLimitLayer::new(IsPricedFree);
/// let mut request = http::Request::new(());
/// assert!(!IsPricedFree.is_free(&request));
/// request.extensions_mut().insert(RequestPrice(Price::Free));
/// assert!(IsPricedFree.is_free(&request));
/// # let _ = layer;
/// ```
#[cfg(feature = "x402")]
#[cfg_attr(docsrs, doc(cfg(feature = "x402")))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IsPricedFree;

#[cfg(feature = "x402")]
impl<B> IsFreeRequest<B> for IsPricedFree {
    fn is_free(&self, request: &Request<B>) -> bool {
        request
            .extensions()
            .get::<crate::x402::server::RequestPrice>()
            .is_some_and(|price| price.0.is_free())
    }
}

/// Limits free requests per client IP; see the [module docs](super).
///
/// Cheap to clone: clones share the store.
#[must_use]
pub struct FreeTierLimitLayer<P, L = InMemoryLimiter> {
    pub(super) predicate: P,
    pub(super) store: Arc<L>,
    pub(super) resolver: Arc<ClientIpResolver>,
    pub(super) prefixes: KeyPrefixes,
    pub(super) render: RenderRejection,
}

impl<P: Clone, L> Clone for FreeTierLimitLayer<P, L> {
    fn clone(&self) -> Self {
        Self {
            predicate: self.predicate.clone(),
            store: Arc::clone(&self.store),
            resolver: Arc::clone(&self.resolver),
            prefixes: self.prefixes,
            render: self.render.clone(),
        }
    }
}

impl<P> FreeTierLimitLayer<P> {
    /// Limits the requests `predicate` marks free with the default quotas
    /// (30 per minute, 300 per hour), keyed by the socket peer.
    pub fn new(predicate: P) -> Self {
        Self::new_with_quotas(predicate, FreeTierQuotas::default())
    }

    /// Like [`new`](Self::new) with other quotas.
    pub fn new_with_quotas(predicate: P, quotas: FreeTierQuotas) -> Self {
        FreeTierLimitLayer {
            predicate,
            store: Arc::new(InMemoryLimiter::new(quotas)),
            resolver: Arc::new(ClientIpResolver::new()),
            prefixes: KeyPrefixes::default(),
            render: RenderRejection::default(),
        }
    }
}

impl<P, L> FreeTierLimitLayer<P, L> {
    /// Replaces the limiter state (an [`InMemoryLimiter`] with a test clock,
    /// or a shared store; an `Arc<dyn FreeTierStore>` chosen at start).
    pub fn with_store<L2: FreeTierStore>(self, store: L2) -> FreeTierLimitLayer<P, L2> {
        FreeTierLimitLayer {
            predicate: self.predicate,
            store: Arc::new(store),
            resolver: self.resolver,
            prefixes: self.prefixes,
            render: self.render,
        }
    }

    /// Resolves client addresses with `resolver` (trusted proxies).
    pub fn with_client_ip(mut self, resolver: ClientIpResolver) -> Self {
        self.resolver = Arc::new(resolver);
        self
    }

    /// Keys clients by these prefixes (default: IPv4 /32, IPv6 /64).
    pub fn with_key_prefixes(mut self, prefixes: KeyPrefixes) -> Self {
        self.prefixes = prefixes;
        self
    }

    /// Renders refusals with `render` instead of the route's envelope: it gets
    /// the failure (`FREE_TIER_RATE_LIMITED` with its `Retry-After` and
    /// `X-RateLimit-*` figures, a 400 for a malformed forwarded hop, or a 500)
    /// and the route's style.
    pub fn with_rejection<F>(mut self, render: F) -> Self
    where
        F: Fn(GatewayError, EnvelopeStyle) -> Response<bytes::Bytes> + Send + Sync + 'static,
    {
        self.render = RenderRejection::new(render);
        self
    }

    /// The limiter state, e.g. to clone it for a maintenance task calling
    /// [`InMemoryLimiter::sweep`].
    pub fn store(&self) -> &L {
        &self.store
    }
}

impl<P, L: fmt::Debug> fmt::Debug for FreeTierLimitLayer<P, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreeTierLimitLayer")
            .field("store", &self.store)
            .field("resolver", &self.resolver)
            .field("prefixes", &self.prefixes)
            .finish_non_exhaustive()
    }
}

impl<S, P: Clone, L> Layer<S> for FreeTierLimitLayer<P, L> {
    type Service = FreeTierLimit<S, P, L>;

    fn layer(&self, inner: S) -> Self::Service {
        FreeTierLimit::from_layer(inner, self.clone())
    }
}

#[cfg(all(test, feature = "x402"))]
mod tests {
    use super::*;
    use crate::x402::server::{Price, RequestPrice};

    #[test]
    fn priced_free_is_free_and_anything_else_or_nothing_is_not() {
        let with = |price: Option<Price>| {
            let mut request = Request::new(());
            if let Some(price) = price {
                request.extensions_mut().insert(RequestPrice(price));
            }
            IsPricedFree.is_free(&request)
        };
        assert!(with(Some(Price::Free)));
        assert!(!with(Some(Price::usd("0.002").unwrap())));
        assert!(!with(Some(Price::usd_all_in("0.005").unwrap())));
        // No decision: not free; the payment layer refuses it as a wiring fault.
        assert!(!with(None));
    }
}

//! Per-client-IP limits for free models: [`FreeTierLimitLayer`].
//!
//! Free requests (those an [`IsFreeRequest`] predicate picks; for a gateway
//! that takes x402 payments, `IsPricedFree`: the request's x402
//! `RequestPrice` is `Price::Free`, the one decision the payment layer reads
//! too) are limited per client to 30 per minute and 300 per hour
//! (specification, sections 1 and 8). Every other request passes untouched,
//! never resolved, counted or limited.
//!
//! * **Trace.** Each decision is a `free_tier` span with `client_ip`, the
//!   `model` an earlier step left as a
//!   [`RequestModel`](crate::gateway::RequestModel), `outcome` and `remaining`.
//!
//! * **Sliding windows.** "30 per minute, 300 per hour" means at most 30
//!   admitted requests in any 60 s and at most 300 in any hour, exactly; a
//!   burst of 30 waits a full minute for the next. The algorithm may refuse
//!   early by at most one sub-window (10 s of the minute, 5 min of the hour),
//!   never late: [`ClientWindows`] documents the rule and its proof, as a pure
//!   function over 88 bytes per client that a shared store can run too.
//! * **Two quotas, one decision.** A request is counted in both quotas or in
//!   neither: one refused by the minute quota leaves the hour quota alone,
//!   and the reverse.
//! * **Refusal.** 429 `FREE_TIER_RATE_LIMITED` in the route's envelope
//!   (the [`EnvelopeStyle`](crate::envelope::EnvelopeStyle) its router set),
//!   with `Retry-After` in whole seconds (rounded up, at least 1: waiting that
//!   long is enough, unless other requests come in between) and the
//!   refusing quota's `X-RateLimit-Limit`, `X-RateLimit-Remaining: 0` and
//!   `X-RateLimit-Reset`.
//! * **Admitted free responses** carry the same three headers describing the
//!   tighter quota (fewer requests left). `X-RateLimit-Reset` is the **Unix
//!   epoch time in milliseconds** at which that quota is full again (no
//!   counted request left in its window), as the specified gateway documents it.
//! * **Time** comes from the crate's [`Clock`](crate::clock::Clock), so tests use
//!   [`FakeClock`](crate::clock::FakeClock) ([`InMemoryLimiter::new_with_clock`]).
//! * **Client address.** [`ClientIpResolver`]: the socket peer, unless it is a
//!   [trusted proxy](TrustedProxies), then the right-most untrusted hop of the
//!   configured [`ForwardedHeader`]. The resolved [`ClientIp`] goes into the
//!   request extensions for handlers. IPv6 clients are keyed by their /64
//!   ([`KeyPrefixes`]). A request whose client cannot be resolved never
//!   shares a bucket: without a peer address it gets a 500 naming the wiring
//!   fault (usually: the server was not started with
//!   `into_make_service_with_connect_info::<SocketAddr>()`); a trusted proxy's
//!   hop that is not an IP address gets 400 `INVALID_FORWARDED_HEADER`.
//! * **Bounded memory.** [`InMemoryLimiter`] drops keys with nothing left in
//!   either window ([`sweep`](InMemoryLimiter::sweep), and each shard on its own every
//!   60 s) and reports [`len`](InMemoryLimiter::len); an optional
//!   [cap](InMemoryLimiter::set_max_tracked_keys) bounds it against more
//!   distinct clients per hour than memory allows (new clients then get 429
//!   `FREE_MODEL_FAILED`, `Retry-After: 30`; tracked ones keep their quotas). Measured with one
//!   million distinct clients (`cargo bench --bench free_tier`): 237
//!   bytes of heap per tracked key (target: at most 256), and the heap back to
//!   its starting size after a sweep.
//! * **Storage seam.** [`FreeTierStore`] is what the layer asks; a store shared
//!   by several replicas (`walletgate::redis::RedisFreeTier`, feature `redis`:
//!   the same rule in one Lua script, on the Redis server's time) replaces
//!   [`InMemoryLimiter`] through [`FreeTierLimitLayer::with_store`]. A store
//!   that cannot answer fails closed: 503 `RATE_LIMIT_UNAVAILABLE` in the
//!   route's envelope, `Retry-After: 5`; the request is not served.
//! * **Windows.** 60 s and one hour; [`FreeTierQuotas::with_windows`] scales
//!   both (tests of a store on real time use seconds).
//!
//! # Example
//!
//! ```
//! use std::net::SocketAddr;
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use walletgate::clock::FakeClock;
//! use walletgate::free_tier::{
//!     ClientIpResolver, FreeTierLimitLayer, FreeTierQuotas, InMemoryLimiter, TrustedProxies,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The gateway's parse layer would mark free models; here a header does.
//! let is_free = |req: &Request<Full<Bytes>>| req.headers().contains_key("x-free-model");
//! // The system clock by default (`FreeTierLimitLayer::new` alone); a fake one here.
//! let clock = FakeClock::at_unix_secs(1_800_000_000);
//! let store = InMemoryLimiter::new_with_clock(FreeTierQuotas::default(), Arc::new(clock.clone()));
//! let layer = FreeTierLimitLayer::new(is_free).with_store(store).with_client_ip(
//!     ClientIpResolver::new().with_trusted_proxies(TrustedProxies::from_cidrs(["10.0.0.0/8"])?),
//! );
//! // Keep a handle for a maintenance task: `limiter.sweep()`, `limiter.len()`.
//! let limiter = layer.store().clone();
//! let app = ServiceBuilder::new().layer(layer).service(service_fn(|_req| async {
//!     Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from("hi"))))
//! }));
//!
//! let request = || {
//!     let mut req = Request::builder()
//!         .uri("/v1/chat/completions")
//!         .header("x-free-model", "1")
//!         .header("x-forwarded-for", "198.51.100.7")
//!         .body(Full::new(Bytes::new()))
//!         .unwrap();
//!     // What `into_make_service_with_connect_info` provides: the peer, here our proxy.
//!     req.extensions_mut().insert(SocketAddr::from(([10, 0, 0, 2], 443)));
//!     req
//! };
//! for _ in 0..30 {
//!     let response = app.clone().oneshot(request()).await?;
//!     assert_eq!(response.status(), 200);
//! }
//! let refused = app.clone().oneshot(request()).await?;
//! assert_eq!(refused.status(), 429);
//! // The burst leaves the window a minute (and a millisecond) later.
//! assert_eq!(refused.headers()["retry-after"], "61");
//! assert_eq!(refused.headers()["x-ratelimit-limit"], "30");
//! assert_eq!(limiter.len(), 1);
//! // The burst's window has passed: admitted again.
//! clock.advance(std::time::Duration::from_millis(60_001));
//! assert_eq!(app.clone().oneshot(request()).await?.status(), 200);
//! # Ok(())
//! # }
//! ```

//! # Maintenance
//!
//! Each shard of [`InMemoryLimiter`] sweeps itself; a deployment that wants
//! the figures (or tighter memory) runs its own task too:
//!
//! ```no_run
//! # use std::time::Duration;
//! # let limiter = walletgate::free_tier::InMemoryLimiter::default();
//! std::thread::spawn(move || loop {
//!     std::thread::sleep(Duration::from_secs(60));
//!     let report = limiter.sweep();
//!     println!("free tier: dropped {} idle clients, tracking {}", report.removed, report.remaining);
//! });
//! ```

mod client_ip;
mod future;
mod key;
mod layer;
mod limiter;
mod service;
mod window;

use std::fmt;

pub use client_ip::{
    ClientIp, ClientIpError, ClientIpResolver, ForwardedHeader, IpCidr, TrustedProxies,
};
pub use future::ResponseFuture;
pub use key::{ClientKey, KeyPrefixes};
#[cfg(feature = "x402")]
pub use layer::IsPricedFree;
pub use layer::{FreeTierLimitLayer, IsFreeRequest};
pub use limiter::{FreeTierStore, InMemoryLimiter, SweepReport};
pub use service::FreeTierLimit;
pub use window::{ClientWindows, FreeTierQuotas, QuotaUsage, Verdict};

/// A free-tier setting was invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Text that is not an address or `address/prefix`.
    InvalidCidr(String),
    /// A prefix length out of range for its address family.
    PrefixLength {
        /// The length given.
        prefix_len: u8,
        /// The longest allowed.
        max_prefix_len: u8,
    },
    /// A quota of zero requests.
    ZeroQuota,
    /// A window length out of range ([`FreeTierQuotas::with_windows`]).
    InvalidWindow {
        /// The length given.
        window: std::time::Duration,
    },
    /// A quota above what a client's state counts.
    QuotaTooLarge {
        /// The quota given.
        requests: u32,
        /// The largest allowed.
        max_requests: u32,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidCidr(text) => write!(f, "`{text}` is not an IP network in CIDR notation"),
            Self::PrefixLength {
                prefix_len,
                max_prefix_len,
            } => write!(
                f,
                "prefix length {prefix_len} is invalid (at most {max_prefix_len}; a client key needs at least 1)"
            ),
            Self::ZeroQuota => f.write_str("a free-tier quota must allow at least one request"),
            Self::InvalidWindow { window } => write!(
                f,
                "a free-tier window of {} ms is out of range (12 ms to 30 days)",
                window.as_millis()
            ),
            Self::QuotaTooLarge {
                requests,
                max_requests,
            } => write!(
                f,
                "a free-tier quota of {requests} requests is too large (at most {max_requests})"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

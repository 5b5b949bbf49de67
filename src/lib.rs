#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

/// `get_ref`, `get_mut` and `into_inner` for a service whose wrapped service
/// is its private `inner` field (tower-http's `define_inner_service_accessors`).
// Unused when no layer feature is compiled in.
#[allow(unused_macros)]
macro_rules! define_inner_service_accessors {
    () => {
        /// Gets a reference to the inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// Gets a mutable reference to the inner service.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Consumes `self`, returning the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

#[cfg(feature = "api-key")]
pub mod api_key;
pub mod body;
pub mod clock;
pub mod envelope;
#[cfg(feature = "free-tier")]
pub mod free_tier;
pub mod gateway;
#[cfg(any(feature = "siwe", feature = "tokens"))]
mod random;
#[cfg(feature = "siwe")]
pub mod siwe;
pub mod store;
#[cfg(feature = "tokens")]
pub mod tokens;
pub mod upstream;
#[cfg(feature = "wallet-jwt")]
pub mod wallet_jwt;
#[cfg(feature = "x402")]
pub mod x402;

pub use body::ResponseBody;
pub use clock::{Clock, FakeClock, SharedClock, SystemClock};

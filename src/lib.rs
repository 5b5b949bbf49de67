#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

#[cfg(feature = "api-key")]
pub mod api_key;
pub mod body;
pub mod clock;
pub mod envelope;
#[cfg(feature = "siwe")]
pub mod siwe;
#[cfg(feature = "tokens")]
pub mod tokens;
#[cfg(feature = "wallet-jwt")]
pub mod wallet_jwt;

pub use body::ResponseBody;
pub use clock::{Clock, FakeClock, SharedClock, SystemClock};

#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod body;
pub mod clock;
pub mod envelope;
#[cfg(feature = "free-tier")]
pub mod free_tier;
#[cfg(feature = "siwe")]
pub mod siwe;

pub use body::ResponseBody;
pub use clock::{Clock, FakeClock, SharedClock, SystemClock};

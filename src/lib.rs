//! # walletgate
//!
//! Tower middleware and axum extractors for wallet-authenticated and
//! wallet-paid HTTP services.
//!
//! | area | layer | what it does |
//! |---|---|---|
//! | A, data API | `ApiKeyLayer` | `X-API-KEY` on every request, per-key quota |
//! | A, data API | `WalletJwtLayer`, `RequireScopes` | Bearer wallet JWT, scopes per route |
//! | B, gateway | `FreeTierLimitLayer` | per-client-IP limits for free models |
//! | B, gateway | `X402Layer` | HTTP 402 quotes, verify before, settle after |
//!
//! Every rejection is an HTTP response in the right envelope ([`envelope`]),
//! never an `Err`: each layer's `Error` is its inner service's.
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod body;
pub mod clock;
pub mod envelope;
#[cfg(feature = "x402")]
pub mod x402;

pub use body::ResponseBody;
pub use clock::{Clock, FakeClock, SharedClock, SystemClock};

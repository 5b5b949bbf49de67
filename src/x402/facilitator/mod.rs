//! Facilitators: who verifies a payment before the inner service runs and
//! settles it after a 2xx answer.
//!
//! The [`Facilitator`] seam and its request/response types; the
//! [`LocalEvmFacilitator`], which verifies exact-EVM payments in-process and
//! settles them through a [`Ledger`] ([`DevLedger`] in memory, `RedisLedger`
//! with the `redis` feature); with the `http-facilitator` feature,
//! `HttpFacilitator`, a client of the standard facilitator HTTP API; and the
//! Solana options such a facilitator settles. A chain settler is one more
//! [`Ledger`] or [`Facilitator`] here.

mod api;
#[cfg(feature = "http-facilitator")]
mod auth;
#[cfg(feature = "cdp")]
mod cdp;
#[cfg(feature = "siwx")]
mod contract_signatures;
#[cfg(feature = "evm-settler")]
pub mod evm_settler;
#[cfg(feature = "http-facilitator")]
mod http;
mod idempotency;
pub(crate) mod ledger;
mod local_evm;
mod local_upto;
mod solana;
mod window;

pub use api::{
    Facilitator, FacilitatorError, FacilitatorErrorKind, FacilitatorRequest, code_for_reason,
    reason,
};
#[cfg(feature = "http-facilitator")]
pub use auth::{AuthError, FacilitatorAuth};
#[cfg(feature = "cdp")]
pub use cdp::CdpAuth;
#[cfg(feature = "siwx")]
pub use contract_signatures::ContractSignatures;
#[cfg(feature = "evm-settler")]
#[cfg(feature = "http-facilitator")]
pub use http::{DEFAULT_FACILITATOR_TIMEOUT, HttpFacilitator};
pub use idempotency::{IDEMPOTENCY_KEY_HEADER, IdempotencyKey, InvalidIdempotencyKey};
pub use ledger::{DevLedger, Ledger, LedgerError, Transfer};
pub use local_evm::{
    AUTHORIZATION_CLOCK_SKEW_SECS, LocalEvmFacilitator, MIN_REMAINING_VALIDITY_SECS,
};
pub use solana::{SOLANA_MAINNET, SOLANA_USDC_MINT};

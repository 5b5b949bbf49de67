//! HTTP clients of walletgate services (features `client-pay` and
//! `client-wallet`; `client` is both), and the payer's signing (feature
//! `x402`).
//!
//! * [`pay`]: a tower layer for HTTP *client* services that answers x402
//!   quotes — signs the first offer within the caller's spend controls and
//!   resends the request with `PAYMENT-SIGNATURE` — and tells payment failures
//!   from API failures from network failures.
//! * [`wallet`]: sign in to a wallet-authenticated data API (Area A) with an
//!   Ethereum key, keep a wallet JWT fresh and send requests with it.
//! * [`payer`]: EIP-3009 signing of a quote's offer with one secp256k1 key
//!   (`Payer`), which `pay` signs through and tests, benches and
//!   `examples/gateway_presign.rs` use directly; it needs only `x402`.

#[cfg(feature = "client-pay")]
pub mod pay;
#[cfg(feature = "x402")]
pub mod payer;
#[cfg(feature = "client-wallet")]
pub mod wallet;

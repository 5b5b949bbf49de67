//! HTTP clients of walletgate services (feature `client`).
//!
//! * [`pay`]: a tower layer for HTTP *client* services that answers x402
//!   quotes — signs the first offer within the caller's spend controls and
//!   resends the request with `PAYMENT-SIGNATURE` — and tells payment failures
//!   from API failures from network failures.
//! * [`wallet`]: sign in to a wallet-authenticated data API (Area A) with an
//!   Ethereum key, keep a wallet JWT fresh and send requests with it.

pub mod pay;
pub mod wallet;

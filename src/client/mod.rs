//! HTTP clients of walletgate services.
//!
//! * [`pay`] (feature `client`): a tower layer for HTTP *client* services
//!   that answers x402 quotes — signs the first offer within the caller's
//!   spend controls and resends the request with `PAYMENT-SIGNATURE` — and
//!   tells payment failures from API failures from network failures.
//!
//! Each kind of client is its own module; the list grows one line at a time.

pub mod pay;

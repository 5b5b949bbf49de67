//! Clients of walletgate services (feature `client`).
//!
//! - [`wallet`]: sign in to a wallet-authenticated data API (Area A) with an
//!   Ethereum key, keep a wallet JWT fresh and send requests with it.

pub mod wallet;

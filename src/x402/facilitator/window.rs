//! What every verifier's offline checks share: the window an authorization
//! may be valid for, and how a refusal is told.

use alloy_primitives::Address;

/// Seconds a payer's clock may run ahead of the server's: an authorization's
/// `validBefore` may reach now + `maxTimeoutSeconds` + this, no further.
pub const AUTHORIZATION_CLOCK_SKEW_SECS: u64 = 60;

/// Seconds an authorization must still be valid for at verification, as the
/// reference facilitator requires (room for settlement).
pub const MIN_REMAINING_VALIDITY_SECS: u64 = 6;

/// How an authorization's signature is judged offline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SignatureCheck {
    /// One recovery, which must give the payer.
    Recover,
    /// The payer is a contract: its own check (ERC-1271, through the token or
    /// Permit2) judges the signature on chain, so offline it is not looked at.
    #[cfg(feature = "evm-settler")]
    OnChain,
}

/// A refused payment: the reason and, once known, the payer.
pub(crate) struct Refusal {
    pub(crate) reason: &'static str,
    pub(crate) payer: Option<Address>,
}

//! [`IdempotencyKey`]: how the caller of a `/settle` shows it is the one that
//! first settled an authorization.
//!
//! A facilitator answers `success: true` once per authorization: a server
//! that sends its buffered answer only on success (the official x402
//! servers) then serves a payment once, however many copies of it reach the
//! facilitator. The first caller may lose that answer and ask again; it
//! proves it is that caller with the `Idempotency-Key` it sent the first
//! time. Nothing in the signed payment can serve as that proof: whoever
//! copies the payment has all of it.

use std::fmt;

use alloy_primitives::{B256, keccak256};

/// The header a `/settle` caller names itself with.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// Shortest key accepted: a copier must not be able to guess it.
const MIN_LEN: usize = 16;
/// Longest key accepted.
const MAX_LEN: usize = 255;

/// An `Idempotency-Key`: 16 to 255 visible ASCII characters, chosen by the
/// caller and sent again on its retries of the same settlement. Its text is
/// never shown (`Debug` hides it); facilitators keep only its digest.
#[derive(Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

/// Why a text is not an [`IdempotencyKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidIdempotencyKey;

impl fmt::Display for InvalidIdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an Idempotency-Key is {MIN_LEN} to {MAX_LEN} visible ASCII characters"
        )
    }
}

impl std::error::Error for InvalidIdempotencyKey {}

impl IdempotencyKey {
    /// `text` as a key, if it is 16 to 255 visible ASCII characters.
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidIdempotencyKey> {
        let text = text.into();
        let visible = text.bytes().all(|byte| byte.is_ascii_graphic());
        if !visible || !(MIN_LEN..=MAX_LEN).contains(&text.len()) {
            return Err(InvalidIdempotencyKey);
        }
        Ok(Self(text))
    }

    /// A header's raw value as a key.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, InvalidIdempotencyKey> {
        let text = std::str::from_utf8(bytes).map_err(|_| InvalidIdempotencyKey)?;
        Self::new(text)
    }

    /// The key a caller holding `secret` uses for the payment `payment`
    /// (any bytes that identify it): the same on every retry, and on every
    /// replica sharing the secret, unguessable without it.
    pub fn derive(secret: &[u8; 32], payment: &[u8]) -> Self {
        let mut input = Vec::with_capacity(secret.len() + payment.len());
        input.extend_from_slice(secret);
        input.extend_from_slice(payment);
        Self(alloy_primitives::hex::encode(keccak256(input)))
    }

    /// The text to send as the header's value.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What a facilitator keeps of it.
    pub fn digest(&self) -> B256 {
        keccak256(self.0.as_bytes())
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdempotencyKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_long_enough_to_be_unguessable_and_visible_ascii() {
        assert!(IdempotencyKey::new("0123456789abcdef").is_ok());
        assert_eq!(
            IdempotencyKey::new("short"),
            Err(InvalidIdempotencyKey),
            "a guessable key proves nothing"
        );
        assert!(IdempotencyKey::new("0123456789 abcdef").is_err());
        assert!(IdempotencyKey::new("0123456789abcdef\n").is_err());
        assert!(IdempotencyKey::new("k".repeat(256)).is_err());
    }

    #[test]
    fn a_derived_key_is_stable_per_payment_and_secret_and_never_shown() {
        let key = IdempotencyKey::derive(&[1; 32], b"payment");
        assert_eq!(key, IdempotencyKey::derive(&[1; 32], b"payment"));
        assert_ne!(key, IdempotencyKey::derive(&[2; 32], b"payment"));
        assert_ne!(key, IdempotencyKey::derive(&[1; 32], b"another"));
        assert!(IdempotencyKey::new(key.as_str()).is_ok());
        assert!(!format!("{key:?}").contains(key.as_str()));
    }
}

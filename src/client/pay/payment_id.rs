//! The paying client's `payment-identifier`: one id per logical request.
//!
//! When a 402 declares the extension, the client sends an id in its payment
//! (`extensions["payment-identifier"].info.id`, echoing every declared
//! extension as the official client does): the caller's
//! [`IdempotencyKey`] from the request extensions, else one generated for
//! this request. The same id goes with every resend of that request,
//! including after a transport failure, so a server that keeps answers by id
//! answers a lost one again instead of charging twice.

use std::fmt;

use serde_json::{Map, Value};

use crate::x402::server::payment_id::PAYMENT_IDENTIFIER;
use crate::x402::server::payment_id::is_valid_id;
use crate::x402::wire::{PaymentPayload, codec};

/// The payment identifier of one logical request; put it in the request
/// extensions to choose it (`walletgate pay --idempotency-key`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// `key`, if it is 16–128 characters of `[A-Za-z0-9_-]`.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidIdempotencyKey> {
        let key = key.into();
        match is_valid_id(&key) {
            true => Ok(Self(key)),
            false => Err(InvalidIdempotencyKey),
        }
    }

    /// A fresh key as the official client makes them: `pay_` and 32 hex
    /// digits of randomness.
    pub fn generate() -> Self {
        let mut random = [0u8; 16];
        // No randomness at all is a broken platform; a fixed key would only
        // make this request's resends look like the first.
        let _ = getrandom::fill(&mut random);
        Self(format!("pay_{}", alloy_primitives::hex::encode(random)))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&self.0).finish()
    }
}

/// A key that is not 16–128 characters of `[A-Za-z0-9_-]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidIdempotencyKey;

impl fmt::Display for InvalidIdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an idempotency key is 16 to 128 characters of A-Z, a-z, 0-9, _ or -")
    }
}

impl std::error::Error for InvalidIdempotencyKey {}

/// Whether a 402's `extensions` declare the payment identifier.
pub(crate) fn declares_payment_identifier(declared: Option<&Map<String, Value>>) -> bool {
    declared.is_some_and(|declared| declared.contains_key(PAYMENT_IDENTIFIER))
}

/// `header` (a `PAYMENT-SIGNATURE`) with the declared extensions echoed and
/// `id` written into the payment identifier's `info`; `header` as it is when
/// nothing was declared.
pub(crate) fn with_extensions(
    header: String,
    declared: Option<&Map<String, Value>>,
    id: Option<&IdempotencyKey>,
) -> String {
    let Some(declared) = declared.filter(|declared| !declared.is_empty()) else {
        return header;
    };
    let Ok(mut payload) = codec::decode::<PaymentPayload>(header.as_bytes()) else {
        return header;
    };
    // The echo: each declared extension as declared, `schema` included, as
    // the official client echoes them (servers such as mppx's parse the
    // echo against the declaration's shape and refuse one without it).
    let mut echoed: Map<String, Value> = declared.clone();
    if let (Some(id), Some(Value::Object(info))) = (
        id,
        echoed
            .get_mut(PAYMENT_IDENTIFIER)
            .and_then(|entry| entry.get_mut("info")),
    ) {
        info.insert("id".into(), Value::String(id.0.clone()));
    }
    payload.extensions = Some(echoed);
    codec::encode(&payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_generated_in_the_official_shape() {
        assert!(IdempotencyKey::new("order-2026-000001").is_ok());
        assert_eq!(IdempotencyKey::new("short"), Err(InvalidIdempotencyKey));
        let key = IdempotencyKey::generate();
        assert!(key.as_str().starts_with("pay_") && key.as_str().len() == 36);
        assert!(IdempotencyKey::new(key.as_str()).is_ok());
        assert_ne!(key, IdempotencyKey::generate());
    }
}

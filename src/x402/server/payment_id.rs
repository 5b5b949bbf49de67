//! The `payment-identifier` extension on the server: pay once per id.
//!
//! With [`with_payment_identifier`](super::X402LayerBuilder::with_payment_identifier)
//! every 402 declares the extension (`{"info":{"required":…},"schema":…}`)
//! and a payment may carry an id in `extensions["payment-identifier"].info.id`
//! (16–128 characters of `[A-Za-z0-9_-]`). The id is looked up in the
//! [`AnswerStore`](super::AnswerStore) before the replay claim, bound to a
//! **request fingerprint** (method, path and query, a digest of the parsed
//! JSON body, the accepted offer) and to the payer:
//!
//! | found under the id | same request and payer | otherwise |
//! |---|---|---|
//! | nothing | processed as usual; the answer kept under the id once settled | — |
//! | a request in flight (any replica) | 503 `PAYMENT_VERIFICATION_UNAVAILABLE` + `Retry-After` (the very payment: on to its claim) | 409 `PAYMENT_IDENTIFIER_CONFLICT` |
//! | a kept answer | that answer: for the identical payment at once, for a fresh one once it verifies (never settled) | 409 `PAYMENT_IDENTIFIER_CONFLICT` |
//!
//! A malformed id, or none where it is required, is 400
//! `PAYMENT_IDENTIFIER_INVALID`. Without an id nothing changes.

use alloy_primitives::keccak256;
use serde_json::{Map, Value, json};

use crate::x402::wire::types::PaymentRequirements;

/// The extension's key in `extensions`.
pub const PAYMENT_IDENTIFIER: &str = "payment-identifier";

/// Whether the layer takes payment identifiers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PaymentIdentifier {
    /// Not declared, ids ignored (default).
    #[default]
    Off,
    /// Declared with `required: false`: a payment may carry an id.
    Optional,
    /// Declared with `required: true`: a payment without an id is 400.
    Required,
}

impl PaymentIdentifier {
    /// Reads `off`, `optional` or `required`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "off" => Some(Self::Off),
            "optional" => Some(Self::Optional),
            "required" => Some(Self::Required),
            _ => None,
        }
    }
}

/// Adds the extension's declaration to a quote's `extensions` (nothing when off).
pub(crate) fn advertise(mode: PaymentIdentifier, extensions: &mut Map<String, Value>) {
    let required = match mode {
        PaymentIdentifier::Off => return,
        PaymentIdentifier::Optional => false,
        PaymentIdentifier::Required => true,
    };
    extensions.insert(
        PAYMENT_IDENTIFIER.to_owned(),
        json!({
            "info": {"required": required},
            "schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "required": {"type": "boolean"},
                    "id": {"type": "string", "minLength": 16, "maxLength": 128, "pattern": "^[a-zA-Z0-9_-]+$"},
                },
                "required": ["required"],
            },
        }),
    );
}

/// Why an id is refused (400 `PAYMENT_IDENTIFIER_INVALID`).
pub(crate) const ID_MISSING: &str = "payment_identifier_required";
/// Why an id is refused (400 `PAYMENT_IDENTIFIER_INVALID`).
pub(crate) const ID_MALFORMED: &str = "payment_identifier_malformed";

/// The id a payment's `extensions` carry: `info.id` (or a bare `id`).
/// `Err` is the refusal's reason.
pub(crate) fn read_id(
    mode: PaymentIdentifier,
    extensions: Option<&Map<String, Value>>,
) -> Result<Option<String>, &'static str> {
    if mode == PaymentIdentifier::Off {
        return Ok(None);
    }
    let entry = extensions.and_then(|extensions| extensions.get(PAYMENT_IDENTIFIER));
    let id = entry.and_then(|entry| {
        entry
            .get("info")
            .and_then(|info| info.get("id"))
            .or_else(|| entry.get("id"))
    });
    match id {
        None | Some(Value::Null) if mode == PaymentIdentifier::Required => Err(ID_MISSING),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if is_valid_id(id) => Ok(Some(id.clone())),
        Some(_) => Err(ID_MALFORMED),
    }
}

/// Whether `id` is a valid payment identifier: 16–128 characters of `[A-Za-z0-9_-]`.
pub fn is_valid_id(id: &str) -> bool {
    (16..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Fields of an extension's `info` that change with every 402 (not echoed back as advertised).
fn dynamic_fields(extension: &str) -> &'static [&'static str] {
    match extension {
        "sign-in-with-x" => &["nonce", "issuedAt", "expirationTime"],
        _ => &[],
    }
}

/// The echo rule: every declared extension the payment echoes must still
/// contain what was declared in its `info` (extra fields allowed; dynamic
/// ones aside). No echo at all passes.
pub(crate) fn echo_matches(
    declared: Option<&Map<String, Value>>,
    echoed: Option<&Map<String, Value>>,
) -> bool {
    let (Some(declared), Some(echoed)) = (declared, echoed) else {
        return true;
    };
    declared.iter().all(|(key, declaration)| {
        let Some(echo) = echoed.get(key) else {
            return true;
        };
        let (Some(Value::Object(advertised)), Some(info)) =
            (declaration.get("info"), echo.get("info"))
        else {
            return declaration.get("info").is_none();
        };
        let skip = dynamic_fields(key);
        advertised
            .iter()
            .filter(|(field, _)| !skip.contains(&field.as_str()))
            .all(|(field, value)| {
                info.get(field)
                    .is_some_and(|echoed| contains(echoed, value))
            })
    })
}

/// Whether `whole` contains `part`: equal scalars and arrays, objects by subset.
fn contains(whole: &Value, part: &Value) -> bool {
    match (whole, part) {
        (Value::Object(whole), Value::Object(part)) => part
            .iter()
            .all(|(key, value)| whole.get(key).is_some_and(|held| contains(held, value))),
        _ => whole == part,
    }
}

/// The request an id is bound to: its method, path and query, the digest of
/// its body (none when no body layer read it), and the accepted offer.
pub(crate) fn request_fingerprint(
    request_line: &str,
    body_digest: Option<[u8; 32]>,
    offer: &PaymentRequirements,
) -> [u8; 32] {
    let mut text = Vec::with_capacity(256);
    text.extend_from_slice(request_line.as_bytes());
    text.push(b'\n');
    text.extend_from_slice(&body_digest.unwrap_or_default());
    text.push(b'\n');
    text.extend_from_slice(&serde_json::to_vec(offer).unwrap_or_default());
    keccak256(&text).0
}

/// What an id is bound to, as kept beside its answer or marker: the request
/// fingerprint, the payer (lowercase) and the payment's own fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IdBinding {
    pub(crate) request: [u8; 32],
    pub(crate) payer: String,
    pub(crate) payment: [u8; 32],
}

impl IdBinding {
    pub(crate) fn encode(&self) -> String {
        format!(
            "{} {} {}",
            alloy_primitives::hex::encode(self.request),
            self.payer,
            alloy_primitives::hex::encode(self.payment)
        )
    }

    pub(crate) fn decode(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, ' ');
        let (request, payer, payment) = (parts.next()?, parts.next()?, parts.next()?);
        let digest = |hex: &str| {
            let mut bytes = [0; 32];
            alloy_primitives::hex::decode_to_slice(hex, &mut bytes).ok()?;
            Some(bytes)
        };
        Some(Self {
            request: digest(request)?,
            payer: payer.to_owned(),
            payment: digest(payment)?,
        })
    }

    /// Same request, same payer (the payment may be a fresh one).
    pub(crate) fn same_request_and_payer(&self, other: &Self) -> bool {
        self.request == other.request && self.payer == other.payer
    }
}

/// The answer store's key of an id.
pub(crate) fn id_key(id: &str) -> String {
    format!("x402-payment-id:{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(id: Value) -> Map<String, Value> {
        let mut extensions = Map::new();
        extensions.insert(
            PAYMENT_IDENTIFIER.into(),
            json!({"info": {"required": false, "id": id}}),
        );
        extensions
    }

    #[test]
    fn ids_are_read_checked_and_required_as_configured() {
        let good = "pay_7d5d747be160e280504c099d984bcfe0";
        let read =
            |mode, extensions: Option<Map<String, Value>>| read_id(mode, extensions.as_ref());
        assert_eq!(
            read(PaymentIdentifier::Optional, Some(with_id(json!(good)))),
            Ok(Some(good.to_owned()))
        );
        assert_eq!(read(PaymentIdentifier::Optional, None), Ok(None));
        assert_eq!(read(PaymentIdentifier::Required, None), Err(ID_MISSING));
        assert_eq!(
            read(PaymentIdentifier::Off, Some(with_id(json!("x")))),
            Ok(None)
        );
        for bad in [
            json!("short"),
            json!("a".repeat(129)),
            json!("pay_with space_0123456"),
            json!(7),
        ] {
            assert_eq!(
                read(PaymentIdentifier::Optional, Some(with_id(bad))),
                Err(ID_MALFORMED)
            );
        }
        // r402's bare form.
        let mut bare = Map::new();
        bare.insert(PAYMENT_IDENTIFIER.into(), json!({"id": good}));
        assert_eq!(
            read(PaymentIdentifier::Required, Some(bare)),
            Ok(Some(good.to_owned()))
        );
        assert!(is_valid_id(&"A-z_9".repeat(4)));
    }

    #[test]
    fn an_echo_must_contain_the_declaration_apart_from_dynamic_fields() {
        let mut declared = Map::new();
        advertise(PaymentIdentifier::Optional, &mut declared);
        declared.insert(
            "sign-in-with-x".into(),
            json!({"info": {"domain": "a.example", "nonce": "n1"}}),
        );
        assert!(echo_matches(Some(&declared), None));
        assert!(echo_matches(
            Some(&declared),
            Some(&with_id(json!("pay_0123456789abcdef")))
        ));
        let mut changed = Map::new();
        changed.insert(
            PAYMENT_IDENTIFIER.into(),
            json!({"info": {"required": true, "id": "x"}}),
        );
        assert!(!echo_matches(Some(&declared), Some(&changed)));
        let mut siwx = Map::new();
        siwx.insert(
            "sign-in-with-x".into(),
            json!({"info": {"domain": "a.example", "nonce": "n2"}}),
        );
        assert!(echo_matches(Some(&declared), Some(&siwx)));
        siwx.insert(
            "sign-in-with-x".into(),
            json!({"info": {"domain": "b.example"}}),
        );
        assert!(!echo_matches(Some(&declared), Some(&siwx)));
    }

    #[test]
    fn a_binding_reads_back_and_compares_request_and_payer() {
        let binding = IdBinding {
            request: [1; 32],
            payer: "0xabc".into(),
            payment: [2; 32],
        };
        assert_eq!(IdBinding::decode(&binding.encode()), Some(binding.clone()));
        let fresh = IdBinding {
            payment: [3; 32],
            ..binding.clone()
        };
        assert!(binding.same_request_and_payer(&fresh));
        assert!(!binding.same_request_and_payer(&IdBinding {
            payer: "0xdef".into(),
            ..fresh
        }));
        assert_eq!(IdBinding::decode("junk"), None);
    }
}

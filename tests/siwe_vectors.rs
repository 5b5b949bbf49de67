//! The public spruceid EIP-4361 test vectors (tests/fixtures/siwe/README.md).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use walletgate::clock::FakeClock;
use walletgate::siwe::{
    AddressPolicy, InMemoryNonceStore, NonceStore, ParseError, SiweMessage, SiweMessageFields,
    SiweVerifier, Timestamp, VerifyError,
};

fn fixture(name: &str) -> BTreeMap<String, Value> {
    let path = format!("{}/tests/fixtures/siwe/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn hex_bytes(signature: &str) -> Vec<u8> {
    alloy_primitives::hex::decode(signature).unwrap()
}

#[test]
fn parsing_positive_vectors_parse_render_and_rebuild_from_fields() {
    let vectors = fixture("parsing_positive.json");
    assert_eq!(vectors.len(), 19);
    for (name, vector) in vectors {
        let text = vector["message"].as_str().unwrap();
        let expected: SiweMessageFields = serde_json::from_value(vector["fields"].clone()).unwrap();

        let message = SiweMessage::parse_with(text, AddressPolicy::ChecksummedOnly)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(message.to_string(), text, "{name}: render");
        assert_eq!(message.to_fields(), expected, "{name}: fields");

        let rebuilt = SiweMessage::from_fields(&expected).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(rebuilt.to_string(), text, "{name}: rebuilt from fields");
    }
}

#[test]
fn parsing_negative_vectors_are_refused() {
    let vectors = fixture("parsing_negative.json");
    assert_eq!(vectors.len(), 29);
    for (name, vector) in vectors {
        let text = vector.as_str().unwrap();
        let strict = SiweMessage::parse_with(text, AddressPolicy::ChecksummedOnly);
        assert!(strict.is_err(), "{name}: parsed under the strict policy");

        let lenient = text.parse::<SiweMessage>();
        if name == "address not EIP-55" {
            // The one deliberate difference: all-lowercase addresses are
            // accepted by default (EIP-4361: SHOULD be checksummed).
            assert_eq!(strict.unwrap_err(), ParseError::AddressNotChecksummed);
            let message = lenient.unwrap();
            assert!(!message.is_address_checksummed());
            assert_eq!(message.to_string(), text);
        } else {
            assert!(lenient.is_err(), "{name}: parsed under the default policy");
        }
    }
}

#[test]
fn parsing_negative_objects_do_not_form_messages() {
    let vectors = fixture("parsing_negative_objects.json");
    assert!(vectors.len() >= 10);
    for (name, vector) in vectors {
        // Missing required members and a non-numeric chain id already fail
        // deserialisation; everything else must fail to form a message.
        if let Ok(fields) = serde_json::from_value::<SiweMessageFields>(vector) {
            assert!(
                SiweMessage::from_fields(&fields).is_err(),
                "{name}: formed a message"
            );
        }
    }
}

/// One vector's fields plus the test knobs the spec files carry.
struct SignedVector {
    fields: SiweMessageFields,
    signature: String,
    time: Option<Timestamp>,
    domain_binding: Option<String>,
    match_nonce: Option<String>,
}

fn signed_vector(vector: &Value) -> SignedVector {
    let text_field = |key: &str| vector.get(key).and_then(Value::as_str).map(str::to_owned);
    SignedVector {
        fields: serde_json::from_value(vector.clone()).unwrap(),
        signature: text_field("signature").unwrap(),
        time: text_field("time").map(|t| t.parse().unwrap()),
        domain_binding: text_field("domainBinding"),
        match_nonce: text_field("matchNonce"),
    }
}

/// A verifier configured the way the vector expects, with its nonce issued,
/// standing at the vector's `time` (or one minute after it was issued).
async fn verifier_for(vector: &SignedVector) -> SiweVerifier {
    let fallback_millis = vector
        .fields
        .issued_at
        .parse::<Timestamp>()
        .map_or(1_643_500_000_000, |t| t.unix_millis() + 60_000);
    let now_millis = vector
        .time
        .as_ref()
        .map_or(fallback_millis, Timestamp::unix_millis);
    let now_secs = u64::try_from(now_millis / 1000).unwrap();
    let nonces = Arc::new(InMemoryNonceStore::new());
    let nonce = vector
        .match_nonce
        .as_deref()
        .unwrap_or(&vector.fields.nonce);
    nonces
        .insert(nonce, now_secs * 1000, now_secs * 1000 + 600_000)
        .await
        .unwrap();
    SiweVerifier::builder()
        .with_domain(
            vector
                .domain_binding
                .as_deref()
                .unwrap_or(&vector.fields.domain),
        )
        .with_uri(vector.fields.uri.clone())
        .allow_chain_id(vector.fields.chain_id)
        // The vectors were signed in 2022 and some verify in 2101 or 2200.
        .with_max_issued_age_secs(300 * 365 * 86_400)
        .with_clock(Arc::new(FakeClock::at_unix_secs(now_secs)))
        .with_nonce_store(nonces)
        .build()
        .unwrap()
}

#[tokio::test]
async fn verification_positive_vectors_verify() {
    let vectors = fixture("verification_positive.json");
    assert_eq!(vectors.len(), 4);
    for (name, vector) in vectors {
        let vector = signed_vector(&vector);
        let message = SiweMessage::from_fields(&vector.fields).unwrap();
        message
            .verify_eip191(&hex_bytes(&vector.signature))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(time) = &vector.time {
            let at = u64::try_from(time.unix_millis()).unwrap();
            message.check_validity_window(at, 0).unwrap();
        }

        let verifier = verifier_for(&vector).await;
        let outcome = verifier
            .verify_fields(&vector.fields, &vector.signature)
            .await;
        if name == "expired message" {
            // Verified at 2020-01-05, before its 2022 issued-at: siwe-rs ignores
            // issued-at, this verifier refuses a message from the future.
            assert!(
                matches!(outcome, Err(VerifyError::IssuedInFuture)),
                "{name}"
            );
        } else {
            let signed_in = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(signed_in.address, message.address());
        }
    }
}

#[tokio::test]
async fn verification_negative_vectors_fail_for_the_stated_reason() {
    let vectors = fixture("verification_negative.json");
    assert_eq!(vectors.len(), 10);
    for (name, vector) in vectors {
        let vector = signed_vector(&vector);
        let verifier = verifier_for(&vector).await;
        let outcome = verifier
            .verify_fields(&vector.fields, &vector.signature)
            .await;
        let error = outcome.err().unwrap_or_else(|| panic!("{name}: verified"));
        let expected = match name.as_str() {
            "expired message" | "custom time" => matches!(error, VerifyError::Expired),
            "not yet valid" => matches!(error, VerifyError::NotYetValid),
            "domain binding" => matches!(error, VerifyError::DomainMismatch),
            "custom nonce" => matches!(error, VerifyError::NonceUnknown),
            "malformed signature" => matches!(error, VerifyError::MalformedSignature),
            "wrong signature" => matches!(error, VerifyError::SignatureMismatch),
            "invalid issuedAt" | "invalid notBefore" | "invalid expirationTime" => matches!(
                error,
                VerifyError::InvalidMessage(ParseError::Timestamp { .. })
            ),
            other => panic!("unexpected vector {other}"),
        };
        assert!(expected, "{name}: refused for another reason: {error}");
        assert!(!error.to_string().contains(&vector.signature[2..20]));
    }
}

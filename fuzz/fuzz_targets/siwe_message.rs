//! Arbitrary text as an EIP-4361 message, and arbitrary JSON as its fields,
//! through parse, render and `SiweVerifier::verify`.
//!
//! Input: `message` NUL `signature hex`. A message that parses must render
//! back to exactly the input (the signature is checked over that text) and
//! parse again to the same message; its fields must rebuild it. Verification
//! must never panic, never wait, and never accept a signature that was not
//! made by the message's address (the harness holds no key, so with fuzzed
//! signatures only the committed seed's genuine signature may pass).
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use walletgate::clock::FakeClock;
use walletgate::siwe::{
    InMemoryNonceStore, NonceStore, SiweMessage, SiweMessageFields, SiweVerifier,
};
use walletgate_fuzz::{ready, split_once};

/// 2022-01-27T17:10:00Z: the published example's sign-in time.
const NOW_MILLIS: u64 = 1_643_303_400_000;
/// A verifier for the published example's relying party, with a fresh
/// nonce store holding `nonce` (so the checks after the nonce are reached).
fn verifier(nonce: &str) -> SiweVerifier {
    let nonces = Arc::new(InMemoryNonceStore::new());
    // A nonce the store refuses (bad syntax) just stays unknown.
    let _ = ready(nonces.insert(nonce, NOW_MILLIS - 60_000, NOW_MILLIS + 60_000));
    SiweVerifier::builder()
        .with_domain("login.xyz")
        .with_uri("https://login.xyz")
        .allow_chain_id(1)
        .with_clock(Arc::new(FakeClock::at_unix_secs(NOW_MILLIS / 1000)))
        .with_nonce_store(nonces)
        .build()
        .unwrap()
}

fn verify(message: &SiweMessage, signature: &str) {
    let verifier = verifier(message.nonce());
    if let Ok(signed_in) = ready(verifier.verify(message, signature)) {
        assert_eq!(signed_in.address, message.address());
        assert_eq!(&signed_in.message, message);
        assert!(message.verify_eip191(&hex_bytes(signature)).is_ok());
        // Spent: the same sign-in never passes twice.
        assert!(ready(verifier.verify(message, signature)).is_err());
    }
}

fn hex_bytes(text: &str) -> Vec<u8> {
    let digits = text.strip_prefix("0x").unwrap_or(text).as_bytes();
    digits
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).unwrap_or("zz");
            u8::from_str_radix(pair, 16).unwrap_or(0)
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let (message, signature) = split_once(data, 0);
    let signature = String::from_utf8_lossy(signature);
    if let Ok(text) = std::str::from_utf8(message) {
        if let Ok(parsed) = text.parse::<SiweMessage>() {
            let rendered = parsed.to_string();
            assert_eq!(rendered, text, "parse then render changed the text");
            assert_eq!(rendered.parse::<SiweMessage>().unwrap(), parsed);
            // Fields read an empty resources list or request id as absent
            // (documented on `from_fields`), so a text message with an empty
            // `Resources:` section or `Request ID: ` line, both valid in the
            // EIP-4361 grammar, cannot be rebuilt from its fields (seeds
            // `empty_resources_section` and `empty_request_id`, found here).
            if parsed.resources() != Some(&[]) && parsed.request_id() != Some("") {
                let rebuilt = SiweMessage::from_fields(&parsed.to_fields());
                assert_eq!(
                    rebuilt.as_ref(),
                    Ok(&parsed),
                    "fields do not rebuild the message"
                );
            }
            verify(&parsed, &signature);
        }
    }
    // The same bytes as the JSON fields form (the OpenSea SDK's).
    if let Ok(fields) = serde_json::from_slice::<SiweMessageFields>(message) {
        if let Ok(parsed) = SiweMessage::from_fields(&fields) {
            assert_eq!(
                parsed.to_string().parse::<SiweMessage>().as_ref(),
                Ok(&parsed)
            );
            verify(&parsed, &signature);
        }
    }
});

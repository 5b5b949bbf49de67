//! The relying party's checks, with messages signed by public Hardhat dev keys.

use std::sync::Arc;

use secp256k1::{Message, Secp256k1, SecretKey};
use walletgate::clock::FakeClock;
use walletgate::siwe::{
    AddressPolicy, InMemoryNonceStore, SiweMessage, SiweMessageFields, SiweVerifier, Timestamp,
    VerifyError,
};

/// PUBLIC Hardhat/Anvil dev key #0 (mnemonic "test test ... junk"); never holds value.
const HARDHAT_KEY_0: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const HARDHAT_ADDRESS_0: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
/// PUBLIC Hardhat/Anvil dev key #1.
const HARDHAT_KEY_1: &str = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

const DOMAIN: &str = "localhost:8080";
const URI: &str = "http://localhost:8080/api/v2/auth/siwe/verify";
const NOW_SECS: u64 = 1_700_000_000;
const STATEMENT: &str = "Click to sign in and accept the OpenSea Terms of Service (https://opensea.io/tos) and Privacy Policy (https://opensea.io/privacy).";

/// EIP-191 `personal_sign` of `text`, as `0x` + 130 hex digits with v = 27/28.
fn sign(key_hex: &str, text: &str) -> String {
    sign_with_v_offset(key_hex, text, 27)
}

fn sign_with_v_offset(key_hex: &str, text: &str, v_offset: u8) -> String {
    let key_bytes: [u8; 32] = alloy_primitives::hex::decode_to_array(key_hex).unwrap();
    let key = SecretKey::from_byte_array(key_bytes).unwrap();
    let digest = alloy_primitives::eip191_hash_message(text);
    let signature =
        Secp256k1::signing_only().sign_ecdsa_recoverable(Message::from_digest(digest.0), &key);
    let (recovery_id, rs) = signature.serialize_compact();
    let mut bytes = rs.to_vec();
    bytes.push(u8::try_from(i32::from(recovery_id)).unwrap() + v_offset);
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

struct Fixture {
    clock: FakeClock,
    verifier: SiweVerifier,
}

fn fixture() -> Fixture {
    fixture_with(|b| b)
}

fn fixture_with(
    configure: impl FnOnce(
        walletgate::siwe::SiweVerifierBuilder,
    ) -> walletgate::siwe::SiweVerifierBuilder,
) -> Fixture {
    let clock = FakeClock::at_unix_secs(NOW_SECS);
    let builder = SiweVerifier::builder()
        .with_domain(DOMAIN)
        .with_scheme("http")
        .with_uri(URI)
        .allow_chain_ids([1, 8453])
        .with_max_issued_age_secs(600)
        .with_leeway_secs(30)
        .with_nonce_ttl_secs(300)
        .with_clock(Arc::new(clock.clone()))
        .with_nonce_store(InMemoryNonceStore::new());
    Fixture {
        verifier: configure(builder).build().unwrap(),
        clock,
    }
}

fn now_millis(clock: &FakeClock) -> i64 {
    use walletgate::clock::Clock as _;
    i64::try_from(clock.now_unix_millis()).unwrap()
}

/// The fields a client would send, issued now with a fresh nonce.
async fn fields(fx: &Fixture) -> SiweMessageFields {
    SiweMessageFields {
        domain: DOMAIN.to_owned(),
        address: HARDHAT_ADDRESS_0.to_owned(),
        statement: Some(STATEMENT.to_owned()),
        uri: URI.to_owned(),
        version: "1".to_owned(),
        chain_id: 1,
        nonce: fx.verifier.issue_nonce().await.unwrap(),
        issued_at: at(now_millis(&fx.clock)),
        ..SiweMessageFields::default()
    }
}

/// What a client signs for `fields`: the text it renders itself.
fn client_text(fields: &SiweMessageFields) -> String {
    SiweMessage::from_fields(fields).unwrap().to_string()
}

/// An RFC 3339 text for `unix_millis`, as a JavaScript client writes it.
fn at(unix_millis: i64) -> String {
    Timestamp::from_unix_millis(unix_millis).to_string()
}

/// Signs and verifies fresh fields after `change` (given the clock's now, in ms).
async fn verify_changed(
    fx: &Fixture,
    change: impl FnOnce(&mut SiweMessageFields, i64),
) -> Result<(), VerifyError> {
    let mut fields = fields(fx).await;
    change(&mut fields, now_millis(&fx.clock));
    verify(fx, &fields).await
}

async fn verify(fx: &Fixture, fields: &SiweMessageFields) -> Result<(), VerifyError> {
    let signature = sign(HARDHAT_KEY_0, &client_text(fields));
    fx.verifier
        .verify_fields(fields, &signature)
        .await
        .map(|_| ())
}

#[tokio::test]
async fn hardhat_signed_message_rebuilt_from_sdk_json_verifies() {
    let fx = fixture();
    let nonce = fx.verifier.issue_nonce().await.unwrap();
    let issued_at = Timestamp::from_unix_millis(now_millis(&fx.clock));
    // The text the SDK signs, written out by hand; the server only sees the JSON.
    let signed_text = format!(
        "{DOMAIN} wants you to sign in with your Ethereum account:\n{HARDHAT_ADDRESS_0}\n\n{STATEMENT}\n\nURI: {URI}\nVersion: 1\nChain ID: 1\nNonce: {nonce}\nIssued At: {issued_at}"
    );
    let signature = sign(HARDHAT_KEY_0, &signed_text);
    let body = serde_json::json!({
        "message": {
            "domain": DOMAIN, "address": HARDHAT_ADDRESS_0, "statement": STATEMENT, "uri": URI,
            "version": "1", "chainId": "1", "nonce": nonce, "issuedAt": issued_at.as_str(),
            "accountType": "Ethereum"
        },
        "signature": signature,
        "chainArch": "EVM"
    });
    let fields: SiweMessageFields = serde_json::from_value(body["message"].clone()).unwrap();
    assert_eq!(
        SiweMessage::from_fields(&fields).unwrap().to_string(),
        signed_text
    );

    let signed_in = fx
        .verifier
        .verify_fields(&fields, body["signature"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(signed_in.address.to_checksum(None), HARDHAT_ADDRESS_0);
    assert_eq!(signed_in.message.nonce(), nonce);
}

#[tokio::test]
async fn parsed_text_verifies_too() {
    let fx = fixture();
    let fields = fields(&fx).await;
    let text = client_text(&fields);
    let message: SiweMessage = text.parse().unwrap();
    let signed_in = fx
        .verifier
        .verify(&message, &sign(HARDHAT_KEY_0, &text))
        .await
        .unwrap();
    assert_eq!(signed_in.message, message);
}

#[tokio::test]
async fn lowercase_and_checksummed_addresses_are_accepted() {
    let fx = fixture();
    let checksummed = fields(&fx).await;
    verify(&fx, &checksummed).await.unwrap();

    let mut lowercase = fields(&fx).await;
    lowercase.address = HARDHAT_ADDRESS_0.to_lowercase();
    assert!(client_text(&lowercase).contains(&HARDHAT_ADDRESS_0.to_lowercase()));
    verify(&fx, &lowercase).await.unwrap();
}

#[tokio::test]
async fn checksummed_only_policy_refuses_lowercase() {
    let fx = fixture_with(|b| b.with_address_policy(AddressPolicy::ChecksummedOnly));
    let mut lowercase = fields(&fx).await;
    lowercase.address = HARDHAT_ADDRESS_0.to_lowercase();
    let text = client_text(&lowercase);
    let signature = sign(HARDHAT_KEY_0, &text);
    let parsed: SiweMessage = text.parse().unwrap();
    assert!(matches!(
        fx.verifier.verify(&parsed, &signature).await,
        Err(VerifyError::AddressNotChecksummed)
    ));
    let mut again = fields(&fx).await;
    again.address = HARDHAT_ADDRESS_0.to_lowercase();
    assert!(matches!(
        fx.verifier.verify_fields(&again, &signature).await,
        Err(VerifyError::InvalidMessage(_))
    ));
    verify(&fx, &fields(&fx).await).await.unwrap();
}

#[tokio::test]
async fn mixed_case_address_with_a_wrong_checksum_is_refused() {
    let fx = fixture();
    let mut fields = fields(&fx).await;
    fields.address = HARDHAT_ADDRESS_0.replace("f39Fd6", "F39fd6");
    let signature = sign(HARDHAT_KEY_0, "irrelevant");
    assert!(matches!(
        fx.verifier.verify_fields(&fields, &signature).await,
        Err(VerifyError::InvalidMessage(_))
    ));
}

#[tokio::test]
async fn a_nonce_is_refused_the_second_time() {
    let fx = fixture();
    let fields = fields(&fx).await;
    verify(&fx, &fields).await.unwrap();
    assert!(matches!(
        verify(&fx, &fields).await,
        Err(VerifyError::NonceAlreadyUsed)
    ));
}

#[tokio::test]
async fn a_nonce_is_spent_by_a_failed_verification() {
    let fx = fixture();
    let good = fields(&fx).await;
    let signature = sign(HARDHAT_KEY_0, &client_text(&good));
    let mut wrong_chain = good.clone();
    wrong_chain.chain_id = 5;
    let wrong_signature = sign(HARDHAT_KEY_0, &client_text(&wrong_chain));
    assert!(matches!(
        fx.verifier
            .verify_fields(&wrong_chain, &wrong_signature)
            .await,
        Err(VerifyError::ChainNotAllowed { chain_id: 5 })
    ));
    assert!(matches!(
        fx.verifier.verify_fields(&good, &signature).await,
        Err(VerifyError::NonceAlreadyUsed)
    ));
}

#[tokio::test]
async fn a_nonce_is_spent_by_invalid_fields_and_a_bad_signature() {
    let fx = fixture();
    let good = fields(&fx).await;
    let mut broken = good.clone();
    broken.uri = ":not a uri".to_owned();
    assert!(matches!(
        fx.verifier.verify_fields(&broken, "0x00").await,
        Err(VerifyError::InvalidMessage(_))
    ));
    assert!(matches!(
        verify(&fx, &good).await,
        Err(VerifyError::NonceAlreadyUsed)
    ));

    let good = fields(&fx).await;
    assert!(matches!(
        fx.verifier.verify_fields(&good, "0x1234").await,
        Err(VerifyError::MalformedSignature)
    ));
    assert!(matches!(
        verify(&fx, &good).await,
        Err(VerifyError::NonceAlreadyUsed)
    ));
}

#[tokio::test]
async fn concurrent_attempts_with_one_nonce_pass_at_most_once() {
    let fx = fixture();
    let fields = fields(&fx).await;
    let (a, b, c) = tokio::join!(
        verify(&fx, &fields),
        verify(&fx, &fields),
        verify(&fx, &fields)
    );
    let passed = [a, b, c].iter().filter(|r| r.is_ok()).count();
    assert_eq!(passed, 1);
}

#[tokio::test]
async fn a_nonce_not_issued_here_is_refused() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, _| f.nonce = "madeUpByTheClient1".to_owned()).await;
    assert!(matches!(outcome, Err(VerifyError::NonceUnknown)));
}

#[tokio::test]
async fn an_expired_nonce_is_refused() {
    let fx = fixture();
    let mut fields = fields(&fx).await;
    fx.clock.advance(std::time::Duration::from_secs(301));
    fields.issued_at = at(now_millis(&fx.clock));
    assert!(matches!(
        verify(&fx, &fields).await,
        Err(VerifyError::NonceExpired)
    ));
}

#[tokio::test]
async fn an_expired_message_is_refused() {
    let fx = fixture();
    // Beyond the 30 s leeway.
    let outcome = verify_changed(&fx, |f, now| f.expiration_time = Some(at(now - 31_000))).await;
    assert!(matches!(outcome, Err(VerifyError::Expired)));
    verify_changed(&fx, |f, now| f.expiration_time = Some(at(now - 10_000)))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_not_yet_valid_message_is_refused() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, now| f.not_before = Some(at(now + 60_000))).await;
    assert!(matches!(outcome, Err(VerifyError::NotYetValid)));
}

#[tokio::test]
async fn an_issued_at_in_the_future_is_refused() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, now| f.issued_at = at(now + 60_000)).await;
    assert!(matches!(outcome, Err(VerifyError::IssuedInFuture)));
    // A few seconds of client clock skew are within the leeway.
    verify_changed(&fx, |f, now| f.issued_at = at(now + 5_000))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_old_issued_at_is_refused() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, now| f.issued_at = at(now - 601_000)).await;
    assert!(matches!(outcome, Err(VerifyError::IssuedTooLongAgo)));
}

#[tokio::test]
async fn another_domain_is_refused() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, _| f.domain = "evil.example".to_owned()).await;
    assert!(matches!(outcome, Err(VerifyError::DomainMismatch)));
}

#[tokio::test]
async fn another_uri_is_refused() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, _| {
        f.uri = "http://localhost:8080/other".to_owned();
    })
    .await;
    assert!(matches!(outcome, Err(VerifyError::UriMismatch)));
}

#[tokio::test]
async fn another_scheme_is_refused_and_the_configured_one_accepted() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, _| f.scheme = Some("https".to_owned())).await;
    assert!(matches!(outcome, Err(VerifyError::SchemeMismatch)));
    verify_changed(&fx, |f, _| f.scheme = Some("http".to_owned()))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_chain_not_allowed_is_refused_and_an_allowed_one_accepted() {
    let fx = fixture();
    let outcome = verify_changed(&fx, |f, _| f.chain_id = 11_155_111).await;
    assert!(matches!(
        outcome,
        Err(VerifyError::ChainNotAllowed {
            chain_id: 11_155_111
        })
    ));
    verify_changed(&fx, |f, _| f.chain_id = 8453).await.unwrap();
}

#[tokio::test]
async fn another_signer_is_refused() {
    let fx = fixture();
    let fields = fields(&fx).await;
    let signature = sign(HARDHAT_KEY_1, &client_text(&fields));
    let error = fx
        .verifier
        .verify_fields(&fields, &signature)
        .await
        .unwrap_err();
    assert!(matches!(error, VerifyError::SignatureMismatch));
    // Neither the message nor the debug form carries the signature.
    assert!(!error.to_string().contains(&signature[2..20]));
    assert!(!format!("{error:?}").contains(&signature[2..20]));
}

#[tokio::test]
async fn a_signature_over_different_text_is_refused() {
    let fx = fixture();
    let fields = fields(&fx).await;
    let mut other = fields.clone();
    other.statement = Some("Something else".to_owned());
    let signature = sign(HARDHAT_KEY_0, &client_text(&other));
    assert!(matches!(
        fx.verifier.verify_fields(&fields, &signature).await,
        Err(VerifyError::SignatureMismatch)
    ));
}

#[tokio::test]
async fn recovery_byte_zero_or_one_is_accepted() {
    let fx = fixture();
    let fields = fields(&fx).await;
    let signature = sign_with_v_offset(HARDHAT_KEY_0, &client_text(&fields), 0);
    fx.verifier
        .verify_fields(&fields, &signature)
        .await
        .unwrap();
}

#[tokio::test]
async fn resources_request_id_and_times_are_signed_and_rebuilt() {
    let fx = fixture();
    let mut fields = fields(&fx).await;
    let now = now_millis(&fx.clock);
    fields.expiration_time = Some(at(now + 600_000));
    fields.not_before = Some(at(now - 1_000));
    fields.request_id = Some("req-42".to_owned());
    fields.resources = Some(vec![
        "read:eligibility".to_owned(),
        "write:orders".to_owned(),
    ]);
    let text = client_text(&fields);
    assert!(text.ends_with("\nRequest ID: req-42\nResources:\n- read:eligibility\n- write:orders"));
    let signed_in = fx
        .verifier
        .verify_fields(&fields, &sign(HARDHAT_KEY_0, &text))
        .await
        .unwrap();
    assert_eq!(
        signed_in.message.resources(),
        Some(&["read:eligibility".to_owned(), "write:orders".to_owned()][..])
    );
}

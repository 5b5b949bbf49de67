//! Signed offers, receipts and usage statements (`GATEWAY_OFFER_KEY_FILE`):
//! the official `@x402/extensions` 2.27 helpers verify them, a metered
//! answer's statement adds up to what the ledger moved, and without a key
//! nothing changes.

use serde_json::{Value, json};
use walletgate::client::payer::Payer;
use walletgate::x402::server::OfferSigner;
use walletgate::x402::wire::{
    OFFER_RECEIPT, SCHEME_UPTO, SettleResponse, codec, offers_of, receipt_of, usage_of,
};

use crate::config::Config;
use crate::metering_tests::{CHAT, MODEL, chat};
use crate::tests::{Server, now_secs};

/// A public development key (Hardhat/Anvil account #5): test use only.
const OFFER_KEY: &str = "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";

fn signing() -> (Config, OfferSigner) {
    let signer = OfferSigner::from_hex(OFFER_KEY).unwrap();
    let config = Config {
        offer_signer: Some(signer.clone()),
        ..Config::default()
    };
    (config, signer)
}

/// The official helpers, on a 402's `PAYMENT-REQUIRED` and a settlement's
/// `PAYMENT-RESPONSE`.
async fn official_verdict(payment_required: &str, payment_response: &str) -> Value {
    let input = json!({"paymentRequired": payment_required, "paymentResponse": payment_response});
    let limit = std::time::Duration::from_secs(60);
    let stdin = Some(input.to_string());
    crate::tests::node_json(
        "x402",
        "@x402/extensions",
        "offer_receipt.mjs",
        &[],
        &[],
        stdin.as_deref(),
        limit,
    )
    .await
}

#[tokio::test]
async fn the_official_helpers_verify_the_signed_offers_and_receipt_and_refuse_a_changed_byte() {
    let (config, signer) = signing();
    let server = Server::start(config).await;
    let body = chat(false);
    let quote = server.post_once(CHAT, body.clone(), None).await;
    assert_eq!(quote.status, 402);
    let payment_required = quote.header("payment-required").unwrap().to_owned();
    let offers = quote.quote().accepts;
    assert_eq!(offers.len(), 2, "exact and upto");
    let payer = Payer::dev(4);
    let payment = server.sign(&quote, &payer);
    let paid = server.post_once(CHAT, body, Some(&payment)).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let payment_response = paid.header("payment-response").unwrap().to_owned();
    let settled: SettleResponse = codec::decode(payment_response.as_bytes()).unwrap();

    let verdict = official_verdict(&payment_required, &payment_response).await;
    let address = signer.address().to_checksum(None);
    let signed = verdict["offers"].as_array().unwrap();
    assert_eq!(signed.len(), offers.len(), "{verdict}");
    for (index, offer) in signed.iter().enumerate() {
        assert_eq!(offer["signer"], address, "{verdict}");
        assert_eq!(offer["acceptIndex"], index);
        assert_eq!(offer["matched"], true, "it names its accepts entry");
    }
    assert_eq!(verdict["receipt"]["signer"], address, "{verdict}");
    let receipt = &verdict["receipt"]["payload"];
    assert_eq!(receipt["transaction"], settled.transaction, "always named");
    assert!(!settled.transaction.is_empty());
    assert_eq!(receipt["payer"], payer.address());
    assert_eq!(receipt["resourceUrl"], server.url(CHAT));
    assert_eq!(receipt["network"], "eip155:84532");
    assert_ne!(verdict["changedPayloadSigner"], address, "{verdict}");
    assert_ne!(verdict["changedSignature"], address, "{verdict}");
}

#[tokio::test]
async fn a_metered_streams_signed_usage_statement_adds_up_to_what_the_ledger_moved() {
    let (config, signer) = signing();
    let server = Server::start(config).await;
    let body = chat(true);
    let quote = server.post_once(CHAT, body.clone(), None).await;
    let upto = quote
        .quote()
        .accepts
        .into_iter()
        .find(|offer| offer.scheme == SCHEME_UPTO)
        .unwrap();
    let payer = Payer::dev(5);
    let before = server.balance(&payer.address());
    let payment = codec::encode(&payer.pay_upto(&upto, now_secs()).unwrap());
    let paid = server.post_once(CHAT, body, Some(&payment)).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let text = paid.text();
    let settled = crate::tests::stream_settlement(&text);
    let moved = before - server.balance(&payer.address());
    assert!(moved > 0 && moved * 2 < upto.amount.units());

    let receipt = receipt_of(&settled).expect("a signed receipt in the final event");
    assert_eq!(
        receipt.verify(signer.address()).unwrap().payer,
        payer.address()
    );
    let statement = usage_of(&settled).expect("a signed usage statement");
    let usage = statement.verify(signer.address()).unwrap();
    assert!(usage.adds_up(upto.amount.units()), "{usage:?}");
    assert_eq!(usage.amount, moved.to_string(), "to the unit");
    assert_eq!(usage.priced_amount(), Some(moved));
    assert_eq!(usage.model, MODEL);
    assert_eq!(usage.decimals, 6);
    assert_eq!(usage.transaction, settled.transaction);
    // The unsigned `usage` says the same.
    let plain = &settled.extensions.as_ref().unwrap()["usage"];
    assert_eq!(plain["prompt_tokens"], usage.prompt_tokens);
    assert_eq!(plain["amount"], usage.amount);
}

#[tokio::test]
async fn without_a_key_the_402_is_unchanged_and_with_one_it_stays_within_an_8_kib_line() {
    let plain = Server::start(Config::default()).await;
    let (config, _) = signing();
    let signed = Server::start(config).await;
    let body = chat(false);
    let unsigned = plain.post_once(CHAT, body.clone(), None).await;
    let with_offers = signed.post_once(CHAT, body, None).await;
    let header = |reply: &crate::tests::Reply, name: &str| reply.header(name).unwrap().to_owned();
    assert!(
        unsigned
            .quote()
            .extensions
            .is_none_or(|extensions| !extensions.contains_key(OFFER_RECEIPT))
    );
    // Only PAYMENT-REQUIRED carries the offers; the body and older headers
    // are the same (each server names its own port).
    let same = |reply: &crate::tests::Reply, server: &Server| {
        reply.text().replace(&server.url(""), "http://gateway")
    };
    assert_eq!(same(&unsigned, &plain), same(&with_offers, &signed));
    let lean = |reply: &crate::tests::Reply, server: &Server| {
        let mut quote: walletgate::x402::wire::PaymentRequired =
            codec::decode(header(reply, "x-payment-required").as_bytes()).unwrap();
        quote.resource.url = quote
            .resource
            .url
            .replace(&server.url(""), "http://gateway");
        quote
    };
    assert_eq!(lean(&unsigned, &plain), lean(&with_offers, &signed));
    let required = with_offers.quote();
    assert_eq!(offers_of(&required).len(), required.accepts.len());
    let (before, after) = (
        header(&unsigned, "payment-required").len(),
        header(&with_offers, "payment-required").len(),
    );
    println!("PAYMENT-REQUIRED: {before} bytes unsigned, {after} with signed offers");
    // aiohttp (the Python x402 client) refuses a header line past 8,190 bytes.
    assert!(after + "payment-required: ".len() < 8_190, "{after} bytes");
}

#[cfg(unix)]
#[test]
fn a_key_file_others_may_read_or_of_the_wrong_length_is_refused_at_start_without_the_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("walletgate-offer-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("offer.key");
    let start = |path: &std::path::Path| {
        let path = path.display().to_string();
        Config::from_vars(move |name| (name == "GATEWAY_OFFER_KEY_FILE").then(|| path.clone()))
    };
    std::fs::write(&path, format!("{OFFER_KEY}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = start(&path).err().unwrap().to_string();
    assert!(refused.contains("GATEWAY_OFFER_KEY_FILE"), "{refused}");
    assert!(refused.contains("chmod 600"), "{refused}");
    assert!(!refused.contains(&OFFER_KEY[2..12]), "{refused}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = start(&path).unwrap_or_else(|error| panic!("{error}"));
    assert!(config.offer_signer.is_some());
    std::fs::write(&path, &OFFER_KEY[..40]).unwrap();
    let refused = start(&path).err().unwrap().to_string();
    assert!(refused.contains("not a secp256k1 private key"), "{refused}");
    assert!(!refused.contains(&OFFER_KEY[2..12]), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

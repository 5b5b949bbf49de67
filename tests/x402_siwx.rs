//! `sign-in-with-x` end to end in-process: a wallet pays once through the
//! local EVM verifier and the development ledger, then signs in (EIP-4361,
//! EIP-191) to get the same answer again, uncharged; every other proof gets
//! the normal 402. A fake clock, no sockets.
#![cfg(feature = "siwx")]

mod x402_fixtures;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use alloy_primitives::eip191_hash_message;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::ServiceExt;
use walletgate::client::payer::{Payer, sequential_nonce};
use walletgate::clock::FakeClock;
use walletgate::siwe::{SiweMessage, SiweMessageFields};
use walletgate::x402::facilitator::{DevLedger, LocalEvmFacilitator};
use walletgate::x402::server::{AnswerLimits, PaymentReceipt, SignInWithX, X402, X402Layer};
use walletgate::x402::wire::{PaymentRequired, codec};
use x402_fixtures::{CHAT, chat_layer_builder};

const NOW: u64 = 1_750_000_000;
const ORIGIN: &str = "https://gateway.test";

type Inner = tower::util::BoxCloneService<
    Request<Full<Bytes>>,
    Response<Full<Bytes>>,
    std::convert::Infallible,
>;

struct Harness {
    clock: FakeClock,
    ledger: Arc<DevLedger>,
    calls: Arc<AtomicUsize>,
    service: X402<Inner>,
}

impl Harness {
    fn new() -> Self {
        Self::with(|builder| {
            builder
                .with_public_base_url(ORIGIN)
                .unwrap()
                .with_sign_in_with_x(SignInWithX::new().unwrap())
        })
    }

    fn with(
        configure: impl FnOnce(
            walletgate::x402::server::X402LayerBuilder,
        ) -> walletgate::x402::server::X402LayerBuilder,
    ) -> Self {
        let clock = FakeClock::at_unix_secs(NOW);
        let ledger = Arc::new(DevLedger::new());
        let facilitator = LocalEvmFacilitator::new(ledger.clone(), Arc::new(clock.clone()));
        let layer: X402Layer = configure(chat_layer_builder(facilitator, Arc::new(clock.clone())))
            .build()
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let inner = tower::service_fn(move |request: Request<Full<Bytes>>| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok(answer(n, &request)) }
        });
        Self {
            clock,
            ledger,
            calls,
            service: tower::Layer::layer(&layer, Inner::new(inner)),
        }
    }

    async fn send(&self, request: Request<Full<Bytes>>) -> (u16, Response<Bytes>) {
        let response = self.service.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (parts.status.as_u16(), Response::from_parts(parts, body))
    }

    /// A 402 for `path`, decoded from `PAYMENT-REQUIRED`, the one place its
    /// challenge is (the body mirrors the offers, not the extensions).
    async fn quote(&self, path: &str) -> PaymentRequired {
        let (status, response) = self.send(post(path, &[])).await;
        assert_eq!(status, 402);
        let required: PaymentRequired =
            codec::decode(response.headers()["payment-required"].as_bytes()).unwrap();
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(
            body["accepts"],
            serde_json::to_value(&required.accepts).unwrap()
        );
        assert!(body.get("extensions").is_none(), "{body}");
        required
    }

    /// Pays for `path` with development account `payer` and returns the answer.
    async fn pay(&self, path: &str, payer: &Payer, nonce: u64) -> Bytes {
        let (status, body) = self.pay_for_status(path, payer, nonce).await;
        assert_eq!(status, 200);
        body
    }

    /// Pays for `path` and returns the answer's status and body.
    async fn pay_for_status(&self, path: &str, payer: &Payer, nonce: u64) -> (u16, Bytes) {
        let quote = self.quote(path).await;
        let header = payer
            .header_with_nonce(&quote.accepts[0], NOW, sequential_nonce(nonce))
            .unwrap();
        let (status, response) = self
            .send(post(path, &[("payment-signature", &header)]))
            .await;
        (status, response.into_body())
    }

    /// Signs `payer` in for `path` over a fresh 402's challenge.
    async fn sign_in(&self, path: &str, payer: &Payer) -> (u16, Response<Bytes>) {
        let challenge = challenge(&self.quote(path).await);
        let header = proof(payer, &challenge, |_| {});
        self.send(post(path, &[("sign-in-with-x", &header)])).await
    }
}

/// The inner service's `n`th answer: a text naming it; an event stream
/// for `?stream`; for `?job`, a job's `202` on its paid call and its result
/// when served again (a replayed receipt).
fn answer(n: usize, request: &Request<Full<Bytes>>) -> Response<Full<Bytes>> {
    let replay = request
        .extensions()
        .get::<PaymentReceipt>()
        .is_some_and(PaymentReceipt::is_replay);
    let query = request.uri().query().unwrap_or_default();
    let mut response = if query.contains("stream") {
        let mut response = Response::new(Full::new(Bytes::from(format!(
            "data: {{\"n\":{n}}}\n\ndata: [DONE]\n\n"
        ))));
        response
            .headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        response
    } else if query.contains("job") && !replay {
        let mut response = Response::new(Full::new(Bytes::from("job accepted")));
        *response.status_mut() = http::StatusCode::ACCEPTED;
        response
    } else if query.contains("job") {
        Response::new(Full::new(Bytes::from("job result")))
    } else {
        let tag = if replay { " (served again)" } else { "" };
        Response::new(Full::new(Bytes::from(format!(
            "answer {n} to {}{tag}",
            request.uri()
        ))))
    };
    if query.contains("large") {
        let padded = format!("{}{}", "x".repeat(4096), n);
        *response.body_mut() = Full::new(Bytes::from(padded));
    }
    response
}

fn post(path: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut builder = Request::post(path).header("host", "gateway.test");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::default()).unwrap()
}

/// The challenge a 402 declares.
fn challenge(quote: &PaymentRequired) -> Value {
    quote.extensions.as_ref().unwrap()["sign-in-with-x"].clone()
}

/// The proof the official client builds from `challenge`'s info, signed by
/// `payer`, after `edit` changes its fields.
fn proof(payer: &Payer, challenge: &Value, edit: impl FnOnce(&mut Value)) -> String {
    let info = &challenge["info"];
    let mut fields = json!({
        "domain": info["domain"],
        "address": payer.address(),
        "uri": info["uri"],
        "version": "1",
        "chainId": challenge["supportedChains"][0]["chainId"],
        "type": "eip191",
        "nonce": info["nonce"],
        "issuedAt": info["issuedAt"],
        "expirationTime": info["expirationTime"],
        "resources": info["resources"],
    });
    edit(&mut fields);
    let chain_id: u64 = fields["chainId"]
        .as_str()
        .unwrap()
        .trim_start_matches("eip155:")
        .parse()
        .unwrap_or(1);
    let text = SiweMessage::from_fields(&SiweMessageFields {
        scheme: None,
        domain: fields["domain"].as_str().unwrap().to_owned(),
        address: payer.address(),
        statement: fields["statement"].as_str().map(str::to_owned),
        uri: fields["uri"].as_str().unwrap().to_owned(),
        version: "1".to_owned(),
        chain_id,
        nonce: fields["nonce"].as_str().unwrap().to_owned(),
        issued_at: fields["issuedAt"].as_str().unwrap().to_owned(),
        expiration_time: fields["expirationTime"].as_str().map(str::to_owned),
        not_before: None,
        request_id: None,
        resources: Some(vec![fields["uri"].as_str().unwrap().to_owned()]),
    })
    .map(|message| message.to_string())
    // Fields the engine refuses still go out, signed as sent: the server refuses them.
    .unwrap_or_else(|_| fields.to_string());
    let signature = payer.sign_digest(eip191_hash_message(text.as_bytes()));
    fields["signature"] = Value::from(format!("0x{}", alloy_primitives::hex::encode(signature)));
    STANDARD.encode(fields.to_string())
}

#[tokio::test]
async fn each_402_declares_a_fresh_challenge_for_its_resource() {
    let h = Harness::new();
    let first = challenge(&h.quote(CHAT).await);
    let second = challenge(&h.quote(CHAT).await);
    let info = &first["info"];
    assert_eq!(info["domain"], "gateway.test");
    assert_eq!(info["uri"], format!("{ORIGIN}{CHAT}"));
    assert_eq!(info["resources"], json!([format!("{ORIGIN}{CHAT}")]));
    assert_eq!(info["issuedAt"], "2025-06-15T15:06:40.000Z");
    assert_eq!(info["expirationTime"], "2025-06-15T15:11:40.000Z");
    let nonce = info["nonce"].as_str().unwrap();
    assert_eq!(nonce.len(), 64);
    assert!(nonce.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_ne!(first["info"]["nonce"], second["info"]["nonce"]);
    assert_eq!(
        first["supportedChains"],
        json!([{"chainId": "eip155:84532", "type": "eip191"}])
    );
    // Another resource: its own URI.
    let other = challenge(&h.quote("/v1/chat/completions?x=1").await);
    assert_eq!(other["info"]["uri"], format!("{ORIGIN}{CHAT}?x=1"));
}

#[tokio::test]
async fn without_a_public_origin_nothing_is_declared() {
    let h = Harness::with(|builder| {
        builder
            .with_host_derived_resource_url()
            .with_sign_in_with_x(SignInWithX::new().unwrap())
    });
    let quote = h.quote(CHAT).await;
    assert!(
        quote
            .extensions
            .as_ref()
            .is_none_or(|e| !e.contains_key("sign-in-with-x"))
    );
}

#[tokio::test]
async fn the_wallet_that_paid_signs_in_and_gets_the_same_answer_uncharged() {
    let h = Harness::new();
    let payer = Payer::dev(0);
    let paid = h.pay(CHAT, &payer, 1).await;
    let settlements = h.ledger.settlements();

    h.clock.advance(Duration::from_secs(120));
    let challenge = challenge(&h.quote(CHAT).await);
    let header = proof(&payer, &challenge, |_| {});
    let (status, response) = h.send(post(CHAT, &[("sign-in-with-x", &header)])).await;
    assert_eq!(status, 200);
    assert_eq!(response.body(), &paid);
    assert!(response.headers().contains_key("payment-response"));
    assert_eq!(h.calls.load(Ordering::SeqCst), 1);
    assert_eq!(h.ledger.settlements(), settlements);

    // The nonce is spent: the same proof again is the normal 402.
    let (status, _) = h.send(post(CHAT, &[("sign-in-with-x", &header)])).await;
    assert_eq!(status, 402);
}

#[tokio::test]
async fn every_other_proof_gets_the_normal_402() {
    let h = Harness::new();
    let payer = Payer::dev(0);
    h.pay(CHAT, &payer, 1).await;
    let refused = |header: String, path: &'static str| {
        let h = &h;
        async move {
            let (status, response) = h.send(post(path, &[("sign-in-with-x", &header)])).await;
            assert_eq!(status, 402, "{}", String::from_utf8_lossy(response.body()));
            assert!(response.headers().contains_key("payment-required"));
        }
    };
    let fresh = || async { challenge(&h.quote(CHAT).await) };

    // Another wallet.
    refused(proof(&Payer::dev(1), &fresh().await, |_| {}), CHAT).await;
    // An operation the wallet did not pay for.
    let other = challenge(&h.quote("/v1/chat/completions?other=1").await);
    refused(
        proof(&payer, &other, |_| {}),
        "/v1/chat/completions?other=1",
    )
    .await;
    // A foreign domain, a foreign origin.
    let edit_domain = |f: &mut Value| f["domain"] = "evil.test".into();
    refused(proof(&payer, &fresh().await, edit_domain), CHAT).await;
    let edit_uri = |f: &mut Value| f["uri"] = format!("https://evil.test{CHAT}").into();
    refused(proof(&payer, &fresh().await, edit_uri), CHAT).await;
    // A nonce this server did not issue.
    let forged = |f: &mut Value| f["nonce"] = "ab".repeat(32).into();
    refused(proof(&payer, &fresh().await, forged), CHAT).await;
    // An unknown chain, a Solana proof.
    let chain = |f: &mut Value| f["chainId"] = "eip155:1".into();
    refused(proof(&payer, &fresh().await, chain), CHAT).await;
    let solana = |f: &mut Value| f["type"] = "ed25519".into();
    refused(proof(&payer, &fresh().await, solana), CHAT).await;
    // CR/LF injected into a field the message carries.
    let injected = |f: &mut Value| f["statement"] = "hi\nURI: https://evil.test".into();
    refused(proof(&payer, &fresh().await, injected), CHAT).await;
    // Not base64, not JSON, too large.
    refused("not base64 !".to_owned(), CHAT).await;
    refused(STANDARD.encode("{\"domain\":1}"), CHAT).await;
    refused("A".repeat(16 * 1024), CHAT).await;

    // Expired: a proof signed over a challenge more than five minutes old.
    let old = fresh().await;
    h.clock.advance(Duration::from_secs(301));
    refused(proof(&payer, &old, |_| {}), CHAT).await;

    // Still the payer's: a good proof now works.
    let (status, _) = h
        .send(post(
            CHAT,
            &[("sign-in-with-x", &proof(&payer, &fresh().await, |_| {}))],
        ))
        .await;
    assert_eq!(status, 200);
    assert_eq!(h.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_payment_echoing_the_challenge_still_pays() {
    let h = Harness::new();
    let quote = h.quote(CHAT).await;
    let payer = Payer::dev(0);
    let header = payer
        .header_with_nonce(&quote.accepts[0], NOW, sequential_nonce(7))
        .unwrap();
    // The official client echoes every declared extension into the payment.
    let mut payload: Value = serde_json::from_slice(&STANDARD.decode(&header).unwrap()).unwrap();
    payload["extensions"] = json!({"sign-in-with-x": challenge(&quote)});
    let header = STANDARD.encode(payload.to_string());
    let (status, _) = h.send(post(CHAT, &[("payment-signature", &header)])).await;
    assert_eq!(status, 200);
}

/// One 402 through the layer, synchronously (`call` builds it whole).
#[inline(never)]
fn quote_once(service: &mut X402<Inner>, request: Request<Full<Bytes>>) {
    use tower::Service as _;
    drop(std::hint::black_box(service.call(request)));
}

/// Instruction counts of a quote with and without `sign-in-with-x`, read
/// under callgrind, never timed:
/// `valgrind --tool=callgrind --toggle-collect='x402_siwx::quote_once*' <test binary> --ignored quotes_for_callgrind`
/// with `SIWX=on` or `SIWX=off`.
#[tokio::test]
#[ignore = "run under callgrind by hand"]
async fn quotes_for_callgrind() {
    let on = std::env::var("SIWX").as_deref() != Ok("off");
    let h = if on {
        Harness::new()
    } else {
        Harness::with(|builder| builder.with_public_base_url(ORIGIN).unwrap())
    };
    let mut service = h.service.clone();
    // The first builds and caches the quote; the rest are what every 402 costs.
    for _ in 0..1001 {
        quote_once(&mut service, post(CHAT, &[]));
    }
}

/// A layer with `sign-in-with-x`, answers kept up to 1 KiB, and `rerun`
/// routes served again for a signed-in wallet when `rerun` is set.
fn harness(rerun: bool) -> Harness {
    Harness::with(|builder| {
        let builder = builder
            .with_public_base_url(ORIGIN)
            .unwrap()
            .with_sign_in_with_x(SignInWithX::new().unwrap())
            .with_answer_limits(AnswerLimits {
                max_answer_bytes: 1024,
                ..AnswerLimits::default()
            });
        if rerun {
            builder.rerun_signed_in(|_: &http::request::Parts| true)
        } else {
            builder
        }
    })
}

#[tokio::test]
async fn an_answer_too_large_to_keep_is_served_again_uncharged_only_where_the_route_opted_in() {
    let large = "/v1/chat/completions?large=1";
    let payer = Payer::dev(0);
    for rerun in [false, true] {
        let h = harness(rerun);
        h.pay(large, &payer, 1).await;
        let settlements = h.ledger.settlements();
        let (status, response) = h.sign_in(large, &payer).await;
        if !rerun {
            // Entitled, but nothing kept and no re-run: the normal 402.
            assert_eq!(status, 402);
            assert_eq!(h.calls.load(Ordering::SeqCst), 1);
            continue;
        }
        assert_eq!(status, 200);
        assert_eq!(h.calls.load(Ordering::SeqCst), 2);
        assert!(response.body().ends_with(b"x1"));
        // Uncharged: no settlement, no receipt header, and never cached.
        assert_eq!(h.ledger.settlements(), settlements);
        assert!(!response.headers().contains_key("payment-response"));
        assert_eq!(response.headers()["cache-control"], "private");
        // Another wallet is not entitled: the normal 402, no call.
        let (status, _) = h.sign_in(large, &Payer::dev(1)).await;
        assert_eq!(status, 402);
        assert_eq!(h.calls.load(Ordering::SeqCst), 2);
    }
}

#[tokio::test]
async fn a_kept_answer_is_preferred_to_a_rerun() {
    let h = harness(true);
    let payer = Payer::dev(0);
    let paid = h.pay(CHAT, &payer, 1).await;
    let (status, response) = h.sign_in(CHAT, &payer).await;
    assert_eq!(status, 200);
    assert_eq!(response.body(), &paid);
    assert_eq!(h.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_settled_stream_is_kept_whole_and_replayed_as_a_stream_on_sign_in() {
    let h = Harness::new();
    let path = "/v1/chat/completions?stream=1";
    let payer = Payer::dev(0);
    let paid = h.pay(path, &payer, 1).await;
    assert!(paid.starts_with(b"data: {\"n\":0}"));
    let (status, response) = h.sign_in(path, &payer).await;
    assert_eq!(status, 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    // The whole stream as sent, its receipt event included.
    assert_eq!(response.body(), &paid);
    assert!(String::from_utf8_lossy(response.body()).contains("event: payment-response"));
    assert_eq!(h.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_paid_jobs_sign_in_gets_its_result_where_the_route_reruns_and_its_reference_elsewhere() {
    let path = "/v1/chat/completions?job=1";
    let payer = Payer::dev(0);
    for rerun in [false, true] {
        let h = harness(rerun);
        let (status, body) = h.pay_for_status(path, &payer, 1).await;
        assert_eq!((status, &body[..]), (202, &b"job accepted"[..]));
        let settlements = h.ledger.settlements();
        let (status, response) = h.sign_in(path, &payer).await;
        if rerun {
            assert_eq!(status, 200);
            assert_eq!(response.body(), "job result");
            assert_eq!(h.calls.load(Ordering::SeqCst), 2);
        } else {
            assert_eq!(status, 202);
            assert_eq!(response.body(), "job accepted");
            assert_eq!(h.calls.load(Ordering::SeqCst), 1);
        }
        assert_eq!(h.ledger.settlements(), settlements);
    }
}

#[tokio::test]
async fn a_rejection_402_carries_a_fresh_challenge_that_signs_in() {
    let h = Harness::new();
    let payer = Payer::dev(0);
    h.pay(CHAT, &payer, 1).await;
    let mut nonces = Vec::new();
    for _ in 0..2 {
        let (status, response) = h
            .send(post(CHAT, &[("payment-signature", "not a payment")]))
            .await;
        assert_eq!(status, 402);
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["code"], "PAYMENT_INVALID", "{body}");
        let required: PaymentRequired =
            codec::decode(response.headers()["payment-required"].as_bytes()).unwrap();
        nonces.push(challenge(&required));
    }
    assert_ne!(nonces[0]["info"]["nonce"], nonces[1]["info"]["nonce"]);
    assert_ne!(nonces[0]["info"]["nonce"], "0".repeat(64));
    assert_eq!(nonces[0]["info"]["issuedAt"], "2025-06-15T15:06:40.000Z");
    let header = proof(&payer, &nonces[0], |_| {});
    let (status, _) = h.send(post(CHAT, &[("sign-in-with-x", &header)])).await;
    assert_eq!(status, 200);
}

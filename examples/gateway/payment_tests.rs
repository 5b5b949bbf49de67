//! Payment and free-tier tests over real TCP: quotes, paid requests signed
//! here with the public development keys, every payment error code, and the
//! ledger after each (a refused or failed request never moves funds).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::Notify;
use walletgate::envelope::ErrorCode;
use walletgate::free_tier::FreeTierQuotas;
use walletgate::x402::{
    AtomicAmount, BASE_SEPOLIA_USDC, DevLedger, ExactEvmDomain, PaymentPayload, SettleResponse,
    codec,
};

use crate::catalogue::{Catalogue, Model, Pricing};
use crate::config::Config;
use crate::request::{ChatRequest, Endpoint};
use crate::tests::{ENDPOINTS, Reply, Server, assert_envelope, body, fresh_nonce, now_secs, path};
use crate::upstream::{BoxFuture, Completion, EchoUpstream, EventStream, Upstream, UpstreamFault};
use crate::x402_support::Payer;

const PAID_MODEL: &str = "anthropic/claude-sonnet-4.6";
const FREE_MODEL: &str = "nvidia/nemotron-super";

/// The quoted amount of `model` for `endpoint`'s standard test body, in USDC
/// units: the catalogue's price plus the 0.001 USD flat fee.
fn expected_units(endpoint: Endpoint, model: &str) -> u128 {
    let catalogue = Catalogue::embedded();
    let model = catalogue.get(model).unwrap();
    let request =
        ChatRequest::from_json(endpoint, body(endpoint, model.id, "hello", false)).unwrap();
    match model.price(&request) {
        crate::catalogue::RequestPrice::UsdMicros(micros) => u128::from(micros) + 1_000,
        crate::catalogue::RequestPrice::Free => panic!("{} is free", model.id),
    }
}

/// A payment refusal: status, envelope per endpoint, and on 402 the quote again.
fn assert_payment_rejection(endpoint: Endpoint, reply: &Reply, code: ErrorCode) {
    let context = format!("{code} on {}: {}", path(endpoint), reply.text());
    assert_eq!(reply.status, code.status(), "{context}");
    assert_eq!(
        reply.header("content-type"),
        Some("application/json"),
        "{context}"
    );
    let expected_retry = code.retry_after_secs().map(|secs| secs.to_string());
    assert_eq!(
        reply.header("retry-after").map(str::to_owned),
        expected_retry,
        "{context}"
    );
    let body = reply.json();
    match endpoint {
        // The gateway's documented payment body, with the top-level mirrors JS reads.
        Endpoint::Chat => {
            assert!(
                body["error"].as_str().unwrap().starts_with("Payment "),
                "{context}"
            );
            assert_eq!(body["code"], code.as_str(), "{context}");
            assert!(body["message"].is_string(), "{context}");
            assert!(body["debug"].is_string(), "{context}");
        }
        Endpoint::Messages => {
            assert_eq!(body["type"], "error", "{context}");
            assert_eq!(
                body["error"]["type"],
                code.error_type().as_str(),
                "{context}"
            );
            assert!(body.get("code").is_none(), "{context}");
        }
        Endpoint::Responses => {
            assert_eq!(body["error"]["code"], code.as_str(), "{context}");
            assert_eq!(
                body["error"]["type"],
                code.error_type().as_str(),
                "{context}"
            );
        }
    }
    if reply.status == 402 && code != ErrorCode::SettlementFailed {
        // A client may sign afresh from the quote that comes back.
        let quote = reply.quote();
        assert_eq!(quote.accepts.len(), 1, "{context}");
        assert!(quote.error.is_some(), "{context}");
    }
}

#[tokio::test]
async fn quotes_have_the_x402_shape_on_every_endpoint() {
    let server = Server::start(Config::default()).await;
    for endpoint in ENDPOINTS {
        for base in ["", "/api"] {
            let url = format!("{base}{}", path(endpoint));
            let request = body(endpoint, PAID_MODEL, "hello", false).to_string();
            let reply = server.post_once(&url, request.clone(), None).await;
            assert_eq!(reply.status, 402, "{url}: {}", reply.text());
            assert_eq!(reply.header("cache-control"), Some("no-store"));
            assert_eq!(reply.header("content-type"), Some("application/json"));
            let quote = reply.quote();
            assert_eq!(quote.x402_version, 2);
            assert_eq!(quote.resource.url, server.url(&url));
            let offer = &quote.accepts[0];
            assert_eq!(offer.scheme, "exact");
            assert_eq!(offer.network.as_str(), "eip155:84532");
            assert_eq!(offer.asset, BASE_SEPOLIA_USDC);
            assert_eq!(offer.pay_to, DevLedger::DEV_ACCOUNTS[9]);
            assert_eq!(offer.max_timeout_seconds, 300);
            assert_eq!(
                offer.extra,
                json!({"name": "USDC", "version": "2"})
                    .as_object()
                    .unwrap()
                    .clone()
            );
            assert_eq!(
                offer.amount,
                AtomicAmount::new(expected_units(endpoint, PAID_MODEL))
            );
            // The body mirrors the header for clients that read it.
            let body = reply.json();
            assert_eq!(body["x402Version"], 2);
            assert_eq!(
                body["accepts"],
                serde_json::to_value(&quote.accepts).unwrap()
            );
            // The same request is priced the same: the retry matches its quote.
            let again = server.post_once(&url, request, None).await.quote();
            assert_eq!(again.accepts, quote.accepts);
        }
    }
    // max_tokens moves the price: 100 more output tokens at $15/M is 1500 micro-dollars more.
    let mut larger = body(Endpoint::Chat, PAID_MODEL, "hello", false);
    larger["max_tokens"] = json!(100);
    let small = server
        .post_once("/v1/chat/completions", larger.to_string(), None)
        .await
        .quote();
    larger["max_tokens"] = json!(200);
    let large = server
        .post_once("/v1/chat/completions", larger.to_string(), None)
        .await
        .quote();
    assert_eq!(
        large.accepts[0].amount.units() - small.accepts[0].amount.units(),
        1_500
    );
    server.assert_nothing_settled();
}

#[tokio::test]
async fn a_signed_payment_is_served_and_settles_exactly_the_quote() {
    let server = Server::start(Config::default()).await;
    let payer = server.payer.address();
    let pay_to = DevLedger::DEV_ACCOUNTS[9];
    let mut paid_total = 0;
    for endpoint in ENDPOINTS {
        for stream in [false, true] {
            let request = body(endpoint, PAID_MODEL, "hello", stream).to_string();
            let quote = server
                .post_once(path(endpoint), request.clone(), None)
                .await;
            let amount = quote.quote().accepts[0].amount.units();
            let before = (server.balance(&payer), server.balance(pay_to));
            let payment = server.sign(&quote, &server.payer);
            let reply = server
                .post_once(path(endpoint), request, Some(&payment))
                .await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert!(reply.text().contains("hello"), "{}", reply.text());
            let receipt: SettleResponse =
                codec::decode(reply.header("payment-response").unwrap().as_bytes()).unwrap();
            assert!(receipt.success);
            assert_eq!(receipt.network.as_str(), "eip155:84532");
            assert_eq!(receipt.payer.as_deref(), Some(payer.as_str()));
            assert!(receipt.transaction.starts_with("0x"));
            assert!(reply.header("cache-control").unwrap().contains("private"));
            assert_eq!(server.balance(&payer), before.0 - amount);
            assert_eq!(server.balance(pay_to), before.1 + amount);
            paid_total += amount;
        }
    }
    assert_eq!(server.ledger.settlements(), 6);
    assert_eq!(
        server.balance(&payer),
        DevLedger::DEV_ACCOUNT_FUNDS - paid_total
    );
}

/// An upstream that holds each answer until released, so a test can act
/// between a payment's verification and its settlement.
struct Gated {
    entered: Notify,
    release: Notify,
}

impl Upstream for Gated {
    fn complete<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Completion, UpstreamFault>> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            EchoUpstream::answer(model, request)
        })
    }

    fn stream<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, UpstreamFault>> {
        EchoUpstream.stream(model, request)
    }
}

/// The embedded catalogue plus `gated/slow`, a paid model behind [`Gated`].
fn gated_config(gate: Arc<Gated>) -> Config {
    let mut models = Catalogue::embedded_models();
    models.push(Arc::new(Model {
        id: "gated/slow",
        name: "gated",
        description: "answers when the test says so",
        context_window: 100_000,
        max_output: 4_096,
        categories: &["chat"],
        pricing: Pricing::PerToken {
            input_micros_per_million: 1_000_000,
            output_micros_per_million: 1_000_000,
        },
        streaming: false,
        created: 0,
    }));
    Config {
        catalogue: Catalogue::new(models),
        providers: vec![("gated".into(), gate)],
        ..Config::default()
    }
}

/// A payer no account funds: a throwaway key, not a development account.
fn unfunded_payer() -> Payer {
    Payer::from_key([0x42; 32])
}

#[tokio::test]
async fn every_payment_code_with_its_status_envelope_and_headers_settles_nothing() {
    let server = Server::start(Config::default()).await;
    let pay_to = DevLedger::DEV_ACCOUNTS[9];
    for endpoint in ENDPOINTS {
        for base in ["", "/api"] {
            let url = format!("{base}{}", path(endpoint));
            let request = body(endpoint, PAID_MODEL, "hello", false).to_string();
            let quote = server.post_once(&url, request.clone(), None).await;
            let offer = quote.quote().accepts[0].clone();
            let dev = &server.payer;
            let encode = |payment: &PaymentPayload| codec::encode(payment);

            let mut cheaper = offer.clone();
            cheaper.amount = AtomicAmount::new(offer.amount.units() - 1);
            let wrong_domain =
                ExactEvmDomain::new("USD Coin", "2", 84532, offer.asset.parse().unwrap());
            let mut expiring = dev.authorization(&offer, now_secs(), fresh_nonce());
            expiring.valid_before = now_secs() + 2;
            let mut not_yet = dev.authorization(&offer, now_secs(), fresh_nonce());
            not_yet.valid_after = now_secs() + 600;
            let mut overpaid = dev.authorization(&offer, now_secs(), fresh_nonce());
            overpaid.value = AtomicAmount::new(offer.amount.units() + 1);
            let mut elsewhere = dev.authorization(&offer, now_secs(), fresh_nonce());
            elsewhere.to = DevLedger::DEV_ACCOUNTS[3].into();

            let cases: Vec<(ErrorCode, &str, String)> = vec![
                (
                    ErrorCode::PaymentInvalid,
                    "not base64",
                    "%%% not base64 %%%".into(),
                ),
                (ErrorCode::PaymentInvalid, "not JSON", "bm90IGpzb24=".into()),
                (
                    ErrorCode::PaymentInvalid,
                    "a price other than the quote",
                    encode(&dev.pay(
                        &cheaper,
                        dev.authorization(&cheaper, now_secs(), fresh_nonce()),
                    )),
                ),
                (
                    ErrorCode::PaymentInvalid,
                    "signed under another token's domain",
                    encode(&dev.pay_with_domain(
                        &offer,
                        dev.authorization(&offer, now_secs(), fresh_nonce()),
                        &wrong_domain,
                    )),
                ),
                (
                    ErrorCode::PaymentInvalid,
                    "value above the quote",
                    encode(&dev.pay(&offer, overpaid)),
                ),
                (
                    ErrorCode::PaymentInvalid,
                    "another recipient",
                    encode(&dev.pay(&offer, elsewhere)),
                ),
                (
                    ErrorCode::PaymentUnfunded,
                    "no funds",
                    unfunded_payer().header(&offer, now_secs(), fresh_nonce()),
                ),
                (
                    ErrorCode::PaymentUnfunded,
                    "expiring authorization",
                    encode(&dev.pay(&offer, expiring)),
                ),
                (
                    ErrorCode::PaymentUnfunded,
                    "not yet valid",
                    encode(&dev.pay(&offer, not_yet)),
                ),
            ];
            for (code, case, payment) in cases {
                let reply = server
                    .post_once(&url, request.clone(), Some(&payment))
                    .await;
                assert_payment_rejection(endpoint, &reply, code);
                assert!(reply.header("payment-response").is_none(), "{case}");
                server.assert_nothing_settled();
            }
        }
    }
    // A replay: the first use settles once, the second is refused and charges nothing.
    let request = body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string();
    let quote = server
        .post_once("/v1/chat/completions", request.clone(), None)
        .await;
    let amount = quote.quote().accepts[0].amount.units();
    let payment = server.sign(&quote, &server.payer);
    let first = server
        .post_once("/v1/chat/completions", request.clone(), Some(&payment))
        .await;
    assert_eq!(first.status, 200);
    for endpoint in ENDPOINTS {
        let replay = server
            .post_once(
                path(endpoint),
                body(endpoint, PAID_MODEL, "hello", false).to_string(),
                Some(&payment),
            )
            .await;
        // On another endpoint the price differs, so the offer may not match; on its own
        // route it is the replay itself.
        let code = if endpoint == Endpoint::Chat {
            ErrorCode::PaymentReplay
        } else {
            replay_or_mismatch(&replay)
        };
        assert_payment_rejection(endpoint, &replay, code);
    }
    let replay = server
        .post_once("/v1/chat/completions", request, Some(&payment))
        .await;
    assert_payment_rejection(Endpoint::Chat, &replay, ErrorCode::PaymentReplay);
    assert_eq!(replay.json()["error"], "Payment authorization already used");
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(
        server.balance(pay_to),
        DevLedger::DEV_ACCOUNT_FUNDS + amount
    );
}

/// The code a paid body sent to another endpoint gets: the same authorization
/// at a different price matches no offer.
fn replay_or_mismatch(reply: &Reply) -> ErrorCode {
    let body: Value = reply.json();
    let code = body["error"]["code"].as_str().or(body["code"].as_str());
    match code {
        Some("PAYMENT_REPLAY") => ErrorCode::PaymentReplay,
        _ => ErrorCode::PaymentInvalid,
    }
}

#[tokio::test]
async fn a_settlement_that_fails_withholds_the_answer_and_charges_nothing() {
    let gate = Arc::new(Gated {
        entered: Notify::new(),
        release: Notify::new(),
    });
    let server = Arc::new(Server::start(gated_config(gate.clone())).await);
    let payer = unfunded_payer();
    let pay_to = DevLedger::DEV_ACCOUNTS[9];
    let slow = body(Endpoint::Chat, "gated/slow", "hello", false).to_string();
    let fast = body(Endpoint::Chat, "xai/grok-code-fast", "hello", false).to_string();
    let slow_quote = server
        .post_once("/v1/chat/completions", slow.clone(), None)
        .await;
    let fast_quote = server
        .post_once("/v1/chat/completions", fast.clone(), None)
        .await;
    let slow_units = slow_quote.quote().accepts[0].amount.units();
    let fast_units = fast_quote.quote().accepts[0].amount.units();
    // Funds for either request, not both.
    server.ledger.fund(
        &DevLedger::base_sepolia_usdc(),
        payer.address().parse().unwrap(),
        slow_units + fast_units - 1,
    );
    let slow_payment = server.sign(&slow_quote, &payer);
    let fast_payment = server.sign(&fast_quote, &payer);

    let in_flight = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .post_once("/v1/chat/completions", slow, Some(&slow_payment))
                .await
        })
    };
    // The slow payment is verified (funds suffice) and its answer is being made…
    gate.entered.notified().await;
    // …when the same payer spends most of it elsewhere.
    let spent = server
        .post_once("/v1/chat/completions", fast, Some(&fast_payment))
        .await;
    assert_eq!(spent.status, 200, "{}", spent.text());
    gate.release.notify_one();

    let failed = in_flight.await.unwrap();
    assert_payment_rejection(Endpoint::Chat, &failed, ErrorCode::SettlementFailed);
    assert!(!failed.text().contains("echo:"), "the answer is withheld");
    let receipt: SettleResponse =
        codec::decode(failed.header("payment-response").unwrap().as_bytes()).unwrap();
    assert!(!receipt.success);
    assert_eq!(receipt.transaction, "");
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(server.balance(&payer.address()), slow_units - 1);
    assert_eq!(
        server.balance(pay_to),
        DevLedger::DEV_ACCOUNT_FUNDS + fast_units
    );
}

#[tokio::test]
async fn free_models_are_limited_per_client_and_never_quoted() {
    let server = Server::start(Config {
        free_tier: FreeTierQuotas::new(2, 300).unwrap(),
        ..Config::default()
    })
    .await;
    for remaining in [1, 0] {
        let reply = server
            .post_once(
                "/v1/chat/completions",
                body(Endpoint::Chat, FREE_MODEL, "hi", false).to_string(),
                None,
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-ratelimit-limit"), Some("2"));
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            Some(remaining.to_string().as_str())
        );
        assert!(reply.header("payment-response").is_none());
    }
    for endpoint in ENDPOINTS {
        let reply = server
            .post_once(
                path(endpoint),
                body(endpoint, FREE_MODEL, "hi", false).to_string(),
                None,
            )
            .await;
        let code = ErrorCode::FreeTierRateLimited;
        assert_eq!(reply.status, code.status(), "{}", reply.text());
        let retry: u64 = reply.header("retry-after").unwrap().parse().unwrap();
        assert!(retry >= 1);
        assert_eq!(reply.header("x-ratelimit-limit"), Some("2"));
        assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
        let reset_millis: u64 = reply.header("x-ratelimit-reset").unwrap().parse().unwrap();
        assert!(
            reset_millis > now_secs() * 1000,
            "X-RateLimit-Reset is in milliseconds"
        );
        let body = reply.json();
        match endpoint {
            Endpoint::Chat => assert_eq!(body["code"], code.as_str()),
            Endpoint::Messages => assert_eq!(body["error"]["type"], "rate_limit_error"),
            Endpoint::Responses => assert_eq!(body["error"]["code"], code.as_str()),
        }
    }
    // Paid models are not counted against the free tier: they are quoted.
    let paid = server
        .post_once(
            "/v1/chat/completions",
            body(Endpoint::Chat, PAID_MODEL, "hi", false).to_string(),
            None,
        )
        .await;
    assert_eq!(paid.status, 402);
    assert!(paid.header("x-ratelimit-limit").is_none());
    // And a rejected request is neither counted nor quoted.
    let invalid = server.post_once("/v1/chat/completions", "{}", None).await;
    assert_envelope(Endpoint::Chat, &invalid, ErrorCode::InvalidRequestBody);
    server.assert_nothing_settled();
}

//! Payment and free-tier tests over real TCP: quotes, paid requests signed
//! here with the public development keys, every payment error code, and the
//! ledger after each (a refused or failed request never moves funds).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;
use walletgate::clock::{Clock, FakeClock};
use walletgate::envelope::ErrorCode;
use walletgate::free_tier::FreeTierQuotas;
use walletgate::x402::{
    facilitator::DevLedger,
    server::BASE_SEPOLIA_USDC,
    wire::{AtomicAmount, ExactEvmDomain, PaymentPayload, SettleResponse, UsdAmount, codec},
};

use crate::catalogue::{Catalogue, Model, Pricing};
use crate::config::Config;
use crate::request::{ChatRequest, Endpoint};
use crate::tests::{
    ENDPOINTS, Reply, Server, assert_envelope, assert_status_and_headers, body, fresh_nonce,
    now_secs, path, sign_in_proof,
};
use crate::upstream::{BoxFuture, Completion, EchoUpstream, EventStream, Upstream, UpstreamFault};
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;

const PAID_MODEL: &str = "anthropic/claude-sonnet-4.6";
const FREE_MODEL: &str = "nvidia/nemotron-super";

/// The specification's flat fee, 0.001 USD: the gateway's layers keep the default.
const SPEC_FLAT_FEE: UsdAmount = UsdAmount::from_micros(1_000);

/// The quoted amount of `model` for `endpoint`'s standard test body, in USDC
/// units: the catalogue's price plus the 0.001 USD flat fee where it excludes it.
fn expected_units(endpoint: Endpoint, model: &str) -> u128 {
    let catalogue = Catalogue::embedded();
    let model = catalogue.get(model).unwrap();
    let request =
        ChatRequest::from_json(endpoint, body(endpoint, model.id, "hello", false)).unwrap();
    let price = model.price(&request);
    assert!(!price.is_free(), "{} is free", model.id);
    price.total(SPEC_FLAT_FEE).unwrap().micros()
}

/// A payment refusal: status, envelope per endpoint, and on 402 the quote again.
pub(crate) fn assert_payment_rejection(endpoint: Endpoint, reply: &Reply, code: ErrorCode) {
    let context = assert_status_and_headers(endpoint, reply, code);
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
        // `exact` first (the specification's clients sign it); the metered `upto` may follow.
        assert_eq!(quote.accepts[0].scheme, "exact", "{context}");
        assert!(quote.accepts.len() <= 2, "{context}");
        assert!(quote.error.is_some(), "{context}");
    }
}

/// A flat model's listed price is what the client signs: the fee is inside
/// it, never taken off and put back.
#[tokio::test]
async fn a_flat_model_is_quoted_and_settled_at_its_listed_price() {
    const FLAT_MODEL: &str = "perplexity/sonar";
    let server = Server::start(Config::default()).await;
    let listing = server.get("/v1/models").await.json();
    let row = listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["id"] == FLAT_MODEL)
        .unwrap()
        .clone();
    assert_eq!(row["billing_mode"], "flat");
    assert_eq!(row["pricing"]["flat"], 0.005);
    let request = body(Endpoint::Chat, FLAT_MODEL, "hello", false).to_string();
    let quote = server
        .post_once(path(Endpoint::Chat), request.clone(), None)
        .await;
    assert_eq!(quote.quote().accepts[0].amount, AtomicAmount::new(5_000));
    assert_eq!(quote.json()["price"]["amount"], "0.005");
    let payment = server.sign(&quote, &server.payer);
    let paid = server
        .post_once(path(Endpoint::Chat), request, Some(&payment))
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let settled: SettleResponse =
        codec::decode(paid.header("payment-response").unwrap().as_bytes()).unwrap();
    assert!(settled.success);
    let balance = server.ledger.balance_of(
        &DevLedger::base_sepolia_usdc(),
        server.payer.address().parse().unwrap(),
    );
    assert_eq!(balance, DevLedger::DEV_ACCOUNT_FUNDS - 5_000);
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
            // A stream is settled when it completes: its receipt is its last event.
            let receipt = if stream {
                assert!(reply.header("payment-response").is_none());
                let text = reply.text();
                let (_, last) = text
                    .rsplit_once("event: payment-response\ndata: ")
                    .unwrap_or_else(|| panic!("no receipt event: {text}"));
                last.trim_end().to_owned()
            } else {
                reply.header("payment-response").unwrap().to_owned()
            };
            let receipt: SettleResponse = codec::decode(receipt.as_bytes()).unwrap();
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
    Payer::from_key([0x42; 32]).unwrap()
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
            let mut expiring =
                dev.authorization(&offer, now_secs(), sequential_nonce(fresh_nonce()));
            expiring.valid_before = now_secs() + 2;
            let mut not_yet =
                dev.authorization(&offer, now_secs(), sequential_nonce(fresh_nonce()));
            not_yet.valid_after = now_secs() + 600;
            let mut overpaid =
                dev.authorization(&offer, now_secs(), sequential_nonce(fresh_nonce()));
            overpaid.value = AtomicAmount::new(offer.amount.units() + 1);
            let mut elsewhere =
                dev.authorization(&offer, now_secs(), sequential_nonce(fresh_nonce()));
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
                    encode(
                        &dev.sign(
                            &cheaper,
                            dev.authorization(
                                &cheaper,
                                now_secs(),
                                sequential_nonce(fresh_nonce()),
                            ),
                        )
                        .unwrap(),
                    ),
                ),
                (
                    ErrorCode::PaymentInvalid,
                    "signed under another token's domain",
                    encode(
                        &dev.sign_with_domain(
                            &offer,
                            dev.authorization(&offer, now_secs(), sequential_nonce(fresh_nonce())),
                            &wrong_domain,
                        )
                        .unwrap(),
                    ),
                ),
                (
                    ErrorCode::PaymentInvalid,
                    "value above the quote",
                    encode(&dev.sign(&offer, overpaid).unwrap()),
                ),
                (
                    ErrorCode::PaymentInvalid,
                    "another recipient",
                    encode(&dev.sign(&offer, elsewhere).unwrap()),
                ),
                (
                    ErrorCode::PaymentUnfunded,
                    "no funds",
                    unfunded_payer()
                        .header_with_nonce(&offer, now_secs(), sequential_nonce(fresh_nonce()))
                        .unwrap(),
                ),
                (
                    ErrorCode::PaymentUnfunded,
                    "expiring authorization",
                    encode(&dev.sign(&offer, expiring).unwrap()),
                ),
                (
                    ErrorCode::PaymentUnfunded,
                    "not yet valid",
                    encode(&dev.sign(&offer, not_yet).unwrap()),
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

/// A GET with `payment` as `PAYMENT-SIGNATURE`, if given.
async fn poll(server: &Server, path: &str, payment: Option<&str>) -> Reply {
    let mut request = http::Request::get(server.url(path));
    if let Some(payment) = payment {
        request = request.header("payment-signature", payment);
    }
    server
        .send(request.body(http_body_util::Full::default()).unwrap())
        .await
}

/// A gateway on a fake clock whose image jobs take two seconds.
async fn image_server() -> (Arc<FakeClock>, Server) {
    let clock = Arc::new(FakeClock::at_unix_secs(now_secs()));
    let server = Server::start(Config {
        clock: clock.clone(),
        image_job: Duration::from_secs(2),
        ..Config::default()
    })
    .await;
    (clock, server)
}

#[tokio::test]
async fn an_image_job_is_paid_once_polled_with_its_signature_and_recovered_uncharged() {
    let (clock, server) = image_server().await;
    let payer = server.payer.address();
    let request =
        json!({"model": "openai/dall-e-3", "prompt": "a red fox", "size": "512x512", "n": 2})
            .to_string();
    let url = "/api/v1/images/generations";
    let quote = server.post_once(url, request.clone(), None).await;
    assert_eq!(quote.status, 402, "{}", quote.text());
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(
        amount,
        2 * 40_000 + 1_000,
        "two images at $0.04 plus the fee"
    );
    let offer = quote.quote().accepts[0].clone();
    let payment = server
        .payer
        .header_with_nonce(
            &offer,
            clock.now_unix_secs(),
            sequential_nonce(fresh_nonce()),
        )
        .unwrap();

    let accepted = server.post_once(url, request.clone(), Some(&payment)).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    assert!(
        accepted.header("payment-response").is_some(),
        "accepting the job settles it"
    );
    let job = accepted.json();
    assert_eq!(job["status"], "queued");
    let id = job["id"].as_str().unwrap().to_owned();
    let poll_url = job["poll_url"].as_str().unwrap().to_owned();
    assert_eq!(poll_url, format!("/api/v1/images/generations/{id}"));
    let charged = DevLedger::DEV_ACCOUNT_FUNDS - amount;
    assert_eq!(server.balance(&payer), charged);

    clock.advance(Duration::from_secs(1));
    let running = poll(&server, &poll_url, Some(&payment)).await;
    assert_eq!(running.status, 202, "{}", running.text());
    assert_eq!(running.json()["status"], "in_progress");
    assert_eq!(running.json()["progress"], 50);
    // Polling is not paying: no signature, a quote; the job's own signature, no charge.
    assert_eq!(poll(&server, &poll_url, None).await.status, 402);
    // The answer to the paid POST was lost: the same signed POST gets it
    // again from the answer store, the same job, with its settlement.
    let recovered = server.post_once(url, request.clone(), Some(&payment)).await;
    assert_eq!(recovered.status, 202, "{}", recovered.text());
    assert_eq!(recovered.json(), job);
    let settled: SettleResponse =
        codec::decode(recovered.header("payment-response").unwrap().as_bytes()).unwrap();
    assert!(settled.transaction.starts_with("0x"));
    // Another payer's payment of the same price does not open this job, and is not charged.
    let stranger = Payer::dev(2);
    let stranger_payment = stranger
        .header_with_nonce(
            &offer,
            clock.now_unix_secs(),
            sequential_nonce(fresh_nonce()),
        )
        .unwrap();
    let refused = poll(&server, &poll_url, Some(&stranger_payment)).await;
    assert_eq!(refused.status, 404, "{}", refused.text());
    assert_eq!(
        server.balance(&stranger.address()),
        DevLedger::DEV_ACCOUNT_FUNDS
    );

    clock.advance(Duration::from_secs(1));
    let done = poll(&server, &poll_url, Some(&payment)).await;
    assert_eq!(done.status, 200, "{}", done.text());
    let done_body = done.json();
    assert_eq!(done_body["status"], "completed");
    assert!(done_body["created"].as_u64().unwrap() >= now_secs());
    let images = done_body["data"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    assert!(
        images[0]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/svg+xml;base64,")
    );
    let receipt: SettleResponse =
        codec::decode(done.header("payment-response").unwrap().as_bytes()).unwrap();
    assert!(receipt.success);
    // One settlement for the whole job, whatever the polls and replays.
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(server.balance(&payer), charged);
    assert_eq!(
        poll(
            &server,
            "/v1/images/generations/imgjob_unknown",
            Some(&payment)
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn a_wallet_that_paid_for_an_image_job_signs_in_for_its_state_then_its_result() {
    let (clock, server) = image_server().await;
    let request = json!({"model": "openai/dall-e-3", "prompt": "a blue heron"}).to_string();
    let url = "/v1/images/generations";
    let quote = server.post_once(url, request.clone(), None).await;
    let payment = server.sign(&quote, &server.payer);
    let accepted = server.post_once(url, request.clone(), Some(&payment)).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    let id = accepted.json()["id"].clone();
    let charged = server.balance(&server.payer.address());
    let sign_in = || async {
        let challenge = server.post_once(url, request.clone(), None).await;
        let proof = sign_in_proof(&challenge, &server.payer);
        let signed_in = http::Request::post(server.url(url))
            .header("content-type", "application/json")
            .header("sign-in-with-x", proof)
            .body(http_body_util::Full::new(bytes::Bytes::from(
                request.clone(),
            )))
            .unwrap();
        server.send(signed_in).await
    };
    // Running: the job's state, not the kept reference.
    clock.advance(Duration::from_secs(1));
    let running = sign_in().await;
    assert_eq!(running.status, 202, "{}", running.text());
    assert_eq!(running.json()["id"], id);
    assert_eq!(running.json()["progress"], 50);
    // Done: its result, uncharged.
    clock.advance(Duration::from_secs(1));
    let done = sign_in().await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.json()["id"], id);
    assert_eq!(done.json()["status"], "completed");
    assert!(done.header("payment-response").is_none());
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(server.balance(&server.payer.address()), charged);
    // Another wallet signing in gets the normal 402.
    let stranger = Payer::dev(3);
    let challenge = server.post_once(url, request.clone(), None).await;
    let refused = http::Request::post(server.url(url))
        .header("content-type", "application/json")
        .header("sign-in-with-x", sign_in_proof(&challenge, &stranger))
        .body(http_body_util::Full::new(bytes::Bytes::from(
            request.clone(),
        )))
        .unwrap();
    assert_eq!(server.send(refused).await.status, 402);
}

#[tokio::test]
async fn image_requests_are_validated_before_any_quote() {
    let server = Server::start(Config {
        image_job: Duration::ZERO,
        ..Config::default()
    })
    .await;
    let url = "/v1/images/generations";
    let invalid = server
        .post_once(
            url,
            json!({"model": "openai/dall-e-3", "prompt": "", "n": 9, "size": "big"}).to_string(),
            None,
        )
        .await;
    assert_envelope(Endpoint::Chat, &invalid, ErrorCode::InvalidRequestBody);
    let paths: Vec<Value> = invalid.json()["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|detail| detail["path"].clone())
        .collect();
    assert_eq!(paths, [json!(["prompt"]), json!(["size"]), json!(["n"])]);
    // A chat model is no image model, and the reverse.
    let chat_model = server
        .post_once(
            url,
            json!({"model": "openai/gpt-5-mini", "prompt": "a fox"}).to_string(),
            None,
        )
        .await;
    assert_eq!(chat_model.status, 400);
    assert!(
        chat_model.json()["error"]
            .as_str()
            .unwrap()
            .contains("Unknown model"),
        "{}",
        chat_model.text()
    );
    let image_model = server
        .post_once(
            "/v1/chat/completions",
            body(Endpoint::Chat, "openai/dall-e-3", "hi", false).to_string(),
            None,
        )
        .await;
    assert_eq!(image_model.status, 400, "{}", image_model.text());
    // A job done at once answers 200 with the images, paid as quoted.
    let done = server
        .post(
            url,
            &json!({"model": "google/nano-banana", "prompt": "a fox"}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.json()["data"].as_array().unwrap().len(), 1);
    assert_eq!(
        server.balance(&server.payer.address()),
        DevLedger::DEV_ACCOUNT_FUNDS - 39_000 - 1_000
    );
    // The listing shows the image models as the SDKs look for them.
    let listing = server.get("/api/v1/models").await.json();
    let image_rows: Vec<&Value> = listing["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["categories"] == json!(["image"]))
        .collect();
    assert_eq!(image_rows.len(), 2);
    for row in image_rows {
        assert_eq!(row["billing_mode"], "per_image");
        assert!(row["pricing"]["per_image"].as_f64().unwrap() > 0.0);
    }
}

#[tokio::test]
async fn a_request_the_pipeline_did_not_price_is_refused_not_served_free() {
    use tower::ServiceExt;
    let network = crate::config::PaymentNetwork::Evm(crate::config::EvmSettings::base_sepolia());
    let options = crate::gates::payment_options(&network, DevLedger::DEV_ACCOUNTS[9], 300).unwrap();
    let clock: walletgate::clock::SharedClock = Arc::new(walletgate::clock::SystemClock);
    let facilitator = crate::gates::facilitator(
        &network,
        None,
        Arc::new(DevLedger::new()),
        &walletgate::tls::ClientTls::webpki_roots(),
        None,
        None,
        clock.clone(),
        Arc::default(),
    )
    .unwrap();
    let payment =
        crate::gates::payment(&options, facilitator, clock, "http://gateway.test").unwrap();
    for layer in [
        crate::gates::inference_layer(&payment, None).unwrap(),
        crate::gates::image_layer(&payment, None).unwrap(),
    ] {
        let service = tower::ServiceBuilder::new()
            .layer(layer)
            .service(tower::service_fn(
                |_request: http::Request<http_body_util::Full<bytes::Bytes>>| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"served")),
                    ))
                },
            ));
        // No RequestPrice (the pipeline's model or image step): a wiring fault.
        let request = http::Request::post("/v1/chat/completions")
            .body(http_body_util::Full::default())
            .unwrap();
        let response = service.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 500);
    }
}

/// A quote asked for with `Host: evil.example`, as the payer's decoded quote.
async fn quote_for_host(server: &Server, host: &str) -> walletgate::x402::wire::PaymentRequired {
    let request = http::Request::post(server.url(path(Endpoint::Chat)))
        .header("host", host)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(axum::body::Bytes::from(
            body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string(),
        )))
        .unwrap();
    let reply = server.send(request).await;
    assert_eq!(reply.status, 402, "{}", reply.text());
    reply.quote()
}

#[tokio::test]
async fn a_quote_never_names_the_requests_host() {
    // Without GATEWAY_PUBLIC_URL: the bound address, never the Host header.
    let server = Server::start(Config::default()).await;
    let quote = quote_for_host(&server, "evil.example").await;
    assert_eq!(quote.resource.url, server.url(path(Endpoint::Chat)));
    assert!(!quote.resource.url.contains("evil"));

    // With it: that base and its path prefix, whatever the Host said.
    let config = Config::from_vars(|name| {
        (name == "GATEWAY_PUBLIC_URL").then(|| "https://pay.example/gw/".to_owned())
    })
    .unwrap();
    let server = Server::start(config).await;
    let quote = quote_for_host(&server, "evil.example").await;
    assert_eq!(
        quote.resource.url,
        "https://pay.example/gw/v1/chat/completions"
    );
}

#[test]
fn an_unusable_public_url_is_refused_at_start() {
    for bad in [
        "pay.example",
        "https://pay.example/gw?x=1",
        "https://u@pay.example",
    ] {
        let error =
            Config::from_vars(|name| (name == "GATEWAY_PUBLIC_URL").then(|| bad.to_owned()))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(
            error.to_string().starts_with("GATEWAY_PUBLIC_URL"),
            "{error}"
        );
    }
}

#[test]
fn a_wildcard_bind_without_a_public_url_warns() {
    let mut config = Config::default();
    let warning = config.bound_to("0.0.0.0:8402".parse().unwrap()).unwrap();
    assert!(warning.contains("GATEWAY_PUBLIC_URL"), "{warning}");
    let mut config = Config::default();
    assert_eq!(config.bound_to("127.0.0.1:41234".parse().unwrap()), None);
    assert_eq!(config.public_url(), "http://127.0.0.1:41234");
}

#[test]
fn help_and_version_are_answered_and_list_every_variable() {
    use crate::cli::{Command, command};
    let args = |list: &[&str]| list.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
    assert_eq!(command(&args(&["--help"])), Command::Help);
    assert_eq!(
        command(&args(&["--network", "solana", "-h"])),
        Command::Help
    );
    assert_eq!(command(&args(&["--version"])), Command::Version);
    assert_eq!(command(&args(&["--network", "solana"])), Command::Run);
    let help = crate::help();
    let read = crate::cli::variables_read(
        // The module, not its tests (which name made-up providers).
        include_str!("config.rs")
            .split("#[cfg(test)]")
            .next()
            .unwrap(),
        "GATEWAY_",
    );
    assert!(read.len() > 20, "{read:?}");
    for variable in read {
        assert!(
            help.contains(&variable),
            "--help misses {variable}:\n{help}"
        );
    }
    assert!(
        help.contains("GATEWAY_LISTEN\n      default: 127.0.0.1:8402"),
        "{help}"
    );
}

/// A free request from the loopback peer, forwarded for `client` if given:
/// its `X-RateLimit-Remaining`.
async fn free_remaining(server: &Server, forwarded_for: Option<&str>) -> String {
    let mut request = http::Request::post(server.url(path(Endpoint::Chat)))
        .header("content-type", "application/json");
    if let Some(client) = forwarded_for {
        request = request.header("x-forwarded-for", client);
    }
    let request = request
        .body(http_body_util::Full::new(axum::body::Bytes::from(
            body(Endpoint::Chat, FREE_MODEL, "hi", false).to_string(),
        )))
        .unwrap();
    let reply = server.send(request).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.header("x-ratelimit-remaining").unwrap().to_owned()
}

fn proxied_config(trusted: Option<&str>) -> Config {
    let mut config = Config::from_vars(|name| match name {
        "GATEWAY_TRUSTED_PROXIES" => trusted.map(str::to_owned),
        "GATEWAY_FORWARDED_HEADER" => Some("x-forwarded-for".to_owned()),
        _ => None,
    })
    .unwrap();
    config.free_tier = FreeTierQuotas::new(5, 300).unwrap();
    config
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_bucket() {
    // The test's loopback peer plays the proxy.
    let server = Server::start(proxied_config(Some("127.0.0.0/8, ::1"))).await;
    assert_eq!(free_remaining(&server, Some("198.51.100.7")).await, "4");
    assert_eq!(free_remaining(&server, Some("198.51.100.7")).await, "3");
    assert_eq!(free_remaining(&server, Some("203.0.113.9")).await, "4");
    // A client-written entry left of the real one is not believed.
    assert_eq!(
        free_remaining(&server, Some("10.9.9.9, 203.0.113.9")).await,
        "3"
    );
}

#[tokio::test]
async fn an_untrusted_peers_forwarded_for_is_ignored() {
    let server = Server::start(proxied_config(None)).await;
    assert_eq!(free_remaining(&server, Some("198.51.100.7")).await, "4");
    assert_eq!(free_remaining(&server, Some("203.0.113.9")).await, "3");
    assert_eq!(free_remaining(&server, None).await, "2");
}

#[test]
fn proxy_variables_are_checked_at_start() {
    let with = |name: &'static str, value: &'static str| {
        Config::from_vars(move |asked| (asked == name).then(|| value.to_owned()))
            .err()
            .map(|error| error.to_string())
    };
    assert!(
        with("GATEWAY_TRUSTED_PROXIES", "10.0.0.0/33")
            .unwrap()
            .starts_with("GATEWAY_TRUSTED_PROXIES")
    );
    assert!(
        with("GATEWAY_FORWARDED_HEADER", "x-real-ip")
            .unwrap()
            .starts_with("GATEWAY_FORWARDED_HEADER")
    );
    assert_eq!(with("GATEWAY_FORWARDED_HEADER", "forwarded"), None);
}

#[tokio::test]
async fn every_answer_carries_a_request_id_kept_only_when_safe() {
    let server = Server::start(Config::default()).await;
    let send = |id: Option<&'static str>| {
        let mut request = http::Request::get(server.url("/v1/models"));
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        let request = request.body(http_body_util::Full::default()).unwrap();
        let server = server.clone();
        async move {
            server
                .send(request)
                .await
                .header("x-request-id")
                .unwrap()
                .to_owned()
        }
    };
    assert_eq!(send(Some("trace-7.a_B")).await, "trace-7.a_B");
    let long = "a".repeat(65);
    for refused in [
        None,
        Some("has space"),
        Some("semi;colon"),
        Some(long.leak() as &str),
    ] {
        let generated = send(refused).await;
        assert_eq!(generated.len(), 32, "{generated}");
        assert!(generated.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(Some(generated.as_str()), refused);
    }
    // A quote (a rejection by a gate) carries it too.
    let request = http::Request::post(server.url(path(Endpoint::Chat)))
        .header("content-type", "application/json")
        .header("x-request-id", "quote-1")
        .body(http_body_util::Full::new(axum::body::Bytes::from(
            body(Endpoint::Chat, PAID_MODEL, "hi", false).to_string(),
        )))
        .unwrap();
    let reply = server.send(request).await;
    assert_eq!(reply.status, 402);
    assert_eq!(reply.header("x-request-id"), Some("quote-1"));
}

fn cors_config() -> Config {
    Config::from_vars(|name| {
        (name == "GATEWAY_CORS_ORIGINS")
            .then(|| "https://app.example, http://127.0.0.1:9".to_owned())
    })
    .unwrap()
}

#[tokio::test]
async fn preflights_are_answered_before_the_gates_for_allowed_origins_only() {
    let server = Server::start(cors_config()).await;
    let preflight = |origin: &'static str| {
        let request = http::Request::builder()
            .method(http::Method::OPTIONS)
            .uri(server.url(path(Endpoint::Chat)))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type,payment-signature",
            )
            .body(http_body_util::Full::default())
            .unwrap();
        let server = server.clone();
        async move { server.send(request).await }
    };
    let allowed = preflight("https://app.example").await;
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let headers = allowed.header("access-control-allow-headers").unwrap();
    for header in [
        "payment-signature",
        "sign-in-with-x",
        "x-api-key",
        "authorization",
    ] {
        assert!(headers.contains(header), "{headers}");
    }
    assert!(allowed.header("access-control-allow-credentials").is_none());
    let foreign = preflight("https://evil.example").await;
    assert!(foreign.header("access-control-allow-origin").is_none());

    // The 402 lets the allowed origin read its quote.
    let request = http::Request::post(server.url(path(Endpoint::Chat)))
        .header("origin", "https://app.example")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(axum::body::Bytes::from(
            body(Endpoint::Chat, PAID_MODEL, "hi", false).to_string(),
        )))
        .unwrap();
    let quote = server.send(request).await;
    assert_eq!(quote.status, 402);
    let exposed = quote.header("access-control-expose-headers").unwrap();
    for header in [
        "payment-required",
        "payment-response",
        "x-request-id",
        "retry-after",
    ] {
        assert!(exposed.contains(header), "{exposed}");
    }
}

#[test]
fn cors_origins_are_origins() {
    let error = Config::from_vars(|name| {
        (name == "GATEWAY_CORS_ORIGINS").then(|| "https://app.example/path".to_owned())
    })
    .err()
    .unwrap();
    assert!(
        error.to_string().starts_with("GATEWAY_CORS_ORIGINS"),
        "{error}"
    );
    assert!(Config::default().cors_origins.is_empty());
}

#[test]
fn sign_in_with_x_is_declared_only_at_a_known_origin_and_its_key_file_is_read() {
    let mut wildcard = Config::default();
    wildcard.bound_to("0.0.0.0:8402".parse().unwrap());
    assert!(wildcard.sign_in_with_x().unwrap().is_none());
    let mut loopback = Config::default();
    loopback.bound_to("127.0.0.1:8402".parse().unwrap());
    assert!(loopback.sign_in_with_x().unwrap().is_some());
    let mut public = Config::from_vars(|name| {
        (name == "GATEWAY_PUBLIC_URL").then(|| "https://pay.example".to_owned())
    })
    .unwrap();
    public.bound_to("0.0.0.0:8402".parse().unwrap());
    assert!(public.sign_in_with_x().unwrap().is_some());
    public.siwx = false;
    assert!(public.sign_in_with_x().unwrap().is_none());

    let path = std::env::temp_dir().join(format!("walletgate-siwx-key-{}", std::process::id()));
    std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
    let file = path.display().to_string();
    let config =
        Config::from_vars(|name| (name == "GATEWAY_SIWX_KEY_FILE").then(|| file.clone())).unwrap();
    assert_eq!(config.siwx_key, Some([0xab; 32]));
    std::fs::write(&path, "not a key").unwrap();
    let error = Config::from_vars(|name| (name == "GATEWAY_SIWX_KEY_FILE").then(|| file.clone()))
        .err()
        .unwrap();
    assert!(!error.to_string().contains("not a key"), "{error}");
    // The facilitator's idempotency secret is read alike, never echoed.
    let secret = |file: &str| {
        let file = file.to_owned();
        Config::from_vars(move |name| {
            (name == "GATEWAY_FACILITATOR_SECRET_FILE").then(|| file.clone())
        })
    };
    std::fs::write(&path, format!("0x{}\n", "cd".repeat(32))).unwrap();
    assert_eq!(secret(&file).unwrap().facilitator_secret, Some([0xcd; 32]));
    std::fs::write(&path, "not a secret").unwrap();
    let error = secret(&file).err().unwrap();
    assert!(
        error
            .to_string()
            .contains("GATEWAY_FACILITATOR_SECRET_FILE"),
        "{error}"
    );
    assert!(!error.to_string().contains("not a secret"), "{error}");
    std::fs::remove_file(&path).unwrap();
}

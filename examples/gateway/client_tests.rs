//! walletgate's own paying client (`walletgate::client::pay`) against the
//! gateway over TCP: the tower layer on hyper's client and the reqwest
//! adapter, every error class and retry rule against the gateway's faults.
//! No test sleeps: retries wait on a recording sleeper.

use std::collections::HashMap;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use alloy_primitives::{Address, B256};
use alloy_signer::{Signature, Signer};
use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};
use walletgate::client::pay::reqwest::X402Middleware;
use walletgate::client::pay::reqwest::reqwest_client;
use walletgate::client::pay::{
    ClientError, Failover, ImageJob, PaidBody, PaymentErrorKind, Receipt, Refusal, RetryPolicy,
    SharedSleeper, Sleeper, SpendPolicy, X402PaymentLayer,
};
use walletgate::client::payer::DEV_KEYS;
use walletgate::clock::FakeClock;
use walletgate::envelope::ErrorCode;
use walletgate::store::BoxFuture;
use walletgate::tls::ClientTls;
use walletgate::x402::facilitator::DevLedger;

use crate::config::{Config, PaymentFaults};
use crate::request::Endpoint;
use crate::tests::{ENDPOINTS, Server, body, now_secs, path};
use crate::upstream::Fault;

type Hyper = Client<HttpConnector, Full<Bytes>>;

fn hyper() -> Hyper {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Development account `index`'s key (PUBLIC, worthless anywhere real).
fn dev_key(index: usize) -> PrivateKeySigner {
    DEV_KEYS[index].parse().unwrap()
}

/// Records every wait and returns at once.
#[derive(Default)]
struct Waits(Mutex<Vec<Duration>>);

impl Sleeper for Waits {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(duration);
        Box::pin(std::future::ready(()))
    }
}

/// An alloy signer that counts the hashes it is asked to sign.
#[derive(Clone)]
struct Counting {
    inner: PrivateKeySigner,
    calls: Arc<AtomicU64>,
}

impl Signer for Counting {
    fn sign_hash<'a, 'b, 'c>(
        &'a self,
        hash: &'b B256,
    ) -> Pin<Box<dyn Future<Output = alloy_signer::Result<Signature>> + Send + 'c>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.sign_hash(hash)
    }

    fn address(&self) -> Address {
        Signer::address(&self.inner)
    }

    fn chain_id(&self) -> Option<u64> {
        Signer::chain_id(&self.inner)
    }

    fn set_chain_id(&mut self, chain_id: Option<u64>) {
        Signer::set_chain_id(&mut self.inner, chain_id);
    }
}

fn layer(key: impl Signer + Send + Sync + 'static, waits: &Arc<Waits>) -> X402PaymentLayer {
    let sleeper: SharedSleeper = waits.clone();
    X402PaymentLayer::new(key).with_sleeper(sleeper)
}

fn post(server: &Server, url_path: &str, body: &Value) -> Request<Full<Bytes>> {
    Request::post(server.url(url_path))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

async fn text(response: Response<PaidBody<hyper::body::Incoming>>) -> (Option<Receipt>, String) {
    let receipt = response.extensions().get::<Receipt>().cloned();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (receipt, String::from_utf8_lossy(&bytes).into_owned())
}

const PAID_MODEL: &str = "openai/gpt-5-mini";

#[tokio::test]
async fn the_layer_pays_chat_messages_responses_and_streams_exactly_the_quote() {
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[4];
    let waits = Arc::new(Waits::default());
    let client = ServiceBuilder::new()
        .layer(layer(dev_key(4), &waits))
        .service(hyper());
    let mut moved = 0;
    for endpoint in ENDPOINTS {
        for stream in [false, true] {
            let before = server.balance(payer);
            let request = post(
                &server,
                path(endpoint),
                &body(endpoint, PAID_MODEL, "hello", stream),
            );
            let response = client.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), 200);
            let (receipt, answer) = text(response).await;
            assert!(answer.contains("hello"), "{endpoint:?} {answer}");
            let receipt = receipt.expect("a paid answer has a receipt");
            let settlement = receipt
                .settlement()
                .expect("settled (header or final event)");
            assert!(settlement.success);
            assert_eq!(settlement.payer.as_deref(), Some(payer));
            assert_eq!(server.balance(payer), before - receipt.amount().units());
            moved += receipt.amount().units();
        }
    }
    assert_eq!(server.ledger.settlements(), 6);
    assert_eq!(server.balance(payer), DevLedger::DEV_ACCOUNT_FUNDS - moved);
    assert_eq!(
        server.balance(DevLedger::DEV_ACCOUNTS[9]),
        DevLedger::DEV_ACCOUNT_FUNDS + moved
    );
    assert!(waits.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_paid_image_job_is_polled_with_the_same_payment_uncharged() {
    let clock = Arc::new(FakeClock::at_unix_secs(now_secs()));
    let server = Server::start(Config {
        clock: clock.clone(),
        image_job: Duration::from_secs(2),
        ..Config::default()
    })
    .await;
    let payer = DevLedger::DEV_ACCOUNTS[5];
    let waits = Arc::new(Waits::default());
    let client = ServiceBuilder::new()
        .layer(layer(dev_key(5), &waits).with_clock(clock.clone()))
        .service(hyper());
    let request = post(
        &server,
        "/api/v1/images/generations",
        &json!({"model": "openai/dall-e-3", "prompt": "a red fox", "n": 1}),
    );
    let uri = request.uri().clone();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 202);
    let (receipt, answer) = text(response).await;
    let receipt = receipt.unwrap();
    assert_eq!(receipt.amount().units(), 40_000 + 1_000);
    let job = ImageJob::new(&uri, answer.as_bytes(), receipt).unwrap();
    let charged = DevLedger::DEV_ACCOUNT_FUNDS - 41_000;
    assert_eq!(server.balance(payer), charged);
    assert_eq!(job.poll(&hyper()).await.unwrap(), None);
    clock.advance(Duration::from_secs(2));
    let done = job.poll(&hyper()).await.unwrap().expect("done");
    assert_eq!(done["status"], "completed");
    assert_eq!(server.balance(payer), charged, "polling is not paying");
    assert_eq!(server.ledger.settlements(), 1);
}

#[tokio::test]
async fn the_reqwest_adapter_pays_every_endpoint_and_the_image_job() {
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[6];
    let waits = Arc::new(Waits::default());
    let client =
        reqwest_middleware::ClientBuilder::new(reqwest_client(&ClientTls::webpki_roots()).unwrap())
            .with(X402Middleware::new(layer(dev_key(6), &waits)))
            .build();
    let mut moved = 0;
    for endpoint in ENDPOINTS {
        let response = client
            .post(server.url(path(endpoint)))
            .header("content-type", "application/json")
            .body(body(endpoint, PAID_MODEL, "hello reqwest", false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let receipt = X402Middleware::receipt(&response).cloned().unwrap();
        assert!(receipt.settlement().unwrap().success);
        moved += receipt.amount().units();
        assert!(response.text().await.unwrap().contains("hello reqwest"));
        assert_eq!(server.balance(payer), DevLedger::DEV_ACCOUNT_FUNDS - moved);
    }
    let response = client
        .post(server.url("/v1/images/generations"))
        .header("content-type", "application/json")
        .body(json!({"model": "openai/dall-e-3", "prompt": "a fox", "n": 1}).to_string())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    let receipt = X402Middleware::receipt(&response).cloned().unwrap();
    assert_eq!(receipt.amount().units(), 41_000);
    moved += 41_000;
    assert_eq!(server.balance(payer), DevLedger::DEV_ACCOUNT_FUNDS - moved);
    assert_eq!(server.ledger.settlements(), 4);

    // The error classes come through the adapter too.
    let stranger = PrivateKeySigner::from_bytes(&B256::repeat_byte(0x42)).unwrap();
    let client =
        reqwest_middleware::ClientBuilder::new(reqwest_client(&ClientTls::webpki_roots()).unwrap())
            .with(X402Middleware::new(layer(stranger, &waits)))
            .build();
    let error = client
        .post(server.url(path(Endpoint::Chat)))
        .body(body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string())
        .send()
        .await
        .unwrap_err();
    let reqwest_middleware::Error::Middleware(error) = error else {
        panic!("not a middleware error: {error:?}");
    };
    let error = error.downcast_ref::<ClientError>().unwrap();
    assert!(error.to_string().contains("check balance"), "{error}");
}

fn payment_error(
    result: Result<impl std::fmt::Debug, ClientError>,
) -> walletgate::client::pay::PaymentError {
    match result {
        Err(ClientError::Payment(error)) => error,
        other => panic!("not a payment error: {other:?}"),
    }
}

#[tokio::test]
async fn an_unfunded_payer_is_told_to_check_its_balance_on_every_endpoint() {
    let server = Server::start(Config::default()).await;
    let waits = Arc::new(Waits::default());
    let stranger = PrivateKeySigner::from_bytes(&B256::repeat_byte(0x42)).unwrap();
    let client = ServiceBuilder::new()
        .layer(layer(stranger, &waits))
        .service(hyper());
    for endpoint in ENDPOINTS {
        let request = post(
            &server,
            path(endpoint),
            &body(endpoint, PAID_MODEL, "hello", false),
        );
        let error = payment_error(client.clone().oneshot(request).await);
        assert_eq!(
            error.code(),
            Some(ErrorCode::PaymentUnfunded),
            "{endpoint:?}: {error}"
        );
        assert!(error.to_string().contains("check balance"), "{error}");
        assert_eq!((error.attempts.requests, error.attempts.signatures), (2, 1));
    }
    server.assert_nothing_settled();
}

#[tokio::test]
async fn a_quote_over_the_cap_is_refused_and_the_signer_never_called() {
    let server = Server::start(Config::default()).await;
    let waits = Arc::new(Waits::default());
    let calls = Arc::new(AtomicU64::new(0));
    let signer = Counting {
        inner: dev_key(4),
        calls: calls.clone(),
    };
    let policy = SpendPolicy::new()
        .with_max_per_payment_usd("0.001")
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(layer(signer, &waits).with_policy(policy))
        .service(hyper());
    let request = post(
        &server,
        path(Endpoint::Chat),
        &body(Endpoint::Chat, PAID_MODEL, "hello", false),
    );
    let error = payment_error(client.oneshot(request).await);
    assert!(
        matches!(
            error.kind,
            PaymentErrorKind::Policy(Refusal::OverCap { .. })
        ),
        "{error}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(error.attempts.signatures, 0);
    server.assert_nothing_settled();
}

/// A client service that swaps every payment for `replacement` (a spent one).
#[derive(Clone)]
struct Replaying {
    inner: Hyper,
    replacement: Arc<Mutex<Option<String>>>,
}

impl Service<Request<Full<Bytes>>> for Replaying {
    type Response = Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<Request<Full<Bytes>>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut request: Request<Full<Bytes>>) -> Self::Future {
        let mut replacement = self.replacement.lock().unwrap();
        if let Some(payment) = request.headers().get("payment-signature") {
            match replacement.as_ref() {
                Some(spent) => {
                    request
                        .headers_mut()
                        .insert("payment-signature", spent.parse().unwrap());
                }
                None => *replacement = Some(payment.to_str().unwrap().to_owned()),
            }
        }
        Box::pin(self.inner.request(request))
    }
}

#[tokio::test]
async fn a_replayed_payment_is_a_payment_error() {
    // Without the payment identifier (with it, the replayed payment carries
    // the first request's id and gets its stored answer) and without
    // sign-in-with-x (with it, the client signs in for the request it paid
    // before and never resends a payment).
    let server = Server::start(Config {
        payment_id: walletgate::x402::server::payment_id::PaymentIdentifier::Off,
        siwx: false,
        ..Config::default()
    })
    .await;
    let waits = Arc::new(Waits::default());
    let replaying = Replaying {
        inner: hyper(),
        replacement: Arc::default(),
    };
    let client = ServiceBuilder::new()
        .layer(layer(dev_key(7), &waits))
        .service(replaying);
    let request = || {
        post(
            &server,
            path(Endpoint::Chat),
            &body(Endpoint::Chat, PAID_MODEL, "hello", false),
        )
    };
    client.clone().oneshot(request()).await.unwrap();
    let error = payment_error(client.oneshot(request()).await);
    assert_eq!(error.code(), Some(ErrorCode::PaymentReplay), "{error}");
    assert_eq!(server.ledger.settlements(), 1);
}

#[tokio::test]
async fn the_client_signs_in_for_a_request_it_paid_before_and_pays_once() {
    let server = Server::start(Config::default()).await;
    let waits = Arc::new(Waits::default());
    let paying = layer(dev_key(8), &waits);
    let client = ServiceBuilder::new().layer(paying.clone()).service(hyper());
    let request = |prompt: &str| {
        post(
            &server,
            path(Endpoint::Chat),
            &body(Endpoint::Chat, PAID_MODEL, prompt, false),
        )
    };
    let first = client.clone().oneshot(request("hello")).await.unwrap();
    let first = first.into_body().collect().await.unwrap().to_bytes();
    let again = client.clone().oneshot(request("hello")).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.into_body().collect().await.unwrap().to_bytes(), first);
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(paying.signer().signatures(), 1);
    // Another request was never paid for: paid now.
    let other = client.oneshot(request("another")).await.unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(server.ledger.settlements(), 2);
}

#[tokio::test]
async fn model_unavailable_fails_over_to_another_providers_same_tier_model() {
    let mut faults = HashMap::new();
    faults.insert(
        PAID_MODEL.to_owned(),
        Fault::preset("model_unavailable").unwrap(),
    );
    let server = Server::start(Config {
        faults,
        ..Config::default()
    })
    .await;
    let waits = Arc::new(Waits::default());
    let payer = DevLedger::DEV_ACCOUNTS[8];
    let plain = ServiceBuilder::new()
        .layer(layer(dev_key(8), &waits))
        .service(hyper());
    let request = || {
        post(
            &server,
            path(Endpoint::Chat),
            &body(Endpoint::Chat, PAID_MODEL, "hello", false),
        )
    };
    match plain.oneshot(request()).await {
        Err(ClientError::Api(error)) => {
            assert_eq!(error.status, 503);
            assert_eq!(error.code.as_deref(), Some("MODEL_UNAVAILABLE"));
        }
        other => panic!("{other:?}"),
    }
    let client = ServiceBuilder::new()
        .layer(layer(dev_key(8), &waits).with_failover(Failover::new()))
        .service(hyper());
    let response = client.oneshot(request()).await.unwrap();
    let (receipt, answer) = text(response).await;
    let answered: Value = serde_json::from_str(&answer).unwrap();
    let model = answered["model"].as_str().unwrap();
    assert!(!model.starts_with("openai/"), "{model}");
    let listing = server.get("/v1/models").await.json();
    let row = |id: &str| {
        listing["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(row(model)["tier"], row(PAID_MODEL)["tier"]);
    // Only the answered request was paid; the refused one never settled.
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(
        server.balance(payer),
        DevLedger::DEV_ACCOUNT_FUNDS - receipt.unwrap().amount().units()
    );
}

#[tokio::test]
async fn verification_unavailable_resends_the_same_signature() {
    let faults = Arc::new(PaymentFaults::default());
    faults.unavailable_verifies.store(2, Ordering::SeqCst);
    let server = Server::start(Config {
        payment_faults: faults.clone(),
        ..Config::default()
    })
    .await;
    let waits = Arc::new(Waits::default());
    let layer = layer(dev_key(3), &waits);
    let client = ServiceBuilder::new().layer(layer.clone()).service(hyper());
    let request = post(
        &server,
        path(Endpoint::Messages),
        &body(Endpoint::Messages, PAID_MODEL, "hello", false),
    );
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(layer.signer().signatures(), 1);
    // The gateway's Retry-After (5 s) each time, waited on the recording sleeper.
    assert_eq!(*waits.0.lock().unwrap(), [Duration::from_secs(5); 2]);
    assert_eq!(server.ledger.settlements(), 1);

    // Bounded: more unavailability than retries is a payment error that says so.
    faults.unavailable_verifies.store(5, Ordering::SeqCst);
    let client = ServiceBuilder::new()
        .layer(layer.with_retry(RetryPolicy::default().with_verification_retries(1)))
        .service(hyper());
    let request = post(
        &server,
        path(Endpoint::Chat),
        &body(Endpoint::Chat, PAID_MODEL, "hello", false),
    );
    let error = payment_error(client.oneshot(request).await);
    assert_eq!(
        error.code(),
        Some(ErrorCode::PaymentVerificationUnavailable)
    );
    assert_eq!(error.attempts.verification_retries, 1);
}

#[tokio::test]
async fn a_402_after_paying_gets_no_second_signature() {
    let faults = Arc::new(PaymentFaults::default());
    faults.refuse_settle.store(true, Ordering::SeqCst);
    let server = Server::start(Config {
        payment_faults: faults,
        ..Config::default()
    })
    .await;
    let waits = Arc::new(Waits::default());
    let calls = Arc::new(AtomicU64::new(0));
    let signer = Counting {
        inner: dev_key(2),
        calls: calls.clone(),
    };
    let client = ServiceBuilder::new()
        .layer(layer(signer, &waits))
        .service(hyper());
    let request = post(
        &server,
        path(Endpoint::Chat),
        &body(Endpoint::Chat, PAID_MODEL, "hello", false),
    );
    let error = payment_error(client.oneshot(request).await);
    assert_eq!(error.code(), Some(ErrorCode::SettlementFailed), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(error.attempts.requests, 2);
    server.assert_nothing_settled();
}

/// Runs `walletgate pay` with `key` in the environment (or none); exit code, stdout, stderr.
pub(crate) async fn walletgate_pay(args: &[&str], key: Option<&str>) -> (i32, String, String) {
    let mut all = vec!["pay"];
    all.extend_from_slice(args);
    walletgate(&all, key).await
}

/// Runs `walletgate` with `key` in the environment (or none); exit code, stdout, stderr.
async fn walletgate(args: &[&str], key: Option<&str>) -> (i32, String, String) {
    let mut command = tokio::process::Command::new(crate::tests::walletgate_binary());
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(key) = key {
        command.env("WALLETGATE_PRIVATE_KEY", key);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("walletgate pay finished")
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Nothing printed holds a key, a signature (65 bytes of hex) or a JWT-style token.
pub(crate) fn assert_no_secret(printed: &str, keys: &[&str]) {
    for key in keys {
        let bare = key.trim_start_matches("0x");
        assert!(!printed.contains(bare), "a key was printed");
    }
    assert!(!printed.contains("eyJ"), "a token was printed: {printed}");
    let longest_hex = printed
        .split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(
        longest_hex < 130,
        "a signature-sized hex run was printed: {printed}"
    );
    assert!(
        !printed.to_ascii_lowercase().contains("payment-signature"),
        "{printed}"
    );
}

/// `walletgate pay --prefer-upto` of a streamed chat with `max_tokens: 4000`
/// on the embedded default: charged the tokens it used (the development
/// ledger moves exactly that), its one stderr line says so, and it agrees
/// with the stream's final receipt event.
#[tokio::test]
async fn walletgate_pay_prefer_upto_is_charged_what_a_stream_used() {
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[8];
    let key = format!("0x{}", DEV_KEYS[8]);
    let url = server.url("/v1/chat/completions");
    let data = json!({"model": PAID_MODEL, "max_tokens": 4000, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let (code, stdout, stderr) = walletgate_pay(
        &[&url, "--data", &data, "--max-usd", "0.10", "--prefer-upto"],
        Some(&key),
    )
    .await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let moved = DevLedger::DEV_ACCOUNT_FUNDS - server.balance(payer);
    let settled = crate::tests::stream_settlement(&stdout);
    assert_eq!(settled.amount.unwrap().units(), moved);
    let quote = server
        .post_once("/v1/chat/completions", data.clone(), None)
        .await
        .quote();
    let ceiling = quote.accepts[0].amount.units();
    assert!(moved * 2 < ceiling, "{moved} of a {ceiling} ceiling");
    let usd = walletgate::x402::wire::AtomicAmount::new(moved).to_decimal_string(6);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(&format!("paid {usd} USD from {payer}")),
        "{stderr}"
    );
    // stdout is the stream, its receipt event base64 JSON: no key in it.
    assert!(!stdout.contains(key.trim_start_matches("0x")));
    assert_no_secret(&stderr, &[&key]);
}

#[tokio::test]
async fn walletgate_pay_prints_the_answer_and_one_receipt_line() {
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[7];
    let key = format!("0x{}", DEV_KEYS[7]);
    let url = server.url("/v1/chat/completions");
    let data = body(Endpoint::Chat, PAID_MODEL, "hello from the cli", false).to_string();
    let (code, stdout, stderr) =
        walletgate_pay(&[&url, "--data", &data, "--max-usd", "0.10"], Some(&key)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "echo: hello from the cli"
    );
    let receipt: Vec<&str> = stderr.lines().collect();
    assert_eq!(receipt.len(), 1, "{stderr}");
    assert!(
        receipt[0].contains(payer) && receipt[0].contains("eip155:84532"),
        "{stderr}"
    );
    let moved = DevLedger::DEV_ACCOUNT_FUNDS - server.balance(payer);
    let usd = walletgate::x402::wire::AtomicAmount::new(moved).to_decimal_string(6);
    assert!(
        receipt[0].contains(&format!("paid {usd} USD")),
        "{stderr} vs {usd}"
    );
    assert_no_secret(&stdout, &[&key]);
    assert_no_secret(&stderr, &[&key]);

    // A key with no funds (from a file): exit 4 (payment), "check balance", nothing settled twice.
    let stranger = format!("{:x}", B256::repeat_byte(0x42));
    let key_file = std::env::temp_dir().join(format!("walletgate-key-{}", std::process::id()));
    std::fs::write(&key_file, &stranger).unwrap();
    let (code, stdout, stderr) = walletgate_pay(
        &[
            &url,
            "--data",
            &data,
            "--key-file",
            key_file.to_str().unwrap(),
        ],
        None,
    )
    .await;
    let _ = std::fs::remove_file(&key_file);
    assert_eq!(code, 4, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("check balance"), "{stderr}");
    assert_no_secret(&stdout, &[&stranger]);
    assert_no_secret(&stderr, &[&stranger]);
    assert_eq!(server.ledger.settlements(), 1);

    // Over --max-usd: exit 4 (payment declined), nothing signed; no key at
    // all: exit 2 (authentication).
    let (code, _, stderr) =
        walletgate_pay(&[&url, "--data", &data, "--max-usd", "0.0001"], Some(&key)).await;
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("maximum per payment"), "{stderr}");
    let (code, _, stderr) = walletgate_pay(&[&url, "--data", &data], None).await;
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(server.ledger.settlements(), 1);
}

#[tokio::test]
async fn walletgate_pay_run_twice_with_one_idempotency_key_pays_once() {
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[6];
    let key = format!("0x{}", DEV_KEYS[6]);
    let url = server.url("/v1/chat/completions");
    let data = body(Endpoint::Chat, PAID_MODEL, "once only", false).to_string();
    let args = [&url, "-d", &data, "--idempotency-key", "order-2026-000001"];
    let (code, first, stderr) = walletgate_pay(&args, Some(&key)).await;
    assert_eq!(code, 0, "{stderr}");
    let charged = server.balance(payer);
    assert!(charged < DevLedger::DEV_ACCOUNT_FUNDS);
    // The second run signs a fresh authorization: the gateway answers it from
    // the id's stored answer and never settles it.
    let (code, second, stderr) = walletgate_pay(&args, Some(&key)).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(first, second);
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(server.balance(payer), charged);
    // A malformed key is a usage error before anything is sent.
    let (code, _, stderr) = walletgate_pay(
        &[&url, "-d", &data, "--idempotency-key", "short"],
        Some(&key),
    )
    .await;
    assert_eq!(code, 64, "{stderr}");
}

/// The one JSON document `--format json` prints on stdout.
fn json_out(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("not one JSON document: {stdout}"))
}

#[tokio::test]
async fn walletgate_pay_dry_run_prints_the_offer_and_signs_nothing() {
    let server = Server::start(Config::default()).await;
    let url = server.url("/v1/chat/completions");
    let data = body(Endpoint::Chat, PAID_MODEL, "only a quote", false).to_string();
    // No key at all: nothing could be signed.
    let (code, stdout, stderr) =
        walletgate_pay(&[&url, "-d", &data, "--dry-run", "--format", "json"], None).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let report = json_out(&stdout);
    assert_eq!(report["wouldPay"], true, "{report}");
    assert_eq!(report["offer"]["network"], "eip155:84532", "{report}");
    assert!(report["offer"]["amount"].as_str().is_some(), "{report}");
    assert_eq!(report["protocol"], "x402", "{report}");
    assert_no_secret(&stdout, &[]);
    // --protocol mpp: the offer MPP's challenge asks, the same amount.
    let (code, stdout, stderr) = walletgate_pay(
        &[
            &url,
            "-d",
            &data,
            "--dry-run",
            "--format",
            "json",
            "--protocol",
            "mpp",
        ],
        None,
    )
    .await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let mpp = json_out(&stdout);
    assert_eq!(mpp["protocol"], "mpp", "{mpp}");
    assert_eq!(mpp["offer"]["amount"], report["offer"]["amount"], "{mpp}");
    assert_eq!(mpp["offer"]["payTo"], report["offer"]["payTo"], "{mpp}");

    // The same offer over --max-usd: the verdict says why, exit 4.
    let (code, stdout, _) = walletgate_pay(
        &[&url, "-d", &data, "--dry-run", "--max-usd", "0.0001"],
        None,
    )
    .await;
    assert_eq!(code, 4, "{stdout}");
    assert!(stdout.contains("maximum per payment"), "{stdout}");
    server.assert_nothing_settled();
}

#[tokio::test]
async fn walletgate_exit_codes_and_json_errors_follow_the_contract() {
    let server = Server::start(Config::default()).await;
    let url = server.url("/v1/chat/completions");
    let data = body(Endpoint::Chat, PAID_MODEL, "contract", false).to_string();
    let key = format!("0x{}", DEV_KEYS[8]);

    // Usage (64): a flag clap does not know, as a JSON error too.
    let (code, stdout, stderr) =
        walletgate_pay(&[&url, "--no-such-flag", "--format", "json"], Some(&key)).await;
    assert_eq!(code, 64, "{stderr}");
    let error = json_out(&stdout);
    assert_eq!(error["error"]["kind"], "usage");
    assert_eq!(error["error"]["exit"], 64);
    assert!(stderr.contains("--no-such-flag"), "{stderr}");

    // Usage with a cause: the file that cannot be read, on stdout as JSON
    // and on stderr as one plain chain.
    let (code, stdout, stderr) = walletgate_pay(
        &[
            &url,
            "--data-file",
            "/nonexistent/body.json",
            "--format",
            "json",
        ],
        Some(&key),
    )
    .await;
    assert_eq!(code, 64, "{stderr}");
    let error = json_out(&stdout);
    let causes = error["error"]["causes"].as_array().unwrap();
    assert!(!causes.is_empty(), "{error}");
    assert!(stderr.contains("/nonexistent/body.json: "), "{stderr}");
    assert!(stderr.contains(causes[0].as_str().unwrap()), "{stderr}");

    // Authentication (2): no key.
    let (code, stdout, _) = walletgate_pay(&[&url, "-d", &data, "--format", "json"], None).await;
    assert_eq!(code, 2);
    assert_eq!(json_out(&stdout)["error"]["kind"], "authentication");

    // Payment (4): over the cap, nothing signed.
    let (code, stdout, stderr) = walletgate_pay(
        &[&url, "-d", &data, "--max-usd", "0.0001", "--format", "json"],
        Some(&key),
    )
    .await;
    assert_eq!(code, 4, "{stderr}");
    let error = json_out(&stdout);
    assert_eq!(error["error"]["kind"], "payment");
    assert!(stderr.contains("maximum per payment"), "{stderr}");
    assert_no_secret(&stdout, &[&key]);
    assert_no_secret(&stderr, &[&key]);

    // A key on the command line is refused before anything reads it.
    let (code, stdout, stderr) = walletgate_pay(&[&url, "--private-key", &key], None).await;
    assert_eq!(code, 64);
    assert_no_secret(&stdout, &[&key]);
    assert_no_secret(&stderr, &[&key]);
    server.assert_nothing_settled();

    // Help and version are answers (0, on stdout); `pay --help` lists no
    // data API flag and ends with the exit-code table.
    let (code, help, _) = walletgate_pay(&["--help"], None).await;
    assert_eq!(code, 0);
    for ignored in ["--base-url", "--api-key", "--params"] {
        assert!(!help.contains(ignored), "pay --help lists {ignored}");
    }
    assert!(
        help.contains("--dry-run") && help.contains("Examples:"),
        "{help}"
    );
    assert!(help.contains("[env: WALLETGATE_PRIVATE_KEY]"), "{help}");
    assert!(
        help.trim_end()
            .ends_with("64  usage (an unknown flag, a missing argument, unusable input)"),
        "{help}"
    );
    let (code, version, _) = walletgate(&["--version"], None).await;
    assert_eq!((code, version.starts_with("walletgate ")), (0, true));
    let (code, script, _) = walletgate(&["completions", "bash"], None).await;
    assert_eq!(code, 0);
    assert!(script.contains("walletgate"), "{script}");
}

#[tokio::test]
async fn walletgate_pay_signs_with_a_keystore_file() {
    use rand::SeedableRng;

    let server = Server::start(Config::default()).await;
    let url = server.url("/v1/chat/completions");
    let data = body(Endpoint::Chat, PAID_MODEL, "from a keystore", false).to_string();
    let dir = std::env::temp_dir().join(format!("walletgate-keystore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let password = "correct horse battery staple";
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    let key = alloy_primitives::hex::decode(DEV_KEYS[6]).unwrap();
    let (signer, _) =
        PrivateKeySigner::encrypt_keystore(&dir, &mut rng, &key, password, Some("dev6")).unwrap();
    assert_eq!(
        signer.address().to_checksum(None),
        DevLedger::DEV_ACCOUNTS[6]
    );
    let keystore = dir.join("dev6");
    let password_file = dir.join("password");
    std::fs::write(&password_file, format!("{password}\n")).unwrap();
    let keystore_args = |password_file: &std::path::Path| {
        vec![
            "--keystore".to_owned(),
            keystore.to_str().unwrap().to_owned(),
            "--keystore-password-file".to_owned(),
            password_file.to_str().unwrap().to_owned(),
        ]
    };
    let mut args = vec![url.clone(), "-d".to_owned(), data.clone()];
    args.extend(keystore_args(&password_file));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = walletgate_pay(&args, None).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains(DevLedger::DEV_ACCOUNTS[6]), "{stderr}");
    assert_eq!(server.ledger.settlements(), 1);
    for printed in [&stdout, &stderr] {
        assert_no_secret(printed, &[DEV_KEYS[6]]);
        assert!(!printed.contains(password));
    }

    // A wrong password: authentication (2), nothing paid.
    let wrong = dir.join("wrong");
    std::fs::write(&wrong, "not the password").unwrap();
    let mut args = vec![url.clone(), "-d".to_owned(), data.clone()];
    args.extend(keystore_args(&wrong));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, stderr) = walletgate_pay(&args, None).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("keystore"), "{stderr}");
    assert_eq!(server.ledger.settlements(), 1);
}

#[tokio::test]
async fn walletgate_pay_polls_a_paid_image_job_to_completion() {
    let server = Server::start(Config {
        image_job: Duration::from_millis(1_200),
        ..Config::default()
    })
    .await;
    let url = server.url("/api/v1/images/generations");
    let data = json!({"model": "openai/dall-e-3", "prompt": "a red fox", "n": 1}).to_string();
    let key = format!("0x{}", DEV_KEYS[4]);
    let (code, stdout, stderr) = walletgate_pay(&[&url, "-d", &data], Some(&key)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let done: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert!(stderr.contains(DevLedger::DEV_ACCOUNTS[4]), "{stderr}");
    // Polling replays the payment uncharged: one settlement, charged once
    // what the receipt line says.
    assert_eq!(server.ledger.settlements(), 1);
    let moved = DevLedger::DEV_ACCOUNT_FUNDS - server.balance(DevLedger::DEV_ACCOUNTS[4]);
    let usd = walletgate::x402::wire::AtomicAmount::new(moved).to_decimal_string(6);
    assert!(
        stderr.contains(&format!("paid {usd} USD")),
        "{stderr} vs {usd}"
    );
    assert_no_secret(&stdout, &[&key]);
    assert_no_secret(&stderr, &[&key]);
}

/// `walletgate pay --offer-signatures require` against a gateway that signs
/// its offers: the key published in `/.well-known/x402` is found and the
/// metered answer's receipt and usage statement hold; a pinned key that is
/// not the gateway's refuses to sign, and nothing moves.
#[tokio::test]
async fn walletgate_pay_checks_signed_offers_against_the_published_key() {
    // Public development keys (Hardhat/Anvil #5 signs; #6 is not the gateway's).
    let signer = walletgate::x402::server::OfferSigner::from_hex(
        "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    )
    .unwrap();
    let server = Server::start(Config {
        offer_signer: Some(signer),
        ..Config::default()
    })
    .await;
    let payer = DevLedger::DEV_ACCOUNTS[6];
    let key = format!("0x{}", DEV_KEYS[6]);
    let url = server.url("/v1/chat/completions");
    let data = json!({"model": PAID_MODEL, "max_tokens": 4000, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let pay = [
        "--data",
        &data,
        "--prefer-upto",
        "--offer-signatures",
        "require",
    ];
    let (code, stdout, stderr) = walletgate_pay(
        &[
            &[url.as_str()][..],
            &pay,
            &["--offer-signer", DevLedger::DEV_ACCOUNTS[6]],
        ]
        .concat(),
        Some(&key),
    )
    .await;
    assert_eq!(
        code, 4,
        "payment declined; stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stderr.contains("not the server's key"), "{stderr}");
    assert_eq!(
        server.balance(payer),
        DevLedger::DEV_ACCOUNT_FUNDS,
        "nothing moved"
    );
    let (code, stdout, stderr) =
        walletgate_pay(&[&[url.as_str()][..], &pay].concat(), Some(&key)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let settled = crate::tests::stream_settlement(&stdout);
    assert!(walletgate::x402::wire::usage_of(&settled).is_some());
    assert!(server.balance(payer) < DevLedger::DEV_ACCOUNT_FUNDS);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_no_secret(&stderr, &[&key]);
}

/// On the gateway, which offers x402 and MPP on one 402: the layer pays
/// through x402 by default (`PAYMENT-RESPONSE`) and through MPP when told
/// (`Payment-Receipt`); `walletgate pay --protocol mpp` pays the quoted
/// amount with the same one receipt line, and a bad `--protocol` is usage.
#[tokio::test]
async fn mpp_is_paid_when_told_and_x402_by_default() {
    use walletgate::client::pay::Protocol;
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[3];
    let waits = Arc::new(Waits::default());
    for protocol in [Protocol::X402, Protocol::Mpp] {
        let client = ServiceBuilder::new()
            .layer(
                layer(dev_key(3), &waits).with_policy(SpendPolicy::new().with_protocol(protocol)),
            )
            .service(hyper());
        let before = server.balance(payer);
        let request = post(
            &server,
            "/v1/chat/completions",
            &body(Endpoint::Chat, PAID_MODEL, "hello", false),
        );
        let response = client.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let mpp = protocol == Protocol::Mpp;
        // The gateway's MPP answer carries PAYMENT-RESPONSE too; x402's no receipt.
        assert_eq!(response.headers().contains_key("payment-receipt"), mpp);
        assert!(response.headers().contains_key("payment-response"));
        let (receipt, answer) = text(response).await;
        assert!(answer.contains("hello"), "{answer}");
        let receipt = receipt.unwrap();
        assert_eq!(receipt.protocol(), protocol);
        assert_eq!(receipt.mpp_receipt().is_some(), mpp);
        let settlement = receipt.settlement().expect("settled");
        assert!(settlement.success && settlement.transaction.starts_with("0x"));
        assert_eq!(server.balance(payer), before - receipt.amount().units());
    }
    assert_eq!(server.ledger.settlements(), 2);

    let payer = DevLedger::DEV_ACCOUNTS[2];
    let key = format!("0x{}", DEV_KEYS[2]);
    let url = server.url("/v1/chat/completions");
    let data = body(Endpoint::Chat, PAID_MODEL, "hello over mpp", false).to_string();
    let quote = server
        .post_once("/v1/chat/completions", data.clone(), None)
        .await;
    let price = quote.quote().accepts[0].amount.units();
    let (code, stdout, stderr) =
        walletgate_pay(&[&url, "--data", &data, "--protocol", "mpp"], Some(&key)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("echo: hello over mpp"), "{stdout}");
    assert_eq!(server.balance(payer), DevLedger::DEV_ACCOUNT_FUNDS - price);
    let usd = walletgate::x402::wire::AtomicAmount::new(price).to_decimal_string(6);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "paid {usd} USD from {payer} on eip155:84532 tx 0x"
        )),
        "{stderr}"
    );
    assert_no_secret(&stdout, &[&key]);
    assert_no_secret(&stderr, &[&key]);
    assert!(!stderr.contains("Payment "), "{stderr}");
    let (code, _, stderr) =
        walletgate_pay(&[&url, "--data", &data, "--protocol", "tempo"], Some(&key)).await;
    assert_eq!(code, 64, "{stderr}");
    assert_eq!(server.ledger.settlements(), 3);
}

//! End-to-end tests over real TCP: the gateway on `127.0.0.1:0`, a plain
//! HTTP/1.1 client, and for the HTTP upstream a scripted OpenAI-compatible
//! server on loopback.
//!
//! This file is the harness; the tests live beside it, one file per concern.

mod answers;
mod errors;
mod pipeline;
mod upstream;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::envelope::ErrorCode;
use walletgate::x402::{
    facilitator::DevLedger,
    wire::{PaymentRequired, SettleResponse, TokenId, codec},
};

use crate::app;
use crate::catalogue::{Catalogue, Model, Pricing};
use crate::config::Config;
pub(crate) use crate::node::node_json;
use crate::request::Endpoint;
use crate::upstream::{ApiKey, Fault};

pub(crate) const ENDPOINTS: [Endpoint; 3] =
    [Endpoint::Chat, Endpoint::Messages, Endpoint::Responses];

pub(crate) fn path(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "/v1/chat/completions",
        Endpoint::Messages => "/v1/messages",
        Endpoint::Responses => "/v1/responses",
    }
}

/// A one-turn request body in `endpoint`'s schema.
pub(crate) fn body(endpoint: Endpoint, model: &str, text: &str, stream: bool) -> Value {
    match endpoint {
        Endpoint::Chat => json!({"model": model, "stream": stream, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": text}
        ]}),
        Endpoint::Messages => json!({"model": model, "stream": stream, "max_tokens": 256,
            "system": "be brief", "messages": [{"role": "user", "content": text}]}),
        Endpoint::Responses => json!({"model": model, "stream": stream,
            "instructions": "be brief", "input": text}),
    }
}

/// A body with only system instructions.
fn system_only(endpoint: Endpoint) -> Value {
    match endpoint {
        Endpoint::Chat => {
            json!({"model": "openai/gpt-5-mini", "messages": [{"role": "system", "content": "rules"}]})
        }
        Endpoint::Messages => {
            json!({"model": "openai/gpt-5-mini", "max_tokens": 5, "system": "rules", "messages": []})
        }
        Endpoint::Responses => {
            json!({"model": "openai/gpt-5-mini", "instructions": "rules", "input": []})
        }
    }
}

pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// The settlement a paid stream's text ends with (its last
/// `event: payment-response`), decoded.
pub(crate) fn stream_settlement(text: &str) -> walletgate::x402::wire::SettleResponse {
    let event = text
        .lines()
        .skip_while(|line| *line != "event: payment-response")
        .nth(1)
        .and_then(|line| line.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("the receipt is the last event: {text}"));
    walletgate::x402::wire::codec::decode(event.as_bytes()).unwrap()
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The decoded `PAYMENT-REQUIRED` quote of a 402.
    pub(crate) fn quote(&self) -> PaymentRequired {
        let header = self
            .header("payment-required")
            .unwrap_or_else(|| panic!("no PAYMENT-REQUIRED: {}", self.text()));
        codec::decode(header.as_bytes()).unwrap()
    }
}

/// Runs one of the official x402 clients in `tests/interop/x402`
/// (`node <script> <args…>`, its packages installed) with `env`, for at most
/// `limit`: the one JSON line it prints. Panics (with its output) if it fails.
pub(crate) async fn official_client(
    script: &str,
    args: &[&str],
    env: &[(&str, String)],
    limit: Duration,
) -> Value {
    node_json("x402", "@x402/evm", script, args, env, None, limit).await
}

/// Unix seconds now, as the server's system clock reads it.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Distinct EIP-3009 nonces for every payment a test signs.
static NEXT_NONCE: AtomicU64 = AtomicU64::new(1);

pub(crate) fn fresh_nonce() -> u64 {
    NEXT_NONCE.fetch_add(1, Ordering::Relaxed)
}

#[derive(Clone)]
pub(crate) struct Server {
    pub(crate) address: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The ledger the server settles on.
    pub(crate) ledger: Arc<DevLedger>,
    /// Who pays when [`post`](Self::post) meets a quote: development account 1.
    pub(crate) payer: Payer,
}

/// Serves `router` on a fresh loopback port, as `main` does (with the peer address).
pub(crate) async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_on(listener, router)
}

/// Serves `router` on `listener`.
pub(crate) fn serve_on(listener: TcpListener, router: Router) -> SocketAddr {
    let address = listener.local_addr().unwrap();
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await.unwrap() });
    address
}

impl Server {
    /// Serves `config` on a fresh loopback port; its quotes name that port
    /// unless `config` has a public URL, as in `main`.
    pub(crate) async fn start(mut config: Config) -> Self {
        let ledger = config.ledger.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        config.bound_to(listener.local_addr().unwrap());
        Self {
            address: serve_on(listener, app(config).unwrap()),
            client: Client::builder(TokioExecutor::new()).build_http(),
            ledger,
            payer: Payer::dev(1),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub(crate) async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        let response = self.client.request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    }

    /// POSTs `body` once, with `payment` as `PAYMENT-SIGNATURE` if given.
    pub(crate) async fn post_once(
        &self,
        path: &str,
        body: impl Into<Bytes>,
        payment: Option<&str>,
    ) -> Reply {
        let mut request = Request::post(self.url(path)).header("content-type", "application/json");
        if let Some(payment) = payment {
            request = request.header("payment-signature", payment);
        }
        self.send(request.body(Full::new(body.into())).unwrap())
            .await
    }

    /// POSTs `body`; a 402 quote is paid by [`payer`](Self::payer) and the
    /// request sent again with the payment, as the client SDKs do.
    pub(crate) async fn post_bytes(&self, path: &str, body: impl Into<Bytes>) -> Reply {
        let body = body.into();
        let first = self.post_once(path, body.clone(), None).await;
        if first.status != StatusCode::PAYMENT_REQUIRED {
            return first;
        }
        let payment = self.sign(&first, &self.payer);
        self.post_once(path, body, Some(&payment)).await
    }

    /// A `PAYMENT-SIGNATURE` by `payer` for the first offer of `quote`.
    pub(crate) fn sign(&self, quote: &Reply, payer: &Payer) -> String {
        let offer = quote.quote().accepts[0].clone();
        payer
            .header_with_nonce(&offer, now_secs(), sequential_nonce(fresh_nonce()))
            .unwrap()
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> Reply {
        self.post_bytes(path, body.to_string()).await
    }

    /// `address`'s Base Sepolia USDC balance on the server's ledger.
    pub(crate) fn balance(&self, address: &str) -> u128 {
        self.ledger
            .balance_of(&DevLedger::base_sepolia_usdc(), address.parse().unwrap())
    }

    /// Nothing was ever settled: no transfer, every development account untouched.
    pub(crate) fn assert_nothing_settled(&self) {
        assert_eq!(self.ledger.settlements(), 0);
        let token: TokenId = DevLedger::base_sepolia_usdc();
        for account in DevLedger::DEV_ACCOUNTS {
            assert_eq!(
                self.ledger.balance_of(&token, account.parse().unwrap()),
                DevLedger::DEV_ACCOUNT_FUNDS,
                "{account}"
            );
        }
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        let request = Request::get(format!("http://{}{path}", self.address))
            .body(Full::new(Bytes::new()))
            .unwrap();
        self.send(request).await
    }
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// The embedded catalogue plus a paid (`faulty/<preset>`) and a free
/// (`faultyfree/<preset>`) model per fault preset, and a model with an
/// eight-token context window.
pub(crate) fn fault_config() -> Config {
    let mut models: Vec<Arc<Model>> = Catalogue::embedded_models();
    let mut config = Config::default();
    let template = |id: &'static str, pricing| Model {
        id,
        name: "test model",
        description: "fault injection",
        context_window: 100_000,
        max_output: 4_096,
        categories: &["chat"],
        pricing,
        streaming: true,
        created: 0,
    };
    for preset in Fault::preset_names() {
        for (prefix, pricing) in [
            (
                "faulty",
                Pricing::PerToken {
                    input_micros_per_million: 1,
                    output_micros_per_million: 1,
                },
            ),
            ("faultyfree", Pricing::Free),
        ] {
            let id = leak(format!("{prefix}/{preset}"));
            models.push(Arc::new(template(id, pricing)));
            config
                .faults
                .insert(id.to_owned(), Fault::preset(preset).unwrap());
        }
    }
    models.push(Arc::new(Model {
        context_window: 8,
        ..template("tiny/context", Pricing::Free)
    }));
    config.catalogue = Catalogue::new(models);
    config.upstream_timeout = Duration::from_millis(100);
    config.body_limit_bytes = 16 * 1024;
    config
}

/// Status, JSON content type and `Retry-After` of an error reply; returns
/// the context for further assertions.
pub(crate) fn assert_status_and_headers(
    endpoint: Endpoint,
    reply: &Reply,
    code: ErrorCode,
) -> String {
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
    context
}

/// Status, envelope shape and `Retry-After` of an error reply, per endpoint style.
pub(crate) fn assert_envelope(endpoint: Endpoint, reply: &Reply, code: ErrorCode) {
    let context = assert_status_and_headers(endpoint, reply, code);
    let body = reply.json();
    let error_type = code.error_type().as_str();
    match endpoint {
        Endpoint::Chat => {
            assert_eq!(body["error"]["code"], code.as_str(), "{context}");
            assert_eq!(body["error"]["type"], error_type, "{context}");
            assert!(body["error"].get("param").is_some(), "{context}");
            assert_eq!(body["code"], code.as_str(), "{context}");
            assert_eq!(body["message"], body["error"]["message"], "{context}");
        }
        Endpoint::Messages => {
            assert_eq!(body["type"], "error", "{context}");
            assert_eq!(body["error"]["type"], error_type, "{context}");
            assert!(body["error"]["message"].is_string(), "{context}");
            assert!(body.get("code").is_none(), "{context}");
        }
        Endpoint::Responses => {
            assert_eq!(body["error"]["code"], code.as_str(), "{context}");
            assert_eq!(body["error"]["type"], error_type, "{context}");
            assert!(body["error"]["message"].is_string(), "{context}");
            assert!(body["error"].get("param").is_some(), "{context}");
            assert!(body.get("code").is_none(), "{context}");
        }
    }
}

/// The `data:` payloads of an SSE body, in order; panics on any other line.
fn sse_data(text: &str) -> Vec<String> {
    let mut payloads = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty()) {
        if line.starts_with("event: ") {
            continue;
        }
        let payload = line
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not an SSE line: {line:?}"));
        payloads.push(payload.to_owned());
    }
    payloads
}

/// A `SIGN-IN-WITH-X` proof by `payer` over the challenge `quote` declares,
/// built as the official client builds it.
pub(crate) fn sign_in_proof(quote: &Reply, payer: &Payer) -> String {
    use base64::Engine as _;
    let extensions = quote.quote().extensions.unwrap();
    let challenge = &extensions["sign-in-with-x"];
    let info = &challenge["info"];
    let text = |key: &str| info[key].as_str().unwrap().to_owned();
    let chain = challenge["supportedChains"][0]["chainId"].as_str().unwrap();
    let message =
        walletgate::siwe::SiweMessage::from_fields(&walletgate::siwe::SiweMessageFields {
            scheme: None,
            domain: text("domain"),
            address: payer.address(),
            statement: None,
            uri: text("uri"),
            version: "1".to_owned(),
            chain_id: chain.trim_start_matches("eip155:").parse().unwrap(),
            nonce: text("nonce"),
            issued_at: text("issuedAt"),
            expiration_time: Some(text("expirationTime")),
            not_before: None,
            request_id: None,
            resources: Some(vec![text("uri")]),
        })
        .unwrap();
    let digest = alloy_primitives::eip191_hash_message(message.to_string().as_bytes());
    let signature = payer.sign_digest(digest);
    let proof = json!({
        "domain": info["domain"], "address": payer.address(), "uri": info["uri"],
        "version": "1", "chainId": chain, "type": "eip191", "nonce": info["nonce"],
        "issuedAt": info["issuedAt"], "expirationTime": info["expirationTime"],
        "resources": info["resources"],
        "signature": format!("0x{}", alloy_primitives::hex::encode(signature)),
    });
    base64::engine::general_purpose::STANDARD.encode(proof.to_string())
}

#[cfg(feature = "cli")]
/// The `walletgate` binary beside this test (`cargo test --all-features`
/// builds it; alone: `cargo build --features cli --bin walletgate`).
pub(crate) fn walletgate_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/examples/gateway-<hash> -> target/<profile>/walletgate
    let binary = exe.parent().unwrap().parent().unwrap().join("walletgate");
    assert!(
        binary.exists(),
        "{} is missing: cargo build --features cli --bin walletgate",
        binary.display()
    );
    binary
}

/// The log lines a `fmt` subscriber writes, kept for a test to read (up to
/// 64 MiB: a runaway log must not eat the machine).
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

const CAPTURED_MAX_BYTES: usize = 64 << 20;

impl Captured {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn text(&self) -> String {
        self.text_from(0)
    }

    /// What was written after the first `from` bytes.
    pub(crate) fn text_from(&self, from: usize) -> String {
        let captured = self.lock();
        String::from_utf8_lossy(&captured[from.min(captured.len())..]).into_owned()
    }

    /// How many bytes were written so far.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// A `fmt` subscriber at DEBUG, without colours, writing here.
    pub(crate) fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(self.clone())
            .with_ansi(false)
            .finish()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut captured = self.lock();
        if captured.len() + buf.len() <= CAPTURED_MAX_BYTES {
            captured.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

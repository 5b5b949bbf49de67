//! End-to-end tests over real TCP: the gateway on `127.0.0.1:0`, a plain
//! HTTP/1.1 client, and for the HTTP upstream a scripted OpenAI-compatible
//! server on loopback.

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
use walletgate::envelope::ErrorCode;
use walletgate::x402::{DevLedger, PaymentRequired, TokenId, codec};

use crate::app::app;
use crate::catalogue::{Catalogue, Model, Pricing, micro_usd};
use crate::config::Config;
use crate::extensions::{ParsedRequest, ResolvedModel};
use crate::gates::request_price;
use crate::request::{ChatRequest, Endpoint};
use crate::upstream::{ApiKey, Fault};
use crate::x402_support::Payer;

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
    let address = listener.local_addr().unwrap();
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await.unwrap() });
    address
}

impl Server {
    pub(crate) async fn start(config: Config) -> Self {
        let ledger = config.ledger.clone();
        Self {
            address: serve(app(config).unwrap()).await,
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
        payer.header(&offer, now_secs(), fresh_nonce())
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
fn fault_config() -> Config {
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

/// How to provoke a code.
enum Provoke {
    Bytes(Vec<u8>),
    Json(fn(Endpoint) -> Value),
    Model { model: &'static str, stream: bool },
}

#[tokio::test]
async fn every_non_payment_code_with_its_status_envelope_and_headers() {
    let server = Server::start(fault_config()).await;
    let scenarios: Vec<(ErrorCode, Provoke)> = vec![
        (
            ErrorCode::InvalidJson,
            Provoke::Bytes(b"{\"model\": ".to_vec()),
        ),
        (
            ErrorCode::InvalidRequestBody,
            Provoke::Json(|_| json!({"model": 5})),
        ),
        (ErrorCode::EmptyConversation, Provoke::Json(system_only)),
        (
            ErrorCode::RequestTooLarge,
            Provoke::Bytes(vec![b' '; 17 * 1024]),
        ),
        (
            ErrorCode::StreamUnsupported,
            Provoke::Model {
                model: "deepseek/deepseek-reasoner",
                stream: true,
            },
        ),
        (
            ErrorCode::InvalidParameter,
            Provoke::Model {
                model: "faulty/invalid_parameter",
                stream: false,
            },
        ),
        (
            ErrorCode::ContextLengthExceeded,
            Provoke::Model {
                model: "faulty/context_length",
                stream: false,
            },
        ),
        (
            ErrorCode::ContentFiltered,
            Provoke::Model {
                model: "faulty/content_filtered",
                stream: false,
            },
        ),
        (
            ErrorCode::InvalidImageUrl,
            Provoke::Model {
                model: "faulty/invalid_image_url",
                stream: true,
            },
        ),
        (
            ErrorCode::ReasoningFormatError,
            Provoke::Model {
                model: "faulty/reasoning_format",
                stream: false,
            },
        ),
        (
            ErrorCode::ToolIdFormatError,
            Provoke::Model {
                model: "faulty/tool_id_format",
                stream: false,
            },
        ),
        (
            ErrorCode::InvalidRequest,
            Provoke::Model {
                model: "faulty/invalid_request",
                stream: false,
            },
        ),
        (
            ErrorCode::ModelUnavailable,
            Provoke::Model {
                model: "faulty/model_unavailable",
                stream: false,
            },
        ),
        (
            ErrorCode::ModelUnavailable,
            Provoke::Model {
                model: "faulty/connect_refused",
                stream: true,
            },
        ),
        (
            ErrorCode::ProviderConfigError,
            Provoke::Model {
                model: "faulty/provider_config",
                stream: false,
            },
        ),
        (
            ErrorCode::RateLimited,
            Provoke::Model {
                model: "faulty/rate_limited",
                stream: false,
            },
        ),
        (
            ErrorCode::FreeModelFailed,
            Provoke::Model {
                model: "faultyfree/rate_limited",
                stream: false,
            },
        ),
        (
            ErrorCode::StreamFailed,
            Provoke::Model {
                model: "faultyfree/model_unavailable",
                stream: true,
            },
        ),
        (
            ErrorCode::Timeout,
            Provoke::Model {
                model: "faulty/hang",
                stream: false,
            },
        ),
        (
            ErrorCode::Timeout,
            Provoke::Model {
                model: "faulty/gateway_timeout",
                stream: true,
            },
        ),
        (
            ErrorCode::InternalError,
            Provoke::Model {
                model: "faulty/internal_error",
                stream: false,
            },
        ),
    ];
    let mut produced = HashSet::new();
    for (code, provoke) in &scenarios {
        for endpoint in ENDPOINTS {
            for base in ["", "/api"] {
                let url = format!("{base}{}", path(endpoint));
                let reply = match provoke {
                    Provoke::Bytes(bytes) => server.post_bytes(&url, bytes.clone()).await,
                    Provoke::Json(make) => server.post(&url, &make(endpoint)).await,
                    Provoke::Model { model, stream } => {
                        server
                            .post(&url, &body(endpoint, model, "hello", *stream))
                            .await
                    }
                };
                assert_envelope(endpoint, &reply, *code);
                produced.insert(*code);
            }
        }
    }
    // Payment codes belong to the payment layer, the free-tier limit to its layer.
    let missing: Vec<_> = ErrorCode::ALL
        .iter()
        .filter(|code| !code.is_payment() && **code != ErrorCode::FreeTierRateLimited)
        .filter(|code| !produced.contains(*code))
        .collect();
    assert!(missing.is_empty(), "never produced: {missing:?}");
    // Each paid one was paid for, and not one was charged.
    server.assert_nothing_settled();
}

#[tokio::test]
async fn rate_limited_names_the_family_and_other_providers() {
    let mut config = Config::default();
    config.faults.insert(
        "anthropic/claude-sonnet-4.6".into(),
        Fault::preset("rate_limited").unwrap(),
    );
    let server = Server::start(config).await;
    let reply = server
        .post(
            "/v1/chat/completions",
            &body(Endpoint::Chat, "anthropic/claude-sonnet-4.6", "hi", false),
        )
        .await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), Some("60"));
    assert_eq!(reply.header("x-ratelimit-source"), Some("anthropic"));
    let body = reply.json();
    assert_eq!(body["source"], "anthropic");
    assert_eq!(body["retry_after_seconds"], 60);
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("openai/gpt-5-mini"), "{message}");
    assert!(message.contains("google/gemini-2.5-flash"), "{message}");
    assert!(
        !message.contains("nvidia/"),
        "free models are another tier: {message}"
    );
    // The upstream's text is kept for debugging, its organisation id is not.
    let debug = body["debug"].as_str().unwrap();
    assert!(debug.contains("Rate limit reached"), "{debug}");
    assert!(!debug.contains("org-Xy12Ab34Cd56Ef78"), "{debug}");
}

#[tokio::test]
async fn unavailable_models_suggest_same_tier_failover() {
    let mut config = Config::default();
    config.faults.insert(
        "xai/grok-code-fast".into(),
        Fault::preset("model_unavailable").unwrap(),
    );
    config.faults.insert(
        "qwen/qwen3-coder".into(),
        Fault::preset("model_unavailable").unwrap(),
    );
    let server = Server::start(config).await;
    let flat = server
        .post(
            "/v1/chat/completions",
            &body(Endpoint::Chat, "xai/grok-code-fast", "hi", false),
        )
        .await
        .json();
    assert_eq!(flat["code"], "MODEL_UNAVAILABLE");
    assert!(
        flat["message"]
            .as_str()
            .unwrap()
            .contains("perplexity/sonar")
    );
    let free = server
        .post(
            "/v1/chat/completions",
            &body(Endpoint::Chat, "qwen/qwen3-coder", "hi", true),
        )
        .await;
    assert_eq!(free.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(free.header("retry-after"), Some("30"));
    let free = free.json();
    assert_eq!(free["code"], "STREAM_FAILED");
    assert!(
        free["message"]
            .as_str()
            .unwrap()
            .contains("nvidia/nemotron-super")
    );
}

#[tokio::test]
async fn upstream_debug_text_is_redacted_in_every_fault() {
    let server = Server::start(fault_config()).await;
    for preset in Fault::preset_names() {
        let reply = server
            .post(
                "/v1/chat/completions",
                &body(Endpoint::Chat, &format!("faulty/{preset}"), "hi", false),
            )
            .await;
        let text = reply.text();
        for secret in [
            "sk-proj-",
            "org-Xy12",
            "10.42.7.19",
            "34.102.136.180",
            "https://",
            "req_5Yb2",
            "oai-prod-eastus2-07",
        ] {
            assert!(!text.contains(secret), "{preset} leaks {secret}: {text}");
        }
    }
}

#[tokio::test]
async fn empty_conversation_names_the_endpoint_field() {
    let server = Server::start(Config::default()).await;
    for (endpoint, field) in [(Endpoint::Chat, "messages"), (Endpoint::Responses, "input")] {
        let reply = server.post(path(endpoint), &system_only(endpoint)).await;
        assert_envelope(endpoint, &reply, ErrorCode::EmptyConversation);
        assert_eq!(reply.json()["error"]["param"], field);
    }
}

#[tokio::test]
async fn invalid_request_body_lists_every_offending_path() {
    let server = Server::start(Config::default()).await;
    let reply = server
        .post(
            "/v1/chat/completions",
            &json!({"model": "openai/gpt-5-mini", "stream": 1,
                    "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": 5}]}),
        )
        .await;
    assert_envelope(Endpoint::Chat, &reply, ErrorCode::InvalidRequestBody);
    let details = reply.json()["details"].clone();
    let paths: Vec<Value> = details
        .as_array()
        .unwrap()
        .iter()
        .map(|detail| detail["path"].clone())
        .collect();
    assert_eq!(
        paths,
        vec![json!(["stream"]), json!(["messages", 1, "content"])]
    );
    assert!(details[0]["message"].is_string());
}

#[tokio::test]
async fn unknown_model_is_a_string_error_suggesting_ids_on_every_endpoint() {
    let server = Server::start(Config::default()).await;
    for endpoint in ENDPOINTS {
        let reply = server
            .post(
                path(endpoint),
                &body(endpoint, "anthropic/claude-sonet-4.6", "hi", false),
            )
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        let body = reply.json();
        let text = body["error"].as_str().unwrap();
        assert!(text.contains("anthropic/claude-sonnet-4.6"), "{text}");
        assert!(text.contains("GET /v1/models"), "{text}");
        assert_eq!(body.as_object().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_request_too_large() {
    let config = Config {
        body_limit_bytes: 1024,
        ..Config::default()
    };
    let server = Server::start(config).await;
    let mut stream = TcpStream::connect(server.address).await.unwrap();
    let chunk = vec![b' '; 800];
    let mut request = b"POST /v1/messages HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for _ in 0..2 {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(&chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    stream.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains(r#"{"type":"error","error":{"type":"invalid_request_error","message":"Request body is over the size limit of 1024 bytes"}}"#), "{answer}");
}

#[tokio::test]
async fn model_listing_has_the_documented_fields() {
    let server = Server::start(Config::default()).await;
    for url in ["/v1/models", "/api/v1/models"] {
        let reply = server.get(url).await;
        assert_eq!(reply.status, StatusCode::OK);
        let listing = reply.json();
        assert_eq!(listing["object"], "list");
        let rows = listing["data"].as_array().unwrap();
        assert!(rows.len() >= 6);
        for row in rows {
            for field in [
                "id",
                "object",
                "created",
                "owned_by",
                "name",
                "description",
                "context_window",
                "max_output",
                "categories",
                "billing_mode",
                "pricing",
            ] {
                assert!(row.get(field).is_some(), "{field} missing in {row}");
            }
            assert_eq!(row["object"], "model");
            let id = row["id"].as_str().unwrap();
            assert_eq!(id.split_once('/').unwrap().0, row["owned_by"]);
            let pricing = &row["pricing"];
            match row["billing_mode"].as_str().unwrap() {
                "paid" => assert!(
                    pricing["input"].as_f64().unwrap() > 0.0
                        && pricing["output"].as_f64().unwrap() > 0.0
                ),
                "flat" => assert!(pricing["flat"].as_f64().unwrap() > 0.0),
                "free" => assert_eq!(pricing, &json!({"input": 0, "output": 0})),
                "per_image" => {
                    assert!(pricing["per_image"].as_f64().unwrap() > 0.0);
                    assert_eq!(row["categories"], json!(["image"]));
                }
                other => panic!("billing_mode {other}"),
            }
        }
        let sonnet = rows
            .iter()
            .find(|row| row["id"] == "anthropic/claude-sonnet-4.6")
            .unwrap();
        assert_eq!(sonnet["pricing"], json!({"input": 3.0, "output": 15.0}));
    }
}

#[tokio::test]
async fn each_endpoint_answers_in_its_vendor_shape() {
    let server = Server::start(Config::default()).await;
    let chat = server
        .post(
            "/api/v1/chat/completions",
            &body(Endpoint::Chat, "openai/gpt-5-mini", "hello world", false),
        )
        .await;
    assert_eq!(chat.status, StatusCode::OK);
    let chat = chat.json();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["model"], "openai/gpt-5-mini");
    assert_eq!(
        chat["choices"][0]["message"],
        json!({"role": "assistant", "content": "echo: hello world"})
    );
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    assert_eq!(chat["usage"]["completion_tokens"], 3);
    assert!(chat["id"].as_str().unwrap().starts_with("chatcmpl-"));

    let message = server
        .post(
            "/v1/messages",
            &body(
                Endpoint::Messages,
                "anthropic/claude-sonnet-4.6",
                "hello world",
                false,
            ),
        )
        .await
        .json();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "echo: hello world"}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["usage"]["output_tokens"], 3);
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));

    let response = server
        .post(
            "/v1/responses",
            &body(
                Endpoint::Responses,
                "google/gemini-2.5-flash",
                "hello world",
                false,
            ),
        )
        .await
        .json();
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output_text"], "echo: hello world");
    assert_eq!(
        response["output"][0]["content"][0],
        json!({"type": "output_text", "text": "echo: hello world", "annotations": []})
    );
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
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

#[tokio::test]
async fn chat_stream_is_data_chunks_then_done() {
    let server = Server::start(Config::default()).await;
    let reply = server
        .post(
            "/v1/chat/completions",
            &body(
                Endpoint::Chat,
                "nvidia/nemotron-super",
                "one two three",
                true,
            ),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let text = reply.text();
    assert!(
        !text.contains("event:"),
        "chat streams carry only data lines"
    );
    let payloads = sse_data(&text);
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let mut answer = String::new();
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|payload| serde_json::from_str(payload).unwrap())
        .collect();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "nvidia/nemotron-super");
        answer.push_str(
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or(""),
        );
    }
    assert_eq!(answer, "echo: one two three");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

#[tokio::test]
async fn messages_and_responses_streams_send_their_named_events() {
    let server = Server::start(Config::default()).await;
    let messages = server
        .post(
            "/v1/messages",
            &body(
                Endpoint::Messages,
                "anthropic/claude-sonnet-4.6",
                "hi there",
                true,
            ),
        )
        .await
        .text();
    let events: Vec<&str> = messages
        .lines()
        .filter_map(|line| line.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"message_start"));
    assert!(events.contains(&"content_block_delta"));
    assert_eq!(
        &events[events.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let deltas: String = sse_data(&messages)
        .iter()
        .map(|payload| serde_json::from_str::<Value>(payload).unwrap())
        .filter(|event| event["type"] == "content_block_delta")
        .map(|event| event["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(deltas, "echo: hi there");

    let responses = server
        .post(
            "/v1/responses",
            &body(Endpoint::Responses, "openai/gpt-5-mini", "hi there", true),
        )
        .await
        .text();
    let last = sse_data(&responses).pop().unwrap();
    let completed: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(completed["type"], "response.completed");
    assert_eq!(completed["response"]["output_text"], "echo: hi there");
}

#[tokio::test]
async fn a_fault_after_the_stream_started_ends_it_with_an_error_event() {
    let server = Server::start(fault_config()).await;
    let reply = server
        .post(
            "/v1/chat/completions",
            &body(Endpoint::Chat, "faulty/break_stream", "hi", true),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let payloads = sse_data(&reply.text());
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let error: Value = serde_json::from_str(&payloads[payloads.len() - 2]).unwrap();
    assert_eq!(error["error"]["code"], "MODEL_UNAVAILABLE");
}

#[tokio::test]
async fn a_stream_that_falls_silent_ends_with_a_timeout_event() {
    let server = Server::start(fault_config()).await;
    let reply = server
        .post(
            "/v1/messages",
            &body(Endpoint::Messages, "faulty/stall_stream", "hi", true),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let text = reply.text();
    let last: Value = serde_json::from_str(sse_data(&text).last().unwrap()).unwrap();
    assert_eq!(last["type"], "error", "{text}");
    assert_eq!(last["error"]["type"], "api_error", "{text}");
    assert_eq!(
        last["error"]["message"],
        ErrorCode::Timeout.default_message(),
        "{text}"
    );
    assert!(text.contains("event: error\n"), "{text}");
}

#[tokio::test]
async fn pipeline_steps_run_in_specified_order() {
    let server = Server::start(Config {
        body_limit_bytes: 90,
        ..Config::default()
    })
    .await;
    // Oversized and not JSON: the size limit answers first.
    let reply = server
        .post_bytes("/v1/chat/completions", vec![b'{'; 100])
        .await;
    assert_envelope(Endpoint::Chat, &reply, ErrorCode::RequestTooLarge);
    // Only system messages and an unknown model: the conversation check comes first.
    let reply = server
        .post(
            "/v1/chat/completions",
            &json!({"model": "x/y", "messages": [{"role": "system", "content": "s"}]}),
        )
        .await;
    assert_envelope(Endpoint::Chat, &reply, ErrorCode::EmptyConversation);
    // An unknown model asking to stream: unknown model first.
    let reply = server
        .post(
            "/v1/chat/completions",
            &json!({"model": "x/y", "stream": true, "messages": [{"role": "user", "content": "u"}]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.json()["error"].is_string());
}

#[tokio::test]
async fn the_echo_family_rejects_like_a_real_provider() {
    let server = Server::start(fault_config()).await;
    let mut too_many = body(Endpoint::Chat, "openai/gpt-5-mini", "hi", false);
    too_many["max_tokens"] = json!(1_000_000);
    let reply = server.post("/v1/chat/completions", &too_many).await;
    assert_envelope(Endpoint::Chat, &reply, ErrorCode::InvalidParameter);

    let reply = server
        .post(
            "/v1/chat/completions",
            &body(
                Endpoint::Chat,
                "tiny/context",
                "far too many words for eight tokens",
                false,
            ),
        )
        .await;
    assert_envelope(Endpoint::Chat, &reply, ErrorCode::ContextLengthExceeded);

    let image = json!({"model": "openai/gpt-5-mini", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "ftp://files/cat.png"}}]}]});
    let reply = server.post("/v1/chat/completions", &image).await;
    assert_envelope(Endpoint::Chat, &reply, ErrorCode::InvalidImageUrl);
}

#[tokio::test]
async fn price_hook_reads_what_the_pipeline_inserted() {
    let catalogue = Catalogue::embedded();
    let model = catalogue
        .get("anthropic/claude-sonnet-4.6")
        .unwrap()
        .clone();
    let request = ChatRequest::from_json(
        Endpoint::Messages,
        json!({"model": model.id, "max_tokens": 100, "messages": [{"role": "user", "content": "a".repeat(40)}]}),
    )
    .unwrap();
    let mut http_request = Request::new(());
    let refusal = request_price(&http_request.clone().into_parts().0).unwrap_err();
    assert_eq!(refusal.error().code(), ErrorCode::InternalError);
    http_request
        .extensions_mut()
        .insert(ParsedRequest(Arc::new(request)));
    http_request.extensions_mut().insert(ResolvedModel(model));
    let (parts, ()) = http_request.into_parts();
    assert_eq!(request_price(&parts), Ok(micro_usd(1_530)));
}

/// What the scripted upstream saw.
#[derive(Default)]
struct Seen {
    authorization: Vec<String>,
    models: Vec<String>,
    max_tokens: Vec<Value>,
}

// Shaped like a provider key (the redactor must catch it), short of a real one.
const UPSTREAM_KEY: &str = "sk-test-upstream-001";

/// An OpenAI-compatible upstream: answers `"upstream says hi"`, streams it in
/// two chunks, or fails like OpenAI when the prompt is `"too long"`.
async fn scripted_upstream(
    State(seen): State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let request: Value = serde_json::from_slice(&body).unwrap();
    {
        let mut seen = seen.lock().unwrap();
        seen.authorization
            .push(headers["authorization"].to_str().unwrap().to_owned());
        seen.models
            .push(request["model"].as_str().unwrap().to_owned());
        seen.max_tokens.push(request["max_tokens"].clone());
    }
    let prompt = request["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let respond = |status: u16, content_type: &str, text: String| {
        axum::response::Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(axum::body::Body::from(text))
            .unwrap()
    };
    if prompt == "too long" {
        return respond(
            400,
            "application/json",
            format!(
                r#"{{"error":{{"message":"This model's maximum context length is 8192 tokens. Key {UPSTREAM_KEY} at https://upstream.internal.example/v1","type":"invalid_request_error","code":"context_length_exceeded"}}}}"#
            ),
        );
    }
    if request["stream"] == true {
        let chunk = |content: &str, finish: Value| json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]});
        let text = format!(
            "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            chunk("upstream ", Value::Null),
            chunk("says hi", Value::Null),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 4, "completion_tokens": 3}}),
        );
        return respond(200, "text/event-stream", text);
    }
    respond(200, "application/json", json!({
        "id": "chatcmpl-upstream", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "upstream says hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 3}
    }).to_string())
}

#[tokio::test]
async fn openai_compatible_upstream_over_tcp() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let upstream = serve(
        Router::new()
            .route("/v1/chat/completions", post(scripted_upstream))
            .with_state(seen.clone()),
    )
    .await;
    let config = Config::default()
        .with_openai_upstream(
            "openai",
            &format!("http://{upstream}/v1"),
            ApiKey::new(UPSTREAM_KEY),
        )
        .unwrap();
    let server = Server::start(config).await;

    let whole = server
        .post(
            "/v1/chat/completions",
            &body(Endpoint::Chat, "openai/gpt-5-mini", "hi", false),
        )
        .await
        .json();
    assert_eq!(
        whole["choices"][0]["message"]["content"],
        "upstream says hi"
    );
    assert_eq!(whole["usage"]["total_tokens"], 7);

    let streamed = server
        .post(
            "/v1/messages",
            &body(Endpoint::Messages, "openai/gpt-5-mini", "hi", true),
        )
        .await
        .text();
    let text: String = sse_data(&streamed)
        .iter()
        .map(|payload| serde_json::from_str::<Value>(payload).unwrap())
        .filter_map(|event| event["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "upstream says hi");

    let failed = server
        .post(
            "/v1/responses",
            &body(Endpoint::Responses, "openai/gpt-5-mini", "too long", false),
        )
        .await;
    assert_envelope(
        Endpoint::Responses,
        &failed,
        ErrorCode::ContextLengthExceeded,
    );
    assert!(!failed.text().contains(UPSTREAM_KEY));

    // Other providers still answer from the echo family.
    let echo = server
        .post(
            "/v1/chat/completions",
            &body(Endpoint::Chat, "qwen/qwen3-coder", "hi", false),
        )
        .await
        .json();
    assert_eq!(echo["choices"][0]["message"]["content"], "echo: hi");

    let seen = seen.lock().unwrap();
    assert_eq!(seen.models, vec!["gpt-5-mini"; 3]);
    // The messages request's max_tokens travels on; the others named none.
    assert_eq!(seen.max_tokens, vec![Value::Null, json!(256), Value::Null]);
    assert!(
        seen.authorization
            .iter()
            .all(|value| *value == format!("Bearer {UPSTREAM_KEY}"))
    );
}

#[tokio::test]
async fn unreachable_upstream_is_model_unavailable() {
    // A port nobody listens on: bind, note it, close.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let config = Config::default()
        .with_openai_upstream(
            "google",
            &format!("http://{closed}/v1"),
            ApiKey::new("test-key"),
        )
        .unwrap();
    let server = Server::start(config).await;
    let reply = server
        .post(
            "/v1/chat/completions",
            &body(Endpoint::Chat, "google/gemini-2.5-flash", "hi", false),
        )
        .await;
    assert_envelope(Endpoint::Chat, &reply, ErrorCode::ModelUnavailable);
    assert!(
        reply.json()["message"]
            .as_str()
            .unwrap()
            .contains("openai/gpt-5-mini")
    );
}

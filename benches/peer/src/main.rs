//! The peer of `scripts/bench-vs-x402-axum.sh`: the walletgate gateway
//! example's paid chat route and model list, served with the published
//! `x402-axum` crate instead of walletgate.
//!
//! - `GET /v1/models`: a model list rendered once at start (the gateway's
//!   own listing when `PEER_MODELS_FILE` names a copy of it).
//! - `POST /v1/chat/completions`: behind `x402-axum`'s layer, one exact-EVM
//!   offer with the gateway's terms (Base Sepolia USDC, EIP-712 domain
//!   `USDC`/`2`, payTo, amount, maxTimeoutSeconds), verified and settled by
//!   the in-process [`facilitator::PeerFacilitator`]; answers a small
//!   OpenAI-style completion echoing the last user message, as the gateway's
//!   echo family does.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PEER_LISTEN` | `127.0.0.1:18403` | loopback address to listen on |
//! | `PEER_PAY_TO` | development account 9 | `payTo` |
//! | `PEER_AMOUNT_UNITS` | `1129` | the price in USDC atomic units |
//! | `PEER_MAX_TIMEOUT_SECONDS` | `300` | `maxTimeoutSeconds` |
//! | `PEER_DESCRIPTION` | a fixed sentence | `resource.description` of the quote |
//! | `PEER_MODELS_FILE` | none | the `GET /v1/models` body to serve |
//!
//! Build and run it alone (it has its own workspace and `target/`):
//! `cargo run --release --manifest-path benches/peer/Cargo.toml`.

mod facilitator;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use x402_axum::X402Middleware;

use facilitator::{DEV_ACCOUNTS, PeerFacilitator, Terms, system_clock};

const DEFAULT_LISTEN: &str = "127.0.0.1:18403";
/// The gateway's quote of the benchmark's chat body (`openai/gpt-5-mini`, 64 tokens).
const DEFAULT_AMOUNT_UNITS: u128 = 1_129;
const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 300;
const DEFAULT_DESCRIPTION: &str = "Model inference";
const DEFAULT_MODELS: &str = r#"{"object":"list","data":[{"id":"openai/gpt-5-mini","object":"model","owned_by":"openai"},{"id":"nvidia/nemotron-super","object":"model","owned_by":"nvidia"}]}"#;

/// The peer's settings, read from `PEER_*`.
struct Config {
    listen: SocketAddr,
    terms: Terms,
    description: String,
    models: Bytes,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

fn parsed<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match var(name) {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| format!("{name}: cannot parse {text:?}")),
    }
}

impl Config {
    fn from_env() -> Result<Self, String> {
        let listen: SocketAddr =
            parsed("PEER_LISTEN", DEFAULT_LISTEN.parse().map_err(|_| "listen")?)?;
        if !listen.ip().is_loopback() {
            return Err(format!("PEER_LISTEN: {listen} is not a loopback address"));
        }
        let pay_to = parsed("PEER_PAY_TO", DEV_ACCOUNTS[9].parse().map_err(|_| "payTo")?)?;
        let terms = Terms::base_sepolia_usdc(
            pay_to,
            parsed("PEER_AMOUNT_UNITS", DEFAULT_AMOUNT_UNITS)?,
            parsed("PEER_MAX_TIMEOUT_SECONDS", DEFAULT_MAX_TIMEOUT_SECONDS)?,
        );
        let models = match var("PEER_MODELS_FILE") {
            None => Bytes::from_static(DEFAULT_MODELS.as_bytes()),
            Some(path) => Bytes::from(
                std::fs::read(&path)
                    .map_err(|error| format!("PEER_MODELS_FILE {path}: {error}"))?,
            ),
        };
        Ok(Self {
            listen,
            terms,
            description: var("PEER_DESCRIPTION").unwrap_or_else(|| DEFAULT_DESCRIPTION.to_owned()),
            models,
        })
    }
}

#[tokio::main]
async fn main() {
    if let Err(error) = run().await {
        eprintln!("peer: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    let facilitator = Arc::new(PeerFacilitator::new(config.terms.clone(), system_clock()));
    let resource = url::Url::parse(&format!("http://{}/v1/chat/completions", config.listen))?;
    let app = router(facilitator, &config, resource);
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    eprintln!(
        "peer (x402-axum 2.0.2): listening on {}, {} units to {}",
        config.listen, config.terms.amount_units, config.terms.pay_to
    );
    axum::serve(listener, app).await?;
    Ok(())
}

/// What the handlers share.
#[derive(Clone)]
struct AppState {
    models: Bytes,
    completions: Arc<AtomicU64>,
}

fn router(facilitator: Arc<PeerFacilitator>, config: &Config, resource: url::Url) -> Router {
    let paid = X402Middleware::from_facilitator(facilitator)
        .with_price_tag(config.terms.price_tag())
        .with_description(config.description.clone())
        .with_mime_type("application/json".to_owned())
        .with_resource(resource);
    let state = AppState {
        models: config.models.clone(),
        completions: Arc::default(),
    };
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat).layer(paid))
        .with_state(state)
}

async fn models(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        state.models.clone(),
    )
        .into_response()
}

#[derive(Deserialize)]
struct ChatRequest {
    model: String,
    #[serde(default)]
    max_tokens: Option<u64>,
    messages: Vec<ChatMessage>,
}

#[derive(Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: serde_json::Value,
}

/// The text of a message: a string, or the text parts of a content array.
fn text_of(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(serde_json::Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// `"echo: "` and the last user message, cut to `max_tokens` words.
async fn chat(State(state): State<AppState>, Json(request): Json<ChatRequest>) -> Response {
    let last = request
        .messages
        .iter()
        .rev()
        .find(|message| message.role == "user")
        .map(|message| text_of(&message.content))
        .unwrap_or_default();
    let full = format!("echo: {last}");
    let limit = usize::try_from(request.max_tokens.unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    let words: Vec<&str> = full.split_whitespace().collect();
    let (text, finish) = if words.len() > limit {
        (words[..limit].join(" "), "length")
    } else {
        (words.join(" "), "stop")
    };
    let prompt_tokens: usize = request
        .messages
        .iter()
        .map(|message| text_of(&message.content).split_whitespace().count())
        .sum();
    let completion_tokens = text.split_whitespace().count();
    let id = state.completions.fetch_add(1, Ordering::Relaxed);
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    Json(serde_json::json!({
        "id": format!("chatcmpl-{id}"),
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    use x402_types::util::Base64Bytes;

    use super::*;
    use crate::facilitator::test_support::Draft;

    const NOW: u64 = 1_750_000_000;
    const CHAT: &str = r#"{"model":"openai/gpt-5-mini","max_tokens":64,"messages":[{"role":"user","content":"load test"}]}"#;

    fn app() -> (Router, Terms) {
        let config = Config {
            listen: DEFAULT_LISTEN.parse().unwrap(),
            terms: Terms::base_sepolia_usdc(DEV_ACCOUNTS[9].parse().unwrap(), 3_000, 300),
            description: DEFAULT_DESCRIPTION.to_owned(),
            models: Bytes::from_static(DEFAULT_MODELS.as_bytes()),
        };
        let facilitator = Arc::new(PeerFacilitator::new(config.terms.clone(), Arc::new(|| NOW)));
        let resource = url::Url::parse("http://127.0.0.1:18403/v1/chat/completions").unwrap();
        (router(facilitator, &config, resource), config.terms)
    }

    fn chat(payment: Option<&str>) -> Request<Body> {
        let mut request =
            Request::post("/v1/chat/completions").header(header::CONTENT_TYPE, "application/json");
        if let Some(payment) = payment {
            request = request.header("payment-signature", payment);
        }
        request.body(Body::from(CHAT)).unwrap()
    }

    fn decode_header(response: &Response, name: &str) -> serde_json::Value {
        let value = response.headers().get(name).unwrap().as_bytes();
        serde_json::from_slice(&Base64Bytes::from(value).decode().unwrap()).unwrap()
    }

    #[tokio::test]
    async fn models_answer_the_listing() {
        let (app, _) = app();
        let response = app
            .oneshot(Request::get("/v1/models").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, DEFAULT_MODELS.as_bytes());
    }

    #[tokio::test]
    async fn an_unpaid_chat_is_quoted_with_the_gateway_terms() {
        let (app, _) = app();
        let response = app.oneshot(chat(None)).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        let quote = decode_header(&response, "payment-required");
        let offer = &quote["accepts"][0];
        assert_eq!(offer["network"], "eip155:84532");
        assert_eq!(offer["asset"], facilitator::BASE_SEPOLIA_USDC);
        assert_eq!(offer["payTo"], DEV_ACCOUNTS[9]);
        assert_eq!(offer["amount"], "3000");
        assert_eq!(offer["maxTimeoutSeconds"], 300);
        assert_eq!(offer["extra"]["name"], "USDC");
        assert_eq!(offer["extra"]["version"], "2");
    }

    #[tokio::test]
    async fn a_paid_chat_is_answered_once_and_its_replay_is_refused() {
        let (app, terms) = app();
        let payload = Draft::new(&terms, NOW, 1).payload(&terms);
        let header = Base64Bytes::encode(serde_json::to_vec(&payload).unwrap());
        let header = std::str::from_utf8(header.as_ref()).unwrap().to_owned();

        let response = app.clone().oneshot(chat(Some(&header))).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let receipt = decode_header(&response, "payment-response");
        assert_eq!(receipt["success"], true);
        assert_eq!(receipt["payer"], DEV_ACCOUNTS[0]);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "echo: load test");
        assert_eq!(body["model"], "openai/gpt-5-mini");

        let replay = app.oneshot(chat(Some(&header))).await.unwrap();
        assert_eq!(replay.status(), StatusCode::PAYMENT_REQUIRED);
    }
}

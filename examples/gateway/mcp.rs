//! `/mcp`: the catalogue as MCP tools over streamable HTTP (POST JSON-RPC),
//! paid per call through the library's [`X402McpLayer`].
//!
//! Tools: `list_models` (free), `chat` (the chat completions body: model,
//! messages, max_tokens, stream) and `generate_image` (the image body).
//! Their input schemas are the REST routes' own (`routes.rs`), and a paid
//! call is priced by the same code as the REST request ([`tool_price`]):
//! the same arguments quote the same amount. Paid tools declare no
//! `outputSchema` (the official client checks an error result's
//! `structuredContent` against it, and the PaymentRequired result is one).
//!
//! The server is stateless: a client may skip `initialize` (the 2026-07-28
//! revision) or use it; `initialize` hands out an `Mcp-Session-Id` that
//! nothing needs, and `DELETE` ends it (204). `chat` with `stream: true` is
//! collected whole, so it settles once, at its end. A free model's call
//! goes through the free tier per client IP, as REST does; over its limit it
//! is a tool error with code `FREE_TIER_RATE_LIMITED`.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use http::request::Parts;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use tower::{Layer, ServiceExt};
use walletgate::envelope::ErrorCode;
use walletgate::gateway::RequestModel;
use walletgate::x402::server::mcp::ToolPricing;

use walletgate::x402::server::{
    BazaarTool, PaymentReceipt, Price, PriceRefusal, QuoteExtensionMap, RequestPrice,
};

use crate::catalogue::Catalogue;
use crate::extensions::PreparedRequest;
use crate::reply::json as json_response;
use crate::request::{ChatRequest, Endpoint};
use crate::routes::mcp_tools;
use crate::state::AppState;

/// The protocol revisions answered; a client's own is echoed when listed.
const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Largest collected answer of a streamed `chat` (bytes of SSE).
const MAX_STREAM_BYTES: usize = 8 << 20;

/// The tools' prices (the REST pricing of the same body) and, with
/// discovery on, each paid tool's `bazaar` (keyed by `mcp://tool/<name>`
/// and its `toolName`).
#[derive(Clone)]
pub(crate) struct ToolPrices {
    catalogue: Catalogue,
    bazaar: HashMap<String, QuoteExtensionMap>,
}

impl ToolPrices {
    /// `bazaar`: whether each paid tool's PaymentRequired declares its entry.
    pub(crate) fn new(catalogue: &Catalogue, bazaar: bool) -> Self {
        let tools = mcp_tools(catalogue);
        let bazaar = (tools.iter())
            .filter(|tool| bazaar && tool["name"] != "list_models")
            .filter_map(|tool| {
                let name = tool["name"].as_str()?;
                let entry = BazaarTool::new(name, tool["inputSchema"].clone())
                    .with_description(tool["description"].as_str().unwrap_or_default());
                Some((name.to_owned(), Arc::new(entry.to_extensions())))
            })
            .collect();
        Self {
            catalogue: catalogue.clone(),
            bazaar,
        }
    }
}

impl ToolPricing for ToolPrices {
    fn price(&self, tool: &str, arguments: &Value) -> Result<Price, PriceRefusal> {
        Ok(tool_price(&self.catalogue, tool, arguments).unwrap_or(Price::Free))
    }

    fn extensions(&self, tool: &str, _price: &Price) -> Option<QuoteExtensionMap> {
        self.bazaar.get(tool).cloned()
    }
}

/// What calling `tool` with `arguments` costs, by the REST routes' pricing
/// (`Model::price`, `Model::image_price`); `None` for a free tool or
/// arguments the tool refuses (answered as a tool error, unpaid).
pub(crate) fn tool_price(catalogue: &Catalogue, tool: &str, arguments: &Value) -> Option<Price> {
    match tool {
        "chat" => {
            let request = ChatRequest::from_json(Endpoint::Chat, arguments.clone()).ok()?;
            Some(catalogue.chat_model(&request.model)?.price(&request))
        }
        "generate_image" => {
            let (_, price) = crate::images::image_request(catalogue, arguments.clone()).ok()?;
            Some(price)
        }
        _ => None,
    }
}

/// `POST /mcp`: one JSON-RPC message (the layer refused batches).
pub(crate) async fn handle(State(gateway): State<AppState>, parts: Parts, body: Bytes) -> Response {
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return rpc_error(&Value::Null, -32700, "Parse error");
    };
    let method = message.get("method").and_then(Value::as_str);
    let Some(id) = message.get("id").cloned() else {
        // A notification (`notifications/initialized`, …) or a client's answer.
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::ACCEPTED;
        return response;
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match method {
        Some("initialize") => initialize(&gateway, &id, &params),
        Some("ping") => rpc_result(&id, json!({})),
        Some("tools/list") => rpc_result(&id, json!({"tools": mcp_tools(&gateway.catalogue)})),
        Some("tools/call") => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("");
            let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
            let result = call_tool(gateway.clone(), parts, name.to_owned(), arguments).await;
            rpc_result(&id, result)
        }
        _ => rpc_error(&id, -32601, "Method not found"),
    }
}

/// `DELETE /mcp`: a session's end; there is nothing to forget.
pub(crate) async fn end_session() -> StatusCode {
    StatusCode::NO_CONTENT
}

fn initialize(gateway: &AppState, id: &Value, params: &Value) -> Response {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .filter(|asked| PROTOCOL_VERSIONS.contains(asked))
        .unwrap_or("2025-06-18");
    let mut response = rpc_result(
        id,
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": {"name": "walletgate-gateway", "version": env!("CARGO_PKG_VERSION")},
        }),
    );
    if let Ok(value) = HeaderValue::from_str(&gateway.next_id("mcp-")) {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// One tool call. Boxed as `Send` here, where its lifetimes are concrete
/// (rustc cannot prove it through the handler's generic future otherwise).
fn call_tool(
    gateway: AppState,
    parts: Parts,
    name: String,
    arguments: Value,
) -> walletgate::store::BoxFuture<'static, Value> {
    Box::pin(async move {
        match name.as_str() {
            "list_models" => {
                let listing: Value = serde_json::from_slice(&gateway.listing).unwrap_or_default();
                json!({
                    "content": [{"type": "text", "text": listing.to_string()}],
                    "structuredContent": listing,
                })
            }
            "chat" => chat(gateway, parts, arguments).await,
            "generate_image" => generate_image(gateway, parts, arguments).await,
            _ => tool_error(
                ErrorCode::InvalidParameter,
                &format!("Unknown tool: {name}"),
            ),
        }
    })
}

/// `chat`: validated as the REST body, run by the REST handler, its answer
/// (a stream collected whole) as the tool result.
async fn chat(gateway: AppState, parts: Parts, arguments: Value) -> Value {
    let request = match ChatRequest::from_json(Endpoint::Chat, arguments) {
        Ok(request) => request,
        Err(details) => {
            let details = serde_json::to_value(details).unwrap_or_default();
            let mut result = tool_error(ErrorCode::InvalidRequestBody, "Invalid arguments");
            result["structuredContent"]["details"] = details;
            return result;
        }
    };
    if !request.has_conversation() {
        return tool_error(
            ErrorCode::EmptyConversation,
            "messages holds no conversation",
        );
    }
    let Some(model) = gateway.catalogue.chat_model(&request.model).cloned() else {
        let message = format!("Unknown model: {}", request.model);
        return tool_error(ErrorCode::InvalidParameter, &message);
    };
    if request.stream && !model.streaming {
        let message = format!("{} does not support stream: true", model.id);
        return tool_error(ErrorCode::StreamUnsupported, &message);
    }
    let price = model.price(&request);
    let paid = parts.extensions.get::<PaymentReceipt>().is_some();
    if price != Price::Free && !paid {
        // The layer prices the same arguments: a paid model never gets here unpaid.
        return tool_error(ErrorCode::InternalError, "payment layer missing");
    }
    let prepared = PreparedRequest {
        request: std::sync::Arc::new(request),
        model: model.clone(),
    };
    let metered: Option<walletgate::x402::server::SettleAmount> = parts.extensions.get().cloned();
    let free_tier = gateway.gates.free_tier.clone();
    let run = {
        tower::service_fn(move |_: Request<Body>| {
            let (gateway, prepared, metered) = (gateway.clone(), prepared.clone(), metered.clone());
            // Boxed as `Send` where its lifetimes are concrete (see `call_tool`).
            let answer: walletgate::store::BoxFuture<'static, Response> =
                Box::pin(crate::inference::infer(State(gateway), metered, prepared));
            async move { Ok::<_, std::convert::Infallible>(answer.await) }
        })
    };
    // A free model's call counts against its client's free tier, as on REST.
    let mut limited = Request::new(Body::empty());
    *limited.headers_mut() = parts.headers.clone();
    let extensions = limited.extensions_mut();
    extensions.insert(RequestPrice(price));
    extensions.insert(RequestModel::new(model.id));
    if let Some(peer) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
    {
        extensions.insert(*peer);
    }
    let limiting: walletgate::store::BoxFuture<'static, _> =
        Box::pin(free_tier.layer(run).oneshot(limited));
    let Ok(response) = limiting.await;
    let answered: walletgate::store::BoxFuture<'static, _> = Box::pin(answer_of(response));
    match answered.await {
        Ok(completion) => {
            let text = completion["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            json!({"content": [{"type": "text", "text": text}], "structuredContent": completion})
        }
        Err(error) => error,
    }
}

/// The REST answer's JSON (a chat stream's chunks joined into one
/// completion); `Err` is the error envelope as a tool error carrying its code.
pub(crate) async fn answer_of<B>(response: Response<B>) -> Result<Value, Value>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let status = response.status();
    let streamed = (response.headers().get(http::header::CONTENT_TYPE))
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    let body = http_body_util::Limited::new(response.into_body(), MAX_STREAM_BYTES);
    let Ok(body) = body.collect().await.map(|body| body.to_bytes()) else {
        return Err(tool_error(ErrorCode::StreamFailed, "the answer broke off"));
    };
    if !status.is_success() {
        let envelope: Value = serde_json::from_slice(&body).unwrap_or_default();
        let error = &envelope["error"];
        let code = error["code"].as_str().unwrap_or("INTERNAL_ERROR");
        let message = error["message"].as_str().unwrap_or("the call failed");
        let structured = json!({"error": message, "code": code, "status": status.as_u16()});
        return Err(error_result(structured));
    }
    Ok(match streamed {
        true => collected(&body),
        false => serde_json::from_slice(&body).unwrap_or_default(),
    })
}

/// A chat completion stream's chunks as one completion: the deltas' text
/// joined, the last chunk's usage and finish reason.
fn collected(stream: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stream);
    let mut content = String::new();
    let (mut last, mut finish, mut usage) = (Value::Null, Value::Null, Value::Null);
    for data in text.lines().filter_map(|line| line.strip_prefix("data:")) {
        let Ok(chunk) = serde_json::from_str::<Value>(data.trim()) else {
            continue; // `[DONE]`, or the payment's own event
        };
        if let Some(delta) = chunk["choices"][0]["delta"]["content"].as_str() {
            content.push_str(delta);
        }
        if !chunk["choices"][0]["finish_reason"].is_null() {
            finish = chunk["choices"][0]["finish_reason"].clone();
        }
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
        last = chunk;
    }
    json!({
        "id": last["id"],
        "object": "chat.completion",
        "created": last["created"],
        "model": last["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": usage,
    })
}

/// A tool error (`isError`) naming its code, as the payment refusals do.
pub(crate) fn tool_error(code: ErrorCode, message: &str) -> Value {
    error_result(json!({"error": message, "code": code.as_str()}))
}

fn error_result(structured: Value) -> Value {
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "isError": true,
        "structuredContent": structured,
    })
}

fn rpc_result(id: &Value, result: Value) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
    )
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
    )
}

/// Longest a `generate_image` tool call waits for its job.
const TOOL_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `generate_image`: the job accepted for the call's payment (the same one
/// again for the same payment), waited for (bounded), its images as the
/// result; settled once, by the MCP layer, after it.
async fn generate_image(gateway: AppState, parts: Parts, arguments: Value) -> Value {
    let (request, price) = match crate::images::image_request(&gateway.catalogue, arguments) {
        Ok(found) => found,
        Err(answer) => return answer_of(answer).await.unwrap_or_else(|error| error),
    };
    let Some(receipt) = parts.extensions.get::<PaymentReceipt>().cloned() else {
        // The layer prices the same arguments: never reached unpaid.
        return tool_error(ErrorCode::InternalError, "payment layer missing");
    };
    let answer =
        crate::images::accept_and_wait(&gateway, request, price, &receipt, TOOL_WAIT).await;
    if answer.status() == StatusCode::ACCEPTED {
        // Not settled: the same payment resent finds the same job.
        let why = "the image is not ready yet; resend the same payment";
        return tool_error(ErrorCode::Timeout, why);
    }
    match answer_of(answer).await {
        Ok(done) => {
            let urls: Vec<&str> = (done["data"].as_array().into_iter().flatten())
                .filter_map(|image| image["url"].as_str())
                .collect();
            json!({"content": [{"type": "text", "text": urls.join("\n")}], "structuredContent": done})
        }
        Err(error) => error,
    }
}

//! The JSON-RPC a front of MCP reads and writes: a `tools/call` read from a
//! request body, the tool result read from the answer (a JSON body or the
//! SSE stream of a streamable-HTTP server), and x402's MCP tool results.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use serde_json::{Map, Value, json};

use crate::envelope::ErrorCode;
use crate::x402::wire::types::{PaymentRequired, SettleResponse};

/// The `_meta` key a client pays a tool call with (the payment payload, an object).
pub const PAYMENT_META: &str = "x402/payment";

/// The `_meta` key of a paid tool result's settlement.
pub const PAYMENT_RESPONSE_META: &str = "x402/payment-response";

/// The `error` of an unpaid call's PaymentRequired, as the official wrappers write it.
pub const PAYMENT_REQUIRED_ERROR: &str = "Payment required to access this tool";

/// The `resource.url` of a tool's PaymentRequired, as the official wrappers name it.
pub fn tool_resource_url(tool: &str) -> String {
    ["mcp://tool/", tool].concat()
}

pub(super) const PARSE_ERROR: i64 = -32700;
pub(super) const INVALID_REQUEST: i64 = -32600;
pub(super) const INVALID_PARAMS: i64 = -32602;
pub(super) const INTERNAL_ERROR: i64 = -32603;

const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// What a request body is to the layer.
pub(super) enum Read {
    /// A `tools/call`, read.
    Call(Box<ToolCall>),
    /// Any other message: the inner service's.
    Other,
    /// Refused: the JSON-RPC error to answer.
    Refused(Response<Bytes>),
}

/// A `tools/call` request.
pub(super) struct ToolCall {
    pub(super) id: Value,
    pub(super) name: String,
    /// The arguments, `{}` when none were sent.
    pub(super) arguments: Value,
    /// `params._meta["x402/payment"]`, as sent.
    pub(super) payment: Option<Value>,
    message: Value,
}

impl ToolCall {
    /// The request as the tool gets it: without its payment.
    pub(super) fn forwarded(&self) -> Bytes {
        let mut message = self.message.clone();
        let meta = message
            .get_mut("params")
            .and_then(|params| params.get_mut("_meta"))
            .and_then(Value::as_object_mut);
        if let Some(meta) = meta {
            meta.remove(PAYMENT_META);
        }
        Bytes::from(serde_json::to_vec(&message).unwrap_or_default())
    }
}

/// Reads a request body. Only a `tools/call` is read further; a batch is
/// refused (MCP has none since 2025-06-18, and one would hide a paid call).
pub(super) fn read(bytes: &[u8]) -> Read {
    let message = match serde_json::from_slice::<Value>(bytes) {
        Ok(message) => message,
        Err(_) => {
            let answer = error(
                &Value::Null,
                StatusCode::BAD_REQUEST,
                PARSE_ERROR,
                "Parse error",
            );
            return Read::Refused(answer);
        }
    };
    let why = match &message {
        Value::Object(_) => None,
        Value::Array(_) => Some("Invalid Request: batches are not supported"),
        _ => Some("Invalid Request: not a JSON-RPC message"),
    };
    let (Some(object), None) = (message.as_object(), why) else {
        let why = why.unwrap_or_default();
        let refused = error(&Value::Null, StatusCode::BAD_REQUEST, INVALID_REQUEST, why);
        return Read::Refused(refused);
    };
    if object.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Read::Other;
    }
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    let invalid = |why: &str| Read::Refused(error(&id, StatusCode::OK, INVALID_PARAMS, why));
    let Some(params) = object.get("params").and_then(Value::as_object) else {
        return invalid("Invalid params: tools/call takes an object");
    };
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return invalid("Invalid params: tools/call needs a tool name");
    };
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(arguments @ Value::Object(_)) => arguments.clone(),
        Some(_) => return invalid("Invalid params: arguments must be an object"),
    };
    let payment = (params.get("_meta"))
        .and_then(|meta| meta.get(PAYMENT_META))
        .cloned();
    Read::Call(Box::new(ToolCall {
        name: name.to_owned(),
        id,
        arguments,
        payment,
        message,
    }))
}

/// A JSON-RPC error answer.
pub(super) fn error(id: &Value, status: StatusCode, code: i64, message: &str) -> Response<Bytes> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    json_response(status, &body)
}

/// A JSON-RPC result answer.
pub(super) fn result(id: &Value, result: Value) -> Response<Bytes> {
    json_response(
        StatusCode::OK,
        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(serde_json::to_vec(body).unwrap_or_default()));
    *response.status_mut() = status;
    (response.headers_mut()).insert(http::header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

/// The PaymentRequired tool result: `required` with `error`, and the REST
/// error `code` of a refusal, as `structuredContent` and as the text of
/// `content[0]` (the same object).
pub(super) fn payment_required(
    required: &PaymentRequired,
    error: &str,
    code: Option<ErrorCode>,
) -> Value {
    let mut required = required.clone();
    required.error = Some(error.to_owned());
    let mut structured = serde_json::to_value(&required).unwrap_or_default();
    if let (Some(code), Some(object)) = (code, structured.as_object_mut()) {
        object.insert("code".into(), code.as_str().into());
    }
    tool_error_result(structured)
}

/// A tool error that is not about payment: its message and code.
pub(super) fn tool_error(code: ErrorCode, message: &str) -> Value {
    tool_error_result(json!({"error": message, "code": code.as_str()}))
}

fn tool_error_result(structured: Value) -> Value {
    let text = serde_json::to_string(&structured).unwrap_or_default();
    json!({
        "content": [{"type": "text", "text": text}],
        "isError": true,
        "structuredContent": structured,
    })
}

/// The JSON-RPC answer to a call, read from the inner service's body: a
/// JSON body, or the event of an SSE stream that answers the call (the
/// others, progress notifications, are kept as they were).
pub(crate) struct Answer {
    /// The SSE events, when the answer is a stream, and which one answers.
    events: Option<(Vec<String>, usize)>,
    message: Value,
}

impl Answer {
    /// The answer to the call `id` (to any call, for `None`: a kept
    /// answer) in `body`, or `None` when it holds none.
    pub(crate) fn read(event_stream: bool, body: &[u8], id: Option<&Value>) -> Option<Self> {
        let answers = |message: &Value| {
            id.is_none_or(|id| message.get("id") == Some(id))
                && (message.get("result").is_some() || message.get("error").is_some())
        };
        if !event_stream {
            let message = serde_json::from_slice::<Value>(body).ok()?;
            return answers(&message).then_some(Self {
                events: None,
                message,
            });
        }
        let text = std::str::from_utf8(body).ok()?.replace("\r\n", "\n");
        let events: Vec<String> = (text.split("\n\n"))
            .filter(|event| !event.trim().is_empty())
            .map(str::to_owned)
            .collect();
        let (index, message) = events.iter().enumerate().find_map(|(index, event)| {
            let message = serde_json::from_str::<Value>(&event_data(event)).ok()?;
            answers(&message).then_some((index, message))
        })?;
        Some(Self {
            events: Some((events, index)),
            message,
        })
    }

    /// The JSON-RPC message: a `result` or an `error`.
    #[cfg(feature = "client-pay")]
    pub(crate) fn message(&self) -> &Value {
        &self.message
    }

    /// Whether the tool did not succeed: a JSON-RPC error, or a result
    /// that says `isError` (or is no result object).
    pub(super) fn is_error(&self) -> bool {
        match self.message.get("result") {
            Some(Value::Object(result)) => result.get("isError") == Some(&Value::Bool(true)),
            _ => true,
        }
    }

    /// Adds the settlement as `result._meta["x402/payment-response"]`.
    pub(super) fn with_payment_response(mut self, settlement: &SettleResponse) -> Self {
        let settlement = serde_json::to_value(settlement).unwrap_or_default();
        if let Some(Value::Object(result)) = self.message.get_mut("result") {
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if !meta.is_object() {
                *meta = Value::Object(Map::new());
            }
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(PAYMENT_RESPONSE_META.into(), settlement);
            }
        }
        self
    }

    /// Answers the call `id` (a kept answer, resent under another id).
    pub(super) fn with_id(mut self, id: &Value) -> Self {
        if let Some(object) = self.message.as_object_mut() {
            object.insert("id".into(), id.clone());
        }
        self
    }

    /// The answer as the response it came in (JSON or SSE).
    pub(super) fn into_response(self) -> Response<Bytes> {
        let Some((mut events, index)) = self.events else {
            return json_response(StatusCode::OK, &self.message);
        };
        let data = serde_json::to_string(&self.message).unwrap_or_default();
        let event = &mut events[index];
        let mut rewritten: Vec<&str> = (event.lines())
            .filter(|line| !line.starts_with("data:"))
            .collect();
        let data = ["data: ", &data].concat();
        rewritten.push(&data);
        *event = rewritten.join("\n");
        let mut stream = events.join("\n\n");
        stream.push_str("\n\n");
        let mut response = Response::new(Bytes::from(stream));
        (response.headers_mut()).insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(EVENT_STREAM),
        );
        response
    }
}

/// The data of one SSE event, its `data:` lines joined.
fn event_data(event: &str) -> String {
    let lines: Vec<&str> = (event.lines())
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    lines.join("\n")
}

/// Whether a response's body is an SSE stream.
pub(super) fn is_event_stream(headers: &http::HeaderMap) -> bool {
    (headers.get(http::header::CONTENT_TYPE))
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with(EVENT_STREAM))
}

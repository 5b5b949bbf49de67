//! The OpenAI-compatible HTTP upstream over TCP, and an unreachable one.

use super::*;

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
    let payloads = sse_data(&streamed);
    // Paid: the stream's receipt follows its events.
    let (receipt, events) = payloads.split_last().unwrap();
    assert!(
        codec::decode::<SettleResponse>(receipt.as_bytes())
            .unwrap()
            .success
    );
    let text: String = events
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

//! Every non-payment error code: status, envelope, headers, failover advice, redaction.

use super::*;

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
    // Payment codes belong to the payment layer, the free-tier limit (its
    // store failing, a malformed forwarded hop) to its layer.
    let free_tier = [
        ErrorCode::FreeTierRateLimited,
        ErrorCode::RateLimitUnavailable,
        ErrorCode::InvalidForwardedHeader,
    ];
    let missing: Vec<_> = ErrorCode::ALL
        .iter()
        .filter(|code| !code.is_payment() && !free_tier.contains(code))
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

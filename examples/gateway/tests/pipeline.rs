//! The pipeline's order, the echo family's provider-like rejections, the one price decision.

use super::*;

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

/// The model step prices a request once: a free model is limited by the free
/// tier (whose trace names the model, though the step took the model out of
/// the parsed body) and passes the payment layer; a paid one is quoted and
/// never counted by the free tier.
#[tokio::test(flavor = "current_thread")]
async fn the_model_steps_price_decides_free_for_both_gates_and_names_the_model() {
    use tower::ServiceExt;
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber());
    let router = app(Config::default()).unwrap();
    let request = |model: &str| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        let mut request = Request::post("/v1/chat/completions")
            .header("host", "gateway.test")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let peer: SocketAddr = "203.0.113.9:40000".parse().unwrap();
        request.extensions_mut().insert(peer);
        request
    };

    // Tests on other threads run without a subscriber; a callsite they
    // registered while this subscriber was being set may be cached as
    // uninteresting to it. Recompute just before the requests it reads.
    tracing::callsite::rebuild_interest_cache();
    let free = router
        .clone()
        .oneshot(request("nvidia/nemotron-super"))
        .await
        .unwrap();
    assert_eq!(free.status(), StatusCode::OK);
    assert_eq!(free.headers()["x-ratelimit-remaining"], "29");
    assert!(!free.headers().contains_key("payment-required"));
    let paid = router
        .oneshot(request("anthropic/claude-sonnet-4.6"))
        .await
        .unwrap();
    assert_eq!(paid.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(!paid.headers().contains_key("x-ratelimit-limit"));

    let text = captured.text();
    let spans: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("free_tier{"))
        .collect();
    assert_eq!(spans.len(), 1, "one free-tier decision in:\n{text}");
    for field in [
        "model=\"nvidia/nemotron-super\"",
        "client_ip=203.0.113.9",
        "outcome=\"admitted\"",
    ] {
        assert!(spans[0].contains(field), "{field} in {}", spans[0]);
    }
}

//! The pipeline's order, the echo family's provider-like rejections, the price hook.

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

//! Success shapes: the model listing, each endpoint's vendor shape, and streams.

use super::*;

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
                "tier",
                "pricing",
            ] {
                assert!(row.get(field).is_some(), "{field} missing in {row}");
            }
            assert_eq!(row["object"], "model");
            // The tier a client fails over within is the billing mode.
            assert_eq!(row["tier"], row["billing_mode"]);
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
    // A paid stream: its receipt follows the terminal event.
    assert_eq!(
        &events[events.len() - 4..],
        [
            "content_block_stop",
            "message_delta",
            "message_stop",
            "payment-response"
        ]
    );
    let payloads = sse_data(&messages);
    let deltas: String = payloads[..payloads.len() - 1]
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
    let mut payloads = sse_data(&responses);
    let receipt: SettleResponse = codec::decode(payloads.pop().unwrap().as_bytes()).unwrap();
    assert!(receipt.success);
    let completed: Value = serde_json::from_str(&payloads.pop().unwrap()).unwrap();
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
    // Broken: the error is the last event, no `[DONE]` follows (and no receipt: unsettled).
    assert!(!payloads.iter().any(|payload| payload == "[DONE]"));
    let error: Value = serde_json::from_str(payloads.last().unwrap()).unwrap();
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

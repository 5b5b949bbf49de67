//! Every wire shape, asserted as exact JSON against the specification, and the
//! code table walked against the specification's section 7 B.

use http::StatusCode;
use serde_json::{Value, json};
use walletgate::envelope::{
    DataApiError, DetailPathSegment, EnvelopeStyle, ErrorCode, ErrorType, GatewayError,
    PaymentInfo, QuoteBody, QuotePrice, RateLimitInfo, UnknownModelBody, ValidationDetail,
};

fn body_json(response: &http::Response<bytes::Bytes>) -> Value {
    assert_eq!(response.headers()["content-type"], "application/json");
    serde_json::from_slice(response.body()).expect("body is JSON")
}

/// The specification's table, section 7 B: code and status.
const SPEC_CODES: &[(&str, u16)] = &[
    ("INVALID_JSON", 400),
    ("INVALID_REQUEST_BODY", 400),
    ("EMPTY_CONVERSATION", 400),
    ("INVALID_PARAMETER", 400),
    ("CONTEXT_LENGTH_EXCEEDED", 400),
    ("INVALID_IMAGE_URL", 400),
    ("REQUEST_TOO_LARGE", 400),
    ("CONTENT_FILTERED", 400),
    ("STREAM_UNSUPPORTED", 400),
    ("REASONING_FORMAT_ERROR", 400),
    ("TOOL_ID_FORMAT_ERROR", 400),
    ("INVALID_REQUEST", 400),
    ("PAYMENT_INVALID", 402),
    ("PAYMENT_UNFUNDED", 402),
    ("PAYMENT_BLOCKHASH_STALE", 402),
    ("PAYMENT_REPLAY", 402),
    // Status not stated by the specification; 503 is walletgate's documented choice.
    ("PAYMENT_VERIFICATION_UNAVAILABLE", 503),
    ("RATE_LIMITED", 429),
    ("FREE_TIER_RATE_LIMITED", 429),
    ("STREAM_FAILED", 429),
    ("FREE_MODEL_FAILED", 429),
    ("MODEL_UNAVAILABLE", 503),
    ("PROVIDER_CONFIG_ERROR", 503),
    ("TIMEOUT", 504),
    ("INTERNAL_ERROR", 500),
];

fn expected_type(status: u16) -> ErrorType {
    match status {
        400 => ErrorType::InvalidRequest,
        402 => ErrorType::PaymentRequired,
        429 => ErrorType::RateLimit,
        _ => ErrorType::Api,
    }
}

#[test]
fn code_table_matches_the_specification() {
    for &(name, status) in SPEC_CODES {
        let code = ErrorCode::from_wire(name).unwrap_or_else(|| panic!("{name} is missing"));
        assert_eq!(code.status().as_u16(), status, "{name} status");
        assert_eq!(code.error_type(), expected_type(status), "{name} type");
        assert!(!code.default_message().is_empty(), "{name} message");
    }
    // Beyond the specification's table: a malformed forwarded hop, the
    // settlement failure, the payment identifier's two refusals, and the
    // shared rate-limit store failing closed.
    let extra: Vec<_> = ErrorCode::ALL
        .iter()
        .filter(|code| !SPEC_CODES.iter().any(|(name, _)| *name == code.as_str()))
        .map(|code| code.as_str())
        .collect();
    assert_eq!(
        extra,
        [
            "INVALID_FORWARDED_HEADER",
            "SETTLEMENT_FAILED",
            "PAYMENT_IDENTIFIER_INVALID",
            "PAYMENT_IDENTIFIER_CONFLICT",
            "RATE_LIMIT_UNAVAILABLE"
        ]
    );
}

#[test]
fn retry_after_is_owned_by_the_codes() {
    let retry = |code: ErrorCode| code.retry_after_secs();
    assert_eq!(retry(ErrorCode::RateLimited), Some(60));
    assert_eq!(retry(ErrorCode::StreamFailed), Some(30));
    assert_eq!(retry(ErrorCode::FreeModelFailed), Some(30));
    assert_eq!(retry(ErrorCode::InvalidJson), None);
    for &code in ErrorCode::ALL {
        let response = GatewayError::new(code).into_response(EnvelopeStyle::Chat);
        assert_eq!(response.status(), code.status());
        let header = response
            .headers()
            .get("retry-after")
            .map(|value| value.to_str().unwrap().parse::<u64>().unwrap());
        assert_eq!(header, code.retry_after_secs(), "{code}");
    }
}

#[test]
fn chat_style_shape() {
    let response = GatewayError::new(ErrorCode::InvalidRequestBody)
        .with_message("messages[0].role must be one of system, user, assistant, tool")
        .with_param("messages")
        .with_details([ValidationDetail::new(
            vec![
                "messages".into(),
                DetailPathSegment::Index(0),
                "role".into(),
            ],
            "must be one of system, user, assistant, tool",
        )])
        .into_response(EnvelopeStyle::Chat);
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        body_json(&response),
        json!({
            "error": {
                "message": "messages[0].role must be one of system, user, assistant, tool",
                "type": "invalid_request_error",
                "code": "INVALID_REQUEST_BODY",
                "param": "messages"
            },
            "message": "messages[0].role must be one of system, user, assistant, tool",
            "code": "INVALID_REQUEST_BODY",
            "details": [
                {"path": ["messages", 0, "role"], "message": "must be one of system, user, assistant, tool"}
            ]
        })
    );
}

#[test]
fn chat_style_param_is_null_when_absent() {
    let response = GatewayError::new(ErrorCode::InvalidJson).into_response(EnvelopeStyle::Chat);
    let body = body_json(&response);
    assert_eq!(body["error"]["param"], Value::Null);
    assert!(body.get("debug").is_none());
    assert!(body.get("details").is_none());
}

#[test]
fn rate_limited_carries_source_and_retry_after() {
    let response = GatewayError::new(ErrorCode::RateLimited)
        .with_source("anthropic")
        .with_debug("429 Too Many Requests from https://api.anthropic.com/v1/messages")
        .into_response(EnvelopeStyle::Chat);
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "60");
    assert_eq!(response.headers()["x-ratelimit-source"], "anthropic");
    let body = body_json(&response);
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["code"], "RATE_LIMITED");
    assert_eq!(body["source"], "anthropic");
    assert_eq!(body["retry_after_seconds"], 60);
    assert_eq!(body["debug"], "429 Too Many Requests from [url]");
}

#[test]
fn free_tier_headers() {
    let response = GatewayError::new(ErrorCode::FreeTierRateLimited)
        .with_retry_after_secs(2)
        .with_rate_limit(RateLimitInfo {
            limit: 30,
            remaining: 0,
            reset_unix_millis: 1_750_000_002_000,
        })
        .into_response(EnvelopeStyle::Chat);
    let headers = response.headers();
    assert_eq!(headers["retry-after"], "2");
    assert_eq!(headers["x-ratelimit-limit"], "30");
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert_eq!(headers["x-ratelimit-reset"], "1750000002000");
    assert!(body_json(&response).get("retry_after_seconds").is_none());
}

#[test]
fn messages_style_shape() {
    let response =
        GatewayError::new(ErrorCode::ContextLengthExceeded).into_response(EnvelopeStyle::Messages);
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        body_json(&response),
        json!({
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "The prompt does not fit the model's context window"
            }
        })
    );
}

#[test]
fn responses_style_shape() {
    let response =
        GatewayError::new(ErrorCode::ModelUnavailable).into_response(EnvelopeStyle::Responses);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body_json(&response),
        json!({
            "error": {
                "message": "The model is unavailable; retry or use another provider",
                "type": "api_error",
                "param": null,
                "code": "MODEL_UNAVAILABLE"
            }
        })
    );
}

#[test]
fn unknown_model_shape() {
    let response =
        UnknownModelBody::new("openai/gpt-4o-mni", ["openai/gpt-4o-mini", "openai/gpt-4o"])
            .into_response();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = body_json(&response);
    let object = body.as_object().unwrap();
    assert_eq!(object.len(), 1);
    let text = object["error"].as_str().unwrap();
    assert!(text.contains("openai/gpt-4o-mini"));
    assert!(text.contains("GET /v1/models"));
}

#[test]
fn payment_rejection_shape() {
    let response = GatewayError::new(ErrorCode::PaymentInvalid)
        .with_debug("invalid_exact_evm_payload_signature")
        .with_payer("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266")
        .into_response(EnvelopeStyle::Chat);
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        body_json(&response),
        json!({
            "error": "Payment verification failed",
            "code": "PAYMENT_INVALID",
            "message": "Payment is invalid; sign exactly the quoted requirements",
            "debug": "invalid_exact_evm_payload_signature",
            "payer": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        })
    );
}

#[test]
fn verify_phase_codes_say_verification_failed() {
    for code in [
        ErrorCode::PaymentInvalid,
        ErrorCode::PaymentUnfunded,
        ErrorCode::PaymentBlockhashStale,
    ] {
        let body = body_json(&GatewayError::new(code).into_response(EnvelopeStyle::Chat));
        assert_eq!(body["error"], "Payment verification failed", "{code}");
        assert_eq!(body["payer"], Value::Null);
    }
    let replay =
        body_json(&GatewayError::new(ErrorCode::PaymentReplay).into_response(EnvelopeStyle::Chat));
    assert_eq!(replay["error"], "Payment authorization already used");
}

#[test]
fn payment_codes_keep_vendor_shapes_on_messages_and_responses() {
    let messages = body_json(
        &GatewayError::new(ErrorCode::PaymentReplay).into_response(EnvelopeStyle::Messages),
    );
    assert_eq!(messages["type"], "error");
    assert_eq!(messages["error"]["type"], "payment_required");
    let responses = body_json(
        &GatewayError::new(ErrorCode::PaymentReplay).into_response(EnvelopeStyle::Responses),
    );
    assert_eq!(responses["error"]["code"], "PAYMENT_REPLAY");
}

#[test]
fn style_is_the_one_the_router_set() {
    let mut request = http::Request::new(());
    *request.uri_mut() = "/v1/messages".parse().unwrap();
    request.extensions_mut().insert(EnvelopeStyle::Chat);
    assert_eq!(EnvelopeStyle::of_request(&request), EnvelopeStyle::Chat);
}

#[test]
fn quote_body_shape() {
    let accepts = vec![json!({
        "scheme": "exact", "network": "eip155:84532", "amount": "1000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "payTo": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "maxTimeoutSeconds": 300, "extra": {"name": "USDC", "version": "2"}
    })];
    let body = QuoteBody {
        x402_version: 2,
        accepts: accepts.clone(),
        error: "Payment required".to_owned(),
        message: "This endpoint requires payment".to_owned(),
        price: QuotePrice {
            amount: "0.001".to_owned(),
            currency: "USDC".to_owned(),
        },
        payment_info: PaymentInfo {
            network: "eip155:84532".to_owned(),
            asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".to_owned(),
            x402_version: 2,
        },
        resource: json!({"url": "http://127.0.0.1:8402/v1/chat/completions"}),
    };
    assert_eq!(
        serde_json::to_value(&body).unwrap(),
        json!({
            "x402Version": 2,
            "accepts": accepts,
            "error": "Payment required",
            "message": "This endpoint requires payment",
            "price": {"amount": "0.001", "currency": "USDC"},
            "paymentInfo": {"network": "eip155:84532", "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "x402Version": 2},
            "resource": {"url": "http://127.0.0.1:8402/v1/chat/completions"}
        })
    );
}

#[test]
fn data_api_shape_and_headers() {
    let response = DataApiError::insufficient_scope(
        "read:favorites",
        "This token lacks the scope read:favorites",
    )
    .into_response();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer error=\"insufficient_scope\", scope=\"read:favorites\""
    );
    assert_eq!(
        body_json(&response),
        json!({"error": {"message": "This token lacks the scope read:favorites", "status": 403, "code": 7}})
    );

    let expired = DataApiError::invalid_token("The token has expired").into_response();
    assert_eq!(expired.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        expired.headers()["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
    assert_eq!(body_json(&expired)["error"]["code"], 16);

    let limited = DataApiError::too_many_requests(0).into_response();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "1");
    assert_eq!(body_json(&limited)["error"]["status"], 429);
}

#[test]
fn rejections_ride_in_response_extensions() {
    let response = GatewayError::new(ErrorCode::Timeout).into_response(EnvelopeStyle::Chat);
    let error = response.extensions().get::<GatewayError>().unwrap();
    assert_eq!(error.code(), ErrorCode::Timeout);
    let response = DataApiError::forbidden("other wallet").into_response();
    assert!(response.extensions().get::<DataApiError>().is_some());
}

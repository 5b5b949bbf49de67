//! Arbitrary request bodies through the library's gateway body step:
//! `SetEnvelopeStyleLayer` (one of the three routes' styles), `JsonBodyLayer`
//! (limit + parse once) and a chat-shaped `BodyCheck` validation.
//!
//! Input: one selector byte (bits 0-1: chat, messages or responses style;
//! bit 2: declare `Content-Length`), then the body. Every input must answer
//! 200 (a body that fits the schema) or 400 in its route's envelope with one
//! of the body codes of the table; nothing panics, nothing waits.
#![no_main]

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tower_layer::Layer;
use tower_service::Service;
use walletgate::envelope::{DetailPathSegment, EnvelopeStyle, SetEnvelopeStyleLayer, ErrorCode};
use walletgate::gateway::{BodyCheck, JsonBodyLayer, ParsedJson, at};
use walletgate_fuzz::ready;

/// Small, so the fuzzer reaches the limit often.
const LIMIT_BYTES: usize = 512;
const STYLES: [EnvelopeStyle; 3] = [
    EnvelopeStyle::Chat,
    EnvelopeStyle::Messages,
    EnvelopeStyle::Responses,
];
const BODY_CODES: [ErrorCode; 3] = [
    ErrorCode::RequestTooLarge,
    ErrorCode::InvalidJson,
    ErrorCode::InvalidRequestBody,
];

/// Validates the parsed body as a chat request (model, messages with role
/// and content, optional stream and max_tokens); 200 when it fits.
async fn validate(request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let style = EnvelopeStyle::of_request(&request);
    let ParsedJson(body) = request
        .extensions()
        .get::<ParsedJson>()
        .cloned()
        .expect("JsonBodyLayer puts the parsed body in the extensions");
    let mut check = BodyCheck::default();
    let Some(object) = body.as_object() else {
        check.fail(&[], "must be an object");
        let error = check.finish(()).unwrap_err();
        return Ok(error.into_response(style).map(Full::new));
    };
    let model = check.required_string(object, "model");
    check.optional_bool(object, "stream");
    check.optional_count(object, "max_tokens");
    let root = [DetailPathSegment::from("messages")];
    for (index, message) in check
        .array(object.get("messages"), &root)
        .iter()
        .enumerate()
    {
        if let Some(message) = check.object(message, &at(&root, index)) {
            check.text_field(message, "role", &at(&root, index));
            check.text_field(message, "content", &at(&root, index));
        }
    }
    Ok(match check.finish(model) {
        Ok(_) => Response::new(Full::new(Bytes::from_static(b"ok"))),
        Err(error) => error.into_response(style).map(Full::new),
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let style = STYLES[usize::from(selector & 3) % 3];
    let mut service = SetEnvelopeStyleLayer::new(style)
        .layer(JsonBodyLayer::new(LIMIT_BYTES).layer(tower_service_fn(validate)));
    let mut request = Request::post("http://gw.test/v1/chat/completions");
    if selector & 4 != 0 {
        request = request.header("content-length", body.len());
    }
    let request = request
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    let response = ready(service.call(request)).unwrap();
    let status = response.status();
    let bytes = ready(response.into_body().collect()).unwrap().to_bytes();
    if status == StatusCode::OK {
        assert_eq!(&bytes[..], b"ok");
        assert!(body.len() <= LIMIT_BYTES);
        return;
    }
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let envelope: Value = serde_json::from_slice(&bytes).expect("a rejection is JSON");
    let code = match style {
        // Chat: error.code plus its top-level mirror.
        EnvelopeStyle::Chat => {
            assert_eq!(envelope["code"], envelope["error"]["code"]);
            envelope["error"]["code"].as_str()
        }
        // Messages: {type: "error", error: {type, message}}, no code field.
        EnvelopeStyle::Messages => {
            assert_eq!(envelope["type"], "error");
            assert!(envelope["error"]["message"].is_string());
            return;
        }
        _ => envelope["error"]["code"].as_str(),
    };
    let code = code.expect("the envelope names its code");
    assert!(
        BODY_CODES.iter().any(|known| known.as_str() == code),
        "unexpected code {code}"
    );
    if body.len() > LIMIT_BYTES {
        assert_eq!(code, ErrorCode::RequestTooLarge.as_str());
    }
});

/// `tower::service_fn` without the tower dependency.
fn tower_service_fn<F, Fut>(f: F) -> ServiceFn<F>
where
    F: FnMut(Request<Full<Bytes>>) -> Fut,
{
    ServiceFn(f)
}

#[derive(Clone)]
struct ServiceFn<F>(F);

impl<F, Fut> Service<Request<Full<Bytes>>> for ServiceFn<F>
where
    F: FnMut(Request<Full<Bytes>>) -> Fut,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, Infallible>>,
{
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Fut;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> Fut {
        (self.0)(request)
    }
}

//! The inference handler (every chat-like endpoint) and the model listing.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};

use walletgate::envelope::{ErrorCode, GatewayError};
use walletgate::x402::server::SettleAmount;

use crate::catalogue::Model;
use crate::extensions::PreparedRequest;
use crate::render::{AnswerHead, SseBody, answer};
use crate::reply::{json, reject};
use crate::request::Endpoint;
use crate::state::AppState;
use crate::upstream::{UpstreamFault, Usage};

/// `Content-Type: application/json`, checked at compile time.
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

/// `GET /v1/models`: the listing rendered at start, with its length (so no
/// layer formats it per request) and room for the headers added outside.
pub(crate) async fn models(State(gateway): State<AppState>) -> Response {
    let mut response = Response::new(Body::from(gateway.listing.clone()));
    let headers = response.headers_mut();
    headers.reserve(4);
    headers.insert(header::CONTENT_TYPE, APPLICATION_JSON);
    headers.insert(header::CONTENT_LENGTH, gateway.listing_length.clone());
    response
}

/// The id prefix of `endpoint`'s answers (`chatcmpl-`, `msg_`, `resp_`).
pub(crate) fn id_prefix(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "chatcmpl-",
        Endpoint::Messages => "msg_",
        Endpoint::Responses => "resp_",
    }
}

/// Every inference endpoint: the pipeline has validated the request and
/// resolved its model; ask the upstream and render the answer.
pub(crate) async fn infer(
    State(gateway): State<AppState>,
    metered: Option<SettleAmount>,
    PreparedRequest { request, model }: PreparedRequest,
) -> Response {
    let endpoint = request.endpoint;
    let head = AnswerHead {
        id: gateway.next_id(id_prefix(endpoint)),
        created: gateway.clock.now_unix_secs(),
        model: model.id.to_owned(),
        prompt_tokens: request.estimated_prompt_tokens(),
    };
    if !request.stream {
        return match gateway.complete(&model, &request).await {
            Ok(completion) => {
                // What the answer used: settled if the payment authorised a maximum.
                if let Some(metered) = &metered {
                    meter(metered, &model, completion.usage);
                }
                json(StatusCode::OK, &answer(endpoint, &head, &completion))
            }
            Err(error) => reject(error, endpoint.style()),
        };
    }
    match gateway.stream(&model, &request).await {
        Ok(mut events) => {
            let idle_timeout = gateway.upstream_timeout;
            // The upstream's first event before the answer's head: one that
            // fails before it gets an error answer, never a 200, so a payment
            // settled before a stream's first byte (MPP's) is not charged for it.
            let first = match tokio::time::timeout(idle_timeout, events.recv()).await {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(fault))) => {
                    return reject(gateway.fault_error(&model, true, &fault), endpoint.style());
                }
                Ok(None) => {
                    let fault =
                        UpstreamFault::new(None, "upstream stream closed before its first event");
                    return reject(gateway.fault_error(&model, true, &fault), endpoint.style());
                }
                Err(_) => return reject(GatewayError::new(ErrorCode::Timeout), endpoint.style()),
            };
            let fault_gateway = gateway.clone();
            let priced = model.clone();
            let mut body = SseBody::new(endpoint, head, events, idle_timeout, move |fault| {
                fault_gateway.fault_error(&model, true, fault)
            })
            .with_first(first);
            if let Some(metered) = metered {
                // Known with the last chunk; settled when the stream ends.
                body = body.on_usage(move |usage| meter(&metered, &priced, usage));
            }
            let mut response = Response::new(Body::new(body));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        Err(error) => reject(error, endpoint.style()),
    }
}

/// Names what an answer that used `usage` cost on `model`, and what for:
/// settled if the payment authorised a maximum (`upto`), ignored for `exact`.
fn meter(metered: &SettleAmount, model: &Model, usage: Usage) {
    let (prompt, completion) = (usage.prompt_tokens, usage.completion_tokens);
    if let Some(price) = model.metered_price(prompt, completion) {
        metered.set_usd(price);
    }
    if let Some(statement) = model.usage_statement(prompt, completion) {
        metered.set_usage(statement);
    }
}

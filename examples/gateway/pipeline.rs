//! The inference pipeline: each step answers a rejection in the route's
//! envelope or hands the request on, enriched, to the next.
//!
//! Outer to inner:
//!
//! 1. `SetEnvelopeStyleLayer`: the endpoint's envelope, set once for every step.
//! 2. `JsonBodyLayer` → `REQUEST_TOO_LARGE` over the configured size, reads
//!    and parses the body once; `INVALID_JSON`.
//! 3. to 6. [`prepare_request`], one middleware for four checks:
//!    3. the endpoint's schema → `INVALID_REQUEST_BODY` with `details[].path`;
//!    4. a conversation → `EMPTY_CONVERSATION`;
//!    5. the model → unknown model (400, close ids suggested);
//!    6. streaming support → `STREAM_UNSUPPORTED`.
//!
//!    Inserts [`PreparedRequest`] (the request and its model), the library's
//!    [`RequestModel`] and the request's one price, [`RequestPrice`]
//!    ([`Model::price`](crate::catalogue::Model::price)).
//! 7. `FreeTierLimitLayer`, what step 6 priced free only → `FREE_TIER_RATE_LIMITED`
//!    (its trace names the [`RequestModel`]).
//! 8. `X402Layer`, the rest, charging that [`RequestPrice`] plus the flat fee
//!    where the price excludes it → 402 quote, payment codes; settles after a
//!    2xx answer only.
//!
//! Steps 7 and 8 read what step 6 left in the request extensions; nothing
//! re-reads or re-parses the body. [`with_pipeline`] is the single place the
//! stack is assembled.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{from_fn_with_state, map_request_with_state};
use axum::response::Response;
use tower::ServiceBuilder;
use walletgate::envelope::{
    EnvelopeStyle, ErrorCode, GatewayError, SetEnvelopeStyleLayer, UnknownModelBody,
};
use walletgate::gateway::{JsonBodyLayer, ParsedJson, RequestModel, invalid_request_body};
use walletgate::x402::server::RequestPrice;

use crate::extensions::{PreparedRequest, missing};
use crate::images::{find_job, validate_image};
use crate::reply::reject;
use crate::request::{ChatRequest, Endpoint};
use crate::state::AppState;

/// Wraps the inference routes in the pipeline, outer to inner.
///
/// This is the one composition point. The free-tier limit (requests priced
/// free) and the payment layer (the rest) come after validation, in that
/// order, so both see the [`RequestPrice`] of the request and neither runs
/// for a request already rejected: an invalid request is never quoted, let
/// alone charged.
pub(crate) fn with_pipeline(
    routes: Router<AppState>,
    state: &AppState,
    endpoint: Endpoint,
) -> Router<AppState> {
    routes.route_layer(
        ServiceBuilder::new()
            .layer(SetEnvelopeStyleLayer::new(endpoint.style()))
            .layer(JsonBodyLayer::new(state.body_limit_bytes))
            .layer(map_request_with_state(
                (state.clone(), endpoint),
                prepare_request,
            ))
            .layer(state.gates.free_tier.clone())
            .layer(state.gates.inference_payment.clone()),
    )
}

/// Wraps the image job route: body limit, JSON parse, the image request's
/// validation and price ([`validate_image`]), then payment in paid-replay
/// mode, so a lost answer is recovered with the same signature, uncharged.
pub(crate) fn with_image_pipeline(routes: Router<AppState>, state: &AppState) -> Router<AppState> {
    routes.route_layer(
        ServiceBuilder::new()
            .layer(JsonBodyLayer::new(state.body_limit_bytes))
            .layer(from_fn_with_state(state.clone(), validate_image))
            .layer(state.gates.image_payment.clone()),
    )
}

/// Wraps the image poll route: the job is looked up and the poll priced as
/// it ([`find_job`]), then the payment that bought it is replayed, uncharged.
pub(crate) fn with_poll_pipeline(routes: Router<AppState>, state: &AppState) -> Router<AppState> {
    routes.route_layer(
        ServiceBuilder::new()
            .layer(from_fn_with_state(state.clone(), find_job))
            .layer(state.gates.image_payment.clone()),
    )
}

/// Steps 3 to 6 in one middleware, in their order: each is a few field
/// reads, and one step costs one boxed service clone per request instead of four.
async fn prepare_request(
    State((gateway, endpoint)): State<(AppState, Endpoint)>,
    mut request: Request,
) -> Result<Request, Response> {
    let style = endpoint.style();
    let Some(ParsedJson(value)) = request.extensions_mut().remove::<ParsedJson>() else {
        return Err(missing::<ParsedJson>("JsonBodyLayer", style));
    };
    let parsed = match ChatRequest::from_json(endpoint, value) {
        Ok(parsed) => parsed,
        Err(details) => return Err(reject(invalid_request_body(details), style)),
    };
    if let Some(rejection) = refuse_empty_conversation(&parsed, style) {
        return Err(rejection);
    }
    let Some(model) = gateway.catalogue.chat_model(&parsed.model).cloned() else {
        let suggestions = gateway.catalogue.close_matches(&parsed.model, false);
        return Err(UnknownModelBody::new(&parsed.model, suggestions)
            .into_response()
            .map(Body::from));
    };
    if parsed.stream && !model.streaming {
        return Err(reject(
            GatewayError::new(ErrorCode::StreamUnsupported)
                .with_param("stream")
                .with_message(format!(
                    "{} does not support stream: true; send the request without it",
                    model.id
                )),
            style,
        ));
    }
    let extensions = request.extensions_mut();
    // Priced once, here: the free tier and the payment layer read this one decision.
    extensions.insert(RequestPrice(model.price(&parsed)));
    extensions.insert(RequestModel::new(model.id));
    extensions.insert(PreparedRequest {
        request: Arc::new(parsed),
        model,
    });
    Ok(request)
}

/// `EMPTY_CONVERSATION` when nothing but system instructions was sent.
fn refuse_empty_conversation(parsed: &ChatRequest, style: EnvelopeStyle) -> Option<Response> {
    if parsed.has_conversation() {
        return None;
    }
    let field = match parsed.endpoint {
        Endpoint::Responses => "input",
        Endpoint::Chat | Endpoint::Messages => "messages",
    };
    Some(reject(
        GatewayError::new(ErrorCode::EmptyConversation).with_param(field),
        style,
    ))
}

//! The inference pipeline: each step answers a rejection in the route's
//! envelope or hands the request on, enriched, to the next.
//!
//! Outer to inner:
//!
//! 0. `EnvelopeStyleLayer`: the endpoint's envelope, set once for every step.
//! 1. `JsonBodyLayer` → `REQUEST_TOO_LARGE` over the configured size, reads
//!    and parses the body once; `INVALID_JSON`.
//! 3. [`validate_body`] → the endpoint's schema; `INVALID_REQUEST_BODY` with
//!    `details[].path`. Inserts [`ParsedRequest`].
//! 4. [`require_conversation`] → `EMPTY_CONVERSATION`.
//! 5. [`resolve_model`] → unknown model (400, close ids suggested). Inserts [`ResolvedModel`].
//! 6. [`check_stream_support`] → `STREAM_UNSUPPORTED`.
//! 7. `FreeTierLimitLayer`, free models only → `FREE_TIER_RATE_LIMITED`.
//! 8. `X402Layer`, paid models only, priced by [`request_price`] → 402 quote,
//!    payment codes; settles after a 2xx answer only.
//!
//! Steps 7 and 8 read [`ParsedRequest`] and [`ResolvedModel`] from the request
//! extensions; nothing re-reads or re-parses the body. [`with_pipeline`] is
//! the single place the stack is assembled.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::Response;
use http::request::Parts;
use tower::ServiceBuilder;
use walletgate::envelope::{
    EnvelopeStyle, EnvelopeStyleLayer, ErrorCode, GatewayError, UnknownModelBody,
};
use walletgate::gateway::{JsonBodyLayer, ParsedJson};
use walletgate::x402::{Price, PriceRefusal};

use crate::catalogue::Model;
use crate::gateway::AppState;
use crate::images::{find_job, validate_image};
use crate::request::{ChatRequest, Endpoint};

/// The validated request, mapped to chat form. Read it with the extractor.
#[derive(Clone, Debug)]
pub(crate) struct ParsedRequest(pub(crate) Arc<ChatRequest>);

/// The catalogue entry of the requested model. Read it with the extractor.
#[derive(Clone, Debug)]
pub(crate) struct ResolvedModel(pub(crate) Arc<Model>);

impl AsRef<str> for ParsedRequest {
    /// The requested model id, the key a price table looks up.
    fn as_ref(&self) -> &str {
        &self.0.model
    }
}

/// Wraps the inference routes in the pipeline, outer to inner.
///
/// This is the one composition point. The free-tier limit (free models only)
/// and the payment layer (paid models, priced by
/// [`Model::price`](crate::catalogue::Model::price) of the request) come
/// after validation, in that order, so both see [`ParsedRequest`] and
/// [`ResolvedModel`] and neither runs for a request already rejected: an
/// invalid request is never quoted, let alone charged.
pub(crate) fn with_pipeline(
    routes: Router<AppState>,
    state: &AppState,
    endpoint: Endpoint,
) -> Router<AppState> {
    routes.route_layer(
        ServiceBuilder::new()
            .layer(EnvelopeStyleLayer::new(endpoint.style()))
            .layer(JsonBodyLayer::new(state.body_limit_bytes))
            .layer(from_fn_with_state(endpoint, validate_body))
            .layer(from_fn(require_conversation))
            .layer(from_fn_with_state(state.clone(), resolve_model))
            .layer(from_fn(check_stream_support))
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

/// What a request costs before the flat fee: the payment layer's pricing hook.
///
/// Reads what the pipeline inserted, so it must run inside it; outside, it
/// refuses (a wiring fault, 500), never serves free.
pub(crate) fn request_price(parts: &Parts) -> Result<Price, PriceRefusal> {
    let Some(ParsedRequest(request)) = parts.extensions.get::<ParsedRequest>() else {
        return Err(PriceRefusal::missing("ParsedRequest"));
    };
    let Some(ResolvedModel(model)) = parts.extensions.get::<ResolvedModel>() else {
        return Err(PriceRefusal::missing("ResolvedModel"));
    };
    Ok(model.price(request))
}

/// A gateway error as an axum response.
pub(crate) fn reject(error: GatewayError, style: EnvelopeStyle) -> Response {
    error.into_response(style).map(Body::from)
}

fn wiring_fault(missing: &str, style: EnvelopeStyle) -> Response {
    reject(
        GatewayError::new(ErrorCode::InternalError).with_message(format!(
            "Internal error: {missing} missing (pipeline wiring)"
        )),
        style,
    )
}

async fn validate_body(
    State(endpoint): State<Endpoint>,
    mut request: Request,
    next: Next,
) -> Response {
    let style = endpoint.style();
    let Some(ParsedJson(value)) = request.extensions_mut().remove::<ParsedJson>() else {
        return wiring_fault("the parsed JSON body", style);
    };
    match ChatRequest::from_json(endpoint, value) {
        Ok(parsed) => {
            request
                .extensions_mut()
                .insert(ParsedRequest(Arc::new(parsed)));
            next.run(request).await
        }
        Err(details) => reject(
            GatewayError::new(ErrorCode::InvalidRequestBody).with_details(details),
            style,
        ),
    }
}

async fn require_conversation(request: Request, next: Next) -> Response {
    let style = EnvelopeStyle::of_request(&request);
    let Some(ParsedRequest(parsed)) = request.extensions().get::<ParsedRequest>() else {
        return wiring_fault("ParsedRequest", style);
    };
    if parsed.has_conversation() {
        next.run(request).await
    } else {
        let field = match parsed.endpoint {
            Endpoint::Responses => "input",
            Endpoint::Chat | Endpoint::Messages => "messages",
        };
        reject(
            GatewayError::new(ErrorCode::EmptyConversation).with_param(field),
            style,
        )
    }
}

async fn resolve_model(
    State(gateway): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let style = EnvelopeStyle::of_request(&request);
    let Some(ParsedRequest(parsed)) = request.extensions().get::<ParsedRequest>() else {
        return wiring_fault("ParsedRequest", style);
    };
    let Some(model) = gateway.catalogue.chat_model(&parsed.model).cloned() else {
        let suggestions = gateway.catalogue.close_matches(&parsed.model, false);
        return UnknownModelBody::new(&parsed.model, suggestions)
            .into_response()
            .map(Body::from);
    };
    request.extensions_mut().insert(ResolvedModel(model));
    next.run(request).await
}

async fn check_stream_support(request: Request, next: Next) -> Response {
    let style = EnvelopeStyle::of_request(&request);
    let (Some(ParsedRequest(parsed)), Some(ResolvedModel(model))) = (
        request.extensions().get::<ParsedRequest>(),
        request.extensions().get::<ResolvedModel>(),
    ) else {
        return wiring_fault("ParsedRequest or ResolvedModel", style);
    };
    if parsed.stream && !model.streaming {
        return reject(
            GatewayError::new(ErrorCode::StreamUnsupported)
                .with_param("stream")
                .with_message(format!(
                    "{} does not support stream: true; send the request without it",
                    model.id
                )),
            style,
        );
    }
    next.run(request).await
}

/// Reads a pipeline value from the request extensions; a missing value is a
/// wiring fault (500), never the client's.
fn extension<T: Clone + Send + Sync + 'static>(
    parts: &Parts,
    name: &str,
) -> Result<T, Box<Response>> {
    parts
        .extensions
        .get::<T>()
        .cloned()
        .ok_or_else(|| Box::new(wiring_fault(name, EnvelopeStyle::of_parts(parts))))
}

impl<S: Send + Sync> FromRequestParts<S> for ParsedRequest {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        extension(parts, "ParsedRequest").map_err(|response| *response)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ResolvedModel {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        extension(parts, "ResolvedModel").map_err(|response| *response)
    }
}

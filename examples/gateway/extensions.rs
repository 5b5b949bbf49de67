//! What the pipeline hands on in the request extensions, and how a handler
//! reads it.
//!
//! Each step inserts one value for the steps after it: [`ParsedRequest`]
//! (validation), [`ResolvedModel`] (model lookup), [`ImageRequest`] and
//! [`ImagePrice`] (the image routes). A value that is missing where it is read
//! is a wiring fault, answered by [`wiring_fault`] (500) in the route's envelope.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::response::Response;
use http::request::Parts;
use walletgate::envelope::{EnvelopeStyle, ErrorCode, GatewayError};
use walletgate::x402::Price;

use crate::catalogue::Model;
use crate::reply::reject;
use crate::request::ChatRequest;

/// The validated request, mapped to chat form. Read it with the extractor.
#[derive(Clone, Debug)]
pub(crate) struct ParsedRequest(pub(crate) Arc<ChatRequest>);

/// The catalogue entry of the requested model. Read it with the extractor.
#[derive(Clone, Debug)]
pub(crate) struct ResolvedModel(pub(crate) Arc<Model>);

/// A validated image request.
#[derive(Clone, Debug)]
pub(crate) struct ImageRequest {
    pub(crate) model: Arc<Model>,
    pub(crate) prompt: String,
    pub(crate) size: String,
    pub(crate) count: u64,
}

/// What an image request or poll costs, for the payment layer's pricing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ImagePrice(pub(crate) Price);

/// The answer to a value missing from the extensions: the pipeline was
/// wired wrong (500), never the client's fault.
pub(crate) fn wiring_fault(missing: &str, style: EnvelopeStyle) -> Response {
    reject(
        GatewayError::new(ErrorCode::InternalError).with_message(format!(
            "Internal error: {missing} missing (pipeline wiring)"
        )),
        style,
    )
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

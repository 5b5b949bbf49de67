//! What the pipeline hands on in the request extensions, and how a handler
//! reads it.
//!
//! Each step inserts one value for the steps after it: [`PreparedRequest`]
//! (validation and model lookup), [`ImageRequest`] (the image routes); the
//! library's `RequestModel` and `RequestPrice` ride beside them for the
//! library's layers. A value that is missing where it is read
//! is a wiring fault, answered by the library's [`MissingExtension`] (500 in
//! the route's envelope, naming the value and the step that provides it).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use walletgate::envelope::{EnvelopeStyle, MissingExtension};

use crate::catalogue::Model;
use crate::request::ChatRequest;

/// The validated request, mapped to chat form, and the catalogue entry of
/// its model: one value, so one insert (and one box) per request. Read it
/// with the extractor.
#[derive(Clone, Debug)]
pub(crate) struct PreparedRequest {
    pub(crate) request: Arc<ChatRequest>,
    pub(crate) model: Arc<Model>,
}

/// A validated image request.
#[derive(Clone, Debug)]
pub(crate) struct ImageRequest {
    pub(crate) model: Arc<Model>,
    pub(crate) prompt: String,
    pub(crate) size: String,
    pub(crate) count: u64,
}

/// The answer to a `T` missing from the extensions of a step answering in
/// `style`: `provider` (the step that inserts it) was not wired in front (500).
pub(crate) fn missing<T>(provider: &'static str, style: EnvelopeStyle) -> Response {
    IntoResponse::into_response(MissingExtension::gateway_in_style::<T>(provider, style))
}

/// Reads a pipeline value that `provider` put in the request extensions; a
/// missing value is a wiring fault (500 in the route's envelope).
fn extension<T: Clone + Send + Sync + 'static>(
    parts: &Parts,
    provider: &'static str,
) -> Result<T, MissingExtension> {
    parts
        .extensions
        .get::<T>()
        .cloned()
        .ok_or_else(|| MissingExtension::gateway::<T>(provider, parts))
}

impl<S: Send + Sync> FromRequestParts<S> for PreparedRequest {
    type Rejection = MissingExtension;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        extension(parts, "prepare_request")
    }
}

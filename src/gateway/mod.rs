//! Building blocks of a model gateway's request pipeline.
//!
//! - [`JsonBodyLayer`]: the body limit and the one JSON parse, answering
//!   `REQUEST_TOO_LARGE` and `INVALID_JSON` in the route's envelope and handing
//!   the parsed value on in the request extensions ([`ParsedJson`]);
//! - [`BodyCheck`]: the validation-detail builder behind
//!   `INVALID_REQUEST_BODY`'s `details[].path`.
//!
//! With [`EnvelopeStyleLayer`](crate::envelope::EnvelopeStyleLayer) setting
//! the route's envelope, the free-tier limit and the x402 layer after them,
//! they make a paid endpoint: see `examples/minimal_gateway.rs`.
//!
//! The layer and the validation builder come with feature `gateway`, so a
//! data API server does not build them. [`ParsedJson`] is always here: it is
//! the extension other layers read (the free tier traces the model from it),
//! whoever parsed the body.

#[cfg(feature = "gateway")]
mod json_body;
#[cfg(feature = "gateway")]
mod validate;

#[cfg(feature = "gateway")]
pub use json_body::{JsonBody, JsonBodyLayer, ResponseFuture};
#[cfg(feature = "gateway")]
pub use validate::{BodyCheck, DetailPath, at, invalid_request_body};

/// The request body parsed as JSON, in the request extensions (put there by
/// `JsonBody` with feature `gateway`).
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedJson(pub serde_json::Value);

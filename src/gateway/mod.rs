//! Building blocks of a model gateway's request pipeline.
//!
//! - [`JsonBodyLayer`]: the body limit and the one JSON parse, answering
//!   `REQUEST_TOO_LARGE` and `INVALID_JSON` in the route's envelope and handing
//!   the parsed value on in the request extensions ([`ParsedJson`]);
//! - [`BodyCheck`]: the validation-detail builder behind
//!   `INVALID_REQUEST_BODY`'s `details[].path`;
//! - [`RequestModel`]: the requested model, left in the extensions by the
//!   model step for the layers after it (the free tier's trace reads it).
//!
//! With [`SetEnvelopeStyleLayer`](crate::envelope::SetEnvelopeStyleLayer) setting
//! the route's envelope, the free-tier limit and the x402 layer after them,
//! they make a paid endpoint: see `examples/minimal_gateway.rs`.
//!
//! The layer and the validation builder come with feature `gateway`, so a
//! data API server does not build them. [`ParsedJson`] and [`RequestModel`]
//! are always here: they are the extensions other layers read (the free tier
//! traces the model from `RequestModel`), whoever put them there.

#[cfg(feature = "gateway")]
mod json_body;
mod request_model;
#[cfg(feature = "gateway")]
mod validate;

#[cfg(feature = "gateway")]
pub use json_body::{JsonBody, JsonBodyLayer, ResponseFuture};
pub use request_model::RequestModel;
#[cfg(feature = "gateway")]
pub use validate::{BodyCheck, DetailPath, at, invalid_request_body};

/// The request body parsed as JSON, in the request extensions (put there by
/// `JsonBody` with feature `gateway`).
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedJson(pub serde_json::Value);

/// The request body's bytes as read, in the request extensions beside
/// [`ParsedJson`] (a shared buffer, no copy): what the x402 layer's request
/// fingerprint digests, however a later step consumes the parsed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonBodyBytes(pub bytes::Bytes);

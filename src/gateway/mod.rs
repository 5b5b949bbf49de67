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
//! With [`EnvelopeStyleLayer`](crate::envelope::EnvelopeStyleLayer) setting
//! the route's envelope, the free-tier limit and the x402 layer after them,
//! they make a paid endpoint: see `examples/minimal_gateway.rs`.

mod json_body;
mod request_model;
mod validate;

pub use json_body::{JsonBody, JsonBodyLayer, ParsedJson, ResponseFuture};
pub use request_model::RequestModel;
pub use validate::{BodyCheck, DetailPath, at, invalid_request_body};

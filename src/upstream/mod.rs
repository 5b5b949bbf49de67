//! What the upstream said: a model provider's failure, sorted and scrubbed.
//!
//! A gateway forwards requests to model providers; when one fails, the
//! provider's status and text are evidence, not an answer. This module turns
//! them into what a client is told:
//!
//! - [`classify_upstream`]: the status and text as an [`ErrorCode`](crate::envelope::ErrorCode);
//! - [`free_model_override`]: a free model's capacity failure as
//!   `FREE_MODEL_FAILED` / `STREAM_FAILED`; [`suggests_failover`]: whether to
//!   point the client at other providers;
//! - [`redact`](crate::envelope::redact): the text cleaned for the envelope's
//!   `debug` field; it lives with the envelope, whose rule it is
//!   ([`GatewayError::with_debug`](crate::envelope::GatewayError::with_debug)
//!   applies it, so raw text never reaches a client).
//!
//! The wire shapes these codes travel in live in [`envelope`](crate::envelope).

mod classify;

pub use classify::{classify_upstream, free_model_override, status_in_text, suggests_failover};

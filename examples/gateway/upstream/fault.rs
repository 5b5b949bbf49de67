//! Upstream faults on demand, by model id.
//!
//! Each preset is a real provider's way of failing (status and text, with the
//! URLs, ids and key fragments real errors carry), so the gateway's
//! classification and redaction are exercised exactly as in production.

use std::collections::HashMap;
use std::future::pending;

use http::StatusCode;
use tokio::sync::mpsc;

use super::{
    BoxFuture, Completion, EventStream, SharedUpstream, StreamEvent, Upstream, UpstreamFault, Usage,
};
use crate::catalogue::Model;
use crate::request::ChatRequest;

/// How a model's upstream fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The upstream answers `status` with `text`.
    Answer { status: StatusCode, text: String },
    /// The connection fails before any answer (no status).
    Transport { text: String },
    /// The upstream never answers: the gateway's timeout decides.
    Hang,
    /// A stream starts, sends one piece of text, then fails with `text`.
    BreakStream { text: String },
    /// A stream starts, sends one piece of text, then falls silent; a whole
    /// answer never comes.
    StallStream,
    /// Not a failure: the answer streams whole, with a pause before each
    /// event, so a stream is still in flight when something else happens
    /// (a shutdown signal, in the drain test).
    SlowStream,
    /// Not a failure of the answer: its usage reports [`OVERCOUNT`] times
    /// the tokens it used (an upstream that overcounts), so a metered
    /// answer names more than was authorised.
    OvercountUsage,
}

/// The factor of [`Fault::OvercountUsage`].
const OVERCOUNT: u64 = 1_000_000;

/// `usage`, overcounted.
fn overcounted(usage: Usage) -> Usage {
    Usage {
        prompt_tokens: usage.prompt_tokens.saturating_mul(OVERCOUNT),
        completion_tokens: usage.completion_tokens.saturating_mul(OVERCOUNT),
    }
}

/// The pause of [`Fault::SlowStream`] before each event.
const SLOW_STREAM_PAUSE: std::time::Duration = std::time::Duration::from_millis(300);

/// Named presets, for `GATEWAY_FAULTS` and the tests: `(name, status, text)`.
const PRESETS: &[(&str, u16, &str)] = &[
    (
        "invalid_parameter",
        400,
        "Error code: 400 - {'error': {'message': \"Unsupported value: 'temperature' does not support 3.5 with this model.\", 'type': 'invalid_request_error', 'param': 'temperature'}} (request id: req_5Yb2kQ9wXr3LmN7p)",
    ),
    (
        "context_length",
        400,
        "Error code: 400 - {'error': {'message': \"This model's maximum context length is 128000 tokens. However, your messages resulted in 131234 tokens.\", 'code': 'context_length_exceeded'}}",
    ),
    (
        "content_filtered",
        400,
        "Error code: 400 - {'error': {'message': 'Your request was rejected as a result of our safety system.', 'code': 'content_policy_violation'}} served-by 10.42.7.19:8443",
    ),
    (
        "invalid_image_url",
        400,
        "Error code: 400 - {'error': {'message': 'Invalid image URL: https://cdn.customer-assets.example/u/8812/private.png?X-Amz-Signature=5e8f1a2b3c4d', 'code': 'invalid_image_url'}}",
    ),
    (
        "reasoning_format",
        400,
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. request-id: msg_01XFDUDYJgAACzvnp",
    ),
    (
        "tool_id_format",
        400,
        "messages.3.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$' (region us-east-1, deployment claude-prod-blue-3)",
    ),
    (
        "invalid_request",
        400,
        "invalid request: messages: roles must alternate between \"user\" and \"assistant\"",
    ),
    (
        "model_unavailable",
        529,
        "Error code: 529 - {'type': 'error', 'error': {'type': 'overloaded_error', 'message': 'Overloaded'}} from https://api.provider.example/v1/messages via 34.102.136.180",
    ),
    (
        "provider_config",
        401,
        "Error code: 401 - {'error': {'message': 'Incorrect API key provided: sk-proj-demoFault0001.', 'code': 'invalid_api_key'}}",
    ),
    (
        "rate_limited",
        429,
        "Error code: 429 - Rate limit reached in organization org-Xy12Ab34Cd56Ef78 on tokens per min (TPM): Limit 30000, Used 29850, Requested 1200.",
    ),
    (
        "internal_error",
        500,
        "Error code: 500 - The server had an error while processing your request. upstream=oai-prod-eastus2-07 pod=inference-7f9c8d-x2k4l",
    ),
    (
        "gateway_timeout",
        504,
        "504 Gateway Time-out: nginx/1.25.3 at gateway-edge-03.provider.internal",
    ),
];

impl Fault {
    /// A named preset: one of `PRESETS` (`rate_limited`, `context_length`, …),
    /// `hang`, `connect_refused`, `break_stream` or `stall_stream`.
    pub(crate) fn preset(name: &str) -> Option<Self> {
        match name {
            "hang" => return Some(Self::Hang),
            "connect_refused" => {
                return Some(Self::Transport {
                    text: "client error (Connect): tcp connect error: Connection refused (os error 111) at 10.0.12.45:8080".into(),
                });
            }
            "stall_stream" => return Some(Self::StallStream),
            "slow_stream" => return Some(Self::SlowStream),
            "overcount_usage" => return Some(Self::OvercountUsage),
            "break_stream" => {
                return Some(Self::BreakStream {
                    text: "upstream connect error or disconnect/reset before headers. reset reason: connection termination".into(),
                });
            }
            _ => {}
        }
        PRESETS
            .iter()
            .find(|(preset, ..)| *preset == name)
            .and_then(|(_, status, text)| {
                Some(Self::Answer {
                    status: StatusCode::from_u16(*status).ok()?,
                    text: (*text).to_owned(),
                })
            })
    }

    /// Every preset name.
    pub(crate) fn preset_names() -> impl Iterator<Item = &'static str> {
        PRESETS.iter().map(|(name, ..)| *name).chain([
            "hang",
            "connect_refused",
            "break_stream",
            "stall_stream",
            "slow_stream",
            "overcount_usage",
        ])
    }
}

/// Wraps an upstream; the models listed fail as configured, the rest pass through.
pub(crate) struct FaultInjecting {
    inner: SharedUpstream,
    faults: HashMap<String, Fault>,
}

impl FaultInjecting {
    pub(crate) fn new(inner: SharedUpstream, faults: HashMap<String, Fault>) -> Self {
        Self { inner, faults }
    }
}

impl Upstream for FaultInjecting {
    fn complete<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Completion, UpstreamFault>> {
        let Some(fault) = self.faults.get(model.id) else {
            return self.inner.complete(model, request);
        };
        Box::pin(async move {
            match fault {
                Fault::Answer { status, text } => {
                    Err(UpstreamFault::new(Some(*status), text.clone()))
                }
                Fault::Transport { text } | Fault::BreakStream { text } => {
                    Err(UpstreamFault::new(None, text.clone()))
                }
                Fault::Hang | Fault::StallStream => pending().await,
                Fault::SlowStream => self.inner.complete(model, request).await,
                Fault::OvercountUsage => {
                    let completion = self.inner.complete(model, request).await?;
                    Ok(Completion {
                        usage: overcounted(completion.usage),
                        ..completion
                    })
                }
            }
        })
    }

    fn stream<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, UpstreamFault>> {
        let Some(fault) = self.faults.get(model.id) else {
            return self.inner.stream(model, request);
        };
        Box::pin(async move {
            match fault {
                Fault::SlowStream => {
                    let mut events = self.inner.stream(model, request).await?;
                    let (sender, receiver) = mpsc::channel(1);
                    tokio::spawn(async move {
                        while let Some(event) = events.recv().await {
                            tokio::time::sleep(SLOW_STREAM_PAUSE).await;
                            if sender.send(event).await.is_err() {
                                return;
                            }
                        }
                    });
                    Ok(receiver)
                }
                Fault::OvercountUsage => {
                    let mut events = self.inner.stream(model, request).await?;
                    let (sender, receiver) = mpsc::channel(1);
                    tokio::spawn(async move {
                        while let Some(mut event) = events.recv().await {
                            if let Ok(StreamEvent::Finished { usage, .. }) = &mut event {
                                *usage = overcounted(*usage);
                            }
                            if sender.send(event).await.is_err() {
                                return;
                            }
                        }
                    });
                    Ok(receiver)
                }
                Fault::Hang => pending().await,
                Fault::BreakStream { text } => {
                    let (sender, receiver) = mpsc::channel(2);
                    let _ = sender.try_send(Ok(StreamEvent::Text("partial".into())));
                    let _ = sender.try_send(Err(UpstreamFault::new(None, text.clone())));
                    Ok(receiver)
                }
                Fault::StallStream => {
                    let (sender, receiver) = mpsc::channel(1);
                    let _ = sender.try_send(Ok(StreamEvent::Text("partial".into())));
                    // Hold the stream open, silent, until the client goes away.
                    tokio::spawn(async move { sender.closed().await });
                    Ok(receiver)
                }
                Fault::Answer { status, text } => {
                    Err(UpstreamFault::new(Some(*status), text.clone()))
                }
                Fault::Transport { text } => Err(UpstreamFault::new(None, text.clone())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_name_resolves() {
        for name in Fault::preset_names() {
            assert!(Fault::preset(name).is_some(), "{name}");
        }
        assert_eq!(Fault::preset("no_such_fault"), None);
    }
}

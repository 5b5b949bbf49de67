//! Where answers come from: model upstreams behind one trait.
//!
//! - [`EchoUpstream`]: the embedded, deterministic model family; works offline.
//! - [`OpenAiUpstream`]: any OpenAI-compatible HTTP API (base URL and key per provider).
//! - [`FaultInjecting`]: wraps another upstream and makes chosen model ids fail
//!   the way real providers do, so tests and demos can produce every fault.
//!
//! [`ProviderRouter`] picks the upstream of a model's provider.

mod echo;
mod fault;
mod openai;

use std::collections::HashMap;
use std::sync::Arc;

use http::StatusCode;
use tokio::sync::mpsc;

pub(crate) use echo::EchoUpstream;
pub(crate) use fault::{Fault, FaultInjecting};
pub(crate) use openai::{ApiKey, OpenAiUpstream};

use crate::catalogue::Model;
use crate::request::ChatRequest;

pub(crate) use walletgate::store::BoxFuture;

/// Why an upstream produced no answer: its status (when it answered at all)
/// and its error text, raw. The gateway classifies and redacts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamFault {
    pub(crate) status: Option<StatusCode>,
    pub(crate) text: String,
}

impl UpstreamFault {
    pub(crate) fn new(status: Option<StatusCode>, text: impl Into<String>) -> Self {
        Self {
            status,
            text: text.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The answer reached `max_tokens`.
    Length,
}

impl FinishReason {
    /// The OpenAI spelling (`finish_reason`).
    pub(crate) fn openai(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }

    /// The Anthropic spelling (`stop_reason`).
    pub(crate) fn anthropic(self) -> &'static str {
        match self {
            Self::Stop => "end_turn",
            Self::Length => "max_tokens",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
}

/// A whole answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) text: String,
    pub(crate) finish: FinishReason,
    pub(crate) usage: Usage,
}

/// One step of a streamed answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StreamEvent {
    /// More answer text.
    Text(String),
    /// The answer is complete.
    Finished { finish: FinishReason, usage: Usage },
}

/// A streamed answer: events until `Finished`, or a fault mid-stream.
pub(crate) type EventStream = mpsc::Receiver<Result<StreamEvent, UpstreamFault>>;

/// A model upstream.
///
/// `stream` resolves once the upstream has accepted the request, so a fault
/// it reports up front still becomes a proper error status.
pub(crate) trait Upstream: Send + Sync + 'static {
    fn complete<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Completion, UpstreamFault>>;

    fn stream<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, UpstreamFault>>;
}

pub(crate) type SharedUpstream = Arc<dyn Upstream>;

/// Sends each model to its provider's upstream, or to the default one.
pub(crate) struct ProviderRouter {
    by_provider: HashMap<String, SharedUpstream>,
    default: SharedUpstream,
}

impl ProviderRouter {
    pub(crate) fn new(default: SharedUpstream) -> Self {
        Self {
            by_provider: HashMap::new(),
            default,
        }
    }

    pub(crate) fn with_provider(
        mut self,
        provider: impl Into<String>,
        upstream: SharedUpstream,
    ) -> Self {
        self.by_provider.insert(provider.into(), upstream);
        self
    }

    fn pick(&self, model: &Model) -> &SharedUpstream {
        self.by_provider
            .get(model.provider())
            .unwrap_or(&self.default)
    }
}

impl Upstream for ProviderRouter {
    fn complete<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Completion, UpstreamFault>> {
        self.pick(model).complete(model, request)
    }

    fn stream<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, UpstreamFault>> {
        self.pick(model).stream(model, request)
    }
}

/// Words of `text`, counted as tokens by the echo family and the streaming split.
pub(crate) fn word_count(text: &str) -> u64 {
    u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX)
}

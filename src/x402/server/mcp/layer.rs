//! [`X402McpLayer`], its tool pricing, and how it is built from an
//! [`X402LayerBuilder`].

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tower_layer::Layer;

use super::service::X402Mcp;
use crate::x402::ConfigError;
use crate::x402::server::config::Config;
use crate::x402::server::{Price, PriceRefusal, QuoteExtensionMap, X402Layer, X402LayerBuilder};

/// The largest JSON-RPC request body read by default (1 MiB): a tool call's
/// arguments past it are refused before any parsing.
pub const DEFAULT_MCP_BODY_BYTES: usize = 1 << 20;

/// The largest paid tool answer read by default (16 MiB: an image as
/// base64). A paid answer is read whole before it is settled; one past the
/// bound is not served, and not charged.
pub const DEFAULT_MCP_ANSWER_BYTES: usize = 16 << 20;

/// Prices a tool call by tool name and arguments, before the flat fee (as
/// [`Pricing`](crate::x402::server::Pricing) prices a request).
///
/// `Ok(Price::Free)` lets the call through unpaid: a free tool, or a name
/// the inner service answers itself (an unknown tool). A refusal is answered
/// as a tool error carrying its code. Closures `Fn(&str, &Value) ->
/// Result<Price, PriceRefusal>` implement it.
pub trait ToolPricing: Send + Sync + 'static {
    /// The price of calling `tool` with `arguments` (`{}` when none were sent).
    fn price(&self, tool: &str, arguments: &Value) -> Result<Price, PriceRefusal>;

    /// The server's own extensions of a paid tool's PaymentRequired
    /// (discovery's `bazaar`); none by default.
    fn extensions(&self, _tool: &str, _price: &Price) -> Option<QuoteExtensionMap> {
        None
    }
}

impl<F> ToolPricing for F
where
    F: Fn(&str, &Value) -> Result<Price, PriceRefusal> + Send + Sync + 'static,
{
    fn price(&self, tool: &str, arguments: &Value) -> Result<Price, PriceRefusal> {
        self(tool, arguments)
    }
}

/// x402 payment for the tools of an MCP service over streamable HTTP.
///
/// Built by [`X402LayerBuilder::build_mcp`], or from a built [`X402Layer`]
/// with [`new`](Self::new) (the two fronts then share the replay guard,
/// answer store, quotes and hook). See the [module docs](super).
#[derive(Clone)]
#[must_use]
pub struct X402McpLayer {
    pub(super) config: Arc<Config>,
    pub(super) pricing: Arc<dyn ToolPricing>,
    pub(super) max_body_bytes: usize,
    pub(super) max_answer_bytes: usize,
}

impl X402McpLayer {
    /// The MCP front of `layer`'s payment flow, its tools priced by `pricing`.
    pub fn new(layer: &X402Layer, pricing: impl ToolPricing) -> Self {
        Self {
            config: layer.config.clone(),
            pricing: Arc::new(pricing),
            max_body_bytes: DEFAULT_MCP_BODY_BYTES,
            max_answer_bytes: DEFAULT_MCP_ANSWER_BYTES,
        }
    }

    /// The largest request body read (default [`DEFAULT_MCP_BODY_BYTES`]);
    /// a larger one is a JSON-RPC error, 413.
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The largest paid answer read before settlement (default
    /// [`DEFAULT_MCP_ANSWER_BYTES`]); a larger one is a JSON-RPC error,
    /// nothing settled.
    pub fn with_max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// The flat fee added to each price that excludes it.
    pub fn flat_fee(&self) -> crate::x402::wire::types::UsdAmount {
        self.config.flat_fee
    }
}

impl X402LayerBuilder {
    /// Validates and builds the MCP front ([`X402McpLayer`]) of this
    /// configuration, its tools priced by `pricing`. Neither a request
    /// pricing ([`with_pricing`](Self::with_pricing)) nor a public base URL
    /// is needed: tool calls are priced by `pricing` alone, and a tool's
    /// resource is `mcp://tool/<name>`.
    pub fn build_mcp(self, pricing: impl ToolPricing) -> Result<X402McpLayer, ConfigError> {
        let layer = self.for_tools().build()?;
        Ok(X402McpLayer::new(&layer, pricing))
    }
}

impl<S> Layer<S> for X402McpLayer {
    type Service = X402Mcp<S>;

    fn layer(&self, inner: S) -> Self::Service {
        X402Mcp::new(inner, self.clone())
    }
}

impl fmt::Debug for X402McpLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X402McpLayer")
            .field("config", &self.config)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .finish_non_exhaustive()
    }
}

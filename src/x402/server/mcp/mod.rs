//! The MCP front of the payment flow: x402's MCP transport for tools served
//! over streamable HTTP, in front of any tower MCP service.
//!
//! [`X402McpLayer`] reads each POSTed JSON-RPC body (bounded) and lets
//! everything through but a `tools/call` of a tool its [`ToolPricing`]
//! prices. For that call:
//!
//! - unpaid: the PaymentRequired tool result, as the official wrappers write
//!   it (`isError: true`, the PaymentRequired object as `structuredContent`
//!   and as JSON text in `content[0]`, `resource.url` `mcp://tool/<name>`);
//! - paid (`params._meta["x402/payment"]`, the payment payload as an
//!   object): admitted by the same flow as [`X402`](super::X402) (claim,
//!   replay guard, payment-identifier, verify), the inner service runs, and
//!   its answer (a JSON body or an SSE stream) is settled only when the tool
//!   result is not `isError`, with `_meta["x402/payment-response"]` added; a
//!   failed settlement withholds the output;
//! - refused: the PaymentRequired result again, its `error` the reason and
//!   `code` the REST error code (`PAYMENT_REPLAY`, …).
//!
//! Every rejection is a JSON-RPC answer (a tool result or a JSON-RPC error),
//! never an `Err`. The layer is built from the same [`X402LayerBuilder`]
//! (`build_mcp`) as the HTTP layer, so both fronts share stores and quotes.
//!
//! [`X402LayerBuilder`]: super::X402LayerBuilder

mod future;
mod layer;
mod rpc;
mod service;

pub use future::ResponseFuture;
pub use layer::{DEFAULT_MCP_ANSWER_BYTES, DEFAULT_MCP_BODY_BYTES, ToolPricing, X402McpLayer};
// Read by the paying client too (`client::pay::call_tool`).
#[cfg(feature = "client-pay")]
pub(crate) use rpc::Answer;
pub use rpc::{PAYMENT_META, PAYMENT_REQUIRED_ERROR, PAYMENT_RESPONSE_META, tool_resource_url};
pub use service::X402Mcp;

//! The server side of x402: [`X402Layer`] (and its builder), the [`X402`]
//! service (the HTTP front of the payment flow) and its [`ResponseFuture`],
//! prices, quotes, receipts, the amount a metered answer settles
//! ([`SettleAmount`]) and the settlement hook, the settling stream body, and
//! the replay guard; [`mcp`], the MCP front of the same payment flow
//! (x402's MCP transport for `tools/call`).
//!
//! See the [`x402` module docs](super) for the payment flow.

mod answers;
mod bazaar;
mod config;
#[cfg(feature = "siwx")]
pub(crate) mod entitlements;
mod extensions;
mod flow;
mod future;
mod joined;
pub(crate) mod layer;
pub mod mcp;
#[cfg(feature = "mpp")]
pub mod mpp;
mod offer_receipt;
pub mod payment_id;
mod pricing;
pub(crate) mod quote;
mod receipt;
pub(crate) mod replay;
mod service;
#[cfg(feature = "siwx")]
mod siwx;
mod stream;

pub use answers::{
    AnswerLimits, AnswerStore, Begun, DEFAULT_ANSWER_MAX_BYTES, DEFAULT_ANSWER_RETENTION_SECS,
    DEFAULT_ANSWER_STORE_BYTES, InMemoryAnswerStore, KeptAnswer,
};
pub use bazaar::{BAZAAR, BazaarRoute, BazaarTool, JSON_SCHEMA_2020_12};
#[cfg(feature = "siwx")]
pub use entitlements::{DEFAULT_ENTITLEMENT_CAPACITY, EntitlementStore, InMemoryEntitlementStore};
pub use extensions::{QuoteExtensionMap, QuoteExtensions};
pub use flow::{
    CutStreamLimit, EXTENSION_ECHO_MISMATCH, METERED_PAYMENTS_SUSPENDED, SETTLEMENT_PENDING,
    SettleAmount,
};
pub use future::ResponseFuture;
pub use layer::{X402Layer, X402LayerBuilder};
pub use offer_receipt::OfferSigner;
pub use pricing::{Price, PriceRefusal, PriceTable, Pricing, RequestPrice};
pub use quote::{
    BASE_SEPOLIA_USDC, BASE_USDC, DEFAULT_MAX_TIMEOUT_SECS, PaymentOption, QUOTE_ERROR,
    QUOTE_MESSAGE, matching_offer,
};
pub use receipt::{PaymentReceipt, SettledPayment, SettlementHook, SettlementHookError};
pub use replay::{AuthorizationKey, Claim, InMemoryNonceStore, NonceStore, SpentAuthorization};
pub use service::X402;
#[cfg(feature = "siwx")]
pub use siwx::{SIGN_IN_WITH_X, SIGN_IN_WITH_X_HEADER, SIWX_MAX_AGE_SECS, SignInWithX};
pub use stream::{PAYMENT_RESPONSE_EVENT, X402Body};

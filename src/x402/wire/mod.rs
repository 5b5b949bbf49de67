//! The x402 v2 wire: the protocol's types, the header codec and the EIP-712
//! typed data an exact-EVM payment signs (EIP-3009) and an `upto` payment
//! signs (Permit2 with x402's witness).
//!
//! Everything here is what travels (headers, facilitator bodies, the signed
//! struct), shared by the server, the facilitators and the paying client;
//! nothing here decides anything. [`codec`] holds `encode`, `decode` and
//! [`DecodeError`](codec::DecodeError).

pub mod codec;
pub(crate) mod eip712;
mod evm;
mod header;
mod offer_receipt;
mod permit2;
pub(crate) mod types;

pub use eip712::{ExactEvmDomain, TokenId, TransferWithAuthorization};
pub use evm::ExactEvmPayment;
pub(crate) use evm::{EvmDecoding, WrittenAddress};
pub(crate) use header::{Echoes, PaymentHeader};
pub(crate) use offer_receipt::extension;
pub use offer_receipt::{
    FORMAT_EIP712, OFFER_RECEIPT, OFFER_RECEIPT_VERSION, OfferPayload, ReceiptPayload,
    SignatureError, Signed, SignedOffer, SignedPayload, SignedReceipt, SignedUsage,
    USAGE_STATEMENT, UsagePayload, offers_of, receipt_of, usage_of,
};
pub use permit2::{
    ASSET_TRANSFER_METHOD_PERMIT2, PERMIT2_ADDRESS, PermitWitnessTransferFrom, TokenPermissions,
    UPTO_PROXY_ADDRESS, UptoPayment, Witness, permit2_domain,
};
pub use types::{
    AtomicAmount, Eip3009Authorization, ExactEvmPayload, Network, PaymentPayload, PaymentRequired,
    PaymentRequirements, ResourceInfo, SCHEME_EXACT, SCHEME_UPTO, SettleResponse, SupportedKind,
    SupportedResponse, UsdAmount, ValueError, VerifyResponse, X402_VERSION,
};

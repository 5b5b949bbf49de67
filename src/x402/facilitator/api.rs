//! The verify/settle hooks: a [`Facilitator`] checks a payment before the
//! inner service runs and settles it after a 2xx answer.
//!
//! Implementations: [`LocalEvmFacilitator`](super::LocalEvmFacilitator)
//! (in-process, against a [`Ledger`](super::Ledger)) and, with the
//! `http-facilitator` feature, `HttpFacilitator` (the standard HTTP API).
//! Reasons are free-form strings that differ per SDK; [`code_for_reason`]
//! maps any of them to the specification's codes.

use std::fmt;
use std::sync::{Arc, OnceLock};

use alloy_primitives::{Address, B256};
use serde::{Deserialize, Serialize};

use super::idempotency::IdempotencyKey;
use crate::envelope::ErrorCode;
use crate::store::BoxFuture;
use crate::x402::wire::types::{
    AtomicAmount, PaymentPayload, PaymentRequirements, SettleResponse, SupportedResponse,
    VerifyResponse,
};
use crate::x402::wire::{EvmDecoding, ExactEvmPayment, PaymentHeader};

/// A payment a facilitator is asked about: the client's payload, the
/// server's matching offer, and the payload read once into typed values.
///
/// It serialises as the body of `POST /verify` and `POST /settle`
/// (`{x402Version, paymentPayload, paymentRequirements}`, the payload as the
/// client sent it) and reads back from one. `payment_requirements` is the
/// server's own matching offer, not the client's echo. The exact-EVM
/// authorization is decoded when the request is built and its signer
/// recovered at most once, however often it is verified and settled.
#[derive(Clone)]
pub struct FacilitatorRequest {
    x402_version: u8,
    payment: PaymentSource,
    payment_requirements: Arc<PaymentRequirements>,
    evm: EvmDecoding,
    /// The EIP-712 digest checked and the signer it recovered to.
    pub(super) recovered: OnceLock<(B256, Option<Address>)>,
    payer_text: OnceLock<String>,
    /// Who asks (the `Idempotency-Key` of a `/settle`); not part of the body.
    idempotency_key: Option<IdempotencyKey>,
    /// Set by a facilitator that found the payer is a contract (a smart
    /// wallet, judged by its own code, which may change its mind later).
    contract_payer: OnceLock<()>,
}

/// Where the client's payment comes from: a whole [`PaymentPayload`], or a
/// server's decoded header whose `Value` tree is built on first ask.
#[derive(Clone)]
enum PaymentSource {
    Payload(PaymentPayload),
    Header {
        header: Box<PaymentHeader>,
        payload: OnceLock<PaymentPayload>,
    },
}

impl FacilitatorRequest {
    /// `payload` offered against `requirements` (the server's offer it
    /// matched); its exact-EVM authorization, if it is one, is decoded here.
    pub fn new(payload: PaymentPayload, requirements: PaymentRequirements) -> Self {
        Self {
            x402_version: payload.x402_version,
            evm: EvmDecoding::of(&payload),
            payment: PaymentSource::Payload(payload),
            payment_requirements: Arc::new(requirements),
            recovered: OnceLock::new(),
            payer_text: OnceLock::new(),
            idempotency_key: None,
            contract_payer: OnceLock::new(),
        }
    }

    /// [`new`](Self::new) from a decoded `PAYMENT-SIGNATURE`, its exact-EVM
    /// fields read from the payload's raw text, against a quote's shared offer.
    pub(crate) fn from_header(
        mut header: PaymentHeader,
        requirements: Arc<PaymentRequirements>,
    ) -> Self {
        let evm = (header.exact_evm.take()).unwrap_or_else(|| header.evm_decoding());
        Self {
            x402_version: header.x402_version,
            evm,
            payment: PaymentSource::Header {
                header: Box::new(header),
                payload: OnceLock::new(),
            },
            payment_requirements: requirements,
            recovered: OnceLock::new(),
            payer_text: OnceLock::new(),
            idempotency_key: None,
            contract_payer: OnceLock::new(),
        }
    }

    /// The same request, asked by the holder of `key`: a settlement answers
    /// `success: true` again only to the key its first `/settle` carried.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Whether the facilitator that verified it found the payer is a
    /// contract: its own code judges the signature again when the transfer
    /// is mined, so its payment is settled before a stream's first byte.
    pub fn payer_is_contract(&self) -> bool {
        self.contract_payer.get().is_some()
    }

    /// Notes that the payer is a contract (see [`payer_is_contract`](Self::payer_is_contract)).
    #[cfg(feature = "evm-settler")]
    pub(crate) fn note_contract_payer(&self) {
        let _ = self.contract_payer.set(());
    }

    /// The same payment asked to settle `amount` (a scheme that authorises
    /// a maximum settles what was used: `paymentRequirements.amount` is the
    /// amount settled, as the official facilitators read it).
    pub fn with_settled_amount(&self, amount: AtomicAmount) -> Self {
        let mut request = self.clone();
        let mut requirements = (*self.payment_requirements).clone();
        requirements.amount = amount;
        request.payment_requirements = Arc::new(requirements);
        request
    }

    /// The caller's `Idempotency-Key`, if it named one.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.idempotency_key.as_ref()
    }

    /// The payload's version.
    pub fn x402_version(&self) -> u8 {
        self.x402_version
    }

    /// The client's payment, as received.
    pub fn payment_payload(&self) -> &PaymentPayload {
        match &self.payment {
            PaymentSource::Payload(payload) => payload,
            PaymentSource::Header { header, payload } => {
                payload.get_or_init(|| header.to_payload())
            }
        }
    }

    /// The offer the client says it accepted (its echo, not the server's offer).
    pub(crate) fn accepted(&self) -> &PaymentRequirements {
        match &self.payment {
            PaymentSource::Payload(payload) => &payload.accepted,
            PaymentSource::Header { header, .. } => &header.accepted,
        }
    }

    /// `payload.authorization.from` as the client wrote it, for refusals
    /// before any verdict.
    pub(crate) fn claimed_payer(&self) -> Option<&str> {
        if let PaymentSource::Header { header, .. } = &self.payment
            && let Some(payer) = header.claimed_payer()
        {
            return Some(payer);
        }
        let payload = &self.payment_payload().payload;
        // `exact`'s EIP-3009 authorization, or `upto`'s Permit2 permit.
        payload
            .get("authorization")
            .or_else(|| payload.get("permit2Authorization"))?
            .get("from")?
            .as_str()
    }

    /// The offer it matched.
    pub fn payment_requirements(&self) -> &PaymentRequirements {
        &self.payment_requirements
    }

    /// The exact-EVM payment, typed, if the payload is one whose fields parse.
    pub fn exact_evm(&self) -> Option<&ExactEvmPayment> {
        self.evm.payment()
    }

    pub(crate) fn evm_decoding(&self) -> &EvmDecoding {
        &self.evm
    }

    /// The EIP-712 digest of the authorization and its signer, computed and
    /// recovered once per request: the payload and the offer it is checked
    /// against cannot change after [`new`](Self::new), so verify and then
    /// settle ask once.
    pub(crate) fn signer(
        &self,
        digest: impl FnOnce() -> B256,
        recover: impl FnOnce(&B256) -> Option<Address>,
    ) -> Option<Address> {
        self.recovered
            .get_or_init(|| {
                let digest = digest();
                let signer = recover(&digest);
                (digest, signer)
            })
            .1
    }

    /// The payer as the payment wrote it (`authorization.from`, EIP-55 or
    /// not), as the official facilitators answer it; written once for every
    /// verdict that names it, with no hashing.
    pub(crate) fn payer_text(&self) -> Option<&str> {
        let written = self.evm.written_payer()?;
        Some(self.payer_text.get_or_init(|| written.to_text()))
    }
}

impl fmt::Debug for FacilitatorRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FacilitatorRequest")
            .field("x402_version", &self.x402_version)
            .field("payment_requirements", &self.payment_requirements)
            .field("exact_evm", &self.exact_evm())
            .finish_non_exhaustive()
    }
}

impl PartialEq for FacilitatorRequest {
    fn eq(&self, other: &Self) -> bool {
        self.x402_version == other.x402_version
            && self.payment_payload() == other.payment_payload()
            && self.payment_requirements == other.payment_requirements
    }
}

/// The wire body, borrowed for writing.
#[derive(Serialize)]
struct WireRequestRef<'a> {
    #[serde(rename = "x402Version")]
    x402_version: u8,
    #[serde(rename = "paymentPayload")]
    payment_payload: &'a PaymentPayload,
    #[serde(rename = "paymentRequirements")]
    payment_requirements: &'a PaymentRequirements,
}

/// The wire body, owned for reading.
#[derive(Deserialize)]
struct WireRequest {
    #[serde(rename = "x402Version")]
    x402_version: u8,
    #[serde(rename = "paymentPayload")]
    payment_payload: PaymentPayload,
    #[serde(rename = "paymentRequirements")]
    payment_requirements: PaymentRequirements,
}

impl Serialize for FacilitatorRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireRequestRef {
            x402_version: self.x402_version,
            payment_payload: self.payment_payload(),
            payment_requirements: &self.payment_requirements,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FacilitatorRequest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WireRequest::deserialize(deserializer)?;
        let mut request = Self::new(wire.payment_payload, wire.payment_requirements);
        request.x402_version = wire.x402_version;
        Ok(request)
    }
}

/// Verifies and settles payments.
pub trait Facilitator: Send + Sync + 'static {
    /// Checks the payment without moving funds.
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>>;

    /// Moves the funds. Anything but `success: true` is a failure.
    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>>;

    /// The payment kinds handled.
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>>;
}

forward_to_arc! { Facilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>>;
    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>>;
    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>>;
}}

/// What went wrong asking a facilitator (not a verdict on the payment).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FacilitatorErrorKind {
    /// Unreachable, timed out, or answered 5xx: nothing was consumed, the same payment may be resent.
    Unavailable,
    /// Answered something that is not the protocol.
    Protocol,
    /// Settlement broadcast a transaction whose outcome is not known yet (no
    /// receipt within the wait), or asked for a settlement whose answer was
    /// lost: the transfer may still land, so the authorization must stay
    /// claimed. Asking to settle the same payment again reports its outcome;
    /// [`FacilitatorError::transaction`] names the transaction when known.
    Pending,
}

/// A failure to get a verdict from a facilitator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FacilitatorError {
    kind: FacilitatorErrorKind,
    detail: String,
    transaction: Option<String>,
}

impl FacilitatorError {
    /// The facilitator could not be asked.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self {
            kind: FacilitatorErrorKind::Unavailable,
            detail: detail.into(),
            transaction: None,
        }
    }

    /// The facilitator answered outside the protocol.
    pub fn protocol(detail: impl Into<String>) -> Self {
        Self {
            kind: FacilitatorErrorKind::Protocol,
            detail: detail.into(),
            transaction: None,
        }
    }

    /// Transaction `transaction` was broadcast and its outcome is not known yet.
    pub fn pending(transaction: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: FacilitatorErrorKind::Pending,
            detail: detail.into(),
            transaction: Some(transaction.into()),
        }
    }

    /// A settlement was asked for and its answer lost (sent, then no answer
    /// within the timeout): the transfer may have happened, no transaction
    /// is known. [Pending](FacilitatorErrorKind::Pending), without a transaction.
    pub fn answer_lost(detail: impl Into<String>) -> Self {
        Self {
            kind: FacilitatorErrorKind::Pending,
            detail: detail.into(),
            transaction: None,
        }
    }

    /// The transaction broadcast, when the settlement is [pending](FacilitatorErrorKind::Pending).
    pub fn transaction(&self) -> Option<&str> {
        self.transaction.as_deref()
    }

    /// Which kind of failure.
    pub fn kind(&self) -> &FacilitatorErrorKind {
        &self.kind
    }

    /// What happened (no secrets: never the payment itself).
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for FacilitatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FacilitatorErrorKind::Unavailable => {
                write!(f, "facilitator unavailable: {}", self.detail)
            }
            FacilitatorErrorKind::Protocol => {
                write!(f, "facilitator protocol error: {}", self.detail)
            }
            FacilitatorErrorKind::Pending => match &self.transaction {
                Some(transaction) => write!(
                    f,
                    "settlement pending: transaction {transaction} has no receipt yet: {}",
                    self.detail
                ),
                None => write!(
                    f,
                    "settlement pending: its answer was lost: {}",
                    self.detail
                ),
            },
        }
    }
}

impl std::error::Error for FacilitatorError {}

/// Reason strings the local verifier emits (the specification's spellings).
pub mod reason {
    /// The payer's balance is below the amount.
    pub const INSUFFICIENT_FUNDS: &str = "insufficient_funds";
    /// `validAfter` is in the future.
    pub const VALID_AFTER: &str = "invalid_exact_evm_payload_authorization_valid_after";
    /// `validBefore` is past, or closer than the safety margin.
    pub const VALID_BEFORE: &str = "invalid_exact_evm_payload_authorization_valid_before";
    /// `value` differs from the amount.
    pub const VALUE_MISMATCH: &str = "invalid_exact_evm_payload_authorization_value_mismatch";
    /// The signature does not recover to `from`.
    pub const SIGNATURE: &str = "invalid_exact_evm_payload_signature";
    /// The signature is not one the chain takes: `v` other than 27/28, or high `s`.
    pub const SIGNATURE_NOT_CANONICAL: &str = "invalid_exact_evm_payload_signature_not_canonical";
    /// The authorization stays valid longer than the offer's `maxTimeoutSeconds` (plus skew) from now.
    pub const AUTHORIZATION_TOO_LONG: &str = "authorization_lifetime_exceeds_max_timeout_seconds";
    /// `to` differs from `payTo`.
    pub const RECIPIENT_MISMATCH: &str = "invalid_exact_evm_payload_recipient_mismatch";
    /// The authorization nonce was used on chain already.
    pub const NONCE_ALREADY_USED: &str = "invalid_exact_evm_nonce_already_used";
    /// `extra.name`/`extra.version` missing.
    pub const MISSING_EIP712_DOMAIN: &str = "invalid_exact_evm_missing_eip712_domain";
    /// Network unknown or different from the offer's.
    pub const INVALID_NETWORK: &str = "invalid_network";
    /// The payload is malformed.
    pub const INVALID_PAYLOAD: &str = "invalid_payload";
    /// The requirements are malformed.
    pub const INVALID_PAYMENT_REQUIREMENTS: &str = "invalid_payment_requirements";
    /// Not the exact scheme.
    pub const UNSUPPORTED_SCHEME: &str = "unsupported_scheme";
    /// Not x402 version 2.
    pub const INVALID_X402_VERSION: &str = "invalid_x402_version";
    /// The payment matches none of the offers.
    pub const NO_MATCHING_REQUIREMENTS: &str = "no_matching_payment_requirements";
    /// Settlement failed for a reason the ledger did not name.
    pub const UNEXPECTED_SETTLE_ERROR: &str = "unexpected_settle_error";

    // The `upto` scheme's reasons, as the official facilitator (2.27) words them.

    /// Not the `upto` scheme on both the payment and the offer.
    pub const UPTO_SCHEME: &str = "invalid_upto_evm_scheme";
    /// The payment's network is not the offer's.
    pub const UPTO_NETWORK_MISMATCH: &str = "invalid_upto_evm_network_mismatch";
    /// The payload is not a Permit2 authorization.
    pub const UNSUPPORTED_PAYLOAD_TYPE: &str = "unsupported_payload_type";
    /// The permit's spender is not x402's `upto` proxy.
    pub const PERMIT2_SPENDER: &str = "invalid_permit2_spender";
    /// The witness's recipient is not `payTo`.
    pub const PERMIT2_RECIPIENT_MISMATCH: &str = "invalid_permit2_recipient_mismatch";
    /// The witness names another facilitator than the one asked.
    pub const UPTO_FACILITATOR_MISMATCH: &str = "upto_facilitator_mismatch";
    /// The permit's deadline is past, or closer than the safety margin.
    pub const PERMIT2_DEADLINE_EXPIRED: &str = "permit2_deadline_expired";
    /// The witness's `validAfter` is in the future.
    pub const PERMIT2_NOT_YET_VALID: &str = "permit2_not_yet_valid";
    /// The permitted amount is not the offer's ceiling.
    pub const PERMIT2_AMOUNT_MISMATCH: &str = "permit2_amount_mismatch";
    /// The permitted token is not the offer's asset.
    pub const PERMIT2_TOKEN_MISMATCH: &str = "permit2_token_mismatch";
    /// The permit's signature is not the payer's.
    pub const PERMIT2_SIGNATURE: &str = "invalid_permit2_signature";
    /// The payer's balance is below the ceiling.
    pub const PERMIT2_INSUFFICIENT_BALANCE: &str = "permit2_insufficient_balance";
    /// The payer has not approved Permit2 for the ceiling.
    pub const PERMIT2_ALLOWANCE_REQUIRED: &str = "permit2_allowance_required";
    /// The Permit2 nonce was used already.
    pub const PERMIT2_INVALID_NONCE: &str = "permit2_invalid_nonce";
    /// The amount to settle is above the permitted ceiling.
    pub const UPTO_SETTLEMENT_EXCEEDS_AMOUNT: &str =
        "invalid_upto_evm_payload_settlement_exceeds_amount";
}

/// The specification's code for a facilitator's reason string.
///
/// The SDKs word reasons differently (`insufficient_funds`,
/// `invalid_exact_evm_insufficient_balance`, …); the mapping looks at what
/// the reason is about: funds or the validity window (`PAYMENT_UNFUNDED`,
/// since both make the transfer revert), a used nonce (`PAYMENT_REPLAY`), a
/// stale Solana blockhash (`PAYMENT_BLOCKHASH_STALE`), anything else
/// (`PAYMENT_INVALID`).
///
/// ```
/// use walletgate::envelope::ErrorCode;
/// use walletgate::x402::facilitator::code_for_reason;
///
/// assert_eq!(code_for_reason("insufficient_funds"), ErrorCode::PaymentUnfunded);
/// assert_eq!(code_for_reason("invalid_exact_evm_payload_signature"), ErrorCode::PaymentInvalid);
/// ```
pub fn code_for_reason(reason: &str) -> ErrorCode {
    let reason = reason.to_ascii_lowercase();
    let about = |words: &[&str]| words.iter().any(|word| reason.contains(word));
    if about(&["blockhash", "block_height_exceeded", "expired_signature"]) {
        ErrorCode::PaymentBlockhashStale
    } else if about(&[
        "nonce_already_used",
        "invalid_nonce",
        "duplicate_settlement",
        "already_used",
        "replay",
    ]) {
        ErrorCode::PaymentReplay
    } else if about(&[
        "insufficient",
        "allowance",
        "valid_after",
        "valid_before",
        "not_yet_valid",
        "simulation_failed",
        "expired",
    ]) {
        ErrorCode::PaymentUnfunded
    } else {
        ErrorCode::PaymentInvalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standard `/verify` and `/settle` body: the three members in this
    /// order, the payload exactly as the client sent it; read back, the same
    /// request with its authorization decoded.
    #[test]
    fn a_request_is_the_standard_body_and_reads_back_decoded() {
        let offer = crate::x402::server::PaymentOption::base_sepolia_usdc(
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        )
        .unwrap()
        .requirements_for_amount(crate::x402::wire::AtomicAmount::new(10_000));
        let authorization = serde_json::json!({
            "from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
            "value": "10000",
            "validAfter": "0",
            "validBefore": "1750000300",
            "nonce": format!("0x{}", "11".repeat(32)),
        });
        let payload = PaymentPayload {
            x402_version: 2,
            resource: None,
            accepted: offer.clone(),
            payload: serde_json::json!({"signature": "0x00", "authorization": authorization}),
            extensions: None,
        };
        let request = FacilitatorRequest::new(payload.clone(), offer.clone());
        let body = serde_json::to_string(&request).unwrap();
        let expected = format!(
            r#"{{"x402Version":2,"paymentPayload":{},"paymentRequirements":{}}}"#,
            serde_json::to_string(&payload).unwrap(),
            serde_json::to_string(&offer).unwrap(),
        );
        assert_eq!(body, expected);
        let back: FacilitatorRequest = serde_json::from_str(&body).unwrap();
        assert_eq!(back, request);
        let evm = back.exact_evm().unwrap();
        assert_eq!(evm.valid_before, 1_750_000_300);
        assert_eq!(evm.nonce.0, [0x11; 32]);
        // A signature the chain would not take is kept as none, refused later.
        assert_eq!(evm.signature, None);
    }

    #[test]
    fn every_known_reason_maps_to_its_code() {
        let cases = [
            (reason::INSUFFICIENT_FUNDS, ErrorCode::PaymentUnfunded),
            (
                "invalid_exact_evm_insufficient_balance",
                ErrorCode::PaymentUnfunded,
            ),
            (reason::VALID_AFTER, ErrorCode::PaymentUnfunded),
            (reason::VALID_BEFORE, ErrorCode::PaymentUnfunded),
            (
                "invalid_exact_evm_transaction_simulation_failed",
                ErrorCode::PaymentUnfunded,
            ),
            (reason::NONCE_ALREADY_USED, ErrorCode::PaymentReplay),
            ("duplicate_settlement", ErrorCode::PaymentReplay),
            (reason::PERMIT2_INVALID_NONCE, ErrorCode::PaymentReplay),
            (
                reason::PERMIT2_INSUFFICIENT_BALANCE,
                ErrorCode::PaymentUnfunded,
            ),
            (
                reason::PERMIT2_ALLOWANCE_REQUIRED,
                ErrorCode::PaymentUnfunded,
            ),
            (reason::PERMIT2_DEADLINE_EXPIRED, ErrorCode::PaymentUnfunded),
            (reason::PERMIT2_NOT_YET_VALID, ErrorCode::PaymentUnfunded),
            (reason::PERMIT2_SPENDER, ErrorCode::PaymentInvalid),
            (reason::PERMIT2_SIGNATURE, ErrorCode::PaymentInvalid),
            (reason::UPTO_FACILITATOR_MISMATCH, ErrorCode::PaymentInvalid),
            (
                reason::UPTO_SETTLEMENT_EXCEEDS_AMOUNT,
                ErrorCode::PaymentInvalid,
            ),
            (
                "invalid_exact_svm_blockhash_not_found",
                ErrorCode::PaymentBlockhashStale,
            ),
            ("expired_signature", ErrorCode::PaymentBlockhashStale),
            (reason::SIGNATURE, ErrorCode::PaymentInvalid),
            (reason::SIGNATURE_NOT_CANONICAL, ErrorCode::PaymentInvalid),
            (reason::AUTHORIZATION_TOO_LONG, ErrorCode::PaymentInvalid),
            ("invalid_exact_evm_signature", ErrorCode::PaymentInvalid),
            (reason::RECIPIENT_MISMATCH, ErrorCode::PaymentInvalid),
            (reason::VALUE_MISMATCH, ErrorCode::PaymentInvalid),
            (reason::INVALID_NETWORK, ErrorCode::PaymentInvalid),
            (
                "invalid_exact_evm_network_mismatch",
                ErrorCode::PaymentInvalid,
            ),
            (reason::MISSING_EIP712_DOMAIN, ErrorCode::PaymentInvalid),
            (
                "invalid_exact_evm_token_name_mismatch",
                ErrorCode::PaymentInvalid,
            ),
            (reason::INVALID_PAYLOAD, ErrorCode::PaymentInvalid),
            (reason::UNSUPPORTED_SCHEME, ErrorCode::PaymentInvalid),
            (reason::INVALID_X402_VERSION, ErrorCode::PaymentInvalid),
            ("unexpected_verify_error", ErrorCode::PaymentInvalid),
            ("", ErrorCode::PaymentInvalid),
        ];
        for (reason, code) in cases {
            assert_eq!(code_for_reason(reason), code, "{reason}");
        }
    }

    #[test]
    fn stale_blockhash_body_still_says_verification_failed() {
        let response = crate::envelope::GatewayError::new(code_for_reason("blockhash_not_found"))
            .into_response(crate::envelope::EnvelopeStyle::Chat);
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["code"], "PAYMENT_BLOCKHASH_STALE");
        assert_eq!(body["error"], "Payment verification failed");
    }
}

//! In-process exact-EVM verification and settlement.
//!
//! [`LocalEvmFacilitator`] checks an EIP-3009 `TransferWithAuthorization`
//! the way the reference facilitator does, in the same order: scheme, EIP-712
//! domain present, network, signature (signer recovery over the EIP-712
//! digest, domain taken from the server's offer), `to == payTo`,
//! `now + 6 s <= validBefore <= now + maxTimeoutSeconds + 60 s` (the upper
//! bound is walletgate's: it keeps replay records short-lived), `validAfter <= now`, `value == amount`, then
//! the [`Ledger`]: nonce unused and balance sufficient. Settlement re-runs the
//! checks and moves the funds through the same ledger.
//!
//! A paid request hashes and recovers its signer once: the
//! [`FacilitatorRequest`] carries the authorization decoded when it was
//! built and, once checked, its EIP-712 digest and signer, which cannot
//! change with it; `settle` after `verify` checks the window, the amount and
//! the ledger (nonce unused, funds) again.
//!
//! [`DevLedger`](super::DevLedger) is an in-memory USDC ledger that
//! pre-funds the ten public Hardhat/Anvil development accounts on Base
//! Sepolia, so the official clients can pay a local server with a
//! development key and nothing else.
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::x402::facilitator::{DevLedger, LocalEvmFacilitator};
//!
//! let ledger = Arc::new(DevLedger::new());
//! let facilitator = LocalEvmFacilitator::new(ledger.clone(), Arc::new(FakeClock::at_unix_secs(1_750_000_000)));
//! assert_eq!(ledger.balance_of(&DevLedger::base_sepolia_usdc(), DevLedger::DEV_ACCOUNTS[0].parse()?), DevLedger::DEV_ACCOUNT_FUNDS);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;

use alloy_primitives::Address;

use super::api::{Facilitator, FacilitatorError, FacilitatorRequest, reason};
use super::ledger::{Ledger, LedgerError, Transfer};
use super::local_upto::{Phase, check_upto};
pub(super) use super::window::Refusal;
use super::window::SignatureCheck;
pub use super::window::{AUTHORIZATION_CLOCK_SKEW_SECS, MIN_REMAINING_VALIDITY_SECS};
use crate::clock::SharedClock;
use crate::store::BoxFuture;
use crate::x402::wire::EvmDecoding;
use crate::x402::wire::eip712::{DomainCache, TokenId, parse_evm_address};
use crate::x402::wire::types::{
    Network, SCHEME_EXACT, SCHEME_UPTO, SettleResponse, SupportedKind, SupportedResponse,
    VerifyResponse, X402_VERSION,
};

/// Verifies and settles exact-EVM payments in-process, against a [`Ledger`].
#[derive(Clone)]
pub struct LocalEvmFacilitator {
    ledger: Arc<dyn Ledger>,
    clock: SharedClock,
    domains: Arc<DomainCache>,
    upto_facilitator: Address,
}

impl fmt::Debug for LocalEvmFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEvmFacilitator")
            .finish_non_exhaustive()
    }
}

fn refuse(reason: &'static str, payer: Option<Address>) -> Refusal {
    Refusal { reason, payer }
}

impl LocalEvmFacilitator {
    /// The facilitator an `upto` permit's witness names for this one
    /// (`extra.facilitatorAddress`, listed in `GET /supported`): a fixed
    /// address, since the ledger has no chain to call the proxy on
    /// (development account #9's, which holds no key of this facilitator).
    pub const UPTO_FACILITATOR: Address = Address::new([
        0xa0, 0xee, 0x7a, 0x14, 0x2d, 0x26, 0x7c, 0x1f, 0x36, 0x71, 0x4e, 0x4a, 0x8f, 0x75, 0x61,
        0x2f, 0x20, 0xa7, 0x97, 0x20,
    ]);

    /// Checks against `ledger`, reading time from `clock`.
    pub fn new(ledger: Arc<dyn Ledger>, clock: SharedClock) -> Self {
        Self {
            ledger,
            clock,
            domains: Arc::default(),
            upto_facilitator: Self::UPTO_FACILITATOR,
        }
    }

    /// Verifies an `upto` payment: the permit's checks, then the ledger
    /// (balance for the ceiling, nonce unused).
    async fn verify_upto(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let now = self.clock.now_unix_secs();
        let permitted = match check_upto(
            request,
            now,
            self.upto_facilitator,
            Phase::Verify,
            SignatureCheck::Recover,
        ) {
            Ok(permitted) => permitted,
            Err(refusal) => {
                let payer = refusal.payer.map(|a| a.to_checksum(None));
                return Ok(VerifyResponse::invalid(refusal.reason, payer));
            }
        };
        let payer = permitted.ceiling.from.to_checksum(None);
        match self.ledger.check(&permitted.ceiling).await {
            Ok(()) => Ok(VerifyResponse::valid(payer)),
            Err(error) => match upto_ledger_reason(&error) {
                Some(reason) => Ok(VerifyResponse::invalid(reason, Some(payer))),
                None => Err(FacilitatorError::unavailable(error.to_string())),
            },
        }
    }

    /// Settles an `upto` payment for the offer's amount (the amount used,
    /// at most the ceiling); 0 moves nothing and sends nothing.
    async fn settle_upto(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let network = request.payment_requirements().network.clone();
        let now = self.clock.now_unix_secs();
        let permitted = match check_upto(
            request,
            now,
            self.upto_facilitator,
            Phase::Settle,
            SignatureCheck::Recover,
        ) {
            Ok(permitted) => permitted,
            Err(refusal) => {
                let payer = refusal.payer.map(|a| a.to_checksum(None));
                return Ok(SettleResponse::failure(network, refusal.reason, payer));
            }
        };
        let payer = permitted.ceiling.from.to_checksum(None);
        let settled = |transaction: String| SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            payer: Some(payer.clone()),
            transaction,
            network: network.clone(),
            amount: Some(request.payment_requirements().amount),
            extensions: None,
        };
        if permitted.amount == 0 {
            return Ok(settled(String::new()));
        }
        let transfer = Transfer {
            value: permitted.amount,
            ..permitted.ceiling
        };
        match self.ledger.transfer_with_authorization(&transfer).await {
            Ok(transaction) => Ok(settled(transaction)),
            Err(error) => match upto_ledger_reason(&error) {
                Some(reason) => Ok(SettleResponse::failure(network, reason, Some(payer))),
                None => Err(FacilitatorError::unavailable(error.to_string())),
            },
        }
    }

    fn check_offline(&self, request: &FacilitatorRequest) -> Result<Transfer, Refusal> {
        check_offline(
            request,
            self.clock.now_unix_secs(),
            &self.domains,
            SignatureCheck::Recover,
        )
    }
}

/// The reference facilitator's offline checks, in its order, at `now`
/// (unix seconds): the transfer they allow, or the first refusal.
pub(super) fn check_offline(
    request: &FacilitatorRequest,
    now: u64,
    domains: &DomainCache,
    signature_check: SignatureCheck,
) -> Result<Transfer, Refusal> {
    let offer = request.payment_requirements();
    if request.x402_version() != X402_VERSION {
        return Err(refuse(reason::INVALID_X402_VERSION, None));
    }
    if offer.scheme != SCHEME_EXACT || request.accepted().scheme != SCHEME_EXACT {
        return Err(refuse(reason::UNSUPPORTED_SCHEME, None));
    }
    let (Some(name), Some(version)) = (offer.extra_str("name"), offer.extra_str("version")) else {
        return Err(refuse(reason::MISSING_EIP712_DOMAIN, None));
    };
    if request.accepted().network != offer.network {
        return Err(refuse(reason::INVALID_NETWORK, None));
    }
    let chain_id = offer
        .network
        .eip155_chain_id()
        .ok_or(refuse(reason::INVALID_NETWORK, None))?;
    let asset = parse_evm_address(&offer.asset)
        .ok_or(refuse(reason::INVALID_PAYMENT_REQUIREMENTS, None))?;
    let pay_to = parse_evm_address(&offer.pay_to)
        .ok_or(refuse(reason::INVALID_PAYMENT_REQUIREMENTS, None))?;
    let evm = match request.evm_decoding() {
        EvmDecoding::Decoded(evm, _) => evm,
        EvmDecoding::Malformed { payer } => {
            return Err(refuse(reason::INVALID_PAYLOAD, *payer));
        }
        EvmDecoding::NotExactEvm => return Err(refuse(reason::INVALID_PAYLOAD, None)),
    };
    let payer = Some(evm.from);
    if signature_check == SignatureCheck::Recover {
        let signature = evm.signature.ok_or(refuse(reason::SIGNATURE, payer))?;
        let digest = || {
            let domain = domains.get(name, version, TokenId { chain_id, asset });
            domain.signing_hash(&evm.transfer())
        };
        let recover = |digest: &_| signature.recover_address_from_prehash(digest).ok();
        if request.signer(digest, recover) != Some(evm.from) {
            return Err(refuse(reason::SIGNATURE, payer));
        }
    }
    if evm.to != pay_to {
        return Err(refuse(reason::RECIPIENT_MISMATCH, payer));
    }
    // Too far ahead is refused like too close: a replay record lives until
    // validBefore, so a year-3000 authorization would pin one until then.
    // The bound is the gateway's (`check_authorization`).
    let latest = now
        .saturating_add(offer.max_timeout_seconds)
        .saturating_add(AUTHORIZATION_CLOCK_SKEW_SECS);
    if evm.valid_before < now.saturating_add(MIN_REMAINING_VALIDITY_SECS)
        || evm.valid_before > latest
    {
        return Err(refuse(reason::VALID_BEFORE, payer));
    }
    if evm.valid_after > now {
        return Err(refuse(reason::VALID_AFTER, payer));
    }
    if evm.value != offer.amount {
        return Err(refuse(reason::VALUE_MISMATCH, payer));
    }
    Ok(Transfer {
        token: TokenId { chain_id, asset },
        from: evm.from,
        to: evm.to,
        value: evm.value.units(),
        nonce: evm.nonce,
        valid_before_unix_secs: evm.valid_before,
    })
}

/// The `upto` reason of a ledger refusal; `None` when the ledger is unreachable.
fn upto_ledger_reason(error: &LedgerError) -> Option<&'static str> {
    match error {
        LedgerError::InsufficientFunds => Some(reason::PERMIT2_INSUFFICIENT_BALANCE),
        LedgerError::AuthorizationUsed => Some(reason::PERMIT2_INVALID_NONCE),
        LedgerError::UnknownToken => Some(reason::UPTO_NETWORK_MISMATCH),
        LedgerError::AuthorizationExpired => Some(reason::PERMIT2_DEADLINE_EXPIRED),
        LedgerError::Unavailable(_) => None,
    }
}

/// The reason string of a ledger refusal; `None` when the ledger is unreachable.
fn ledger_reason(error: &LedgerError) -> Option<&'static str> {
    match error {
        LedgerError::InsufficientFunds => Some(reason::INSUFFICIENT_FUNDS),
        LedgerError::AuthorizationUsed => Some(reason::NONCE_ALREADY_USED),
        LedgerError::UnknownToken => Some(reason::INVALID_NETWORK),
        LedgerError::AuthorizationExpired => Some(reason::VALID_BEFORE),
        LedgerError::Unavailable(_) => None,
    }
}

impl Facilitator for LocalEvmFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async move {
            if request.payment_requirements().scheme == SCHEME_UPTO {
                return self.verify_upto(request).await;
            }
            let transfer = match self.check_offline(request) {
                Ok(transfer) => transfer,
                Err(refusal) => {
                    let payer = refusal.payer.map(|a| a.to_checksum(None));
                    return Ok(VerifyResponse::invalid(refusal.reason, payer));
                }
            };
            let payer = request
                .payer_text()
                .map_or_else(|| transfer.from.to_checksum(None), str::to_owned);
            match self.ledger.check(&transfer).await {
                Ok(()) => Ok(VerifyResponse::valid(payer)),
                Err(error) => match ledger_reason(&error) {
                    Some(reason) => Ok(VerifyResponse::invalid(reason, Some(payer))),
                    None => Err(FacilitatorError::unavailable(error.to_string())),
                },
            }
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            if request.payment_requirements().scheme == SCHEME_UPTO {
                return self.settle_upto(request).await;
            }
            let network = request.payment_requirements().network.clone();
            let transfer = match self.check_offline(request) {
                Ok(transfer) => transfer,
                Err(refusal) => {
                    let payer = refusal.payer.map(|a| a.to_checksum(None));
                    return Ok(SettleResponse::failure(network, refusal.reason, payer));
                }
            };
            let payer = request
                .payer_text()
                .map_or_else(|| transfer.from.to_checksum(None), str::to_owned);
            match self.ledger.transfer_with_authorization(&transfer).await {
                Ok(transaction) => Ok(SettleResponse {
                    success: true,
                    error_reason: None,
                    error_message: None,
                    payer: Some(payer),
                    transaction,
                    network,
                    amount: Some(request.payment_requirements().amount),
                    extensions: None,
                }),
                Err(error) => match ledger_reason(&error) {
                    Some(reason) => Ok(SettleResponse::failure(network, reason, Some(payer))),
                    None => Err(FacilitatorError::unavailable(error.to_string())),
                },
            }
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        let mut upto_extra = serde_json::Map::new();
        upto_extra.insert(
            "facilitatorAddress".into(),
            self.upto_facilitator.to_checksum(None).into(),
        );
        let kinds = vec![
            SupportedKind {
                x402_version: X402_VERSION,
                scheme: SCHEME_EXACT.to_owned(),
                network: Network::base_sepolia(),
                extra: None,
            },
            SupportedKind {
                x402_version: X402_VERSION,
                scheme: SCHEME_UPTO.to_owned(),
                network: Network::base_sepolia(),
                extra: Some(upto_extra),
            },
        ];
        Box::pin(std::future::ready(Ok(SupportedResponse {
            kinds,
            ..SupportedResponse::default()
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::x402::server::PaymentOption;
    use crate::x402::wire::{AtomicAmount, PaymentPayload, PaymentRequirements};
    use alloy_primitives::B256;

    use crate::x402::facilitator::DevLedger;

    fn addr(text: &str) -> Address {
        parse_evm_address(text).unwrap()
    }

    /// Reference vector B3: what `@x402/evm` 2.27 sends at `Date.now() = 1750000000000`.
    fn vector_b3_request(
        mutate: impl FnOnce(&mut PaymentRequirements, &mut serde_json::Value),
    ) -> FacilitatorRequest {
        let offer = PaymentOption::base_sepolia_usdc("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
            .unwrap()
            .requirements_for_amount(AtomicAmount::new(10_000));
        let mut payload = serde_json::json!({
            "signature": "0xde455c78879fd9219b2b89a4b1e80bc039788cfb436f8550cad4cae17e35220a5a820f16fef5223f1e8b1cd8784f40707ec8e18283e8a1b357680fe6a9fa7abc1c",
            "authorization": {
                "from": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
                "to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
                "value": "10000",
                "validAfter": "0",
                "validBefore": "1750000300",
                "nonce": "0x1111111111111111111111111111111111111111111111111111111111111111"
            }
        });
        let mut server_offer = offer.clone();
        mutate(&mut server_offer, &mut payload);
        FacilitatorRequest::new(
            PaymentPayload {
                x402_version: 2,
                resource: None,
                accepted: offer,
                payload,
                extensions: None,
            },
            server_offer,
        )
    }

    fn facilitator_at(unix_secs: u64) -> (LocalEvmFacilitator, Arc<DevLedger>) {
        let ledger = Arc::new(DevLedger::new());
        let clock = Arc::new(FakeClock::at_unix_secs(unix_secs));
        (LocalEvmFacilitator::new(ledger.clone(), clock), ledger)
    }

    async fn verdict(
        facilitator: &LocalEvmFacilitator,
        request: &FacilitatorRequest,
    ) -> Option<String> {
        let response = facilitator.verify(request).await.unwrap();
        assert_eq!(response.is_valid, response.invalid_reason.is_none());
        response.invalid_reason
    }

    /// B3 is valid until now + 300 = maxTimeoutSeconds: fine up to 60 s of
    /// clock skew beyond that, refused past it (a year-3000 authorization
    /// would otherwise pin its replay record until then).
    #[tokio::test]
    async fn a_valid_before_beyond_max_timeout_plus_skew_is_refused() {
        let valid_before = 1_750_000_300;
        let at_limit = valid_before - 300 - AUTHORIZATION_CLOCK_SKEW_SECS;
        let request = vector_b3_request(|_, _| {});
        assert_eq!(verdict(&facilitator_at(at_limit).0, &request).await, None);
        let (early, ledger) = facilitator_at(at_limit - 1);
        assert_eq!(
            verdict(&early, &request).await.as_deref(),
            Some(reason::VALID_BEFORE)
        );
        let settled = early.settle(&request).await.unwrap();
        assert_eq!(settled.error_reason.as_deref(), Some(reason::VALID_BEFORE));
        assert_eq!(ledger.settlements(), 0);
        // A shorter offer shortens the bound.
        let short = vector_b3_request(|offer, _| offer.max_timeout_seconds = 60);
        assert_eq!(
            verdict(&facilitator_at(1_750_000_000).0, &short)
                .await
                .as_deref(),
            Some(reason::VALID_BEFORE)
        );
    }

    #[tokio::test]
    async fn official_client_vector_verifies_and_settles_once() {
        let (facilitator, ledger) = facilitator_at(1_750_000_000);
        let request = vector_b3_request(|_, _| {});
        assert_eq!(verdict(&facilitator, &request).await, None);
        let token = DevLedger::base_sepolia_usdc();
        let payer = addr(DevLedger::DEV_ACCOUNTS[0]);
        let payee = addr(DevLedger::DEV_ACCOUNTS[1]);
        let settled = facilitator.settle(&request).await.unwrap();
        assert!(settled.success);
        assert_eq!(settled.transaction.len(), 66);
        assert_eq!(settled.payer.as_deref(), Some(DevLedger::DEV_ACCOUNTS[0]));
        assert_eq!(
            ledger.balance_of(&token, payer),
            DevLedger::DEV_ACCOUNT_FUNDS - 10_000
        );
        assert_eq!(
            ledger.balance_of(&token, payee),
            DevLedger::DEV_ACCOUNT_FUNDS + 10_000
        );
        // The chain remembers the nonce.
        assert_eq!(
            verdict(&facilitator, &request).await.as_deref(),
            Some(reason::NONCE_ALREADY_USED)
        );
        let again = facilitator.settle(&request).await.unwrap();
        assert!(!again.success);
        assert_eq!(ledger.settlements(), 1);
    }

    #[tokio::test]
    async fn verdicts_name_the_payer_as_the_payment_wrote_it() {
        let (facilitator, _) = facilitator_at(1_750_000_000);
        let lowercase = DevLedger::DEV_ACCOUNTS[0].to_ascii_lowercase();
        let request = vector_b3_request(|_, payload| {
            payload["authorization"]["from"] = lowercase.clone().into();
        });
        // As the official facilitators answer: `authorization.from`, unhashed.
        let verified = facilitator.verify(&request).await.unwrap();
        assert_eq!(verified.payer.as_deref(), Some(lowercase.as_str()));
        let settled = facilitator.settle(&request).await.unwrap();
        assert!(settled.success);
        assert_eq!(settled.payer.as_deref(), Some(lowercase.as_str()));
    }

    #[tokio::test]
    async fn each_check_refuses_with_its_reason() {
        let at = |secs| facilitator_at(secs).0;
        let now = 1_750_000_000;
        let cases: Vec<(LocalEvmFacilitator, FacilitatorRequest, &str)> = vec![
            (
                at(now),
                vector_b3_request(|o, _| o.amount = AtomicAmount::new(10_001)),
                reason::VALUE_MISMATCH,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.pay_to = DevLedger::DEV_ACCOUNTS[2].into()),
                reason::RECIPIENT_MISMATCH,
            ),
            (
                at(now),
                vector_b3_request(|o, _| {
                    o.extra.insert("name".into(), "USD Coin".into());
                }),
                reason::SIGNATURE,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.extra.clear()),
                reason::MISSING_EIP712_DOMAIN,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.network = Network::parse("eip155:8453").unwrap()),
                reason::INVALID_NETWORK,
            ),
            (
                at(now),
                vector_b3_request(|_, p| p["authorization"]["value"] = "10001".into()),
                reason::SIGNATURE,
            ),
            (
                at(now),
                vector_b3_request(|_, p| p["signature"] = "0x12".into()),
                reason::SIGNATURE,
            ),
            (
                at(now),
                vector_b3_request(|_, p| p["authorization"] = 1.into()),
                reason::INVALID_PAYLOAD,
            ),
            (
                at(now),
                vector_b3_request(|o, _| o.scheme = "streaming".into()),
                reason::UNSUPPORTED_SCHEME,
            ),
            // An `upto` offer paid with an exact payload: `upto`'s own refusal.
            (
                at(now),
                vector_b3_request(|o, _| o.scheme = "upto".into()),
                reason::UPTO_SCHEME,
            ),
            // 294 s left is fine, 5 s left is not.
            (at(now + 6), vector_b3_request(|_, _| {}), "ok"),
            (
                at(now + 295),
                vector_b3_request(|_, _| {}),
                reason::VALID_BEFORE,
            ),
        ];
        for (facilitator, request, expected) in cases {
            let reason = verdict(&facilitator, &request).await;
            assert_eq!(reason.as_deref().unwrap_or("ok"), expected);
        }
    }

    #[tokio::test]
    async fn unfunded_payer_is_refused() {
        let ledger = Arc::new(DevLedger::empty());
        let facilitator =
            LocalEvmFacilitator::new(ledger, Arc::new(FakeClock::at_unix_secs(1_750_000_000)));
        let reason = verdict(&facilitator, &vector_b3_request(|_, _| {})).await;
        assert_eq!(reason.as_deref(), Some(reason::INSUFFICIENT_FUNDS));
    }

    #[tokio::test]
    async fn settle_reuses_the_signer_verify_recovered() {
        let (facilitator, ledger) = facilitator_at(1_750_000_000);
        let request = vector_b3_request(|_, _| {});
        assert_eq!(verdict(&facilitator, &request).await, None);
        let evm = request.exact_evm().unwrap();
        let (_, signer) = *request.recovered.get().unwrap();
        assert_eq!(signer, Some(evm.from));
        // Asked again, the request answers what it recovered: no digest, no recovery.
        let never = || -> B256 { unreachable!("hashed once") };
        assert_eq!(request.signer(never, |_| None), Some(evm.from));
        assert!(facilitator.settle(&request).await.unwrap().success);
        assert_eq!(ledger.settlements(), 1);
    }

    #[tokio::test]
    async fn nonce_spent_between_verify_and_settle_is_refused_at_settle() {
        let (facilitator, ledger) = facilitator_at(1_750_000_000);
        let request = vector_b3_request(|_, _| {});
        assert_eq!(verdict(&facilitator, &request).await, None);
        // Another settlement of the same authorization lands first.
        let transfer = facilitator.check_offline(&request).ok().unwrap();
        ledger.transfer_with_authorization(&transfer).await.unwrap();
        let settled = facilitator.settle(&request).await.unwrap();
        assert!(!settled.success);
        assert_eq!(
            settled.error_reason.as_deref(),
            Some(reason::NONCE_ALREADY_USED)
        );
        assert_eq!(ledger.settlements(), 1);
    }

    #[tokio::test]
    async fn payment_tampered_after_verify_is_refused_at_settle() {
        type Tamper = fn(&mut PaymentRequirements, &mut serde_json::Value);
        let cases: [(Tamper, &str); 4] = [
            // The signed value raised with the offer: the digest changes, the signer does not recover.
            (
                |o, p| {
                    o.amount = AtomicAmount::new(10_001);
                    p["authorization"]["value"] = "10001".into();
                },
                reason::SIGNATURE,
            ),
            // Only the offer's amount changes.
            (
                |o, _| o.amount = AtomicAmount::new(10_001),
                reason::VALUE_MISMATCH,
            ),
            // Same digest, another signature (s changed).
            (
                |_, p| {
                    let signature = p["signature"].as_str().unwrap().to_owned();
                    p["signature"] = signature.replacen("5a820f16", "5a820f17", 1).into();
                },
                reason::SIGNATURE,
            ),
            // The recipient changes.
            (
                |o, p| {
                    o.pay_to = DevLedger::DEV_ACCOUNTS[2].into();
                    p["authorization"]["to"] = DevLedger::DEV_ACCOUNTS[2].into();
                },
                reason::SIGNATURE,
            ),
        ];
        for (tamper, expected) in cases {
            let (facilitator, ledger) = facilitator_at(1_750_000_000);
            assert_eq!(
                verdict(&facilitator, &vector_b3_request(|_, _| {})).await,
                None
            );
            let settled = facilitator
                .settle(&vector_b3_request(tamper))
                .await
                .unwrap();
            assert!(!settled.success, "{expected}");
            assert_eq!(settled.error_reason.as_deref(), Some(expected));
            assert_eq!(ledger.settlements(), 0);
        }
    }
}

//! [`OfferSigner`]: the key a server signs its offers, receipts and usage
//! statements with (`offer-receipt`, EIP-712; see
//! [`wire::offers_of`](crate::x402::wire::offers_of)). Set with
//! [`X402LayerBuilder::with_offer_signer`](super::X402LayerBuilder::with_offer_signer);
//! without one nothing is signed and every 402 and receipt is as before.
//!
//! An offer depends only on its requirements, its resource and a validity
//! window, so signed offers are built into the cached quote and re-signed
//! when half their window has passed, not per request.

use std::fmt;
use std::path::Path;

use alloy_primitives::Address;
use serde_json::{Map, Value};

use crate::x402::ConfigError;
use crate::x402::signing_key::{KeyError, SigningKey};
use crate::x402::wire::types::{PaymentRequirements, SettleResponse};
use crate::x402::wire::{
    OFFER_RECEIPT, OFFER_RECEIPT_VERSION, OfferPayload, ReceiptPayload, Signed, USAGE_STATEMENT,
    UsagePayload, extension,
};

/// The key a server signs offers and receipts with (secp256k1). Its
/// `Debug` shows the address only; publish the address so payers can check.
#[derive(Clone)]
pub struct OfferSigner {
    key: SigningKey,
}

impl fmt::Debug for OfferSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OfferSigner")
            .field("address", &self.key.address())
            .finish_non_exhaustive()
    }
}

impl OfferSigner {
    /// The key in `path`: 64 hex digits, `0x` optional; on Unix the file
    /// must not be readable by group or others (mode 0600 or stricter).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let key = SigningKey::from_file(path).map_err(|error| {
            let reason = match error {
                KeyError::File(reason) => reason,
                KeyError::Invalid => "not a secp256k1 private key".into(),
            };
            ConfigError::InvalidCredential(format!("offer key file {}: {reason}", path.display()))
        })?;
        Ok(Self { key })
    }

    /// A key from 64 hex digits, with or without `0x`.
    pub fn from_hex(text: &str) -> Result<Self, ConfigError> {
        let key = SigningKey::from_hex(text).map_err(|_| {
            ConfigError::InvalidCredential(
                "the offer key is not a secp256k1 private key (64 hex digits)".into(),
            )
        })?;
        Ok(Self { key })
    }

    /// The address offers and receipts are signed as.
    pub fn address(&self) -> Address {
        self.key.address()
    }

    fn sign<P: crate::x402::wire::SignedPayload>(
        &self,
        payload: P,
        accept_index: Option<usize>,
    ) -> Value {
        Signed::sign(payload, accept_index, |hash| self.key.sign_hash(hash)).to_value()
    }

    /// The `offer-receipt` extension of a 402 for `resource_url` offering
    /// `accepts` at `now`: one signed offer per entry, valid for its
    /// `maxTimeoutSeconds` (as the official server does). Also the earliest
    /// `validUntil`.
    pub(crate) fn offers(
        &self,
        resource_url: &str,
        accepts: &[PaymentRequirements],
        now: u64,
    ) -> (Value, u64) {
        let mut earliest = u64::MAX;
        let offers = accepts
            .iter()
            .enumerate()
            .map(|(index, offer)| {
                let valid_until = now.saturating_add(offer.max_timeout_seconds);
                earliest = earliest.min(valid_until);
                let payload = OfferPayload {
                    version: OFFER_RECEIPT_VERSION,
                    resource_url: resource_url.to_owned(),
                    scheme: offer.scheme.clone(),
                    network: offer.network.as_str().to_owned(),
                    asset: offer.asset.clone(),
                    pay_to: offer.pay_to.clone(),
                    amount: offer.amount.to_string(),
                    valid_until,
                };
                self.sign(payload, Some(index))
            })
            .collect();
        (extension("offers", Value::Array(offers)), earliest)
    }

    /// Adds the signed receipt of a successful `settlement` for
    /// `resource_url` (and the signed usage statement, when the settlement
    /// carries `extensions.usage`) to its extensions. The transaction is
    /// always named (empty only when nothing was sent).
    pub(crate) fn sign_settlement(
        &self,
        settlement: &mut SettleResponse,
        resource_url: &str,
        payer: &str,
        decimals: u8,
        now: u64,
    ) {
        let receipt = ReceiptPayload {
            version: OFFER_RECEIPT_VERSION,
            network: settlement.network.as_str().to_owned(),
            resource_url: resource_url.to_owned(),
            payer: payer.to_owned(),
            issued_at: now,
            transaction: settlement.transaction.clone(),
        };
        let usage = settlement
            .extensions
            .as_ref()
            .and_then(|extensions| extensions.get("usage"))
            .and_then(|usage| usage_payload(usage, &receipt, decimals));
        let extensions = settlement.extensions.get_or_insert_with(Map::new);
        if let Some(usage) = usage {
            extensions.insert(
                USAGE_STATEMENT.to_owned(),
                extension("statement", self.sign(usage, None)),
            );
        }
        extensions.insert(
            OFFER_RECEIPT.to_owned(),
            extension("receipt", self.sign(receipt, None)),
        );
    }
}

/// The usage statement of a settlement's `extensions.usage` (as the
/// metered flow writes it), with the receipt's fields.
fn usage_payload(usage: &Value, receipt: &ReceiptPayload, decimals: u8) -> Option<UsagePayload> {
    let text = |name: &str| usage.get(name)?.as_str().map(str::to_owned);
    Some(UsagePayload {
        version: OFFER_RECEIPT_VERSION,
        network: receipt.network.clone(),
        resource_url: receipt.resource_url.clone(),
        payer: receipt.payer.clone(),
        transaction: receipt.transaction.clone(),
        model: text("model")?,
        prompt_tokens: usage.get("prompt_tokens")?.as_u64()?,
        completion_tokens: usage.get("completion_tokens")?.as_u64()?,
        input_usd_per_million: text("input_usd_per_million")?,
        output_usd_per_million: text("output_usd_per_million")?,
        fee: text("fee")?,
        amount: text("amount")?,
        decimals,
        issued_at: receipt.issued_at,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::x402::server::PaymentOption;
    use crate::x402::wire::types::{AtomicAmount, PaymentRequired, ResourceInfo};
    use crate::x402::wire::{offers_of, receipt_of, usage_of};

    const KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    const URL: &str = "https://api.example/v1/chat/completions";

    #[test]
    fn offers_are_signed_one_per_accepts_entry_and_read_back() {
        let signer = OfferSigner::from_hex(KEY).unwrap();
        let accepts = vec![
            PaymentOption::base_sepolia_usdc("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
                .unwrap()
                .requirements_for_amount(AtomicAmount::new(9_001)),
        ];
        let (extension, valid_until) = signer.offers(URL, &accepts, 1_000);
        assert_eq!(valid_until, 1_000 + accepts[0].max_timeout_seconds);
        let required = PaymentRequired {
            x402_version: 2,
            error: None,
            resource: ResourceInfo {
                url: URL.into(),
                description: String::new(),
                mime_type: String::new(),
            },
            accepts,
            extensions: Some(Map::from_iter([(OFFER_RECEIPT.to_owned(), extension)])),
        };
        let offers = offers_of(&required);
        assert_eq!(offers.len(), 1);
        assert_eq!(offers[0].accept_index, Some(0));
        let payload = offers[0].verify(signer.address()).unwrap();
        assert_eq!(payload.amount, "9001");
        assert_eq!(payload.resource_url, URL);
    }

    #[test]
    fn a_settlement_gets_a_receipt_naming_its_transaction_and_a_usage_statement() {
        let signer = OfferSigner::from_hex(KEY).unwrap();
        let mut settlement = SettleResponse::failure(
            crate::x402::wire::Network::base_sepolia(),
            "x",
            Some("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into()),
        );
        settlement.success = true;
        settlement.error_reason = None;
        settlement.transaction = "0xabc".into();
        settlement.extensions = Some(Map::from_iter([(
            "usage".to_owned(),
            json!({"model": "m", "prompt_tokens": 9, "completion_tokens": 1,
                   "input_usd_per_million": "0.25", "output_usd_per_million": "2",
                   "fee": "0.001", "amount": "1005"}),
        )]));
        signer.sign_settlement(&mut settlement, URL, "0xf39F", 6, 7);
        let receipt = receipt_of(&settlement).unwrap();
        let payload = receipt.verify(signer.address()).unwrap();
        assert_eq!(payload.transaction, "0xabc");
        assert_eq!(payload.issued_at, 7);
        let usage = usage_of(&settlement).unwrap();
        assert!(usage.verify(signer.address()).unwrap().adds_up(9_001));
        assert_eq!(usage.payload.transaction, "0xabc");
    }

    #[test]
    fn a_bad_key_is_refused_without_echoing_it_and_debug_shows_the_address_only() {
        let refused = OfferSigner::from_hex("0x1234").unwrap_err().to_string();
        assert!(!refused.contains("1234"), "{refused}");
        let signer = OfferSigner::from_hex(KEY).unwrap();
        let shown = format!("{signer:?}");
        assert!(shown.contains("0x70997970"), "{shown}");
        assert!(!shown.to_lowercase().contains(&KEY[2..12]), "{shown}");
    }
}

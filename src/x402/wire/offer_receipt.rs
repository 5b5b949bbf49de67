//! Signed offers and receipts: x402 v2's `offer-receipt` extension in its
//! EIP-712 format (the payloads, domains and types the official
//! `@x402/extensions` 2.27 signs and verifies), and walletgate's usage
//! statement beside the receipt (`walletgate-usage`: what a metered amount
//! was for, in the same format; see `docs/operations.md`).
//!
//! Where they travel: the 402's `extensions["offer-receipt"].info.offers[]`
//! (one per `accepts` entry, with its `acceptIndex`); the settlement's
//! `extensions["offer-receipt"].info.receipt` and
//! `extensions["walletgate-usage"].info.statement`.

use alloy_primitives::{Address, B256, Signature, U256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::types::{PaymentRequired, SettleResponse};

/// The extension's key in `PaymentRequired.extensions` and `SettleResponse.extensions`.
pub const OFFER_RECEIPT: &str = "offer-receipt";
/// The usage statement's key in `SettleResponse.extensions`.
pub const USAGE_STATEMENT: &str = "walletgate-usage";
/// The payloads' schema version.
pub const OFFER_RECEIPT_VERSION: u64 = 1;
/// The `format` of a signed payload this module reads and writes.
pub const FORMAT_EIP712: &str = "eip712";

sol! {
    /// An offer as signed (`@x402/extensions` `OFFER_TYPES`).
    struct Offer {
        uint256 version;
        string resourceUrl;
        string scheme;
        string network;
        string asset;
        string payTo;
        string amount;
        uint256 validUntil;
    }

    /// A receipt as signed (`@x402/extensions` `RECEIPT_TYPES`).
    struct Receipt {
        uint256 version;
        string network;
        string resourceUrl;
        string payer;
        uint256 issuedAt;
        string transaction;
    }

    /// walletgate's usage statement as signed: what a metered amount was
    /// for, so that amount = tokens × prices + fee can be checked.
    struct Usage {
        uint256 version;
        string network;
        string resourceUrl;
        string payer;
        string transaction;
        string model;
        uint256 promptTokens;
        uint256 completionTokens;
        string inputUsdPerMillion;
        string outputUsdPerMillion;
        string fee;
        string amount;
        uint256 decimals;
        uint256 issuedAt;
    }
}

/// A domain without a chain contract: `{name, version: "1", chainId: 1}`.
fn domain(name: &'static str) -> Eip712Domain {
    Eip712Domain::new(
        Some(name.into()),
        Some("1".into()),
        Some(U256::from(1)),
        None,
        None,
    )
}

/// A payload signed with EIP-712.
pub trait SignedPayload: Serialize + DeserializeOwned {
    /// The digest its signature signs.
    fn signing_hash(&self) -> B256;
}

/// An offer's payload (§4.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OfferPayload {
    /// [`OFFER_RECEIPT_VERSION`].
    pub version: u64,
    /// The paid resource's URL.
    pub resource_url: String,
    /// The offer's scheme.
    pub scheme: String,
    /// Its network (CAIP-2).
    pub network: String,
    /// Its asset.
    pub asset: String,
    /// Its recipient.
    pub pay_to: String,
    /// Its amount, in the asset's units.
    pub amount: String,
    /// Unix seconds after which the offer no longer holds.
    pub valid_until: u64,
}

impl SignedPayload for OfferPayload {
    fn signing_hash(&self) -> B256 {
        Offer {
            version: U256::from(self.version),
            resourceUrl: self.resource_url.clone(),
            scheme: self.scheme.clone(),
            network: self.network.clone(),
            asset: self.asset.clone(),
            payTo: self.pay_to.clone(),
            amount: self.amount.clone(),
            validUntil: U256::from(self.valid_until),
        }
        .eip712_signing_hash(&domain("x402 offer"))
    }
}

/// A receipt's payload (§5.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReceiptPayload {
    /// [`OFFER_RECEIPT_VERSION`].
    pub version: u64,
    /// The settlement's network.
    pub network: String,
    /// The paid resource's URL.
    pub resource_url: String,
    /// Who paid.
    pub payer: String,
    /// Unix seconds when the receipt was issued.
    pub issued_at: u64,
    /// The settlement's transaction (empty when nothing was sent: an amount of 0).
    #[serde(default)]
    pub transaction: String,
}

impl SignedPayload for ReceiptPayload {
    fn signing_hash(&self) -> B256 {
        Receipt {
            version: U256::from(self.version),
            network: self.network.clone(),
            resourceUrl: self.resource_url.clone(),
            payer: self.payer.clone(),
            issuedAt: U256::from(self.issued_at),
            transaction: self.transaction.clone(),
        }
        .eip712_signing_hash(&domain("x402 receipt"))
    }
}

/// A usage statement's payload: the settlement's `extensions.usage`, the
/// receipt's fields, and the asset's decimals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct UsagePayload {
    /// [`OFFER_RECEIPT_VERSION`].
    pub version: u64,
    /// The settlement's network.
    pub network: String,
    /// The paid resource's URL.
    pub resource_url: String,
    /// Who paid.
    pub payer: String,
    /// The settlement's transaction (empty for an amount of 0).
    pub transaction: String,
    /// The model that answered.
    pub model: String,
    /// Prompt tokens used.
    pub prompt_tokens: u64,
    /// Completion tokens used.
    pub completion_tokens: u64,
    /// USD per million prompt tokens (decimal text).
    pub input_usd_per_million: String,
    /// USD per million completion tokens (decimal text).
    pub output_usd_per_million: String,
    /// The flat fee in USD (decimal text).
    pub fee: String,
    /// What was settled, in the asset's units.
    pub amount: String,
    /// The asset's decimals.
    pub decimals: u8,
    /// Unix seconds when the statement was issued.
    pub issued_at: u64,
}

impl SignedPayload for UsagePayload {
    fn signing_hash(&self) -> B256 {
        Usage {
            version: U256::from(self.version),
            network: self.network.clone(),
            resourceUrl: self.resource_url.clone(),
            payer: self.payer.clone(),
            transaction: self.transaction.clone(),
            model: self.model.clone(),
            promptTokens: U256::from(self.prompt_tokens),
            completionTokens: U256::from(self.completion_tokens),
            inputUsdPerMillion: self.input_usd_per_million.clone(),
            outputUsdPerMillion: self.output_usd_per_million.clone(),
            fee: self.fee.clone(),
            amount: self.amount.clone(),
            decimals: U256::from(self.decimals),
            issuedAt: U256::from(self.issued_at),
        }
        .eip712_signing_hash(&domain("walletgate usage"))
    }
}

impl UsagePayload {
    /// What the tokens at the stated prices plus the fee come to, in the
    /// asset's units: each side rounded up as the gateway rounds (the token
    /// cost to a whole micro-dollar, the total to a whole unit). `None` if a
    /// price is not a decimal of at most six places.
    pub fn priced_amount(&self) -> Option<u128> {
        let input = micros(&self.input_usd_per_million)?;
        let output = micros(&self.output_usd_per_million)?;
        let fee = micros(&self.fee)?;
        let scaled = u128::from(self.prompt_tokens).checked_mul(input)?
            + u128::from(self.completion_tokens).checked_mul(output)?;
        let total = scaled.div_ceil(1_000_000).checked_add(fee)?;
        Some(match self.decimals {
            d if d >= 6 => total.checked_mul(10u128.checked_pow(u32::from(d - 6))?)?,
            d => total.div_ceil(10u128.pow(u32::from(6 - d))),
        })
    }

    /// Whether the settled amount is what the tokens cost, or the ceiling
    /// when they cost more.
    pub fn adds_up(&self, ceiling: u128) -> bool {
        let (Some(priced), Ok(amount)) = (self.priced_amount(), self.amount.parse::<u128>()) else {
            return false;
        };
        amount == priced.min(ceiling)
    }
}

/// Micro-units of a decimal text of at most six places.
fn micros(text: &str) -> Option<u128> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty()
        || fraction.len() > 6
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction: u128 = format!("{fraction:0<6}").parse().ok()?;
    whole.checked_mul(1_000_000)?.checked_add(fraction)
}

/// A signed payload: `{format: "eip712", acceptIndex?, payload, signature}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Signed<P> {
    /// [`FORMAT_EIP712`] (a JWS-format entry does not parse).
    pub format: String,
    /// The `accepts` entry an offer is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_index: Option<usize>,
    /// What was signed.
    pub payload: P,
    /// `0x` + 65 bytes (r, s, v).
    pub signature: String,
}

/// Why a signed payload does not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureError {
    /// Not the EIP-712 format.
    Format(String),
    /// The signature is not 65 hex bytes or recovers no key.
    Malformed,
    /// It verifies, but as another signer than the one expected.
    WrongSigner {
        /// Who signed it.
        signer: Address,
    },
}

impl std::fmt::Display for SignatureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Format(format) => write!(f, "signed as {format:?}, not eip712"),
            Self::Malformed => f.write_str("the signature is malformed"),
            Self::WrongSigner { signer } => write!(f, "signed by {signer}, not the server's key"),
        }
    }
}

impl std::error::Error for SignatureError {}

impl<P: SignedPayload> Signed<P> {
    /// `payload` signed by a key that `sign` signs digests with.
    pub(crate) fn sign(
        payload: P,
        accept_index: Option<usize>,
        sign: impl FnOnce(B256) -> Signature,
    ) -> Self {
        let signature = sign(payload.signing_hash());
        Self {
            format: FORMAT_EIP712.to_owned(),
            accept_index,
            payload,
            signature: alloy_primitives::hex::encode_prefixed(signature.as_bytes()),
        }
    }

    /// Who signed it.
    pub fn signer(&self) -> Result<Address, SignatureError> {
        if self.format != FORMAT_EIP712 {
            return Err(SignatureError::Format(self.format.clone()));
        }
        let text = self.signature.strip_prefix("0x").unwrap_or(&self.signature);
        let bytes = alloy_primitives::hex::decode(text).map_err(|_| SignatureError::Malformed)?;
        let signature =
            Signature::try_from(bytes.as_slice()).map_err(|_| SignatureError::Malformed)?;
        signature
            .recover_address_from_prehash(&self.payload.signing_hash())
            .map_err(|_| SignatureError::Malformed)
    }

    /// Checks it was signed by `expected`.
    pub fn verify(&self, expected: Address) -> Result<&P, SignatureError> {
        match self.signer()? {
            signer if signer == expected => Ok(&self.payload),
            signer => Err(SignatureError::WrongSigner { signer }),
        }
    }

    /// As JSON.
    pub(crate) fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A signed offer.
pub type SignedOffer = Signed<OfferPayload>;
/// A signed receipt.
pub type SignedReceipt = Signed<ReceiptPayload>;
/// A signed usage statement.
pub type SignedUsage = Signed<UsagePayload>;

/// The signed offers of a 402 (`extensions["offer-receipt"].info.offers`),
/// those in the EIP-712 format.
pub fn offers_of(required: &PaymentRequired) -> Vec<SignedOffer> {
    let offers = required
        .extensions
        .as_ref()
        .and_then(|extensions| extensions.get(OFFER_RECEIPT))
        .and_then(|extension| extension.pointer("/info/offers"))
        .and_then(Value::as_array);
    offers
        .into_iter()
        .flatten()
        .filter_map(|offer| serde_json::from_value(offer.clone()).ok())
        .collect()
}

/// The signed receipt of a settlement, if any.
pub fn receipt_of(settlement: &SettleResponse) -> Option<SignedReceipt> {
    signed_in(settlement, OFFER_RECEIPT, "/info/receipt")
}

/// The signed usage statement of a settlement, if any.
pub fn usage_of(settlement: &SettleResponse) -> Option<SignedUsage> {
    signed_in(settlement, USAGE_STATEMENT, "/info/statement")
}

fn signed_in<P: DeserializeOwned>(
    settlement: &SettleResponse,
    key: &str,
    pointer: &str,
) -> Option<Signed<P>> {
    let value = settlement.extensions.as_ref()?.get(key)?.pointer(pointer)?;
    serde_json::from_value(value.clone()).ok()
}

/// `{info: {<name>: value}}`: an extension's envelope. The official
/// `schema` member is left out: clients read `info` only, and a chat's 402
/// must stay within an 8 KiB header line.
pub(crate) fn extension(name: &str, value: Value) -> Value {
    json!({ "info": { name: value } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::signing_key::SigningKey;

    const KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

    fn offer() -> OfferPayload {
        OfferPayload {
            version: 1,
            resource_url: "https://api.example/v1/chat/completions".into(),
            scheme: "exact".into(),
            network: "eip155:84532".into(),
            asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
            pay_to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
            amount: "9001".into(),
            valid_until: 1_764_300_000,
        }
    }

    #[test]
    fn a_signed_offer_recovers_its_signer_and_a_changed_byte_does_not() {
        let key = SigningKey::from_hex(KEY).unwrap();
        let signed = Signed::sign(offer(), Some(0), |hash| key.sign_hash(hash));
        assert_eq!(signed.signer(), Ok(key.address()));
        assert!(signed.verify(key.address()).is_ok());
        let json = serde_json::to_value(&signed).unwrap();
        assert_eq!(json["format"], "eip712");
        assert_eq!(json["acceptIndex"], 0);
        assert_eq!(json["payload"]["payTo"], offer().pay_to);
        assert_eq!(json["payload"]["validUntil"], 1_764_300_000);
        let mut changed = signed.clone();
        changed.payload.amount = "9002".into();
        assert!(matches!(
            changed.verify(key.address()),
            Err(SignatureError::WrongSigner { .. })
        ));
        let mut broken = signed;
        broken.signature.truncate(20);
        assert_eq!(broken.signer(), Err(SignatureError::Malformed));
    }

    /// The official `OFFER_TYPES` and `RECEIPT_TYPES`, field for field (the
    /// interop test checks signatures with the official helpers).
    #[test]
    fn the_types_are_the_official_ones() {
        assert_eq!(
            Offer::eip712_root_type(),
            "Offer(uint256 version,string resourceUrl,string scheme,string network,string asset,string payTo,string amount,uint256 validUntil)"
        );
        assert_eq!(
            Receipt::eip712_root_type(),
            "Receipt(uint256 version,string network,string resourceUrl,string payer,uint256 issuedAt,string transaction)"
        );
    }

    fn usage(prompt: u64, completion: u64, amount: &str) -> UsagePayload {
        UsagePayload {
            version: 1,
            network: "eip155:84532".into(),
            resource_url: "https://api.example/v1/chat/completions".into(),
            payer: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
            transaction: String::new(),
            model: "openai/gpt-5-mini".into(),
            prompt_tokens: prompt,
            completion_tokens: completion,
            input_usd_per_million: "0.25".into(),
            output_usd_per_million: "2".into(),
            fee: "0.001".into(),
            amount: amount.into(),
            decimals: 6,
            issued_at: 1_764_300_000,
        }
    }

    #[test]
    fn a_usage_statement_adds_up_to_the_micro_unit_or_to_its_ceiling() {
        // 9 × 0.25 + 1 × 2 = 4.25 micro-dollars → 5, + 1,000 fee.
        assert_eq!(usage(9, 1, "1005").priced_amount(), Some(1_005));
        assert!(usage(9, 1, "1005").adds_up(9_001));
        assert!(!usage(9, 1, "1006").adds_up(9_001), "one unit more");
        assert!(!usage(9, 1, "1004").adds_up(9_001), "one unit less");
        assert!(usage(9, 1_000_000, "9001").adds_up(9_001), "the ceiling");
        let mut odd = usage(9, 1, "1005");
        odd.fee = "0.0000001".into();
        assert_eq!(odd.priced_amount(), None, "seven places");
    }
}

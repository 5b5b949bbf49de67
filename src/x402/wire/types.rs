//! The x402 v2 wire types, with serde exactly as the official clients send them.
//!
//! Numbers that are amounts or timestamps travel as decimal strings; the
//! `maxTimeoutSeconds` and `x402Version` fields are JSON numbers; `extra` is
//! always an object. Addresses are kept verbatim (clients differ in case) and
//! compared case-insensitively where it matters.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The protocol version walletgate speaks.
pub const X402_VERSION: u8 = 2;

/// The only payment scheme the local verifier understands.
pub const SCHEME_EXACT: &str = "exact";

/// The scheme that authorises a maximum and settles what was used.
pub const SCHEME_UPTO: &str = "upto";

/// Why a wire value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueError {
    /// An amount was not a plain decimal string (digits only, no leading zeros).
    Amount(String),
    /// A network id was not CAIP-2 (`namespace:reference`).
    Network(String),
    /// An address was not `0x` and 40 hex digits.
    Address(String),
    /// A USD decimal had a sign, an exponent, or more than six fractional digits.
    Usd(String),
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Amount(text) => write!(f, "not an atomic amount: {text:?}"),
            Self::Network(text) => write!(f, "not a CAIP-2 network id: {text:?}"),
            Self::Address(text) => write!(f, "not an EVM address: {text:?}"),
            Self::Usd(text) => write!(f, "not an exact USD decimal (at most 6 places): {text:?}"),
        }
    }
}

impl std::error::Error for ValueError {}

/// Reads a JSON string and hands it to `parse` without copying it: serde's
/// `Cow<str>` (and `String`) always allocates, once per field per payment.
pub(crate) fn read_str<'de, D, T>(
    deserializer: D,
    expecting: &'static str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    struct Text<F>(&'static str, F);
    impl<T, F: FnOnce(&str) -> Result<T, String>> serde::de::Visitor<'_> for Text<F> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
            (self.1)(text).map_err(E::custom)
        }
    }
    deserializer.deserialize_str(Text(expecting, parse))
}

/// A CAIP-2 chain id such as `eip155:84532`.
///
/// Shared text: every offer, receipt and settlement of a payment names its
/// network, so a clone is a reference count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Network(Arc<str>);

impl Serialize for Network {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl Network {
    /// Base Sepolia, the embedded default.
    pub const BASE_SEPOLIA: &'static str = "eip155:84532";
    /// Base mainnet.
    pub const BASE: &'static str = "eip155:8453";

    /// Parses a CAIP-2 id: a non-empty namespace and reference around one `:`.
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let valid = text.len() <= 128
            && text
                .split_once(':')
                .is_some_and(|(ns, reference)| !ns.is_empty() && !reference.is_empty());
        if valid {
            // The networks the embedded offers name share one text: a payment
            // names its network, and this is read for every one.
            static KNOWN: std::sync::LazyLock<[Network; 2]> = std::sync::LazyLock::new(|| {
                [
                    Network(Network::BASE_SEPOLIA.into()),
                    Network(Network::BASE.into()),
                ]
            });
            match KNOWN.iter().find(|known| *known.0 == *text) {
                Some(known) => Ok(known.clone()),
                None => Ok(Self(text.into())),
            }
        } else {
            Err(ValueError::Network(text.to_owned()))
        }
    }

    /// Base Sepolia (`eip155:84532`).
    pub fn base_sepolia() -> Self {
        Self::parse(Self::BASE_SEPOLIA).expect("a CAIP-2 id")
    }

    /// Base mainnet (`eip155:8453`).
    pub fn base() -> Self {
        Self::parse(Self::BASE).expect("a CAIP-2 id")
    }

    /// The id as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The EVM chain id of an `eip155:<n>` network.
    pub fn eip155_chain_id(&self) -> Option<u64> {
        let digits = self.0.strip_prefix("eip155:")?;
        parse_plain_decimal(digits).and_then(|n| u64::try_from(n).ok())
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        read_str(deserializer, "a CAIP-2 network id", |text| {
            Self::parse(text).map_err(|error| error.to_string())
        })
    }
}

/// Digits only, no sign, no leading zero (except `"0"`), at most 39 digits.
fn parse_plain_decimal(text: &str) -> Option<u128> {
    let bytes = text.as_bytes();
    let well_formed = !bytes.is_empty()
        && bytes.len() <= 39
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes[0] != b'0' || bytes.len() == 1);
    if well_formed { text.parse().ok() } else { None }
}

/// An amount in the asset's smallest unit (USDC: 6 decimals), a decimal string on the wire.
///
/// Parsing is strict: `"10000"` is accepted, `"010000"`, `"1e4"`, `"+1"` and
/// `"1.0"` are not, so two spellings of one amount never both match a quote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AtomicAmount(u128);

impl AtomicAmount {
    /// Wraps a number of atomic units.
    pub const fn new(units: u128) -> Self {
        Self(units)
    }

    /// The number of atomic units.
    pub const fn units(self) -> u128 {
        self.0
    }

    /// `self + other`, or `None` on overflow.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.0.checked_add(other.0).map(Self)
    }

    /// Renders the amount as a decimal of `decimals` places, trailing zeros
    /// trimmed: 1000 units of a 6-decimal asset is `"0.001"`.
    pub fn to_decimal_string(self, decimals: u8) -> String {
        let scale = 10u128.checked_pow(u32::from(decimals)).unwrap_or(1);
        let whole = self.0 / scale;
        let fraction = self.0 % scale;
        if fraction == 0 || decimals == 0 {
            return whole.to_string();
        }
        let digits = format!("{fraction:0width$}", width = usize::from(decimals));
        format!("{whole}.{}", digits.trim_end_matches('0'))
    }
}

impl FromStr for AtomicAmount {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_plain_decimal(text)
            .map(Self)
            .ok_or_else(|| ValueError::Amount(text.to_owned()))
    }
}

impl fmt::Display for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for AtomicAmount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AtomicAmount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        read_str(deserializer, "a decimal string", |text| {
            text.parse().map_err(|error: ValueError| error.to_string())
        })
    }
}

/// A USD price held exactly in millionths of a dollar; never a float.
///
/// ```
/// use walletgate::x402::wire::UsdAmount;
///
/// let price: UsdAmount = "0.0025".parse()?;
/// assert_eq!(price.micros(), 2500);
/// assert!("0.0000001".parse::<UsdAmount>().is_err()); // finer than a micro-dollar
/// assert!("1e-3".parse::<UsdAmount>().is_err());
/// # Ok::<(), walletgate::x402::wire::ValueError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsdAmount {
    micros: u128,
}

impl UsdAmount {
    /// Places kept after the decimal point.
    pub const DECIMALS: u8 = 6;

    /// The flat fee the gateway adds to every paid request: 0.001 USD.
    pub const FLAT_FEE: Self = Self { micros: 1000 };

    /// An amount of `micros` millionths of a dollar.
    pub const fn from_micros(micros: u128) -> Self {
        Self { micros }
    }

    /// Millionths of a dollar.
    pub const fn micros(self) -> u128 {
        self.micros
    }

    /// `self + other`, or `None` on overflow.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.micros.checked_add(other.micros).map(Self::from_micros)
    }

    /// The same value in atomic units of an asset with `decimals` places
    /// (1 USD = 1 unit of a dollar stablecoin); `None` if it cannot be exact.
    pub fn to_atomic(self, decimals: u8) -> Option<AtomicAmount> {
        let micros = self.micros;
        if decimals >= Self::DECIMALS {
            let scale = 10u128.checked_pow(u32::from(decimals - Self::DECIMALS))?;
            micros.checked_mul(scale).map(AtomicAmount::new)
        } else {
            let scale = 10u128.checked_pow(u32::from(Self::DECIMALS - decimals))?;
            micros
                .is_multiple_of(scale)
                .then(|| AtomicAmount::new(micros / scale))
        }
    }
}

impl FromStr for UsdAmount {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = || ValueError::Usd(text.to_owned());
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits_only(whole) || !digits_only(fraction) {
            return Err(refuse());
        }
        if text.ends_with('.') {
            return Err(refuse());
        }
        let significant = fraction.trim_end_matches('0');
        if significant.len() > usize::from(Self::DECIMALS) || whole.len() > 30 {
            return Err(refuse());
        }
        let whole: u128 = whole.parse().map_err(|_| refuse())?;
        let mut micros_part = 0u128;
        for (index, digit) in significant.bytes().enumerate() {
            let place =
                u32::from(Self::DECIMALS) - 1 - u32::try_from(index).map_err(|_| refuse())?;
            micros_part += u128::from(digit - b'0') * 10u128.pow(place);
        }
        whole
            .checked_mul(1_000_000)
            .and_then(|m| m.checked_add(micros_part))
            .map(Self::from_micros)
            .ok_or_else(refuse)
    }
}

impl fmt::Display for UsdAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&AtomicAmount::new(self.micros).to_decimal_string(Self::DECIMALS))
    }
}

/// What is being paid for (`resource` of a quote and of a payment).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// Absolute URL of the paid resource.
    pub url: String,
    /// Human-readable description (the TS server sends `""`).
    #[serde(default)]
    pub description: String,
    /// MIME type of the answer (the TS server sends `""`).
    #[serde(default, rename = "mimeType")]
    pub mime_type: String,
}

/// One offer of a quote (`accepts[]`), and the client's `accepted` echo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentRequirements {
    /// `"exact"`.
    pub scheme: String,
    /// CAIP-2 network.
    pub network: Network,
    /// Atomic units, flat fee included.
    pub amount: AtomicAmount,
    /// Token contract (EVM) or mint (Solana).
    pub asset: String,
    /// Recipient address.
    #[serde(rename = "payTo")]
    pub pay_to: String,
    /// How long a signed authorization for this offer may stay valid.
    #[serde(rename = "maxTimeoutSeconds")]
    pub max_timeout_seconds: u64,
    /// Scheme data; for exact EVM the EIP-712 domain `name` and `version`.
    #[serde(default)]
    pub extra: Map<String, Value>,
}

impl PaymentRequirements {
    /// A string member of `extra`.
    pub fn extra_str(&self, key: &str) -> Option<&str> {
        self.extra.get(key).and_then(Value::as_str)
    }
}

/// The quote: `PAYMENT-REQUIRED` decoded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaymentRequired {
    /// Always 2.
    #[serde(rename = "x402Version")]
    pub x402_version: u8,
    /// Why payment is (still) required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The resource.
    pub resource: ResourceInfo,
    /// The offers, best first; clients sign the first.
    pub accepts: Vec<PaymentRequirements>,
    /// Declared extensions; omitted when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
}

/// The payment: `PAYMENT-SIGNATURE` decoded.
///
/// `payload` stays raw JSON so other schemes (Solana's partially signed
/// transaction) pass through to a facilitator untouched; read an exact-EVM
/// payload with [`exact_evm`](Self::exact_evm).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaymentPayload {
    /// Must be 2.
    #[serde(rename = "x402Version")]
    pub x402_version: u8,
    /// Copied from the quote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    /// The offer the client chose, as received.
    pub accepted: PaymentRequirements,
    /// The scheme's signed data.
    pub payload: Value,
    /// Extensions the client added (clients add some unadvertised ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
}

impl PaymentPayload {
    /// The exact-EVM payload (`{signature, authorization}`), if that is what it holds.
    pub fn exact_evm(&self) -> Option<ExactEvmPayload> {
        ExactEvmPayload::deserialize(&self.payload).ok()
    }

    /// [`exact_evm`](Self::exact_evm) borrowing its strings from the payload: no copies.
    pub(crate) fn exact_evm_ref(&self) -> Option<ExactEvmPayloadRef<'_>> {
        ExactEvmPayloadRef::deserialize(&self.payload).ok()
    }
}

/// [`ExactEvmPayload`] read in place: the same fields, parsed the same way.
#[derive(Deserialize)]
pub(crate) struct ExactEvmPayloadRef<'a> {
    pub(crate) signature: &'a str,
    #[serde(borrow)]
    pub(crate) authorization: Eip3009AuthorizationRef<'a>,
}

/// [`Eip3009Authorization`] read in place.
#[derive(Deserialize)]
pub(crate) struct Eip3009AuthorizationRef<'a> {
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    pub(crate) value: AtomicAmount,
    #[serde(rename = "validAfter", with = "decimal_u64")]
    pub(crate) valid_after: u64,
    #[serde(rename = "validBefore", with = "decimal_u64")]
    pub(crate) valid_before: u64,
    pub(crate) nonce: &'a str,
}

/// The exact-EVM payload: an EIP-3009 authorization and its signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactEvmPayload {
    /// `0x` + 130 hex digits: r, s, v.
    pub signature: String,
    /// The signed transfer.
    pub authorization: Eip3009Authorization,
}

/// EIP-3009 `TransferWithAuthorization` fields, numbers as decimal strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eip3009Authorization {
    /// The payer.
    pub from: String,
    /// The recipient.
    pub to: String,
    /// Atomic units.
    pub value: AtomicAmount,
    /// Unix seconds; valid strictly after this.
    #[serde(rename = "validAfter", with = "decimal_u64")]
    pub valid_after: u64,
    /// Unix seconds; valid strictly before this.
    #[serde(rename = "validBefore", with = "decimal_u64")]
    pub valid_before: u64,
    /// 32 random bytes, `0x` hex.
    pub nonce: String,
}

/// Unix seconds as decimal strings, as EIP-3009 authorizations carry them.
mod decimal_u64 {
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        super::read_str(deserializer, "a decimal string", |text| {
            super::parse_plain_decimal(text)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| "not a decimal unix time".to_owned())
        })
    }
}

/// A facilitator's verdict (`POST /verify`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifyResponse {
    /// Whether the payment may proceed.
    #[serde(rename = "isValid")]
    pub is_valid: bool,
    /// Machine-readable reason when invalid.
    #[serde(
        default,
        rename = "invalidReason",
        skip_serializing_if = "Option::is_none"
    )]
    pub invalid_reason: Option<String>,
    /// Human-readable detail when invalid.
    #[serde(
        default,
        rename = "invalidMessage",
        skip_serializing_if = "Option::is_none"
    )]
    pub invalid_message: Option<String>,
    /// The paying address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

impl VerifyResponse {
    /// A positive verdict for `payer`.
    pub fn valid(payer: impl Into<String>) -> Self {
        Self {
            is_valid: true,
            payer: Some(payer.into()),
            ..Self::default()
        }
    }

    /// A negative verdict with `reason`.
    pub fn invalid(reason: impl Into<String>, payer: Option<String>) -> Self {
        Self {
            is_valid: false,
            invalid_reason: Some(reason.into()),
            payer,
            ..Self::default()
        }
    }
}

/// A settlement receipt (`POST /settle`, and the `PAYMENT-RESPONSE` header).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleResponse {
    /// Whether the transfer happened. Anything but `true` is a failure.
    pub success: bool,
    /// Machine-readable reason on failure.
    #[serde(
        default,
        rename = "errorReason",
        skip_serializing_if = "Option::is_none"
    )]
    pub error_reason: Option<String>,
    /// Human-readable detail on failure.
    #[serde(
        default,
        rename = "errorMessage",
        skip_serializing_if = "Option::is_none"
    )]
    pub error_message: Option<String>,
    /// The paying address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Transaction id; `""` on failure.
    #[serde(default)]
    pub transaction: String,
    /// CAIP-2 network.
    pub network: Network,
    /// Atomic units settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<AtomicAmount>,
    /// What the server adds to its receipt (a metered answer's `usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
}

impl SettleResponse {
    /// A failed settlement on `network` for `reason`.
    pub fn failure(network: Network, reason: impl Into<String>, payer: Option<String>) -> Self {
        Self {
            success: false,
            error_reason: Some(reason.into()),
            error_message: None,
            payer,
            transaction: String::new(),
            network,
            amount: None,
            extensions: None,
        }
    }
}

/// One payment kind a facilitator handles (`GET /supported`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SupportedKind {
    /// Protocol version.
    #[serde(rename = "x402Version")]
    pub x402_version: u8,
    /// Scheme, e.g. `"exact"`.
    pub scheme: String,
    /// CAIP-2 network.
    pub network: Network,
    /// Scheme data (Solana: `feePayer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// `GET /supported`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SupportedResponse {
    /// The kinds.
    pub kinds: Vec<SupportedKind>,
    /// Extension names.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Signer addresses per network pattern.
    #[serde(default)]
    pub signers: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_amounts_are_strict_decimal_strings() {
        let amount: AtomicAmount = serde_json::from_str("\"10000\"").unwrap();
        assert_eq!(amount.units(), 10_000);
        assert_eq!(serde_json::to_string(&amount).unwrap(), "\"10000\"");
        for bad in [
            "\"010000\"",
            "\"1e4\"",
            "\"+1\"",
            "\"1.0\"",
            "\"\"",
            "10000",
            "\"-1\"",
        ] {
            assert!(serde_json::from_str::<AtomicAmount>(bad).is_err(), "{bad}");
        }
        assert_eq!(AtomicAmount::new(0).to_string(), "0");
    }

    #[test]
    fn usd_parsing_is_exact_without_floats() {
        let cases = [
            ("0.001", 1000),
            ("1", 1_000_000),
            ("1.5", 1_500_000),
            ("0.000001", 1),
            ("0.0010000", 1000),
            ("12.345678", 12_345_678),
        ];
        for (text, micros) in cases {
            assert_eq!(
                text.parse::<UsdAmount>().unwrap().micros(),
                micros,
                "{text}"
            );
        }
        for bad in [
            "",
            ".5",
            "1.",
            "-1",
            "+1",
            "1e3",
            "0.0000001",
            "1,5",
            " 1",
            "NaN",
        ] {
            assert!(bad.parse::<UsdAmount>().is_err(), "{bad}");
        }
        // 0.1 + 0.2 is exactly 0.3 here, unlike in f64.
        let sum = "0.1"
            .parse::<UsdAmount>()
            .unwrap()
            .checked_add("0.2".parse().unwrap())
            .unwrap();
        assert_eq!(sum, "0.3".parse().unwrap());
        assert_eq!(sum.to_string(), "0.3");
    }

    #[test]
    fn usd_converts_to_atomic_units_exactly() {
        let price: UsdAmount = "0.0025".parse().unwrap();
        assert_eq!(price.to_atomic(6), Some(AtomicAmount::new(2500)));
        assert_eq!(
            price.to_atomic(18),
            Some(AtomicAmount::new(2_500_000_000_000_000))
        );
        assert_eq!(price.to_atomic(2), None);
        assert_eq!(AtomicAmount::new(1000).to_decimal_string(6), "0.001");
        assert_eq!(AtomicAmount::new(1_000_000).to_decimal_string(6), "1");
        assert_eq!(AtomicAmount::new(1_234_500).to_decimal_string(6), "1.2345");
    }

    #[test]
    fn networks_are_caip2() {
        let network = Network::parse("eip155:84532").unwrap();
        assert_eq!(network.eip155_chain_id(), Some(84532));
        assert_eq!(
            Network::parse("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp")
                .unwrap()
                .eip155_chain_id(),
            None
        );
        for bad in ["base-sepolia", ":1", "eip155:", ""] {
            assert!(Network::parse(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<Network>("\"base\"").is_err());
    }

    #[test]
    fn payment_payload_round_trips_the_spec_shape() {
        let json = r#"{"x402Version":2,"resource":{"url":"https://api.example.com/premium-data","description":"","mimeType":"application/json"},"accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},"payload":{"signature":"0x2d6a","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"1740672089","validBefore":"1740672154","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}}"#;
        let payload: PaymentPayload = serde_json::from_str(json).unwrap();
        let evm = payload.exact_evm().unwrap();
        assert_eq!(evm.authorization.valid_before, 1_740_672_154);
        // `payload` is raw JSON: same members, key order not kept.
        let back: Value = serde_json::to_value(&payload).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(json).unwrap());

        // The borrowed reading sees the same fields and refuses the same shapes.
        let view = payload.exact_evm_ref().unwrap();
        let a = &evm.authorization;
        let b = &view.authorization;
        assert_eq!(view.signature, evm.signature);
        assert_eq!((b.from, b.to, b.nonce), (&*a.from, &*a.to, &*a.nonce));
        assert_eq!(
            (b.value, b.valid_after, b.valid_before),
            (a.value, a.valid_after, a.valid_before)
        );
        for (field, bad) in [
            ("value", Value::from(10_000)),
            ("validBefore", Value::from("1e9")),
            ("from", Value::Null),
        ] {
            let mut odd = payload.clone();
            odd.payload["authorization"][field] = bad;
            assert!(
                odd.exact_evm().is_none() && odd.exact_evm_ref().is_none(),
                "{field}"
            );
        }
    }
}

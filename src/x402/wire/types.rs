//! The x402 v2 wire types, with serde exactly as the official clients send them.
//!
//! Numbers that are amounts or timestamps travel as decimal strings; the
//! `maxTimeoutSeconds` and `x402Version` fields are JSON numbers; `extra` is
//! always an object. Addresses are kept verbatim (clients differ in case) and
//! compared case-insensitively where it matters.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::evm::EvmDecoding;

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

/// [`PaymentPayload`] as a server reads it from the header: the same fields
/// and checks, the scheme's `payload` kept as its raw JSON text. The
/// exact-EVM fields are read straight into typed values (by
/// [`read`](Self::read) as it meets them, else from that text); the
/// `Value` tree of a [`PaymentPayload`] is built only if something asks for
/// it (an HTTP facilitator's body, a refusal naming the payer as written).
///
/// `resource` and `accepted` are shared: a client echoes the quote's, and
/// [`read`](Self::read) takes an echo with the very bytes the server wrote
/// as that value, unparsed.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct PaymentHeader {
    #[serde(rename = "x402Version")]
    pub(crate) x402_version: u8,
    #[serde(default, deserialize_with = "shared_option")]
    pub(crate) resource: Option<Arc<ResourceInfo>>,
    #[serde(deserialize_with = "shared")]
    pub(crate) accepted: Arc<PaymentRequirements>,
    /// The payload's JSON text, as sent (one whole JSON value).
    #[serde(deserialize_with = "raw_text")]
    pub(crate) payload: Box<str>,
    #[serde(default)]
    pub(crate) extensions: Option<Map<String, Value>>,
    /// The exact-EVM payload, when [`read`](Self::read) typed it as it
    /// found it (else it is read from `payload` when asked).
    #[serde(skip)]
    pub(crate) exact_evm: Option<EvmDecoding>,
}

fn raw_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Box<str>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Into::into)
}

fn shared<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Arc<T>, D::Error> {
    T::deserialize(deserializer).map(Arc::new)
}

fn shared_option<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Arc<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(|value| value.map(Arc::new))
}

/// What a payment is expected to echo, each beside its JSON text as the
/// server wrote it (compact `serde_json`, as clients copy it back).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Echoes<'a> {
    pub(crate) offers: &'a [(Box<str>, Arc<PaymentRequirements>)],
    pub(crate) resource: &'a (Box<str>, Arc<ResourceInfo>),
}

/// A payment header as [`PaymentHeader::read`] parses it: the echoes and
/// the payload as their raw text.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "x402Version")]
    x402_version: u8,
    #[serde(default, borrow)]
    resource: Option<&'a RawValue>,
    #[serde(borrow)]
    accepted: &'a RawValue,
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(default)]
    extensions: Option<Map<String, Value>>,
}

/// A payment header's JSON with its top-level `accepted` and `resource`
/// values each cut to a `0` where they are byte for byte an echo, and its
/// `payload` where it parses as an exact-EVM one (typed by that parse, which
/// also finds where it ends): the header's parse then scans one byte for
/// each, not a few hundred, and the payload is parsed once, not scanned and
/// parsed again.
///
/// A cut is found by its key (`"accepted":` and the echo right after it),
/// not by a parse of the header, so the parse of the cut text checks it:
/// what was cut is one whole JSON value, and so is its stand-in. When that
/// parse puts the top-level `accepted` on the stand-in, where the echo
/// began, the bytes before it are the header's own: the header's parse
/// reached the echo in the same state, read one whole value, and went on
/// over the same bytes as the cut text's. It parses to the same fields,
/// with the echo there. Anywhere else (the key found inside another value,
/// an invalid header), the header is parsed as it came.
struct Elided<'a> {
    text: &'a [u8],
    /// Where the stand-in for `accepted` is, and which offer it echoed.
    accepted: Option<(usize, usize)>,
    /// Where the stand-in for `resource` is.
    resource: Option<usize>,
    /// Where the stand-in for `payload` is, the payload's text, and its
    /// fields typed.
    payload: Option<(usize, &'a str, EvmDecoding)>,
}

/// What a cut held.
#[derive(Clone, Copy)]
enum Echoed {
    Offer(usize),
    Resource,
    /// Not an echo: the exact-EVM payload, typed by its own parse (which
    /// found where it ends), so the header's parse need not scan it.
    Payload,
}

/// The longest header cut, on the stack (a payment's is about 1 KiB);
/// longer ones are parsed as they came.
const CUT_ON_STACK: usize = 2048;

impl<'a> Elided<'a> {
    const STAND_IN: &'static [u8] = b"0";

    /// `json` with the echoes (and an exact-EVM payload) found cut,
    /// written into `into` (at least as long), or `None` when none is.
    fn cut(json: &'a str, echoes: Echoes<'_>, into: &'a mut [u8]) -> Option<Self> {
        use memchr::memmem::Finder;
        static ACCEPTED: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new(b"\"accepted\":"));
        static RESOURCE: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new(b"\"resource\":"));
        static PAYLOAD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"payload\":"));
        let value_at =
            |key: &Finder<'_>| key.find(json.as_bytes()).map(|at| at + key.needle().len());
        let accepted = value_at(&ACCEPTED).and_then(|at| {
            let offer =
                (echoes.offers.iter()).position(|(text, _)| json[at..].starts_with(&**text))?;
            Some((at, echoes.offers[offer].0.len(), Echoed::Offer(offer)))
        });
        let resource = value_at(&RESOURCE)
            .filter(|&at| json[at..].starts_with(&*echoes.resource.0))
            .map(|at| (at, echoes.resource.0.len(), Echoed::Resource));
        // One value parsed where the payload begins, and where it ends.
        let mut typed = None;
        let payload = value_at(&PAYLOAD).and_then(|at| {
            let mut values = serde_json::Deserializer::from_str(&json[at..])
                .into_iter::<ExactEvmPayloadRef<'_>>();
            let evm = values.next()?.ok()?;
            let len = values.byte_offset();
            typed = Some((&json[at..at + len], EvmDecoding::of_ref(&evm)));
            Some((at, len, Echoed::Payload))
        });
        let mut cuts = [accepted, resource, payload];
        cuts.sort_by_key(|cut| cut.map(|(at, ..)| at));
        let (mut accepted, mut resource, mut payload) = (None, None, None);
        let (mut kept_from, mut written) = (0, 0);
        let mut write = |bytes: &[u8]| {
            into[written..written + bytes.len()].copy_from_slice(bytes);
            written += bytes.len();
            written
        };
        for (at, len, echoed) in cuts.into_iter().flatten() {
            if at < kept_from {
                return None; // one inside the other: no parse puts both at the top
            }
            let place = write(&json.as_bytes()[kept_from..at]);
            write(Self::STAND_IN);
            kept_from = at + len;
            match echoed {
                Echoed::Offer(offer) => accepted = Some((place, offer)),
                Echoed::Resource => resource = Some(place),
                Echoed::Payload => {
                    payload = (typed.take()).map(|(text, decoding)| (place, text, decoding));
                }
            }
        }
        if kept_from == 0 {
            return None;
        }
        let end = write(&json.as_bytes()[kept_from..]);
        Some(Elided {
            text: &into[..end],
            accepted,
            resource,
            payload,
        })
    }
}

impl PaymentHeader {
    /// A payment header's JSON, its `accepted` and `resource` taken from
    /// `echoes` when their text is byte for byte what the server wrote
    /// (then they equal it, and are cut before the parse: see [`Elided`]),
    /// else parsed as the derived reader would.
    pub(crate) fn read(json: &[u8], echoes: Echoes<'_>) -> serde_json::Result<Self> {
        // One UTF-8 check of the whole text, not one per string and raw value.
        let Ok(text) = std::str::from_utf8(json) else {
            let wire: Wire<'_> = serde_json::from_slice(json)?;
            return Self::of_wire(wire, echoes, None, None);
        };
        let mut stack = [0_u8; CUT_ON_STACK];
        if let Some(into) = stack.get_mut(..json.len())
            && let Some(elided) = Elided::cut(text, echoes, into)
            && let Some(header) = Self::read_elided(elided, echoes)
        {
            return Ok(header);
        }
        let wire: Wire<'_> = serde_json::from_str(text)?;
        Self::of_wire(wire, echoes, None, None)
    }

    /// [`read`](Self::read) of `elided`'s text: `None` unless the parse
    /// puts the top-level `accepted` and `resource` on the stand-ins of
    /// the echoes cut (then the header parses to the same, as
    /// [`Elided`] says).
    fn read_elided(elided: Elided<'_>, echoes: Echoes<'_>) -> Option<Self> {
        // The cut text is the UTF-8 header's, whole values replaced by ASCII.
        let wire: Wire<'_> = serde_json::from_str(std::str::from_utf8(elided.text).ok()?).ok()?;
        let stands_in = |raw: &RawValue, place: usize| {
            raw.get().as_bytes() == Elided::STAND_IN
                && raw.get().as_ptr() as usize - elided.text.as_ptr() as usize == place
        };
        let accepted = match elided.accepted {
            Some((place, offer)) if stands_in(wire.accepted, place) => {
                Some(echoes.offers[offer].1.clone())
            }
            Some(_) => return None,
            None => None,
        };
        let resource = match elided.resource {
            Some(place) if wire.resource.is_some_and(|raw| stands_in(raw, place)) => {
                Some(echoes.resource.1.clone())
            }
            Some(_) => return None,
            None => None,
        };
        let payload = match elided.payload {
            Some((place, text, decoding)) if stands_in(wire.payload, place) => {
                Some((text, decoding))
            }
            Some(_) => return None,
            None => None,
        };
        let mut header = Self::of_wire(wire, echoes, accepted, resource).ok()?;
        if let Some((text, decoding)) = payload {
            header.payload = text.into();
            header.exact_evm = Some(decoding);
        }
        Some(header)
    }

    /// The header of a parse: `accepted` and `resource` as given, else
    /// matched with an echo by their text, else parsed.
    fn of_wire(
        wire: Wire<'_>,
        echoes: Echoes<'_>,
        accepted: Option<Arc<PaymentRequirements>>,
        resource: Option<Arc<ResourceInfo>>,
    ) -> serde_json::Result<Self> {
        let accepted = match accepted {
            Some(offer) => offer,
            None => match echoes
                .offers
                .iter()
                .find(|(text, _)| **text == *wire.accepted.get())
            {
                Some((_, offer)) => offer.clone(),
                None => Arc::new(serde_json::from_str(wire.accepted.get())?),
            },
        };
        let (resource_text, quoted_resource) = echoes.resource;
        let resource = match (resource, wire.resource) {
            (Some(resource), _) => Some(resource),
            (None, None) => None,
            (None, Some(raw)) if **resource_text == *raw.get() => Some(quoted_resource.clone()),
            (None, Some(raw)) => {
                serde_json::from_str::<Option<ResourceInfo>>(raw.get())?.map(Arc::new)
            }
        };
        Ok(Self {
            x402_version: wire.x402_version,
            resource,
            accepted,
            payload: wire.payload.get().into(),
            extensions: wire.extensions,
            exact_evm: None,
        })
    }

    /// The payload as [`PaymentPayload`] holds it.
    pub(crate) fn to_payload(&self) -> PaymentPayload {
        PaymentPayload {
            x402_version: self.x402_version,
            resource: self.resource.as_deref().cloned(),
            accepted: (*self.accepted).clone(),
            // Raw text the parser accepted is one JSON value.
            payload: serde_json::from_str(&self.payload).unwrap_or(Value::Null),
            extensions: self.extensions.clone(),
        }
    }

    /// [`PaymentPayload::exact_evm_ref`] on the raw text; `None` also when a
    /// field has escapes (it cannot be borrowed: read it through a `Value`).
    pub(crate) fn exact_evm_ref(&self) -> Option<ExactEvmPayloadRef<'_>> {
        serde_json::from_str(&self.payload).ok()
    }

    /// `payload.authorization.from` as the client wrote it, whatever the
    /// other fields hold; `None` also when it has escapes (read it through
    /// a `Value`).
    pub(crate) fn claimed_payer(&self) -> Option<&str> {
        #[derive(Deserialize)]
        struct Payload<'a> {
            #[serde(borrow)]
            authorization: Authorization<'a>,
        }
        #[derive(Deserialize)]
        struct Authorization<'a> {
            from: &'a str,
        }
        let payload: Payload<'_> = serde_json::from_str(&self.payload).ok()?;
        Some(payload.authorization.from)
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

    #[test]
    fn a_headers_payer_is_read_as_written_whatever_its_other_fields_hold() {
        let header = |authorization: &str| -> PaymentHeader {
            serde_json::from_str(&format!(
                r#"{{"x402Version":2,"accepted":{{"scheme":"exact","network":"eip155:84532","amount":"1","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60}},"payload":{{"signature":"0x00","authorization":{authorization}}}}}"#
            ))
            .unwrap()
        };
        // Not an exact-EVM payment (its value is no amount), but it names its payer.
        let odd = header(r#"{"from":"0xAbC","value":"ten"}"#);
        assert!(odd.exact_evm_ref().is_none());
        assert_eq!(odd.claimed_payer(), Some("0xAbC"));
        assert_eq!(odd.to_payload().payload["authorization"]["value"], "ten");
        assert_eq!(header(r#"{"to":"0xAbC"}"#).claimed_payer(), None);
    }

    /// A payment header echoing its quote's offer and resource, as clients send it.
    const ECHOING: &str = r#"{"x402Version":2,"resource":{"url":"https://api.example.com/premium-data","description":"","mimeType":"application/json"},"accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},"payload":{"signature":"0x2d6a","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}}}"#;

    type Quoted<T> = (Box<str>, Arc<T>);

    /// `json` as the derived reader reads it, and its offer and resource
    /// as a quote keeps them: each value's compact JSON beside it.
    fn quoted(
        json: &str,
    ) -> (
        PaymentHeader,
        [Quoted<PaymentRequirements>; 1],
        Quoted<ResourceInfo>,
    ) {
        let derived: PaymentHeader = serde_json::from_str(json).unwrap();
        let offer_text = serde_json::to_string(&*derived.accepted).unwrap();
        let offers = [(offer_text.into(), derived.accepted.clone())];
        let resource = derived.resource.clone().unwrap();
        let resource = (serde_json::to_string(&*resource).unwrap().into(), resource);
        (derived, offers, resource)
    }

    /// What the derived reader refuses, [`PaymentHeader::read`] refuses.
    fn refused_by_both(json: &str, echoes: Echoes<'_>) {
        assert!(
            serde_json::from_str::<PaymentHeader>(json).is_err(),
            "{json}"
        );
        assert!(
            PaymentHeader::read(json.as_bytes(), echoes).is_err(),
            "{json}"
        );
    }

    #[test]
    fn an_echo_with_the_servers_bytes_is_its_value_and_any_other_is_parsed_as_before() {
        let json = ECHOING;
        let (derived, offers, resource) = quoted(json);
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        let read = PaymentHeader::read(json.as_bytes(), echoes).unwrap();
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert!(Arc::ptr_eq(read.resource.as_ref().unwrap(), &resource.1));
        assert_eq!(read.payload, derived.payload);

        // Spelled otherwise (a space, a null resource): parsed, the same values.
        let spaced =
            json.replacen("\"amount\":", "\"amount\": ", 1)
                .replacen("\"url\":", "\"url\": ", 1);
        let read = PaymentHeader::read(spaced.as_bytes(), echoes).unwrap();
        assert!(!Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert_eq!(read.accepted, derived.accepted);
        assert_eq!(read.resource, derived.resource);
        let no_resource = json.replacen(&*resource.0, "null", 1);
        let read = PaymentHeader::read(no_resource.as_bytes(), echoes).unwrap();
        assert_eq!(read.resource, None);
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));

        // What the derived reader refuses, this one refuses.
        for bad in [
            json.replacen("\"10000\"", "10000", 1),
            json.replacen(&*resource.0, "5", 1),
            json.replacen("\"x402Version\":2,", "", 1),
        ] {
            refused_by_both(&bad, echoes);
        }
    }

    #[test]
    fn an_echo_is_cut_only_where_the_parse_puts_the_top_level_value() {
        let json = ECHOING;
        let (derived, offers, resource) = quoted(json);
        let (offer_text, resource_text) = (offers[0].0.to_string(), resource.0.to_string());
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        // Both echoes cut, the rest of the text kept byte for byte.
        let mut into = [0; CUT_ON_STACK];
        let elided = Elided::cut(json, echoes, &mut into).unwrap();
        assert_eq!(
            String::from_utf8(elided.text.to_vec()).unwrap(),
            json.replacen(&offer_text, "0", 1)
                .replacen(&resource_text, "0", 1)
        );
        let read = PaymentHeader::read_elided(elided, echoes).unwrap();
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert!(Arc::ptr_eq(read.resource.as_ref().unwrap(), &resource.1));
        assert_eq!(read.payload, derived.payload);

        // The first `"accepted":` with an echo after it is inside an
        // extension, the top-level one is spelled otherwise: the cut does
        // not stand where the parse puts `accepted`, and the header is read
        // as it came, its extension whole.
        let spaced = offer_text.replacen("\"amount\":", "\"amount\": ", 1);
        let decoy = json.replacen(&offer_text, &spaced, 1).replacen(
            "{\"x402Version\":2,",
            &format!(
                "{{\"x402Version\":2,\"extensions\":{{\"note\":{{\"accepted\":{offer_text}}}}},"
            ),
            1,
        );
        let cut = Elided::cut(&decoy, echoes, &mut into);
        assert!(cut.unwrap().accepted.is_some());
        let read = PaymentHeader::read(decoy.as_bytes(), echoes).unwrap();
        let expected: PaymentHeader = serde_json::from_str(&decoy).unwrap();
        assert!(!Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert_eq!(read.accepted, expected.accepted);
        assert_eq!(read.extensions, expected.extensions);
        assert_eq!(
            read.extensions.unwrap()["note"]["accepted"],
            serde_json::to_value(&*derived.accepted).unwrap()
        );

        // `accepted` twice, the first an echo: refused as a duplicate, as
        // the derived reader does.
        let twice = json.replacen(
            "\"accepted\":",
            &format!("\"accepted\":{offer_text},\"accepted\":"),
            1,
        );
        refused_by_both(&twice, echoes);

        // An echo followed by what would continue its stand-in as a number
        // (`0.5`, `0e5`): invalid as sent, refused as the derived reader does.
        for tail in [".5", "e5", "5"] {
            let bad = json.replacen(&offer_text, &format!("{offer_text}{tail}"), 1);
            refused_by_both(&bad, echoes);
        }
        // A resource echo inside the accepted one: one cut inside the
        // other, nothing cut.
        let nested = offer_text.replacen(
            "\"extra\":{",
            &format!("\"extra\":{{\"resource\":{resource_text},"),
            1,
        );
        let nested_offer: PaymentRequirements = serde_json::from_str(&nested).unwrap();
        let offers = [(nested.clone().into_boxed_str(), Arc::new(nested_offer))];
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        let inside = format!(r#"{{"x402Version":2,"accepted":{nested},"payload":{{}}}}"#);
        assert!(Elided::cut(&inside, echoes, &mut into).is_none());
        let read = PaymentHeader::read(inside.as_bytes(), echoes).unwrap();
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));
        assert_eq!(read.resource, None);
    }

    #[test]
    fn an_exact_evm_payload_is_typed_where_it_stands_and_read_as_before_elsewhere() {
        let payload = format!(
            r#"{{"signature":"0x{}1b","authorization":{{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"0","validBefore":"1750000300","nonce":"0x{}"}}}}"#,
            "ab".repeat(64),
            "01".repeat(32)
        );
        let json = ECHOING.replacen(
            r#"{"signature":"0x2d6a","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}}"#,
            &payload,
            1,
        );
        let (derived, offers, resource) = quoted(&json);
        let echoes = Echoes {
            offers: &offers,
            resource: &resource,
        };
        let typed = |header: &PaymentHeader| {
            header
                .exact_evm
                .clone()
                .unwrap_or_else(|| EvmDecoding::of_header(header))
        };
        let as_derived = |json: &str| {
            let derived: PaymentHeader = serde_json::from_str(json).unwrap();
            (typed(&derived), derived.payload)
        };
        assert!(matches!(typed(&derived), EvmDecoding::Decoded(..)));

        // Typed by its own parse, its text kept as sent.
        let mut into = [0; CUT_ON_STACK];
        let cut = Elided::cut(&json, echoes, &mut into).unwrap();
        assert_eq!(cut.payload.as_ref().unwrap().1, payload);
        let read = PaymentHeader::read(json.as_bytes(), echoes).unwrap();
        assert!(read.exact_evm.is_some());
        assert_eq!((typed(&read), read.payload.clone()), as_derived(&json));
        assert!(Arc::ptr_eq(&read.accepted, &offers[0].1));

        // A field with an escape (not borrowed), a payload of another shape,
        // one under a decoy key inside an extension before the real one:
        // read as before, to the same.
        let escaped = json.replacen("\"0x857b", "\"\\u0030x857b", 1);
        let permit2 = json.replacen("\"authorization\":", "\"permit2Authorization\":", 1);
        let decoy = json.replacen(
            "\"accepted\":",
            &format!("\"extensions\":{{\"note\":{{\"payload\":{payload}}}}},\"accepted\":"),
            1,
        );
        let (escaped_typed, _) = as_derived(&escaped);
        assert_eq!(escaped_typed, typed(&derived));
        for other in [&escaped, &permit2, &decoy] {
            let read = PaymentHeader::read(other.as_bytes(), echoes).unwrap();
            assert!(read.exact_evm.is_none(), "{other}");
            assert_eq!(
                (typed(&read), read.payload.clone()),
                as_derived(other),
                "{other}"
            );
        }
        assert!(
            Elided::cut(&decoy, echoes, &mut into)
                .unwrap()
                .payload
                .is_some()
        );

        // The payload glued to more, or twice: refused as the derived reader does.
        refused_by_both(&json.replacen(&payload, &format!("{payload}0"), 1), echoes);
        refused_by_both(
            &json.replacen(
                "\"payload\":",
                &format!("\"payload\":{payload},\"payload\":"),
                1,
            ),
            echoes,
        );
    }
}

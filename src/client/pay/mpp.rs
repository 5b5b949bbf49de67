//! MPP's client side: reading `WWW-Authenticate: Payment` challenges,
//! answering an `evm`/`charge` one with an EIP-3009 `authorization`
//! credential, reading the `Payment-Receipt` of the paid answer.
//!
//! A challenge becomes an x402 `exact` offer (amount, currency, recipient,
//! chain, the token's EIP-712 domain from the assets the client knows), so
//! the [`SpendPolicy`](super::SpendPolicy) and the [`Receipt`](super::Receipt)
//! treat both protocols alike; only the nonce (keccak256(id ‖ realm)), the
//! expiry (the challenge's `expires`) and the envelope differ.

use std::fmt;

use alloy_primitives::keccak256;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;
use serde_json::{Map, Value, json};

use crate::siwe::Timestamp;
use crate::x402::server::{BASE_SEPOLIA_USDC, BASE_USDC};
use crate::x402::wire::eip712::parse_evm_address;
use crate::x402::wire::{AtomicAmount, Network, PaymentRequirements, SCHEME_EXACT};

/// The header naming the payment methods the client pays (mpp.md §7).
pub(crate) const ACCEPT_PAYMENT: &str = "accept-payment";
/// The one method/intent the client pays.
pub(crate) const ACCEPTED: &str = "evm/charge";
/// The paid answer's receipt header.
pub(crate) const PAYMENT_RECEIPT: &str = "payment-receipt";
/// The longest `request` parameter read (mppx's parser limit).
const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// How long an authorization stays valid when the challenge has no `expires`.
const DEFAULT_VALIDITY_SECS: u64 = 300;

/// Which protocol pays a 402 that offers both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// x402 (`PAYMENT-REQUIRED` → `PAYMENT-SIGNATURE`): the default.
    #[default]
    X402,
    /// MPP (`WWW-Authenticate: Payment` → `Authorization: Payment`).
    Mpp,
}

impl Protocol {
    /// `x402` or `mpp`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::X402 => "x402",
            Self::Mpp => "mpp",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "x402" => Ok(Self::X402),
            "mpp" => Ok(Self::Mpp),
            _ => Err(format!("not a payment protocol (x402 or mpp): `{text}`")),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an MPP challenge is not paid; nothing was signed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsupported {
    /// A method/intent other than `evm`/`charge` (as the server named them).
    Method {
        /// The challenge's `method`.
        method: String,
        /// The challenge's `intent`.
        intent: String,
    },
    /// An `evm`/`charge` challenge the client cannot answer (why).
    Request(&'static str),
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Method { method, intent } => write!(
                f,
                "the MPP challenge asks {method}/{intent}; only evm/charge is paid"
            ),
            Self::Request(why) => write!(f, "the MPP evm/charge challenge: {why}"),
        }
    }
}

/// One `Payment` challenge: its auth-params in the order given (echoed as
/// they came), and the `request` decoded.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Challenge {
    params: Vec<(String, String)>,
}

impl Challenge {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub(crate) fn method(&self) -> &str {
        self.param("method").unwrap_or_default()
    }

    pub(crate) fn intent(&self) -> &str {
        self.param("intent").unwrap_or_default()
    }

    /// The header the credential goes in: `header`, else `Authorization`.
    pub(crate) fn credential_header(&self) -> &str {
        self.param("header").unwrap_or("authorization")
    }

    /// The challenge's x402 twin: the `exact` offer it asks, valid until
    /// `expires`, under the EIP-712 domain of a token the client knows.
    /// Unsupported methods, intents and requests are refused here.
    pub(crate) fn offer(&self, now: u64) -> Result<Charge, Unsupported> {
        if self.method() != "evm" || self.intent() != "charge" {
            return Err(Unsupported::Method {
                method: self.method().to_owned(),
                intent: self.intent().to_owned(),
            });
        }
        if self.param("id").is_none_or(str::is_empty) || self.param("realm").is_none() {
            return Err(Unsupported::Request("no id or realm"));
        }
        let request = self
            .param("request")
            .filter(|request| request.len() <= MAX_REQUEST_BYTES)
            .and_then(|request| URL_SAFE_NO_PAD.decode(request.trim_end_matches('=')).ok())
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .ok_or(Unsupported::Request("the request is not base64url JSON"))?;
        let text = |name: &str| request.get(name).and_then(Value::as_str);
        let details = request.get("methodDetails");
        let types = details
            .and_then(|details| details.get("credentialTypes"))
            .and_then(Value::as_array);
        if !types.is_some_and(|types| types.iter().any(|kind| kind == "authorization")) {
            return Err(Unsupported::Request("it takes no authorization credential"));
        }
        if details.and_then(|details| details.get("splits")).is_some() {
            return Err(Unsupported::Request("it splits the payment"));
        }
        let chain_id = details
            .and_then(|details| details.get("chainId"))
            .and_then(Value::as_u64)
            .ok_or(Unsupported::Request("no chainId"))?;
        let amount = text("amount")
            .and_then(|amount| amount.parse::<u128>().ok())
            .ok_or(Unsupported::Request("the amount is not base units"))?;
        let (Some(currency), Some(recipient)) = (
            text("currency").and_then(parse_evm_address),
            text("recipient").and_then(parse_evm_address),
        ) else {
            return Err(Unsupported::Request("the currency or recipient"));
        };
        let network = Network::parse(&format!("eip155:{chain_id}"))
            .map_err(|_| Unsupported::Request("the chainId"))?;
        let asset = currency.to_checksum(None);
        let (name, version) = known_domain(&network, &asset).ok_or(Unsupported::Request(
            "a token whose EIP-712 domain is unknown",
        ))?;
        let valid_before = match self.param("expires") {
            Some(expires) => {
                let at = expires
                    .parse::<Timestamp>()
                    .map_err(|_| Unsupported::Request("expires is not RFC 3339"))?;
                let at = u64::try_from(at.unix_millis() / 1000).unwrap_or_default();
                if at <= now {
                    return Err(Unsupported::Request("it has expired"));
                }
                at
            }
            None => now.saturating_add(DEFAULT_VALIDITY_SECS),
        };
        let mut extra = Map::new();
        extra.insert("name".into(), name.into());
        extra.insert("version".into(), version.into());
        Ok(Charge {
            offer: PaymentRequirements {
                scheme: SCHEME_EXACT.to_owned(),
                network,
                amount: AtomicAmount::new(amount),
                asset,
                pay_to: recipient.to_checksum(None),
                max_timeout_seconds: valid_before.saturating_sub(now),
                extra,
            },
            valid_before,
            chain_id,
        })
    }

    /// keccak256(UTF-8 of `id` immediately followed by `realm`).
    pub(crate) fn nonce(&self) -> alloy_primitives::B256 {
        let id = self.param("id").unwrap_or_default();
        let realm = self.param("realm").unwrap_or_default();
        keccak256([id.as_bytes(), realm.as_bytes()].concat())
    }

    /// The credential's `challenge`: every parameter echoed as it came.
    fn echo(&self) -> Value {
        Value::Object(
            self.params
                .iter()
                .map(|(key, value)| (key.clone(), Value::String(value.clone())))
                .collect(),
        )
    }
}

/// An `evm`/`charge` challenge as the offer it asks.
#[derive(Clone, Debug)]
pub(crate) struct Charge {
    pub(crate) offer: PaymentRequirements,
    pub(crate) valid_before: u64,
    pub(crate) chain_id: u64,
}

/// The EIP-712 domain (name, version) of a token the client knows (mppx
/// ships the same: the request does not carry it).
fn known_domain(network: &Network, asset: &str) -> Option<(&'static str, &'static str)> {
    if *network == Network::base_sepolia() && asset.eq_ignore_ascii_case(BASE_SEPOLIA_USDC) {
        Some(("USDC", "2"))
    } else if *network == Network::base() && asset.eq_ignore_ascii_case(BASE_USDC) {
        Some(("USD Coin", "2"))
    } else {
        None
    }
}

/// The `Authorization` value answering `challenge` with `authorization`
/// (the fields x402 signs) and its signature: `Payment ` and base64url of
/// `{challenge, payload, source}`.
pub(crate) fn credential(
    challenge: &Challenge,
    chain_id: u64,
    authorization: &crate::x402::wire::Eip3009Authorization,
    signature: &str,
) -> String {
    let credential = json!({
        "challenge": challenge.echo(),
        "payload": {
            "type": "authorization",
            "from": authorization.from,
            "to": authorization.to,
            "value": authorization.value.to_string(),
            "validAfter": authorization.valid_after.to_string(),
            "validBefore": authorization.valid_before.to_string(),
            "nonce": authorization.nonce,
            "signature": signature,
        },
        "source": format!("did:pkh:eip155:{chain_id}:{}", authorization.from),
    });
    format!("Payment {}", URL_SAFE_NO_PAD.encode(credential.to_string()))
}

/// The offer the client would sign for a 402 with these `headers` at `now`
/// through MPP: the first `evm`/`charge` challenge it can pay; else why the
/// first `Payment` challenge is not paid; `None` without any.
pub fn mpp_offer(
    headers: &HeaderMap,
    now: u64,
) -> Option<Result<PaymentRequirements, Unsupported>> {
    let mut first = None;
    for challenge in challenges(headers) {
        match challenge.offer(now) {
            Ok(charge) => return Some(Ok(charge.offer)),
            Err(why) => {
                first.get_or_insert(why);
            }
        }
    }
    first.map(Err)
}

/// Every `Payment` challenge of the answer's `WWW-Authenticate` fields
/// (other schemes beside them are skipped).
pub(crate) fn challenges(headers: &HeaderMap) -> Vec<Challenge> {
    headers
        .get_all(http::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(parse_field)
        .collect()
}

/// One `WWW-Authenticate` field: challenges (`Scheme` then `k=v` pairs,
/// comma-separated; a token after a comma not followed by `=` starts the
/// next challenge). Only `Payment` ones are kept.
pub(crate) fn parse_field(field: &str) -> Vec<Challenge> {
    let mut found = Vec::new();
    let mut current: Option<(bool, Vec<(String, String)>)> = None;
    let mut rest = field;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            break;
        }
        let token_end = rest.find(['=', ',', ' ', '\t']).unwrap_or(rest.len());
        let token = &rest[..token_end];
        let after = rest[token_end..].trim_start_matches([' ', '\t']);
        if token.is_empty() {
            // A stray `=`: nothing sensible follows.
            break;
        }
        if let Some(value) = after.strip_prefix('=') {
            let value = value.trim_start_matches([' ', '\t']);
            let (parsed, remaining) = match value.strip_prefix('"') {
                Some(quoted) => match unquote(quoted) {
                    Some(pair) => pair,
                    // Unclosed: the challenge it was in is not read.
                    None => {
                        current = None;
                        break;
                    }
                },
                None => {
                    let end = value.find([',', ' ', '\t']).unwrap_or(value.len());
                    (value[..end].to_owned(), &value[end..])
                }
            };
            if let Some((_, params)) = &mut current {
                params.push((token.to_ascii_lowercase(), parsed));
            }
            rest = remaining;
        } else {
            // A new scheme.
            if let Some((true, params)) = current.take() {
                found.push(Challenge { params });
            }
            current = Some((token.eq_ignore_ascii_case("payment"), Vec::new()));
            rest = after;
        }
    }
    if let Some((true, params)) = current {
        found.push(Challenge { params });
    }
    found
}

/// A quoted string's value (after the opening quote) and what follows its
/// closing quote; `\"`, `\\` and `\uXXXX` unescaped. `None` if unclosed.
fn unquote(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[at + 1..])),
            '\\' => match chars.next()?.1 {
                'u' => {
                    let hex: String = (0..4)
                        .filter_map(|_| chars.next().map(|(_, c)| c))
                        .collect();
                    let code = u32::from_str_radix(&hex, 16).ok()?;
                    value.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                }
                escaped => value.push(escaped),
            },
            c => value.push(c),
        }
    }
    None
}

/// Whether a 402's body is MPP's `payment-required` problem: the server
/// asks for payment as if none was sent.
pub(crate) fn asks_again(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|problem| problem.get("type")?.as_str().map(str::to_owned))
        .is_some_and(|kind| kind == "https://paymentauth.org/problems/payment-required")
}

/// A paid answer's `Payment-Receipt`, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MppReceipt {
    /// `"success"` on every receipt a server may send.
    pub status: String,
    /// The method paid (`evm`).
    pub method: String,
    /// When it was settled (RFC 3339).
    pub timestamp: String,
    /// The settlement's transaction hash.
    pub reference: String,
}

impl MppReceipt {
    /// The answer's `Payment-Receipt` (base64url JSON, padded or not).
    pub(crate) fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let value = headers.get(PAYMENT_RECEIPT)?.to_str().ok()?.trim();
        let bytes = URL_SAFE_NO_PAD.decode(value.trim_end_matches('=')).ok()?;
        let json: Value = serde_json::from_slice(&bytes).ok()?;
        let text = |name: &str| json.get(name).and_then(Value::as_str).map(str::to_owned);
        Some(Self {
            status: text("status")?,
            method: text("method").unwrap_or_default(),
            timestamp: text("timestamp").unwrap_or_default(),
            reference: text("reference")?,
        })
    }

    /// Whether the server says the payment settled.
    pub fn is_success(&self) -> bool {
        self.status == "success"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: &str = r#"{"amount":"1129","currency":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","methodDetails":{"chainId":84532,"credentialTypes":["authorization"],"decimals":6},"recipient":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8"}"#;
    const NOW: u64 = 1_764_300_000;

    fn field(request: &str, extra: &str) -> String {
        format!(
            r#"Payment id="abc", realm="api.example", method="evm", intent="charge", request="{}", expires="2025-11-28T03:25:00.000Z"{extra}"#,
            URL_SAFE_NO_PAD.encode(request)
        )
    }

    #[test]
    fn a_challenge_beside_x402_parses_in_either_order_with_escapes() {
        let payment = field(
            REQUEST,
            r#", description="a \"quoted\" caf\u00e9 \\ \u2603""#,
        );
        let x402 = r#"X402 requirements="eyJ4IjoiMSwgMiJ9", other=token"#;
        for joined in [
            format!("{x402}, {payment}"),
            format!("{payment}, {x402}"),
            format!("{payment}, {payment}"),
        ] {
            let found = parse_field(&joined);
            assert!(!found.is_empty(), "{joined}");
            let challenge = found.last().unwrap();
            assert_eq!(challenge.param("realm"), Some("api.example"));
            assert_eq!(
                challenge.param("description"),
                Some("a \"quoted\" café \\ ☃")
            );
            assert_eq!(
                challenge.param("request"),
                Some(URL_SAFE_NO_PAD.encode(REQUEST).as_str())
            );
        }
        assert_eq!(parse_field(&format!("{payment}, {payment}")).len(), 2);
        assert_eq!(parse_field(r#"X402 requirements="Payment id=\"x\"""#), []);
        assert_eq!(parse_field(r#"Payment id="unclosed"#), []);
        let charge = parse_field(&field(REQUEST, ""))
            .remove(0)
            .offer(NOW)
            .unwrap();
        assert_eq!(charge.offer.amount, AtomicAmount::new(1129));
        assert_eq!(charge.offer.network, Network::base_sepolia());
        assert_eq!(charge.offer.extra_str("name"), Some("USDC"));
        assert_eq!(charge.valid_before, 1_764_300_300);
        assert_eq!(charge.offer.max_timeout_seconds, 300);
        assert_eq!(charge.chain_id, 84532);
    }

    #[test]
    fn other_methods_intents_and_requests_are_unsupported() {
        let field = |method: &str, intent: &str, request: &str| {
            parse_field(&format!(
                r#"Payment id="a", realm="r", method="{method}", intent="{intent}", request="{}""#,
                URL_SAFE_NO_PAD.encode(request)
            ))
            .remove(0)
            .offer(NOW)
        };
        assert!(matches!(
            field("tempo", "charge", REQUEST),
            Err(Unsupported::Method { method, .. }) if method == "tempo"
        ));
        assert!(matches!(
            field("evm", "session", REQUEST),
            Err(Unsupported::Method { .. })
        ));
        let transaction = REQUEST.replace("authorization", "transaction");
        assert!(field("evm", "charge", &transaction).is_err());
        let other_token = REQUEST.replace(
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "0x0000000000000000000000000000000000000001",
        );
        assert_eq!(
            field("evm", "charge", &other_token).unwrap_err(),
            Unsupported::Request("a token whose EIP-712 domain is unknown")
        );
        let splits = REQUEST.replace(r#""decimals":6"#, r#""decimals":6,"splits":[]"#);
        assert!(field("evm", "charge", &splits).is_err());
        // No expires: five minutes.
        assert_eq!(
            field("evm", "charge", REQUEST).unwrap().valid_before,
            NOW + 300
        );
        let expired = parse_field(&super::tests::field(REQUEST, "")).remove(0);
        assert_eq!(
            expired.offer(1_764_300_300).unwrap_err(),
            Unsupported::Request("it has expired")
        );
    }

    #[test]
    fn only_the_payment_required_problem_asks_again() {
        let problem = |kind: &str| {
            format!(r#"{{"type":"https://paymentauth.org/problems/{kind}","status":402}}"#)
        };
        assert!(asks_again(problem("payment-required").as_bytes()));
        assert!(!asks_again(problem("verification-failed").as_bytes()));
        assert!(!asks_again(b"{}"));
        assert!(!asks_again(b"not json"));
    }

    #[test]
    fn a_receipt_is_read_padded_or_not() {
        let receipt = r#"{"status":"success","method":"evm","timestamp":"2025-11-28T03:20:00Z","reference":"0xabc"}"#;
        for encoded in [
            URL_SAFE_NO_PAD.encode(receipt),
            base64::engine::general_purpose::URL_SAFE.encode(receipt),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(PAYMENT_RECEIPT, encoded.parse().unwrap());
            let read = MppReceipt::from_headers(&headers).unwrap();
            assert!(read.is_success());
            assert_eq!(read.reference, "0xabc");
        }
    }
}

//! The EIP-4361 message: strict parse, byte-exact render, and the field form
//! that JSON clients send instead of the text.

use std::fmt;
use std::str::FromStr;

use alloy_primitives::Address;
use serde::{Deserialize, Deserializer, Serialize};

use super::syntax;
use super::timestamp::Timestamp;

const HEADER_SUFFIX: &str = " wants you to sign in with your Ethereum account:";
const URI_TAG: &str = "URI: ";
const VERSION_TAG: &str = "Version: ";
const CHAIN_ID_TAG: &str = "Chain ID: ";
const NONCE_TAG: &str = "Nonce: ";
const ISSUED_AT_TAG: &str = "Issued At: ";
const EXPIRATION_TIME_TAG: &str = "Expiration Time: ";
const NOT_BEFORE_TAG: &str = "Not Before: ";
const REQUEST_ID_TAG: &str = "Request ID: ";
const RESOURCES_LINE: &str = "Resources:";
const RESOURCE_ITEM: &str = "- ";

/// How strictly the message's address must follow EIP-55 mixed-case checksums.
///
/// EIP-4361 says the address SHOULD be checksummed; some wallets and tools send
/// it all lowercase. A mixed-case address with a wrong checksum is always
/// refused: it is a typo or a tampered message, never a style.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddressPolicy {
    /// EIP-55 checksummed, or one case throughout (all lowercase or all uppercase).
    #[default]
    ChecksummedOrUniformCase,
    /// EIP-55 checksummed only, as the spruceid reference implementations require.
    ChecksummedOnly,
}

/// Why a text (or a set of fields) is not a valid EIP-4361 message.
///
/// Messages name the line or field at fault and never echo its value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// The first line is not `[scheme://]domain wants you to sign in with your Ethereum account:`.
    Header,
    /// The optional scheme before `://` is not an RFC 3986 scheme.
    Scheme,
    /// The domain is not an RFC 3986 authority (`[userinfo@]host[:port]`).
    Domain,
    /// The address line is not `0x` followed by 40 hexadecimal digits.
    Address,
    /// The address mixes cases but its EIP-55 checksum is wrong.
    AddressChecksum,
    /// The policy requires an EIP-55 checksummed address and this one is not.
    AddressNotChecksummed,
    /// A blank line is missing where the layout requires one.
    MissingBlankLine {
        /// What the blank line should follow.
        after: &'static str,
    },
    /// The statement has characters EIP-4361 does not allow (line breaks among them).
    Statement,
    /// A required line is missing or out of order.
    MissingField {
        /// The field's label, as in the message (`URI`, `Issued At`...).
        field: &'static str,
    },
    /// The `URI` is not an RFC 3986 URI.
    Uri,
    /// The `Version` is not `1`.
    Version,
    /// The `Chain ID` is not a decimal number without leading zeros.
    ChainId,
    /// The `Nonce` is not at least 8 letters and digits.
    Nonce,
    /// A time field is not an RFC 3339 date-time.
    Timestamp {
        /// The field's label (`Issued At`, `Expiration Time`, `Not Before`).
        field: &'static str,
    },
    /// The `Request ID` has characters outside RFC 3986 `pchar`.
    RequestId,
    /// A resource is not an RFC 3986 URI.
    Resource {
        /// Its position in the list, from 0.
        index: usize,
    },
    /// A line follows where the message should have ended.
    UnexpectedLine {
        /// The line number, from 1.
        line: usize,
    },
    /// A field sent as JSON contains a line break, which would change the layout.
    LineBreakInField {
        /// The JSON field name.
        field: &'static str,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header => f.write_str(
                "the first line must be `<domain> wants you to sign in with your Ethereum account:`",
            ),
            Self::Scheme => f.write_str("the scheme before `://` is not a valid URI scheme"),
            Self::Domain => f.write_str("the domain is not an RFC 3986 authority"),
            Self::Address => {
                f.write_str("the address must be `0x` followed by 40 hexadecimal digits")
            }
            Self::AddressChecksum => f.write_str("the address has a wrong EIP-55 checksum"),
            Self::AddressNotChecksummed => {
                f.write_str("the address must be EIP-55 checksummed")
            }
            Self::MissingBlankLine { after } => {
                write!(f, "a blank line must follow the {after}")
            }
            Self::Statement => f.write_str(
                "the statement may hold only letters, digits, spaces and RFC 3986 punctuation, on one line",
            ),
            Self::MissingField { field } => {
                write!(f, "the `{field}` line is missing or out of order")
            }
            Self::Uri => f.write_str("the URI is not an RFC 3986 URI"),
            Self::Version => f.write_str("the version must be 1"),
            Self::ChainId => f.write_str("the chain id must be a decimal number"),
            Self::Nonce => f.write_str("the nonce must be at least 8 letters and digits"),
            Self::Timestamp { field } => {
                write!(f, "`{field}` is not an RFC 3339 date-time")
            }
            Self::RequestId => f.write_str("the request id has characters a URI path cannot hold"),
            Self::Resource { index } => {
                write!(f, "resource {index} is not an RFC 3986 URI")
            }
            Self::UnexpectedLine { line } => {
                write!(f, "line {line} is out of order or not part of an EIP-4361 message")
            }
            Self::LineBreakInField { field } => {
                write!(f, "the field `{field}` must not contain a line break")
            }
        }
    }
}

impl std::error::Error for ParseError {}

/// An EIP-4361 (Sign-In with Ethereum) message.
///
/// Built only by parsing ([`FromStr`], [`SiweMessage::parse_with`]) or from
/// the JSON field form ([`SiweMessage::from_fields`]), so every value is valid
/// and [`Display`](fmt::Display) writes back exactly the text that was (or
/// would be) signed. See the [module docs](super) for the layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiweMessage {
    scheme: Option<String>,
    domain: String,
    address: Address,
    address_text: String,
    statement: Option<String>,
    uri: String,
    chain_id: u64,
    nonce: String,
    issued_at: Timestamp,
    expiration_time: Option<Timestamp>,
    not_before: Option<Timestamp>,
    request_id: Option<String>,
    resources: Option<Vec<String>>,
}

impl SiweMessage {
    /// Parses `text` with the given address policy; [`FromStr`] uses the default.
    pub fn parse_with(text: &str, policy: AddressPolicy) -> Result<Self, ParseError> {
        Parser::new(text).message(policy)
    }

    /// Builds the message a client signed from the fields it sent, with the
    /// default address policy.
    ///
    /// Follows what JavaScript clients render: an empty `statement`,
    /// `requestId` or `resources` list means "absent", and a `scheme://`
    /// prefix may arrive inside `domain` (the OpenSea SDK's parser leaves it there).
    pub fn from_fields(fields: &SiweMessageFields) -> Result<Self, ParseError> {
        Self::from_fields_with(fields, AddressPolicy::default())
    }

    /// [`from_fields`](Self::from_fields) with an explicit address policy.
    pub fn from_fields_with(
        fields: &SiweMessageFields,
        policy: AddressPolicy,
    ) -> Result<Self, ParseError> {
        // With no line break in any field, each field lands on its own line and
        // parsing the rendered text gives back exactly these fields.
        let single_line = [
            ("scheme", fields.scheme.as_deref()),
            ("domain", Some(fields.domain.as_str())),
            ("address", Some(fields.address.as_str())),
            ("statement", fields.statement.as_deref()),
            ("uri", Some(fields.uri.as_str())),
            ("version", Some(fields.version.as_str())),
            ("nonce", Some(fields.nonce.as_str())),
            ("issuedAt", Some(fields.issued_at.as_str())),
            ("expirationTime", fields.expiration_time.as_deref()),
            ("notBefore", fields.not_before.as_deref()),
            ("requestId", fields.request_id.as_deref()),
        ];
        for (field, value) in single_line {
            if value.is_some_and(|v| v.contains(['\n', '\r'])) {
                return Err(ParseError::LineBreakInField { field });
            }
        }
        if fields
            .resources
            .iter()
            .flatten()
            .any(|r| r.contains(['\n', '\r']))
        {
            return Err(ParseError::LineBreakInField { field: "resources" });
        }
        let mut text = String::with_capacity(256);
        if let Some(scheme) = non_empty(&fields.scheme) {
            text.push_str(scheme);
            text.push_str("://");
        }
        render_into(
            &mut text,
            RenderParts {
                domain: &fields.domain,
                address: &fields.address,
                statement: non_empty(&fields.statement),
                uri: &fields.uri,
                version: &fields.version,
                chain_id: fields.chain_id,
                nonce: &fields.nonce,
                issued_at: &fields.issued_at,
                expiration_time: non_empty(&fields.expiration_time),
                not_before: non_empty(&fields.not_before),
                request_id: non_empty(&fields.request_id),
                resources: fields.resources.as_deref().filter(|r| !r.is_empty()),
            },
        );
        Self::parse_with(&text, policy)
    }

    /// The field form of this message (what [`from_fields`](Self::from_fields) takes).
    pub fn to_fields(&self) -> SiweMessageFields {
        SiweMessageFields {
            scheme: self.scheme.clone(),
            domain: self.domain.clone(),
            address: self.address_text.clone(),
            statement: self.statement.clone(),
            uri: self.uri.clone(),
            version: "1".to_owned(),
            chain_id: self.chain_id,
            nonce: self.nonce.clone(),
            issued_at: self.issued_at.to_string(),
            expiration_time: self.expiration_time.as_ref().map(Timestamp::to_string),
            not_before: self.not_before.as_ref().map(Timestamp::to_string),
            request_id: self.request_id.clone(),
            resources: self.resources.clone(),
        }
    }

    /// The scheme written before the domain, if any (`https` is then assumed).
    pub fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    /// The RFC 3986 authority asking for the sign-in.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The signing account.
    pub fn address(&self) -> Address {
        self.address
    }

    /// The address as written in the message (checksummed or one case).
    pub fn address_text(&self) -> &str {
        &self.address_text
    }

    /// Whether the address is written with its EIP-55 checksum.
    pub fn is_address_checksummed(&self) -> bool {
        self.address_text == self.address.to_checksum(None)
    }

    /// The human-readable statement, if any.
    pub fn statement(&self) -> Option<&str> {
        self.statement.as_deref()
    }

    /// The URI the sign-in is for.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The message version; always `1`.
    pub fn version(&self) -> &str {
        "1"
    }

    /// The EIP-155 chain id.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The nonce.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// When the message was issued.
    pub fn issued_at(&self) -> &Timestamp {
        &self.issued_at
    }

    /// When the message stops being valid, if set.
    pub fn expiration_time(&self) -> Option<&Timestamp> {
        self.expiration_time.as_ref()
    }

    /// When the message becomes valid, if set.
    pub fn not_before(&self) -> Option<&Timestamp> {
        self.not_before.as_ref()
    }

    /// The request id, if any.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The resources list, if the message has a `Resources:` section.
    pub fn resources(&self) -> Option<&[String]> {
        self.resources.as_deref()
    }
}

impl FromStr for SiweMessage {
    type Err = ParseError;

    /// Parses with [`AddressPolicy::ChecksummedOrUniformCase`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse_with(text, AddressPolicy::default())
    }
}

impl fmt::Display for SiweMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::with_capacity(256);
        if let Some(scheme) = &self.scheme {
            text.push_str(scheme);
            text.push_str("://");
        }
        render_into(
            &mut text,
            RenderParts {
                domain: &self.domain,
                address: &self.address_text,
                statement: self.statement.as_deref(),
                uri: &self.uri,
                version: "1",
                chain_id: self.chain_id,
                nonce: &self.nonce,
                issued_at: self.issued_at.as_str(),
                expiration_time: self.expiration_time.as_ref().map(Timestamp::as_str),
                not_before: self.not_before.as_ref().map(Timestamp::as_str),
                request_id: self.request_id.as_deref(),
                resources: self.resources.as_deref(),
            },
        );
        f.write_str(&text)
    }
}

/// Everything after the scheme, as text; shared by [`Display`](fmt::Display)
/// and the field form so both lay the message out identically.
struct RenderParts<'a> {
    domain: &'a str,
    address: &'a str,
    statement: Option<&'a str>,
    uri: &'a str,
    version: &'a str,
    chain_id: u64,
    nonce: &'a str,
    issued_at: &'a str,
    expiration_time: Option<&'a str>,
    not_before: Option<&'a str>,
    request_id: Option<&'a str>,
    resources: Option<&'a [String]>,
}

fn render_into(out: &mut String, parts: RenderParts<'_>) {
    use std::fmt::Write as _;
    out.push_str(parts.domain);
    out.push_str(HEADER_SUFFIX);
    out.push('\n');
    out.push_str(parts.address);
    out.push_str("\n\n");
    if let Some(statement) = parts.statement {
        out.push_str(statement);
        out.push('\n');
    }
    let _ = write!(
        out,
        "\n{URI_TAG}{}\n{VERSION_TAG}{}\n{CHAIN_ID_TAG}{}\n{NONCE_TAG}{}\n{ISSUED_AT_TAG}{}",
        parts.uri, parts.version, parts.chain_id, parts.nonce, parts.issued_at
    );
    for (tag, value) in [
        (EXPIRATION_TIME_TAG, parts.expiration_time),
        (NOT_BEFORE_TAG, parts.not_before),
        (REQUEST_ID_TAG, parts.request_id),
    ] {
        if let Some(value) = value {
            out.push('\n');
            out.push_str(tag);
            out.push_str(value);
        }
    }
    if let Some(resources) = parts.resources {
        out.push('\n');
        out.push_str(RESOURCES_LINE);
        for resource in resources {
            out.push('\n');
            out.push_str(RESOURCE_ITEM);
            out.push_str(resource);
        }
    }
}

/// A line-by-line reader of the fixed EIP-4361 layout.
struct Parser<'a> {
    lines: Vec<&'a str>,
    next: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            lines: text.split('\n').collect(),
            next: 0,
        }
    }

    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.next).copied()
    }

    fn take(&mut self) -> Option<&'a str> {
        let line = self.peek()?;
        self.next += 1;
        Some(line)
    }

    fn blank(&mut self, after: &'static str) -> Result<(), ParseError> {
        match self.take() {
            Some("") => Ok(()),
            _ => Err(ParseError::MissingBlankLine { after }),
        }
    }

    fn tagged(&mut self, tag: &'static str) -> Result<&'a str, ParseError> {
        match self.peek().and_then(|line| line.strip_prefix(tag)) {
            Some(value) => {
                self.next += 1;
                Ok(value)
            }
            None => Err(ParseError::MissingField {
                field: tag.trim_end_matches([':', ' ']),
            }),
        }
    }

    fn optional_tagged(&mut self, tag: &'static str) -> Option<&'a str> {
        let value = self.peek()?.strip_prefix(tag)?;
        self.next += 1;
        Some(value)
    }

    fn message(mut self, policy: AddressPolicy) -> Result<SiweMessage, ParseError> {
        let header = self.take().unwrap_or_default();
        let origin = header
            .strip_suffix(HEADER_SUFFIX)
            .ok_or(ParseError::Header)?;
        let (scheme, domain) = match origin.split_once("://") {
            Some((scheme, domain)) => (Some(scheme), domain),
            None => (None, origin),
        };
        if scheme.is_some_and(|s| !syntax::is_scheme(s)) {
            return Err(ParseError::Scheme);
        }
        if !syntax::is_authority(domain, true) {
            return Err(ParseError::Domain);
        }

        let address_text = self.take().ok_or(ParseError::Address)?;
        let address = parse_address(address_text, policy)?;
        self.blank("address")?;

        // "<address>\n\n\nURI:" has no statement; "<address>\n\n<statement>\n\nURI:" has one.
        let statement = match self.take() {
            Some("") => None,
            Some(line) if line.starts_with(URI_TAG) && self.peek() != Some("") => {
                // No blank line before `URI:`: the layout is broken, not the statement.
                return Err(ParseError::MissingBlankLine { after: "address" });
            }
            Some(line) => {
                if !syntax::is_statement(line) {
                    return Err(ParseError::Statement);
                }
                self.blank("statement")?;
                Some(line)
            }
            None => return Err(ParseError::MissingField { field: "URI" }),
        };

        let uri = self.tagged(URI_TAG)?;
        if !syntax::is_uri(uri) {
            return Err(ParseError::Uri);
        }
        if self.tagged(VERSION_TAG)? != "1" {
            return Err(ParseError::Version);
        }
        let chain_id = parse_chain_id(self.tagged(CHAIN_ID_TAG)?)?;
        let nonce = self.tagged(NONCE_TAG)?;
        if !syntax::is_nonce(nonce) {
            return Err(ParseError::Nonce);
        }
        let issued_at = timestamp(self.tagged(ISSUED_AT_TAG)?, "Issued At")?;
        let expiration_time = self
            .optional_tagged(EXPIRATION_TIME_TAG)
            .map(|t| timestamp(t, "Expiration Time"))
            .transpose()?;
        let not_before = self
            .optional_tagged(NOT_BEFORE_TAG)
            .map(|t| timestamp(t, "Not Before"))
            .transpose()?;
        let request_id = self.optional_tagged(REQUEST_ID_TAG);
        if request_id.is_some_and(|r| !syntax::is_pchars(r)) {
            return Err(ParseError::RequestId);
        }
        let resources = if self.peek() == Some(RESOURCES_LINE) {
            self.next += 1;
            let mut resources = Vec::new();
            while let Some(resource) = self.peek().and_then(|l| l.strip_prefix(RESOURCE_ITEM)) {
                if !syntax::is_uri(resource) {
                    return Err(ParseError::Resource {
                        index: resources.len(),
                    });
                }
                resources.push(resource.to_owned());
                self.next += 1;
            }
            Some(resources)
        } else {
            None
        };
        if self.next < self.lines.len() {
            return Err(ParseError::UnexpectedLine {
                line: self.next + 1,
            });
        }

        Ok(SiweMessage {
            scheme: scheme.map(str::to_owned),
            domain: domain.to_owned(),
            address,
            address_text: address_text.to_owned(),
            statement: statement.map(str::to_owned),
            uri: uri.to_owned(),
            chain_id,
            nonce: nonce.to_owned(),
            issued_at,
            expiration_time,
            not_before,
            request_id: request_id.map(str::to_owned),
            resources,
        })
    }
}

/// JavaScript clients skip empty optional values when they render.
fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

fn timestamp(text: &str, field: &'static str) -> Result<Timestamp, ParseError> {
    text.parse().map_err(|_| ParseError::Timestamp { field })
}

/// Decimal without leading zeros, so the number renders back as written.
fn parse_chain_id(text: &str) -> Result<u64, ParseError> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if !canonical {
        return Err(ParseError::ChainId);
    }
    text.parse().map_err(|_| ParseError::ChainId)
}

fn parse_address(text: &str, policy: AddressPolicy) -> Result<Address, ParseError> {
    let hex = text.strip_prefix("0x").ok_or(ParseError::Address)?;
    if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError::Address);
    }
    let address: Address = text.parse().map_err(|_| ParseError::Address)?;
    if text == address.to_checksum(None) {
        return Ok(address);
    }
    let has_lower = hex.bytes().any(|b| b.is_ascii_lowercase());
    let has_upper = hex.bytes().any(|b| b.is_ascii_uppercase());
    match policy {
        _ if has_lower && has_upper => Err(ParseError::AddressChecksum),
        AddressPolicy::ChecksummedOrUniformCase => Ok(address),
        AddressPolicy::ChecksummedOnly => Err(ParseError::AddressNotChecksummed),
    }
}

/// The JSON field form of a message, as clients such as the OpenSea SDK send
/// it to a verify endpoint instead of the signed text (camelCase names).
///
/// `chainId` is accepted as a number or a decimal string; unknown members
/// (such as the SDK's `accountType`) are ignored. Turn it into the exact
/// signed text with [`SiweMessage::from_fields`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiweMessageFields {
    /// Optional scheme written before the domain (`https`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// The RFC 3986 authority asking for the sign-in.
    pub domain: String,
    /// The signing address, `0x` + 40 hex digits.
    pub address: String,
    /// The statement line; empty or absent means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// The URI the sign-in is for.
    pub uri: String,
    /// The message version (`1`).
    pub version: String,
    /// The EIP-155 chain id.
    #[serde(deserialize_with = "number_or_decimal_string")]
    pub chain_id: u64,
    /// The server-issued nonce.
    pub nonce: String,
    /// RFC 3339 issue time, exactly as signed.
    pub issued_at: String,
    /// RFC 3339 expiry, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// RFC 3339 start of validity, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// The request id, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The resource URIs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

fn number_or_decimal_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrString {
        Number(u64),
        String(String),
    }
    match NumberOrString::deserialize(deserializer)? {
        NumberOrString::Number(n) => Ok(n),
        NumberOrString::String(s) => parse_chain_id(&s).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "login.xyz wants you to sign in with your Ethereum account:\n0x9D85ca56217D2bb651b00f15e694EB7E713637D4\n\nSign-In With Ethereum Example Statement\n\nURI: https://login.xyz\nVersion: 1\nChain ID: 1\nNonce: bTyXgcQxn2htgkjJn\nIssued At: 2022-01-27T17:09:38.578Z\nExpiration Time: 2100-01-07T14:31:43.952Z";

    #[test]
    fn example_round_trips_byte_for_byte() {
        let message: SiweMessage = EXAMPLE.parse().unwrap();
        assert_eq!(message.to_string(), EXAMPLE);
        assert_eq!(message.domain(), "login.xyz");
        assert_eq!(message.chain_id(), 1);
        assert_eq!(message.nonce(), "bTyXgcQxn2htgkjJn");
        assert!(message.is_address_checksummed());
        assert_eq!(
            message.expiration_time().map(Timestamp::as_str),
            Some("2100-01-07T14:31:43.952Z")
        );
    }

    #[test]
    fn all_optional_lines_round_trip() {
        let text = "https://example.com:8443 wants you to sign in with your Ethereum account:\n0x9d85ca56217d2bb651b00f15e694eb7e713637d4\n\n\nURI: https://example.com/login\nVersion: 1\nChain ID: 8453\nNonce: abcdefgh12\nIssued At: 2022-01-27T17:09:38Z\nExpiration Time: 2022-01-27T18:09:38+01:00\nNot Before: 2022-01-27T17:09:38.5Z\nRequest ID: req-1%20a\nResources:\n- ipfs://Qme7ss3ARVgxv6rXqVPiikMJ8u2NLgmgszg13pYrDKEoiu\n- read:eligibility";
        let message: SiweMessage = text.parse().unwrap();
        assert_eq!(message.to_string(), text);
        assert_eq!(message.scheme(), Some("https"));
        assert_eq!(message.domain(), "example.com:8443");
        assert_eq!(message.statement(), None);
        assert_eq!(message.request_id(), Some("req-1%20a"));
        assert_eq!(message.resources().map(<[String]>::len), Some(2));
        assert!(!message.is_address_checksummed());
        let rebuilt = SiweMessage::from_fields(&message.to_fields()).unwrap();
        assert_eq!(rebuilt, message);
    }

    #[test]
    fn empty_resources_section_round_trips() {
        let text = format!("{EXAMPLE}\nResources:");
        let message: SiweMessage = text.parse().unwrap();
        assert_eq!(message.resources(), Some(&[][..]));
        assert_eq!(message.to_string(), text);
    }

    #[test]
    fn trailing_line_feed_is_refused() {
        let text = format!("{EXAMPLE}\n");
        assert_eq!(
            text.parse::<SiweMessage>(),
            Err(ParseError::UnexpectedLine { line: 12 })
        );
    }

    #[test]
    fn address_case_rules() {
        let lower = EXAMPLE.replace(
            "0x9D85ca56217D2bb651b00f15e694EB7E713637D4",
            "0x9d85ca56217d2bb651b00f15e694eb7e713637d4",
        );
        let upper = EXAMPLE.replace(
            "0x9D85ca56217D2bb651b00f15e694EB7E713637D4",
            "0x9D85CA56217D2BB651B00F15E694EB7E713637D4",
        );
        let bad_checksum = EXAMPLE.replace(
            "0x9D85ca56217D2bb651b00f15e694EB7E713637D4",
            "0x9d85ca56217D2bb651b00f15e694EB7E713637D4",
        );
        let checksummed: SiweMessage = EXAMPLE.parse().unwrap();
        for text in [&lower, &upper] {
            let message: SiweMessage = text.parse().unwrap();
            assert_eq!(message.address(), checksummed.address());
            assert_eq!(&message.to_string(), text);
            assert_eq!(
                SiweMessage::parse_with(text, AddressPolicy::ChecksummedOnly),
                Err(ParseError::AddressNotChecksummed)
            );
        }
        assert_eq!(
            bad_checksum.parse::<SiweMessage>(),
            Err(ParseError::AddressChecksum)
        );
    }

    #[test]
    fn leading_zero_chain_id_is_refused() {
        let text = EXAMPLE.replace("Chain ID: 1\n", "Chain ID: 01\n");
        assert_eq!(text.parse::<SiweMessage>(), Err(ParseError::ChainId));
    }

    #[test]
    fn fields_accept_chain_id_as_string_and_ignore_account_type() {
        let json = r#"{"domain":"login.xyz","address":"0x9D85ca56217D2bb651b00f15e694EB7E713637D4",
            "statement":"Sign-In With Ethereum Example Statement","uri":"https://login.xyz","version":"1",
            "chainId":"1","nonce":"bTyXgcQxn2htgkjJn","issuedAt":"2022-01-27T17:09:38.578Z",
            "expirationTime":"2100-01-07T14:31:43.952Z","accountType":"Ethereum"}"#;
        let fields: SiweMessageFields = serde_json::from_str(json).unwrap();
        let message = SiweMessage::from_fields(&fields).unwrap();
        assert_eq!(message.to_string(), EXAMPLE);
        let as_number = json.replace(r#""chainId":"1""#, r#""chainId":1"#);
        let fields: SiweMessageFields = serde_json::from_str(&as_number).unwrap();
        assert_eq!(
            SiweMessage::from_fields(&fields).unwrap().to_string(),
            EXAMPLE
        );
    }

    #[test]
    fn fields_with_empty_optionals_render_as_absent() {
        let mut fields = EXAMPLE.parse::<SiweMessage>().unwrap().to_fields();
        fields.statement = Some(String::new());
        fields.request_id = Some(String::new());
        fields.resources = Some(Vec::new());
        let message = SiweMessage::from_fields(&fields).unwrap();
        assert_eq!(message.statement(), None);
        assert_eq!(message.request_id(), None);
        assert_eq!(message.resources(), None);
    }

    #[test]
    fn scheme_inside_domain_field_is_the_same_text() {
        let mut fields = EXAMPLE.parse::<SiweMessage>().unwrap().to_fields();
        fields.domain = "https://login.xyz".to_owned();
        let message = SiweMessage::from_fields(&fields).unwrap();
        assert_eq!(message.scheme(), Some("https"));
        assert_eq!(message.domain(), "login.xyz");
        assert!(
            message
                .to_string()
                .starts_with("https://login.xyz wants you")
        );
    }

    #[test]
    fn line_breaks_in_fields_cannot_forge_lines() {
        let mut fields = EXAMPLE.parse::<SiweMessage>().unwrap().to_fields();
        fields.statement = Some("hello\n\nURI: https://evil.example".to_owned());
        assert_eq!(
            SiweMessage::from_fields(&fields),
            Err(ParseError::LineBreakInField { field: "statement" })
        );
        let mut fields = EXAMPLE.parse::<SiweMessage>().unwrap().to_fields();
        fields.resources = Some(vec!["https://a.example\n- https://b.example".to_owned()]);
        assert_eq!(
            SiweMessage::from_fields(&fields),
            Err(ParseError::LineBreakInField { field: "resources" })
        );
    }
}

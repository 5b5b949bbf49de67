//! The header codec: standard padded base64 of compact JSON.
//!
//! Encoding is exact (what the official TypeScript client's strict decoder
//! accepts). Decoding is lenient about form (surrounding whitespace, missing
//! padding, the URL-safe alphabet) and strict about size: the header length
//! and the JSON nesting depth are capped before anything is parsed.
//!
//! ```
//! use walletgate::x402::wire::codec;
//!
//! let value = codec::encode(&serde_json::json!({"success": true}));
//! assert_eq!(value, "eyJzdWNjZXNzIjp0cnVlfQ==");
//! let back: serde_json::Value = codec::decode(b"  eyJzdWNjZXNzIjp0cnVlfQ  ")?;
//! assert_eq!(back["success"], true);
//! # Ok::<(), walletgate::x402::wire::codec::DecodeError>(())
//! ```

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Longest header value decoded, in bytes. A real payment is about 1.5 KiB.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Deepest JSON nesting decoded. A payment is 4 levels deep; extensions add a few.
pub const MAX_JSON_DEPTH: usize = 24;

/// Why a header value could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Longer than [`MAX_HEADER_BYTES`].
    TooLong {
        /// The value's length in bytes.
        len: usize,
    },
    /// Not base64 in either alphabet.
    NotBase64,
    /// Nested deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
    /// Not the expected JSON shape.
    Json(String),
}

impl DecodeError {
    /// A short machine-readable reason, as facilitators word theirs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLong { .. } => "payment_header_too_long",
            Self::NotBase64 => "payment_header_not_base64",
            Self::TooDeep => "payment_header_too_deep",
            Self::Json(_) => "invalid_payload",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { len } => {
                write!(
                    f,
                    "header is {len} bytes, over the {MAX_HEADER_BYTES}-byte limit"
                )
            }
            Self::NotBase64 => f.write_str("header is not base64"),
            Self::TooDeep => write!(f, "JSON nested deeper than {MAX_JSON_DEPTH}"),
            Self::Json(detail) => write!(f, "invalid payload JSON: {detail}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Encodes `value` as standard padded base64 of its compact JSON.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> String {
    // The x402 types are strings, numbers and maps with string keys, which
    // always serialise; an empty object stands in for the impossible failure.
    // A settlement or a payment is a few hundred bytes: one allocation, no regrowth.
    let mut json = Vec::with_capacity(512);
    if serde_json::to_writer(&mut json, value).is_err() {
        json = b"{}".to_vec();
    }
    base64_simd::STANDARD.encode_to_string(json)
}

/// Decoded JSON up to this long is decoded into the stack: a payment is
/// about 1.1 KiB.
const STACK_JSON_BYTES: usize = 4096;

/// Decodes a header value into `T`.
pub fn decode<T: DeserializeOwned>(raw: &[u8]) -> Result<T, DecodeError> {
    decode_with(raw, |json| serde_json::from_slice(json))
}

/// [`decode`], the JSON read by `read` (which may borrow from it) under the
/// same bounds: length, base64, depth.
pub(crate) fn decode_with<T>(
    raw: &[u8],
    read: impl FnOnce(&[u8]) -> serde_json::Result<T>,
) -> Result<T, DecodeError> {
    if raw.len() > MAX_HEADER_BYTES {
        return Err(DecodeError::TooLong { len: raw.len() });
    }
    let parse = |json: &[u8]| {
        if !depth_within(json, MAX_JSON_DEPTH) {
            return Err(DecodeError::TooDeep);
        }
        read(json).map_err(|error| DecodeError::Json(error.to_string()))
    };
    with_decoded_base64(raw.trim_ascii(), parse).ok_or(DecodeError::NotBase64)?
}

/// Standard or URL-safe base64 with its padding, some of it, or none;
/// the last character's unused bits must be zero, then `then` of the bytes.
/// base64-simd decodes with AVX2 or SSSE3 where the CPU has them; a payment
/// header (about 1.5 KiB) is decoded into the stack, not a new `Vec`.
fn with_decoded_base64<R>(text: &[u8], then: impl FnOnce(&[u8]) -> R) -> Option<R> {
    use base64_simd::{Out, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let unpadded = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    let padding = text.len() - unpadded.len();
    // Padding fills a last group of two or three characters to four.
    if padding > 0 && !matches!((unpadded.len() % 4, padding), (2, 1 | 2) | (3, 1)) {
        return None;
    }
    // The decoded length does not depend on the alphabet.
    if STANDARD_NO_PAD.decoded_length(unpadded).ok()? > STACK_JSON_BYTES {
        let decoded = STANDARD_NO_PAD
            .decode_to_vec(unpadded)
            .or_else(|_| URL_SAFE_NO_PAD.decode_to_vec(unpadded))
            .ok()?;
        return Some(then(&decoded));
    }
    // Written before it is read: no zeroing.
    let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); STACK_JSON_BYTES];
    let decoded = match STANDARD_NO_PAD.decode(unpadded, Out::from_uninit_slice(&mut stack)) {
        Ok(decoded) => decoded,
        Err(_) => URL_SAFE_NO_PAD
            .decode(unpadded, Out::from_uninit_slice(&mut stack))
            .ok()?,
    };
    Some(then(decoded))
}

/// Whether the JSON text nests at most `max` arrays/objects deep; a scan, no parse.
fn depth_within(json: &[u8], max: usize) -> bool {
    // No deeper than it has openers: a payment has about six, and counting
    // bytes vectorizes where the scan below walks them one by one. `[` and
    // `{` differ only in bit 0x20 (no other byte sets to `{` with it): one
    // comparison per byte, summed in byte lanes (255 at most per chunk).
    let openers: usize = json
        .chunks(255)
        .map(|chunk| {
            let in_chunk: u8 = chunk.iter().map(|&b| u8::from(b | 0x20 == b'{')).sum();
            usize::from(in_chunk)
        })
        .sum();
    openers <= max || depth_of_strings_aside(json, max)
}

/// [`depth_within`]'s full scan, brackets inside strings aside.
fn depth_of_strings_aside(json: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in json {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x402::wire::types::{PaymentPayload, PaymentRequired};
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    /// The specification's `PAYMENT-SIGNATURE` example payload, encoded as the TS client does.
    const SPEC_PAYMENT: &str = r#"{"x402Version":2,"resource":{"url":"https://api.example.com/premium-data","description":"Access to premium market data","mimeType":"application/json"},"accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},"payload":{"signature":"0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c","authorization":{"from":"0x857b06519E91e3A54538791bDbb0E22373e36b66","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"1740672089","validBefore":"1740672154","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}}"#;

    #[test]
    fn encoding_is_standard_padded_base64_of_compact_json() {
        let payload: PaymentPayload = serde_json::from_str(SPEC_PAYMENT).unwrap();
        let encoded = encode(&payload);
        assert!(
            encoded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
        );
        assert_eq!(encoded.len() % 4, 0);
        let json: serde_json::Value =
            serde_json::from_slice(&STANDARD.decode(&encoded).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::from_str::<serde_json::Value>(SPEC_PAYMENT).unwrap()
        );
    }

    #[test]
    fn decoding_tolerates_whitespace_missing_padding_and_url_safe() {
        let encoded = STANDARD.encode(SPEC_PAYMENT);
        let unpadded = encoded.trim_end_matches('=').to_owned();
        let url_safe = encoded.replace('+', "-").replace('/', "_");
        for form in [format!("  {encoded}\t"), unpadded, url_safe] {
            let payload: PaymentPayload = decode(form.as_bytes()).unwrap();
            assert_eq!(payload.accepted.amount.units(), 10_000);
        }
    }

    #[test]
    fn decoding_is_strict_on_size_and_depth() {
        let long = vec![b'A'; MAX_HEADER_BYTES + 1];
        assert_eq!(
            decode::<serde_json::Value>(&long),
            Err(DecodeError::TooLong {
                len: MAX_HEADER_BYTES + 1
            })
        );
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert_eq!(
            decode::<serde_json::Value>(STANDARD.encode(deep).as_bytes()),
            Err(DecodeError::TooDeep)
        );
        // Many shallow siblings are not depth.
        let wide = format!("[{}[]]", "[],".repeat(MAX_JSON_DEPTH * 2));
        assert!(decode::<serde_json::Value>(STANDARD.encode(wide).as_bytes()).is_ok());
        // Brackets inside strings do not count.
        let quoted = format!("[\"{}\"]", "[".repeat(100));
        assert!(decode::<serde_json::Value>(STANDARD.encode(quoted).as_bytes()).is_ok());
        assert_eq!(
            decode::<serde_json::Value>(b"***"),
            Err(DecodeError::NotBase64)
        );
        assert!(matches!(
            decode::<PaymentRequired>(STANDARD.encode("{}").as_bytes()),
            Err(DecodeError::Json(_))
        ));
    }

    #[test]
    fn the_spec_quote_decodes() {
        let quote = r#"{"x402Version":2,"error":"Payment required","resource":{"url":"https://api.example.com/premium-data","description":"...","mimeType":"application/json"},"accepts":[{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}}],"extensions":{}}"#;
        let decoded: PaymentRequired = decode(STANDARD.encode(quote).as_bytes()).unwrap();
        assert_eq!(decoded.accepts[0].max_timeout_seconds, 60);
        assert_eq!(decoded.accepts[0].extra_str("name"), Some("USDC"));
        assert_eq!(STANDARD.decode(encode(&decoded)).unwrap(), quote.as_bytes());
    }

    /// The forms the `base64` crate's standard and URL-safe engines accept
    /// with padding indifferent, and no others: every length, padding
    /// full, short, excess or misplaced, a non-zero last bit, both alphabets.
    #[test]
    fn base64_forms_match_the_lenient_reference_engines() {
        use base64::alphabet;
        use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
        let lenient =
            GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
        let reference = |text: &[u8]| {
            GeneralPurpose::new(&alphabet::STANDARD, lenient)
                .decode(text)
                .or_else(|_| GeneralPurpose::new(&alphabet::URL_SAFE, lenient).decode(text))
                .ok()
        };
        let mut forms: Vec<Vec<u8>> = Vec::new();
        for len in 0..12 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 250) as u8).collect();
            let full = STANDARD.encode(&bytes);
            let bare = full.trim_end_matches('=').to_owned();
            for padding in ["", "=", "==", "==="] {
                forms.push(format!("{bare}{padding}").into_bytes());
                forms.push(
                    format!("{bare}{padding}")
                        .replace(['+', '/'], "-")
                        .into_bytes(),
                );
            }
            forms.push(format!("{bare}=A").into_bytes());
            forms.push(format!("={bare}").into_bytes());
            // The last character one step on: its unused bits no longer zero.
            if let Some(last) = bare.bytes().last() {
                let mut odd = bare.clone().into_bytes();
                *odd.last_mut().unwrap() = if last == b'A' { b'B' } else { b'A' };
                forms.push(odd);
            }
        }
        forms.extend([
            b"A".to_vec(),
            b"AB=C".to_vec(),
            b"AB+_".to_vec(),
            b"A\xff==".to_vec(),
        ]);
        for form in forms {
            assert_eq!(
                with_decoded_base64(&form, <[u8]>::to_vec),
                reference(&form),
                "{}",
                String::from_utf8_lossy(&form)
            );
        }
    }
}

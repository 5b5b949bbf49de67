//! MPP, the `Payment` HTTP authentication scheme, EVM `charge` with an
//! EIP-3009 `authorization` credential (as mppx 0.11 speaks it): a second
//! way to pay the same route, through the same payment flow.
//!
//! Every 402 carries, beside the x402 quote, one `WWW-Authenticate: Payment`
//! challenge per EVM `exact` offer: a fresh `id`, the `realm`, `method="evm"`,
//! `intent="charge"`, the `request` (base64url of its canonical JSON) and an
//! `expires`. The `id` is a random salt and a keyed tag over the challenge's
//! other parameters, so a credential is checked against a challenge this
//! server issued without storing one (replicas share the key). A credential's
//! authorization becomes the x402 `exact` payment of the matching offer: one
//! replay set (payer, EIP-3009 nonce) serves both headers, and the flow
//! verifies, serves and settles it as any other.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::keccak256;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::{Value, json};
use siphasher::sip128::{Hasher128 as _, SipHasher24};

use crate::siwe::Timestamp;
use crate::x402::ConfigError;
use crate::x402::wire::eip712::parse_evm_address;
use crate::x402::wire::types::{PaymentRequirements, SCHEME_EXACT};

/// The scheme name in `WWW-Authenticate` and `Authorization`.
pub const PAYMENT_SCHEME: &str = "Payment";
/// The header a paid answer's MPP receipt travels in.
pub const PAYMENT_RECEIPT: &str = "payment-receipt";
/// Where a credential travels when `Authorization` carries a Bearer token.
pub const PAYMENT_AUTHORIZATION: &str = "payment-authorization";
/// How long a challenge may be answered: five minutes, as mppx servers.
pub const DEFAULT_CHALLENGE_SECS: u64 = 300;

const METHOD_EVM: &str = "evm";
const INTENT_CHARGE: &str = "charge";
/// The longest `request` parameter read (mppx's parser limit).
const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// The longest credential read.
const MAX_CREDENTIAL_BYTES: usize = 32 * 1024;
const SALT_BYTES: usize = 16;

/// A layer's MPP challenges: the key their ids are tagged with, and the
/// realm (the public host). Set with
/// [`X402LayerBuilder::with_mpp`](super::X402LayerBuilder::with_mpp).
#[derive(Clone)]
pub struct Mpp {
    key: [u8; 16],
    realm: String,
    challenge_secs: u64,
    /// Salts: a random prefix per `Mpp` and a counter, so every id (and the
    /// EIP-3009 nonce derived from it) is fresh without a syscall per 402.
    salts: Arc<(u64, AtomicU64)>,
}

impl std::fmt::Debug for Mpp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpp")
            .field("realm", &self.realm)
            .field("challenge_secs", &self.challenge_secs)
            .finish_non_exhaustive()
    }
}

impl Mpp {
    /// Challenges for `realm` (the public host), tagged with `secret` (at
    /// least 32 bytes; replicas that share it accept each other's challenges).
    pub fn new(secret: &[u8], realm: &str) -> Result<Self, ConfigError> {
        if secret.len() < 32 {
            return Err(ConfigError::InvalidCredential(
                "the MPP challenge key must be at least 32 bytes".into(),
            ));
        }
        // A realm goes inside a quoted auth-param and into the EIP-3009 nonce.
        let valid = !realm.is_empty()
            && realm.len() <= 255
            && realm.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
            });
        if !valid {
            return Err(ConfigError::InvalidBaseUrl(format!(
                "not a host for an MPP realm: {realm:?}"
            )));
        }
        let mut prefix = [0u8; 8];
        getrandom::fill(&mut prefix).map_err(|error| ConfigError::Random(error.to_string()))?;
        let prefix = u64::from_le_bytes(prefix);
        let digest = keccak256(secret);
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        Ok(Self {
            key,
            realm: realm.to_owned(),
            challenge_secs: DEFAULT_CHALLENGE_SECS,
            salts: Arc::new((prefix, AtomicU64::new(0))),
        })
    }

    /// Challenges for `realm` tagged with the secret in `path` (at least 32
    /// bytes of text; on Unix mode 0600 or stricter; never echoed).
    pub fn from_key_file(
        path: impl AsRef<std::path::Path>,
        realm: &str,
    ) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let secret = crate::x402::signing_key::read_owner_only(path).map_err(|error| {
            let reason = match error {
                crate::x402::signing_key::KeyError::File(reason) => reason,
                crate::x402::signing_key::KeyError::Invalid => "unreadable".into(),
            };
            ConfigError::InvalidCredential(format!("MPP key file {}: {reason}", path.display()))
        })?;
        Self::new(secret.trim().as_bytes(), realm)
    }

    /// Challenges for `realm` with a random key: one process only.
    pub fn random(realm: &str) -> Result<Self, ConfigError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|error| ConfigError::Random(error.to_string()))?;
        Self::new(&secret, realm)
    }

    /// How long a challenge may be answered (default [`DEFAULT_CHALLENGE_SECS`]).
    pub fn with_challenge_secs(mut self, secs: u64) -> Self {
        self.challenge_secs = secs.max(1);
        self
    }

    /// The realm challenges name.
    pub fn realm(&self) -> &str {
        &self.realm
    }

    /// The tag binding a challenge's parameters to its salt.
    fn tag(&self, salt: &[u8], request: &str, expires: &str) -> [u8; 16] {
        let mut hasher = SipHasher24::new_with_key(&self.key);
        for part in [
            salt,
            self.realm.as_bytes(),
            METHOD_EVM.as_bytes(),
            INTENT_CHARGE.as_bytes(),
            request.as_bytes(),
            expires.as_bytes(),
        ] {
            // Length-prefixed: no two parameter lists hash alike.
            std::hash::Hasher::write(&mut hasher, &(part.len() as u64).to_le_bytes());
            std::hash::Hasher::write(&mut hasher, part);
        }
        hasher.finish128().as_bytes()
    }

    /// The `WWW-Authenticate` value of one challenge for each EVM `exact`
    /// offer of `accepts` (of tokens with `decimals`), issued at `now`.
    pub(crate) fn challenges(
        &self,
        accepts: &[PaymentRequirements],
        decimals: impl Fn(&PaymentRequirements) -> u8,
        now: u64,
    ) -> Vec<Challenge> {
        let expires = Timestamp::from_unix_millis(
            i64::try_from(now.saturating_add(self.challenge_secs)).unwrap_or(i64::MAX) * 1000,
        );
        accepts
            .iter()
            .filter(|offer| offer.scheme == SCHEME_EXACT)
            .filter_map(|offer| {
                let request = charge_request(offer, decimals(offer))?;
                let (prefix, counter) = &*self.salts;
                let count = counter.fetch_add(1, Ordering::Relaxed);
                let mut salt = [0u8; SALT_BYTES];
                salt[..8].copy_from_slice(&prefix.to_le_bytes());
                salt[8..].copy_from_slice(&count.to_le_bytes());
                let tag = self.tag(&salt, &request, expires.as_str());
                let id = URL_SAFE_NO_PAD.encode([&salt[..], &tag[..]].concat());
                Some(Challenge {
                    id,
                    realm: self.realm.clone(),
                    request,
                    expires: expires.as_str().to_owned(),
                })
            })
            .collect()
    }

    /// Reads a credential (`Payment <base64url JSON>`) against the offers a
    /// route asks now, at `now`: the challenge is one this server issued, for
    /// this realm, not expired, asking what the route asks; the
    /// authorization pays exactly that, with the nonce the challenge fixes.
    /// The signature is the flow's to verify.
    pub(crate) fn read_credential(
        &self,
        value: &str,
        accepts: &[PaymentRequirements],
        now: u64,
    ) -> Result<Paid, Problem> {
        let encoded = value
            .get(..PAYMENT_SCHEME.len() + 1)
            .filter(|scheme| scheme.eq_ignore_ascii_case("payment "))
            .map(|_| &value[PAYMENT_SCHEME.len() + 1..])
            .ok_or(Problem::MalformedCredential("not a Payment credential"))?
            .trim();
        if encoded.len() > MAX_CREDENTIAL_BYTES || encoded.contains(',') {
            return Err(Problem::MalformedCredential(
                "one credential, at most 32 KiB",
            ));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(encoded.trim_end_matches('='))
            .map_err(|_| Problem::MalformedCredential("not base64url"))?;
        let credential: Credential = serde_json::from_slice(&bytes)
            .map_err(|_| Problem::MalformedCredential("not a credential's JSON"))?;
        let challenge = &credential.challenge;
        if challenge.method != METHOD_EVM {
            return Err(Problem::MethodUnsupported);
        }
        let salt_and_tag = URL_SAFE_NO_PAD
            .decode(&challenge.id)
            .ok()
            .filter(|bytes| bytes.len() == SALT_BYTES + 16)
            .ok_or(Problem::InvalidChallenge(
                "the challenge was not issued by this server",
            ))?;
        let expires = challenge
            .expires
            .as_deref()
            .ok_or(Problem::InvalidChallenge("the challenge has no expires"))?;
        let (salt, tag) = salt_and_tag.split_at(SALT_BYTES);
        let issued_here = challenge.realm == self.realm
            && challenge.intent == INTENT_CHARGE
            && challenge.digest.is_none()
            && challenge.opaque.is_none()
            && challenge.request.len() <= MAX_REQUEST_BYTES
            && subtle_eq(&self.tag(salt, &challenge.request, expires), tag);
        if !issued_here {
            return Err(Problem::InvalidChallenge(
                "the challenge was not issued by this server",
            ));
        }
        let expires_at = expires
            .parse::<Timestamp>()
            .map_err(|_| Problem::InvalidChallenge("the challenge's expires is not RFC 3339"))?;
        if expires_at.unix_millis() <= i64::try_from(now).unwrap_or(i64::MAX) * 1000 {
            return Err(Problem::PaymentExpired);
        }
        // What the route asks now: the offer the challenge's request names.
        let offer = accepts
            .iter()
            .filter(|offer| offer.scheme == SCHEME_EXACT)
            .find(|offer| {
                charge_request(offer, 0).is_some() && same_request(&challenge.request, offer)
            })
            .ok_or(Problem::InvalidChallenge(
                "the challenge asks what this route does not",
            ))?;
        let payload: AuthorizationPayload = serde_json::from_value(credential.payload.clone())
            .map_err(|_| Problem::InvalidPayload)?;
        if payload.kind != "authorization" {
            return Err(Problem::VerificationFailed(
                "only authorization credentials are taken",
            ));
        }
        let (Some(from), Some(to)) = (
            parse_evm_address(&payload.from),
            parse_evm_address(&payload.to),
        ) else {
            return Err(Problem::InvalidPayload);
        };
        if Some(to) != parse_evm_address(&offer.pay_to) {
            return Err(Problem::VerificationFailed(
                "the authorization pays another recipient",
            ));
        }
        if payload.value != offer.amount.to_string() {
            return Err(Problem::VerificationFailed(
                "the authorization's value is not the amount",
            ));
        }
        let nonce = keccak256([challenge.id.as_bytes(), challenge.realm.as_bytes()].concat());
        if payload.nonce.to_ascii_lowercase() != nonce.to_string() {
            return Err(Problem::VerificationFailed(
                "the nonce is not keccak256(id ‖ realm)",
            ));
        }
        if let Some(source) = &credential.source {
            let chain = offer.network.eip155_chain_id().unwrap_or_default();
            if *source != format!("did:pkh:eip155:{chain}:{}", from.to_checksum(None)) {
                return Err(Problem::VerificationFailed("the source is not the payer"));
            }
        }
        let header = json!({
            "x402Version": 2,
            "accepted": offer,
            "payload": {
                "signature": payload.signature,
                "authorization": {
                    "from": from.to_checksum(None),
                    "to": to.to_checksum(None),
                    "value": payload.value,
                    "validAfter": payload.valid_after,
                    "validBefore": payload.valid_before,
                    "nonce": payload.nonce,
                },
            },
        });
        Ok(Paid {
            payment_json: header.to_string(),
            challenge_id: challenge.id.clone(),
        })
    }
}

/// Equal in constant time.
fn subtle_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The `request` of an EVM `exact` offer: base64url (no padding) of its
/// canonical JSON (RFC 8785: keys sorted, no spaces; the values here are
/// digits and hex, so no escaping is needed).
fn charge_request(offer: &PaymentRequirements, decimals: u8) -> Option<String> {
    let chain_id = offer.network.eip155_chain_id()?;
    let currency = parse_evm_address(&offer.asset)?.to_checksum(None);
    let recipient = parse_evm_address(&offer.pay_to)?.to_checksum(None);
    let json = format!(
        r#"{{"amount":"{}","currency":"{currency}","methodDetails":{{"chainId":{chain_id},"credentialTypes":["authorization"],"decimals":{decimals}}},"recipient":"{recipient}"}}"#,
        offer.amount
    );
    Some(URL_SAFE_NO_PAD.encode(json))
}

/// Whether an echoed `request` asks what `offer` asks (amount, currency,
/// recipient, chain), whatever its decimals.
fn same_request(request: &str, offer: &PaymentRequirements) -> bool {
    let Some(object) = URL_SAFE_NO_PAD
        .decode(request.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
    else {
        return false;
    };
    let address = |name: &str| object.get(name)?.as_str().and_then(parse_evm_address);
    object.get("amount").and_then(Value::as_str) == Some(offer.amount.to_string().as_str())
        && address("currency") == parse_evm_address(&offer.asset)
        && address("recipient") == parse_evm_address(&offer.pay_to)
        && object
            .pointer("/methodDetails/chainId")
            .and_then(Value::as_u64)
            == offer.network.eip155_chain_id()
        && object.pointer("/methodDetails/splits").is_none()
}

/// One challenge, as issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub(crate) id: String,
    realm: String,
    request: String,
    expires: String,
}

impl Challenge {
    /// The `WWW-Authenticate` value (one challenge).
    pub(crate) fn header_value(&self) -> String {
        format!(
            r#"{PAYMENT_SCHEME} id="{}", realm="{}", method="{METHOD_EVM}", intent="{INTENT_CHARGE}", request="{}", expires="{}""#,
            self.id, self.realm, self.request, self.expires
        )
    }
}

/// A credential read and checked: the x402 payment its authorization is
/// (for the flow), and the challenge the receipt names.
#[derive(Debug)]
pub(crate) struct Paid {
    pub(crate) payment_json: String,
    pub(crate) challenge_id: String,
}

#[derive(Deserialize)]
struct Credential {
    challenge: EchoedChallenge,
    payload: Value,
    #[serde(default)]
    source: Option<String>,
}

#[derive(Deserialize)]
struct EchoedChallenge {
    id: String,
    realm: String,
    method: String,
    intent: String,
    request: String,
    #[serde(default)]
    expires: Option<String>,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    opaque: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthorizationPayload {
    #[serde(rename = "type")]
    kind: String,
    from: String,
    to: String,
    value: String,
    valid_after: String,
    valid_before: String,
    nonce: String,
    signature: String,
}

/// Why a credential is refused, as MPP names it (`application/problem+json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// No credential: pay the challenge.
    PaymentRequired,
    /// Not a credential (base64url JSON of `{challenge, payload}`).
    MalformedCredential(&'static str),
    /// The challenge was not issued here, or asks what the route does not.
    InvalidChallenge(&'static str),
    /// The challenge has expired.
    PaymentExpired,
    /// The payload is not an authorization's.
    InvalidPayload,
    /// The authorization does not pay what the challenge asks.
    VerificationFailed(&'static str),
    /// Not the `evm` method.
    MethodUnsupported,
    /// Several `Payment` credentials in one request.
    BadRequest,
}

impl Problem {
    /// The problem's `type` suffix, HTTP status and title.
    pub fn parts(&self) -> (&'static str, u16, &'static str) {
        match self {
            Self::PaymentRequired => ("payment-required", 402, "Payment Required"),
            Self::MalformedCredential(_) => ("malformed-credential", 402, "Malformed Credential"),
            Self::InvalidChallenge(_) => ("invalid-challenge", 402, "Invalid Challenge"),
            Self::PaymentExpired => ("payment-expired", 402, "Payment Expired"),
            Self::InvalidPayload => ("invalid-payload", 402, "Invalid Payload"),
            Self::VerificationFailed(_) => ("verification-failed", 402, "Verification Failed"),
            Self::MethodUnsupported => ("method-unsupported", 400, "Method Unsupported"),
            Self::BadRequest => ("bad-request", 400, "Bad Request"),
        }
    }

    /// What went wrong, for `detail`.
    pub fn detail(&self) -> &'static str {
        match self {
            Self::PaymentRequired => "this resource requires payment",
            Self::MalformedCredential(why)
            | Self::InvalidChallenge(why)
            | Self::VerificationFailed(why) => why,
            Self::PaymentExpired => "the challenge has expired: pay the fresh one",
            Self::InvalidPayload => "the payload is not an EIP-3009 authorization",
            Self::MethodUnsupported => "only the evm method is taken here",
            Self::BadRequest => "send one Payment credential",
        }
    }

    /// The problem+json body, naming the fresh challenge (if any).
    pub(crate) fn body(&self, detail: Option<&str>, challenge_id: Option<&str>) -> Vec<u8> {
        let (code, status, title) = self.parts();
        let mut body = json!({
            "type": format!("https://paymentauth.org/problems/{code}"),
            "title": title,
            "status": status,
            "detail": detail.unwrap_or(self.detail()),
        });
        if let Some(id) = challenge_id {
            body["challengeId"] = json!(id);
        }
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// The one `Payment` credential of a request (`Payment-Authorization`, or
/// `Authorization`), if it carries one; several are a bad request.
pub(crate) fn credential(headers: &http::HeaderMap) -> Option<Result<&str, Problem>> {
    let mut found = headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .chain(headers.get_all(PAYMENT_AUTHORIZATION))
        .filter_map(|value| value.to_str().ok())
        .filter(|value| {
            value
                .get(..PAYMENT_SCHEME.len() + 1)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("payment "))
        });
    let first = found.next()?;
    if found.next().is_some() {
        return Some(Err(Problem::BadRequest));
    }
    // The scheme name is case-insensitive; the credential after it is not.
    Some(Ok(first))
}

/// An MPP answer: `problem` as problem+json, with (for a 402) the x402
/// quote's headers and fresh challenges, so either protocol can pay again.
pub(crate) fn problem_response(
    problem: Problem,
    detail: Option<&str>,
    challenges: &[Challenge],
    x402_headers: impl FnOnce(&mut http::HeaderMap),
) -> http::Response<bytes::Bytes> {
    let (_, status, _) = problem.parts();
    let challenge_id = challenges.first().map(|challenge| challenge.id.as_str());
    let body = problem.body(detail, challenge_id.filter(|_| status == 402));
    let mut response = http::Response::new(bytes::Bytes::from(body));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::PAYMENT_REQUIRED);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    if status == 402 {
        x402_headers(headers);
        add_challenges(headers, challenges);
    }
    response
}

/// Appends each challenge as a `WWW-Authenticate` field (beside x402's).
pub(crate) fn add_challenges(headers: &mut http::HeaderMap, challenges: &[Challenge]) {
    for challenge in challenges {
        if let Ok(value) = http::HeaderValue::from_str(&challenge.header_value()) {
            headers.append(http::header::WWW_AUTHENTICATE, value);
        }
    }
}

/// The `Payment-Receipt` of a settled credential: base64url of
/// `{status, method, timestamp, reference, challengeId, chainId}`.
pub(crate) fn receipt(transaction: &str, challenge_id: &str, chain_id: u64, now: u64) -> String {
    let timestamp = Timestamp::from_unix_millis(i64::try_from(now).unwrap_or(i64::MAX) * 1000);
    let receipt = json!({
        "status": "success",
        "method": METHOD_EVM,
        "timestamp": timestamp.as_str(),
        "reference": transaction,
        "challengeId": challenge_id,
        "chainId": chain_id,
    });
    URL_SAFE_NO_PAD.encode(receipt.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::payer::Payer;
    use crate::x402::server::PaymentOption;
    use crate::x402::wire::AtomicAmount;

    const NOW: u64 = 1_764_300_000;
    const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    fn mpp() -> Mpp {
        Mpp::new(&[7u8; 32], "gateway.example").unwrap()
    }

    fn accepts() -> Vec<PaymentRequirements> {
        vec![
            PaymentOption::base_sepolia_usdc(PAY_TO)
                .unwrap()
                .requirements_for_amount(AtomicAmount::new(1_129)),
        ]
    }

    /// The credential an mppx client sends for `challenge`, signed by `payer`.
    fn credential(challenge: &Challenge, payer: &Payer, value: &str, to: &str) -> String {
        let nonce = keccak256([challenge.id.as_bytes(), challenge.realm.as_bytes()].concat());
        let mut offer = accepts()[0].clone();
        offer.pay_to = to.to_owned();
        offer.amount = AtomicAmount::new(value.parse().unwrap());
        let signed = payer
            .header_with_nonce(&offer, NOW, nonce)
            .map(|header| crate::x402::wire::codec::decode::<Value>(header.as_bytes()).unwrap())
            .unwrap();
        let authorization = &signed["payload"]["authorization"];
        let credential = json!({
            "challenge": {
                "id": challenge.id, "realm": challenge.realm, "method": "evm", "intent": "charge",
                "request": challenge.request, "expires": challenge.expires,
            },
            "payload": {
                "type": "authorization",
                "from": authorization["from"], "to": authorization["to"],
                "value": authorization["value"], "validAfter": authorization["validAfter"],
                "validBefore": authorization["validBefore"], "nonce": authorization["nonce"],
                "signature": signed["payload"]["signature"],
            },
        });
        format!("Payment {}", URL_SAFE_NO_PAD.encode(credential.to_string()))
    }

    #[test]
    fn a_challenge_is_canonical_fresh_and_parses_as_mppx_writes_it() {
        let mpp = mpp();
        let first = mpp.challenges(&accepts(), |_| 6, NOW);
        let second = mpp.challenges(&accepts(), |_| 6, NOW);
        assert_eq!(first.len(), 1);
        assert_ne!(first[0].id, second[0].id, "a fresh id per 402");
        let request =
            String::from_utf8(URL_SAFE_NO_PAD.decode(&first[0].request).unwrap()).unwrap();
        assert_eq!(
            request,
            r#"{"amount":"1129","currency":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","methodDetails":{"chainId":84532,"credentialTypes":["authorization"],"decimals":6},"recipient":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8"}"#
        );
        assert_eq!(first[0].expires, "2025-11-28T03:25:00.000Z");
        let header = first[0].header_value();
        assert!(header.starts_with(r#"Payment id=""#), "{header}");
        assert!(header.contains(r#"realm="gateway.example", method="evm", intent="charge""#));
        assert!(!header.contains('\n'));
    }

    #[test]
    fn a_credential_for_a_challenge_issued_here_becomes_the_x402_payment_of_its_offer() {
        let mpp = mpp();
        let challenge = &mpp.challenges(&accepts(), |_| 6, NOW)[0];
        let payer = Payer::dev(3);
        let offers = accepts();
        let paid = mpp
            .read_credential(
                &credential(challenge, &payer, "1129", PAY_TO),
                &offers,
                NOW + 1,
            )
            .unwrap();
        let payment: Value = serde_json::from_str(&paid.payment_json).unwrap();
        assert_eq!(
            payment["accepted"],
            serde_json::to_value(&offers[0]).unwrap()
        );
        assert_eq!(payment["payload"]["authorization"]["from"], payer.address());
        assert_eq!(payment["accepted"]["amount"], "1129");
        assert_eq!(payment["payload"]["authorization"]["value"], "1129");
    }

    #[test]
    fn every_bad_credential_gets_its_problem() {
        let mpp = mpp();
        let offers = accepts();
        let challenge = &mpp.challenges(&offers, |_| 6, NOW)[0];
        let payer = Payer::dev(3);
        let read = |value: &str, now| mpp.read_credential(value, &offers, now).map(|_| ());
        assert!(matches!(
            read("Payment !!!", NOW),
            Err(Problem::MalformedCredential(_))
        ));
        assert!(matches!(
            read("Bearer x", NOW),
            Err(Problem::MalformedCredential(_))
        ));
        let good = credential(challenge, &payer, "1129", PAY_TO);
        assert!(matches!(
            read(&format!("{good}, {good}"), NOW),
            Err(Problem::MalformedCredential(_))
        ));
        assert_eq!(read(&good, NOW + 301), Err(Problem::PaymentExpired));
        let short = credential(challenge, &payer, "1128", PAY_TO);
        assert!(matches!(
            read(&short, NOW),
            Err(Problem::VerificationFailed(_))
        ));
        let elsewhere = credential(
            challenge,
            &payer,
            "1129",
            "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        );
        assert!(matches!(
            read(&elsewhere, NOW),
            Err(Problem::VerificationFailed(_))
        ));
        // Another server's challenge (another key), and another realm.
        let other = Mpp::new(&[8u8; 32], "gateway.example").unwrap();
        let foreign = credential(
            &other.challenges(&offers, |_| 6, NOW)[0],
            &payer,
            "1129",
            PAY_TO,
        );
        assert!(matches!(
            read(&foreign, NOW),
            Err(Problem::InvalidChallenge(_))
        ));
        let realm = Mpp::new(&[7u8; 32], "other.example").unwrap();
        let moved = credential(
            &realm.challenges(&offers, |_| 6, NOW)[0],
            &payer,
            "1129",
            PAY_TO,
        );
        assert!(matches!(
            read(&moved, NOW),
            Err(Problem::InvalidChallenge(_))
        ));
        // The route's price changed since the challenge.
        let dearer = vec![
            PaymentOption::base_sepolia_usdc(PAY_TO)
                .unwrap()
                .requirements_for_amount(AtomicAmount::new(2_000)),
        ];
        assert!(matches!(
            mpp.read_credential(&good, &dearer, NOW),
            Err(Problem::InvalidChallenge(_))
        ));
        // The request echoed re-serialized (not the canonical bytes issued), or huge.
        let mut echoed = challenge.clone();
        let canonical = URL_SAFE_NO_PAD.decode(&challenge.request).unwrap();
        let spaced = String::from_utf8(canonical).unwrap().replace(',', ", ");
        echoed.request = URL_SAFE_NO_PAD.encode(spaced);
        let resorted = credential(&echoed, &payer, "1129", PAY_TO);
        assert!(matches!(
            read(&resorted, NOW),
            Err(Problem::InvalidChallenge(_))
        ));
        echoed.request = "A".repeat(MAX_REQUEST_BYTES + 1);
        let huge = credential(&echoed, &payer, "1129", PAY_TO);
        assert!(matches!(
            read(&huge, NOW),
            Err(Problem::InvalidChallenge(_))
        ));
        assert!(read(&good, NOW).is_ok());
    }

    #[test]
    fn problems_and_receipts_have_mpps_shapes() {
        let body: Value =
            serde_json::from_slice(&Problem::PaymentExpired.body(None, Some("abc"))).unwrap();
        assert_eq!(
            body["type"],
            "https://paymentauth.org/problems/payment-expired"
        );
        assert_eq!(body["status"], 402);
        assert_eq!(body["challengeId"], "abc");
        assert_eq!(Problem::MethodUnsupported.parts().1, 400);
        let receipt: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(receipt("0xabc", "id", 84532, NOW))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(receipt["status"], "success");
        assert_eq!(receipt["reference"], "0xabc");
        assert_eq!(receipt["method"], "evm");
    }
}

//! The `sign-in-with-x` extension (CAIP-122, EVM wallets): a wallet that paid
//! for an operation signs in and gets the answer it paid for again, uncharged.
//!
//! Each 402 declares a fresh challenge (`domain`, `uri`, `nonce`, `issuedAt`,
//! `expirationTime`) and the EVM networks it accepts. The nonce is stateless:
//! its issue time, random bytes and an HMAC-SHA256 tag under the layer's key,
//! in hex. Declaring one costs a MAC of a few bytes and a splice into the
//! quote's bytes (built once per resource); nothing is written, so a flood of
//! 402s writes nothing. A nonce is recorded only when a proof spends it, in a
//! [`NonceStore`](crate::siwe::NonceStore) for its life (shared between
//! replicas on Redis).
//!
//! The proof, header `SIGN-IN-WITH-X` (standard base64 of JSON), is checked
//! as the official server checks it, with the crate's EIP-4361 engine: the
//! domain and the URI's origin are this server's, `issuedAt` is at most
//! five minutes old and not in the future, the expiry and not-before hold,
//! the chain is one of the declared EVM networks, the EIP-191 signature
//! recovers the address, the nonce was issued here (its tag) within five
//! minutes and is spent now. A valid proof for an operation (method, path
//! and query, body digest) its wallet paid for gets the answer kept at
//! settlement; anything else gets the normal 402 (failures are silent).

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use alloy_primitives::{Address, B256, eip191_hash_message, hex, keccak256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::Sha256;

use super::answers::KeptAnswer;
use super::entitlements::{EntitlementStore, entitlement_key};
use super::receipt::PaymentReceipt;
use crate::clock::SharedClock;
use crate::envelope::header;
use crate::siwe::{
    DEFAULT_LEEWAY_SECS, InMemoryNonceStore, NonceStore, NonceStoreError, SiweMessage,
    SiweMessageFields, Timestamp,
};
use crate::store::BoxFuture;
use crate::x402::wire::types::PaymentRequired;

/// The extension's key in `PaymentRequired.extensions`.
pub const SIGN_IN_WITH_X: &str = "sign-in-with-x";

/// The proof's header (names are case-insensitive; the official client
/// writes it upper-case).
pub const SIGN_IN_WITH_X_HEADER: http::HeaderName = http::HeaderName::from_static("sign-in-with-x");

/// How old a proof (its `issuedAt`) and its nonce may be: five minutes.
pub const SIWX_MAX_AGE_SECS: u64 = 300;

/// The largest `SIGN-IN-WITH-X` header read; a longer one is no proof.
const MAX_PROOF_BYTES: usize = 8 * 1024;

/// Bytes of a nonce: issue time (4), randomness (12), HMAC tag (16).
const NONCE_BYTES: usize = 32;

/// What stands for the per-402 fields in a quote built once.
const PLACEHOLDER_TIME: &str = "1970-01-01T00:00:00.000Z";

/// Asks a contract wallet whether it signed (ERC-1271 `isValidSignature`),
/// for proofs whose signature does not recover their address; the gateway's
/// on-chain settler implements it through its node.
pub trait ContractSignatures: Send + Sync + 'static {
    /// Whether `wallet`, a contract on EIP-155 chain `chain_id`, accepts
    /// `signature` over `digest` (the EIP-191 hash of the signed text);
    /// `false` when it could not be asked.
    fn is_valid_signature<'a>(
        &'a self,
        chain_id: u64,
        wallet: Address,
        digest: B256,
        signature: &'a [u8],
    ) -> BoxFuture<'a, bool>;
}

impl<T: ContractSignatures + ?Sized> ContractSignatures for Arc<T> {
    fn is_valid_signature<'a>(
        &'a self,
        chain_id: u64,
        wallet: Address,
        digest: B256,
        signature: &'a [u8],
    ) -> BoxFuture<'a, bool> {
        (**self).is_valid_signature(chain_id, wallet, digest, signature)
    }
}

/// The `sign-in-with-x` option of an [`X402LayerBuilder`](super::X402LayerBuilder):
/// the nonce key and where spent nonces are recorded.
///
/// Replicas behind one origin must share the key (a nonce issued by one is
/// checked by another) and the spent-nonce store.
#[derive(Clone)]
pub struct SignInWithX {
    key: [u8; 32],
    spent_nonces: Option<Arc<dyn NonceStore>>,
    contracts: Option<Arc<dyn ContractSignatures>>,
}

impl fmt::Debug for SignInWithX {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignInWithX")
            .field("spent_nonces", &self.spent_nonces.is_some())
            .finish_non_exhaustive()
    }
}

impl SignInWithX {
    /// With a random key of this process (one replica, or tests).
    pub fn new() -> Result<Self, getrandom::Error> {
        let mut key = [0; 32];
        getrandom::fill(&mut key)?;
        Ok(Self::with_key(key))
    }

    /// With `key`, the HMAC key of its nonces: replicas share it.
    pub fn with_key(key: [u8; 32]) -> Self {
        Self {
            key,
            spent_nonces: None,
            contracts: None,
        }
    }

    /// Asks contract wallets through `contracts` (ERC-1271) when a proof's
    /// signature does not recover its address; without it, EOAs only.
    #[must_use]
    pub fn with_contract_signatures(mut self, contracts: Arc<dyn ContractSignatures>) -> Self {
        self.contracts = Some(contracts);
        self
    }

    /// Where spent nonces are recorded for their life (default: this
    /// process's memory); replicas share one (e.g. `RedisSiweNonceStore`).
    #[must_use]
    pub fn with_spent_nonce_store(mut self, store: Arc<dyn NonceStore>) -> Self {
        self.spent_nonces = Some(store);
        self
    }
}

/// The extension as a layer runs it: its origin, its EVM chains, its key.
pub(crate) struct SignIn {
    /// HMAC-SHA256 keyed once (its padded key blocks hashed): each tag
    /// clones it and hashes the nonce's 16 bytes only.
    mac: Hmac<Sha256>,
    /// `scheme://host[:port]`.
    origin: String,
    /// `host[:port]`.
    domain: String,
    /// EIP-155 chain ids of the layer's EVM offers.
    chain_ids: Vec<u64>,
    supported_chains: Value,
    spent: Arc<dyn NonceStore>,
    contracts: Option<Arc<dyn ContractSignatures>>,
    clock: SharedClock,
    /// The per-402 times of the current second, already formatted.
    times: Mutex<(u64, String)>,
}

impl fmt::Debug for SignIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignIn")
            .field("origin", &self.origin)
            .field("chain_ids", &self.chain_ids)
            .finish_non_exhaustive()
    }
}

impl SignIn {
    /// The extension for a layer serving at `public_base_url` whose offers
    /// are on the EIP-155 chains `offered`; `None` without one (Solana
    /// alone: nothing to sign in with).
    pub(crate) fn new(
        config: SignInWithX,
        public_base_url: &str,
        offered: impl IntoIterator<Item = u64>,
        clock: SharedClock,
    ) -> Option<Self> {
        let mut chain_ids: Vec<u64> = Vec::new();
        for id in offered {
            if !chain_ids.contains(&id) {
                chain_ids.push(id);
            }
        }
        if chain_ids.is_empty() {
            return None;
        }
        let (scheme, rest) = public_base_url.split_once("://")?;
        let domain = rest.split('/').next().filter(|d| !d.is_empty())?.to_owned();
        let supported_chains = Value::Array(
            chain_ids
                .iter()
                .map(|id| json!({"chainId": format!("eip155:{id}"), "type": "eip191"}))
                .collect(),
        );
        Some(Self {
            mac: Hmac::<Sha256>::new_from_slice(&config.key).ok()?,
            origin: format!("{scheme}://{domain}"),
            domain,
            chain_ids,
            supported_chains,
            spent: config
                .spent_nonces
                .unwrap_or_else(|| Arc::new(InMemoryNonceStore::new())),
            contracts: config.contracts,
            clock,
            times: Mutex::default(),
        })
    }

    /// The declaration for the resource at `url`, its per-402 fields
    /// placeholders (see [`QuoteTemplate`]).
    pub(crate) fn declaration(&self, url: &str) -> Value {
        // Keys in this order (also the sorted order): the three per-402
        // fields stay one run of bytes in the serialized quote.
        let mut info = Map::new();
        info.insert("domain".into(), Value::from(self.domain.as_str()));
        info.insert("expirationTime".into(), Value::from(PLACEHOLDER_TIME));
        info.insert("issuedAt".into(), Value::from(PLACEHOLDER_TIME));
        info.insert("nonce".into(), Value::from(placeholder_nonce()));
        info.insert("resources".into(), json!([url]));
        info.insert("uri".into(), Value::from(url));
        info.insert("version".into(), Value::from("1"));
        json!({
            "info": info,
            "supportedChains": self.supported_chains,
            "schema": schema(),
        })
    }

    /// `"expirationTime":"…","issuedAt":"…","nonce":"` for a challenge
    /// issued at `now_secs` (whole seconds), formatted once per second.
    fn times_of(&self, now_secs: u64) -> String {
        let mut cached = self.times.lock().unwrap_or_else(PoisonError::into_inner);
        if cached.0 != now_secs || cached.1.is_empty() {
            let millis = i64::try_from(now_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
            let issued = Timestamp::from_unix_millis(millis);
            let expires = Timestamp::from_unix_millis(
                millis.saturating_add(i64::try_from(SIWX_MAX_AGE_SECS * 1000).unwrap_or(0)),
            );
            let run = dynamic_run(expires.as_str(), issued.as_str(), "");
            *cached = (now_secs, run[..run.len() - 1].to_owned());
        }
        let mut run = String::with_capacity(cached.1.len() + NONCE_BYTES * 2 + 1);
        run.push_str(&cached.1);
        run
    }

    /// A fresh nonce issued at `now_secs`: time, randomness, tag, in hex.
    fn mint_nonce(&self, now_secs: u64) -> Option<String> {
        let mut bytes = [0u8; NONCE_BYTES];
        bytes[..4].copy_from_slice(&u32::try_from(now_secs).ok()?.to_be_bytes());
        getrandom::fill(&mut bytes[4..16]).ok()?;
        let tag = self.tag(&bytes[..16]);
        bytes[16..].copy_from_slice(&tag[..16]);
        Some(hex::encode(bytes))
    }

    /// When `nonce` was issued, if this server issued it (its tag holds).
    fn nonce_issued_at(&self, nonce: &str) -> Option<u64> {
        if nonce.len() != NONCE_BYTES * 2 {
            return None;
        }
        let bytes: [u8; NONCE_BYTES] = hex::decode_to_array(nonce).ok()?;
        let mut mac = self.mac.clone();
        mac.update(&bytes[..16]);
        mac.verify_truncated_left(&bytes[16..]).ok()?;
        Some(u64::from(u32::from_be_bytes(bytes[..4].try_into().ok()?)))
    }

    fn tag(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// `template`'s quote with a fresh challenge in place of the placeholders.
    pub(crate) fn fill(&self, template: &QuoteTemplate, quote: Response<Bytes>) -> Response<Bytes> {
        let now_secs = self.clock.now_unix_secs();
        let Some(nonce) = self.mint_nonce(now_secs) else {
            // No randomness: the placeholder nonce never verifies.
            return quote;
        };
        let mut run = self.times_of(now_secs);
        run.push_str(&nonce);
        run.push('"');
        if run.len() != template.run_len {
            return quote;
        }
        let (mut parts, body) = quote.into_parts();
        let mut body = body.to_vec();
        body[template.body_at..template.body_at + run.len()].copy_from_slice(run.as_bytes());
        let mut block = template.header_block.clone();
        block[template.block_at..template.block_at + run.len()].copy_from_slice(run.as_bytes());
        let (before, after) = (
            &template.header[..template.header_chars.start],
            &template.header[template.header_chars.end..],
        );
        let mut value = String::with_capacity(template.header.len());
        value.push_str(before);
        STANDARD.encode_string(&block, &mut value);
        value.push_str(after);
        if let Ok(value) = HeaderValue::try_from(value) {
            parts.headers.insert(header::PAYMENT_REQUIRED, value);
        }
        Response::from_parts(parts, Bytes::from(body))
    }

    /// The wallet a `SIGN-IN-WITH-X` proof signs in, lower-case, after
    /// every check; its nonce is spent. `None` for anything else.
    pub(crate) async fn verify(&self, proof: &[u8]) -> Option<String> {
        let payload = decode_proof(proof)?;
        let now_millis = self.clock.now_unix_millis();
        let message = self.check(&payload, now_millis)?;
        let signature = decode_signature(&payload.signature)?;
        let issued = self.nonce_issued_at(&payload.nonce)?;
        let life_ends = (issued + SIWX_MAX_AGE_SECS + DEFAULT_LEEWAY_SECS) * 1000;
        if now_millis >= life_ends || issued * 1000 > now_millis + DEFAULT_LEEWAY_SECS * 1000 {
            return None;
        }
        let recovered = signature.len() == 65 && message.verify_eip191(&signature).is_ok();
        if !recovered {
            // A contract wallet judges its own signature (ERC-1271), when one can be asked.
            let contracts = self.contracts.as_ref()?;
            let digest = eip191_hash_message(message.to_string());
            let valid = contracts
                .is_valid_signature(message.chain_id(), message.address(), digest, &signature)
                .await;
            if !valid {
                return None;
            }
        }
        match self
            .spent
            .insert(&payload.nonce, now_millis, life_ends)
            .await
        {
            Ok(()) => Some(format!("{:#x}", message.address())),
            Err(NonceStoreError::Duplicate) => None,
            Err(_error) => {
                trace_warn!(error = %_error, "the spent-nonce store failed; sign-in refused");
                None
            }
        }
    }

    /// The message the proof signed, if its fields pass the relying party's checks.
    fn check(&self, payload: &Proof, now_millis: u64) -> Option<SiweMessage> {
        if payload.kind != "eip191" || !payload.domain.eq_ignore_ascii_case(&self.domain) {
            return None;
        }
        let rest = payload.uri.strip_prefix(self.origin.as_str())?;
        if !(rest.is_empty() || rest.starts_with(['/', '?', '#'])) {
            return None;
        }
        let chain_id: u64 = payload.chain_id.strip_prefix("eip155:")?.parse().ok()?;
        if !self.chain_ids.contains(&chain_id) {
            return None;
        }
        let fields = SiweMessageFields {
            scheme: None,
            domain: payload.domain.clone(),
            address: payload.address.clone(),
            statement: payload.statement.clone().filter(|s| !s.is_empty()),
            uri: payload.uri.clone(),
            version: payload.version.clone(),
            chain_id,
            nonce: payload.nonce.clone(),
            issued_at: payload.issued_at.clone(),
            expiration_time: payload.expiration_time.clone(),
            not_before: payload.not_before.clone(),
            request_id: payload.request_id.clone(),
            resources: payload.resources.clone(),
        };
        // The engine refuses CR/LF and anything else that would change the signed text.
        let message = SiweMessage::from_fields(&fields).ok()?;
        let now = i128::from(now_millis) * 1_000_000;
        let issued = message.issued_at().unix_nanos();
        let leeway = i128::from(DEFAULT_LEEWAY_SECS) * 1_000_000_000;
        if issued > now + leeway || now - issued > i128::from(SIWX_MAX_AGE_SECS) * 1_000_000_000 {
            return None;
        }
        message.check_validity_window(now_millis, 0).ok()?;
        Some(message)
    }
}

/// The proof as the official client sends it (unknown keys are dropped).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Proof {
    domain: String,
    address: String,
    uri: String,
    version: String,
    chain_id: String,
    #[serde(rename = "type")]
    kind: String,
    nonce: String,
    issued_at: String,
    #[serde(default)]
    expiration_time: Option<String>,
    #[serde(default)]
    not_before: Option<String>,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    resources: Option<Vec<String>>,
    #[serde(default)]
    statement: Option<String>,
    signature: String,
}

fn decode_proof(proof: &[u8]) -> Option<Proof> {
    if proof.len() > MAX_PROOF_BYTES {
        return None;
    }
    let json = STANDARD.decode(proof.trim_ascii()).ok()?;
    serde_json::from_slice(&json).ok()
}

/// The signature's bytes: 65 for an EOA, any length (within the proof's
/// bound) for a contract wallet.
fn decode_signature(signature: &str) -> Option<Vec<u8>> {
    let hex_digits = signature.strip_prefix("0x").unwrap_or(signature);
    if hex_digits.is_empty() {
        return None;
    }
    hex::decode(hex_digits).ok()
}

/// The request a paid answer is kept for: method, path and query, and the
/// digest of the body (none when no body layer read it). No offer: a
/// sign-in carries no payment.
pub(crate) fn operation(request_line: &str, body: Option<[u8; 32]>) -> [u8; 32] {
    let mut bytes = Vec::with_capacity(request_line.len() + 33);
    bytes.extend_from_slice(request_line.as_bytes());
    bytes.push(b'\n');
    if let Some(body) = body {
        bytes.extend_from_slice(&body);
    }
    keccak256(&bytes).0
}

/// Where the answer `payer` paid for `operation` is kept.
pub(crate) fn kept_key(payer: &str, operation: &[u8; 32]) -> String {
    format!("siwx:{}", entitlement_key(payer, operation))
}

/// What a kept answer of a sign-in is bound to.
pub(crate) const KEPT_BINDING: &str = "siwx";

/// Whether `request` carries a proof to check before anything else: with
/// no payment, a proof is the request's only claim.
pub(crate) fn has_proof<B>(request: &Request<B>) -> bool {
    request.headers().contains_key(SIGN_IN_WITH_X_HEADER)
        && !request.headers().contains_key(header::PAYMENT_SIGNATURE)
}

/// What a valid proof for an operation its wallet paid for gets.
#[derive(Debug)]
pub(crate) enum Entitled {
    /// The answer kept at settlement.
    Kept(KeptAnswer),
    /// The handler again, uncharged, with the settled receipt (a route that
    /// opted in, with no answer kept or a job's `202` kept).
    Rerun(PaymentReceipt),
}

/// What `proof` (a `SIGN-IN-WITH-X` header) entitles its request to for
/// `operation`, if anything: `rerun` says whether its route opted into
/// running the handler again.
pub(crate) async fn entitled_answer(
    sign_in: &SignIn,
    entitlements: &dyn EntitlementStore,
    answers: &dyn super::AnswerStore,
    proof: &HeaderValue,
    operation: &[u8; 32],
    rerun: bool,
) -> Option<Entitled> {
    let payer = sign_in.verify(proof.as_bytes()).await?;
    let receipt = match entitlements.entitlement(&payer, operation).await {
        Ok(receipt) => receipt?,
        Err(_error) => {
            trace_warn!(error = %_error, "the entitlement store could not be read");
            return None;
        }
    };
    let kept = match answers.kept(&kept_key(&payer, operation)).await {
        Ok(answer) => answer.filter(|answer| answer.binding() == KEPT_BINDING),
        Err(_error) => {
            trace_warn!(error = %_error, "the answer store could not be read");
            None
        }
    };
    match kept {
        // A job's 202 is its reference, not its result: a re-run route tells its state.
        Some(answer) if !(rerun && answer.status() == StatusCode::ACCEPTED.as_u16()) => {
            Some(Entitled::Kept(answer))
        }
        _ if rerun => Some(Entitled::Rerun(receipt)),
        _ => None,
    }
}

impl SignIn {
    /// `required` (a rejection's quote, encoded afresh anyway) with a fresh
    /// challenge in its declaration in place of the placeholders.
    pub(crate) fn refresh_challenge(&self, required: &mut PaymentRequired) {
        let Some(info) = (required.extensions.as_mut())
            .and_then(|extensions| extensions.get_mut(SIGN_IN_WITH_X))
            .and_then(|declaration| declaration.get_mut("info"))
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        let now_secs = self.clock.now_unix_secs();
        let Some(nonce) = self.mint_nonce(now_secs) else {
            // No randomness: the placeholder nonce never verifies.
            return;
        };
        let millis = i64::try_from(now_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        let expires = millis.saturating_add(i64::try_from(SIWX_MAX_AGE_SECS * 1000).unwrap_or(0));
        let time = |millis| Value::from(Timestamp::from_unix_millis(millis).as_str());
        info.insert("issuedAt".into(), time(millis));
        info.insert("expirationTime".into(), time(expires));
        info.insert("nonce".into(), Value::from(nonce));
    }
}

/// `"expirationTime":…,"issuedAt":…,"nonce":…` as serialized: the bytes a
/// fresh challenge replaces.
fn dynamic_run(expires: &str, issued: &str, nonce: &str) -> String {
    format!(r#""expirationTime":"{expires}","issuedAt":"{issued}","nonce":"{nonce}""#)
}

fn placeholder_nonce() -> String {
    "0".repeat(NONCE_BYTES * 2)
}

/// Where a quote's challenge lies in its body and in its base64
/// `PAYMENT-REQUIRED`, found once per quote: a fresh one is spliced in
/// without serializing anything.
#[derive(Clone, Debug)]
pub(crate) struct QuoteTemplate {
    run_len: usize,
    body_at: usize,
    header: String,
    /// The header's decoded bytes around the run, whole base64 groups.
    header_block: Vec<u8>,
    block_at: usize,
    header_chars: Range<usize>,
}

impl QuoteTemplate {
    /// The template of a quote's `body` and `headers`, if both carry the
    /// placeholder challenge once.
    pub(crate) fn find(body: &[u8], headers: &HeaderMap) -> Option<Self> {
        let run = dynamic_run(PLACEHOLDER_TIME, PLACEHOLDER_TIME, &placeholder_nonce());
        let body_at = find(body, run.as_bytes())?;
        let header = headers
            .get(header::PAYMENT_REQUIRED)?
            .to_str()
            .ok()?
            .to_owned();
        let json = STANDARD.decode(&header).ok()?;
        let at = find(&json, run.as_bytes())?;
        let start = at / 3 * 3;
        let end = (at + run.len()).div_ceil(3) * 3;
        // A run ending in the last, padded group would change the padding.
        if end > json.len() || (end == json.len() && json.len() % 3 != 0) {
            return None;
        }
        Some(Self {
            run_len: run.len(),
            body_at,
            header_block: json[start..end].to_vec(),
            block_at: at - start,
            header_chars: start / 3 * 4..end / 3 * 4,
            header,
        })
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The declaration's JSON Schema (draft 2020-12), as the official server's.
fn schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "domain": {"type": "string"},
            "address": {"type": "string"},
            "statement": {"type": "string"},
            "uri": {"type": "string", "format": "uri"},
            "version": {"type": "string"},
            "chainId": {"type": "string"},
            "type": {"type": "string"},
            "nonce": {"type": "string"},
            "issuedAt": {"type": "string", "format": "date-time"},
            "expirationTime": {"type": "string", "format": "date-time"},
            "notBefore": {"type": "string", "format": "date-time"},
            "requestId": {"type": "string"},
            "resources": {"type": "array", "items": {"type": "string", "format": "uri"}},
            "signature": {"type": "string"}
        },
        "required": ["domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::x402::wire::types::{PaymentRequired, ResourceInfo};

    const NOW: u64 = 1_750_000_000;
    fn sign_in(clock: &FakeClock, key: [u8; 32]) -> SignIn {
        SignIn::new(
            SignInWithX::with_key(key),
            "https://pay.example/gw",
            [84532],
            Arc::new(clock.clone()),
        )
        .unwrap()
    }

    /// A quote for `url` declaring `sign_in`'s challenge, placeholders and all.
    fn declaring(sign_in: &SignIn, url: &str) -> PaymentRequired {
        let mut extensions = Map::new();
        extensions.insert(SIGN_IN_WITH_X.into(), sign_in.declaration(url));
        PaymentRequired {
            x402_version: 2,
            error: Some("Payment required".into()),
            resource: ResourceInfo {
                url: url.into(),
                ..ResourceInfo::default()
            },
            accepts: Vec::new(),
            extensions: Some(extensions),
        }
    }

    /// The nonce of `info`, a challenge for `url` issued now by `sign_in`.
    fn fresh_nonce(sign_in: &SignIn, info: &Value, url: &str) -> String {
        assert_eq!(info["issuedAt"], "2025-06-15T15:06:40.000Z");
        assert_eq!(info["expirationTime"], "2025-06-15T15:11:40.000Z");
        assert_eq!(info["uri"], url);
        let nonce = info["nonce"].as_str().unwrap().to_owned();
        assert_eq!(sign_in.nonce_issued_at(&nonce), Some(NOW));
        nonce
    }

    #[test]
    fn nonces_are_hex_tagged_and_checked_with_the_key_that_issued_them() {
        let clock = FakeClock::at_unix_secs(NOW);
        let one = sign_in(&clock, [1; 32]);
        let other = sign_in(&clock, [2; 32]);
        let nonce = one.mint_nonce(NOW).unwrap();
        assert_eq!(nonce.len(), 64);
        assert!(nonce.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(nonce, one.mint_nonce(NOW).unwrap());
        assert_eq!(one.nonce_issued_at(&nonce), Some(NOW));
        assert_eq!(other.nonce_issued_at(&nonce), None);
        // Any change breaks the tag: the time, the length, the case.
        let mut later = nonce.clone().into_bytes();
        later[7] = if later[7] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            one.nonce_issued_at(std::str::from_utf8(&later).unwrap()),
            None
        );
        assert_eq!(one.nonce_issued_at(&nonce[..62]), None);
        assert_eq!(one.nonce_issued_at(&"0".repeat(64)), None);
    }

    #[test]
    fn the_origin_is_the_public_urls_without_its_prefix_and_solana_alone_declares_nothing() {
        let clock = FakeClock::at_unix_secs(NOW);
        let sign_in = sign_in(&clock, [1; 32]);
        assert_eq!(sign_in.origin, "https://pay.example");
        assert_eq!(sign_in.domain, "pay.example");
        let none = SignIn::new(
            SignInWithX::with_key([1; 32]),
            "https://pay.example",
            [],
            Arc::new(clock.clone()),
        );
        assert!(none.is_none());
    }

    #[test]
    fn each_fill_splices_a_fresh_challenge_into_body_and_header_alike() {
        let clock = FakeClock::at_unix_secs(NOW);
        let sign_in = sign_in(&clock, [1; 32]);
        let url = "https://pay.example/gw/v1/chat/completions";
        let required = declaring(&sign_in, url);
        // The quote's two renderings: its body (a JSON document holding the
        // extensions) and its base64 header.
        let mut quote = Response::new(Bytes::from(
            serde_json::to_vec(&json!({"x402Version": 2, "extensions": required.extensions}))
                .unwrap(),
        ));
        let encoded = crate::x402::wire::codec::encode(&required);
        quote.headers_mut().insert(
            header::PAYMENT_REQUIRED,
            HeaderValue::from_str(&encoded).unwrap(),
        );
        let template = QuoteTemplate::find(quote.body(), quote.headers()).unwrap();
        let mut nonces = Vec::new();
        for _ in 0..2 {
            let filled = sign_in.fill(&template, quote.clone());
            let header: PaymentRequired = crate::x402::wire::codec::decode(
                filled.headers()[header::PAYMENT_REQUIRED].as_bytes(),
            )
            .unwrap();
            let body: Value = serde_json::from_slice(filled.body()).unwrap();
            let info = &header.extensions.as_ref().unwrap()[SIGN_IN_WITH_X]["info"];
            assert_eq!(&body["extensions"][SIGN_IN_WITH_X]["info"], info);
            nonces.push(fresh_nonce(&sign_in, info, url));
            // Everything else is the quote as built.
            assert_eq!(header.accepts, required.accepts);
        }
        assert_ne!(nonces[0], nonces[1]);
    }

    #[test]
    fn a_rejections_quote_gets_a_fresh_challenge_that_verifies() {
        let clock = FakeClock::at_unix_secs(NOW);
        let sign_in = sign_in(&clock, [1; 32]);
        let url = "https://pay.example/gw/v1/chat/completions";
        let mut required = declaring(&sign_in, url);
        let mut nonces = Vec::new();
        for _ in 0..2 {
            sign_in.refresh_challenge(&mut required);
            let info = &required.extensions.as_ref().unwrap()[SIGN_IN_WITH_X]["info"];
            nonces.push(fresh_nonce(&sign_in, info, url));
        }
        assert_ne!(nonces[0], nonces[1]);
        // A quote without the declaration is left as it is.
        let mut bare = PaymentRequired {
            extensions: None,
            ..required
        };
        sign_in.refresh_challenge(&mut bare);
        assert!(bare.extensions.is_none());
    }

    /// Accepts one signature for one wallet, as a contract wallet's own check would.
    struct OneWallet {
        wallet: Address,
        signature: Vec<u8>,
    }

    impl ContractSignatures for OneWallet {
        fn is_valid_signature<'a>(
            &'a self,
            chain_id: u64,
            wallet: Address,
            _digest: B256,
            signature: &'a [u8],
        ) -> BoxFuture<'a, bool> {
            let valid = chain_id == 84532 && wallet == self.wallet && signature == self.signature;
            Box::pin(async move { valid })
        }
    }

    #[tokio::test]
    async fn a_contract_wallets_proof_is_judged_by_the_wallet_when_it_can_be_asked() {
        let clock = FakeClock::at_unix_secs(NOW);
        let wallet: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
            .parse()
            .unwrap();
        let signature = vec![0x42; 97];
        let proof = |sign_in: &SignIn| {
            let nonce = sign_in.mint_nonce(NOW).unwrap();
            let fields = json!({
                "domain": "pay.example", "address": wallet.to_checksum(None),
                "uri": "https://pay.example/gw/v1/chat/completions", "version": "1",
                "chainId": "eip155:84532", "type": "eip191", "nonce": nonce,
                "issuedAt": "2025-06-15T15:06:40.000Z",
                "signature": format!("0x{}", hex::encode(&signature)),
            });
            STANDARD.encode(fields.to_string())
        };
        let eoa_only = sign_in(&clock, [1; 32]);
        assert_eq!(eoa_only.verify(proof(&eoa_only).as_bytes()).await, None);
        let contracts = Arc::new(OneWallet {
            wallet,
            signature: signature.clone(),
        });
        let with_contracts = SignIn::new(
            SignInWithX::with_key([1; 32]).with_contract_signatures(contracts),
            "https://pay.example/gw",
            [84532],
            Arc::new(clock.clone()),
        )
        .unwrap();
        let accepted = with_contracts
            .verify(proof(&with_contracts).as_bytes())
            .await;
        assert_eq!(accepted, Some(format!("{wallet:#x}")));
    }
}

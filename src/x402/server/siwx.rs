//! The `sign-in-with-x` extension (CAIP-122, EVM wallets): a wallet that paid
//! for an operation signs in and gets the answer it paid for again, uncharged.
//!
//! Each 402 declares a fresh challenge (`domain`, `uri`, `nonce`, `issuedAt`,
//! `expirationTime`) and the EVM networks it accepts. The nonce is stateless:
//! its issue time, a sequence number and a SipHash-2-4 tag under the layer's
//! key, in hex (`SignIn::mint_nonce` says why that suffices). Declaring
//! one costs a MAC of 16 bytes and a splice into the quote's
//! `PAYMENT-REQUIRED` (built once per resource), no system call; nothing is written, so a flood of
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
use std::hash::Hasher as _;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use alloy_primitives::{eip191_hash_message, hex, keccak256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::{BufMut as _, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use siphasher::sip128::{Hasher128 as _, SipHasher24};
use subtle::ConstantTimeEq as _;

use super::answers::KeptAnswer;
use super::entitlements::{EntitlementStore, entitlement_key};
use super::receipt::PaymentReceipt;
use crate::clock::SharedClock;
use crate::envelope::header;
use crate::siwe::{
    DEFAULT_LEEWAY_SECS, InMemoryNonceStore, NonceStore, NonceStoreError, SiweMessage,
    SiweMessageFields, Timestamp,
};
use crate::x402::facilitator::ContractSignatures;
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

/// Bytes of a nonce: issue time (4), sequence number (12), tag (16).
const NONCE_BYTES: usize = 32;

/// The bytes the tag covers: issue time and sequence number.
const TAGGED_BYTES: usize = 16;

/// What stands for the per-402 fields in a quote built once.
const PLACEHOLDER_TIME: &str = "1970-01-01T00:00:00.000Z";

/// The serialized per-402 fields up to the nonce's digits:
/// `"expirationTime":"…","issuedAt":"…","nonce":"` (see [`dynamic_run`]).
const TIMES_LEN: usize =
    "\"expirationTime\":\"\",\"issuedAt\":\"\",\"nonce\":\"".len() + 2 * PLACEHOLDER_TIME.len();

/// The serialized per-402 fields, closing quote included: what a fresh
/// challenge replaces in a quote.
const RUN_LEN: usize = TIMES_LEN + NONCE_BYTES * 2 + 1;

/// The decoded bytes of the whole base64 groups covering the run: at most
/// two more before it and two after.
const BLOCK_MAX: usize = RUN_LEN + 4;

/// The base64 groups of a block before its nonce's first group, at most.
const TIMES_GROUPS_MAX: usize = TIMES_LEN.div_ceil(3) * 4;

/// The base64 groups from the nonce's first group to the block's end, at most.
const NONCE_GROUPS_MAX: usize = (NONCE_BYTES * 2 + 1 + 4) / 3 * 4 + 4;

/// The domain separation of the tag key derived from the layer's key.
const TAG_KEY_CONTEXT: &[u8] = b"walletgate sign-in-with-x nonce tag v1";

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
        Ok(Self::new_with_key(key))
    }

    /// With `key`, the key of its nonces' tags: replicas share it.
    pub fn new_with_key(key: [u8; 32]) -> Self {
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
    /// The SipHash-2-4 key of nonce tags, derived from the layer's key.
    tag_key: [u8; 16],
    /// Where this process's nonce sequence numbers start (96 random bits,
    /// read once), and how many it issued.
    sequence_start: u128,
    issued: AtomicU64,
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
    /// alone: nothing to sign in with), or without randomness for the
    /// sequence's start (warned).
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
        let mut start = [0u8; 16];
        if let Err(_error) = getrandom::fill(&mut start) {
            trace_warn!(error = %_error, "no randomness: sign-in-with-x is not declared");
            return None;
        }
        let mut tag_key = [0u8; 16];
        tag_key.copy_from_slice(&keccak256([TAG_KEY_CONTEXT, &config.key].concat())[..16]);
        Some(Self {
            tag_key,
            sequence_start: u128::from_be_bytes(start),
            issued: AtomicU64::new(0),
            origin: format!("{scheme}://{domain}"),
            domain,
            chain_ids,
            supported_chains,
            spent: config
                .spent_nonces
                .unwrap_or_else(|| Arc::new(InMemoryNonceStore::new())),
            contracts: config.contracts,
            clock,
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
    /// issued at `now_secs` (whole seconds); `None` past year 9999, whose
    /// times no longer fit the quote.
    fn times_of(now_secs: u64) -> Option<[u8; TIMES_LEN]> {
        let millis = i64::try_from(now_secs.saturating_mul(1000)).ok()?;
        let issued = Timestamp::from_unix_millis(millis);
        let expires = Timestamp::from_unix_millis(
            millis.saturating_add(i64::try_from(SIWX_MAX_AGE_SECS * 1000).ok()?),
        );
        let run = dynamic_run(expires.as_str(), issued.as_str(), "");
        run.as_bytes()[..run.len() - 1].try_into().ok()
    }

    /// A fresh nonce issued at `now_secs`, in hex: the time (4 bytes), a
    /// sequence number (12) and their SipHash-2-4 tag (16).
    ///
    /// A nonce must be unique (a spent one is never issued again) and
    /// unforgeable (a proof names only nonces this server issued within five
    /// minutes); it need not be unpredictable, since anyone may ask for a
    /// fresh 402 and so get a valid nonce: what a signature binds is the
    /// wallet, the domain and the nonce together. So the sequence number is a
    /// random 96-bit start read once per process plus a counter (unique for
    /// 2^64 nonces; replicas sharing the key start apart with overwhelming
    /// probability), and no 402 pays for a read of the system's randomness.
    ///
    /// The tag is SipHash-2-4 with its 128-bit output, keyed with 128 bits
    /// derived from the layer's key: SipHash is a pseudorandom function
    /// designed as a MAC of short inputs (Aumasson and Bernstein, 2012), about
    /// 300 instructions for these 16 bytes where HMAC-SHA256 and a keyed
    /// Keccak each took about 7,000. A forger without the key guesses a tag
    /// (one online try per proof) with probability 2^-64 at worst (the bound
    /// its 64-bit output is designed for), and the tag is checked in
    /// constant time.
    fn mint_nonce(&self, now_secs: u64) -> Option<[u8; NONCE_BYTES * 2]> {
        let mut bytes = [0u8; NONCE_BYTES];
        bytes[..4].copy_from_slice(&u32::try_from(now_secs).ok()?.to_be_bytes());
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let sequence = self
            .sequence_start
            .wrapping_add(u128::from(n))
            .to_be_bytes();
        bytes[4..TAGGED_BYTES].copy_from_slice(&sequence[4..]);
        let tag = self.tag(&bytes[..TAGGED_BYTES]);
        bytes[TAGGED_BYTES..].copy_from_slice(&tag);
        let mut digits = [0u8; NONCE_BYTES * 2];
        hex::encode_to_slice(bytes, &mut digits).ok()?;
        Some(digits)
    }

    /// When `nonce` was issued, if this server issued it (its tag holds).
    fn nonce_issued_at(&self, nonce: &str) -> Option<u64> {
        if nonce.len() != NONCE_BYTES * 2 {
            return None;
        }
        let bytes: [u8; NONCE_BYTES] = hex::decode_to_array(nonce).ok()?;
        let tag = self.tag(&bytes[..TAGGED_BYTES]);
        if !bool::from(tag.ct_eq(&bytes[TAGGED_BYTES..])) {
            return None;
        }
        Some(u64::from(u32::from_be_bytes(bytes[..4].try_into().ok()?)))
    }

    fn tag(&self, message: &[u8]) -> [u8; 16] {
        let mut mac = SipHasher24::new_with_key(&self.tag_key);
        mac.write(message);
        mac.finish128().as_bytes()
    }

    /// `template`'s quote with a fresh challenge in place of the placeholders.
    ///
    /// Per 402: the nonce, one copy of `PAYMENT-REQUIRED` (the one place the
    /// challenge is; the body is shared as built), and the base64 of the
    /// groups holding the nonce; the times' groups change once a second.
    pub(crate) fn fill(
        &self,
        template: &QuoteTemplate,
        mut quote: Response<Bytes>,
    ) -> Response<Bytes> {
        let now_secs = self.clock.now_unix_secs();
        // Past 2106 or year 9999: the placeholder nonce never verifies.
        let (Some(second), Some(nonce)) = (template.second(now_secs), self.mint_nonce(now_secs))
        else {
            return quote;
        };
        let mut groups = [0u8; BLOCK_MAX];
        let groups = &mut groups[..template.header_block.len() - template.nonce_groups_at];
        groups.copy_from_slice(&template.header_block[template.nonce_groups_at..]);
        let at = template.block_at + TIMES_LEN - template.nonce_groups_at;
        groups[at..at + nonce.len()].copy_from_slice(&nonce);
        let mut encoded = [0u8; NONCE_GROUPS_MAX];
        let Some(encoded) = encoded.get_mut(..base64_simd::STANDARD.encoded_length(groups.len()))
        else {
            return quote;
        };
        let encoded = base64_simd::STANDARD.encode(groups, base64_simd::Out::from_slice(encoded));
        let header = concat(&[
            &template.header[..template.header_chars.start],
            &second.times_groups[..second.times_groups_len],
            encoded,
            &template.header[template.header_chars.end..],
        ]);
        if let Ok(value) = HeaderValue::from_maybe_shared(header) {
            quote.headers_mut().insert(header::PAYMENT_REQUIRED, value);
        }
        quote
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
            // Past 2106 (the issue time no longer fits): the placeholder never verifies.
            return;
        };
        let nonce = String::from_utf8_lossy(&nonce).into_owned();
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

/// Where a quote's challenge lies in its base64 `PAYMENT-REQUIRED`, found
/// once per quote: a fresh one is spliced in without serializing anything.
#[derive(Debug)]
pub(crate) struct QuoteTemplate {
    /// `PAYMENT-REQUIRED` as built.
    header: Bytes,
    /// The header's decoded bytes around the run, whole base64 groups.
    header_block: Vec<u8>,
    block_at: usize,
    /// Where in the block the group holding the nonce's first digit starts:
    /// the groups before it change once a second, the rest with each nonce.
    nonce_groups_at: usize,
    header_chars: Range<usize>,
    /// The times of the current second, as the block's groups before
    /// `nonce_groups_at` in base64.
    second: Mutex<Second>,
}

/// A second's share of every challenge issued in it.
#[derive(Clone, Copy, Debug)]
struct Second {
    unix_secs: u64,
    times_groups: [u8; TIMES_GROUPS_MAX],
    times_groups_len: usize,
}

impl QuoteTemplate {
    /// The template of a quote's `headers`, if `PAYMENT-REQUIRED` carries
    /// the placeholder challenge.
    pub(crate) fn find(headers: &HeaderMap) -> Option<Self> {
        let run = dynamic_run(PLACEHOLDER_TIME, PLACEHOLDER_TIME, &placeholder_nonce());
        if run.len() != RUN_LEN {
            return None;
        }
        let header = Bytes::copy_from_slice(headers.get(header::PAYMENT_REQUIRED)?.as_bytes());
        let json = STANDARD.decode(&header).ok()?;
        let at = find(&json, run.as_bytes())?;
        let start = at / 3 * 3;
        let end = (at + run.len()).div_ceil(3) * 3;
        // A run ending in the last, padded group would change the padding.
        if end > json.len() || (end == json.len() && json.len() % 3 != 0) {
            return None;
        }
        let block_at = at - start;
        Some(Self {
            header_block: json[start..end].to_vec(),
            block_at,
            nonce_groups_at: (block_at + TIMES_LEN) / 3 * 3,
            header_chars: start / 3 * 4..end / 3 * 4,
            header,
            second: Mutex::new(Second {
                unix_secs: u64::MAX,
                times_groups: [0; TIMES_GROUPS_MAX],
                times_groups_len: 0,
            }),
        })
    }

    /// The share of second `now_secs` (whole seconds) in its challenges.
    fn second(&self, now_secs: u64) -> Option<Second> {
        let mut second = self.second.lock().unwrap_or_else(PoisonError::into_inner);
        if second.unix_secs != now_secs {
            let times = SignIn::times_of(now_secs)?;
            let mut groups = [0u8; BLOCK_MAX];
            let groups = &mut groups[..self.nonce_groups_at];
            groups.copy_from_slice(&self.header_block[..self.nonce_groups_at]);
            groups[self.block_at..].copy_from_slice(&times[..self.nonce_groups_at - self.block_at]);
            let mut times_groups = [0u8; TIMES_GROUPS_MAX];
            let times_groups_len = STANDARD.encode_slice(groups, &mut times_groups).ok()?;
            *second = Second {
                unix_secs: now_secs,
                times_groups,
                times_groups_len,
            };
        }
        Some(*second)
    }
}

/// `parts` one after another, in one buffer.
fn concat(parts: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        out.put_slice(part);
    }
    out.freeze()
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
    use alloy_primitives::{Address, B256};

    use super::*;
    use crate::clock::FakeClock;
    use crate::store::BoxFuture;
    use crate::x402::wire::types::{PaymentRequired, ResourceInfo};

    const NOW: u64 = 1_750_000_000;
    fn sign_in(clock: &FakeClock, key: [u8; 32]) -> SignIn {
        SignIn::new(
            SignInWithX::new_with_key(key),
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

    /// A nonce `sign_in` issues at `now`, as text.
    fn minted(sign_in: &SignIn, now: u64) -> String {
        String::from_utf8(sign_in.mint_nonce(now).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn nonces_are_hex_tagged_and_checked_with_the_key_that_issued_them() {
        let clock = FakeClock::at_unix_secs(NOW);
        let one = sign_in(&clock, [1; 32]);
        let other = sign_in(&clock, [2; 32]);
        let nonce = minted(&one, NOW);
        assert_eq!(nonce.len(), 64);
        assert!(nonce.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(nonce, minted(&one, NOW));
        assert_eq!(one.nonce_issued_at(&nonce), Some(NOW));
        assert_eq!(other.nonce_issued_at(&nonce), None);
        // A replica sharing the key checks it, and issues nonces of its own
        // (its sequence starts elsewhere).
        let replica = sign_in(&clock, [1; 32]);
        assert_eq!(replica.nonce_issued_at(&nonce), Some(NOW));
        let theirs = minted(&replica, NOW);
        assert_ne!(theirs[8..32], nonce[8..32]);
        assert_eq!(one.nonce_issued_at(&theirs), Some(NOW));
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
            SignInWithX::new_with_key([1; 32]),
            "https://pay.example",
            [],
            Arc::new(clock.clone()),
        );
        assert!(none.is_none());
    }

    #[test]
    fn each_fill_splices_a_fresh_challenge_into_the_header_and_shares_the_body() {
        let clock = FakeClock::at_unix_secs(NOW);
        let sign_in = sign_in(&clock, [1; 32]);
        // Three URL lengths: the challenge at each offset within a base64 group.
        for url in [
            "https://pay.example/gw/v1/chat/completions",
            "https://pay.example/gw/v1/chat/completions?a",
            "https://pay.example/gw/v1/chat/completions?ab",
        ] {
            clock.set_unix_secs(NOW);
            let required = declaring(&sign_in, url);
            // The quote as built: a body without the extensions and the
            // base64 header declaring them.
            let mut quote = Response::new(Bytes::from(
                serde_json::to_vec(&json!({"x402Version": 2, "accepts": required.accepts}))
                    .unwrap(),
            ));
            let encoded = crate::x402::wire::codec::encode(&required);
            quote.headers_mut().insert(
                header::PAYMENT_REQUIRED,
                HeaderValue::from_str(&encoded).unwrap(),
            );
            let template = QuoteTemplate::find(quote.headers()).unwrap();
            let mut nonces = Vec::new();
            // Two challenges in one second, then one in the next.
            for (issued, expires) in [
                ("2025-06-15T15:06:40.000Z", "2025-06-15T15:11:40.000Z"),
                ("2025-06-15T15:06:40.000Z", "2025-06-15T15:11:40.000Z"),
                ("2025-06-15T15:06:41.000Z", "2025-06-15T15:11:41.000Z"),
            ] {
                if nonces.len() == 2 {
                    clock.advance(std::time::Duration::from_secs(1));
                }
                let filled = sign_in.fill(&template, quote.clone());
                let header: PaymentRequired = crate::x402::wire::codec::decode(
                    filled.headers()[header::PAYMENT_REQUIRED].as_bytes(),
                )
                .unwrap();
                // The body is the quote's own bytes, not a copy.
                assert_eq!(filled.body().as_ptr(), quote.body().as_ptr());
                let info = &header.extensions.as_ref().unwrap()[SIGN_IN_WITH_X]["info"];
                assert_eq!(info["issuedAt"], issued);
                assert_eq!(info["expirationTime"], expires);
                assert_eq!(info["uri"], url);
                let nonce = info["nonce"].as_str().unwrap().to_owned();
                let at = NOW + u64::from(nonces.len() == 2);
                assert_eq!(sign_in.nonce_issued_at(&nonce), Some(at));
                nonces.push(nonce);
                // Everything else is the quote as built.
                assert_eq!(header.accepts, required.accepts);
                assert_eq!(header.resource, required.resource);
            }
            assert_ne!(nonces[0], nonces[1]);
            assert_ne!(nonces[1], nonces[2]);
        }
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
            let nonce = minted(sign_in, NOW);
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
            SignInWithX::new_with_key([1; 32]).with_contract_signatures(contracts),
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

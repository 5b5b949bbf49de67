//! The answer store: paid answers kept for a resend.
//!
//! A paid answer the client may not have received is kept here: the answer
//! of a settlement whose outcome was not known yet (so the resend of the same
//! payment gets it once the transfer landed, without a second upstream call),
//! and, with the `payment-identifier` extension, the answer of a payment
//! under its id. Each answer is bounded ([`AnswerLimits::max_answer_bytes`],
//! default 1 MiB: a larger answer is not kept), kept for a retention
//! (default an hour), and the in-memory store is bounded in total
//! ([`InMemoryAnswerStore::with_capacity_bytes`], default 256 MiB: the
//! answers nearest their expiry make room).
//!
//! Besides answers a key may hold an in-flight *marker* ([`AnswerStore::begin`]):
//! the first request under a key marks it, a concurrent one finds the marker
//! (on any replica sharing the store) and is told to retry, a later one finds
//! the kept answer.
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::x402::server::{AnswerStore, Begun, InMemoryAnswerStore, KeptAnswer};
//!
//! # tokio_test_block_on(async {
//! let store = InMemoryAnswerStore::new(Arc::new(FakeClock::at_unix_secs(1000)));
//! assert_eq!(store.begin("id:abc", "owner", 1600).await?, Begun::Started);
//! assert_eq!(store.begin("id:abc", "other", 1600).await?, Begun::InFlight("owner".into()));
//! let answer = KeptAnswer::new(200, "owner", bytes::Bytes::from_static(b"{}"));
//! assert!(store.keep("id:abc", &answer, 4600).await?);
//! assert_eq!(store.begin("id:abc", "other", 1600).await?, Begun::Kept(answer));
//! # Ok::<(), walletgate::store::StoreError>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::fmt;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::clock::SharedClock;
use crate::envelope::header;
use crate::store::{BoxFuture, StoreError};
use crate::x402::expiring::{ExpiringMap, LocalDigest, local_digest};

/// Default bound of one kept answer: 1 MiB.
pub const DEFAULT_ANSWER_MAX_BYTES: usize = 1024 * 1024;

/// Default bound of the in-memory store: 256 MiB.
pub const DEFAULT_ANSWER_STORE_BYTES: usize = 256 * 1024 * 1024;

/// Default retention of a kept answer: an hour.
pub const DEFAULT_ANSWER_RETENTION_SECS: u64 = 3600;

/// How large a kept answer may be and how long it is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerLimits {
    /// The largest answer kept (headers and body); a larger one is not kept.
    pub max_answer_bytes: usize,
    /// Seconds an answer is kept at least.
    pub retention_secs: u64,
}

impl Default for AnswerLimits {
    fn default() -> Self {
        Self {
            max_answer_bytes: DEFAULT_ANSWER_MAX_BYTES,
            retention_secs: DEFAULT_ANSWER_RETENTION_SECS,
        }
    }
}

/// Headers never kept: they describe one transfer, not the answer.
const UNKEPT_HEADERS: [&str; 6] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "date",
    "set-cookie",
    "payment-response",
];

/// A paid answer as kept: its status, the headers that describe it, its
/// body, its `PAYMENT-RESPONSE` once settled, and whom it belongs to (the
/// caller's binding, compared on a later lookup).
#[derive(Clone, PartialEq, Eq)]
pub struct KeptAnswer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Bytes,
    payment_response: Option<String>,
    binding: String,
}

impl KeptAnswer {
    /// An answer with `status` and `body`, bound to `binding`.
    pub fn new(status: u16, binding: impl Into<String>, body: Bytes) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body,
            payment_response: None,
            binding: binding.into(),
        }
    }

    /// Keeps the headers of `headers` that describe the answer (not its
    /// length, date, cookies or settlement).
    #[must_use]
    pub fn with_headers(mut self, headers: &HeaderMap) -> Self {
        self.headers = headers
            .iter()
            .filter(|(name, _)| !UNKEPT_HEADERS.contains(&name.as_str()))
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect();
        self
    }

    /// Sets the `PAYMENT-RESPONSE` (base64 settlement) it is answered with.
    #[must_use]
    pub fn with_payment_response(mut self, value: impl Into<String>) -> Self {
        self.payment_response = Some(value.into());
        self
    }

    /// The same answer bound to `binding`.
    #[must_use]
    pub fn with_binding(mut self, binding: impl Into<String>) -> Self {
        self.binding = binding.into();
        self
    }

    /// The status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The `PAYMENT-RESPONSE`, once settled.
    pub fn payment_response(&self) -> Option<&str> {
        self.payment_response.as_deref()
    }

    /// Whom it belongs to.
    pub fn binding(&self) -> &str {
        &self.binding
    }

    /// Whether it is a Server-Sent Events stream.
    pub fn is_event_stream(&self) -> bool {
        self.headers.iter().any(|(name, value)| {
            name == "content-type"
                && value
                    .trim_ascii_start()
                    .to_ascii_lowercase()
                    .starts_with(b"text/event-stream")
        })
    }

    /// The same answer with `more` after its body (a stream's receipt event).
    #[must_use]
    pub fn with_appended(mut self, more: &[u8]) -> Self {
        let mut body = self.body.to_vec();
        body.extend_from_slice(more);
        self.body = Bytes::from(body);
        self
    }

    /// Bytes it takes: body, headers, settlement and binding.
    pub fn size(&self) -> usize {
        self.body.len()
            + self.binding.len()
            + self.payment_response.as_ref().map_or(0, String::len)
            + self
                .headers
                .iter()
                .map(|(name, value)| name.len() + value.len())
                .sum::<usize>()
    }

    /// The answer as a response: its status, headers, `PAYMENT-RESPONSE` and body.
    pub fn to_response(&self) -> Response<Bytes> {
        let mut response = Response::new(self.body.clone());
        *response.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(value),
            ) {
                headers.append(name, value);
            }
        }
        if let Some(value) = self
            .payment_response
            .as_deref()
            .and_then(|value| HeaderValue::from_str(value).ok())
        {
            headers.insert(header::PAYMENT_RESPONSE, value);
        }
        response
    }

    /// The answer as bytes (for a shared store): a JSON head of length-prefixed size, then the body.
    pub fn encode(&self) -> Vec<u8> {
        let head = serde_json::json!({
            "status": self.status,
            "headers": self.headers.iter().map(|(name, value)| {
                (name.clone(), alloy_primitives::hex::encode(value))
            }).collect::<Vec<_>>(),
            "paymentResponse": self.payment_response,
            "binding": self.binding,
        })
        .to_string();
        let mut bytes = Vec::with_capacity(4 + head.len() + self.body.len());
        bytes.extend_from_slice(&u32::try_from(head.len()).unwrap_or(u32::MAX).to_be_bytes());
        bytes.extend_from_slice(head.as_bytes());
        bytes.extend_from_slice(&self.body);
        bytes
    }

    /// Reads back what [`encode`](Self::encode) wrote.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let length = usize::try_from(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?)).ok()?;
        let head: serde_json::Value = serde_json::from_slice(bytes.get(4..4 + length)?).ok()?;
        let body = Bytes::copy_from_slice(bytes.get(4 + length..)?);
        let headers = head
            .get("headers")?
            .as_array()?
            .iter()
            .map(|pair| {
                let name = pair.get(0)?.as_str()?.to_owned();
                let value = alloy_primitives::hex::decode(pair.get(1)?.as_str()?).ok()?;
                Some((name, value))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            status: u16::try_from(head.get("status")?.as_u64()?).ok()?,
            headers,
            body,
            payment_response: head
                .get("paymentResponse")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            binding: head.get("binding")?.as_str()?.to_owned(),
        })
    }
}

impl fmt::Debug for KeptAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The body is paid content: its size only.
        f.debug_struct("KeptAnswer")
            .field("status", &self.status)
            .field("body_bytes", &self.body.len())
            .field("settled", &self.payment_response.is_some())
            .finish_non_exhaustive()
    }
}

/// What [`AnswerStore::begin`] found under a key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Begun {
    /// Nothing: the key now holds the caller's marker.
    Started,
    /// Another request's marker (its text): that request is still in flight.
    InFlight(String),
    /// A kept answer.
    Kept(KeptAnswer),
}

/// Where paid answers (and in-flight markers) are kept, by key.
///
/// `begin` must be atomic: of two concurrent `begin`s of one key, one gets
/// [`Begun::Started`].
pub trait AnswerStore: Send + Sync + 'static {
    /// Marks `key` in flight with `marker` until `hold_until_unix_secs`
    /// unless it holds a marker or an answer already: then that.
    fn begin<'a>(
        &'a self,
        key: &'a str,
        marker: &'a str,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Begun, StoreError>>;

    /// Keeps `answer` under `key` until `keep_until_unix_secs`, replacing a
    /// marker or an earlier answer. `Ok(false)`: not kept (larger than the
    /// store takes).
    fn keep<'a>(
        &'a self,
        key: &'a str,
        answer: &'a KeptAnswer,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// The answer kept under `key`, if any (a marker is none).
    fn kept<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>>;

    /// Removes what `key` holds (a marker given back, an answer no longer owed).
    ///
    /// Like [`NonceStore::release`](super::NonceStore::release), it starts
    /// when called (a request whose client went away gives its marker back
    /// from `Drop`, unawaited); the future only waits for it. A marker that
    /// cannot be removed expires at its hold-until.
    fn forget(&self, key: &str) -> BoxFuture<'static, Result<(), StoreError>>;
}

forward_to_arc! { AnswerStore {
    fn begin<'a>(
        &'a self,
        key: &'a str,
        marker: &'a str,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Begun, StoreError>>;
    fn keep<'a>(
        &'a self,
        key: &'a str,
        answer: &'a KeptAnswer,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn kept<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>>;
    fn forget(&self, key: &str) -> BoxFuture<'static, Result<(), StoreError>>;
}}

/// Expired entries removed per operation at most.
const SWEEP_STEP: usize = 8;

enum Entry {
    Marker(String),
    Answer(KeptAnswer),
}

impl Entry {
    fn size(&self) -> usize {
        match self {
            Self::Marker(marker) => marker.len(),
            Self::Answer(answer) => answer.size(),
        }
    }
}

#[derive(Default)]
struct Held {
    entries: ExpiringMap<Entry>,
    bytes: usize,
}

impl Held {
    fn remove(&mut self, digest: &LocalDigest) {
        if let Some(old) = self.entries.remove(digest) {
            self.bytes -= old.size();
        }
    }

    /// Removes a few expired entries, keeping the byte count exact.
    fn sweep(&mut self, now: u64) {
        let mut freed = 0;
        self.entries
            .sweep_each(now, SWEEP_STEP, |entry| freed += entry.size());
        self.bytes -= freed;
    }
}

/// An in-process [`AnswerStore`], bounded in total: when a new answer would
/// pass the bound, the entries nearest their expiry make room.
pub struct InMemoryAnswerStore {
    clock: SharedClock,
    capacity_bytes: usize,
    held: Mutex<Held>,
}

impl InMemoryAnswerStore {
    /// An empty store of [`DEFAULT_ANSWER_STORE_BYTES`] reading time from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            capacity_bytes: DEFAULT_ANSWER_STORE_BYTES,
            held: Mutex::default(),
        }
    }

    /// Bounds the store to `bytes` in total.
    #[must_use]
    pub fn with_capacity_bytes(mut self, bytes: usize) -> Self {
        self.capacity_bytes = bytes;
        self
    }

    /// Bytes held (answers and markers).
    pub fn held_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries held, live or not yet swept.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Every update keeps the map and its count together: a poisoned lock holds consistent data.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `entry` under `digest` in `held`, making room; `false` if it can never fit.
    fn put(&self, held: &mut Held, digest: LocalDigest, entry: Entry, until: u64) -> bool {
        let size = entry.size();
        held.remove(&digest);
        if size > self.capacity_bytes {
            return false;
        }
        while held.bytes + size > self.capacity_bytes {
            match held.entries.pop_first() {
                Some((_, old)) => held.bytes -= old.size(),
                None => break,
            }
        }
        held.bytes += size;
        held.entries.insert(digest, entry, until);
        true
    }

    /// Reports what `held` holds now (the `walletgate_x402_answer_store_bytes` gauge).
    fn report(held: &Held) {
        crate::metrics::set(crate::metrics::X402_ANSWER_STORE_BYTES, held.bytes);
    }

    /// The store's lock, a few expired entries swept, and the time.
    fn swept(&self) -> (std::sync::MutexGuard<'_, Held>, u64) {
        let now = self.clock.now_unix_secs();
        let mut held = self.lock();
        held.sweep(now);
        (held, now)
    }
}

fn digest(key: &str) -> LocalDigest {
    local_digest(key.as_bytes())
}

impl AnswerStore for InMemoryAnswerStore {
    fn begin<'a>(
        &'a self,
        key: &'a str,
        marker: &'a str,
        hold_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<Begun, StoreError>> {
        let digest = digest(key);
        let (mut held, now) = self.swept();
        let begun = match held.entries.get(&digest, now) {
            Some(Entry::Marker(marker)) => Begun::InFlight(marker.clone()),
            Some(Entry::Answer(answer)) => Begun::Kept(answer.clone()),
            None => {
                let entry = Entry::Marker(marker.to_owned());
                match self.put(&mut held, digest, entry, hold_until_unix_secs) {
                    true => Begun::Started,
                    false => {
                        return Box::pin(std::future::ready(Err(StoreError::new(
                            "answer store: a marker larger than the store",
                        ))));
                    }
                }
            }
        };
        Self::report(&held);
        Box::pin(std::future::ready(Ok(begun)))
    }

    fn keep<'a>(
        &'a self,
        key: &'a str,
        answer: &'a KeptAnswer,
        keep_until_unix_secs: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let (mut held, _) = self.swept();
        let kept = self.put(
            &mut held,
            digest(key),
            Entry::Answer(answer.clone()),
            keep_until_unix_secs,
        );
        Self::report(&held);
        Box::pin(std::future::ready(Ok(kept)))
    }

    fn kept<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<KeptAnswer>, StoreError>> {
        let (held, now) = self.swept();
        let answer = match held.entries.get(&digest(key), now) {
            Some(Entry::Answer(answer)) => Some(answer.clone()),
            _ => None,
        };
        Box::pin(std::future::ready(Ok(answer)))
    }

    fn forget(&self, key: &str) -> BoxFuture<'static, Result<(), StoreError>> {
        let (mut held, _) = self.swept();
        held.remove(&digest(key));
        Self::report(&held);
        Box::pin(std::future::ready(Ok(())))
    }
}

impl fmt::Debug for InMemoryAnswerStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryAnswerStore")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("held_bytes", &self.held_bytes())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::FakeClock;

    fn answer(bytes: usize) -> KeptAnswer {
        KeptAnswer::new(200, "b", Bytes::from(vec![b'x'; bytes]))
    }

    #[tokio::test]
    async fn the_store_stays_within_its_bound_dropping_the_nearest_expiry_first() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryAnswerStore::new(Arc::new(clock)).with_capacity_bytes(10_000);
        for n in 0..100u64 {
            assert!(
                store
                    .keep(&format!("k{n}"), &answer(999), 1000 + n)
                    .await
                    .unwrap()
            );
            assert!(store.held_bytes() <= 10_000);
        }
        assert_eq!(store.len(), 10);
        assert!(store.kept("k0").await.unwrap().is_none());
        assert_eq!(store.kept("k99").await.unwrap(), Some(answer(999)));
        // Larger than the whole store: not kept, nothing else lost.
        assert!(!store.keep("big", &answer(20_000), 2000).await.unwrap());
        assert_eq!(store.len(), 10);
    }

    #[tokio::test]
    async fn ten_thousand_distinct_ids_stay_within_the_bound() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryAnswerStore::new(Arc::new(clock)).with_capacity_bytes(256 * 1024);
        let mut most = 0;
        for n in 0..10_000u64 {
            let key = format!("x402-payment-id:pay_{n:032x}");
            assert_eq!(
                store.begin(&key, "binding", 600).await.unwrap(),
                Begun::Started
            );
            assert!(store.keep(&key, &answer(1000), 3600 + n).await.unwrap());
            most = most.max(store.held_bytes());
        }
        assert!(most <= 256 * 1024, "{most}");
        // The newest answers are the ones kept.
        assert_eq!(store.len(), 256 * 1024 / answer(1000).size());
        assert!(
            store
                .kept("x402-payment-id:pay_0000000000000000000000000000270f")
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn answers_and_markers_expire_and_their_bytes_are_given_back() {
        let clock = FakeClock::at_unix_secs(0);
        let store = InMemoryAnswerStore::new(Arc::new(clock.clone()));
        store.begin("m", "owner", 10).await.unwrap();
        store.keep("a", &answer(100), 20).await.unwrap();
        clock.advance(Duration::from_secs(30));
        assert_eq!(store.begin("m", "next", 100).await.unwrap(), Begun::Started);
        assert!(store.kept("a").await.unwrap().is_none());
        assert_eq!(store.held_bytes(), "next".len());
        store.forget("m").await.unwrap();
        assert_eq!(store.held_bytes(), 0);
        assert!(store.is_empty());
    }

    #[test]
    fn an_answer_reads_back_as_encoded_with_the_headers_that_matter() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert("content-length", HeaderValue::from_static("4"));
        headers.insert(header::PAYMENT_RESPONSE, HeaderValue::from_static("old"));
        let answer = KeptAnswer::new(201, "fp/payer", Bytes::from_static(b"\x00\xffbody"))
            .with_headers(&headers)
            .with_payment_response("eyJ9");
        let back = KeptAnswer::decode(&answer.encode()).unwrap();
        assert_eq!(back, answer);
        let response = back.to_response();
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert!(!response.headers().contains_key("content-length"));
        assert_eq!(response.headers()[header::PAYMENT_RESPONSE], "eyJ9");
        assert!(KeptAnswer::decode(b"\x00\x00").is_none());
        assert!(!format!("{answer:?}").contains("body\""));
    }
}

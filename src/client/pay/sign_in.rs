//! The paying client's `sign-in-with-x`: a request it paid for before is
//! signed in for once before paying again.
//!
//! The client remembers (in memory, boundedly) the requests it paid for:
//! method, URI and body. When a 402 for one of them declares
//! `sign-in-with-x`, it signs the declared challenge (EIP-4361 text,
//! EIP-191 signature) and resends the request once with `SIGN-IN-WITH-X`, as
//! the official `wrapFetchWithSIWx` does; a server that kept the answer
//! answers it uncharged, any other answers the normal 402 and is paid.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use alloy_primitives::keccak256;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::request::Parts;
use serde_json::{Value, json};

use super::signer::PaymentSigner;
use crate::siwe::{SiweMessage, SiweMessageFields};
use crate::x402::wire::types::PaymentRequired;

/// The extension's key, and its header's name.
pub(crate) const SIGN_IN_WITH_X: &str = "sign-in-with-x";

/// Paid requests remembered at most (the oldest are forgotten first).
const PAID_REQUESTS: usize = 4096;

/// The requests this client paid for, by digest.
#[derive(Debug, Default)]
pub(crate) struct PaidRequests {
    held: Mutex<Held>,
}

/// The digests, and the order they came in (the oldest forgotten first).
#[derive(Debug, Default)]
struct Held {
    set: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

impl PaidRequests {
    /// Records a paid request.
    pub(crate) fn record(&self, request: [u8; 32]) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let Held { set, order } = &mut *held;
        if set.insert(request) {
            order.push_back(request);
            if order.len() > PAID_REQUESTS
                && let Some(oldest) = order.pop_front()
            {
                set.remove(&oldest);
            }
        }
    }

    /// Whether `request` was paid for.
    pub(crate) fn contains(&self, request: &[u8; 32]) -> bool {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.set.contains(request)
    }
}

/// A request as the client remembers it: method, URI, body.
pub(crate) fn request_digest(parts: &Parts, body: &[u8]) -> [u8; 32] {
    let mut bytes = Vec::with_capacity(body.len() + 64);
    bytes.extend_from_slice(parts.method.as_str().as_bytes());
    bytes.push(b' ');
    bytes.extend_from_slice(parts.uri.to_string().as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(body);
    keccak256(&bytes).0
}

/// The `SIGN-IN-WITH-X` value answering `quote`'s challenge for the request
/// `parts`, signed by `signer`; `None` when the quote declares none for the
/// network of its first offer, or the challenge names another origin.
pub(crate) async fn proof(
    signer: &PaymentSigner,
    quote: &PaymentRequired,
    parts: &Parts,
) -> Option<String> {
    let challenge = quote.extensions.as_ref()?.get(SIGN_IN_WITH_X)?;
    let network = quote.accepts.first()?.network.as_str();
    let chain = challenge
        .get("supportedChains")?
        .as_array()?
        .iter()
        .find(|chain| chain["chainId"] == network && chain["type"] == "eip191")?;
    let chain_id: u64 = network.strip_prefix("eip155:")?.parse().ok()?;
    let info = challenge.get("info")?;
    let text = |key: &str| info.get(key).and_then(Value::as_str).map(str::to_owned);
    let (domain, uri) = (text("domain")?, text("uri")?);
    // As the official client: a challenge for another origin is not signed.
    if let Some(authority) = parts.uri.authority()
        && !domain.eq_ignore_ascii_case(authority.as_str())
    {
        return None;
    }
    let resources = info
        .get("resources")
        .and_then(|resources| serde_json::from_value::<Vec<String>>(resources.clone()).ok());
    let fields = SiweMessageFields {
        scheme: None,
        domain,
        address: signer.address().to_owned(),
        statement: text("statement").filter(|s| !s.is_empty()),
        uri,
        version: text("version")?,
        chain_id,
        nonce: text("nonce")?,
        issued_at: text("issuedAt")?,
        expiration_time: text("expirationTime"),
        not_before: text("notBefore"),
        request_id: text("requestId"),
        resources,
    };
    let message = SiweMessage::from_fields(&fields).ok()?;
    let signature = signer.sign_message(message.to_string().as_bytes()).await?;
    let proof = json!({
        "domain": fields.domain,
        "address": fields.address,
        "statement": fields.statement,
        "uri": fields.uri,
        "version": fields.version,
        "chainId": chain["chainId"],
        "type": "eip191",
        "nonce": fields.nonce,
        "issuedAt": fields.issued_at,
        "expirationTime": fields.expiration_time,
        "notBefore": fields.not_before,
        "requestId": fields.request_id,
        "resources": fields.resources,
        "signature": signature,
    });
    Some(STANDARD.encode(proof.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paid_requests_are_remembered_within_their_bound() {
        let paid = PaidRequests::default();
        for n in 0..=PAID_REQUESTS as u32 {
            let mut request = [0u8; 32];
            request[..4].copy_from_slice(&n.to_be_bytes());
            paid.record(request);
        }
        assert!(!paid.contains(&[0; 32]), "the oldest is forgotten");
        let mut last = [0u8; 32];
        last[..4].copy_from_slice(&(PAID_REQUESTS as u32).to_be_bytes());
        assert!(paid.contains(&last));
    }

    #[test]
    fn a_request_is_its_method_uri_and_body() {
        let parts = |method: &str, uri: &str| {
            http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        let one = request_digest(&parts("POST", "http://a.test/x"), b"{}");
        assert_eq!(
            one,
            request_digest(&parts("POST", "http://a.test/x"), b"{}")
        );
        assert_ne!(
            one,
            request_digest(&parts("POST", "http://a.test/x"), b"{ }")
        );
        assert_ne!(one, request_digest(&parts("GET", "http://a.test/x"), b"{}"));
        assert_ne!(
            one,
            request_digest(&parts("POST", "http://a.test/y"), b"{}")
        );
    }
}

#[cfg(all(test, feature = "siwx"))]
mod against_the_server {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use alloy_signer_local::PrivateKeySigner;
    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::{BodyExt, Full};
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use crate::client::pay::X402PaymentLayer;
    use crate::client::payer::DEV_KEYS;
    use crate::clock::FakeClock;
    use crate::x402::facilitator::{DevLedger, LocalEvmFacilitator};
    use crate::x402::server::{PaymentOption, PriceTable, SignInWithX, X402Layer};

    const NOW: u64 = 1_750_000_000;

    async fn text<B>(body: B) -> String
    where
        B: http_body::Body,
        B::Error: std::fmt::Debug,
    {
        let body = body.collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_request_paid_for_before_is_signed_in_for_and_not_paid_again() {
        let ledger = Arc::new(DevLedger::new());
        let clock = Arc::new(FakeClock::at_unix_secs(NOW));
        let server_layer = X402Layer::builder()
            .with_public_base_url("http://gateway")
            .unwrap()
            .with_payment_option(
                PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9]).unwrap(),
            )
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /v1/chat/completions", "0.002")
                    .unwrap(),
            )
            .with_facilitator(LocalEvmFacilitator::new(ledger.clone(), clock.clone()))
            .with_clock(clock)
            .with_sign_in_with_x(SignInWithX::new().unwrap())
            .build()
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let server = ServiceBuilder::new()
            .layer(server_layer)
            .service(service_fn(move |_request: Request<Full<Bytes>>| {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!(
                        "answer {n}"
                    )))))
                }
            }));
        let server = service_fn(move |request: Request<Full<Bytes>>| {
            let server = server.clone();
            async move {
                let (head, body) = server.oneshot(request).await?.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                Ok::<_, Infallible>(Response::from_parts(head, Full::new(body)))
            }
        });
        let key: PrivateKeySigner = DEV_KEYS[1].parse().unwrap();
        let layer = X402PaymentLayer::new(key).with_clock(Arc::new(FakeClock::at_unix_secs(NOW)));
        let client = ServiceBuilder::new().layer(layer.clone()).service(server);
        let chat = |prompt: &str| {
            Request::post("http://gateway/v1/chat/completions")
                .body(Full::new(Bytes::from(prompt.to_owned())))
                .unwrap()
        };

        let paid = client.clone().oneshot(chat("hi")).await.unwrap();
        assert_eq!(text(paid.into_body()).await, "answer 0");
        let again = client.clone().oneshot(chat("hi")).await.unwrap();
        assert_eq!(again.status(), 200);
        assert_eq!(text(again.into_body()).await, "answer 0");
        assert_eq!(ledger.settlements(), 1);
        assert_eq!(layer.signer().signatures(), 1);
        // Another request: never paid for, so paid for now, without a sign-in first.
        let other = client.clone().oneshot(chat("other")).await.unwrap();
        assert_eq!(text(other.into_body()).await, "answer 1");
        assert_eq!(ledger.settlements(), 2);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}

//! Authorizations refused at match time, before any facilitator: validity
//! beyond the offer's timeout, and signatures the chain refuses (high `s`,
//! `v` other than 27/28). The facilitator here counts its calls; the inner
//! service counts its own.
#![cfg(feature = "x402")]

mod x402_fixtures;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use alloy_primitives::U256;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::ServiceExt;
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::clock::FakeClock;
use walletgate::store::BoxFuture;
use walletgate::x402::{
    facilitator::AUTHORIZATION_CLOCK_SKEW_SECS,
    facilitator::{
        DevLedger, Facilitator, FacilitatorError, FacilitatorRequest, LocalEvmFacilitator,
    },
    server::X402Layer,
    wire::{
        PaymentPayload, PaymentRequirements, SettleResponse, SupportedResponse, VerifyResponse,
        codec,
    },
};
use x402_fixtures::{CHAT, chat_layer};

const NOW: u64 = 1_750_000_000;

/// The local verifier, counting how often it is asked.
#[derive(Clone)]
struct Counting {
    inner: LocalEvmFacilitator,
    calls: Arc<AtomicUsize>,
}

impl Facilitator for Counting {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.settle(request)
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        self.inner.supported()
    }
}

struct Harness {
    layer: X402Layer,
    ledger: Arc<DevLedger>,
    facilitator_calls: Arc<AtomicUsize>,
    upstream_calls: Arc<AtomicUsize>,
}

impl Harness {
    fn new() -> Self {
        let clock = Arc::new(FakeClock::at_unix_secs(NOW));
        let ledger = Arc::new(DevLedger::new());
        let facilitator_calls = Arc::new(AtomicUsize::new(0));
        let facilitator = Counting {
            inner: LocalEvmFacilitator::new(ledger.clone(), clock.clone()),
            calls: facilitator_calls.clone(),
        };
        Self {
            layer: chat_layer(facilitator, clock),
            ledger,
            facilitator_calls,
            upstream_calls: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Status and JSON body of `POST /v1/chat/completions` with `payment`.
    async fn send(&self, payment: Option<&str>) -> (u16, Value) {
        let calls = self.upstream_calls.clone();
        let service = tower::ServiceBuilder::new()
            .layer(self.layer.clone())
            .service(tower::service_fn(move |_request: Request<Full<Bytes>>| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{}")))) }
            }));
        let mut request = Request::post(CHAT);
        if let Some(payment) = payment {
            request = request.header("payment-signature", payment);
        }
        let response = service
            .oneshot(request.body(Full::default()).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn offer(&self) -> PaymentRequirements {
        let calls = self.upstream_calls.clone();
        let service = tower::ServiceBuilder::new()
            .layer(self.layer.clone())
            .service(tower::service_fn(move |_request: Request<Full<Bytes>>| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(Response::new(Full::<Bytes>::default())) }
            }));
        let response = service
            .oneshot(Request::post(CHAT).body(Full::default()).unwrap())
            .await
            .unwrap();
        let quote: walletgate::x402::wire::PaymentRequired =
            codec::decode(response.headers()["payment-required"].as_bytes()).unwrap();
        quote.accepts[0].clone()
    }

    fn assert_untouched(&self) {
        assert_eq!(self.facilitator_calls.load(Ordering::SeqCst), 0);
        assert_eq!(self.upstream_calls.load(Ordering::SeqCst), 0);
        assert_eq!(self.ledger.settlements(), 0);
    }
}

fn signed(payer: &Payer, offer: &PaymentRequirements, valid_before: u64, nonce: u64) -> String {
    let mut authorization = payer.authorization(offer, NOW, sequential_nonce(nonce));
    authorization.valid_before = valid_before;
    codec::encode(&payer.sign(offer, authorization).unwrap())
}

/// The same payment with its signature rewritten by `rewrite` (65 raw bytes).
fn with_signature(header: &str, rewrite: impl FnOnce(&mut [u8; 65])) -> String {
    let mut payment: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
    let text = payment.payload["signature"].as_str().unwrap().to_owned();
    let mut raw = [0u8; 65];
    alloy_primitives::hex::decode_to_slice(&text[2..], &mut raw).unwrap();
    rewrite(&mut raw);
    payment.payload["signature"] = format!("0x{}", alloy_primitives::hex::encode(raw)).into();
    codec::encode(&payment)
}

/// `s -> n - s` and `v` flipped: the twin signature that recovers the same signer.
fn malleate(raw: &mut [u8; 65]) {
    let order = U256::from_str_radix(
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
        16,
    )
    .unwrap();
    let s = U256::from_be_slice(&raw[32..64]);
    raw[32..64].copy_from_slice(&(order - s).to_be_bytes::<32>());
    raw[64] = if raw[64] == 27 { 28 } else { 27 };
}

#[tokio::test]
async fn validity_beyond_the_offer_timeout_is_invalid_and_nothing_is_settled() {
    let h = Harness::new();
    let offer = h.offer().await;
    let payer = Payer::dev(0);
    let limit = NOW + offer.max_timeout_seconds + AUTHORIZATION_CLOCK_SKEW_SECS;
    for valid_before in [limit + 1, NOW + 3 * 365 * 86_400] {
        let (status, body) = h.send(Some(&signed(&payer, &offer, valid_before, 1))).await;
        assert_eq!(status, 402);
        assert_eq!(body["code"], "PAYMENT_INVALID");
        assert_eq!(
            body["debug"],
            "authorization_lifetime_exceeds_max_timeout_seconds"
        );
        h.assert_untouched();
    }
    // At the bound it is accepted and settled once.
    let (status, _) = h.send(Some(&signed(&payer, &offer, limit, 2))).await;
    assert_eq!(status, 200);
    assert_eq!(h.ledger.settlements(), 1);
}

#[tokio::test]
async fn a_malleated_signature_is_invalid_before_the_upstream() {
    let h = Harness::new();
    let offer = h.offer().await;
    let header = signed(&Payer::dev(0), &offer, NOW + 300, 1);
    let twin = with_signature(&header, malleate);
    let (status, body) = h.send(Some(&twin)).await;
    assert_eq!(status, 402);
    assert_eq!(body["code"], "PAYMENT_INVALID");
    assert_eq!(
        body["debug"],
        "invalid_exact_evm_payload_signature_not_canonical"
    );
    h.assert_untouched();

    // v = 0/1 (the same signature otherwise) is refused too: the chain takes 27/28 only.
    let v_parity = with_signature(&header, |raw| raw[64] -= 27);
    let (status, body) = h.send(Some(&v_parity)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (402, Some("PAYMENT_INVALID"))
    );
    h.assert_untouched();

    // The original pays once; its twin afterwards is still invalid, not a replay.
    assert_eq!(h.send(Some(&header)).await.0, 200);
    let (status, body) = h.send(Some(&twin)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (402, Some("PAYMENT_INVALID"))
    );
    assert_eq!(h.ledger.settlements(), 1);
}

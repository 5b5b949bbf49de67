//! Arbitrary bytes as `PAYMENT-SIGNATURE`, through decode, match and verify
//! (the layer offers `exact` and the metered `upto`, whose Permit2 payload
//! goes through the same steps).
//!
//! Each input is tried three ways: as the raw header value through the whole
//! `X402` layer; base64-encoded (so the bytes reach the JSON parser) through
//! the layer; and through `codec::decode`, `matching_offer` and
//! `LocalEvmFacilitator::verify` directly. The layer (payment identifier on)
//! must answer 402, 400 for a malformed payment identifier, 409 for an id
//! reused (or 200 for a genuinely valid payment, with a settlement receipt),
//! never a 5xx, never panic, never wait.
//!
//! The same bytes (raw and base64-encoded) also go as a `SIGN-IN-WITH-X`
//! proof to a layer declaring `sign-in-with-x`, where nothing was paid:
//! the answer is always the normal 402 (oversized, non-base64, CR/LF in a
//! field, an unknown chain), never a 5xx. That layer also takes MPP: the
//! bytes as an `Authorization: Payment` credential (raw, and base64url so
//! they reach the JSON parser) get MPP's 402 or 400, never a 5xx.
#![no_main]

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tower_layer::Layer;
use tower_service::Service;
use walletgate::clock::FakeClock;
use walletgate::x402::{
    facilitator::{DevLedger, Facilitator, FacilitatorRequest, LocalEvmFacilitator},
        server::{
            BASE_SEPOLIA_USDC, PaymentOption, PriceTable, SignInWithX, X402, X402Layer,
            matching_offer, mpp::Mpp, payment_id::PaymentIdentifier,
        },
    wire::{Network, PaymentPayload, PaymentRequirements, SCHEME_UPTO, UsdAmount, codec},
};
use walletgate_fuzz::ready;

/// The time the seed corpus was signed for.
const NOW: u64 = 1_750_000_000;
const PAY_TO: &str = DevLedger::DEV_ACCOUNTS[9];
const CHAT: &str = "/v1/chat/completions";

/// The paid handler: always ready, answers at once.
#[derive(Clone)]
struct Answer;

impl Service<Request<Full<Bytes>>> for Answer {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<Full<Bytes>>) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"paid")))))
    }
}

struct Harness {
    service: X402<Answer>,
    /// Declares `sign-in-with-x` at a public origin.
    signing_in: X402<Answer>,
    facilitator: LocalEvmFacilitator,
    offers: Vec<PaymentRequirements>,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let clock = Arc::new(FakeClock::at_unix_secs(NOW));
        let facilitator = LocalEvmFacilitator::new(Arc::new(DevLedger::new()), clock.clone());
        let option = PaymentOption::base_sepolia_usdc(PAY_TO).unwrap();
        // The metered offer too: its Permit2 payload goes through the same steps.
        let mut extra = serde_json::Map::new();
        extra.insert(
            "facilitatorAddress".into(),
            LocalEvmFacilitator::UPTO_FACILITATOR.to_checksum(None).into(),
        );
        let upto = PaymentOption::other(Network::base_sepolia(), BASE_SEPOLIA_USDC, PAY_TO, extra)
            .with_scheme(SCHEME_UPTO);
        let offers = vec![
            option.requirements(UsdAmount::from_micros(3000)).unwrap(),
            upto.requirements(UsdAmount::from_micros(3000)).unwrap(),
        ];
        let layer = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(option)
            .with_payment_option(upto)
            .with_pricing(
                PriceTable::by_route()
                    .with_usd(format!("POST {CHAT}"), "0.002")
                    .unwrap(),
            )
                        .with_facilitator(facilitator.clone())
            .with_clock(clock)
            .with_payment_identifier(PaymentIdentifier::Optional)
            .build()
            .unwrap();
        let signing_in = X402Layer::builder()
            .with_public_base_url("https://gateway.test")
            .unwrap()
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_pricing(
                PriceTable::by_route()
                    .with_usd(format!("POST {CHAT}"), "0.002")
                    .unwrap(),
            )
            .with_facilitator(facilitator.clone())
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
            .with_sign_in_with_x(SignInWithX::new_with_key([7; 32]))
            .with_mpp(Mpp::new(&[7; 32], "gateway.test").unwrap())
            .build()
            .unwrap();
        Harness {
            service: layer.layer(Answer),
            signing_in: signing_in.layer(Answer),
            facilitator,
            offers,
        }
    })
}

fn through_layer(header: &[u8]) {
    let Ok(value) = HeaderValue::from_bytes(header) else {
        return;
    };
    let request = Request::post(CHAT)
        .header("payment-signature", value)
        .body(Full::default())
        .unwrap();
    let mut service = harness().service.clone();
    let response = ready(service.call(request)).unwrap();
    match response.status().as_u16() {
                200 => assert!(response.headers().contains_key("payment-response")),
        400 | 402 | 409 => assert!(response.body().is_rejection()),
        other => panic!("unexpected status {other} for a payment header"),
    }
}

fn sign_in(header: &[u8]) {
    let Ok(value) = HeaderValue::from_bytes(header) else {
        return;
    };
    let request = Request::post(CHAT)
        .header("sign-in-with-x", value)
        .body(Full::default())
        .unwrap();
    let mut service = harness().signing_in.clone();
    let response = ready(service.call(request)).unwrap();
    assert_eq!(response.status().as_u16(), 402, "a proof with nothing paid");
    assert!(response.headers().contains_key("payment-required"));
}

fn decode_match_verify(header: &[u8]) {
    let Ok(payment) = codec::decode::<PaymentPayload>(header) else {
        return;
    };
    let harness = harness();
    let Some(offer) = matching_offer(&harness.offers, &payment.accepted).cloned() else {
        return;
    };
    let request = FacilitatorRequest::new(payment, offer);
    let verdict = ready(harness.facilitator.verify(&request)).unwrap();
    assert_eq!(verdict.is_valid, verdict.invalid_reason.is_none());
    if verdict.is_valid {
        assert!(verdict.payer.is_some());
    }
}

/// `data` as an MPP credential: MPP's refusal (402, or 400 for another
/// method or two credentials), never a 5xx, never a panic.
fn mpp_credential(data: &[u8]) {
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    for value in [data, &[b"Payment ", data].concat(), &[b"Payment ", encoded.as_bytes()].concat()] {
        let Ok(value) = HeaderValue::from_bytes(value) else {
            continue;
        };
        let request = Request::post(CHAT)
            .header("authorization", value)
            .body(Full::default())
            .unwrap();
        let mut service = harness().signing_in.clone();
        let response = ready(service.call(request)).unwrap();
        let status = response.status().as_u16();
        assert!(matches!(status, 400 | 402), "{status}");
    }
}

fuzz_target!(|data: &[u8]| {
    mpp_credential(data);
    through_layer(data);
    decode_match_verify(data);
    sign_in(data);
    let encoded = STANDARD.encode(data);
    through_layer(encoded.as_bytes());
    decode_match_verify(encoded.as_bytes());
    sign_in(encoded.as_bytes());
});

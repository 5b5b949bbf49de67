//! `HttpFacilitator` against a scripted facilitator on loopback: an axum app
//! that answers the standard API with the local verifier, or fails on cue.
#![cfg(feature = "http-facilitator")]

mod x402_fixtures;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes as AxumBytes;
use axum::extract::State;
use axum::http::StatusCode as AxumStatus;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::ServiceExt;
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::clock::FakeClock;
use walletgate::x402::{
    facilitator::{
        DevLedger, Facilitator, FacilitatorErrorKind, FacilitatorRequest, HttpFacilitator,
        LocalEvmFacilitator,
    },
    server::X402,
    wire::{PaymentRequired, codec},
};
use x402_fixtures::{Answering, CHAT, answering, chat_layer};

const NOW: u64 = 1_750_000_000;

const NORMAL: u8 = 0;
const FAIL_500: u8 = 1;
const SILENT: u8 = 2;
/// `/settle` moves the funds, then never answers (its answer is lost).
const SETTLES_SILENTLY: u8 = 3;

#[derive(Clone)]
struct Scripted {
    local: Arc<LocalEvmFacilitator>,
    mode: Arc<AtomicU8>,
    received: Arc<Mutex<Vec<(String, Value)>>>,
}

async fn answer(state: &Scripted, path: &str, body: &[u8]) -> (AxumStatus, String) {
    match state.mode.load(Ordering::SeqCst) {
        FAIL_500 => return (AxumStatus::INTERNAL_SERVER_ERROR, "unexpected_error".into()),
        SILENT => std::future::pending::<()>().await,
        _ => {}
    }
    state
        .received
        .lock()
        .unwrap()
        .push((path.into(), serde_json::from_slice(body).unwrap()));
    let Ok(request) = serde_json::from_slice::<FacilitatorRequest>(body) else {
        return (
            AxumStatus::BAD_REQUEST,
            r#"{"error":"invalid_json"}"#.into(),
        );
    };
    let json = if path == "verify" {
        serde_json::to_string(&state.local.verify(&request).await.unwrap())
    } else {
        let settled = state.local.settle(&request).await.unwrap();
        if state.mode.load(Ordering::SeqCst) == SETTLES_SILENTLY {
            std::future::pending::<()>().await;
        }
        serde_json::to_string(&settled)
    };
    (AxumStatus::OK, json.unwrap())
}

struct Fixture {
    address: SocketAddr,
    ledger: Arc<DevLedger>,
    scripted: Scripted,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn facilitator_server() -> Fixture {
    let clock = FakeClock::at_unix_secs(NOW);
    let ledger = Arc::new(DevLedger::new());
    let scripted = Scripted {
        local: Arc::new(LocalEvmFacilitator::new(ledger.clone(), Arc::new(clock))),
        mode: Arc::new(AtomicU8::new(NORMAL)),
        received: Arc::default(),
    };
    let app = axum::Router::new()
        .route(
            "/facilitator/verify",
            post(|State(s): State<Scripted>, body: AxumBytes| async move {
                answer(&s, "verify", &body).await
            }),
        )
        .route(
            "/facilitator/settle",
            post(|State(s): State<Scripted>, body: AxumBytes| async move {
                answer(&s, "settle", &body).await
            }),
        )
        .route(
            "/facilitator/supported",
            get(|State(s): State<Scripted>| async move {
                serde_json::to_string(&s.local.supported().await.unwrap()).unwrap()
            }),
        )
        .with_state(scripted.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Fixture {
        address,
        ledger,
        scripted,
        server,
    }
}

fn client(address: SocketAddr) -> HttpFacilitator {
    HttpFacilitator::new(&format!("http://{address}/facilitator/"))
        .unwrap()
        .with_timeout(Duration::from_secs(5))
}

fn gateway(facilitator: HttpFacilitator) -> X402<Answering> {
    answering(&chat_layer(
        facilitator,
        Arc::new(FakeClock::at_unix_secs(NOW)),
    ))
}

fn chat(payment: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::post(CHAT);
    if let Some(payment) = payment {
        builder = builder.header("payment-signature", payment);
    }
    builder.body(Full::default()).unwrap()
}

async fn offer_of(service: &X402<Answering>) -> walletgate::x402::wire::PaymentRequirements {
    let quote = service.clone().oneshot(chat(None)).await.unwrap();
    let quote: PaymentRequired =
        codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
    quote.accepts[0].clone()
}

async fn code_of<B: http_body::Body>(response: Response<B>) -> String
where
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice::<Value>(&bytes).unwrap()["code"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn layer_pays_through_the_http_facilitator() {
    let fixture = facilitator_server().await;
    let service = gateway(client(fixture.address));
    let offer = offer_of(&service).await;
    let payer = Payer::dev(0);
    let response = service
        .clone()
        .oneshot(chat(Some(
            &payer
                .header_with_nonce(&offer, NOW, sequential_nonce(1))
                .unwrap(),
        )))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("payment-response"));
    assert_eq!(fixture.ledger.settlements(), 1);

    let received = fixture.scripted.received.lock().unwrap().clone();
    let paths: Vec<&str> = received.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(paths, ["verify", "settle"]);
    let body = &received[0].1;
    assert_eq!(body["x402Version"], 2);
    assert_eq!(
        body["paymentRequirements"],
        serde_json::to_value(&offer).unwrap()
    );
    assert_eq!(
        body["paymentPayload"]["accepted"],
        serde_json::to_value(&offer).unwrap()
    );
}

#[tokio::test]
async fn facilitator_5xx_is_a_503_and_the_same_payment_succeeds_later() {
    let fixture = facilitator_server().await;
    let service = gateway(client(fixture.address));
    let offer = offer_of(&service).await;
    let header = Payer::dev(0)
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    fixture.scripted.mode.store(FAIL_500, Ordering::SeqCst);
    let response = service.clone().oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    assert_eq!(code_of(response).await, "PAYMENT_VERIFICATION_UNAVAILABLE");
    assert_eq!(fixture.ledger.settlements(), 0);

    fixture.scripted.mode.store(NORMAL, Ordering::SeqCst);
    let response = service.clone().oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(fixture.ledger.settlements(), 1);
}

#[tokio::test]
async fn verdicts_and_supported_kinds_come_through() {
    let fixture = facilitator_server().await;
    let facilitator = client(fixture.address);
    let supported = facilitator.supported().await.unwrap();
    assert_eq!(supported.kinds[0].network.as_str(), "eip155:84532");

    let service = gateway(facilitator);
    let offer = offer_of(&service).await;
    let unfunded = Payer::from_key([0x42; 32]).unwrap();
    let response = service
        .oneshot(chat(Some(
            &unfunded
                .header_with_nonce(&offer, NOW, sequential_nonce(1))
                .unwrap(),
        )))
        .await
        .unwrap();
    assert_eq!(response.status(), 402);
    assert_eq!(code_of(response).await, "PAYMENT_UNFUNDED");
}

#[tokio::test]
async fn unreachable_or_silent_facilitators_are_unavailable() {
    // A port that was just free: nothing listens on it.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let error = client(closed).supported().await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);

    let fixture = facilitator_server().await;
    fixture.scripted.mode.store(SILENT, Ordering::SeqCst);
    let impatient = client(fixture.address).with_timeout(Duration::from_millis(200));
    let service = gateway(impatient);
    let offer = offer_of(&service).await;
    let response = service
        .oneshot(chat(Some(
            &Payer::dev(0)
                .header_with_nonce(&offer, NOW, sequential_nonce(1))
                .unwrap(),
        )))
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(code_of(response).await, "PAYMENT_VERIFICATION_UNAVAILABLE");
}

#[tokio::test]
async fn a_settle_whose_answer_was_lost_keeps_the_claim_and_the_resend_gets_the_answer() {
    let fixture = facilitator_server().await;
    fixture
        .scripted
        .mode
        .store(SETTLES_SILENTLY, Ordering::SeqCst);
    let impatient = client(fixture.address).with_timeout(Duration::from_millis(300));
    let service = gateway(impatient);
    let offer = offer_of(&service).await;
    let payer = Payer::dev(0);
    let header = payer
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    let token = DevLedger::base_sepolia_usdc();
    let before = fixture.ledger.balance_of(&token, payer.address_bytes());

    let lost = service.clone().oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(lost.status(), 503);
    assert!(lost.headers().contains_key("retry-after"));
    let pending: walletgate::x402::wire::SettleResponse =
        codec::decode(lost.headers()["payment-response"].as_bytes()).unwrap();
    assert_eq!(
        pending.error_reason.as_deref(),
        Some(walletgate::x402::server::SETTLEMENT_PENDING)
    );
    assert_eq!(code_of(lost).await, "PAYMENT_VERIFICATION_UNAVAILABLE");
    // The transfer did land.
    assert_eq!(fixture.ledger.settlements(), 1);

    // The resend: `/settle` asked again answers "nonce used": the first one
    // landed, so the kept answer is served, and nothing moves twice.
    fixture.scripted.mode.store(NORMAL, Ordering::SeqCst);
    let resent = service.oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(resent.status(), 200);
    let settled: walletgate::x402::wire::SettleResponse =
        codec::decode(resent.headers()["payment-response"].as_bytes()).unwrap();
    assert!(settled.success);
    let body = resent.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"answer");
    assert_eq!(fixture.ledger.settlements(), 1);
    assert_eq!(
        before - fixture.ledger.balance_of(&token, payer.address_bytes()),
        x402_fixtures::QUOTED_UNITS
    );
    let received = fixture.scripted.received.lock().unwrap().clone();
    let paths: Vec<&str> = received.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(paths, ["verify", "settle", "settle"]);
}

/// A metered (`upto`) payment through an HTTP facilitator: `/verify` gets the
/// ceiling, `/settle` the same payload with `paymentRequirements.amount` =
/// the amount used, as the official facilitators read it (upto.md §2).
#[tokio::test]
async fn an_upto_settlement_sends_the_amount_used_in_the_settle_requirements() {
    use walletgate::x402::wire::{AtomicAmount, Network};
    let fixture = facilitator_server().await;
    let facilitator = client(fixture.address);
    let offer = walletgate::x402::server::PaymentOption::upto_permit2(
        Network::base_sepolia(),
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        &Payer::dev(1).address(),
        LocalEvmFacilitator::UPTO_FACILITATOR,
    )
    .requirements_for_amount(AtomicAmount::new(10_000));
    let payer = Payer::dev(0);
    let request = FacilitatorRequest::new(payer.pay_upto(&offer, NOW).unwrap(), offer.clone());
    assert!(facilitator.verify(&request).await.unwrap().is_valid);
    let settled = facilitator
        .settle(&request.with_settled_amount(AtomicAmount::new(1_234)))
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, Some(AtomicAmount::new(1_234)));

    let received = fixture.scripted.received.lock().unwrap().clone();
    let (verify, settle) = (&received[0].1, &received[1].1);
    assert_eq!(verify["paymentRequirements"]["amount"], "10000");
    assert_eq!(settle["paymentRequirements"]["amount"], "1234");
    // Nothing else differs: the payload as signed, the requirements but the amount.
    assert_eq!(settle["paymentPayload"], verify["paymentPayload"]);
    let mut requirements = settle["paymentRequirements"].clone();
    requirements["amount"] = "10000".into();
    assert_eq!(requirements, serde_json::to_value(&offer).unwrap());
}

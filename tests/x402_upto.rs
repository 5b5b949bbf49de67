//! The `upto` scheme through X402Layer on the development ledger: a payer
//! signs a Permit2 ceiling, the inner service names what its answer cost
//! (`SettleAmount`), whole or by a stream's last chunk, and the ledger moves
//! exactly that; every malformed permit is refused with the official
//! facilitator's reason, nothing moved. In-process: a fake clock, no sockets.
#![cfg(all(feature = "x402", feature = "client"))]

use std::convert::Infallible;
use std::sync::Arc;

use alloy_primitives::{Address, U256};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::{Layer, ServiceExt, service_fn};
use walletgate::client::payer::{Payer, upto_payload, upto_permit};
use walletgate::clock::FakeClock;
use walletgate::envelope::header;
use walletgate::x402::facilitator::{DevLedger, LocalEvmFacilitator, reason};
use walletgate::x402::server::{PaymentOption, PriceTable, SettleAmount, X402Layer};
use walletgate::x402::wire::{
    AtomicAmount, PaymentRequired, PaymentRequirements, SCHEME_UPTO, SettleResponse, codec,
};

const NOW: u64 = 1_750_000_000;
const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const CHAT: &str = "/v1/chat/completions";
/// $0.004 + the $0.001 fee: the ceiling.
const CEILING: u128 = 5_000;

struct Setup {
    ledger: Arc<DevLedger>,
    layer: X402Layer,
}

fn setup() -> Setup {
    let ledger = Arc::new(DevLedger::new());
    let clock = Arc::new(FakeClock::at_unix_secs(NOW));
    let mut upto = serde_json::Map::new();
    upto.insert("name".into(), "USDC".into());
    upto.insert("version".into(), "2".into());
    upto.insert("assetTransferMethod".into(), "permit2".into());
    upto.insert(
        "facilitatorAddress".into(),
        LocalEvmFacilitator::UPTO_FACILITATOR
            .to_checksum(None)
            .into(),
    );
    let option = PaymentOption::other(
        walletgate::x402::wire::Network::base_sepolia(),
        walletgate::x402::server::BASE_SEPOLIA_USDC,
        PAY_TO,
        upto,
    )
    .with_scheme(SCHEME_UPTO);
    let layer = X402Layer::builder()
        .with_host_derived_resource_url()
        .with_pricing(
            PriceTable::by_route()
                .with_usd(format!("POST {CHAT}"), "0.004")
                .unwrap(),
        )
        .with_facilitator(LocalEvmFacilitator::new(ledger.clone(), clock.clone()))
        .with_payment_option(option)
        .with_clock(clock)
        .build()
        .unwrap();
    Setup { ledger, layer }
}

fn balance(ledger: &DevLedger, account: Address) -> u128 {
    ledger.balance_of(&DevLedger::base_sepolia_usdc(), account)
}

fn request(payment: Option<&str>) -> Request<String> {
    let mut request = Request::post(CHAT).header(http::header::HOST, "gateway.test");
    if let Some(payment) = payment {
        request = request.header(header::PAYMENT_SIGNATURE, payment);
    }
    request.body(String::new()).unwrap()
}

/// The offer of the layer's 402.
async fn offer(setup: &Setup) -> PaymentRequirements {
    let quoted = setup
        .layer
        .clone()
        .layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }))
        .oneshot(request(None))
        .await
        .unwrap();
    assert_eq!(quoted.status(), StatusCode::PAYMENT_REQUIRED);
    let quote: PaymentRequired =
        codec::decode(quoted.headers()[header::PAYMENT_REQUIRED].as_bytes()).unwrap();
    let offer = quote.accepts[0].clone();
    assert_eq!(offer.scheme, SCHEME_UPTO);
    assert_eq!(offer.amount, AtomicAmount::new(CEILING));
    offer
}

/// A whole answer that names `used` units (or nothing).
async fn whole(setup: &Setup, payment: &str, used: Option<u128>) -> Response<Bytes> {
    let inner = service_fn(move |request: Request<String>| async move {
        let amount = request.extensions().get::<SettleAmount>().unwrap().clone();
        if let Some(used) = used {
            amount.set(AtomicAmount::new(used));
        }
        Ok::<_, Infallible>(Response::new(String::from("metered answer")))
    });
    let response = setup
        .layer
        .clone()
        .layer(inner)
        .oneshot(request(Some(payment)))
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, body.collect().await.unwrap().to_bytes())
}

fn settlement(response: &Response<Bytes>) -> SettleResponse {
    codec::decode(response.headers()[header::PAYMENT_RESPONSE].as_bytes()).unwrap()
}

fn code(response: &Response<Bytes>) -> (StatusCode, String, String) {
    let body: Value = serde_json::from_slice(response.body()).unwrap();
    (
        response.status(),
        body["code"].as_str().unwrap_or_default().to_owned(),
        body["debug"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn a_whole_answer_settles_what_it_used_and_the_ledger_moves_exactly_that() {
    let setup = setup();
    // Not #1: that account is PAY_TO.
    let payer = Payer::dev(6);
    let before = balance(&setup.ledger, payer.address_bytes());
    let offer = offer(&setup).await;
    let payment = codec::encode(&payer.pay_upto(&offer, NOW).unwrap());
    let paid = whole(&setup, &payment, Some(1_234)).await;
    assert_eq!(paid.status(), StatusCode::OK);
    let settled = settlement(&paid);
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount::new(1_234)));
    assert_eq!(
        balance(&setup.ledger, payer.address_bytes()),
        before - 1_234
    );
    // The same permit again: a replay, nothing moves.
    let again = whole(&setup, &payment, Some(1)).await;
    assert_eq!(code(&again).1, "PAYMENT_REPLAY");
    assert_eq!(
        balance(&setup.ledger, payer.address_bytes()),
        before - 1_234
    );
}

#[tokio::test]
async fn an_answer_that_used_more_settles_the_ceiling_and_one_that_used_nothing_moves_nothing() {
    let setup = setup();
    let payer = Payer::dev(2);
    let before = balance(&setup.ledger, payer.address_bytes());
    let offer = offer(&setup).await;
    let dear = codec::encode(&payer.pay_upto(&offer, NOW).unwrap());
    let paid = whole(&setup, &dear, Some(CEILING * 3)).await;
    assert_eq!(settlement(&paid).amount, Some(AtomicAmount::new(CEILING)));
    assert_eq!(setup.layer.settlement_overruns(), 1);
    let free = codec::encode(&payer.pay_upto(&offer, NOW).unwrap());
    let paid = whole(&setup, &free, Some(0)).await;
    let settled = settlement(&paid);
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount::new(0)));
    assert_eq!(settled.transaction, "", "nothing sent");
    assert_eq!(
        balance(&setup.ledger, payer.address_bytes()),
        before - CEILING
    );
}

#[tokio::test]
async fn a_stream_is_sent_live_and_settles_what_its_last_chunk_named() {
    let setup = setup();
    let payer = Payer::dev(3);
    let before = balance(&setup.ledger, payer.address_bytes());
    let offer = offer(&setup).await;
    let payment = codec::encode(&payer.pay_upto(&offer, NOW).unwrap());
    let inner = service_fn(|request: Request<String>| async move {
        let amount = request.extensions().get::<SettleAmount>().unwrap().clone();
        let response = Response::builder()
            .header(http::header::CONTENT_TYPE, "text/event-stream")
            .body(MeteredStream {
                chunks: vec![
                    "data: [DONE]\n\n",
                    "data: {\"n\":2}\n\n",
                    "data: {\"n\":1}\n\n",
                ],
                amount,
                last_costs: 777,
            })
            .unwrap();
        Ok::<_, Infallible>(response)
    });
    let response = setup
        .layer
        .clone()
        .layer(inner)
        .oneshot(request(Some(&payment)))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers().get(header::PAYMENT_RESPONSE).is_none(),
        "no receipt before the amount exists"
    );
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(text.starts_with("data: {\"n\":1}"), "{text}");
    let event = text
        .lines()
        .skip_while(|line| *line != "event: payment-response")
        .nth(1)
        .and_then(|line| line.strip_prefix("data: "))
        .expect("the receipt is the last event");
    let settled: SettleResponse = codec::decode(event.as_bytes()).unwrap();
    assert_eq!(settled.amount, Some(AtomicAmount::new(777)));
    assert_eq!(balance(&setup.ledger, payer.address_bytes()), before - 777);
}

/// A stream of SSE chunks whose cost is known with its last chunk (popped
/// from the end), as an upstream's final usage chunk names it.
struct MeteredStream {
    chunks: Vec<&'static str>,
    amount: SettleAmount,
    last_costs: u128,
}

impl http_body::Body for MeteredStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let chunk = self.chunks.pop();
        if chunk.is_some() && self.chunks.is_empty() {
            self.amount.set(AtomicAmount::new(self.last_costs));
        }
        std::task::Poll::Ready(chunk.map(|chunk| Ok(http_body::Frame::data(Bytes::from(chunk)))))
    }
}

/// `payer`'s permit for `offer` changed by `change`, signed as changed.
fn tampered(
    payer: &Payer,
    offer: &PaymentRequirements,
    nonce: u64,
    change: impl FnOnce(&mut walletgate::x402::wire::UptoPayment),
) -> String {
    let mut permit = upto_permit(payer.address_bytes(), offer, NOW, U256::from(nonce)).unwrap();
    change(&mut permit);
    let signature = payer.sign_digest(permit.signing_hash(84532));
    codec::encode(&upto_payload(offer, &permit, &signature))
}

#[tokio::test]
async fn every_bad_permit_is_refused_with_its_reason_and_nothing_moves() {
    let setup = setup();
    let payer = Payer::dev(4);
    let before = balance(&setup.ledger, payer.address_bytes());
    let offer = offer(&setup).await;
    let stranger: Address = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
        .parse()
        .unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a ceiling above the offer",
            tampered(&payer, &offer, 1, |p| p.ceiling += 1),
            reason::PERMIT2_AMOUNT_MISMATCH,
        ),
        (
            "another spender",
            tampered(&payer, &offer, 2, |p| p.spender = stranger),
            reason::PERMIT2_SPENDER,
        ),
        (
            "another recipient",
            tampered(&payer, &offer, 3, |p| p.to = stranger),
            reason::PERMIT2_RECIPIENT_MISMATCH,
        ),
        (
            "another facilitator",
            tampered(&payer, &offer, 4, |p| p.facilitator = stranger),
            reason::UPTO_FACILITATOR_MISMATCH,
        ),
        (
            "an expired deadline",
            tampered(&payer, &offer, 5, |p| p.deadline = NOW - 1),
            reason::PERMIT2_DEADLINE_EXPIRED,
        ),
        (
            "not valid yet",
            tampered(&payer, &offer, 6, |p| p.valid_after = NOW + 60),
            reason::PERMIT2_NOT_YET_VALID,
        ),
        (
            "another token",
            tampered(&payer, &offer, 7, |p| p.token = stranger),
            reason::PERMIT2_TOKEN_MISMATCH,
        ),
        (
            "another signer",
            {
                let permit =
                    upto_permit(payer.address_bytes(), &offer, NOW, U256::from(8)).unwrap();
                let signature = Payer::dev(5).sign_digest(permit.signing_hash(84532));
                codec::encode(&upto_payload(&offer, &permit, &signature))
            },
            reason::PERMIT2_SIGNATURE,
        ),
    ];
    for (what, payment, why) in cases {
        let refused = whole(&setup, &payment, Some(1)).await;
        let (status, _, debug) = code(&refused);
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{what}");
        assert_eq!(debug, why, "{what}");
    }
    // Two permits with one nonce are one payment: the second is a replay.
    let first = tampered(&payer, &offer, 9, |_| {});
    assert_eq!(
        whole(&setup, &first, Some(10)).await.status(),
        StatusCode::OK
    );
    let twin = tampered(&payer, &offer, 9, |p| p.deadline -= 1);
    assert_eq!(
        code(&whole(&setup, &twin, Some(10)).await).1,
        "PAYMENT_REPLAY"
    );
    assert_eq!(balance(&setup.ledger, payer.address_bytes()), before - 10);
}

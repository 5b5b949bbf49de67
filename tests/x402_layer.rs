//! X402Layer end to end in-process: a fake clock, a scripted inner service,
//! the local EVM verifier and the development ledger; no sockets, no sleeps.
#![cfg(feature = "x402")]

mod x402_fixtures;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio::sync::{Notify, Semaphore};
use tower::util::BoxCloneService;
use tower::{Service, ServiceExt};
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::clock::FakeClock;
use walletgate::store::BoxFuture;
use walletgate::x402::wire::{AtomicAmount, ExactEvmDomain};
use walletgate::x402::{
    facilitator::{
        DevLedger, Facilitator, FacilitatorError, FacilitatorRequest, LocalEvmFacilitator,
    },
    server::{PaymentOption, PaymentReceipt, PriceTable, X402, X402Body, X402Layer},
    wire::{
        Network, PaymentRequired, PaymentRequirements, SettleResponse, SupportedResponse, TokenId,
        VerifyResponse, codec,
    },
};
use x402_fixtures::{CHAT, PAY_TO, QUOTED_UNITS};

const NOW: u64 = 1_750_000_000;
const PAID_CONTENT: &[u8] = b"paid content";

/// A body that records whether anyone read it.
#[derive(Debug)]
struct TrackedBody {
    inner: Full<Bytes>,
    polled: Arc<AtomicBool>,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.polled.store(true, Ordering::SeqCst);
        Pin::new(&mut self.inner).poll_frame(cx)
    }
}

/// The local verifier, with scripted outages.
struct ScriptedFacilitator {
    local: LocalEvmFacilitator,
    unavailable_verifies: AtomicUsize,
    fail_settlements: AtomicBool,
    settle_calls: AtomicUsize,
}

impl Facilitator for ScriptedFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        let outage = self
            .unavailable_verifies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if outage {
            return Box::pin(async { Err(FacilitatorError::unavailable("connection refused")) });
        }
        self.local.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.settle_calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_settlements.load(Ordering::SeqCst) {
            let network = request.payment_requirements().network.clone();
            return Box::pin(async move {
                Ok(SettleResponse::failure(
                    network,
                    "invalid_exact_evm_transaction_failed",
                    None,
                ))
            });
        }
        self.local.settle(request)
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        self.local.supported()
    }
}

type Inner = BoxCloneService<Request<Full<Bytes>>, Response<TrackedBody>, Infallible>;

struct Harness {
    clock: FakeClock,
    ledger: Arc<DevLedger>,
    facilitator: Arc<ScriptedFacilitator>,
    service: X402<Inner>,
    calls: Arc<AtomicUsize>,
    receipts: Arc<Mutex<Vec<PaymentReceipt>>>,
    body_polled: Arc<AtomicBool>,
    entered: Arc<Notify>,
    gate: Arc<Semaphore>,
}

impl Harness {
    fn new() -> Self {
        Self::with(false)
    }

    fn with(paid_replay: bool) -> Self {
        let clock = FakeClock::at_unix_secs(NOW);
        let ledger = Arc::new(DevLedger::new());
        let facilitator = Arc::new(ScriptedFacilitator {
            local: LocalEvmFacilitator::new(ledger.clone(), Arc::new(clock.clone())),
            unavailable_verifies: AtomicUsize::new(0),
            fail_settlements: AtomicBool::new(false),
            settle_calls: AtomicUsize::new(0),
        });
        let calls = Arc::new(AtomicUsize::new(0));
        let receipts = Arc::new(Mutex::new(Vec::new()));
        let body_polled = Arc::new(AtomicBool::new(false));
        let entered = Arc::new(Notify::new());
        let gate = Arc::new(Semaphore::new(0));
        let inner = {
            let (calls, receipts, body_polled, entered, gate) = (
                calls.clone(),
                receipts.clone(),
                body_polled.clone(),
                entered.clone(),
                gate.clone(),
            );
            tower::service_fn(move |request: Request<Full<Bytes>>| {
                let (calls, receipts, body_polled, entered, gate) = (
                    calls.clone(),
                    receipts.clone(),
                    body_polled.clone(),
                    entered.clone(),
                    gate.clone(),
                );
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    if let Some(receipt) = request.extensions().get::<PaymentReceipt>() {
                        receipts.lock().unwrap().push(receipt.clone());
                    }
                    if request.headers().contains_key("x-test-wait") {
                        entered.notify_one();
                        gate.acquire().await.unwrap().forget();
                    }
                    let status = request
                        .headers()
                        .get("x-test-status")
                        .map_or(200, |v| v.to_str().unwrap().parse().unwrap());
                    let body = TrackedBody {
                        inner: Full::new(Bytes::from_static(PAID_CONTENT)),
                        polled: body_polled,
                    };
                    let mut response = Response::new(body);
                    *response.status_mut() = StatusCode::from_u16(status).unwrap();
                    Ok::<_, Infallible>(response)
                }
            })
        };
        let mainnet = PaymentOption::evm(
            Network::parse(Network::BASE).unwrap(),
            "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            PAY_TO,
            "USD Coin",
            "2",
        )
        .unwrap();
        let layer = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_payment_option(mainnet)
            .with_pricing(
                PriceTable::by_route()
                    .with_usd(format!("POST {CHAT}"), "0.002")
                    .unwrap(),
            )
            .with_shared_facilitator(facilitator.clone())
            .with_clock(Arc::new(clock.clone()))
            .with_paid_replay(paid_replay)
            .build()
            .unwrap();
        Self {
            clock,
            ledger,
            facilitator,
            service: tower::Layer::layer(&layer, BoxCloneService::new(inner)),
            calls,
            receipts,
            body_polled,
            entered,
            gate,
        }
    }

    async fn send(&self, request: Request<Full<Bytes>>) -> Response<X402Body<TrackedBody>> {
        self.service.clone().oneshot(request).await.unwrap()
    }

    /// Sends a paid request whose handler waits for `gate`; returns once the handler runs.
    async fn start_and_hold(
        &self,
        header: &str,
    ) -> tokio::task::JoinHandle<Result<Response<X402Body<TrackedBody>>, Infallible>> {
        let request = chat_with(Some(header), &[("x-test-wait", "1")]);
        let task = tokio::spawn(self.service.clone().oneshot(request));
        self.entered.notified().await;
        task
    }

    /// The quote for the chat route, decoded from `PAYMENT-REQUIRED`.
    async fn quote(&self) -> PaymentRequired {
        let response = self.send(chat(None)).await;
        assert_eq!(response.status(), 402);
        codec::decode(response.headers()["payment-required"].as_bytes()).unwrap()
    }

    /// The offer clients sign: the quote's first.
    async fn first_offer(&self) -> PaymentRequirements {
        self.quote().await.accepts[0].clone()
    }

    fn balance(&self, address: &str) -> u128 {
        self.ledger
            .balance_of(&DevLedger::base_sepolia_usdc(), address.parse().unwrap())
    }

    fn settlements(&self) -> u64 {
        self.ledger.settlements()
    }
}

fn chat(payment: Option<&str>) -> Request<Full<Bytes>> {
    chat_with(payment, &[])
}

fn chat_with(payment: Option<&str>, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut builder = Request::post(CHAT).header("host", "gateway.test");
    if let Some(payment) = payment {
        builder = builder.header("payment-signature", payment);
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::default()).unwrap()
}

async fn json_of<B>(response: Response<B>) -> Value
where
    B: Body,
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

/// Asserts a payment rejection with `code`, and returns its body.
async fn assert_rejected<B>(response: Response<B>, status: u16, code: &str) -> Value
where
    B: Body,
    B::Error: std::fmt::Debug,
{
    assert_eq!(response.status(), status);
    let body = json_of(response).await;
    assert_eq!(body["code"], code, "{body}");
    body
}

#[test]
fn support_keys_are_the_funded_dev_accounts() {
    for index in 0..4 {
        assert_eq!(Payer::dev(index).address(), DevLedger::DEV_ACCOUNTS[index]);
    }
}

#[tokio::test]
async fn quote_has_the_three_headers_and_mirrors_them_in_the_body() {
    let h = Harness::new();
    let response = h.send(chat(None)).await;
    assert_eq!(response.status(), 402);
    let headers = response.headers().clone();
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["content-type"], "application/json");
    let encoded = headers["payment-required"].to_str().unwrap();
    assert_eq!(headers["x-payment-required"], encoded);
    assert_eq!(
        headers["www-authenticate"],
        format!("X402 requirements=\"{encoded}\"").as_str()
    );
    let quote: PaymentRequired = codec::decode(encoded.as_bytes()).unwrap();
    assert_eq!(quote.x402_version, 2);
    assert_eq!(
        quote.resource.url,
        "http://gateway.test/v1/chat/completions"
    );
    assert_eq!(quote.accepts.len(), 2);
    assert_eq!(quote.accepts[0].network.as_str(), "eip155:84532");
    assert_eq!(quote.accepts[0].amount.units(), QUOTED_UNITS);
    assert_eq!(quote.accepts[1].network.as_str(), "eip155:8453");
    assert_eq!(quote.accepts[1].extra_str("name"), Some("USD Coin"));

    let body = json_of(response).await;
    assert_eq!(body["x402Version"], 2);
    assert_eq!(
        body["accepts"],
        serde_json::to_value(&quote.accepts).unwrap()
    );
    assert_eq!(
        body["price"],
        serde_json::json!({"amount": "0.003", "currency": "USDC"})
    );
    assert_eq!(body["paymentInfo"]["network"], "eip155:84532");
    assert_eq!(body["paymentInfo"]["x402Version"], 2);
    assert_eq!(body["resource"]["url"], quote.resource.url);
    assert!(body["error"].as_str().unwrap().contains("Payment required"));
    assert!(body["message"].as_str().is_some());
    assert_eq!(h.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn free_requests_pass_through_untouched() {
    let h = Harness::new();
    let request = Request::get("/v1/models").body(Full::default()).unwrap();
    let response = h.send(request).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().is_empty());
    assert!(h.receipts.lock().unwrap().is_empty());
    assert_eq!(
        response.into_body().collect().await.unwrap().to_bytes(),
        PAID_CONTENT
    );
}

#[tokio::test]
async fn first_offer_signed_is_verified_served_and_settled_once() {
    let h = Harness::new();
    let quote = h.quote().await;
    let payer = Payer::dev(0);
    let before = (h.balance(&payer.address()), h.balance(PAY_TO));
    let response = h
        .send(chat(Some(
            &payer
                .header_with_nonce(&quote.accepts[0], NOW, sequential_nonce(1))
                .unwrap(),
        )))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "private");
    let settled: SettleResponse =
        codec::decode(response.headers()["payment-response"].as_bytes()).unwrap();
    assert!(settled.success);
    assert_eq!(settled.payer.as_deref(), Some(payer.address().as_str()));
    assert_eq!(settled.network.as_str(), "eip155:84532");
    let receipt = response
        .extensions()
        .get::<PaymentReceipt>()
        .unwrap()
        .clone();
    assert_eq!(receipt.transaction(), Some(settled.transaction.as_str()));
    assert_eq!(
        response.into_body().collect().await.unwrap().to_bytes(),
        PAID_CONTENT
    );

    // The handler saw the verified payment before settlement.
    let seen = h.receipts.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].payer(), payer.address());
    assert_eq!(seen[0].amount().units(), QUOTED_UNITS);
    assert_eq!(seen[0].transaction(), None);
    assert!(!seen[0].is_replay());

    assert_eq!(h.balance(&payer.address()), before.0 - QUOTED_UNITS);
    assert_eq!(h.balance(PAY_TO), before.1 + QUOTED_UNITS);
    assert_eq!(h.settlements(), 1);
}

#[tokio::test]
async fn second_offer_is_accepted_too() {
    let h = Harness::new();
    let quote = h.quote().await;
    let mainnet = DevLedger::base_sepolia_usdc();
    let token = TokenId {
        chain_id: 8453,
        asset: quote.accepts[1].asset.parse().unwrap(),
    };
    let payer = Payer::dev(1);
    h.ledger
        .fund(&token, payer.address().parse().unwrap(), 1_000_000);
    let response = h
        .send(chat(Some(
            &payer
                .header_with_nonce(&quote.accepts[1], NOW, sequential_nonce(1))
                .unwrap(),
        )))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        h.ledger
            .balance_of(&token, payer.address().parse().unwrap()),
        1_000_000 - QUOTED_UNITS
    );
    assert_eq!(
        h.ledger
            .balance_of(&mainnet, payer.address().parse().unwrap()),
        DevLedger::DEV_ACCOUNT_FUNDS
    );
}

#[tokio::test]
async fn amount_off_by_one_unit_is_refused() {
    let h = Harness::new();
    let mut offer = h.first_offer().await;
    let payer = Payer::dev(0);
    for units in [QUOTED_UNITS - 1, QUOTED_UNITS + 1] {
        offer.amount = AtomicAmount::new(units);
        let response = h
            .send(chat(Some(
                &payer
                    .header_with_nonce(&offer, NOW, sequential_nonce(units as u64))
                    .unwrap(),
            )))
            .await;
        let body = assert_rejected(response, 402, "PAYMENT_INVALID").await;
        assert_eq!(body["error"], "Payment verification failed");
        assert_eq!(body["payer"], payer.address());
    }
    // Matching echo, but the signed value is off by one.
    let offer = h.first_offer().await;
    let mut authorization = payer.authorization(&offer, NOW, sequential_nonce(7));
    authorization.value = AtomicAmount::new(QUOTED_UNITS - 1);
    let header = codec::encode(&payer.sign(&offer, authorization).unwrap());
    assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_INVALID").await;
    assert_eq!(h.calls.load(Ordering::SeqCst), 0);
    assert_eq!(h.settlements(), 0);
}

#[tokio::test]
async fn wrong_pay_to_network_or_asset_is_refused() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let payer = Payer::dev(0);
    let mut wrong_pay_to = offer.clone();
    wrong_pay_to.pay_to = DevLedger::DEV_ACCOUNTS[3].into();
    let mut wrong_network = offer.clone();
    wrong_network.network = Network::parse("eip155:1").unwrap();
    let mut wrong_asset = offer.clone();
    wrong_asset.asset = "0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238".into();
    for (nonce, echo) in [wrong_pay_to, wrong_network, wrong_asset]
        .iter()
        .enumerate()
    {
        let header = payer
            .header_with_nonce(echo, NOW, sequential_nonce(nonce as u64))
            .unwrap();
        assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_INVALID").await;
    }
    // The echo matches, but the signed authorization pays someone else.
    let mut authorization = payer.authorization(&offer, NOW, sequential_nonce(9));
    authorization.to = DevLedger::DEV_ACCOUNTS[3].into();
    let header = codec::encode(&payer.sign(&offer, authorization).unwrap());
    let body = assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_INVALID").await;
    assert_eq!(
        body["debug"],
        "invalid_exact_evm_payload_recipient_mismatch"
    );
    // Signed under another token's domain name.
    let mut other_domain = offer.clone();
    other_domain.extra.insert("name".into(), "USD Coin".into());
    let signed = payer
        .sign_with_domain(
            &offer,
            payer.authorization(&offer, NOW, sequential_nonce(10)),
            &ExactEvmDomain::for_offer(&other_domain).unwrap(),
        )
        .unwrap();
    let body = assert_rejected(
        h.send(chat(Some(&codec::encode(&signed)))).await,
        402,
        "PAYMENT_INVALID",
    )
    .await;
    assert_eq!(body["debug"], "invalid_exact_evm_payload_signature");
    assert_eq!(h.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn malformed_payments_are_invalid() {
    let h = Harness::new();
    for header in ["not base64 at all!", "e30=", "eyJ4NDAyVmVyc2lvbiI6MX0="] {
        let response = h.send(chat(Some(header))).await;
        let body = assert_rejected(response, 402, "PAYMENT_INVALID").await;
        assert_eq!(body["payer"], Value::Null);
    }
}

#[tokio::test]
async fn window_too_short_or_not_yet_valid_is_unfunded_and_a_past_valid_after_is_fine() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let payer = Payer::dev(0);
    let mut short = payer.authorization(&offer, NOW, sequential_nonce(1));
    short.valid_before = NOW + 5;
    let header = codec::encode(&payer.sign(&offer, short).unwrap());
    let body = assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_UNFUNDED").await;
    assert_eq!(body["error"], "Payment verification failed");

    let mut early = payer.authorization(&offer, NOW, sequential_nonce(2));
    early.valid_after = NOW + 60;
    let header = codec::encode(&payer.sign(&offer, early).unwrap());
    assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_UNFUNDED").await;

    // The BlockRun SDKs sign validAfter = now - 600.
    let mut blockrun = payer.authorization(&offer, NOW, sequential_nonce(3));
    blockrun.valid_after = NOW - 600;
    let header = codec::encode(&payer.sign(&offer, blockrun).unwrap());
    assert_eq!(h.send(chat(Some(&header))).await.status(), 200);
    assert_eq!(h.settlements(), 1);
}

#[tokio::test]
async fn unfunded_payer_is_refused_with_its_address() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let payer = Payer::from_key([0x42; 32]).unwrap();
    let body = assert_rejected(
        h.send(chat(Some(
            &payer
                .header_with_nonce(&offer, NOW, sequential_nonce(1))
                .unwrap(),
        )))
        .await,
        402,
        "PAYMENT_UNFUNDED",
    )
    .await;
    assert_eq!(body["payer"], payer.address());
    assert_eq!(body["debug"], "insufficient_funds");
}

#[tokio::test]
async fn duplicate_while_in_flight_is_a_replay() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let header = Payer::dev(0)
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    let first = h.start_and_hold(&header).await;
    let duplicate = h.send(chat(Some(&header))).await;
    let body = assert_rejected(duplicate, 402, "PAYMENT_REPLAY").await;
    assert_eq!(body["error"], "Payment authorization already used");
    h.gate.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(h.settlements(), 1);
    assert_eq!(h.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn duplicate_after_settlement_is_a_replay() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let header = Payer::dev(0)
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    assert_eq!(h.send(chat(Some(&header))).await.status(), 200);
    assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_REPLAY").await;
    h.clock.set_unix_secs(NOW + 250);
    assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_REPLAY").await;
    assert_eq!(h.settlements(), 1);
    assert_eq!(h.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn paid_replay_hands_the_original_receipt_to_the_handler_uncharged() {
    let h = Harness::with(true);
    let offer = h.first_offer().await;
    let payer = Payer::dev(0);
    let header = payer
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    let first = h.send(chat(Some(&header))).await;
    assert_eq!(first.status(), 200);
    let settled: SettleResponse =
        codec::decode(first.headers()["payment-response"].as_bytes()).unwrap();
    let balance = h.balance(&payer.address());

    let again = h.send(chat(Some(&header))).await;
    assert_eq!(again.status(), 200);
    let replayed: SettleResponse =
        codec::decode(again.headers()["payment-response"].as_bytes()).unwrap();
    assert_eq!(replayed.transaction, settled.transaction);
    let receipts = h.receipts.lock().unwrap().clone();
    assert_eq!(receipts.len(), 2);
    assert!(receipts[1].is_replay());
    assert_eq!(
        receipts[1].transaction(),
        Some(settled.transaction.as_str())
    );
    assert_eq!(
        receipts[1].authorization_id(),
        receipts[0].authorization_id()
    );
    assert_eq!(h.balance(&payer.address()), balance);
    assert_eq!(h.settlements(), 1);

    // Another signature over the same (payer, nonce) does not get the receipt.
    let mut forged = payer.authorization(&offer, NOW, sequential_nonce(1));
    forged.valid_before -= 1;
    let header = codec::encode(&payer.sign(&offer, forged).unwrap());
    assert_rejected(h.send(chat(Some(&header))).await, 402, "PAYMENT_REPLAY").await;
}

#[tokio::test]
async fn same_signature_is_accepted_after_a_503_from_the_facilitator() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let header = Payer::dev(0)
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    h.facilitator
        .unavailable_verifies
        .store(1, Ordering::SeqCst);
    let response = h.send(chat(Some(&header))).await;
    assert_eq!(response.headers()["retry-after"], "5");
    assert_rejected(response, 503, "PAYMENT_VERIFICATION_UNAVAILABLE").await;
    assert_eq!(h.send(chat(Some(&header))).await.status(), 200);
    assert_eq!(h.settlements(), 1);
}

#[tokio::test]
async fn error_answers_are_never_settled_and_release_the_claim() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let payer = Payer::dev(0);
    let header = payer
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    let before = h.balance(&payer.address());
    for status in ["500", "503", "504", "400", "404", "429"] {
        let response = h
            .send(chat_with(Some(&header), &[("x-test-status", status)]))
            .await;
        assert_eq!(response.status().as_str(), status);
        assert!(!response.headers().contains_key("payment-response"));
        assert_eq!(
            response.into_body().collect().await.unwrap().to_bytes(),
            PAID_CONTENT
        );
    }
    assert_eq!(h.facilitator.settle_calls.load(Ordering::SeqCst), 0);
    assert_eq!(h.balance(&payer.address()), before);
    // Nothing was consumed: the same payment still works.
    assert_eq!(h.send(chat(Some(&header))).await.status(), 200);
    assert_eq!(h.balance(&payer.address()), before - QUOTED_UNITS);
}

#[tokio::test]
async fn dropped_request_is_never_settled() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let header = Payer::dev(0)
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    let task = h.start_and_hold(&header).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(h.facilitator.settle_calls.load(Ordering::SeqCst), 0);
    assert_eq!(h.settlements(), 0);
    // The claim was released with the future.
    assert_eq!(h.send(chat(Some(&header))).await.status(), 200);
    assert_eq!(h.settlements(), 1);
}

#[tokio::test]
async fn failed_settlement_releases_no_body() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let payer = Payer::dev(0);
    let header = payer
        .header_with_nonce(&offer, NOW, sequential_nonce(1))
        .unwrap();
    let before = h.balance(&payer.address());
    h.facilitator.fail_settlements.store(true, Ordering::SeqCst);
    let response = h.send(chat(Some(&header))).await;
    assert_eq!(response.status(), 402);
    let settled: SettleResponse =
        codec::decode(response.headers()["payment-response"].as_bytes()).unwrap();
    assert!(!settled.success);
    assert!(response.body().is_rejection());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert!(!bytes.windows(PAID_CONTENT.len()).any(|w| w == PAID_CONTENT));
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["code"], "SETTLEMENT_FAILED");
    assert!(
        !h.body_polled.load(Ordering::SeqCst),
        "the inner body was read"
    );
    assert_eq!(h.balance(&payer.address()), before);
    // Not settled, so the payment may be retried.
    h.facilitator
        .fail_settlements
        .store(false, Ordering::SeqCst);
    assert_eq!(h.send(chat(Some(&header))).await.status(), 200);
}

#[tokio::test]
async fn rejections_use_the_routes_envelope() {
    let h = Harness::new();
    let mut request = chat(Some("e30="));
    request
        .extensions_mut()
        .insert(walletgate::envelope::EnvelopeStyle::Messages);
    let response = h.send(request).await;
    assert_eq!(response.status(), 402);
    let body = json_of(response).await;
    assert_eq!(body["type"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_parallel_requests_settle_each_authorization_once() {
    let h = Harness::new();
    let offer = h.first_offer().await;
    let payers: Vec<Payer> = (0..4).map(Payer::dev).collect();
    let before: Vec<u128> = payers.iter().map(|p| h.balance(&p.address())).collect();
    let payee_before = h.balance(PAY_TO);
    let headers: Vec<String> = (0..100u64)
        .map(|n| {
            payers[n as usize % 4]
                .header_with_nonce(&offer, NOW, sequential_nonce(n))
                .unwrap()
        })
        .collect();
    let mut tasks = Vec::with_capacity(1000);
    for round in 0..10 {
        for (n, header) in headers.iter().enumerate() {
            let mut service = h.service.clone();
            let request = chat(Some(header));
            tasks.push(tokio::spawn(async move {
                let _ = (round, n);
                let response = service.ready().await.unwrap().call(request).await.unwrap();
                let status = response.status();
                let code = if status == 200 {
                    String::new()
                } else {
                    json_of(response).await["code"].as_str().unwrap().to_owned()
                };
                (status, code)
            }));
        }
    }
    let (mut paid, mut replays) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            (StatusCode::OK, _) => paid += 1,
            (status, code) if status == 402 && code == "PAYMENT_REPLAY" => replays += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!((paid, replays), (100, 900));
    assert_eq!(h.settlements(), 100);
    assert_eq!(h.calls.load(Ordering::SeqCst), 100);
    for (payer, before) in payers.iter().zip(before) {
        assert_eq!(h.balance(&payer.address()), before - 25 * QUOTED_UNITS);
    }
    assert_eq!(h.balance(PAY_TO), payee_before + 100 * QUOTED_UNITS);
}

/// A server's own flat fee (0.005 USD, not the default 0.001): every price
/// before the fee (per token, flat per request, per image) is quoted and
/// settled with exactly that fee added, once; an all-in total is quoted and
/// settled as it is.
#[tokio::test]
async fn a_configured_flat_fee_is_added_exactly_once_to_every_price_before_it() {
    use walletgate::x402::{
        server::Price, server::PriceRefusal, server::SettledPayment, server::SettlementHookError,
        wire::UsdAmount,
    };

    let clock = FakeClock::at_unix_secs(NOW);
    let ledger = Arc::new(DevLedger::new());
    let facilitator = LocalEvmFacilitator::new(ledger.clone(), Arc::new(clock.clone()));
    let count = |parts: &http::request::Parts, name: &str| -> u128 {
        parts.headers[name].to_str().unwrap().parse().unwrap()
    };
    // What an earlier step would decide from the body: read from headers here.
    let pricing = move |parts: &http::request::Parts| -> Result<Price, PriceRefusal> {
        Ok(match parts.uri.path() {
            // 2 USD per million tokens.
            "/tokens" => Price::Usd(UsdAmount::from_micros(count(parts, "x-tokens") * 2)),
            "/flat" => Price::usd("0.002").unwrap(),
            // 0.04 USD per image.
            "/images" => Price::Usd(UsdAmount::from_micros(count(parts, "x-images") * 40_000)),
            "/all-in" => Price::usd_all_in("0.02").unwrap(),
            _ => Price::Free,
        })
    };
    let settled = Arc::new(Mutex::new(Vec::new()));
    let hook_settled = settled.clone();
    let fee: UsdAmount = "0.005".parse().unwrap();
    let layer = X402Layer::builder()
        .with_host_derived_resource_url()
        .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
        .with_pricing(pricing)
        .with_facilitator(facilitator)
        .with_clock(Arc::new(clock))
        .with_flat_fee(fee)
        .on_settlement(move |payment: SettledPayment| {
            hook_settled.lock().unwrap().push(payment.amount.units());
            std::future::ready(Ok::<_, SettlementHookError>(()))
        })
        .build()
        .unwrap();
    assert_eq!(layer.flat_fee(), fee);
    let service = x402_fixtures::answering(&layer);
    let request = |path: &str, header: Option<(&str, &str)>, payment: Option<&str>| {
        let mut builder = Request::post(path).header("host", "gateway.test");
        if let Some((name, value)) = header {
            builder = builder.header(name, value);
        }
        if let Some(payment) = payment {
            builder = builder.header("payment-signature", payment);
        }
        builder.body(Full::default()).unwrap()
    };

    let payer = Payer::dev(0);
    // (route, its count header, the total signed in USDC units = micro-dollars)
    let cases = [
        // 1 500 tokens: 0.003 USD + 0.005 USD.
        ("/tokens", Some(("x-tokens", "1500")), 8_000, "0.008"),
        // 0.002 USD + 0.005 USD.
        ("/flat", None, 7_000, "0.007"),
        // 3 images: 0.12 USD + 0.005 USD.
        ("/images", Some(("x-images", "3")), 125_000, "0.125"),
        // The listed total, fee included: nothing added.
        ("/all-in", None, 20_000, "0.02"),
    ];
    for (nonce, (path, header, units, decimal)) in (1..).zip(cases) {
        let quote = service
            .clone()
            .oneshot(request(path, header, None))
            .await
            .unwrap();
        assert_eq!(quote.status(), 402, "{path}");
        let required: PaymentRequired =
            codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
        assert_eq!(required.accepts[0].amount.units(), units, "{path}");
        let body = json_of(quote).await;
        assert_eq!(body["price"]["amount"], decimal, "{path}: {body}");
        assert_eq!(
            body["accepts"][0]["amount"],
            units.to_string(),
            "{path}: {body}"
        );

        let before = ledger.balance_of(
            &DevLedger::base_sepolia_usdc(),
            payer.address().parse().unwrap(),
        );
        let payment = payer
            .header_with_nonce(&required.accepts[0], NOW, sequential_nonce(nonce))
            .unwrap();
        let paid = service
            .clone()
            .oneshot(request(path, header, Some(&payment)))
            .await
            .unwrap();
        assert_eq!(paid.status(), 200, "{path}");
        let receipt = paid.extensions().get::<PaymentReceipt>().unwrap();
        assert_eq!(receipt.amount().units(), units, "{path}");
        let after = ledger.balance_of(
            &DevLedger::base_sepolia_usdc(),
            payer.address().parse().unwrap(),
        );
        assert_eq!(before - after, units, "{path}");
        assert_eq!(settled.lock().unwrap().last(), Some(&units), "{path}");
    }
    assert_eq!(ledger.settlements(), 4);
}

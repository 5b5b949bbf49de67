//! When a paid request is settled, over real TCP: a settlement that times
//! out or is refused, an upstream that stalls or breaks mid-stream, a client
//! that goes away, and a stream that completes. Each ends with no settlement
//! (or exactly one where the upstream succeeded), a truthful error, and the
//! claim released: the very same signature is accepted again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};
use walletgate::envelope::ErrorCode;
use walletgate::x402::{
    server::PAYMENT_RESPONSE_EVENT,
    wire::{SettleResponse, codec},
};

use crate::catalogue::Model;
use crate::config::Config;
use crate::config::PaymentFaults;
use crate::payment_tests::assert_payment_rejection;
use crate::request::{ChatRequest, Endpoint};
use crate::tests::{ENDPOINTS, Reply, Server, body, fault_config, path};
use crate::upstream::{
    BoxFuture, Completion, EchoUpstream, EventStream, StreamEvent, Upstream, UpstreamFault,
};

/// A paid model of the embedded catalogue (echo family).
const PAID_MODEL: &str = "anthropic/claude-sonnet-4.6";

/// One SSE event: its name (`message` when unnamed) and data.
#[derive(Debug)]
struct Event {
    name: String,
    data: String,
}

fn events(text: &str) -> Vec<Event> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = Event {
                name: "message".into(),
                data: String::new(),
            };
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event.name = name.to_owned();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    event.data = data.to_owned();
                } else {
                    panic!("not an SSE line: {line:?}");
                }
            }
            event
        })
        .collect()
}

/// Whether `event` is its endpoint's terminal event.
fn is_terminal(event: &Event) -> bool {
    event.data == "[DONE]" || event.name == "message_stop" || event.name == "response.completed"
}

/// The quote for `request` on `endpoint`, paid by the server's payer.
async fn signed(server: &Server, endpoint: Endpoint, request: &str) -> String {
    let quote = server
        .post_once(path(endpoint), request.to_owned(), None)
        .await;
    assert_eq!(quote.status, 402, "{}", quote.text());
    server.sign(&quote, &server.payer)
}

/// The settlement a stream's last event carries.
fn stream_receipt(reply: &Reply) -> SettleResponse {
    let text = reply.text();
    let all = events(&text);
    let last = all.last().unwrap_or_else(|| panic!("empty stream"));
    assert_eq!(last.name, PAYMENT_RESPONSE_EVENT, "{text}");
    assert!(is_terminal(&all[all.len() - 2]), "{text}");
    codec::decode(last.data.as_bytes()).unwrap()
}

/// The stream ended broken: `check` accepts its last event, no terminal
/// event and no receipt anywhere.
fn assert_broken_stream(endpoint: Endpoint, reply: &Reply, check: impl Fn(&Value)) {
    let text = reply.text();
    assert_eq!(reply.status, 200, "{text}");
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert!(reply.header("payment-response").is_none(), "{text}");
    let all = events(&text);
    assert!(!all.iter().any(is_terminal), "{endpoint:?}: {text}");
    assert!(
        !all.iter().any(|event| event.name == PAYMENT_RESPONSE_EVENT),
        "{text}"
    );
    let last = all.last().unwrap();
    check(&serde_json::from_str(&last.data).unwrap());
}

/// `Config::default()` with `faults` on the payment side.
fn with_payment_faults(faults: &Arc<PaymentFaults>) -> Config {
    Config {
        payment_faults: faults.clone(),
        ..Config::default()
    }
}

/// Settlement breaks as `fault` says, for a whole answer and a stream: the
/// whole answer is withheld with `SETTLEMENT_FAILED`, the stream ends with a
/// failed receipt; nothing moves; after the fault clears, the same
/// signatures settle exactly once each.
async fn assert_failed_settlement_is_released(
    faults: Arc<PaymentFaults>,
    fault: &AtomicBool,
    reason: &str,
) {
    let server = Server::start(with_payment_faults(&faults)).await;
    fault.store(true, Ordering::SeqCst);
    let whole = body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string();
    let stream = body(Endpoint::Messages, PAID_MODEL, "hello", true).to_string();
    let whole_payment = signed(&server, Endpoint::Chat, &whole).await;
    let stream_payment = signed(&server, Endpoint::Messages, &stream).await;

    let failed = server
        .post_once(path(Endpoint::Chat), whole.clone(), Some(&whole_payment))
        .await;
    assert_payment_rejection(Endpoint::Chat, &failed, ErrorCode::SettlementFailed);
    assert!(!failed.text().contains("echo:"), "the answer is withheld");
    let receipt: SettleResponse =
        codec::decode(failed.header("payment-response").unwrap().as_bytes()).unwrap();
    assert!(!receipt.success);
    assert!(
        receipt.error_reason.as_deref().unwrap().contains(reason),
        "{receipt:?}"
    );

    let failed = server
        .post_once(
            path(Endpoint::Messages),
            stream.clone(),
            Some(&stream_payment),
        )
        .await;
    assert_eq!(failed.status, 200);
    let receipt = stream_receipt(&failed);
    assert!(!receipt.success);
    assert!(
        receipt.error_reason.as_deref().unwrap().contains(reason),
        "{receipt:?}"
    );
    server.assert_nothing_settled();

    fault.store(false, Ordering::SeqCst);
    let paid = server
        .post_once(path(Endpoint::Chat), whole, Some(&whole_payment))
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    assert!(paid.header("payment-response").is_some());
    let paid = server
        .post_once(path(Endpoint::Messages), stream, Some(&stream_payment))
        .await;
    assert!(stream_receipt(&paid).success);
    assert_eq!(server.ledger.settlements(), 2);
}

/// A settle given up after `settle_timeout` may still land: 503 pending
/// with the answer withheld (a stream ends with a pending receipt), the
/// claim kept; the resend of the same payment settles once and gets it.
#[tokio::test]
async fn a_facilitator_that_times_out_during_settle_is_pending_and_the_resend_settles_once() {
    let faults = Arc::new(PaymentFaults {
        settle_timeout: Duration::from_millis(50),
        ..PaymentFaults::default()
    });
    let server = Server::start(with_payment_faults(&faults)).await;
    faults.hang_settle.store(true, Ordering::SeqCst);
    let whole = body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string();
    let stream = body(Endpoint::Messages, PAID_MODEL, "hello", true).to_string();
    let whole_payment = signed(&server, Endpoint::Chat, &whole).await;
    let stream_payment = signed(&server, Endpoint::Messages, &stream).await;

    let pending = server
        .post_once(path(Endpoint::Chat), whole.clone(), Some(&whole_payment))
        .await;
    assert_payment_rejection(
        Endpoint::Chat,
        &pending,
        ErrorCode::PaymentVerificationUnavailable,
    );
    assert!(pending.header("retry-after").is_some());
    assert!(!pending.text().contains("echo:"), "the answer is withheld");
    let receipt: SettleResponse =
        codec::decode(pending.header("payment-response").unwrap().as_bytes()).unwrap();
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some(walletgate::x402::server::SETTLEMENT_PENDING)
    );
    let streamed = server
        .post_once(
            path(Endpoint::Messages),
            stream.clone(),
            Some(&stream_payment),
        )
        .await;
    let receipt = stream_receipt(&streamed);
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some(walletgate::x402::server::SETTLEMENT_PENDING)
    );
    server.assert_nothing_settled();

    faults.hang_settle.store(false, Ordering::SeqCst);
    let paid = server
        .post_once(path(Endpoint::Chat), whole, Some(&whole_payment))
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    assert!(paid.text().contains("echo:"), "{}", paid.text());
    let paid = server
        .post_once(path(Endpoint::Messages), stream, Some(&stream_payment))
        .await;
    assert!(stream_receipt(&paid).success);
    assert_eq!(server.ledger.settlements(), 2);
}

#[tokio::test]
async fn a_facilitator_answering_success_false_charges_nothing_and_releases_the_claim() {
    let faults = Arc::new(PaymentFaults::default());
    assert_failed_settlement_is_released(
        faults.clone(),
        &faults.refuse_settle,
        "invalid_exact_evm_transaction_failed",
    )
    .await;
}

/// The error code or type a stream's error event names, per endpoint shape.
fn error_of(event: &Value) -> String {
    let error = &event["error"];
    error["code"]
        .as_str()
        .or(event["code"].as_str())
        .or(error["type"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// On every endpoint, a paid stream of `faulty/<preset>` (upstream timeout 100 ms) ends broken with
/// `expected` (code or type) and settles nothing; its signature is then
/// accepted again (and breaks again: still nothing settled).
async fn assert_broken_streams_are_unsettled(preset: &'static str, expected: &[&str]) {
    let server = Server::start(fault_config()).await;
    let model = format!("faulty/{preset}");
    for endpoint in ENDPOINTS {
        let request = body(endpoint, &model, "hello", true).to_string();
        let payment = signed(&server, endpoint, &request).await;
        for attempt in 0..2 {
            let reply = server
                .post_once(path(endpoint), request.clone(), Some(&payment))
                .await;
            assert_broken_stream(endpoint, &reply, |error| {
                let named = error_of(error);
                assert!(
                    expected.contains(&named.as_str()),
                    "{endpoint:?} attempt {attempt}: {error}"
                );
            });
        }
    }
    server.assert_nothing_settled();
}

#[tokio::test]
async fn an_upstream_that_stalls_mid_stream_is_not_charged_and_releases_the_claim() {
    assert_broken_streams_are_unsettled("stall_stream", &["TIMEOUT", "api_error"]).await;
}

#[tokio::test]
async fn a_paid_stream_broken_mid_way_is_not_charged_and_releases_the_claim() {
    assert_broken_streams_are_unsettled("break_stream", &["MODEL_UNAVAILABLE", "api_error"]).await;
}

#[tokio::test]
async fn a_completed_paid_stream_settles_once_and_ends_with_its_receipt() {
    let server = Server::start(Config::default()).await;
    let before = server.balance(&server.payer.address());
    let mut paid = 0;
    for endpoint in ENDPOINTS {
        let request = body(endpoint, PAID_MODEL, "hello there", true).to_string();
        let quote = server
            .post_once(path(endpoint), request.clone(), None)
            .await;
        let offer = quote.quote().accepts[0].clone();
        let payment = server.sign(&quote, &server.payer);
        let reply = server
            .post_once(path(endpoint), request.clone(), Some(&payment))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        // The head went out before settlement: the receipt is the last event.
        assert!(reply.header("payment-response").is_none());
        assert!(reply.text().contains("there"), "{}", reply.text());
        let receipt = stream_receipt(&reply);
        assert!(receipt.success, "{receipt:?}");
        assert!(!receipt.transaction.is_empty());
        assert_eq!(receipt.network, offer.network);
        assert_eq!(receipt.amount, Some(offer.amount));
        assert_eq!(
            receipt.payer.unwrap().to_lowercase(),
            server.payer.address().to_lowercase()
        );
        paid += offer.amount.units();
        // Settled: the same signature is now a replay.
        let again = server
            .post_once(path(endpoint), request, Some(&payment))
            .await;
        assert_payment_rejection(endpoint, &again, ErrorCode::PaymentReplay);
    }
    assert_eq!(server.ledger.settlements(), ENDPOINTS.len() as u64);
    assert_eq!(server.balance(&server.payer.address()), before - paid);
}

/// An upstream that holds its first answer (whole or streamed) until the
/// client has gone away, and says when that happened; later calls answer at once.
struct HeldUntilDropped {
    entered: Notify,
    dropped: Arc<Notify>,
    holding: AtomicBool,
}

impl HeldUntilDropped {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            entered: Notify::new(),
            dropped: Arc::new(Notify::new()),
            holding: AtomicBool::new(false),
        })
    }
}

/// Tells [`HeldUntilDropped::dropped`] when the server drops the call.
struct DropSignal<'a>(&'a Arc<Notify>);

impl Drop for DropSignal<'_> {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

impl Upstream for HeldUntilDropped {
    fn complete<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Completion, UpstreamFault>> {
        Box::pin(async move {
            if self.holding.swap(false, Ordering::SeqCst) {
                let _signal = DropSignal(&self.dropped);
                self.entered.notify_one();
                std::future::pending::<()>().await;
            }
            EchoUpstream::answer(model, request)
        })
    }

    fn stream<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, UpstreamFault>> {
        if !self.holding.swap(false, Ordering::SeqCst) {
            return EchoUpstream.stream(model, request);
        }
        Box::pin(async move {
            let (sender, receiver) = mpsc::channel(1);
            let _ = sender.try_send(Ok(StreamEvent::Text("partial".into())));
            self.entered.notify_one();
            // Silent and open until the server drops the response body (and the receiver).
            let dropped = self.dropped.clone();
            tokio::spawn(async move {
                sender.closed().await;
                dropped.notify_one();
            });
            Ok(receiver)
        })
    }
}

/// Sends `request` with `payment` over a raw connection, waits until the
/// upstream holds it (for a stream: until the head and first bytes
/// arrived), then closes the connection.
async fn send_and_disconnect(
    server: &Server,
    upstream: &HeldUntilDropped,
    endpoint: Endpoint,
    request: &str,
    payment: &str,
    stream: bool,
) {
    let mut connection = TcpStream::connect(server.address).await.unwrap();
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\npayment-signature: {payment}\r\ncontent-length: {}\r\n\r\n",
        path(endpoint),
        server.address,
        request.len()
    );
    connection.write_all(head.as_bytes()).await.unwrap();
    connection.write_all(request.as_bytes()).await.unwrap();
    upstream.entered.notified().await;
    if stream {
        let mut first = [0u8; 64];
        let read = connection.read(&mut first).await.unwrap();
        assert!(first[..read].starts_with(b"HTTP/1.1 200"));
    }
    drop(connection);
}

#[tokio::test]
async fn a_client_that_disconnects_before_settlement_is_not_charged_and_can_retry() {
    let upstream = HeldUntilDropped::new();
    let server = Server::start(Config {
        providers: vec![("anthropic".into(), upstream.clone())],
        ..Config::default()
    })
    .await;
    // A whole answer: the client leaves while the upstream works.
    let whole = body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string();
    let payment = signed(&server, Endpoint::Chat, &whole).await;
    upstream.holding.store(true, Ordering::SeqCst);
    send_and_disconnect(&server, &upstream, Endpoint::Chat, &whole, &payment, false).await;
    tokio::time::timeout(Duration::from_secs(10), upstream.dropped.notified())
        .await
        .expect("the server drops the request of a client that left");
    server.assert_nothing_settled();
    let retried = server
        .post_once(path(Endpoint::Chat), whole, Some(&payment))
        .await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(server.ledger.settlements(), 1);
}

#[tokio::test]
async fn a_client_that_leaves_a_paid_stream_early_is_not_charged_and_can_retry() {
    let upstream = HeldUntilDropped::new();
    let server = Server::start(Config {
        providers: vec![("anthropic".into(), upstream.clone())],
        // Bounds the wait should the server notice the departure only when the stream idles out.
        upstream_timeout: Duration::from_secs(2),
        ..Config::default()
    })
    .await;
    let stream = body(Endpoint::Responses, PAID_MODEL, "hello", true).to_string();
    let payment = signed(&server, Endpoint::Responses, &stream).await;
    upstream.holding.store(true, Ordering::SeqCst);
    send_and_disconnect(
        &server,
        &upstream,
        Endpoint::Responses,
        &stream,
        &payment,
        true,
    )
    .await;
    tokio::time::timeout(Duration::from_secs(10), upstream.dropped.notified())
        .await
        .expect("the server drops the body of a client that left");
    server.assert_nothing_settled();
    let retried = server
        .post_once(path(Endpoint::Responses), stream, Some(&payment))
        .await;
    assert!(stream_receipt(&retried).success);
    assert_eq!(server.ledger.settlements(), 1);
}

#[tokio::test]
async fn a_settlement_whose_receipt_was_lost_is_a_503_and_the_resend_gets_the_kept_answer() {
    let faults = Arc::new(PaymentFaults::default());
    let server = Server::start(with_payment_faults(&faults)).await;
    faults.lost_settle_receipts.store(2, Ordering::SeqCst);
    let whole = body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string();
    let stream = body(Endpoint::Messages, PAID_MODEL, "hello", true).to_string();
    let whole_payment = signed(&server, Endpoint::Chat, &whole).await;
    let stream_payment = signed(&server, Endpoint::Messages, &stream).await;

    // The transfer landed, its receipt did not come: 503, resend the same payment.
    let pending = server
        .post_once(path(Endpoint::Chat), whole.clone(), Some(&whole_payment))
        .await;
    assert_payment_rejection(
        Endpoint::Chat,
        &pending,
        ErrorCode::PaymentVerificationUnavailable,
    );
    assert!(pending.header("retry-after").is_some());
    assert!(!pending.text().contains("echo:"), "the answer is withheld");
    let receipt: SettleResponse =
        codec::decode(pending.header("payment-response").unwrap().as_bytes()).unwrap();
    assert_eq!(
        receipt.error_reason.as_deref(),
        Some(walletgate::x402::server::SETTLEMENT_PENDING)
    );
    assert!(receipt.transaction.starts_with("0x"), "{receipt:?}");
    let resent = server
        .post_once(path(Endpoint::Chat), whole, Some(&whole_payment))
        .await;
    assert_eq!(resent.status, 200, "{}", resent.text());
    assert!(resent.text().contains("echo: hello"));
    let settled: SettleResponse =
        codec::decode(resent.header("payment-response").unwrap().as_bytes()).unwrap();
    assert!(settled.success);
    assert_eq!(settled.transaction, receipt.transaction);

    // A stream: it went out, and ends with a pending receipt naming the transaction.
    let first = server
        .post_once(
            path(Endpoint::Messages),
            stream.clone(),
            Some(&stream_payment),
        )
        .await;
    let pending = stream_receipt(&first);
    assert_eq!(
        pending.error_reason.as_deref(),
        Some(walletgate::x402::server::SETTLEMENT_PENDING)
    );
    let resent = server
        .post_once(path(Endpoint::Messages), stream, Some(&stream_payment))
        .await;
    let landed = stream_receipt(&resent);
    assert!(landed.success);
    assert_eq!(landed.transaction, pending.transaction);
    let events = |text: &str| {
        text.split("event: payment-response")
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(events(&resent.text()), events(&first.text()));
    // Each payment moved once.
    assert_eq!(server.ledger.settlements(), 2);
}

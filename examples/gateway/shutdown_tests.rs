//! SIGTERM on a real gateway process, during a paid stream.
//!
//! The child is this test binary re-run on [`serve_as_child`], which runs the
//! gateway's own `run()` (signals, listener, drain and exit code as in
//! production); the parent talks to it over TCP and signals it with `kill`.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use walletgate::client::payer::{Payer, sequential_nonce};
use walletgate::x402::wire::{PaymentRequired, SCHEME_UPTO, codec};

use crate::child_server::{exchange, header, spawn_child_server};
use crate::request::Endpoint;
use crate::tests::{body, fresh_nonce, now_secs, path};

/// Set in the child's environment: [`serve_as_child`] serves only then.
const CHILD: &str = "WALLETGATE_GATEWAY_DRAIN_CHILD";
const PAID_MODEL: &str = "anthropic/claude-sonnet-4.6";

/// Not a test of its own: the gateway of [`a_sigterm_drains_a_paid_stream_to_its_settlement`].
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the child process of a_sigterm_drains_a_paid_stream_to_its_settlement"]
async fn serve_as_child() {
    if std::env::var_os(CHILD).is_some()
        && let Err(error) = crate::run(&[]).await
    {
        // As `main` does.
        eprintln!("gateway: {error}");
        std::process::exit(1);
    }
}

fn post(payment: Option<&str>, stream: bool) -> String {
    let body = body(Endpoint::Chat, PAID_MODEL, "one two three four", stream).to_string();
    let payment = payment
        .map(|payment| format!("payment-signature: {payment}\r\n"))
        .unwrap_or_default();
    format!(
        "POST {} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n{payment}\r\n{body}",
        path(Endpoint::Chat),
        body.len()
    )
}

/// A gateway child process whose paid model streams slowly, draining for
/// `drain_secs`: the child, its address, and its standard error once it exits.
async fn spawn_gateway(
    drain_secs: &str,
) -> (
    tokio::process::Child,
    String,
    tokio::task::JoinHandle<String>,
) {
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "shutdown_tests::serve_as_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("GATEWAY_LISTEN", "127.0.0.1:0")
        .env("GATEWAY_FAULTS", format!("{PAID_MODEL}=slow_stream"))
        .env("GATEWAY_DRAIN_SECS", drain_secs)
        .env("RUST_LOG", "info")
        .env("LOG_FORMAT", "text");
    let (mut child, address) = spawn_child_server(command, "gateway listening on http://").await;
    let stderr = tokio::spawn({
        let mut stderr = child.stderr.take().unwrap();
        async move {
            let mut text = String::new();
            stderr.read_to_string(&mut text).await.unwrap();
            text
        }
    });
    (child, address, stderr)
}

/// A paid stream on `address`, its first bytes read: in flight. Paid
/// `exact`, or `upto` (a ceiling, settled for what the stream used) when
/// `metered`; the ceiling it was paid under.
async fn paid_stream_in_flight(address: &str, metered: bool) -> (TcpStream, u128) {
    let quote = exchange(address, &post(None, true)).await;
    let quote: PaymentRequired =
        codec::decode(header(&quote, "payment-required").unwrap().as_bytes()).unwrap();
    let (payment, ceiling) = if metered {
        let upto = quote
            .accepts
            .iter()
            .find(|offer| offer.scheme == SCHEME_UPTO)
            .expect("an upto offer");
        let signed = Payer::dev(2).pay_upto(upto, now_secs()).unwrap();
        (codec::encode(&signed), upto.amount.units())
    } else {
        let signed = Payer::dev(1)
            .header_with_nonce(
                &quote.accepts[0],
                now_secs(),
                sequential_nonce(fresh_nonce()),
            )
            .unwrap();
        (signed, quote.accepts[0].amount.units())
    };
    let mut paid = TcpStream::connect(address).await.unwrap();
    paid.write_all(post(Some(&payment), true).as_bytes())
        .await
        .unwrap();
    let mut first = [0u8; 64];
    let read = paid.read(&mut first).await.unwrap();
    assert!(
        first[..read].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &first[..read]
    );
    (paid, ceiling)
}

fn sigterm(child: &tokio::process::Child) {
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_drains_a_paid_stream_to_its_settlement() {
    let (mut child, address, stderr) = spawn_gateway("20").await;

    // A keep-alive connection with a request begun before the signal.
    let mut probe = TcpStream::connect(&address).await.unwrap();
    probe.write_all(b"GET /readyz HTTP/1.1\r\n").await.unwrap();
    let (mut paid, _) = paid_stream_in_flight(&address, false).await;

    let signalled = Instant::now();
    sigterm(&child);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let refused = TcpStream::connect(&address).await;
    assert!(
        refused.is_err(),
        "a connection after the signal was accepted"
    );
    probe.write_all(b"host: gateway\r\n\r\n").await.unwrap();
    let mut readiness = Vec::new();
    probe.read_to_end(&mut readiness).await.unwrap();
    let readiness = String::from_utf8_lossy(&readiness);
    assert!(readiness.starts_with("HTTP/1.1 503"), "{readiness}");
    assert_eq!(
        header(&readiness, "connection"),
        Some("close"),
        "{readiness}"
    );

    let mut rest = Vec::new();
    paid.read_to_end(&mut rest).await.unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("event: payment-response"), "{rest}");
    assert!(
        rest.contains("[DONE]") || rest.contains("finish_reason"),
        "{rest}"
    );

    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exited within the drain deadline")
        .unwrap();
    assert!(signalled.elapsed() < Duration::from_secs(20));
    let stderr = stderr.await.unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("total_settlements=1").count(),
        1,
        "settled exactly once: {stderr}"
    );
    assert!(!stderr.contains("total_settlements=2"), "{stderr}");
    assert!(stderr.contains("drained; exiting"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_cut_by_its_deadline_exits_1_and_settles_nothing() {
    let (mut child, address, stderr) = spawn_gateway("0").await;
    let (mut paid, _) = paid_stream_in_flight(&address, false).await;
    sigterm(&child);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exited at once")
        .unwrap();
    let mut rest = Vec::new();
    let _ = paid.read_to_end(&mut rest).await;
    let stderr = stderr.await.unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cut requests still in flight"), "{stderr}");
    assert!(!stderr.contains("total_settlements="), "{stderr}");
}

/// A metered (`upto`) stream in flight at SIGTERM runs to its end and is
/// settled for what it used, not its ceiling.
#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_drains_a_metered_stream_and_settles_what_it_used() {
    let (mut child, address, stderr) = spawn_gateway("20").await;
    let (mut paid, ceiling) = paid_stream_in_flight(&address, true).await;
    sigterm(&child);
    let mut rest = Vec::new();
    paid.read_to_end(&mut rest).await.unwrap();
    let rest = String::from_utf8_lossy(&rest);
    let settled = crate::tests::stream_settlement(&rest);
    assert!(settled.success, "{rest}");
    let charged = settled.amount.unwrap().units();
    assert!(
        0 < charged && charged * 2 < ceiling,
        "{charged} of a {ceiling} ceiling"
    );
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exited within the drain deadline")
        .unwrap();
    let stderr = stderr.await.unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.matches("total_settlements=1").count(), 1, "{stderr}");
}

//! SIGTERM on a real gateway process, during a paid stream.
//!
//! The child is this test binary re-run on [`serve_as_child`], which runs the
//! gateway's own `run()` (signals, listener, drain and exit code as in
//! production); the parent talks to it over TCP and signals it with `kill`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use walletgate::client::payer::{Payer, sequential_nonce};
use walletgate::x402::wire::{PaymentRequired, codec};

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

/// `request` on a fresh connection, the answer read to its end.
async fn exchange(address: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
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

fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let head = answer.split("\r\n\r\n").next()?;
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
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
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
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
        .env("LOG_FORMAT", "text")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let address = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("the gateway started")
            .unwrap()
            .expect("the gateway printed its address");
        if let Some(rest) = line.strip_prefix("gateway listening on http://") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let stderr = tokio::spawn({
        let mut stderr = child.stderr.take().unwrap();
        async move {
            let mut text = String::new();
            stderr.read_to_string(&mut text).await.unwrap();
            text
        }
    });
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    (child, address, stderr)
}

/// A paid stream on `address`, its first bytes read: in flight.
async fn paid_stream_in_flight(address: &str) -> TcpStream {
    let quote = exchange(address, &post(None, true)).await;
    let quote: PaymentRequired =
        codec::decode(header(&quote, "payment-required").unwrap().as_bytes()).unwrap();
    let payment = Payer::dev(1)
        .header_with_nonce(
            &quote.accepts[0],
            now_secs(),
            sequential_nonce(fresh_nonce()),
        )
        .unwrap();
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
    paid
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
    let mut paid = paid_stream_in_flight(&address).await;

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
    let mut paid = paid_stream_in_flight(&address).await;
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

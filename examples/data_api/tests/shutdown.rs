//! SIGTERM on a real data API process with an MCP SSE stream open: the
//! stream is closed and the process exits 0 long before the drain deadline.
//! The child is this test binary re-run on [`serve_as_child`] (the server's
//! own `run()`: signals, listener, drain and exit code as in production).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::API_KEY;
use crate::child_server::{exchange, header, spawn_child_server};

const CHILD: &str = "WALLETGATE_DATA_API_DRAIN_CHILD";
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"walletgate-drain-test","version":"1"}}}"#;

/// Not a test of its own: the server of [`a_sigterm_closes_open_mcp_streams_and_exits_0`].
#[tokio::test(flavor = "multi_thread")]
#[ignore = "the child process of a_sigterm_closes_open_mcp_streams_and_exits_0"]
async fn serve_as_child() {
    if std::env::var_os(CHILD).is_some()
        && let Err(error) = crate::run().await
    {
        // As `main` does.
        eprintln!("data_api: {error}");
        std::process::exit(1);
    }
}

/// A request to `/mcp` on `address` with `extra` headers.
fn mcp_request(method: &str, address: &str, extra: &str, body: &str) -> String {
    format!(
        "{method} /mcp HTTP/1.1\r\nhost: {address}\r\nx-api-key: {API_KEY}\r\n\
         accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_closes_open_mcp_streams_and_exits_0() {
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "tests::shutdown::serve_as_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("DATA_API_LISTEN", "127.0.0.1:0")
        .env("DATA_API_KEY", API_KEY)
        .env("DATA_API_DRAIN_SECS", "20");
    let (mut child, address) = spawn_child_server(command, "data API listening on http://").await;

    let init = exchange(&address, &mcp_request("POST", &address, "", INITIALIZE)).await;
    let session = header(&init, "mcp-session-id")
        .unwrap_or_else(|| panic!("no session: {init}"))
        .to_owned();
    let in_session = format!("mcp-session-id: {session}\r\nmcp-protocol-version: 2025-11-25\r\n");
    let initialized = exchange(
        &address,
        &mcp_request(
            "POST",
            &address,
            &in_session,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ),
    )
    .await;
    assert!(initialized.starts_with("HTTP/1.1 202"), "{initialized}");

    // The session's standalone SSE stream: open until the server ends it.
    let mut stream = TcpStream::connect(&address).await.unwrap();
    stream
        .write_all(mcp_request("GET", &address, &in_session, "").as_bytes())
        .await
        .unwrap();
    let mut head = [0u8; 64];
    let read = stream.read(&mut head).await.unwrap();
    assert!(
        head[..read].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &head[..read]
    );

    let signalled = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("the SSE stream was closed")
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exited well before the 20 s drain deadline")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(signalled.elapsed() < Duration::from_secs(10));
}

//! SIGTERM on a real data API process with an MCP SSE stream open: the
//! stream is closed and the process exits 0 long before the drain deadline.
//! The child is this test binary re-run on [`serve_as_child`] (the server's
//! own `run()`: signals, listener, drain and exit code as in production).

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::API_KEY;

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

async fn exchange(address: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigterm_closes_open_mcp_streams_and_exits_0() {
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::shutdown::serve_as_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("DATA_API_LISTEN", "127.0.0.1:0")
        .env("DATA_API_KEY", API_KEY)
        .env("DATA_API_DRAIN_SECS", "20")
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
            .expect("the data API started")
            .unwrap()
            .expect("the data API printed its address");
        if let Some(rest) = line.strip_prefix("data API listening on http://") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });

    let init = exchange(&address, &mcp_request("POST", &address, "", INITIALIZE)).await;
    let session = init
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session: {init}"));
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

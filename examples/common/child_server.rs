//! The example servers' process tests: the test binary re-run as the server
//! (its own `run()`: signals, listener, drain and exit code as in
//! production), and raw HTTP/1.1 exchanges with it.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// Spawns `command` (stdin closed, stdout and stderr piped, killed on drop)
/// and waits up to 30 s for the stdout line `{banner}<address> …` the server
/// prints once it listens; the rest of stdout is drained in the background,
/// stderr is left to the caller.
pub(crate) async fn spawn_child_server(mut command: Command, banner: &str) -> (Child, String) {
    let mut child = command
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
            .expect("the server started")
            .unwrap()
            .expect("the server printed its address");
        if let Some(rest) = line.strip_prefix(banner) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    (child, address)
}

/// `request` on a fresh connection, the answer read to its end.
pub(crate) async fn exchange(address: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// The value of header `name` in the head of a raw `answer`.
pub(crate) fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    let head = answer.split("\r\n\r\n").next()?;
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

//! Headless Chromium for the CORS tests: a page served on loopback whose
//! script calls a server and writes what it saw into the DOM, read back with
//! `--dump-dom`. Chromium is `.ci/prerequisites.sh`'s (Debian `chromium`).

use std::time::Duration;

use axum::Router;
use axum::response::Html;
use axum::routing::get;

/// Distinct fresh profiles for the Chromium runs of one test binary.
static PROFILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Where Chromium is.
const CHROMIUM: &str = "/usr/bin/chromium";

/// Binds a loopback port for a page to be served on later: its origin is
/// known before the server under test is configured.
pub(crate) async fn page_listener() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    (listener, origin)
}

/// Serves `script`'s page on `listener`.
pub(crate) fn serve_page_on(listener: tokio::net::TcpListener, script: String) {
    let html = format!(
        "<!doctype html><html><body><pre id=\"out\">pending</pre>\
         <script>{script}</script></body></html>"
    );
    let page = Router::new().route("/", get(move || async move { Html(html) }));
    tokio::spawn(async move { axum::serve(listener, page).await });
}

/// The text of `#out` once Chromium has loaded `url` and its script is done
/// (the script sets `#out` last; virtual time waits for its fetches).
pub(crate) async fn page_result(url: &str) -> String {
    assert!(
        std::path::Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: bash .ci/prerequisites.sh installs it (apt-get install chromium)"
    );
    let profile = std::env::temp_dir().join(format!(
        "walletgate-chromium-{}-{}",
        std::process::id(),
        PROFILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--virtual-time-budget=10000",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("chromium finished")
    .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&output.stdout).into_owned();
    let start = dom
        .find("<pre id=\"out\">")
        .map(|at| at + "<pre id=\"out\">".len());
    let end = dom.find("</pre>");
    match (start, end) {
        (Some(start), Some(end)) if start <= end => dom[start..end].replace("&quot;", "\""),
        _ => panic!(
            "no #out in Chromium's DOM: {dom}\n{}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

//! The real `@opensea/sdk` (npm, pinned in tests/interop/opensea) against this
//! server on loopback: authenticate with scopes, a wallet-scoped call,
//! getValidToken after the short-lived JWT entered its refresh window,
//! revoke, and a refused exchange; then no secret in the access log.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::config::Config;
use crate::tests::serve_logged;

/// Public Hardhat/Anvil development key #0 (wallet with seeded favorites).
const DEV_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const API_KEY: &str = "sdk-test-api-key-0123456789";

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/opensea")
}

#[tokio::test]
async fn opensea_sdk_signs_in_refreshes_and_revokes() {
    let dir = interop_dir();
    assert!(
        dir.join("node_modules/@opensea/sdk").exists(),
        "the SDK is not installed: run `npm ci --prefix tests/interop/opensea` (.ci/run does)"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let origin = format!("http://{address}");
    let mut config = Config::for_origin(address, &origin).unwrap();
    config.api_key = Some(API_KEY.to_owned());
    // What the SDK signs: EIP-4361 for opensea.io on chain 1.
    config.siwe_domain = "opensea.io".to_owned();
    config.siwe_uri = "https://opensea.io".to_owned();
    config.siwe_chain_id = 1;
    // Inside the SDK's 60 s refresh window, so getValidToken re-exchanges.
    config.jwt_lifetime_secs = 30;
    let log_path = serve_logged(listener, &config, "access");

    let run = tokio::process::Command::new("node")
        .arg("e2e.mjs")
        .current_dir(&dir)
        .env("DATA_API_URL", &origin)
        .env("DATA_API_KEY", API_KEY)
        .env("WALLET_KEY", DEV_KEY_0)
        .env("ACCESS_LOG", &log_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the SDK run finishes within 120 s")
        .expect("node starts");
    let _ = std::fs::remove_file(&log_path);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK run failed:\n{stdout}\n{stderr}"
    );
    for step in [
        "authenticate with scopes",
        "wallet-scoped call with the JWT",
        "getValidToken re-mints",
        "revoke",
        "exchange after revoke is refused",
        "no PAT, JWT, cookie or signature",
    ] {
        assert!(stdout.contains(step), "missing step {step:?}:\n{stdout}");
    }
}

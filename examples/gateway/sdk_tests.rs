//! The real client SDKs against the gateway on loopback: the BlockRun Python
//! SDK (`blockrun-llm`, in the venv `.ci/run` makes) and the official
//! `@x402/fetch` client (in the npm folder `.ci/run` installs).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use walletgate::x402::facilitator::DevLedger;

use crate::config::Config;
use crate::tests::Server;
use walletgate::client::payer::DEV_KEYS as PUBLIC_DEV_KEYS;
use walletgate::client::payer::Payer;

/// Longest a client run may take (the image job alone waits one 5 s poll).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);

fn interop_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(name)
}

/// A fresh scratch folder for the client's `HOME`.
fn scratch_home(label: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir =
        std::env::temp_dir().join(format!("walletgate-{label}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `command` to completion within [`CLIENT_TIMEOUT`]; returns stdout,
/// panicking with stderr on failure.
async fn run_client(mut command: tokio::process::Command, what: &str) -> String {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|error| panic!("{what} did not start: {error}"));
    let output = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} took over {CLIENT_TIMEOUT:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test]
async fn the_blockrun_python_sdk_pays_streams_lists_and_polls_images() {
    let folder = interop_dir("blockrun-python");
    let python = folder.join(".venv/bin/python");
    assert!(
        python.exists(),
        "the BlockRun SDK venv is missing; create it with `bash .ci/run`, or:\n  \
         python3 -m venv tests/interop/blockrun-python/.venv && \
         tests/interop/blockrun-python/.venv/bin/pip install -r tests/interop/blockrun-python/requirements.txt"
    );
    let server = Server::start(Config::default()).await;
    let payer = Payer::dev(2).address();
    let home = scratch_home("blockrun-python");

    let mut command = tokio::process::Command::new(&python);
    command
        .arg(folder.join("gateway_sdk.py"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("GATEWAY_API_URL", server.url("/api"))
        // PUBLIC development key (Hardhat/Anvil account 2): worthless anywhere real.
        .env("BLOCKRUN_WALLET_KEY", format!("0x{}", PUBLIC_DEV_KEYS[2]));
    let stdout = run_client(command, "gateway_sdk.py").await;
    let _ = std::fs::remove_dir_all(&home);

    let results: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("no JSON result: {stdout}"));
    assert_eq!(results["payer"], payer.as_str());
    assert!(
        results["streamed"]
            .as_str()
            .unwrap()
            .contains("stream this please")
    );
    assert!(
        results["free_answer"]
            .as_str()
            .unwrap()
            .contains("free hello")
    );
    // Two paid chats (one streamed) and one image job settled; the free call none.
    assert_eq!(server.ledger.settlements(), 3);
    assert_eq!(results["spending"]["calls"], 2);
    // The SDK's recorded cost is what the ledger moved for the chats, to the unit.
    let chats_units = (results["spending"]["total_usd"].as_f64().unwrap() * 1e6).round() as u128;
    let image_units = 40_000 + 1_000;
    assert_eq!(
        server.balance(&payer),
        DevLedger::DEV_ACCOUNT_FUNDS - chats_units - image_units
    );
    assert!(results["paid_cost_usd"].as_f64().unwrap() > 0.001);
}

#[tokio::test]
async fn the_official_x402_fetch_client_pays_chat_completions() {
    let folder = interop_dir("x402");
    assert!(
        folder.join("node_modules/@x402/fetch").is_dir(),
        "the official x402 client is not installed; run `npm ci --prefix tests/interop/x402` \
         (or `bash .ci/run`)"
    );
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[3];
    let pay_to = DevLedger::DEV_ACCOUNTS[9];
    for base in ["", "/api"] {
        let before = (server.balance(payer), server.balance(pay_to));
        let mut command = tokio::process::Command::new("node");
        command
            .arg("pay_gateway.mjs")
            .arg(server.url(base))
            .arg("3")
            .arg("openai/gpt-5-mini")
            .arg("hello from x402 fetch")
            .current_dir(&folder);
        let stdout = run_client(command, "node pay_gateway.mjs").await;
        let result: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|_| panic!("one JSON line expected: {stdout}"));
        assert_eq!(result["status"], 200, "{result}");
        assert_eq!(result["payer"], payer);
        assert_eq!(result["answer"], "echo: hello from x402 fetch");
        assert_eq!(result["settlement"]["success"], true, "{result}");
        assert_eq!(result["settlement"]["network"], "eip155:84532");
        let quoted: u128 = result["quotedAmount"].as_str().unwrap().parse().unwrap();
        assert_eq!(server.balance(payer), before.0 - quoted);
        assert_eq!(server.balance(pay_to), before.1 + quoted);
    }
    assert_eq!(server.ledger.settlements(), 2);
}

#[tokio::test]
async fn the_official_client_with_a_payment_identifier_pays_once() {
    let folder = interop_dir("x402");
    assert!(
        folder.join("node_modules/@x402/extensions").is_dir(),
        "the official x402 extensions are not installed; run `npm ci --prefix tests/interop/x402` \
         (or `bash .ci/run`)"
    );
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[4];
    let before = server.balance(payer);
    let mut command = tokio::process::Command::new("node");
    command
        .arg("pay_once.mjs")
        .arg(server.url(""))
        .arg("4")
        .arg("openai/gpt-5-mini")
        .current_dir(&folder);
    let stdout = run_client(command, "node pay_once.mjs").await;
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("one JSON line expected: {stdout}"));
    assert!(
        result["id"].as_str().unwrap().starts_with("pay_"),
        "{result}"
    );
    assert_eq!(result["first"]["status"], 200, "{result}");
    assert!(result["first"]["receipt"].is_string(), "{result}");
    // The identical signature resent: the identical body and PAYMENT-RESPONSE.
    assert_eq!(result["identical"], result["first"], "{result}");
    // A fresh signature for the same request and payer: the stored answer.
    assert_eq!(result["freshSigned"], true, "{result}");
    assert_eq!(result["fresh"], result["first"], "{result}");
    // Another request under the id: 409, nothing served.
    assert_eq!(result["other"]["status"], 409, "{result}");
    let other: Value = serde_json::from_str(result["other"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(other["code"], "PAYMENT_IDENTIFIER_CONFLICT");
    // One settlement, charged once.
    assert_eq!(server.ledger.settlements(), 1);
    assert!(server.balance(payer) < before);
    let charged = before - server.balance(payer);
    assert!(charged <= 10_000, "{charged}");
}

#[tokio::test]
async fn the_official_siwx_client_gets_the_paid_answer_again_and_nothing_else() {
    let folder = interop_dir("x402");
    assert!(
        folder.join("node_modules/@x402/extensions").is_dir(),
        "the official x402 extensions are not installed; run `npm ci --prefix tests/interop/x402` \
         (or `bash .ci/run`)"
    );
    let server = Server::start(Config::default()).await;
    let mut command = tokio::process::Command::new("node");
    command
        .arg("siwx.mjs")
        .arg(server.url(""))
        .arg("5")
        .arg("6")
        .arg("openai/gpt-5-mini")
        .current_dir(&folder);
    let stdout = run_client(command, "node siwx.mjs").await;
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("one JSON line expected: {stdout}"));
    assert_eq!(result["paid"]["status"], 200, "{result}");
    // Signed in: the very answer paid for, and no second settlement.
    assert_eq!(result["signedIn"], result["paid"], "{result}");
    assert_eq!(server.ledger.settlements(), 1);
    for refused in [
        "otherRequest",
        "otherWallet",
        "replayed",
        "foreignDomain",
        "expired",
    ] {
        assert_eq!(result[refused]["status"], 402, "{refused}: {result}");
    }
    assert_eq!(server.ledger.settlements(), 1);
}

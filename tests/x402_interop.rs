//! Interop with the official x402 v2 client: `@x402/fetch` + `@x402/evm` 2.27
//! with a viem account of the public development mnemonic pays a loopback
//! axum route behind `X402Layer`.
//!
//! Needs Node.js and the client packages: `npm ci --prefix tests/interop/x402`.
#![cfg(feature = "x402")]

mod x402_fixtures;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use serde_json::Value;
use walletgate::clock::SystemClock;
use walletgate::x402::{
    facilitator::{DevLedger, LocalEvmFacilitator},
    server::PaymentReceipt,
};
use x402_fixtures::{CHAT, PAY_TO, QUOTED_UNITS, chat_layer};

/// The payer: account 0, as the script signs.
const PAYER: &str = DevLedger::DEV_ACCOUNTS[0];

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/x402")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_npm_client_pays_a_loopback_route() {
    let dir = interop_dir();
    assert!(
        dir.join("node_modules/@x402/fetch").is_dir()
            && dir.join("node_modules/@x402/evm").is_dir(),
        "the official x402 client is not installed: run `npm ci --prefix tests/interop/x402` first"
    );

    let ledger = Arc::new(DevLedger::new());
    let layer = chat_layer(
        LocalEvmFacilitator::new(ledger.clone(), Arc::new(SystemClock)),
        Arc::new(SystemClock),
    );
    let seen = Arc::new(Mutex::new(Vec::<PaymentReceipt>::new()));
    let handler_seen = seen.clone();
    let app = axum::Router::new()
        .route(
            CHAT,
            post(move |receipt: PaymentReceipt| async move {
                handler_seen.lock().unwrap().push(receipt.clone());
                let body =
                    serde_json::json!({"object": "chat.completion", "paid_by": receipt.payer()});
                ([("content-type", "application/json")], body.to_string())
            }),
        )
        .route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let token = DevLedger::base_sepolia_usdc();
    let balance = |who: &str| ledger.balance_of(&token, who.parse().unwrap());
    let before = (balance(PAYER), balance(PAY_TO));

    let run = tokio::process::Command::new("node")
        .arg("pay.mjs")
        .arg(format!("http://{address}{CHAT}"))
        .arg("0")
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the node client did not finish within 60 s")
        .expect("`node` must be on PATH");
    server.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node pay.mjs failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_str(stdout.trim()).expect("one JSON line from pay.mjs");

    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["payer"], PAYER);
    let settlement = &result["settlement"];
    assert_eq!(settlement["success"], true, "{result}");
    assert_eq!(settlement["network"], "eip155:84532");
    assert_eq!(settlement["payer"], PAYER);
    assert_eq!(settlement["amount"], QUOTED_UNITS.to_string());
    assert!(
        settlement["transaction"]
            .as_str()
            .is_some_and(|tx| tx.len() == 66)
    );
    let body: Value = serde_json::from_str(result["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["paid_by"], PAYER);

    assert_eq!(ledger.settlements(), 1);
    assert_eq!(balance(PAYER), before.0 - QUOTED_UNITS);
    assert_eq!(balance(PAY_TO), before.1 + QUOTED_UNITS);
    let receipts = seen.lock().unwrap().clone();
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0].amount().units(), QUOTED_UNITS);
}

//! walletgate's client pays mppx 0.11's OWN `evm` `charge` server
//! (`tests/interop/mpp/serve.mjs`, settling on the test chain itself):
//! through MPP when told (`--protocol mpp`, `Protocol::Mpp`), exactly the
//! amount moves and the `Payment-Receipt` names the mined transfer; a server
//! that asks again after the credential gets no second signature (exit 4).

use std::process::Stdio;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncBufReadExt;
use tower::{ServiceBuilder, ServiceExt};
use walletgate::client::pay::{Protocol, Receipt, SpendPolicy, X402PaymentLayer};

use crate::chain_support::{
    balance, fresh_payer_key, mint, receipt_status, set_eth_balance, shared_rpc_url,
};
use crate::chain_tests::{ONE_ETH, payer};

/// 0.0125 USD: what the mppx route asks, in USDC units.
const PRICE: u64 = 12_500;

/// mppx's server on a free loopback port, paying `recipient`, settling from
/// a fresh funded key; stopped when dropped.
struct MppxServer {
    url: String,
    _child: tokio::process::Child,
}

impl MppxServer {
    async fn start(rpc: &str, recipient: &str, again: bool) -> Self {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/mpp");
        assert!(
            folder.join("node_modules/mppx").is_dir(),
            "run `npm ci --prefix tests/interop/mpp` (or `bash .ci/run`)"
        );
        let settler = fresh_payer_key();
        set_eth_balance(rpc, payer(settler).address_bytes(), ONE_ETH).await;
        let mut command = tokio::process::Command::new("node");
        command
            .arg("serve.mjs")
            .args([rpc, recipient, "0.0125"])
            .args(again.then_some("again"))
            .env("MPP_SETTLER_KEY", format!("{settler}"))
            .current_dir(&folder)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("node runs");
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("mppx's server starts")
            .unwrap()
            .expect("one JSON line");
        let started: serde_json::Value = serde_json::from_str(&line).unwrap();
        Self {
            url: started["url"].as_str().unwrap().to_owned(),
            _child: child,
        }
    }
}

/// A payer with 1 USDC, a fresh recipient and mppx's server paying it.
struct Paying {
    rpc: String,
    from: Address,
    recipient: Address,
    server: MppxServer,
    /// The payer's key, as `walletgate pay` takes it (never printed).
    secret: String,
}

impl Paying {
    async fn start(again: bool) -> Self {
        let rpc = shared_rpc_url();
        let key = fresh_payer_key();
        let from = payer(key).address_bytes();
        mint(&rpc, from, 1_000_000).await;
        let recipient = payer(fresh_payer_key()).address_bytes();
        let server = MppxServer::start(&rpc, &recipient.to_checksum(None), again).await;
        Self {
            rpc,
            from,
            recipient,
            server,
            secret: format!("{key}"),
        }
    }
}

impl MppxServer {
    /// `walletgate pay --protocol mpp` of its route with `secret`.
    async fn pay(&self, secret: &str) -> (i32, String, String) {
        crate::client_tests::walletgate_pay(
            &[&self.url, "--data", "{}", "--protocol", "mpp"],
            Some(secret),
        )
        .await
    }
}

#[tokio::test]
async fn walletgate_pays_mppx_own_evm_server_exactly_once_on_chain() {
    let Paying {
        rpc,
        from,
        recipient,
        server,
        secret,
    } = Paying::start(false).await;

    // The CLI: the one receipt line, the transfer mined, exactly the amount.
    let (code, stdout, stderr) = server.pay(&secret).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains(r#""ok":true"#), "{stdout}");
    let line = stderr.lines().collect::<Vec<_>>();
    assert_eq!(line.len(), 1, "{stderr}");
    let prefix = format!(
        "paid 0.0125 USD from {} on eip155:84532 tx ",
        from.to_checksum(None)
    );
    let tx: B256 = line[0]
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{stderr}"))
        .parse()
        .expect("the Payment-Receipt's reference is a transaction hash");
    assert_eq!(receipt_status(&rpc, tx).await, Some(1));
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000 - PRICE));
    assert_eq!(balance(&rpc, recipient).await, U256::from(PRICE));
    crate::client_tests::assert_no_secret(&stdout, &[&secret]);
    crate::client_tests::assert_no_secret(&stderr, &[&secret]);

    // The library: the receipt holds the server's Payment-Receipt.
    let signer: alloy_signer_local::PrivateKeySigner = secret.parse().unwrap();
    let client = ServiceBuilder::new()
        .layer(
            X402PaymentLayer::new(signer)
                .with_policy(SpendPolicy::new().with_protocol(Protocol::Mpp)),
        )
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let request = http::Request::post(&server.url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let receipt = response.extensions().get::<Receipt>().cloned().unwrap();
    let mpp = receipt.mpp_receipt().expect("a Payment-Receipt");
    assert!(mpp.is_success());
    assert_eq!(mpp.method, "evm");
    let tx: B256 = mpp.reference.parse().unwrap();
    assert_eq!(receipt_status(&rpc, tx).await, Some(1));
    assert_eq!(receipt.transaction(), Some(mpp.reference.as_str()));
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000 - 2 * PRICE));
    assert_eq!(balance(&rpc, recipient).await, U256::from(2 * PRICE));

    // x402, the default where both are offered: mppx's server reads the
    // payment's extensions echoed as declared (schema included).
    let (code, stdout, stderr) =
        crate::client_tests::walletgate_pay(&[&server.url, "--data", "{}"], Some(&secret)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000 - 3 * PRICE));
}

#[tokio::test]
async fn an_mppx_server_asking_again_after_the_credential_gets_no_second_signature() {
    let paying = Paying::start(true).await;
    let (code, stdout, stderr) = paying.server.pay(&paying.secret).await;
    assert_eq!(code, 4, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("asked for payment again"), "{stderr}");
    assert!(stderr.contains("2 request(s), 1 signature(s)"), "{stderr}");
    crate::client_tests::assert_no_secret(&stdout, &[&paying.secret]);
    crate::client_tests::assert_no_secret(&stderr, &[&paying.secret]);
    assert_eq!(
        balance(&paying.rpc, paying.from).await,
        U256::from(1_000_000u64)
    );
    assert_eq!(balance(&paying.rpc, paying.recipient).await, U256::ZERO);
}

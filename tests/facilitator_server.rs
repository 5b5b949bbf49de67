//! `walletgate facilitator` on a real chain (anvil with Circle's USDC,
//! `tests/chain_support`): its HTTP API, its refusals, and the official
//! `@x402/express` server (`tests/interop/x402-express-server`) settling
//! through it, paid by walletgate's payer, balances checked to the unit.

mod chain_support;
mod redis_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use alloy_primitives::{Address, U256};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use walletgate::client::payer::Payer;
use walletgate::x402::facilitator::FacilitatorRequest;
use walletgate::x402::server::PaymentOption;
use walletgate::x402::wire::{AtomicAmount, PaymentRequired, codec};

use chain_support::{USDC, balance, fresh_payer_key, mint, set_eth_balance, shared_rpc_url};

const ONE_ETH: u128 = 1_000_000_000_000_000_000;

/// A child process killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "walletgate-facilitator-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A mode-0600 file holding `text`.
fn secret_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// `walletgate facilitator` with a fresh funded key paying only `pay_to`;
/// its URL from its first stdout line.
async fn facilitator(rpc: &str, pay_to: Address, extra: &[&str]) -> (Running, String) {
    facilitator_logging(rpc, pay_to, extra, Stdio::inherit(), "info").await
}

/// [`facilitator`] with its stderr (the logs, at `RUST_LOG=filter`) into `stderr`.
async fn facilitator_logging(
    rpc: &str,
    pay_to: Address,
    extra: &[&str],
    stderr: Stdio,
    filter: &str,
) -> (Running, String) {
    let (key_file, _) = funded_settler_key(rpc).await;
    spawn_facilitator(rpc, &key_file, pay_to, extra, stderr, filter)
}

/// A fresh settler key holding one ETH, in a mode-0600 file; its address.
async fn funded_settler_key(rpc: &str) -> (PathBuf, Address) {
    let key = fresh_payer_key();
    let settler = Payer::from_key(key.0).unwrap().address_bytes();
    set_eth_balance(rpc, settler, ONE_ETH).await;
    let dir = scratch(&format!("{settler:x}"));
    (
        secret_file(&dir, "settler.key", &format!("{key}\n")),
        settler,
    )
}

/// `walletgate facilitator` settling with the key in `key_file`; its URL.
fn spawn_facilitator(
    rpc: &str,
    key_file: &Path,
    pay_to: Address,
    extra: &[&str],
    stderr: Stdio,
    filter: &str,
) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_walletgate"))
        .args(["facilitator", "--rpc-url", rpc, "--network", "eip155:84532"])
        .args(["--asset", &USDC.to_checksum(None)])
        .args(["--pay-to", &pay_to.to_checksum(None)])
        .args(["--listen", "127.0.0.1:0"])
        .arg("--key-file")
        .arg(key_file)
        .args(extra)
        .env("RUST_LOG", filter)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("http://"),
        "facilitator did not start: {line:?}"
    );
    (Running(child), line.trim().to_owned())
}

async fn exchange(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> (StatusCode, http::HeaderMap, Value) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut request = http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let response = client
        .request(
            request
                .body(Full::new(Bytes::from(body.unwrap_or_default())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn fresh_address() -> Address {
    Payer::from_key(fresh_payer_key().0)
        .unwrap()
        .address_bytes()
}

/// A funded payer's payment of 10000 units to `pay_to`, as a `/verify` body.
async fn payment_body(rpc: &str, pay_to: Address) -> (String, Address) {
    payment_body_signed_at(rpc, pay_to, now()).await
}

/// [`payment_body`] signed as if at `signed_at` (valid until it + 300 s).
async fn payment_body_signed_at(rpc: &str, pay_to: Address, signed_at: u64) -> (String, Address) {
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    mint(rpc, payer.address_bytes(), 1_000_000).await;
    let offer = PaymentOption::base_sepolia_usdc(&pay_to.to_checksum(None))
        .unwrap()
        .requirements_for_amount(AtomicAmount::new(10_000));
    let request = FacilitatorRequest::new(payer.pay(&offer, signed_at).unwrap(), offer);
    (
        serde_json::to_string(&request).unwrap(),
        payer.address_bytes(),
    )
}

#[test]
fn a_non_loopback_listen_without_a_token_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_walletgate"))
        .args([
            "facilitator",
            "--rpc-url",
            "http://127.0.0.1:1",
            "--key-file",
            "/nonexistent",
        ])
        .args([
            "--network",
            "eip155:84532",
            "--asset",
            &USDC.to_checksum(None),
        ])
        .args(["--pay-to", &USDC.to_checksum(None), "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--auth-token-file"), "{stderr}");
}

#[tokio::test]
async fn the_api_answers_verdicts_as_json_and_the_first_callers_retry_the_same_transaction() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let (_running, url) = facilitator(&rpc, pay_to, &[]).await;
    let (status, _, health) = exchange("GET", &format!("{url}/healthz"), &[], None).await;
    assert_eq!(
        (status, health["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let (status, _, _) = exchange("GET", &format!("{url}/readyz"), &[], None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, _, supported) = exchange("GET", &format!("{url}/supported"), &[], None).await;
    assert_eq!(supported["kinds"][0]["network"], "eip155:84532");
    assert_eq!(supported["kinds"][0]["scheme"], "exact");

    // A recipient outside --pay-to is refused at verify, as a verdict.
    let (elsewhere, _) = payment_body(&rpc, fresh_address()).await;
    let (status, _, verdict) = exchange(
        "POST",
        &format!("{url}/verify"),
        &[],
        Some(elsewhere.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(verdict["isValid"], false);
    assert_eq!(
        verdict["invalidReason"],
        "invalid_exact_evm_recipient_mismatch"
    );
    let (status, _, settled) =
        exchange("POST", &format!("{url}/settle"), &[], Some(elsewhere)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(settled["success"], false);
    assert_eq!(settled["transaction"], "");

    let (body, from) = payment_body(&rpc, pay_to).await;
    let (_, _, verdict) = exchange("POST", &format!("{url}/verify"), &[], Some(body.clone())).await;
    assert_eq!(verdict["isValid"], true, "{verdict}");
    let settle = format!("{url}/settle");
    let caller = [("idempotency-key", "first-caller-0123456789")];
    let (_, _, first) = exchange("POST", &settle, &caller, Some(body.clone())).await;
    assert_eq!(first["success"], true, "{first}");
    // Its caller asks again: the same transaction.
    let (_, _, again) = exchange("POST", &settle, &caller, Some(body.clone())).await;
    assert_eq!(again, first);
    assert_eq!(balance(&rpc, from).await, U256::from(990_000));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(10_000));
    // Verified again it is a replay, still a 200 verdict.
    let (status, _, replay) =
        exchange("POST", &format!("{url}/verify"), &[], Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        replay["invalidReason"],
        "invalid_exact_evm_nonce_already_used"
    );
    // A key that proves nothing is a 400, before anything is read.
    let (status, _, refused) =
        exchange("POST", &settle, &[("idempotency-key", "short")], Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["error"], "invalid_idempotency_key");
    let (status, _, _) = exchange("POST", &format!("{url}/verify"), &[], Some("{".into())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Whether `answer` is the refusal of a copy of the settlement `transaction`.
fn refused_as_copy(answer: &Value, transaction: &str) -> bool {
    answer["success"] == false
        && answer["errorReason"] == "invalid_exact_evm_nonce_already_used"
        && answer["transaction"] == ""
        && answer["errorMessage"]
            .as_str()
            .is_some_and(|message| message.contains(transaction))
}

#[tokio::test]
async fn a_settle_copy_without_the_first_callers_key_is_refused_and_a_restart_sends_nothing() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let (running, url) = facilitator(&rpc, pay_to, &[]).await;
    let settle = format!("{url}/settle");
    let (body, from) = payment_body(&rpc, pay_to).await;
    let caller = [("idempotency-key", "first-caller-0123456789")];
    let (_, _, first) = exchange("POST", &settle, &caller, Some(body.clone())).await;
    assert_eq!(first["success"], true, "{first}");
    let transaction = first["transaction"].as_str().unwrap().to_owned();
    for headers in [
        &[][..],
        &[("idempotency-key", "another-caller-0123456789")][..],
    ] {
        let (status, _, copy) = exchange("POST", &settle, headers, Some(body.clone())).await;
        assert_eq!(status, StatusCode::OK);
        assert!(refused_as_copy(&copy, &transaction), "{copy}");
    }

    // Records gone with the process: the first caller's key reads nothing,
    // and the token's own record refuses it before anything is sent.
    drop(running);
    let (_restarted, url) = facilitator(&rpc, pay_to, &[]).await;
    let (_, _, supported) = exchange("GET", &format!("{url}/supported"), &[], None).await;
    let settler: Address = supported["signers"]["eip155:*"][0]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let (_, _, after) = exchange("POST", &format!("{url}/settle"), &caller, Some(body)).await;
    assert_eq!(after["success"], false, "{after}");
    assert_eq!(after["errorReason"], "invalid_exact_evm_nonce_already_used");
    assert_eq!(chain_support::transaction_count(&rpc, settler).await, 0);
    assert_eq!(balance(&rpc, from).await, U256::from(990_000));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(10_000));
}

/// A token guards the API, not the probes; its scheme is read in any case;
/// each verify decision is a log line (at trace, too) that holds neither the
/// token nor the payment's signature.
#[tokio::test]
async fn with_a_token_file_only_a_wrong_or_missing_bearer_gets_401() {
    let rpc = shared_rpc_url();
    let dir = scratch("token");
    let token = "facilitator-test-token-0123456789abcdef";
    let token_file = secret_file(&dir, "token", &format!("{token}\n"));
    let log_path = dir.join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let (_running, url) = facilitator_logging(
        &rpc,
        fresh_address(),
        &["--auth-token-file", token_file.to_str().unwrap()],
        Stdio::from(log),
        "trace",
    )
    .await;
    let supported = format!("{url}/supported");
    let (status, _, _) = exchange("GET", &supported, &[], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let prefix = &token[..token.len() - 1];
    let longer = format!("{token}0");
    for wrong in ["wrong", prefix, &longer] {
        let bearer = format!("Bearer {wrong}");
        let (status, _, _) = exchange("GET", &supported, &[("authorization", &bearer)], None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong}");
    }
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let bearer = format!("{scheme} {token}");
        let (status, _, _) = exchange("GET", &supported, &[("authorization", &bearer)], None).await;
        assert_eq!(status, StatusCode::OK, "{scheme}");
    }
    // The probes are public, by GET and HEAD.
    for (method, path) in [
        ("GET", "/healthz"),
        ("HEAD", "/healthz"),
        ("GET", "/readyz"),
        ("HEAD", "/readyz"),
    ] {
        let (status, _, _) = exchange(method, &format!("{url}{path}"), &[], None).await;
        assert_eq!(status, StatusCode::OK, "{method} {path}");
    }
    // One line per decision, the secrets in none.
    let (body, from) = payment_body(&rpc, fresh_address()).await;
    let signature =
        serde_json::from_str::<Value>(&body).unwrap()["paymentPayload"]["payload"]["signature"]
            .as_str()
            .unwrap()
            .to_owned();
    let bearer = format!("bearer {token}");
    let (_, _, verdict) = exchange(
        "POST",
        &format!("{url}/verify"),
        &[("authorization", &bearer)],
        Some(body),
    )
    .await;
    assert_eq!(verdict["isValid"], false);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    let line = logged
        .lines()
        .find(|line| line.contains("refused"))
        .unwrap_or_else(|| panic!("no decision line:\n{logged}"));
    assert!(line.contains("endpoint=\"verify\""), "{line}");
    assert!(
        line.contains("invalid_exact_evm_recipient_mismatch"),
        "{line}"
    );
    assert!(line.contains(&from.to_checksum(None)), "{line}");
    assert!(!logged.contains(token), "the token leaked");
    assert!(!logged.contains(&signature[2..]), "the signature leaked");
}

/// The token file is checked before anything starts: readable by its owner
/// only, at least 32 bytes; the error names the file, never the token.
#[test]
fn a_short_or_readable_token_file_is_refused_at_start() {
    let dir = scratch("token-start");
    let short = secret_file(&dir, "short", "short-facilitator-token\n");
    let readable = secret_file(&dir, "readable", "0123456789abcdef0123456789abcdef-long\n");
    std::fs::set_permissions(
        &readable,
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    for (file, why, secret) in [
        (&short, "32 bytes", "short-facilitator-token"),
        (
            &readable,
            "chmod 600",
            "0123456789abcdef0123456789abcdef-long",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_walletgate"))
            .args(["facilitator", "--rpc-url", "http://127.0.0.1:1"])
            .args(["--key-file", "/nonexistent", "--network", "eip155:84532"])
            .args(["--asset", &USDC.to_checksum(None)])
            .args(["--pay-to", &USDC.to_checksum(None)])
            .arg("--auth-token-file")
            .arg(file)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(64));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(why), "{stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
        assert!(!stderr.contains(secret), "{stderr}");
    }
}

/// 100 connections that send nothing, one that stops inside its headers and
/// one whose body never arrives: each is closed within its timeout, and
/// `/healthz` answers at once all along.
#[tokio::test]
async fn idle_connections_are_closed_and_healthz_answers_throughout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::time::{Duration, Instant, timeout};
    let rpc = shared_rpc_url();
    let (_running, url) = facilitator(
        &rpc,
        fresh_address(),
        &["--header-timeout-secs", "1", "--idle-timeout-secs", "2"],
    )
    .await;
    let address = url.trim_start_matches("http://").to_owned();
    let started = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    let mut half_headers = tokio::net::TcpStream::connect(&address).await.unwrap();
    half_headers
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut no_body = tokio::net::TcpStream::connect(&address).await.unwrap();
    no_body
        .write_all(b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        .await
        .unwrap();
    // Health answers throughout, each within a second.
    let healthz = format!("{url}/healthz");
    while started.elapsed() < Duration::from_secs(3) {
        let health = exchange("GET", &healthz, &[], None);
        let (status, _, _) = timeout(Duration::from_secs(1), health)
            .await
            .expect("/healthz answers while idle connections are open");
        assert_eq!(status, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // By now (1 s header timeout, 2 s idle timeout, slack) every one is closed.
    let closed = |mut stream: tokio::net::TcpStream| async move {
        let mut buffer = [0u8; 512];
        loop {
            match timeout(Duration::from_secs(2), stream.read(&mut buffer)).await {
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    };
    for (index, stream) in idle.into_iter().enumerate() {
        assert!(closed(stream).await, "idle connection {index} still open");
    }
    assert!(closed(half_headers).await, "half-sent headers still open");
    assert!(
        closed(no_body).await,
        "a request without its body still open"
    );
}

/// At `--max-connections` the next connection waits, unaccepted, until a
/// slot frees (here: the header timeout closing an idle one); then it is
/// served.
#[tokio::test]
async fn past_max_connections_the_next_waits_for_a_slot() {
    use tokio::time::{Duration, Instant, timeout};
    let rpc = shared_rpc_url();
    let (_running, url) = facilitator(
        &rpc,
        fresh_address(),
        &["--header-timeout-secs", "1", "--max-connections", "2"],
    )
    .await;
    let address = url.trim_start_matches("http://").to_owned();
    let _first = tokio::net::TcpStream::connect(&address).await.unwrap();
    let _second = tokio::net::TcpStream::connect(&address).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    let (status, _, _) = timeout(
        Duration::from_secs(5),
        exchange("GET", &format!("{url}/healthz"), &[], None),
    )
    .await
    .expect("served once a slot is free");
    assert_eq!(status, StatusCode::OK);
    assert!(
        asked.elapsed() >= Duration::from_millis(500),
        "served at once: the cap did not hold ({:?})",
        asked.elapsed()
    );
}

/// An authorization valid far beyond the offer's `maxTimeoutSeconds` (a
/// year-3000 `validBefore`) is refused with the standard reason, so no
/// record of it is kept until then.
#[tokio::test]
async fn a_valid_before_far_in_the_future_is_refused() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let (_running, url) = facilitator(&rpc, pay_to, &[]).await;
    let year_3000 = 32_503_680_000;
    let (body, _) = payment_body_signed_at(&rpc, pay_to, year_3000 - 300).await;
    for endpoint in ["verify", "settle"] {
        let (status, _, verdict) = exchange(
            "POST",
            &format!("{url}/{endpoint}"),
            &[],
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let reason = verdict["invalidReason"]
            .as_str()
            .or(verdict["errorReason"].as_str());
        assert_eq!(
            reason,
            Some("invalid_exact_evm_payload_authorization_valid_before"),
            "{verdict}"
        );
    }
}

/// The official `@x402/express` server (`tests/interop/x402-express-server`)
/// settling through the facilitator at `facilitator_url`; the paid route's URL.
fn express_server(facilitator_url: &str, pay_to: Address) -> (Running, String) {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/x402-express-server");
    assert!(
        folder.join("node_modules/@x402/express").is_dir(),
        "run `npm ci --prefix tests/interop/x402-express-server` (or `bash .ci/run`)"
    );
    let mut child = Command::new("node")
        .arg(folder.join("server.mjs"))
        .arg("0")
        .arg(pay_to.to_checksum(None))
        .arg(facilitator_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let paid = format!("http://127.0.0.1:{}/paid", line.trim());
    (Running(child), paid)
}

#[tokio::test]
async fn the_official_express_server_settles_through_it_on_chain_once() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let (_facilitator, url) = facilitator(&rpc, pay_to, &[]).await;
    let (_server, paid) = express_server(&url, pay_to);

    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    let from = payer.address_bytes();
    mint(&rpc, from, 1_000_000).await;
    let body = json!({"question": "settled on chain?"}).to_string();
    let (status, headers, _) = exchange("POST", &paid, &[], Some(body.clone())).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    let quote: PaymentRequired = codec::decode(headers["payment-required"].as_bytes()).unwrap();
    let header = codec::encode(&payer.pay_quote(&quote, now()).unwrap());
    let (status, headers, answer) = exchange(
        "POST",
        &paid,
        &[("payment-signature", header.as_str())],
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["paid"], true);
    let receipt: walletgate::x402::wire::SettleResponse =
        codec::decode(headers["payment-response"].as_bytes()).unwrap();
    assert!(receipt.success);
    let hash = receipt.transaction.parse().unwrap();
    assert_eq!(chain_support::mined_status(&rpc, hash).await, 1);
    assert_eq!(balance(&rpc, from).await, U256::from(999_000));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(1_000));

    // The same payment again is refused, and nothing moves.
    let (status, _, _) = exchange(
        "POST",
        &paid,
        &[("payment-signature", header.as_str())],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(balance(&rpc, from).await, U256::from(999_000));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(1_000));
}

/// One payment sent to the official server 10 times at once, then 3 times
/// one after another: the statuses, and the payer's and payee's balances.
async fn copies_of_one_payment(rpc: &str, paid: &str, pay_to: Address) -> Vec<StatusCode> {
    let payer = Payer::from_key(fresh_payer_key().0).unwrap();
    let from = payer.address_bytes();
    mint(rpc, from, 1_000_000).await;
    let body = json!({"question": "served how often?"}).to_string();
    let (status, headers, _) = exchange("POST", paid, &[], Some(body.clone())).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    let quote: PaymentRequired = codec::decode(headers["payment-required"].as_bytes()).unwrap();
    let header = codec::encode(&payer.pay_quote(&quote, now()).unwrap());
    let send = || {
        let (paid, header, body) = (paid.to_owned(), header.clone(), body.clone());
        async move {
            let signature = [("payment-signature", header.as_str())];
            exchange("POST", &paid, &signature, Some(body)).await.0
        }
    };
    let concurrent: Vec<_> = (0..10).map(|_| tokio::spawn(send())).collect();
    let mut statuses = Vec::new();
    for task in concurrent {
        statuses.push(task.await.unwrap());
    }
    for _ in 0..3 {
        statuses.push(send().await);
    }
    assert_eq!(balance(rpc, from).await, U256::from(999_000));
    assert_eq!(balance(rpc, pay_to).await, U256::from(1_000));
    statuses
}

fn served_once(statuses: &[StatusCode]) -> bool {
    statuses
        .iter()
        .filter(|status| **status == StatusCode::OK)
        .count()
        == 1
        && statuses
            .iter()
            .all(|status| [StatusCode::OK, StatusCode::PAYMENT_REQUIRED].contains(status))
}

#[tokio::test]
async fn the_official_express_server_serves_one_payment_once_through_it() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let (_facilitator, url) = facilitator(&rpc, pay_to, &[]).await;
    let (_server, paid) = express_server(&url, pay_to);
    let statuses = copies_of_one_payment(&rpc, &paid, pay_to).await;
    assert!(served_once(&statuses), "{statuses:?}");
}

#[tokio::test]
async fn the_official_express_server_serves_one_payment_once_through_the_official_facilitator() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let official = chain_support::OfficialFacilitator::start(&rpc);
    let (_server, paid) = express_server(&official.url(), pay_to);
    let statuses = copies_of_one_payment(&rpc, &paid, pay_to).await;
    assert!(served_once(&statuses), "{statuses:?}");
}

#[test]
fn a_key_file_others_can_read_is_refused_and_never_echoed() {
    let key = fresh_payer_key().to_string();
    let dir = scratch("leak");
    let path = dir.join("settler.key");
    std::fs::write(&path, format!("{key}\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_walletgate"))
        .args([
            "facilitator",
            "--rpc-url",
            "http://127.0.0.1:1/secret-api-key",
        ])
        .arg("--key-file")
        .arg(&path)
        .args([
            "--network",
            "eip155:84532",
            "--asset",
            &USDC.to_checksum(None),
        ])
        .args(["--pay-to", &USDC.to_checksum(None), "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains("chmod 600"), "{printed}");
    assert!(!printed.contains(&key[2..]), "the key leaked");
    // Readable by its owner only, the key is fine; the node is unreachable and
    // the error does not print the RPC URL's path (it may hold an API key).
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_walletgate"))
        .args([
            "facilitator",
            "--rpc-url",
            "http://127.0.0.1:1/secret-api-key",
        ])
        .arg("--key-file")
        .arg(&path)
        .args([
            "--network",
            "eip155:84532",
            "--asset",
            &USDC.to_checksum(None),
        ])
        .args(["--pay-to", &USDC.to_checksum(None)])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let printed = String::from_utf8_lossy(&output.stderr);
    assert!(!printed.contains(&key[2..]), "the key leaked");
    assert!(!printed.contains("secret-api-key"), "{printed}");
}

/// An `upto` offer of 10000 units to `pay_to`, settled by `facilitator`.
fn upto_offer(pay_to: Address, facilitator: &str) -> walletgate::x402::wire::PaymentRequirements {
    PaymentOption::upto_permit2(
        walletgate::x402::wire::Network::base_sepolia(),
        &USDC.to_checksum(None),
        &pay_to.to_checksum(None),
        facilitator.parse().unwrap(),
    )
    .requirements_for_amount(AtomicAmount::new(10_000))
}

#[tokio::test]
async fn upto_is_listed_naming_the_settler_and_settles_the_amount_used() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let (_running, url) = facilitator(&rpc, pay_to, &[]).await;
    let (_, _, supported) = exchange("GET", &format!("{url}/supported"), &[], None).await;
    let kind = supported["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kind| kind["scheme"] == "upto")
        .expect("upto is listed")
        .clone();
    assert_eq!(kind["network"], "eip155:84532");
    let settler = kind["extra"]["facilitatorAddress"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(supported["signers"]["eip155:*"][0], settler.as_str());

    // A payer whose wallet approved Permit2 for 0.05 USD with `walletgate approve`.
    let key = fresh_payer_key();
    let payer = Payer::from_key(key.0).unwrap();
    let from = payer.address_bytes();
    mint(&rpc, from, 1_000_000).await;
    set_eth_balance(&rpc, from, ONE_ETH).await;
    let approve = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_walletgate"))
            .args([
                "approve",
                "--rpc-url",
                &rpc,
                "--asset",
                &USDC.to_checksum(None),
            ])
            .args(extra)
            .env("WALLETGATE_PRIVATE_KEY", key.to_string())
            .output()
            .unwrap()
    };
    let dry = approve(&["--max-usd", "0.05", "--dry-run", "--format", "json"]);
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    let plan: Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(plan["dryRun"], true);
    assert_eq!(plan["amount"], "50000");
    assert_eq!(
        plan["spender"],
        "0x000000000022D473030F116dDEE9F6B43aC78BA3"
    );
    assert_eq!(
        chain_support::permit2_allowance(&rpc, from).await,
        U256::ZERO,
        "a dry run sends nothing"
    );
    let sent = approve(&["--max-usd", "0.05"]);
    assert_eq!(sent.status.code(), Some(0), "{sent:?}");
    let stdout = String::from_utf8_lossy(&sent.stdout);
    assert!(stdout.starts_with("approved Permit2"), "{stdout}");
    assert!(
        !stdout.contains(&key.to_string()[2..])
            && !String::from_utf8_lossy(&sent.stderr).contains(&key.to_string()[2..])
    );
    assert_eq!(
        chain_support::permit2_allowance(&rpc, from).await,
        U256::from(50_000)
    );
    // Not a decimal amount: a usage error, nothing sent.
    assert_eq!(approve(&["--max-usd", "1e3"]).status.code(), Some(64));

    let offer = upto_offer(pay_to, &settler);
    let request = FacilitatorRequest::new(payer.pay_upto(&offer, now()).unwrap(), offer);
    let (status, _, verdict) = exchange(
        "POST",
        &format!("{url}/verify"),
        &[],
        Some(serde_json::to_string(&request).unwrap()),
    )
    .await;
    assert_eq!(
        (status, &verdict["isValid"]),
        (StatusCode::OK, &json!(true)),
        "{verdict}"
    );
    let used = request.with_settled_amount(AtomicAmount::new(4_321));
    let (status, _, settled) = exchange(
        "POST",
        &format!("{url}/settle"),
        &[],
        Some(serde_json::to_string(&used).unwrap()),
    )
    .await;
    assert_eq!(
        (status, &settled["success"]),
        (StatusCode::OK, &json!(true)),
        "{settled}"
    );
    assert_eq!(settled["amount"], "4321");
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000 - 4_321));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(4_321));
    // FiatToken lowers the allowance by what Permit2 pulled.
    assert_eq!(
        chain_support::permit2_allowance(&rpc, from).await,
        U256::from(50_000 - 4_321)
    );
}

/// The `--redis-*` arguments of replicas sharing a Redis under `prefix`:
/// the test server, or the test cluster.
fn redis_args(cluster: bool, prefix: &str) -> Vec<String> {
    let mut args = vec!["--redis-prefix".to_owned(), prefix.to_owned()];
    if cluster {
        args.extend([
            "--redis-url".to_owned(),
            redis_support::shared_cluster_seeds().join(","),
            "--redis-mode".to_owned(),
            "cluster".to_owned(),
        ]);
    } else {
        args.extend(["--redis-url".to_owned(), redis_support::shared_url()]);
    }
    args
}

/// From now on `chain` mines one block a second: settlements sent at once wait together.
async fn one_block_a_second(chain: &str) {
    chain_support::rpc(chain, "evm_setAutomine", json!([false])).await;
    chain_support::rpc(chain, "evm_setIntervalMining", json!([1])).await;
}

/// `/settle` of `body` at `url` with `key`, from its own task.
fn settle_task(
    url: &str,
    key: String,
    body: String,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let settle = format!("{url}/settle");
    tokio::spawn(async move {
        let (status, _, answer) =
            exchange("POST", &settle, &[("idempotency-key", &key)], Some(body)).await;
        (status, answer)
    })
}

/// `count` funded payers' payment bodies to `pay_to` (minted while the
/// chain still mines at once).
async fn payment_bodies(chain: &str, pay_to: Address, count: usize) -> Vec<(String, Address)> {
    let mut bodies = Vec::new();
    for _ in 0..count {
        bodies.push(payment_body(chain, pay_to).await);
    }
    bodies
}

/// The settler's mined and pending nonce counts.
async fn settler_nonces(chain: &str, settler: Address) -> (u64, u64) {
    let pending = chain_support::rpc(
        chain,
        "eth_getTransactionCount",
        json!([settler, "pending"]),
    )
    .await;
    let pending = u64::from_str_radix(pending.as_str().unwrap().trim_start_matches("0x"), 16);
    (
        chain_support::transaction_count(chain, settler).await,
        pending.unwrap(),
    )
}

async fn two_replicas_share_one_settler_key(cluster: bool) {
    let chain = chain_support::private_chain();
    let pay_to = fresh_address();
    let bodies = payment_bodies(&chain, pay_to, 31).await;
    one_block_a_second(&chain).await;
    let (key_file, settler) = funded_settler_key(&chain).await;
    let prefix = redis_support::unique_prefix("facilitator-replicas");
    let redis = redis_args(cluster, &prefix);
    let redis: Vec<&str> = redis.iter().map(String::as_str).collect();
    let logs = [0, 1].map(|n| key_file.with_file_name(format!("replica-{n}.log")));
    let log_to = |n: usize| Stdio::from(std::fs::File::create(&logs[n]).unwrap());
    let replicas = [
        spawn_facilitator(&chain, &key_file, pay_to, &redis, log_to(0), "debug"),
        spawn_facilitator(&chain, &key_file, pay_to, &redis, log_to(1), "debug"),
    ];
    for (_, url) in &replicas {
        let (status, _, _) = exchange("GET", &format!("{url}/readyz"), &[], None).await;
        assert_eq!(status, StatusCode::OK);
    }
    // 30 distinct payments, half to each; 5 copies of one more with one key, over both.
    let mut distinct = Vec::new();
    for (n, (body, _)) in bodies[..30].iter().enumerate() {
        let url = &replicas[n % 2].1;
        distinct.push(settle_task(
            url,
            format!("distinct-payment-{n:04}"),
            body.clone(),
        ));
    }
    let copies: Vec<_> = (0..5)
        .map(|n| {
            let url = &replicas[n % 2].1;
            settle_task(url, "one-payment-five-copies".into(), bodies[30].0.clone())
        })
        .collect();
    let mut transactions = std::collections::HashSet::new();
    for task in distinct {
        let (status, answer) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["success"], true, "{answer}");
        assert!(transactions.insert(answer["transaction"].as_str().unwrap().to_owned()));
    }
    let mut copied = std::collections::HashSet::new();
    for task in copies {
        let (status, answer) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["success"], true, "{answer}");
        copied.insert(answer["transaction"].as_str().unwrap().to_owned());
    }
    assert_eq!(copied.len(), 1, "every copy names the same transaction");
    assert!(transactions.is_disjoint(&copied));
    for (_, from) in &bodies {
        assert_eq!(balance(&chain, *from).await, U256::from(990_000));
    }
    assert_eq!(balance(&chain, pay_to).await, U256::from(31 * 10_000));
    assert_eq!(
        settler_nonces(&chain, settler).await,
        (31, 31),
        "the settler's nonce advanced by exactly 31, nothing left waiting"
    );
    drop(replicas);
    let key = std::fs::read_to_string(&key_file).unwrap();
    let key = key.trim().trim_start_matches("0x");
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            text.contains("settled"),
            "the replica logged its settlements"
        );
        assert!(
            !text.to_ascii_lowercase().contains(key),
            "a replica logged its settler key"
        );
    }
}

#[tokio::test]
async fn two_replicas_on_one_redis_share_one_settler_key() {
    two_replicas_share_one_settler_key(false).await;
}

#[tokio::test]
async fn two_replicas_on_a_redis_cluster_share_one_settler_key() {
    two_replicas_share_one_settler_key(true).await;
}

#[tokio::test]
async fn a_replica_killed_mid_load_leaves_every_payment_settled_once() {
    let chain = chain_support::private_chain();
    let pay_to = fresh_address();
    let bodies = payment_bodies(&chain, pay_to, 20).await;
    one_block_a_second(&chain).await;
    let (key_file, settler) = funded_settler_key(&chain).await;
    let prefix = redis_support::unique_prefix("facilitator-killed");
    let redis = redis_args(false, &prefix);
    let redis: Vec<&str> = redis.iter().map(String::as_str).collect();
    let (mut killed, killed_url) =
        spawn_facilitator(&chain, &key_file, pay_to, &redis, Stdio::inherit(), "warn");
    let (_survivor, survivor_url) =
        spawn_facilitator(&chain, &key_file, pay_to, &redis, Stdio::inherit(), "warn");
    let key = |n: usize| format!("payment-killed-or-not-{n:04}");
    let mut to_survivor = Vec::new();
    let mut to_killed = Vec::new();
    for (n, (body, _)) in bodies.iter().enumerate() {
        if n % 2 == 0 {
            to_survivor.push(settle_task(&survivor_url, key(n), body.clone()));
        } else {
            to_killed.push(settle_task(&killed_url, key(n), body.clone()));
        }
    }
    // Sent, not yet mined (one block a second): the replica dies.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let _ = killed.0.kill();
    let _ = killed.0.wait();
    for task in to_survivor {
        let (status, answer) = task.await.unwrap();
        assert_eq!(
            (status, &answer["success"]),
            (StatusCode::OK, &json!(true)),
            "{answer}"
        );
    }
    for task in to_killed {
        // Cut off, or answered before the kill: resent below either way.
        let _ = task.await;
    }
    // Restarted, the killed replica's callers ask again with their keys.
    let (_restarted, restarted_url) =
        spawn_facilitator(&chain, &key_file, pay_to, &redis, Stdio::inherit(), "warn");
    for (n, (body, _)) in bodies.iter().enumerate().filter(|(n, _)| n % 2 == 1) {
        let (status, answer) = settle_task(&restarted_url, key(n), body.clone())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["success"], true, "{answer}");
    }
    for (_, from) in &bodies {
        assert_eq!(
            balance(&chain, *from).await,
            U256::from(990_000),
            "paid once"
        );
    }
    assert_eq!(balance(&chain, pay_to).await, U256::from(20 * 10_000));
    let (mined, pending) = settler_nonces(&chain, settler).await;
    assert_eq!(mined, pending, "nothing left waiting behind a gap");
    // 20 transfers, and a filler for each nonce the killed replica took and never sent.
    assert!(mined >= 20, "{mined}");
}

#[tokio::test]
async fn while_redis_is_away_readyz_and_settle_are_503_and_nothing_is_sent() {
    let rpc = shared_rpc_url();
    let pay_to = fresh_address();
    let redis = redis_support::RedisServer::start();
    let prefix = redis_support::unique_prefix("facilitator-redis-away");
    let (key_file, settler) = funded_settler_key(&rpc).await;
    let url_arg = redis.url();
    let (_running, url) = spawn_facilitator(
        &rpc,
        &key_file,
        pay_to,
        &["--redis-url", &url_arg, "--redis-prefix", &prefix],
        Stdio::inherit(),
        "error",
    );
    let (status, _, _) = exchange("GET", &format!("{url}/readyz"), &[], None).await;
    assert_eq!(status, StatusCode::OK);
    drop(redis);
    let (status, _, _) = exchange("GET", &format!("{url}/readyz"), &[], None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (body, from) = payment_body(&rpc, pay_to).await;
    let (status, headers, answer) = exchange(
        "POST",
        &format!("{url}/settle"),
        &[("idempotency-key", "while-redis-is-away-0001")],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert!(headers.contains_key("retry-after"));
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000));
    assert_eq!(chain_support::transaction_count(&rpc, settler).await, 0);
}

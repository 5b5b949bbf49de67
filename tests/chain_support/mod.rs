//! A real EVM chain for the settlement tests: anvil with Circle's USDC
//! (FiatTokenV2_2) at Base Sepolia's address on chain 84532, and the official
//! x402 TS facilitator settling on it (`tests/interop/chain/`).
//!
//! `.ci/run` starts one anvil for the whole run and exports
//! `WALLETGATE_TEST_EVM_RPC_URL`; without it, [`shared_rpc_url`] starts one for
//! this test binary (after `npm ci --prefix tests/interop/chain`). Tests mint
//! USDC to fresh payers ([`fresh_payer_key`], [`mint`]), so tests sharing one
//! chain never see each other's balances or nonces.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256, U256, address};
use alloy_sol_types::{SolCall, sol};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// USDC's address on Base Sepolia, where the test chain puts it.
pub const USDC: Address = address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
/// The test chain's id (Base Sepolia's).
pub const CHAIN_ID: u64 = 84532;
/// Anvil's development account #0: USDC's owner and minter on the test chain.
pub const MINTER: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");

sol! {
    function mint(address to, uint256 amount) returns (bool);
    function balanceOf(address account) returns (uint256);
    function approve(address spender, uint256 amount) returns (bool);
    function allowance(address owner, address spender) returns (uint256);
}

/// Uniswap's Permit2 on the test chain (`deploy.mjs` sets its code there).
pub const PERMIT2: Address = address!("0x000000000022D473030F116dDEE9F6B43aC78BA3");
/// The `upto` proxy on the test chain (walletgate's stand-in, `UptoPermit2Proxy.sol`).
pub const UPTO_PROXY: Address = address!("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// `tests/interop/chain`, with its npm packages.
pub fn chain_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/chain");
    assert!(
        dir.join("node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil")
            .is_file(),
        "the chain's packages are not installed: run `npm ci --prefix tests/interop/chain` first"
    );
    dir
}

/// The test chain of this run: `WALLETGATE_TEST_EVM_RPC_URL`, or an anvil
/// started (and USDC deployed) for this test binary, stopped when it exits.
pub fn shared_rpc_url() -> String {
    static STARTED: OnceLock<String> = OnceLock::new();
    if let Ok(url) = std::env::var("WALLETGATE_TEST_EVM_RPC_URL") {
        return url;
    }
    STARTED.get_or_init(start_for_this_process).clone()
}

/// A chain of its own (anvil + USDC), for a test that pauses mining or
/// otherwise disturbs what other tests see; stopped when this process ends.
pub fn private_chain() -> String {
    start_for_this_process()
}

/// Sets `account`'s ETH balance (anvil's `anvil_setBalance`).
pub async fn set_eth_balance(rpc_url: &str, account: Address, wei: u128) {
    rpc(
        rpc_url,
        "anvil_setBalance",
        json!([account, format!("{wei:#x}")]),
    )
    .await;
}

/// Deploys `tests/interop/chain/Erc1271Wallet.bin`: a smart wallet whose
/// `isValidSignature` approves what `owner` signed, or refuses everything.
pub async fn deploy_erc1271_wallet(rpc_url: &str, owner: Address, refuses: bool) -> Address {
    deploy_wallet(rpc_url, "Erc1271Wallet.bin", owner, u8::from(refuses)).await
}

/// What a [`deploy_hostile_wallet`] does to the settler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostility {
    /// Burns gas in a loop before approving: the transaction costs what it is given.
    Loops = 1,
    /// Approves only when `GASPRICE` is 0: simulated without fees it passes, mined it reverts.
    FreeGasOnly = 2,
}

/// Deploys `tests/interop/chain/HostileWallet.bin`: a wallet that approves
/// what `owner` signed, after attacking the settler as `hostility` says.
pub async fn deploy_hostile_wallet(rpc_url: &str, owner: Address, hostility: Hostility) -> Address {
    deploy_wallet(rpc_url, "HostileWallet.bin", owner, hostility as u8).await
}

/// Deploys the committed bytecode `file` with the constructor arguments (owner, `flag`).
async fn deploy_wallet(rpc_url: &str, file: &str, owner: Address, flag: u8) -> Address {
    let bytecode = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/interop/chain")
            .join(file),
    )
    .expect("the committed wallet bytecode");
    let data = format!(
        "{}{:0>64}{:064x}",
        bytecode.trim(),
        alloy_primitives::hex::encode(owner.as_slice()),
        flag
    );
    let hash = send_from_minter(rpc_url, json!({ "from": MINTER, "data": data })).await;
    assert_eq!(
        mined_status(rpc_url, hash).await,
        1,
        "wallet deployment reverted"
    );
    let receipt = rpc(rpc_url, "eth_getTransactionReceipt", json!([hash])).await;
    receipt["contractAddress"]
        .as_str()
        .and_then(|address| address.parse().ok())
        .expect("a contract address")
}

/// `from` sends all of its USDC to `to` (impersonated on anvil): a payer
/// spending its balance elsewhere.
pub async fn spend_all_usdc(rpc_url: &str, from: Address, to: Address) {
    let all = balance(rpc_url, from).await;
    let data = format!(
        "0xa9059cbb{:0>64}{all:064x}",
        alloy_primitives::hex::encode(to.as_slice()),
    );
    usdc_call_as(rpc_url, from, data, "the transfer").await;
}

/// `owner` approves Permit2 for `amount` of USDC (impersonated on anvil):
/// the one-time step an `upto` payer takes before its first permit.
pub async fn approve_permit2(rpc_url: &str, owner: Address, amount: U256) {
    let data = approveCall {
        spender: PERMIT2,
        amount,
    }
    .abi_encode();
    let data = format!("0x{}", alloy_primitives::hex::encode(data));
    usdc_call_as(rpc_url, owner, data, "the approval").await;
}

/// `from` (impersonated, given gas) sends USDC the call `data`; panics naming `what` if it reverts.
async fn usdc_call_as(rpc_url: &str, from: Address, data: String, what: &str) {
    rpc(rpc_url, "anvil_impersonateAccount", json!([from])).await;
    set_eth_balance(rpc_url, from, 10u128.pow(18)).await;
    let hash = rpc(
        rpc_url,
        "eth_sendTransaction",
        json!([{ "from": from, "to": USDC, "data": data }]),
    )
    .await;
    let hash: B256 = serde_json::from_value(hash).expect("a transaction hash");
    assert_eq!(mined_status(rpc_url, hash).await, 1, "{what} reverted");
    rpc(rpc_url, "anvil_stopImpersonatingAccount", json!([from])).await;
}

/// `owner`'s USDC allowance to Permit2.
pub async fn permit2_allowance(rpc_url: &str, owner: Address) -> U256 {
    let data = allowanceCall {
        owner,
        spender: PERMIT2,
    }
    .abi_encode();
    usdc_word(rpc_url, &data).await
}

/// The `uint256` USDC answers the view call `data` with.
async fn usdc_word(rpc_url: &str, data: &[u8]) -> U256 {
    let answer = rpc(
        rpc_url,
        "eth_call",
        json!([{ "to": USDC, "data": format!("0x{}", alloy_primitives::hex::encode(data)) }, "latest"]),
    )
    .await;
    let bytes: alloy_primitives::Bytes = serde_json::from_value(answer).expect("call output");
    U256::from_be_slice(&bytes)
}

/// The transaction `hash` as the node has it (`from`, `to`, …).
pub async fn transaction(rpc_url: &str, hash: B256) -> Value {
    rpc(rpc_url, "eth_getTransactionByHash", json!([hash])).await
}

/// `account`'s transaction count in mined blocks.
pub async fn transaction_count(rpc_url: &str, account: Address) -> u64 {
    let count = rpc(
        rpc_url,
        "eth_getTransactionCount",
        json!([account, "latest"]),
    )
    .await;
    u64::from_str_radix(
        count.as_str().expect("a quantity").trim_start_matches("0x"),
        16,
    )
    .expect("a hex count")
}

/// An anvil that outlives no test binary: a shell watches this process and
/// stops anvil once it is gone (statics' destructors never run).
fn start_for_this_process() -> String {
    let dir = chain_dir();
    let port = free_port();
    let watched = format!(
        "'{anvil}' --host 127.0.0.1 --port {port} --chain-id {CHAIN_ID} --silent & \
         node=$!; for _ in $(seq 7200); do kill -0 {parent} 2>/dev/null || break; sleep 1; done; \
         kill $node",
        anvil = dir
            .join("node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil")
            .display(),
        parent = std::process::id(),
    );
    // The shell ends after this process (or after 2 hours): nothing to wait for.
    #[allow(clippy::zombie_processes)]
    Command::new("sh")
        .arg("-c")
        .arg(watched)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh to start anvil");
    wait_for_port(port, "anvil");
    let url = format!("http://127.0.0.1:{port}");
    let deployed = Command::new("node")
        .arg(dir.join("deploy.mjs"))
        .arg(&url)
        .output()
        .expect("node to deploy USDC");
    assert!(
        deployed.status.success(),
        "deploying USDC failed: {}",
        String::from_utf8_lossy(&deployed.stderr)
    );
    url
}

/// The official x402 TS facilitator on a free loopback port, settling on the
/// chain at `rpc_url`; killed on drop.
pub struct OfficialFacilitator {
    child: Child,
    port: u16,
}

impl OfficialFacilitator {
    /// Starts `tests/interop/chain/facilitator.mjs` and waits for its port.
    /// Each one signs with its own account, drawn at random past anvil's ten
    /// funded ones (the script gives it gas): facilitators running at once
    /// (tests in other processes, too) never share a transaction nonce.
    pub fn start(rpc_url: &str) -> Self {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).expect("the operating system's randomness");
        // BIP-32 indices below 2^31; 0-9 are anvil's funded development accounts.
        let account = 10 + u32::from_be_bytes(bytes) % 0x7fff_0000;
        let mut child = Command::new("node")
            .arg(chain_dir().join("facilitator.mjs"))
            .arg(rpc_url)
            .arg("0")
            .arg(account.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node to start the official facilitator");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("the facilitator's port");
        let port = line.trim().parse().expect("a port on the first line");
        Self { child, port }
    }

    /// `http://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for OfficialFacilitator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private key no other test uses: a payer with no USDC and no history.
pub fn fresh_payer_key() -> B256 {
    let mut key = [0u8; 32];
    loop {
        getrandom::fill(&mut key).expect("the operating system's randomness");
        // Below the secp256k1 order (practically always) and not zero.
        if key[0] < 0xff && key.iter().any(|&byte| byte != 0) {
            return B256::from(key);
        }
    }
}

/// Mints `amount` USDC units to `to` from the minter (an unlocked anvil account).
pub async fn mint(rpc_url: &str, to: Address, amount: u64) {
    let data = mintCall {
        to,
        amount: U256::from(amount),
    }
    .abi_encode();
    let hash = send_from_minter(
        rpc_url,
        json!({ "from": MINTER, "to": USDC, "data": format!("0x{}", alloy_primitives::hex::encode(data)) }),
    )
    .await;
    assert_eq!(mined_status(rpc_url, hash).await, 1, "mint reverted");
}

/// The status of transaction `hash` once mined (anvil mines at once, but the
/// receipt may trail the hash by a moment); panics after 10 s.
pub async fn mined_status(rpc_url: &str, hash: B256) -> u64 {
    for _ in 0..200 {
        if let Some(status) = receipt_status(rpc_url, hash).await {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("transaction {hash} was not mined within 10 s");
}

/// `account`'s USDC balance in units.
pub async fn balance(rpc_url: &str, account: Address) -> U256 {
    usdc_word(rpc_url, &balanceOfCall { account }.abi_encode()).await
}

/// The status (1 success, 0 reverted) of transaction `hash`, `None` if unknown.
pub async fn receipt_status(rpc_url: &str, hash: B256) -> Option<u64> {
    let receipt = rpc(rpc_url, "eth_getTransactionReceipt", json!([hash])).await;
    let status = receipt.get("status")?.as_str()?;
    u64::from_str_radix(status.trim_start_matches("0x"), 16).ok()
}

/// Sends `transaction` from the unlocked minter. Test binaries sharing the
/// chain send from it at once, and anvil may hand two of them the same
/// nonce: the loser ("nonce too low", "replacement transaction
/// underpriced") is sent again.
pub async fn send_from_minter(rpc_url: &str, transaction: Value) -> B256 {
    for _ in 0..20 {
        match rpc_answer(rpc_url, "eth_sendTransaction", json!([transaction])).await {
            Ok(hash) => return serde_json::from_value(hash).expect("a transaction hash"),
            Err(error)
                if ["nonce", "underpriced", "already known"]
                    .iter()
                    .any(|collision| error.to_string().contains(collision)) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("eth_sendTransaction failed: {error}"),
        }
    }
    panic!("eth_sendTransaction from the minter kept colliding on its nonce");
}

/// One JSON-RPC call; panics on a JSON-RPC error (a test fault).
pub async fn rpc(rpc_url: &str, method: &str, params: Value) -> Value {
    match rpc_answer(rpc_url, method, params).await {
        Ok(result) => result,
        Err(error) => panic!("{method} failed: {error}"),
    }
}

/// One JSON-RPC call: its result, or its JSON-RPC error.
pub async fn rpc_answer(rpc_url: &str, method: &str, params: Value) -> Result<Value, Value> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let request = http::Request::post(rpc_url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a JSON-RPC request");
    let response = client.request(request).await.expect("the chain answers");
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a JSON-RPC body")
        .to_bytes();
    let mut answer: Value = serde_json::from_slice(&bytes).expect("JSON-RPC JSON");
    if let Some(error) = answer.get_mut("error") {
        return Err(error.take());
    }
    Ok(answer["result"].take())
}

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not start on port {port}");
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// What [`RpcProxy`] does with each JSON-RPC call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forwards every call to the chain.
    Pass,
    /// Answers every call 502: the node is down.
    Down,
    /// Answers every receipt read with nothing (`eth_getTransactionReceipt`
    /// `null`, `eth_getBlockReceipts` `[]`), and a synchronous send, once
    /// forwarded, with EIP-7966's "not mined within the wait": a
    /// transaction's answer lost after broadcast.
    SwallowReceipts,
}

/// What [`RpcProxy`] does to one of the next transaction sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendFault {
    /// Not forwarded: the node answers this JSON-RPC error message.
    Refuse(String),
    /// Forwarded, then the connection is cut before the node's answer reaches the caller.
    Cut,
}

/// A loopback JSON-RPC proxy in front of a chain whose behaviour a test
/// switches ([`ProxyMode`], [`SendFault`], methods it pretends not to
/// offer) and which counts the calls by method (each of a batch); it
/// serves until the test's runtime ends.
pub struct RpcProxy {
    url: String,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    mode: AtomicU8,
    calls: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    unsupported: std::sync::Mutex<Vec<String>>,
    /// Sends seen, and the faults planned for the n-th send.
    sends: std::sync::atomic::AtomicU64,
    faults: std::sync::Mutex<std::collections::HashMap<u64, SendFault>>,
    /// Per method: calls at the node now, the most at once, the last params.
    in_flight: std::sync::Mutex<std::collections::HashMap<String, (u64, u64)>>,
    last_params: std::sync::Mutex<std::collections::HashMap<String, Value>>,
}

const SEND_METHODS: [&str; 2] = ["eth_sendRawTransaction", "eth_sendRawTransactionSync"];

impl RpcProxy {
    /// Serves on a free loopback port in front of `upstream`, passing calls.
    pub async fn start(upstream: &str) -> Self {
        let state = Arc::new(ProxyState::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let (shared, upstream) = (state.clone(), upstream.to_owned());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (state, upstream) = (shared.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let (state, upstream) = (state.clone(), upstream.clone());
                            async move {
                                let body = request
                                    .into_body()
                                    .collect()
                                    .await
                                    .map_err(std::io::Error::other)?
                                    .to_bytes();
                                // An error closes the connection without an answer.
                                proxied(&state, &upstream, body)
                                    .await
                                    .map_err(std::io::Error::other)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { url, state }
    }

    /// `http://127.0.0.1:{port}`: where the settler under test reaches the chain.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Switches what the proxy does from the next call on.
    pub fn set(&self, mode: ProxyMode) {
        self.state.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Answers `method` "Method not found" (-32601) from now on.
    pub fn pretend_unsupported(&self, method: &str) {
        self.state
            .unsupported
            .lock()
            .unwrap()
            .push(method.to_owned());
    }

    /// Does `fault` to the `nth` transaction send from now (1 is the next).
    pub fn fault_send(&self, nth: u64, fault: SendFault) {
        let seen = self.state.sends.load(Ordering::SeqCst);
        self.state.faults.lock().unwrap().insert(seen + nth, fault);
    }

    /// The most calls of `method` the node had at once.
    pub fn most_at_once(&self, method: &str) -> u64 {
        self.state
            .in_flight
            .lock()
            .unwrap()
            .get(method)
            .map_or(0, |(_, most)| *most)
    }

    /// The params of the last call of `method` (`null` if none).
    pub fn last_params(&self, method: &str) -> Value {
        self.state
            .last_params
            .lock()
            .unwrap()
            .get(method)
            .cloned()
            .unwrap_or_default()
    }

    /// How many calls of `method` the proxy saw (batched ones each).
    pub fn calls(&self, method: &str) -> u64 {
        self.state
            .calls
            .lock()
            .unwrap()
            .get(method)
            .copied()
            .unwrap_or(0)
    }
}

/// The proxy's answer to one HTTP request (`body`: a call or a batch);
/// `Err` to cut the connection.
async fn proxied(
    state: &ProxyState,
    upstream: &str,
    body: Bytes,
) -> Result<http::Response<Full<Bytes>>, &'static str> {
    if state.mode.load(Ordering::SeqCst) == ProxyMode::Down as u8 {
        return Ok(http::Response::builder()
            .status(502)
            .body(Full::new(Bytes::from("down")))
            .expect("a response"));
    }
    let answer = match serde_json::from_slice::<Value>(&body).unwrap_or_default() {
        Value::Array(calls) => {
            let mut answers = Vec::new();
            for call in calls {
                answers.push(proxied_call(state, upstream, call).await?);
            }
            Value::Array(answers)
        }
        call => proxied_call(state, upstream, call).await?,
    };
    Ok(http::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(answer.to_string())))
        .expect("a response"))
}

/// The proxy's answer to one call.
async fn proxied_call(
    state: &ProxyState,
    upstream: &str,
    call: Value,
) -> Result<Value, &'static str> {
    let method = call["method"].as_str().unwrap_or_default().to_owned();
    *state
        .calls
        .lock()
        .unwrap()
        .entry(method.clone())
        .or_default() += 1;
    state
        .last_params
        .lock()
        .unwrap()
        .insert(method.clone(), call["params"].clone());
    let error = |code: i64, message: &str, data: Value| json!({"jsonrpc": "2.0", "id": call["id"], "error": {"code": code, "message": message, "data": data}});
    if state.unsupported.lock().unwrap().contains(&method) {
        return Ok(error(-32601, "Method not found", Value::Null));
    }
    let swallowing = state.mode.load(Ordering::SeqCst) == ProxyMode::SwallowReceipts as u8;
    let nothing = |result: Value| json!({"jsonrpc": "2.0", "id": call["id"], "result": result});
    match method.as_str() {
        "eth_getTransactionReceipt" if swallowing => return Ok(nothing(Value::Null)),
        "eth_getBlockReceipts" if swallowing => return Ok(nothing(json!([]))),
        _ => {}
    }
    let mut forwarded = call.clone();
    let mut fault = None;
    if SEND_METHODS.contains(&method.as_str()) {
        let nth = state.sends.fetch_add(1, Ordering::SeqCst) + 1;
        fault = state.faults.lock().unwrap().remove(&nth);
        if let Some(SendFault::Refuse(message)) = &fault {
            return Ok(error(-32000, message, Value::Null));
        }
        if swallowing {
            forwarded["method"] = "eth_sendRawTransaction".into();
        }
    }
    let at_node = |change: i64| {
        let mut in_flight = state.in_flight.lock().unwrap();
        let (now, most) = in_flight.entry(method.clone()).or_default();
        *now = now.saturating_add_signed(change);
        *most = (*most).max(*now);
    };
    at_node(1);
    let answer = forward(upstream, &forwarded).await;
    at_node(-1);
    if fault == Some(SendFault::Cut) {
        return Err("cut after the send was forwarded");
    }
    if swallowing && method == "eth_sendRawTransactionSync" && answer.get("result").is_some() {
        return Ok(error(
            4,
            "the transaction was added to the pool but not processed within the timeout",
            answer["result"].clone(),
        ));
    }
    Ok(answer)
}

/// `call` sent to the chain itself: its answer.
async fn forward(upstream: &str, call: &Value) -> Value {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let request = http::Request::post(upstream)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(call.to_string())))
        .expect("a JSON-RPC request");
    let bytes = match client.request(request).await {
        Ok(response) => response
            .into_body()
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default(),
        Err(_) => Bytes::new(),
    };
    serde_json::from_slice(&bytes).unwrap_or_default()
}

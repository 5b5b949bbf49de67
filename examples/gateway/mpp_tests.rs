//! MPP beside x402 (`GATEWAY_MPP`, on by default): mppx 0.11's own `evm`
//! client pays the embedded default with an EIP-3009 `authorization`
//! credential, the same credential again is refused and moves nothing, and
//! bad credentials get MPP's problems.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use walletgate::x402::facilitator::DevLedger;

use crate::config::Config;
use crate::tests::{Reply, Server};

const CHAT: &str = "/v1/chat/completions";
const MODEL: &str = "openai/gpt-5-mini";

fn chat(stream: bool) -> String {
    json!({"model": MODEL, "max_tokens": 64, "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
    .to_string()
}

/// mppx's client paying `body` as development account `index`; its
/// credential is written to `credential` (never printed).
async fn mppx_pays(
    server: &Server,
    index: usize,
    body: &str,
    credential: &std::path::Path,
) -> Value {
    mppx_pays_as(server, &index.to_string(), None, body, credential).await
}

/// The same, as `account` (`key`: the private key given, in the child's
/// environment only).
async fn mppx_pays_as(
    server: &Server,
    account: &str,
    key: Option<&str>,
    body: &str,
    credential: &std::path::Path,
) -> Value {
    mppx_run(server, account, key, body, credential, &[]).await
}

/// mppx's client with `env` set (`MPP_PAY_AT`, `MPP_RETRIES`).
async fn mppx_run(
    server: &Server,
    account: &str,
    key: Option<&str>,
    body: &str,
    credential: &std::path::Path,
    env: &[(&str, String)],
) -> Value {
    let url = server.url(CHAT);
    let credential = credential.display().to_string();
    let mut env = env.to_vec();
    env.extend(key.map(|key| ("MPP_PAYER_KEY", key.to_owned())));
    let args = [url.as_str(), account, body, credential.as_str()];
    let limit = std::time::Duration::from_secs(60);
    crate::tests::node_json("mpp", "mppx", "pay.mjs", &args, &env, None, limit).await
}

fn problem(reply: &Reply) -> Value {
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json"),
        "{}",
        reply.text()
    );
    serde_json::from_slice(&reply.body).unwrap()
}

async fn with_credential(server: &Server, credential: &str, body: &str) -> Reply {
    let request = http::Request::post(server.url(CHAT))
        .header("content-type", "application/json")
        .header("authorization", credential)
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .unwrap();
    server.send(request).await
}

#[tokio::test]
async fn mppx_pays_a_chat_and_the_same_credential_again_moves_nothing() {
    let server = Server::start(Config::default()).await;
    let payer = DevLedger::DEV_ACCOUNTS[6];
    let body = chat(false);
    let quote = server.post_once(CHAT, body.clone(), None).await;
    assert_eq!(quote.status, 402);
    let price = quote.quote().accepts[0].amount.units();
    let challenges: Vec<_> = quote
        .headers
        .get_all("www-authenticate")
        .iter()
        .filter(|value| value.as_bytes().starts_with(b"Payment "))
        .collect();
    assert_eq!(challenges.len(), 1, "one per exact offer, none for upto");

    let dir = std::env::temp_dir().join(format!("walletgate-mpp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("credential");
    let paid = mppx_pays(&server, 6, &body, &saved).await;
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(
        server.balance(payer),
        DevLedger::DEV_ACCOUNT_FUNDS - price,
        "exactly the quoted amount"
    );
    let receipt: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(paid["receipt"].as_str().expect("a Payment-Receipt"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["status"], "success");
    assert_eq!(receipt["method"], "evm");
    assert!(receipt["reference"].as_str().unwrap().starts_with("0x"));
    assert!(paid["cacheControl"].as_str().unwrap().contains("private"));

    // The credential mppx sent, again: refused, a fresh challenge, nothing moves.
    let credential = std::fs::read_to_string(&saved).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let again = with_credential(&server, &credential, &body).await;
    assert_eq!(again.status, 402, "{}", again.text());
    let refused = problem(&again);
    assert_eq!(
        refused["type"],
        "https://paymentauth.org/problems/verification-failed"
    );
    assert!(refused["challengeId"].is_string());
    assert!(
        again.header("payment-required").is_some(),
        "x402 can pay too"
    );
    assert_eq!(server.balance(payer), DevLedger::DEV_ACCOUNT_FUNDS - price);
}

#[tokio::test]
async fn a_streamed_chat_paid_with_mpp_carries_its_receipt_in_the_head() {
    let server = Server::start(Config::default()).await;
    let dir = std::env::temp_dir().join(format!("walletgate-mpp-s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let paid = mppx_pays(&server, 7, &chat(true), &dir.join("credential")).await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(paid["status"], 200, "{paid}");
    assert!(
        paid["receipt"].is_string(),
        "settled before the first byte: {paid}"
    );
    assert!(paid["body"].as_str().unwrap().contains("[DONE]"), "{paid}");
}

#[tokio::test]
async fn bad_credentials_get_mpps_problems_and_off_adds_not_a_byte() {
    let server = Server::start(Config::default()).await;
    let body = chat(false);
    let garbage = with_credential(&server, "Payment !!!not-base64!!!", &body).await;
    assert_eq!(garbage.status, 402);
    assert_eq!(
        problem(&garbage)["type"],
        "https://paymentauth.org/problems/malformed-credential"
    );
    let encoded = URL_SAFE_NO_PAD.encode(
        json!({"challenge": {"id": "x", "realm": "r", "method": "tempo", "intent": "charge",
                             "request": "e30", "expires": "2030-01-01T00:00:00Z"},
               "payload": {}})
        .to_string(),
    );
    let unknown = with_credential(&server, &format!("Payment {encoded}"), &body).await;
    assert_eq!(unknown.status, 400);
    assert_eq!(
        problem(&unknown)["type"],
        "https://paymentauth.org/problems/method-unsupported"
    );
    let request = http::Request::post(server.url(CHAT))
        .header("content-type", "application/json")
        .header("authorization", format!("Payment {encoded}"))
        .header("payment-authorization", format!("Payment {encoded}"))
        .body(http_body_util::Full::new(bytes::Bytes::from(body.clone())))
        .unwrap();
    let two = server.send(request).await;
    assert_eq!(two.status, 400, "{}", two.text());
    server.assert_nothing_settled();

    let off = Server::start(Config {
        mpp: Some(false),
        ..Config::default()
    })
    .await;
    let quote = off.post_once(CHAT, body, None).await;
    assert!(
        quote
            .headers
            .get_all("www-authenticate")
            .iter()
            .all(|value| !value.as_bytes().starts_with(b"Payment ")),
        "GATEWAY_MPP=off: no challenge"
    );
}

/// On a real chain (Circle's USDC on anvil) with the gateway's own settler:
/// mppx pays, exactly the quoted amount moves, and the receipt names a
/// mined, successful transfer.
#[tokio::test]
async fn mppx_pays_the_gateways_own_settler_on_chain() {
    use crate::chain_support::{balance, fresh_payer_key, mined_status, mint, shared_rpc_url};
    let rpc = shared_rpc_url();
    let (server, pay_to, _) =
        crate::chain_tests::settler_gateway_with(&rpc, crate::chain_tests::ONE_ETH, |config| {
            config
        })
        .await;
    let key = fresh_payer_key();
    let from = crate::chain_tests::payer(key).address_bytes();
    mint(&rpc, from, 1_000_000).await;
    let body = chat(false);
    let price = server
        .post_once(CHAT, body.clone(), None)
        .await
        .quote()
        .accepts[0]
        .amount
        .units();
    let dir = std::env::temp_dir().join(format!("walletgate-mpp-chain-{from:x}"));
    std::fs::create_dir_all(&dir).unwrap();
    let key_text = key.to_string();
    let paid = mppx_pays_as(
        &server,
        "key",
        Some(&key_text),
        &body,
        &dir.join("credential"),
    )
    .await;
    let credential = std::fs::read_to_string(dir.join("credential")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(paid["status"], 200, "{paid}");
    let receipt: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(paid["receipt"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let transaction: alloy_primitives::B256 =
        receipt["reference"].as_str().unwrap().parse().unwrap();
    assert_eq!(mined_status(&rpc, transaction).await, 1);
    let funded = alloy_primitives::U256::from(1_000_000u64);
    let price = alloy_primitives::U256::from(price);
    assert_eq!(balance(&rpc, from).await, funded - price);
    assert_eq!(balance(&rpc, pay_to).await, price);
    // Again: refused, nothing moves twice.
    let again = with_credential(&server, &credential, &body).await;
    assert_eq!(again.status, 402, "{}", again.text());
    assert_eq!(balance(&rpc, from).await, funded - price);
    // A stream: its head carries the receipt of a mined transfer.
    let dir = std::env::temp_dir().join(format!("walletgate-mpp-chain-s-{from:x}"));
    std::fs::create_dir_all(&dir).unwrap();
    let streamed = mppx_pays_as(&server, "key", Some(&key_text), &chat(true), &dir.join("c")).await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(streamed["status"], 200, "{streamed}");
    let receipt: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(streamed["receipt"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let transaction: alloy_primitives::B256 =
        receipt["reference"].as_str().unwrap().parse().unwrap();
    assert_eq!(mined_status(&rpc, transaction).await, 1);
    assert!(streamed["body"].as_str().unwrap().contains("[DONE]"));
}

/// Replicas behind one origin that share `GATEWAY_MPP_KEY_FILE` take each
/// other's challenges: issued by one, paid at the other; a replica with
/// another key refuses it and nothing moves there.
#[tokio::test]
async fn replicas_sharing_a_key_file_take_each_others_challenges() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("walletgate-mpp-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = |name: &str, byte: char| {
        let path = dir.join(name);
        std::fs::write(&path, byte.to_string().repeat(40)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path.display().to_string()
    };
    let (shared, other) = (key_file("shared.key", 'a'), key_file("other.key", 'b'));
    let replica = |key: &str| Config {
        public_url: Some("http://gateway.test".into()),
        mpp_key_file: Some(key.to_owned()),
        ..Config::default()
    };
    let (first, second, stranger) = (
        Server::start(replica(&shared)).await,
        Server::start(replica(&shared)).await,
        Server::start(replica(&other)).await,
    );
    let body = chat(false);
    let payer = DevLedger::DEV_ACCOUNTS[5];
    let at = |server: &Server| {
        vec![
            ("MPP_PAY_AT", server.url(CHAT)),
            ("MPP_RETRIES", "1".into()),
        ]
    };
    let credential = dir.join("credential");
    let paid = mppx_run(&first, "5", None, &body, &credential, &at(&second)).await;
    assert_eq!(paid["status"], 200, "{paid}");
    assert!(
        second.balance(payer) < DevLedger::DEV_ACCOUNT_FUNDS,
        "paid at the second"
    );
    let refused = mppx_run(&first, "5", None, &body, &credential, &at(&stranger)).await;
    assert_eq!(refused["status"], 402, "{refused}");
    assert!(
        refused["body"]
            .as_str()
            .unwrap()
            .contains("invalid-challenge"),
        "{refused}"
    );
    stranger.assert_nothing_settled();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An MPP-paid stream whose upstream ends before its first event: an error
/// answer, and nothing is charged (MPP settles before the first byte, so the
/// gateway waits for the upstream's first event before its head).
#[tokio::test]
async fn an_mpp_stream_whose_upstream_fails_before_its_first_event_is_not_charged() {
    use axum::Router;
    use axum::routing::post;

    let empty = || async {
        (
            [(http::header::CONTENT_TYPE, "text/event-stream")],
            String::new(),
        )
    };
    let upstream = crate::tests::serve(Router::new().route(CHAT, post(empty))).await;
    let config = Config::default()
        .with_openai_upstream(
            "openai",
            &format!("http://{upstream}/v1"),
            crate::upstream::ApiKey::new("sk-test-empty-stream"),
        )
        .unwrap();
    let server = Server::start(config).await;
    let dir = std::env::temp_dir().join(format!("walletgate-mpp-e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let answered = mppx_pays(&server, 8, &chat(true), &dir.join("credential")).await;
    std::fs::remove_dir_all(&dir).unwrap();
    let status = answered["status"].as_u64().unwrap();
    assert!(status >= 500 || status == 429, "{answered}");
    assert!(answered["receipt"].is_null(), "{answered}");
    server.assert_nothing_settled();
}

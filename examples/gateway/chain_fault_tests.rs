//! Settlement faults end to end: the gateway settling on anvil with
//! walletgate's own settler, a client resending the same payment. Each test
//! pays fresh addresses, so balances are asserted to the unit; the receipt
//! is lost by a loopback proxy in front of the chain (`RpcProxy`), a
//! transaction is stuck on a private chain with mining off.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};
use walletgate::client::payer::Payer;
use walletgate::x402::facilitator::FacilitatorRequest;
use walletgate::x402::facilitator::evm_settler::{
    MemorySettlementRecords, SettlementKey, SettlementRecords,
};
use walletgate::x402::server::SETTLEMENT_PENDING;
use walletgate::x402::wire::{SettleResponse, codec};

use crate::chain_support::{
    CHAIN_ID, ProxyMode, RpcProxy, USDC, balance, fresh_payer_key, mined_status, mint,
    private_chain, rpc, set_eth_balance, shared_rpc_url, transaction_count,
};
use crate::chain_tests::{
    CHAT, ONE_ETH, chat, funded_settler_key, payer, settlement, settler_config,
};
use crate::config::Config;
use crate::tests::{Reply, Server, now_secs};

/// The settler's wait for a receipt: short, so a lost one is pending soon.
const RECEIPT_WAIT: Duration = Duration::from_secs(1);
const FUNDS: u64 = 1_000_000;

/// An OpenAI-compatible upstream counting its calls: a whole answer, or the
/// same streamed, as the request asks.
async fn counting_upstream(
    State(calls): State<Arc<AtomicUsize>>,
    body: Bytes,
) -> axum::response::Response {
    calls.fetch_add(1, Ordering::SeqCst);
    let request: Value = serde_json::from_slice(&body).unwrap();
    let usage = json!({"prompt_tokens": 4, "completion_tokens": 3});
    let (content_type, text) = if request["stream"] == true {
        let delta = json!({"choices": [{"index": 0, "delta": {"content": "paid answer"}, "finish_reason": "stop"}], "usage": usage});
        (
            "text/event-stream",
            format!("data: {delta}\n\ndata: [DONE]\n\n"),
        )
    } else {
        let whole = json!({"id": "chatcmpl-paid", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "paid answer"}, "finish_reason": "stop"}],
            "usage": usage});
        ("application/json", whole.to_string())
    };
    axum::response::Response::builder()
        .header("content-type", content_type)
        .body(axum::body::Body::from(text))
        .unwrap()
}

/// `config` answering from an upstream that counts its calls in `calls`.
async fn with_counting_upstream(config: Config, calls: &Arc<AtomicUsize>) -> Config {
    let upstream = crate::tests::serve(
        Router::new()
            .route("/v1/chat/completions", post(counting_upstream))
            .with_state(calls.clone()),
    )
    .await;
    config
        .with_openai_upstream(
            "openai",
            &format!("http://{upstream}/v1"),
            crate::upstream::ApiKey::new("sk-test-counting"),
        )
        .unwrap()
}

/// A gateway settling itself through a fresh key holding one ETH,
/// reaching `chain` at `node`, answering from a counting upstream: the
/// gateway, its `payTo`, the settler's address and the upstream's calls.
async fn settling_gateway(
    chain: &str,
    node: &str,
    records: Arc<dyn SettlementRecords>,
) -> (Server, Address, Address, Arc<AtomicUsize>) {
    let (key_file, settler) = funded_settler_key(chain, ONE_ETH).await;
    let (config, pay_to) = settler_config(node, &key_file, RECEIPT_WAIT, records).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let server = Server::start(with_counting_upstream(config, &calls).await).await;
    (server, pay_to, settler, calls)
}

/// A payer holding `FUNDS` on a chain, and its one payment.
struct Paying {
    payer: Payer,
    /// The `PAYMENT-SIGNATURE` header, resent unchanged.
    header: String,
    amount: u64,
    /// The authorization's settlement record key.
    key: SettlementKey,
}

/// A payer holding `FUNDS` on `chain`, paying `server`'s quote of `body`.
async fn funded_payment(chain: &str, server: &Server, body: &str) -> Paying {
    let payer = payer(fresh_payer_key());
    mint(chain, payer.address_bytes(), FUNDS).await;
    let quote = server.post_once(CHAT, body.to_owned(), None).await;
    assert_eq!(
        quote.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        quote.text()
    );
    let offer = quote.quote().accepts[0].clone();
    let payload = payer.pay(&offer, now_secs()).unwrap();
    let header = codec::encode(&payload);
    let request = FacilitatorRequest::new(payload, offer.clone());
    let key = SettlementKey {
        chain_id: CHAIN_ID,
        asset: USDC,
        from: payer.address_bytes(),
        nonce: request.exact_evm().unwrap().nonce,
    };
    Paying {
        payer,
        header,
        amount: offer.amount.to_string().parse().unwrap(),
        key,
    }
}

/// A 503 saying the settlement is pending: Retry-After, nothing served,
/// `PAYMENT-RESPONSE` naming the transaction; that transaction.
fn assert_pending(reply: &Reply) -> B256 {
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()["code"], "PAYMENT_VERIFICATION_UNAVAILABLE");
    assert!(reply.header("retry-after").is_some(), "no Retry-After");
    assert!(!reply.text().contains("paid answer"), "nothing served");
    let pending = settlement(reply.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert!(!pending.success);
    assert_eq!(pending.error_reason.as_deref(), Some(SETTLEMENT_PENDING));
    pending
        .transaction
        .parse()
        .expect("the pending transaction")
}

/// The kept answer of a landed settlement: 200, the answer, and its
/// `PAYMENT-RESPONSE` naming `transaction`.
fn assert_kept_answer(reply: &Reply, transaction: B256) {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert!(reply.text().contains("paid answer"), "{}", reply.text());
    let settled = settlement(reply.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.transaction, format!("{transaction:#x}"));
}

/// Exactly one transfer of `amount` from `from` to `pay_to`.
async fn assert_one_transfer(chain: &str, from: Address, pay_to: Address, amount: u64) {
    assert_eq!(balance(chain, from).await, U256::from(FUNDS - amount));
    assert_eq!(balance(chain, pay_to).await, U256::from(amount));
}

#[tokio::test]
async fn a_receipt_lost_after_broadcast_is_503_and_the_resend_gets_the_kept_answer_once_mined() {
    let chain = shared_rpc_url();
    let proxy = RpcProxy::start(&chain).await;
    let records = Arc::new(MemorySettlementRecords::new());
    let (server, pay_to, settler, calls) = settling_gateway(&chain, &proxy.url(), records).await;
    let body = chat("lost receipt");
    let paying = funded_payment(&chain, &server, &body).await;

    proxy.set(ProxyMode::SwallowReceipts);
    let first = server
        .post_once(CHAT, body.clone(), Some(&paying.header))
        .await;
    let transaction = assert_pending(&first);
    // Still no receipt: 503 again, the same transaction, nothing sent again.
    let again = server
        .post_once(CHAT, body.clone(), Some(&paying.header))
        .await;
    assert_eq!(assert_pending(&again), transaction);

    proxy.set(ProxyMode::Pass);
    let landed = server
        .post_once(CHAT, body.clone(), Some(&paying.header))
        .await;
    assert_kept_answer(&landed, transaction);
    assert_eq!(mined_status(&chain, transaction).await, 1);
    // A later resend: the same kept answer, nothing charged again.
    let replayed = server.post_once(CHAT, body, Some(&paying.header)).await;
    assert_kept_answer(&replayed, transaction);
    assert_one_transfer(&chain, paying.payer.address_bytes(), pay_to, paying.amount).await;
    assert_eq!(transaction_count(&chain, settler).await, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one upstream call");
}

#[tokio::test]
async fn a_stuck_transaction_is_replaced_with_the_same_nonce_and_the_resend_gets_the_answer() {
    let chain = private_chain();
    let records = Arc::new(MemorySettlementRecords::new());
    let (server, pay_to, settler, calls) = settling_gateway(&chain, &chain, records.clone()).await;
    let body = chat("stuck");
    let paying = funded_payment(&chain, &server, &body).await;

    rpc(&chain, "evm_setAutomine", json!([false])).await;
    // Sent, replaced past the first wait, still unmined past the second.
    let first = server
        .post_once(CHAT, body.clone(), Some(&paying.header))
        .await;
    let replacement = assert_pending(&first);
    rpc(&chain, "evm_mine", json!([])).await;
    rpc(&chain, "evm_setAutomine", json!([true])).await;

    let landed = server.post_once(CHAT, body, Some(&paying.header)).await;
    assert_kept_answer(&landed, replacement);
    let record = records.get(&paying.key).await.unwrap().unwrap();
    assert_eq!(record.transactions.len(), 2, "one replacement");
    assert_eq!(record.transactions[1], replacement);
    let mined = rpc(&chain, "eth_getTransactionByHash", json!([replacement])).await;
    assert_eq!(mined["nonce"], "0x0", "the replacement reused the nonce");
    assert_one_transfer(&chain, paying.payer.address_bytes(), pay_to, paying.amount).await;
    assert_eq!(transaction_count(&chain, settler).await, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// The receipt a paid stream ends with (its last `payment-response` event).
fn last_receipt_event(stream: &str) -> SettleResponse {
    let (_, event) = stream
        .rsplit_once("event: payment-response\ndata: ")
        .unwrap_or_else(|| panic!("no payment-response event: {stream}"));
    codec::decode(event.lines().next().unwrap_or_default().as_bytes()).unwrap()
}

#[tokio::test]
async fn a_stream_whose_settlement_is_pending_ends_pending_and_its_resend_gets_the_settled_stream()
{
    let chain = shared_rpc_url();
    let proxy = RpcProxy::start(&chain).await;
    let records = Arc::new(MemorySettlementRecords::new());
    let (server, pay_to, settler, calls) = settling_gateway(&chain, &proxy.url(), records).await;
    let body = json!({"model": "openai/gpt-5-mini", "max_tokens": 64, "stream": true,
                      "messages": [{"role": "user", "content": "stream"}]})
    .to_string();
    let paying = funded_payment(&chain, &server, &body).await;

    proxy.set(ProxyMode::SwallowReceipts);
    let streamed = server
        .post_once(CHAT, body.clone(), Some(&paying.header))
        .await;
    assert_eq!(streamed.status, StatusCode::OK, "{}", streamed.text());
    assert!(streamed.text().contains("paid answer"));
    let pending = last_receipt_event(&streamed.text());
    assert!(!pending.success);
    assert_eq!(pending.error_reason.as_deref(), Some(SETTLEMENT_PENDING));
    let transaction: B256 = pending
        .transaction
        .parse()
        .expect("the pending transaction");

    proxy.set(ProxyMode::Pass);
    let resent = server.post_once(CHAT, body, Some(&paying.header)).await;
    assert_eq!(resent.status, StatusCode::OK, "{}", resent.text());
    let content_type = resent.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    assert!(resent.text().contains("paid answer"));
    let settled = last_receipt_event(&resent.text());
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.transaction, format!("{transaction:#x}"));
    assert_eq!(mined_status(&chain, transaction).await, 1);
    assert_one_transfer(&chain, paying.payer.address_bytes(), pay_to, paying.amount).await;
    assert_eq!(transaction_count(&chain, settler).await, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one upstream call");
}

/// The settler's ETH runs out while the upstream answers (after verify,
/// before settle): the operator's fault, 503 with the claim released,
/// nothing served or moved; the same payment pays once the settler is funded.
#[tokio::test]
async fn a_settler_out_of_gas_after_verify_is_503_and_the_same_payment_pays_once_funded() {
    let chain = shared_rpc_url();
    let (key_file, settler) = funded_settler_key(&chain, ONE_ETH).await;
    let records = Arc::new(MemorySettlementRecords::new());
    let (config, pay_to) = settler_config(&chain, &key_file, RECEIPT_WAIT, records).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let drain = {
        let (chain, calls) = (chain.clone(), calls.clone());
        move |body: Bytes| {
            let (chain, calls) = (chain.clone(), calls.clone());
            async move {
                if calls.load(Ordering::SeqCst) == 0 {
                    set_eth_balance(&chain, settler, 0).await;
                }
                counting_upstream(State(calls), body).await
            }
        }
    };
    let upstream = crate::tests::serve(Router::new().route(CHAT, post(drain))).await;
    let config = config
        .with_openai_upstream(
            "openai",
            &format!("http://{upstream}/v1"),
            crate::upstream::ApiKey::new("sk-test-drain-gas"),
        )
        .unwrap();
    let server = Server::start(config).await;
    let body = chat("gas runs out");
    let paying = funded_payment(&chain, &server, &body).await;

    let refused = server
        .post_once(CHAT, body.clone(), Some(&paying.header))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.text()
    );
    assert_eq!(refused.json()["code"], "PAYMENT_VERIFICATION_UNAVAILABLE");
    assert!(!refused.text().contains("paid answer"), "nothing served");
    assert_eq!(
        balance(&chain, paying.payer.address_bytes()).await,
        U256::from(FUNDS)
    );
    assert_eq!(balance(&chain, pay_to).await, U256::ZERO);
    assert_eq!(
        transaction_count(&chain, settler).await,
        0,
        "nothing broadcast"
    );

    set_eth_balance(&chain, settler, ONE_ETH).await;
    let paid = server.post_once(CHAT, body, Some(&paying.header)).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    let settled = settlement(paid.header("payment-response").unwrap());
    assert_eq!(
        mined_status(&chain, settled.transaction.parse().unwrap()).await,
        1
    );
    assert_one_transfer(&chain, paying.payer.address_bytes(), pay_to, paying.amount).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "served only once paid");
}

/// One replica broadcast and lost the receipt; a replica started afresh on
/// the same Redis (stores, kept answers, settlement records) and the same
/// settler key reconciles it on the resend: the kept answer, one transfer.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_restarted_replica_on_the_same_redis_reconciles_a_pending_settlement_on_the_resend() {
    use crate::redis_settings::RedisSettings;
    use crate::redis_support::{shared_url, unique_prefix};
    use walletgate::redis::{RedisConnection, RedisSettlementRecords};

    let redis = RedisSettings::new(shared_url(), unique_prefix("settler_restart"));
    let records = || -> Arc<dyn SettlementRecords> {
        let connection = RedisConnection::open(&redis.config().unwrap()).unwrap();
        Arc::new(RedisSettlementRecords::new(connection))
    };
    let chain = shared_rpc_url();
    let proxy = RpcProxy::start(&chain).await;
    let (key_file, settler) = funded_settler_key(&chain, ONE_ETH).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let replica = async |node: &str, pay_to: Option<Address>| {
        let (config, fresh_pay_to) = settler_config(node, &key_file, RECEIPT_WAIT, records()).await;
        let pay_to = pay_to.unwrap_or(fresh_pay_to);
        let config = Config {
            redis: Some(redis.clone()),
            pay_to: pay_to.to_checksum(None),
            ..config
        };
        (
            Server::start(with_counting_upstream(config, &calls).await).await,
            pay_to,
        )
    };
    let (first, pay_to) = replica(&proxy.url(), None).await;
    let body = chat("restart");
    let paying = funded_payment(&chain, &first, &body).await;
    proxy.set(ProxyMode::SwallowReceipts);
    let transaction = assert_pending(
        &first
            .post_once(CHAT, body.clone(), Some(&paying.header))
            .await,
    );
    // The first replica is never asked again: as if it stopped.
    drop(first);

    // A new process: its own settler (same key, a fresh nonce manager), memory
    // and upstream client; it shares only Redis and the chain.
    let (restarted, _) = replica(&chain, Some(pay_to)).await;
    let landed = restarted.post_once(CHAT, body, Some(&paying.header)).await;
    assert_kept_answer(&landed, transaction);
    assert_one_transfer(&chain, paying.payer.address_bytes(), pay_to, paying.amount).await;
    assert_eq!(transaction_count(&chain, settler).await, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one upstream call");
}

/// Lets the proxy pass receipts again when the client waits to resend.
#[cfg(feature = "client")]
struct ReceiptsReturnOnWait(Arc<RpcProxy>);

#[cfg(feature = "client")]
impl walletgate::client::pay::Sleeper for ReceiptsReturnOnWait {
    fn sleep(&self, _: Duration) -> walletgate::store::BoxFuture<'static, ()> {
        self.0.set(ProxyMode::Pass);
        Box::pin(async {})
    }
}

/// walletgate's paying client meets a pending settlement: it resends the
/// same signed payment (a fresh signature would move a second transfer)
/// and ends with the kept answer and its receipt.
#[cfg(feature = "client")]
#[tokio::test]
async fn the_paying_client_resends_the_same_payment_on_a_pending_settlement_and_pays_once() {
    use alloy_signer_local::PrivateKeySigner;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use tower::{ServiceBuilder, ServiceExt};
    use walletgate::client::pay::{Receipt, X402PaymentLayer};

    let chain = shared_rpc_url();
    let proxy = Arc::new(RpcProxy::start(&chain).await);
    let records = Arc::new(MemorySettlementRecords::new());
    let (server, pay_to, settler, calls) = settling_gateway(&chain, &proxy.url(), records).await;
    let key = fresh_payer_key();
    let signer = PrivateKeySigner::from_bytes(&key).unwrap();
    let from = signer.address();
    mint(&chain, from, FUNDS).await;
    let client = ServiceBuilder::new()
        .layer(
            X402PaymentLayer::new(signer)
                .with_sleeper(Arc::new(ReceiptsReturnOnWait(proxy.clone()))),
        )
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());

    proxy.set(ProxyMode::SwallowReceipts);
    let request = http::Request::post(server.url(CHAT))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(chat("client"))))
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let receipt = response
        .extensions()
        .get::<Receipt>()
        .cloned()
        .expect("a receipt");
    let answer = response.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&answer).contains("paid answer"));
    let settled = receipt.settlement().expect("settled");
    assert!(settled.success, "{settled:?}");
    let transaction: B256 = settled.transaction.parse().unwrap();
    assert_eq!(mined_status(&chain, transaction).await, 1);
    let amount = u64::try_from(receipt.amount().units()).unwrap();
    assert_one_transfer(&chain, from, pay_to, amount).await;
    assert_eq!(transaction_count(&chain, settler).await, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one upstream call");
}

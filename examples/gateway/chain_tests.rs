//! Real money on a real chain: the gateway quotes Base Sepolia USDC and
//! settles through the official x402 TS facilitator on anvil, where Circle's
//! USDC sits at Base Sepolia's address (`tests/chain_support`). Each test
//! mints to fresh payers and pays a fresh `payTo`, so balances are asserted
//! to the unit whatever else runs on the chain.

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use http::StatusCode;
use serde_json::json;
use walletgate::client::payer::Payer;
use walletgate::x402::facilitator::evm_settler::{MemorySettlementRecords, SettlementRecords};
use walletgate::x402::wire::{SettleResponse, codec};

use crate::chain_support::{
    Hostility, OfficialFacilitator, balance, deploy_erc1271_wallet, deploy_hostile_wallet,
    fresh_payer_key, mined_status, mint, set_eth_balance, shared_rpc_url, transaction_count,
};
use crate::config::{Config, EvmSettings, PaymentNetwork, SettlerSettings};
use crate::tests::{Server, now_secs};

pub(crate) const CHAT: &str = "/v1/chat/completions";
pub(crate) const ONE_ETH: u128 = 1_000_000_000_000_000_000;

/// A gateway settling through `facilitator`, paying a fresh address.
async fn gateway(facilitator: &OfficialFacilitator) -> (Server, Address) {
    let pay_to = payer(fresh_payer_key()).address_bytes();
    let config = Config {
        pay_to: pay_to.to_checksum(None),
        network: PaymentNetwork::Evm(EvmSettings {
            facilitator_url: Some(facilitator.url()),
            ..EvmSettings::base_sepolia()
        }),
        ..Config::default()
    };
    (Server::start(config).await, pay_to)
}

pub(crate) fn payer(key: B256) -> Payer {
    Payer::from_key(key.0).expect("a valid test key")
}

pub(crate) fn chat(text: &str) -> String {
    json!({"model": "openai/gpt-5-mini", "max_tokens": 64,
           "messages": [{"role": "user", "content": text}]})
    .to_string()
}

/// The settlement a `PAYMENT-RESPONSE` header carries.
pub(crate) fn settlement(header: &str) -> SettleResponse {
    codec::decode(header.as_bytes()).expect("a PAYMENT-RESPONSE")
}

#[tokio::test]
async fn the_official_fetch_client_pays_a_chat_in_usdc_on_chain() {
    let rpc = shared_rpc_url();
    let facilitator = OfficialFacilitator::start(&rpc);
    let (server, pay_to) = gateway(&facilitator).await;
    official_fetch_pays_once(&rpc, &server, pay_to).await;
}

#[tokio::test]
async fn the_official_fetch_client_pays_the_gateways_own_settler_on_chain() {
    let rpc = shared_rpc_url();
    let (server, pay_to, _) = settler_gateway(&rpc, ONE_ETH).await;
    official_fetch_pays_once(&rpc, &server, pay_to).await;
}

/// A gateway settling on chain itself: a fresh settler key holding `wei`.
async fn settler_gateway(rpc: &str, wei: u128) -> (Server, Address, Address) {
    settler_gateway_with(rpc, wei, |config| config).await
}

/// The same, its config changed by `adjust` first.
pub(crate) async fn settler_gateway_with(
    rpc: &str,
    wei: u128,
    adjust: impl FnOnce(Config) -> Config,
) -> (Server, Address, Address) {
    let (key_file, settler_address) = funded_settler_key(rpc, wei).await;
    let records = Arc::new(MemorySettlementRecords::new());
    let (config, pay_to) = settler_config(rpc, &key_file, Duration::from_secs(30), records).await;
    (Server::start(adjust(config)).await, pay_to, settler_address)
}

/// A fresh settler key holding `wei`, in a key file of mode 0600: the
/// file's path and the settler's address.
pub(crate) async fn funded_settler_key(rpc: &str, wei: u128) -> (String, Address) {
    let key = fresh_payer_key();
    let settler_address = payer(key).address_bytes();
    set_eth_balance(rpc, settler_address, wei).await;
    let dir = std::env::temp_dir().join(format!("walletgate-settler-{settler_address:x}"));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("settler.key");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    (key_file.display().to_string(), settler_address)
}

/// A gateway's config settling Base Sepolia USDC itself with the key in
/// `key_file`, reaching the chain at `node`, recording its transactions in
/// `records`, paying a fresh address (returned with it).
pub(crate) async fn settler_config(
    node: &str,
    key_file: &str,
    receipt_timeout: Duration,
    records: Arc<dyn SettlementRecords>,
) -> (Config, Address) {
    let settings = SettlerSettings {
        rpc_url: node.to_owned(),
        key_file: key_file.to_owned(),
        receipt_timeout,
        confirmations: 0,
    };
    let evm = EvmSettings::base_sepolia();
    let settler = crate::settler::connect(
        &settings,
        &evm,
        &walletgate::tls::ClientTls::webpki_roots(),
        crate::settler::Shared {
            records,
            ..crate::settler::Shared::in_memory()
        },
    )
    .await
    .unwrap();
    let pay_to = payer(fresh_payer_key()).address_bytes();
    let config = Config {
        pay_to: pay_to.to_checksum(None),
        network: PaymentNetwork::Evm(evm),
        settler_settings: Some(settings),
        settler: Some(settler),
        ..Config::default()
    };
    (config, pay_to)
}

/// The official `@x402/fetch` client pays one chat: mined, to the unit.
async fn official_fetch_pays_once(rpc: &str, server: &Server, pay_to: Address) {
    let rpc = rpc.to_owned();
    let key = fresh_payer_key();
    let from = payer(key).address_bytes();
    mint(&rpc, from, 1_000_000).await;

    let result = crate::tests::official_client(
        "pay_gateway.mjs",
        &[
            &server.url(""),
            "env",
            "openai/gpt-5-mini",
            "hello from a real chain",
        ],
        &[("PAYER_PRIVATE_KEY", key.to_string())],
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["answer"], "echo: hello from a real chain");
    assert_eq!(result["settlement"]["success"], true, "{result}");
    let quoted: u64 = result["quotedAmount"].as_str().unwrap().parse().unwrap();
    let transaction: B256 = result["settlement"]["transaction"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(mined_status(&rpc, transaction).await, 1);
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000 - quoted));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(quoted));
}

#[tokio::test]
async fn walletgate_pays_once_on_chain_and_refused_payments_move_nothing() {
    let rpc = shared_rpc_url();
    let facilitator = OfficialFacilitator::start(&rpc);
    let (server, pay_to) = gateway(&facilitator).await;
    walletgate_pays_once_and_refusals_move_nothing(&rpc, &server, pay_to).await;
}

#[tokio::test]
async fn walletgate_pays_the_gateways_own_settler_once_and_refusals_move_nothing() {
    let rpc = shared_rpc_url();
    let (server, pay_to, settler) = settler_gateway(&rpc, ONE_ETH).await;
    walletgate_pays_once_and_refusals_move_nothing(&rpc, &server, pay_to).await;
    // One transaction for the one payment: the refusals never reached the chain.
    assert_eq!(transaction_count(&rpc, settler).await, 1);
}

/// A settler without ETH for gas: 503 PAYMENT_VERIFICATION_UNAVAILABLE,
/// nothing served or moved; the same payment works once it is funded.
#[tokio::test]
async fn a_settler_without_gas_is_unavailable_and_the_same_payment_works_once_funded() {
    let rpc = shared_rpc_url();
    let (server, pay_to, settler) = settler_gateway(&rpc, 0).await;
    let funded = payer(fresh_payer_key());
    mint(&rpc, funded.address_bytes(), 1_000_000).await;
    let quote = server.post_once(CHAT, chat("gas"), None).await;
    let offer = quote.quote().accepts[0].clone();
    let amount: u64 = offer.amount.to_string().parse().unwrap();
    let payment = funded.payment_header(&offer, now_secs()).unwrap();
    let refused = server.post_once(CHAT, chat("gas"), Some(&payment)).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.text()
    );
    assert_eq!(refused.json()["code"], "PAYMENT_VERIFICATION_UNAVAILABLE");
    assert!(!refused.text().contains("echo: gas"), "nothing served");
    assert_eq!(
        balance(&rpc, funded.address_bytes()).await,
        U256::from(1_000_000)
    );
    set_eth_balance(&rpc, settler, ONE_ETH).await;
    let paid = server.post_once(CHAT, chat("gas"), Some(&payment)).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    assert_eq!(
        balance(&rpc, funded.address_bytes()).await,
        U256::from(1_000_000 - amount)
    );
    assert_eq!(balance(&rpc, pay_to).await, U256::from(amount));
}

/// The payer spends its USDC while the upstream answers (after verify,
/// before settle): 402 SETTLEMENT_FAILED naming the balance, the answer
/// withheld, nothing broadcast, nothing moved.
#[tokio::test]
async fn a_balance_spent_before_settlement_is_settlement_failed_and_nothing_moves() {
    use axum::Router;
    use axum::routing::post;

    let rpc = shared_rpc_url();
    let spender = payer(fresh_payer_key());
    let from = spender.address_bytes();
    let sink = payer(fresh_payer_key()).address_bytes();
    let drain = {
        let rpc = rpc.clone();
        move || {
            let rpc = rpc.clone();
            async move {
                // The payer moves all of its USDC elsewhere, mid-request.
                crate::chain_support::spend_all_usdc(&rpc, from, sink).await;
                axum::Json(json!({
                    "id": "chatcmpl-drained", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "served"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 4, "completion_tokens": 3}
                }))
            }
        }
    };
    let upstream =
        crate::tests::serve(Router::new().route("/v1/chat/completions", post(drain))).await;
    let (server, pay_to, settler) = settler_gateway_with(&rpc, ONE_ETH, |config| {
        config
            .with_openai_upstream(
                "openai",
                &format!("http://{upstream}/v1"),
                crate::upstream::ApiKey::new("sk-test-drain"),
            )
            .unwrap()
    })
    .await;
    mint(&rpc, from, 1_000_000).await;
    let quote = server.post_once(CHAT, chat("drain"), None).await;
    let offer = quote.quote().accepts[0].clone();
    let payment = spender.payment_header(&offer, now_secs()).unwrap();
    let failed = server.post_once(CHAT, chat("drain"), Some(&payment)).await;
    assert_eq!(
        failed.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        failed.text()
    );
    assert_eq!(failed.json()["code"], "SETTLEMENT_FAILED");
    assert!(
        failed.json()["debug"].as_str().unwrap().contains("balance"),
        "{}",
        failed.text()
    );
    assert!(!failed.text().contains("served"), "the answer is withheld");
    assert_eq!(balance(&rpc, pay_to).await, U256::ZERO);
    assert_eq!(balance(&rpc, sink).await, U256::from(1_000_000));
    assert_eq!(
        transaction_count(&rpc, settler).await,
        0,
        "nothing broadcast"
    );
}

/// A smart-wallet (ERC-1271) payer: the wallet's owner signs, the token asks
/// the wallet; one that refuses is PAYMENT_INVALID and moves nothing.
#[tokio::test]
async fn a_smart_wallet_pays_the_gateways_own_settler_and_a_refusing_one_is_invalid() {
    let rpc = shared_rpc_url();
    let (server, pay_to, _) = settler_gateway(&rpc, ONE_ETH).await;
    let owner = payer(fresh_payer_key());
    let wallet = deploy_erc1271_wallet(&rpc, owner.address_bytes(), false).await;
    let refusing = deploy_erc1271_wallet(&rpc, owner.address_bytes(), true).await;
    for account in [wallet, refusing] {
        mint(&rpc, account, 1_000_000).await;
    }
    let quote = server.post_once(CHAT, chat("from a wallet"), None).await;
    let offer = quote.quote().accepts[0].clone();
    let amount: u64 = offer.amount.to_string().parse().unwrap();
    let pay_from = |from: Address| {
        let mut authorization = owner.authorization(&offer, now_secs(), fresh_payer_key());
        authorization.from = from.to_checksum(None);
        codec::encode(&owner.sign(&offer, authorization).unwrap())
    };
    let paid = server
        .post_once(CHAT, chat("from a wallet"), Some(&pay_from(wallet)))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    let settled = settlement(paid.header("payment-response").unwrap());
    assert_eq!(
        mined_status(&rpc, settled.transaction.parse().unwrap()).await,
        1
    );
    assert_eq!(balance(&rpc, wallet).await, U256::from(1_000_000 - amount));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(amount));

    let refused = server
        .post_once(CHAT, chat("from a wallet"), Some(&pay_from(refusing)))
        .await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        refused.json()["code"],
        "PAYMENT_INVALID",
        "{}",
        refused.text()
    );
    assert_eq!(balance(&rpc, refusing).await, U256::from(1_000_000));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(amount));
}

/// Wallets that attack the settler (one whose check loops to burn the
/// transaction's gas, one that approves only when `GASPRICE` is 0, so it
/// would revert once mined) ask for streamed chats: each is refused at
/// verify (402, before any byte of the stream), the settler sends nothing.
#[tokio::test]
async fn hostile_smart_wallets_get_no_streamed_answer_and_cost_the_settler_nothing() {
    let rpc = shared_rpc_url();
    let (server, pay_to, settler) = settler_gateway(&rpc, ONE_ETH).await;
    let owner = payer(fresh_payer_key());
    let streamed = json!({"model": "openai/gpt-5-mini", "max_tokens": 64, "stream": true,
                          "messages": [{"role": "user", "content": "stream me for free"}]})
    .to_string();
    let quote = server.post_once(CHAT, streamed.clone(), None).await;
    let offer = quote.quote().accepts[0].clone();
    for hostility in [Hostility::Loops, Hostility::FreeGasOnly] {
        let wallet = deploy_hostile_wallet(&rpc, owner.address_bytes(), hostility).await;
        mint(&rpc, wallet, 1_000_000).await;
        let mut authorization = owner.authorization(&offer, now_secs(), fresh_payer_key());
        authorization.from = wallet.to_checksum(None);
        let payment = codec::encode(&owner.sign(&offer, authorization).unwrap());
        let refused = server
            .post_once(CHAT, streamed.clone(), Some(&payment))
            .await;
        assert_eq!(
            refused.status,
            StatusCode::PAYMENT_REQUIRED,
            "{hostility:?}: {}",
            refused.text()
        );
        assert!(!refused.text().contains("data:"), "no stream was served");
        assert_eq!(balance(&rpc, wallet).await, U256::from(1_000_000));
    }
    assert_eq!(
        transaction_count(&rpc, settler).await,
        0,
        "nothing was sent"
    );
    assert_eq!(balance(&rpc, pay_to).await, U256::ZERO);
}

/// A smart wallet's code judges its signature again when the transfer is
/// mined, so its stream is settled before the first byte (the receipt in the
/// head); an EOA's stream settles at its end (the receipt the last event).
#[tokio::test]
async fn a_smart_wallets_stream_is_settled_before_its_first_byte() {
    let rpc = shared_rpc_url();
    let (server, pay_to, _) = settler_gateway(&rpc, ONE_ETH).await;
    let owner = payer(fresh_payer_key());
    let wallet = deploy_erc1271_wallet(&rpc, owner.address_bytes(), false).await;
    mint(&rpc, wallet, 1_000_000).await;
    let streamed = json!({"model": "openai/gpt-5-mini", "max_tokens": 64, "stream": true,
                          "messages": [{"role": "user", "content": "stream from a wallet"}]})
    .to_string();
    let quote = server.post_once(CHAT, streamed.clone(), None).await;
    let offer = quote.quote().accepts[0].clone();
    let amount: u64 = offer.amount.to_string().parse().unwrap();
    let mut authorization = owner.authorization(&offer, now_secs(), fresh_payer_key());
    authorization.from = wallet.to_checksum(None);
    let payment = codec::encode(&owner.sign(&offer, authorization).unwrap());
    let paid = server
        .post_once(CHAT, streamed.clone(), Some(&payment))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    let settled = settlement(
        paid.header("payment-response")
            .expect("settled in the head"),
    );
    assert!(settled.success);
    assert_eq!(
        mined_status(&rpc, settled.transaction.parse().unwrap()).await,
        1
    );
    assert!(paid.text().contains("data:"), "the stream follows");
    assert_eq!(balance(&rpc, wallet).await, U256::from(1_000_000 - amount));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(amount));

    let eoa = payer(fresh_payer_key());
    mint(&rpc, eoa.address_bytes(), 1_000_000).await;
    let payment = codec::encode(&eoa.pay(&offer, now_secs()).unwrap());
    let paid = server.post_once(CHAT, streamed, Some(&payment)).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    assert!(
        paid.header("payment-response").is_none(),
        "settled at its end"
    );
    assert!(paid.text().contains("payment-response"), "{}", paid.text());
}

/// Paid once through `server`, then a replay, a tampered and an unfunded
/// payment are refused and move nothing.
async fn walletgate_pays_once_and_refusals_move_nothing(
    rpc: &str,
    server: &Server,
    pay_to: Address,
) {
    let rpc = rpc.to_owned();
    let funded = payer(fresh_payer_key());
    mint(&rpc, funded.address_bytes(), 1_000_000).await;

    let quote = server.post_once(CHAT, chat("pay me"), None).await;
    assert_eq!(quote.status, StatusCode::PAYMENT_REQUIRED);
    let offer = quote.quote().accepts[0].clone();
    let amount: u64 = offer.amount.to_string().parse().unwrap();

    // Paid once: the transfer is on chain, to the unit.
    let payment = funded.payment_header(&offer, now_secs()).unwrap();
    let paid = server.post_once(CHAT, chat("pay me"), Some(&payment)).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    let settled = settlement(paid.header("payment-response").unwrap());
    assert!(settled.success);
    let transaction: B256 = settled.transaction.parse().unwrap();
    assert_eq!(mined_status(&rpc, transaction).await, 1);
    let after_payment = (
        balance(&rpc, funded.address_bytes()).await,
        balance(&rpc, pay_to).await,
    );
    assert_eq!(
        after_payment,
        (U256::from(1_000_000 - amount), U256::from(amount))
    );

    // The same payment again: refused, nothing moves twice.
    let replay = server.post_once(CHAT, chat("pay me"), Some(&payment)).await;
    assert_eq!(replay.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(replay.json()["code"], "PAYMENT_REPLAY", "{}", replay.text());

    // A payment for less than the quote: refused before the chain.
    let mut cheaper = offer.clone();
    cheaper.amount = walletgate::x402::wire::AtomicAmount::new(u128::from(amount) - 1);
    let tampered = funded.payment_header(&cheaper, now_secs()).unwrap();
    let refused = server
        .post_once(CHAT, chat("pay me"), Some(&tampered))
        .await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        refused.json()["code"],
        "PAYMENT_INVALID",
        "{}",
        refused.text()
    );

    // A payer without USDC: the facilitator's simulation refuses it.
    let unfunded = payer(fresh_payer_key());
    let broke = unfunded.payment_header(&offer, now_secs()).unwrap();
    let refused = server.post_once(CHAT, chat("pay me"), Some(&broke)).await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        refused.json()["code"],
        "PAYMENT_UNFUNDED",
        "{}",
        refused.text()
    );

    assert_eq!(
        (
            balance(&rpc, funded.address_bytes()).await,
            balance(&rpc, pay_to).await,
        ),
        after_payment,
        "a refused payment moved funds"
    );
    assert_eq!(balance(&rpc, unfunded.address_bytes()).await, U256::ZERO);
}

#[tokio::test]
async fn a_facilitator_that_settles_another_network_is_refused_at_start() {
    let rpc = shared_rpc_url();
    let facilitator = OfficialFacilitator::start(&rpc);
    let probe = Config {
        network: PaymentNetwork::Evm(EvmSettings {
            facilitator_url: Some(facilitator.url()),
            ..EvmSettings::base_sepolia()
        }),
        ..Config::default()
    };
    let PaymentNetwork::Evm(evm) = &probe.network else {
        unreachable!()
    };
    // The facilitator settles eip155:84532, and not Base mainnet; it
    // settles `upto` there too, naming its own account for the witness.
    let upto = crate::check_facilitator(
        &facilitator.url(),
        &evm.network,
        &probe.tls,
        None,
        probe.ready.clone(),
    )
    .await
    .unwrap();
    assert!(upto.is_some_and(|address| address != Address::ZERO));
    let error = crate::check_facilitator(
        &facilitator.url(),
        &walletgate::x402::wire::Network::base(),
        &probe.tls,
        None,
        probe.ready.clone(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains("eip155:8453"), "{error}");
    assert!(error.contains("GATEWAY_FACILITATOR_URL"), "{error}");
}

/// walletgate's paying client (the tower layer, over hyper) pays a whole and
/// a streamed chat on chain: each receipt's transaction is mined, and the
/// payer's balance falls by exactly what the receipts say.
#[cfg(feature = "client")]
#[tokio::test]
async fn the_paying_client_layer_pays_whole_and_streamed_chats_on_chain() {
    use alloy_signer_local::PrivateKeySigner;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use tower::{ServiceBuilder, ServiceExt};
    use walletgate::client::pay::{Receipt, X402PaymentLayer};

    let rpc = shared_rpc_url();
    let facilitator = OfficialFacilitator::start(&rpc);
    let (server, pay_to) = gateway(&facilitator).await;
    let key = fresh_payer_key();
    let signer = PrivateKeySigner::from_bytes(&key).unwrap();
    let from = signer.address();
    mint(&rpc, from, 1_000_000).await;
    let client = ServiceBuilder::new()
        .layer(X402PaymentLayer::new(signer))
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());

    let mut paid = 0;
    for stream in [false, true] {
        let body = json!({"model": "openai/gpt-5-mini", "max_tokens": 64, "stream": stream,
                          "messages": [{"role": "user", "content": "hello"}]});
        let request = http::Request::post(server.url(CHAT))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let response = client.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let receipt = response.extensions().get::<Receipt>().cloned();
        let answer = response.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&answer).contains("hello"),
            "stream={stream}"
        );
        let receipt = receipt.expect("a paid answer has a receipt");
        let settlement = receipt.settlement().expect("settled");
        assert!(settlement.success, "stream={stream}");
        let transaction: B256 = settlement.transaction.parse().unwrap();
        assert_eq!(mined_status(&rpc, transaction).await, 1);
        paid += receipt.amount().units();
    }
    let paid = u64::try_from(paid).unwrap();
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000 - paid));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(paid));
}

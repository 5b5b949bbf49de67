//! Metered chats on a real chain: anvil with Circle's USDC, Permit2 and the
//! upto proxy (`tests/interop/chain/deploy.mjs`). A buyer approves Permit2
//! once, signs the `upto` offer's ceiling, the answer streams live, and what
//! its tokens cost (plus the flat fee) is settled when it ends, through the
//! gateway's own settler or the official TS facilitator: balances are
//! asserted to the unit, against the final event's amount and the
//! transaction's own `Transfer` log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use http::StatusCode;
use serde_json::{Value, json};
use walletgate::client::payer::Payer;
use walletgate::x402::facilitator::evm_settler::MemorySettlementRecords;
use walletgate::x402::wire::{PaymentRequirements, SCHEME_UPTO, SettleResponse, codec};

use crate::chain_support::{
    OfficialFacilitator, USDC, approve_permit2, balance, fresh_payer_key, mined_status, mint,
    rpc as rpc_call, shared_rpc_url, transaction_count,
};
use crate::chain_tests::{CHAT, ONE_ETH, funded_settler_key, payer, settler_config};
use crate::config::{Config, EvmSettings, PaymentNetwork};
use crate::metering_tests::{MODEL, priced, usage_chunk};
use crate::tests::{Server, now_secs, stream_settlement as final_event};
use crate::upstream::Fault;

const FUNDS: u64 = 1_000_000;

fn chat(stream: bool, text: &str) -> String {
    json!({"model": MODEL, "max_tokens": 4000, "stream": stream,
           "messages": [{"role": "user", "content": text}]})
    .to_string()
}

/// A gateway settling on chain itself (a fresh funded settler key), its
/// model given `fault` if any: the server, its payTo and the settler's address.
async fn settler_gateway(rpc: &str, fault: Option<Fault>) -> (Server, Address, Address) {
    let (key_file, settler) = funded_settler_key(rpc, ONE_ETH).await;
    let records = Arc::new(MemorySettlementRecords::new());
    let (mut config, pay_to) =
        settler_config(rpc, &key_file, Duration::from_secs(30), records).await;
    if let Some(fault) = fault {
        config.faults = HashMap::from([(MODEL.to_owned(), fault)]);
    }
    (Server::start(config).await, pay_to, settler)
}

/// A fresh buyer holding [`FUNDS`], having approved Permit2 for as much.
async fn buyer(rpc: &str) -> (B256, Payer) {
    let key = fresh_payer_key();
    let buyer = payer(key);
    mint(rpc, buyer.address_bytes(), FUNDS).await;
    approve_permit2(rpc, buyer.address_bytes(), U256::from(FUNDS)).await;
    (key, buyer)
}

/// The chat's `upto` offer, which must name `facilitator`.
async fn upto_offer(server: &Server, body: &str, facilitator: Address) -> PaymentRequirements {
    let quote = server.post_once(CHAT, body.to_owned(), None).await;
    assert_eq!(quote.status, 402, "{}", quote.text());
    let accepts = quote.quote().accepts;
    assert_eq!(accepts[0].scheme, "exact", "exact stays first");
    let upto = accepts
        .into_iter()
        .find(|offer| offer.scheme == SCHEME_UPTO)
        .expect("an upto offer");
    assert_eq!(
        upto.extra_str("facilitatorAddress"),
        Some(facilitator.to_checksum(None).as_str())
    );
    upto
}

/// What the answer's usage chunk reports, priced, plus the flat fee.
fn metered(text: &str) -> u128 {
    priced(&usage_chunk(text))
}

/// The USDC `Transfer(from, to, value)` logs of transaction `hash`, as (from, to, value).
async fn usdc_transfers(rpc: &str, hash: B256) -> Vec<(Address, Address, U256)> {
    let receipt = rpc_call(rpc, "eth_getTransactionReceipt", json!([hash])).await;
    let topic = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    let address = |word: &Value| Address::from_word(word.as_str().unwrap().parse().unwrap());
    receipt["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|log| {
            log["address"].as_str().unwrap().parse::<Address>().unwrap() == USDC
                && log["topics"][0] == topic
        })
        .map(|log| {
            let data: alloy_primitives::Bytes =
                serde_json::from_value(log["data"].clone()).unwrap();
            (
                address(&log["topics"][1]),
                address(&log["topics"][2]),
                U256::from_be_slice(&data),
            )
        })
        .collect()
}

/// The chain moved exactly `amount` from `from` to `pay_to` in `settled`'s
/// transaction, and nothing else: balances to the unit, the transaction's
/// one USDC transfer, the amount the receipt names.
async fn assert_settled_on_chain(
    rpc: &str,
    settled: &SettleResponse,
    from: Address,
    pay_to: Address,
    amount: u128,
) {
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount.map(|amount| amount.units()), Some(amount));
    let hash: B256 = settled.transaction.parse().unwrap();
    assert_eq!(mined_status(rpc, hash).await, 1);
    assert_eq!(
        usdc_transfers(rpc, hash).await,
        vec![(from, pay_to, U256::from(amount))]
    );
    assert_eq!(
        balance(rpc, from).await,
        U256::from(u128::from(FUNDS) - amount)
    );
    assert_eq!(balance(rpc, pay_to).await, U256::from(amount));
}

/// A fresh buyer pays `body`'s `upto` offer (naming `settler`) on `server`:
/// the offer, the buyer, its payment and the streamed answer's text.
async fn pay_metered(
    rpc: &str,
    server: &Server,
    settler: Address,
    body: &str,
) -> (PaymentRequirements, Payer, String, String) {
    let offer = upto_offer(server, body, settler).await;
    let (_, buyer) = buyer(rpc).await;
    let payment = codec::encode(&buyer.pay_upto(&offer, now_secs()).unwrap());
    let paid = server
        .post_once(CHAT, body.to_owned(), Some(&payment))
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    (offer, buyer, payment, paid.text())
}

#[tokio::test]
async fn a_streamed_chat_authorised_for_a_ceiling_settles_its_tokens_through_the_settler() {
    let rpc = shared_rpc_url();
    let (server, pay_to, settler) = settler_gateway(&rpc, None).await;
    let body = chat(true, "hi from a metered chain");
    let (offer, buyer, payment, text) = pay_metered(&rpc, &server, settler, &body).await;
    let settled = final_event(&text);
    let charged = metered(&text);
    assert!(
        charged * 2 < offer.amount.units(),
        "{charged} of a {} ceiling",
        offer.amount
    );
    assert_settled_on_chain(&rpc, &settled, buyer.address_bytes(), pay_to, charged).await;
    assert_eq!(transaction_count(&rpc, settler).await, 1);
    // The same permit again: Permit2 burnt its nonce; nothing moves twice.
    let again = server
        .post_once(CHAT, chat(true, "hi from a metered chain"), Some(&payment))
        .await;
    assert_eq!(again.status, 402, "{}", again.text());
    assert_eq!(
        balance(&rpc, pay_to).await,
        U256::from(charged),
        "nothing moved twice"
    );
}

#[tokio::test]
async fn a_cut_metered_stream_moves_nothing_and_an_overcounted_one_settles_the_ceiling() {
    let rpc = shared_rpc_url();
    // Cut: the buyer reads the first chunk of a slow stream, then hangs up.
    let (server, pay_to, settler) = settler_gateway(&rpc, Some(Fault::SlowStream)).await;
    let body = chat(true, "one two three four five");
    let offer = upto_offer(&server, &body, settler).await;
    let (_, cut) = buyer(&rpc).await;
    let payment = codec::encode(&cut.pay_upto(&offer, now_secs()).unwrap());
    {
        use http_body_util::BodyExt;
        use hyper_util::client::legacy::Client;
        use hyper_util::rt::TokioExecutor;
        let client = Client::builder(TokioExecutor::new())
            .build_http::<http_body_util::Full<bytes::Bytes>>();
        let request = http::Request::post(server.url(CHAT))
            .header("content-type", "application/json")
            .header("payment-signature", &payment)
            .body(http_body_util::Full::new(bytes::Bytes::from(body.clone())))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut answer = response.into_body();
        let first = answer.frame().await.expect("a first chunk").unwrap();
        assert!(first.is_data());
        // Dropped here, mid-stream.
    }
    // The stream's next pause passes: the gateway finds the buyer gone.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(balance(&rpc, cut.address_bytes()).await, U256::from(FUNDS));
    assert_eq!(balance(&rpc, pay_to).await, U256::ZERO);
    assert_eq!(transaction_count(&rpc, settler).await, 0, "nothing sent");

    // Overcounted: the answer names far more than the ceiling; the ceiling is settled.
    let (server, pay_to, settler) = settler_gateway(&rpc, Some(Fault::OvercountUsage)).await;
    let body = chat(true, "hi");
    let (offer, buyer, _, text) = pay_metered(&rpc, &server, settler, &body).await;
    assert!(metered(&text) > offer.amount.units(), "the answer overran");
    let settled = final_event(&text);
    assert_settled_on_chain(
        &rpc,
        &settled,
        buyer.address_bytes(),
        pay_to,
        offer.amount.units(),
    )
    .await;
}

#[tokio::test]
async fn a_buyer_without_a_permit2_allowance_is_unfunded_and_nothing_moves() {
    let rpc = shared_rpc_url();
    let (server, pay_to, settler) = settler_gateway(&rpc, None).await;
    let body = chat(true, "hi");
    let offer = upto_offer(&server, &body, settler).await;
    let unapproved = payer(fresh_payer_key());
    mint(&rpc, unapproved.address_bytes(), FUNDS).await;
    let payment = codec::encode(&unapproved.pay_upto(&offer, now_secs()).unwrap());
    let refused = server.post_once(CHAT, body, Some(&payment)).await;
    assert_eq!(refused.status, 402, "{}", refused.text());
    let answer: Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(answer["code"], "PAYMENT_UNFUNDED", "{answer}");
    assert!(
        answer.to_string().contains("permit2_allowance_required"),
        "{answer}"
    );
    assert_eq!(
        balance(&rpc, unapproved.address_bytes()).await,
        U256::from(FUNDS)
    );
    assert_eq!(balance(&rpc, pay_to).await, U256::ZERO);
    assert_eq!(transaction_count(&rpc, settler).await, 0);
}

/// A gateway settling through `facilitator` (the official one, `upto`
/// registered), its `upto` offer naming the address its `/supported` lists,
/// its model streaming slowly.
async fn official_gateway(facilitator: &OfficialFacilitator) -> (Server, Address, Address) {
    let pay_to = payer(fresh_payer_key()).address_bytes();
    let mut config = Config {
        pay_to: pay_to.to_checksum(None),
        network: PaymentNetwork::Evm(EvmSettings {
            facilitator_url: Some(facilitator.url()),
            ..EvmSettings::base_sepolia()
        }),
        faults: HashMap::from([(MODEL.to_owned(), Fault::SlowStream)]),
        ..Config::default()
    };
    let upto = crate::check_facilitator(
        &facilitator.url(),
        &EvmSettings::base_sepolia().network,
        &config.tls,
        None,
        config.ready.clone(),
    )
    .await
    .unwrap()
    .expect("the official facilitator settles upto");
    config.facilitator_upto = Some(upto);
    (Server::start(config).await, pay_to, upto)
}

#[tokio::test]
async fn the_official_upto_client_and_facilitator_settle_a_live_metered_stream_on_chain() {
    let rpc = shared_rpc_url();
    let facilitator = OfficialFacilitator::start(&rpc);
    let (server, pay_to, facilitator_address) = official_gateway(&facilitator).await;
    let body = chat(true, "one two three four");
    let offer = upto_offer(&server, &body, facilitator_address).await;
    let (key, official) = buyer(&rpc).await;
    let result = crate::tests::official_client(
        "pay_upto.mjs",
        &[
            &server.url(""),
            "env",
            MODEL,
            "one two three four",
            "stream",
        ],
        &[("PAYER_PRIVATE_KEY", key.to_string())],
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["answer"], "echo: one two three four", "{result}");
    assert_eq!(result["ceiling"], offer.amount.units().to_string());
    // Live: the first chunk came while the upstream still had events to
    // produce, each one 300 ms after the last (four words, the end, usage).
    let first = result["firstChunkMs"].as_u64().unwrap();
    let last = result["lastChunkMs"].as_u64().unwrap();
    assert!(
        last >= first + 900,
        "first chunk at {first} ms, last at {last} ms: {result}"
    );
    let settled: SettleResponse = serde_json::from_value(result["settlement"].clone()).unwrap();
    // Exactly what the answer's tokens cost, well under the ceiling.
    let charged = priced(&result["usage"]);
    assert!(
        charged * 2 < offer.amount.units(),
        "{charged} of {}",
        offer.amount
    );
    assert_settled_on_chain(&rpc, &settled, official.address_bytes(), pay_to, charged).await;

    // walletgate's own client pays the same gateway, preferring upto.
    #[cfg(feature = "client")]
    {
        use alloy_signer_local::PrivateKeySigner;
        use http_body_util::{BodyExt, Full};
        use hyper_util::client::legacy::Client;
        use hyper_util::rt::TokioExecutor;
        use tower::{ServiceBuilder, ServiceExt};
        use walletgate::client::pay::{Receipt, SpendPolicy, X402PaymentLayer};

        let (key, buyer) = buyer(&rpc).await;
        let before = balance(&rpc, pay_to).await;
        let signer = PrivateKeySigner::from_bytes(&key).unwrap();
        let client = ServiceBuilder::new()
            .layer(
                X402PaymentLayer::new(signer).with_policy(SpendPolicy::new().with_upto_preferred()),
            )
            .service(Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>());
        let request = http::Request::post(server.url(CHAT))
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(body)))
            .unwrap();
        let response = client.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let receipt = response.extensions().get::<Receipt>().cloned().unwrap();
        let answer = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&answer).into_owned();
        assert_eq!(receipt.offer().scheme, SCHEME_UPTO);
        let settled = receipt
            .settlement()
            .expect("settled at the stream's end")
            .clone();
        let charged = metered(&text);
        assert_eq!(receipt.settled_amount().unwrap().units(), charged);
        assert!(settled.success, "{settled:?}");
        let hash: B256 = settled.transaction.parse().unwrap();
        assert_eq!(mined_status(&rpc, hash).await, 1);
        assert_eq!(
            usdc_transfers(&rpc, hash).await,
            vec![(buyer.address_bytes(), pay_to, U256::from(charged))]
        );
        assert_eq!(
            balance(&rpc, buyer.address_bytes()).await,
            U256::from(u128::from(FUNDS) - charged)
        );
        assert_eq!(balance(&rpc, pay_to).await, before + U256::from(charged));
    }
}

#[tokio::test]
async fn permits_the_chain_would_refuse_are_402s_and_move_nothing() {
    let rpc = shared_rpc_url();
    let (server, pay_to, settler) = settler_gateway(&rpc, None).await;
    let body = chat(false, "hi");
    let offer = upto_offer(&server, &body, settler).await;
    let (_, buyer) = buyer(&rpc).await;
    let refused = |payment: String| {
        let (server, body) = (&server, body.clone());
        async move {
            let answer = server.post_once(CHAT, body, Some(&payment)).await;
            assert_eq!(answer.status, 402, "{}", answer.text());
            serde_json::from_slice::<Value>(&answer.body).unwrap()
        }
    };
    // Expired: signed an hour ago.
    let expired = refused(codec::encode(
        &buyer.pay_upto(&offer, now_secs() - 3_600).unwrap(),
    ))
    .await;
    // A witness naming another facilitator than the one the offer names.
    let mut elsewhere = offer.clone();
    elsewhere.extra.insert(
        "facilitatorAddress".into(),
        Address::repeat_byte(0x77).to_checksum(None).into(),
    );
    let mut payment = buyer.pay_upto(&elsewhere, now_secs()).unwrap();
    payment.accepted = offer.clone();
    let other_facilitator = refused(codec::encode(&payment)).await;
    // A permit whose Permit2 nonce was burnt already: one settled, then its twin.
    let used = codec::encode(&buyer.pay_upto(&offer, now_secs()).unwrap());
    let paid = server.post_once(CHAT, body.clone(), Some(&used)).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let settled: SettleResponse =
        codec::decode(paid.header("payment-response").unwrap().as_bytes()).unwrap();
    let charged = settled.amount.unwrap().units();
    let replayed = refused(used).await;
    for (answer, code, reason) in [
        (&expired, "PAYMENT_UNFUNDED", "permit2_deadline_expired"),
        (
            &other_facilitator,
            "PAYMENT_INVALID",
            "upto_facilitator_mismatch",
        ),
        (&replayed, "PAYMENT_REPLAY", ""),
    ] {
        assert_eq!(answer["code"], code, "{answer}");
        assert!(answer.to_string().contains(reason), "{reason}: {answer}");
    }
    // Only the one payment moved.
    assert_eq!(
        balance(&rpc, buyer.address_bytes()).await,
        U256::from(u128::from(FUNDS) - charged)
    );
    assert_eq!(balance(&rpc, pay_to).await, U256::from(charged));
    assert_eq!(transaction_count(&rpc, settler).await, 1);
}

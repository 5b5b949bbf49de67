//! Metered chats on the embedded default (the development ledger): a buyer
//! signs the `upto` offer's ceiling (a Permit2 permit), the answer is sent
//! live, and what its tokens cost (plus the flat fee) is settled when it
//! ends: the ledger moves exactly that, and the receipt says so.

use serde_json::{Value, json};
use walletgate::client::payer::Payer;
use walletgate::x402::wire::{SCHEME_UPTO, SettleResponse, codec};

use crate::config::{Config, UptoPlace};
use crate::tests::{Server, now_secs};

pub(crate) const CHAT: &str = "/v1/chat/completions";
pub(crate) const MODEL: &str = "openai/gpt-5-mini";

/// A chat of "hi" allowed 4,000 tokens.
pub(crate) fn chat(stream: bool) -> String {
    json!({"model": MODEL, "max_tokens": 4000, "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
    .to_string()
}

/// The `usage` a stream's usage chunk reports.
pub(crate) fn usage_chunk(text: &str) -> Value {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find_map(|chunk| chunk.get("usage").cloned())
        .expect("a usage chunk")
}

/// `usage` (`{prompt_tokens, completion_tokens}`) of [`MODEL`] priced, plus the flat fee.
pub(crate) fn priced(usage: &Value) -> u128 {
    let model = Config::default().catalogue.get(MODEL).unwrap().clone();
    let price = model
        .metered_price(
            usage["prompt_tokens"].as_u64().unwrap(),
            usage["completion_tokens"].as_u64().unwrap(),
        )
        .unwrap();
    price.micros() + 1_000
}

/// The offers of a chat's 402, in order.
async fn offers(server: &Server, body: &str) -> Vec<walletgate::x402::wire::PaymentRequirements> {
    let quote = server.post_once(CHAT, body.to_owned(), None).await;
    assert_eq!(quote.status, 402, "{}", quote.text());
    quote.quote().accepts
}

/// A development payer that is not the gateway's payTo.
fn buyer(index: usize) -> Payer {
    let payer = Payer::dev(index);
    assert_ne!(
        payer.address(),
        Config::default().pay_to,
        "not paying itself"
    );
    payer
}

#[tokio::test]
async fn a_streamed_chat_paid_upto_is_charged_its_tokens_not_its_ceiling() {
    let server = Server::start(Config::default()).await;
    let body = chat(true);
    let offers = offers(&server, &body).await;
    assert_eq!(offers[0].scheme, "exact", "exact stays first");
    let upto = offers
        .iter()
        .find(|offer| offer.scheme == SCHEME_UPTO)
        .unwrap();
    assert_eq!(
        upto.amount, offers[0].amount,
        "the ceiling is the exact price"
    );
    let ceiling = upto.amount.units();

    let payer = buyer(4);
    let before = server.balance(&payer.address());
    let payment = codec::encode(&payer.pay_upto(upto, now_secs()).unwrap());
    let paid = server.post_once(CHAT, body, Some(&payment)).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    assert!(
        paid.header("payment-response").is_none(),
        "no receipt before the amount exists"
    );
    let text = paid.text();
    let settled = crate::tests::stream_settlement(&text);
    assert!(settled.success);
    let charged = settled.amount.unwrap().units();
    assert!(charged * 2 < ceiling, "{charged} of a {ceiling} ceiling");
    assert_eq!(server.balance(&payer.address()), before - charged);
    // What the stream's usage chunk reports, priced: the same amount.
    let usage = usage_chunk(&text);
    assert_eq!(charged, priced(&usage), "tokens plus the flat fee");
    // The receipt says what it was for, in one place.
    let statement = &settled.extensions.as_ref().unwrap()["usage"];
    assert_eq!(statement["model"], MODEL);
    assert_eq!(statement["prompt_tokens"], usage["prompt_tokens"]);
    assert_eq!(statement["completion_tokens"], usage["completion_tokens"]);
    assert_eq!(statement["fee"], "0.001");
    assert_eq!(statement["amount"], charged.to_string());
    assert!(!statement["input_usd_per_million"].is_null());
    assert!(!statement["output_usd_per_million"].is_null());
}

#[tokio::test]
async fn an_unstreamed_chat_paid_upto_carries_the_settled_amount_in_its_receipt() {
    let server = Server::start(Config::default()).await;
    let body = chat(false);
    let offers = offers(&server, &body).await;
    let upto = offers
        .iter()
        .find(|offer| offer.scheme == SCHEME_UPTO)
        .unwrap();
    let payer = buyer(5);
    let before = server.balance(&payer.address());
    let payment = codec::encode(&payer.pay_upto(upto, now_secs()).unwrap());
    let paid = server.post_once(CHAT, body.clone(), Some(&payment)).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let settled: SettleResponse =
        codec::decode(paid.header("payment-response").unwrap().as_bytes()).unwrap();
    let charged = settled.amount.unwrap().units();
    assert!(charged * 2 < upto.amount.units());
    assert_eq!(server.balance(&payer.address()), before - charged);
    // The same permit again: refused, nothing moves twice.
    let again = server.post_once(CHAT, body, Some(&payment)).await;
    assert_eq!(again.status, 402, "{}", again.text());
    assert_eq!(server.balance(&payer.address()), before - charged);
    // An exact payment of the same chat is charged its whole price, as before.
    let exact = server.post_once(CHAT, chat(false), None).await;
    let offer = exact.quote().accepts[0].clone();
    let payer = buyer(6);
    let before = server.balance(&payer.address());
    let paid = server
        .post_once(
            CHAT,
            chat(false),
            Some(&codec::encode(&payer.pay(&offer, now_secs()).unwrap())),
        )
        .await;
    assert_eq!(paid.status, 200);
    assert_eq!(
        server.balance(&payer.address()),
        before - offer.amount.units()
    );
}

/// The `upto` offer of a chat's 402.
async fn upto_offer(server: &Server, body: &str) -> walletgate::x402::wire::PaymentRequirements {
    offers(server, body)
        .await
        .into_iter()
        .find(|offer| offer.scheme == SCHEME_UPTO)
        .expect("an upto offer")
}

/// Pays a streamed chat with `payment` over a raw connection, reads until
/// the first chunk of the answer, and hangs up.
async fn cut_after_first_chunk(server: &Server, body: &str, payment: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut connection = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    let request = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n\
         content-length: {}\r\npayment-signature: {payment}\r\n\r\n{body}",
        body.len()
    );
    connection.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !String::from_utf8_lossy(&read).contains("data: ") {
        let n = tokio::time::timeout_at(deadline, connection.read(&mut buffer))
            .await
            .expect("the first chunk within 10 s")
            .unwrap();
        assert_ne!(n, 0, "{}", String::from_utf8_lossy(&read));
        read.extend_from_slice(&buffer[..n]);
    }
    assert!(
        read.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&read)
    );
    drop(connection);
    // The gateway sees the cut at its next write (a slow stream writes every 300 ms).
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
}

/// A metered stream its client leaves early moves nothing; after three in a
/// row the payer's metered payments are refused for a while, and `exact`
/// (paid in full before the answer) still serves it.
#[tokio::test]
async fn a_cut_metered_stream_moves_nothing_and_three_in_a_row_leave_exact_only() {
    let mut config = Config::default();
    config
        .faults
        .insert(MODEL.to_owned(), crate::upstream::Fault::SlowStream);
    let server = Server::start(config).await;
    let body = json!({"model": MODEL, "max_tokens": 4000, "stream": true,
                      "messages": [{"role": "user", "content": "one two three four five"}]})
    .to_string();
    let upto = upto_offer(&server, &body).await;
    let payer = buyer(7);
    let before = server.balance(&payer.address());
    for _ in 0..3 {
        let payment = codec::encode(&payer.pay_upto(&upto, now_secs()).unwrap());
        cut_after_first_chunk(&server, &body, &payment).await;
        assert_eq!(
            server.balance(&payer.address()),
            before,
            "a cut stream is free"
        );
    }
    let fourth = codec::encode(&payer.pay_upto(&upto, now_secs()).unwrap());
    let refused = server.post_once(CHAT, body.clone(), Some(&fourth)).await;
    assert_eq!(refused.status, 402, "{}", refused.text());
    assert_eq!(refused.json()["code"], "PAYMENT_INVALID");
    assert!(
        refused
            .text()
            .contains(walletgate::x402::server::METERED_PAYMENTS_SUSPENDED),
        "{}",
        refused.text()
    );
    assert_eq!(
        refused.quote().accepts[0].scheme,
        "exact",
        "the way to pay now"
    );
    // Another payer still pays metered; this one pays exact, in full.
    let other = buyer(8);
    let metered = codec::encode(&other.pay_upto(&upto, now_secs()).unwrap());
    assert_eq!(
        server
            .post_once(CHAT, body.clone(), Some(&metered))
            .await
            .status,
        200
    );
    let exact = refused.quote().accepts[0].clone();
    let paid = server
        .post_once(
            CHAT,
            body,
            Some(&codec::encode(&payer.pay(&exact, now_secs()).unwrap())),
        )
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    assert_eq!(
        server.balance(&payer.address()),
        before - exact.amount.units()
    );
}

/// An upstream that reports more tokens than the request allowed: the
/// ceiling the payer signed is settled, never more.
#[tokio::test]
async fn an_answer_that_used_more_than_its_ceiling_settles_the_ceiling() {
    use axum::Router;
    use axum::routing::post;

    let overrun = || async {
        axum::Json(json!({
            "id": "chatcmpl-overrun", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "long"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 1_000_000}
        }))
    };
    let upstream = crate::tests::serve(Router::new().route(CHAT, post(overrun))).await;
    let config = Config::default()
        .with_openai_upstream(
            "openai",
            &format!("http://{upstream}/v1"),
            crate::upstream::ApiKey::new("sk-test-overrun"),
        )
        .unwrap();
    let server = Server::start(config).await;
    let body = chat(false);
    let upto = upto_offer(&server, &body).await;
    let payer = buyer(3);
    let before = server.balance(&payer.address());
    let payment = codec::encode(&payer.pay_upto(&upto, now_secs()).unwrap());
    let paid = server.post_once(CHAT, body, Some(&payment)).await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let settled: SettleResponse =
        codec::decode(paid.header("payment-response").unwrap().as_bytes()).unwrap();
    assert_eq!(settled.amount, Some(upto.amount));
    assert_eq!(
        server.balance(&payer.address()),
        before - upto.amount.units()
    );
}

#[tokio::test]
async fn gateway_upto_off_quotes_the_specifications_402_and_first_puts_it_first() {
    let off = Server::start(Config {
        upto: UptoPlace::Off,
        ..Config::default()
    })
    .await;
    let offers_off = offers(&off, &chat(false)).await;
    assert_eq!(offers_off.len(), 1);
    assert_eq!(offers_off[0].scheme, "exact");
    let first = Server::start(Config {
        upto: UptoPlace::First,
        ..Config::default()
    })
    .await;
    let offers_first = offers(&first, &chat(false)).await;
    assert_eq!(offers_first[0].scheme, SCHEME_UPTO);
    assert_eq!(
        offers_first[0].extra["facilitatorAddress"],
        walletgate::x402::facilitator::LocalEvmFacilitator::UPTO_FACILITATOR.to_checksum(None)
    );
    assert_eq!(offers_first[1], offers_off[0]);
}

/// The official `@x402/evm` 2.27 `UptoEvmScheme` client, selecting `upto`,
/// pays the embedded default: its permit verifies, the tokens are settled.
#[tokio::test]
async fn the_official_upto_client_pays_a_metered_chat() {
    let server = Server::start(Config::default()).await;
    let payer = buyer(7);
    let before = server.balance(&payer.address());
    let result = crate::tests::official_client(
        "pay_upto.mjs",
        &[&server.url(""), "7", MODEL, "hi"],
        &[],
        std::time::Duration::from_secs(60),
    )
    .await;
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["answer"], "echo: hi");
    assert_eq!(result["settlement"]["success"], true, "{result}");
    let settled: u128 = result["settlement"]["amount"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let ceiling: u128 = result["ceiling"].as_str().unwrap().parse().unwrap();
    assert!(settled * 2 < ceiling, "{settled} of {ceiling}");
    assert_eq!(server.balance(&payer.address()), before - settled);
}

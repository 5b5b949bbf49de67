//! The gateway settling through `walletgate facilitator`
//! (`GATEWAY_FACILITATOR_URL`) on anvil with Circle's USDC: a `/settle`
//! whose answer is lost on the way back is asked again on the resend with
//! the same `Idempotency-Key`, so the facilitator tells this gateway, and
//! only it, the settlement's outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use alloy_primitives::{Address, U256};
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncBufReadExt, BufReader};
use walletgate::client::payer::sequential_nonce;

use crate::chain_support::{USDC, balance, fresh_payer_key, mined_status, mint, shared_rpc_url};
use crate::chain_tests::{CHAT, ONE_ETH, chat, funded_settler_key, payer, settlement};
use crate::config::{Config, EvmSettings, PaymentNetwork};
use crate::tests::{Server, fresh_nonce, now_secs};

/// `walletgate facilitator` paying only `pay_to`, with a fresh funded key;
/// the child (killed on drop) and its URL.
async fn walletgate_facilitator(rpc: &str, pay_to: Address) -> (tokio::process::Child, String) {
    let (key_file, _) = funded_settler_key(rpc, ONE_ETH).await;
    let binary = crate::tests::walletgate_binary();
    let mut child = tokio::process::Command::new(binary)
        .args(["facilitator", "--rpc-url", rpc, "--network", "eip155:84532"])
        .args(["--asset", &USDC.to_checksum(None)])
        .args(["--pay-to", &pay_to.to_checksum(None)])
        .args(["--listen", "127.0.0.1:0", "--key-file", &key_file])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    assert!(line.starts_with("http://"), "facilitator: {line:?}");
    (child, line.trim().to_owned())
}

/// A loopback proxy to `upstream` that forwards the first `/settle` and
/// drops its answer (the connection closes): the settlement happened, the
/// caller never hears of it. Every other call passes.
async fn losing_first_settle_answer(upstream: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let lose_next = Arc::new(AtomicBool::new(true));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (upstream, lose_next) = (upstream.clone(), lose_next.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let (upstream, lose_next) = (upstream.clone(), lose_next.clone());
                        forward(request, upstream, lose_next)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    url
}

/// The upstream's answer to `request`; an error (the connection dropped)
/// in its place for the first `/settle`.
async fn forward(
    request: http::Request<hyper::body::Incoming>,
    upstream: String,
    lose_next: Arc<AtomicBool>,
) -> Result<http::Response<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let uri = format!(
        "{upstream}{}",
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut forwarded = http::Request::builder().method(parts.method).uri(uri);
    for (name, value) in &parts.headers {
        if name != http::header::HOST {
            forwarded = forwarded.header(name, value);
        }
    }
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let response = client.request(forwarded.body(Full::new(body))?).await?;
    let (head, answer) = response.into_parts();
    let answer = answer.collect().await?.to_bytes();
    if parts.uri.path() == "/settle" && lose_next.swap(false, Ordering::SeqCst) {
        return Err("the /settle answer is lost".into());
    }
    Ok(http::Response::from_parts(head, Full::new(answer)))
}

#[tokio::test]
async fn a_lost_settle_answer_is_resolved_on_the_resend_with_the_gateways_key_and_charged_once() {
    let rpc = shared_rpc_url();
    let pay_to = payer(fresh_payer_key()).address_bytes();
    let (_facilitator, url) = walletgate_facilitator(&rpc, pay_to).await;
    let proxy = losing_first_settle_answer(url).await;
    let config = Config {
        pay_to: pay_to.to_checksum(None),
        network: PaymentNetwork::Evm(EvmSettings {
            facilitator_url: Some(proxy),
            ..EvmSettings::base_sepolia()
        }),
        ..Config::default()
    };
    let server = Server::start(config).await;
    let buyer = payer(fresh_payer_key());
    let from = buyer.address_bytes();
    mint(&rpc, from, 1_000_000).await;

    let body = chat("is my answer lost?");
    let quote = server.post_once(CHAT, body.clone(), None).await;
    assert_eq!(quote.status, StatusCode::PAYMENT_REQUIRED);
    let offer = quote.quote().accepts[0].clone();
    let quoted = offer.amount.units();
    let payment = buyer
        .header_with_nonce(&offer, now_secs(), sequential_nonce(fresh_nonce()))
        .unwrap();
    let lost = server.post_once(CHAT, body.clone(), Some(&payment)).await;
    assert_eq!(
        lost.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        lost.text()
    );
    assert_eq!(
        settlement(lost.header("payment-response").unwrap())
            .error_reason
            .as_deref(),
        Some("settlement_pending")
    );

    let resent = server.post_once(CHAT, body.clone(), Some(&payment)).await;
    assert_eq!(resent.status, StatusCode::OK, "{}", resent.text());
    let settled = settlement(resent.header("payment-response").unwrap());
    assert!(settled.success, "{settled:?}");
    let transaction = settled.transaction.parse().unwrap();
    assert_eq!(mined_status(&rpc, transaction).await, 1);
    // Again: the kept answer, the same settlement, nothing moves twice.
    let again = server.post_once(CHAT, body, Some(&payment)).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text());
    assert_eq!(
        settlement(again.header("payment-response").unwrap()).transaction,
        settled.transaction
    );
    assert_eq!(balance(&rpc, from).await, U256::from(1_000_000 - quoted));
    assert_eq!(balance(&rpc, pay_to).await, U256::from(quoted));
}

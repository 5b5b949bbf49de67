//! `/` for a browser: only a browser's navigation gets the page (programs
//! keep the 404), and the page itself driven in headless Chromium by
//! `tests/interop/console/gateway.mjs` with a scripted wallet, against the
//! development ledger.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};
use walletgate::x402::facilitator::DevLedger;

use crate::config::Config;
use crate::node::node_json;
use crate::page::CONTENT_SECURITY_POLICY;
use crate::tests::{Reply, Server};
use walletgate::free_tier::FreeTierQuotas;

/// Public Hardhat/Anvil development key #2 (funded on the development ledger).
const DEV_KEY_2: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
const DEV_WALLET_2: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
/// Free chats per client IP in the test's window.
const FREE_PER_WINDOW: u32 = 2;
const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

async fn get_root(server: &Server, accept: Option<&str>) -> Reply {
    let mut request = Request::get(server.url("/"));
    if let Some(accept) = accept {
        request = request.header(header::ACCEPT, accept);
    }
    server
        .send(request.body(Full::new(Bytes::new())).unwrap())
        .await
}

#[tokio::test]
async fn only_a_browser_gets_the_page_and_programs_keep_the_404() {
    let server = Server::start(Config::default()).await;
    let page = get_root(&server, Some(BROWSER_ACCEPT)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(
        page.header("content-security-policy"),
        Some(CONTENT_SECURITY_POLICY)
    );
    assert!(page.text().contains("<a href=\"/.well-known/x402\">"));
    for accept in [Some("application/json"), Some("*/*"), None] {
        let program = get_root(&server, accept).await;
        assert_eq!(program.status, StatusCode::NOT_FOUND, "{accept:?}");
        assert!(program.body.is_empty());
    }
    let script = server.get("/console/gateway.js").await;
    assert_eq!(script.status, StatusCode::OK);
    assert_eq!(
        script.header("content-security-policy"),
        Some(CONTENT_SECURITY_POLICY)
    );
}

/// Each chat model's price of the example request, as `x-payment-info` lists it.
fn listed_prices(openapi: &Value) -> BTreeMap<String, String> {
    let info = &openapi["paths"]["/v1/chat/completions"]["post"]["x-payment-info"]["price"];
    let images = &openapi["paths"]["/v1/images/generations"]["post"]["x-payment-info"]["price"];
    (info.as_object().unwrap().iter())
        .chain(images.as_object().unwrap())
        .map(|(id, price)| {
            let amount = price["amount"].as_str().unwrap();
            let currency = price["currency"].as_str().unwrap();
            (id.clone(), format!("{amount} {currency}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_in_a_browser_lists_every_price_and_pays_one_chat_with_the_wallet() {
    let server = Server::start(Config {
        free_tier: FreeTierQuotas::new(FREE_PER_WINDOW, 300).unwrap(),
        ..Config::default()
    })
    .await;
    let before = server.balance(DEV_WALLET_2);
    assert_eq!(before, DevLedger::DEV_ACCOUNT_FUNDS);
    let seen = node_json(
        "console",
        "puppeteer-core",
        "gateway.mjs",
        &[],
        &[
            ("GATEWAY_URL", server.url("")),
            ("WALLET_KEY", DEV_KEY_2.to_owned()),
            ("FREE_MODEL", "nvidia/nemotron-super".to_owned()),
            ("PAID_MODEL", "xai/grok-code-fast".to_owned()),
            // Mainnet: the offer is on Base Sepolia (84532), so the wallet must switch.
            ("START_CHAIN_ID", "1".to_owned()),
            ("FREE_PER_WINDOW", FREE_PER_WINDOW.to_string()),
            // A valid key no ledger account holds funds for.
            ("POOR_WALLET_KEY", format!("0x{}", "11".repeat(32))),
        ],
        None,
        Duration::from_secs(120),
    )
    .await;

    assert_eq!(seen["pageStatus"], 200, "{seen}");
    let csp = seen["csp"].as_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(seen["axe"], json!([]), "{seen}");
    assert_eq!(seen["axeAfterPaying"], json!([]), "{seen}");
    assert_eq!(seen["links"], json!(["/.well-known/x402", "/openapi.json"]));
    assert_eq!(seen["modelChoice"], true);

    // Every model of /v1/models, priced as the documents price it.
    let models = server.get("/v1/models").await.json();
    let ids: Vec<&str> = (models["data"].as_array().unwrap().iter())
        .map(|model| model["id"].as_str().unwrap())
        .collect();
    let rows = seen["rows"].as_array().unwrap();
    let shown: Vec<&str> = rows.iter().map(|row| row["id"].as_str().unwrap()).collect();
    assert_eq!(shown, ids);
    let prices = listed_prices(&server.get("/openapi.json").await.json());
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let expected = prices.get(id).map_or("free", String::as_str);
        assert_eq!(row["price"], expected, "{id}");
    }

    // A free model answers; the wallet is never asked.
    assert_eq!(seen["free"]["error"], "", "{seen}");
    assert_eq!(seen["free"]["answer"], "echo: hello free");
    assert_eq!(seen["freeAskedWallet"], json!([]));

    // A wallet that will not switch chains: its message, nothing signed.
    let no_switch = seen["noSwitch"]["error"].as_str().unwrap();
    assert!(
        no_switch.starts_with("Wrong network (EIP-1193 code 4902): the offer is on chain 84532"),
        "{no_switch}"
    );
    assert!(
        no_switch.ends_with("Nothing was signed or sent."),
        "{no_switch}"
    );
    assert_eq!(
        seen["noSwitchAsked"],
        json!([
            "eth_requestAccounts",
            "eth_chainId",
            "wallet_switchEthereumChain"
        ])
    );

    // A refused signature: its message; nothing sent.
    let refused = seen["refused"]["error"].as_str().unwrap();
    assert!(
        refused.starts_with("Signature refused (EIP-1193 code 4001): User rejected the request."),
        "{refused}"
    );
    assert_eq!(seen["refused"]["answer"], Value::Null);

    // Paid: switched, signed, answered, the receipt shown; the ledger moved once.
    assert_eq!(seen["paid"]["error"], "", "{seen}");
    assert_eq!(seen["paid"]["answer"], "echo: hello paid");
    assert_eq!(
        seen["paidAsked"],
        json!([
            "eth_requestAccounts",
            "eth_chainId",
            "wallet_switchEthereumChain",
            "eth_signTypedData_v4"
        ])
    );
    assert_eq!(seen["walletChainAfter"], 84532);
    let receipt = &seen["receipt"];
    assert_eq!(receipt["price"], prices["xai/grok-code-fast"].as_str());
    assert_eq!(receipt["network"], "eip155:84532");
    assert_eq!(
        receipt["payer"].as_str().unwrap().to_ascii_lowercase(),
        DEV_WALLET_2.to_ascii_lowercase()
    );
    assert!(receipt["transaction"].as_str().unwrap().starts_with("0x"));
    let amount: u128 = receipt["amount"]
        .as_str()
        .unwrap()
        .trim_end_matches(" (atomic units)")
        .parse()
        .unwrap();
    assert!(amount > 0);
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(server.balance(DEV_WALLET_2), before - amount);

    // The free tier spent and a wallet without funds, in words with their codes.
    let spent = seen["freeTierSpent"]["error"].as_str().unwrap();
    assert!(
        spent.starts_with("Free tier exhausted: ")
            && spent.ends_with("(HTTP 429, code FREE_TIER_RATE_LIMITED)"),
        "{spent}"
    );
    let poor = seen["noFunds"]["error"].as_str().unwrap();
    assert!(
        poor.starts_with("Insufficient funds: ")
            && poor.ends_with("(HTTP 402, code PAYMENT_UNFUNDED)"),
        "{poor}"
    );
    assert_eq!(
        seen["noFundsAsked"].as_array().unwrap().last().unwrap(),
        "eth_signTypedData_v4"
    );
    assert_eq!(
        server.ledger.settlements(),
        1,
        "the refused payment moved nothing"
    );
    assert_eq!(seen["alerts"], 0);
    assert_eq!(seen["violations"], json!([]));
    assert!(
        !seen
            .to_string()
            .contains(DEV_KEY_2.trim_start_matches("0x")),
        "the key leaked"
    );
}

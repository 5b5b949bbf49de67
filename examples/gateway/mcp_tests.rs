//! `/mcp` over real TCP: the catalogue's tools, free and paid through the
//! library's MCP front, signed here with the public development keys; the
//! same price as REST, every documented refusal as a tool result, bad input
//! as JSON-RPC errors.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use walletgate::client::payer::{Payer, sequential_nonce};
use walletgate::free_tier::FreeTierQuotas;
use walletgate::x402::facilitator::DevLedger;
use walletgate::x402::wire::PaymentRequired;

use crate::config::Config;
use crate::request::Endpoint;
use crate::tests::{Reply, Server, body, fault_config, fresh_nonce, now_secs, path};

const PAID_MODEL: &str = "anthropic/claude-sonnet-4.6";
const FREE_MODEL: &str = "nvidia/nemotron-super";
const IMAGE_MODEL: &str = "openai/dall-e-3";

/// Sends one JSON-RPC message to `/mcp`.
async fn rpc(server: &Server, message: &Value) -> Reply {
    server.post_once("/mcp", message.to_string(), None).await
}

/// `tools/call` of `tool` with `arguments`, paid with `payment` when given.
async fn call(server: &Server, tool: &str, arguments: &Value, payment: Option<&Value>) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(payment) = payment {
        params["_meta"] = json!({"x402/payment": payment});
    }
    let reply = rpc(
        server,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["result"].clone()
}

/// The PaymentRequired of an unpaid call.
fn payment_required(result: &Value) -> PaymentRequired {
    assert_eq!(result["isError"], true, "{result}");
    serde_json::from_value(result["structuredContent"].clone()).unwrap()
}

/// `payer`'s payment for the first offer of `quote`, as the `_meta` object.
fn pay(quote: &PaymentRequired, payer: &Payer) -> Value {
    let offer = &quote.accepts[0];
    let header = payer
        .header_with_nonce(offer, now_secs(), sequential_nonce(fresh_nonce()))
        .unwrap();
    let payload: walletgate::x402::wire::PaymentPayload =
        walletgate::x402::wire::codec::decode(header.as_bytes()).unwrap();
    serde_json::to_value(payload).unwrap()
}

fn chat_arguments(model: &str, stream: bool) -> Value {
    body(Endpoint::Chat, model, "hello", stream)
}

fn balance(server: &Server, payer: &Payer) -> u128 {
    server.balance(&payer.address())
}

#[tokio::test]
async fn the_tools_come_from_the_catalogue_and_need_no_session() {
    let server = Server::start(Config::default()).await;
    let init = rpc(
        &server,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
    )
    .await;
    assert_eq!(init.json()["result"]["protocolVersion"], "2025-06-18");
    assert!(init.header("mcp-session-id").is_some());
    let initialized = rpc(
        &server,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(initialized.status, 202);
    let ping = rpc(
        &server,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    )
    .await;
    assert_eq!(ping.json()["result"], json!({}));
    // No initialize needed: a bare tools/list.
    let list = rpc(
        &server,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    )
    .await;
    let tools = list.json()["result"]["tools"].clone();
    let names: Vec<&str> = (tools.as_array().unwrap().iter())
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["list_models", "chat", "generate_image"]);
    for tool in tools.as_array().unwrap() {
        assert!(tool.get("outputSchema").is_none(), "{tool}");
        assert_eq!(tool["inputSchema"]["type"], "object");
    }
    let models = call(&server, "list_models", &json!({}), None).await;
    assert!(models.get("isError").is_none_or(|e| e == false));
    assert!(
        models["structuredContent"]["data"]
            .as_array()
            .unwrap()
            .len()
            > 3
    );
    server.assert_nothing_settled();
}

#[tokio::test]
async fn a_paid_tool_quotes_what_the_rest_route_quotes() {
    let server = Server::start(Config::default()).await;
    for (model, max_tokens) in [
        (PAID_MODEL, None),
        (PAID_MODEL, Some(77)),
        ("perplexity/sonar", None),
    ] {
        let mut arguments = chat_arguments(model, false);
        if let Some(max_tokens) = max_tokens {
            arguments["max_tokens"] = json!(max_tokens);
        }
        let rest = server
            .post_once(path(Endpoint::Chat), arguments.to_string(), None)
            .await
            .quote();
        let tool = payment_required(&call(&server, "chat", &arguments, None).await);
        assert_eq!(tool.accepts[0].amount, rest.accepts[0].amount, "{model}");
        assert_eq!(tool.accepts[0].scheme, "exact");
        assert_eq!(tool.resource.url, "mcp://tool/chat");
        assert_eq!(
            tool.error.as_deref(),
            Some("Payment required to access this tool")
        );
    }
    let image = json!({"model": IMAGE_MODEL, "prompt": "a cat", "n": 2});
    let rest = server
        .post_once("/v1/images/generations", image.to_string(), None)
        .await
        .quote();
    let tool = payment_required(&call(&server, "generate_image", &image, None).await);
    assert_eq!(tool.accepts[0].amount, rest.accepts[0].amount);
}

#[tokio::test]
async fn a_paid_chat_is_answered_and_settled_once_and_its_replay_refused() {
    let server = Server::start(Config::default()).await;
    let payer = Payer::dev(2);
    for stream in [false, true] {
        let arguments = chat_arguments(PAID_MODEL, stream);
        let quote = payment_required(&call(&server, "chat", &arguments, None).await);
        let payment = pay(&quote, &payer);
        let before = balance(&server, &payer);
        let paid = call(&server, "chat", &arguments, Some(&payment)).await;
        assert_eq!(paid["isError"], Value::Null, "{paid}");
        assert!(
            !paid["content"][0]["text"].as_str().unwrap().is_empty(),
            "{paid}"
        );
        let receipt = &paid["_meta"]["x402/payment-response"];
        assert_eq!(receipt["success"], true, "{paid}");
        assert_eq!(receipt["payer"], payer.address());
        let amount = quote.accepts[0].amount.units();
        assert_eq!(balance(&server, &payer), before - amount);
        let replayed = call(&server, "chat", &arguments, Some(&payment)).await;
        let refused = &replayed["structuredContent"];
        assert_eq!(refused["code"], "PAYMENT_REPLAY", "{replayed}");
        assert_eq!(balance(&server, &payer), before - amount);
    }
}

#[tokio::test]
async fn tampered_unfunded_and_failing_calls_get_their_codes_and_settle_nothing() {
    let server = Server::start(fault_config()).await;
    let arguments = chat_arguments(PAID_MODEL, false);
    let quote = payment_required(&call(&server, "chat", &arguments, None).await);
    // A tampered amount: no offer matches.
    let mut tampered = pay(&quote, &Payer::dev(3));
    tampered["accepted"]["amount"] = json!("1");
    let refused = call(&server, "chat", &arguments, Some(&tampered)).await;
    assert_eq!(
        refused["structuredContent"]["code"], "PAYMENT_INVALID",
        "{refused}"
    );
    // A payer the ledger never funded.
    let unfunded = Payer::from_hex_key(&"42".repeat(32)).unwrap();
    let refused = call(&server, "chat", &arguments, Some(&pay(&quote, &unfunded))).await;
    assert_eq!(
        refused["structuredContent"]["code"], "PAYMENT_UNFUNDED",
        "{refused}"
    );
    // The tool fails (the upstream refuses): an error result, nothing settled.
    let failing = chat_arguments("faulty/rate_limited", false);
    let quote = payment_required(&call(&server, "chat", &failing, None).await);
    let failed = call(
        &server,
        "chat",
        &failing,
        Some(&pay(&quote, &Payer::dev(3))),
    )
    .await;
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(failed.get("_meta").is_none());
    // A payment that is not an object.
    let refused = call(&server, "chat", &arguments, Some(&json!("eyJ9"))).await;
    assert_eq!(refused["structuredContent"]["code"], "PAYMENT_INVALID");
    server.assert_nothing_settled();
}

#[tokio::test]
async fn a_free_model_goes_through_the_free_tier_per_client() {
    let server = Server::start(Config {
        free_tier: FreeTierQuotas::new(2, 300).unwrap(),
        ..Config::default()
    })
    .await;
    let arguments = chat_arguments(FREE_MODEL, false);
    for _ in 0..2 {
        let answer = call(&server, "chat", &arguments, None).await;
        assert_eq!(answer["isError"], Value::Null, "{answer}");
    }
    let limited = call(&server, "chat", &arguments, None).await;
    assert_eq!(limited["isError"], true);
    assert_eq!(
        limited["structuredContent"]["code"],
        "FREE_TIER_RATE_LIMITED"
    );
    server.assert_nothing_settled();
}

#[tokio::test]
async fn five_concurrent_copies_of_one_meta_payment_settle_once() {
    let server = Arc::new(Server::start(Config::default()).await);
    let payer = Payer::dev(4);
    let arguments = chat_arguments(PAID_MODEL, false);
    let quote = payment_required(&call(&server, "chat", &arguments, None).await);
    let payment = pay(&quote, &payer);
    let before = balance(&server, &payer);
    let copies: Vec<_> = (0..5)
        .map(|_| {
            let (server, arguments, payment) = (server.clone(), arguments.clone(), payment.clone());
            tokio::spawn(async move { call(&server, "chat", &arguments, Some(&payment)).await })
        })
        .collect();
    let mut paid = 0;
    for copy in copies {
        let result = copy.await.unwrap();
        if result["_meta"]["x402/payment-response"]["success"] == true {
            paid += 1;
        } else {
            assert_eq!(
                result["structuredContent"]["code"], "PAYMENT_REPLAY",
                "{result}"
            );
        }
    }
    assert_eq!(paid, 1);
    assert_eq!(server.ledger.settlements(), 1);
    assert_eq!(
        balance(&server, &payer),
        before - quote.accepts[0].amount.units()
    );
}

#[tokio::test]
async fn a_paid_image_waits_for_its_job_and_settles_once() {
    let server = Server::start(Config {
        image_job: Duration::from_millis(300),
        ..Config::default()
    })
    .await;
    let payer = Payer::dev(5);
    let arguments = json!({"model": IMAGE_MODEL, "prompt": "a cat"});
    let quote = payment_required(&call(&server, "generate_image", &arguments, None).await);
    let paid = call(
        &server,
        "generate_image",
        &arguments,
        Some(&pay(&quote, &payer)),
    )
    .await;
    assert_eq!(
        paid["_meta"]["x402/payment-response"]["success"], true,
        "{paid}"
    );
    assert_eq!(paid["structuredContent"]["status"], "completed");
    assert!(
        paid["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("data:image/")
    );
    assert_eq!(server.ledger.settlements(), 1);
}

#[tokio::test]
async fn bad_input_is_a_json_rpc_or_tool_error_never_a_5xx() {
    let server = Server::start(Config::default()).await;
    let cases: Vec<(String, u16, Option<i64>)> = vec![
        ("{oops".into(), 400, Some(-32700)),
        ("[]".into(), 400, Some(-32600)),
        (r#"{"jsonrpc":"2.0","id":1,"method":"nope"}"#.into(), 200, Some(-32601)),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chat","arguments":[1]}}"#.into(), 200, Some(-32602)),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}}"#.into(), 200, None),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chat","arguments":{"model":7}}}"#.into(), 200, None),
        (format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"chat","arguments":{{"x":"{}"}}}}}}"#, "a".repeat(2 << 20)), 413, Some(-32600)),
    ];
    for (sent, status, code) in cases {
        let reply = server.post_once("/mcp", sent.clone(), None).await;
        let shown = &sent[..sent.len().min(80)];
        assert_eq!(reply.status, status, "{shown}: {}", reply.text());
        let answer = reply.json();
        match code {
            Some(code) => assert_eq!(answer["error"]["code"], code, "{shown}"),
            None => assert_eq!(answer["result"]["isError"], true, "{shown}: {answer}"),
        }
    }
    let funds = DevLedger::DEV_ACCOUNT_FUNDS;
    assert!(funds > 0);
    server.assert_nothing_settled();
}

/// The official MCP TypeScript client, paying with the official x402 client
/// scheme (`pay_mcp.mjs`): free listing, the PaymentRequired, a paid answer
/// with its settlement, and each documented refusal.
#[tokio::test]
async fn the_official_mcp_client_pays_with_the_official_x402_scheme() {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/mcp-x402");
    assert!(
        folder
            .join("node_modules/@modelcontextprotocol/sdk")
            .is_dir(),
        "the official clients are not installed; run `npm ci --prefix tests/interop/mcp-x402` \
         (or `bash .ci/run`)"
    );
    let server = Server::start(Config {
        free_tier: FreeTierQuotas::new(2, 300).unwrap(),
        ..fault_config()
    })
    .await;
    let payer = Payer::dev(6);
    let before = balance(&server, &payer);
    let run = tokio::process::Command::new("node")
        .arg("pay_mcp.mjs")
        .arg(server.url("/mcp"))
        .arg("6")
        .arg(PAID_MODEL)
        .arg(FREE_MODEL)
        .arg("faulty/rate_limited")
        .current_dir(&folder)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("node pay_mcp.mjs took over 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node pay_mcp.mjs failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("one JSON line expected: {stdout}"));
    assert_eq!(result["payer"], payer.address());
    let tools = result["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3);
    assert!(tools.iter().all(|tool| tool["hasOutputSchema"] == false));
    assert!(result["modelCount"].as_u64().unwrap() > 3);
    let unpaid = &result["unpaid"];
    assert_eq!(unpaid["isError"], true);
    assert_eq!(unpaid["required"]["resource"]["url"], "mcp://tool/chat");
    assert_eq!(unpaid["required"]["accepts"][0]["scheme"], "exact");
    let paid = &result["paid"];
    assert_eq!(paid["isError"], false, "{result}");
    assert_eq!(paid["text"], "echo: hello over mcp");
    assert_eq!(paid["paymentResponse"]["success"], true);
    assert_eq!(paid["paymentResponse"]["network"], "eip155:84532");
    assert_eq!(result["replayed"]["code"], "PAYMENT_REPLAY", "{result}");
    assert_eq!(result["tampered"]["code"], "PAYMENT_INVALID", "{result}");
    assert_eq!(result["unfunded"]["code"], "PAYMENT_UNFUNDED", "{result}");
    let failed = &result["toolError"];
    assert_eq!(failed["isError"], true);
    assert_eq!(failed["code"], "RATE_LIMITED", "{result}");
    assert_eq!(failed["paymentResponse"], Value::Null);
    let free: Vec<&Value> = result["free"].as_array().unwrap().iter().collect();
    assert_eq!(free[0]["isError"], false, "{result}");
    assert_eq!(free[1]["isError"], false);
    assert_eq!(free[2]["code"], "FREE_TIER_RATE_LIMITED");
    // One settlement: the paid chat.
    assert_eq!(server.ledger.settlements(), 1);
    let quoted: u128 = unpaid["required"]["accepts"][0]["amount"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(balance(&server, &payer), before - quoted);
}

/// walletgate's own client: a paid tool answered once under its policy
/// with its receipt, a free one unpaid, a quote over its cap never signed.
#[tokio::test]
async fn walletgate_s_client_pays_a_tool_once_under_its_policy() {
    use walletgate::client::pay::{ClientError, PaymentErrorKind, SpendPolicy, X402PaymentLayer};
    let server = Server::start(fault_config()).await;
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let payer = Payer::dev(7);
    let key: alloy_signer_local::PrivateKeySigner =
        walletgate::client::payer::DEV_KEYS[7].parse().unwrap();
    assert_eq!(key.address().to_checksum(None), payer.address());
    let policy = SpendPolicy::new().with_max_per_payment_usd("0.05").unwrap();
    let client = X402PaymentLayer::new(key.clone()).with_policy(policy);
    let url = server.url("/mcp");
    let before = balance(&server, &payer);

    let paid = client
        .call_tool(
            http.clone(),
            &url,
            "chat",
            chat_arguments(PAID_MODEL, false),
        )
        .await
        .unwrap();
    assert_eq!(paid.result["content"][0]["text"], "echo: hello");
    let receipt = paid.receipt.expect("a paid call has a receipt");
    let settlement = receipt.settlement().expect("settled");
    assert!(settlement.success);
    assert_eq!(balance(&server, &payer), before - receipt.amount().units());

    let free = client
        .call_tool(
            http.clone(),
            &url,
            "chat",
            chat_arguments(FREE_MODEL, false),
        )
        .await
        .unwrap();
    assert!(free.receipt.is_none());

    let failing = client
        .call_tool(
            http.clone(),
            &url,
            "chat",
            chat_arguments("faulty/rate_limited", false),
        )
        .await
        .unwrap();
    assert_eq!(failing.result["isError"], true);
    assert!(
        failing.receipt.unwrap().settlement().is_none(),
        "nothing settled"
    );

    // An unfunded wallet: refused with its code, after one signature.
    let unfunded: alloy_signer_local::PrivateKeySigner =
        format!("0x{}", "42".repeat(32)).parse().unwrap();
    let refused = X402PaymentLayer::new(unfunded)
        .call_tool(
            http.clone(),
            &url,
            "chat",
            chat_arguments(PAID_MODEL, false),
        )
        .await
        .unwrap_err();
    let ClientError::Payment(error) = refused else {
        panic!("a payment error: {refused}");
    };
    assert_eq!(
        error.code(),
        Some(walletgate::envelope::ErrorCode::PaymentUnfunded)
    );
    assert_eq!(error.attempts.signatures, 1);

    let capped = X402PaymentLayer::new(key).with_policy(
        SpendPolicy::new()
            .with_max_per_payment_usd("0.000001")
            .unwrap(),
    );
    let refused = capped
        .call_tool(http, &url, "chat", chat_arguments(PAID_MODEL, false))
        .await
        .unwrap_err();
    let ClientError::Payment(error) = refused else {
        panic!("a payment error: {refused}");
    };
    assert!(matches!(error.kind, PaymentErrorKind::Policy(_)), "{error}");
    assert_eq!(error.attempts.signatures, 0);
    assert_eq!(server.ledger.settlements(), 1);
}

/// Discovery for agents: each paid tool's PaymentRequired declares its
/// `bazaar` entry (type `mcp`, its `toolName`), and `/.well-known/x402`
/// lists the tools, from the same table as `tools/list`.
#[tokio::test]
async fn paid_tools_are_discoverable_in_the_bazaar_and_the_well_known_document() {
    let server = Server::start(Config::default()).await;
    let quote =
        payment_required(&call(&server, "chat", &chat_arguments(PAID_MODEL, false), None).await);
    let bazaar = &quote.extensions.as_ref().unwrap()["bazaar"];
    assert_eq!(quote.resource.url, "mcp://tool/chat");
    assert_eq!(bazaar["info"]["input"]["type"], "mcp");
    assert_eq!(bazaar["info"]["input"]["toolName"], "chat");
    assert_eq!(bazaar["info"]["input"]["inputSchema"]["type"], "object");
    let well_known = server.get("/.well-known/x402").await.json();
    let mcp = &well_known["mcp"];
    assert_eq!(mcp["endpoint"], "/mcp");
    let tools: Vec<(&str, &str, bool)> = (mcp["tools"].as_array().unwrap().iter())
        .map(|tool| {
            let name = tool["name"].as_str().unwrap();
            (
                name,
                tool["resource"].as_str().unwrap(),
                tool["paid"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tools,
        [
            ("list_models", "mcp://tool/list_models", false),
            ("chat", "mcp://tool/chat", true),
            ("generate_image", "mcp://tool/generate_image", true),
        ]
    );
}

//! Arbitrary JSON-RPC request bodies through the x402 MCP front
//! (`X402McpLayer`): `tools/call` of a priced tool (with or without a
//! `_meta` payment, verified by `LocalEvmFacilitator` on a dev ledger), of a
//! free tool, other methods, batches, bad JSON, bodies past the limit.
//!
//! Input: the body. Every input is answered 200 (a JSON-RPC answer: the
//! tool's, a tool error or a JSON-RPC error), 400 or 413 (a JSON-RPC error
//! with a code), never a 5xx; every answer but the tool's is JSON-RPC;
//! nothing panics, nothing waits.
#![no_main]

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tower_layer::Layer;
use tower_service::Service;
use walletgate::clock::FakeClock;
use walletgate::x402::facilitator::{DevLedger, LocalEvmFacilitator};
use walletgate::x402::server::mcp::X402Mcp;
use walletgate::x402::server::{PaymentOption, Price, PriceRefusal, X402Layer};
use walletgate_fuzz::ready;

const NOW: u64 = 1_750_000_000;
const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
/// Small, so the fuzzer reaches the limit often.
const LIMIT_BYTES: usize = 1024;

/// The tool server: a text result for the call's id (an error result when
/// its arguments say `fail`).
#[derive(Clone)]
struct Tools;

impl Service<Request<Full<Bytes>>> for Tools {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> Self::Future {
        let body = ready(request.into_body().collect()).unwrap().to_bytes();
        let message: Value = serde_json::from_slice(&body).unwrap_or_default();
        let fail = message["params"]["arguments"]["fail"] == true;
        let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
            "content": [{"type": "text", "text": "tool"}], "isError": fail}});
        let response = Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(answer.to_string())))
            .unwrap();
        std::future::ready(Ok(response))
    }
}

/// `paid` costs $0.002 before the fee, `broken` cannot be priced, the rest are free.
fn pricing(tool: &str, _arguments: &Value) -> Result<Price, PriceRefusal> {
    match tool {
        "paid" => Ok(Price::Usd("0.002".parse().unwrap())),
        "broken" => Err(PriceRefusal::missing("a price")),
        _ => Ok(Price::Free),
    }
}

fn service() -> &'static X402Mcp<Tools> {
    static SERVICE: OnceLock<X402Mcp<Tools>> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let clock = Arc::new(FakeClock::at_unix_secs(NOW));
        let facilitator = LocalEvmFacilitator::new(Arc::new(DevLedger::new()), clock.clone());
        X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_facilitator(facilitator)
            .with_clock(clock)
            .build_mcp(pricing)
            .unwrap()
            .with_max_body_bytes(LIMIT_BYTES)
            .layer(Tools)
    })
}

fuzz_target!(|data: &[u8]| {
    let request = Request::post("http://gw.test/mcp")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(data)))
        .unwrap();
    let response = ready(service().clone().call(request)).unwrap();
    let status = response.status().as_u16();
    let bytes = ready(response.into_body().collect()).unwrap().to_bytes();
    let answer: Value = serde_json::from_slice(&bytes).expect("every answer is JSON");
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    match status {
        200 => assert!(answer.get("result").is_some() || answer["error"]["code"].is_i64()),
        400 | 413 => assert!(answer["error"]["code"].is_i64(), "{answer}"),
        other => panic!("status {other}: {answer}"),
    }
    if data.len() > LIMIT_BYTES {
        assert_eq!(status, 413);
    }
});

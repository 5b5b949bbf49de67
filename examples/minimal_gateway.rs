//! A paid chat endpoint composed from the library alone.
//!
//! ```sh
//! cargo run --example minimal_gateway --features gateway,x402,axum
//! ```
//!
//! `POST /v1/chat/completions` passes, outer to inner: the body limit and the
//! one JSON parse ([`JsonBodyLayer`]), the model check ([`BodyCheck`]), which
//! also prices the request once ([`RequestPrice`]: `free/…` models free, the
//! rest 0.002 USD plus the flat fee), the per-IP free tier for what it priced
//! free ([`IsPricedFree`]), and x402 for the rest, settled in-process on the
//! development ledger. Every rejection is the library's, chat-style. The
//! answer echoes the last message.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Request};
use axum::middleware::{Next, from_fn};
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use tower::ServiceBuilder;
use walletgate::clock::SystemClock;
use walletgate::envelope::{DetailPathSegment, EnvelopeStyle};
use walletgate::free_tier::{FreeTierLimitLayer, IsPricedFree};
use walletgate::gateway::{BodyCheck, JsonBodyLayer, ParsedJson, RequestModel};
use walletgate::x402::{
    facilitator::{DevLedger, LocalEvmFacilitator},
    server::{PaymentOption, Price, RequestPrice, X402Layer},
    wire::UsdAmount,
};

/// What a paid model costs before the flat fee: 0.002 USD.
const PAID: Price = Price::Usd(UsdAmount::from_micros(2_000));

/// The price of `model`: `free/…` models are free.
fn price(model: &str) -> Price {
    if model.starts_with("free/") {
        Price::Free
    } else {
        PAID
    }
}

/// The gateway, its payments settled on `ledger` and paid to `pay_to`; quotes
/// name `public_url` (never the client's `Host`).
fn gateway(
    ledger: Arc<DevLedger>,
    pay_to: &str,
    public_url: &str,
) -> Result<Router, Box<dyn std::error::Error>> {
    let clock = Arc::new(SystemClock);
    // Charges the price `check_model` decided; a request it never saw is refused.
    let payment = X402Layer::builder()
        .with_payment_option(PaymentOption::base_sepolia_usdc(pay_to)?)
        .with_pricing(RequestPrice::pricing)
        .with_facilitator(LocalEvmFacilitator::new(ledger, clock.clone()))
        .with_clock(clock)
        .with_public_base_url(public_url)?
        .build()?;
    Ok(Router::new()
        .route("/v1/chat/completions", post(chat))
        .route_layer(
            ServiceBuilder::new()
                .layer(JsonBodyLayer::new(64 * 1024))
                .layer(from_fn(check_model))
                // Free is what `check_model` priced free: one decision for both layers.
                .layer(FreeTierLimitLayer::new(IsPricedFree))
                .layer(payment),
        ))
}

/// `model` is a non-empty string and `messages` an array; else
/// `INVALID_REQUEST_BODY`. Leaves the model and its price for the layers after it.
async fn check_model(mut request: Request, next: Next) -> Response {
    let checked = {
        let empty = serde_json::Map::new();
        let body = request.extensions().get::<ParsedJson>();
        let object = body.and_then(|ParsedJson(value)| value.as_object());
        let object = object.unwrap_or(&empty);
        let mut check = BodyCheck::default();
        let model = check.required_string(object, "model");
        let messages = [DetailPathSegment::from("messages")];
        check.array(object.get("messages"), &messages);
        check.finish(model)
    };
    match checked {
        Ok(model) => {
            let extensions = request.extensions_mut();
            extensions.insert(RequestPrice(price(&model)));
            extensions.insert(RequestModel::new(model));
            next.run(request).await
        }
        Err(error) => error
            .into_response(EnvelopeStyle::of_request(&request))
            .map(Body::from),
    }
}

async fn chat(Extension(ParsedJson(body)): Extension<ParsedJson>) -> Json<Value> {
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let text = last["content"].as_str().unwrap_or_default();
    Json(json!({"object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": format!("echo: {text}")}}]}))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8403").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = gateway(
        Arc::new(DevLedger::new()),
        DevLedger::DEV_ACCOUNTS[9],
        &base,
    )?;
    println!("minimal gateway on {base}");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    Ok(axum::serve(listener, service).await?)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;

    /// Runs the official `@x402/fetch` client against `base`; its one JSON line.
    async fn pay(base: &str, account: usize, model: &str, prompt: &str) -> Value {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/x402");
        assert!(
            folder.join("node_modules/@x402/fetch").is_dir(),
            "the official x402 client is not installed; run `npm ci --prefix tests/interop/x402`"
        );
        let mut command = tokio::process::Command::new("node");
        command
            .arg("pay_gateway.mjs")
            .arg(base)
            .arg(account.to_string());
        command
            .arg(model)
            .arg(prompt)
            .current_dir(&folder)
            .kill_on_drop(true);
        // A guard against a hung client, not a measurement.
        let output = tokio::time::timeout(Duration::from_secs(120), command.output())
            .await
            .expect("node pay_gateway.mjs finished")
            .expect("node pay_gateway.mjs started");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("one JSON line: {stdout}"))
    }

    #[tokio::test]
    async fn the_official_x402_fetch_client_pays_over_tcp_and_free_models_pass_free() {
        let ledger = Arc::new(DevLedger::new());
        let (payer, pay_to) = (DevLedger::DEV_ACCOUNTS[4], DevLedger::DEV_ACCOUNTS[9]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = gateway(ledger.clone(), pay_to, &base).unwrap();
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, service).await });
        let balance = |owner: &str| {
            ledger.balance_of(&DevLedger::base_sepolia_usdc(), owner.parse().unwrap())
        };

        let paid = pay(&base, 4, "openai/gpt-5-mini", "hello minimal").await;
        assert_eq!(paid["status"], 200, "{paid}");
        assert_eq!(paid["payer"], payer);
        assert_eq!(paid["answer"], "echo: hello minimal");
        assert_eq!(paid["settlement"]["success"], true, "{paid}");
        // 0.002 USD plus the 0.001 USD flat fee, in USDC units.
        assert_eq!(paid["quotedAmount"], "3000");
        assert_eq!(balance(payer), DevLedger::DEV_ACCOUNT_FUNDS - 3000);
        assert_eq!(balance(pay_to), DevLedger::DEV_ACCOUNT_FUNDS + 3000);

        let free = pay(&base, 4, "free/echo", "hello free").await;
        assert_eq!(free["status"], 200, "{free}");
        assert_eq!(free["answer"], "echo: hello free");
        assert!(
            free["quotedAmount"].is_null() && free["settlement"].is_null(),
            "{free}"
        );
        assert_eq!(ledger.settlements(), 1);
    }

    #[tokio::test]
    async fn body_rejections_are_the_librarys_envelopes() {
        use http_body_util::BodyExt;
        use tower::ServiceExt;

        let app = gateway(
            Arc::new(DevLedger::new()),
            DevLedger::DEV_ACCOUNTS[9],
            "http://127.0.0.1:8403",
        )
        .unwrap();
        for (body, code, path) in [
            ("{nope", "INVALID_JSON", Value::Null),
            (
                r#"{"messages": []}"#,
                "INVALID_REQUEST_BODY",
                json!(["model"]),
            ),
        ] {
            let request = Request::post("/v1/chat/completions")
                .body(Body::from(body))
                .unwrap();
            let response = app.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), 400);
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            let answer: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(answer["error"]["code"], code, "{answer}");
            assert_eq!(answer["details"][0]["path"], path, "{answer}");
        }
    }
}

//! CORS in a real browser: headless Chromium on a page from an allowed
//! origin reads a 402's quote; the same page from another origin is refused.

use crate::chromium::{page_listener, page_result, serve_page_on};
use crate::config::Config;
use crate::tests::Server;

/// The page's script: lists the models, asks a paid model for a quote, and
/// writes what it could read into `#out`.
fn script(gateway: &str) -> String {
    format!(
        r#"(async () => {{
  const out = {{}};
  try {{ out.models = (await fetch("{gateway}/v1/models")).status; }}
  catch (e) {{ out.models = "refused"; }}
  try {{
    const r = await fetch("{gateway}/v1/chat/completions", {{
      method: "POST",
      headers: {{ "content-type": "application/json" }},
      body: JSON.stringify({{ model: "anthropic/claude-sonnet-4.6",
        messages: [{{ role: "user", content: "hi" }}] }}),
    }});
    out.quote = r.status;
    out.paymentRequired = (r.headers.get("payment-required") || "").length > 0;
    out.requestId = r.headers.get("x-request-id");
  }} catch (e) {{ out.quote = "refused"; }}
  document.getElementById("out").textContent = JSON.stringify(out);
}})();"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_origin_reads_a_quote_and_a_foreign_one_is_refused() {
    let (allowed, allowed_origin) = page_listener().await;
    let (foreign, foreign_origin) = page_listener().await;
    let config =
        Config::from_vars(|name| (name == "GATEWAY_CORS_ORIGINS").then(|| allowed_origin.clone()))
            .unwrap();
    let server = Server::start(config).await;
    let gateway = server.url("");
    serve_page_on(allowed, script(&gateway));
    serve_page_on(foreign, script(&gateway));

    let seen: serde_json::Value =
        serde_json::from_str(&page_result(&format!("{allowed_origin}/")).await).unwrap();
    assert_eq!(seen["models"], 200, "{seen}");
    assert_eq!(seen["quote"], 402, "{seen}");
    assert_eq!(seen["paymentRequired"], true, "{seen}");
    // Exposed: the page can read the id the gateway gave its request.
    assert_eq!(seen["requestId"].as_str().map(str::len), Some(32), "{seen}");

    let seen: serde_json::Value =
        serde_json::from_str(&page_result(&format!("{foreign_origin}/")).await).unwrap();
    assert_eq!(seen["models"], "refused", "{seen}");
    assert_eq!(seen["quote"], "refused", "{seen}");
}

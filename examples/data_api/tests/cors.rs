//! CORS in a real browser: a page from an allowed origin calls a keyed route
//! with its API key (a preflighted request); another origin is refused.

use super::{API_KEY, START, start_configured};
use crate::chromium::{page_listener, page_result, serve_page_on};

fn script(api: &str) -> String {
    format!(
        r#"(async () => {{
  const out = {{}};
  try {{
    const r = await fetch("{api}/api/v2/auth/siwe/nonce", {{
      method: "POST", headers: {{ "x-api-key": "{API_KEY}" }} }});
    out.nonce = r.status;
  }} catch (e) {{ out.nonce = "refused"; }}
  try {{
    const r = await fetch("{api}/api/v2/auth/siwe/nonce", {{ method: "POST" }});
    out.withoutKey = r.status;
    out.wwwAuthenticate = r.headers.get("www-authenticate") !== null;
  }} catch (e) {{ out.withoutKey = "refused"; }}
  document.getElementById("out").textContent = JSON.stringify(out);
}})();"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_origin_calls_with_its_key_and_a_foreign_one_is_refused() {
    let (allowed, allowed_origin) = page_listener().await;
    let (foreign, foreign_origin) = page_listener().await;
    let origins = vec![allowed_origin.parse().unwrap()];
    let server = start_configured(START, |config| config.cors_origins = origins).await;
    serve_page_on(allowed, script(&server.base));
    serve_page_on(foreign, script(&server.base));

    let seen: serde_json::Value =
        serde_json::from_str(&page_result(&format!("{allowed_origin}/")).await).unwrap();
    assert_eq!(seen["nonce"], 200, "{seen}");
    assert_eq!(seen["withoutKey"], 401, "{seen}");

    let seen: serde_json::Value =
        serde_json::from_str(&page_result(&format!("{foreign_origin}/")).await).unwrap();
    assert_eq!(seen["nonce"], "refused", "{seen}");
}

//! `/` for a browser: the catalogue with each model's price as the 402
//! quotes it, links to the discovery documents, and a "try it" form that
//! sends one chat (a free model answers; a paid one is paid with the wallet
//! in the browser: switch to the offer's chain, sign the EIP-3009
//! authorization, resend, show the answer and the settlement).
//!
//! Only a request whose `Accept` names `text/html` and not
//! `application/json` gets the page: programs keep today's answer at `/`
//! (404). The page and its script are the server's own, under the shared
//! strict policy (`page.rs`); the table is rendered at start from the same
//! route table and quoting as `/.well-known/x402` (`discovery::price_list`).
//! The page is thin: prices, offers and settlement are the server's. It is
//! HTML for people, not an API route: the route table, `/openapi.json` and
//! `/.well-known/x402` do not list it.

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use crate::discovery::ListedModel;
use crate::page::{answer, escape, shared_routes};

const HTML: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/gateway.js");

/// `/` (the page, for a browser), its script and the shared files.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(models: &[ListedModel]) -> Router<S> {
    let html = page(models);
    Router::new()
        .route(
            "/",
            get(move |headers: HeaderMap| {
                let html = html.clone();
                async move { root(&headers, html) }
            }),
        )
        .route(
            "/console/gateway.js",
            get(|| async { answer("text/javascript; charset=utf-8", SCRIPT.to_owned()) }),
        )
        .merge(shared_routes())
}

/// The page for a browser; anyone else gets `/`'s answer from before the
/// page (404, empty).
fn root(headers: &HeaderMap, html: String) -> Response {
    if wants_html(headers) {
        answer("text/html; charset=utf-8", html).into_response()
    } else {
        StatusCode::NOT_FOUND.into_response()
    }
}

/// A browser's navigation: `Accept` names `text/html`, and a program asking
/// for JSON never gets the page.
fn wants_html(headers: &HeaderMap) -> bool {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
        .to_ascii_lowercase();
    accept.contains("text/html") && !accept.contains("application/json")
}

/// The HTML with the price table and the "try it" form's models.
fn page(models: &[ListedModel]) -> String {
    let rows: String = models.iter().map(row).collect();
    let options: String = (models.iter())
        .filter(|model| model.chat)
        .map(|model| {
            format!(
                "<option value=\"{id}\">{id} ({price})</option>\n",
                id = escape(model.id),
                price = escape(&quoted(model)),
            )
        })
        .collect();
    HTML.replace("{{rows}}", &rows)
        .replace("{{options}}", &options)
}

fn row(model: &ListedModel) -> String {
    format!(
        "<tr><th scope=\"row\"><code>{id}</code></th><td>{name}</td><td>{price}</td><td>{rates}</td><td><code>{endpoint}</code></td></tr>\n",
        id = escape(model.id),
        name = escape(model.name),
        price = escape(&quoted(model)),
        rates = escape(&rates(&model.rates)),
        endpoint = escape(model.endpoint),
    )
}

/// What the 402 asks for the example request, or "free".
fn quoted(model: &ListedModel) -> String {
    match &model.quoted {
        Some(price) => format!(
            "{} {}",
            price["amount"].as_str().unwrap_or_default(),
            price["currency"].as_str().unwrap_or_default()
        ),
        None => "free".to_owned(),
    }
}

/// The rates of `/.well-known/x402`'s `pricing` entry, in words.
fn rates(pricing: &Value) -> String {
    let text = |key: &str| pricing[key].as_str().map(str::to_owned);
    let fee = text("flatFeePerRequest")
        .map(|fee| format!(", plus {fee} per request"))
        .unwrap_or_default();
    if pricing["free"] == true {
        "free (limited per client IP)".to_owned()
    } else if let Some(per_request) = text("perRequest") {
        format!("{per_request} per request, all in")
    } else if let Some(per_image) = text("perImage") {
        format!("{per_image} per image{fee}")
    } else {
        format!(
            "{} per million input tokens, {} per million output tokens{fee}",
            text("inputPerMillionTokens").unwrap_or_default(),
            text("outputPerMillionTokens").unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use serde_json::json;

    use super::*;

    fn accept(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn only_a_browser_navigation_gets_the_page() {
        let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(wants_html(&accept(browser)));
        assert!(!wants_html(&accept("application/json")));
        assert!(!wants_html(&accept("application/json, text/html")));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn the_table_shows_text_escaped_and_prices_in_words() {
        let model = ListedModel {
            id: "a/<b>",
            name: "\"quoted\"",
            endpoint: "/v1/chat/completions",
            chat: true,
            quoted: Some(json!({"amount": "0.003", "currency": "USDC"})),
            rates: json!({"perRequest": "0.002"}),
        };
        let html = page(&[model]);
        assert!(html.contains("<code>a/&lt;b&gt;</code>"));
        assert!(html.contains(
            "<td>&quot;quoted&quot;</td><td>0.003 USDC</td><td>0.002 per request, all in</td>"
        ));
        assert!(html.contains("<option value=\"a/&lt;b&gt;\">a/&lt;b&gt; (0.003 USDC)</option>"));
        assert!(!html.contains("{{"));
        assert_eq!(html.matches("<script").count(), 1);
        assert_eq!(
            rates(
                &json!({"inputPerMillionTokens": "0.3", "outputPerMillionTokens": "2.5", "flatFeePerRequest": "0.001"})
            ),
            "0.3 per million input tokens, 2.5 per million output tokens, plus 0.001 per request"
        );
    }
}

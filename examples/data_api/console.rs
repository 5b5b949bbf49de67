//! `/console`: the data API's page for people. A developer signs in with a
//! browser wallet, creates, lists and revokes personal access tokens, and
//! reads what is left of the API key's quota.
//!
//! The server serves the page itself: one HTML document and its stylesheet
//! and script, embedded at build time (no build step, nothing from another
//! origin), under a `Content-Security-Policy` that allows only this origin's
//! script and style (no inline script). The page is thin: it calls the same
//! REST operations as the SDK; SIWE, tokens, scopes and the cross-site
//! refusal stay in the server. No key is embedded: the page asks for the API
//! key and keeps it in memory. The HTML is not an API operation, so the
//! OpenAPI description does not list it.

use axum::Router;
use axum::routing::get;

use crate::config::Config;
use crate::page::{answer, escape, shared_routes};

/// Where the page lives.
pub(crate) const PATH: &str = "/console";

const HTML: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");

/// The page's three files, public (no API key: the page asks for it).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(config: &Config) -> Router<S> {
    let html = page(config);
    Router::new()
        .route(
            PATH,
            get(move || async move { answer("text/html; charset=utf-8", html) }),
        )
        .route(
            "/console/console.js",
            get(|| async { answer("text/javascript; charset=utf-8", SCRIPT.to_owned()) }),
        )
        .merge(shared_routes())
}

/// The HTML with the server's SIWE settings in `data-` attributes, which
/// the script reads (the message it asks the wallet to sign names them).
fn page(config: &Config) -> String {
    HTML.replace("{{siwe-domain}}", &escape(&config.siwe_domain))
        .replace("{{siwe-uri}}", &escape(&config.siwe_uri))
        .replace("{{siwe-chain-id}}", &config.siwe_chain_id.to_string())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn config() -> Config {
        let address: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        Config::for_origin(address, "http://127.0.0.1:8080").unwrap()
    }

    #[test]
    fn the_page_names_the_servers_siwe_settings_and_embeds_no_script_or_key() {
        let mut config = config();
        config.siwe_domain = "a\"b<c>".to_owned();
        config.api_key = Some("secret-key-never-in-the-page".to_owned());
        let html = page(&config);
        assert!(html.contains("data-siwe-domain=\"a&quot;b&lt;c&gt;\""));
        assert!(html.contains("data-siwe-uri=\"http://127.0.0.1:8080\""));
        assert!(html.contains("data-siwe-chain-id=\"1\""));
        assert!(!html.contains("{{"));
        assert!(!html.contains("secret-key-never-in-the-page"));
        // Scripts only by URL, never inline; no handler attributes.
        assert_eq!(html.matches("<script").count(), 1);
        assert!(html.contains("<script type=\"module\" src=\"/console/console.js\">"));
        let handler_attribute = html.split(" on").skip(1).any(|rest| {
            let name_len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
            name_len > 0 && rest.as_bytes().get(name_len) == Some(&b'=')
        });
        assert!(!handler_attribute);
        assert!(!html.contains("style="));
    }

    #[test]
    fn the_page_says_what_it_is_without_javascript() {
        let html = page(&config());
        let noscript = &html[html.find("<noscript>").unwrap()..];
        assert!(noscript.contains("needs JavaScript"));
        assert!(html.contains("<h1>walletgate data API console</h1>"));
    }
}

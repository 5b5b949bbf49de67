//! The examples' pages for people (the data API's `/console`, the gateway's
//! `/` for a browser): the shared stylesheet and script module, and the
//! headers every page and its files are answered with. The server serves them itself, embedded at
//! build time: no build step, nothing from another origin.

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::get;
use http::{HeaderValue, header};

/// Only this origin's script, style, images and calls; no inline script or
/// style, no framing, forms posting only here.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The shared stylesheet: dark text on white (contrast well above WCAG AA),
/// a visible focus ring.
const STYLESHEET: &str = include_str!("console.css");

/// The module the pages' scripts import: the injected wallet (EIP-1193),
/// an answer's JSON.
const SHARED_MODULE: &str = include_str!("shared.js");

/// `body` as `content_type`, under the policy, never sniffed, never cached
/// (a page may show a secret once), sending no referrer.
pub(crate) fn answer(content_type: &'static str, body: String) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
}

/// The files every page loads: `/console/console.css`, `/console/shared.js`.
pub(crate) fn shared_routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/console/console.css",
            get(|| async { answer("text/css; charset=utf-8", STYLESHEET.to_owned()) }),
        )
        .route(
            "/console/shared.js",
            get(|| async { answer("text/javascript; charset=utf-8", SHARED_MODULE.to_owned()) }),
        )
}

/// Text safe in HTML content and inside a double-quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_no_inline_script_and_nothing_from_elsewhere() {
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-eval"));
        assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self';"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
    }

    #[test]
    fn escaped_text_closes_no_tag_or_attribute() {
        assert_eq!(escape("a\"b<c>&"), "a&quot;b&lt;c&gt;&amp;");
    }
}

//! `<PREFIX>_CORS_ORIGINS`: the browser origins allowed to call the server
//! (none by default, so browsers get no CORS headers and refuse cross-origin
//! reads).
//!
//! Preflights are answered by this layer, outside every gate (a preflight
//! carries no credentials, so a gate would refuse it). The request headers
//! are those a paying or signed-in client sends, the exposed ones those it
//! must read (the 402 quote, the receipt, the rate limit, the request id).
//! Credentials (cookies) are not allowed: browsers send keys and tokens as
//! headers.

use http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

const ALLOWED_HEADERS: &[&str] = &[
    "content-type",
    "payment-signature",
    "sign-in-with-x",
    "access-control-expose-headers",
    "x-api-key",
    "authorization",
];

const EXPOSED_HEADERS: &[&str] = &[
    "payment-required",
    "payment-response",
    "x-payment-required",
    "www-authenticate",
    "retry-after",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-source",
    "x-request-id",
];

/// The origins in `<prefix>_CORS_ORIGINS` (comma-separated
/// `scheme://host[:port]`), each checked; none: no CORS.
pub(crate) fn origins_from_vars(
    var: &impl Fn(&str) -> Option<String>,
    prefix: &str,
) -> Result<Vec<HeaderValue>, (String, String)> {
    let variable = format!("{prefix}_CORS_ORIGINS");
    let Some(list) = var(&variable) else {
        return Ok(Vec::new());
    };
    list.split(',')
        .map(str::trim)
        .filter(|origin| !origin.is_empty())
        .map(|origin| {
            let scheme_host = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            match scheme_host {
                Some(host) if !host.is_empty() && !host.contains(['/', '*', ' ']) => {
                    HeaderValue::from_str(origin).map_err(|error| error.to_string())
                }
                _ => Err(format!(
                    "{origin:?} is not an origin (scheme://host[:port])"
                )),
            }
            .map_err(|reason| (variable.clone(), reason))
        })
        .collect()
}

/// The layer for `origins`; `None` when there are none.
pub(crate) fn layer(origins: &[HeaderValue]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let names = |list: &[&'static str]| -> Vec<HeaderName> {
        list.iter()
            .map(|name| HeaderName::from_static(name))
            .collect()
    };
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins.iter().cloned()))
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers(names(ALLOWED_HEADERS))
            .expose_headers(names(EXPOSED_HEADERS))
            .max_age(std::time::Duration::from_secs(600)),
    )
}

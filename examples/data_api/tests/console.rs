//! `/console` and what it relies on: the page's headers, the cross-site
//! refusal, the key's quota, sign-out; then the page itself driven in
//! headless Chromium by `tests/interop/console/data_api.mjs`.

use std::time::Duration;

use super::{
    API_KEY, DEV_KEY_0, DEV_WALLET_0, START, Server, serve_logged, start, start_configured,
};
use crate::config::Config;
use crate::node::node_json;
use crate::page::CONTENT_SECURITY_POLICY;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::json;

impl Server {
    /// `GET path` with no credentials: status, headers and the body as text.
    async fn page(&self, path: &str) -> (StatusCode, http::HeaderMap, String) {
        let request = Request::get(format!("{}{path}", self.base));
        let response = self.send(request, Default::default()).await;
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }
}

#[tokio::test]
async fn the_console_is_served_without_a_key_under_a_strict_policy() {
    let server = start().await;
    for (path, content_type) in [
        ("/console", "text/html; charset=utf-8"),
        ("/console/console.css", "text/css; charset=utf-8"),
        ("/console/console.js", "text/javascript; charset=utf-8"),
        ("/console/shared.js", "text/javascript; charset=utf-8"),
    ] {
        let (status, headers, body) = server.page(path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(headers[header::CONTENT_TYPE], content_type, "{path}");
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(headers[header::CACHE_CONTROL], "no-store");
        assert!(!body.contains(API_KEY), "{path} embeds no key");
    }
    let (_, _, html) = server.page("/console").await;
    assert!(html.contains(&format!(
        "data-siwe-uri=\"{}\"",
        server.base.trim_end_matches('/')
    )));
}

#[tokio::test]
async fn a_cross_site_request_for_a_token_is_refused_in_the_envelope() {
    let server = start().await;
    let cookie = server.sign_in(DEV_KEY_0, DEV_WALLET_0).await;
    let create = json!({"label": "forged", "scopes": ["read:favorites"], "expiresInDays": 1});
    for headers in [
        [
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://evil.example"),
        ],
        [
            ("sec-fetch-site", "same-site"),
            ("origin", "http://evil.example"),
        ],
        [("content-type", "text/plain"), ("origin", "null")],
    ] {
        let mut all = vec![("cookie", cookie.as_str())];
        all.extend(headers);
        let refused = server
            .keyed(
                Method::POST,
                "/api/v2/auth/tokens",
                &all,
                Some(create.clone()),
            )
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{headers:?}");
        assert_eq!(refused.body["error"]["status"], 403);
        assert_eq!(refused.body["error"]["code"], 7);
        let message = refused.body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("cross-site request refused"),
            "{message}"
        );
    }
    // Sign-in and refresh, which set the cookies, refuse it too.
    let forged = [("sec-fetch-site", "cross-site")];
    for path in ["/api/v2/auth/siwe/verify", "/api/v2/auth/session/refresh"] {
        let refused = server
            .keyed(Method::POST, path, &forged, Some(json!({})))
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
    }
    // Nothing was created; the server's own page is served.
    let own_page = [
        ("cookie", cookie.as_str()),
        ("sec-fetch-site", "same-origin"),
        ("origin", server.base.as_str()),
    ];
    let listed = server
        .keyed(Method::GET, "/api/v2/auth/tokens", &own_page, None)
        .await;
    assert_eq!(listed.body, json!([]));
    let created = server
        .keyed(Method::POST, "/api/v2/auth/tokens", &own_page, Some(create))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
}

#[tokio::test]
async fn the_key_quota_counts_each_request_this_one_included() {
    let server = start_configured(START, |config| {
        config.key_per_minute = std::num::NonZeroU32::new(5).unwrap();
    })
    .await;
    let first = server
        .keyed(Method::GET, "/api/v2/key/quota", &[], None)
        .await;
    assert_eq!(
        first.body,
        json!({"keyId": "dev", "limit": 5, "used": 1, "remaining": 4, "windowSeconds": 60})
    );
    server
        .keyed(Method::POST, "/api/v2/auth/siwe/nonce", &[], None)
        .await;
    let third = server
        .keyed(Method::GET, "/api/v2/key/quota", &[], None)
        .await;
    assert_eq!(
        (&third.body["used"], &third.body["remaining"]),
        (&json!(3), &json!(2))
    );
    // One request refills every 12 s.
    server.clock.advance(Duration::from_secs(12));
    let later = server
        .keyed(Method::GET, "/api/v2/key/quota", &[], None)
        .await;
    assert_eq!(later.body["remaining"], 2);
}

#[tokio::test]
async fn signing_out_ends_the_session_and_keeps_the_tokens() {
    let server = start().await;
    let (cookie, pat, _) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let out = server
        .keyed(
            Method::DELETE,
            "/api/v2/auth/session",
            &[("cookie", &cookie)],
            None,
        )
        .await;
    assert_eq!(out.status, StatusCode::OK);
    assert_eq!(
        out.body,
        json!({"address": DEV_WALLET_0, "signedOut": true})
    );
    let cleared: Vec<&str> = out
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|value| value.to_str().unwrap())
        .collect();
    assert_eq!(cleared.len(), 2);
    assert!(cleared.iter().all(|value| value.contains("=; Path=/")
        && value.contains("SameSite=Strict")
        && value.contains("Max-Age=0")));
    let listed = server.list_tokens(&cookie).await;
    assert_eq!(listed.status, StatusCode::UNAUTHORIZED);
    assert_eq!(server.exchange(&pat).await.status, StatusCode::OK);
}

/// The page in headless Chromium with a scripted wallet (the public
/// development key #0): every step of `data_api.mjs`, then no secret in its
/// output or the access log.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_in_a_browser_signs_in_manages_a_token_and_shows_the_quota() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let origin = format!("http://{address}");
    let mut config = Config::for_origin(address, &origin).unwrap();
    config.api_key = Some(API_KEY.to_owned());
    let log_path = serve_logged(listener, &config, "console");
    // A second server whose key allows two requests a minute.
    let limited = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let limited_address = limited.local_addr().unwrap();
    let limited_origin = format!("http://{limited_address}");
    let mut limited_config = Config::for_origin(limited_address, &limited_origin).unwrap();
    limited_config.api_key = Some(API_KEY.to_owned());
    limited_config.key_per_minute = std::num::NonZeroU32::new(2).unwrap();
    let limited_log = serve_logged(limited, &limited_config, "console-quota");

    let seen = node_json(
        "console",
        "puppeteer-core",
        "data_api.mjs",
        &[],
        &[
            ("DATA_API_URL", origin.clone()),
            ("DATA_API_KEY", API_KEY.to_owned()),
            ("WALLET_KEY", format!("0x{DEV_KEY_0}")),
            ("SIWE_CHAIN_ID", config.siwe_chain_id.to_string()),
            ("QUOTA_URL", limited_origin),
            ("QUOTA_PER_MINUTE", "2".to_owned()),
        ],
        None,
        Duration::from_secs(120),
    )
    .await;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    let _ = std::fs::remove_file(&limited_log);

    assert_eq!(seen["pageStatus"], 200, "{seen}");
    let csp = seen["csp"].as_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(seen["axeSignedOut"], json!([]), "{seen}");
    assert_eq!(seen["axeSignedIn"], json!([]), "{seen}");

    // A refused signature: its message in words with its code; nothing changed.
    let refused = seen["refusedError"].as_str().unwrap();
    assert!(
        refused.starts_with("Wallet refused (EIP-1193 code 4001): User rejected the request."),
        "{refused}"
    );
    assert_eq!(seen["refusedShowsMessage"], true);
    assert_eq!(seen["refusedCookies"], 0);
    assert_eq!(seen["refusedTokensHidden"], true);
    let wrong = seen["wrongNetworkError"].as_str().unwrap();
    assert!(
        wrong.starts_with("Wrong network (EIP-1193 code 4902)"),
        "{wrong}"
    );
    assert_eq!(seen["wrongNetworkSigned"], false);
    assert_eq!(seen["wrongNetworkCookies"], 0);

    // Signed in: two HttpOnly, SameSite=Strict cookies; the quota shown.
    assert_eq!(
        seen["sessionState"],
        format!("Signed in as {}.", seen["signedInAs"].as_str().unwrap())
    );
    assert_eq!(
        seen["cookies"],
        json!([
            {"name": "access_token", "httpOnly": true, "sameSite": "Strict"},
            {"name": "refresh_token", "httpOnly": true, "sameSite": "Strict"}
        ]),
        "{seen}"
    );
    let quota = &seen["quotaAfterSignIn"];
    let used: u32 = quota["used"].as_str().unwrap().parse().unwrap();
    let remaining: u32 = quota["remaining"].as_str().unwrap().parse().unwrap();
    let limit = config.key_per_minute.get();
    assert_eq!(used + remaining, limit, "{quota}");
    assert_eq!(quota["limit"], format!("{limit} per 60 s"));

    // The token: shown once, its HTML label as text, copied, usable.
    assert_eq!(seen["tokenShown"], true);
    assert_eq!(seen["labelCells"], json!(["<img src=x onerror=alert(1)>"]));
    assert_eq!(seen["imagesInTable"], 0);
    assert_eq!(seen["alerts"], 0);
    assert_eq!(seen["violations"], json!([]));
    assert_eq!(seen["copyNotice"], "Copied the token to the clipboard.");
    assert_eq!(seen["clipboardIsToken"], true);
    assert_eq!(seen["exchangeStatus"], 200);
    assert_eq!(seen["favoritesStatus"], 200);
    assert!(seen["favoritesCount"].as_u64().unwrap() > 0, "{seen}");

    // The cross-site form post is refused in the envelope; nothing created.
    assert_eq!(seen["crossSiteStatus"], 403, "{seen}");
    assert_eq!(seen["crossSiteError"]["code"], 7);
    let message = seen["crossSiteError"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("cross-site request refused"),
        "{message}"
    );
    assert_eq!(
        seen["tokensAfterCrossSite"],
        json!(["<img src=x onerror=alert(1)>"])
    );

    // Revoked on the page: refused from then on; a reload forgets it all.
    assert!(
        seen["revokeNotice"]
            .as_str()
            .unwrap()
            .starts_with("Revoked the token")
    );
    assert_eq!(seen["signInShownAfterRevoke"], true);
    assert_eq!(seen["exchangeAfterRevoke"], 401);
    assert_eq!(
        seen["afterReload"],
        json!({"tokenInPage": false, "localStorage": 0, "sessionStorage": 0, "apiKeyField": "empty"})
    );
    // An expired session and a spent quota, in words with their codes.
    let expired = seen["expiredError"].as_str().unwrap();
    assert!(
        expired.starts_with("Session expired or missing: sign in again: ")
            && expired.ends_with("(HTTP 401, code 16)"),
        "{expired}"
    );
    assert_eq!(seen["signInShownAfterExpiry"], true);
    let spent = seen["quotaError"].as_str().unwrap();
    assert!(
        spent.starts_with("Quota exhausted: ") && spent.contains("(HTTP 429, code 8) Retry in "),
        "{spent}"
    );
    assert_eq!(seen["signOutNotice"], "Signed out.");
    assert_eq!(seen["cookiesAfterSignOut"], 0);
    assert_eq!(seen["alertsAtEnd"], 0);

    // No secret in what the script printed or the server logged.
    let printed = seen.to_string();
    for text in [&printed, &log] {
        assert!(!text.contains("wg_pat_"), "a PAT leaked");
        assert!(!text.contains("eyJ"), "a JWT leaked");
        assert!(!text.contains(API_KEY), "the API key leaked");
        assert!(!text.contains(DEV_KEY_0), "the wallet key leaked");
    }
    assert!(log.contains("/console"), "the access log saw the page");
}

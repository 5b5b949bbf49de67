//! The data API over real TCP on loopback: sign-in, token management, the
//! gates on every route, and the relationship handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use secp256k1::{Message, Secp256k1, SecretKey};
use serde_json::{Value, json};
use walletgate::clock::FakeClock;

use crate::build_with_clock;
use crate::config::Config;
use crate::wire::rfc3339;

/// The wallet client, the `walletgate` binary and its MCP bridge.
#[cfg(feature = "cli")]
mod cli;
/// `/console`, the page for people, and what it relies on.
mod console;
mod cors;
mod described;
/// Wallet JWTs of an external issuer, and instant revocation.
mod jwt;
/// `DATA_API_PREVIOUS_SIGNING_KEY_FILE`: a rotation across restarts.
mod key_rotation;
/// `/mcp`, here so it shares this harness.
mod mcp;
/// `DATA_API_METRICS_LISTEN`'s page.
#[cfg(feature = "metrics")]
mod metrics;
mod newcomer;
/// RFC 9728 metadata and the challenges that name it.
mod protected_resource;
#[cfg(feature = "redis")]
mod redis_quota;
mod replicas;
/// The OpenSea SDK against the data API.
mod sdk;
mod shutdown;

/// Public Hardhat/Anvil development keys #0 and #1 (never real funds).
const DEV_KEY_0: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const DEV_WALLET_0: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const DEV_KEY_1: &str = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const DEV_WALLET_1: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const API_KEY: &str = "test-api-key-0123456789";
const START: u64 = 1_800_000_000;

struct Server {
    base: String,
    clock: FakeClock,
    client: Client<HttpConnector, Full<Bytes>>,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

async fn start() -> Server {
    start_at(START).await
}

/// A server whose fake clock reads `unix_secs`.
async fn start_at(unix_secs: u64) -> Server {
    start_configured(unix_secs, |_| {}).await
}

/// A server whose fake clock reads `unix_secs`, with `configure` applied.
async fn start_configured(unix_secs: u64, configure: impl FnOnce(&mut Config)) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address: SocketAddr = listener.local_addr().unwrap();
    let origin = format!("http://{address}");
    let mut config = Config::for_origin(address, &origin).unwrap();
    config.api_key = Some(API_KEY.to_owned());
    configure(&mut config);
    let clock = FakeClock::at_unix_secs(unix_secs);
    let (router, dev) = build_with_clock(&config, Arc::new(clock.clone())).unwrap();
    assert!(dev.generated_api_key.is_none());
    tokio::spawn(async move { axum::serve(listener, router).await });
    Server {
        base: origin,
        clock,
        client: Client::builder(TokioExecutor::new()).build_http(),
    }
}

/// Serves `config` on `listener` on the system clock (a browser or an SDK
/// signs at its own time), its access log in a fresh file under `name`:
/// the file's path, for the caller to read and remove.
pub(crate) fn serve_logged(
    listener: tokio::net::TcpListener,
    config: &Config,
    name: &str,
) -> std::path::PathBuf {
    let port = listener.local_addr().unwrap().port();
    let (router, _) = build_with_clock(config, Arc::new(walletgate::clock::SystemClock)).unwrap();
    let log_path = std::env::temp_dir().join(format!(
        "walletgate-{name}-{}-{port}.log",
        std::process::id()
    ));
    let router = crate::access_log::AccessLog::to_file(&log_path)
        .unwrap()
        .around(router);
    tokio::spawn(async move { axum::serve(listener, router).await });
    log_path
}

impl Server {
    async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let body = body.map_or_else(Bytes::new, |body| Bytes::from(body.to_string()));
        let response = self.send(request, body).await;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    /// Sends `request` with `body`, waiting at most 10 s for the head.
    async fn send(
        &self,
        request: http::request::Builder,
        body: Bytes,
    ) -> http::Response<hyper::body::Incoming> {
        tokio::time::timeout(
            Duration::from_secs(10),
            self.client.request(request.body(Full::new(body)).unwrap()),
        )
        .await
        .expect("server answers within 10 s")
        .unwrap()
    }

    async fn keyed(
        &self,
        method: Method,
        path: &str,
        extra: &[(&str, &str)],
        body: Option<Value>,
    ) -> Reply {
        let mut headers = vec![("x-api-key", API_KEY)];
        headers.extend_from_slice(extra);
        self.call(method, path, &headers, body).await
    }

    /// A keyed request with no body whose only other header is `authorization`.
    async fn with_bearer(&self, method: Method, path: &str, authorization: &str) -> Reply {
        self.keyed(method, path, &[("authorization", authorization)], None)
            .await
    }

    /// SIWE sign-in as the SDK does it; the session's cookie header.
    async fn sign_in(&self, key: &str, wallet: &str) -> String {
        let nonce = self
            .keyed(Method::POST, "/api/v2/auth/siwe/nonce", &[], None)
            .await;
        assert_eq!(nonce.status, StatusCode::OK);
        let fields = siwe_fields(
            &self.base,
            wallet,
            nonce.body["nonce"].as_str().unwrap(),
            self.clock.now_secs(),
        );
        let signature = sign(key, &siwe_text(&fields));
        let verified = self
            .keyed(
                Method::POST,
                "/api/v2/auth/siwe/verify",
                &[],
                Some(json!({"message": fields, "signature": signature, "chainArch": "EVM"})),
            )
            .await;
        assert_eq!(verified.status, StatusCode::OK, "{}", verified.body);
        session_cookie(&verified.headers)
    }

    /// Sign-in, PAT and exchange; (cookie, PAT, JWT).
    async fn wallet_jwt(
        &self,
        key: &str,
        wallet: &str,
        scopes: &[&str],
    ) -> (String, String, String) {
        let cookie = self.sign_in(key, wallet).await;
        let created = self
            .keyed(
                Method::POST,
                "/api/v2/auth/tokens",
                &[("cookie", &cookie)],
                Some(json!({"label": "test", "scopes": scopes, "expiresInDays": 1})),
            )
            .await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
        let pat = created.body["token"].as_str().unwrap().to_owned();
        let jwt = self.exchange(&pat).await;
        assert_eq!(jwt.status, StatusCode::OK, "{}", jwt.body);
        (
            cookie,
            pat,
            jwt.body["accessToken"].as_str().unwrap().to_owned(),
        )
    }

    /// `GET /api/v2/auth/tokens` with the session `cookie`.
    async fn list_tokens(&self, cookie: &str) -> Reply {
        self.keyed(
            Method::GET,
            "/api/v2/auth/tokens",
            &[("cookie", cookie)],
            None,
        )
        .await
    }

    async fn exchange(&self, pat: &str) -> Reply {
        self.keyed(
            Method::POST,
            "/api/v2/auth/tokens/exchange",
            &[],
            Some(json!({"subjectToken": pat, "subjectTokenType": "ACCESS_TOKEN"})),
        )
        .await
    }
}

trait NowSecs {
    fn now_secs(&self) -> u64;
}

impl NowSecs for FakeClock {
    fn now_secs(&self) -> u64 {
        walletgate::clock::Clock::now_unix_secs(self)
    }
}

fn siwe_fields(origin: &str, wallet: &str, nonce: &str, now: u64) -> Value {
    let domain = origin.trim_start_matches("http://");
    json!({
        "domain": domain, "address": wallet,
        "statement": "Sign in to the walletgate data API.",
        "uri": origin, "version": "1", "chainId": "1", "nonce": nonce,
        "issuedAt": rfc3339(now), "accountType": "Ethereum"
    })
}

fn siwe_text(fields: &Value) -> String {
    let text = |key: &str| fields[key].as_str().unwrap().to_owned();
    format!(
        "{} wants you to sign in with your Ethereum account:\n{}\n\n{}\n\nURI: {}\nVersion: 1\nChain ID: {}\nNonce: {}\nIssued At: {}",
        text("domain"),
        text("address"),
        text("statement"),
        text("uri"),
        text("chainId"),
        text("nonce"),
        text("issuedAt")
    )
}

/// EIP-191 `personal_sign`, `0x` + 130 hex digits, v = 27/28.
fn sign(key_hex: &str, text: &str) -> String {
    let key_bytes: [u8; 32] = alloy_primitives::hex::decode_to_array(key_hex).unwrap();
    let key = SecretKey::from_byte_array(key_bytes).unwrap();
    let digest = alloy_primitives::eip191_hash_message(text);
    let signature =
        Secp256k1::signing_only().sign_ecdsa_recoverable(Message::from_digest(digest.0), &key);
    let (recovery_id, rs) = signature.serialize_compact();
    let mut bytes = rs.to_vec();
    bytes.push(u8::try_from(i32::from(recovery_id)).unwrap() + 27);
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

fn session_cookie(headers: &HeaderMap) -> String {
    let cookies: Vec<String> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect();
    assert!(
        cookies
            .iter()
            .all(|cookie| cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"))
    );
    cookies
        .iter()
        .map(|cookie| cookie.split(';').next().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("; ")
}

fn favorites_path(wallet: &str) -> String {
    format!("/api/v2/account/{wallet}/favorites")
}

fn bearer(jwt: &str) -> String {
    format!("Bearer {jwt}")
}

#[test]
fn redis_without_a_shared_signing_key_is_refused() {
    let address: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    let mut config = Config::for_origin(address, "http://127.0.0.1:8080").unwrap();
    assert!(config.check_replicas().is_ok());
    config.redis = Some(crate::redis_settings::RedisSettings::new(
        "redis://127.0.0.1:6379",
        "walletgate",
    ));
    let refused = config.check_replicas().unwrap_err();
    assert!(refused.contains("DATA_API_SIGNING_KEY_FILE"), "{refused}");
    config.signing_key_file = Some("/run/secrets/data-api-signing-key".into());
    assert!(config.check_replicas().is_ok());
}

#[tokio::test]
async fn sign_in_mints_a_jwt_that_reads_favorites() {
    let server = start().await;
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let auth = bearer(&jwt);
    let page = server
        .keyed(
            Method::GET,
            &format!("{}?limit=2", favorites_path(DEV_WALLET_0)),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(page.body["nfts"].as_array().unwrap().len(), 2);
    let next = page.body["next"].as_str().unwrap();
    let second = server
        .keyed(
            Method::GET,
            &format!(
                "{}?limit=2&after={next}",
                favorites_path(&DEV_WALLET_0.to_lowercase())
            ),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(second.status, StatusCode::OK);
    assert_ne!(
        second.body["nfts"][0]["identifier"],
        page.body["nfts"][0]["identifier"]
    );
}

#[tokio::test]
async fn every_route_but_jwks_needs_the_api_key() {
    let server = start().await;
    for (method, path) in [
        (Method::POST, "/api/v2/auth/siwe/nonce"),
        (Method::POST, "/api/v2/auth/tokens/exchange"),
        (Method::GET, "/api/v2/auth/tokens"),
        (Method::GET, "/api/v2/accounts/agent-relationships"),
        (Method::GET, &favorites_path(DEV_WALLET_0)),
        (
            Method::GET,
            &format!("/api/v2/accounts/{DEV_WALLET_0}/agent-relationships"),
        ),
    ] {
        let reply = server.call(method.clone(), path, &[], None).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{method} {path}");
        assert_eq!(reply.body["error"]["status"], 401);
        let wrong = server
            .call(method.clone(), path, &[("x-api-key", "wrong")], None)
            .await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
    let jwks = server
        .call(Method::GET, "/.well-known/jwks.json", &[], None)
        .await;
    assert_eq!(jwks.status, StatusCode::OK);
    assert_eq!(jwks.body["keys"][0]["crv"], "Ed25519");
}

#[tokio::test]
async fn wallet_scoped_routes_need_both_headers() {
    let server = start().await;
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let no_jwt = server
        .keyed(Method::GET, &favorites_path(DEV_WALLET_0), &[], None)
        .await;
    assert_eq!(no_jwt.status, StatusCode::UNAUTHORIZED);
    assert!(
        no_jwt.headers[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .contains("invalid_token")
    );
    let auth = bearer(&jwt);
    let no_key = server
        .call(
            Method::GET,
            &favorites_path(DEV_WALLET_0),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(no_key.status, StatusCode::UNAUTHORIZED);
}

/// Another method on a wallet path: the key gate, then the JWT (401
/// without one, as on the path's own methods), then 405 whatever the JWT's
/// scopes; every answer names the path's methods in `Allow`. Checked header
/// by header and body, since where the gates sit in the route decides it.
#[tokio::test]
async fn other_methods_on_a_wallet_path() {
    let server = start().await;
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:wallets"])
        .await;
    let auth = bearer(&jwt);
    let json_401 = |challenge: String, message: &str| {
        let body = json!({"error": {"code": 16, "message": message, "status": 401}});
        let headers = vec![
            ("content-type", "application/json".to_owned()),
            ("cache-control", "no-store".to_owned()),
            ("www-authenticate", challenge),
            ("content-length", body.to_string().len().to_string()),
        ];
        (StatusCode::UNAUTHORIZED, headers, body)
    };
    let no_key = json_401(
        "ApiKey header=\"X-API-KEY\"".to_owned(),
        "Missing X-API-KEY header",
    );
    let no_jwt = json_401(
        format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
            server.base
        ),
        "Missing bearer token: send Authorization: Bearer <wallet JWT>",
    );
    let not_allowed = (
        StatusCode::METHOD_NOT_ALLOWED,
        vec![("content-length", "0".to_owned())],
        Value::Null,
    );
    for (method, path, allow) in [
        (Method::POST, favorites_path(DEV_WALLET_0), "GET,HEAD"),
        (
            Method::PATCH,
            "/api/v2/accounts/agent".to_owned(),
            "PUT,DELETE",
        ),
    ] {
        for (credentials, expected) in [
            (vec![], &no_key),
            (vec![("x-api-key", API_KEY)], &no_jwt),
            (
                vec![("x-api-key", API_KEY), ("authorization", auth.as_str())],
                &not_allowed,
            ),
        ] {
            let reply = server.call(method.clone(), &path, &credentials, None).await;
            let headers: Vec<(&str, String)> = reply
                .headers
                .iter()
                .filter(|(name, _)| !["date", "x-request-id", "allow"].contains(&name.as_str()))
                .map(|(name, value)| (name.as_str(), value.to_str().unwrap().to_owned()))
                .collect();
            let (status, expected_headers, body) = expected;
            let label = format!("{method} {path} with {} credentials", credentials.len());
            assert_eq!(reply.status, *status, "{label}");
            assert_eq!(&headers, expected_headers, "{label}");
            assert_eq!(reply.headers[header::ALLOW], allow, "{label}");
            assert_eq!(reply.body, *body, "{label}");
        }
    }
}

#[tokio::test]
async fn scope_wallet_and_limit_rules() {
    let server = start().await;
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:wallets"])
        .await;
    let auth = bearer(&jwt);
    let missing = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &auth)
        .await;
    assert_eq!(missing.status, StatusCode::FORBIDDEN);
    assert!(
        missing.headers[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .contains("scope=\"read:favorites\"")
    );

    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let auth = bearer(&jwt);
    let other = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_1), &auth)
        .await;
    assert_eq!(other.status, StatusCode::FORBIDDEN);
    for limit in ["0", "101", "-1", "ten"] {
        let bad = server
            .keyed(
                Method::GET,
                &format!("{}?limit={limit}", favorites_path(DEV_WALLET_0)),
                &[("authorization", &auth)],
                None,
            )
            .await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST, "limit={limit}");
        assert!(
            bad.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("between 1 and 100")
        );
    }
    let bad_cursor = server
        .keyed(
            Method::GET,
            &format!("{}?after=nope", favorites_path(DEV_WALLET_0)),
            &[("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(bad_cursor.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_jwt_never_manages_tokens() {
    let server = start().await;
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let auth = bearer(&jwt);
    let listed = server
        .with_bearer(Method::GET, "/api/v2/auth/tokens", &auth)
        .await;
    assert_eq!(listed.status, StatusCode::UNAUTHORIZED);
    assert!(
        listed.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bearer JWT cannot manage tokens")
    );
}

#[tokio::test]
async fn a_pat_is_refused_as_a_bearer() {
    let server = start().await;
    let (_, pat, _) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let auth = bearer(&pat);
    let reply = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &auth)
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let text = reply.body.to_string();
    assert!(text.contains("exchange"), "{text}");
    assert!(!text.contains(&pat));
}

#[tokio::test]
async fn listing_rotating_and_revoking() {
    let server = start().await;
    let (cookie, pat, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let listed = server.list_tokens(&cookie).await;
    assert_eq!(listed.status, StatusCode::OK);
    let id = listed.body[0]["id"].as_str().unwrap().to_owned();
    assert!(
        !listed.body.to_string().contains(&pat),
        "a listing never shows the secret"
    );

    let rotated = server
        .keyed(
            Method::POST,
            &format!("/api/v2/auth/tokens/{id}/rotate"),
            &[("cookie", &cookie)],
            None,
        )
        .await;
    assert_eq!(rotated.status, StatusCode::CREATED);
    let new_id = rotated.body["id"].as_str().unwrap().to_owned();
    let own_auth = bearer(&jwt);
    let before_reuse = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &own_auth)
        .await;
    assert_eq!(
        before_reuse.status,
        StatusCode::OK,
        "rotation alone leaves the old PAT's JWT to expire"
    );
    assert_eq!(server.exchange(&pat).await.status, StatusCode::UNAUTHORIZED);
    // Reusing the rotated PAT revoked its family, JWTs included.
    let after_reuse = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &own_auth)
        .await;
    assert_eq!(after_reuse.status, StatusCode::UNAUTHORIZED);
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;

    // A bearer of another wallet cannot ride along on the revocation.
    let (_, _, other_jwt) = server
        .wallet_jwt(DEV_KEY_1, DEV_WALLET_1, &["read:favorites"])
        .await;
    let other_auth = bearer(&other_jwt);
    let mismatched = server
        .keyed(
            Method::DELETE,
            &format!("/api/v2/auth/tokens/{new_id}"),
            &[("cookie", &cookie), ("authorization", &other_auth)],
            None,
        )
        .await;
    assert_eq!(mismatched.status, StatusCode::FORBIDDEN);

    let own_auth = bearer(&jwt);
    let revoked = server
        .keyed(
            Method::DELETE,
            &format!("/api/v2/auth/tokens/{new_id}"),
            &[("cookie", &cookie), ("authorization", &own_auth)],
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    let after = server.list_tokens(&cookie).await;
    assert_eq!(
        after.status,
        StatusCode::UNAUTHORIZED,
        "revocation signs the wallet out"
    );
}

#[tokio::test]
async fn session_refresh_rotates_cookies() {
    let server = start().await;
    let cookie = server.sign_in(DEV_KEY_0, DEV_WALLET_0).await;
    let refreshed = server
        .keyed(
            Method::POST,
            "/api/v2/auth/session/refresh",
            &[("cookie", &cookie)],
            None,
        )
        .await;
    assert_eq!(refreshed.status, StatusCode::OK);
    let new_cookie = session_cookie(&refreshed.headers);
    assert_ne!(new_cookie, cookie);
    let old = server.list_tokens(&cookie).await;
    assert_eq!(old.status, StatusCode::UNAUTHORIZED);
    let new = server.list_tokens(&new_cookie).await;
    assert_eq!(new.status, StatusCode::OK);
}

#[tokio::test]
async fn siwe_nonce_is_single_use() {
    let server = start().await;
    let nonce = server
        .keyed(Method::POST, "/api/v2/auth/siwe/nonce", &[], None)
        .await;
    let fields = siwe_fields(
        &server.base,
        DEV_WALLET_0,
        nonce.body["nonce"].as_str().unwrap(),
        START,
    );
    let body = json!({"message": fields, "signature": sign(DEV_KEY_0, &siwe_text(&fields))});
    let first = server
        .keyed(
            Method::POST,
            "/api/v2/auth/siwe/verify",
            &[],
            Some(body.clone()),
        )
        .await;
    assert_eq!(first.status, StatusCode::OK);
    let again = server
        .keyed(Method::POST, "/api/v2/auth/siwe/verify", &[], Some(body))
        .await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
    assert!(again.headers.get(header::SET_COOKIE).is_none());
}

#[tokio::test]
async fn siwe_signed_by_another_key_is_refused() {
    let server = start().await;
    let nonce = server
        .keyed(Method::POST, "/api/v2/auth/siwe/nonce", &[], None)
        .await;
    let fields = siwe_fields(
        &server.base,
        DEV_WALLET_0,
        nonce.body["nonce"].as_str().unwrap(),
        START,
    );
    let body = json!({"message": fields, "signature": sign(DEV_KEY_1, &siwe_text(&fields))});
    let reply = server
        .keyed(Method::POST, "/api/v2/auth/siwe/verify", &[], Some(body))
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(
        !reply.body.to_string().contains("0x"),
        "no signature or address echoed: {}",
        reply.body
    );
}

#[tokio::test]
async fn expired_jwt_is_refused_then_reminted() {
    let server = start().await;
    let (_, pat, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    server.clock.advance(Duration::from_secs(15 * 60 + 31));
    let auth = bearer(&jwt);
    let expired = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &auth)
        .await;
    assert_eq!(expired.status, StatusCode::UNAUTHORIZED);
    let fresh = server.exchange(&pat).await;
    let auth = bearer(fresh.body["accessToken"].as_str().unwrap());
    let ok = server
        .with_bearer(Method::GET, &favorites_path(DEV_WALLET_0), &auth)
        .await;
    assert_eq!(ok.status, StatusCode::OK);
}

#[tokio::test]
async fn relationship_handshake_through_every_state() {
    let server = start().await;
    let (_, _, owner_jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:wallets", "write:wallets"])
        .await;
    let (_, _, agent_jwt) = server
        .wallet_jwt(DEV_KEY_1, DEV_WALLET_1, &["read:wallets", "write:wallets"])
        .await;
    let (owner, agent) = (bearer(&owner_jwt), bearer(&agent_jwt));
    let relationships = "/api/v2/accounts/agent-relationships";
    let public = format!("/api/v2/accounts/{DEV_WALLET_1}/agent-relationships");
    let as_owner = |role: &str| json!({"counterparty_address": DEV_WALLET_1, "caller_role": role});
    let as_agent = json!({"counterparty_address": DEV_WALLET_0, "caller_role": "AGENT"});

    // Proposing to an undeclared agent is refused.
    let refused = server
        .keyed(
            Method::POST,
            relationships,
            &[("authorization", &owner)],
            Some(as_owner("OWNER")),
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);

    let declared = server
        .with_bearer(Method::PUT, "/api/v2/accounts/agent", &agent)
        .await;
    assert_eq!(declared.body, json!({"is_agent": true, "changed": true}));

    let proposed = server
        .keyed(
            Method::POST,
            relationships,
            &[("authorization", &owner)],
            Some(as_owner("OWNER")),
        )
        .await;
    assert_eq!(proposed.status, StatusCode::OK, "{}", proposed.body);
    assert_eq!(proposed.body["created"], true);
    assert_eq!(proposed.body["relation"]["status"], "PENDING");
    assert_eq!(
        proposed.body["relation"]["awaiting_confirmation_from"],
        DEV_WALLET_1
    );

    let before = server.keyed(Method::GET, &public, &[], None).await;
    assert_eq!(
        before.body["relationships"],
        json!([]),
        "pending is not public"
    );
    let own = server.with_bearer(Method::GET, relationships, &owner).await;
    assert_eq!(own.body["relationships"].as_array().unwrap().len(), 1);

    let self_confirm = server
        .keyed(
            Method::POST,
            &format!("{relationships}/confirm"),
            &[("authorization", &owner)],
            Some(as_owner("OWNER")),
        )
        .await;
    assert_eq!(self_confirm.status, StatusCode::NOT_FOUND);

    let confirmed = server
        .keyed(
            Method::POST,
            &format!("{relationships}/confirm"),
            &[("authorization", &agent)],
            Some(as_agent),
        )
        .await;
    assert_eq!(confirmed.status, StatusCode::OK);
    assert_eq!(confirmed.body["relation"]["status"], "CONFIRMED");
    let after = server.keyed(Method::GET, &public, &[], None).await;
    assert_eq!(after.body["relationships"].as_array().unwrap().len(), 1);

    let removed = server
        .with_bearer(
            Method::DELETE,
            &format!("{relationships}?caller_role=OWNER&counterparty_address={DEV_WALLET_1}"),
            &owner,
        )
        .await;
    assert_eq!(removed.body, json!({"removed": true}));
    let gone = server.keyed(Method::GET, &public, &[], None).await;
    assert_eq!(gone.body["relationships"], json!([]));
}

#[tokio::test]
async fn reading_relationships_needs_read_wallets_and_writing_needs_write_wallets() {
    let server = start().await;
    let (_, _, read_only) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:wallets"])
        .await;
    let auth = bearer(&read_only);
    let read = server
        .with_bearer(Method::GET, "/api/v2/accounts/agent-relationships", &auth)
        .await;
    assert_eq!(read.status, StatusCode::OK);
    let write = server
        .with_bearer(Method::PUT, "/api/v2/accounts/agent", &auth)
        .await;
    assert_eq!(write.status, StatusCode::FORBIDDEN);
    assert!(
        write.headers[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .contains("write:wallets")
    );
}

#[tokio::test]
async fn api_key_quota_answers_429_with_retry_after() {
    let server = start_configured(START, |config| {
        config.key_per_minute = std::num::NonZeroU32::new(2).unwrap();
    })
    .await;
    let path = format!("/api/v2/accounts/{DEV_WALLET_0}/agent-relationships");
    for _ in 0..2 {
        assert_eq!(
            server.keyed(Method::GET, &path, &[], None).await.status,
            StatusCode::OK
        );
    }
    let limited = server.keyed(Method::GET, &path, &[], None).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    // Two a minute: the next cell arrives 30 s later.
    assert_eq!(limited.headers[header::RETRY_AFTER], "30");
    assert_eq!(limited.body["error"]["status"], 429);
    server.clock.advance(Duration::from_secs(30));
    assert_eq!(
        server.keyed(Method::GET, &path, &[], None).await.status,
        StatusCode::OK
    );
}

#[test]
fn the_origin_is_the_bound_address_unless_configured() {
    let bound: std::net::SocketAddr = "127.0.0.1:41234".parse().unwrap();
    let listen_on_zero = |name: &str| (name == "DATA_API_LISTEN").then(|| "127.0.0.1:0".to_owned());
    let config = Config::from_lookup_bound(listen_on_zero, Some(bound)).unwrap();
    assert_eq!(config.origin, "http://127.0.0.1:41234");
    assert_eq!(config.siwe_domain, "127.0.0.1:41234");
    assert_eq!(config.siwe_uri, "http://127.0.0.1:41234");

    let configured = |name: &str| match name {
        "DATA_API_LISTEN" => Some("0.0.0.0:0".to_owned()),
        "DATA_API_ORIGIN" => Some("https://data.example".to_owned()),
        _ => None,
    };
    let config = Config::from_lookup_bound(configured, Some(bound)).unwrap();
    assert_eq!(config.origin, "https://data.example");
    assert_eq!(config.siwe_domain, "data.example");
}

#[tokio::test]
async fn probes_need_no_credentials_and_readiness_fails_while_draining() {
    let draining = crate::shutdown::Draining::default();
    let server = start_configured(START, |config| {
        config.draining = draining.clone();
    })
    .await;
    let probe = |path: &'static str| {
        let request = http::Request::builder().uri(format!("{}{path}", server.base));
        async { server.send(request, Bytes::new()).await.status() }
    };
    assert_eq!(probe("/healthz").await, StatusCode::OK);
    assert_eq!(probe("/readyz").await, StatusCode::OK);
    draining.start();
    assert_eq!(probe("/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(probe("/healthz").await, StatusCode::OK);
}

#[test]
fn help_and_version_are_answered_and_list_every_variable() {
    use crate::cli::{Command, command};
    assert_eq!(command(&["--help".to_owned()]), Command::Help);
    assert_eq!(command(&["--version".to_owned()]), Command::Version);
    let help = crate::help();
    let read = crate::cli::variables_read(include_str!("config.rs"), "DATA_API_");
    assert!(read.len() > 15, "{read:?}");
    for variable in read {
        assert!(
            help.contains(&variable),
            "--help misses {variable}:\n{help}"
        );
    }
    assert!(
        help.contains("DATA_API_LISTEN\n      default: 127.0.0.1:8080"),
        "{help}"
    );
}

#[tokio::test]
async fn every_answer_carries_a_request_id() {
    let server = start_at(START).await;
    let request = http::Request::builder()
        .uri(format!("{}/healthz", server.base))
        .header("x-request-id", "abc-123");
    let response = server.send(request, Bytes::new()).await;
    assert_eq!(response.headers()["x-request-id"], "abc-123");
    // Any answer carries one; an unsafe id is replaced.
    let request = http::Request::builder()
        .uri(format!("{}/api/v2/favorites", server.base))
        .header("x-request-id", "not ok!");
    let response = server.send(request, Bytes::new()).await;
    let id = response.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 32, "{id}");
}

#[test]
fn proxy_variables_configure_the_client_address() {
    let config = Config::from_lookup(|name| match name {
        "DATA_API_TRUSTED_PROXIES" => Some("10.0.0.0/8, ::1".to_owned()),
        "DATA_API_FORWARDED_HEADER" => Some("forwarded".to_owned()),
        _ => None,
    })
    .unwrap();
    let trusted = config.client_ip.trusted_proxies();
    assert!(trusted.contains("10.1.2.3".parse().unwrap()));
    assert!(!trusted.contains("192.0.2.1".parse().unwrap()));
    let refused = |name: &'static str, value: &'static str| {
        Config::from_lookup(move |asked| (asked == name).then(|| value.to_owned())).unwrap_err()
    };
    assert!(refused("DATA_API_TRUSTED_PROXIES", "nope").starts_with("DATA_API_TRUSTED_PROXIES"));
    assert!(refused("DATA_API_FORWARDED_HEADER", "via").starts_with("DATA_API_FORWARDED_HEADER"));
}

//! Wallet JWTs across libraries, and instant revocation.
//!
//! An independent issuer (PyJWT + cryptography, `tests/interop/jwt-python`)
//! mints Zitadel-shaped RS256, ES256 and EdDSA tokens and serves their JWKS;
//! the data API, configured through its `DATA_API_JWKS_URL` family of
//! variables, accepts the good ones and refuses the bad ones. Conversely
//! PyJWT verifies a walletgate-minted JWT against our JWKS document.

use std::path::Path;
use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;

const FOREIGN_ISSUER: &str = "https://zitadel.walletgate.test";
/// The `aud` the external issuer's tokens name (`DATA_API_JWT_AUDIENCE`).
const FOREIGN_AUDIENCE: &str = "https://data-api.walletgate.test";

/// The Python issuer, killed when dropped.
struct Idp {
    _child: tokio::process::Child,
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

fn real_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn start_idp(audience: &str) -> Idp {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/jwt-python");
    let python = dir.join(".venv/bin/python");
    assert!(
        python.exists(),
        "PyJWT is not installed; run: python3 -m venv tests/interop/jwt-python/.venv \
         && tests/interop/jwt-python/.venv/bin/pip install -r tests/interop/jwt-python/requirements.txt \
         (.ci/run does this)"
    );
    let mut child = tokio::process::Command::new(python)
        .arg(dir.join("idp.py"))
        .args(["--issuer", FOREIGN_ISSUER, "--audience", audience])
        .args(["--wallet", DEV_WALLET_0])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut first = String::new();
    tokio::time::timeout(
        Duration::from_secs(60),
        BufReader::new(stdout).read_line(&mut first),
    )
    .await
    .expect("the issuer starts within 60 s")
    .unwrap();
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
        .as_u64()
        .unwrap();
    Idp {
        _child: child,
        base: format!("http://127.0.0.1:{port}"),
        client: Client::builder(TokioExecutor::new()).build_http(),
    }
}

impl Idp {
    async fn request(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let body = body.map_or_else(Bytes::new, |body| Bytes::from(body.to_string()));
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .body(Full::new(body))
            .unwrap();
        let response = tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .expect("the issuer answers within 30 s")
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    async fn token(&self, case: &str) -> String {
        self.request(Method::GET, &format!("/token/{case}"), None)
            .await["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn jwks_fetches(&self) -> u64 {
        self.request(Method::GET, "/fetches", None).await["count"]
            .as_u64()
            .unwrap()
    }
}

/// A data API at the real time (the issuer's tokens carry real times) that
/// also trusts the Python issuer, configured as its environment would be.
async fn start_trusting() -> (Server, Idp) {
    let idp = start_idp(FOREIGN_AUDIENCE).await;
    let table = [
        ("DATA_API_JWKS_URL", format!("{}/jwks", idp.base)),
        ("DATA_API_JWT_ISSUER", FOREIGN_ISSUER.to_owned()),
        ("DATA_API_JWT_AUDIENCE", FOREIGN_AUDIENCE.to_owned()),
        ("DATA_API_SCOPES_CLAIM", "opensea_scopes".to_owned()),
        ("DATA_API_WALLET_CLAIM", "linked_wallets".to_owned()),
    ];
    let from_env = Config::from_lookup(|name| {
        table
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.clone())
    })
    .unwrap();
    let server = start_configured(real_now(), |config| {
        config.external_issuer = from_env.external_issuer;
    })
    .await;
    (server, idp)
}

/// `initialize` on `/mcp` with `headers`: (status, WWW-Authenticate, body).
async fn mcp_initialize(server: &Server, headers: &[(&str, &str)]) -> (StatusCode, String, String) {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "walletgate-revocation-test", "version": "1"},
        },
    });
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/mcp", server.base))
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = server
        .send(request, Bytes::from(initialize.to_string()))
        .await;
    let status = response.status();
    let challenge = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        challenge,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn assert_invalid_token(reply: &Reply, case: &str) {
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "{case}: {}",
        reply.body
    );
    let challenge = reply.headers[header::WWW_AUTHENTICATE].to_str().unwrap();
    assert!(
        challenge.starts_with("Bearer error=\"invalid_token\", resource_metadata=\"http://"),
        "{case}: {challenge}"
    );
}

#[tokio::test]
async fn an_external_issuers_pyjwt_tokens_are_accepted_and_its_bad_ones_refused() {
    let (server, idp) = start_trusting().await;
    let favorites = favorites_path(DEV_WALLET_0);
    for case in ["rs256", "es256_array", "eddsa"] {
        let auth = bearer(&idp.token(case).await);
        let page = server.with_bearer(Method::GET, &favorites, &auth).await;
        assert_eq!(page.status, StatusCode::OK, "{case}: {}", page.body);
    }
    // Our own tokens keep working next to the external issuer's.
    let (_, _, own) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let own_page = server
        .with_bearer(Method::GET, &favorites, &bearer(&own))
        .await;
    assert_eq!(own_page.status, StatusCode::OK, "{}", own_page.body);

    let auth = bearer(&idp.token("no_scope").await);
    let refused = server.with_bearer(Method::GET, &favorites, &auth).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let challenge = refused.headers[header::WWW_AUTHENTICATE].to_str().unwrap();
    assert!(challenge.contains("insufficient_scope"), "{challenge}");

    for case in [
        "expired",
        "wrong_issuer",
        "wrong_audience",
        "alg_none",
        "hs256_confusion",
        "unknown_kid",
    ] {
        let auth = bearer(&idp.token(case).await);
        let reply = server.with_bearer(Method::GET, &favorites, &auth).await;
        assert_invalid_token(&reply, case);
    }
    assert_eq!(idp.jwks_fetches().await, 1, "one fetch served them all");
}

#[tokio::test]
async fn a_flood_of_unknown_kids_fetches_the_jwks_at_most_once_per_interval() {
    let (server, idp) = start_trusting().await;
    let favorites = favorites_path(DEV_WALLET_0);
    let auth = bearer(&idp.token("rs256").await);
    let page = server.with_bearer(Method::GET, &favorites, &auth).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let mut forged = Vec::new();
    for _ in 0..40 {
        forged.push(bearer(&idp.token("unknown_kid").await));
    }
    for auth in &forged[..20] {
        let reply = server.with_bearer(Method::GET, &favorites, auth).await;
        assert_invalid_token(&reply, "unknown kid");
    }
    assert_eq!(idp.jwks_fetches().await, 1, "within 30 s of the last fetch");
    server.clock.advance(Duration::from_secs(
        walletgate::wallet_jwt::JwksUrl::DEFAULT_UNKNOWN_KID_SECS,
    ));
    for auth in &forged[20..] {
        let reply = server.with_bearer(Method::GET, &favorites, auth).await;
        assert_invalid_token(&reply, "unknown kid");
    }
    assert_eq!(idp.jwks_fetches().await, 2, "one more fetch per interval");
}

#[tokio::test]
async fn pyjwt_verifies_a_walletgate_jwt_against_our_jwks_document() {
    let server = start_at(real_now()).await;
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let idp = start_idp(&server.base).await;
    let verdict = idp
        .request(
            Method::POST,
            "/verify",
            Some(json!({
                "jwks": format!("{}/.well-known/jwks.json", server.base),
                "token": jwt,
                "issuer": server.base,
                "audience": server.base,
            })),
        )
        .await;
    assert_eq!(verdict["ok"], true, "{}", verdict["error"]);
    assert_eq!(verdict["claims"]["wallet"], DEV_WALLET_0);
    assert_eq!(verdict["claims"]["scope"], "read:favorites");
}

#[tokio::test]
async fn a_revoked_pats_jwt_is_refused_on_the_next_rest_and_mcp_request() {
    let server = start().await;
    let (cookie, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let auth = bearer(&jwt);
    let favorites = favorites_path(DEV_WALLET_0);
    let mcp_headers = [("x-api-key", API_KEY), ("authorization", auth.as_str())];
    assert_eq!(
        server
            .with_bearer(Method::GET, &favorites, &auth)
            .await
            .status,
        StatusCode::OK
    );
    let (status, _, text) = mcp_initialize(&server, &mcp_headers).await;
    assert_eq!(status, StatusCode::OK, "{text}");

    let listed = server.list_tokens(&cookie).await;
    let id = listed.body[0]["id"].as_str().unwrap().to_owned();
    let revoked = server
        .keyed(
            Method::DELETE,
            &format!("/api/v2/auth/tokens/{id}"),
            &[("cookie", &cookie), ("authorization", &auth)],
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);

    // No clock movement: the JWT is far from its exp.
    let rest = server.with_bearer(Method::GET, &favorites, &auth).await;
    assert_invalid_token(&rest, "revoked, REST");
    assert!(rest.body.to_string().contains("revoked"), "{}", rest.body);
    let (status, challenge, text) = mcp_initialize(&server, &mcp_headers).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    assert_eq!(
        challenge,
        format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            server.base
        )
    );
    assert!(text.contains("revoked"), "{text}");
}

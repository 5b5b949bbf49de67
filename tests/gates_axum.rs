//! Both gates in an axum router, their extractors, and what they never reveal.

mod gates_support;

use axum::Router;
use axum::extract::Path;
use axum::routing::{get, post};
use gates_support::*;
use http::{Request, Response, StatusCode};
use tower::ServiceExt;
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyDigest};
use walletgate::wallet_jwt::{
    PAT_PREFIX, RequireScopesLayer, Scope, ScopeError, VerificationKey, Wallet, WalletClaims,
    WalletJwtLayer,
};

fn api_key_layer() -> ApiKeyLayer {
    let store = InMemoryKeyStore::new();
    store
        .insert(API_KEY, ApiKeyRecord::new(ApiKeyId::new("app-1").unwrap()))
        .unwrap();
    ApiKeyLayer::new(store)
}

async fn favorites(Path(_wallet): Path<String>, app: ApiKeyId, Wallet(wallet): Wallet) -> String {
    format!("{app} {wallet}")
}

async fn relate(claims: WalletClaims) -> Result<&'static str, ScopeError> {
    claims.require(Scope::WriteWallets)?;
    Ok("related")
}

async fn mcp(claims: Option<WalletClaims>) -> String {
    claims.map_or_else(|| "anonymous".to_owned(), |c| c.wallet().to_string())
}

async fn unguarded(claims: WalletClaims) -> String {
    claims.wallet().to_string()
}

/// The data API's shape: the API key on everything, the wallet JWT on the
/// wallet routes, optional on `/mcp`.
fn app() -> Router {
    let clock = clock();
    let wallet_routes = Router::new()
        .route(
            "/api/v2/account/{wallet}/favorites",
            get(favorites).route_layer(
                RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account"),
            ),
        )
        .route("/api/v2/accounts/agent-relationships", post(relate))
        .layer(WalletJwtLayer::new(verifier(&clock)));
    let mcp_routes = Router::new()
        .route("/mcp", post(mcp))
        .layer(WalletJwtLayer::new(verifier(&clock)).optional_bearer());
    Router::new()
        .merge(wallet_routes)
        .merge(mcp_routes)
        .route("/unguarded", get(unguarded))
        .layer(api_key_layer())
}

async fn send(
    method: &str,
    path: &str,
    key: Option<&str>,
    authorization: Option<&str>,
) -> Response<axum::body::Body> {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    app()
        .oneshot(request.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap()
}

fn own_favorites() -> String {
    format!("/api/v2/account/{WALLET}/favorites")
}

#[tokio::test]
async fn wallet_route_needs_both_headers_together() {
    let jwt = bearer(&token(&claims()));
    let path = own_favorites();
    let jwt_only = send("GET", &path, None, Some(&jwt)).await;
    assert_eq!(jwt_only.status(), StatusCode::UNAUTHORIZED);
    let key_only = send("GET", &path, Some(API_KEY), None).await;
    assert_eq!(key_only.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        key_only.headers()["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
    let both = send("GET", &path, Some(API_KEY), Some(&jwt)).await;
    assert_eq!(both.status(), StatusCode::OK);
    assert_eq!(body_text(both).await, format!("app-1 {WALLET}"));
}

/// `POST` to the agent-relationships route with a JWT granting `scope`.
async fn relate_with_scope(scope: &str) -> Response<axum::body::Body> {
    let mut claims = claims();
    claims.scope = scope.into();
    let jwt = bearer(&token(&claims));
    let path = "/api/v2/accounts/agent-relationships";
    send("POST", path, Some(API_KEY), Some(&jwt)).await
}

#[tokio::test]
async fn handler_scope_check_answers_403() {
    let response = relate_with_scope("read:favorites").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer error=\"insufficient_scope\", scope=\"write:wallets\""
    );
}

#[tokio::test]
async fn handler_scope_check_passes_with_the_scope() {
    let response = relate_with_scope("read:favorites write:wallets").await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn mcp_without_bearer_extracts_no_claims() {
    let response = send("POST", "/mcp", Some(API_KEY), None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, "anonymous");
}

#[tokio::test]
async fn mcp_with_bearer_extracts_the_wallet() {
    let jwt = bearer(&token(&claims()));
    let response = send("POST", "/mcp", Some(API_KEY), Some(&jwt)).await;
    assert_eq!(body_text(response).await, WALLET);
}

#[tokio::test]
async fn claims_extractor_without_the_layer_is_a_500_naming_it() {
    let response = send("GET", "/unguarded", Some(API_KEY), None).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(response).await.contains("WalletJwtLayer"));
}

/// Every rejection the gates produce, checked for every credential they saw.
#[tokio::test]
async fn nothing_secret_in_any_response_body_or_header() {
    let jwt = token(&claims());
    let mut expired = claims();
    expired.exp = NOW - 3600;
    let expired = token(&expired);
    let pat = format!("{PAT_PREFIX}SecretPatBody0123456789abcdefXYZ");
    let wrong_key = "wg_test_key_wrong_0123456789";
    let tampered = format!("{jwt}x");
    let own = own_favorites();
    let cases: Vec<(&str, Option<&str>, Option<String>)> = vec![
        ("/api/v2/collections", Some(wrong_key), None),
        (&own, Some(API_KEY), Some(bearer(&expired))),
        (&own, Some(API_KEY), Some(bearer(&pat))),
        (&own, Some(API_KEY), Some(bearer(&tampered))),
        (&own, Some(API_KEY), Some(format!("Basic {jwt}"))),
        (
            "/api/v2/account/0x70997970C51812dc3A010C7d01b50e0d17dc79C8/favorites",
            Some(API_KEY),
            Some(bearer(&jwt)),
        ),
    ];
    let secrets = [API_KEY, wrong_key, &jwt, &expired, &pat, &tampered];
    for (path, key, authorization) in cases {
        let response = send("GET", path, key, authorization.as_deref()).await;
        assert!(
            response.status().is_client_error(),
            "{path}: {}",
            response.status()
        );
        let mut shown: String = response
            .headers()
            .iter()
            .map(|(name, value)| format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())))
            .collect();
        shown.push_str(&body_text(response).await);
        for secret in secrets {
            assert!(
                !shown.contains(secret),
                "a credential leaked into a response"
            );
            // Any 16-byte run of a credential counts as a leak too.
            assert!(
                !shown.contains(&secret[secret.len() - 16..]),
                "a credential fragment leaked"
            );
        }
    }
}

#[test]
fn nothing_secret_in_debug_output() {
    let hs_secret = "hs256-secret-bytes-for-this-test-only";
    let clock = clock();
    let keys = keys();
    keys.insert("hs", VerificationKey::hs256(hs_secret.as_bytes()).unwrap())
        .unwrap();
    let store = InMemoryKeyStore::new();
    store
        .insert(API_KEY, ApiKeyRecord::new(ApiKeyId::new("app-1").unwrap()))
        .unwrap();
    let jwt = token(&claims());
    let verifier = verifier_with(keys.clone(), &clock).allow_hs256();
    let claims = verifier.verify(&jwt).unwrap();
    let shown = format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        keys,
        keys.to_jwks(),
        verifier,
        WalletJwtLayer::new(verifier.clone()),
        store,
        ApiKeyLayer::new(store.clone()),
        KeyDigest::of(API_KEY.as_bytes()),
        claims,
    );
    for secret in [API_KEY, hs_secret, &jwt, &jwt[jwt.len() - 20..]] {
        assert!(!shown.contains(secret), "a secret leaked into Debug output");
    }
    let digest_bytes = KeyDigest::of(API_KEY.as_bytes());
    let hex: String = digest_bytes
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(!shown.contains(&hex[..16]));
    assert!(!shown.contains(&format!("{:?}", &digest_bytes.as_bytes()[..4])));
}

//! Caller-owned rejections on the data API's gates: every refusal of
//! `ApiKeyLayer`, `WalletJwtLayer` and `RequireScopesLayer`, rendered through
//! one `with_rejection` closure as a JSON-RPC error (as an MCP endpoint
//! answers), keeps the Area A status and headers and carries the typed error
//! in the response extensions.

mod gates_support;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};
use tower::{ServiceBuilder, ServiceExt, service_fn};
use walletgate::api_key::{
    ApiKeyError, ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota,
};
use walletgate::envelope::DataApiRejection;
use walletgate::wallet_jwt::jwt;
use walletgate::wallet_jwt::{
    JwtError, RequireScopesLayer, RequireScopesRejection, Scope, WalletJwtLayer,
};

use gates_support::{
    API_KEY, KID, OTHER_WALLET, WALLET, bearer, body_text, claims, clock, echo, second_signing_key,
    token, verifier,
};

/// The one renderer every gate gets: a JSON-RPC error whose `data` names the
/// refusal, with the Area A status and headers.
fn jsonrpc<E: DataApiRejection>(rejection: E) -> Response<Bytes> {
    let error = rejection.to_data_api_error();
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32001,
            "message": error.message(),
            "data": {"kind": rejection.kind(), "status": error.status().as_u16()},
        },
    });
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = error.status();
    error.write_headers(response.headers_mut());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// What a refusal must look like on the wire.
struct Expected {
    status: u16,
    kind: &'static str,
    message: &'static str,
    challenge: Option<&'static str>,
    retry_after: Option<&'static str>,
}

async fn assert_rendered<B>(response: Response<B>, expected: Expected)
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let Expected {
        status,
        kind,
        message,
        challenge,
        retry_after,
    } = expected;
    assert_eq!(response.status(), status, "{kind}");
    let headers = response.headers();
    assert_eq!(headers[header::CONTENT_TYPE], "application/json", "{kind}");
    let header = |name| headers.get(name).map(|v: &HeaderValue| v.to_str().unwrap());
    assert_eq!(header(header::WWW_AUTHENTICATE), challenge, "{kind}");
    assert_eq!(header(header::RETRY_AFTER), retry_after, "{kind}");
    let body: Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(
        body,
        json!({"jsonrpc": "2.0", "id": null, "error": {
            "code": -32001, "message": message, "data": {"kind": kind, "status": status},
        }}),
    );
}

const API_KEY_CHALLENGE: Option<&str> = Some("ApiKey header=\"X-API-KEY\"");
const INVALID_TOKEN: Option<&str> = Some("Bearer error=\"invalid_token\"");

fn key_store() -> InMemoryKeyStore {
    let store = InMemoryKeyStore::new();
    let record = ApiKeyRecord::new(ApiKeyId::new("app-1").unwrap())
        .with_quota(KeyQuota::per_minute(NonZeroU32::MIN));
    store.insert(API_KEY, record).unwrap();
    store
}

#[tokio::test]
async fn every_api_key_refusal_is_rendered_by_the_callers_closure() {
    let layer = ApiKeyLayer::new(key_store())
        .with_clock(Arc::new(clock()))
        .with_rejection(jsonrpc);
    let service = ServiceBuilder::new().layer(layer).service_fn(echo);
    let request = |key: Option<&str>| {
        let mut builder = Request::get("/api/v2/collections");
        if let Some(key) = key {
            builder = builder.header("x-api-key", key);
        }
        builder.body(Full::default()).unwrap()
    };

    let missing = service.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(
        missing.extensions().get::<ApiKeyError>(),
        Some(&ApiKeyError::Missing)
    );
    let expected = Expected {
        status: 401,
        kind: "missing",
        message: "Missing X-API-KEY header",
        challenge: API_KEY_CHALLENGE,
        retry_after: None,
    };
    assert_rendered(missing, expected).await;

    let unknown = service
        .clone()
        .oneshot(request(Some("unknown-key-0123456789")));
    let expected = Expected {
        status: 401,
        kind: "unknown",
        message: "Invalid or revoked API key",
        challenge: API_KEY_CHALLENGE,
        retry_after: None,
    };
    assert_rendered(unknown.await.unwrap(), expected).await;

    let first = service.clone().oneshot(request(Some(API_KEY))).await;
    assert_eq!(first.unwrap().status(), 200);
    let over = service.oneshot(request(Some(API_KEY))).await.unwrap();
    assert!(matches!(
        over.extensions().get::<ApiKeyError>(),
        Some(ApiKeyError::QuotaExceeded { .. })
    ));
    let expected = Expected {
        status: 429,
        kind: "quota_exceeded",
        message: "Rate limit exceeded for this API key; honour Retry-After",
        challenge: None,
        retry_after: Some("60"),
    };
    assert_rendered(over, expected).await;
}

/// The stores' failures (a store that cannot answer: the storage seams'
/// own tests drive them through the layer) through the same closure.
#[tokio::test]
async fn a_store_that_cannot_answer_renders_503() {
    let expected = Expected {
        status: 503,
        kind: "store_unavailable",
        message: "API key store unavailable; retry later",
        challenge: None,
        // Every 503 says when to come back (issue 43).
        retry_after: Some("1"),
    };
    assert_rendered(
        jsonrpc(ApiKeyError::StoreUnavailable).map(Full::new),
        expected,
    )
    .await;
    let expected = Expected {
        status: 503,
        kind: "quota_unavailable",
        message: "API key quota unavailable, so the request was not served; retry later",
        challenge: None,
        retry_after: Some("5"),
    };
    assert_rendered(
        jsonrpc(ApiKeyError::QuotaUnavailable).map(Full::new),
        expected,
    )
    .await;
    let expected = Expected {
        status: 503,
        kind: "revocation_unavailable",
        message: "Token revocation list unavailable: retry",
        challenge: None,
        retry_after: Some("1"),
    };
    assert_rendered(
        jsonrpc(JwtError::RevocationUnavailable).map(Full::new),
        expected,
    )
    .await;
}

#[tokio::test]
async fn every_wallet_jwt_and_scope_refusal_is_rendered_by_the_callers_closure() {
    let clock = clock();
    let service = |scope: Scope| {
        ServiceBuilder::new()
            .layer(WalletJwtLayer::new(verifier(&clock)).with_rejection(jsonrpc))
            .layer(
                RequireScopesLayer::new(scope)
                    .with_wallet_in_path_after("account")
                    .with_rejection(jsonrpc),
            )
            .service(service_fn(echo))
    };
    let jwt = token(&claims());
    let auth = bearer(&jwt);
    let request = |wallet: &str, authorization: Option<&str>| {
        let mut builder = Request::get(format!("/api/v2/account/{wallet}/favorites"));
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder.body(Full::default()).unwrap()
    };
    let call =
        |scope, wallet, authorization| service(scope).oneshot(request(wallet, authorization));

    let allowed = call(Scope::ReadFavorites, WALLET, Some(auth.as_str())).await;
    assert_eq!(allowed.unwrap().status(), 200);

    let missing = call(Scope::ReadFavorites, WALLET, None).await.unwrap();
    assert_eq!(
        missing.extensions().get::<JwtError>(),
        Some(&JwtError::Missing)
    );
    let expected = Expected {
        status: 401,
        kind: "missing",
        message: "Missing bearer token: send Authorization: Bearer <wallet JWT>",
        challenge: INVALID_TOKEN,
        retry_after: None,
    };
    assert_rendered(missing, expected).await;

    let tampered = bearer(&format!("{jwt}x"));
    let malformed = call(Scope::ReadFavorites, WALLET, Some(&tampered)).await;
    let expected = Expected {
        status: 401,
        kind: "malformed",
        message: "Malformed bearer token",
        challenge: INVALID_TOKEN,
        retry_after: None,
    };
    assert_rendered(malformed.unwrap(), expected).await;

    let forged = jwt::sign_eddsa(KID, &claims(), &second_signing_key()).unwrap();
    let forged = bearer(&forged);
    let invalid = call(Scope::ReadFavorites, WALLET, Some(&forged)).await;
    let expected = Expected {
        status: 401,
        kind: "bad_signature",
        message: "Wallet JWT signature does not verify",
        challenge: INVALID_TOKEN,
        retry_after: None,
    };
    assert_rendered(invalid.unwrap(), expected).await;

    let pat = call(
        Scope::ReadFavorites,
        WALLET,
        Some("Bearer wg_pat_0123456789"),
    )
    .await;
    let expected = Expected {
        status: 401,
        kind: "pat_not_accepted",
        message: "Personal access tokens are only exchanged for wallet JWTs: \
                  exchange it and send the JWT as the bearer token",
        challenge: INVALID_TOKEN,
        retry_after: None,
    };
    assert_rendered(pat.unwrap(), expected).await;

    let scoped = call(Scope::WriteWallets, WALLET, Some(auth.as_str()))
        .await
        .unwrap();
    assert!(matches!(
        scoped.extensions().get::<RequireScopesRejection>(),
        Some(RequireScopesRejection::InsufficientScope(_))
    ));
    let expected = Expected {
        status: 403,
        kind: "insufficient_scope",
        message: "JWT lacks scope write:wallets",
        challenge: Some("Bearer error=\"insufficient_scope\", scope=\"write:wallets\""),
        retry_after: None,
    };
    assert_rendered(scoped, expected).await;

    let other = call(Scope::ReadFavorites, OTHER_WALLET, Some(auth.as_str())).await;
    let expected = Expected {
        status: 403,
        kind: "wallet_mismatch",
        message: "The wallet in the request is not the wallet of the JWT",
        challenge: None,
        retry_after: None,
    };
    assert_rendered(other.unwrap(), expected).await;

    clock.advance(Duration::from_secs(600 + 31));
    let expired = call(Scope::ReadFavorites, WALLET, Some(auth.as_str()))
        .await
        .unwrap();
    assert_eq!(
        expired.extensions().get::<JwtError>(),
        Some(&JwtError::Expired)
    );
    let expected = Expected {
        status: 401,
        kind: "expired",
        message: "Wallet JWT expired: refresh it",
        challenge: INVALID_TOKEN,
        retry_after: None,
    };
    assert_rendered(expired, expected).await;
}

#[tokio::test]
async fn no_bearer_behind_an_optional_gate_reaches_the_guards_closure() {
    let clock = clock();
    let service = ServiceBuilder::new()
        .layer(WalletJwtLayer::new(verifier(&clock)).optional_bearer())
        .layer(RequireScopesLayer::new(Scope::ReadFavorites).with_rejection(jsonrpc))
        .service(service_fn(echo));
    let response = service
        .oneshot(Request::get("/").body(Full::default()).unwrap())
        .await
        .unwrap();
    let expected = Expected {
        status: 401,
        kind: "missing_token",
        message: "Missing bearer token: send Authorization: Bearer <wallet JWT>",
        challenge: INVALID_TOKEN,
        retry_after: None,
    };
    assert_rendered(response, expected).await;
}

#[tokio::test]
async fn without_with_rejection_the_area_a_body_is_unchanged() {
    let service = ServiceBuilder::new()
        .layer(ApiKeyLayer::new(key_store()))
        .service_fn(echo);
    let response = service
        .oneshot(Request::get("/").body(Full::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    assert_eq!(
        body_text(response).await,
        r#"{"error":{"message":"Missing X-API-KEY header","status":401,"code":16}}"#
    );
}

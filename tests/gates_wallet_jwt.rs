//! WalletJwtLayer and RequireScopesLayer, one behaviour per test.

mod gates_support;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use gates_support::*;
use hmac::{Hmac, Mac};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use sha2::Sha256;
use tower::{ServiceBuilder, ServiceExt, service_fn};
use walletgate::body::ResponseBody;
use walletgate::wallet_jwt::jwt::{self, Audience, Header};
use walletgate::wallet_jwt::{
    JwtError, JwtVerifier, KeySet, PAT_PREFIX, RequireScopesLayer, Scope, VerificationKey,
    WalletJwtLayer,
};

type Answer = Response<ResponseBody<ResponseBody<Full<Bytes>>>>;

fn favorites_path(wallet: &str) -> String {
    format!("/api/v2/account/{wallet}/favorites")
}

/// `GET /api/v2/account/{WALLET}/favorites` behind the wallet layer and a
/// `read:favorites` route guard.
async fn get_with(layer: WalletJwtLayer, path: &str, authorization: Option<&str>) -> Answer {
    let service = ServiceBuilder::new()
        .layer(layer)
        .layer(RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account"))
        .service(service_fn(echo));
    let mut request = Request::get(path);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    service
        .oneshot(request.body(Full::default()).unwrap())
        .await
        .unwrap()
}

async fn get(verifier: JwtVerifier, token: &str) -> Answer {
    get_with(
        WalletJwtLayer::new(verifier),
        &favorites_path(WALLET),
        Some(&bearer(token)),
    )
    .await
}

fn assert_invalid_token<B>(response: &Response<B>, why: JwtError) {
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
    assert_eq!(response.extensions().get::<JwtError>(), Some(&why));
}

#[tokio::test]
async fn valid_eddsa_token_reaches_the_handler_with_its_wallet() {
    let clock = clock();
    let response = get(verifier(&clock), &token(&claims())).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, WALLET);
}

#[tokio::test]
async fn missing_bearer_is_401_invalid_token_in_the_area_a_envelope() {
    let clock = clock();
    let response = get_with(
        WalletJwtLayer::new(verifier(&clock)),
        &favorites_path(WALLET),
        None,
    )
    .await;
    assert_invalid_token(&response, JwtError::Missing);
    let body: serde_json::Value = serde_json::from_str(&body_text(response).await).unwrap();
    assert_eq!(body["error"]["status"], 401);
    assert_eq!(body["error"]["code"], 16);
}

#[tokio::test]
async fn alg_none_is_refused() {
    let clock = clock();
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"at+jwt","kid":"test-2026-11"}"#);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims()).unwrap());
    let unsigned = format!("{header}.{payload}.");
    let response = get(verifier(&clock), &unsigned).await;
    assert_invalid_token(&response, JwtError::UnsupportedAlgorithm);
}

/// The classic confusion: HS256 with the Ed25519 public key bytes as the
/// HMAC secret. Refused even with HS256 allowed, because the key named by
/// `kid` verifies EdDSA only.
#[tokio::test]
async fn hs256_signed_with_the_public_key_bytes_is_refused() {
    let clock = clock();
    let public_key = signing_key().verifying_key().to_bytes();
    let forged = jwt::encode(&Header::access_token("HS256", KID), &claims(), |input| {
        let mac = Hmac::<Sha256>::new_from_slice(&public_key).unwrap();
        mac.chain_update(input).finalize().into_bytes().to_vec()
    })
    .unwrap();
    let response = get(verifier(&clock).allow_hs256(), &forged).await;
    assert_invalid_token(&response, JwtError::UnsupportedAlgorithm);
}

#[tokio::test]
async fn hs256_is_refused_unless_allowed() {
    let clock = clock();
    let secret = [0x5a; 32];
    let keys = keys();
    keys.insert("hs", VerificationKey::hs256(&secret).unwrap())
        .unwrap();
    let token = jwt::encode(&Header::access_token("HS256", "hs"), &claims(), |input| {
        let mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap();
        mac.chain_update(input).finalize().into_bytes().to_vec()
    })
    .unwrap();
    let refused = get(verifier_with(keys.clone(), &clock), &token).await;
    assert_invalid_token(&refused, JwtError::UnsupportedAlgorithm);
    let allowed = get(verifier_with(keys, &clock).allow_hs256(), &token).await;
    assert_eq!(allowed.status(), StatusCode::OK);
}

#[tokio::test]
async fn es256_token_verifies() {
    use p256::ecdsa::signature::Signer as _;
    let clock = clock();
    let es_key = p256::ecdsa::SigningKey::from_slice(&[0x33; 32]).unwrap();
    let keys = keys();
    keys.insert("es", VerificationKey::es256(*es_key.verifying_key()))
        .unwrap();
    let token = jwt::encode(&Header::access_token("ES256", "es"), &claims(), |input| {
        let signature: p256::ecdsa::Signature = es_key.sign(input);
        signature.to_bytes().to_vec()
    })
    .unwrap();
    let response = get(verifier_with(keys, &clock), &token).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn tampered_payload_is_refused() {
    let clock = clock();
    let token = token(&claims());
    let mut parts: Vec<&str> = token.split('.').collect();
    let mut elevated = claims();
    elevated.scope = "read:favorites write:wallets".into();
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&elevated).unwrap());
    parts[1] = &payload;
    let response = get(verifier(&clock), &parts.join(".")).await;
    assert_invalid_token(&response, JwtError::BadSignature);
}

#[tokio::test]
async fn unknown_kid_is_refused() {
    let clock = clock();
    let token = jwt::sign_eddsa("someone-else", &claims(), &signing_key()).unwrap();
    let response = get(verifier(&clock), &token).await;
    assert_invalid_token(&response, JwtError::UnknownKey);
}

#[tokio::test]
async fn rotated_key_is_accepted_until_removed() {
    let clock = clock();
    let keys = keys();
    let layer = WalletJwtLayer::new(verifier_with(keys.clone(), &clock));
    let old_token = token(&claims());
    // Rotation: the new key joins, new tokens use it, the old one stays valid.
    keys.insert(
        "next",
        VerificationKey::ed25519(second_signing_key().verifying_key()),
    )
    .unwrap();
    let new_token = jwt::sign_eddsa("next", &claims(), &second_signing_key()).unwrap();
    let path = favorites_path(WALLET);
    for token in [&old_token, &new_token] {
        let response = get_with(layer.clone(), &path, Some(&bearer(token))).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert!(keys.remove(KID));
    let response = get_with(layer.clone(), &path, Some(&bearer(&old_token))).await;
    assert_invalid_token(&response, JwtError::UnknownKey);
    let response = get_with(layer, &path, Some(&bearer(&new_token))).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn keys_loaded_from_a_jwks_document_verify() {
    let clock = clock();
    let document = keys().to_jwks().to_string();
    let keys = KeySet::from_jwks(&document).unwrap();
    let response = get(verifier_with(keys, &clock), &token(&claims())).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn expired_token_is_refused() {
    let clock = clock();
    let verifier = verifier(&clock);
    clock.advance(Duration::from_secs(600 + JwtVerifier::DEFAULT_LEEWAY_SECS));
    let response = get(verifier, &token(&claims())).await;
    assert_invalid_token(&response, JwtError::Expired);
}

#[tokio::test]
async fn expiry_within_the_leeway_is_accepted() {
    let clock = clock();
    let verifier = verifier(&clock);
    clock.advance(Duration::from_secs(
        600 + JwtVerifier::DEFAULT_LEEWAY_SECS - 1,
    ));
    let response = get(verifier, &token(&claims())).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn nbf_in_the_future_is_refused() {
    let clock = clock();
    let mut claims = claims();
    claims.nbf = NOW + JwtVerifier::DEFAULT_LEEWAY_SECS + 1;
    let response = get(verifier(&clock), &token(&claims)).await;
    assert_invalid_token(&response, JwtError::NotYetValid);
}

#[tokio::test]
async fn wrong_issuer_is_refused() {
    let clock = clock();
    let mut claims = claims();
    claims.iss = "https://evil.example".into();
    let response = get(verifier(&clock), &token(&claims)).await;
    assert_invalid_token(&response, JwtError::WrongIssuer);
}

#[tokio::test]
async fn wrong_audience_is_refused() {
    let clock = clock();
    let mut claims = claims();
    claims.aud = Audience::Many(vec!["https://other-api.example".into()]);
    let response = get(verifier(&clock), &token(&claims)).await;
    assert_invalid_token(&response, JwtError::WrongAudience);
}

#[tokio::test]
async fn audience_array_naming_this_service_is_accepted() {
    let clock = clock();
    let mut claims = claims();
    claims.aud = Audience::Many(vec!["https://other-api.example".into(), AUDIENCE.into()]);
    let response = get(verifier(&clock), &token(&claims)).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn wrong_typ_is_refused() {
    let clock = clock();
    let mut header = Header::access_token("EdDSA", KID);
    header.typ = Some("JWT".into());
    let response = get(verifier(&clock), &token_with_header(&header, &claims())).await;
    assert_invalid_token(&response, JwtError::WrongType);
}

#[tokio::test]
async fn sub_differing_from_wallet_is_refused() {
    let clock = clock();
    let mut claims = claims();
    claims.sub = OTHER_WALLET.into();
    let response = get(verifier(&clock), &token(&claims)).await;
    assert_invalid_token(&response, JwtError::InvalidClaims);
}

#[tokio::test]
async fn missing_scope_is_403_not_401() {
    let clock = clock();
    let mut claims = claims();
    claims.scope = "read:wallets".into();
    let response = get(verifier(&clock), &token(&claims)).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer error=\"insufficient_scope\", scope=\"read:favorites\""
    );
}

#[tokio::test]
async fn wallet_in_path_differing_from_the_jwt_is_403() {
    let clock = clock();
    let response = get_with(
        WalletJwtLayer::new(verifier(&clock)),
        &favorites_path(OTHER_WALLET),
        Some(&bearer(&token(&claims()))),
    )
    .await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn wallet_in_path_matches_case_insensitively() {
    let clock = clock();
    let response = get_with(
        WalletJwtLayer::new(verifier(&clock)),
        &favorites_path(&WALLET.to_lowercase()),
        Some(&bearer(&token(&claims()))),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn pat_sent_as_bearer_is_401_with_the_exchange_hint() {
    let clock = clock();
    let pat = format!("{PAT_PREFIX}AbCdEfGhIjKlMnOpQrStUvWxYz0123456789");
    let response = get(verifier(&clock), &pat).await;
    assert_invalid_token(&response, JwtError::PatNotAccepted);
    let body = body_text(response).await;
    assert!(body.contains("only exchanged for wallet JWTs"), "{body}");
    assert!(!body.contains(&pat));
}

#[tokio::test]
async fn bearer_scheme_is_case_insensitive() {
    let clock = clock();
    let response = get_with(
        WalletJwtLayer::new(verifier(&clock)),
        &favorites_path(WALLET),
        Some(&format!("bearer {}", token(&claims()))),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn optional_bearer_lets_requests_without_a_token_through() {
    let clock = clock();
    let service = ServiceBuilder::new()
        .layer(WalletJwtLayer::new(verifier(&clock)).optional_bearer())
        .service(service_fn(echo));
    let request = Request::post("/mcp").body(Full::default()).unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_text(response).await, "-");
}

#[tokio::test]
async fn optional_bearer_still_refuses_an_invalid_token() {
    let clock = clock();
    let mut claims = claims();
    claims.exp = NOW - 3600;
    let service = ServiceBuilder::new()
        .layer(WalletJwtLayer::new(verifier(&clock)).optional_bearer())
        .service(service_fn(echo));
    let request = Request::post("/mcp")
        .header("authorization", bearer(&token(&claims)))
        .body(Full::default())
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_invalid_token(&response, JwtError::Expired);
}

#[tokio::test]
async fn route_guard_without_a_token_in_optional_mode_is_401() {
    let clock = clock();
    let response = get_with(
        WalletJwtLayer::new(verifier(&clock)).optional_bearer(),
        &favorites_path(WALLET),
        None,
    )
    .await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn route_guard_without_the_wallet_layer_is_a_500_wiring_fault() {
    let service = ServiceBuilder::new()
        .layer(RequireScopesLayer::new(Scope::ReadFavorites))
        .service(service_fn(echo));
    let request = Request::get("/").body(Full::default()).unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(response).await.contains("WalletJwtLayer"));
}

#[tokio::test]
async fn the_token_does_not_reach_the_inner_service() {
    let clock = clock();
    let service = ServiceBuilder::new()
        .layer(WalletJwtLayer::new(verifier(&clock)))
        .service(service_fn(|request: Request<Full<Bytes>>| async move {
            let seen = request.headers().contains_key("authorization");
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                seen.to_string(),
            ))))
        }));
    let request = Request::get("/")
        .header("authorization", bearer(&token(&claims())))
        .body(Full::default())
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(body_text(response).await, "false");
}

#[tokio::test]
async fn claims_carry_scopes_pat_id_token_id_and_expiry() {
    let clock = clock();
    let verified = verifier(&clock).verify(&token(&claims())).unwrap();
    assert_eq!(verified.wallet().to_string(), WALLET);
    assert!(verified.require(Scope::ReadFavorites).is_ok());
    assert_eq!(verified.pat_id(), "pat_42");
    assert_eq!(verified.token_id(), "jwt_7");
    assert_eq!(verified.expires_at_unix_secs(), NOW + 600);
}

#[test]
fn verifier_leeway_is_capped() {
    let verifier = JwtVerifier::new(keys(), ISSUER, AUDIENCE).unwrap();
    assert!(verifier.clone().with_leeway_secs(300).is_ok());
    assert!(verifier.with_leeway_secs(301).is_err());
}

#[tokio::test]
async fn require_is_the_wallet_layer_and_the_scope_guard_in_one() {
    let clock = clock();
    let service = ServiceBuilder::new()
        .layer(WalletJwtLayer::new(verifier(&clock)).require(Scope::ReadWallets))
        .service(service_fn(echo));
    let request = |authorization: Option<String>| {
        let mut request = Request::get(favorites_path(WALLET));
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.body(Full::default()).unwrap()
    };
    let granted = {
        let mut claims = claims();
        claims.scope = "read:favorites read:wallets".into();
        token(&claims)
    };
    let ok = service
        .clone()
        .oneshot(request(Some(bearer(&granted))))
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let short = service
        .clone()
        .oneshot(request(Some(bearer(&token(&claims())))))
        .await
        .unwrap();
    assert_eq!(short.status(), StatusCode::FORBIDDEN);
    let missing = service.oneshot(request(None)).await.unwrap();
    assert_invalid_token(&missing, JwtError::Missing);
}

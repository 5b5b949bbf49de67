//! The credential lifecycle end to end in the library: sessions, PATs, the
//! exchange, rotation and revocation, and the JWTs `WalletJwtLayer` accepts.
#![cfg(feature = "tokens")]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, address};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{ServiceBuilder, ServiceExt};
use walletgate::clock::FakeClock;
use walletgate::tokens::{
    IssuerConfig, NewPat, PatSecret, SigningKeys, TokenError, TokenIssuer, is_well_formed,
};
use walletgate::wallet_jwt::{JwtError, JwtVerifier, KeySet, Scope, ScopeSet, WalletJwtLayer};

const WALLET: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
const OTHER: Address = address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
const ORIGIN: &str = "http://127.0.0.1:8080";
const START: u64 = 1_800_000_000;

struct Fixture {
    clock: FakeClock,
    issuer: TokenIssuer,
    verifier: JwtVerifier,
}

fn fixture() -> Fixture {
    let clock = FakeClock::at_unix_secs(START);
    let keys = SigningKeys::generate(KeySet::new()).unwrap();
    let verifier = JwtVerifier::new(keys.published().clone(), ORIGIN, ORIGIN)
        .unwrap()
        .with_leeway_secs(0)
        .unwrap()
        .with_clock(Arc::new(clock.clone()));
    let config = IssuerConfig::new(ORIGIN, ORIGIN).unwrap();
    let issuer = TokenIssuer::in_memory(config, keys).with_clock(Arc::new(clock.clone()));
    Fixture {
        clock,
        issuer,
        verifier,
    }
}

fn scopes(text: &str) -> ScopeSet {
    text.parse().unwrap()
}

async fn pat(issuer: &TokenIssuer, wallet: Address, scope_text: &str) -> (String, PatSecret) {
    let (record, secret) = issuer
        .create_pat(
            wallet,
            NewPat {
                label: "test".into(),
                scopes: scopes(scope_text),
                expires_in_days: Some(1),
            },
        )
        .await
        .unwrap();
    (record.id, secret)
}

#[tokio::test]
async fn exchanged_jwt_carries_the_contract_claims() {
    let f = fixture();
    let (id, secret) = pat(&f.issuer, WALLET, "read:favorites read:wallets").await;
    assert!(is_well_formed(secret.expose()));
    let token = f.issuer.exchange(secret.expose()).await.unwrap();
    assert_eq!(token.token_type, "Bearer");
    assert_eq!(token.expires_in, 15 * 60);
    assert_eq!(token.scope, "read:favorites read:wallets");
    let claims = f.verifier.verify(&token.access_token).unwrap();
    assert_eq!(claims.wallet(), WALLET);
    assert_eq!(claims.pat_id(), id);
    assert!(claims.scopes().contains(&Scope::ReadWallets));
    assert_eq!(claims.expires_at_unix_secs(), START + 15 * 60);
}

#[tokio::test]
async fn expired_jwt_is_refused_by_the_layer_and_reminted_from_the_pat() {
    let f = fixture();
    let (_, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    let first = f.issuer.exchange(secret.expose()).await.unwrap();
    let service = ServiceBuilder::new()
        .layer(WalletJwtLayer::new(f.verifier.clone()))
        .service_fn(|_request: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
        });
    let call = |token: String| {
        let service = service.clone();
        async move {
            let request = Request::get("/api/v2/account/x/favorites")
                .header("authorization", format!("Bearer {token}"))
                .body(Full::default())
                .unwrap();
            service.oneshot(request).await.unwrap().status()
        }
    };
    assert_eq!(call(first.access_token.clone()).await, StatusCode::OK);

    f.clock.advance(Duration::from_secs(15 * 60));
    assert_eq!(call(first.access_token).await, StatusCode::UNAUTHORIZED);

    let second = f.issuer.exchange(secret.expose()).await.unwrap();
    assert_eq!(call(second.access_token).await, StatusCode::OK);
}

#[tokio::test]
async fn revoked_pat_mints_nothing_and_signs_the_wallet_out() {
    let f = fixture();
    let cookies = f.issuer.start_session(WALLET).await.unwrap();
    let (id, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    f.issuer.revoke_pat(WALLET, &id).await.unwrap();
    assert!(matches!(
        f.issuer.exchange(secret.expose()).await,
        Err(TokenError::PatRevoked)
    ));
    assert!(matches!(
        f.issuer.session_wallet(&cookies.access).await,
        Err(TokenError::SessionInvalid)
    ));
}

#[tokio::test]
async fn another_wallet_cannot_revoke_or_rotate() {
    let f = fixture();
    let (id, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    assert!(matches!(
        f.issuer.revoke_pat(OTHER, &id).await,
        Err(TokenError::PatNotFound)
    ));
    assert!(matches!(
        f.issuer.rotate_pat(OTHER, &id).await,
        Err(TokenError::PatNotFound)
    ));
    assert!(f.issuer.exchange(secret.expose()).await.is_ok());
}

#[tokio::test]
async fn expired_pat_mints_nothing() {
    let f = fixture();
    let (_, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    f.clock.advance(Duration::from_secs(86_400));
    assert!(matches!(
        f.issuer.exchange(secret.expose()).await,
        Err(TokenError::PatExpired)
    ));
}

#[tokio::test]
async fn jwt_never_outlives_its_pat() {
    let f = fixture();
    let (_, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    f.clock.advance(Duration::from_secs(86_400 - 60));
    let token = f.issuer.exchange(secret.expose()).await.unwrap();
    assert_eq!(token.expires_in, 60);
}

#[tokio::test]
async fn rotation_retires_the_old_pat_and_reuse_revokes_the_family() {
    let f = fixture();
    let (id, old) = pat(&f.issuer, WALLET, "read:favorites").await;
    let (rotated, new) = f.issuer.rotate_pat(WALLET, &id).await.unwrap();
    assert_ne!(rotated.id, id);
    assert!(f.issuer.exchange(new.expose()).await.is_ok());

    // The retired token shows up again: it leaked, so the family dies.
    assert!(matches!(
        f.issuer.exchange(old.expose()).await,
        Err(TokenError::PatRevoked)
    ));
    assert!(matches!(
        f.issuer.exchange(new.expose()).await,
        Err(TokenError::PatRevoked)
    ));
    let listed = f.issuer.list_pats(WALLET).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|record| record.revoked_at.is_some()));
}

#[tokio::test]
async fn rotating_a_retired_pat_is_refused() {
    let f = fixture();
    let (id, _) = pat(&f.issuer, WALLET, "read:favorites").await;
    f.issuer.rotate_pat(WALLET, &id).await.unwrap();
    assert!(matches!(
        f.issuer.rotate_pat(WALLET, &id).await,
        Err(TokenError::PatNotFound)
    ));
}

#[tokio::test]
async fn key_rotation_keeps_old_tokens_valid_until_the_key_is_removed() {
    let f = fixture();
    let (_, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    let before = f.issuer.exchange(secret.expose()).await.unwrap();
    let old_kid = f.issuer.keys().current_kid();

    let keep_until = START + 15 * 60;
    let new_kid = f.issuer.keys().rotate(keep_until).unwrap();
    let after = f.issuer.exchange(secret.expose()).await.unwrap();
    let jwks = f.issuer.keys().jwks();
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["kid"].as_str().unwrap())
        .collect();
    assert!(kids.contains(&old_kid.as_str()) && kids.contains(&new_kid.as_str()));
    assert!(f.verifier.verify(&before.access_token).is_ok());
    assert!(f.verifier.verify(&after.access_token).is_ok());

    f.issuer.keys().prune(keep_until);
    assert!(matches!(
        f.verifier.verify(&before.access_token),
        Err(JwtError::UnknownKey)
    ));
    assert!(f.verifier.verify(&after.access_token).is_ok());
}

#[tokio::test]
async fn creation_rules() {
    let f = fixture();
    let request = |scope_text: &str, days: Option<u32>| NewPat {
        label: "x".into(),
        scopes: scopes(scope_text),
        expires_in_days: days,
    };
    assert!(matches!(
        f.issuer
            .create_pat(WALLET, request("write:orders", Some(1)))
            .await,
        Err(TokenError::ScopeNotGrantable(_))
    ));
    assert!(matches!(
        f.issuer
            .create_pat(WALLET, request("read:favorites", None))
            .await,
        Err(TokenError::ExpiryRequired)
    ));
    assert!(matches!(
        f.issuer
            .create_pat(WALLET, request("read:favorites", Some(91)))
            .await,
        Err(TokenError::ExpiryTooLong { max_days: 90 })
    ));
    for _ in 0..10 {
        f.issuer
            .create_pat(WALLET, request("read:favorites", Some(1)))
            .await
            .unwrap();
    }
    assert!(matches!(
        f.issuer
            .create_pat(WALLET, request("read:favorites", Some(1)))
            .await,
        Err(TokenError::TooManyTokens { max: 10 })
    ));
}

#[tokio::test]
async fn unknown_or_tampered_pats_are_invalid() {
    let f = fixture();
    let (_, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    let mut tampered = secret.expose().to_owned();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'a' { 'b' } else { 'a' });
    assert!(matches!(
        f.issuer.exchange(&tampered).await,
        Err(TokenError::InvalidPat)
    ));
    assert!(matches!(
        f.issuer.exchange("not a token").await,
        Err(TokenError::InvalidPat)
    ));
}

#[tokio::test]
async fn session_refresh_rotates_both_cookies_once() {
    let f = fixture();
    let first = f.issuer.start_session(WALLET).await.unwrap();
    assert_eq!(
        f.issuer.session_wallet(&first.access).await.unwrap(),
        WALLET
    );
    let (wallet, second) = f.issuer.refresh_session(&first.refresh).await.unwrap();
    assert_eq!(wallet, WALLET);
    assert!(f.issuer.session_wallet(&first.access).await.is_err());
    assert_eq!(
        f.issuer.session_wallet(&second.access).await.unwrap(),
        WALLET
    );
    assert!(matches!(
        f.issuer.refresh_session(&first.refresh).await,
        Err(TokenError::SessionInvalid)
    ));
}

#[tokio::test]
async fn signing_out_ends_every_session_of_the_wallet_and_keeps_its_tokens() {
    let f = fixture();
    let first = f.issuer.start_session(WALLET).await.unwrap();
    let second = f.issuer.start_session(WALLET).await.unwrap();
    let (_, pat) = pat(&f.issuer, WALLET, "read:favorites").await;
    f.issuer.sign_out(WALLET).await.unwrap();
    assert!(f.issuer.session_wallet(&first.access).await.is_err());
    assert!(f.issuer.session_wallet(&second.access).await.is_err());
    assert!(f.issuer.refresh_session(&first.refresh).await.is_err());
    assert!(f.issuer.exchange(pat.expose()).await.is_ok());
}

#[tokio::test]
async fn sessions_expire() {
    let f = fixture();
    let cookies = f.issuer.start_session(WALLET).await.unwrap();
    f.clock.advance(Duration::from_secs(60 * 60));
    assert!(f.issuer.session_wallet(&cookies.access).await.is_err());
    // The refresh cookie lives longer and still renews the session.
    assert!(f.issuer.refresh_session(&cookies.refresh).await.is_ok());
}

#[test]
fn secrets_never_show_in_debug() {
    let secret_debug = format!("{:?}", fixture().issuer);
    assert!(!secret_debug.contains("wg_pat_"));
}

/// The issuer and the verifier sharing one revocation list, as a server wires them.
fn fixture_with_revocations() -> Fixture {
    let f = fixture();
    let revocations = Arc::new(walletgate::wallet_jwt::InMemoryRevocations::new());
    Fixture {
        clock: f.clock,
        issuer: f.issuer.with_revocations(revocations.clone()),
        verifier: f.verifier.with_revocations(revocations).with_cache(16),
    }
}

#[tokio::test]
async fn revoking_a_pat_refuses_its_jwts_at_once_not_at_their_exp() {
    let f = fixture_with_revocations();
    let (id, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    let (_, other_secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    let jwt = f
        .issuer
        .exchange(secret.expose())
        .await
        .unwrap()
        .access_token;
    let other = f
        .issuer
        .exchange(other_secret.expose())
        .await
        .unwrap()
        .access_token;
    // Verified once: the next request is a cache hit.
    assert!(f.verifier.authenticate(&jwt).await.is_ok());
    f.issuer.revoke_pat(WALLET, &id).await.unwrap();
    assert_eq!(f.verifier.authenticate(&jwt).await, Err(JwtError::Revoked));
    assert!(
        f.verifier.authenticate(&other).await.is_ok(),
        "only that PAT's JWTs"
    );
    // The signature still verifies: only the list refuses it.
    assert!(f.verifier.verify(&jwt).is_ok());
    // Until the last JWT it could have minted has expired.
    f.clock.advance(Duration::from_secs(
        IssuerConfig::DEFAULT_JWT_LIFETIME_SECS + JwtVerifier::MAX_LEEWAY_SECS,
    ));
    assert_eq!(f.verifier.authenticate(&jwt).await, Err(JwtError::Expired));
}

#[tokio::test]
async fn reusing_a_rotated_pat_refuses_the_jwts_of_its_whole_family() {
    let f = fixture_with_revocations();
    let (id, secret) = pat(&f.issuer, WALLET, "read:favorites").await;
    let old_jwt = f
        .issuer
        .exchange(secret.expose())
        .await
        .unwrap()
        .access_token;
    let (_, rotated) = f.issuer.rotate_pat(WALLET, &id).await.unwrap();
    let new_jwt = f
        .issuer
        .exchange(rotated.expose())
        .await
        .unwrap()
        .access_token;
    assert!(f.verifier.authenticate(&old_jwt).await.is_ok());
    assert!(f.verifier.authenticate(&new_jwt).await.is_ok());
    // The retired PAT shows up again: it leaked.
    assert!(matches!(
        f.issuer.exchange(secret.expose()).await,
        Err(TokenError::PatRevoked)
    ));
    for jwt in [&old_jwt, &new_jwt] {
        assert_eq!(f.verifier.authenticate(jwt).await, Err(JwtError::Revoked));
    }
}

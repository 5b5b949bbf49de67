//! Shared fixtures of the gates tests. Every key here is a public test value.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use ed25519_dalek::SigningKey;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use walletgate::clock::FakeClock;
use walletgate::wallet_jwt::jwt::{self, AccessTokenClaims, Audience, Header};
use walletgate::wallet_jwt::{JwtVerifier, KeySet, VerificationKey, WalletClaims};

/// Public dev value: the first Hardhat/Anvil account.
pub const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
/// Public dev value: the second Hardhat/Anvil account.
pub const OTHER_WALLET: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
pub const ISSUER: &str = "https://auth.walletgate.test";
pub const AUDIENCE: &str = "https://api.walletgate.test";
pub const NOW: u64 = 1_800_000_000;
pub const KID: &str = "test-2026-11";
/// A test API key (not a real credential).
pub const API_KEY: &str = "wg_test_key_0123456789abcdef";

/// Public test signing key (fixed seed).
pub fn signing_key() -> SigningKey {
    SigningKey::from_bytes(&[0x11; 32])
}

pub fn second_signing_key() -> SigningKey {
    SigningKey::from_bytes(&[0x22; 32])
}

pub fn keys() -> KeySet {
    let keys = KeySet::new();
    keys.insert(KID, VerificationKey::ed25519(signing_key().verifying_key()))
        .unwrap();
    keys
}

pub fn clock() -> FakeClock {
    FakeClock::at_unix_secs(NOW)
}

pub fn verifier_with(keys: KeySet, clock: &FakeClock) -> JwtVerifier {
    JwtVerifier::new(keys, ISSUER, AUDIENCE)
        .unwrap()
        .with_clock(Arc::new(clock.clone()))
}

pub fn verifier(clock: &FakeClock) -> JwtVerifier {
    verifier_with(keys(), clock)
}

/// Valid claims for `WALLET` with `read:favorites`, issued at `NOW`.
pub fn claims() -> AccessTokenClaims {
    AccessTokenClaims {
        iss: ISSUER.into(),
        aud: Audience::One(AUDIENCE.into()),
        sub: WALLET.into(),
        wallet: WALLET.into(),
        client_id: "pat_42".into(),
        scope: "read:favorites".into(),
        iat: NOW,
        nbf: NOW,
        exp: NOW + 600,
        jti: "jwt_7".into(),
    }
}

pub fn token(claims: &AccessTokenClaims) -> String {
    jwt::sign_eddsa(KID, claims, &signing_key()).unwrap()
}

/// A token with an arbitrary header, signed with Ed25519 over the segments.
pub fn token_with_header(header: &Header, claims: &AccessTokenClaims) -> String {
    use ed25519_dalek::Signer as _;
    let key = signing_key();
    jwt::encode(header, claims, |input| key.sign(input).to_bytes().to_vec()).unwrap()
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Answers 200 with the verified wallet (or `-`) as its body.
pub async fn echo(request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let wallet = request
        .extensions()
        .get::<WalletClaims>()
        .map_or_else(|| "-".to_owned(), |claims| claims.wallet().to_string());
    Ok(Response::new(Full::new(Bytes::from(wallet))))
}

pub async fn body_text<B>(response: Response<B>) -> String
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

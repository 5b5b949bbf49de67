//! Arbitrary text as a wallet access token, and arbitrary header and claims
//! JSON signed with the harness's HS256 key, through `JwtVerifier::verify`.
//!
//! The first form exercises splitting, base64url and header parsing; the
//! second gets past the signature, so claims parsing and every claim check
//! see fuzzed input. The verifier (jsonwebtoken underneath) must never panic,
//! must answer the same twice, must only accept tokens whose claims hold at
//! the harness's time, and `authenticate` through the verified-token cache
//! (twice: a miss, then a hit) must answer what `verify` answers.
#![no_main]

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;
use walletgate::clock::FakeClock;
use walletgate::wallet_jwt::{JwtVerifier, KeySet, VerificationKey};
use walletgate_fuzz::split_once;

/// The time the seed corpus was written for.
const NOW: u64 = 1_800_000_000;
const SECRET: &[u8] = b"walletgate fuzz harness hs256 key, not a real secret";
const ISSUER: &str = "https://issuer.example";
const AUDIENCE: &str = "https://api.example";

fn verifier() -> &'static JwtVerifier {
    verifiers().0
}

/// The same verifier with a verified-token cache.
fn cached() -> &'static JwtVerifier {
    verifiers().1
}

fn verifiers() -> (&'static JwtVerifier, &'static JwtVerifier) {
    static CACHED: OnceLock<JwtVerifier> = OnceLock::new();
    let plain = plain();
    (plain, CACHED.get_or_init(|| plain.clone().with_cache(64)))
}

/// Polls once: without a JWKS URL or a networked revocation list, the
/// verifier never waits.
fn now_or_never<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-process verifier never waits"),
    }
}

fn plain() -> &'static JwtVerifier {
    static VERIFIER: OnceLock<JwtVerifier> = OnceLock::new();
    VERIFIER.get_or_init(|| {
        let keys = KeySet::new();
        keys.insert("fuzz-hs", VerificationKey::hs256(SECRET).unwrap())
            .unwrap();
        keys.insert(
            "fuzz-ed",
            VerificationKey::ed25519_from_bytes(&[
                0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64,
                0x07, 0x3a, 0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68,
                0xf7, 0x07, 0x51, 0x1a,
            ])
            .unwrap(),
        )
        .unwrap();
        JwtVerifier::new(keys, ISSUER, AUDIENCE)
            .unwrap()
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
            .allow_hs256()
    })
}

fn check(token: &str) {
    let verifier = verifier();
    let first = verifier.verify(token);
    let second = verifier.verify(token);
    match (&first, &second) {
        (Ok(claims), Ok(again)) => {
            assert_eq!(claims.wallet(), again.wallet());
            // Leeway is 30 s either way.
            assert!(claims.expires_at_unix_secs() + 30 > NOW);
            assert!(claims.issued_at_unix_secs() <= NOW + 30);
            assert!(!claims.token_id().is_empty() && !claims.pat_id().is_empty());
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        _ => panic!("the verifier changed its mind"),
    }
    for _ in 0..2 {
        let through_cache = now_or_never(cached().authenticate(token));
        assert_eq!(through_cache, first, "the cache changed the verdict");
    }
}

/// `header` and `claims` as a compact JWS signed with the harness's key.
fn signed(header: &[u8], claims: &[u8]) -> String {
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
    mac.update(input.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{input}.{signature}")
}

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = std::str::from_utf8(data) {
        check(token);
    }
    // `header JSON` NUL `claims JSON`, re-signed so the claims are reached.
    let (header, claims) = split_once(data, 0);
    check(&signed(header, claims));
});

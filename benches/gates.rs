//! What the Area A gates cost per request, against one bare signature
//! verification (Ed25519, P-256, RSA-2048), and a verified-token cache hit.
//!
//! `cargo bench --bench gates -- --measurement-time 3`
//!
//! Targets (issue 17): `wallet_jwt_verify_{eddsa,es256,rs256}` at most 1.3x
//! its `bare_*_verify`; `wallet_jwt_cache_hit` at most 2 us.
//!
//! Every service answers at once, so each future is polled exactly once with
//! a no-op waker: no runtime in the measurement. Requests are built outside
//! the timed section.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ed25519_dalek::{Signature, SigningKey};
use http::{Request, Response};
use http_body_util::Full;
use tower::{Service, ServiceBuilder, service_fn};
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota};
use walletgate::wallet_jwt::jwt::{self, AccessTokenClaims, Audience, Header};
use walletgate::wallet_jwt::{
    InMemoryRevocations, JwtVerifier, KeySet, RevocationCheck, VerificationKey, WalletJwtLayer,
};

/// Public benchmark values, not credentials.
const API_KEY: &str = "wg_bench_key_0123456789abcdef";
const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const ISSUER: &str = "https://auth.walletgate.test";
const AUDIENCE: &str = "https://api.walletgate.test";

fn bare(_request: Request<Full<Bytes>>) -> Ready<Result<Response<Full<Bytes>>, Infallible>> {
    ready(Ok(Response::new(Full::default())))
}

/// Polls a service once for readiness and once for its response.
fn call_once<S, B>(service: &mut S, request: Request<Full<Bytes>>) -> u16
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(())) = service.poll_ready(&mut cx) else {
        panic!("benchmark services are always ready");
    };
    let future = pin!(service.call(request));
    match future.poll(&mut cx) {
        Poll::Ready(Ok(response)) => response.status().as_u16(),
        _ => panic!("benchmark services answer at once"),
    }
}

/// Polls a future once; everything benchmarked here completes at once.
fn ready_now<F: std::future::Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("benchmark futures complete at once"),
    }
}

fn claims() -> AccessTokenClaims {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    AccessTokenClaims {
        iss: ISSUER.into(),
        aud: Audience::One(AUDIENCE.into()),
        sub: WALLET.into(),
        wallet: WALLET.into(),
        client_id: "pat_1".into(),
        scope: "read:favorites read:wallets".into(),
        iat: now,
        nbf: now,
        exp: now + 3600,
        jti: "jwt_1".into(),
    }
}

fn token(key: &SigningKey) -> String {
    jwt::sign_eddsa("bench", &claims(), key).unwrap()
}

/// The signing input and signature bytes of a compact JWS.
fn split(token: &str) -> (&str, Vec<u8>) {
    use base64::Engine as _;
    let (input, signature) = token.rsplit_once('.').unwrap();
    let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(signature)
        .unwrap();
    (input, signature)
}

/// Verification without the cache against one bare signature check, per algorithm.
fn algorithms(c: &mut Criterion) {
    use p256::ecdsa::signature::{Signer as _, Verifier as _};
    use rsa::signature::SignatureEncoding as _;

    let ed_key = SigningKey::from_bytes(&[0x42; 32]);
    let es_key = p256::ecdsa::SigningKey::from_slice(&[0x43; 32]).unwrap();
    let rsa_key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    let rsa_public = rsa::RsaPublicKey::from(&rsa_key);
    let keys = KeySet::new();
    keys.insert("ed", VerificationKey::ed25519(ed_key.verifying_key()))
        .unwrap();
    keys.insert("es", VerificationKey::es256(*es_key.verifying_key()))
        .unwrap();
    {
        use rsa::traits::PublicKeyParts as _;
        let (n, e) = (rsa_public.n().to_bytes_be(), rsa_public.e().to_bytes_be());
        keys.insert(
            "rs",
            VerificationKey::rs256_from_components(&n, &e).unwrap(),
        )
        .unwrap();
    }
    let verifier = JwtVerifier::new(keys, ISSUER, AUDIENCE).unwrap();
    let rsa_signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(rsa_key);
    let rsa_verifier = rsa::pkcs1v15::VerifyingKey::<sha2::Sha256>::new(rsa_public);
    let tokens = [
        ("eddsa", jwt::sign_eddsa("ed", &claims(), &ed_key).unwrap()),
        (
            "es256",
            jwt::encode(&Header::access_token("ES256", "es"), &claims(), |input| {
                let signature: p256::ecdsa::Signature = es_key.sign(input);
                signature.to_bytes().to_vec()
            })
            .unwrap(),
        ),
        (
            "rs256",
            jwt::encode(&Header::access_token("RS256", "rs"), &claims(), |input| {
                rsa_signer.sign(input).to_vec()
            })
            .unwrap(),
        ),
    ];

    let mut group = c.benchmark_group("jwt");
    for (name, token) in &tokens {
        assert!(verifier.verify(token).is_ok(), "{name}");
        group.bench_function(format!("wallet_jwt_verify_{name}"), |b| {
            b.iter(|| verifier.verify(std::hint::black_box(token)).is_ok())
        });
    }

    let (input, signature) = split(&tokens[0].1);
    let signature = Signature::from_slice(&signature).unwrap();
    let verifying_key = ed_key.verifying_key();
    group.bench_function("bare_ed25519_verify", |b| {
        b.iter(|| {
            verifying_key
                .verify_strict(std::hint::black_box(input.as_bytes()), &signature)
                .is_ok()
        })
    });
    let (input, signature) = split(&tokens[1].1);
    let signature = p256::ecdsa::Signature::from_slice(&signature).unwrap();
    let verifying_key = *es_key.verifying_key();
    group.bench_function("bare_es256_verify", |b| {
        b.iter(|| {
            verifying_key
                .verify(std::hint::black_box(input.as_bytes()), &signature)
                .is_ok()
        })
    });
    let (input, signature) = split(&tokens[2].1);
    let signature = rsa::pkcs1v15::Signature::try_from(signature.as_slice()).unwrap();
    group.bench_function("bare_rs256_verify", |b| {
        b.iter(|| {
            rsa_verifier
                .verify(std::hint::black_box(input.as_bytes()), &signature)
                .is_ok()
        })
    });

    // A repeated token: cache lookup plus the revocation list (in memory).
    let revocations = Arc::new(InMemoryRevocations::new());
    ready_now(revocations.revoke("another_pat", u64::MAX)).unwrap();
    let cached = verifier
        .clone()
        .with_revocations(revocations)
        .with_cache(10_000);
    let token = &tokens[0].1;
    assert!(ready_now(cached.authenticate(token)).is_ok());
    group.bench_function("wallet_jwt_cache_hit", |b| {
        b.iter(|| ready_now(cached.authenticate(std::hint::black_box(token))).is_ok())
    });
    group.finish();
}

fn gates(c: &mut Criterion) {
    let signing_key = SigningKey::from_bytes(&[0x42; 32]);
    let token = token(&signing_key);
    let authorization = format!("Bearer {token}");
    let request = || {
        Request::get(format!("/api/v2/account/{WALLET}/favorites"))
            .header("x-api-key", API_KEY)
            .header("authorization", authorization.as_str())
            .body(Full::default())
            .unwrap()
    };

    let store = InMemoryKeyStore::new();
    store
        .insert(API_KEY, ApiKeyRecord::new(ApiKeyId::new("bench").unwrap()))
        .unwrap();
    // A quota far above the request rate: governor runs, never refuses.
    let quota = KeyQuota::per_second(NonZeroU32::new(1_000_000_000).unwrap());
    let api_key = ApiKeyLayer::new(store).with_default_quota(quota);
    let keys = KeySet::new();
    keys.insert(
        "bench",
        VerificationKey::ed25519(signing_key.verifying_key()),
    )
    .unwrap();
    let verifier = JwtVerifier::new(keys, ISSUER, AUDIENCE).unwrap();

    let mut group = c.benchmark_group("gates");

    let mut service = service_fn(bare);
    group.bench_function("bare_service", |b| {
        b.iter_batched(
            request,
            |r| call_once(&mut service, r),
            BatchSize::SmallInput,
        )
    });

    let mut service = ServiceBuilder::new()
        .layer(api_key.clone())
        .service(service_fn(bare));
    assert_eq!(call_once(&mut service, request()), 200);
    group.bench_function("api_key_layer", |b| {
        b.iter_batched(
            request,
            |r| call_once(&mut service, r),
            BatchSize::SmallInput,
        )
    });

    // The verifier alone: signature plus header, claims and address parsing.
    group.bench_function("wallet_jwt_verify_only", |b| {
        b.iter(|| verifier.verify(std::hint::black_box(&token)).is_ok())
    });

    let mut service = ServiceBuilder::new()
        .layer(api_key)
        .layer(WalletJwtLayer::new(verifier))
        .service(service_fn(bare));
    assert_eq!(call_once(&mut service, request()), 200);
    group.bench_function("api_key_and_wallet_jwt_eddsa", |b| {
        b.iter_batched(
            request,
            |r| call_once(&mut service, r),
            BatchSize::SmallInput,
        )
    });

    group.finish();
}

criterion_group!(benches, gates, algorithms);
criterion_main!(benches);

//! What the Area A gates cost per request, against one Ed25519 verification.
//!
//! `cargo bench --bench gates -- --measurement-time 3`
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
use std::task::{Context, Poll, Waker};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ed25519_dalek::{Signature, SigningKey};
use http::{Request, Response};
use http_body_util::Full;
use tower::{Service, ServiceBuilder, service_fn};
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota};
use walletgate::wallet_jwt::jwt::{self, AccessTokenClaims, Audience};
use walletgate::wallet_jwt::{JwtVerifier, KeySet, VerificationKey, WalletJwtLayer};

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

fn token(key: &SigningKey) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = AccessTokenClaims {
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
    };
    jwt::sign_eddsa("bench", &claims, key).unwrap()
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

    let decoded = jwt::decode(&token).unwrap();
    let signing_input = decoded.signing_input();
    let signature = Signature::from_slice(decoded.signature()).unwrap();
    let verifying_key = signing_key.verifying_key();
    group.bench_function("bare_ed25519_verify", |b| {
        b.iter(|| {
            verifying_key
                .verify_strict(std::hint::black_box(signing_input.as_bytes()), &signature)
                .is_ok()
        })
    });
    group.finish();
}

criterion_group!(benches, gates);
criterion_main!(benches);

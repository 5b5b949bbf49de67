//! SIWE costs per sign-in: parse, rebuild from fields, EIP-191 recovery, full verify.
//!
//! `cargo bench --features siwe --bench siwe -- --measurement-time 3`
#![allow(
    missing_docs,
    reason = "criterion_group! writes an undocumented pub fn"
)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use walletgate::clock::FakeClock;
use walletgate::siwe::{InMemoryNonceStore, NonceStore, SiweMessage, SiweVerifier};

/// The published EIP-4361 example (spruceid `verification_positive.json`).
const EXAMPLE: &str = "login.xyz wants you to sign in with your Ethereum account:\n0x9D85ca56217D2bb651b00f15e694EB7E713637D4\n\nSign-In With Ethereum Example Statement\n\nURI: https://login.xyz\nVersion: 1\nChain ID: 1\nNonce: bTyXgcQxn2htgkjJn\nIssued At: 2022-01-27T17:09:38.578Z\nExpiration Time: 2100-01-07T14:31:43.952Z";
const SIGNATURE: &str = "0xdc35c7f8ba2720df052e0092556456127f00f7707eaa8e3bbff7e56774e7f2e05a093cfc9e02964c33d86e8e066e221b7d153d27e5a2e97ccd5ca7d3f2ce06cb1b";

fn bench(c: &mut Criterion) {
    let message: SiweMessage = EXAMPLE.parse().unwrap();
    let fields = message.to_fields();
    let signature = alloy_primitives::hex::decode(SIGNATURE).unwrap();

    c.bench_function("siwe/parse", |b| {
        b.iter(|| black_box(EXAMPLE).parse::<SiweMessage>().unwrap())
    });
    c.bench_function("siwe/from_fields", |b| {
        b.iter(|| SiweMessage::from_fields(black_box(&fields)).unwrap())
    });
    c.bench_function("siwe/verify_eip191", |b| {
        b.iter(|| message.verify_eip191(black_box(&signature)).unwrap())
    });

    // Full check. The nonce is spent on use, so each iteration gets a fresh
    // store holding the example's nonce, built outside the timed part.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let verifier_with_nonce = || {
        let nonces = Arc::new(InMemoryNonceStore::new());
        runtime
            .block_on(nonces.insert("bTyXgcQxn2htgkjJn", 0, u64::MAX))
            .unwrap();
        SiweVerifier::builder()
            .with_domain("login.xyz")
            .with_uri("https://login.xyz")
            .allow_chain_id(1)
            .with_clock(Arc::new(FakeClock::at_unix_secs(1_643_303_400)))
            .with_nonce_store(nonces)
            .build()
            .unwrap()
    };
    c.bench_function("siwe/verify_fields_with_nonce", |b| {
        b.iter_batched(
            verifier_with_nonce,
            |verifier| {
                runtime
                    .block_on(verifier.verify_fields(&fields, SIGNATURE))
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

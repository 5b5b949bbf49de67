//! The paying client's signing path per request — sign + encode a
//! `PAYMENT-SIGNATURE` through `PaymentSigner`, with alloy's
//! `PrivateKeySigner` (k256) and with the crate's `Payer` (libsecp256k1) —
//! against its floor: one bare secp256k1 signature of a fresh
//! EIP-712 digest, with the same k256 signer and with libsecp256k1, measured
//! in the same run. Target: at most 1.5x the floor.
//!
//! `cargo bench --features client --bench client -- --measurement-time 3`

use std::future::Future;
use std::hint::black_box;
use std::task::{Context, Poll, Waker};

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use criterion::{Criterion, criterion_main};
use secp256k1::{Message, SECP256K1, SecretKey};
use walletgate::client::pay::PaymentSigner;
use walletgate::client::payer::DEV_KEYS;
use walletgate::client::payer::Payer;
use walletgate::x402::{
    facilitator::DevLedger,
    server::PaymentOption,
    wire::{ExactEvmDomain, ResourceInfo, TransferWithAuthorization, UsdAmount},
};

const NOW: u64 = 1_750_000_000;

/// Polls `future` once; a key in memory never waits.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-memory signer waited"),
    }
}

/// A transfer with nonce `n`: every iteration signs a different digest.
fn transfer(n: u64) -> TransferWithAuthorization {
    let mut nonce = [0u8; 32];
    nonce[24..].copy_from_slice(&n.to_be_bytes());
    TransferWithAuthorization {
        from: DevLedger::DEV_ACCOUNTS[1].parse::<Address>().unwrap(),
        to: DevLedger::DEV_ACCOUNTS[9].parse::<Address>().unwrap(),
        value: U256::from(3_000u64),
        validAfter: U256::ZERO,
        validBefore: U256::from(NOW + 300),
        nonce: B256::from(nonce),
    }
}

fn bench_client(c: &mut Criterion) {
    let offer = PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9])
        .unwrap()
        .requirements(UsdAmount::from_micros(3_000))
        .unwrap();
    let resource = ResourceInfo {
        url: "http://127.0.0.1:8402/v1/chat/completions".into(),
        ..Default::default()
    };
    let key: PrivateKeySigner = DEV_KEYS[1].parse().unwrap();
    let signer = PaymentSigner::new(key.clone());
    let payer = PaymentSigner::new(Payer::dev(1));
    let domain = ExactEvmDomain::base_sepolia_usdc();
    let secret = SecretKey::from_byte_array(
        alloy_primitives::hex::decode(DEV_KEYS[1])
            .unwrap()
            .try_into()
            .unwrap(),
    )
    .unwrap();

    let mut group = c.benchmark_group("client_signing");
    group.bench_function("payment_header (sign + encode, k256)", |b| {
        b.iter(|| ready(signer.payment_header(black_box(&offer), Some(&resource), NOW)).unwrap())
    });
    group.bench_function("payment_header (sign + encode, Payer: libsecp256k1)", |b| {
        b.iter(|| ready(payer.payment_header(black_box(&offer), Some(&resource), NOW)).unwrap())
    });
    let mut n = 0u64;
    group.bench_function("floor: EIP-712 digest + bare k256 signature", |b| {
        b.iter(|| {
            n += 1;
            let digest = domain.signing_hash(black_box(&transfer(n)));
            key.sign_hash_sync(&digest).unwrap()
        })
    });
    group.bench_function("floor: EIP-712 digest + bare libsecp256k1 signature", |b| {
        b.iter(|| {
            n += 1;
            let digest = domain.signing_hash(black_box(&transfer(n)));
            SECP256K1.sign_ecdsa_recoverable(Message::from_digest(digest.0), &secret)
        })
    });
    group.finish();
}

/// Criterion's generated entry points carry no docs.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench_client);
}
criterion_main!(group::benches);

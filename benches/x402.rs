//! x402 costs against their floor, one bare secp256k1 signer recovery,
//! measured in the same run (the bytes a paid request leaves behind are
//! benches/x402_memory.rs's).
//!
//! `cargo bench --bench x402 --features x402 -- --measurement-time 3`
//!
//! The paid request is measured in a steady state, as a server that has run
//! for a while sees it: the fake clock moves on by a whole authorization
//! window every [`STEADY_WINDOW`] payments (each signed for the time it is
//! served), so the replay store and the expiring ledger hold a bounded live
//! set and sweep what expired, instead of growing with every iteration of the
//! run. Each payment is signed just before it is served, outside the timed
//! part: like a request a server has just read, it is warm in the caches.
//! `paid_request_signed_ahead` signs a sample's payments first and serves
//! them back to back; it measures slower (about 2 µs: the requests are cold
//! in memory by then), and neither changes what the request itself runs
//! through: callgrind's cache simulation counts about 2,150 first-level
//! instruction-cache misses per paid request either way, where the floor,
//! back to back, misses 2. The paid path's code does not fit the cache.
//!
//! `x402_upto`: the `upto` scheme's Permit2 payload against the same floor,
//! measured in its own group: `permit2_payload_verification` reads the
//! payload, computes Permit2's witness digest and recovers its signer once
//! (target: at most 1.3× `bare_secp256k1_recovery`); `upto_verify_local`
//! is the local facilitator's whole verify (every official check, then the
//! development ledger).
//!
//! On a machine others share: `X402_INTERLEAVED=300 <bench binary>` prints
//! the fastest of 300 alternating blocks of floor and paid requests.
//!
//! Instruction counts, independent of the machine's load (valgrind):
//! `X402_INSTRUCTIONS=paid:2000 valgrind --tool=callgrind <bench binary>` runs
//! 2000 paid requests and nothing else (`floor:N` the digest and recovery N
//! times, `none:N` only the set-up both share); per request, the difference
//! of two totals divided by N: scripts/x402-instructions.sh. With `-ahead`
//! (`paid-ahead:N`, `floor-ahead:N`, `none-ahead:N`) every request is signed
//! first and then served back to back (with `--cache-sim=yes`: the misses
//! above).

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{BatchSize, Criterion};
use http::Request;
use http_body_util::Full;
use tower::ServiceExt;
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::clock::FakeClock;
use walletgate::x402::{
    facilitator::{DevLedger, Facilitator, FacilitatorRequest, LocalEvmFacilitator},
    server::{InMemoryNonceStore, matching_offer},
    wire::{
        AtomicAmount, ExactEvmDomain, ExactEvmPayload, PaymentPayload, PaymentRequirements,
        TransferWithAuthorization, UptoPayment, codec,
    },
};

mod x402_paid;
use x402_paid::{NOW, PaidService, offer, paid_chat, ready};

// The reference gateway's allocator (examples/gateway/main.rs), as it runs
// there. Results before 2026-11-26T03 used glibc's; before 2026-11-26T06 it
// was wrapped in `cap`'s counter (now benches/x402_memory.rs's), whose
// atomic operations on every allocation and free the gateway never pays.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Payments per authorization window in the steady-state paid benchmark.
const STEADY_WINDOW: u64 = 16_384;
/// Longer than an authorization's validity (maxTimeoutSeconds) and the claim hold.
const WINDOW_SECS: u64 = 400;

/// The paid request's world in its steady state: a fresh payment per call,
/// signed at the time it is served; the clock moves a window on every
/// [`STEADY_WINDOW`] payments, so what expired is swept on the way.
struct SteadyPayments {
    clock: FakeClock,
    payer: Payer,
    offer: PaymentRequirements,
    nonce: u64,
    /// The clock's time when the last payment signed is served.
    planned_secs: u64,
}

impl SteadyPayments {
    fn new(clock: FakeClock) -> Self {
        let planned_secs = walletgate::clock::Clock::now_unix_secs(&clock);
        SteadyPayments {
            clock,
            payer: Payer::dev(0),
            offer: offer(),
            nonce: 1_000,
            planned_secs,
        }
    }

    /// The next payment, signed ahead at the time it will be served, and
    /// whether the clock must move a window just before serving it.
    fn next_signed(&mut self) -> (Request<Full<Bytes>>, bool) {
        self.nonce += 1;
        let moves_clock = self.nonce.is_multiple_of(STEADY_WINDOW);
        if moves_clock {
            self.planned_secs += WINDOW_SECS;
        }
        let header = self
            .payer
            .header_with_nonce(&self.offer, self.planned_secs, sequential_nonce(self.nonce))
            .unwrap();
        let request = Request::post("/v1/chat/completions")
            .header("payment-signature", header)
            .body(Full::default())
            .unwrap();
        (request, moves_clock)
    }

    /// Moves the clock if `moves_clock` says so: call just before serving.
    fn serve_time(&self, moves_clock: bool) {
        if moves_clock {
            self.clock
                .advance(std::time::Duration::from_secs(WINDOW_SECS));
        }
    }

    /// The next payment, signed now and to be served at once.
    fn next_request(&mut self) -> Request<Full<Bytes>> {
        let (request, moves_clock) = self.next_signed();
        self.serve_time(moves_clock);
        request
    }
}

/// Signs `count` payments, then serves them back to back: how long serving took.
fn serve_signed_ahead(
    service: &impl PaidService,
    payments: &mut SteadyPayments,
    count: u64,
) -> std::time::Duration {
    let signed: Vec<_> = (0..count).map(|_| payments.next_signed()).collect();
    let start = std::time::Instant::now();
    for (request, moves_clock) in signed {
        payments.serve_time(moves_clock);
        let response = ready(service.clone().oneshot(request)).unwrap();
        assert_eq!(response.status(), 200);
    }
    start.elapsed()
}

/// The paid chat service of the steady state, over an expiring ledger (as
/// the gateway example runs it) and the in-memory replay store.
fn steady_service(clock: FakeClock) -> impl PaidService {
    let shared: walletgate::clock::SharedClock = Arc::new(clock);
    let ledger = Arc::new(DevLedger::new().with_expiry_clock(shared.clone()));
    let facilitator = LocalEvmFacilitator::new(ledger, shared.clone());
    let store = Arc::new(InMemoryNonceStore::new(shared.clone()));
    paid_chat(facilitator, shared, store)
}

/// Times `service`'s 402 for a chat (no payment): `name` in `group`.
fn bench_quote(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    service: &impl PaidService,
) {
    group.bench_function(name, |b| {
        b.iter(|| {
            let request = Request::post("/v1/chat/completions")
                .body(Full::default())
                .unwrap();
            let response = ready(service.clone().oneshot(request)).unwrap();
            assert_eq!(response.status(), 402);
        })
    });
}

fn bench_x402(c: &mut Criterion) {
    let clock = Arc::new(FakeClock::at_unix_secs(NOW));
    let ledger = Arc::new(DevLedger::new());
    let facilitator = LocalEvmFacilitator::new(ledger.clone(), clock.clone());
    let offers = vec![offer()];
    let payer = Payer::dev(0);
    let header = payer
        .header_with_nonce(&offers[0], NOW, sequential_nonce(1))
        .unwrap();

    // The floor: one recovery of the same signature over the same digest.
    let floor = Floor::new();
    let (domain, (transfer, signature)) = (&floor.domain, &floor.signed[0]);
    let digest = domain.signing_hash(transfer);
    assert_eq!(
        signature.recover_address_from_prehash(&digest).unwrap(),
        transfer.from
    );

    let mut group = c.benchmark_group("x402");
    group.bench_function("bare_secp256k1_recovery", |b| {
        b.iter(|| black_box(signature).recover_address_from_prehash(black_box(&digest)))
    });
    group.bench_function("eip712_digest", |b| {
        b.iter(|| black_box(domain).signing_hash(black_box(transfer)))
    });
    // The floor of decode + match + verify: the digest and one recovery.
    group.bench_function("bare_digest_and_recovery", |b| {
        b.iter(|| {
            let digest = black_box(domain).signing_hash(black_box(transfer));
            black_box(signature).recover_address_from_prehash(&digest)
        })
    });

    // The same, each recovery on a payment not just recovered (a server
    // never sees a signature twice).
    let fresh = Floor::of(FRESH_FLOOR_PAYMENTS);
    group.bench_function("digest_and_recovery_fresh_signatures", |b| {
        b.iter(|| fresh.run())
    });

    group.bench_function("decode_match_verify", |b| {
        b.iter(|| {
            let payment: PaymentPayload = codec::decode(black_box(header.as_bytes())).unwrap();
            let offer = matching_offer(&offers, &payment.accepted).unwrap().clone();
            let request = FacilitatorRequest::new(payment, offer);
            let verdict = ready(facilitator.verify(&request)).unwrap();
            assert!(verdict.is_valid);
        })
    });

    let store = Arc::new(InMemoryNonceStore::new(clock.clone()));
    let service = paid_chat(facilitator.clone(), clock.clone(), store);
    bench_quote(&mut group, "quote_402", &service);

    // The same 402 with signed offers (`offer-receipt`): cached, so the
    // difference is what serving the larger header costs, not signing.
    let signer = walletgate::x402::server::OfferSigner::from_hex(
        "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    )
    .unwrap();
    let store = Arc::new(InMemoryNonceStore::new(clock.clone()));
    let signing = x402_paid::paid_chat_with(facilitator.clone(), clock.clone(), store, |builder| {
        builder.with_offer_signer(signer)
    });
    let quote_bytes = |service: &dyn Fn() -> http::Response<_>| {
        let response = service();
        response.headers()["payment-required"].len()
    };
    let plain_bytes = quote_bytes(&|| {
        let request = Request::post("/v1/chat/completions")
            .body(Full::default())
            .unwrap();
        ready(service.clone().oneshot(request)).unwrap()
    });
    let signed_bytes = quote_bytes(&|| {
        let request = Request::post("/v1/chat/completions")
            .body(Full::default())
            .unwrap();
        ready(signing.clone().oneshot(request)).unwrap()
    });
    eprintln!(
        "PAYMENT-REQUIRED: {plain_bytes} bytes without an offer signer, {signed_bytes} with one \
         (+{})",
        signed_bytes - plain_bytes
    );
    bench_quote(&mut group, "quote_402_signed_offers", &signing);

    // The same 402 with an MPP challenge per exact offer (a fresh id, its
    // tag and an RFC 3339 expiry per 402); without MPP not a byte is added.
    #[cfg(feature = "mpp")]
    {
        let store = Arc::new(InMemoryNonceStore::new(clock.clone()));
        let mpp = walletgate::x402::server::mpp::Mpp::new(&[7; 32], "gateway.test").unwrap();
        let challenging =
            x402_paid::paid_chat_with(facilitator.clone(), clock.clone(), store, |builder| {
                builder.with_mpp(mpp)
            });
        bench_quote(&mut group, "quote_402_mpp", &challenging);
    }

    // Signing is the client's work: outside the timed part.
    let steady_clock = FakeClock::at_unix_secs(NOW);
    let service = steady_service(steady_clock.clone());
    let mut payments = SteadyPayments::new(steady_clock);
    group.bench_function("paid_request_verify_call_settle", |b| {
        b.iter_batched(
            || payments.next_request(),
            |request| {
                let response = ready(service.clone().oneshot(request)).unwrap();
                assert_eq!(response.status(), 200);
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("paid_request_signed_ahead", |b| {
        b.iter_custom(|iters| serve_signed_ahead(&service, &mut payments, iters))
    });
    group.finish();
}

/// The `upto` offer the benchmarks pay: Base Sepolia USDC to [`x402_paid::PAY_TO`],
/// settled by the local facilitator's fixed `upto` address.
fn upto_offer() -> PaymentRequirements {
    let exact = offer();
    walletgate::x402::server::PaymentOption::upto_permit2(
        exact.network.clone(),
        &exact.asset,
        &exact.pay_to,
        LocalEvmFacilitator::UPTO_FACILITATOR,
    )
    .requirements_for_amount(AtomicAmount::new(3_000))
}

/// A Permit2 payload's verification, offline: read, witness digest, one
/// recovery, the signer compared with the owner.
fn verify_permit2_payload(payload: &serde_json::Value, chain_id: u64) -> bool {
    let Some(permit) = UptoPayment::read(payload) else {
        return false;
    };
    let Ok(raw) = <[u8; 65]>::try_from(permit.signature.as_slice()) else {
        return false;
    };
    let Ok(signature) = alloy_primitives::Signature::from_raw_array(&raw) else {
        return false;
    };
    signature
        .recover_address_from_prehash(&permit.signing_hash(chain_id))
        .is_ok_and(|signer| signer == permit.from)
}

fn bench_upto(c: &mut Criterion) {
    let clock = Arc::new(FakeClock::at_unix_secs(NOW));
    let facilitator = LocalEvmFacilitator::new(Arc::new(DevLedger::new()), clock);
    let offer = upto_offer();
    let payment = Payer::dev(0).pay_upto(&offer, NOW).unwrap();
    let chain_id = offer.network.eip155_chain_id().unwrap();
    assert!(verify_permit2_payload(&payment.payload, chain_id));
    let request = FacilitatorRequest::new(payment.clone(), offer);
    assert!(ready(facilitator.verify(&request)).unwrap().is_valid);

    // The floor, in this group: one recovery of the same signature over the same digest.
    let permit = UptoPayment::read(&payment.payload).unwrap();
    let digest = permit.signing_hash(chain_id);
    let signature = alloy_primitives::Signature::from_raw_array(
        &<[u8; 65]>::try_from(permit.signature.as_slice()).unwrap(),
    )
    .unwrap();

    let mut group = c.benchmark_group("x402_upto");
    group.bench_function("bare_secp256k1_recovery", |b| {
        b.iter(|| black_box(&signature).recover_address_from_prehash(black_box(&digest)))
    });
    group.bench_function("permit2_payload_verification", |b| {
        b.iter(|| {
            assert!(verify_permit2_payload(
                black_box(&payment.payload),
                chain_id
            ))
        })
    });
    group.bench_function("upto_verify_local", |b| {
        b.iter(|| {
            let verdict = ready(facilitator.verify(black_box(&request))).unwrap();
            assert!(verdict.is_valid);
        })
    });
    group.finish();
}

/// The floor's inputs: signed payments' EIP-712 domain, structs and signatures.
struct Floor {
    domain: ExactEvmDomain,
    signed: Vec<(TransferWithAuthorization, alloy_primitives::Signature)>,
    next: std::cell::Cell<usize>,
}

impl Floor {
    /// One payment, recovered again and again (the issues' floor).
    fn new() -> Self {
        Self::of(1)
    }

    /// `count` payments with distinct nonces, recovered in turn: each
    /// recovery meets a signature it has not just seen, as a server does.
    fn of(count: u64) -> Self {
        let offer = offer();
        let signed = (1..=count)
            .map(|nonce| {
                let header = Payer::dev(0)
                    .header_with_nonce(&offer, NOW, sequential_nonce(nonce))
                    .unwrap();
                let payment: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
                let evm: ExactEvmPayload = payment.exact_evm().unwrap();
                let transfer = TransferWithAuthorization {
                    from: evm.authorization.from.parse().unwrap(),
                    to: evm.authorization.to.parse().unwrap(),
                    value: alloy_primitives::U256::from(evm.authorization.value.units()),
                    validAfter: alloy_primitives::U256::from(evm.authorization.valid_after),
                    validBefore: alloy_primitives::U256::from(evm.authorization.valid_before),
                    nonce: evm.authorization.nonce.parse().unwrap(),
                };
                (transfer, evm.signature.parse().unwrap())
            })
            .collect();
        Floor {
            domain: ExactEvmDomain::for_offer(&offer).unwrap(),
            signed,
            next: std::cell::Cell::new(0),
        }
    }

    /// The digest and one recovery: what no paid request can skip.
    fn run(&self) {
        let at = self.next.get();
        self.next.set((at + 1) % self.signed.len());
        let (transfer, signature) = &self.signed[at];
        let digest = black_box(&self.domain).signing_hash(black_box(transfer));
        black_box(black_box(signature).recover_address_from_prehash(&digest)).unwrap();
    }
}

/// `X402_INSTRUCTIONS=paid:N|floor:N|none:N`: N paid requests, N digests
/// and recoveries, or neither, after the same set-up (N requests signed).
fn instruction_driver(spec: &str) {
    let (mode, count) = spec.split_once(':').expect("X402_INSTRUCTIONS=MODE:N");
    let count: u64 = count.parse().expect("X402_INSTRUCTIONS=MODE:N");
    let clock = FakeClock::at_unix_secs(NOW);
    let service = steady_service(clock.clone());
    let mut payments = SteadyPayments::new(clock);
    // Warm-up: caches, the first table allocations.
    for _ in 0..100 {
        let response = ready(service.clone().oneshot(payments.next_request())).unwrap();
        assert_eq!(response.status(), 200);
    }
    let floor_inputs = floor_of_env();
    let (mode, ahead) = match mode.strip_suffix("-ahead") {
        Some(mode) => (mode, true),
        None => (mode, false),
    };
    let step = |request: Request<Full<Bytes>>| match mode {
        "paid" => {
            let response = ready(service.clone().oneshot(request)).unwrap();
            assert_eq!(response.status(), 200);
        }
        "floor" => floor_inputs.run(),
        "none" => drop(black_box(request)),
        other => panic!("X402_INSTRUCTIONS: unknown mode {other} (paid, floor, none)"),
    };
    if ahead {
        // Every request signed first, then served back to back.
        let signed: Vec<_> = (0..count).map(|_| payments.next_signed()).collect();
        for (request, moves_clock) in signed {
            payments.serve_time(moves_clock);
            step(request);
        }
    } else {
        // Each mode signs the same requests in the same order (the set-up the
        // difference of two runs removes); only what follows differs.
        for _ in 0..count {
            step(payments.next_request());
        }
    }
}

/// `X402_INTERLEAVED=BLOCKS[:ahead]`: the floor and the paid request in
/// alternating blocks of 256, each payment signed just before it is served
/// (`:ahead`: a block's payments signed first and served back to back, as
/// `paid_request_signed_ahead` does); prints the fastest block of each per
/// request and their ratio. Another process can only slow a block down,
/// so the fastest blocks estimate the ratio on a machine others share
/// (criterion's figures need an idle one).
fn interleaved_ratio(spec: &str) {
    const BLOCK: usize = 256;
    let (blocks, just_before) = match spec.split_once(':') {
        Some((blocks, "ahead")) => (blocks, false),
        _ => (spec, true),
    };
    let blocks: usize = blocks.parse().expect("X402_INTERLEAVED=BLOCKS[:ahead]");
    let clock = FakeClock::at_unix_secs(NOW);
    let service = steady_service(clock.clone());
    let mut payments = SteadyPayments::new(clock);
    let floor_inputs = floor_of_env();
    let (mut floor, mut paid) = (f64::MAX, f64::MAX);
    for _ in 0..blocks {
        let start = std::time::Instant::now();
        for _ in 0..BLOCK {
            floor_inputs.run();
        }
        floor = floor.min(start.elapsed().as_secs_f64() / BLOCK as f64);
        if just_before {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..BLOCK {
                let request = payments.next_request();
                let start = std::time::Instant::now();
                let response = ready(service.clone().oneshot(request)).unwrap();
                total += start.elapsed();
                assert_eq!(response.status(), 200);
            }
            paid = paid.min(total.as_secs_f64() / BLOCK as f64);
            continue;
        }
        let elapsed = serve_signed_ahead(&service, &mut payments, BLOCK as u64);
        paid = paid.min(elapsed.as_secs_f64() / BLOCK as f64);
    }
    println!(
        "fastest of {blocks} blocks of {BLOCK}: floor {:.2} µs, paid {:.2} µs, ratio {:.3}",
        floor * 1e6,
        paid * 1e6,
        paid / floor
    );
}

/// The floor `X402_FLOOR` names: `fresh` (4,096 payments in turn), `fresh:N`
/// (N in turn: how many distinct signatures it takes before a recovery slows
/// down), or, by default, one payment again and again.
fn floor_of_env() -> Floor {
    let named = std::env::var("X402_FLOOR").unwrap_or_default();
    match named.as_str() {
        "fresh" => Floor::of(FRESH_FLOOR_PAYMENTS),
        _ => match named.strip_prefix("fresh:") {
            Some(count) => Floor::of(count.parse().expect("X402_FLOOR=fresh:N")),
            None => Floor::new(),
        },
    }
}

/// Distinct payments of the fresh floor: more than the caches keep of
/// libsecp256k1's tables for them.
const FRESH_FLOOR_PAYMENTS: u64 = 4096;

fn main() {
    if let Ok(spec) = std::env::var("X402_INSTRUCTIONS") {
        instruction_driver(&spec);
        return;
    }
    if let Ok(spec) = std::env::var("X402_INTERLEAVED") {
        interleaved_ratio(&spec);
        return;
    }
    // `cargo bench` passes --bench; `cargo test --benches` only runs the code.
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    if !benchmarking {
        let clock = FakeClock::at_unix_secs(NOW);
        let mut payments = SteadyPayments::new(clock.clone());
        serve_signed_ahead(&steady_service(clock), &mut payments, 100);
    }
    let mut criterion = Criterion::default()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3))
        .configure_from_args();
    if benchmarking {
        bench_x402(&mut criterion);
        bench_upto(&mut criterion);
    } else {
        // `cargo test --benches`: the upto payload verifies, once.
        let offer = upto_offer();
        let payment = Payer::dev(0).pay_upto(&offer, NOW).unwrap();
        assert!(verify_permit2_payload(
            &payment.payload,
            offer.network.eip155_chain_id().unwrap()
        ));
    }
    criterion.final_summary();
}

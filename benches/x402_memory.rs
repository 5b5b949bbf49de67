//! The bytes a paid request leaves behind: every heap byte the process
//! holds (a counting global allocator) across many paid requests through
//! the x402 layer, the in-memory replay store and an expiring development
//! ledger; the bytes retained per payment while its authorization is valid,
//! and what is left once every authorization has expired and been swept.
//!
//! `cargo bench --bench x402_memory --features x402` (50,000 payments;
//! `cargo test --benches` runs 2,000). Timings are `benches/x402.rs`'s: this
//! counter's atomic operations on every allocation and free would be in them.

use std::sync::Arc;

use cap::Cap;
use http::Request;
use http_body_util::Full;
use tower::ServiceExt;
use walletgate::client::payer::{Payer, sequential_nonce};
use walletgate::clock::FakeClock;
use walletgate::x402::{
    facilitator::{DevLedger, LocalEvmFacilitator},
    server::InMemoryNonceStore,
    wire::PaymentRequirements,
};

mod x402_paid;
use x402_paid::{NOW, PaidService, offer, paid_chat, ready};

// The reference gateway's allocator (examples/gateway/main.rs), counted.
#[global_allocator]
static ALLOCATOR: Cap<mimalloc::MiMalloc> = Cap::new(mimalloc::MiMalloc, usize::MAX);

/// Heap bytes held now.
fn heap() -> usize {
    ALLOCATOR.allocated()
}

/// Serves `count` fresh payments (nonces from `first`) at the clock's time.
fn pay(
    service: &impl PaidService,
    payer: &Payer,
    offer: &PaymentRequirements,
    now: u64,
    first: u64,
    count: u64,
) {
    for nonce in first..first + count {
        let header = payer
            .header_with_nonce(offer, now, sequential_nonce(nonce))
            .unwrap();
        let request = Request::post("/v1/chat/completions")
            .header("payment-signature", header)
            .body(Full::default())
            .unwrap();
        let response = ready(service.clone().oneshot(request)).unwrap();
        assert_eq!(response.status(), 200);
    }
}

/// The bytes each payment leaves behind while valid, and after expiry.
fn memory_report(payments: u64) {
    let clock = FakeClock::at_unix_secs(NOW);
    let ledger = Arc::new(DevLedger::new().with_expiry_clock(Arc::new(clock.clone())));
    let store = Arc::new(InMemoryNonceStore::new(Arc::new(clock.clone())));
    let facilitator = LocalEvmFacilitator::new(ledger.clone(), Arc::new(clock.clone()));
    let service = paid_chat(facilitator, Arc::new(clock.clone()), store.clone());
    let payer = Payer::dev(0);
    let offer = offer();
    // Warm-up: the quote cache, the EIP-712 domain cache, the recovery memo.
    pay(&service, &payer, &offer, NOW, 1, 100);
    let start = heap();

    // From (nearly) empty tables: their growth is part of the cost.
    pay(&service, &payer, &offer, NOW, 1_000, payments);
    let full = heap();
    let held = (store.len(), ledger.remembered_authorizations());
    let per_payment = full.saturating_sub(start) as f64 / payments as f64;

    // Every authorization expires (validBefore = now + 300); as many again are
    // paid later: each operation sweeps a few expired entries.
    clock.advance(std::time::Duration::from_secs(400));
    pay(&service, &payer, &offer, NOW + 400, 10_000_000, payments);
    let steady = heap();
    let growth = steady as f64 / full as f64 - 1.0;

    println!("x402 memory, {payments} paid requests (in-memory replay store, expiring dev ledger)");
    println!("  heap before:                   {start} B");
    println!(
        "  heap with them all valid:      {full} B (store {} entries, ledger {})",
        held.0, held.1
    );
    println!(
        "  retained bytes per payment:    {per_payment:.0} (replay entry + ledger entry, tables' growth included)"
    );
    println!(
        "  heap after they expired and as many were paid: {steady} B ({:+.1}%: the same live set)",
        growth * 100.0
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` only runs the code.
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    memory_report(if benchmarking { 50_000 } else { 2_000 });
}

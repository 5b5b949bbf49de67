//! walletgate's own settler on a real chain: settlement latency (p50, p99)
//! and paid throughput (verify + settle of distinct payments, concurrently).
//! Not a test, and not run in CI: `scripts/bench-settler.sh` starts anvil
//! twice (instant mining, then `--block-time 1`) and runs this against each.
//!
//! ```sh
//! bash scripts/bench-settler.sh                 # both chains, default sizes
//! WALLETGATE_BENCH_EVM_RPC_URL=http://127.0.0.1:8545 \
//!   cargo bench --bench settler --features evm-settler,client-pay
//! ```
//!
//! `SETTLER_BENCH_LATENCY_N` sequential settlements (default 100) and
//! `SETTLER_BENCH_THROUGHPUT_N` payments over `SETTLER_BENCH_WORKERS`
//! concurrent workers (default 200 over 16).

mod chain_bench;
#[path = "../tests/chain_support/mod.rs"]
mod chain_support;

use std::sync::Arc;
use std::time::Instant;

use alloy_primitives::U256;
use walletgate::client::payer::Payer;
use walletgate::x402::facilitator::evm_settler::{EvmSettler, SettlerKey};
use walletgate::x402::facilitator::{Facilitator, FacilitatorRequest};
use walletgate::x402::server::PaymentOption;
use walletgate::x402::wire::{AtomicAmount, Network, PaymentRequirements};

use chain_bench::{count, now, percentile};

const PRICE: u64 = 1_000;

fn payment(payer: &Payer, offer: &PaymentRequirements) -> FacilitatorRequest {
    FacilitatorRequest::new(payer.pay(offer, now()).unwrap(), offer.clone())
}

fn main() {
    let Ok(rpc) = std::env::var("WALLETGATE_BENCH_EVM_RPC_URL") else {
        eprintln!(
            "settler bench: set WALLETGATE_BENCH_EVM_RPC_URL (an anvil with USDC deployed by \
             tests/interop/chain/deploy.mjs), or run scripts/bench-settler.sh"
        );
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(rpc));
}

async fn run(rpc: String) {
    let key = SettlerKey::from_hex(&chain_support::fresh_payer_key().to_string()).unwrap();
    chain_support::set_eth_balance(&rpc, key.address(), 1_000_000_000_000_000_000_000).await;
    let (settler, _) = EvmSettler::builder(&rpc, key, Network::base_sepolia())
        .with_asset(chain_support::USDC)
        .connect()
        .await
        .unwrap();
    let settler = Arc::new(settler);
    let pay_to = Payer::from_key(chain_support::fresh_payer_key().0)
        .unwrap()
        .address_bytes();
    let offer = PaymentOption::base_sepolia_usdc(&pay_to.to_checksum(None))
        .unwrap()
        .requirements_for_amount(AtomicAmount::new(PRICE.into()));

    // Latency: one settlement at a time.
    let latency_n = count("SETTLER_BENCH_LATENCY_N", 100) as usize;
    let payer = Payer::from_key(chain_support::fresh_payer_key().0).unwrap();
    chain_support::mint(&rpc, payer.address_bytes(), PRICE * latency_n as u64).await;
    let mut settle_times = Vec::with_capacity(latency_n);
    let mut paid_times = Vec::with_capacity(latency_n);
    for _ in 0..latency_n {
        let request = payment(&payer, &offer);
        let started = Instant::now();
        assert!(settler.verify(&request).await.unwrap().is_valid);
        let verified = Instant::now();
        assert!(settler.settle(&request).await.unwrap().success);
        settle_times.push(verified.elapsed());
        paid_times.push(started.elapsed());
    }
    settle_times.sort();
    paid_times.sort();
    println!(
        "latency over {latency_n} settlements: settle p50 {:?} p99 {:?}; verify+settle p50 {:?} p99 {:?}",
        percentile(&settle_times, 0.5),
        percentile(&settle_times, 0.99),
        percentile(&paid_times, 0.5),
        percentile(&paid_times, 0.99),
    );

    // Throughput: distinct payments verified and settled by concurrent workers.
    let total = count("SETTLER_BENCH_THROUGHPUT_N", 200) as usize;
    let workers = count("SETTLER_BENCH_WORKERS", 16).max(1) as usize;
    let per_worker = total.div_ceil(workers);
    let mut payers = Vec::new();
    for _ in 0..workers {
        let payer = Payer::from_key(chain_support::fresh_payer_key().0).unwrap();
        chain_support::mint(&rpc, payer.address_bytes(), PRICE * per_worker as u64).await;
        payers.push(payer);
    }
    let before = chain_support::balance(&rpc, pay_to).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for payer in payers {
        let (settler, offer) = (settler.clone(), offer.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..per_worker {
                let request = payment(&payer, &offer);
                assert!(settler.verify(&request).await.unwrap().is_valid);
                assert!(settler.settle(&request).await.unwrap().success);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let paid = per_worker * workers;
    assert_eq!(
        chain_support::balance(&rpc, pay_to).await - before,
        U256::from(PRICE * paid as u64),
        "every payment landed once"
    );
    println!(
        "throughput: {paid} payments by {workers} workers in {elapsed:?}: {:.1} paid settlements/s",
        paid as f64 / elapsed.as_secs_f64()
    );
}

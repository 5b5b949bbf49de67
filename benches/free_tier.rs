//! FreeTierLimitLayer: per-request overhead, and memory with a million clients.
//!
//! `cargo bench --bench free_tier -- --measurement-time 3`
//!
//! The memory part runs first. Heap figures come from a counting global
//! allocator (every byte the process holds, live and peak); resident set size
//! from `/proc/self/statm` is printed beside them, though the allocator may
//! keep freed pages mapped.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cap::Cap;
use criterion::{BatchSize, Criterion};
use http::{Request, Response};
use http_body_util::Full;
use tower::{Layer, Service, service_fn};
use walletgate::clock::FakeClock;
use walletgate::free_tier::{
    FreeTierLimitLayer, FreeTierQuotas, FreeTierStore, InMemoryLimiter, KeyPrefixes,
};

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

type Body = Full<Bytes>;

/// Polls a future that never waits (the in-memory limiter and `service_fn`
/// answer at once) without a runtime in the measured loop.
fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the benchmarked future waited"),
    }
}

async fn ok(_request: Request<Body>) -> Result<Response<Body>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"{}"))))
}

fn request(peer: SocketAddr, path: &'static str) -> Request<Body> {
    let mut request = Request::builder()
        .uri(path)
        .body(Full::new(Bytes::new()))
        .unwrap_or_default();
    request.extensions_mut().insert(peer);
    request
}

fn client(index: u32) -> IpAddr {
    if index.is_multiple_of(2) {
        IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + index))
    } else {
        // A distinct /64 each: the worst case for IPv6 keying.
        IpAddr::V6(Ipv6Addr::from(
            (0x2001_0db8_u128 << 96) | (u128::from(index) << 64) | 1,
        ))
    }
}

fn is_free(request: &Request<Body>) -> bool {
    request.uri().path() == "/v1/free"
}

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident_pages * 4096)
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn memory_report(clients: u32) {
    let clock = FakeClock::at_unix_secs(1_800_000_000);
    let limiter =
        InMemoryLimiter::new_with_clock(FreeTierQuotas::default(), Arc::new(clock.clone()));
    limiter.set_auto_sweep_interval(None);
    let prefixes = KeyPrefixes::default();
    let start_heap = ALLOCATOR.allocated();
    let start_rss = rss_bytes();

    let began = Instant::now();
    for index in 0..clients {
        black_box(now_or_never(limiter.check(prefixes.key(client(index)))).ok());
    }
    let insert_time = began.elapsed();
    let full_heap = ALLOCATOR.allocated();
    let peak_heap = ALLOCATOR.max_allocated();
    let full_rss = rss_bytes();
    let tracked = limiter.len();

    // An hour (and a millisecond) later every window is empty: every key is idle.
    clock.advance(Duration::from_millis(3_600_001));
    let began = Instant::now();
    let report = limiter.sweep();
    let sweep_time = began.elapsed();
    let swept_heap = ALLOCATOR.allocated();
    let swept_rss = rss_bytes();

    let per_key = (full_heap - start_heap) as f64 / f64::from(clients);
    let peak_per_key = (peak_heap.saturating_sub(start_heap)) as f64 / f64::from(clients);
    let back_within = swept_heap as f64 / start_heap as f64 - 1.0;
    println!("free_tier memory, {clients} distinct clients (half IPv4, half distinct IPv6 /64s)");
    println!("  tracked keys after inserting:  {tracked}");
    println!(
        "  heap at start:                 {start_heap} B ({})",
        mib(start_heap)
    );
    println!(
        "  heap with all keys:            {full_heap} B ({})",
        mib(full_heap)
    );
    println!(
        "  peak heap (incl. table growth): {peak_heap} B ({})",
        mib(peak_heap)
    );
    println!(
        "  bytes per tracked key:         {per_key:.1} (peak {peak_per_key:.1}; target <= 256)"
    );
    println!(
        "  sweep: removed {} keys, {} left, in {sweep_time:?}; inserting took {insert_time:?}",
        report.removed, report.remaining
    );
    println!(
        "  heap after sweep:              {swept_heap} B ({}), {:+.2}% of start (target within 10%)",
        mib(swept_heap),
        back_within * 100.0
    );
    if let (Some(start), Some(full), Some(swept)) = (start_rss, full_rss, swept_rss) {
        println!(
            "  RSS start / full / after sweep: {} / {} / {}",
            mib(start as usize),
            mib(full as usize),
            mib(swept as usize)
        );
    }
    println!(
        "  targets: bytes/key <= 256: {}; heap back within 10%: {}",
        if per_key <= 256.0 { "met" } else { "MISSED" },
        if back_within <= 0.10 { "met" } else { "MISSED" }
    );
}

fn overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("free_tier");
    let peer = SocketAddr::from(([198, 51, 100, 7], 4000));

    let mut bare = service_fn(ok);
    group.bench_function("inner_service_alone", |b| {
        b.iter_batched(
            || request(peer, "/v1/free"),
            |req| now_or_never(bare.call(req)),
            BatchSize::SmallInput,
        )
    });

    let mut passthrough =
        FreeTierLimitLayer::new(is_free as fn(&Request<Body>) -> bool).layer(service_fn(ok));
    group.bench_function("not_free_pass_through", |b| {
        b.iter_batched(
            || request(peer, "/v1/paid"),
            |req| now_or_never(passthrough.call(req)),
            BatchSize::SmallInput,
        )
    });

    // Quotas no run can exhaust, over 10,000 rotating clients: the admitted path.
    let roomy = FreeTierQuotas::new(FreeTierQuotas::MAX_REQUESTS, FreeTierQuotas::MAX_REQUESTS)
        .unwrap_or_default();
    let mut admitted =
        FreeTierLimitLayer::new_with_quotas(is_free as fn(&Request<Body>) -> bool, roomy)
            .layer(service_fn(ok));
    let mut index = 0u32;
    group.bench_function("free_admitted", |b| {
        b.iter_batched(
            || {
                index = (index + 1) % 10_000;
                request(SocketAddr::new(client(index), 1), "/v1/free")
            },
            |req| now_or_never(admitted.call(req)),
            BatchSize::SmallInput,
        )
    });

    // One client over its quota: the 429 path renders an envelope.
    let mut refused =
        FreeTierLimitLayer::new(is_free as fn(&Request<Body>) -> bool).layer(service_fn(ok));
    for _ in 0..30 {
        let _ = now_or_never(refused.call(request(peer, "/v1/free")));
    }
    group.bench_function("free_refused_429", |b| {
        b.iter_batched(
            || request(peer, "/v1/free"),
            |req| now_or_never(refused.call(req)),
            BatchSize::SmallInput,
        )
    });
    group.finish();

    // The limiter alone, with a million clients tracked (cache-cold lookups).
    let limiter = InMemoryLimiter::new(roomy);
    let prefixes = KeyPrefixes::default();
    for index in 0..1_000_000 {
        let _ = limiter.check_now(prefixes.key(client(index)));
    }
    let mut index = 0u32;
    c.bench_function("free_tier/limiter_check_with_1m_keys", |b| {
        b.iter(|| {
            index = (index + 7919) % 1_000_000;
            black_box(limiter.check_now(prefixes.key(client(index))))
        })
    });
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not, and only
    // needs the code to run.
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    memory_report(if benchmarking { 1_000_000 } else { 10_000 });
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    if benchmarking {
        overhead(&mut criterion);
    }
    criterion.final_summary();
}

//! A constant-rate (open-loop) HTTP/1.1 load generator for
//! `scripts/bench-vs-x402-axum.sh --one-core`: request `i` is due at
//! `start + i / rate` whatever the server does, and its latency is measured
//! from that intended time (as wrk2 does), so a server that stalls is charged
//! for every request that queued behind the stall (no coordinated omission).
//! Each paid request carries its own pre-signed `PAYMENT-SIGNATURE`, one per
//! line of a file, which a stock constant-rate tool cannot vary.
//!
//! `open_loop URL RATE SECONDS CONNECTIONS METHOD EXPECT [BODY [PAYMENTS_FILE]]`
//!
//! One thread (pin it with `taskset`): between sends it spins on the clock
//! rather than sleeping (tokio's timer rounds to a millisecond, which would
//! send in bursts), so give it a core of its own. It prints one line:
//! `OPEN_LOOP_RESULT rate=.. sent=.. unexpected=.. errors=.. p50_ms=.. p90_ms=.. p99_ms=.. p999_ms=.. max_ms=.. send_lag_p99_ms=..`
//! where `send_lag` is how late the generator itself sent (when it is more
//! than a small fraction of p99, the generator, not the server, was short).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Plan {
    address: String,
    requests: Vec<Vec<u8>>,
    interval: Duration,
    expect: u16,
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    send_lags_us: Vec<u64>,
    unexpected: u64,
    errors: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 6 {
        eprintln!(
            "usage: open_loop URL RATE SECONDS CONNECTIONS METHOD EXPECT [BODY [PAYMENTS_FILE]]"
        );
        std::process::exit(2);
    }
    let url = &args[0];
    let rate: f64 = args[1].parse().expect("RATE: requests per second");
    let seconds: f64 = args[2].parse().expect("SECONDS");
    let connections: usize = args[3].parse().expect("CONNECTIONS");
    let method = &args[4];
    let expect: u16 = args[5].parse().expect("EXPECT: a status");
    let body = args.get(6).map(String::as_str).unwrap_or("");
    let payments: Option<Vec<String>> = args.get(7).filter(|f| !f.is_empty()).map(|file| {
        std::fs::read_to_string(file)
            .expect("PAYMENTS_FILE")
            .lines()
            .map(str::to_owned)
            .collect()
    });

    let rest = url
        .strip_prefix("http://")
        .expect("URL: http://host:port/path");
    let (address, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let total = (rate * seconds).round() as usize;
    if let Some(payments) = &payments
        && payments.len() < total
    {
        eprintln!(
            "open_loop: {total} requests need {total} payments, the file has {}",
            payments.len()
        );
        std::process::exit(2);
    }
    // Built before the clock starts: the run only writes bytes.
    let requests = (0..total)
        .map(|i| {
            let mut request = format!(
                "{method} {path} HTTP/1.1\r\nHost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            );
            if let Some(payments) = &payments {
                request.push_str("PAYMENT-SIGNATURE: ");
                request.push_str(&payments[i]);
                request.push_str("\r\n");
            }
            request.push_str("\r\n");
            request.push_str(body);
            request.into_bytes()
        })
        .collect();
    let plan = Rc::new(Plan {
        address: address.to_owned(),
        requests,
        interval: Duration::from_secs_f64(1.0 / rate),
        expect,
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let local = tokio::task::LocalSet::new();
    let tally = Rc::new(RefCell::new(Tally::default()));
    let started = local.block_on(&runtime, async {
        let next = Rc::new(std::cell::Cell::new(0usize));
        let start = Instant::now() + Duration::from_millis(200);
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                tokio::task::spawn_local(worker(plan.clone(), next.clone(), start, tally.clone()))
            })
            .collect();
        for worker in workers {
            worker.await.expect("a worker");
        }
        start
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut tally = tally.borrow_mut();
    let sent = tally.latencies_us.len() as u64 + tally.errors;
    tally.latencies_us.sort_unstable();
    tally.send_lags_us.sort_unstable();
    let at = |sorted: &[u64], q: f64| -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[index] as f64 / 1000.0
    };
    println!(
        "OPEN_LOOP_RESULT rate={rate:.0} sent={sent} achieved_rps={:.0} unexpected={} errors={} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} p999_ms={:.3} max_ms={:.3} send_lag_p99_ms={:.3}",
        sent as f64 / elapsed,
        tally.unexpected,
        tally.errors,
        at(&tally.latencies_us, 0.50),
        at(&tally.latencies_us, 0.90),
        at(&tally.latencies_us, 0.99),
        at(&tally.latencies_us, 0.999),
        at(&tally.latencies_us, 1.0),
        at(&tally.send_lags_us, 0.99),
    );
}

async fn worker(
    plan: Rc<Plan>,
    next: Rc<std::cell::Cell<usize>>,
    start: Instant,
    tally: Rc<RefCell<Tally>>,
) {
    let mut stream: Option<TcpStream> = None;
    let mut buffer = Vec::with_capacity(16 * 1024);
    loop {
        let index = next.get();
        if index >= plan.requests.len() {
            return;
        }
        next.set(index + 1);
        let intended = start + plan.interval * index as u32;
        loop {
            let now = Instant::now();
            if now >= intended {
                break;
            }
            let wait = intended - now;
            if wait > Duration::from_millis(3) {
                tokio::time::sleep(wait - Duration::from_millis(2)).await;
            } else {
                tokio::task::yield_now().await;
            }
        }
        let sent_at = Instant::now();
        if stream.is_none() {
            stream = TcpStream::connect(&plan.address).await.ok();
            if let Some(stream) = &stream {
                let _ = stream.set_nodelay(true);
            }
        }
        let status = match stream.as_mut() {
            Some(stream) => exchange(stream, &plan.requests[index], &mut buffer).await,
            None => None,
        };
        let done = Instant::now();
        let mut tally = tally.borrow_mut();
        tally
            .send_lags_us
            .push(sent_at.duration_since(intended).as_micros() as u64);
        match status {
            Some(status) => {
                tally
                    .latencies_us
                    .push(done.duration_since(intended).as_micros() as u64);
                if status != plan.expect {
                    tally.unexpected += 1;
                }
            }
            None => {
                tally.errors += 1;
                stream = None;
            }
        }
    }
}

/// Writes one request and reads its whole answer; `None` on any I/O or
/// framing error (the connection is then dropped).
async fn exchange(stream: &mut TcpStream, request: &[u8], buffer: &mut Vec<u8>) -> Option<u16> {
    stream.write_all(request).await.ok()?;
    buffer.clear();
    let head_end = loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            break end + 4;
        }
        read_more(stream, buffer).await?;
    };
    let head = std::str::from_utf8(&buffer[..head_end]).ok()?;
    let status: u16 = head.get(9..12)?.parse().ok()?;
    let mut length = None;
    let mut chunked = false;
    for line in head.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    if chunked {
        let mut at = head_end;
        loop {
            let line_end = loop {
                if let Some(end) = find(&buffer[at..], b"\r\n") {
                    break at + end;
                }
                read_more(stream, buffer).await?;
            };
            let size_text = std::str::from_utf8(&buffer[at..line_end]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            // The chunk, its CRLF; the last (empty) chunk ends with one CRLF.
            let chunk_end = line_end + 2 + size + 2;
            while buffer.len() < chunk_end {
                read_more(stream, buffer).await?;
            }
            at = chunk_end;
            if size == 0 {
                return Some(status);
            }
        }
    }
    let end = head_end + length.unwrap_or(0);
    while buffer.len() < end {
        read_more(stream, buffer).await?;
    }
    Some(status)
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 8192];
    let read = stream.read(&mut chunk).await.ok()?;
    if read == 0 {
        return None;
    }
    buffer.extend_from_slice(&chunk[..read]);
    Some(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

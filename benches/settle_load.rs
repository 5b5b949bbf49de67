//! A settlement load, as a busy gateway offers it: N distinct EIP-3009
//! payments (default 600) signed beforehand by funded payers, then all sent at
//! once, each as its own concurrent request, to a facilitator's `/settle` or
//! as paid chats to the gateway example with its own settler. The node is
//! reached through `scripts/load/rpc-latency-proxy.mjs`, whose counts give
//! the RPC calls per settlement. Not a test, and not run in CI:
//! `scripts/bench-settler.sh` starts anvil, the proxy and the servers, and
//! runs this against each.
//!
//! Reports settlements per second (from the first request sent to the last
//! settled), p50/p99 of the settle latency (seconds, and in block times),
//! the node's calls per settlement, whether every payment landed exactly once
//! (the payee's balance), and the settler's nonce at the end: the count of
//! mined transactions against the pending one, and the node's pool (a
//! transaction queued behind a missing nonce is a gap).
//!
//! Configured by environment (the script sets it):
//!
//! | variable | meaning |
//! |---|---|
//! | `SETTLE_LOAD_TARGET` | `facilitator` (`POST {url}/settle`) or `gateway` (`POST {url}/v1/chat/completions`, paid) |
//! | `SETTLE_LOAD_URL` | the server's base URL |
//! | `SETTLE_LOAD_CHAIN_RPC` | the node itself (minting and the checks at the end bypass the proxy) |
//! | `SETTLE_LOAD_PROXY` | the latency proxy's base URL (its `/stats`) |
//! | `SETTLE_LOAD_SETTLER` | the settler's address |
//! | `SETTLE_LOAD_PAY_TO` | facilitator: the payee (a gateway's comes from its quote) |
//! | `SETTLE_LOAD_N` | payments (default 600) |
//! | `SETTLE_LOAD_PER_PAYER` | payments signed by one payer (default 10) |
//! | `SETTLE_LOAD_DEADLINE_SECS` | the run's bound: requests not settled by then count as unsettled (default 240) |
//! | `SETTLE_LOAD_BLOCK_SECS` | the chain's block time, for latency in blocks (default 1) |
//! | `SETTLE_LOAD_LABEL` | the label of the result line |

mod chain_bench;
#[path = "../tests/chain_support/mod.rs"]
mod chain_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use alloy_primitives::{Address, U256};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use walletgate::client::payer::Payer;
use walletgate::x402::server::PaymentOption;
use walletgate::x402::wire::{AtomicAmount, PaymentRequired, PaymentRequirements, codec};

use chain_bench::{count, now, percentile};

/// The price of one payment in the facilitator runs, in USDC units.
const FACILITATOR_PRICE: u64 = 1_000;

/// The gateway's paid chat: a paid model answered by the embedded echo upstream.
const PAID_CHAT: &str = r#"{"model":"openai/gpt-5-mini","max_tokens":16,"messages":[{"role":"user","content":"settle"}]}"#;

/// How long a settle answered `settlement_pending` waits before asking again.
const PENDING_RETRY: Duration = Duration::from_secs(1);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("settle_load: set {name} (or run scripts/bench-settler.sh)");
        std::process::exit(2)
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Facilitator,
    Gateway,
}

/// One payment, ready to send: the request body and, for the gateway, its header.
struct Signed {
    body: Bytes,
    payment_signature: Option<String>,
}

/// How one request ended.
enum Outcome {
    Settled(Duration),
    Refused(String),
    Unsettled,
}

fn main() {
    // The bench harness passes `--bench`; nothing else is read from the arguments.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let target = match var("SETTLE_LOAD_TARGET").as_str() {
        "facilitator" => Target::Facilitator,
        "gateway" => Target::Gateway,
        other => panic!("SETTLE_LOAD_TARGET: facilitator or gateway, not {other}"),
    };
    let url = var("SETTLE_LOAD_URL");
    let chain = var("SETTLE_LOAD_CHAIN_RPC");
    let proxy = var("SETTLE_LOAD_PROXY");
    let settler: Address = var("SETTLE_LOAD_SETTLER")
        .parse()
        .expect("SETTLE_LOAD_SETTLER");
    let label = std::env::var("SETTLE_LOAD_LABEL").unwrap_or_else(|_| "settle_load".into());
    let total = count("SETTLE_LOAD_N", 600).max(1) as usize;
    let per_payer = count("SETTLE_LOAD_PER_PAYER", 10).max(1) as usize;
    let deadline = Duration::from_secs(count("SETTLE_LOAD_DEADLINE_SECS", 240));
    let block_secs = count("SETTLE_LOAD_BLOCK_SECS", 1).max(1) as f64;

    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(total)
        .build(connector);

    // The offer every payment pays: ours for a facilitator, the gateway's own quote.
    let (offer, quote) = match target {
        Target::Facilitator => {
            let pay_to = var("SETTLE_LOAD_PAY_TO");
            let offer = PaymentOption::base_sepolia_usdc(&pay_to)
                .unwrap()
                .requirements_for_amount(AtomicAmount::new(FACILITATOR_PRICE.into()));
            (offer, None)
        }
        Target::Gateway => {
            let quote = gateway_quote(&client, &url).await;
            let offer = walletgate::client::payer::first_exact_evm_offer(&quote)
                .expect("the gateway quotes an exact EVM offer")
                .clone();
            (offer, Some(quote))
        }
    };
    let price: u64 = offer
        .amount
        .to_string()
        .parse()
        .expect("an amount in units");
    let pay_to: Address = offer.pay_to.parse().expect("payTo is an address");

    // Payers, funded at once (one mint each, mined together).
    let payer_count = total.div_ceil(per_payer);
    let payers: Vec<Payer> = (0..payer_count)
        .map(|_| Payer::from_key(chain_support::fresh_payer_key().0).unwrap())
        .collect();
    let mints: Vec<_> = payers
        .iter()
        .map(|payer| {
            let (chain, address) = (chain.clone(), payer.address_bytes());
            tokio::spawn(async move {
                chain_support::mint(&chain, address, price * per_payer as u64).await
            })
        })
        .collect();
    for mint in mints {
        mint.await.unwrap();
    }
    let signed: Vec<Signed> = (0..total)
        .map(|index| sign(target, &payers[index / per_payer], &offer, quote.as_ref()))
        .collect();

    let paid_before = chain_support::balance(&chain, pay_to).await;
    let nonce_before = nonce(&chain, settler, "latest").await;
    let block_before = block_number(&chain).await;
    let _ = send(
        &client,
        "POST",
        &format!("{proxy}/stats/reset"),
        Bytes::new(),
        None,
    )
    .await;

    // Every payment at once.
    let cpu_before = cpu_ticks_of_watched();
    let started = Instant::now();
    let stop_at = started + deadline;
    let requests: Vec<_> = signed
        .into_iter()
        .map(|signed| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { settle_one(&client, target, &url, signed, stop_at).await })
        })
        .collect();
    let mut latencies = Vec::with_capacity(total);
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let mut unsettled = 0;
    for request in requests {
        match request.await.unwrap() {
            Outcome::Settled(latency) => latencies.push(latency),
            Outcome::Refused(reason) => *refusals.entry(reason).or_default() += 1,
            Outcome::Unsettled => unsettled += 1,
        }
    }
    let cpu_after = cpu_ticks_of_watched();
    latencies.sort();
    let settled = latencies.len();
    let span = latencies.last().copied().unwrap_or(started.elapsed());
    let proxy_stats: Value = send(
        &client,
        "GET",
        &format!("{proxy}/stats"),
        Bytes::new(),
        None,
    )
    .await
    .map(|(_, body)| serde_json::from_slice(&body).unwrap_or(Value::Null))
    .unwrap_or(Value::Null);

    // What reached the chain: the pool drained (bounded), then the balances and nonces.
    let pool = drained_pool(&chain).await;
    let landed_units = chain_support::balance(&chain, pay_to).await - paid_before;
    let landed = (landed_units / U256::from(price)).to::<u64>();
    let latest = nonce(&chain, settler, "latest").await;
    let pending = nonce(&chain, settler, "pending").await;
    let per_block = transactions_per_block(&chain, block_before).await;

    let calls = proxy_stats["calls"].as_u64().unwrap_or(0);
    let http_requests = proxy_stats["httpRequests"].as_u64().unwrap_or(0);
    let per_settlement = |n: u64| n as f64 / settled.max(1) as f64;
    let p50 = percentile(&latencies, 0.5).as_secs_f64();
    let p99 = percentile(&latencies, 0.99).as_secs_f64();
    let rate = settled as f64 / span.as_secs_f64().max(f64::EPSILON);
    let mut by_method: Vec<(String, u64)> = proxy_stats["byMethod"]
        .as_object()
        .map(|methods| {
            methods
                .iter()
                .map(|(method, n)| (method.clone(), n.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    by_method.sort_by_key(|(_, calls)| std::cmp::Reverse(*calls));
    let methods = by_method
        .iter()
        .map(|(method, n)| format!("{method} {:.2}", per_settlement(*n)))
        .collect::<Vec<_>>()
        .join(", ");
    let refused = refusals
        .iter()
        .map(|(reason, n)| format!("{reason} x{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    println!(
        "{label}: {settled}/{total} settled in {:.2} s = {rate:.1} settlements/s; settle p50 {p50:.2} s \
         ({:.1} blocks) p99 {p99:.2} s ({:.1} blocks); unsettled at {} s: {unsettled}; refused: {}",
        span.as_secs_f64(),
        p50 / block_secs,
        p99 / block_secs,
        deadline.as_secs(),
        if refused.is_empty() { "none" } else { &refused },
    );
    println!(
        "{label}: RPC {:.2} calls ({:.2} HTTP requests) per settlement: {methods}",
        per_settlement(calls),
        per_settlement(http_requests),
    );
    println!(
        "{label}: landed {landed} payments on the payee ({}); settler sent {} transactions, nonce latest {latest} \
         pending {pending} (gap {}); node pool after the run: {pool}",
        if landed == settled as u64 {
            "every settled payment once"
        } else {
            "NOT the settled count"
        },
        latest.saturating_sub(nonce_before),
        pending.saturating_sub(latest),
    );
    println!(
        "{label}: when they answered (settlements per half second): {}; transactions per block after the start: {per_block}",
        answered_per_half_second(&latencies),
    );
    if !cpu_before.is_empty() {
        let ticks_per_second = 100.0; // USER_HZ on Linux
        let used = cpu_before
            .iter()
            .zip(&cpu_after)
            .map(|((name, before), (_, after))| {
                let seconds = after.saturating_sub(*before) as f64 / ticks_per_second;
                format!(
                    "{name} {seconds:.2} s ({:.2} ms per settlement)",
                    seconds * 1000.0 / settled.max(1) as f64
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        println!("{label}: CPU used until the last answer: {used}");
    }
    println!(
        "SETTLE_LOAD_RESULT label={label} n={total} settled={settled} unsettled={unsettled} refused={} \
         rate={rate:.1} p50_s={p50:.2} p99_s={p99:.2} p50_blocks={:.1} p99_blocks={:.1} \
         calls_per_settlement={:.2} http_per_settlement={:.2} landed={landed} nonce_gap={} pool={}",
        refusals.values().sum::<usize>(),
        p50 / block_secs,
        p99 / block_secs,
        per_settlement(calls),
        per_settlement(http_requests),
        pending.saturating_sub(latest),
        pool.replace(' ', ""),
    );
}

/// One payment signed for the target: a facilitator's `/settle` body, or a
/// paid chat carrying the `PAYMENT-SIGNATURE` of the gateway's quote.
fn sign(
    target: Target,
    payer: &Payer,
    offer: &PaymentRequirements,
    quote: Option<&PaymentRequired>,
) -> Signed {
    match target {
        Target::Facilitator => {
            let payment = payer.pay(offer, now()).unwrap();
            let body = json!({
                "x402Version": 2,
                "paymentPayload": payment,
                "paymentRequirements": offer,
            });
            Signed {
                body: Bytes::from(serde_json::to_vec(&body).unwrap()),
                payment_signature: None,
            }
        }
        Target::Gateway => {
            let payment = payer.pay_quote(quote.unwrap(), now()).unwrap();
            Signed {
                body: Bytes::from_static(PAID_CHAT.as_bytes()),
                payment_signature: Some(codec::encode(&payment)),
            }
        }
    }
}

/// Sends one payment until it settles, is refused, or the run's bound passes.
/// A facilitator that answers `settlement_pending` (a receipt not seen yet) is
/// asked again with the same body, as its callers do.
async fn settle_one(
    client: &HttpClient,
    target: Target,
    url: &str,
    signed: Signed,
    stop_at: Instant,
) -> Outcome {
    let started = Instant::now();
    let endpoint = match target {
        Target::Facilitator => format!("{url}/settle"),
        Target::Gateway => format!("{url}/v1/chat/completions"),
    };
    loop {
        let remaining = stop_at.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Outcome::Unsettled;
        }
        let answer = tokio::time::timeout(
            remaining,
            send(
                client,
                "POST",
                &endpoint,
                signed.body.clone(),
                signed.payment_signature.as_deref(),
            ),
        )
        .await;
        let Ok(answer) = answer else {
            return Outcome::Unsettled;
        };
        let (status, body) = match answer {
            Ok(answer) => answer,
            Err(error) => return Outcome::Refused(format!("transport: {error}")),
        };
        match target {
            Target::Gateway if status == 200 => return Outcome::Settled(started.elapsed()),
            Target::Gateway => return Outcome::Refused(format!("HTTP {status}")),
            Target::Facilitator => {
                let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if answer["success"] == Value::Bool(true) {
                    return Outcome::Settled(started.elapsed());
                }
                let reason = answer["errorReason"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("HTTP {status}"));
                if reason != "settlement_pending" {
                    return Outcome::Refused(reason);
                }
                tokio::time::sleep(PENDING_RETRY.min(remaining)).await;
            }
        }
    }
}

/// One HTTP exchange: its status and whole body.
async fn send(
    client: &HttpClient,
    method: &str,
    url: &str,
    body: Bytes,
    payment_signature: Option<&str>,
) -> Result<(u16, Bytes), String> {
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    if let Some(signature) = payment_signature {
        request = request.header("payment-signature", signature);
    }
    let answer = client
        .request(request.body(Full::new(body)).unwrap())
        .await
        .map_err(|error| error.to_string())?;
    let status = answer.status().as_u16();
    let body = answer
        .into_body()
        .collect()
        .await
        .map_err(|error| error.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// The gateway's quote for the paid chat (its 402's `PAYMENT-REQUIRED`).
async fn gateway_quote(client: &HttpClient, url: &str) -> PaymentRequired {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(PAID_CHAT.as_bytes())))
        .unwrap();
    let answer = client.request(request).await.expect("the gateway answers");
    assert_eq!(answer.status(), 402, "an unpaid chat is quoted");
    let header = answer
        .headers()
        .get("payment-required")
        .expect("a PAYMENT-REQUIRED header");
    codec::decode(header.as_bytes()).expect("a quote")
}

/// The CPU ticks (user + system) of each process named in
/// `SETTLE_LOAD_WATCH` (`name:pid` pairs, space-separated): where a run's CPU
/// went, node, proxy or server.
fn cpu_ticks_of_watched() -> Vec<(String, u64)> {
    let watched = std::env::var("SETTLE_LOAD_WATCH").unwrap_or_default();
    watched
        .split_whitespace()
        .filter_map(|pair| pair.split_once(':'))
        .map(|(name, pid)| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
            let ticks = |index: usize| {
                fields
                    .get(index)
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            (name.to_owned(), ticks(11) + ticks(12))
        })
        .collect()
}

/// How many settlements answered in each half second after the start, as
/// `0.5s:N` pairs: where the run's time went.
fn answered_per_half_second(latencies: &[Duration]) -> String {
    let mut buckets: BTreeMap<u64, usize> = BTreeMap::new();
    for latency in latencies {
        *buckets
            .entry((latency.as_secs_f64() * 2.0).ceil() as u64)
            .or_default() += 1;
    }
    buckets
        .iter()
        .map(|(half, n)| format!("{:.1}s:{n}", *half as f64 / 2.0))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn block_number(chain: &str) -> u64 {
    let number = chain_support::rpc(chain, "eth_blockNumber", json!([])).await;
    u64::from_str_radix(
        number.as_str().unwrap_or("0x0").trim_start_matches("0x"),
        16,
    )
    .unwrap_or(0)
}

/// The transaction count of each block mined after `from`, with the seconds
/// between the blocks: how the chain packed the run.
async fn transactions_per_block(chain: &str, from: u64) -> String {
    let to = block_number(chain).await;
    let mut blocks = Vec::new();
    for number in (from + 1)..=to.min(from + 30) {
        let block = chain_support::rpc(
            chain,
            "eth_getBlockByNumber",
            json!([format!("{number:#x}"), false]),
        )
        .await;
        let count = block["transactions"].as_array().map_or(0, Vec::len);
        if count > 0 {
            blocks.push(format!("#{}:{count}", number - from));
        }
    }
    blocks.join(" ")
}

/// The settler's transaction count at `block` (`latest`: mined; `pending`: with the pool).
async fn nonce(chain: &str, settler: Address, block: &str) -> u64 {
    let count = chain_support::rpc(chain, "eth_getTransactionCount", json!([settler, block])).await;
    u64::from_str_radix(count.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// The node's pool once it drained (at most 30 s), as `pending P queued Q`.
async fn drained_pool(chain: &str) -> String {
    let mut status = Value::Null;
    for _ in 0..60 {
        status = chain_support::rpc(chain, "txpool_status", json!([])).await;
        let pending = status["pending"].as_str().unwrap_or("0x0");
        let queued = status["queued"].as_str().unwrap_or("0x0");
        if pending == "0x0" && queued == "0x0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let field = |name: &str| {
        u64::from_str_radix(
            status[name]
                .as_str()
                .unwrap_or("0x0")
                .trim_start_matches("0x"),
            16,
        )
        .unwrap_or(0)
    };
    format!("pending {} queued {}", field("pending"), field("queued"))
}

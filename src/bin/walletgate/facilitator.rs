//! `walletgate facilitator --rpc-url URL --key-file F --network eip155:<id>
//! --asset ADDR… --pay-to ADDR… [--listen ADDR] [--auth-token-file F]
//! [--redis-url URL [--redis-mode cluster]] [--header-timeout-secs S]
//! [--idle-timeout-secs S] [--max-connections N]`
//!
//! With `--redis-url`, settlement records (with each first caller's
//! `Idempotency-Key` and the one-success mark) and the settler key's nonces
//! live in Redis: any number of replicas serve one settler key behind a load
//! balancer. While Redis cannot answer, `/readyz` is 503 and `/settle` 503
//! with `Retry-After`, nothing sent.
//!
//! The standard facilitator API backed by walletgate's own settler, one
//! chain per process: `POST /verify`, `POST /settle` (body
//! `{x402Version, paymentPayload, paymentRequirements}`), `GET /supported`,
//! and the public probes `GET`/`HEAD /healthz`, `/readyz`. Every verdict (a
//! refused recipient, a replay, a high-`s` signature) is the standard JSON
//! answer with status 200; only a missing or wrong bearer token is a 401, and
//! a node that cannot answer a 503. Each verify and settle decision is one
//! log line on stderr (`RUST_LOG`, default `info`): payer, transaction,
//! reason; never a key, token or signature. Connections are bounded before
//! authentication ([`connections`]). A settle whose transaction has no receipt yet
//! answers `settlement_pending` with the transaction (as the TS SDK reads
//! it); the same `/settle` again reports its outcome, the same transaction.
//!
//! One `success: true` per authorization: a server that serves its answer
//! on success (the official ones) serves a payment once. A caller that lost
//! its answer asks again with the `Idempotency-Key` of its first `/settle`
//! and gets that answer again; any other copy is refused
//! `invalid_exact_evm_nonce_already_used`, its `errorMessage` naming the
//! settling transaction.

mod connections;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::Address;
use bytes::Bytes;
use clap::Args;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::json;
use sha2::Digest as _;
use walletgate::redis::{
    RedisConfig, RedisConnection, RedisMode, RedisNonceAllocator, RedisSettlementRecords,
    RedisUrlError,
};
use walletgate::x402::facilitator::evm_settler::{
    DEFAULT_GAS_CAP, DEFAULT_RECEIPT_TIMEOUT, EvmSettler, SettlerKey,
};
use walletgate::x402::facilitator::{
    Facilitator, FacilitatorError, FacilitatorErrorKind, FacilitatorRequest,
    IDEMPOTENCY_KEY_HEADER, IdempotencyKey, InvalidIdempotencyKey,
};
use walletgate::x402::wire::{Network, SettleResponse, UptoPayment};

use crate::exit::{Exit, Failure, Format};
use connections::Limits;

/// Shortest bearer token accepted, in bytes: a short one could be guessed.
const MIN_TOKEN_BYTES: usize = 32;

/// Largest request body read, in bytes.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The TS SDK's reason for a broadcast transaction with no receipt yet.
const SETTLEMENT_PENDING: &str = "settlement_pending";

/// `walletgate facilitator`.
#[derive(Args)]
pub(crate) struct FacilitatorArgs {
    /// The chain's JSON-RPC endpoint (http:// or https://; never printed).
    /// A URL holding a provider's API key is better given in the environment
    /// than on the command line, which every user of the machine can read
    #[arg(
        long,
        value_name = "URL",
        env = "WALLETGATE_FACILITATOR_RPC_URL",
        hide_env_values = true
    )]
    rpc_url: String,
    /// The settler's private key: 64 hex digits, 0x optional, mode 0600
    #[arg(long, value_name = "FILE")]
    key_file: PathBuf,
    /// The chain, as eip155:<chain id>
    #[arg(long, value_name = "eip155:ID")]
    network: String,
    /// A token to settle (repeatable; at least one)
    #[arg(long = "asset", value_name = "ADDR", required = true)]
    assets: Vec<String>,
    /// A recipient this facilitator pays to (repeatable; at least one):
    /// others are refused, so nobody relays transfers on the settler's gas
    #[arg(long = "pay-to", value_name = "ADDR", required = true)]
    pay_to: Vec<String>,
    /// Where to listen
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4020")]
    listen: SocketAddr,
    /// A file holding the bearer token callers must send (required unless
    /// listening on loopback)
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,
    /// Seconds to wait for a receipt before replacing a stuck transaction
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_RECEIPT_TIMEOUT.as_secs())]
    receipt_timeout_secs: u64,
    /// Blocks to wait for on top of the one that mined a transfer
    #[arg(long, default_value_t = 0)]
    confirmations: u64,
    /// The most gas one settlement transaction may use: a payment needing
    /// more (a smart wallet whose check loops) is refused at verify
    #[arg(long, value_name = "GAS", default_value_t = DEFAULT_GAS_CAP)]
    gas_cap: u64,
    /// The least value settled, in the asset's units (zero-value
    /// authorizations cost gas and move nothing)
    #[arg(long, value_name = "UNITS", default_value_t = 1)]
    min_amount: u128,
    /// Seconds a client has to send a request's headers, from its connection's
    /// start or the previous answer (an idle keep-alive connection closes then)
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Seconds a connection may go with no byte moving while no request is
    /// worked on (an answer not read), or wait for a request's whole body
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_secs: u64,
    /// A Redis shared by every replica of this facilitator on one settler
    /// key (records, Idempotency-Keys, nonces); without it, one process per
    /// key. `redis://host:port[/db]`, or with --redis-mode cluster the seed
    /// nodes, comma-separated (never printed)
    #[arg(
        long,
        value_name = "URL",
        env = "WALLETGATE_FACILITATOR_REDIS_URL",
        hide_env_values = true
    )]
    redis_url: Option<String>,
    /// standalone (one Redis, or a primary behind one address) or cluster
    #[arg(
        long,
        value_name = "MODE",
        default_value = "standalone",
        requires = "redis_url"
    )]
    redis_mode: String,
    /// The prefix of every Redis key (replicas of one facilitator share it)
    #[arg(long, value_name = "PREFIX", default_value = "walletgate-facilitator")]
    redis_prefix: String,
    /// Replicas of the Redis primary each settlement record waits for (WAIT)
    #[arg(long, value_name = "N", default_value_t = 0)]
    redis_wait_replicas: u32,
    /// Connections served at once; more wait in the listen queue
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
}

/// What every request needs.
struct Served {
    settler: EvmSettler,
    token: Option<BearerToken>,
    /// The Redis the replicas share, asked by `/readyz`.
    redis: Option<RedisConnection>,
}

/// The bearer token callers must send, kept as its SHA-256 digest: two
/// digests compare in constant time whatever the lengths of the tokens, and
/// the token itself is never held (nor printed: no `Debug`).
struct BearerToken([u8; 32]);

impl BearerToken {
    fn new(token: &str) -> Self {
        Self(sha2::Sha256::digest(token.as_bytes()).into())
    }

    fn matches(&self, given: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        let given: [u8; 32] = sha2::Sha256::digest(given.as_bytes()).into();
        bool::from(self.0.ct_eq(&given))
    }
}

/// The `--auth-token-file`'s token: the file readable by its owner only and
/// the token at least [`MIN_TOKEN_BYTES`] long. Errors name the file, never
/// what it holds.
fn read_token(path: &Path) -> Result<BearerToken, Failure> {
    let named =
        |reason: String| Failure::usage(format!("--auth-token-file {}: {reason}", path.display()));
    let metadata = std::fs::metadata(path).map_err(|error| named(error.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(named(format!(
                "mode {mode:o} lets others read it: chmod 600 (or 400) the file"
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = metadata;
    let text = std::fs::read_to_string(path).map_err(|error| named(error.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(named("it is empty".to_owned()));
    }
    if token.len() < MIN_TOKEN_BYTES {
        return Err(named(format!(
            "the token is shorter than {MIN_TOKEN_BYTES} bytes: make a longer one \
             (e.g. openssl rand -hex 32)"
        )));
    }
    Ok(BearerToken::new(token))
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`: the decisions).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Already set (never, in the binary): the first one stands.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

fn address(flag: &str, text: &str) -> Result<Address, Failure> {
    text.parse()
        .map_err(|_| Failure::usage(format!("{flag} {text} is not an EVM address")))
}

pub(crate) async fn run(args: FacilitatorArgs, format: Format) -> Exit {
    match serve(args).await {
        Ok(()) => Exit::Ok,
        Err(failure) => failure.report("facilitator", format),
    }
}

async fn serve(args: FacilitatorArgs) -> Result<(), Failure> {
    init_logs();
    let token = match &args.auth_token_file {
        Some(path) => Some(read_token(path)?),
        None if !args.listen.ip().is_loopback() => {
            return Err(Failure::usage(format!(
                "--listen {} is not loopback: callers must authenticate, give --auth-token-file",
                args.listen
            )));
        }
        None => None,
    };
    let network = Network::parse(&args.network)
        .ok()
        .filter(|network| network.eip155_chain_id().is_some())
        .ok_or_else(|| Failure::usage(format!("--network {} is not eip155:<id>", args.network)))?;
    let key = SettlerKey::from_file(&args.key_file)
        .map_err(|error| Failure::from_error(Exit::Usage, &error))?;
    let mut builder = EvmSettler::builder(&args.rpc_url, key, network)
        .with_receipt_timeout(Duration::from_secs(args.receipt_timeout_secs))
        .with_confirmations(args.confirmations)
        .with_gas_cap(args.gas_cap)
        .with_min_amount(args.min_amount);
    for asset in &args.assets {
        builder = builder.with_asset(address("--asset", asset)?);
    }
    for pay_to in &args.pay_to {
        builder = builder.with_pay_to(address("--pay-to", pay_to)?);
    }
    let redis = shared_redis(&args)?;
    if let Some(conn) = &redis {
        builder = builder
            .with_records(Arc::new(RedisSettlementRecords::new(conn.clone())))
            .with_nonce_allocator(Arc::new(RedisNonceAllocator::new(conn.clone())));
    }
    let (settler, report) = builder
        .connect()
        .await
        .map_err(|error| Failure::from_error(Exit::Api, &error))?;
    if report.low_balance {
        eprintln!(
            "walletgate facilitator: warning: settler {} holds {} wei: fund it with ETH for gas",
            report.address, report.balance_wei
        );
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| Failure::from_error(Exit::Api, &error))?;
    let local = listener
        .local_addr()
        .map_err(|error| Failure::from_error(Exit::Api, &error))?;
    // The first stdout line is the address, for scripts and tests.
    println!("http://{local}");
    eprintln!(
        "walletgate facilitator: settler {} on {} listening on http://{local}",
        report.address,
        settler.network()
    );
    let limits = Limits {
        header_timeout: Duration::from_secs(args.header_timeout_secs),
        idle_timeout: Duration::from_secs(args.idle_timeout_secs),
        max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
    };
    let served = Arc::new(Served {
        settler,
        token,
        redis,
    });
    let handle = move |request: Request<connections::Timed<hyper::body::Incoming>>| {
        let served = Arc::clone(&served);
        async move {
            let decision = Decision::of(request.method(), request.uri().path());
            let response = answer(&served, request).await;
            match decision {
                Some(decision) => decision.log(response).await,
                None => response,
            }
        }
    };
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    connections::serve(listener, limits, handle, shutdown).await;
    Ok(())
}

/// A verify or settle decision, logged from its answer: the log says
/// exactly what the caller was told.
#[derive(Clone, Copy)]
enum Decision {
    Verify,
    Settle,
}

impl Decision {
    fn of(method: &Method, path: &str) -> Option<Self> {
        match (method, path) {
            (&Method::POST, "/verify") => Some(Self::Verify),
            (&Method::POST, "/settle") => Some(Self::Settle),
            _ => None,
        }
    }

    /// One line for `response` (payer, transaction, reason; the answers hold
    /// no key, token or signature), which is handed back unchanged.
    async fn log(self, response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
        let (parts, body) = response.into_parts();
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(never) => match never {},
        };
        let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let text = |name: &str| answer.get(name).and_then(serde_json::Value::as_str);
        let endpoint = match self {
            Self::Verify => "verify",
            Self::Settle => "settle",
        };
        let status = parts.status.as_u16();
        let payer = text("payer");
        let transaction = text("transaction").filter(|hash| !hash.is_empty());
        // The settler does not report a receipt's gas used yet: not logged.
        if parts.status != StatusCode::OK {
            let reason = text("error");
            if parts.status.is_server_error() {
                tracing::warn!(
                    target: "walletgate::facilitator", endpoint, status, reason,
                    detail = text("detail"), "unavailable"
                );
            } else {
                tracing::info!(target: "walletgate::facilitator", endpoint, status, reason, "rejected");
            }
        } else if answer["isValid"] == true {
            tracing::info!(target: "walletgate::facilitator", endpoint, payer, "valid");
        } else if answer["success"] == true {
            tracing::info!(target: "walletgate::facilitator", endpoint, payer, transaction, "settled");
        } else if text("errorReason") == Some(SETTLEMENT_PENDING) {
            tracing::warn!(target: "walletgate::facilitator", endpoint, payer, transaction, "pending");
        } else {
            let reason = text("invalidReason").or_else(|| text("errorReason"));
            tracing::info!(
                target: "walletgate::facilitator", endpoint, payer, transaction, reason, "refused"
            );
        }
        Response::from_parts(parts, Full::new(bytes))
    }
}

/// The Redis of `--redis-url`, if given: opened lazily (a replica starts
/// while Redis is away, not ready until it answers).
fn shared_redis(args: &FacilitatorArgs) -> Result<Option<RedisConnection>, Failure> {
    let Some(url) = &args.redis_url else {
        return Ok(None);
    };
    let usage = |flag: &str, error: RedisUrlError| Failure::usage(format!("{flag}: {error}"));
    let mode: RedisMode = args
        .redis_mode
        .parse()
        .map_err(|error| usage("--redis-mode", error))?;
    let config = RedisConfig::from_setting(url, mode)
        .map_err(|error| usage("--redis-url", error))?
        .with_prefix(&args.redis_prefix)
        .with_wait_replicas(args.redis_wait_replicas)
        // A settlement's record guards money: a busy Redis gets a second.
        .with_timeout(Duration::from_secs(1));
    RedisConnection::open(&config)
        .map(Some)
        .map_err(|error| Failure::from_error(Exit::Usage, &error))
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

/// Whether `request` carries the bearer token (compared in constant time;
/// the scheme in any case, as RFC 9110 has it).
fn authorized(served: &Served, request: &Request<impl hyper::body::Body>) -> bool {
    let Some(token) = &served.token else {
        return true;
    };
    request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer)
        .is_some_and(|given| token.matches(given))
}

/// The token of an `Authorization: Bearer <token>` value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_matches(' '))
}

/// `/healthz` (the process answers) and `/readyz` (the node answers): public,
/// for probes that hold no token, by `GET` or `HEAD` (hyper sends no body to
/// a `HEAD`). The node's error is logged, not told to anonymous callers.
async fn probe(served: &Served, method: &Method, path: &str) -> Option<Response<Full<Bytes>>> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return None;
    }
    match path {
        "/healthz" => Some(json_response(StatusCode::OK, &json!({"status": "ok"}))),
        "/readyz" => Some(match ready(served).await {
            Ok(()) => json_response(StatusCode::OK, &json!({"status": "ready"})),
            Err(error) => {
                tracing::warn!(target: "walletgate::facilitator", detail = error.detail(), "not ready");
                json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"status": "unavailable"}),
                )
            }
        }),
        _ => None,
    }
}

/// Whether the node, and the shared Redis if any, answer now.
async fn ready(served: &Served) -> Result<(), FacilitatorError> {
    if let Some(redis) = &served.redis {
        redis
            .ping()
            .await
            .map_err(|error| FacilitatorError::unavailable(format!("Redis: {error}")))?;
    }
    served.settler.ready().await
}

async fn answer<B>(served: &Served, request: Request<B>) -> Response<Full<Bytes>>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    if let Some(response) = probe(served, &method, &path).await {
        return response;
    }
    if !authorized(served, &request) {
        return json_response(StatusCode::UNAUTHORIZED, &json!({"error": "unauthorized"}));
    }
    let settler = &served.settler;
    match (method, path.as_str()) {
        (Method::GET, "/supported") => match settler.supported().await {
            Ok(supported) => json_response(StatusCode::OK, &supported),
            Err(error) => unavailable(&error.to_string()),
        },
        (Method::POST, "/verify" | "/settle") => {
            let caller = match idempotency_key(request.headers()) {
                Ok(caller) => caller,
                Err(error) => {
                    return json_response(
                        StatusCode::BAD_REQUEST,
                        &json!({"error": "invalid_idempotency_key", "detail": error.to_string()}),
                    );
                }
            };
            let body = match Limited::new(request.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
            {
                Ok(body) => body.to_bytes(),
                Err(_) => {
                    return json_response(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &json!({"error": "body_too_large"}),
                    );
                }
            };
            let Ok(mut payment) = serde_json::from_slice::<FacilitatorRequest>(&body) else {
                return json_response(StatusCode::BAD_REQUEST, &json!({"error": "invalid_json"}));
            };
            if let Some(caller) = caller {
                payment = payment.with_idempotency_key(caller);
            }
            if path == "/verify" {
                match settler.verify(&payment).await {
                    Ok(verdict) => json_response(StatusCode::OK, &verdict),
                    Err(error) => unavailable(&error.to_string()),
                }
            } else {
                settle(settler, &payment).await
            }
        }
        _ => json_response(StatusCode::NOT_FOUND, &json!({"error": "not_found"})),
    }
}

/// The caller's `Idempotency-Key`, if it sent one.
fn idempotency_key(
    headers: &http::HeaderMap,
) -> Result<Option<IdempotencyKey>, InvalidIdempotencyKey> {
    headers
        .get(IDEMPOTENCY_KEY_HEADER)
        .map(|value| IdempotencyKey::from_bytes(value.as_bytes()))
        .transpose()
}

async fn settle(settler: &EvmSettler, payment: &FacilitatorRequest) -> Response<Full<Bytes>> {
    match settler.settle(payment).await {
        Ok(settled) => json_response(StatusCode::OK, &settled),
        Err(error) if error.kind() == &FacilitatorErrorKind::Pending => {
            let pending = SettleResponse {
                error_message: Some(error.detail().to_owned()),
                transaction: error.transaction().unwrap_or_default().to_owned(),
                payer: payment
                    .exact_evm()
                    .map(|evm| evm.from)
                    .or_else(|| {
                        UptoPayment::read(&payment.payment_payload().payload)
                            .map(|permit| permit.from)
                    })
                    .map(|from| from.to_checksum(None)),
                ..SettleResponse::failure(
                    payment.payment_requirements().network.clone(),
                    SETTLEMENT_PENDING,
                    None,
                )
            };
            json_response(StatusCode::OK, &pending)
        }
        Err(error) => unavailable(&error.to_string()),
    }
}

/// The node (or the settler's gas) cannot answer now: nothing was consumed.
fn unavailable(detail: &str) -> Response<Full<Bytes>> {
    let mut response = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"error": "unavailable", "detail": detail}),
    );
    response.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("2"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef-token";

    fn token_file(name: &str, text: &str, mode: u32) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("walletgate-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn the_scheme_is_read_in_any_case_and_other_schemes_are_not_bearer() {
        for value in [
            format!("Bearer {TOKEN}"),
            format!("bearer {TOKEN}"),
            format!("BEARER  {TOKEN} "),
        ] {
            assert_eq!(bearer(&value), Some(TOKEN), "{value}");
        }
        assert_eq!(bearer(&format!("Basic {TOKEN}")), None);
        assert_eq!(bearer(TOKEN), None);
    }

    #[test]
    fn only_the_token_itself_matches() {
        let token = BearerToken::new(TOKEN);
        assert!(token.matches(TOKEN));
        assert!(!token.matches(&TOKEN[..TOKEN.len() - 1]));
        assert!(!token.matches(&format!("{TOKEN}x")));
        assert!(!token.matches(""));
    }

    /// A token file others can read, or a short token, stops the start with
    /// an error naming the file, never what it holds.
    #[test]
    fn a_readable_or_short_token_file_is_refused_without_its_contents() {
        let open = token_file("open", &format!("{TOKEN}\n"), 0o644);
        let message = read_token(&open).err().unwrap().message;
        assert!(message.contains("chmod 600"), "{message}");
        assert!(message.contains(&open.display().to_string()), "{message}");
        assert!(!message.contains(TOKEN), "{message}");
        let short = token_file("short", "short-secret-token\n", 0o600);
        let message = read_token(&short).err().unwrap().message;
        assert!(message.contains("32 bytes"), "{message}");
        assert!(!message.contains("short-secret-token"), "{message}");
        let empty = token_file("empty", "\n", 0o600);
        assert!(read_token(&empty).err().unwrap().message.contains("empty"));
        let good = token_file("good", &format!("{TOKEN}\n"), 0o600);
        assert!(read_token(&good).unwrap().matches(TOKEN));
        let _ = std::fs::remove_dir_all(open.parent().unwrap());
    }
}

//! `walletgate facilitator --rpc-url URL --key-file F --network eip155:<id>
//! --asset ADDR… --pay-to ADDR… [--listen ADDR] [--auth-token-file F]`
//!
//! The standard facilitator API backed by walletgate's own settler, one
//! chain per process: `POST /verify`, `POST /settle` (body
//! `{x402Version, paymentPayload, paymentRequirements}`), `GET /supported`,
//! `GET /healthz`, `GET /readyz`. Every verdict (a refused recipient, a
//! replay, a high-`s` signature) is the standard JSON answer with status
//! 200; only a missing or wrong bearer token is a 401, and a node that
//! cannot answer a 503. A settle whose transaction has no receipt yet
//! answers `settlement_pending` with the transaction (as the TS SDK reads
//! it); the same `/settle` again reports its outcome, the same transaction.
//!
//! One `success: true` per authorization: a server that serves its answer
//! on success (the official ones) serves a payment once. A caller that lost
//! its answer asks again with the `Idempotency-Key` of its first `/settle`
//! and gets that answer again; any other copy is refused
//! `invalid_exact_evm_nonce_already_used`, its `errorMessage` naming the
//! settling transaction.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::Address;
use bytes::Bytes;
use clap::Args;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde_json::json;
use walletgate::x402::facilitator::evm_settler::{DEFAULT_GAS_CAP, DEFAULT_RECEIPT_TIMEOUT};
use walletgate::x402::facilitator::{
    EvmSettler, Facilitator, FacilitatorErrorKind, FacilitatorRequest, IDEMPOTENCY_KEY_HEADER,
    IdempotencyKey, InvalidIdempotencyKey, SettlerKey,
};
use walletgate::x402::wire::{Network, SettleResponse};

use crate::exit::{Exit, Failure, Format};

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
}

/// What every request needs.
struct Served {
    settler: EvmSettler,
    token: Option<String>,
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
    let token = match &args.auth_token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                Failure::usage(format!("--auth-token-file {}: {error}", path.display()))
            })?;
            let token = text.trim().to_owned();
            if token.is_empty() {
                return Err(Failure::usage(format!(
                    "--auth-token-file {} is empty",
                    path.display()
                )));
            }
            Some(token)
        }
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
    let served = Arc::new(Served { settler, token });
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Ok((stream, _)) = accepted else { continue };
        let served = served.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let served = served.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&served, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

/// Whether `request` carries the bearer token (compared in constant time).
fn authorized(served: &Served, request: &Request<impl hyper::body::Body>) -> bool {
    let Some(token) = &served.token else {
        return true;
    };
    let given = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

async fn answer<B>(served: &Served, request: Request<B>) -> Response<Full<Bytes>>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    if path == "/healthz" && method == Method::GET {
        return json_response(StatusCode::OK, &json!({"status": "ok"}));
    }
    if !authorized(served, &request) {
        return json_response(StatusCode::UNAUTHORIZED, &json!({"error": "unauthorized"}));
    }
    let settler = &served.settler;
    match (method, path.as_str()) {
        (Method::GET, "/readyz") => match settler.ready().await {
            Ok(()) => json_response(StatusCode::OK, &json!({"status": "ready"})),
            Err(error) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"status": "unavailable", "error": error.detail()}),
            ),
        },
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
                payer: payment.exact_evm().map(|evm| evm.from.to_checksum(None)),
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

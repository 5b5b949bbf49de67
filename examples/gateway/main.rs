//! The paid model gateway's reference server (specification, Area B).
//!
//! ```sh
//! cargo run --example gateway --features gateway,axum,http-facilitator,rustls,tracing
//! cargo run --example gateway --features gateway,axum,http-facilitator,rustls,tracing -- --network solana
//! ```
//!
//! (`scripts/serve.sh` starts it with the right features.)
//!
//! Listens on `GATEWAY_LISTEN` (default `127.0.0.1:8402`) and serves
//! `/v1/chat/completions`, `/v1/messages`, `/v1/responses`, `/v1/models` and
//! `/v1/images/generations` (paid jobs, polled; see `images/`), each also
//! under `/api/v1/…`, and the discovery documents `/.well-known/x402` and
//! `/openapi.json` (`discovery.rs`); a browser at `/` gets the catalogue with
//! prices and a "try it" form (`console.rs`). Answers come from the embedded echo family
//! unless a provider's OpenAI-compatible upstream is configured; see
//! `config.rs` for every variable. Logs go to standard error through
//! `tracing`: `RUST_LOG` filters (default `info`: settlements and refusals),
//! `LOG_FORMAT=json` writes JSON lines.
//!
//! Paid models answer 402 with an x402 quote in Base Sepolia USDC; a retry
//! with a `PAYMENT-SIGNATURE` signed by one of the printed development
//! accounts is verified and settled in-process (a paid stream once it
//! completes; its receipt is the last `event: payment-response`), and each
//! settlement logs one line with the running total. Free models are limited per
//! client IP. `--network solana` quotes Solana USDC instead, verified and
//! settled by the x402 facilitator at `GATEWAY_FACILITATOR_URL`.
//!
//! Where things live: this file reads the configuration and wires the
//! layers ([`app`]), mounting the route table of `routes.rs`, which
//! `discovery.rs` also renders; `pipeline.rs` orders the steps of each route;
//! `extensions.rs` holds what a step hands on to the next; `gates.rs` the
//! free-tier limit and the payment layers with their pricing hooks (each
//! paid route a clone of one configured builder); `config.rs` parses the
//! environment, `settler.rs` connects the on-chain settler it names and
//! `stores.rs` opens the stores;
//! `state.rs` what every request shares, and the upstream call;
//! `inference.rs` and `images/` the handlers; `request.rs`, `catalogue.rs`,
//! `render.rs` and `upstream/` the requests, models, answers and providers.

mod catalogue;
#[path = "../common/cli.rs"]
mod cli;
mod config;
mod config_error;
mod console;
#[path = "../common/cors.rs"]
mod cors;
mod discovery;
mod extensions;
mod gates;
mod images;
mod inference;
#[path = "../common/logging.rs"]
mod logging;
mod mcp;
#[path = "../common/metrics.rs"]
mod metrics_endpoint;
#[path = "../common/openapi.rs"]
mod openapi_common;
mod payment_network;
mod pipeline;
#[path = "../common/proxies.rs"]
mod proxies;
#[path = "../common/redis.rs"]
mod redis_settings;
mod render;
mod reply;
mod request;
#[path = "../common/request_id.rs"]
mod request_id;
mod routes;
mod settler;
#[path = "../common/shutdown.rs"]
mod shutdown;
mod state;
mod stores;
mod upstream;

#[cfg(test)]
mod chain_fault_tests;
#[cfg(test)]
#[path = "../../tests/chain_support/mod.rs"]
mod chain_support;
#[cfg(test)]
mod chain_tests;
#[cfg(test)]
#[path = "../common/child_server.rs"]
mod child_server;
#[cfg(test)]
#[path = "../common/chromium.rs"]
mod chromium;
#[cfg(all(test, feature = "client", feature = "reqwest"))]
mod client_tests;
#[cfg(test)]
mod console_tests;
#[cfg(test)]
mod cors_tests;
#[cfg(test)]
mod discovery_tests;
#[cfg(all(test, feature = "cli"))]
mod facilitator_tests;
#[cfg(test)]
mod mcp_tests;
#[cfg(test)]
mod metering_tests;
#[cfg(all(test, feature = "metrics"))]
mod metrics_tests;
#[cfg(test)]
mod mpp_chain_tests;
#[cfg(test)]
mod mpp_tests;
#[cfg(test)]
#[path = "../common/node.rs"]
mod node;
#[cfg(test)]
mod offer_receipt_tests;
#[path = "../common/page.rs"]
mod page;
#[cfg(test)]
mod payment_tests;
#[cfg(all(test, feature = "redis"))]
mod redis_limits_tests;
#[cfg(all(test, feature = "redis"))]
#[path = "../../tests/redis_support/mod.rs"]
mod redis_support;
#[cfg(all(test, feature = "redis"))]
mod replica_tests;
#[cfg(test)]
mod sdk_tests;
#[cfg(test)]
mod settlement_tests;
#[cfg(test)]
mod shutdown_tests;
#[cfg(test)]
mod solana_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upto_chain_tests;
// A loopback HTTPS server with a certificate made in the test.
#[cfg(test)]
#[path = "../../tests/tls_support/mod.rs"]
mod tls_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::routing::{get, post};
use http::StatusCode;
use walletgate::x402::{
    facilitator::{DevLedger, Facilitator},
    server::QuoteExtensions,
    wire::Network,
};

use crate::config::{Config, PaymentNetwork};
use crate::gates::{Gates, RedisConnection, facilitator_client, free_tier};
use crate::images::jobs::ImageJobs;
use crate::images::{create_image, poll_image};
use crate::inference::{infer, models};
use crate::pipeline::{with_image_pipeline, with_pipeline, with_poll_pipeline};
use crate::routes::Kind;
use crate::state::{AppState, Gateway};
use crate::stores::Stores;
use crate::upstream::{EchoUpstream, FaultInjecting, ProviderRouter, SharedUpstream};

// The server's allocator, a deployment choice (the library makes none): on the
// quote path about 10% less CPU per request than glibc's malloc, for a higher
// resident plateau under paid load (150 vs 118 MB in the soak).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::command(&args) {
        cli::Command::Help => return println!("{}", help()),
        cli::Command::Version => return println!("{}", cli::version("gateway")),
        cli::Command::Run => {}
    }
    if let Err(error) = run(&args).await {
        eprintln!("gateway: {error}");
        std::process::exit(1);
    }
}

/// `--help`: the usage and every variable of `config.rs`'s table.
fn help() -> String {
    cli::help(
        "gateway: the paid model gateway's reference server (x402 quotes, a free tier per client IP)\n\n\
         USAGE: gateway [--network solana] [--help] [--version]",
        include_str!("config.rs"),
    )
}

/// The server for `args` (the command line without the program) and the
/// environment, until it is signalled and drained.
async fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    logging::init(None)?;
    let mut config = Config::from_env(args)?;
    // Apart from `Config`: an operator's endpoint, not the gateway's behaviour.
    let metrics_listen = metrics_endpoint::parse_listen(
        "GATEWAY_METRICS_LISTEN",
        std::env::var("GATEWAY_METRICS_LISTEN").ok(),
    )?;
    if let PaymentNetwork::Solana(settings) = &mut config.network
        && settings.fee_payer.is_none()
    {
        let facilitator = facilitator_client(
            &settings.facilitator_url,
            &config.tls,
            config.facilitator_auth.as_ref(),
            walletgate::x402::facilitator::DEFAULT_FACILITATOR_TIMEOUT,
        )?;
        let fee_payer = facilitator.fee_payer(&Network::solana_mainnet()).await;
        settings.fee_payer = Some(
            fee_payer
                .map_err(|error| format!("{}: {}", settings.facilitator_url, error.detail()))?,
        );
    }
    if config.settler_settings.is_some() {
        let redis =
            redis_connection(&config).map_err(|error| error as Box<dyn std::error::Error>)?;
        config.settler = settler::configured(&config, redis).await?;
    }
    if let PaymentNetwork::Evm(evm) = &config.network
        && let Some(url) = &evm.facilitator_url
    {
        config.facilitator_upto = check_facilitator(
            url,
            &evm.network,
            &config.tls,
            config.facilitator_auth.as_ref(),
            Arc::clone(&config.ready),
        )
        .await?;
    }
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let address = listener.local_addr()?;
    if let Some(warning) = config.bound_to(address) {
        eprintln!("gateway: WARNING: {warning}");
    }
    println!("gateway listening on http://{address} (clients: api_url http://{address}/api)");
    if let Some(metrics_listen) = metrics_listen {
        let bound = metrics_endpoint::serve(metrics_listen).await?;
        println!("metrics (Prometheus text): http://{bound}/metrics");
    }
    match &config.network {
        PaymentNetwork::Evm(evm) => match (&evm.facilitator_url, &config.settler) {
            (None, Some(settler)) => println!(
                "payments: {} USDC ({}) to {}, verified and settled on chain by this gateway's \
                 settler {}",
                evm.name,
                evm.usdc,
                config.pay_to,
                settler.address()
            ),
            (None, None) => {
                println!(
                    "payments: Base Sepolia USDC, settled on the in-process DEVELOPMENT LEDGER \
                     (nothing moves on a chain), payTo {}",
                    config.pay_to
                );
                println!(
                    "development payer accounts (public Hardhat/Anvil mnemonic, 10,000 USDC each):"
                );
                for account in DevLedger::DEV_ACCOUNTS {
                    println!("  {account}");
                }
            }
            (Some(url), _) => println!(
                "payments: {} USDC ({}) to {}, verified and settled by the facilitator at {url}",
                evm.name, evm.usdc, config.pay_to
            ),
        },
        PaymentNetwork::Solana(settings) => println!(
            "payments: Solana USDC to {}, verified and settled by the facilitator at {}",
            settings.pay_to, settings.facilitator_url
        ),
    }
    println!("models:  curl http://{address}/v1/models");
    println!(
        "free:    curl http://{address}/v1/chat/completions -H 'content-type: application/json' \
         -d '{{\"model\":\"nvidia/nemotron-super\",\"messages\":[{{\"role\":\"user\",\"content\":\"hello\"}}]}}'"
    );
    println!(
        "quote:   curl -i http://{address}/v1/chat/completions -H 'content-type: application/json' \
         -d '{{\"model\":\"openai/gpt-5-mini\",\"max_tokens\":64,\"messages\":[{{\"role\":\"user\",\"content\":\"hello\"}}]}}'"
    );
    let (draining, drain) = (config.draining.clone(), config.drain);
    // Connection addresses ride along for the per-IP free-tier limit.
    let router = app(config).map_err(|error| error as Box<dyn std::error::Error>)?;
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let signalled = shutdown::on_signal(draining, || {})?;
    let stop = signalled.clone().wait();
    let server = async move {
        axum::serve(listener, service)
            .with_graceful_shutdown(stop)
            .await
    };
    shutdown::until_drained("gateway", server, signalled, drain).await?;
    Ok(())
}

/// Asks the facilitator at `url` which kinds it settles: a definite "not
/// `exact` on `network`" refuses to start, naming both; an unreachable one
/// starts the gateway not ready (`/readyz` 503) and is asked again every 2 s
/// until it answers, so a facilitator that starts later is never a crash loop.
/// Answers the `facilitatorAddress` it lists for `upto` on `network`, if it
/// answered and lists one (the metered offer is made only then).
pub(crate) async fn check_facilitator(
    url: &str,
    network: &Network,
    tls: &walletgate::tls::ClientTls,
    auth: Option<&Arc<dyn walletgate::x402::facilitator::FacilitatorAuth>>,
    ready: Arc<std::sync::atomic::AtomicBool>,
) -> Result<Option<alloy_primitives::Address>, Box<dyn std::error::Error>> {
    let facilitator = facilitator_client(url, tls, auth, std::time::Duration::from_secs(5))?;
    fn settles(supported: &walletgate::x402::wire::SupportedResponse, network: &Network) -> bool {
        supported
            .kinds
            .iter()
            .any(|kind| kind.scheme == "exact" && kind.network == *network)
    }
    match facilitator.supported().await {
        Ok(supported) if settles(&supported, network) => Ok(upto_facilitator(&supported, network)),
        Ok(_) => Err(format!(
            "the facilitator at {url} does not settle `exact` payments on {network} \
             (GATEWAY_FACILITATOR_URL, GATEWAY_NETWORK)"
        )
        .into()),
        Err(error) => {
            eprintln!(
                "gateway: the facilitator at {url} did not answer ({}); starting not ready \
                 (GET /readyz answers 503) and asking again every 2 s",
                error.detail()
            );
            ready.store(false, Ordering::Release);
            let (url, network) = (url.to_owned(), network.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                    match facilitator.supported().await {
                        Ok(supported) if settles(&supported, &network) => {
                            eprintln!("gateway: the facilitator at {url} answered; ready");
                            ready.store(true, Ordering::Release);
                            return;
                        }
                        Ok(_) => eprintln!(
                            "gateway: the facilitator at {url} does not settle `exact` payments \
                             on {network}; staying not ready"
                        ),
                        Err(_) => {}
                    }
                }
            });
            // Its kinds are not known: `upto` is not offered (until a restart).
            Ok(None)
        }
    }
}

/// The `facilitatorAddress` of `supported`'s `upto` kind on `network`, if listed.
fn upto_facilitator(
    supported: &walletgate::x402::wire::SupportedResponse,
    network: &Network,
) -> Option<alloy_primitives::Address> {
    supported
        .kinds
        .iter()
        .filter(|kind| {
            kind.scheme == walletgate::x402::wire::SCHEME_UPTO && kind.network == *network
        })
        .find_map(|kind| {
            let address = kind.extra.as_ref()?.get("facilitatorAddress")?.as_str()?;
            address.parse().ok()
        })
}

/// The shared Redis of the replicas (`GATEWAY_REDIS_URL`), if configured.
fn redis_connection(config: &Config) -> Result<Option<RedisConnection>, AppError> {
    match &config.redis {
        None => Ok(None),
        #[cfg(feature = "redis")]
        Some(settings) => Ok(Some(settings.open()?)),
        // `Config::from_vars` refuses the variable in a build without Redis.
        #[cfg(not(feature = "redis"))]
        Some(_) => Err("GATEWAY_REDIS_URL needs the `redis` feature".into()),
    }
}

/// Why [`app`] could not be built.
pub(crate) type AppError = Box<dyn std::error::Error + Send + Sync>;

/// The whole gateway for `config`; fails only on an unusable payment or
/// Redis setting.
pub(crate) fn app(config: Config) -> Result<Router, AppError> {
    let config_ready = Arc::clone(&config.ready);
    let config_draining = config.draining.clone();
    let public_url = config.public_url();
    let mpp = config.mpp(&public_url)?;
    let sign_in = config.sign_in_with_x()?;
    let upto = config.upto_offer();
    let cors = cors::layer(&config.cors_origins);
    let redis = redis_connection(&config)?;
    let mut router = ProviderRouter::new(Arc::new(EchoUpstream));
    for (provider, upstream) in config.providers {
        router = router.with_provider(provider, upstream);
    }
    let upstream: SharedUpstream = Arc::new(FaultInjecting::new(Arc::new(router), config.faults));
    let stores = match &redis {
        None => Stores::in_memory(config.ledger, config.clock.clone(), &config.answers),
        #[cfg(feature = "redis")]
        Some(conn) => Stores::redis(
            conn,
            &config.catalogue,
            config.clock.clone(),
            &config.answers,
        ),
        #[cfg(not(feature = "redis"))]
        Some(never) => match *never {},
    };
    let evm = match &config.network {
        config::PaymentNetwork::Evm(evm) => Some(evm),
        config::PaymentNetwork::Solana(_) => None,
    };
    let options = gates::payment_options(&config.network, &config.pay_to, config.max_timeout_secs)?;
    let inference_options = gates::with_upto(
        options.clone(),
        upto,
        evm,
        &config.pay_to,
        config.max_timeout_secs,
    )?;
    let settler = config.settler.map(Arc::new);
    let facilitator = gates::facilitator(
        &config.network,
        settler
            .clone()
            .map(|settler| settler as Arc<dyn Facilitator>),
        stores.ledger,
        &config.tls,
        config.facilitator_auth.as_ref(),
        config.facilitator_secret,
        config.clock.clone(),
        config.payment_faults,
    )?;
    let mut payment = gates::payment(&options, facilitator, config.clock.clone(), &public_url)?
        .with_nonce_store(stores.nonce_store)
        .with_answer_store(stores.answer_store)
        .with_answer_limits(config.answers.limits)
        .with_payment_identifier(config.payment_id);
    if let Some(mpp) = mpp {
        eprintln!(
            "gateway: MPP Payment challenges beside x402 (realm {}){}",
            mpp.realm(),
            if config.mpp_key_file.is_some() {
                ""
            } else {
                "; its challenge key is random per process: one replica only (GATEWAY_MPP_KEY_FILE)"
            }
        );
        payment = payment.with_mpp(mpp);
    }
    let offer_signer = config.offer_signer.as_ref().map(|signer| signer.address());
    if let Some(signer) = config.offer_signer {
        eprintln!(
            "gateway: offers, receipts and usage statements are signed as {}",
            signer.address()
        );
        payment = payment.with_offer_signer(signer);
    }
    if let Some(sign_in) = sign_in {
        // With walletgate's own settler, contract wallets sign in too (ERC-1271 through its node).
        let sign_in = match settler {
            Some(settler) => sign_in.with_contract_signatures(settler),
            None => sign_in,
        };
        payment = payment
            .with_sign_in_with_x(sign_in.with_spent_nonce_store(stores.spent_siwx_nonces))
            .with_entitlement_store(stores.entitlements);
    }
    let bazaar = config
        .bazaar
        .then(|| Arc::new(discovery::Bazaar::new(&config.catalogue)) as Arc<dyn QuoteExtensions>);
    let gates = Gates::new(
        free_tier(config.free_tier, config.client_ip, redis.as_ref()),
        &payment,
        (inference_options.len() > options.len()).then_some(inference_options.as_slice()),
        bazaar.as_ref(),
        mcp::ToolPrices::new(&config.catalogue, config.bazaar),
    )?;
    let quoting = discovery::Quoting {
        options: &options,
        flat_fee: gates.inference_payment.flat_fee(),
        offer_signer,
    };
    let documents = discovery::Documents::new(&config.catalogue, &quoting, &public_url);
    // `/` for a browser, priced like the documents.
    let page = console::routes(&discovery::price_list(&config.catalogue, &quoting));
    let images = ImageJobs::new(config.clock.clone(), config.image_job, stores.jobs);
    let state: AppState = Arc::new(Gateway::new(
        config.catalogue,
        upstream,
        config.upstream_timeout,
        config.body_limit_bytes,
        config.clock,
        gates,
        images,
    ));

    let ready = Arc::clone(&config_ready);
    let draining = config_draining;
    let readiness = move || {
        let answer = if draining.is_draining() {
            (StatusCode::SERVICE_UNAVAILABLE, "not ready: draining")
        } else if ready.load(Ordering::Acquire) {
            (StatusCode::OK, "ready")
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the facilitator has not answered",
            )
        };
        async move { answer }
    };
    // Mounted from the route table, the same one the documents describe.
    let mut served = Router::new();
    let mut image_jobs = Router::new();
    let mut image_polls = Router::new();
    for route in routes::ROUTES {
        let mut inference = Router::new();
        for path in route.paths() {
            let document = |bytes: bytes::Bytes| {
                get(move || {
                    let bytes = bytes.clone();
                    async move { openapi_common::json_bytes(bytes) }
                })
            };
            match route.kind {
                // Probes sit outside every gate and need no credentials.
                Kind::Health => served = served.route(&path, get(|| async { "ok" })),
                Kind::Ready => served = served.route(&path, get(readiness.clone())),
                Kind::Models => served = served.route(&path, get(models)),
                Kind::WellKnownX402 => {
                    served = served.route(&path, document(documents.well_known_x402.clone()));
                }
                Kind::OpenApi => served = served.route(&path, document(documents.openapi.clone())),
                Kind::Inference(_) => inference = inference.route(&path, post(infer)),
                Kind::ImageJob => image_jobs = image_jobs.route(&path, post(create_image)),
                Kind::ImagePoll => image_polls = image_polls.route(&path, get(poll_image)),
            }
        }
        if let Kind::Inference(endpoint) = route.kind {
            served = served.merge(with_pipeline(inference, &state, endpoint));
        }
    }
    // The catalogue as MCP tools, paid per call by the MCP front of the same flow.
    let mcp = Router::new()
        .route("/mcp", post(mcp::handle).delete(mcp::end_session))
        .route_layer(state.gates.mcp_payment.clone());
    let router = served
        .merge(page)
        .merge(mcp)
        .merge(with_image_pipeline(image_jobs, &state))
        .merge(with_poll_pipeline(image_polls, &state))
        .with_state(state)
        // Every answer carries the id, every gate sees it.
        .layer(request_id::RequestIdLayer);
    // Outermost: preflights are answered before any gate.
    Ok(match cors {
        Some(cors) => router.layer(cors),
        None => router,
    })
}

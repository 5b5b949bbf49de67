//! The Area A reference server: a wallet-authenticated data API.
//!
//! `cargo run --example data_api --features tokens,siwe,mcp,tracing,jwks-url` listens on
//! `DATA_API_LISTEN` (default `127.0.0.1:8080`) with embedded defaults:
//! in-memory stores, one development API key (`DATA_API_KEY`, else generated
//! and printed once), a few wallets with favorites, and an Ed25519 signing key
//! generated at start (or read from `DATA_API_SIGNING_KEY_FILE`: 32 raw bytes or a PKCS#8 PEM).
//! MCP clients connect to `/mcp` (streamable HTTP) with the same `X-API-KEY`
//! and, for wallet tools, `Authorization: Bearer <wallet JWT>`. Every
//! variable is in `config.rs`'s table (and `--help`).
//!
//! Where things live: this file wires the layers ([`build`]) over the route
//! table of `routes.rs`; `config.rs` parses the environment; `stores.rs` and
//! `quotas.rs` open the stores it names; `state.rs` is what the handlers
//! share; `auth.rs`, `rest.rs`, `protected_resource.rs`, `openapi.rs` and
//! `mcp.rs` (with `tools.rs`) answer; `console.rs` serves `/console`, the
//! page for people.

mod access_log;
mod auth;
#[cfg(test)]
#[path = "../common/child_server.rs"]
mod child_server;
#[cfg(test)]
#[path = "../common/chromium.rs"]
mod chromium;
#[path = "../common/cli.rs"]
mod cli;
mod config;
mod console;
#[path = "../common/cors.rs"]
mod cors;
mod favorites;
mod health;
#[cfg(feature = "redis")]
mod keys;
#[path = "../common/logging.rs"]
mod logging;
mod mcp;
#[path = "../common/metrics.rs"]
mod metrics_endpoint;
#[cfg(test)]
#[path = "../common/node.rs"]
mod node;
mod openapi;
#[path = "../common/openapi.rs"]
mod openapi_common;
#[path = "../common/page.rs"]
mod page;
mod protected_resource;
#[path = "../common/proxies.rs"]
mod proxies;
mod quotas;
#[path = "../common/redis.rs"]
mod redis_settings;
mod relationships;
#[path = "../common/request_id.rs"]
mod request_id;
mod rest;
mod routes;
#[path = "../common/shutdown.rs"]
mod shutdown;
mod state;
mod stores;
#[cfg(test)]
mod tests;
mod tools;
mod wire;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use http::StatusCode;
use tower::{Layer, service_fn};
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota};
use walletgate::clock::{SharedClock, SystemClock};
use walletgate::siwe::SiweVerifier;
use walletgate::tokens::{
    IssuerConfig, SigningKeyFile, SigningKeys, TokenIssuer, refuse_cross_site,
};
use walletgate::wallet_jwt::{
    JwksUrl, JwtVerifier, KeySet, RequireScopesLayer, ResourceMetadataUrl, WalletJwtLayer,
};

use crate::config::{Config, ExternalIssuer};
use crate::favorites::Favorites;
use crate::openapi::{Access, Operation};
use crate::quotas::{ApiKeys, key_quotas, key_stores};
use crate::relationships::Relationships;
use crate::state::{AppState, SharedState};
use crate::stores::Stores;

/// Largest number of verified wallet JWTs remembered (signature checks skipped).
const VERIFIED_TOKEN_CACHE: usize = 10_000;

/// What a newcomer needs to know at start.
pub(crate) struct DevInfo {
    pub(crate) generated_api_key: Option<String>,
    pub(crate) seeded_wallets: Vec<String>,
    /// Ends the open `/mcp` streams (on shutdown).
    pub(crate) close_mcp_streams: mcp::CloseStreams,
}

/// Wallets with development favorites: the first three Hardhat/Anvil accounts.
const SEEDED_WALLETS: [&str; 3] = [
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
];

pub(crate) fn build(config: &Config) -> Result<(Router, DevInfo), Box<dyn std::error::Error>> {
    build_with_clock(config, Arc::new(SystemClock))
}

pub(crate) fn build_with_clock(
    config: &Config,
    clock: SharedClock,
) -> Result<(Router, DevInfo), Box<dyn std::error::Error>> {
    let published = KeySet::new();
    let keys = match &config.signing_key_file {
        Some(path) => SigningKeys::from_file(
            &read_key_file("DATA_API_SIGNING_KEY_FILE", path)?,
            published.clone(),
        ),
        None => SigningKeys::generate(published.clone())?,
    };
    let keys = match &config.previous_signing_key_file {
        Some(path) => {
            keys.with_previous(&read_key_file("DATA_API_PREVIOUS_SIGNING_KEY_FILE", path)?)
        }
        None => keys,
    };
    let issuer_config = IssuerConfig::new(&config.origin, &config.origin)?
        .with_jwt_lifetime_secs(config.jwt_lifetime_secs)?;
    let stores = Stores::from_config(config)?;
    let readiness = health::Readiness::new(config.draining.clone(), stores.redis.clone());
    // Revoking a PAT refuses the JWTs already minted from it at once (on
    // every replica when the list is in Redis).
    let revocations = stores.revocations;
    let issuer = TokenIssuer::new(issuer_config, stores.pats, stores.sessions, keys)
        .with_clock(clock.clone())
        .with_revocations(Arc::clone(&revocations));
    let mut verifier = JwtVerifier::new(published, &config.origin, &config.origin)?
        .with_clock(clock.clone())
        .with_revocations(revocations)
        .with_cache(VERIFIED_TOKEN_CACHE);
    if let Some(external) = &config.external_issuer {
        verifier = verifier.also_accept(external_verifier(external, &config.origin)?);
    }
    let siwe = SiweVerifier::builder()
        .with_domain(&config.siwe_domain)
        .with_uri(&config.siwe_uri)
        .allow_chain_id(config.siwe_chain_id)
        .with_clock(clock.clone())
        .with_nonce_store(stores.nonces)
        .build()?;

    let mut favorites = Favorites::default();
    for (index, wallet) in SEEDED_WALLETS.iter().enumerate() {
        favorites.seed(wallet.parse()?, 5 + 40 * index as u32);
    }

    let (api_key, generated_api_key) = match &config.api_key {
        Some(key) => (key.clone(), None),
        None => {
            let mut bytes = [0u8; 24];
            getrandom::fill(&mut bytes)?;
            let key = alloy_primitives::hex::encode(bytes);
            (key.clone(), Some(key))
        }
    };
    let key_store = InMemoryKeyStore::new();
    key_store.insert(
        &api_key,
        ApiKeyRecord::new(ApiKeyId::new("dev")?)
            .with_quota(KeyQuota::per_minute(config.key_per_minute)),
    )?;

    let operations = routes::operations();
    let state = Arc::new(AppState {
        issuer,
        siwe,
        favorites,
        relationships: Relationships::default(),
        clock: clock.clone(),
        openapi: openapi::serialised(&operations, &config.origin)?,
        resource_metadata_api: protected_resource::serialised(&config.origin, "", &operations),
        resource_metadata_mcp: protected_resource::serialised(
            &config.origin,
            protected_resource::MCP_RESOURCE,
            &operations,
        ),
    });
    let metadata = ResourceMetadata {
        api: protected_resource::metadata_url(&config.origin, "")?,
        mcp: protected_resource::metadata_url(&config.origin, protected_resource::MCP_RESOURCE)?,
    };
    let api_keys = ApiKeyLayer::new(key_stores(config, key_store)?)
        // Issued keys without their own quota (`data_api keys create`).
        .with_default_quota(KeyQuota::per_minute(config.key_per_minute))
        .with_quota_store(key_quotas(config, clock)?);
    let (router, close_mcp_streams) = router(
        state,
        operations,
        api_keys,
        verifier,
        &config.origin,
        &metadata,
    );
    // Probes and the console's page sit outside every gate and need no
    // credentials (the page asks for the API key).
    let router = health::routes(readiness)
        .merge(console::routes(config))
        .merge(router)
        // Every answer carries the id, every gate sees it.
        .layer(request_id::RequestIdLayer);
    // Outermost: preflights are answered before any gate.
    let router = match cors::layer(&config.cors_origins) {
        Some(cors) => router.layer(cors),
        None => router,
    };
    let dev = DevInfo {
        close_mcp_streams,
        generated_api_key,
        seeded_wallets: SEEDED_WALLETS
            .iter()
            .map(|wallet| (*wallet).to_owned())
            .collect(),
    };
    Ok((router, dev))
}

/// The verifier of an external issuer's JWTs: its JWKS URL (`https://`
/// when built with `rustls`), `iss`, `aud` and claim names.
fn external_verifier(
    external: &ExternalIssuer,
    origin: &str,
) -> Result<JwtVerifier, Box<dyn std::error::Error>> {
    #[cfg(feature = "rustls")]
    let jwks = JwksUrl::new_with_tls(
        &external.jwks_url,
        &walletgate::tls::ClientTls::webpki_roots(),
    )?;
    #[cfg(not(feature = "rustls"))]
    let jwks = JwksUrl::new(&external.jwks_url)?;
    let audience = external.audience.as_deref().unwrap_or(origin);
    let mut verifier = JwtVerifier::from_jwks_url(jwks, &external.issuer, audience)?;
    if let Some(claim) = &external.scopes_claim {
        verifier = verifier.with_scopes_claim(claim.clone());
    }
    if let Some(claim) = &external.wallet_claim {
        verifier = verifier.with_wallet_claim(claim.clone());
    }
    Ok(verifier)
}

/// The composition, from the route table: every route but the discovery
/// documents needs `X-API-KEY`; wallet-scoped routes also need a wallet JWT
/// with the scopes their guard names; token management needs the SIWE
/// session cookie instead.
/// The RFC 9728 metadata URLs every bearer challenge names: the REST API's
/// and the MCP endpoint's.
struct ResourceMetadata {
    api: ResourceMetadataUrl,
    mcp: ResourceMetadataUrl,
}

fn router(
    state: SharedState,
    operations: Vec<Operation>,
    api_keys: ApiKeys,
    verifier: JwtVerifier,
    origin: &str,
    metadata: &ResourceMetadata,
) -> (Router, mcp::CloseStreams) {
    let jwt = || WalletJwtLayer::new(verifier.clone()).with_resource_metadata(metadata.api.clone());
    let mut public = Router::new();
    let mut keyed = Router::new();
    let mut token_management = Router::new();
    let mut wallet_scoped = Router::new();
    let mut wallet_paths = BTreeSet::new();
    let wallet_gate = |guard: &RequireScopesLayer| jwt().require_guard(guard.clone());
    let routes = operations
        .into_iter()
        .filter_map(|operation| operation.into_route(wallet_gate));
    for (path, access, handler) in routes {
        match access {
            Access::Public => public = public.route(path, handler),
            Access::ApiKey | Access::RefreshCookie | Access::ApiKeyOptionalWallet => {
                keyed = keyed.route(path, handler);
            }
            Access::Session => token_management = token_management.route(path, handler),
            Access::Wallet(_) => {
                wallet_paths.insert(path);
                wallet_scoped = wallet_scoped.route(path, handler);
            }
        }
    }
    // Each wallet-scoped handler carries its own gates (`Operation::into_route`);
    // a method its path does not serve still meets the JWT check first: 401
    // without a valid JWT, else 405.
    for path in wallet_paths {
        let not_served = jwt().layer(service_fn(method_not_allowed));
        wallet_scoped = wallet_scoped.route(path, MethodRouter::new().fallback_service(not_served));
    }
    // Token management reads the session cookie; a bearer, if sent, is
    // verified so revocation can insist it names the same wallet.
    // Outermost on them, other sites' pages are refused first: a forged form
    // (which cannot send `X-API-KEY`) hears "cross-site", not "missing key".
    let own_origin: Arc<str> = origin.into();
    let token_management = token_management
        .route_layer(jwt().optional_bearer())
        .route_layer(api_keys.clone())
        .route_layer(middleware::from_fn(move |request: Request, next: Next| {
            same_origin_only(Arc::clone(&own_origin), request, next)
        }));

    let keyed = keyed
        .merge(wallet_scoped)
        .layer(api_keys.clone())
        .merge(token_management);

    // MCP: one service that applies the same `ApiKeyLayer` (same quotas) itself,
    // inside its JSON-RPC rejection rewriter; the table describes it through
    // `mcp_operation`, and the described tests probe it.
    let (mcp, close_mcp_streams) = mcp::service(
        state.clone(),
        api_keys,
        verifier,
        origin,
        metadata.mcp.clone(),
    );
    let router = public
        .nest_service("/mcp", mcp)
        .merge(keyed)
        .with_state(state);
    (router, close_mcp_streams)
}

/// What axum answers a method a path does not serve (it adds `Allow`).
async fn method_not_allowed(_: Request) -> Result<Response, Infallible> {
    Ok(StatusCode::METHOD_NOT_ALLOWED.into_response())
}

/// The token management routes' outermost check (`tokens::refuse_cross_site`).
async fn same_origin_only(origin: Arc<str>, request: Request, next: Next) -> Response {
    match refuse_cross_site(request.headers(), &origin) {
        Ok(()) => next.run(request).await,
        Err(refused) => IntoResponse::into_response(refused),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::command(&args) {
        cli::Command::Help => return println!("{}", help()),
        cli::Command::Version => return println!("{}", cli::version("data_api")),
        #[cfg(feature = "redis")]
        cli::Command::Run if args.first().is_some_and(|arg| arg == "keys") => {
            if let Err(error) = keys::run(&args[1..]).await {
                eprintln!("data_api keys: {error}");
                std::process::exit(1);
            }
            return;
        }
        cli::Command::Run if !args.is_empty() => {
            eprintln!("data_api: unexpected arguments {args:?} (see --help)");
            std::process::exit(2);
        }
        cli::Command::Run => {}
    }
    if let Err(error) = run().await {
        eprintln!("data_api: {error}");
        std::process::exit(1);
    }
}

/// The signing key in the file `variable` names (never printed).
fn read_key_file(variable: &str, path: &std::path::Path) -> Result<SigningKeyFile, String> {
    let bytes =
        std::fs::read(path).map_err(|err| format!("{variable} {}: {err}", path.display()))?;
    SigningKeyFile::parse(&bytes).map_err(|err| format!("{variable} {}: {err}", path.display()))
}

/// `--help`: the usage and every variable of `config.rs`'s table.
fn help() -> String {
    cli::help(
        "data_api: the wallet-authenticated data API's reference server (API key, wallet JWT, \
         SIWE, MCP at /mcp)\n\nUSAGE: data_api [--help] [--version]\n       \
         data_api keys create [--per-minute N] | list | revoke ID   (feature redis: the API \
         keys on DATA_API_REDIS_URL; create prints the new key alone on stdout)",
        include_str!("config.rs"),
    )
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let listen = Config::from_env()?.listen;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    let config = Config::from_lookup_bound(|name| std::env::var(name).ok(), Some(address))?;
    if address.ip().is_unspecified() && std::env::var_os("DATA_API_ORIGIN").is_none() {
        eprintln!(
            "data_api: WARNING: listening on the wildcard address {address} without \
             DATA_API_ORIGIN: tokens and SIWE name http://{address}; set DATA_API_ORIGIN"
        );
    }
    let (router, dev) = build(&config)?;
    logging::init(config.access_log.as_deref())?;
    if let Some(metrics_listen) = config.metrics_listen {
        let bound = metrics_endpoint::serve(metrics_listen).await?;
        println!("metrics (Prometheus text): http://{bound}/metrics");
    }
    let router = access_log::AccessLog::global()
        .with_client_ip(config.client_ip.clone())
        .around(router);
    println!(
        "data API listening on http://{address} (origin {})",
        config.origin
    );
    if let Some(generated) = &dev.generated_api_key {
        // Printed once so a newcomer can call the API; set DATA_API_KEY to choose it.
        println!("development API key (X-API-KEY): {generated}");
    }
    println!(
        "SIWE: domain {}, URI {}, chain {}",
        config.siwe_domain, config.siwe_uri, config.siwe_chain_id
    );
    match &config.redis {
        // The URL may carry a password: only the prefix is shown.
        Some(settings) => println!(
            "nonces, sessions, PATs, revocations and key quotas in Redis, key prefix {}",
            settings.prefix
        ),
        None => println!("nonces, sessions and PATs in this process (one replica)"),
    }
    println!("wallets with favorites: {}", dev.seeded_wallets.join(", "));
    println!("OpenAPI description: http://{address}/api/v2/openapi.json");
    println!("MCP (streamable HTTP): http://{address}/mcp");
    println!("console (sign in, tokens, quota): http://{address}/console");
    let close_mcp_streams = dev.close_mcp_streams;
    let signalled =
        shutdown::on_signal(config.draining.clone(), move || close_mcp_streams.close())?;
    let stop = signalled.clone().wait();
    let server = async move {
        // The peer address rides along for the access log's client.
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, service)
            .with_graceful_shutdown(stop)
            .await
    };
    shutdown::until_drained("data_api", server, signalled, config.drain).await?;
    Ok(())
}

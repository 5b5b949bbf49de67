//! The Area A reference server: a wallet-authenticated data API.
//!
//! `cargo run --example data_api --features tokens,siwe,mcp,tracing,jwks-url` listens on
//! `DATA_API_LISTEN` (default `127.0.0.1:8080`) with embedded defaults:
//! in-memory stores, one development API key (`DATA_API_KEY`, else generated
//! and printed once), a few wallets with favorites, and an Ed25519 signing key
//! generated at start (or read from `DATA_API_SIGNING_KEY_FILE`: 32 raw bytes or a PKCS#8 PEM).
//! MCP clients connect to `/mcp` (streamable HTTP) with the same `X-API-KEY`
//! and, for wallet tools, `Authorization: Bearer <wallet JWT>`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `DATA_API_LISTEN` | `127.0.0.1:8080` | listen address |
//! | `DATA_API_ORIGIN` | `http://` + the bound address | this server's public origin: JWT `iss` and `aud`, the SIWE domain and URI (set it behind a proxy or on a wildcard bind) |
//! | `DATA_API_KEY` | generated | the development API key (with Redis, keys from `data_api keys create` are accepted too) |
//! | `DATA_API_DRAIN_SECS` | `30` | on SIGTERM/SIGINT: how long requests in flight may take before the server exits 1 anyway (open `/mcp` streams are closed at once) |
//! | `DATA_API_SIWE_DOMAIN` | the origin's authority | SIWE `domain` to accept |
//! | `DATA_API_SIWE_URI` | the origin | SIWE `URI` to accept |
//! | `DATA_API_SIWE_CHAIN_ID` | `1` | SIWE `Chain ID` to accept |
//! | `DATA_API_JWT_LIFETIME_SECS` | `900` | wallet JWT lifetime |
//! | `DATA_API_KEY_PER_MINUTE` | `600` | requests per minute of the API key, and of issued keys without their own quota |
//! | `DATA_API_SIGNING_KEY_FILE` | none | the Ed25519 key that signs JWTs: a 32-byte seed or a PKCS#8 PEM (required with Redis: every replica signs with it) |
//! | `DATA_API_PREVIOUS_SIGNING_KEY_FILE` | none | the key rotated out (same formats): its JWTs still verify and it stays in the JWKS, but it signs nothing; drop it once the longest JWT it signed has expired |
//! | `DATA_API_CORS_ORIGINS` | none | comma-separated browser origins (`https://app.example`) allowed to call the API with a key or token (no cookies); none: no CORS |
//! | `DATA_API_TRUSTED_PROXIES` | none | comma-separated CIDRs of proxies whose forwarding header names the client (the access log's `client`); without them the socket peer is the client |
//! | `DATA_API_FORWARDED_HEADER` | `x-forwarded-for` | the header those proxies write: `x-forwarded-for` or `forwarded` (RFC 7239) |
//! | `DATA_API_ACCESS_LOG` | standard error | file for the log (access lines and the layers' events) |
//! | `DATA_API_REDIS_URL` | none | `redis://host:port/db` (feature `redis`): replicas share nonces, sessions, PATs, revocations, API-key quotas and the keys `data_api keys create` issues there |
//! | `DATA_API_REDIS_PREFIX` | `walletgate` | key prefix in that Redis (one per data API deployment) |
//! | `DATA_API_REDIS_CA_FILE` | none (Mozilla's roots) | `rediss://` (feature `redis-tls`): PEM of the private CA that signed the Redis certificate |
//! | `DATA_API_METRICS_LISTEN` | none (off) | `host:port` (feature `metrics`): Prometheus text at `GET /metrics` there (counters and histograms of `walletgate::metrics`), apart from the API |
//! | `DATA_API_JWKS_URL` | none | an external issuer's JWKS URL: its JWTs are accepted too |
//! | `DATA_API_JWT_ISSUER` | none (required with the URL) | that issuer's `iss` |
//! | `DATA_API_JWT_AUDIENCE` | the origin | the `aud` its tokens must name |
//! | `DATA_API_SCOPES_CLAIM` | `scope` | its scopes claim (e.g. `opensea_scopes`; string or array) |
//! | `DATA_API_WALLET_CLAIM` | `wallet` | its wallet claim (e.g. `linked_wallets`: the first entry) |
//! | `RUST_LOG` | `info` | log filter (`tracing-subscriber`'s `EnvFilter`) |
//! | `LOG_FORMAT` | text | `json`: one JSON object per line |

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
mod openapi;
#[path = "../common/openapi.rs"]
mod openapi_common;
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
#[cfg(test)]
mod tests_sdk;
mod tools;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

pub(crate) use crate::quotas::ApiKeys;
use crate::quotas::{key_quotas, key_stores};
use crate::redis_settings::RedisSettings;
use axum::Router;
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota};
use walletgate::clock::{SharedClock, SystemClock};
use walletgate::siwe::SiweVerifier;
use walletgate::tokens::{IssuerConfig, SigningKeyFile, SigningKeys, TokenIssuer};
use walletgate::wallet_jwt::{JwksUrl, JwtVerifier, KeySet, ResourceMetadataUrl, WalletJwtLayer};

use crate::favorites::Favorites;
use crate::openapi::{Access, Operation};
use crate::relationships::Relationships;
use crate::shutdown::Draining;
use crate::state::{AppState, SharedState};
use crate::stores::Stores;

/// Settings read from the environment.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) listen: SocketAddr,
    pub(crate) origin: String,
    pub(crate) api_key: Option<String>,
    pub(crate) siwe_domain: String,
    pub(crate) siwe_uri: String,
    pub(crate) siwe_chain_id: u64,
    pub(crate) jwt_lifetime_secs: u64,
    pub(crate) key_per_minute: std::num::NonZeroU32,
    pub(crate) signing_key_file: Option<std::path::PathBuf>,
    /// The key rotated out: verifies and is published, never signs.
    pub(crate) previous_signing_key_file: Option<std::path::PathBuf>,
    /// Where `/metrics` is served (`DATA_API_METRICS_LISTEN`); `None`: off.
    pub(crate) metrics_listen: Option<SocketAddr>,
    pub(crate) access_log: Option<std::path::PathBuf>,
    /// The Redis the replicas share (`DATA_API_REDIS_URL`); `None`: in memory.
    pub(crate) redis: Option<RedisSettings>,
    /// An external issuer whose JWTs are accepted besides this server's own.
    pub(crate) external_issuer: Option<ExternalIssuer>,
    /// Browser origins allowed (`DATA_API_CORS_ORIGINS`); empty: no CORS.
    pub(crate) cors_origins: Vec<http::HeaderValue>,
    /// Who the client is: the peer, or what a trusted proxy says.
    pub(crate) client_ip: walletgate::free_tier::ClientIpResolver,
    /// How long a drain may take (`DATA_API_DRAIN_SECS`).
    pub(crate) drain: std::time::Duration,
    /// Set on SIGTERM/SIGINT: `GET /readyz` answers 503 from then on.
    pub(crate) draining: Draining,
}

/// An external issuer's JWTs (`DATA_API_JWKS_URL` and friends).
#[derive(Clone, Debug)]
pub(crate) struct ExternalIssuer {
    pub(crate) jwks_url: String,
    pub(crate) issuer: String,
    pub(crate) audience: Option<String>,
    pub(crate) scopes_claim: Option<String>,
    pub(crate) wallet_claim: Option<String>,
}

/// Largest number of verified wallet JWTs remembered (signature checks skipped).
const VERIFIED_TOKEN_CACHE: usize = 10_000;

impl Config {
    fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings from `lookup` (the environment, or a test's table).
    pub(crate) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        Self::from_lookup_bound(lookup, None)
    }

    /// The configuration once the listener is bound to `bound`: without
    /// `DATA_API_ORIGIN` the origin is the bound address, so
    /// `DATA_API_LISTEN=127.0.0.1:0` names the port it got, not `:0`.
    pub(crate) fn from_lookup_bound(
        lookup: impl Fn(&str) -> Option<String>,
        bound: Option<SocketAddr>,
    ) -> Result<Self, String> {
        let var = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let listen: SocketAddr = var("DATA_API_LISTEN")
            .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
            .parse()
            .map_err(|_| "DATA_API_LISTEN must be an address such as 127.0.0.1:8080")?;
        let origin =
            var("DATA_API_ORIGIN").unwrap_or_else(|| format!("http://{}", bound.unwrap_or(listen)));
        let mut config = Self::for_origin(listen, &origin)?;
        config.api_key = var("DATA_API_KEY");
        if let Some(domain) = var("DATA_API_SIWE_DOMAIN") {
            config.siwe_domain = domain;
        }
        if let Some(uri) = var("DATA_API_SIWE_URI") {
            config.siwe_uri = uri;
        }
        if let Some(chain) = var("DATA_API_SIWE_CHAIN_ID") {
            config.siwe_chain_id = chain
                .parse()
                .map_err(|_| "DATA_API_SIWE_CHAIN_ID must be an integer")?;
        }
        if let Some(secs) = var("DATA_API_JWT_LIFETIME_SECS") {
            config.jwt_lifetime_secs = secs
                .parse()
                .map_err(|_| "DATA_API_JWT_LIFETIME_SECS must be an integer")?;
        }
        if let Some(per_minute) = var("DATA_API_KEY_PER_MINUTE") {
            config.key_per_minute = per_minute
                .parse()
                .map_err(|_| "DATA_API_KEY_PER_MINUTE must be a positive integer")?;
        }
        config.cors_origins = cors::origins_from_vars(&var, "DATA_API")
            .map_err(|(variable, reason)| format!("{variable}: {reason}"))?;
        config.client_ip = proxies::client_ip_from_vars(&var, "DATA_API")
            .map_err(|(variable, reason)| format!("{variable}: {reason}"))?;
        config.drain = shutdown::drain_secs(var("DATA_API_DRAIN_SECS"), "DATA_API_DRAIN_SECS")?;
        config.signing_key_file = var("DATA_API_SIGNING_KEY_FILE").map(Into::into);
        config.previous_signing_key_file =
            var("DATA_API_PREVIOUS_SIGNING_KEY_FILE").map(Into::into);
        config.metrics_listen = metrics_endpoint::parse_listen(
            "DATA_API_METRICS_LISTEN",
            var("DATA_API_METRICS_LISTEN"),
        )?;
        config.access_log = var("DATA_API_ACCESS_LOG").map(Into::into);
        config.redis = RedisSettings::from_vars(&var, "DATA_API")
            .map_err(|(variable, reason)| format!("{variable}: {reason}"))?;
        config.check_replicas()?;
        if let Some(jwks_url) = var("DATA_API_JWKS_URL") {
            config.external_issuer = Some(ExternalIssuer {
                jwks_url,
                issuer: var("DATA_API_JWT_ISSUER")
                    .ok_or("DATA_API_JWT_ISSUER is required with DATA_API_JWKS_URL")?,
                audience: var("DATA_API_JWT_AUDIENCE"),
                scopes_claim: var("DATA_API_SCOPES_CLAIM"),
                wallet_claim: var("DATA_API_WALLET_CLAIM"),
            });
        }
        Ok(config)
    }

    /// Replicas sharing a Redis must also share the signing key: a key
    /// generated per process would make each refuse the others' JWTs.
    pub(crate) fn check_replicas(&self) -> Result<(), String> {
        if self.redis.is_some() && self.signing_key_file.is_none() {
            return Err("DATA_API_REDIS_URL needs DATA_API_SIGNING_KEY_FILE: \
                        every replica must sign with the same key"
                .into());
        }
        Ok(())
    }

    /// Defaults for a server reachable at `origin`.
    pub(crate) fn for_origin(listen: SocketAddr, origin: &str) -> Result<Self, String> {
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'))
            .filter(|authority| !authority.is_empty() && !authority.contains('/'))
            .ok_or("DATA_API_ORIGIN must look like http://host:port")?;
        Ok(Self {
            listen,
            origin: origin.trim_end_matches('/').to_owned(),
            api_key: None,
            siwe_domain: authority.to_owned(),
            siwe_uri: origin.trim_end_matches('/').to_owned(),
            siwe_chain_id: 1,
            jwt_lifetime_secs: walletgate::tokens::IssuerConfig::DEFAULT_JWT_LIFETIME_SECS,
            key_per_minute: std::num::NonZeroU32::new(600).ok_or("zero quota")?,
            signing_key_file: None,
            previous_signing_key_file: None,
            metrics_listen: None,
            access_log: None,
            redis: None,
            external_issuer: None,
            cors_origins: Vec::new(),
            client_ip: walletgate::free_tier::ClientIpResolver::new(),
            drain: std::time::Duration::from_secs(shutdown::DEFAULT_DRAIN_SECS),
            draining: Draining::default(),
        })
    }
}

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
    // Probes sit outside every gate and need no credentials.
    let router = health::routes(readiness)
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
    let jwks = JwksUrl::with_tls(
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
    for (path, access, handler) in operations.into_iter().filter_map(Operation::into_route) {
        match access {
            Access::Public => public = public.route(path, handler),
            Access::ApiKey | Access::RefreshCookie | Access::ApiKeyOptionalWallet => {
                keyed = keyed.route(path, handler);
            }
            Access::Session => token_management = token_management.route(path, handler),
            Access::Wallet(guard) => {
                let guard = guard.with_resource_metadata(metadata.api.clone());
                wallet_scoped = wallet_scoped.route(path, handler.route_layer(guard));
            }
        }
    }

    let wallet_scoped = wallet_scoped.route_layer(jwt());
    // Token management reads the session cookie; a bearer, if sent, is
    // verified so revocation can insist it names the same wallet.
    let token_management = token_management.route_layer(jwt().optional_bearer());

    let keyed = keyed
        .merge(wallet_scoped)
        .merge(token_management)
        .layer(api_keys.clone());

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

/// `--help`: the usage and every variable of this file's table.
fn help() -> String {
    cli::help(
        "data_api: the wallet-authenticated data API's reference server (API key, wallet JWT, \
         SIWE, MCP at /mcp)\n\nUSAGE: data_api [--help] [--version]\n       \
         data_api keys create [--per-minute N] | list | revoke ID   (feature redis: the API \
         keys on DATA_API_REDIS_URL; create prints the new key alone on stdout)",
        include_str!("main.rs"),
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

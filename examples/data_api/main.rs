//! The Area A reference server: a wallet-authenticated data API.
//!
//! `cargo run --example data_api --features tokens,siwe,mcp` listens on
//! `DATA_API_LISTEN` (default `127.0.0.1:8080`) with embedded defaults:
//! in-memory stores, one development API key (`DATA_API_KEY`, else generated
//! and printed once), a few wallets with favorites, and an Ed25519 signing key
//! generated at start (or read from `DATA_API_SIGNING_KEY_FILE`, 32 raw bytes).
//! MCP clients connect to `/mcp` (streamable HTTP) with the same `X-API-KEY`
//! and, for wallet tools, `Authorization: Bearer <wallet JWT>`.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `DATA_API_LISTEN` | `127.0.0.1:8080` | listen address |
//! | `DATA_API_ORIGIN` | `http://<listen>` | this server's origin: JWT `iss` and `aud` |
//! | `DATA_API_KEY` | generated | the development API key |
//! | `DATA_API_SIWE_DOMAIN` | the origin's authority | SIWE `domain` to accept |
//! | `DATA_API_SIWE_URI` | the origin | SIWE `URI` to accept |
//! | `DATA_API_SIWE_CHAIN_ID` | `1` | SIWE `Chain ID` to accept |
//! | `DATA_API_JWT_LIFETIME_SECS` | `900` | wallet JWT lifetime |
//! | `DATA_API_KEY_PER_MINUTE` | `600` | requests per minute of the API key |
//! | `DATA_API_SIGNING_KEY_FILE` | none | 32-byte Ed25519 seed |
//! | `DATA_API_ACCESS_LOG` | standard error | file for the access log |

mod access_log;
mod app;
mod auth;
mod favorites;
mod mcp;
mod openapi;
mod relationships;
mod rest;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sdk;

use std::net::SocketAddr;

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
    pub(crate) access_log: Option<std::path::PathBuf>,
}

impl Config {
    fn from_env() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let listen: SocketAddr = var("DATA_API_LISTEN")
            .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
            .parse()
            .map_err(|_| "DATA_API_LISTEN must be an address such as 127.0.0.1:8080")?;
        let origin = var("DATA_API_ORIGIN").unwrap_or_else(|| format!("http://{listen}"));
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
        config.signing_key_file = var("DATA_API_SIGNING_KEY_FILE").map(Into::into);
        config.access_log = var("DATA_API_ACCESS_LOG").map(Into::into);
        Ok(config)
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
            access_log: None,
        })
    }
}

#[tokio::main]
async fn main() {
    if let Err(error) = run().await {
        eprintln!("data_api: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    let (router, dev) = app::build(&config)?;
    let log = match &config.access_log {
        Some(path) => access_log::AccessLog::to_file(path)?,
        None => access_log::AccessLog::stderr(),
    };
    let router = log.around(router);
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let address = listener.local_addr()?;
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
    println!("wallets with favorites: {}", dev.seeded_wallets.join(", "));
    println!("OpenAPI description: http://{address}/api/v2/openapi.json");
    println!("MCP (streamable HTTP): http://{address}/mcp");
    axum::serve(listener, router).await?;
    Ok(())
}

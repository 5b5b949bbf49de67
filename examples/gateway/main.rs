//! The paid model gateway's reference server (specification, Area B).
//!
//! ```sh
//! cargo run --example gateway
//! ```
//!
//! Listens on `GATEWAY_LISTEN` (default `127.0.0.1:8402`) and serves
//! `/v1/chat/completions`, `/v1/messages`, `/v1/responses` and `/v1/models`,
//! each also under `/api/v1/…`. Answers come from the embedded echo family
//! unless a provider's OpenAI-compatible upstream is configured; see
//! `config.rs` for every variable.

mod app;
mod catalogue;
mod config;
mod gateway;
mod pipeline;
mod render;
mod request;
mod upstream;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;

use config::Config;

#[tokio::main]
async fn main() {
    if let Err(error) = run().await {
        eprintln!("gateway: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let address = listener.local_addr()?;
    println!("gateway listening on http://{address}");
    println!("models:  curl http://{address}/v1/models");
    println!(
        "chat:    curl http://{address}/v1/chat/completions -H 'content-type: application/json' \
         -d '{{\"model\":\"nvidia/nemotron-super\",\"messages\":[{{\"role\":\"user\",\"content\":\"hello\"}}]}}'"
    );
    // Connection addresses ride along for the per-IP free-tier limit.
    let service = app::app(config).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service).await?;
    Ok(())
}

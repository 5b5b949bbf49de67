//! The paid model gateway's reference server (specification, Area B).
//!
//! ```sh
//! cargo run --example gateway --features axum,http-facilitator,rustls
//! cargo run --example gateway --features axum,http-facilitator,rustls -- --network solana
//! ```
//!
//! (`scripts/serve.sh` starts it with the right features.)
//!
//! Listens on `GATEWAY_LISTEN` (default `127.0.0.1:8402`) and serves
//! `/v1/chat/completions`, `/v1/messages`, `/v1/responses`, `/v1/models` and
//! `/v1/images/generations` (paid jobs, polled; see `images.rs`), each also
//! under `/api/v1/…`. Answers come from the embedded echo family
//! unless a provider's OpenAI-compatible upstream is configured; see
//! `config.rs` for every variable.
//!
//! Paid models answer 402 with an x402 quote in Base Sepolia USDC; a retry
//! with a `PAYMENT-SIGNATURE` signed by one of the printed development
//! accounts is verified and settled in-process. Free models are limited per
//! client IP. `--network solana` quotes Solana USDC instead, verified and
//! settled by the x402 facilitator at `GATEWAY_FACILITATOR_URL`.

mod app;
mod catalogue;
mod config;
mod gateway;
mod images;
mod payment;
mod pipeline;
mod render;
mod request;
mod upstream;

#[cfg(test)]
mod payment_tests;
#[cfg(test)]
mod sdk_tests;
#[cfg(test)]
mod solana_tests;
#[cfg(test)]
mod tests;
// The x402 tests' payer: signs EIP-3009 authorizations with the public dev keys.
#[cfg(test)]
#[path = "../../tests/x402_support/mod.rs"]
mod x402_support;
// A loopback HTTPS server with a certificate made in the test.
#[cfg(test)]
#[path = "../../tests/tls_support/mod.rs"]
mod tls_support;

use std::net::SocketAddr;

use config::{Config, PaymentNetwork};
use payment::PaymentSettings;
use walletgate::x402::DevLedger;

#[tokio::main]
async fn main() {
    if let Err(error) = run().await {
        eprintln!("gateway: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::from_env()?;
    if let PaymentNetwork::Solana(settings) = &mut config.network
        && settings.fee_payer.is_none()
    {
        settings.fee_payer =
            Some(PaymentSettings::solana_fee_payer(&settings.facilitator_url, &config.tls).await?);
    }
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let address = listener.local_addr()?;
    println!("gateway listening on http://{address} (clients: api_url http://{address}/api)");
    match &config.network {
        PaymentNetwork::LocalEvm => {
            println!(
                "payments: Base Sepolia USDC, settled on the in-process development ledger, payTo {}",
                config.pay_to
            );
            println!(
                "development payer accounts (public Hardhat/Anvil mnemonic, 10,000 USDC each):"
            );
            for account in DevLedger::DEV_ACCOUNTS {
                println!("  {account}");
            }
        }
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
    // Connection addresses ride along for the per-IP free-tier limit.
    let service = app::app(config)?.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service).await?;
    Ok(())
}

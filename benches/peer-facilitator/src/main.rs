//! The x402-rs facilitator (crates.io `x402-facilitator-local` and
//! `x402-chain-eip155` 2.0.2) on one EVM chain with one settler key, serving
//! `POST /verify`, `POST /settle` and `GET /supported` as its own binary does,
//! for `scripts/bench-settler.sh`. Configured by environment only:
//!
//! - `PEER_LISTEN`: host:port to serve on (loopback in the bench)
//! - `PEER_RPC_URL`: the chain's JSON-RPC URL
//! - `PEER_CHAIN_ID`: the EIP-155 chain id (84532 in the bench)
//! - `PEER_SETTLER_KEY`: the settler's private key (hex); read by x402-rs's own
//!   `$VAR` indirection so it never appears in a command line or a log
//!
//! `walletgate-peer-facilitator required-contracts` prints the addresses
//! x402-rs refuses to start without (one a line), so a bench can stub them.

use std::collections::HashMap;
use std::sync::Arc;

use x402_chain_eip155::V2Eip155Exact;
use x402_chain_eip155::chain::config::{Eip155ChainConfig, Eip155ChainConfigInner};
use x402_chain_eip155::chain::permit2::{EXACT_PERMIT2_PROXY_ADDRESS, PERMIT2_ADDRESS};
use x402_chain_eip155::chain::{Eip155ChainProvider, Eip155ChainReference};
use x402_chain_eip155::v1_eip155_exact::VALIDATOR_ADDRESS;
use x402_facilitator_local::{FacilitatorLocal, handlers};
use x402_types::chain::{ChainId, ChainProviderOps, ChainRegistry, FromConfig};
use x402_types::scheme::{
    SchemeBlueprints, SchemeConfig, SchemeRegistry, X402SchemeFacilitator,
    X402SchemeFacilitatorBuilder, X402SchemeId,
};

/// The registry's provider type. x402-rs's scheme blueprints are built from a
/// reference to the registry's provider; its own binary has an enum of chains
/// here, one chain needs only this wrapper.
#[derive(Clone)]
struct EvmChain(Arc<Eip155ChainProvider>);

impl ChainProviderOps for EvmChain {
    fn signer_addresses(&self) -> Vec<String> {
        self.0.signer_addresses()
    }
    fn chain_id(&self) -> ChainId {
        self.0.chain_id()
    }
}

/// `V2Eip155Exact` builds from any `Eip155MetaTransactionProvider`, which
/// `Arc<Eip155ChainProvider>` is; the registry hands out `&EvmChain`.
struct Exact(V2Eip155Exact);

impl X402SchemeId for Exact {
    fn x402_version(&self) -> u8 {
        self.0.x402_version()
    }
    fn namespace(&self) -> &str {
        self.0.namespace()
    }
    fn scheme(&self) -> &str {
        self.0.scheme()
    }
}

impl X402SchemeFacilitatorBuilder<&EvmChain> for Exact {
    fn build(
        &self,
        chain: &EvmChain,
        config: Option<serde_json::Value>,
    ) -> Result<Box<dyn X402SchemeFacilitator>, Box<dyn std::error::Error>> {
        self.0.build(Arc::clone(&chain.0), config)
    }
}

fn required(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("walletgate-peer-facilitator: set {name}");
        std::process::exit(2)
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("required-contracts") {
        for address in [
            VALIDATOR_ADDRESS,
            PERMIT2_ADDRESS,
            EXACT_PERMIT2_PROXY_ADDRESS,
        ] {
            println!("{address}");
        }
        return Ok(());
    }
    let listen = required("PEER_LISTEN");
    let chain_id: u64 = required("PEER_CHAIN_ID").parse()?;
    let inner: Eip155ChainConfigInner = serde_json::from_value(serde_json::json!({
        "signers": ["$PEER_SETTLER_KEY"],
        "rpc": [{ "http": required("PEER_RPC_URL") }],
    }))?;
    let config = Eip155ChainConfig {
        chain_reference: Eip155ChainReference::new(chain_id),
        inner,
    };
    let chain = EvmChain(Arc::new(Eip155ChainProvider::from_config(&config).await?));
    let chain_pattern = chain.chain_id().to_string();
    let chains = ChainRegistry::new(HashMap::from([(chain.chain_id(), chain)]));
    let schemes: Vec<SchemeConfig> = serde_json::from_value(serde_json::json!([
        { "id": "v2-eip155-exact", "chains": chain_pattern },
    ]))?;
    let registry = SchemeRegistry::build(
        chains,
        SchemeBlueprints::new().and_register(Exact(V2Eip155Exact)),
        &schemes,
    );
    let facilitator = Arc::new(FacilitatorLocal::new(registry));
    let app = handlers::routes().with_state(facilitator);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    eprintln!("walletgate-peer-facilitator: listening on {listen}");
    axum::serve(listener, app).await?;
    Ok(())
}

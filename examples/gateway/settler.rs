//! walletgate's own on-chain settler, built from its parsed settings
//! (`GATEWAY_EVM_RPC_URL` + `GATEWAY_SETTLER_KEY_FILE`, see `config.rs`):
//! connected at start, its startup checks run, its broadcast records and
//! its key's nonces kept where the replicas share them.

use std::sync::Arc;

use walletgate::tls::ClientTls;
use walletgate::x402::facilitator::evm_settler::{
    EvmSettler, MemoryNonceAllocator, MemorySettlementRecords, NonceAllocator, SettlementRecords,
    SettlerKey,
};

use crate::config::{Config, ConfigError, EvmSettings, PaymentNetwork, SettlerSettings, invalid};
use crate::gates::RedisConnection;

/// The settler `config` asks for (an EVM network with settler settings),
/// connected; `None` when it asks for none. With `redis` every replica
/// reads what any of them broadcast, and they share the key's nonces.
pub(crate) async fn configured(
    config: &Config,
    redis: Option<RedisConnection>,
) -> Result<Option<EvmSettler>, ConfigError> {
    let (PaymentNetwork::Evm(evm), Some(settings)) = (&config.network, &config.settler_settings)
    else {
        return Ok(None);
    };
    let shared = match redis {
        None => Shared::in_memory(),
        #[cfg(feature = "redis")]
        Some(conn) => Shared {
            records: Arc::new(walletgate::redis::RedisSettlementRecords::new(conn.clone())),
            nonces: Arc::new(walletgate::redis::RedisNonceAllocator::new(conn)),
        },
        #[cfg(not(feature = "redis"))]
        Some(never) => match never {},
    };
    connect(settings, evm, &config.tls, shared).await.map(Some)
}

/// What the settler keeps where every replica on its key reads it.
pub(crate) struct Shared {
    pub(crate) records: Arc<dyn SettlementRecords>,
    pub(crate) nonces: Arc<dyn NonceAllocator>,
}

impl Shared {
    /// In this process only: one replica per settler key.
    pub(crate) fn in_memory() -> Self {
        Self {
            records: Arc::new(MemorySettlementRecords::new()),
            nonces: Arc::new(MemoryNonceAllocator::new()),
        }
    }
}

/// The settler of `settings` for `evm`'s USDC, its startup checks run
/// (chain id, the token's code, a warning when the key holds little ETH).
/// Errors name the variable, never the key or the RPC URL.
pub(crate) async fn connect(
    settings: &SettlerSettings,
    evm: &EvmSettings,
    tls: &ClientTls,
    shared: Shared,
) -> Result<EvmSettler, ConfigError> {
    let key = SettlerKey::from_file(&settings.key_file)
        .map_err(|error| invalid("GATEWAY_SETTLER_KEY_FILE", error.to_string()))?;
    let usdc = evm
        .usdc
        .parse()
        .map_err(|_| invalid("GATEWAY_USDC_ADDRESS", "not an EVM address"))?;
    let (settler, report) = EvmSettler::builder(&settings.rpc_url, key, evm.network.clone())
        .with_asset(usdc)
        .with_tls(tls.clone())
        .with_records(shared.records)
        .with_nonce_allocator(shared.nonces)
        .with_receipt_timeout(settings.receipt_timeout)
        .with_confirmations(settings.confirmations)
        .connect()
        .await
        .map_err(|error| invalid("GATEWAY_EVM_RPC_URL", error.to_string()))?;
    if report.low_balance {
        eprintln!(
            "gateway: WARNING: settler {} holds {} wei: fund it with ETH for gas",
            report.address, report.balance_wei
        );
    }
    Ok(settler)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[cfg(unix)]
    #[tokio::test]
    async fn a_settler_key_file_others_can_read_is_refused_and_never_echoed() {
        use std::os::unix::fs::PermissionsExt;
        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let dir = std::env::temp_dir().join(format!("gateway-settler-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("settler.key");
        std::fs::write(&path, format!("{key}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let settings = SettlerSettings {
            rpc_url: "http://127.0.0.1:1/secret-api-key".into(),
            key_file: path.display().to_string(),
            receipt_timeout: Duration::from_secs(1),
            confirmations: 0,
        };
        let error = connect(
            &settings,
            &EvmSettings::base_sepolia(),
            &ClientTls::webpki_roots(),
            Shared::in_memory(),
        )
        .await
        .err()
        .unwrap()
        .to_string();
        assert!(
            error.contains("GATEWAY_SETTLER_KEY_FILE") && error.contains("chmod 600"),
            "{error}"
        );
        assert!(!error.contains(&key[2..]));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let error = connect(
            &settings,
            &EvmSettings::base_sepolia(),
            &ClientTls::webpki_roots(),
            Shared::in_memory(),
        )
        .await
        .err()
        .unwrap()
        .to_string();
        assert!(error.contains("GATEWAY_EVM_RPC_URL"), "{error}");
        assert!(
            !error.contains(&key[2..]) && !error.contains("secret-api-key"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An unusable GATEWAY_EVM_RPC_URL is named by its variable (and at most
    /// its scheme and host), never echoed: it may carry a provider's key.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_bad_rpc_url_is_refused_without_echoing_it() {
        use std::os::unix::fs::PermissionsExt;
        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let dir = std::env::temp_dir().join(format!("gateway-bad-rpc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("settler.key");
        std::fs::write(&path, format!("{key}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        for url in [
            "node.example/v2/SECRET-KEY with spaces",
            "ftp://node.example/v2/SECRET-KEY?key=SECRET-KEY",
            "wss://user:SECRET-KEY@node.example/v2/SECRET-KEY",
        ] {
            let settings = SettlerSettings {
                rpc_url: url.into(),
                key_file: path.display().to_string(),
                receipt_timeout: Duration::from_secs(1),
                confirmations: 0,
            };
            let error = connect(
                &settings,
                &EvmSettings::base_sepolia(),
                &ClientTls::webpki_roots(),
                Shared::in_memory(),
            )
            .await
            .err()
            .unwrap()
            .to_string();
            assert!(error.contains("GATEWAY_EVM_RPC_URL"), "{error}");
            assert!(!error.contains("SECRET-KEY"), "{error}");
            assert!(!error.contains(&key[2..]), "{error}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

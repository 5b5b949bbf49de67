//! `data_api keys create|list|revoke`: the API keys every replica accepts,
//! issued into the shared Redis (`DATA_API_REDIS_URL`, `DATA_API_REDIS_PREFIX`,
//! `DATA_API_REDIS_CA_FILE`; nothing else is read).
//!
//! `create [--per-minute N]` prints the new key alone on one line of standard
//! output (shown once: only its digest is stored) and its id on standard
//! error; without `--per-minute` the key has the servers' default quota
//! (`DATA_API_KEY_PER_MINUTE`). `list` prints `id quota` lines, `revoke ID`
//! removes a key: every replica refuses it from its next request.

use std::num::NonZeroU32;

use walletgate::api_key::{ApiKeyId, KeyQuota};
use walletgate::redis::RedisKeyStore;

use crate::redis_settings::RedisSettings;

/// The usage line of `data_api keys`.
pub(crate) const USAGE: &str = "data_api keys create [--per-minute N] | list | revoke ID";

/// Runs `data_api keys <args>` against the process environment.
pub(crate) async fn run(args: &[String]) -> Result<(), String> {
    let var = |name: &str| std::env::var(name).ok();
    let settings = RedisSettings::from_vars(&var, "DATA_API")
        .map_err(|(variable, reason)| format!("{variable}: {reason}"))?
        .ok_or("DATA_API_REDIS_URL is not set: keys live in the replicas' shared Redis")?;
    let keys = RedisKeyStore::new(settings.open()?);
    let failed = |err: walletgate::store::StoreError| walletgate::error_chain(&err);
    match args {
        [command] if command == "create" => create(&keys, None).await.map_err(failed),
        [command, flag, per_minute] if command == "create" && flag == "--per-minute" => {
            let per_minute: NonZeroU32 = per_minute
                .parse()
                .map_err(|_| "--per-minute takes a positive integer".to_owned())?;
            create(&keys, Some(KeyQuota::per_minute(per_minute)))
                .await
                .map_err(failed)
        }
        [command] if command == "list" => {
            for record in keys.list().await.map_err(failed)? {
                let quota = record.quota.map_or_else(
                    || "default".to_owned(),
                    |quota| format!("{}/{}s", quota.requests(), quota.window().as_secs_f64()),
                );
                println!("{} {quota}", record.id);
            }
            Ok(())
        }
        [command, id] if command == "revoke" => {
            let id = ApiKeyId::new(id.as_str()).map_err(|err| err.to_string())?;
            if keys.revoke(&id).await.map_err(failed)? {
                eprintln!("revoked {id}");
                Ok(())
            } else {
                Err(format!("no key with id {id}"))
            }
        }
        _ => Err(format!("usage: {USAGE}")),
    }
}

async fn create(
    keys: &RedisKeyStore,
    quota: Option<KeyQuota>,
) -> Result<(), walletgate::store::StoreError> {
    let (id, secret) = keys.create(quota).await?;
    // The key alone on stdout, so `key=$(data_api keys create)` captures it.
    println!("{}", secret.expose());
    eprintln!("created {id} (shown once: store it now)");
    Ok(())
}

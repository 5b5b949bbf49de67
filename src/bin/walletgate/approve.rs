//! `walletgate approve --rpc-url URL --asset ADDRESS (--max-usd N | --unlimited) [--dry-run]`
//!
//! The one-time step before paying metered (`upto`) offers: the wallet
//! approves Permit2 for a USD stablecoin, `approve(Permit2, N × 10^decimals)`,
//! so Permit2 may pull at most N USD across every permit it signs later.
//! Never unlimited unless `--unlimited` says so. The key comes from the same
//! places as `pay`'s ([`KeyArgs`]); the wallet pays the gas in the chain's
//! coin. `--dry-run` prints the transaction it would send and sends nothing.
//! The result goes to stdout (one line, or one JSON document with
//! `--format json`); nothing printed holds the key or the RPC URL.

use std::time::Duration;

use alloy_primitives::{Address, U256};
use clap::Args;
use serde_json::json;
use walletgate::tls::ClientTls;
use walletgate::x402::facilitator::evm_settler::SettlerKey;
use walletgate::x402::facilitator::evm_settler::{ApprovalError, ApprovalPlan, Permit2Approval};

use crate::exit::{Exit, Failure, Format};
use crate::signer::KeyArgs;

/// The bound on one JSON-RPC call.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the receipt is waited for.
const RECEIPT_WAIT: Duration = Duration::from_secs(120);

/// `walletgate approve`.
#[derive(Args)]
pub(crate) struct ApproveArgs {
    /// The chain's JSON-RPC endpoint (http or https; never printed)
    #[arg(
        long,
        value_name = "URL",
        env = "WALLETGATE_RPC_URL",
        hide_env_values = true
    )]
    rpc_url: String,
    /// The token to approve (a USD stablecoin, e.g. USDC)
    #[arg(long, value_name = "ADDRESS")]
    asset: String,
    /// The most Permit2 may pull in all, in USD (whole units of the token)
    #[arg(long, value_name = "USD", required_unless_present = "unlimited")]
    max_usd: Option<String>,
    /// Approve 2^256-1 instead (what the official client asks for): a leaked
    /// permit could then take the whole balance
    #[arg(long, conflicts_with = "max_usd")]
    unlimited: bool,
    /// Print the transaction that would be sent; send nothing
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    key: KeyArgs,
}

/// Runs `walletgate approve`.
pub(crate) async fn run(args: ApproveArgs, format: Format) -> Exit {
    match approve(args, format).await {
        Ok(exit) => exit,
        Err(failure) => failure.report("approve", format),
    }
}

/// `usd` (a decimal, e.g. `5` or `12.50`) in units of a token of `decimals`.
fn units_of(usd: &str, decimals: u8) -> Result<U256, Failure> {
    let refuse = || {
        Failure::usage(format!(
            "--max-usd {usd}: expected a decimal amount of USD with at most {decimals} decimals"
        ))
    };
    let (whole, fraction) = usd.split_once('.').unwrap_or((usd, ""));
    let digits = |text: &str| text.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > decimals.into() {
        return Err(refuse());
    }
    let padded = format!("{whole}{fraction:0<width$}", width = usize::from(decimals));
    U256::from_str_radix(&padded, 10).map_err(|_| refuse())
}

fn rpc_failure(error: &ApprovalError) -> Failure {
    let exit = match error {
        ApprovalError::InvalidRpcUrl(_) | ApprovalError::NotAToken(_) => Exit::Usage,
        _ => Exit::Api,
    };
    Failure::from_error(exit, error)
}

async fn approve(args: ApproveArgs, format: Format) -> Result<Exit, Failure> {
    let asset: Address = args
        .asset
        .parse()
        .map_err(|_| Failure::usage(format!("--asset {}: not an address", args.asset)))?;
    let signer = args.key.signer()?;
    // The settler's key type signs the transaction: the same bytes, never shown.
    let key = SettlerKey::from_hex(&signer.to_bytes().to_string())
        .map_err(|_| Failure::auth("the wallet key is not a secp256k1 private key"))?;
    let approval =
        Permit2Approval::new(&args.rpc_url, key, &ClientTls::webpki_roots(), RPC_TIMEOUT)
            .map_err(|error| rpc_failure(&error))?;
    let amount = match &args.max_usd {
        Some(usd) if !args.unlimited => {
            let decimals = approval
                .decimals(asset)
                .await
                .map_err(|error| rpc_failure(&error))?;
            units_of(usd, decimals)?
        }
        _ => U256::MAX,
    };
    let plan = approval
        .plan(asset, amount)
        .await
        .map_err(|error| rpc_failure(&error))?;
    if args.dry_run {
        print(&plan, None, format);
        return Ok(Exit::Ok);
    }
    let transaction = approval
        .send(&plan, RECEIPT_WAIT)
        .await
        .map_err(|error| rpc_failure(&error))?;
    print(&plan, Some(&format!("{transaction:#x}")), format);
    Ok(Exit::Ok)
}

/// The result: what was sent (or would be, without a transaction).
fn print(plan: &ApprovalPlan, transaction: Option<&str>, format: Format) {
    let amount = if plan.amount == U256::MAX {
        "unlimited".to_owned()
    } else {
        plan.amount.to_string()
    };
    match format {
        Format::Json => println!(
            "{}",
            json!({
                "dryRun": transaction.is_none(),
                "chainId": plan.chain_id,
                "from": plan.from.to_checksum(None),
                "asset": plan.asset.to_checksum(None),
                "spender": plan.spender.to_checksum(None),
                "amount": plan.amount.to_string(),
                "currentAllowance": plan.current_allowance.to_string(),
                "nonce": plan.nonce,
                "gasLimit": plan.gas_limit,
                "maxFeePerGas": plan.max_fee_per_gas.to_string(),
                "maxPriorityFeePerGas": plan.max_priority_fee_per_gas.to_string(),
                "data": format!("0x{}", alloy_primitives::hex::encode(&plan.data)),
                "transaction": transaction,
            })
        ),
        Format::Text => match transaction {
            None => println!(
                "would send from {} on eip155:{}: approve(Permit2 {}, {amount}) to {} \
                 (allowance now {}; nonce {}, gas {}, data 0x{})",
                plan.from,
                plan.chain_id,
                plan.spender,
                plan.asset,
                plan.current_allowance,
                plan.nonce,
                plan.gas_limit,
                alloy_primitives::hex::encode(&plan.data)
            ),
            Some(transaction) => println!(
                "approved Permit2 {} for {amount} units of {} from {} on eip155:{} tx {transaction}",
                plan.spender, plan.asset, plan.from, plan.chain_id
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usd_amounts_are_exact_units_of_the_token() {
        assert_eq!(units_of("5", 6).unwrap(), U256::from(5_000_000u64));
        assert_eq!(units_of("12.5", 6).unwrap(), U256::from(12_500_000u64));
        assert_eq!(units_of("0.000001", 6).unwrap(), U256::from(1u64));
        assert_eq!(
            units_of("1", 18).unwrap(),
            U256::from(10u64).pow(U256::from(18))
        );
        for bad in ["", ".5", "1.0000001", "-1", "1e3", "1,5", "five"] {
            let failure = units_of(bad, 6).unwrap_err();
            assert_eq!(failure.exit, Exit::Usage, "{bad}");
        }
    }
}

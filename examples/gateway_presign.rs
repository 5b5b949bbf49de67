//! Pre-signs x402 payments for the gateway load test (`scripts/load.sh`).
//!
//! ```sh
//! cargo run --release --example gateway_presign -- <PAYMENT-REQUIRED value> <count> <out file> [--payment-ids]
//! ```
//!
//! Reads a quote (the base64 `PAYMENT-REQUIRED` header of a 402), signs
//! `count` EIP-3009 authorizations of its first offer, each with a fresh
//! nonce, round-robin over the four public development accounts, valid for
//! the offer's `maxTimeoutSeconds` from now, and writes one
//! `PAYMENT-SIGNATURE` value per line; with `--payment-ids` each also
//! carries a distinct `payment-identifier` id (echoing what the quote
//! declares). Nothing secret is written: the keys
//! are the public Hardhat/Anvil ones, and the signatures pay a development
//! ledger. Signing happens here so the load measures the server, not the
//! client.

use std::io::Write;

use serde_json::{Value, json};
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::x402::server::payment_id::PAYMENT_IDENTIFIER;
use walletgate::x402::wire::{PaymentPayload, PaymentRequired, codec};

/// At most this many authorizations per run (the load runs are bounded).
const MAX_COUNT: u64 = 1_000_000;

fn main() {
    if let Err(error) = run() {
        eprintln!("gateway_presign: {error}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (quote, count, out, with_ids) = match args.as_slice() {
        [quote, count, out] => (quote, count, out, false),
        [quote, count, out, flag] if flag == "--payment-ids" => (quote, count, out, true),
        _ => {
            return Err(
                "usage: gateway_presign <PAYMENT-REQUIRED value> <count> <out file> [--payment-ids]"
                    .into(),
            );
        }
    };
    let quote: PaymentRequired = codec::decode(quote.trim().as_bytes())?;
    let offer = quote.accepts.first().ok_or("the quote has no offer")?;
    // What the quote declares of the extension, echoed with each id.
    let declared_ids = (quote.extensions.as_ref())
        .and_then(|extensions| extensions.get(PAYMENT_IDENTIFIER))
        .and_then(|declared| declared.get("info"))
        .filter(|_| with_ids)
        .cloned();
    if with_ids && declared_ids.is_none() {
        return Err("--payment-ids: the quote does not declare payment-identifier".into());
    }
    let count: u64 = count.parse()?;
    if count == 0 || count > MAX_COUNT {
        return Err(format!("count must be 1..={MAX_COUNT}").into());
    }
    // The four accounts the load script's ledger watches.
    let payers: Vec<Payer> = (0..4).map(Payer::dev).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    // Nonces unique per run: the run's start time in the high bits.
    let base = now << 24;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    for index in 0..count {
        let payer = &payers[usize::try_from(index)? % payers.len()];
        let mut header = payer.header_with_nonce(offer, now, sequential_nonce(base + index))?;
        if let Some(Value::Object(declared)) = &declared_ids {
            let mut payload: PaymentPayload = codec::decode(header.as_bytes())?;
            let mut info = declared.clone();
            info.insert(
                "id".into(),
                Value::from(format!("load_{base:x}_{index:08}")),
            );
            let echo = json!({ PAYMENT_IDENTIFIER: { "info": info } });
            payload.extensions = echo.as_object().cloned();
            header = codec::encode(&payload);
        }
        writeln!(file, "{header}")?;
    }
    file.flush()?;
    eprintln!(
        "gateway_presign: {count} payments of {} units written to {out}",
        offer.amount.units()
    );
    Ok(())
}

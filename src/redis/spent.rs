//! The spent-authorization record of the x402 replay guard (`S` and JSON),
//! written by the replay guard's `mark_spent` or, paired with a
//! [`RedisLedger`](super::RedisLedger), by the ledger's transfer script, and
//! read back by the replay guard. Its own file so that neither of the two
//! imports the other for it.

use serde_json::{Value, json};

use crate::x402::{
    server::{PaymentReceipt, SpentAuthorization},
    wire::{AtomicAmount, Network},
};

/// `S` and the spent authorization as JSON.
pub(crate) fn encode_spent(spent: &SpentAuthorization) -> String {
    encode_record('S', spent)
}

/// `marker` (`S` spent, `P` settling) and the authorization's record as JSON.
pub(crate) fn encode_record(marker: char, spent: &SpentAuthorization) -> String {
    let mut body = receipt_json(&spent.receipt);
    body["fingerprint"] = Value::from(alloy_primitives::hex::encode(spent.fingerprint));
    format!("{marker}{body}")
}

/// A receipt's fields as JSON (also an entitlement's record).
pub(crate) fn receipt_json(receipt: &PaymentReceipt) -> Value {
    json!({
        "payer": receipt.payer(),
        "amount": receipt.amount().units().to_string(),
        "network": receipt.network().as_str(),
        "transaction": receipt.transaction(),
        "id": receipt.authorization_id(),
    })
}

/// The receipt [`receipt_json`] wrote.
pub(crate) fn receipt_of(body: &Value) -> Option<PaymentReceipt> {
    let text = |field: &str| body.get(field).and_then(Value::as_str);
    let amount = text("amount")?.parse::<u128>().ok()?;
    let network = Network::parse(text("network")?).ok()?;
    let mut receipt = PaymentReceipt::new(
        text("payer")?.to_owned(),
        AtomicAmount::new(amount),
        network,
        text("id")?.to_owned(),
    );
    if let Some(transaction) = text("transaction") {
        receipt = receipt.settled(transaction.to_owned());
    }
    Some(receipt)
}

/// The authorization of an `S` (or `P`) record, without its marker.
pub(crate) fn decode_spent(json: &str) -> Option<SpentAuthorization> {
    let body: Value = serde_json::from_str(json).ok()?;
    let receipt = receipt_of(&body)?;
    let text = |field: &str| body.get(field).and_then(Value::as_str);
    let mut fingerprint = [0; 32];
    alloy_primitives::hex::decode_to_slice(text("fingerprint")?, &mut fingerprint).ok()?;
    Some(SpentAuthorization {
        receipt,
        fingerprint,
    })
}

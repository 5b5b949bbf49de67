//! In-process `upto` verification and settlement, against a [`Ledger`]:
//! the official facilitator's checks of a Permit2 payload, in its order,
//! with its reasons. The ledger stands in for the chain: the Permit2
//! allowance counts as granted, the settled amount moves, the Permit2 nonce
//! is burnt (for the payer, whatever was settled), and an amount of 0 moves
//! nothing and sends nothing.

use alloy_primitives::{Address, Signature};

use super::api::{FacilitatorRequest, reason};
use super::ledger::Transfer;
use super::window::{
    AUTHORIZATION_CLOCK_SKEW_SECS, MIN_REMAINING_VALIDITY_SECS, Refusal, SignatureCheck,
};
use crate::x402::wire::eip712::{TokenId, parse_evm_address};
use crate::x402::wire::types::SCHEME_UPTO;
use crate::x402::wire::{UPTO_PROXY_ADDRESS, UptoPayment};

/// When the checks run: at verify the offer's amount is the ceiling; at
/// settle it is the amount to settle, at most the ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Verify,
    Settle,
}

/// A permit the checks let through: the transfer of its ceiling (the
/// ledger's balance and nonce checks) and the amount asked for now.
pub(super) struct Permitted {
    pub(super) ceiling: Transfer,
    pub(super) amount: u128,
    /// The payment as read (the settler builds the proxy's call from it).
    #[cfg_attr(not(feature = "evm-settler"), allow(dead_code))]
    pub(super) permit: UptoPayment,
}

fn refuse(reason: &'static str, payer: Option<Address>) -> Refusal {
    Refusal { reason, payer }
}

/// The official facilitator's `upto` checks, in its order, at `now`, for a
/// facilitator that settles as `facilitator`. With
/// `SignatureCheck::OnChain` (an owner with code) the signature is left to
/// Permit2's ERC-1271 call.
pub(super) fn check_upto(
    request: &FacilitatorRequest,
    now: u64,
    facilitator: Address,
    phase: Phase,
    signature: SignatureCheck,
) -> Result<Permitted, Refusal> {
    let offer = request.payment_requirements();
    if offer.scheme != SCHEME_UPTO || request.accepted().scheme != SCHEME_UPTO {
        return Err(refuse(reason::UPTO_SCHEME, None));
    }
    if request.accepted().network != offer.network {
        return Err(refuse(reason::UPTO_NETWORK_MISMATCH, None));
    }
    let chain_id = offer
        .network
        .eip155_chain_id()
        .ok_or(refuse(reason::UPTO_NETWORK_MISMATCH, None))?;
    let asset = parse_evm_address(&offer.asset)
        .ok_or(refuse(reason::INVALID_PAYMENT_REQUIREMENTS, None))?;
    let pay_to = parse_evm_address(&offer.pay_to)
        .ok_or(refuse(reason::INVALID_PAYMENT_REQUIREMENTS, None))?;
    let permit = UptoPayment::read(&request.payment_payload().payload)
        .ok_or(refuse(reason::UNSUPPORTED_PAYLOAD_TYPE, None))?;
    let payer = Some(permit.from);
    if permit.spender != UPTO_PROXY_ADDRESS {
        return Err(refuse(reason::PERMIT2_SPENDER, payer));
    }
    if permit.to != pay_to {
        return Err(refuse(reason::PERMIT2_RECIPIENT_MISMATCH, payer));
    }
    if permit.facilitator != facilitator {
        return Err(refuse(reason::UPTO_FACILITATOR_MISMATCH, payer));
    }
    // Too far ahead is refused like too close, as for `exact`: the replay
    // record of the nonce lives until the deadline.
    let latest = now
        .saturating_add(offer.max_timeout_seconds)
        .saturating_add(AUTHORIZATION_CLOCK_SKEW_SECS);
    if permit.deadline < now.saturating_add(MIN_REMAINING_VALIDITY_SECS) || permit.deadline > latest
    {
        return Err(refuse(reason::PERMIT2_DEADLINE_EXPIRED, payer));
    }
    if permit.valid_after > now {
        return Err(refuse(reason::PERMIT2_NOT_YET_VALID, payer));
    }
    let amount = offer.amount.units();
    match phase {
        Phase::Verify if permit.ceiling != amount => {
            return Err(refuse(reason::PERMIT2_AMOUNT_MISMATCH, payer));
        }
        Phase::Settle if amount > permit.ceiling => {
            return Err(refuse(reason::UPTO_SETTLEMENT_EXCEEDS_AMOUNT, payer));
        }
        _ => {}
    }
    if permit.token != asset {
        return Err(refuse(reason::PERMIT2_TOKEN_MISMATCH, payer));
    }
    if signature == SignatureCheck::Recover && !signed_by_owner(&permit, chain_id) {
        return Err(refuse(reason::PERMIT2_SIGNATURE, payer));
    }
    Ok(Permitted {
        ceiling: Transfer {
            token: TokenId { chain_id, asset },
            from: permit.from,
            to: permit.to,
            value: permit.ceiling,
            nonce: permit.replay_nonce(),
            valid_before_unix_secs: permit.deadline,
        },
        amount,
        permit,
    })
}

/// Whether the permit's 65-byte signature recovers to its owner (an EOA:
/// the ledger has no contract wallets).
fn signed_by_owner(permit: &UptoPayment, chain_id: u64) -> bool {
    let Ok(raw) = <[u8; 65]>::try_from(permit.signature.as_slice()) else {
        return false;
    };
    let Ok(signature) = Signature::from_raw_array(&raw) else {
        return false;
    };
    signature
        .recover_address_from_prehash(&permit.signing_hash(chain_id))
        .is_ok_and(|signer| signer == permit.from)
}

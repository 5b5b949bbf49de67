//! The reason strings the settler answers with: the official TS facilitator's (2.27).

/// The signature is not the payer's (recovery, or the wallet's own check).
pub const SIGNATURE: &str = "invalid_exact_evm_signature";
/// `to` is not the offer's `payTo`, or not a recipient this settler pays.
pub const RECIPIENT_MISMATCH: &str = "invalid_exact_evm_recipient_mismatch";
/// The authorization was used already.
pub const NONCE_ALREADY_USED: &str = "invalid_exact_evm_nonce_already_used";
/// The payer's balance is below the value.
pub const INSUFFICIENT_BALANCE: &str = "invalid_exact_evm_insufficient_balance";
/// `validBefore` passed or is too close.
pub const VALID_BEFORE: &str = "invalid_exact_evm_payload_authorization_valid_before";
/// `validAfter` is in the future.
pub const VALID_AFTER: &str = "invalid_exact_evm_payload_authorization_valid_after";
/// `value` differs from the amount.
pub const VALUE_MISMATCH: &str = "invalid_exact_evm_payload_authorization_value_mismatch";
/// Another chain than the settler's.
pub const NETWORK_MISMATCH: &str = "invalid_exact_evm_network_mismatch";
/// `extra.name`/`extra.version` missing.
pub const MISSING_EIP712_DOMAIN: &str = "invalid_exact_evm_missing_eip712_domain";
/// Not the exact scheme.
pub const SCHEME: &str = "invalid_exact_evm_scheme";
/// The token refused the transfer for another reason.
pub const SIMULATION_FAILED: &str = "invalid_exact_evm_transaction_simulation_failed";
/// The transaction was mined and reverted.
pub const TRANSACTION_FAILED: &str = "invalid_exact_evm_transaction_failed";
/// Mined with status 1, but without the exact `Transfer` log.
pub const TRANSFER_EVENT_MISMATCH: &str = "invalid_exact_evm_transfer_event_mismatch";
/// `value` is below the least this settler settles (zero, at least).
pub const VALUE_TOO_LOW: &str = "invalid_exact_evm_payload_authorization_value_too_low";
/// The payer's recent settlements failed or reverted: refused for a while.
pub const PAYER_DENIED: &str = "invalid_exact_evm_payer_denied";
/// The asset is not one this settler settles.
pub const ASSET_NOT_SERVED: &str = "invalid_payment_requirements";

// The `upto` scheme's settlement reasons, as the official facilitator (2.27)
// maps the proxy's and Permit2's reverts (its verify reasons are
// `facilitator::reason`'s).

/// The amount asked is above the permit (`AmountExceedsPermitted`, Permit2's `InvalidAmount`).
pub const UPTO_AMOUNT_EXCEEDS_PERMITTED: &str = "upto_amount_exceeds_permitted";
/// The caller is not the witness's facilitator (`UnauthorizedFacilitator`).
pub const UPTO_UNAUTHORIZED_FACILITATOR: &str = "upto_unauthorized_facilitator";
/// The witness's `validAfter` is in the future (`PaymentTooEarly`).
pub const PERMIT2_PAYMENT_TOO_EARLY: &str = "permit2_payment_too_early";
/// Permit2 refused the signature, or its deadline passed (`InvalidSigner`, `SignatureExpired`, …).
pub const PERMIT2_INVALID_SIGNATURE: &str = "permit2_invalid_signature";
/// No proxy (or no Permit2 behind it) on this chain.
pub const PERMIT2_PROXY_NOT_DEPLOYED: &str = "permit2_proxy_not_deployed";
/// The proxy refused the settlement for another reason.
pub const PERMIT2_SIMULATION_FAILED: &str = "permit2_simulation_failed";
/// The proxy's settlement was mined and reverted.
pub const UPTO_TRANSACTION_FAILED: &str = "invalid_upto_evm_transaction_failed";

/// Whether a refusal for `reason` is the payer's own doing: a copy of a used
/// or expired authorization is anyone's, so it never counts against the payer.
pub(super) fn counts_against_payer(reason: &str) -> bool {
    use crate::x402::facilitator::reason;
    ![
        NONCE_ALREADY_USED,
        VALID_BEFORE,
        VALID_AFTER,
        reason::PERMIT2_INVALID_NONCE,
        reason::PERMIT2_DEADLINE_EXPIRED,
        reason::PERMIT2_NOT_YET_VALID,
        PERMIT2_PAYMENT_TOO_EARLY,
        // A one-time setup step the payer may not know of yet.
        reason::PERMIT2_ALLOWANCE_REQUIRED,
    ]
    .contains(&reason)
}

/// The TS spelling of one of the offline checks' reasons.
pub(super) fn of_local(local: &'static str) -> &'static str {
    use crate::x402::facilitator::reason;
    match local {
        reason::SIGNATURE | reason::SIGNATURE_NOT_CANONICAL => SIGNATURE,
        reason::RECIPIENT_MISMATCH => RECIPIENT_MISMATCH,
        reason::INVALID_NETWORK => NETWORK_MISMATCH,
        reason::MISSING_EIP712_DOMAIN => MISSING_EIP712_DOMAIN,
        reason::UNSUPPORTED_SCHEME => SCHEME,
        reason::INSUFFICIENT_FUNDS => INSUFFICIENT_BALANCE,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::ErrorCode;
    use crate::x402::facilitator::{code_for_reason, reason};

    #[test]
    fn each_reason_maps_to_the_specifications_code() {
        let cases = [
            (NONCE_ALREADY_USED, ErrorCode::PaymentReplay),
            (INSUFFICIENT_BALANCE, ErrorCode::PaymentUnfunded),
            (VALID_BEFORE, ErrorCode::PaymentUnfunded),
            (VALID_AFTER, ErrorCode::PaymentUnfunded),
            (SIGNATURE, ErrorCode::PaymentInvalid),
            (RECIPIENT_MISMATCH, ErrorCode::PaymentInvalid),
            (VALUE_MISMATCH, ErrorCode::PaymentInvalid),
            (NETWORK_MISMATCH, ErrorCode::PaymentInvalid),
            (TRANSACTION_FAILED, ErrorCode::PaymentInvalid),
            (TRANSFER_EVENT_MISMATCH, ErrorCode::PaymentInvalid),
        ];
        for (reason, code) in cases {
            assert_eq!(code_for_reason(reason), code, "{reason}");
        }
        assert_eq!(of_local(reason::SIGNATURE), SIGNATURE);
        assert_eq!(of_local(reason::VALID_BEFORE), VALID_BEFORE);
    }
}

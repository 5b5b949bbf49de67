//! What the token says about a transfer before it is sent: an `eth_call` of
//! `transferWithAuthorization` from the settler's address, its revert reason
//! mapped to a verdict. Nothing the simulation refuses is ever broadcast.

use super::reasons;
use super::rpc::{RpcError, revert_message};

/// The token's answer to a simulated transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Simulation {
    /// The transfer would go through.
    Passes,
    /// The payment is refused: a reason string and the token's own words.
    Refused {
        reason: &'static str,
        message: String,
    },
    /// The operator's side cannot settle it now (node down, token paused,
    /// recipient blacklisted, settler without gas): a 503, nothing consumed.
    Unavailable(String),
}

/// The verdict of a call's outcome.
pub(super) fn judge(outcome: Result<(), RpcError>) -> Simulation {
    match outcome {
        Ok(()) => Simulation::Passes,
        Err(RpcError::Node { message, data, .. }) => {
            let said = data.as_deref().and_then(revert_message).unwrap_or_else(|| {
                message
                    .trim_start_matches("execution reverted: ")
                    .to_owned()
            });
            judge_revert(&message, said)
        }
        Err(error) => Simulation::Unavailable(error.to_string()),
    }
}

/// A refusal's reason, from the revert string FiatToken v2.2 gives.
fn judge_revert(node_message: &str, said: String) -> Simulation {
    let lower = said.to_ascii_lowercase();
    let refused = |reason| Simulation::Refused {
        reason,
        message: said.clone(),
    };
    if lower.contains("authorization is used or canceled") {
        refused(reasons::NONCE_ALREADY_USED)
    } else if lower.contains("authorization is expired") {
        refused(reasons::VALID_BEFORE)
    } else if lower.contains("authorization is not yet valid") {
        refused(reasons::VALID_AFTER)
    } else if lower.contains("invalid signature") {
        refused(reasons::SIGNATURE)
    } else if lower.contains("exceeds balance") {
        refused(reasons::INSUFFICIENT_BALANCE)
    } else if lower.contains("paused") || lower.contains("blacklisted") {
        Simulation::Unavailable(format!("the token refuses every transfer now: {said}"))
    } else if node_message
        .to_ascii_lowercase()
        .contains("gas required exceeds")
        || lower.contains("out of gas")
    {
        // The transfer needs more gas than the settler's cap allows.
        Simulation::Refused {
            reason: reasons::SIMULATION_FAILED,
            message: format!("the transfer needs more gas than this settler spends on one: {said}"),
        }
    } else if lower.contains("insufficient funds") {
        Simulation::Unavailable(format!("the settler cannot pay for gas: {node_message}"))
    } else if node_message.contains("revert") {
        refused(reasons::SIMULATION_FAILED)
    } else {
        Simulation::Unavailable(format!("node refused the simulation: {node_message}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(message: &str) -> Result<(), RpcError> {
        Err(RpcError::Node {
            code: Some(3),
            message: message.into(),
            data: None,
        })
    }

    #[test]
    fn fiat_token_reverts_map_to_reasons() {
        let cases = [
            (
                "execution reverted: FiatTokenV2: authorization is used or canceled",
                reasons::NONCE_ALREADY_USED,
            ),
            (
                "execution reverted: FiatTokenV2: authorization is expired",
                reasons::VALID_BEFORE,
            ),
            (
                "execution reverted: FiatTokenV2: authorization is not yet valid",
                reasons::VALID_AFTER,
            ),
            (
                "execution reverted: FiatTokenV2: invalid signature",
                reasons::SIGNATURE,
            ),
            (
                "execution reverted: ECRecover: invalid signature 's' value",
                reasons::SIGNATURE,
            ),
            (
                "execution reverted: ERC20: transfer amount exceeds balance",
                reasons::INSUFFICIENT_BALANCE,
            ),
            ("execution reverted", reasons::SIMULATION_FAILED),
        ];
        for (message, reason) in cases {
            match judge(node(message)) {
                Simulation::Refused { reason: got, .. } => assert_eq!(got, reason, "{message}"),
                other => panic!("{message}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_operators_faults_are_unavailable() {
        for message in [
            "execution reverted: Pausable: paused",
            "execution reverted: Blacklistable: account is blacklisted",
            "insufficient funds for gas * price + value",
        ] {
            assert!(
                matches!(judge(node(message)), Simulation::Unavailable(_)),
                "{message}"
            );
        }
        assert!(matches!(
            judge(Err(RpcError::Transport("connection refused".into()))),
            Simulation::Unavailable(_)
        ));
        assert_eq!(judge(Ok(())), Simulation::Passes);
    }
}

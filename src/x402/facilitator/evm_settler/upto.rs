//! The `upto` scheme on chain: a Permit2 permit settled through x402's upto
//! proxy, `settle(permit, amount, owner, witness, signature)`, sent from the
//! settler's key, which must be the facilitator the witness names.
//!
//! **Verify** runs the official facilitator's checks in its order
//! (`local_upto`), then an `eth_call` of the proxy's `settle` at the
//! ceiling. A revert is read by its selector (the proxy's and Permit2's
//! errors, in the official facilitator's words); anything else (Permit2
//! hides the token's own reason behind `TRANSFER_FROM_FAILED`) is
//! diagnosed as the official facilitator does: no proxy or Permit2, then
//! the payer's balance, then its allowance to Permit2
//! (`permit2_allowance_required`, a 402 `PAYMENT_UNFUNDED`).
//!
//! **Settle** checks the permit again for the amount to settle (at most the
//! ceiling), then goes the way `exact` goes (simulation of the call as
//! sent, gas cap, fees, nonce manager, records, receipt): the replay key is
//! (network, owner, Permit2 nonce), since Permit2 burns a nonce per owner
//! whatever the token or amount, and the receipt must hold the token's
//! `Transfer` of exactly the amount settled. An amount of 0 sends nothing.
//! The simulation before sending is at the amount settled, not the ceiling:
//! a payer whose balance fell below the ceiling but covers what it used is
//! still charged what it used.

use alloy_primitives::{Address, B256, Bytes, U256, hex};
use alloy_sol_types::{SolCall, SolError, sol};

use super::records::SettlementKey;
use super::rpc::{CallRequest, RpcError, revert_message};
use super::simulate::Simulation;
use super::{Admitted, EvmSettler, Scheme, Stop, reasons, standing};
use crate::x402::facilitator::IdempotencyKey;
use crate::x402::facilitator::api::{FacilitatorError, FacilitatorRequest, reason};
use crate::x402::facilitator::ledger::Transfer;
use crate::x402::facilitator::local_upto::{Phase, check_upto};
use crate::x402::facilitator::window::SignatureCheck;
use crate::x402::wire::types::SettleResponse;
use crate::x402::wire::{AtomicAmount, PERMIT2_ADDRESS, UPTO_PROXY_ADDRESS, UptoPayment};

sol! {
    /// Permit2's `TokenPermissions`, as the proxy takes it.
    struct ProxyTokenPermissions {
        address token;
        uint256 amount;
    }

    /// Permit2's `PermitTransferFrom`.
    struct ProxyPermit {
        ProxyTokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    /// The proxy's witness.
    struct ProxyWitness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    function settle(
        ProxyPermit permit,
        uint256 amount,
        address owner,
        ProxyWitness witness,
        bytes signature
    );
    function PERMIT2() returns (address);
    function nonceBitmap(address owner, uint256 wordPos) returns (uint256);
    function balanceOf(address account) returns (uint256);
    function allowance(address owner, address spender) returns (uint256);

    // The proxy's errors.
    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();
    error PaymentTooEarly();
    // Permit2's.
    error InvalidNonce();
    error SignatureExpired(uint256 signatureDeadline);
    error InvalidSigner();
    error InvalidSignature();
    error InvalidSignatureLength();
    error InvalidContractSignature();
    error InvalidAmount(uint256 maxAmount);
}

/// The proxy's call that settles `amount` of `permit`.
pub(super) fn settle_calldata(permit: &UptoPayment, amount: u128) -> Vec<u8> {
    settleCall {
        permit: ProxyPermit {
            permitted: ProxyTokenPermissions {
                token: permit.token,
                amount: U256::from(permit.ceiling),
            },
            nonce: permit.nonce,
            deadline: U256::from(permit.deadline),
        },
        amount: U256::from(amount),
        owner: permit.from,
        witness: ProxyWitness {
            to: permit.to,
            facilitator: permit.facilitator,
            validAfter: U256::from(permit.valid_after),
        },
        signature: Bytes::copy_from_slice(&permit.signature),
    }
    .abi_encode()
}

/// The reason of a revert the proxy or Permit2 names by its selector, as
/// the official facilitator maps them; `None` for any other revert.
fn reason_of_selector(data: &[u8]) -> Option<&'static str> {
    let selector: [u8; 4] = data.get(..4)?.try_into().ok()?;
    Some(match selector {
        AmountExceedsPermitted::SELECTOR | InvalidAmount::SELECTOR => {
            reasons::UPTO_AMOUNT_EXCEEDS_PERMITTED
        }
        UnauthorizedFacilitator::SELECTOR => reasons::UPTO_UNAUTHORIZED_FACILITATOR,
        PaymentTooEarly::SELECTOR => reasons::PERMIT2_PAYMENT_TOO_EARLY,
        InvalidNonce::SELECTOR => reason::PERMIT2_INVALID_NONCE,
        SignatureExpired::SELECTOR
        | InvalidSigner::SELECTOR
        | InvalidSignature::SELECTOR
        | InvalidSignatureLength::SELECTOR
        | InvalidContractSignature::SELECTOR => reasons::PERMIT2_INVALID_SIGNATURE,
        _ => return None,
    })
}

/// What a reverted simulation says before anything is read from the chain.
enum Revert {
    /// A verdict already.
    Judged(Simulation),
    /// A revert to diagnose, with its words.
    Diagnose(String),
}

/// A simulated settlement's outcome, read without further calls.
fn read_revert(outcome: Result<(), RpcError>) -> Revert {
    let (message, data) = match outcome {
        Ok(()) => return Revert::Judged(Simulation::Passes),
        Err(RpcError::Node { message, data, .. }) => (message, data),
        Err(error) => return Revert::Judged(Simulation::Unavailable(error.to_string())),
    };
    let bytes = data.as_deref().and_then(|data| hex::decode(data).ok());
    if let Some(reason) = bytes.as_deref().and_then(reason_of_selector) {
        return Revert::Judged(Simulation::Refused {
            reason,
            message: message.clone(),
        });
    }
    let said = data.as_deref().and_then(revert_message).unwrap_or_else(|| {
        message
            .trim_start_matches("execution reverted: ")
            .to_owned()
    });
    let lower = said.to_ascii_lowercase();
    let node = message.to_ascii_lowercase();
    if lower.contains("paused") || lower.contains("blacklisted") {
        Revert::Judged(Simulation::Unavailable(format!(
            "the token refuses every transfer now: {said}"
        )))
    } else if node.contains("gas required exceeds") || lower.contains("out of gas") {
        Revert::Judged(Simulation::Refused {
            reason: reasons::PERMIT2_SIMULATION_FAILED,
            message: format!(
                "the settlement needs more gas than this settler spends on one: {said}"
            ),
        })
    } else if node.contains("insufficient funds") {
        Revert::Judged(Simulation::Unavailable(format!(
            "the settler cannot pay for gas: {message}"
        )))
    } else if node.contains("revert") {
        Revert::Diagnose(said)
    } else {
        Revert::Judged(Simulation::Unavailable(format!(
            "node refused the simulation: {message}"
        )))
    }
}

/// The `uint256` an `eth_call` answered.
fn word(answer: &[u8]) -> Option<U256> {
    (answer.len() >= 32).then(|| U256::from_be_slice(&answer[..32]))
}

impl EvmSettler {
    /// The official facilitator's checks of an `upto` payment for this
    /// settler (the witness must name its key), then its own limits; in
    /// `Phase::Verify` at the ceiling, in `Phase::Settle` for the amount asked.
    pub(super) async fn admit_upto(
        &self,
        request: &FacilitatorRequest,
        phase: Phase,
    ) -> Result<Admitted, Stop> {
        let inner = &*self.inner;
        let now = inner.clock.now_unix_secs();
        let facilitator = inner.key.address();
        let check = |signature| {
            check_upto(request, now, facilitator, phase, signature)
                .map_err(|refusal| Stop::refused(refusal.reason, refusal.payer))
        };
        let (permitted, code_hash) = match check(SignatureCheck::Recover) {
            Ok(permitted) => (permitted, None),
            Err(Stop::Refused {
                reason: reason::PERMIT2_SIGNATURE,
                message,
                payer,
            }) => {
                // An owner with code: Permit2's ERC-1271 call judges it in the simulation.
                let owner =
                    UptoPayment::read(&request.payment_payload().payload).map(|permit| permit.from);
                match owner {
                    Some(owner) => match self.code_hash_of(owner).await? {
                        Some(code_hash) => (check(SignatureCheck::OnChain)?, Some(code_hash)),
                        None => {
                            return Err(Stop::Refused {
                                reason: reason::PERMIT2_SIGNATURE,
                                message,
                                payer,
                            });
                        }
                    },
                    None => {
                        return Err(Stop::Refused {
                            reason: reason::PERMIT2_SIGNATURE,
                            message,
                            payer,
                        });
                    }
                }
            }
            Err(stop) => return Err(stop),
        };
        let permit = permitted.permit;
        let owner = permit.from;
        let payer = owner.to_checksum(None);
        let refused = |reason: &'static str, message: String| Stop::Refused {
            reason,
            message: Some(message),
            payer: Some(payer.clone()),
        };
        if phase == Phase::Verify && permit.ceiling < inner.min_amount {
            return Err(refused(
                reasons::VALUE_TOO_LOW,
                format!(
                    "ceiling {} is below the {} units this settler settles at least",
                    permit.ceiling, inner.min_amount
                ),
            ));
        }
        if let Some(until) = inner
            .standings
            .denied_until(standing::identities(owner, code_hash), now)
        {
            return Err(refused(
                reasons::PAYER_DENIED,
                format!("this payer's recent settlements failed: refused until unix time {until}"),
            ));
        }
        if permitted.ceiling.token.chain_id != inner.chain_id {
            return Err(Stop::refused(reason::UPTO_NETWORK_MISMATCH, Some(owner)));
        }
        if !inner.assets.contains(&permit.token) {
            return Err(refused(
                reasons::ASSET_NOT_SERVED,
                format!("asset {} is not settled here", permit.token),
            ));
        }
        if !inner.pay_to.is_empty() && !inner.pay_to.contains(&permit.to) {
            return Err(refused(
                reason::PERMIT2_RECIPIENT_MISMATCH,
                format!("recipient {} is not paid by this facilitator", permit.to),
            ));
        }
        Ok(self.upto_admitted(&permit, permitted.amount, code_hash))
    }

    /// The settlement of `amount` of `permit` as the records and the chain know it.
    fn upto_admitted(
        &self,
        permit: &UptoPayment,
        amount: u128,
        code_hash: Option<B256>,
    ) -> Admitted {
        let chain_id = self.inner.chain_id;
        let transfer = Transfer {
            token: crate::x402::wire::TokenId {
                chain_id,
                asset: permit.token,
            },
            from: permit.from,
            to: permit.to,
            value: amount,
            nonce: permit.replay_nonce(),
            valid_before_unix_secs: permit.deadline,
        };
        Admitted {
            // Permit2's nonces are the owner's across every token.
            key: SettlementKey {
                chain_id,
                asset: PERMIT2_ADDRESS,
                from: permit.from,
                nonce: transfer.nonce,
            },
            calldata: settle_calldata(permit, amount),
            transfer,
            payer: permit.from.to_checksum(None),
            target: UPTO_PROXY_ADDRESS,
            code_hash,
            scheme: Scheme::Upto {
                permit2_nonce: permit.nonce,
            },
        }
    }

    /// Settles an `upto` payment for the requirements' amount (the amount
    /// used; at most the ceiling): 0 sends nothing.
    pub(super) async fn settle_upto(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let network = self.inner.network.clone();
        let caller = request.idempotency_key().map(IdempotencyKey::digest);
        let admitted = match self.admit_upto(request, Phase::Settle).await {
            Ok(admitted) => admitted,
            Err(Stop::Refused {
                reason,
                message,
                payer,
            }) => {
                // A retry of a settled permit can be past its deadline now:
                // its record still answers.
                if let Some(permit) = UptoPayment::read(&request.payment_payload().payload) {
                    let amount = request.payment_requirements().amount.units();
                    let unchecked = self.upto_admitted(&permit, amount, None);
                    if let Some(answer) = self.answer_from_record(&unchecked, caller).await {
                        return answer;
                    }
                }
                return Ok(SettleResponse {
                    error_message: message,
                    ..SettleResponse::failure(network, reason, payer)
                });
            }
            Err(Stop::Unavailable(error)) => return Err(error),
        };
        if admitted.transfer.value == 0 {
            // Nothing used, nothing sent: the permit stays unused on chain.
            return Ok(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: Some(admitted.payer),
                transaction: String::new(),
                network,
                amount: Some(AtomicAmount::new(0)),
                extensions: None,
            });
        }
        self.settle_admitted(&admitted, caller).await
    }

    /// The verdict of a simulated `settle`, in the official facilitator's words.
    pub(super) async fn judge_upto(
        &self,
        admitted: &Admitted,
        outcome: Result<(), RpcError>,
    ) -> Simulation {
        match read_revert(outcome) {
            Revert::Judged(simulation) => simulation,
            Revert::Diagnose(said) => match self.diagnose(admitted).await {
                Ok(reason) => Simulation::Refused {
                    reason,
                    message: said,
                },
                Err(error) => Simulation::Unavailable(error.to_string()),
            },
        }
    }

    /// Why the proxy refused, as the official facilitator finds it: no
    /// proxy (or no Permit2 behind it), then the payer's balance, then its
    /// allowance to Permit2, for the amount simulated.
    async fn diagnose(&self, admitted: &Admitted) -> Result<&'static str, RpcError> {
        let rpc = &self.inner.rpc;
        let from = self.inner.key.address();
        let call = |to: Address, data: Vec<u8>| async move {
            rpc.eth_call(&CallRequest::new(from, to, &data)).await
        };
        let permit2 = call(UPTO_PROXY_ADDRESS, PERMIT2Call {}.abi_encode()).await;
        let proxied = permit2
            .ok()
            .and_then(|answer| PERMIT2Call::abi_decode_returns(&answer).ok());
        if proxied != Some(PERMIT2_ADDRESS) || rpc.code_len(PERMIT2_ADDRESS).await? == 0 {
            return Ok(reasons::PERMIT2_PROXY_NOT_DEPLOYED);
        }
        let token = admitted.transfer.token.asset;
        let owner = admitted.transfer.from;
        let amount = U256::from(admitted.transfer.value);
        let balance = word(&call(token, balanceOfCall { account: owner }.abi_encode()).await?);
        if balance.is_some_and(|balance| balance < amount) {
            return Ok(reason::PERMIT2_INSUFFICIENT_BALANCE);
        }
        let allowance = word(
            &call(
                token,
                allowanceCall {
                    owner,
                    spender: PERMIT2_ADDRESS,
                }
                .abi_encode(),
            )
            .await?,
        );
        if allowance.is_some_and(|allowance| allowance < amount) {
            return Ok(reason::PERMIT2_ALLOWANCE_REQUIRED);
        }
        Ok(reasons::PERMIT2_SIMULATION_FAILED)
    }

    /// Whether Permit2 burnt `nonce` for `owner` (its unordered nonce bitmap).
    pub(super) async fn permit2_nonce_used(
        &self,
        owner: Address,
        nonce: U256,
    ) -> Result<bool, FacilitatorError> {
        let data = nonceBitmapCall {
            owner,
            wordPos: nonce >> 8,
        }
        .abi_encode();
        let answer = self
            .inner
            .rpc
            .eth_call(&CallRequest::new(
                self.inner.key.address(),
                PERMIT2_ADDRESS,
                &data,
            ))
            .await
            .map_err(|error| FacilitatorError::unavailable(error.to_string()))?;
        let bitmap = word(&answer).unwrap_or_default();
        let bit = nonce & U256::from(0xffu8);
        Ok(bitmap.bit(bit.to::<usize>()))
    }

    /// The hash of `account`'s code, if it has code (a smart wallet).
    pub(super) async fn code_hash_of(&self, account: Address) -> Result<Option<B256>, Stop> {
        let code =
            self.inner.rpc.code(account).await.map_err(|error| {
                Stop::Unavailable(FacilitatorError::unavailable(error.to_string()))
            })?;
        Ok((!code.is_empty()).then(|| alloy_primitives::keccak256(&code)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abi_is_the_proxys_and_permit2s() {
        // The selectors the reference lists for x402's upto proxy and Permit2.
        assert_eq!(settleCall::SELECTOR, [0xff, 0x11, 0xe7, 0xb4]);
        assert_eq!(PERMIT2Call::SELECTOR, [0x6a, 0xfd, 0xd8, 0x50]);
        assert_eq!(AmountExceedsPermitted::SELECTOR, [0xfe, 0x64, 0xb4, 0xc7]);
        assert_eq!(UnauthorizedFacilitator::SELECTOR, [0x0f, 0x6f, 0xae, 0x87]);
        assert_eq!(PaymentTooEarly::SELECTOR, [0xa6, 0x55, 0x39, 0xfa]);
        assert_eq!(InvalidNonce::SELECTOR, [0x75, 0x66, 0x88, 0xfe]);
        assert_eq!(SignatureExpired::SELECTOR, [0xcd, 0x21, 0xdb, 0x4f]);
        assert_eq!(InvalidSigner::SELECTOR, [0x81, 0x5e, 0x1d, 0x64]);
        assert_eq!(InvalidAmount::SELECTOR, [0x37, 0x28, 0xb8, 0x3d]);
    }

    fn node(message: &str, data: Option<&str>) -> Result<(), RpcError> {
        Err(RpcError::Node {
            code: Some(3),
            message: message.into(),
            data: data.map(str::to_owned),
        })
    }

    fn refused(revert: Revert) -> &'static str {
        match revert {
            Revert::Judged(Simulation::Refused { reason, .. }) => reason,
            _ => panic!("not a refusal"),
        }
    }

    #[test]
    fn reverts_map_to_the_official_reasons() {
        let used = format!("0x{}", hex::encode(InvalidNonce::SELECTOR));
        assert_eq!(
            refused(read_revert(node("execution reverted", Some(&used)))),
            reason::PERMIT2_INVALID_NONCE
        );
        let expired = format!(
            "0x{}",
            hex::encode(
                SignatureExpired {
                    signatureDeadline: U256::from(5)
                }
                .abi_encode()
            )
        );
        assert_eq!(
            refused(read_revert(node("execution reverted", Some(&expired)))),
            reasons::PERMIT2_INVALID_SIGNATURE
        );
        let other = format!("0x{}", hex::encode(UnauthorizedFacilitator::SELECTOR));
        assert_eq!(
            refused(read_revert(node("execution reverted", Some(&other)))),
            reasons::UPTO_UNAUTHORIZED_FACILITATOR
        );
        // Permit2 hides the token's reason: diagnosed by reading the chain.
        assert!(matches!(
            read_revert(node("execution reverted: TRANSFER_FROM_FAILED", None)),
            Revert::Diagnose(_)
        ));
        assert!(matches!(
            read_revert(node("execution reverted: Pausable: paused", None)),
            Revert::Judged(Simulation::Unavailable(_))
        ));
        assert!(matches!(
            read_revert(Err(RpcError::Transport("refused".into()))),
            Revert::Judged(Simulation::Unavailable(_))
        ));
        assert!(matches!(
            read_revert(Ok(())),
            Revert::Judged(Simulation::Passes)
        ));
    }
}

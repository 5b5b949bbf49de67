//! [`EvmSettler`]: walletgate settles exact-EVM payments on chain itself
//! (feature `evm-settler`).
//!
//! **Verify** runs the offline checks of
//! [`LocalEvmFacilitator`](super::LocalEvmFacilitator) (one signer recovery,
//! or, when `from` has code, none: a smart wallet's signature is judged by
//! the token's own ERC-1271 check), then an `eth_call` of the token's
//! `transferWithAuthorization` (the `bytes` overload) from the settler's
//! address. The token's revert reason becomes the verdict: balance and time
//! window ([`PAYMENT_UNFUNDED`](crate::envelope::ErrorCode::PaymentUnfunded)),
//! a used nonce (`PAYMENT_REPLAY`), a signature (`PAYMENT_INVALID`); a paused
//! token or a blacklisted account is the operator's problem, a
//! [`FacilitatorError::unavailable`] (503) naming the cause.
//!
//! **Settle** estimates gas with the transaction's own fee fields and gas
//! cap: that one `eth_estimateGas` is the simulation (nothing the token
//! refuses is broadcast: a replayed or high-`s` payment never costs gas nor
//! moves the settler's nonce) and the cap's check. It signs an EIP-1559
//! transaction (+25% gas) with a nonce from its [`NonceAllocator`],
//! **records** its hash in [`SettlementRecords`] and only then sends it.
//! No lock is held across the node's round trips: concurrent settlements
//! sign and send in parallel with consecutive nonces. A refused send gives
//! its nonce back (the next settlement takes it; if later transactions
//! already wait behind it, a zero-value transfer to the settler fills it);
//! "nonce too low" catches up with the node's count and signs again.
//!
//! Where the node offers `eth_sendRawTransactionSync` (EIP-7966, detected
//! at start) the receipt comes in the send's answer. Otherwise, and past a
//! few seconds, the waiting settlements share one receipt watch per block
//! (`eth_blockNumber`, then `eth_getBlockReceipts` or one batch of receipt
//! reads), which also sends again a transaction the chain stalls on (dropped
//! by a node). Success is status 1 **and** the asset's own
//! `Transfer(from, to, value)` log with the exact values, after
//! `confirmations` more blocks. A transaction with no receipt within
//! `receipt_timeout` is replaced once with the same nonce and fees at least
//! 12.5% higher; if that one is not mined in time either, settle answers
//! [`FacilitatorError::pending`] with the transaction: the transfer may
//! still land.
//!
//! Settle is idempotent per authorization (chain, asset, payer, nonce): a
//! second settle of the same payment, concurrent or later, or in another
//! process sharing the records (Redis), reports the first one's outcome: the
//! same transaction once mined, pending while it is not, and a fresh
//! settlement if the recorded one can no longer land (its nonce used by
//! another transaction and the authorization still unused).
//!
//! ERC-6492 (a wallet not deployed yet) is not supported: such a payer has
//! no code, so its signature is refused as an EOA's would be.
//!
//! ```no_run
//! use std::sync::Arc;
//! use walletgate::x402::facilitator::evm_settler::{EvmSettler, SettlerKey};
//! use walletgate::x402::facilitator::evm_settler::MemorySettlementRecords;
//! use walletgate::x402::wire::Network;
//!
//! # async fn start() -> Result<(), Box<dyn std::error::Error>> {
//! let key = SettlerKey::from_file("/etc/walletgate/settler.key")?; // mode 0600
//! let (settler, report) =
//!     EvmSettler::builder("https://rpc.example/v2/KEY", key, Network::base_sepolia())
//!         .with_asset("0x036CbD53842c5426634e7929541eC2318f3dCF7e".parse()?)
//!         .with_records(Arc::new(MemorySettlementRecords::new())) // or RedisSettlementRecords
//!         .connect() // chain id, the asset's code, the settler's balance
//!         .await?;
//! if report.low_balance {
//!     eprintln!("fund {} with ETH for gas", report.address);
//! }
//! // `settler` is a `Facilitator`: give it to `X402Layer::builder().with_facilitator(…)`.
//! # let _ = settler;
//! # Ok(())
//! # }
//! ```

mod approve;
mod builder;
mod error;
mod fees;
mod key;
mod nonce;
mod outcome;
pub mod reasons;
mod receipts;
mod records;
mod rpc;
mod send;
mod settle;
#[cfg(feature = "siwx")]
mod sign_in;
mod simulate;
mod standing;
mod tx;
mod upto;
mod watch;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use alloy_primitives::{Address, B256, hex, keccak256};

pub use approve::{ApprovalError, ApprovalPlan, Permit2Approval};
pub use builder::{
    DEFAULT_BLOCK_POLL_INTERVAL, DEFAULT_GAS_CAP, DEFAULT_RECEIPT_TIMEOUT, DEFAULT_RPC_TIMEOUT,
    DEFAULT_SIMULATION_WINDOW, EvmSettlerBuilder, LOW_BALANCE_WEI, StartupReport,
};
pub use error::SettlerError;
pub use key::SettlerKey;
#[cfg(all(test, feature = "redis"))]
pub(crate) use nonce::contract::{
    concurrent_takes as nonce_allocator_concurrent_takes, run as nonce_allocator_contract,
};
pub use nonce::{MemoryNonceAllocator, NonceAllocator};
#[cfg(all(test, feature = "redis"))]
pub(crate) use records::tests::{contract as records_contract, sample as sample_record};
pub use records::{
    MemorySettlementRecords, RECORD_RETENTION_SECS, SettlementKey, SettlementRecord,
    SettlementRecords,
};
pub use standing::{FAILURE_DENIAL_SECS, FAILURE_WINDOW_SECS, MAX_FAILURES, REVERT_DENIAL_SECS};

use self::rpc::{CallRequest, Rpc};
use self::simulate::Simulation;
use self::standing::PayerStandings;
use super::api::{Facilitator, FacilitatorError, FacilitatorRequest, reason};
use super::ledger::Transfer;
use super::local_evm::check_offline;
use super::window::SignatureCheck;
use crate::clock::SharedClock;
use crate::store::BoxFuture;
use crate::x402::wire::eip712::DomainCache;
use crate::x402::wire::types::{
    Network, SCHEME_EXACT, SCHEME_UPTO, SettleResponse, SupportedKind, SupportedResponse,
    VerifyResponse, X402_VERSION,
};

/// A [`Facilitator`] that settles exact-EVM payments on chain with its own key.
#[derive(Clone)]
pub struct EvmSettler {
    inner: Arc<Inner>,
}

struct Inner {
    rpc: Rpc,
    key: SettlerKey,
    chain_id: u64,
    network: Network,
    assets: Vec<Address>,
    pay_to: Vec<Address>,
    records: Arc<dyn SettlementRecords>,
    clock: SharedClock,
    domains: DomainCache,
    nonces: Arc<dyn NonceAllocator>,
    /// The receipt watch the waiting settlements share.
    watch: watch::BlockWatch,
    /// Whether sends use `eth_sendRawTransactionSync` (the node offers it).
    sync_send: bool,
    receipt_timeout: Duration,
    confirmations: u64,
    /// When the settler last had gas money for a settlement.
    /// Held while it is asked again: one balance read, not one per waiting settlement.
    gas_checked: tokio::sync::Mutex<Option<std::time::Instant>>,
    /// One lock per authorization being settled in this process.
    in_flight: Mutex<HashMap<SettlementKey, Arc<tokio::sync::Mutex<()>>>>,
    /// The most gas a settlement may use.
    gas_cap: u64,
    /// The least value settled.
    min_amount: u128,
    /// Payers refused for a while after failures of their own.
    standings: PayerStandings,
    /// The node's fees, when they were read and the head then (held while
    /// they are read again: one read, not one per waiting settlement).
    fees: tokio::sync::Mutex<Option<FeesRead>>,
    /// Held while the nonce allocator is seeded from the node.
    seeding: tokio::sync::Mutex<()>,
}

impl fmt::Debug for EvmSettler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EvmSettler")
            .field("address", &self.inner.key.address())
            .field("network", &self.inner.network)
            .field("rpc", &self.inner.rpc.origin())
            .finish_non_exhaustive()
    }
}

/// A payment the offline checks let through, ready to simulate.
struct Admitted {
    /// What moves: for `upto`, the amount settled now (the permit's nonce
    /// as its replay identity, its deadline as `valid_before`).
    transfer: Transfer,
    key: SettlementKey,
    payer: String,
    /// The contract the settlement calls: the token (`exact`) or the upto proxy.
    target: Address,
    calldata: Vec<u8>,
    /// The payer's code hash, when it is a contract (judged by its own check).
    code_hash: Option<B256>,
    scheme: Scheme,
}

/// The scheme of an admitted payment: what says it is used, and its reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    /// EIP-3009 on the token: `authorizationState`.
    Exact,
    /// A Permit2 permit through the upto proxy: Permit2's nonce bitmap.
    Upto {
        permit2_nonce: alloy_primitives::U256,
    },
}

impl Admitted {
    /// The reason a copy of a used authorization is refused with.
    fn used_reason(&self) -> &'static str {
        match self.scheme {
            Scheme::Exact => reasons::NONCE_ALREADY_USED,
            Scheme::Upto { .. } => reason::PERMIT2_INVALID_NONCE,
        }
    }

    /// The reason of an authorization whose window closed before it landed.
    fn expired_reason(&self) -> &'static str {
        match self.scheme {
            Scheme::Exact => reasons::VALID_BEFORE,
            Scheme::Upto { .. } => reason::PERMIT2_DEADLINE_EXPIRED,
        }
    }

    /// The reason of a settlement mined and reverted.
    fn reverted_reason(&self) -> &'static str {
        match self.scheme {
            Scheme::Exact => reasons::TRANSACTION_FAILED,
            Scheme::Upto { .. } => reasons::UPTO_TRANSACTION_FAILED,
        }
    }
}

/// Why a payment goes no further.
enum Stop {
    /// A verdict: the reason, the token's words if it spoke, the payer if known.
    Refused {
        reason: &'static str,
        message: Option<String>,
        payer: Option<String>,
    },
    /// No verdict could be had.
    Unavailable(FacilitatorError),
}

impl Stop {
    fn refused(reason: &'static str, payer: Option<Address>) -> Self {
        Self::Refused {
            reason,
            message: None,
            payer: payer.map(|payer| payer.to_checksum(None)),
        }
    }
}

impl EvmSettler {
    /// A settler reaching the chain at `rpc_url` (`http(s)://`; the URL is
    /// never shown, it may carry an API key), signing with `key`, on
    /// `network` (`eip155:<id>`). Add assets, then [`connect`](EvmSettlerBuilder::connect).
    pub fn builder(
        rpc_url: impl Into<String>,
        key: SettlerKey,
        network: Network,
    ) -> EvmSettlerBuilder {
        EvmSettlerBuilder::new(rpc_url.into(), key, network)
    }

    /// The settler's address.
    pub fn address(&self) -> Address {
        self.inner.key.address()
    }

    /// The network it settles on.
    pub fn network(&self) -> &Network {
        &self.inner.network
    }

    /// Whether the node answers and is on the settler's chain (for `/readyz`).
    pub async fn ready(&self) -> Result<(), FacilitatorError> {
        match self.inner.rpc.chain_id().await {
            Ok(id) if id == self.inner.chain_id => Ok(()),
            Ok(id) => Err(FacilitatorError::unavailable(format!(
                "the RPC node is on chain {id}, not {}",
                self.inner.chain_id
            ))),
            Err(error) => Err(FacilitatorError::unavailable(error.to_string())),
        }
    }

    /// The offline checks and the settler's own limits (chain, asset, recipient).
    async fn admit(&self, request: &FacilitatorRequest) -> Result<Admitted, Stop> {
        let inner = &*self.inner;
        let now = inner.clock.now_unix_secs();
        let local = |check| {
            check_offline(request, now, &inner.domains, check)
                .map_err(|refusal| Stop::refused(reasons::of_local(refusal.reason), refusal.payer))
        };
        let (transfer, code_hash) = match local(SignatureCheck::Recover) {
            Ok(transfer) => (transfer, None),
            Err(Stop::Refused {
                reason: reasons::SIGNATURE,
                payer,
                message,
            }) => match self.contract_code_hash(request).await? {
                Some(code_hash) => {
                    request.note_contract_payer();
                    (local(SignatureCheck::OnChain)?, Some(code_hash))
                }
                None => {
                    return Err(Stop::Refused {
                        reason: reasons::SIGNATURE,
                        payer,
                        message,
                    });
                }
            },
            Err(stop) => return Err(stop),
        };
        let payer = Some(transfer.from);
        // Before any call to the chain: what moves nothing, or too little, costs gas all the same.
        if transfer.value < inner.min_amount {
            return Err(Stop::Refused {
                reason: reasons::VALUE_TOO_LOW,
                message: Some(format!(
                    "value {} is below the {} units this settler settles at least",
                    transfer.value, inner.min_amount
                )),
                payer: payer.map(|p| p.to_checksum(None)),
            });
        }
        let identities = standing::identities(transfer.from, code_hash);
        if let Some(until) = inner.standings.denied_until(identities, now) {
            return Err(Stop::Refused {
                reason: reasons::PAYER_DENIED,
                message: Some(format!(
                    "this payer's recent settlements failed: refused until unix time {until}"
                )),
                payer: payer.map(|p| p.to_checksum(None)),
            });
        }
        if transfer.token.chain_id != inner.chain_id {
            return Err(Stop::refused(reasons::NETWORK_MISMATCH, payer));
        }
        if !inner.assets.contains(&transfer.token.asset) {
            return Err(Stop::Refused {
                reason: reasons::ASSET_NOT_SERVED,
                message: Some(format!(
                    "asset {} is not settled here",
                    transfer.token.asset
                )),
                payer: payer.map(|p| p.to_checksum(None)),
            });
        }
        if !inner.pay_to.is_empty() && !inner.pay_to.contains(&transfer.to) {
            return Err(Stop::Refused {
                reason: reasons::RECIPIENT_MISMATCH,
                message: Some(format!(
                    "recipient {} is not paid by this facilitator",
                    transfer.to
                )),
                payer: payer.map(|p| p.to_checksum(None)),
            });
        }
        let signature =
            raw_signature(request).ok_or(Stop::refused(reason::INVALID_PAYLOAD, payer))?;
        let valid_after = request.exact_evm().map_or(0, |evm| evm.valid_after);
        let calldata = tx::transfer_calldata(&transfer, valid_after, &signature);
        let key = SettlementKey {
            chain_id: transfer.token.chain_id,
            asset: transfer.token.asset,
            from: transfer.from,
            nonce: transfer.nonce,
        };
        let payer = request
            .payer_text()
            .map_or_else(|| transfer.from.to_checksum(None), str::to_owned);
        Ok(Admitted {
            target: transfer.token.asset,
            transfer,
            key,
            payer,
            calldata,
            code_hash,
            scheme: Scheme::Exact,
        })
    }

    /// The hash of the payment's `from`'s code, if it has code (a smart wallet).
    async fn contract_code_hash(&self, request: &FacilitatorRequest) -> Result<Option<B256>, Stop> {
        let Some(evm) = request.exact_evm() else {
            return Ok(None);
        };
        self.code_hash_of(evm.from).await
    }

    /// The settlement's call as it will be sent: at most the gas cap, at
    /// the node's fees (so a wallet reading `GASPRICE` sees what it will see mined).
    async fn call_as_sent<'a>(
        &self,
        admitted: &'a Admitted,
    ) -> Result<CallRequest<'a>, FacilitatorError> {
        let call = CallRequest::new(
            self.inner.key.address(),
            admitted.target,
            &admitted.calldata,
        );
        Ok(call.limited_to(self.inner.gas_cap, self.current_fees().await?))
    }

    /// The token's (or the proxy's) verdict on `admitted`, from the
    /// settler's address, as it will be sent. A refusal of the payer's own
    /// doing counts against it.
    async fn simulate(&self, admitted: &Admitted) -> Simulation {
        let call = match self.call_as_sent(admitted).await {
            Ok(call) => call,
            Err(error) => return Simulation::Unavailable(error.detail().to_owned()),
        };
        let outcome = self.inner.rpc.eth_call(&call).await.map(drop);
        let simulation = self.verdict(admitted, outcome).await;
        if let Simulation::Refused { reason, .. } = &simulation {
            self.payer_failed(admitted, reason);
        }
        simulation
    }

    /// The verdict of a simulated (or estimated) settlement's outcome, in its scheme's words.
    async fn verdict(&self, admitted: &Admitted, outcome: Result<(), rpc::RpcError>) -> Simulation {
        match admitted.scheme {
            Scheme::Exact => simulate::judge(outcome),
            Scheme::Upto { .. } => self.judge_upto(admitted, outcome).await,
        }
    }

    /// Counts a refusal for `reason` against the payer, unless anyone could have caused it.
    fn payer_failed(&self, admitted: &Admitted, reason: &str) {
        if reasons::counts_against_payer(reason) {
            let identities = standing::identities(admitted.transfer.from, admitted.code_hash);
            let now = self.inner.clock.now_unix_secs();
            self.inner.standings.failed(identities, now);
        }
    }

    /// The node's fees for a transaction now: read once per block the
    /// receipt watch sees, and at most every [`GAS_CHECK_TTL`] otherwise.
    async fn current_fees(&self) -> Result<tx::Fees, FacilitatorError> {
        let head = self.inner.watch.head();
        let mut cached = self.inner.fees.lock().await;
        if let Some(read) = *cached
            && read.at.elapsed() < GAS_CHECK_TTL
            && read.head >= head
        {
            return Ok(read.fees);
        }
        let (base, tip) = self
            .inner
            .rpc
            .fees()
            .await
            .map_err(|error| FacilitatorError::unavailable(error.to_string()))?;
        let fees = tx::Fees::from_node(base, tip);
        *cached = Some(FeesRead {
            at: std::time::Instant::now(),
            head,
            fees,
        });
        Ok(fees)
    }
}

/// Fees as read from the node.
#[derive(Clone, Copy, Debug)]
struct FeesRead {
    at: std::time::Instant,
    /// The receipt watch's head when they were read.
    head: u64,
    fees: tx::Fees,
}

/// Gas a settlement is assumed to need when judging the settler's balance
/// at verify (`transferWithAuthorization` takes about 86-104k; a wallet's
/// own check adds some).
const GAS_PER_SETTLEMENT: u128 = 150_000;

/// How long a passed gas-money check is trusted.
const GAS_CHECK_TTL: Duration = Duration::from_secs(2);

impl EvmSettler {
    /// Whether the settler holds ETH for one settlement's gas at today's
    /// fees: a payment it could not settle is not accepted (503, nothing
    /// served) rather than refused after the answer.
    async fn check_gas_money(&self) -> Result<(), FacilitatorError> {
        self.check_gas_money_since(GAS_CHECK_TTL).await
    }

    /// [`check_gas_money`](Self::check_gas_money), trusting a passed check
    /// only if younger than `ttl`.
    async fn check_gas_money_since(&self, ttl: Duration) -> Result<(), FacilitatorError> {
        let inner = &*self.inner;
        let mut checked = inner.gas_checked.lock().await;
        if checked.is_some_and(|at| at.elapsed() < ttl) {
            return Ok(());
        }
        let address = inner.key.address();
        let unavailable = |error: rpc::RpcError| FacilitatorError::unavailable(error.to_string());
        let balance = inner.rpc.balance(address).await.map_err(unavailable)?;
        let fees = self.current_fees().await?;
        let needed = GAS_PER_SETTLEMENT.saturating_mul(fees.max_fee_per_gas);
        if balance < needed {
            return Err(FacilitatorError::unavailable(format!(
                "settler {address} cannot pay for gas: it holds {balance} wei, a settlement needs up to {needed}"
            )));
        }
        *checked = Some(std::time::Instant::now());
        Ok(())
    }
}

/// The payload's signature bytes as sent (65 for an EOA, any length for a wallet).
fn raw_signature(request: &FacilitatorRequest) -> Option<Vec<u8>> {
    let text = request
        .payment_payload()
        .payload
        .get("signature")?
        .as_str()?;
    hex::decode(text).ok()
}

/// A payment's identity for the records: the call that moves it.
fn payment_id(calldata: &[u8]) -> B256 {
    keccak256(calldata)
}

fn lock_in_flight(
    in_flight: &Mutex<HashMap<SettlementKey, Arc<tokio::sync::Mutex<()>>>>,
    key: SettlementKey,
) -> Arc<tokio::sync::Mutex<()>> {
    let mut map = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
    map.retain(|_, lock| Arc::strong_count(lock) > 1);
    map.entry(key).or_default().clone()
}

impl Facilitator for EvmSettler {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async move {
            let admitted = if request.payment_requirements().scheme == SCHEME_UPTO {
                self.admit_upto(request, super::local_upto::Phase::Verify)
                    .await
            } else {
                self.admit(request).await
            };
            let admitted = match admitted {
                Ok(admitted) => admitted,
                Err(stop) => return stop_verdict(stop),
            };
            // Simulated with fees, a broke settler fails the call itself: say why first.
            self.check_gas_money().await?;
            match self.simulate(&admitted).await {
                Simulation::Passes => Ok(VerifyResponse::valid(admitted.payer)),
                Simulation::Refused { reason, message } => Ok(VerifyResponse {
                    invalid_message: Some(message),
                    ..VerifyResponse::invalid(reason, Some(admitted.payer))
                }),
                Simulation::Unavailable(detail) => Err(FacilitatorError::unavailable(detail)),
            }
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            if request.payment_requirements().scheme == SCHEME_UPTO {
                return self.settle_upto(request).await;
            }
            self.settle_payment(request).await
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        let address = self.inner.key.address().to_checksum(None);
        let mut signers = serde_json::Map::new();
        signers.insert("eip155:*".into(), serde_json::json!([address.clone()]));
        // `upto` permits name the facilitator that may settle them: this key.
        let mut upto_extra = serde_json::Map::new();
        upto_extra.insert("facilitatorAddress".into(), address.into());
        let kinds = vec![
            SupportedKind {
                x402_version: X402_VERSION,
                scheme: SCHEME_EXACT.to_owned(),
                network: self.inner.network.clone(),
                extra: None,
            },
            SupportedKind {
                x402_version: X402_VERSION,
                scheme: SCHEME_UPTO.to_owned(),
                network: self.inner.network.clone(),
                extra: Some(upto_extra),
            },
        ];
        Box::pin(std::future::ready(Ok(SupportedResponse {
            kinds,
            extensions: Vec::new(),
            signers,
        })))
    }
}

fn stop_verdict(stop: Stop) -> Result<VerifyResponse, FacilitatorError> {
    match stop {
        Stop::Refused {
            reason,
            message,
            payer,
        } => Ok(VerifyResponse {
            invalid_message: message,
            ..VerifyResponse::invalid(reason, payer)
        }),
        Stop::Unavailable(error) => Err(error),
    }
}

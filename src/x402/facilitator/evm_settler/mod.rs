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
//! **Settle** simulates again (nothing the token refuses is broadcast: a
//! replayed or high-`s` payment never costs gas nor moves the settler's
//! nonce), estimates gas (+25%), takes fees from the node, signs an EIP-1559
//! transaction with a nonce from its nonce manager, **records** its
//! hash in [`SettlementRecords`] and only then sends it. It waits for the
//! receipt (`receipt_timeout`, then `confirmations` more blocks); success is
//! status 1 **and** the asset's own `Transfer(from, to, value)` log with the
//! exact values. A transaction with no receipt in time is replaced once with
//! the same nonce and fees at least 12.5% higher; if that one is not mined
//! in time either, settle answers [`FacilitatorError::pending`] with the
//! transaction: the transfer may still land.
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
//! use walletgate::x402::facilitator::{EvmSettler, SettlerKey};
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
mod fees;
mod key;
mod nonce;
pub mod reasons;
mod records;
mod rpc;
mod settle;
#[cfg(feature = "siwx")]
mod sign_in;
mod simulate;
mod standing;
mod tx;
mod upto;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use alloy_primitives::{Address, B256, hex, keccak256};

pub use approve::{ApprovalError, ApprovalPlan, Permit2Approval};
pub use key::SettlerKey;
#[cfg(all(test, feature = "redis"))]
pub(crate) use records::tests::{contract as records_contract, sample as sample_record};
pub use records::{
    MemorySettlementRecords, RECORD_RETENTION_SECS, SettlementKey, SettlementRecord,
    SettlementRecords,
};
pub use standing::{FAILURE_DENIAL_SECS, FAILURE_WINDOW_SECS, MAX_FAILURES, REVERT_DENIAL_SECS};

use self::nonce::NonceManager;
use self::rpc::{CallRequest, Rpc};
use self::simulate::Simulation;
use self::standing::PayerStandings;
use super::api::{Facilitator, FacilitatorError, FacilitatorRequest, reason};
use super::ledger::Transfer;
use super::local_evm::check_offline;
use super::window::SignatureCheck;
use crate::clock::{SharedClock, SystemClock};
use crate::store::BoxFuture;
use crate::tls::ClientTls;
use crate::x402::wire::eip712::DomainCache;
use crate::x402::wire::types::{
    Network, SCHEME_EXACT, SCHEME_UPTO, SettleResponse, SupportedKind, SupportedResponse,
    VerifyResponse, X402_VERSION,
};

/// Default wait for a receipt before the transaction counts as stuck
/// (`GATEWAY_RECEIPT_TIMEOUT_SECS`).
pub const DEFAULT_RECEIPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default bound on one JSON-RPC call.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Default most gas a settlement transaction may use
/// (`transferWithAuthorization` takes about 60–104k; a smart wallet's own
/// check adds some): a payment that needs more is refused at verify.
pub const DEFAULT_GAS_CAP: u64 = 250_000;

/// Least gas cap accepted: no transfer fits below it.
const MIN_GAS_CAP: u64 = 21_000;

/// Below this many wei the settler warns at start that it may run out of gas money.
pub const LOW_BALANCE_WEI: u128 = 1_000_000_000_000_000;

/// Why a settler could not be set up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettlerError {
    /// The key file could not be used (never its contents).
    KeyFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The key is not a secp256k1 private key.
    InvalidKey,
    /// The RPC URL is not an `http(s)` URL.
    InvalidRpcUrl(String),
    /// The network is not `eip155:<id>`.
    InvalidNetwork(String),
    /// No asset to settle was configured.
    NoAsset,
    /// The node could not answer a startup check.
    Rpc(String),
    /// The node is on another chain than the configured network.
    ChainMismatch {
        /// The configured network's chain id.
        configured: u64,
        /// The node's `eth_chainId`.
        node: u64,
    },
    /// An asset has no code on the node's chain.
    AssetWithoutCode(Address),
    /// The gas cap is below what any transaction needs.
    GasCapTooLow(u64),
}

impl fmt::Display for SettlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KeyFile { path, reason } => write!(f, "settler key file {path}: {reason}"),
            Self::InvalidKey => f.write_str("the settler key is not a secp256k1 private key"),
            Self::InvalidRpcUrl(detail) => write!(f, "invalid RPC URL: {detail}"),
            Self::InvalidNetwork(network) => {
                write!(
                    f,
                    "the settler's network must be eip155:<chain id>, not {network}"
                )
            }
            Self::NoAsset => f.write_str("no asset to settle (add one with with_asset)"),
            Self::Rpc(detail) => write!(f, "RPC startup check failed: {detail}"),
            Self::ChainMismatch { configured, node } => write!(
                f,
                "the RPC node is on chain {node}, but the configured network is eip155:{configured}"
            ),
            Self::AssetWithoutCode(asset) => {
                write!(f, "asset {asset} has no code on the RPC node's chain")
            }
            Self::GasCapTooLow(cap) => {
                write!(
                    f,
                    "a gas cap of {cap} is below any transaction's {MIN_GAS_CAP}"
                )
            }
        }
    }
}

impl std::error::Error for SettlerError {}

/// What the startup checks found besides refusals.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartupReport {
    /// The settler's address (fund it with the chain's native coin for gas).
    pub address: Address,
    /// Its balance in wei at start.
    pub balance_wei: u128,
    /// Whether that is below [`LOW_BALANCE_WEI`].
    pub low_balance: bool,
}

/// How to reach the chain and what to settle: [`EvmSettler::builder`].
pub struct EvmSettlerBuilder {
    rpc_url: String,
    key: SettlerKey,
    network: Network,
    assets: Vec<Address>,
    pay_to: Vec<Address>,
    records: Arc<dyn SettlementRecords>,
    clock: SharedClock,
    tls: Option<ClientTls>,
    receipt_timeout: Duration,
    rpc_timeout: Duration,
    confirmations: u64,
    gas_cap: u64,
    min_amount: u128,
}

impl fmt::Debug for EvmSettlerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The RPC URL may carry a provider's API key: not shown.
        f.debug_struct("EvmSettlerBuilder")
            .field("key", &self.key)
            .field("network", &self.network)
            .field("assets", &self.assets)
            .finish_non_exhaustive()
    }
}

impl EvmSettlerBuilder {
    /// Settles transfers of `asset` (repeatable; at least one).
    #[must_use]
    pub fn with_asset(mut self, asset: Address) -> Self {
        self.assets.push(asset);
        self
    }

    /// Pays only to `pay_to` (repeatable): other recipients are refused at
    /// verify, so nobody relays their own transfers on the settler's gas.
    /// Without any, every recipient is accepted (a gateway settling its own offers).
    #[must_use]
    pub fn with_pay_to(mut self, pay_to: Address) -> Self {
        self.pay_to.push(pay_to);
        self
    }

    /// Where broadcasts are recorded (default: this process's memory).
    #[must_use]
    pub fn with_records(mut self, records: Arc<dyn SettlementRecords>) -> Self {
        self.records = records;
        self
    }

    /// The clock the time window is checked with (default: the system's).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The roots an `https://` RPC is trusted with (default: Mozilla's).
    #[must_use]
    pub fn with_tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The wait for a receipt before a transaction counts as stuck (default 30 s).
    #[must_use]
    pub fn with_receipt_timeout(mut self, timeout: Duration) -> Self {
        self.receipt_timeout = timeout;
        self
    }

    /// Blocks to wait for on top of the one that mined the transfer (default 0).
    #[must_use]
    pub fn with_confirmations(mut self, confirmations: u64) -> Self {
        self.confirmations = confirmations;
        self
    }

    /// The most gas a settlement transaction may use (default
    /// [`DEFAULT_GAS_CAP`]): a payment whose transfer needs more (a smart
    /// wallet whose signature check loops) is refused at verify, and no
    /// transaction is sent with a higher limit.
    #[must_use]
    pub fn with_gas_cap(mut self, gas: u64) -> Self {
        self.gas_cap = gas;
        self
    }

    /// The least value settled, in the asset's units (default 1: a
    /// zero-value authorization moves nothing and costs the settler gas).
    /// Checked at verify against the signed value, before any simulation.
    #[must_use]
    pub fn with_min_amount(mut self, units: u128) -> Self {
        self.min_amount = units.max(1);
        self
    }

    /// The bound on one JSON-RPC call (default 10 s).
    #[must_use]
    pub fn with_rpc_timeout(mut self, timeout: Duration) -> Self {
        self.rpc_timeout = timeout;
        self
    }

    /// Checks the node (its chain id is the network's, every asset has
    /// code) and reads the settler's balance.
    pub async fn connect(self) -> Result<(EvmSettler, StartupReport), SettlerError> {
        let chain_id = self
            .network
            .eip155_chain_id()
            .ok_or_else(|| SettlerError::InvalidNetwork(self.network.to_string()))?;
        if self.assets.is_empty() {
            return Err(SettlerError::NoAsset);
        }
        if self.gas_cap < MIN_GAS_CAP {
            return Err(SettlerError::GasCapTooLow(self.gas_cap));
        }
        let tls = self.tls.unwrap_or_else(ClientTls::webpki_roots);
        let rpc =
            Rpc::new(&self.rpc_url, &tls, self.rpc_timeout).map_err(SettlerError::InvalidRpcUrl)?;
        let node = rpc
            .chain_id()
            .await
            .map_err(|error| SettlerError::Rpc(error.to_string()))?;
        if node != chain_id {
            return Err(SettlerError::ChainMismatch {
                configured: chain_id,
                node,
            });
        }
        for asset in &self.assets {
            let code = rpc
                .code_len(*asset)
                .await
                .map_err(|error| SettlerError::Rpc(error.to_string()))?;
            if code == 0 {
                return Err(SettlerError::AssetWithoutCode(*asset));
            }
        }
        let address = self.key.address();
        let balance_wei = rpc
            .balance(address)
            .await
            .map_err(|error| SettlerError::Rpc(error.to_string()))?;
        let report = StartupReport {
            address,
            balance_wei,
            low_balance: balance_wei < LOW_BALANCE_WEI,
        };
        #[cfg(feature = "tracing")]
        if report.low_balance {
            tracing::warn!(
                settler = %address,
                balance_wei,
                "the settler has little ETH for gas: fund it or settlements will fail"
            );
        }
        let settler = EvmSettler {
            inner: Arc::new(Inner {
                rpc,
                key: self.key,
                chain_id,
                network: self.network,
                assets: self.assets,
                pay_to: self.pay_to,
                records: self.records,
                clock: self.clock,
                domains: DomainCache::default(),
                nonces: NonceManager::default(),
                receipt_timeout: self.receipt_timeout,
                confirmations: self.confirmations,
                gas_checked: Mutex::default(),
                in_flight: Mutex::default(),
                gas_cap: self.gas_cap,
                min_amount: self.min_amount,
                standings: PayerStandings::default(),
                fees: Mutex::default(),
            }),
        };
        Ok((settler, report))
    }
}

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
    nonces: NonceManager,
    receipt_timeout: Duration,
    confirmations: u64,
    /// When the settler last had gas money for a settlement.
    gas_checked: Mutex<Option<std::time::Instant>>,
    /// One lock per authorization being settled in this process.
    in_flight: Mutex<HashMap<SettlementKey, Arc<tokio::sync::Mutex<()>>>>,
    /// The most gas a settlement may use.
    gas_cap: u64,
    /// The least value settled.
    min_amount: u128,
    /// Payers refused for a while after failures of their own.
    standings: PayerStandings,
    /// The node's fees, and when they were read.
    fees: Mutex<Option<(std::time::Instant, tx::Fees)>>,
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
        EvmSettlerBuilder {
            rpc_url: rpc_url.into(),
            key,
            network,
            assets: Vec::new(),
            pay_to: Vec::new(),
            records: Arc::new(MemorySettlementRecords::new()),
            clock: Arc::new(SystemClock),
            tls: None,
            receipt_timeout: DEFAULT_RECEIPT_TIMEOUT,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            confirmations: 0,
            gas_cap: DEFAULT_GAS_CAP,
            min_amount: 1,
        }
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

    /// The node's fees for a transaction now (read at most every [`GAS_CHECK_TTL`]).
    async fn current_fees(&self) -> Result<tx::Fees, FacilitatorError> {
        let cached = *self
            .inner
            .fees
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, fees)) = cached
            && at.elapsed() < GAS_CHECK_TTL
        {
            return Ok(fees);
        }
        let (base, tip) = self
            .inner
            .rpc
            .fees()
            .await
            .map_err(|error| FacilitatorError::unavailable(error.to_string()))?;
        let fees = tx::Fees::from_node(base, tip);
        *self
            .inner
            .fees
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((std::time::Instant::now(), fees));
        Ok(fees)
    }
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
        let inner = &*self.inner;
        let fresh =
            |at: &Option<std::time::Instant>| at.is_some_and(|at| at.elapsed() < GAS_CHECK_TTL);
        if fresh(
            &inner
                .gas_checked
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        ) {
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
        *inner
            .gas_checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(std::time::Instant::now());
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

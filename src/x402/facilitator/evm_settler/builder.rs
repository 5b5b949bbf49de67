//! [`EvmSettlerBuilder`]: an [`EvmSettler`]'s settings, checked against its
//! node at start ([`connect`](EvmSettlerBuilder::connect)), and what it
//! found there ([`StartupReport`]).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::Address;

use super::error::{MIN_GAS_CAP, SettlerError};
use super::nonce::{MemoryNonceAllocator, NonceAllocator};
use super::rpc::Rpc;
use super::standing::PayerStandings;
use super::watch::BlockWatch;
use super::{EvmSettler, Inner, SettlementRecords, SettlerKey};
use crate::clock::SharedClock;
use crate::tls::ClientTls;
use crate::x402::wire::eip712::DomainCache;
use crate::x402::wire::types::Network;

/// Default wait for a receipt before the transaction counts as stuck
/// (`GATEWAY_RECEIPT_TIMEOUT_SECS`).
pub const DEFAULT_RECEIPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default bound on one JSON-RPC call.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Default most gas a settlement transaction may use
/// (`transferWithAuthorization` takes about 60–104k; a smart wallet's own
/// check adds some): a payment that needs more is refused at verify.
pub const DEFAULT_GAS_CAP: u64 = 250_000;

/// Default pause between two looks at the node's head while settlements
/// wait for receipts.
pub const DEFAULT_BLOCK_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Default most `eth_call`, and apart most `eth_estimateGas`, in flight at
/// the node at once.
pub const DEFAULT_SIMULATION_WINDOW: usize = 64;

/// Below this many wei the settler warns at start that it may run out of gas money.
pub const LOW_BALANCE_WEI: u128 = 1_000_000_000_000_000;

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
    /// Whether the node offers `eth_sendRawTransactionSync` (EIP-7966): a
    /// settlement then learns its receipt in the send's own answer.
    pub sync_send: bool,
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
    simulation_window: usize,
    min_amount: u128,
    nonces: Arc<dyn NonceAllocator>,
    block_poll_interval: Duration,
    sync_send: bool,
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
    /// The settings of [`EvmSettler::builder`], everything else at its default.
    pub(super) fn new(rpc_url: String, key: SettlerKey, network: Network) -> Self {
        Self {
            rpc_url,
            key,
            network,
            assets: Vec::new(),
            pay_to: Vec::new(),
            records: Arc::new(super::MemorySettlementRecords::new()),
            clock: Arc::new(crate::clock::SystemClock),
            tls: None,
            receipt_timeout: DEFAULT_RECEIPT_TIMEOUT,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            confirmations: 0,
            gas_cap: DEFAULT_GAS_CAP,
            simulation_window: DEFAULT_SIMULATION_WINDOW,
            min_amount: 1,
            nonces: Arc::new(MemoryNonceAllocator::new()),
            block_poll_interval: DEFAULT_BLOCK_POLL_INTERVAL,
            sync_send: true,
        }
    }

    /// Where the settler key's nonces come from (default: this process's
    /// memory, one settler process per key). Processes sharing one key share one.
    #[must_use]
    pub fn with_nonce_allocator(mut self, nonces: Arc<dyn NonceAllocator>) -> Self {
        self.nonces = nonces;
        self
    }

    /// The pause between two looks at the node's head while settlements
    /// wait for receipts (default [`DEFAULT_BLOCK_POLL_INTERVAL`]; a
    /// fraction of the chain's block time).
    #[must_use]
    pub fn with_block_poll_interval(mut self, interval: Duration) -> Self {
        self.block_poll_interval = interval;
        self
    }

    /// Whether to use `eth_sendRawTransactionSync` where the node offers it
    /// (default: yes; with confirmations it is never used).
    #[must_use]
    pub fn with_sync_send(mut self, sync_send: bool) -> Self {
        self.sync_send = sync_send;
        self
    }

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

    /// The most `eth_call` in flight at the node at once, and apart the most
    /// `eth_estimateGas` (default [`DEFAULT_SIMULATION_WINDOW`] each, at least
    /// 1); more wait their turn. A node answering hundreds of simulations at
    /// once shares its CPU among them and answers them all late, so every
    /// transaction would be sent late; in turns, the first are sent while the
    /// rest are simulated (600 at once: 291 in the next block against 18).
    /// Apart, a settlement's estimate never waits behind the verifications
    /// queued before it. Hosted nodes also cap requests in flight.
    #[must_use]
    pub fn with_simulation_window(mut self, simulations: usize) -> Self {
        self.simulation_window = simulations.max(1);
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
        let rpc = Rpc::new(
            &self.rpc_url,
            &tls,
            self.rpc_timeout,
            self.simulation_window,
        )
        .map_err(SettlerError::InvalidRpcUrl)?;
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
        // Detected once: a settlement then never asks twice.
        let sync_send = self.sync_send
            && self.confirmations == 0
            && rpc
                .offers_sync_send()
                .await
                .map_err(|error| SettlerError::Rpc(error.to_string()))?;
        let report = StartupReport {
            address,
            balance_wei,
            low_balance: balance_wei < LOW_BALANCE_WEI,
            sync_send,
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
                nonces: self.nonces,
                watch: BlockWatch::new(self.block_poll_interval),
                sync_send,
                receipt_timeout: self.receipt_timeout,
                confirmations: self.confirmations,
                gas_checked: tokio::sync::Mutex::default(),
                in_flight: Mutex::default(),
                gas_cap: self.gas_cap,
                min_amount: self.min_amount,
                standings: PayerStandings::default(),
                fees: tokio::sync::Mutex::default(),
                seeding: tokio::sync::Mutex::default(),
            }),
        };
        Ok((settler, report))
    }
}

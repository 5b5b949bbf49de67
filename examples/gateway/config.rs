//! The gateway's configuration: embedded defaults, overridable from the environment.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `GATEWAY_LISTEN` | `127.0.0.1:8402` | address to listen on |
//! | `GATEWAY_PUBLIC_URL` | `http://` + the bound address | `https://host[:port][/prefix]` clients reach the gateway at: every quote's `resource.url` starts with it (never the request's `Host`); set it behind a proxy or on a wildcard bind |
//! | `GATEWAY_DRAIN_SECS` | `30` | on SIGTERM/SIGINT: how long requests in flight (paid streams to their settlement) may take before the gateway exits 1 anyway |
//! | `GATEWAY_BODY_LIMIT_BYTES` | `4194304` | largest request body (`REQUEST_TOO_LARGE` above) |
//! | `GATEWAY_UPSTREAM_TIMEOUT_SECS` | `120` | upstream answer timeout (`TIMEOUT` after) |
//! | `GATEWAY_UPSTREAMS` | none | `provider=https://host/v1,…` (or `http://`): OpenAI-compatible upstreams |
//! | `GATEWAY_UPSTREAM_KEY_<PROVIDER>` | none | that provider's API key (never printed) |
//! | `GATEWAY_FAULTS` | none | `model_id=preset,…`: inject upstream faults (see `upstream::Fault::preset`) |
//! | `GATEWAY_PAY_TO` | development account 9 | the address paid (`payTo` of every quote) |
//! | `GATEWAY_MAX_TIMEOUT_SECS` | `300` | `maxTimeoutSeconds` of every quote: how long a signed payment stays valid, and so how long its nonce is remembered |
//! | `GATEWAY_FREE_PER_MINUTE` | `30` | free-model requests per client IP per minute |
//! | `GATEWAY_FREE_PER_HOUR` | `300` | free-model requests per client IP per hour |
//! | `GATEWAY_CORS_ORIGINS` | none | comma-separated browser origins (`https://app.example`) allowed to call the gateway and read its quotes, receipts and rate limits; none: no CORS |
//! | `GATEWAY_TRUSTED_PROXIES` | none | comma-separated CIDRs (`10.0.0.0/8, ::1`) of proxies whose forwarding header names the client; without them the socket peer is the client |
//! | `GATEWAY_FORWARDED_HEADER` | `x-forwarded-for` | the header those proxies write: `x-forwarded-for` or `forwarded` (RFC 7239) |
//! | `GATEWAY_BAZAAR` | `on` | `off`: 402s declare no `bazaar` discovery extension (`/.well-known/x402` and `/openapi.json` stay) |
//! | `GATEWAY_IMAGE_JOB_MILLIS` | `2000` | how long an image job runs (`0`: answered at once) |
//! | `GATEWAY_ANSWER_RETENTION_SECS` | `3600` | how long a paid answer is kept for a resend (a settlement first reported pending), and a `sign-in-with-x` entitlement |
//! | `GATEWAY_ANSWER_MAX_BYTES` | `1048576` | the largest paid answer kept (a larger one is served again on the resend, charged once) |
//! | `GATEWAY_PAYMENT_ID` | `optional` | the `payment-identifier` extension: `off`, `optional` (declared; a payment may carry an id and then pays once per id) or `required` (a payment without an id is 400) |
//! | `GATEWAY_UPTO` | `second` | the metered `upto` offer (a Permit2 ceiling; the answer's tokens are settled): `off` (the specification's quote byte for byte), `second` (after `exact`, which the specification's clients sign) or `first`; offered only where it can settle: the development ledger, the on-chain settler (`GATEWAY_EVM_RPC_URL`), or a `GATEWAY_FACILITATOR_URL` whose `GET /supported` lists `upto` on the network at start (its `facilitatorAddress`); a payer that cuts 3 metered streams within 10 minutes is served `exact` only for 10 minutes |
//! | `GATEWAY_SIWX` | `on` | the `sign-in-with-x` extension (EVM networks): a wallet that paid for a request signs in to get its kept answer again, uncharged; declared only when the public origin is known (`GATEWAY_PUBLIC_URL`, or a bound address that is not a wildcard); `off`: not declared, and settled answers are not kept for it |
//! | `GATEWAY_SIWX_KEY_FILE` | a random key per process | the key of sign-in nonces' tags (64 hex digits; never printed): replicas behind one origin must share it, or a nonce one issued fails on another |
//! | `GATEWAY_ANSWER_STORE_BYTES` | `268435456` | the in-memory answer store's total (without Redis; the answers nearest their expiry make room) |
//! | `GATEWAY_NETWORK` | `base-sepolia` | `base-sepolia`, `base`, `solana` (or `--network solana`), or `eip155:<chain id>` (then the three `GATEWAY_USDC_*`) |
//! | `GATEWAY_FACILITATOR_URL` | none (development ledger) | the x402 facilitator that verifies and settles (`https://host[/path]` or `http://`); required on every network but `base-sepolia` |
//! | `GATEWAY_EVM_RPC_URL` + `GATEWAY_SETTLER_KEY_FILE` | none | settle EVM payments on chain with walletgate's own settler instead of a facilitator: the chain's JSON-RPC URL (never printed) and the settler's key file (64 hex digits, mode 0600; never printed); fund its address with ETH for gas |
//! | `GATEWAY_RECEIPT_TIMEOUT_SECS` | `30` | with the settler: the wait for a receipt before a transaction is replaced (same nonce, higher fees); after a second wait the settlement is pending |
//! | `GATEWAY_CONFIRMATIONS` | `0` | with the settler: blocks to wait for on top of the one that mined a transfer |
//! | `GATEWAY_USDC_ADDRESS`, `GATEWAY_USDC_NAME`, `GATEWAY_USDC_VERSION` | none | `eip155:<id>`: the token's address and EIP-712 domain name and version |
//! | `GATEWAY_MPP` | `on` on EVM networks | `on`: every 402 also carries an MPP `Payment` challenge (EVM `charge`, EIP-3009 `authorization`) per `exact` offer and an `Authorization: Payment` credential pays the route through the same flow (its answer carries `Payment-Receipt`; an MPP stream is settled before its first byte); `off`: not a byte added |
//! | `GATEWAY_MPP_KEY_FILE` | a random key per process | the secret MPP challenge ids are tagged with (32+ bytes, mode 0600; never printed): replicas share it, or a challenge one issued is refused by another |
//! | `GATEWAY_OFFER_KEY_FILE` | none | sign every 402's offers, every receipt and every metered usage statement (x402 `offer-receipt`, EIP-712) with this secp256k1 key (64 hex digits, mode 0600 or refused; never printed); its address is published as `offerSigner` in `/.well-known/x402`. Unset: nothing is signed, the 402 is unchanged |
//! | `GATEWAY_FACILITATOR_SECRET_FILE` | a random secret per process | with `GATEWAY_FACILITATOR_URL`: the secret each settlement's `Idempotency-Key` is derived from (64 hex digits; never printed): replicas share it, or a settlement one replica left pending is refused to the other as a copy |
//! | `GATEWAY_CDP_KEY_FILE` | none | the hosted CDP facilitator's API key file (`{"id", "privateKey"}`): every facilitator call carries a fresh JWT made with it (never printed) |
//! | `GATEWAY_DEV_LEDGER` | unset | `1`: serve real upstreams (`GATEWAY_UPSTREAMS`) although payments settle on the development ledger |
//! | `GATEWAY_EXTRA_CA_FILE` | none | PEM root(s) trusted besides Mozilla's, for upstreams and the facilitator |
//! | `GATEWAY_SOLANA_PAY_TO` | none | Solana: the wallet paid (its USDC account receives) |
//! | `GATEWAY_SOLANA_FEE_PAYER` | from the facilitator | Solana: `extra.feePayer`; else read from `GET /supported` at start |
//! | `GATEWAY_REDIS_URL` | none (in memory) | `redis://host:port[/db]` (feature `redis`): claims, spent authorizations, kept answers, `sign-in-with-x` entitlements, the ledger, image jobs and the free-tier limit in Redis, shared by every replica (see `stores.rs`) |
//! | `GATEWAY_REDIS_MODE` | `standalone` | `cluster`: `GATEWAY_REDIS_URL` is a comma-separated list of Redis Cluster seed node URLs (`rediss://` with the CA file as for one Redis); every store works on both (keys in `docs/operations.md`) |
//! | `GATEWAY_REDIS_PREFIX` | `walletgate` | the key prefix in that Redis (one per deployment) |
//! | `GATEWAY_METRICS_LISTEN` | none (off) | `host:port` (feature `metrics`): Prometheus text at `GET /metrics` there (payments, refusals by code, verify/settle latency, free tier, store timeouts), apart from the API |
//! | `GATEWAY_REDIS_CA_FILE` | none (Mozilla's roots) | `rediss://` (feature `redis-tls`): PEM of the private CA that signed the Redis certificate |
//! | `GATEWAY_REDIS_WAIT_REPLICAS` | `0` (none) | after the claim of each payment, its settling and spent records and the on-chain settler's records, wait until this many replicas acknowledged it (Redis `WAIT`, within the store timeout); fewer is a 503 with `Retry-After`, as Redis away (see `docs/operations.md`) |
//!
//! Providers without an upstream are answered by the embedded echo family.
//! Without `GATEWAY_FACILITATOR_URL`, payments are quoted in Base Sepolia USDC
//! and settled in-process on a development ledger that pre-funds the ten
//! public development accounts: nothing moves on a chain, and anyone holding
//! those public keys is served. A variable the chosen network would ignore
//! is refused at start, naming it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::Duration;

use walletgate::clock::{SharedClock, SystemClock};
use walletgate::free_tier::{ClientIpResolver, FreeTierQuotas};
use walletgate::tls::ClientTls;
use walletgate::x402::facilitator::evm_settler::EvmSettler;
use walletgate::x402::facilitator::{CdpAuth, DevLedger, FacilitatorAuth};
use walletgate::x402::server::payment_id::PaymentIdentifier;
use walletgate::x402::server::{AnswerLimits, DEFAULT_ANSWER_STORE_BYTES, SignInWithX};

use crate::catalogue::Catalogue;
pub(crate) use crate::config_error::{ConfigError, invalid};
pub(crate) use crate::payment_network::{EvmSettings, PaymentNetwork, SettlerSettings, UptoPlace};
use crate::payment_network::{payment_network, settler_settings};
use crate::redis_settings::RedisSettings;
use crate::shutdown::Draining;
use crate::upstream::{ApiKey, Fault, OpenAiUpstream, SharedUpstream};

pub(crate) const DEFAULT_BODY_LIMIT_BYTES: usize = 4 * 1024 * 1024;
pub(crate) const DEFAULT_UPSTREAM_TIMEOUT_SECS: u64 = 120;
pub(crate) const DEFAULT_IMAGE_JOB_MILLIS: u64 = 2_000;

pub(crate) struct Config {
    pub(crate) listen: SocketAddr,
    /// `GATEWAY_PUBLIC_URL`; `None` until [`Config::bound_to`] sets the bound
    /// address.
    pub(crate) public_url: Option<String>,
    pub(crate) body_limit_bytes: usize,
    pub(crate) upstream_timeout: Duration,
    pub(crate) catalogue: Catalogue,
    /// OpenAI-compatible upstreams by provider; the others use the echo family.
    pub(crate) providers: Vec<(String, SharedUpstream)>,
    /// Faults injected by model id.
    pub(crate) faults: HashMap<String, Fault>,
    pub(crate) clock: SharedClock,
    /// The address every quote asks to be paid (`payTo`).
    pub(crate) pay_to: String,
    /// `maxTimeoutSeconds` of every quote.
    pub(crate) max_timeout_secs: u64,
    /// The in-process USDC ledger payments settle on.
    pub(crate) ledger: Arc<DevLedger>,
    /// Free-model quotas per client IP.
    pub(crate) free_tier: FreeTierQuotas,
    /// Who the client is: the peer, or what a trusted proxy says.
    pub(crate) client_ip: ClientIpResolver,
    /// Browser origins allowed (`GATEWAY_CORS_ORIGINS`); empty: no CORS.
    pub(crate) cors_origins: Vec<http::HeaderValue>,
    /// How long an image job takes before its result is ready.
    pub(crate) image_job: Duration,
    /// Whether every 402 declares the `bazaar` discovery extension (`GATEWAY_BAZAAR`).
    pub(crate) bazaar: bool,
    /// How large and how long paid answers are kept for a resend.
    pub(crate) answers: AnswerSettings,
    /// The `payment-identifier` extension (`GATEWAY_PAYMENT_ID`).
    pub(crate) payment_id: PaymentIdentifier,
    /// Where the metered `upto` offer goes (`GATEWAY_UPTO`).
    pub(crate) upto: UptoPlace,
    /// The `sign-in-with-x` extension (`GATEWAY_SIWX`).
    pub(crate) siwx: bool,
    /// Its nonce key (`GATEWAY_SIWX_KEY_FILE`); `None`: random per process.
    pub(crate) siwx_key: Option<[u8; 32]>,
    /// MPP beside x402 (`GATEWAY_MPP`; `None`: on where the network is EVM).
    pub(crate) mpp: Option<bool>,
    /// Its challenge key file (`GATEWAY_MPP_KEY_FILE`); `None`: random per process.
    pub(crate) mpp_key_file: Option<String>,
    /// Signs offers, receipts and usage statements (`GATEWAY_OFFER_KEY_FILE`).
    pub(crate) offer_signer: Option<walletgate::x402::server::OfferSigner>,
    /// What settlements' `Idempotency-Key`s are derived from with an HTTP
    /// facilitator (`GATEWAY_FACILITATOR_SECRET_FILE`); `None`: random per process.
    pub(crate) facilitator_secret: Option<[u8; 32]>,
    /// Whether the public origin is known: `GATEWAY_PUBLIC_URL`, or a bound
    /// address that is not a wildcard (set by [`Config::bound_to`]).
    pub(crate) origin_known: bool,
    /// Where payments are quoted and settled.
    pub(crate) network: PaymentNetwork,
    /// The settle timeout, and payment faults for tests and demos.
    pub(crate) payment_faults: Arc<PaymentFaults>,
    /// The roots the upstreams' and the facilitator's HTTPS trust.
    pub(crate) tls: ClientTls,
    /// The Redis the replicas share (`GATEWAY_REDIS_URL`); `None`: in memory.
    pub(crate) redis: Option<RedisSettings>,
    /// Whether `GET /readyz` answers 200: false while the facilitator has not
    /// yet confirmed it settles the quoted network.
    pub(crate) ready: Arc<AtomicBool>,
    /// Signs every facilitator call (`GATEWAY_CDP_KEY_FILE`: the hosted CDP
    /// facilitator's per-call JWT); never printed.
    pub(crate) facilitator_auth: Option<Arc<dyn FacilitatorAuth>>,
    /// Set on SIGTERM/SIGINT: `GET /readyz` answers 503 from then on.
    pub(crate) draining: Draining,
    /// How long a drain may take (`GATEWAY_DRAIN_SECS`).
    pub(crate) drain: Duration,
    /// `GATEWAY_EVM_RPC_URL` + `GATEWAY_SETTLER_KEY_FILE`: settle on chain.
    pub(crate) settler_settings: Option<SettlerSettings>,
    /// That settler once connected by [`crate::settler::connect`] (its
    /// startup checks passed): it verifies and settles instead of any
    /// facilitator. Never set by parsing.
    pub(crate) settler: Option<EvmSettler>,
    /// The `facilitatorAddress` the HTTP facilitator's `GET /supported`
    /// listed for `upto` on the network, asked at start by
    /// [`crate::check_facilitator`]: the `upto` offer names it. `None`: that
    /// facilitator does not settle `upto` (or did not answer at start), so
    /// it is not offered. Never set by parsing.
    pub(crate) facilitator_upto: Option<alloy_primitives::Address>,
}

/// How paid answers are kept for a resend: each one's bound and retention,
/// and the in-memory store's total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AnswerSettings {
    pub(crate) limits: AnswerLimits,
    pub(crate) store_bytes: usize,
}

impl Default for AnswerSettings {
    fn default() -> Self {
        Self {
            limits: AnswerLimits::default(),
            store_bytes: DEFAULT_ANSWER_STORE_BYTES,
        }
    }
}

impl AnswerSettings {
    /// `GATEWAY_ANSWER_{RETENTION_SECS,MAX_BYTES,STORE_BYTES}`, each a positive number.
    fn from_vars(var: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let positive = |name: &str, default: u64| -> Result<u64, ConfigError> {
            match var(name) {
                None => Ok(default),
                Some(text) => text
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| invalid(name, "expected a positive number")),
            }
        };
        let defaults = Self::default();
        let bytes = |name: &str, default: usize| -> Result<usize, ConfigError> {
            let value = positive(name, default as u64)?;
            usize::try_from(value).map_err(|_| invalid(name, "too large"))
        };
        Ok(Self {
            limits: AnswerLimits {
                max_answer_bytes: bytes(
                    "GATEWAY_ANSWER_MAX_BYTES",
                    defaults.limits.max_answer_bytes,
                )?,
                retention_secs: positive(
                    "GATEWAY_ANSWER_RETENTION_SECS",
                    defaults.limits.retention_secs,
                )?,
            },
            store_bytes: bytes("GATEWAY_ANSWER_STORE_BYTES", defaults.store_bytes)?,
        })
    }
}

/// Payment-side faults for tests and demos, and the settle timeout.
#[derive(Debug)]
pub(crate) struct PaymentFaults {
    /// A settlement not answered within this is given up as pending (it may
    /// still land): the claim is kept and the resend asks again.
    pub(crate) settle_timeout: Duration,
    /// The facilitator never answers `settle`.
    pub(crate) hang_settle: AtomicBool,
    /// The facilitator answers `settle` with `success: false`.
    pub(crate) refuse_settle: AtomicBool,
    /// The next this many `verify` calls find the facilitator unavailable.
    pub(crate) unavailable_verifies: AtomicU32,
    /// The next this many settlements land but answer pending (their receipt
    /// lost); asked again, each answers its landed settlement, as
    /// walletgate's settler does.
    pub(crate) lost_settle_receipts: AtomicU32,
}

impl Default for PaymentFaults {
    fn default() -> Self {
        Self {
            settle_timeout: Duration::from_secs(30),
            hang_settle: AtomicBool::new(false),
            refuse_settle: AtomicBool::new(false),
            unavailable_verifies: AtomicU32::new(0),
            lost_settle_receipts: AtomicU32::new(0),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        let clock: SharedClock = Arc::new(SystemClock);
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8402)),
            public_url: None,
            body_limit_bytes: DEFAULT_BODY_LIMIT_BYTES,
            upstream_timeout: Duration::from_secs(DEFAULT_UPSTREAM_TIMEOUT_SECS),
            catalogue: Catalogue::embedded(),
            providers: Vec::new(),
            faults: HashMap::new(),
            pay_to: DevLedger::DEV_ACCOUNTS[9].to_owned(),
            max_timeout_secs: walletgate::x402::server::DEFAULT_MAX_TIMEOUT_SECS,
            // Used authorizations are forgotten once their validBefore passes.
            ledger: Arc::new(DevLedger::new().with_expiry_clock(clock.clone())),
            clock,
            free_tier: FreeTierQuotas::default(),
            client_ip: ClientIpResolver::new(),
            cors_origins: Vec::new(),
            image_job: Duration::from_millis(DEFAULT_IMAGE_JOB_MILLIS),
            bazaar: true,
            answers: AnswerSettings::default(),
            payment_id: PaymentIdentifier::Optional,
            upto: UptoPlace::default(),
            siwx: true,
            siwx_key: None,
            facilitator_secret: None,
            offer_signer: None,
            mpp: None,
            mpp_key_file: None,
            origin_known: false,
            network: PaymentNetwork::Evm(EvmSettings::base_sepolia()),
            payment_faults: Arc::default(),
            tls: ClientTls::webpki_roots(),
            redis: None,
            ready: Arc::new(AtomicBool::new(true)),
            facilitator_auth: None,
            draining: Draining::default(),
            drain: Duration::from_secs(crate::shutdown::DEFAULT_DRAIN_SECS),
            settler_settings: None,
            settler: None,
            facilitator_upto: None,
        }
    }
}

impl Config {
    /// The defaults, overridden by the `GATEWAY_*` environment variables and
    /// the command line (`--network solana`).
    pub(crate) fn from_env(args: &[String]) -> Result<Self, ConfigError> {
        let network_arg = match args {
            [] => None,
            [flag, network] if flag == "--network" => Some(network.clone()),
            _ => {
                return Err(invalid(
                    "arguments",
                    "expected nothing or `--network solana`",
                ));
            }
        };
        Self::from_vars(|name| match (name, &network_arg) {
            ("GATEWAY_NETWORK", Some(network)) => Some(network.clone()),
            _ => std::env::var(name).ok(),
        })
    }

    /// The defaults, overridden by whatever `var` returns for each variable name.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        if let Some(listen) = var("GATEWAY_LISTEN") {
            config.listen = listen.parse().map_err(|_| {
                invalid("GATEWAY_LISTEN", "expected host:port, e.g. 127.0.0.1:8402")
            })?;
        }
        if let Some(url) = var("GATEWAY_PUBLIC_URL") {
            // The library's rule for a base URL, checked at start, not first quote.
            let _ = walletgate::x402::server::X402Layer::builder()
                .with_public_base_url(&url)
                .map_err(|_| {
                    invalid(
                        "GATEWAY_PUBLIC_URL",
                        "expected http(s)://host[:port][/path], no query, fragment or user",
                    )
                })?;
            config.public_url = Some(url.trim_end_matches('/').to_owned());
        }
        config.drain = crate::shutdown::drain_secs(var("GATEWAY_DRAIN_SECS"), "GATEWAY_DRAIN_SECS")
            .map_err(|reason| invalid("GATEWAY_DRAIN_SECS", reason))?;
        if let Some(limit) = var("GATEWAY_BODY_LIMIT_BYTES") {
            config.body_limit_bytes =
                limit
                    .parse()
                    .ok()
                    .filter(|bytes| *bytes > 0)
                    .ok_or_else(|| {
                        invalid(
                            "GATEWAY_BODY_LIMIT_BYTES",
                            "expected a positive number of bytes",
                        )
                    })?;
        }
        if let Some(secs) = var("GATEWAY_UPSTREAM_TIMEOUT_SECS") {
            let secs: u64 = secs.parse().ok().filter(|secs| *secs > 0).ok_or_else(|| {
                invalid(
                    "GATEWAY_UPSTREAM_TIMEOUT_SECS",
                    "expected a positive number of seconds",
                )
            })?;
            config.upstream_timeout = Duration::from_secs(secs);
        }
        if let Some(pay_to) = var("GATEWAY_PAY_TO") {
            config.pay_to = pay_to;
        }
        if let Some(secs) = var("GATEWAY_MAX_TIMEOUT_SECS") {
            config.max_timeout_secs =
                secs.parse().ok().filter(|secs| *secs > 0).ok_or_else(|| {
                    invalid(
                        "GATEWAY_MAX_TIMEOUT_SECS",
                        "expected a positive number of seconds",
                    )
                })?;
        }
        let per_minute = positive(&var, "GATEWAY_FREE_PER_MINUTE")?;
        let per_hour = positive(&var, "GATEWAY_FREE_PER_HOUR")?;
        if per_minute.is_some() || per_hour.is_some() {
            let defaults = FreeTierQuotas::default();
            config.free_tier = FreeTierQuotas::new(
                per_minute.unwrap_or(defaults.per_minute()),
                per_hour.unwrap_or(defaults.per_hour()),
            )
            .map_err(|error| invalid("GATEWAY_FREE_PER_MINUTE", error.to_string()))?;
        }
        config.client_ip = crate::proxies::client_ip_from_vars(&var, "GATEWAY")
            .map_err(|(variable, reason)| invalid(&variable, reason))?;
        config.cors_origins = crate::cors::origins_from_vars(&var, "GATEWAY")
            .map_err(|(variable, reason)| invalid(&variable, reason))?;
        match var("GATEWAY_BAZAAR").as_deref() {
            None | Some("on") => {}
            Some("off") => config.bazaar = false,
            Some(_) => return Err(invalid("GATEWAY_BAZAAR", "expected on or off")),
        }
        if let Some(millis) = var("GATEWAY_IMAGE_JOB_MILLIS") {
            let millis: u64 = millis.parse().map_err(|_| {
                invalid(
                    "GATEWAY_IMAGE_JOB_MILLIS",
                    "expected a number of milliseconds",
                )
            })?;
            config.image_job = Duration::from_millis(millis);
        }
        config.answers = AnswerSettings::from_vars(&var)?;
        if let Some(mode) = var("GATEWAY_PAYMENT_ID") {
            config.payment_id = PaymentIdentifier::parse(&mode).ok_or_else(|| {
                invalid("GATEWAY_PAYMENT_ID", "expected off, optional or required")
            })?;
        }
        if let Some(place) = var("GATEWAY_UPTO") {
            config.upto = UptoPlace::parse(&place)
                .ok_or_else(|| invalid("GATEWAY_UPTO", "expected off, second or first"))?;
        }
        if let Some(mode) = var("GATEWAY_SIWX") {
            config.siwx = match mode.as_str() {
                "on" => true,
                "off" => false,
                _ => return Err(invalid("GATEWAY_SIWX", "expected on or off")),
            };
        }
        if let Some(path) = var("GATEWAY_SIWX_KEY_FILE") {
            config.siwx_key = Some(read_key_file("GATEWAY_SIWX_KEY_FILE", &path)?);
        }
        if let Some(mode) = var("GATEWAY_MPP") {
            config.mpp = Some(match mode.as_str() {
                "on" => true,
                "off" => false,
                _ => return Err(invalid("GATEWAY_MPP", "expected on or off")),
            });
        }
        config.mpp_key_file = var("GATEWAY_MPP_KEY_FILE");
        if let Some(path) = &config.mpp_key_file {
            // Read at start, so a bad file refuses to start here, naming the variable.
            walletgate::x402::server::mpp::Mpp::from_key_file(path, "localhost")
                .map_err(|error| invalid("GATEWAY_MPP_KEY_FILE", error.to_string()))?;
        }
        if let Some(path) = var("GATEWAY_OFFER_KEY_FILE") {
            let signer = walletgate::x402::server::OfferSigner::from_file(&path)
                .map_err(|error| invalid("GATEWAY_OFFER_KEY_FILE", error.to_string()))?;
            config.offer_signer = Some(signer);
        }
        if let Some(path) = var("GATEWAY_FACILITATOR_SECRET_FILE") {
            config.facilitator_secret =
                Some(read_key_file("GATEWAY_FACILITATOR_SECRET_FILE", &path)?);
        }
        if let Some(path) = var("GATEWAY_EXTRA_CA_FILE") {
            config.tls = ClientTls::webpki_roots()
                .with_extra_ca_file(&path)
                .map_err(|error| invalid("GATEWAY_EXTRA_CA_FILE", error.to_string()))?;
        }
        config.redis = RedisSettings::from_vars(&var, "GATEWAY")
            .map_err(|(variable, reason)| invalid(&variable, reason))?;
        config.settler_settings = settler_settings(&var)?;
        config.network = payment_network(&var, config.settler_settings.is_some())?;
        if let Some(settler) = &config.settler_settings {
            // A settlement waits for a receipt twice (the transaction, then its
            // replacement): the server must not give up on it before.
            Arc::get_mut(&mut config.payment_faults)
                .expect("not shared yet")
                .settle_timeout = settler.receipt_timeout * 2 + Duration::from_secs(30);
        }
        if let Some(path) = var("GATEWAY_CDP_KEY_FILE") {
            let uses_facilitator = match &config.network {
                PaymentNetwork::Evm(evm) => evm.facilitator_url.is_some(),
                PaymentNetwork::Solana(_) => true,
            };
            if !uses_facilitator {
                return Err(invalid(
                    "GATEWAY_CDP_KEY_FILE",
                    "is only read with GATEWAY_FACILITATOR_URL",
                ));
            }
            let json = std::fs::read_to_string(&path).map_err(|error| {
                invalid(
                    "GATEWAY_CDP_KEY_FILE",
                    format!("cannot read {path}: {error}"),
                )
            })?;
            let auth = CdpAuth::from_json(&json)
                .map_err(|error| invalid("GATEWAY_CDP_KEY_FILE", error.to_string()))?;
            config.facilitator_auth = Some(Arc::new(auth));
        }
        if let PaymentNetwork::Evm(evm) = &config.network {
            evm.option(&config.pay_to)
                .map_err(|error| invalid("GATEWAY_PAY_TO", error.to_string()))?;
        }
        for (provider, base_url) in pairs(var("GATEWAY_UPSTREAMS"), "GATEWAY_UPSTREAMS")? {
            let key_variable = format!(
                "GATEWAY_UPSTREAM_KEY_{}",
                provider
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    })
                    .collect::<String>()
            );
            let key = var(&key_variable).ok_or_else(|| invalid(&key_variable, "is not set"))?;
            config = config.with_openai_upstream(&provider, &base_url, ApiKey::new(key))?;
        }
        if config.on_development_ledger()
            && !config.providers.is_empty()
            && var("GATEWAY_DEV_LEDGER").as_deref() != Some("1")
        {
            return Err(invalid(
                "GATEWAY_UPSTREAMS",
                "real upstreams would be paid for on the development ledger, whose payer keys are \
                 public: set GATEWAY_FACILITATOR_URL, or GATEWAY_DEV_LEDGER=1 to accept that",
            ));
        }
        for (model, preset) in pairs(var("GATEWAY_FAULTS"), "GATEWAY_FAULTS")? {
            let fault = Fault::preset(&preset).ok_or_else(|| {
                let names: Vec<_> = Fault::preset_names().collect();
                invalid(
                    "GATEWAY_FAULTS",
                    format!("unknown fault {preset:?}; known: {}", names.join(", ")),
                )
            })?;
            if config.catalogue.get(&model).is_none() {
                return Err(invalid(
                    "GATEWAY_FAULTS",
                    format!("no model {model:?} in the catalogue"),
                ));
            }
            config.faults.insert(model, fault);
        }
        Ok(config)
    }
    /// Settles the public URL once the listener is bound to `address`:
    /// `GATEWAY_PUBLIC_URL` if set, else `http://` + the bound address (so
    /// `:0` names the real port). A wildcard bind without a public URL
    /// quotes an address no client can reach: the warning to print is returned.
    pub(crate) fn bound_to(&mut self, address: SocketAddr) -> Option<String> {
        if self.public_url.is_some() {
            self.origin_known = true;
            return None;
        }
        self.origin_known = !address.ip().is_unspecified();
        self.public_url = Some(format!("http://{address}"));
        address.ip().is_unspecified().then(|| {
            format!(
                "listening on the wildcard address {address} without GATEWAY_PUBLIC_URL: quotes \
                 name http://{address}, which clients cannot reach; set GATEWAY_PUBLIC_URL"
            )
        })
    }

    /// The `sign-in-with-x` option of the paid routes: on, and only when
    /// the public origin is known (never guessed from a request's `Host`).
    pub(crate) fn sign_in_with_x(&self) -> Result<Option<SignInWithX>, ConfigError> {
        if !self.siwx || !self.origin_known {
            return Ok(None);
        }
        match self.siwx_key {
            Some(key) => Ok(Some(SignInWithX::new_with_key(key))),
            None => SignInWithX::new()
                .map(Some)
                .map_err(|error| invalid("GATEWAY_SIWX_KEY_FILE", error.to_string())),
        }
    }

    /// What every quote's `resource.url` starts with.
    pub(crate) fn public_url(&self) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
    }

    /// Whether paid requests settle on the in-process development ledger.
    pub(crate) fn on_development_ledger(&self) -> bool {
        self.settler_settings.is_none()
            && matches!(&self.network, PaymentNetwork::Evm(evm) if evm.facilitator_url.is_none())
    }

    /// Serves `provider`'s models from the OpenAI-compatible API at `base_url`.
    pub(crate) fn with_openai_upstream(
        mut self,
        provider: &str,
        base_url: &str,
        key: ApiKey,
    ) -> Result<Self, ConfigError> {
        let upstream = OpenAiUpstream::new(base_url, key, &self.tls)
            .map_err(|reason| invalid("GATEWAY_UPSTREAMS", reason))?;
        self.providers
            .push((provider.to_owned(), Arc::new(upstream)));
        Ok(self)
    }
}

impl Config {
    /// MPP's challenges for the gateway at `public_url` (its host is the
    /// realm), if MPP is on: on by default where payments are EVM.
    pub(crate) fn mpp(
        &self,
        public_url: &str,
    ) -> Result<Option<walletgate::x402::server::mpp::Mpp>, ConfigError> {
        let evm = matches!(self.network, PaymentNetwork::Evm(_));
        if !self.mpp.unwrap_or(evm) {
            return Ok(None);
        }
        if !evm {
            return Err(invalid(
                "GATEWAY_MPP",
                "MPP's evm charge needs an EVM network",
            ));
        }
        let realm = public_url
            .split_once("://")
            .map_or(public_url, |(_, rest)| rest)
            .split(['/', '?'])
            .next()
            .unwrap_or_default();
        let mpp = match &self.mpp_key_file {
            Some(path) => walletgate::x402::server::mpp::Mpp::from_key_file(path, realm),
            None => walletgate::x402::server::mpp::Mpp::random(realm),
        };
        mpp.map(Some)
            .map_err(|error| invalid("GATEWAY_MPP_KEY_FILE", error.to_string()))
    }

    /// Where the `upto` offer goes and the facilitator its witness names,
    /// when it is offered: only where it can settle, which names that
    /// facilitator: an HTTP facilitator whose `/supported` lists `upto`
    /// (its `facilitatorAddress`), the on-chain settler (its own key) or
    /// the development ledger (a fixed address).
    pub(crate) fn upto_offer(&self) -> Option<(UptoPlace, alloy_primitives::Address)> {
        let PaymentNetwork::Evm(evm) = &self.network else {
            return None;
        };
        if self.upto == UptoPlace::Off {
            return None;
        }
        let facilitator = match (&evm.facilitator_url, &self.settler, &self.settler_settings) {
            (Some(_), _, _) => self.facilitator_upto?,
            (None, Some(settler), _) => settler.address(),
            (None, None, None) => {
                walletgate::x402::facilitator::LocalEvmFacilitator::UPTO_FACILITATOR
            }
            // A settler configured but not connected (yet): nothing settles `upto`.
            (None, None, Some(_)) => return None,
        };
        Some((self.upto, facilitator))
    }
}

/// A positive count from `variable`, if set.
fn positive(
    var: &impl Fn(&str) -> Option<String>,
    variable: &str,
) -> Result<Option<u32>, ConfigError> {
    var(variable)
        .map(|value| {
            value
                .parse::<u32>()
                .ok()
                .filter(|count| *count > 0)
                .ok_or_else(|| invalid(variable, "expected a positive number"))
        })
        .transpose()
}

/// `a=b,c=d` into pairs.
fn pairs(value: Option<String>, variable: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.split_once('=')
                .map(|(left, right)| (left.trim().to_owned(), right.trim().to_owned()))
                .ok_or_else(|| invalid(variable, format!("expected name=value, got {item:?}")))
        })
        .collect()
}

/// The sign-in nonce key in `path`: 64 hex digits (surrounding whitespace
/// aside). The error never quotes the file.
/// The 32-byte secret in the file at `path` (64 hex digits, `0x` optional),
/// named `variable` in errors (never its contents).
fn read_key_file(variable: &'static str, path: &str) -> Result<[u8; 32], ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|error| invalid(variable, error.to_string()))?;
    let digits = text.trim();
    alloy_primitives::hex::decode_to_array(digits.strip_prefix("0x").unwrap_or(digits))
        .map_err(|_| invalid(variable, "expected 64 hex digits"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payment_network::SolanaSettings;

    fn vars(list: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            list.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn the_settler_variables_come_together_and_replace_the_facilitator() {
        let error = |list| Config::from_vars(vars(list)).err().unwrap().to_string();
        assert!(
            error(&[("GATEWAY_EVM_RPC_URL", "http://127.0.0.1:8545")])
                .contains("GATEWAY_SETTLER_KEY_FILE")
        );
        assert!(error(&[("GATEWAY_SETTLER_KEY_FILE", "/k")]).contains("GATEWAY_EVM_RPC_URL"));
        assert!(error(&[("GATEWAY_CONFIRMATIONS", "2")]).contains("GATEWAY_CONFIRMATIONS"));
        assert!(
            error(&[
                ("GATEWAY_EVM_RPC_URL", "http://127.0.0.1:8545"),
                ("GATEWAY_SETTLER_KEY_FILE", "/k"),
                ("GATEWAY_FACILITATOR_URL", "http://127.0.0.1:4020"),
            ])
            .contains("GATEWAY_FACILITATOR_URL")
        );
        assert!(
            error(&[
                ("GATEWAY_EVM_RPC_URL", "http://127.0.0.1:8545"),
                ("GATEWAY_SETTLER_KEY_FILE", "/k"),
                ("GATEWAY_RECEIPT_TIMEOUT_SECS", "0"),
            ])
            .contains("GATEWAY_RECEIPT_TIMEOUT_SECS")
        );
        // Any EVM network settles without a facilitator, never on the development ledger.
        let config = Config::from_vars(vars(&[
            ("GATEWAY_EVM_RPC_URL", "http://127.0.0.1:8545"),
            ("GATEWAY_SETTLER_KEY_FILE", "/k"),
            ("GATEWAY_NETWORK", "base"),
            ("GATEWAY_RECEIPT_TIMEOUT_SECS", "5"),
            ("GATEWAY_CONFIRMATIONS", "2"),
        ]))
        .unwrap();
        assert!(!config.on_development_ledger());
        let settler = config.settler_settings.as_ref().unwrap();
        assert_eq!(settler.receipt_timeout, Duration::from_secs(5));
        assert_eq!(settler.confirmations, 2);
        // The server waits out both receipt waits before giving up.
        assert_eq!(
            config.payment_faults.settle_timeout,
            Duration::from_secs(40)
        );
        assert!(
            !format!("{settler:?}").contains("8545"),
            "the RPC URL is not shown"
        );
    }

    #[test]
    fn defaults_without_variables() {
        let config = Config::from_vars(vars(&[])).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8402");
        assert_eq!(config.upstream_timeout, Duration::from_secs(120));
        assert_eq!(config.body_limit_bytes, DEFAULT_BODY_LIMIT_BYTES);
    }

    #[test]
    #[cfg(feature = "redis")]
    fn redis_url_and_prefix_switch_the_stores_to_redis() {
        assert!(Config::from_vars(vars(&[])).unwrap().redis.is_none());
        let config = Config::from_vars(vars(&[
            ("GATEWAY_REDIS_URL", "redis://127.0.0.1:6379/2"),
            ("GATEWAY_REDIS_PREFIX", "gw-prod"),
        ]))
        .unwrap();
        let shown = format!("{:?}", config.redis.unwrap());
        assert!(shown.contains("gw-prod"), "{shown}");
        let refused = Config::from_vars(vars(&[("GATEWAY_REDIS_URL", "http://127.0.0.1:6379")]));
        assert!(
            refused
                .err()
                .unwrap()
                .to_string()
                .contains("GATEWAY_REDIS_URL")
        );
    }

    #[test]
    #[cfg(not(feature = "redis"))]
    fn a_redis_url_without_the_redis_feature_is_refused_not_ignored() {
        let refused = Config::from_vars(vars(&[("GATEWAY_REDIS_URL", "redis://127.0.0.1:6379")]));
        assert!(
            refused
                .err()
                .unwrap()
                .to_string()
                .contains("--features redis")
        );
    }

    #[test]
    fn reads_every_variable() {
        let config = Config::from_vars(vars(&[
            ("GATEWAY_LISTEN", "127.0.0.1:9999"),
            ("GATEWAY_BODY_LIMIT_BYTES", "1000"),
            ("GATEWAY_UPSTREAM_TIMEOUT_SECS", "5"),
            ("GATEWAY_UPSTREAMS", "openai=http://127.0.0.1:9/v1"),
            ("GATEWAY_UPSTREAM_KEY_OPENAI", "test-key-not-real"),
            ("GATEWAY_DEV_LEDGER", "1"),
            ("GATEWAY_FAULTS", "anthropic/claude-sonnet-4.6=rate_limited"),
            (
                "GATEWAY_PAY_TO",
                "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
            ),
            ("GATEWAY_FREE_PER_MINUTE", "1000"),
            ("GATEWAY_IMAGE_JOB_MILLIS", "0"),
            ("GATEWAY_MAX_TIMEOUT_SECS", "20"),
            ("GATEWAY_ANSWER_RETENTION_SECS", "60"),
            ("GATEWAY_ANSWER_MAX_BYTES", "2048"),
            ("GATEWAY_ANSWER_STORE_BYTES", "65536"),
            ("GATEWAY_PAYMENT_ID", "required"),
            ("GATEWAY_SIWX", "off"),
        ]))
        .unwrap();
        assert_eq!(config.payment_id, PaymentIdentifier::Required);
        assert!(!config.siwx);
        assert_eq!(config.answers.limits.retention_secs, 60);
        assert_eq!(config.answers.limits.max_answer_bytes, 2048);
        assert_eq!(config.answers.store_bytes, 65536);
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(config.body_limit_bytes, 1000);
        assert_eq!(config.upstream_timeout, Duration::from_secs(5));
        assert_eq!(config.providers.len(), 1);
        assert!(config.faults.contains_key("anthropic/claude-sonnet-4.6"));
        assert_eq!(config.pay_to, "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");
        assert_eq!(config.free_tier.per_minute(), 1000);
        assert_eq!(config.free_tier.per_hour(), 300);
        assert_eq!(config.image_job, Duration::ZERO);
        assert_eq!(config.max_timeout_secs, 20);
        assert_eq!(
            config.network,
            PaymentNetwork::Evm(EvmSettings::base_sepolia())
        );
        let solana = Config::from_vars(vars(&[
            ("GATEWAY_NETWORK", "solana"),
            ("GATEWAY_FACILITATOR_URL", "http://127.0.0.1:4020"),
            (
                "GATEWAY_SOLANA_PAY_TO",
                "PayTo1111111111111111111111111111111111111",
            ),
        ]))
        .unwrap();
        assert!(matches!(
            solana.network,
            PaymentNetwork::Solana(SolanaSettings {
                fee_payer: None,
                ..
            })
        ));
    }

    #[test]
    fn redis_url_switches_the_shared_stores_on_and_is_never_printed() {
        let read = Config::from_vars(vars(&[
            (
                "GATEWAY_REDIS_URL",
                "redis://:not-a-real-password@127.0.0.1:6379/2",
            ),
            ("GATEWAY_REDIS_PREFIX", "gw-a"),
        ]));
        if cfg!(feature = "redis") {
            let redis = read.unwrap().redis.unwrap();
            assert_eq!(redis.prefix, "gw-a");
            assert!(!format!("{redis:?}").contains("not-a-real-password"));
        } else {
            let error = read.err().unwrap().to_string();
            assert!(error.starts_with("GATEWAY_REDIS_URL:"), "{error}");
        }
        assert_eq!(Config::from_vars(vars(&[])).unwrap().redis, None);
    }

    #[test]
    fn any_evm_network_settles_through_its_facilitator() {
        let base = Config::from_vars(vars(&[
            ("GATEWAY_NETWORK", "base"),
            (
                "GATEWAY_FACILITATOR_URL",
                "https://facilitator.example/x402",
            ),
        ]))
        .unwrap();
        let PaymentNetwork::Evm(evm) = &base.network else {
            panic!("base is an EVM network");
        };
        assert_eq!(evm.network.as_str(), "eip155:8453");
        assert_eq!(evm.usdc, walletgate::x402::server::BASE_USDC);
        // Base's USDC signs as "USD Coin", Base Sepolia's as "USDC".
        assert_eq!(evm.eip712_name, "USD Coin");
        assert!(!base.on_development_ledger());

        let sepolia = Config::from_vars(vars(&[(
            "GATEWAY_FACILITATOR_URL",
            "http://127.0.0.1:4020",
        )]))
        .unwrap();
        let PaymentNetwork::Evm(evm) = &sepolia.network else {
            panic!("base-sepolia is an EVM network");
        };
        assert_eq!(
            evm.facilitator_url.as_deref(),
            Some("http://127.0.0.1:4020")
        );
        assert_eq!(evm.eip712_name, "USDC");

        let custom = Config::from_vars(vars(&[
            ("GATEWAY_NETWORK", "eip155:31337"),
            ("GATEWAY_FACILITATOR_URL", "http://127.0.0.1:4020"),
            (
                "GATEWAY_USDC_ADDRESS",
                "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            ),
            ("GATEWAY_USDC_NAME", "USD Coin"),
            ("GATEWAY_USDC_VERSION", "2"),
        ]))
        .unwrap();
        let PaymentNetwork::Evm(evm) = &custom.network else {
            panic!("eip155:31337 is an EVM network");
        };
        let offer = evm
            .option(&custom.pay_to)
            .unwrap()
            .requirements_for_amount(walletgate::x402::wire::AtomicAmount::new(1_000));
        assert_eq!(offer.network.as_str(), "eip155:31337");
        assert_eq!(offer.asset, "0x5FbDB2315678afecb367f032d93F642f64180aa3");
    }

    #[test]
    fn refuses_the_development_ledger_where_it_would_be_unsafe_or_ignored() {
        let refused = |list: &'static [(&'static str, &'static str)], variable: &str| {
            let error = Config::from_vars(vars(list)).err().unwrap().to_string();
            assert!(error.starts_with(variable), "{variable}: {error}");
        };
        // Mainnet quotes settled on public keys.
        refused(&[("GATEWAY_NETWORK", "base")], "GATEWAY_FACILITATOR_URL");
        refused(
            &[
                ("GATEWAY_NETWORK", "eip155:31337"),
                ("GATEWAY_FACILITATOR_URL", "http://127.0.0.1:4020"),
            ],
            "GATEWAY_USDC_ADDRESS",
        );
        refused(&[("GATEWAY_NETWORK", "eip155:bogus")], "GATEWAY_NETWORK");
        // Real upstreams paid for on the development ledger.
        refused(
            &[
                ("GATEWAY_UPSTREAMS", "openai=http://127.0.0.1:9/v1"),
                ("GATEWAY_UPSTREAM_KEY_OPENAI", "test-key-not-real"),
            ],
            "GATEWAY_UPSTREAMS",
        );
        // Variables the chosen network would ignore.
        refused(&[("GATEWAY_USDC_NAME", "USD Coin")], "GATEWAY_USDC_NAME");
        refused(
            &[(
                "GATEWAY_SOLANA_PAY_TO",
                "PayTo1111111111111111111111111111111111111",
            )],
            "GATEWAY_SOLANA_PAY_TO",
        );
        refused(
            &[
                ("GATEWAY_FACILITATOR_URL", "http://127.0.0.1:4020"),
                ("GATEWAY_DEV_LEDGER", "1"),
            ],
            "GATEWAY_DEV_LEDGER",
        );
        // With a facilitator, real upstreams are fine.
        Config::from_vars(vars(&[
            ("GATEWAY_FACILITATOR_URL", "http://127.0.0.1:4020"),
            ("GATEWAY_UPSTREAMS", "openai=http://127.0.0.1:9/v1"),
            ("GATEWAY_UPSTREAM_KEY_OPENAI", "test-key-not-real"),
        ]))
        .unwrap();
    }

    #[test]
    fn a_cdp_key_file_signs_facilitator_calls_and_is_never_echoed() {
        use base64::Engine as _;
        let key = ed25519_dalek::SigningKey::from_bytes(&[21; 32]);
        let mut bytes = key.to_bytes().to_vec();
        bytes.extend_from_slice(key.verifying_key().as_bytes());
        let secret = base64::engine::general_purpose::STANDARD.encode(bytes);
        let dir = std::env::temp_dir();
        let good = dir.join(format!("walletgate-cdp-{}.json", std::process::id()));
        let bad = dir.join(format!("walletgate-cdp-bad-{}.json", std::process::id()));
        std::fs::write(&good, format!(r#"{{"id": "k", "privateKey": "{secret}"}}"#)).unwrap();
        std::fs::write(&bad, format!(r#"{{"id": "k", "privateKey": "x{secret}"}}"#)).unwrap();
        let leak = |path: &std::path::Path, facilitator: bool| {
            let path = path.to_str().unwrap().to_owned();
            let mut list = vec![("GATEWAY_CDP_KEY_FILE", path)];
            if facilitator {
                list.push((
                    "GATEWAY_FACILITATOR_URL",
                    "http://127.0.0.1:4020".to_owned(),
                ));
            }
            Config::from_vars(move |name| {
                list.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| value.clone())
            })
        };
        let config = leak(&good, true).unwrap();
        assert!(config.facilitator_auth.is_some());
        for (path, facilitator) in [(&good, false), (&bad, true)] {
            let error = leak(path, facilitator).err().unwrap().to_string();
            assert!(error.starts_with("GATEWAY_CDP_KEY_FILE"), "{error}");
            assert!(!error.contains(&secret[..12]), "{error}");
        }
        let _ = std::fs::remove_file(good);
        let _ = std::fs::remove_file(bad);
    }

    #[test]
    fn rejects_bad_values_naming_the_variable() {
        for (name, value) in [
            ("GATEWAY_LISTEN", "nowhere"),
            ("GATEWAY_BODY_LIMIT_BYTES", "0"),
            ("GATEWAY_UPSTREAM_TIMEOUT_SECS", "soon"),
            ("GATEWAY_FAULTS", "openai/gpt-5-mini=no_such_fault"),
            ("GATEWAY_FAULTS", "no/such-model=rate_limited"),
            ("GATEWAY_UPSTREAMS", "openai=http://127.0.0.1:9/v1"),
            ("GATEWAY_PAY_TO", "0x1234"),
            ("GATEWAY_FREE_PER_HOUR", "0"),
            ("GATEWAY_IMAGE_JOB_MILLIS", "soon"),
            ("GATEWAY_MAX_TIMEOUT_SECS", "0"),
            ("GATEWAY_ANSWER_RETENTION_SECS", "0"),
            ("GATEWAY_ANSWER_MAX_BYTES", "a lot"),
            ("GATEWAY_ANSWER_STORE_BYTES", "-1"),
            ("GATEWAY_PAYMENT_ID", "sometimes"),
            ("GATEWAY_SIWX", "maybe"),
            ("GATEWAY_SIWX_KEY_FILE", "/nonexistent/walletgate-siwx.key"),
            ("GATEWAY_NETWORK", "dogecoin"),
            ("GATEWAY_NETWORK", "solana"),
            (
                "GATEWAY_EXTRA_CA_FILE",
                "/nonexistent/walletgate-extra-ca.pem",
            ),
        ] {
            let list: &'static [(&'static str, &'static str)] =
                Box::leak(vec![(name, value)].into_boxed_slice());
            let error = Config::from_vars(vars(list)).err().unwrap();
            assert!(error.to_string().starts_with("GATEWAY_"), "{name}: {error}");
        }
    }

    #[test]
    fn extra_ca_file_is_trusted_besides_the_builtin_roots() {
        let (pem, _, _) = crate::tls_support::loopback_certificate();
        let path = std::env::temp_dir().join(format!(
            "walletgate-gateway-extra-ca-{}.pem",
            std::process::id()
        ));
        std::fs::write(&path, pem).unwrap();
        let path_text: &'static str = Box::leak(path.display().to_string().into_boxed_str());
        let list: &'static [(&'static str, &'static str)] =
            Box::leak(vec![("GATEWAY_EXTRA_CA_FILE", path_text)].into_boxed_slice());
        let config = Config::from_vars(vars(list));
        std::fs::remove_file(&path).unwrap();
        let config = config.unwrap();
        assert_eq!(
            config.tls.root_count(),
            ClientTls::webpki_roots().root_count() + 1
        );
        let defaults = Config::from_vars(vars(&[])).unwrap();
        assert_eq!(
            defaults.tls.root_count(),
            ClientTls::webpki_roots().root_count()
        );
    }
}

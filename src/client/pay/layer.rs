//! [`X402PaymentLayer`]: the paying client's configuration.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::failover::Failover;
use super::policy::SpendPolicy;
use super::retry::{RetryPolicy, SharedSleeper, TokioSleeper};
use super::service::X402Payment;
use super::sign_in::PaidRequests;
use super::signer::PaymentSigner;
use crate::clock::{SharedClock, SystemClock};

/// The request body the client buffers to resend it: 8 MiB by default.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Pays x402 quotes for an HTTP client service.
///
/// Cheap to clone: the signer, policy (and its budget) and caches are shared.
#[derive(Clone)]
#[must_use]
pub struct X402PaymentLayer {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(super) signer: PaymentSigner,
    pub(super) policy: SpendPolicy,
    pub(super) retry: RetryPolicy,
    pub(super) failover: Option<Failover>,
    pub(super) clock: SharedClock,
    pub(super) sleeper: SharedSleeper,
    pub(super) max_body_bytes: usize,
    /// Requests paid for: a 402 for one of them is signed in for first.
    pub(super) paid_requests: Arc<PaidRequests>,
}

impl fmt::Debug for X402PaymentLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X402PaymentLayer")
            .field("signer", &self.shared.signer)
            .field("policy", &self.shared.policy)
            .field("retry", &self.shared.retry)
            .field("failover", &self.shared.failover.is_some())
            .field("max_body_bytes", &self.shared.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl X402PaymentLayer {
    /// A layer paying with `signer` (any alloy `Signer`, e.g. a
    /// `PrivateKeySigner`) under the default [`SpendPolicy`] and [`RetryPolicy`],
    /// without failover.
    pub fn new(signer: impl alloy_signer::Signer + Send + Sync + 'static) -> Self {
        Self::new_with_signer(PaymentSigner::new(signer))
    }

    /// A layer paying with an already wrapped signer (shares its signature count).
    pub fn new_with_signer(signer: PaymentSigner) -> Self {
        Self {
            shared: Arc::new(Shared {
                signer,
                policy: SpendPolicy::default(),
                retry: RetryPolicy::default(),
                failover: None,
                clock: Arc::new(SystemClock),
                sleeper: Arc::new(TokioSleeper),
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                paid_requests: Arc::default(),
            }),
        }
    }

    fn edit(mut self, change: impl FnOnce(&mut Shared)) -> Self {
        let shared = Arc::get_mut(&mut self.shared);
        match shared {
            Some(shared) => change(shared),
            None => {
                let old = &*self.shared;
                let mut copy = Shared {
                    signer: old.signer.clone(),
                    policy: old.policy.clone(),
                    retry: old.retry.clone(),
                    failover: old.failover.clone(),
                    clock: old.clock.clone(),
                    sleeper: old.sleeper.clone(),
                    max_body_bytes: old.max_body_bytes,
                    paid_requests: old.paid_requests.clone(),
                };
                change(&mut copy);
                self.shared = Arc::new(copy);
            }
        }
        self
    }

    /// The spend controls.
    pub fn with_policy(self, policy: SpendPolicy) -> Self {
        self.edit(|shared| shared.policy = policy)
    }

    /// The retry rules.
    pub fn with_retry(self, retry: RetryPolicy) -> Self {
        self.edit(|shared| shared.retry = retry)
    }

    /// Fail over to a same-tier model of another provider on
    /// `MODEL_UNAVAILABLE` / `RATE_LIMITED` (see [`Failover`]).
    pub fn with_failover(self, failover: Failover) -> Self {
        self.edit(|shared| shared.failover = Some(failover))
    }

    /// Calls the MCP tool `tool` with `arguments` at the streamable-HTTP
    /// endpoint `url`, through `http` (the bare client: this layer does not
    /// wrap it). A PaymentRequired result (x402's MCP transport) is paid
    /// once under this layer's [`SpendPolicy`](super::SpendPolicy), the
    /// payment sent in `_meta["x402/payment"]`; the answer carries the
    /// [`Receipt`](super::Receipt) from `_meta["x402/payment-response"]`. A
    /// refusal after paying is a [`PaymentError`](super::PaymentError) with
    /// the server's code; a JSON-RPC error an [`ApiError`](super::ApiError).
    pub async fn call_tool<S, ResBody>(
        &self,
        http: S,
        url: &str,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<super::ToolAnswer, super::ClientError>
    where
        S: tower_service::Service<
                http::Request<http_body_util::Full<bytes::Bytes>>,
                Response = http::Response<ResBody>,
            > + Clone,
        S::Error: Into<super::BoxError>,
        ResBody: http_body::Body<Data = bytes::Bytes>,
        ResBody::Error: Into<super::BoxError>,
    {
        let shared = &self.shared;
        let paying = super::mcp::Paying {
            signer: &shared.signer,
            policy: &shared.policy,
            now_unix_secs: shared.clock.now_unix_secs(),
        };
        super::mcp::call_tool(paying, http, url, tool, arguments).await
    }

    /// The clock `validBefore` is computed from.
    pub fn with_clock(self, clock: SharedClock) -> Self {
        self.edit(|shared| shared.clock = clock)
    }

    /// What retries wait with.
    pub fn with_sleeper(self, sleeper: SharedSleeper) -> Self {
        self.edit(|shared| shared.sleeper = sleeper)
    }

    /// The most request body bytes buffered to resend; a larger body is not paid for.
    pub fn with_max_body_bytes(self, bytes: usize) -> Self {
        self.edit(|shared| shared.max_body_bytes = bytes)
    }

    /// The signer (its address, its signature count).
    pub fn signer(&self) -> &PaymentSigner {
        &self.shared.signer
    }

    #[cfg(feature = "reqwest")]
    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }
}

impl<S> Layer<S> for X402PaymentLayer {
    type Service = X402Payment<S>;

    fn layer(&self, inner: S) -> Self::Service {
        X402Payment::from_shared(inner, self.shared.clone())
    }
}

//! [`PaymentReceipt`]: what a paid handler knows about its payment.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use axum_core::extract::{FromRequestParts, OptionalFromRequestParts};
use http::request::Parts;

use crate::envelope::MissingExtension;
use crate::store::BoxFuture;
use crate::x402::wire::types::{AtomicAmount, Network};

/// A verified payment, in the request extensions of every paid request that
/// reaches the inner service.
///
/// On a fresh payment [`transaction`](Self::transaction) is `None`: the
/// layer settles after the handler answered 2xx. On a paid replay (a route
/// opted into it and the same authorization was settled before) it carries
/// the original settlement and [`is_replay`](Self::is_replay) is true; use
/// [`authorization_id`](Self::authorization_id) to find the work already paid for.
///
/// As an axum extractor it answers 500 when missing (the route is not behind
/// `X402Layer`, or it was free); extract `Option<PaymentReceipt>` on routes
/// that may be free.
///
/// A shared handle: the layer hands the same receipt to the request, the
/// replay store and the response, so a clone is a reference count.
#[derive(Clone, PartialEq, Eq)]
pub struct PaymentReceipt(Arc<Receipt>);

#[derive(Clone, PartialEq, Eq)]
struct Receipt {
    payer: String,
    amount: AtomicAmount,
    network: Network,
    transaction: Option<String>,
    authorization_id: String,
    replayed: bool,
}

impl PaymentReceipt {
    /// The same receipt for `amount` (what a metered answer settles).
    pub(crate) fn with_amount(mut self, amount: AtomicAmount) -> Self {
        Arc::make_mut(&mut self.0).amount = amount;
        self
    }

    /// A receipt for a verified, not yet settled payment.
    pub fn new(
        payer: String,
        amount: AtomicAmount,
        network: Network,
        authorization_id: String,
    ) -> Self {
        Self(Arc::new(Receipt {
            payer,
            amount,
            network,
            transaction: None,
            authorization_id,
            replayed: false,
        }))
    }

    /// The same receipt, settled in `transaction`.
    #[must_use]
    pub fn settled(mut self, transaction: String) -> Self {
        Arc::make_mut(&mut self.0).transaction = Some(transaction);
        self
    }

    /// The same receipt, marked as a replay of a settled payment.
    #[must_use]
    pub fn replayed(mut self) -> Self {
        Arc::make_mut(&mut self.0).replayed = true;
        self
    }

    /// The paying address.
    pub fn payer(&self) -> &str {
        &self.0.payer
    }

    /// Atomic units paid (flat fee included).
    pub fn amount(&self) -> AtomicAmount {
        self.0.amount
    }

    /// The network paid on.
    pub fn network(&self) -> &Network {
        &self.0.network
    }

    /// The settlement transaction, once settled.
    pub fn transaction(&self) -> Option<&str> {
        self.0.transaction.as_deref()
    }

    /// A stable id of the authorization (network, payer and nonce): the same
    /// on a replay of the same signed payment.
    pub fn authorization_id(&self) -> &str {
        &self.0.authorization_id
    }

    /// Whether this request replays an authorization settled earlier (not charged again).
    pub fn is_replay(&self) -> bool {
        self.0.replayed
    }
}

impl fmt::Debug for PaymentReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaymentReceipt")
            .field("payer", &self.0.payer)
            .field("amount", &self.0.amount)
            .field("network", &self.0.network)
            .field("transaction", &self.0.transaction)
            .field("replayed", &self.0.replayed)
            .finish_non_exhaustive()
    }
}

/// One settled payment, as a [`SettlementHook`] receives it.
///
/// Holds no secret: the payer is a public address, never the signature.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettledPayment {
    /// The paying address.
    pub payer: String,
    /// Atomic units settled (flat fee included).
    pub amount: AtomicAmount,
    /// The network settled on.
    pub network: Network,
    /// The settlement transaction.
    pub transaction: String,
    /// The paid resource's URL (the quote's `resource.url`).
    pub resource: String,
    /// The request's `x-request-id` header, when it had a readable one.
    pub request_id: Option<String>,
}

impl SettledPayment {
    /// A settled payment (the layer makes these; hooks' own tests may too).
    pub fn new(
        payer: impl Into<String>,
        amount: AtomicAmount,
        network: Network,
        transaction: impl Into<String>,
        resource: impl Into<String>,
        request_id: Option<String>,
    ) -> Self {
        Self {
            payer: payer.into(),
            amount,
            network,
            transaction: transaction.into(),
            resource: resource.into(),
            request_id,
        }
    }
}

/// Receives every payment the layer settles, exactly once, right after
/// settlement: for a whole response before it is released, for a stream
/// when the stream ends (see the [module docs](super#streams)).
///
/// Never called for a refused, failed, unsettled or replayed payment. A hook
/// error does not undo or repeat the settlement: the answer goes out as
/// settled and the failure is counted
/// ([`X402Layer::settlement_hook_failures`](super::X402Layer::settlement_hook_failures)).
/// The answer waits for the hook, so keep it short (hand slow work to a queue).
///
/// Any `Fn(SettledPayment) -> impl Future<Output = Result<(), SettlementHookError>>`
/// is a hook.
pub trait SettlementHook: Send + Sync + 'static {
    /// Records one settled payment.
    fn settled(
        &self,
        payment: SettledPayment,
    ) -> BoxFuture<'static, Result<(), SettlementHookError>>;
}

impl<F, Fut> SettlementHook for F
where
    F: Fn(SettledPayment) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), SettlementHookError>> + Send + 'static,
{
    fn settled(
        &self,
        payment: SettledPayment,
    ) -> BoxFuture<'static, Result<(), SettlementHookError>> {
        Box::pin(self(payment))
    }
}

/// Why a [`SettlementHook`] could not record a payment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettlementHookError {
    detail: String,
}

impl SettlementHookError {
    /// A failure described by `detail` (no secrets: it may be logged).
    pub fn new(detail: impl Into<String>) -> Self {
        Self {
            detail: detail.into(),
        }
    }

    /// What went wrong.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for SettlementHookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "settlement hook failed: {}", self.detail)
    }
}

impl std::error::Error for SettlementHookError {}

impl<S: Send + Sync> FromRequestParts<S> for PaymentReceipt {
    type Rejection = MissingExtension;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Self>()
            .cloned()
            .ok_or_else(|| MissingExtension::gateway::<Self>("X402Layer with a paid price", parts))
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for PaymentReceipt {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt() -> PaymentReceipt {
        PaymentReceipt::new(
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
            AtomicAmount::new(2000),
            Network::base_sepolia(),
            "id".into(),
        )
    }

    #[tokio::test]
    async fn extracts_from_extensions() {
        let mut request = http::Request::new(());
        request
            .extensions_mut()
            .insert(receipt().settled("0xabc".into()).replayed());
        let (mut parts, ()) = request.into_parts();
        let got = <PaymentReceipt as FromRequestParts<()>>::from_request_parts(&mut parts, &())
            .await
            .unwrap();
        assert_eq!(got.transaction(), Some("0xabc"));
        assert!(got.is_replay());
        assert_eq!(got.amount(), AtomicAmount::new(2000));
    }

    #[tokio::test]
    async fn missing_receipt_is_a_500_naming_the_wiring_fault() {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        let rejection =
            <PaymentReceipt as FromRequestParts<()>>::from_request_parts(&mut parts, &())
                .await
                .unwrap_err();
        let response = rejection.into_response();
        assert_eq!(response.status(), 500);
        assert!(rejection.to_string().contains("X402Layer"));
        let optional =
            <PaymentReceipt as OptionalFromRequestParts<()>>::from_request_parts(&mut parts, &())
                .await
                .unwrap();
        assert_eq!(optional, None);
    }
}

//! [`Config`]: what a built [`X402Layer`](super::X402Layer) holds, shared
//! by every service it makes and by the payment flow they drive.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::answers::{AnswerLimits, AnswerStore};
use super::extensions::QuoteExtensions;
use super::payment_id::PaymentIdentifier;
use super::pricing::Pricing;
use super::quote::{PaymentOption, QuoteCache};
use super::receipt::{SettledPayment, SettlementHook, SettlementHookError};
use super::replay::NonceStore;
use crate::clock::SharedClock;
use crate::envelope::RenderRejection;
use crate::x402::facilitator::Facilitator;
use crate::x402::wire::types::UsdAmount;

/// Everything the service needs, shared by all its clones.
pub(crate) struct Config {
    pub(crate) pricing: Arc<dyn Pricing>,
    pub(crate) facilitator: Arc<dyn Facilitator>,
    pub(crate) nonce_store: Arc<dyn NonceStore>,
    pub(crate) answer_store: Arc<dyn AnswerStore>,
    pub(crate) answer_limits: AnswerLimits,
    pub(crate) payment_identifier: PaymentIdentifier,
    pub(crate) clock: SharedClock,
    pub(crate) options: Vec<PaymentOption>,
    pub(crate) flat_fee: UsdAmount,
    pub(crate) paid_replay: bool,
    /// `None` only when the caller opted into a `Host`-derived URL.
    pub(crate) public_base_url: Option<String>,
    pub(crate) description: String,
    pub(crate) mime_type: String,
    pub(crate) quotes: QuoteCache,
    /// The server's own 402 extensions, per request.
    pub(crate) quote_extensions: Option<Arc<dyn QuoteExtensions>>,
    pub(crate) settlement_hook: Option<Arc<dyn SettlementHook>>,
    /// Renders every rejection (the route's envelope by default).
    pub(crate) reject: RenderRejection,
    /// Settlement hook calls that returned an error.
    pub(crate) hook_failures: AtomicU64,
    /// Settlements whose answer named more than was authorised.
    pub(crate) overruns: AtomicU64,
    /// Signs receipts and usage statements (its offers are the quotes').
    pub(crate) offer_signer: Option<Arc<super::OfferSigner>>,
    /// MPP challenges and credentials beside x402 (`with_mpp`).
    #[cfg(feature = "mpp")]
    pub(crate) mpp: Option<super::mpp::Mpp>,
    /// Metered streams cut by their payers.
    pub(crate) cut_streams: super::flow::CutStreams,
    /// `sign-in-with-x`, when on and the layer knows its public origin.
    #[cfg(feature = "siwx")]
    pub(crate) sign_in: Option<Arc<super::siwx::SignIn>>,
    /// Who paid for which operation, for `sign-in-with-x`.
    #[cfg(feature = "siwx")]
    pub(crate) entitlements: Arc<dyn super::EntitlementStore>,
    /// The routes whose handler runs again, uncharged, for a signed-in wallet.
    #[cfg(feature = "siwx")]
    pub(crate) rerun_signed_in: Option<Arc<RerunRoutes>>,
}

/// Which requests a signed-in wallet may have served again uncharged.
#[cfg(feature = "siwx")]
pub(crate) type RerunRoutes = dyn Fn(&http::request::Parts) -> bool + Send + Sync;

impl Config {
    /// How a USD price becomes `offer`'s units: the flat fee and the
    /// decimals of the option it came from (USDC's 6 when none matches).
    pub(crate) fn units_of(
        &self,
        offer: &crate::x402::wire::types::PaymentRequirements,
    ) -> super::flow::Units {
        let decimals = self
            .options
            .iter()
            .find(|option| option.offers(offer))
            .map_or(6, PaymentOption::decimals);
        super::flow::Units {
            flat_fee: self.flat_fee,
            decimals,
        }
    }

    /// One settlement whose answer named more than was authorised (the
    /// authorised amount was settled).
    pub(crate) fn count_overrun(&self) {
        self.overruns.fetch_add(1, Ordering::Relaxed);
        crate::metrics::count(crate::metrics::X402_SETTLEMENT_OVERRUNS_TOTAL, []);
    }

    /// `payer` left a metered stream before its end: counted, and past the
    /// [limit](super::CutStreamLimit) its metered payments are refused a while.
    pub(crate) fn metered_stream_cut(&self, payer: &str) {
        crate::metrics::count(crate::metrics::X402_METERED_STREAM_CUTS_TOTAL, []);
        let now = self.clock.now_unix_secs();
        if self.cut_streams.cut(payer, now) {
            trace_decision!(
                WARN,
                "x402",
                payer,
                outcome = "metered payments suspended: cut streams",
            );
        }
    }

    /// Hands a settled payment to the hook, if any. A failure is counted,
    /// never retried: the payment stays settled once.
    pub(crate) async fn report_settled(&self, payment: impl FnOnce() -> SettledPayment) {
        let Some(hook) = &self.settlement_hook else {
            return;
        };
        if let Err(error) = hook.settled(payment()).await {
            self.hook_failed(&error);
        }
    }

    /// The one place a hook failure ends up: counted and logged.
    fn hook_failed(&self, _error: &SettlementHookError) {
        trace_error!(error = %_error, "settlement hook failed; the payment stays settled");
        self.hook_failures.fetch_add(1, Ordering::Relaxed);
        crate::metrics::count(crate::metrics::X402_SETTLEMENT_HOOK_FAILURES_TOTAL, []);
    }
}

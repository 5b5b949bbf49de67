//! The payment a paid call carries through the flow: read once from its
//! decoded form against its quote, refused in a front-neutral [`Refusal`],
//! its claim held by a [`ClaimGuard`].

use std::sync::Arc;

use alloy_primitives::keccak256;

use crate::envelope::{EnvelopeStyle, ErrorCode};
use crate::metrics;
use crate::x402::facilitator::{AUTHORIZATION_CLOCK_SKEW_SECS, FacilitatorRequest, reason};
use crate::x402::server::config::Config;
use crate::x402::server::payment_id::{self, IdBinding};
use crate::x402::server::quote::{Quote, check_authorization};
use crate::x402::server::replay::{AuthorizationKey, NonceStore};
use crate::x402::wire::UptoPayment;
use crate::x402::wire::types::{PaymentRequirements, SCHEME_UPTO};
use crate::x402::wire::{PaymentHeader, codec};

/// Seconds an in-flight claim is held at least (the upstream may take 120 s).
const MIN_CLAIM_HOLD_SECS: u64 = 600;

/// Why a payment is refused whose echo of a declared extension lost what
/// the 402 declared (402 `PAYMENT_INVALID`).
pub const EXTENSION_ECHO_MISMATCH: &str = "extension_echo_mismatch";

/// Why a payment under an id still in flight is told to retry (503).
pub(crate) const ID_IN_FLIGHT: &str = "payment_identifier_in_flight";

/// A paid call from its decoded payment to its settlement: the typed
/// payment the facilitator verifies and settles, its replay key and
/// fingerprint, and what its answers need. Built once, moved whole into the
/// settlement.
pub(crate) struct Payment {
    pub(crate) facilitation: FacilitatorRequest,
    pub(crate) quote: Arc<Quote>,
    pub(crate) key: AuthorizationKey,
    pub(crate) fingerprint: [u8; 32],
    pub(crate) style: EnvelopeStyle,
    pub(crate) request_id: Option<String>,
    /// What the front's request is, e.g. `METHOD path?query`: a kept answer
    /// is for this request only.
    pub(crate) request_line: String,
    /// The `payment-identifier` id and the fingerprint of the request it is
    /// bound to, when the payment carries one.
    pub(crate) payment_id: Option<(String, [u8; 32])>,
    /// The operation (request line and body digest) a settled answer is
    /// kept under for its payer's sign-in, with `sign-in-with-x` on.
    #[cfg(feature = "siwx")]
    pub(crate) operation: Option<[u8; 32]>,
}

/// What a front knows of the request a payment pays for.
pub(crate) struct Paying<'a> {
    /// The request, as kept answers and sign-in bind to it.
    pub(crate) request_line: String,
    /// The digest of its body, when one was read: asked at most once, and
    /// only when a payment-identifier or sign-in binds to it.
    pub(crate) body_digest: &'a dyn Fn() -> Option<[u8; 32]>,
    /// Its envelope style.
    pub(crate) style: EnvelopeStyle,
    /// Its request id, for the settlement hook.
    pub(crate) request_id: Option<String>,
    /// The payment as the client sent it (its fingerprint when it is not exact-EVM).
    pub(crate) sent: &'a [u8],
}

/// A refusal, for the front to render in its own envelope (with the quote
/// again, on a 402, so the client can sign afresh).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) code: ErrorCode,
    pub(crate) why: String,
    pub(crate) payer: Option<String>,
}

impl Refusal {
    pub(super) fn new(code: ErrorCode, why: &str, payer: Option<&str>) -> Self {
        Self {
            code,
            why: why.to_owned(),
            payer: payer.map(str::to_owned),
        }
    }
}

impl Payment {
    /// The payment `sent` (decoded) for the request `paying` against `quote`:
    /// version, offer, extensions' echo, payment-identifier and the
    /// authorization's window are checked here, once.
    pub(crate) fn admit_header(
        config: &Config,
        quote: Arc<Quote>,
        payload: PaymentHeader,
        paying: Paying<'_>,
    ) -> Result<Box<Self>, Refusal> {
        let invalid =
            |why: &str, payer: Option<&str>| Refusal::new(ErrorCode::PaymentInvalid, why, payer);
        if payload.x402_version != crate::x402::wire::X402_VERSION {
            return Err(invalid(
                reason::INVALID_X402_VERSION,
                payload.claimed_payer(),
            ));
        }
        let Some(offer) = quote.matching_offer(&payload.accepted).cloned() else {
            return Err(invalid(
                reason::NO_MATCHING_REQUIREMENTS,
                payload.claimed_payer(),
            ));
        };
        // Only what the layer declares is checked: a request's own extensions
        // (discovery, say) describe the resource and differ between the request
        // a payment was signed for and another it pays (a paid job's poll).
        if !payment_id::echo_matches(config.quotes.declared(), payload.extensions.as_ref()) {
            return Err(invalid(EXTENSION_ECHO_MISMATCH, payload.claimed_payer()));
        }
        let id = payment_id::read_id(config.payment_identifier, payload.extensions.as_ref())
            .map_err(|why| {
                Refusal::new(
                    ErrorCode::PaymentIdentifierInvalid,
                    why,
                    payload.claimed_payer(),
                )
            })?;
        let Paying {
            request_line,
            body_digest,
            style,
            request_id,
            sent,
        } = paying;
        let digest = std::cell::OnceCell::new();
        let body_digest = || *digest.get_or_init(body_digest);
        let payment_id = id.map(|id| {
            let bound = payment_id::request_fingerprint(&request_line, body_digest(), &offer);
            (id, bound)
        });
        #[cfg(feature = "siwx")]
        let operation = (config.sign_in.as_ref())
            .map(|_| crate::x402::server::siwx::operation(&request_line, body_digest()));
        // The payload is read into typed values here, once, for every step after.
        let facilitation = FacilitatorRequest::from_header(payload, offer);
        let evm = facilitation.exact_evm();
        let offer = facilitation.payment_requirements();
        if let Err(why) = check_authorization(offer, evm, config.clock.now_unix_secs()) {
            return Err(invalid(why, facilitation.claimed_payer()));
        }
        let typed = evm.and_then(|evm| Some((evm, evm.fingerprint()?)));
        let (key, fingerprint) = match typed {
            Some((evm, fingerprint)) => (
                AuthorizationKey::new(&offer.network, evm.from, evm.nonce),
                fingerprint,
            ),
            None => {
                // Another scheme, or exact-EVM hex that does not parse (the facilitator
                // refuses it): the payment as sent identifies it.
                let fingerprint = keccak256(sent.trim_ascii()).0;
                let key = match upto_permit(&facilitation, config.clock.now_unix_secs()) {
                    // One Permit2 nonce is one payment, whatever else the permits say.
                    Ok(Some(permit)) => {
                        AuthorizationKey::new(&offer.network, permit.from, permit.replay_nonce())
                    }
                    Ok(None) => AuthorizationKey::of_payload(&offer.network, &fingerprint),
                    Err(why) => return Err(invalid(why, facilitation.claimed_payer())),
                };
                (key, fingerprint)
            }
        };
        Ok(Box::new(Self {
            facilitation,
            quote,
            key,
            fingerprint,
            style,
            request_id,
            request_line,
            payment_id,
            #[cfg(feature = "siwx")]
            operation,
        }))
    }

    /// [`admit_header`](Self::admit_header) from the payment's encoded text
    /// (a `PAYMENT-SIGNATURE` header's value, or the same in another carrier).
    pub(crate) fn admit_encoded(
        config: &Config,
        quote: Arc<Quote>,
        paying: Paying<'_>,
    ) -> Result<Box<Self>, Refusal> {
        match codec::decode_with(paying.sent, |json| {
            PaymentHeader::read(json, quote.echoes())
        }) {
            Ok(payload) => Self::admit_header(config, quote, payload, paying),
            Err(error) => Err(Refusal::new(
                ErrorCode::PaymentInvalid,
                error.reason(),
                None,
            )),
        }
    }

    /// The payer as the client wrote it, for refusals before any verdict.
    pub(crate) fn claimed_payer(&self) -> Option<&str> {
        self.facilitation.claimed_payer()
    }

    /// The server's offer the payment matched.
    pub(crate) fn offer(&self) -> &PaymentRequirements {
        self.facilitation.payment_requirements()
    }

    /// Until when its claim is held while it is served.
    pub(super) fn hold_until(&self, now: u64) -> u64 {
        now.saturating_add(self.offer().max_timeout_seconds.max(MIN_CLAIM_HOLD_SECS))
    }

    pub(super) fn refused(&self, code: ErrorCode, why: &str) -> Refusal {
        Refusal::new(code, why, self.claimed_payer())
    }
}

/// Gives the claim back unless told to keep it, also when the future is
/// dropped (unless built [`kept_on_drop`](Self::kept_on_drop)).
pub(crate) struct ClaimGuard {
    store: Arc<dyn NonceStore>,
    key: Option<AuthorizationKey>,
    release_on_drop: bool,
}

impl ClaimGuard {
    pub(super) fn new(config: &Config, key: &AuthorizationKey) -> Self {
        Self {
            store: config.nonce_store.clone(),
            key: Some(key.clone()),
            release_on_drop: true,
        }
    }

    /// A guard of a settling record: given back only when its settlement
    /// failed, never because the request went away (the transfer may land).
    pub(super) fn kept_on_drop(mut self) -> Self {
        self.release_on_drop = false;
        self
    }

    pub(super) fn keep(mut self) {
        self.key = None;
    }

    /// Gives the claim back and waits until the store has it, so the client's
    /// retry (on any replica) finds it free.
    pub(super) async fn release(mut self) {
        if let Some(key) = self.key.take() {
            trace_decision!(DEBUG, "x402", outcome = "released");
            self.store.release(&key).await;
        }
    }
}

impl Drop for ClaimGuard {
    /// The request went away (client gone, inner error): the store starts the
    /// release itself, and its claim's hold-until is the safety net.
    fn drop(&mut self) {
        if !self.release_on_drop {
            return;
        }
        if let Some(key) = self.key.take() {
            trace_decision!(DEBUG, "x402", outcome = "released");
            drop(self.store.release(&key));
        }
    }
}

/// One paid-request decision into `walletgate_x402_payments_total`.
pub(crate) fn payment_outcome(outcome: &'static str) {
    metrics::count(metrics::X402_PAYMENTS_TOTAL, [("outcome", outcome)]);
}

/// The binding of a payment's id to its verified payer.
pub(super) fn id_binding(payment: &Payment, payer: &str) -> Option<(String, IdBinding)> {
    payment.payment_id.as_ref().map(|(id, request)| {
        let binding = IdBinding {
            request: *request,
            payer: payer.to_ascii_lowercase(),
            payment: payment.fingerprint,
        };
        (id.clone(), binding)
    })
}

/// The permit of an `upto` payment, once its deadline is within the offer's
/// bound (as an `exact` authorization's `validBefore` is: the replay record
/// lives until then); `None` for another scheme or a payload the facilitator
/// will refuse.
fn upto_permit(
    facilitation: &FacilitatorRequest,
    now_unix_secs: u64,
) -> Result<Option<UptoPayment>, &'static str> {
    let offer = facilitation.payment_requirements();
    if offer.scheme != SCHEME_UPTO {
        return Ok(None);
    }
    let Some(permit) = UptoPayment::read(&facilitation.payment_payload().payload) else {
        return Ok(None);
    };
    let latest = now_unix_secs
        .saturating_add(offer.max_timeout_seconds)
        .saturating_add(AUTHORIZATION_CLOCK_SKEW_SECS);
    if permit.deadline > latest {
        return Err(reason::AUTHORIZATION_TOO_LONG);
    }
    Ok(Some(permit))
}

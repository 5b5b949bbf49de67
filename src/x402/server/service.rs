//! [`X402`], the service: the payment flow of one request.

use crate::metrics;
use std::sync::Arc;
use std::task::{Context, Poll};

use alloy_primitives::keccak256;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_service::Service;

use super::extensions::QuoteExtensionMap;
use super::future::ResponseFuture;
use super::layer::{Config, X402Layer};
use super::pricing::Price;
use super::quote::{Quote, check_authorization, matching_offer, write_quote_headers};
use super::receipt::{PaymentReceipt, SettledPayment};
use super::replay::{AuthorizationKey, Claim, NonceStore, SpentAuthorization};
use super::stream::{X402Body, receipt_event};
use crate::body::{ResponseBody, rejection};
use crate::envelope::{EnvelopeStyle, ErrorCode, GatewayError, RenderRejection, header};
use crate::x402::facilitator::{FacilitatorRequest, code_for_reason, reason};
use crate::x402::wire::codec;
use crate::x402::wire::types::{
    PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo, SettleResponse,
};

/// Seconds a spent authorization is remembered at least, whatever its
/// `validBefore` (for paid replay), unless its offer's `maxTimeoutSeconds` is
/// shorter: then that long (a server quoting short timeouts keeps its replay
/// store that short).
const MIN_SPENT_RETENTION_SECS: u64 = 120;

/// The request id header handed to the settlement hook.
const X_REQUEST_ID: &str = "x-request-id";

/// Seconds an in-flight claim is held at least (the upstream may take 120 s).
const MIN_CLAIM_HOLD_SECS: u64 = 600;

/// The x402 payment middleware; built by [`X402Layer`](super::X402Layer).
///
/// See the [module docs](super) for the flow.
#[derive(Clone, Debug)]
pub struct X402<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> X402<S> {
    /// Wraps `inner` with a built layer's configuration; same as
    /// `layer.layer(inner)`. (Built by [`X402Layer::builder`], which
    /// validates, so there is no `X402::layer(..)`.)
    pub fn new(inner: S, layer: X402Layer) -> Self {
        Self::from_config(inner, layer.config)
    }

    pub(crate) fn from_config(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    define_inner_service_accessors!();
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for X402<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<X402Body<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let price = match self.config.pricing.price(&parts) {
            Ok(Price::Free) => {
                let request = Request::from_parts(parts, body);
                return ResponseFuture::passthrough(self.inner.call(request));
            }
            // Unpriceable (a wiring fault, usually): refused, never served free.
            Err(refusal) => {
                let style = EnvelopeStyle::of_parts(&parts);
                return ResponseFuture::ready(
                    rejection(self.config.reject.render(refusal.into_error(), style))
                        .map(X402Body::plain),
                );
            }
            Ok(price) => price,
        };
        let extensions = (self.config.quote_extensions.as_ref())
            .and_then(|extensions| extensions.extensions(&parts, &price));
        let request = Request::from_parts(parts, body);
        match prepare(&self.config, &request, price, extensions) {
            Err(answer) => ResponseFuture::ready(rejection(answer).map(X402Body::plain)),
            Ok(payment) => {
                // Move the service that was polled ready into the future; keep a fresh clone.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let config = self.config.clone();
                ResponseFuture::paid(Box::pin(pay_and_call(config, inner, request, payment)))
            }
        }
    }
}

/// A paid request from its decoded header to its settlement: the typed
/// payment the facilitator verifies and settles, its replay key and
/// fingerprint, and what its answers need. Built once by `prepare`, moved
/// whole into the settlement.
struct Payment {
    facilitation: FacilitatorRequest,
    quote: Arc<Quote>,
    key: AuthorizationKey,
    fingerprint: [u8; 32],
    style: EnvelopeStyle,
    request_id: Option<String>,
}

impl Payment {
    /// The payer as the client wrote it, for refusals before any verdict.
    fn claimed_payer(&self) -> Option<&str> {
        claimed_payer(self.facilitation.payment_payload())
    }

    /// The server's offer the payment matched.
    fn offer(&self) -> &PaymentRequirements {
        self.facilitation.payment_requirements()
    }
}

/// `payload.authorization.from`, borrowed as sent.
fn claimed_payer(payload: &PaymentPayload) -> Option<&str> {
    payload.payload.get("authorization")?.get("from")?.as_str()
}

/// The synchronous part: price, quote, decode, match. `Err` is the answer.
// The answer is built once and returned straight to the caller; boxing it buys nothing.
#[allow(clippy::result_large_err)]
fn prepare<B>(
    config: &Config,
    request: &Request<B>,
    price: Price,
    extensions: Option<QuoteExtensionMap>,
) -> Result<Payment, Response<Bytes>> {
    let style = EnvelopeStyle::of_request(request);
    // The one place the configured fee meets the price (`Price::total`).
    let Some(total) = price.total(config.flat_fee) else {
        let error = GatewayError::new(ErrorCode::InternalError).with_debug("price overflow");
        return Err(config.reject.render(error, style));
    };
    let describe = |url| ResourceInfo {
        url,
        description: config.description.clone(),
        mime_type: config.mime_type.clone(),
    };
    let url = resource_url(config, request);
    let Some(quote) = config
        .quotes
        .quote(&config.options, total, extensions, url, describe)
    else {
        let error = GatewayError::new(ErrorCode::InternalError)
            .with_debug("price is not a whole number of the asset's units");
        return Err(config.reject.render(error, style));
    };
    let Some(header_value) = request.headers().get(header::PAYMENT_SIGNATURE) else {
        trace_decision!(DEBUG, "x402", price = %total, outcome = "quoted");
        payment_outcome("quoted");
        return Err(quote.response());
    };
    let invalid = |why: &str, payer: Option<&str>| {
        payment_rejection(
            &config.reject,
            ErrorCode::PaymentInvalid,
            why,
            payer,
            style,
            quote.required(),
        )
    };
    let payload: PaymentPayload = match codec::decode(header_value.as_bytes()) {
        Ok(payload) => payload,
        Err(error) => return Err(invalid(error.reason(), None)),
    };
    if payload.x402_version != crate::x402::wire::X402_VERSION {
        return Err(invalid(
            reason::INVALID_X402_VERSION,
            claimed_payer(&payload),
        ));
    }
    let Some(offer) = matching_offer(&quote.required().accepts, &payload.accepted).cloned() else {
        return Err(invalid(
            reason::NO_MATCHING_REQUIREMENTS,
            claimed_payer(&payload),
        ));
    };
    // The payload is read into typed values here, once, for every step after.
    let facilitation = FacilitatorRequest::new(payload, offer);
    let evm = facilitation.exact_evm();
    let offer = facilitation.payment_requirements();
    if let Err(why) = check_authorization(offer, evm, config.clock.now_unix_secs()) {
        return Err(invalid(why, claimed_payer(facilitation.payment_payload())));
    }
    let typed = evm.and_then(|evm| Some((evm, evm.fingerprint()?)));
    let (key, fingerprint) = match typed {
        Some((evm, fingerprint)) => (
            AuthorizationKey::new(&offer.network, evm.from, evm.nonce),
            fingerprint,
        ),
        None => {
            // Another scheme, or exact-EVM hex that does not parse (the facilitator
            // refuses it): the header as sent identifies the payment.
            let fingerprint = keccak256(header_value.as_bytes().trim_ascii()).0;
            (
                AuthorizationKey::of_payload(&offer.network, &fingerprint),
                fingerprint,
            )
        }
    };
    Ok(Payment {
        facilitation,
        quote,
        key,
        fingerprint,
        style,
        request_id: request
            .headers()
            .get(X_REQUEST_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
    })
}

/// `resource.url`: the configured public base, else (only when the caller
/// opted in: the builder refuses otherwise) `http://` + `Host`; then the path and query.
fn resource_url<B>(config: &Config, request: &Request<B>) -> String {
    let path = request.uri().path_and_query().map_or("/", |pq| pq.as_str());
    match &config.public_base_url {
        Some(base) => format!("{base}{path}"),
        None => {
            let host = request
                .headers()
                .get(http::header::HOST)
                .and_then(|value| value.to_str().ok())
                .filter(|host| !host.is_empty() && !host.contains(['/', ' ', '"']))
                .or_else(|| request.uri().authority().map(|a| a.as_str()))
                .unwrap_or("localhost");
            format!("http://{host}{path}")
        }
    }
}

/// A payment rejection in the route's envelope; 402s also carry the quote
/// again, its `error` naming the reason, so a client can sign afresh.
fn payment_rejection(
    reject: &RenderRejection,
    code: ErrorCode,
    why: &str,
    payer: Option<&str>,
    style: EnvelopeStyle,
    quote: &PaymentRequired,
) -> Response<Bytes> {
    trace_decision!(
        INFO,
        "x402",
        payer,
        outcome = "refused",
        error = code.as_str(),
        reason = why,
    );
    payment_outcome("refused");
    metrics::count(metrics::X402_REFUSALS_TOTAL, [("code", code.as_str())]);
    let mut error = GatewayError::new(code).with_debug(why);
    if let Some(payer) = payer {
        error = error.with_payer(payer);
    }
    let mut response = reject.render(error, style);
    if response.status() == StatusCode::PAYMENT_REQUIRED {
        let mut quote = quote.clone();
        quote.error = Some(why.to_owned());
        write_quote_headers(response.headers_mut(), &quote);
    }
    response
}

/// Gives the claim back unless told to keep it, also when the future is dropped.
struct ClaimGuard {
    store: Arc<dyn NonceStore>,
    key: Option<AuthorizationKey>,
}

impl ClaimGuard {
    fn keep(mut self) {
        self.key = None;
    }

    /// Gives the claim back and waits until the store has it, so the client's
    /// retry (on any replica) finds it free.
    async fn release(mut self) {
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
        if let Some(key) = self.key.take() {
            trace_decision!(DEBUG, "x402", outcome = "released");
            drop(self.store.release(&key));
        }
    }
}

/// The asynchronous part: claim, verify, call, settle on 2xx (a stream when it completes).
async fn pay_and_call<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Payment,
) -> Result<Response<X402Body<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Send + 'static,
{
    let reject = |payment: &Payment, code: ErrorCode, why: &str, payer: Option<&str>| {
        Ok(rejection(payment_rejection(
            &config.reject,
            code,
            why,
            payer,
            payment.style,
            payment.quote.required(),
        ))
        .map(X402Body::plain))
    };
    let now = config.clock.now_unix_secs();
    let hold_until =
        now.saturating_add(payment.offer().max_timeout_seconds.max(MIN_CLAIM_HOLD_SECS));

    match config.nonce_store.claim(&payment.key, hold_until).await {
        Ok(Claim::Claimed) => {}
        Ok(Claim::InFlight) => {
            return reject(
                &payment,
                ErrorCode::PaymentReplay,
                "authorization_in_flight",
                payment.claimed_payer(),
            );
        }
        Ok(Claim::Spent(spent))
            if config.paid_replay && spent.fingerprint == payment.fingerprint =>
        {
            trace_decision!(
                INFO,
                "x402",
                payer = spent.receipt.payer(),
                transaction = spent.receipt.transaction(),
                outcome = "replayed",
            );
            payment_outcome("replayed");
            let receipt_header = settle_header(&receipt_settlement(&spent.receipt));
            request.extensions_mut().insert(spent.receipt.replayed());
            let mut response = inner.call(request).await?;
            if let Some(value) = receipt_header {
                response
                    .headers_mut()
                    .insert(header::PAYMENT_RESPONSE, value);
            }
            return Ok(plain(response));
        }
        Ok(_) => {
            return reject(
                &payment,
                ErrorCode::PaymentReplay,
                "authorization_already_settled",
                payment.claimed_payer(),
            );
        }
        Err(error) => {
            return reject(
                &payment,
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
                payment.claimed_payer(),
            );
        }
    }
    let claim = ClaimGuard {
        store: config.nonce_store.clone(),
        key: Some(payment.key.clone()),
    };

    let verifying = metrics::Started::now();
    let verified = config.facilitator.verify(&payment.facilitation).await;
    verifying.observe(metrics::X402_VERIFY_DURATION_SECONDS);
    let verdict = match verified {
        Ok(verdict) => verdict,
        Err(error) => {
            claim.release().await;
            return reject(
                &payment,
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
                payment.claimed_payer(),
            );
        }
    };
    let payer = verdict
        .payer
        .or_else(|| payment.claimed_payer().map(str::to_owned));
    if !verdict.is_valid {
        let why = verdict
            .invalid_reason
            .as_deref()
            .unwrap_or(reason::INVALID_PAYLOAD);
        claim.release().await;
        return reject(&payment, code_for_reason(why), why, payer.as_deref());
    }
    payment_outcome("verified");
    let offer = payment.offer();
    let receipt = PaymentReceipt::new(
        payer.unwrap_or_default(),
        offer.amount,
        offer.network.clone(),
        payment.key.as_str().to_owned(),
    );
    request.extensions_mut().insert(receipt.clone());

    // Dropping `claim` on `?` or on an early return releases the authorization.
    let mut response = inner.call(request).await?;
    if !response.status().is_success() {
        // Not served: not charged.
        trace_decision!(
            INFO,
            "x402",
            payer = receipt.payer(),
            status = response.status().as_u16(),
            outcome = "unsettled",
        );
        payment_outcome("unsettled");
        claim.release().await;
        return Ok(plain(response));
    }
    let style = payment.style;
    let job = SettleJob {
        config: config.clone(),
        payment,
        claim,
        receipt,
    };
    mark_private(response.headers_mut());

    if is_event_stream(&response) {
        // Settled when the stream completes; its receipt is the last event.
        let (parts, body) = response.into_parts();
        let settle = Box::new(move || -> crate::store::BoxFuture<'static, Bytes> {
            Box::pin(async move {
                let settlement = match job.run().await {
                    Ok((settlement, _)) | Err((settlement, _)) => settlement,
                };
                receipt_event(&codec::encode(&settlement))
            })
        });
        return Ok(Response::from_parts(
            parts,
            X402Body::settling(body, settle),
        ));
    }

    // The response head is held and its body unpolled until settlement succeeds.
    match job.run().await {
        Ok((settlement, receipt)) => {
            if let Some(value) = settle_header(&settlement) {
                response
                    .headers_mut()
                    .insert(header::PAYMENT_RESPONSE, value);
            }
            response.extensions_mut().insert(receipt);
            Ok(plain(response))
        }
        Err((settlement, receipt)) => {
            let why = settlement
                .error_reason
                .as_deref()
                .unwrap_or(reason::UNEXPECTED_SETTLE_ERROR);
            let mut error = GatewayError::new(ErrorCode::SettlementFailed).with_debug(why);
            if !receipt.payer().is_empty() {
                error = error.with_payer(receipt.payer());
            }
            let mut failed = config.reject.render(error, style);
            if let Some(value) = settle_header(&settlement) {
                failed.headers_mut().insert(header::PAYMENT_RESPONSE, value);
            }
            Ok(rejection(failed).map(X402Body::plain))
        }
    }
}

/// The inner service's answer, passed on as it is.
fn plain<B>(response: Response<B>) -> Response<X402Body<B>> {
    response.map(|body| X402Body::plain(ResponseBody::inner(body)))
}

/// Whether an answer is a Server-Sent Events stream.
fn is_event_stream<B>(response: &Response<B>) -> bool {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// A verified, served payment, its claim held, settled once.
struct SettleJob {
    config: Arc<Config>,
    payment: Payment,
    claim: ClaimGuard,
    receipt: PaymentReceipt,
}

impl SettleJob {
    /// Settles; on success marks the authorization spent and tells the hook.
    /// `Err` is the failed settlement (its claim released) and the receipt.
    async fn run(
        self,
    ) -> Result<(SettleResponse, PaymentReceipt), (SettleResponse, PaymentReceipt)> {
        let Self {
            config,
            payment,
            claim,
            receipt,
        } = self;
        let offer = payment.offer();
        let now = config.clock.now_unix_secs();
        let floor_secs = MIN_SPENT_RETENTION_SECS.min(offer.max_timeout_seconds);
        let keep_until = payment
            .facilitation
            .exact_evm()
            .map_or(now, |evm| evm.valid_before)
            .max(now.saturating_add(floor_secs));
        let unsettled = SpentAuthorization {
            receipt,
            fingerprint: payment.fingerprint,
        };
        config
            .nonce_store
            .settling(&payment.key, &unsettled, keep_until);
        let receipt = unsettled.receipt;
        let settling = metrics::Started::now();
        let settled = config.facilitator.settle(&payment.facilitation).await;
        settling.observe(metrics::X402_SETTLE_DURATION_SECONDS);
        let settlement = match settled {
            Ok(settlement) => settlement,
            Err(error) => SettleResponse::failure(
                offer.network.clone(),
                error.to_string(),
                Some(receipt.payer().to_owned()).filter(|payer| !payer.is_empty()),
            ),
        };
        if !settlement.success {
            trace_decision!(
                WARN,
                "x402",
                payer = receipt.payer(),
                amount = %receipt.amount(),
                network = %receipt.network(),
                outcome = "unsettled",
                error = ErrorCode::SettlementFailed.as_str(),
                reason = settlement.error_reason.as_deref(),
            );
            payment_outcome("unsettled");
            claim.release().await;
            return Err((settlement, receipt));
        }
        trace_decision!(
            INFO,
            "x402",
            payer = receipt.payer(),
            amount = %receipt.amount(),
            network = %receipt.network(),
            transaction = settlement.transaction.as_str(),
            resource = payment.quote.required().resource.url.as_str(),
            outcome = "settled",
        );
        payment_outcome("settled");
        metrics::count(metrics::X402_SETTLEMENTS_TOTAL, []);
        let receipt = receipt.settled(settlement.transaction.clone());
        let spent = SpentAuthorization {
            receipt: receipt.clone(),
            fingerprint: payment.fingerprint,
        };
        // Settled on the ledger either way: a store failure here only weakens paid replay,
        // since the ledger itself refuses the used nonce.
        if let Err(_error) = config
            .nonce_store
            .mark_spent(&payment.key, spent, keep_until)
            .await
        {
            trace_warn!(
                error = %_error,
                transaction = settlement.transaction.as_str(),
                "settled, but the nonce store failed to mark the authorization spent",
            );
        }
        claim.keep();
        let Payment {
            quote, request_id, ..
        } = payment;
        config
            .report_settled(|| {
                SettledPayment::new(
                    receipt.payer(),
                    receipt.amount(),
                    receipt.network().clone(),
                    settlement.transaction.clone(),
                    quote.required().resource.url.clone(),
                    request_id,
                )
            })
            .await;
        Ok((settlement, receipt))
    }
}

/// The `PAYMENT-RESPONSE` value of a settlement.
fn settle_header(settlement: &SettleResponse) -> Option<HeaderValue> {
    HeaderValue::from_str(&codec::encode(settlement)).ok()
}

/// The settlement a receipt records, for the `PAYMENT-RESPONSE` of a paid replay.
fn receipt_settlement(receipt: &PaymentReceipt) -> SettleResponse {
    SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        payer: Some(receipt.payer().to_owned()),
        transaction: receipt.transaction().unwrap_or_default().to_owned(),
        network: receipt.network().clone(),
        amount: Some(receipt.amount()),
    }
}

/// A paid answer is for its payer only: shared caches must not keep it.
fn mark_private(headers: &mut http::HeaderMap) {
    let value = match headers
        .get(http::header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
    {
        Some(existing) if existing.contains("private") || existing.contains("no-store") => return,
        Some(existing) => format!("{existing}, private"),
        None => "private".to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(http::header::CACHE_CONTROL, value);
    }
}

/// One paid-request decision into `walletgate_x402_payments_total`.
fn payment_outcome(outcome: &'static str) {
    metrics::count(metrics::X402_PAYMENTS_TOTAL, [("outcome", outcome)]);
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use http_body_util::{BodyExt, Full};
    use serde_json::json;
    use tower::{Layer, ServiceExt, service_fn};

    use super::*;
    use crate::clock::FakeClock;
    use crate::store::BoxFuture;
    use crate::x402::facilitator::{Facilitator, FacilitatorError};
    use crate::x402::{
        server::{PaymentOption, PriceTable, SettlementHookError, X402Layer},
        wire::{SupportedResponse, VerifyResponse},
    };

    const NOW: u64 = 1_750_000_000;
    const PAYER: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    /// Accepts every payment; settles unless told to fail; counts settlements.
    #[derive(Default)]
    struct Facade {
        refuse: AtomicBool,
        fail_settle: AtomicBool,
        settled: AtomicUsize,
    }

    impl Facilitator for Arc<Facade> {
        fn verify<'a>(
            &'a self,
            _request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<crate::x402::wire::VerifyResponse, FacilitatorError>> {
            let verdict = if self.refuse.load(Ordering::SeqCst) {
                VerifyResponse::invalid(reason::SIGNATURE, Some(PAYER.into()))
            } else {
                VerifyResponse::valid(PAYER)
            };
            Box::pin(async move { Ok(verdict) })
        }

        fn settle<'a>(
            &'a self,
            request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
            let network = request.payment_requirements().network.clone();
            let amount = request.payment_requirements().amount;
            let answer = if self.fail_settle.load(Ordering::SeqCst) {
                SettleResponse::failure(network, "invalid_exact_evm_transaction_failed", None)
            } else {
                let n = self.settled.fetch_add(1, Ordering::SeqCst);
                SettleResponse {
                    success: true,
                    error_reason: None,
                    error_message: None,
                    payer: Some(PAYER.into()),
                    transaction: format!("0x{n:064x}"),
                    network,
                    amount: Some(amount),
                }
            };
            Box::pin(async move { Ok(answer) })
        }

        fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
            Box::pin(async { Err(FacilitatorError::unavailable("not needed")) })
        }
    }

    struct Fixture {
        facade: Arc<Facade>,
        hooked: Arc<Mutex<Vec<SettledPayment>>>,
        hook_fails: Arc<AtomicBool>,
        layer: X402Layer,
    }

    /// The chat route at 0.002 USD over `facade`, on the fake clock.
    fn chat_layer(facade: &Arc<Facade>) -> crate::x402::server::X402LayerBuilder {
        X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /v1/chat/completions", "0.002")
                    .unwrap(),
            )
            .with_facilitator(facade.clone())
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
    }

    fn fixture() -> Fixture {
        let facade = Arc::new(Facade::default());
        let hooked = Arc::new(Mutex::new(Vec::new()));
        let hook_fails = Arc::new(AtomicBool::new(false));
        let (seen, fails) = (hooked.clone(), hook_fails.clone());
        let layer = chat_layer(&facade)
            .on_settlement(move |payment: SettledPayment| {
                seen.lock().unwrap().push(payment);
                let fails = fails.load(Ordering::SeqCst);
                async move {
                    match fails {
                        true => Err(SettlementHookError::new("ledger offline")),
                        false => Ok(()),
                    }
                }
            })
            .build()
            .unwrap();
        Fixture {
            facade,
            hooked,
            hook_fails,
            layer,
        }
    }

    /// Answers `x-test-body` (default "answer") with `x-test-type` and `x-test-status`.
    type Inner =
        tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

    fn service(layer: &X402Layer) -> X402<Inner> {
        layer.layer(Inner::new(service_fn(
            |request: Request<Full<Bytes>>| async move {
                let header = |name: &str, default: &str| {
                    request.headers().get(name).map_or(default.to_owned(), |v| {
                        v.to_str().unwrap().replace("\\n", "\n")
                    })
                };
                let response = Response::builder()
                    .status(header("x-test-status", "200").parse::<u16>().unwrap())
                    .header("content-type", header("x-test-type", "application/json"))
                    .body(Full::new(Bytes::from(header("x-test-body", "answer"))))
                    .unwrap();
                Ok::<_, Infallible>(response)
            },
        )))
    }

    /// A `PAYMENT-SIGNATURE` for the route's offer with authorization nonce `nonce`.
    fn payment(nonce: u8) -> String {
        let offer = PaymentOption::base_sepolia_usdc(PAY_TO)
            .unwrap()
            .requirements("0.003".parse().unwrap())
            .unwrap();
        let payload = PaymentPayload {
            x402_version: 2,
            resource: None,
            accepted: offer.clone(),
            payload: json!({
                // Canonical shape (low s, v = 27): the facade accepts any signer.
                "signature": format!("0x{}1b", "11".repeat(64)),
                "authorization": {
                    "from": PAYER, "to": PAY_TO, "value": offer.amount.to_string(),
                    "validAfter": "0", "validBefore": (NOW + 300).to_string(),
                    "nonce": format!("0x{nonce:064x}"),
                },
            }),
            extensions: None,
        };
        codec::encode(&payload)
    }

    fn paid(payment: &str, stream_body: Option<&str>) -> Request<Full<Bytes>> {
        let mut request = Request::post("http://gw.test/v1/chat/completions")
            .header(header::PAYMENT_SIGNATURE, payment)
            .header("x-request-id", "req-7");
        if let Some(body) = stream_body {
            request = request
                .header("x-test-type", "text/event-stream")
                .header("x-test-body", body.replace('\n', "\\n"));
        }
        request.body(Full::default()).unwrap()
    }

    async fn text(response: Response<X402Body<Full<Bytes>>>) -> String {
        String::from_utf8(
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap()
    }

    fn code_of(body: &str) -> String {
        serde_json::from_str::<serde_json::Value>(body).unwrap()["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[tokio::test]
    async fn a_whole_answer_is_settled_before_release_and_hooked_once() {
        let f = fixture();
        let response = service(&f.layer)
            .oneshot(paid(&payment(1), None))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let settled: SettleResponse =
            codec::decode(response.headers()[header::PAYMENT_RESPONSE].as_bytes()).unwrap();
        assert!(settled.success);
        // The hook ran before the answer was handed out.
        let hooked = f.hooked.lock().unwrap().clone();
        assert_eq!(hooked.len(), 1);
        assert_eq!(hooked[0].transaction, settled.transaction);
        assert_eq!(hooked[0].payer, PAYER);
        assert_eq!(hooked[0].amount.units(), 3000);
        assert_eq!(hooked[0].resource, "http://gw.test/v1/chat/completions");
        assert_eq!(hooked[0].request_id.as_deref(), Some("req-7"));
        assert_eq!(text(response).await, "answer");
    }

    #[tokio::test]
    async fn the_hook_never_sees_refused_failed_unserved_or_replayed_payments() {
        let f = fixture();
        let svc = service(&f.layer);
        // Settled once, then replayed.
        assert_eq!(
            svc.clone()
                .oneshot(paid(&payment(1), None))
                .await
                .unwrap()
                .status(),
            200
        );
        let replay = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(code_of(&text(replay).await), "PAYMENT_REPLAY");
        // The inner service fails: unsettled.
        let mut failing = paid(&payment(2), None);
        failing
            .headers_mut()
            .insert("x-test-status", HeaderValue::from_static("503"));
        assert_eq!(svc.clone().oneshot(failing).await.unwrap().status(), 503);
        // Settlement fails.
        f.facade.fail_settle.store(true, Ordering::SeqCst);
        let failed = svc.clone().oneshot(paid(&payment(3), None)).await.unwrap();
        assert_eq!(code_of(&text(failed).await), "SETTLEMENT_FAILED");
        f.facade.fail_settle.store(false, Ordering::SeqCst);
        // Refused by the facilitator.
        f.facade.refuse.store(true, Ordering::SeqCst);
        let refused = svc.clone().oneshot(paid(&payment(4), None)).await.unwrap();
        assert_eq!(code_of(&text(refused).await), "PAYMENT_INVALID");
        assert_eq!(f.hooked.lock().unwrap().len(), 1);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_caller_owns_the_rejections_and_a_402_keeps_its_quote_headers() {
        let facade = Arc::new(Facade::default());
        facade.refuse.store(true, Ordering::SeqCst);
        let layer = chat_layer(&facade)
            .with_rejection(|error, style| {
                let mut response = Response::new(Bytes::from(format!(
                    "{} {style:?} {}",
                    error.code().as_str(),
                    error.payer().unwrap_or("-")
                )));
                *response.status_mut() = error.code().status();
                response
            })
            .build()
            .unwrap();
        let refused = service(&layer)
            .oneshot(paid(&payment(1), None))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(refused.headers().contains_key(header::PAYMENT_REQUIRED));
        assert_eq!(text(refused).await, format!("PAYMENT_INVALID Chat {PAYER}"));
        assert_eq!(facade.settled.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn the_servers_extensions_reach_each_402_by_request_and_payments_still_match() {
        let facade = Arc::new(Facade::default());
        let layer = chat_layer(&facade)
            .with_quote_extensions(|request: &http::request::Parts, price: &Price| {
                let flavour = request.headers.get("x-flavour")?.to_str().ok()?.to_owned();
                let mut map = serde_json::Map::new();
                map.insert(
                    "bazaar".into(),
                    serde_json::json!({"flavour": flavour, "paid": !price.is_free()}),
                );
                Some(Arc::new(map))
            })
            .build()
            .unwrap();
        let quote = |flavour: Option<&'static str>| {
            let mut request = Request::post("http://gw.test/v1/chat/completions");
            if let Some(flavour) = flavour {
                request = request.header("x-flavour", flavour);
            }
            service(&layer).oneshot(request.body(Full::default()).unwrap())
        };
        // Same URL and price, other extensions: never the cached quote of another.
        for flavour in [Some("a"), Some("b"), None, Some("a")] {
            let response = quote(flavour).await.unwrap();
            assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
            let required: PaymentRequired =
                codec::decode(response.headers()[header::PAYMENT_REQUIRED].as_bytes()).unwrap();
            let declared = required
                .extensions
                .map(|extensions| extensions["bazaar"]["flavour"].clone());
            assert_eq!(declared, flavour.map(serde_json::Value::from));
        }
        let paid = service(&layer)
            .oneshot(paid(&payment(9), None))
            .await
            .unwrap();
        assert_eq!(paid.status(), 200);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failing_hook_is_counted_and_never_charges_twice() {
        let f = fixture();
        f.hook_fails.store(true, Ordering::SeqCst);
        let svc = service(&f.layer);
        let response = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers().contains_key(header::PAYMENT_RESPONSE));
        assert_eq!(f.layer.settlement_hook_failures(), 1);
        let again = svc.oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(code_of(&text(again).await), "PAYMENT_REPLAY");
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
        assert_eq!(f.hooked.lock().unwrap().len(), 1);
    }

    const COMPLETE: &str = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
    const BROKEN: &str = "data: {\"choices\":[]}\n\ndata: {\"error\":{\"code\":\"TIMEOUT\"}}\n\n";

    #[tokio::test]
    async fn a_stream_is_settled_when_it_completes_and_ends_with_its_receipt() {
        let f = fixture();
        let response = service(&f.layer)
            .oneshot(paid(&payment(1), Some(COMPLETE)))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert!(!response.headers().contains_key(header::PAYMENT_RESPONSE));
        assert_eq!(response.headers()[http::header::CACHE_CONTROL], "private");
        // Nothing is settled while the stream runs.
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 0);
        let body = text(response).await;
        let (answer, receipt) = body.split_once("event: payment-response\ndata: ").unwrap();
        assert_eq!(answer, COMPLETE);
        let settled: SettleResponse = codec::decode(receipt.trim_end().as_bytes()).unwrap();
        assert!(settled.success);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
        assert_eq!(f.hooked.lock().unwrap()[0].transaction, settled.transaction);
    }

    #[tokio::test]
    async fn a_broken_or_abandoned_stream_is_unsettled_and_its_payment_can_be_retried() {
        let f = fixture();
        let svc = service(&f.layer);
        let broken = svc
            .clone()
            .oneshot(paid(&payment(1), Some(BROKEN)))
            .await
            .unwrap();
        assert_eq!(text(broken).await, BROKEN);
        // Dropped by the client before its end.
        let abandoned = svc
            .clone()
            .oneshot(paid(&payment(1), Some(COMPLETE)))
            .await
            .unwrap();
        drop(abandoned);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 0);
        assert!(f.hooked.lock().unwrap().is_empty());
        // The same signature is still good.
        let retried = svc
            .oneshot(paid(&payment(1), Some(COMPLETE)))
            .await
            .unwrap();
        assert!(text(retried).await.contains("event: payment-response"));
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_whose_settlement_fails_ends_with_the_failed_receipt() {
        let f = fixture();
        f.facade.fail_settle.store(true, Ordering::SeqCst);
        let svc = service(&f.layer);
        let body = text(
            svc.clone()
                .oneshot(paid(&payment(1), Some(COMPLETE)))
                .await
                .unwrap(),
        )
        .await;
        let receipt = body
            .split_once("event: payment-response\ndata: ")
            .unwrap()
            .1;
        let settled: SettleResponse = codec::decode(receipt.trim_end().as_bytes()).unwrap();
        assert!(!settled.success);
        assert!(f.hooked.lock().unwrap().is_empty());
        // Unsettled, so the claim went back.
        f.facade.fail_settle.store(false, Ordering::SeqCst);
        let retried = svc.oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(retried.status(), 200);
    }
}

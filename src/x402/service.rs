//! [`X402`], the service: the payment flow of one request.

use std::sync::Arc;
use std::task::{Context, Poll};

use alloy_primitives::keccak256;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_service::Service;

use super::codec;
use super::facilitator::{FacilitatorRequest, code_for_reason, reason};
use super::future::ResponseFuture;
use super::layer::{Config, X402Layer};
use super::pricing::Price;
use super::quote::{
    QUOTE_ERROR, matching_offer, payment_required, quote_response, write_quote_headers,
};
use super::receipt::PaymentReceipt;
use super::replay::{AuthorizationKey, Claim, NonceStore, SpentAuthorization};
use super::types::{PaymentPayload, PaymentRequired, ResourceInfo, SettleResponse};
use crate::body::{ResponseBody, rejection};
use crate::envelope::{EnvelopeStyle, ErrorCode, GatewayError, header};

/// Seconds a spent authorization is remembered at least, whatever its `validBefore`.
const MIN_SPENT_RETENTION_SECS: u64 = 120;

/// Seconds an in-flight claim is held at least (the upstream may take 120 s).
const MIN_CLAIM_HOLD_SECS: u64 = 600;

/// The x402 payment middleware; built by [`X402Layer`].
///
/// See the [module docs](super) for the flow.
#[derive(Clone, Debug)]
pub struct X402<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> X402<S> {
    pub(crate) fn from_config(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// Wraps `inner` with `layer`'s configuration.
    pub fn layer(inner: S, layer: &X402Layer) -> Self {
        Self::from_config(inner, layer.config.clone())
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
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let usd = match self.config.pricing.price(&parts) {
            Ok(Price::Usd(usd)) => usd,
            Ok(Price::Free) => {
                let request = Request::from_parts(parts, body);
                return ResponseFuture::passthrough(self.inner.call(request));
            }
            // Unpriceable (a wiring fault, usually): refused, never served free.
            Err(refusal) => {
                let style = EnvelopeStyle::of_parts(&parts);
                return ResponseFuture::ready(rejection(refusal.into_error().into_response(style)));
            }
        };
        let request = Request::from_parts(parts, body);
        match prepare(&self.config, &request, usd) {
            Err(answer) => ResponseFuture::ready(rejection(answer)),
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

/// A payment that decoded and matched an offer, ready to claim and verify.
struct Payment {
    request: FacilitatorRequest,
    quote: PaymentRequired,
    key: AuthorizationKey,
    fingerprint: [u8; 32],
    payer: Option<String>,
    valid_before: Option<u64>,
    style: EnvelopeStyle,
}

/// The synchronous part: price, quote, decode, match. `Err` is the answer.
// The answer is built once and returned straight to the caller; boxing it buys nothing.
#[allow(clippy::result_large_err)]
fn prepare<B>(
    config: &Config,
    request: &Request<B>,
    usd: super::UsdAmount,
) -> Result<Payment, Response<Bytes>> {
    let style = EnvelopeStyle::of_request(request);
    let Some(total) = usd.checked_add(config.flat_fee) else {
        return Err(GatewayError::new(ErrorCode::InternalError)
            .with_debug("price overflow")
            .into_response(style));
    };
    let offers: Vec<_> = config
        .options
        .iter()
        .filter_map(|option| option.requirements(total))
        .collect();
    let (Some(first_option), false) = (config.options.first(), offers.is_empty()) else {
        return Err(GatewayError::new(ErrorCode::InternalError)
            .with_debug("price is not a whole number of the asset's units")
            .into_response(style));
    };
    let quote = payment_required(resource_of(config, request), offers, QUOTE_ERROR);
    let Some(header_value) = request.headers().get(header::PAYMENT_SIGNATURE) else {
        return Err(quote_response(&quote, first_option));
    };
    let invalid = |why: &str, payer: Option<&str>| {
        payment_rejection(ErrorCode::PaymentInvalid, why, payer, style, &quote)
    };
    let payload: PaymentPayload = match codec::decode(header_value.as_bytes()) {
        Ok(payload) => payload,
        Err(error) => return Err(invalid(error.reason(), None)),
    };
    let evm = payload.exact_evm();
    let payer = evm.as_ref().map(|evm| evm.authorization.from.clone());
    if payload.x402_version != super::X402_VERSION {
        return Err(invalid(reason::INVALID_X402_VERSION, payer.as_deref()));
    }
    let Some(offer) = matching_offer(&quote.accepts, &payload.accepted).cloned() else {
        return Err(invalid(reason::NO_MATCHING_REQUIREMENTS, payer.as_deref()));
    };
    let fingerprint = keccak256(serde_json::to_vec(&payload.payload).unwrap_or_default()).0;
    let key = match &evm {
        Some(evm) => AuthorizationKey::new(
            &offer.network,
            &evm.authorization.from,
            &evm.authorization.nonce,
        ),
        None => AuthorizationKey::new(
            &offer.network,
            "payload",
            &alloy_primitives::hex::encode(fingerprint),
        ),
    };
    Ok(Payment {
        request: FacilitatorRequest {
            x402_version: payload.x402_version,
            payment_payload: payload,
            payment_requirements: offer,
        },
        quote,
        key,
        fingerprint,
        payer,
        valid_before: evm.map(|evm| evm.authorization.valid_before),
        style,
    })
}

/// `resource.url`: the configured public base, else `http://` + `Host`, plus the path and query.
fn resource_of<B>(config: &Config, request: &Request<B>) -> ResourceInfo {
    let path = request.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let base = match &config.public_base_url {
        Some(base) => base.clone(),
        None => {
            let host = request
                .headers()
                .get(http::header::HOST)
                .and_then(|value| value.to_str().ok())
                .filter(|host| !host.is_empty() && !host.contains(['/', ' ', '"']))
                .or_else(|| request.uri().authority().map(|a| a.as_str()))
                .unwrap_or("localhost");
            format!("http://{host}")
        }
    };
    ResourceInfo {
        url: format!("{base}{path}"),
        description: config.description.clone(),
        mime_type: config.mime_type.clone(),
    }
}

/// A payment rejection in the route's envelope; 402s also carry the quote
/// again, its `error` naming the reason, so a client can sign afresh.
fn payment_rejection(
    code: ErrorCode,
    why: &str,
    payer: Option<&str>,
    style: EnvelopeStyle,
    quote: &PaymentRequired,
) -> Response<Bytes> {
    let mut error = GatewayError::new(code).with_debug(why);
    if let Some(payer) = payer {
        error = error.with_payer(payer);
    }
    let mut response = error.into_response(style);
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
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.store.release(&key);
        }
    }
}

/// The asynchronous part: claim, verify, call, settle on 2xx.
async fn pay_and_call<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Payment,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    let Payment {
        request: facilitation,
        quote,
        key,
        fingerprint,
        payer,
        valid_before,
        style,
    } = payment;
    let reject = |code: ErrorCode, why: &str, payer: Option<&str>| {
        Ok(rejection(payment_rejection(
            code, why, payer, style, &quote,
        )))
    };
    let offer = &facilitation.payment_requirements;
    let now = config.clock.now_unix_secs();
    let hold_until = now.saturating_add(offer.max_timeout_seconds.max(MIN_CLAIM_HOLD_SECS));

    match config.nonce_store.claim(&key, hold_until).await {
        Ok(Claim::Claimed) => {}
        Ok(Claim::InFlight) => {
            return reject(
                ErrorCode::PaymentReplay,
                "authorization_in_flight",
                payer.as_deref(),
            );
        }
        Ok(Claim::Spent(spent)) if config.paid_replay && spent.fingerprint == fingerprint => {
            let receipt_header = settle_header(&receipt_settlement(&spent.receipt));
            request.extensions_mut().insert(spent.receipt.replayed());
            let mut response = inner.call(request).await?;
            if let Some(value) = receipt_header {
                response
                    .headers_mut()
                    .insert(header::PAYMENT_RESPONSE, value);
            }
            return Ok(response.map(ResponseBody::inner));
        }
        Ok(_) => {
            return reject(
                ErrorCode::PaymentReplay,
                "authorization_already_settled",
                payer.as_deref(),
            );
        }
        Err(error) => {
            return reject(
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
                payer.as_deref(),
            );
        }
    }
    let claim = ClaimGuard {
        store: config.nonce_store.clone(),
        key: Some(key.clone()),
    };

    let verdict = match config.facilitator.verify(&facilitation).await {
        Ok(verdict) => verdict,
        Err(error) => {
            return reject(
                ErrorCode::PaymentVerificationUnavailable,
                &error.to_string(),
                payer.as_deref(),
            );
        }
    };
    let payer = verdict.payer.clone().or(payer);
    if !verdict.is_valid {
        let why = verdict
            .invalid_reason
            .as_deref()
            .unwrap_or(reason::INVALID_PAYLOAD);
        return reject(code_for_reason(why), why, payer.as_deref());
    }
    let receipt = PaymentReceipt::new(
        payer.clone().unwrap_or_default(),
        offer.amount,
        offer.network.clone(),
        key.as_str().to_owned(),
    );
    request.extensions_mut().insert(receipt.clone());

    // Dropping `claim` on `?` or on an early return releases the authorization.
    let mut response = inner.call(request).await?;
    if !response.status().is_success() {
        return Ok(response.map(ResponseBody::inner));
    }

    // The response head is held and its body unpolled until settlement succeeds.
    let settlement = match config.facilitator.settle(&facilitation).await {
        Ok(settlement) => settlement,
        Err(error) => {
            SettleResponse::failure(offer.network.clone(), error.to_string(), payer.clone())
        }
    };
    if !settlement.success {
        let why = settlement
            .error_reason
            .as_deref()
            .unwrap_or(reason::UNEXPECTED_SETTLE_ERROR);
        let mut error = GatewayError::new(ErrorCode::SettlementFailed).with_debug(why);
        if let Some(payer) = payer.as_deref() {
            error = error.with_payer(payer);
        }
        let mut failed = error.into_response(style);
        if let Some(value) = settle_header(&settlement) {
            failed.headers_mut().insert(header::PAYMENT_RESPONSE, value);
        }
        return Ok(rejection(failed));
    }

    let receipt = receipt.settled(settlement.transaction.clone());
    let now = config.clock.now_unix_secs();
    let keep_until = valid_before
        .unwrap_or(now)
        .max(now.saturating_add(MIN_SPENT_RETENTION_SECS));
    let spent = SpentAuthorization {
        receipt: receipt.clone(),
        fingerprint,
    };
    // Settled on the ledger either way: a store failure here only weakens paid replay,
    // since the ledger itself refuses the used nonce.
    let _ = config.nonce_store.mark_spent(&key, spent, keep_until).await;
    claim.keep();

    let headers = response.headers_mut();
    if let Some(value) = settle_header(&settlement) {
        headers.insert(header::PAYMENT_RESPONSE, value);
    }
    mark_private(headers);
    response.extensions_mut().insert(receipt);
    Ok(response.map(ResponseBody::inner))
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

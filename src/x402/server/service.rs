//! [`X402`], the HTTP front of the payment flow: the quote and the
//! `PAYMENT-SIGNATURE` header in, the answer (whole, or a stream settled when
//! it completes) and `PAYMENT-RESPONSE` out. The flow itself is
//! [`flow`](super::flow)'s.

use std::sync::Arc;
use std::task::{Context, Poll};

use alloy_primitives::keccak256;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_service::Service;

use super::answers::KeptAnswer;
use super::config::Config;
use super::extensions::QuoteExtensionMap;
use super::flow::{
    self, Admission, Keeper, Outcome, Paying, Payment, Refusal, Resolved, SETTLEMENT_PENDING,
    Serving, collect_within, payment_outcome, receipt_settlement, settle_header,
};
use super::future::ResponseFuture;
use super::layer::X402Layer;
use super::pricing::Price;
use super::quote::write_quote_headers;
use super::receipt::PaymentReceipt;
use super::stream::{OnCut, X402Body, receipt_event};
use crate::body::{ResponseBody, rejection};
use crate::envelope::{EnvelopeStyle, ErrorCode, GatewayError, header};
use crate::metrics;
use crate::x402::facilitator::reason;
use crate::x402::wire::codec;
use crate::x402::wire::types::{PaymentRequired, ResourceInfo, SettleResponse};

/// The request id header handed to the settlement hook.
const X_REQUEST_ID: &str = "x-request-id";

/// Which protocol brought the payment: what the answer and a refusal carry.
#[derive(Clone, Debug, Default)]
enum Via {
    /// `PAYMENT-SIGNATURE`: x402's answers.
    #[default]
    X402,
    /// An MPP `Payment` credential: `Payment-Receipt`, problem+json refusals,
    /// settled before a stream's first byte (the receipt is a header).
    #[cfg(feature = "mpp")]
    Mpp { challenge_id: String },
}

impl Via {
    fn is_mpp(&self) -> bool {
        !matches!(self, Self::X402)
    }
}

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
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
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
        #[cfg(feature = "siwx")]
        let rerun = (self.config.rerun_signed_in.as_ref()).is_some_and(|routes| routes(&parts));
        let request = Request::from_parts(parts, body);
        #[cfg(feature = "siwx")]
        if self.config.sign_in.is_some() && super::siwx::has_proof(&request) {
            let clone = self.inner.clone();
            let inner = std::mem::replace(&mut self.inner, clone);
            let config = self.config.clone();
            let signing_in = SigningIn {
                price,
                extensions,
                rerun,
            };
            return ResponseFuture::paid(Box::pin(signed_in(config, inner, request, signing_in)));
        }
        match prepare(&self.config, &request, price, extensions) {
            Err(answer) => ResponseFuture::ready(rejection(answer).map(X402Body::plain)),
            Ok((payment, via)) => {
                // Move the service that was polled ready into the future; keep a fresh clone.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let config = self.config.clone();
                ResponseFuture::paid(Box::pin(pay_and_call(config, inner, request, payment, via)))
            }
        }
    }
}

/// The synchronous part: price, quote, decode, match. `Err` is the answer.
// The answer is built once and returned straight to the caller; boxing it buys nothing.
#[allow(clippy::result_large_err)]
fn prepare<B>(
    config: &Config,
    request: &Request<B>,
    price: Price,
    extensions: Option<QuoteExtensionMap>,
) -> Result<(Box<Payment>, Via), Response<Bytes>> {
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
    // Under a public base URL the path tells the layer's resources apart:
    // a cached quote builds no URL.
    let host_derived;
    let key = match &config.public_base_url {
        Some(_) => path_and_query(request),
        None => {
            host_derived = resource_url(config, request);
            host_derived.as_str()
        }
    };
    let url = || resource_url(config, request);
    let Some(quote) = config
        .quotes
        .quote(&config.options, total, extensions, key, url, describe)
    else {
        let error = GatewayError::new(ErrorCode::InternalError)
            .with_debug("price is not a whole number of the asset's units");
        return Err(config.reject.render(error, style));
    };
    let digest = || body_digest(request);
    let paying = |sent| Paying {
        request_line: request_line(request),
        body_digest: &digest,
        style,
        request_id: request
            .headers()
            .get(X_REQUEST_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        sent,
    };
    let Some(header_value) = request.headers().get(header::PAYMENT_SIGNATURE) else {
        #[cfg(feature = "mpp")]
        if let Some(mpp) = &config.mpp
            && let Some(credential) = super::mpp::credential(request.headers())
        {
            let read = credential.and_then(|value| {
                let now = config.clock.now_unix_secs();
                mpp.read_credential(value, &quote.required().accepts, now)
            });
            let paid = read.map_err(|problem| mpp_refused(config, &quote, problem, None))?;
            let header = serde_json::from_str(&paid.payment_json).map_err(|_| {
                mpp_refused(config, &quote, super::mpp::Problem::InvalidPayload, None)
            })?;
            let via = Via::Mpp {
                challenge_id: paid.challenge_id.clone(),
            };
            return Payment::admit_header(
                config,
                quote.clone(),
                header,
                paying(paid.payment_json.as_bytes()),
            )
            .map(|payment| (payment, via))
            .map_err(|refusal| {
                mpp_refused(
                    config,
                    &quote,
                    super::mpp::Problem::VerificationFailed(""),
                    Some(&refusal.why),
                )
            });
        }
        trace_decision!(DEBUG, "x402", price = %total, outcome = "quoted");
        payment_outcome("quoted");
        return Err(quote_answer(config, &quote));
    };
    Payment::admit_encoded(config, quote.clone(), paying(header_value.as_bytes()))
        .map(|payment| (payment, Via::X402))
        .map_err(|refusal| refused(config, &refusal, style, quote.required()))
}

/// The 402 quote, with an MPP challenge per EVM `exact` offer where the
/// layer takes MPP.
fn quote_answer(config: &Config, quote: &super::quote::Quote) -> Response<Bytes> {
    #[cfg_attr(not(feature = "mpp"), allow(unused_mut))]
    let mut response = quote.response();
    #[cfg(feature = "mpp")]
    super::mpp::add_challenges(
        response.headers_mut(),
        &mpp_challenges(config, quote.required()),
    );
    #[cfg(not(feature = "mpp"))]
    let _ = config;
    response
}

/// Fresh MPP challenges for `quote`'s offers (none without MPP).
#[cfg(feature = "mpp")]
fn mpp_challenges(config: &Config, quote: &PaymentRequired) -> Vec<super::mpp::Challenge> {
    let Some(mpp) = &config.mpp else {
        return Vec::new();
    };
    let decimals = |offer: &_| config.units_of(offer).decimals;
    mpp.challenges(&quote.accepts, decimals, config.clock.now_unix_secs())
}

/// A refused MPP credential: MPP's problem, with the x402 quote and fresh
/// challenges when it is a 402.
#[cfg(feature = "mpp")]
fn mpp_refused(
    config: &Config,
    quote: &super::quote::Quote,
    problem: super::mpp::Problem,
    detail: Option<&str>,
) -> Response<Bytes> {
    let (code, _, _) = problem.parts();
    trace_decision!(
        INFO,
        "x402",
        outcome = "refused",
        protocol = "mpp",
        problem = code,
        reason = detail
    );
    payment_outcome("refused");
    metrics::count(metrics::X402_REFUSALS_TOTAL, [("code", code)]);
    let challenges = mpp_challenges(config, quote.required());
    super::mpp::problem_response(problem, detail, &challenges, |headers| {
        write_quote_headers(headers, quote.required());
    })
}

/// The digest of the request's body, when a body layer read it.
fn body_digest<B>(request: &Request<B>) -> Option<[u8; 32]> {
    let extensions = request.extensions();
    match extensions.get::<crate::gateway::JsonBodyBytes>() {
        Some(bytes) => Some(keccak256(&bytes.0).0),
        None => extensions
            .get::<crate::gateway::ParsedJson>()
            .map(|parsed| keccak256(serde_json::to_vec(&parsed.0).unwrap_or_default()).0),
    }
}

/// What a sign-in falls back to (its quote) and whether its route re-runs.
#[cfg(feature = "siwx")]
struct SigningIn {
    price: Price,
    extensions: Option<QuoteExtensionMap>,
    rerun: bool,
}

/// A request with a `sign-in-with-x` proof and no payment: the answer its
/// wallet paid for (kept, or the handler run again, uncharged, on a route
/// that opted in), or (any check failing, silently) the normal 402.
#[cfg(feature = "siwx")]
async fn signed_in<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    mut request: Request<ReqBody>,
    signing_in: SigningIn,
) -> Result<Response<X402Body<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    use super::siwx::Entitled;
    let operation = super::siwx::operation(&request_line(&request), body_digest(&request));
    let proof = (request.headers())
        .get(super::siwx::SIGN_IN_WITH_X_HEADER)
        .cloned();
    let entitled = match proof {
        Some(proof) => flow::signed_in_answer(&config, &proof, &operation, signing_in.rerun).await,
        None => None,
    };
    match entitled {
        Some(Entitled::Kept(answer)) => {
            trace_decision!(INFO, "x402", outcome = "signed in");
            payment_outcome("signed_in");
            return Ok(kept_response(&answer));
        }
        Some(Entitled::Rerun(receipt)) => {
            trace_decision!(
                INFO,
                "x402",
                payer = receipt.payer(),
                outcome = "signed in, served again"
            );
            payment_outcome("signed_in");
            request.extensions_mut().insert(receipt.replayed());
            let mut response = inner.call(request).await?;
            // Nothing was settled now.
            response.headers_mut().remove(header::PAYMENT_RESPONSE);
            mark_private(response.headers_mut());
            return Ok(plain(response));
        }
        None => {}
    }
    // No payment header: `prepare` answers with the quote.
    let answer = match prepare(&config, &request, signing_in.price, signing_in.extensions) {
        Err(answer) => answer,
        Ok((payment, _)) => quote_answer(&config, &payment.quote),
    };
    Ok(rejection(answer).map(X402Body::plain))
}

/// `METHOD /path?query`: what kept answers and sign-in operations are bound to.
fn request_line<B>(request: &Request<B>) -> String {
    [request.method().as_str(), " ", path_and_query(request)].concat()
}

fn path_and_query<B>(request: &Request<B>) -> &str {
    request.uri().path_and_query().map_or("/", |pq| pq.as_str())
}

/// `resource.url`: the configured public base, else (only when the caller
/// opted in: the builder refuses otherwise) `http://` + `Host`; then the path and query.
fn resource_url<B>(config: &Config, request: &Request<B>) -> String {
    let path = path_and_query(request);
    match &config.public_base_url {
        Some(base) => [base.as_str(), path].concat(),
        None => {
            let host = request
                .headers()
                .get(http::header::HOST)
                .and_then(|value| value.to_str().ok())
                .filter(|host| !host.is_empty() && !host.contains(['/', ' ', '"']))
                .or_else(|| request.uri().authority().map(|a| a.as_str()))
                .unwrap_or("localhost");
            ["http://", host, path].concat()
        }
    }
}

/// A payment rejection in the route's envelope; 402s also carry the quote
/// again, its `error` naming the reason, so a client can sign afresh.
fn payment_rejection(
    config: &Config,
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
    let mut response = config.reject.render(error, style);
    if response.status() == StatusCode::PAYMENT_REQUIRED {
        let mut quote = quote.clone();
        quote.error = Some(why.to_owned());
        // A client signs in after any 402: each carries a challenge of its own.
        #[cfg(feature = "siwx")]
        if let Some(sign_in) = &config.sign_in {
            sign_in.refresh_challenge(&mut quote);
        }
        write_quote_headers(response.headers_mut(), &quote);
        #[cfg(feature = "mpp")]
        super::mpp::add_challenges(response.headers_mut(), &mpp_challenges(config, &quote));
    }
    response
}

/// The flow's refusal as the HTTP answer.
fn refused(
    config: &Config,
    refusal: &Refusal,
    style: EnvelopeStyle,
    quote: &PaymentRequired,
) -> Response<Bytes> {
    payment_rejection(
        config,
        refusal.code,
        &refusal.why,
        refusal.payer.as_deref(),
        style,
        quote,
    )
}

/// The asynchronous part: the flow admits the payment, the inner service
/// answers, the flow settles on 2xx (a stream when it completes).
async fn pay_and_call<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Box<Payment>,
    via: Via,
) -> Result<Response<X402Body<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
{
    #[cfg(feature = "mpp")]
    let mpp_quote = via.is_mpp().then(|| payment.quote.clone());
    let admitted = flow::admit(&config, payment).await;
    #[cfg(feature = "mpp")]
    if let Some(quote) = &mpp_quote {
        // An MPP credential pays once: a copy is refused, never served again.
        let why = match &admitted {
            Admission::Kept(_) | Admission::Replay(_) => Some("the credential was already used"),
            Admission::Refused(_, refusal)
                if refusal.code.status() == StatusCode::PAYMENT_REQUIRED =>
            {
                Some(refusal.why.as_str())
            }
            _ => None,
        };
        if let Some(why) = why {
            let problem = super::mpp::Problem::VerificationFailed("");
            let answer = mpp_refused(&config, quote, problem, Some(why));
            return Ok(rejection(answer).map(X402Body::plain));
        }
    }
    let serving = match admitted {
        Admission::Serve(serving) => serving,
        Admission::Kept(answer) => return Ok(kept_response(&answer)),
        Admission::Replay(receipt) => {
            let receipt_header = settle_header(&receipt_settlement(&receipt));
            request.extensions_mut().insert(receipt.replayed());
            let mut response = inner.call(request).await?;
            if let Some(value) = receipt_header {
                response
                    .headers_mut()
                    .insert(header::PAYMENT_RESPONSE, value);
            }
            return Ok(plain(response));
        }
        Admission::Resolve(payment, settling) => {
            return Box::pin(resolve(config, inner, request, payment, settling)).await;
        }
        Admission::Refused(payment, refusal) => {
            let answer = refused(&config, &refusal, payment.style, payment.quote.required());
            return Ok(rejection(answer).map(X402Body::plain));
        }
    };
    request.extensions_mut().insert(serving.receipt().clone());
    request.extensions_mut().insert(serving.amount().clone());

    // Dropping `serving` on `?` or on an early return releases the authorization.
    let answering = metrics::Started::now();
    let mut response = inner.call(request).await?;
    answering.observe(metrics::X402_INNER_DURATION_SECONDS);
    if !response.status().is_success() {
        // Not served: not charged.
        serving.unserved(response.status().as_u16()).await;
        return Ok(plain(response));
    }
    mark_private(response.headers_mut());
    // A contract payer's stream is settled before its first byte, as a whole answer is.
    // A contract payer's stream, or one paid with MPP (whose receipt is a
    // header), is settled before its first byte, as a whole answer is.
    if is_event_stream(&response) && !serving.settles_before_streaming() && !via.is_mpp() {
        return Ok(settled_at_stream_end(&config, *serving, response));
    }
    let style = serving.style();
    // The response head is held and its body unpolled until settlement succeeds.
    let (outcome, keeper) = serving.settle().await;
    match outcome {
        Outcome::Settled(settlement, receipt) => {
            let header_value = settle_header(&settlement);
            if let Some(value) = header_value.clone() {
                response
                    .headers_mut()
                    .insert(header::PAYMENT_RESPONSE, value);
            }
            #[cfg(feature = "mpp")]
            if let Via::Mpp { challenge_id } = &via {
                let chain_id = settlement.network.eip155_chain_id().unwrap_or_default();
                let now = config.clock.now_unix_secs();
                let value =
                    super::mpp::receipt(&settlement.transaction, challenge_id, chain_id, now);
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response
                        .headers_mut()
                        .insert(super::mpp::PAYMENT_RECEIPT, value);
                }
            }
            response.extensions_mut().insert(receipt);
            // Paid replay: the answer is kept, so a resend of this request (on
            // any replica) gets it again, uncharged; one of unknown or too large
            // a size is served without being kept.
            let limit = config.answer_limits.max_answer_bytes as u64;
            let fits = http_body::Body::size_hint(response.body())
                .upper()
                .is_some_and(|bytes| bytes <= limit);
            if !keeper.keeps_settled(true) || !fits {
                // Not kept under its id either: the id is free again.
                return Ok(plain(response));
            }
            // Boxed: the paid call's own future stays small (it is moved
            // and allocated on every paid request; this branch is not).
            Ok(Box::pin(keep_settled(&config, response, keeper, header_value, style)).await)
        }
        Outcome::Failed(settlement, receipt) => {
            #[cfg(feature = "mpp")]
            if let Some(quote) = &mpp_quote {
                let why = settlement
                    .error_reason
                    .as_deref()
                    .unwrap_or("settlement failed");
                let problem = super::mpp::Problem::VerificationFailed("");
                let answer = mpp_refused(&config, quote, problem, Some(why));
                return Ok(rejection(answer).map(X402Body::plain));
            }
            Ok(settlement_failed(
                &config,
                ErrorCode::SettlementFailed,
                style,
                &settlement,
                &receipt,
            ))
        }
        Outcome::Unavailable(settlement, receipt) => Ok(settlement_failed(
            &config,
            ErrorCode::PaymentVerificationUnavailable,
            style,
            &settlement,
            &receipt,
        )),
        Outcome::Pending(settlement, receipt) => {
            // Not sent now: kept whole (within its bound) for the resend.
            Box::pin(keep_pending(&config, response, keeper)).await;
            Ok(settlement_pending(&config, style, &settlement, &receipt))
        }
    }
}

/// A settled answer kept for its resend (paid replay), and served.
async fn keep_settled<ResBody, B>(
    config: &Config,
    response: Response<ResBody>,
    keeper: Keeper,
    header_value: Option<HeaderValue>,
    style: EnvelopeStyle,
) -> Response<X402Body<B>>
where
    ResBody: http_body::Body<Data = Bytes>,
{
    let (parts, body) = response.into_parts();
    let Some(body) = collect_within(body, usize::MAX).await else {
        let error = GatewayError::new(ErrorCode::InternalError)
            .with_debug("the paid answer broke off after settlement");
        return rejection(config.reject.render(error, style)).map(X402Body::plain);
    };
    let mut answer =
        KeptAnswer::new(parts.status.as_u16(), keeper.binding(), body).with_headers(&parts.headers);
    if let Some(value) = header_value.as_ref().and_then(|v| v.to_str().ok()) {
        answer = answer.with_payment_response(value);
    }
    let kept = Response::from_parts(parts, answer.body().clone());
    keeper.keep_settled(&answer, true).await;
    rejection(kept).map(X402Body::plain)
}

/// An answer whose settlement is pending, kept whole (within its bound).
async fn keep_pending<ResBody>(config: &Config, response: Response<ResBody>, keeper: Keeper)
where
    ResBody: http_body::Body<Data = Bytes>,
{
    let (parts, body) = response.into_parts();
    let limit = config.answer_limits.max_answer_bytes;
    let answer = collect_within(body, limit).await.map(|body| {
        KeptAnswer::new(parts.status.as_u16(), keeper.binding(), body).with_headers(&parts.headers)
    });
    keeper.keep_pending(answer).await;
}

/// A paid stream, settled when it completes; its receipt is the last event.
fn settled_at_stream_end<ResBody>(
    config: &Arc<Config>,
    serving: Serving,
    response: Response<ResBody>,
) -> Response<X402Body<ResBody>>
where
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
{
    let (parts, body) = response.into_parts();
    let kept_head = (parts.status, parts.headers.clone());
    let limit = config.answer_limits.max_answer_bytes;
    let metered_payer = serving.metered_payer();
    let on_cut = metered_payer.clone().map(|payer| {
        let config = config.clone();
        Box::new(move || config.metered_stream_cut(&payer)) as OnCut
    });
    let config = config.clone();
    let settle = Box::new(
        move |recorded: Option<Bytes>| -> crate::store::BoxFuture<'static, Bytes> {
            Box::pin(async move {
                let (status, headers) = kept_head;
                let (outcome, keeper) = serving.settle().await;
                let kept = |stream: Bytes, keeper: &Keeper| {
                    KeptAnswer::new(status.as_u16(), keeper.binding(), stream)
                        .with_headers(&headers)
                };
                match outcome {
                    Outcome::Pending(settlement, _) => {
                        // The stream went out; it is kept for the resend that learns the outcome.
                        let answer = recorded.map(|stream| kept(stream, &keeper));
                        keeper.keep_pending(answer).await;
                        receipt_event(&codec::encode(&settlement))
                    }
                    Outcome::Settled(settlement, _) => {
                        if let Some(payer) = &metered_payer {
                            // Read to its end: the row of cuts is broken.
                            config.cut_streams.completed(payer);
                        }
                        // Under its id and for its payer's sign-in: the whole
                        // stream and its receipt, or nothing.
                        let event = receipt_event(&codec::encode(&settlement));
                        let Some(stream) = recorded.filter(|_| keeper.keeps_settled(false)) else {
                            return event;
                        };
                        let answer = kept(stream, &keeper).with_appended(&event);
                        keeper.keep_settled(&answer, false).await;
                        event
                    }
                    Outcome::Failed(settlement, _) | Outcome::Unavailable(settlement, _) => {
                        receipt_event(&codec::encode(&settlement))
                    }
                }
            })
        },
    );
    Response::from_parts(parts, X402Body::settling(body, settle, limit, on_cut))
}

/// The resend of a payment whose settlement was pending: landed → the kept
/// answer with its `PAYMENT-RESPONSE`, or, if none was kept, the inner
/// service's answer again, charged once; still pending → 503 again; failed →
/// released.
async fn resolve<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Box<Payment>,
    settling: super::replay::SpentAuthorization,
) -> Result<Response<X402Body<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Send + 'static,
{
    let style = payment.style;
    match flow::resolve(&config, payment, settling).await {
        Resolved::Kept(answer) => Ok(kept_response(&answer)),
        Resolved::ServeAgain(receipt, settlement) => {
            request.extensions_mut().insert(receipt);
            let mut response = inner.call(request).await?;
            if let Some(value) = settle_header(&settlement) {
                response
                    .headers_mut()
                    .insert(header::PAYMENT_RESPONSE, value);
            }
            Ok(plain(response))
        }
        Resolved::Unsettled(Outcome::Pending(settlement, receipt)) => {
            Ok(settlement_pending(&config, style, &settlement, &receipt))
        }
        Resolved::Unsettled(Outcome::Unavailable(settlement, receipt)) => Ok(settlement_failed(
            &config,
            ErrorCode::PaymentVerificationUnavailable,
            style,
            &settlement,
            &receipt,
        )),
        Resolved::Unsettled(
            Outcome::Failed(settlement, receipt) | Outcome::Settled(settlement, receipt),
        ) => Ok(settlement_failed(
            &config,
            ErrorCode::SettlementFailed,
            style,
            &settlement,
            &receipt,
        )),
    }
}

/// A kept answer as the response.
fn kept_response<B>(answer: &KeptAnswer) -> Response<X402Body<B>> {
    rejection(answer.to_response()).map(X402Body::plain)
}

/// The failed settlement, nothing charged: 402 `SETTLEMENT_FAILED`, or 503
/// `PAYMENT_VERIFICATION_UNAVAILABLE` when the facilitator could not take it.
fn settlement_failed<B>(
    config: &Config,
    code: ErrorCode,
    style: EnvelopeStyle,
    settlement: &SettleResponse,
    receipt: &PaymentReceipt,
) -> Response<X402Body<B>> {
    let why = settlement
        .error_reason
        .as_deref()
        .unwrap_or(reason::UNEXPECTED_SETTLE_ERROR);
    let mut error = GatewayError::new(code).with_debug(why);
    if !receipt.payer().is_empty() {
        error = error.with_payer(receipt.payer());
    }
    let mut failed = config.reject.render(error, style);
    if let Some(value) = settle_header(settlement) {
        failed.headers_mut().insert(header::PAYMENT_RESPONSE, value);
    }
    rejection(failed).map(X402Body::plain)
}

/// 503 `PAYMENT_VERIFICATION_UNAVAILABLE` with `Retry-After` for a
/// settlement whose outcome is not known: the claim is kept (the one 503 that
/// may be charged), the answer kept, and the client told to resend the same
/// payment. `PAYMENT-RESPONSE` says `settlement_pending` and names the
/// transaction when one is known.
fn settlement_pending<B>(
    config: &Config,
    style: EnvelopeStyle,
    settlement: &SettleResponse,
    receipt: &PaymentReceipt,
) -> Response<X402Body<B>> {
    let debug = match settlement.transaction.as_str() {
        "" => format!("{SETTLEMENT_PENDING}: resend the same payment for its outcome"),
        transaction => format!(
            "{SETTLEMENT_PENDING}: transaction {transaction} has no receipt yet; resend the same payment for its outcome"
        ),
    };
    let mut error = GatewayError::new(ErrorCode::PaymentVerificationUnavailable).with_debug(&debug);
    if !receipt.payer().is_empty() {
        error = error.with_payer(receipt.payer());
    }
    let mut answer = config.reject.render(error, style);
    if let Some(value) = settle_header(settlement) {
        answer.headers_mut().insert(header::PAYMENT_RESPONSE, value);
    }
    rejection(answer).map(X402Body::plain)
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

/// A paid answer is for its payer only: shared caches must not keep it.
fn mark_private(headers: &mut http::HeaderMap) {
    let value = match headers
        .get(http::header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
    {
        Some(existing) if existing.contains("private") || existing.contains("no-store") => return,
        Some(existing) => [existing, ", private"].concat(),
        None => {
            headers.insert(
                http::header::CACHE_CONTROL,
                HeaderValue::from_static("private"),
            );
            return;
        }
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(http::header::CACHE_CONTROL, value);
    }
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
    use crate::x402::facilitator::FacilitatorRequest;
    use crate::x402::facilitator::{Facilitator, FacilitatorError};
    use crate::x402::server::flow::{EXTENSION_ECHO_MISMATCH, ID_IN_FLIGHT};
    use crate::x402::server::receipt::SettledPayment;
    use crate::x402::wire::types::PaymentPayload;
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
        /// Settlements still to answer pending (no receipt within the wait).
        pending: AtomicUsize,
        /// Settlements still to refuse as unavailable (e.g. a settler without gas).
        unavailable: AtomicUsize,
    }

    impl Facilitator for Arc<Facade> {
        fn verify<'a>(
            &'a self,
            request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<crate::x402::wire::VerifyResponse, FacilitatorError>> {
            // The payer is whoever the authorization names (the facade checks no signature).
            let payer = request.claimed_payer().unwrap_or(PAYER).to_owned();
            let verdict = if self.refuse.load(Ordering::SeqCst) {
                VerifyResponse::invalid(reason::SIGNATURE, Some(payer))
            } else {
                VerifyResponse::valid(payer)
            };
            Box::pin(async move { Ok(verdict) })
        }

        fn settle<'a>(
            &'a self,
            request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
            let network = request.payment_requirements().network.clone();
            let amount = request.payment_requirements().amount;
            let pending = self
                .pending
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if pending {
                return Box::pin(async {
                    Err(FacilitatorError::pending(
                        PENDING_TX,
                        "no receipt within 30 s",
                    ))
                });
            }
            let unavailable = self
                .unavailable
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if unavailable {
                return Box::pin(async {
                    Err(FacilitatorError::unavailable(
                        "the settler holds 0 wei for gas",
                    ))
                });
            }
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
                    extensions: None,
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

    const PENDING_TX: &str = "0x00000000000000000000000000000000000000000000000000000000000feed1";

    /// Answers `x-test-body` (default "answer") with `x-test-type` and `x-test-status`.
    type Inner =
        tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

    fn service(layer: &X402Layer) -> X402<Inner> {
        counted_service(layer, &Arc::default())
    }

    /// [`service`], counting the inner service's calls in `calls`.
    fn counted_service(layer: &X402Layer, calls: &Arc<AtomicUsize>) -> X402<Inner> {
        let calls = calls.clone();
        layer.layer(Inner::new(service_fn(
            move |request: Request<Full<Bytes>>| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
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
                }
            },
        )))
    }

    /// A `PAYMENT-SIGNATURE` for the route's offer with authorization nonce `nonce`.
    fn payment(nonce: u8) -> String {
        payment_signed(nonce, "11")
    }

    /// [`payment`] with the signature's `r` and `s` made of `byte` (hex).
    fn payment_signed(nonce: u8, byte: &str) -> String {
        payment_of(nonce, byte, PAYER, None)
    }

    /// A payment from `from` carrying `extensions`.
    fn payment_of(
        nonce: u8,
        byte: &str,
        from: &str,
        extensions: Option<serde_json::Value>,
    ) -> String {
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
                "signature": format!("0x{}1b", byte.repeat(64)),
                "authorization": {
                                        "from": from, "to": PAY_TO, "value": offer.amount.to_string(),
                    "validAfter": "0", "validBefore": (NOW + 300).to_string(),
                                        "nonce": format!("0x{nonce:064x}"),
                },
            }),
            extensions: extensions.map(|value| match value {
                serde_json::Value::Object(map) => map,
                _ => panic!("extensions are an object"),
            }),
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

    fn settlement_of(response: &Response<X402Body<Full<Bytes>>>) -> SettleResponse {
        codec::decode(response.headers()[header::PAYMENT_RESPONSE].as_bytes()).unwrap()
    }

    #[tokio::test]
    async fn a_pending_settlement_is_503_and_its_resend_gets_the_kept_answer_once_landed() {
        let f = fixture();
        f.facade.pending.store(2, Ordering::SeqCst);
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&f.layer, &calls);
        let first = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(first.headers().contains_key(http::header::RETRY_AFTER));
        let pending = settlement_of(&first);
        assert!(!pending.success);
        assert_eq!(pending.error_reason.as_deref(), Some(SETTLEMENT_PENDING));
        assert_eq!(pending.transaction, PENDING_TX);
        let body = text(first).await;
        assert_eq!(code_of(&body), "PAYMENT_VERIFICATION_UNAVAILABLE");
        assert!(!body.contains("answer"), "the answer is withheld: {body}");
        // Another signature of the same authorization is not this payment.
        let other = svc
            .clone()
            .oneshot(paid(&payment_signed(1, "22"), None))
            .await
            .unwrap();
        assert_eq!(code_of(&text(other).await), "PAYMENT_REPLAY");
        // Still pending on the resend: 503 again, nothing served, nothing hooked.
        let again = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(again.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(f.hooked.lock().unwrap().is_empty());
        // Landed: the kept answer, with its receipt, and the upstream called once.
        for _ in 0..2 {
            let landed = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
            assert_eq!(landed.status(), 200);
            assert_eq!(landed.headers()["content-type"], "application/json");
            assert!(settlement_of(&landed).success);
            assert_eq!(text(landed).await, "answer");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
        assert_eq!(f.hooked.lock().unwrap().len(), 1);
        let other = svc
            .oneshot(paid(&payment_signed(1, "22"), None))
            .await
            .unwrap();
        assert_eq!(code_of(&text(other).await), "PAYMENT_REPLAY");
    }

    #[tokio::test]
    async fn a_settlement_the_facilitator_cannot_take_is_503_released_and_the_same_payment_pays() {
        let f = fixture();
        f.facade.unavailable.store(1, Ordering::SeqCst);
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&f.layer, &calls);
        let refused = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        // The operator's fault, not the payer's: 503, not 402 SETTLEMENT_FAILED.
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = text(refused).await;
        assert_eq!(code_of(&body), "PAYMENT_VERIFICATION_UNAVAILABLE");
        assert!(body.contains("0 wei"), "{body}");
        assert!(!body.contains("answer"), "nothing served: {body}");
        assert!(f.hooked.lock().unwrap().is_empty());
        // Released: the same signed payment pays once the settler can.
        let paid_later = svc.oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(paid_later.status(), 200);
        assert_eq!(text(paid_later).await, "answer");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
        assert_eq!(f.hooked.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_pending_settlement_whose_facilitator_cannot_answer_stays_pending() {
        let f = fixture();
        f.facade.pending.store(1, Ordering::SeqCst);
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&f.layer, &calls);
        let first = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
        // The node is down on the resend: the transfer may still land, so the
        // claim, the kept answer and the transaction stay.
        f.facade.unavailable.store(1, Ordering::SeqCst);
        let again = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(again.status(), StatusCode::SERVICE_UNAVAILABLE);
        let pending = settlement_of(&again);
        assert_eq!(pending.error_reason.as_deref(), Some(SETTLEMENT_PENDING));
        assert_eq!(pending.transaction, PENDING_TX);
        let other = svc
            .clone()
            .oneshot(paid(&payment_signed(1, "22"), None))
            .await
            .unwrap();
        assert_eq!(code_of(&text(other).await), "PAYMENT_REPLAY");
        let landed = svc.oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(landed.status(), 200);
        assert_eq!(text(landed).await, "answer");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_pending_settlement_that_then_fails_is_released_and_paid_afresh() {
        let f = fixture();
        f.facade.pending.store(1, Ordering::SeqCst);
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&f.layer, &calls);
        let first = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
        // The old transfer can no longer land: the facilitator refuses.
        f.facade.fail_settle.store(true, Ordering::SeqCst);
        let failed = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(code_of(&text(failed).await), "SETTLEMENT_FAILED");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Released, its kept answer forgotten: the same signature pays afresh.
        f.facade.fail_settle.store(false, Ordering::SeqCst);
        let paid_again = svc.oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(paid_again.status(), 200);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
        assert_eq!(f.hooked.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_resend_that_goes_away_while_settling_keeps_the_settling_record() {
        let f = fixture();
        f.facade.pending.store(1, Ordering::SeqCst);
        let svc = service(&f.layer);
        svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        // The resend's future is dropped before it is polled to the end.
        let resend = svc.clone().oneshot(paid(&payment(1), None));
        drop(resend);
        let landed = svc.oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(landed.status(), 200);
        assert_eq!(f.facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_pending_stream_ends_with_a_pending_receipt_and_its_resend_gets_the_stream() {
        let f = fixture();
        f.facade.pending.store(1, Ordering::SeqCst);
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&f.layer, &calls);
        let body = text(
            svc.clone()
                .oneshot(paid(&payment(1), Some(COMPLETE)))
                .await
                .unwrap(),
        )
        .await;
        let (answer, receipt) = body.split_once("event: payment-response\ndata: ").unwrap();
        assert_eq!(answer, COMPLETE);
        let pending: SettleResponse = codec::decode(receipt.trim_end().as_bytes()).unwrap();
        assert_eq!(pending.error_reason.as_deref(), Some(SETTLEMENT_PENDING));
        assert_eq!(pending.transaction, PENDING_TX);
        assert!(f.hooked.lock().unwrap().is_empty());
        // The resend: the kept stream, now ending with the settled receipt.
        let resend = svc
            .oneshot(paid(&payment(1), Some(COMPLETE)))
            .await
            .unwrap();
        assert_eq!(resend.status(), 200);
        assert_eq!(resend.headers()["content-type"], "text/event-stream");
        let body = text(resend).await;
        let (answer, receipt) = body.split_once("event: payment-response\ndata: ").unwrap();
        assert_eq!(answer, COMPLETE);
        let settled: SettleResponse = codec::decode(receipt.trim_end().as_bytes()).unwrap();
        assert!(settled.success);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(f.hooked.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_answer_past_its_bound_is_not_kept_and_the_landed_resend_is_served_again() {
        let facade = Arc::new(Facade::default());
        facade.pending.store(1, Ordering::SeqCst);
        let layer = chat_layer(&facade)
            .with_answer_limits(crate::x402::server::AnswerLimits {
                max_answer_bytes: 3,
                retention_secs: 60,
            })
            .build()
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&layer, &calls);
        let first = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
        let landed = svc.oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(landed.status(), 200);
        assert!(settlement_of(&landed).success);
        assert_eq!(text(landed).await, "answer");
        // Charged once, served twice: nothing was kept to answer with.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn paid_replay_answers_the_same_request_from_the_answer_store_and_reruns_another() {
        let facade = Arc::new(Facade::default());
        let layer = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /v1/chat/completions", "0.002")
                    .unwrap()
                    .with_usd("GET /v1/jobs/7", "0.002")
                    .unwrap(),
            )
            .with_facilitator(facade.clone())
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
            .with_paid_replay(true)
            .build()
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&layer, &calls);
        let first = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(first.status(), 200);
        let settled = settlement_of(&first);
        assert_eq!(text(first).await, "answer");
        // The lost answer, recovered: the same request gets the kept answer.
        let again = svc.clone().oneshot(paid(&payment(1), None)).await.unwrap();
        assert_eq!(again.status(), 200);
        assert_eq!(settlement_of(&again).transaction, settled.transaction);
        assert_eq!(text(again).await, "answer");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Another request paid by the same payment (a poll): run again, uncharged.
        let poll = Request::get("http://gw.test/v1/jobs/7")
            .header(header::PAYMENT_SIGNATURE, payment(1))
            .header("x-test-body", "progress")
            .body(Full::default())
            .unwrap();
        let polled = svc.oneshot(poll).await.unwrap();
        assert_eq!(polled.status(), 200);
        assert_eq!(text(polled).await, "progress");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    const ID: &str = "pay_7d5d747be160e280504c099d984bcfe0";
    const OTHER_PAYER: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";

    /// A payment under the payment identifier `id`, echoing the declaration.
    fn with_id(nonce: u8, id: &str) -> String {
        with_id_from(nonce, id, PAYER)
    }

    fn with_id_from(nonce: u8, id: &str, from: &str) -> String {
        let extensions = json!({"payment-identifier": {"info": {"required": false, "id": id}}});
        payment_of(nonce, "11", from, Some(extensions))
    }

    fn id_layer(
        facade: &Arc<Facade>,
        mode: crate::x402::server::payment_id::PaymentIdentifier,
    ) -> X402Layer {
        chat_layer(facade)
            .with_payment_identifier(mode)
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn every_402_declares_the_payment_identifier_when_on() {
        use crate::x402::server::payment_id::PaymentIdentifier;
        let facade = Arc::new(Facade::default());
        for (mode, required) in [
            (PaymentIdentifier::Optional, Some(false)),
            (PaymentIdentifier::Required, Some(true)),
            (PaymentIdentifier::Off, None),
        ] {
            let quote = service(&id_layer(&facade, mode))
                .oneshot(
                    Request::post("http://gw.test/v1/chat/completions")
                        .body(Full::default())
                        .unwrap(),
                )
                .await
                .unwrap();
            let required_header: PaymentRequired =
                codec::decode(quote.headers()[header::PAYMENT_REQUIRED].as_bytes()).unwrap();
            let declared = required_header
                .extensions
                .as_ref()
                .and_then(|extensions| extensions.get("payment-identifier"));
            assert_eq!(
                declared.and_then(|entry| entry["info"]["required"].as_bool()),
                required
            );
        }
    }

    #[tokio::test]
    async fn an_id_pays_once_and_the_identical_or_a_fresh_payment_gets_the_stored_answer() {
        let facade = Arc::new(Facade::default());
        let layer = id_layer(
            &facade,
            crate::x402::server::payment_id::PaymentIdentifier::Optional,
        );
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&layer, &calls);
        let first = svc
            .clone()
            .oneshot(paid(&with_id(1, ID), None))
            .await
            .unwrap();
        assert_eq!(first.status(), 200);
        let receipt = first.headers()[header::PAYMENT_RESPONSE].clone();
        assert_eq!(text(first).await, "answer");
        // The identical payment again, and a fresh one for the same request.
        for payment in [with_id(1, ID), with_id(2, ID)] {
            let again = svc.clone().oneshot(paid(&payment, None)).await.unwrap();
            assert_eq!(again.status(), 200);
            assert_eq!(again.headers()[header::PAYMENT_RESPONSE], receipt);
            assert_eq!(again.headers()["content-type"], "application/json");
            assert_eq!(text(again).await, "answer");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
        // The fresh authorization was never settled: its claim was released.
        let unused = svc.oneshot(paid(&payment(2), None)).await.unwrap();
        assert_eq!(unused.status(), 200);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_id_reused_for_another_request_or_payer_is_409_and_charges_nothing() {
        let facade = Arc::new(Facade::default());
        let layer = id_layer(
            &facade,
            crate::x402::server::payment_id::PaymentIdentifier::Optional,
        );
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&layer, &calls);
        assert_eq!(
            svc.clone()
                .oneshot(paid(&with_id(1, ID), None))
                .await
                .unwrap()
                .status(),
            200
        );
        // Another request (another query) under the same id.
        let other_request = Request::post("http://gw.test/v1/chat/completions?x=1")
            .header(header::PAYMENT_SIGNATURE, with_id(2, ID))
            .body(Full::default())
            .unwrap();
        let conflict = svc.clone().oneshot(other_request).await.unwrap();
        assert_eq!(conflict.status(), StatusCode::CONFLICT);
        assert_eq!(
            code_of(&text(conflict).await),
            "PAYMENT_IDENTIFIER_CONFLICT"
        );
        // Another body (as the body layer read it) under the same id.
        let mut other_body = paid(&with_id(4, ID), None);
        other_body
            .extensions_mut()
            .insert(crate::gateway::JsonBodyBytes(Bytes::from_static(b"{}")));
        let conflict = svc.clone().oneshot(other_body).await.unwrap();
        assert_eq!(conflict.status(), StatusCode::CONFLICT);
        // Another payer for the same request.
        let stranger = svc
            .clone()
            .oneshot(paid(&with_id_from(3, ID, OTHER_PAYER), None))
            .await
            .unwrap();
        assert_eq!(stranger.status(), StatusCode::CONFLICT);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn malformed_or_missing_required_ids_are_400_and_a_changed_echo_is_402() {
        use crate::x402::server::payment_id::PaymentIdentifier;
        let facade = Arc::new(Facade::default());
        let optional = service(&id_layer(&facade, PaymentIdentifier::Optional));
        let malformed = optional
            .clone()
            .oneshot(paid(&with_id(1, "too-short"), None))
            .await
            .unwrap();
        assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            code_of(&text(malformed).await),
            "PAYMENT_IDENTIFIER_INVALID"
        );
        let required = service(&id_layer(&facade, PaymentIdentifier::Required));
        let missing = required.oneshot(paid(&payment(2), None)).await.unwrap();
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
        assert_eq!(code_of(&text(missing).await), "PAYMENT_IDENTIFIER_INVALID");
        // The echo says `required: true` where the 402 said false.
        let changed = json!({"payment-identifier": {"info": {"required": true, "id": ID}}});
        let echo = optional
            .oneshot(paid(&payment_of(3, "11", PAYER, Some(changed)), None))
            .await
            .unwrap();
        assert_eq!(echo.status(), StatusCode::PAYMENT_REQUIRED);
        let body = text(echo).await;
        assert_eq!(code_of(&body), "PAYMENT_INVALID");
        assert!(body.contains(EXTENSION_ECHO_MISMATCH), "{body}");
        assert_eq!(facade.settled.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_id_in_flight_is_503_until_its_pending_settlement_lands() {
        let facade = Arc::new(Facade::default());
        facade.pending.store(1, Ordering::SeqCst);
        let layer = id_layer(
            &facade,
            crate::x402::server::payment_id::PaymentIdentifier::Optional,
        );
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&layer, &calls);
        let pending = svc
            .clone()
            .oneshot(paid(&with_id(1, ID), None))
            .await
            .unwrap();
        assert_eq!(pending.status(), StatusCode::SERVICE_UNAVAILABLE);
        // A fresh payment under the id while the first is in flight: 503, nothing called.
        let fresh = svc
            .clone()
            .oneshot(paid(&with_id(2, ID), None))
            .await
            .unwrap();
        assert_eq!(fresh.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(fresh.headers().contains_key(http::header::RETRY_AFTER));
        assert!(text(fresh).await.contains(ID_IN_FLIGHT));
        // The very payment resent: its settlement landed, the kept answer.
        let landed = svc
            .clone()
            .oneshot(paid(&with_id(1, ID), None))
            .await
            .unwrap();
        assert_eq!(landed.status(), 200);
        assert_eq!(text(landed).await, "answer");
        // Now kept under the id: the fresh payment gets it too.
        let fresh = svc.oneshot(paid(&with_id(2, ID), None)).await.unwrap();
        assert_eq!(fresh.status(), 200);
        assert_eq!(text(fresh).await, "answer");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_unsettled_answer_frees_its_id_and_a_stream_is_kept_whole_under_it() {
        let facade = Arc::new(Facade::default());
        let layer = id_layer(
            &facade,
            crate::x402::server::payment_id::PaymentIdentifier::Optional,
        );
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = counted_service(&layer, &calls);
        let mut failing = paid(&with_id(1, ID), None);
        failing
            .headers_mut()
            .insert("x-test-status", HeaderValue::from_static("503"));
        assert_eq!(svc.clone().oneshot(failing).await.unwrap().status(), 503);
        // The id is free again; a stream under it is kept whole with its receipt.
        let stream = svc
            .clone()
            .oneshot(paid(&with_id(1, ID), Some(COMPLETE)))
            .await
            .unwrap();
        let first = text(stream).await;
        assert!(first.contains("event: payment-response"));
        let again = svc
            .oneshot(paid(&with_id(2, ID), Some(COMPLETE)))
            .await
            .unwrap();
        assert_eq!(again.headers()["content-type"], "text/event-stream");
        assert_eq!(text(again).await, first);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_very_payment_under_its_id_polls_another_request_without_a_conflict() {
        let facade = Arc::new(Facade::default());
        let layer = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /v1/chat/completions", "0.002")
                    .unwrap()
                    .with_usd("GET /v1/jobs/7", "0.002")
                    .unwrap(),
            )
            .with_facilitator(facade.clone())
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
            .with_paid_replay(true)
            .with_payment_identifier(crate::x402::server::payment_id::PaymentIdentifier::Optional)
            .build()
            .unwrap();
        let svc = service(&layer);
        let paid_job = svc
            .clone()
            .oneshot(paid(&with_id(1, ID), None))
            .await
            .unwrap();
        assert_eq!(paid_job.status(), 200);
        let poll = Request::get("http://gw.test/v1/jobs/7")
            .header(header::PAYMENT_SIGNATURE, with_id(1, ID))
            .header("x-test-body", "progress")
            .body(Full::default())
            .unwrap();
        let polled = svc.oneshot(poll).await.unwrap();
        assert_eq!(polled.status(), 200);
        assert_eq!(text(polled).await, "progress");
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }
}

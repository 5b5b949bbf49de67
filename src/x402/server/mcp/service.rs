//! [`X402Mcp`], the MCP front of the payment flow: a `tools/call` and its
//! `_meta` payment in, the tool result and its settlement out. The flow
//! itself is [`flow`](crate::x402::server::flow)'s.

use std::task::{Context, Poll};

use alloy_primitives::keccak256;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use serde_json::Value;
use tower_service::Service;

use super::future::ResponseFuture;
use super::layer::{ToolPricing, X402McpLayer};
use super::rpc::{self, Answer, Read, ToolCall};
use crate::body::{ReadError, ResponseBody, read_within, rejection};
use crate::envelope::{EnvelopeStyle, ErrorCode};
use crate::metrics;
use crate::x402::facilitator::reason;
use crate::x402::server::flow::{
    self, Admission, Outcome, Paying, Payment, Refusal, Resolved, SETTLEMENT_PENDING, Serving,
    collect_within, payment_outcome, receipt_settlement,
};
use crate::x402::server::quote::Quote;
use crate::x402::server::{KeptAnswer, Price, X402Layer};
use crate::x402::wire::types::{PaymentRequired, ResourceInfo, SettleResponse};
use crate::x402::wire::{PaymentHeader, codec};

/// The request id header handed to the settlement hook.
const X_REQUEST_ID: &str = "x-request-id";

/// x402 payment for an MCP service's tools; built by [`X402McpLayer`].
///
/// See the [module docs](super).
#[derive(Clone, Debug)]
pub struct X402Mcp<S> {
    inner: S,
    layer: X402McpLayer,
}

impl<S> X402Mcp<S> {
    /// Wraps `inner`; same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: X402McpLayer) -> Self {
        Self { inner, layer }
    }

    define_inner_service_accessors!();
}

impl X402Mcp<()> {
    /// The MCP front of `layer`'s payment flow ([`X402McpLayer::new`]).
    pub fn layer(layer: &X402Layer, pricing: impl ToolPricing) -> X402McpLayer {
        X402McpLayer::new(layer, pricing)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for X402Mcp<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: std::error::Error + Send + Sync + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // A GET (the server's SSE stream) or DELETE (a session's end) calls no tool.
        if request.method() != Method::POST {
            return ResponseFuture::passthrough(self.inner.call(request));
        }
        // Move the service that was polled ready into the future; keep a fresh clone.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::read(Box::pin(read_then_call(inner, self.layer.clone(), request)))
    }
}

/// What the inner service is called with: the request head and a body.
struct Call<S> {
    inner: S,
    parts: http::request::Parts,
}

impl<S> Call<S> {
    async fn run<ReqBody, ResBody>(self, body: Bytes) -> Result<Response<ResBody>, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
        ReqBody: From<Bytes>,
    {
        let Self {
            mut inner,
            mut parts,
        } = self;
        // The body may have changed (a payment taken out of it).
        parts.headers.remove(http::header::CONTENT_LENGTH);
        inner
            .call(Request::from_parts(parts, ReqBody::from(body)))
            .await
    }
}

/// Reads the body (bounded); too large or broken, a JSON-RPC error.
async fn read_then_call<S, ReqBody, ResBody>(
    inner: S,
    layer: X402McpLayer,
    request: Request<ReqBody>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: Body + From<Bytes>,
    ReqBody::Error: std::error::Error + Send + Sync + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    let (parts, body) = request.into_parts();
    let (status, code, why) = match read_within(body, layer.max_body_bytes).await {
        Ok(bytes) => return Box::pin(route(layer, Call { inner, parts }, bytes)).await,
        Err(ReadError::TooLarge) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            rpc::INVALID_REQUEST,
            "Invalid Request: the body is too large",
        ),
        Err(ReadError::Unreadable) => (
            StatusCode::BAD_REQUEST,
            rpc::PARSE_ERROR,
            "Parse error: the body could not be read",
        ),
    };
    Ok(rejection(rpc::error(&Value::Null, status, code, why)))
}

/// A read body: a `tools/call` of a priced tool goes through the payment
/// flow, anything else to the inner service as it came.
async fn route<S, ReqBody, ResBody>(
    layer: X402McpLayer,
    call: Call<S>,
    bytes: Bytes,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: From<Bytes>,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    let tool_call = match rpc::read(&bytes) {
        Read::Call(tool_call) => tool_call,
        Read::Other => return Ok(call.run(bytes).await?.map(ResponseBody::inner)),
        Read::Refused(answer) => return Ok(rejection(answer)),
    };
    let price = match layer.pricing.price(&tool_call.name, &tool_call.arguments) {
        Ok(Price::Free) => return Ok(call.run(bytes).await?.map(ResponseBody::inner)),
        Ok(price) => price,
        Err(refusal) => {
            let error = refusal.error();
            let result = rpc::tool_error(error.code(), error.message());
            return Ok(rejection(rpc::result(&tool_call.id, result)));
        }
    };
    match quote(&layer, &tool_call, price) {
        Ok(quote) => Box::pin(pay_and_call(layer, call, *tool_call, quote)).await,
        Err(result) => Ok(rejection(rpc::result(&tool_call.id, result))),
    }
}

/// The tool's quote, cached under its `mcp://tool/<name>`; `Err` is the
/// tool result to answer.
fn quote(
    layer: &X402McpLayer,
    tool_call: &ToolCall,
    price: Price,
) -> Result<std::sync::Arc<Quote>, Value> {
    let config = &layer.config;
    let internal = |why: &str| rpc::tool_error(ErrorCode::InternalError, why);
    // The one place the configured fee meets the price (`Price::total`).
    let total = price
        .total(config.flat_fee)
        .ok_or_else(|| internal("price overflow"))?;
    let extensions = layer.pricing.extensions(&tool_call.name, &price);
    let url = rpc::tool_resource_url(&tool_call.name);
    let describe = |url| ResourceInfo {
        url,
        description: ["Tool: ", &tool_call.name].concat(),
        mime_type: "application/json".into(),
    };
    (config.quotes)
        .quote(
            &config.options,
            total,
            extensions,
            &url,
            || url.clone(),
            describe,
        )
        .ok_or_else(|| internal("price is not a whole number of the asset's units"))
}

/// The payment flow of one priced tool call: the PaymentRequired result
/// when unpaid; else admitted, served, and settled after a successful result.
async fn pay_and_call<S, ReqBody, ResBody>(
    layer: X402McpLayer,
    mut call: Call<S>,
    tool_call: ToolCall,
    quote: std::sync::Arc<Quote>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: From<Bytes>,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    let config = &layer.config;
    let id = &tool_call.id;
    let answer = |result: Value| Ok(rejection(rpc::result(id, result)));
    let refuse = |refusal: &Refusal| answer(refused(quote.required(), refusal));
    let Some(sent) = &tool_call.payment else {
        trace_decision!(
            DEBUG,
            "x402",
            tool = tool_call.name.as_str(),
            outcome = "quoted"
        );
        payment_outcome("quoted");
        return answer(rpc::payment_required(
            quote.required(),
            rpc::PAYMENT_REQUIRED_ERROR,
            None,
        ));
    };
    // The payment is an object here, not the header's base64: read as the
    // header's JSON would be, its serialisation standing for the header.
    let payload = match sent {
        Value::Object(_) => serde_json::from_value::<PaymentHeader>(sent.clone())
            .map_err(|_| reason::INVALID_PAYLOAD),
        _ => Err("payment_not_an_object"),
    };
    let payload = match payload {
        Ok(payload) => payload,
        Err(why) => return refuse(&invalid(why)),
    };
    let sent = serde_json::to_vec(sent).unwrap_or_default();
    let digest = || Some(keccak256(serde_json::to_vec(&tool_call.arguments).unwrap_or_default()).0);
    let paying = Paying {
        request_line: ["tools/call ", &tool_call.name].concat(),
        body_digest: &digest,
        style: EnvelopeStyle::default(),
        request_id: (call.parts.headers.get(X_REQUEST_ID))
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        sent: &sent,
    };
    let payment = match Payment::admit_header(config, quote.clone(), payload, paying) {
        Ok(payment) => payment,
        Err(refusal) => return refuse(&refusal),
    };
    let forwarded = tool_call.forwarded();
    let serving = match flow::admit(config, payment).await {
        Admission::Serve(serving) => serving,
        Admission::Kept(kept) => return Ok(kept_answer(&kept, id)),
        Admission::Replay(receipt) => {
            let settlement = receipt_settlement(&receipt);
            call.parts.extensions.insert(receipt.replayed());
            return again(&layer, call, forwarded, id, &settlement).await;
        }
        Admission::Resolve(payment, settling) => {
            return match flow::resolve(config, payment, settling).await {
                Resolved::Kept(kept) => Ok(kept_answer(&kept, id)),
                Resolved::ServeAgain(receipt, settlement) => {
                    call.parts.extensions.insert(receipt);
                    again(&layer, call, forwarded, id, &settlement).await
                }
                Resolved::Unsettled(outcome) => answer(unsettled(quote.required(), outcome)),
            };
        }
        Admission::Refused(_, refusal) => return refuse(&refusal),
    };
    call.parts.extensions.insert(serving.receipt().clone());
    call.parts.extensions.insert(serving.amount().clone());
    // Dropping `serving` on `?` or on an early return releases the authorization.
    let answering = metrics::Started::now();
    let response = call.run(forwarded).await?;
    answering.observe(metrics::X402_INNER_DURATION_SECONDS);
    let (head, read) = match read_answer(&layer, response, id).await {
        Ok(read) => read,
        Err(unserved) => {
            serving.unserved(unserved.status().as_u16()).await;
            return Ok(unserved);
        }
    };
    Ok(settle(&layer, *serving, quote.required(), id, head, read).await)
}

/// The inner service's answer to the call, read whole (bounded), with its
/// head; `Err` is the answer as it came (not served: a JSON-RPC or tool
/// error, a failing status) or the error answered in its place.
async fn read_answer<ResBody>(
    layer: &X402McpLayer,
    response: Response<ResBody>,
    id: &Value,
) -> Result<(http::response::Parts, Answer), Response<ResponseBody<ResBody>>>
where
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    if !response.status().is_success() {
        return Err(response.map(ResponseBody::inner));
    }
    let (head, body) = response.into_parts();
    let event_stream = rpc::is_event_stream(&head.headers);
    let Some(bytes) = collect_within(body, layer.max_answer_bytes).await else {
        let why = "Internal error: the tool's answer could not be read whole";
        let error = rpc::error(id, StatusCode::OK, rpc::INTERNAL_ERROR, why);
        return Err(rejection(error));
    };
    match Answer::read(event_stream, &bytes, Some(id)) {
        Some(read) if !read.is_error() => Ok((head, read)),
        _ => Err(Response::from_parts(head, ResponseBody::rejection(bytes))),
    }
}

/// Settles a served call: the answer with its settlement, or (not settled)
/// the PaymentRequired-shaped result, the tool's output withheld.
async fn settle<B>(
    layer: &X402McpLayer,
    serving: Serving,
    required: &PaymentRequired,
    id: &Value,
    head: http::response::Parts,
    read: Answer,
) -> Response<ResponseBody<B>> {
    let config = &layer.config;
    let (outcome, keeper) = serving.settle().await;
    let settlement = match outcome {
        Outcome::Settled(settlement, _) => settlement,
        Outcome::Pending(..) => {
            // Not sent now: kept whole (within its bound) for the resend.
            let answer = read.into_response();
            let fits = answer.body().len() <= config.answer_limits.max_answer_bytes;
            let kept = fits.then(|| {
                KeptAnswer::new(200, keeper.binding(), answer.body().clone())
                    .with_headers(answer.headers())
            });
            keeper.keep_pending(kept).await;
            return rejection(rpc::result(id, unsettled(required, outcome)));
        }
        unsettled_outcome => {
            return rejection(rpc::result(id, unsettled(required, unsettled_outcome)));
        }
    };
    let mut answer = read.with_payment_response(&settlement).into_response();
    let head_headers = head.headers;
    for (name, value) in &head_headers {
        // The inner head but for what the rewritten body sets.
        if name != http::header::CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
            answer.headers_mut().append(name, value.clone());
        }
    }
    if keeper.keeps_settled(true) && answer.body().len() <= config.answer_limits.max_answer_bytes {
        let kept = KeptAnswer::new(200, keeper.binding(), answer.body().clone())
            .with_headers(answer.headers())
            .with_payment_response(codec::encode(&settlement));
        keeper.keep_settled(&kept, true).await;
    }
    rejection(answer)
}

/// A call served again, uncharged (paid replay, or a landed settlement
/// whose answer was not kept), with the settlement it was paid by.
async fn again<S, ReqBody, ResBody>(
    layer: &X402McpLayer,
    call: Call<S>,
    forwarded: Bytes,
    id: &Value,
    settlement: &SettleResponse,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: From<Bytes>,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    let response = call.run(forwarded).await?;
    Ok(match read_answer(layer, response, id).await {
        Ok((_, read)) => rejection(read.with_payment_response(settlement).into_response()),
        Err(answer) => answer,
    })
}

/// A kept answer (a resend of a paid call), answering this call's `id`,
/// with its settlement.
fn kept_answer<B>(kept: &KeptAnswer, id: &Value) -> Response<ResponseBody<B>> {
    let Some(mut read) = Answer::read(kept.is_event_stream(), kept.body(), None) else {
        return rejection(kept.to_response());
    };
    let settlement = (kept.payment_response())
        .and_then(|value| codec::decode::<SettleResponse>(value.as_bytes()).ok());
    if let Some(settlement) = settlement {
        read = read.with_payment_response(&settlement);
    }
    rejection(read.with_id(id).into_response())
}

/// A payment that is not one: refused before the flow reads it.
fn invalid(why: &str) -> Refusal {
    Refusal {
        code: ErrorCode::PaymentInvalid,
        why: why.to_owned(),
        payer: None,
    }
}

/// The flow's refusal as the tool result: the PaymentRequired again, its
/// `error` the reason and `code` the REST code, so a client can sign afresh.
fn refused(required: &PaymentRequired, refusal: &Refusal) -> Value {
    trace_decision!(
        INFO,
        "x402",
        payer = refusal.payer.as_deref(),
        outcome = "refused",
        error = refusal.code.as_str(),
        reason = refusal.why.as_str(),
    );
    payment_outcome("refused");
    metrics::count(
        metrics::X402_REFUSALS_TOTAL,
        [("code", refusal.code.as_str())],
    );
    rpc::payment_required(required, &refusal.why, Some(refusal.code))
}

/// A settlement that did not land, as the tool result (its output
/// withheld): failed (`SETTLEMENT_FAILED`), the facilitator unavailable, or
/// pending (`PAYMENT_VERIFICATION_UNAVAILABLE`: resend the same payment).
fn unsettled(required: &PaymentRequired, outcome: Outcome) -> Value {
    let (code, settlement) = match outcome {
        Outcome::Pending(settlement, _) => {
            let why = format!("{SETTLEMENT_PENDING}: resend the same payment for its outcome");
            let mut result = rpc::payment_required(
                required,
                &why,
                Some(ErrorCode::PaymentVerificationUnavailable),
            );
            attach_settlement(&mut result, &settlement);
            return result;
        }
        Outcome::Unavailable(settlement, _) => {
            (ErrorCode::PaymentVerificationUnavailable, settlement)
        }
        Outcome::Failed(settlement, _) | Outcome::Settled(settlement, _) => {
            (ErrorCode::SettlementFailed, settlement)
        }
    };
    let why = (settlement.error_reason.as_deref()).unwrap_or(reason::UNEXPECTED_SETTLE_ERROR);
    let error = ["Payment settlement failed: ", why].concat();
    let mut result = rpc::payment_required(required, &error, Some(code));
    attach_settlement(&mut result, &settlement);
    result
}

/// The settlement that did not land, in the result's `_meta`, as a REST
/// answer carries it in `PAYMENT-RESPONSE`.
fn attach_settlement(result: &mut Value, settlement: &SettleResponse) {
    if let (Some(result), Ok(settlement)) =
        (result.as_object_mut(), serde_json::to_value(settlement))
    {
        let meta = serde_json::json!({ rpc::PAYMENT_RESPONSE_META: settlement });
        result.insert("_meta".into(), meta);
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use http_body_util::{BodyExt, Full};
    use serde_json::json;
    use tower::{Layer, ServiceExt, service_fn};

    use super::*;
    use crate::client::payer::Payer;
    use crate::clock::FakeClock;
    use crate::store::BoxFuture;
    use crate::x402::facilitator::{
        DevLedger, Facilitator, FacilitatorError, FacilitatorRequest, LocalEvmFacilitator,
    };
    use crate::x402::server::{PaymentOption, PaymentReceipt, PriceRefusal};
    use crate::x402::wire::{SupportedResponse, VerifyResponse};

    const NOW: u64 = 1_750_000_000;
    const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    /// The development ledger's facilitator (real signatures, funded dev
    /// accounts), told to fail or leave pending the next settlement.
    struct Facade {
        ledger: LocalEvmFacilitator,
        fail_settle: AtomicBool,
        /// The next settlement's outcome is not known yet.
        pending: AtomicBool,
        settled: AtomicUsize,
    }

    impl Default for Facade {
        fn default() -> Self {
            let clock = Arc::new(FakeClock::at_unix_secs(NOW));
            Self {
                ledger: LocalEvmFacilitator::new(Arc::new(DevLedger::new()), clock),
                fail_settle: AtomicBool::default(),
                pending: AtomicBool::default(),
                settled: AtomicUsize::default(),
            }
        }
    }

    impl Facilitator for Facade {
        fn verify<'a>(
            &'a self,
            request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
            self.ledger.verify(request)
        }

        fn settle<'a>(
            &'a self,
            request: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
            if self.pending.swap(false, Ordering::SeqCst) {
                return Box::pin(async {
                    Err(FacilitatorError::pending("0x0f", "no receipt yet"))
                });
            }
            if self.fail_settle.load(Ordering::SeqCst) {
                let network = request.payment_requirements().network.clone();
                let failed =
                    SettleResponse::failure(network, "invalid_exact_evm_transaction_failed", None);
                return Box::pin(async move { Ok(failed) });
            }
            self.settled.fetch_add(1, Ordering::SeqCst);
            self.ledger.settle(request)
        }

        fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
            self.ledger.supported()
        }
    }

    /// `echo` is free, `chat` costs $0.002 (+ the fee), `broken` is unpriceable.
    fn pricing(tool: &str, _arguments: &Value) -> Result<Price, PriceRefusal> {
        match tool {
            "chat" => Ok(Price::Usd("0.002".parse().unwrap())),
            "broken" => Err(PriceRefusal::missing("the model")),
            _ => Ok(Price::Free),
        }
    }

    fn layer(facade: &Arc<Facade>) -> X402McpLayer {
        // Neither a request pricing nor a public base URL: the tools name their own.
        X402Layer::builder()
            .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
            .with_shared_facilitator(facade.clone())
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
            .build_mcp(pricing)
            .unwrap()
    }

    /// What the tool saw: each body and whether a receipt came with it.
    #[derive(Default)]
    struct Seen {
        bodies: Mutex<Vec<Value>>,
        receipts: AtomicUsize,
    }

    type Inner =
        tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

    /// A tool server: answers the call with its arguments' `mode`: `error`
    /// (an `isError` result), `sse` (a progress event, then the result, as
    /// SSE), else a text result.
    fn service(layer: &X402McpLayer, seen: &Arc<Seen>) -> X402Mcp<Inner> {
        let seen = seen.clone();
        layer.layer(Inner::new(service_fn(move |request: Request<Full<Bytes>>| {
            let seen = seen.clone();
            async move {
                if request.extensions().get::<PaymentReceipt>().is_some() {
                    seen.receipts.fetch_add(1, Ordering::SeqCst);
                }
                let body = request.into_body().collect().await.unwrap().to_bytes();
                // A GET: the server's stream, empty here.
                let message: Value = serde_json::from_slice(&body).unwrap_or_default();
                seen.bodies.lock().unwrap().push(message.clone());
                let id = message["id"].clone();
                let mode = message["params"]["arguments"]["mode"].as_str().unwrap_or("");
                let result = json!({
                    "content": [{"type": "text", "text": "hello"}],
                    "isError": mode == "error",
                });
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
                let (content_type, body) = if mode == "sse" {
                    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}});
                    let stream = format!("event: message\ndata: {progress}\n\nevent: message\nid: 7\ndata: {answer}\n\n");
                    ("text/event-stream", stream)
                } else {
                    ("application/json", answer.to_string())
                };
                let response = Response::builder()
                    .header("content-type", content_type)
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        })))
    }

    fn post(body: impl Into<Bytes>) -> Request<Full<Bytes>> {
        Request::post("http://gw.test/mcp")
            .header("content-type", "application/json")
            .body(Full::new(body.into()))
            .unwrap()
    }

    fn tool_call(
        id: u64,
        tool: &str,
        arguments: Value,
        payment: Option<Value>,
    ) -> Request<Full<Bytes>> {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(payment) = payment {
            params["_meta"] = json!({ PAYMENT_META: payment, "progressToken": 3 });
        }
        let message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        post(message.to_string())
    }

    async fn send(
        service: &X402Mcp<Inner>,
        request: Request<Full<Bytes>>,
    ) -> (StatusCode, String, Bytes) {
        let response = service.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = (response.headers().get("content-type"))
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, content_type, body)
    }

    async fn json_answer(service: &X402Mcp<Inner>, request: Request<Full<Bytes>>) -> Value {
        let (status, content_type, body) = send(service, request).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, "application/json");
        serde_json::from_slice(&body).unwrap()
    }

    /// The PaymentRequired of an unpaid `chat` call.
    async fn quote_of(service: &X402Mcp<Inner>) -> PaymentRequired {
        let answer = json_answer(service, tool_call(1, "chat", json!({}), None)).await;
        serde_json::from_value(answer["result"]["structuredContent"].clone()).unwrap()
    }

    /// A payment signed by a dev wallet for `quote`.
    fn pay(quote: &PaymentRequired) -> Value {
        let payment = Payer::dev(0).pay_quote(quote, NOW).unwrap();
        serde_json::to_value(payment).unwrap()
    }

    use crate::x402::server::mcp::rpc::{
        PAYMENT_META, PAYMENT_REQUIRED_ERROR, PAYMENT_RESPONSE_META,
    };

    #[tokio::test]
    async fn an_unpaid_call_of_a_priced_tool_gets_the_payment_required_result() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let answer = json_answer(&service, tool_call(9, "chat", json!({"model": "m"}), None)).await;
        assert_eq!(answer["id"], 9);
        let result = &answer["result"];
        assert_eq!(result["isError"], true);
        let structured = &result["structuredContent"];
        assert_eq!(structured["x402Version"], 2);
        assert_eq!(structured["error"], PAYMENT_REQUIRED_ERROR);
        assert_eq!(structured["resource"]["url"], "mcp://tool/chat");
        assert_eq!(structured["resource"]["description"], "Tool: chat");
        assert_eq!(structured["resource"]["mimeType"], "application/json");
        assert_eq!(structured["accepts"][0]["scheme"], "exact");
        // $0.002 + the $0.001 fee.
        assert_eq!(structured["accepts"][0]["amount"], "3000");
        assert!(structured.get("code").is_none());
        // The same object as the text of `content[0]`.
        assert_eq!(result["content"][0]["type"], "text");
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(&text, structured);
        assert!(
            seen.bodies.lock().unwrap().is_empty(),
            "the tool did not run"
        );
    }

    #[tokio::test]
    async fn free_tools_and_other_messages_pass_through_untouched() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let answer = json_answer(&service, tool_call(2, "echo", json!({}), None)).await;
        assert_eq!(answer["result"]["content"][0]["text"], "hello");
        let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
        let (status, _, _) = send(&service, post(list.to_string())).await;
        assert_eq!(status, StatusCode::OK);
        let get = Request::get("http://gw.test/mcp")
            .body(Full::default())
            .unwrap();
        let (status, _, _) = send(&service, get).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(seen.bodies.lock().unwrap().len(), 3);
        assert_eq!(facade.settled.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_paid_call_runs_the_tool_and_settles_with_the_payment_response() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let quote = quote_of(&service).await;
        let payment = pay(&quote);
        let answer = json_answer(&service, tool_call(4, "chat", json!({}), Some(payment))).await;
        assert_eq!(answer["id"], 4);
        let result = &answer["result"];
        assert_eq!(result["isError"], false);
        assert_eq!(result["content"][0]["text"], "hello");
        let receipt = &result["_meta"][PAYMENT_RESPONSE_META];
        assert_eq!(receipt["success"], true);
        assert_eq!(receipt["payer"], Payer::dev(0).address());
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
        assert_eq!(seen.receipts.load(Ordering::SeqCst), 1);
        // The tool never sees the payment; the rest of `_meta` is its own.
        let body = seen.bodies.lock().unwrap()[0].clone();
        assert!(body["params"]["_meta"].get(PAYMENT_META).is_none());
        assert_eq!(body["params"]["_meta"]["progressToken"], 3);
    }

    #[tokio::test]
    async fn a_paid_sse_answer_keeps_its_events_and_carries_the_payment_response() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let payment = pay(&quote_of(&service).await);
        let request = tool_call(5, "chat", json!({"mode": "sse"}), Some(payment));
        let (status, content_type, body) = send(&service, request).await;
        assert_eq!(
            (status, content_type.as_str()),
            (StatusCode::OK, "text/event-stream")
        );
        let text = std::str::from_utf8(&body).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 2);
        assert!(events[0].contains("notifications/progress"));
        assert!(events[1].starts_with("event: message\nid: 7\ndata: "));
        let data = events[1]
            .lines()
            .last()
            .unwrap()
            .strip_prefix("data: ")
            .unwrap();
        let answer: Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            answer["result"]["_meta"][PAYMENT_RESPONSE_META]["success"],
            true
        );
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_tool_error_settles_nothing_and_the_payment_stays_good() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let payment = pay(&quote_of(&service).await);
        let failing = tool_call(6, "chat", json!({"mode": "error"}), Some(payment.clone()));
        let answer = json_answer(&service, failing).await;
        assert_eq!(answer["result"]["isError"], true);
        assert!(answer["result"].get("_meta").is_none());
        assert_eq!(facade.settled.load(Ordering::SeqCst), 0);
        // Released: the same payment pays the next call.
        let answer = json_answer(&service, tool_call(7, "chat", json!({}), Some(payment))).await;
        assert_eq!(
            answer["result"]["_meta"][PAYMENT_RESPONSE_META]["success"],
            true
        );
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    /// The refusal code and error of a PaymentRequired-shaped result.
    fn refusal(answer: &Value) -> (String, String) {
        let result = &answer["result"];
        assert_eq!(result["isError"], true);
        let structured = &result["structuredContent"];
        assert_eq!(
            structured["accepts"][0]["scheme"], "exact",
            "the quote again"
        );
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(&text, structured);
        (
            structured["code"].as_str().unwrap().to_owned(),
            structured["error"].as_str().unwrap().to_owned(),
        )
    }

    #[tokio::test]
    async fn a_replayed_payment_is_refused_with_the_rest_code() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let payment = pay(&quote_of(&service).await);
        json_answer(
            &service,
            tool_call(1, "chat", json!({}), Some(payment.clone())),
        )
        .await;
        let answer = json_answer(&service, tool_call(2, "chat", json!({}), Some(payment))).await;
        let (code, error) = refusal(&answer);
        assert_eq!(code, "PAYMENT_REPLAY");
        assert_eq!(error, "authorization_already_settled");
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
        assert_eq!(seen.bodies.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_tampered_amount_or_a_payment_that_is_not_an_object_is_invalid() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let mut payment = pay(&quote_of(&service).await);
        payment["accepted"]["amount"] = json!("1");
        let answer = json_answer(&service, tool_call(1, "chat", json!({}), Some(payment))).await;
        assert_eq!(refusal(&answer).0, "PAYMENT_INVALID");
        for sent in [
            json!("eyJ4NDAyVmVyc2lvbiI6Mn0="),
            json!([1]),
            json!(null),
            json!({"x402Version": 2}),
        ] {
            let answer = json_answer(&service, tool_call(2, "chat", json!({}), Some(sent))).await;
            assert_eq!(refusal(&answer).0, "PAYMENT_INVALID");
        }
        assert!(seen.bodies.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failed_settlement_withholds_the_output() {
        let facade = Arc::new(Facade::default());
        facade.fail_settle.store(true, Ordering::SeqCst);
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let payment = pay(&quote_of(&service).await);
        let answer = json_answer(&service, tool_call(1, "chat", json!({}), Some(payment))).await;
        let (code, error) = refusal(&answer);
        assert_eq!(code, "SETTLEMENT_FAILED");
        assert_eq!(
            error,
            "Payment settlement failed: invalid_exact_evm_transaction_failed"
        );
        assert!(
            !answer.to_string().contains("hello"),
            "the output is withheld"
        );
        assert_eq!(
            answer["result"]["_meta"][PAYMENT_RESPONSE_META]["success"],
            false
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn five_concurrent_copies_of_one_payment_settle_once() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let payment = pay(&quote_of(&service).await);
        let copies: Vec<_> = (0..5)
            .map(|n| {
                let (service, request) = (
                    service.clone(),
                    tool_call(n, "chat", json!({}), Some(payment.clone())),
                );
                tokio::spawn(async move {
                    let response = service.oneshot(request).await.unwrap();
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    serde_json::from_slice::<Value>(&body).unwrap()
                })
            })
            .collect();
        let mut answers = Vec::new();
        for copy in copies {
            answers.push(copy.await.unwrap());
        }
        let paid = answers
            .iter()
            .filter(|answer| answer["result"]["_meta"][PAYMENT_RESPONSE_META]["success"] == true)
            .count();
        assert_eq!(paid, 1);
        for answer in answers
            .iter()
            .filter(|answer| answer["result"]["isError"] == true)
        {
            assert_eq!(refusal(answer).0, "PAYMENT_REPLAY");
        }
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn bad_bodies_are_json_rpc_errors() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade).with_max_body_bytes(256), &seen);
        let cases = [
            (post("{not json"), StatusCode::BAD_REQUEST, rpc::PARSE_ERROR),
            (post("[]"), StatusCode::BAD_REQUEST, rpc::INVALID_REQUEST),
            (post("7"), StatusCode::BAD_REQUEST, rpc::INVALID_REQUEST),
            (
                post(format!("{{\"x\":\"{}\"}}", "a".repeat(300))),
                StatusCode::PAYLOAD_TOO_LARGE,
                rpc::INVALID_REQUEST,
            ),
            (
                post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}"#),
                StatusCode::OK,
                rpc::INVALID_PARAMS,
            ),
            (
                post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#),
                StatusCode::OK,
                rpc::INVALID_PARAMS,
            ),
            (
                post(
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chat","arguments":3}}"#,
                ),
                StatusCode::OK,
                rpc::INVALID_PARAMS,
            ),
        ];
        for (request, status, code) in cases {
            let (got, content_type, body) = send(&service, request).await;
            assert_eq!(got, status);
            assert_eq!(content_type, "application/json");
            let answer: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(answer["error"]["code"], code, "{answer}");
        }
        // An unpriceable tool is a tool error with its code.
        let answer = json_answer(&service, tool_call(1, "broken", json!({}), None)).await;
        assert_eq!(answer["result"]["isError"], true);
        assert_eq!(
            answer["result"]["structuredContent"]["code"],
            "INTERNAL_ERROR"
        );
        assert!(seen.bodies.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_pending_settlement_keeps_the_answer_for_the_resend_of_the_same_payment() {
        let facade = Arc::new(Facade::default());
        let seen = Arc::new(Seen::default());
        let service = service(&layer(&facade), &seen);
        let payment = pay(&quote_of(&service).await);
        facade.pending.store(true, Ordering::SeqCst);
        let first = json_answer(
            &service,
            tool_call(1, "chat", json!({}), Some(payment.clone())),
        )
        .await;
        let (code, error) = refusal(&first);
        assert_eq!(code, "PAYMENT_VERIFICATION_UNAVAILABLE");
        assert!(error.starts_with("settlement_pending"), "{error}");
        assert!(
            !first.to_string().contains("hello"),
            "withheld until it lands"
        );
        // The resend learns it landed and gets the kept answer, under its own id.
        let resent = json_answer(&service, tool_call(2, "chat", json!({}), Some(payment))).await;
        assert_eq!(resent["id"], 2);
        assert_eq!(resent["result"]["content"][0]["text"], "hello");
        assert_eq!(
            resent["result"]["_meta"][PAYMENT_RESPONSE_META]["success"],
            true
        );
        assert_eq!(seen.bodies.lock().unwrap().len(), 1, "the tool ran once");
        assert_eq!(facade.settled.load(Ordering::SeqCst), 1);
    }
}

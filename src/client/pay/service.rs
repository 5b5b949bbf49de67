//! [`X402Payment`]: sends a request, pays its quote, applies the retry rules.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use tower_layer::Layer;
use tower_service::Service;

use super::error::{ApiError, Attempts, BoxError, ClientError, PaymentError, PaymentErrorKind};
use super::future::ResponseFuture;
use super::layer::{Shared, X402PaymentLayer};
use super::mpp::{self, Protocol};
use super::payment_id::{IdempotencyKey, declares_payment_identifier, with_extensions};
use super::receipt::{PaidBody, Receipt, is_event_stream};
use super::retry::{parse_quote, read_error, retry_after};
use super::sign_in::{self, SIGN_IN_WITH_X};
use super::transport::{read_capped, send};
use crate::envelope::ErrorCode;
use crate::x402::wire::PaymentRequirements;

/// The header a payment travels in.
const PAYMENT_SIGNATURE: &str = "payment-signature";

/// The paying client service; see [`X402PaymentLayer`].
///
/// Answers `Ok` with 2xx responses only (a paid one carries a [`Receipt`]
/// in its extensions); every other outcome is a [`ClientError`].
#[derive(Clone)]
pub struct X402Payment<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> X402Payment<S> {
    pub(super) fn from_shared(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// Wraps `inner`; same as `X402Payment::layer(signer).layer(inner)`.
    pub fn new(inner: S, signer: impl alloy_signer::Signer + Send + Sync + 'static) -> Self {
        X402PaymentLayer::new(signer).layer(inner)
    }

    define_inner_service_accessors!();
}

impl X402Payment<()> {
    /// Makes the layer of this service (tower-http's `Foo::layer`): the same
    /// as [`X402PaymentLayer::new`].
    pub fn layer(signer: impl alloy_signer::Signer + Send + Sync + 'static) -> X402PaymentLayer {
        X402PaymentLayer::new(signer)
    }
}

impl<S> fmt::Debug for X402Payment<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X402Payment").finish_non_exhaustive()
    }
}

impl<S, B, ResBody> Service<Request<B>> for X402Payment<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<PaidBody<ResBody>>;
    type Error = ClientError;
    type Future = ResponseFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|error| ClientError::Transport(error.into()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The ready service goes with this call; the clone waits for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        ResponseFuture {
            inner: Box::pin(pay(inner, shared, request)),
        }
    }
}

/// The signed payment a request carries.
struct Paid {
    offer: PaymentRequirements,
    header: Arc<str>,
    /// Sent under a payment identifier: resent after a transport failure.
    under_id: bool,
    /// The header it travels in: `PAYMENT-SIGNATURE`, or the one the MPP
    /// challenge names (`Authorization` unless told otherwise).
    name: HeaderName,
    protocol: Protocol,
}

/// Sends `request`, pays its quote, applies the retry rules.
pub(crate) async fn pay<S, B, ResBody>(
    inner: S,
    shared: Arc<Shared>,
    request: Request<B>,
) -> Result<Response<PaidBody<ResBody>>, ClientError>
where
    S: Service<Request<Full<Bytes>>, Response = Response<ResBody>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let mut attempts = Attempts::default();
    let (parts, body) = request.into_parts();
    let mut body = match Limited::new(body, shared.max_body_bytes).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            return Err(ClientError::Payment(PaymentError {
                kind: PaymentErrorKind::BodyTooLarge {
                    limit_bytes: shared.max_body_bytes,
                },
                status: None,
                attempts,
            }));
        }
        Err(error) => return Err(ClientError::Transport(error)),
    };
    let mut paid: Option<Paid> = None;
    let mut resigned = false;
    // `sign-in-with-x`: tried at most once, for a request paid for before.
    let mut sign_in_proof: Option<String> = None;
    let mut signed_in = false;
    // One payment identifier per logical request: the caller's, or made when first needed.
    let mut id = parts.extensions.get::<IdempotencyKey>().cloned();
    loop {
        let mut request = Request::from_parts(parts.clone(), Full::new(body.clone()));
        if let Some(paid) = &paid {
            let value = HeaderValue::from_str(&paid.header).map_err(|_| {
                ClientError::Transport("the payment header is not a header value".into())
            })?;
            request.headers_mut().insert(paid.name.clone(), value);
        } else if let Some(proof) = sign_in_proof.take()
            && let Ok(value) = HeaderValue::from_str(&proof)
        {
            request.headers_mut().insert(SIGN_IN_WITH_X, value);
        }
        // What MPP servers should offer first (mpp.md §7); the caller's wins.
        if !request.headers().contains_key(mpp::ACCEPT_PAYMENT) {
            request
                .headers_mut()
                .insert(mpp::ACCEPT_PAYMENT, HeaderValue::from_static(mpp::ACCEPTED));
        }
        attempts.requests += 1;
        let response = match send(inner.clone(), request).await {
            Ok(response) => response,
            // Under its id the same payment is resent: a settled one is answered from
            // the server's store, never charged twice.
            Err(_)
                if paid.as_ref().is_some_and(|paid| paid.under_id)
                    && attempts.transport_resends < shared.retry.verification_retries =>
            {
                let backoff = shared.retry.backoff_for(attempts.transport_resends);
                attempts.transport_resends += 1;
                shared.sleeper.sleep(backoff).await;
                continue;
            }
            Err(error) => return Err(error),
        };
        let status = response.status();
        if status.is_success() {
            if paid.is_some() {
                (shared.paid_requests).record(sign_in::request_digest(&parts, &body));
            }
            let receipt = paid.as_ref().map(|paid| {
                let receipt = Receipt::new(paid.offer.clone(), paid.header.clone())
                    .with_policy(shared.policy.clone())
                    .with_protocol(paid.protocol);
                match paid.protocol {
                    Protocol::Mpp => {
                        receipt.settle_from_mpp(response.headers(), shared.signer.address());
                    }
                    _ => receipt.settle_from_headers(response.headers()),
                }
                receipt
            });
            let is_stream = is_event_stream(response.headers());
            let (mut head, body) = response.into_parts();
            let body = PaidBody::new(body, receipt.as_ref(), is_stream);
            if let Some(receipt) = receipt {
                head.extensions.insert(receipt);
            }
            return Ok(Response::from_parts(head, body));
        }
        let (head, error_body) = response.into_parts();
        let error_body = read_capped(error_body).await?;
        let quote = (status == StatusCode::PAYMENT_REQUIRED)
            .then(|| parse_quote(&head.headers, &error_body))
            .flatten();
        let answer = read_error(status, &error_body, quote.as_ref());
        let payment_error = |kind, attempts| {
            Err(ClientError::Payment(PaymentError {
                kind,
                status: Some(status),
                attempts,
            }))
        };

        if status == StatusCode::PAYMENT_REQUIRED {
            let stale = answer.known == Some(ErrorCode::PaymentBlockhashStale);
            if let Some(sent) = &paid {
                let resign = stale && shared.retry.resign_on_stale_blockhash && !resigned;
                if !resign {
                    // An MPP server's `payment-required` problem asks as if nothing was
                    // sent, whatever reason its x402 quote beside it gives.
                    let asked_again =
                        sent.protocol == Protocol::Mpp && mpp::asks_again(&error_body);
                    let kind = match answer.known {
                        _ if asked_again => PaymentErrorKind::RequiredAgain,
                        Some(code) if code.is_payment() => PaymentErrorKind::Refused(code),
                        _ => PaymentErrorKind::RequiredAgain,
                    };
                    return payment_error(kind, attempts);
                }
                resigned = true;
            }
            // MPP: the first `evm`/`charge` challenge the client can pay,
            // used when there is no x402 quote or MPP is preferred.
            let now = shared.clock.now_unix_secs();
            let mut unsupported = None;
            let charge = mpp::challenges(&head.headers)
                .into_iter()
                .find_map(|challenge| match challenge.offer(now) {
                    Ok(charge) => Some((challenge, charge)),
                    Err(why) => {
                        unsupported.get_or_insert(why);
                        None
                    }
                });
            if let Some((challenge, charge)) = charge
                && (quote.is_none() || shared.policy.protocol() == Protocol::Mpp)
            {
                // MPP offers are never signed by the server: required signatures refuse them.
                let unsigned = match shared.policy.offer_signatures() {
                    super::OfferSignatures::Require(_) => Err(super::Refusal::UnsignedOffer),
                    _ => Ok(()),
                };
                if let Err(refusal) = unsigned.and_then(|()| shared.policy.authorize(&charge.offer))
                {
                    return payment_error(PaymentErrorKind::Policy(refusal), attempts);
                }
                attempts.signatures += 1;
                let name = HeaderName::from_bytes(challenge.credential_header().as_bytes())
                    .unwrap_or(http::header::AUTHORIZATION);
                match shared.signer.mpp_credential(&challenge, &charge).await {
                    Ok(header) => {
                        paid = Some(Paid {
                            offer: charge.offer,
                            header: Arc::from(header),
                            under_id: false,
                            name,
                            protocol: Protocol::Mpp,
                        });
                    }
                    Err(error) => return payment_error(PaymentErrorKind::Sign(error), attempts),
                }
                continue;
            }
            let Some(quote) = quote else {
                let kind =
                    unsupported.map_or(PaymentErrorKind::NoQuote, PaymentErrorKind::Unsupported);
                return payment_error(kind, attempts);
            };
            // Paid for before: sign in once, pay only if that is refused.
            if paid.is_none()
                && !signed_in
                && shared
                    .paid_requests
                    .contains(&sign_in::request_digest(&parts, &body))
            {
                signed_in = true;
                sign_in_proof = sign_in::proof(&shared.signer, &quote, &parts).await;
                if sign_in_proof.is_some() {
                    continue;
                }
            }
            // The official clients sign exactly the first offer (or the
            // metered one, when the policy prefers it).
            let Some(offer) = shared.policy.choose(&quote) else {
                return payment_error(PaymentErrorKind::NoQuote, attempts);
            };
            let now = shared.clock.now_unix_secs();
            if let Err(refusal) = shared
                .policy
                .check_offer(&quote, offer, now)
                .and_then(|()| shared.policy.authorize(offer))
            {
                return payment_error(PaymentErrorKind::Policy(refusal), attempts);
            }
            attempts.signatures += 1;
            let header = shared
                .signer
                .payment_header(offer, Some(&quote.resource), shared.clock.now_unix_secs())
                .await;
            match header {
                Ok(header) => {
                    let declared = quote.extensions.as_ref();
                    let key = declares_payment_identifier(declared)
                        .then(|| id.get_or_insert_with(IdempotencyKey::generate).clone());
                    let header = with_extensions(header, declared, key.as_ref());
                    paid = Some(Paid {
                        offer: offer.clone(),
                        header: Arc::from(header),
                        under_id: key.is_some(),
                        name: HeaderName::from_static(PAYMENT_SIGNATURE),
                        protocol: Protocol::X402,
                    });
                }
                Err(error) => return payment_error(PaymentErrorKind::Sign(error), attempts),
            }
            continue;
        }

        let waited = retry_after(&head.headers);
        if answer.known == Some(ErrorCode::PaymentVerificationUnavailable)
            && paid.is_some()
            && attempts.verification_retries < shared.retry.verification_retries
        {
            let backoff = shared.retry.backoff_for(attempts.verification_retries);
            let wait = waited
                .filter(|wait| *wait <= shared.retry.max_retry_after)
                .unwrap_or(backoff);
            attempts.verification_retries += 1;
            shared.sleeper.sleep(wait).await;
            continue;
        }
        let capacity = matches!(
            answer.known,
            Some(ErrorCode::ModelUnavailable | ErrorCode::RateLimited)
        );
        if capacity
            && attempts.failovers == 0
            && let Some(failover) = &shared.failover
            && let Some(rewritten) = failover.reroute(inner.clone(), &parts, &body).await
        {
            attempts.failovers += 1;
            body = rewritten;
            // A new model is a new request: a new quote, a new payment, a new id.
            paid = None;
            resigned = false;
            id = None;
            continue;
        }
        let retryable = matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        );
        if retryable
            && attempts.retry_after_waits < shared.retry.retry_after_waits
            && let Some(wait) = waited.filter(|wait| *wait <= shared.retry.max_retry_after)
        {
            attempts.retry_after_waits += 1;
            shared.sleeper.sleep(wait).await;
            continue;
        }
        if let Some(code) = answer.known.filter(|code| code.is_payment()) {
            return payment_error(PaymentErrorKind::Refused(code), attempts);
        }
        return Err(ClientError::Api(ApiError {
            status,
            code: answer.code,
            body: error_body,
            attempts,
        }));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::sync::Mutex;
    use std::time::Duration;

    use alloy_signer_local::PrivateKeySigner;
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use super::*;
    use crate::client::pay::{Failover, RetryPolicy};
    use crate::client::payer::DEV_KEYS;
    use crate::clock::FakeClock;
    use crate::x402::{
        facilitator::{DevLedger, LocalEvmFacilitator},
        server::{PaymentOption, PriceTable, X402Layer},
        wire::{
            AtomicAmount, Network, PaymentPayload, PaymentRequired, ResourceInfo, SettleResponse,
            codec,
        },
    };

    const NOW: u64 = 1_750_000_000;

    fn layer() -> X402PaymentLayer {
        let key: PrivateKeySigner = DEV_KEYS[1].parse().unwrap();
        X402PaymentLayer::new(key)
            .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
            .with_sleeper(Arc::new(Waits::default()))
    }

    /// Records every wait and returns at once: tests never sleep.
    #[derive(Default)]
    struct Waits(Mutex<Vec<Duration>>);

    impl super::super::Sleeper for Waits {
        fn sleep(&self, duration: Duration) -> crate::store::BoxFuture<'static, ()> {
            self.0.lock().unwrap().push(duration);
            Box::pin(std::future::ready(()))
        }
    }

    fn quote(units: u128) -> PaymentRequired {
        PaymentRequired {
            x402_version: 2,
            error: Some(crate::x402::server::QUOTE_ERROR.into()),
            resource: ResourceInfo {
                url: "http://gateway/v1/chat/completions".into(),
                ..Default::default()
            },
            accepts: vec![
                PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9])
                    .unwrap()
                    .requirements_for_amount(AtomicAmount::new(units)),
            ],
            extensions: None,
        }
    }

    fn answer(status: u16, headers: &[(&str, String)], body: &str) -> Response<Full<Bytes>> {
        let mut response = Response::builder().status(status);
        for (name, value) in headers {
            response = response.header(*name, value);
        }
        response
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    }

    fn quote_answer(units: u128) -> Response<Full<Bytes>> {
        answer(
            402,
            &[("payment-required", codec::encode(&quote(units)))],
            "{}",
        )
    }

    fn error_answer(status: u16, code: &str, retry_after: Option<&str>) -> Response<Full<Bytes>> {
        let mut headers = vec![];
        if let Some(secs) = retry_after {
            headers.push(("retry-after", secs.to_owned()));
        }
        answer(
            status,
            &headers,
            &format!(r#"{{"error":{{"code":"{code}"}},"code":"{code}"}}"#),
        )
    }

    /// A request as the scripted server saw it: path, payment header, body.
    type Seen = (String, Option<String>, Bytes);

    /// A server that answers from a script and records the payment header of each request.
    #[derive(Clone, Default)]
    struct Scripted {
        answers: Arc<Mutex<VecDeque<Response<Full<Bytes>>>>>,
        seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl Scripted {
        fn new(answers: Vec<Response<Full<Bytes>>>) -> Self {
            Self {
                answers: Arc::new(Mutex::new(answers.into())),
                seen: Arc::default(),
            }
        }

        fn service(
            &self,
        ) -> impl Service<
            Request<Full<Bytes>>,
            Response = Response<Full<Bytes>>,
            Error = Infallible,
            Future = impl Send,
        > + Clone
        + Send
        + 'static {
            let script = self.clone();
            service_fn(move |request: Request<Full<Bytes>>| {
                let script = script.clone();
                async move {
                    let payment = request
                        .headers()
                        .get(PAYMENT_SIGNATURE)
                        .map(|value| value.to_str().unwrap().to_owned());
                    let path = request.uri().path().to_owned();
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    script.seen.lock().unwrap().push((path, payment, body));
                    Ok::<_, Infallible>(script.answers.lock().unwrap().pop_front().unwrap())
                }
            })
        }

        fn payments(&self) -> Vec<Option<String>> {
            self.seen
                .lock()
                .unwrap()
                .iter()
                .map(|seen| seen.1.clone())
                .collect()
        }
    }

    fn chat(model: &str) -> Request<Full<Bytes>> {
        Request::post("http://gateway/v1/chat/completions")
            .body(Full::new(Bytes::from(format!(
                r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#
            ))))
            .unwrap()
    }

    fn payment_error(result: Result<Response<PaidBody<Full<Bytes>>>, ClientError>) -> PaymentError {
        match result {
            Err(ClientError::Payment(error)) => error,
            other => panic!("not a payment error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_quote_is_paid_once_and_verifies_on_a_real_x402_server() {
        let ledger = Arc::new(DevLedger::new());
        let clock = Arc::new(FakeClock::at_unix_secs(NOW));
        let server_layer = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(
                PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9]).unwrap(),
            )
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /v1/chat/completions", "0.002")
                    .unwrap(),
            )
            .with_facilitator(LocalEvmFacilitator::new(ledger.clone(), clock))
            .build()
            .unwrap();
        let server = ServiceBuilder::new()
            .layer(server_layer)
            .service(service_fn(|request: Request<Full<Bytes>>| async move {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                Ok::<_, Infallible>(Response::new(Full::new(body)))
            }));
        let server = service_fn(move |request: Request<Full<Bytes>>| {
            let server = server.clone();
            async move {
                let response = server.oneshot(request).await?;
                let (head, body) = response.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                Ok::<_, Infallible>(Response::from_parts(head, Full::new(body)))
            }
        });
        let layer = layer();
        let client = ServiceBuilder::new().layer(layer.clone()).service(server);
        let response = client.oneshot(chat("openai/gpt-5-mini")).await.unwrap();
        assert_eq!(response.status(), 200);
        let receipt = response.extensions().get::<Receipt>().cloned().unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("gpt-5-mini"));
        let settlement = receipt.settlement().unwrap();
        assert!(settlement.success);
        assert_eq!(
            settlement.payer.as_deref(),
            Some(DevLedger::DEV_ACCOUNTS[1])
        );
        assert_eq!(receipt.amount(), AtomicAmount::new(3_000));
        assert_eq!(layer.signer().signatures(), 1);
        assert_eq!(ledger.settlements(), 1);
        assert_eq!(
            ledger.balance_of(
                &DevLedger::base_sepolia_usdc(),
                DevLedger::DEV_ACCOUNTS[1].parse().unwrap()
            ),
            DevLedger::DEV_ACCOUNT_FUNDS - 3_000
        );
    }

    /// A settlement of development account 1's payment in transaction `0xabc`.
    fn settled() -> SettleResponse {
        SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            payer: Some(DevLedger::DEV_ACCOUNTS[1].into()),
            transaction: "0xabc".into(),
            network: Network::base_sepolia(),
            amount: None,
            extensions: None,
        }
    }

    #[tokio::test]
    async fn the_first_offer_is_signed_with_its_window_and_the_body_resent() {
        let settled = settled();
        let script = Scripted::new(vec![
            quote_answer(3_000),
            answer(200, &[("payment-response", codec::encode(&settled))], "ok"),
        ]);
        let client = ServiceBuilder::new()
            .layer(layer())
            .service(script.service());
        let response = client.oneshot(chat("m")).await.unwrap();
        assert_eq!(
            response
                .extensions()
                .get::<Receipt>()
                .unwrap()
                .transaction(),
            Some("0xabc")
        );
        let seen = script.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].2, seen[1].2, "the same body is resent");
        let payment: PaymentPayload =
            codec::decode(seen[1].1.as_ref().unwrap().as_bytes()).unwrap();
        assert_eq!(payment.accepted, quote(3_000).accepts[0]);
        assert_eq!(payment.resource, Some(quote(3_000).resource));
        let evm = payment.exact_evm().unwrap();
        assert_eq!(evm.authorization.valid_before, NOW + 300);
        assert_eq!(evm.authorization.value, AtomicAmount::new(3_000));
    }

    /// Public development keys (Hardhat/Anvil #5 and #6): the server's and an impostor's.
    const SERVER_KEY: &str = "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";
    const OTHER_KEY: &str = "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e";

    fn offer_signer(key: &str) -> crate::x402::server::OfferSigner {
        crate::x402::server::OfferSigner::from_hex(key).unwrap()
    }

    /// A quote of `units` whose offers `key` signed (none: unsigned).
    fn signed_quote_answer(units: u128, key: Option<&str>) -> Response<Full<Bytes>> {
        let mut required = quote(units);
        if let Some(key) = key {
            let (offers, _) =
                offer_signer(key).offers(&required.resource.url, &required.accepts, NOW);
            required.extensions = Some(serde_json::Map::from_iter([(
                crate::x402::wire::OFFER_RECEIPT.to_owned(),
                offers,
            )]));
        }
        answer(402, &[("payment-required", codec::encode(&required))], "{}")
    }

    fn requiring(signer: &str) -> X402PaymentLayer {
        layer().with_policy(super::super::SpendPolicy::new().with_offer_signatures(
            super::super::OfferSignatures::Require(offer_signer(signer).address()),
        ))
    }

    #[tokio::test]
    async fn an_offer_not_signed_by_the_servers_key_is_refused_without_signing() {
        for (key, unsigned) in [(Some(OTHER_KEY), false), (None, true)] {
            let script = Scripted::new(vec![signed_quote_answer(3_000, key)]);
            let layer = requiring(SERVER_KEY);
            let client = ServiceBuilder::new()
                .layer(layer.clone())
                .service(script.service());
            let error = payment_error(client.oneshot(chat("m")).await);
            match error.kind {
                PaymentErrorKind::Policy(super::super::Refusal::UnsignedOffer) => assert!(unsigned),
                PaymentErrorKind::Policy(super::super::Refusal::OfferSignature(why)) => {
                    assert!(!unsigned);
                    assert!(why.contains("not the server's key"), "{why}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(layer.signer().signatures(), 0);
            assert_eq!(script.payments(), [None]);
        }
    }

    #[tokio::test]
    async fn a_usage_statement_one_unit_off_is_reported_and_a_true_one_is_not() {
        for (lie, failures) in [(0, 0), (1, 1)] {
            // 9 × 0.25 + 1 × 2 micro-dollars → 5, plus the 1,000 fee.
            let amount = 1_005 + lie;
            let mut settled = SettleResponse {
                amount: Some(AtomicAmount::new(amount)),
                extensions: Some(serde_json::Map::from_iter([(
                    "usage".to_owned(),
                    serde_json::json!({"model": "m", "prompt_tokens": 9, "completion_tokens": 1,
                        "input_usd_per_million": "0.25", "output_usd_per_million": "2",
                        "fee": "0.001", "amount": amount.to_string()}),
                )])),
                ..settled()
            };
            offer_signer(SERVER_KEY).sign_settlement(
                &mut settled,
                "http://gateway/v1/chat/completions",
                DevLedger::DEV_ACCOUNTS[1],
                6,
                NOW,
            );
            let script = Scripted::new(vec![
                signed_quote_answer(9_001, Some(SERVER_KEY)),
                answer(200, &[("payment-response", codec::encode(&settled))], "ok"),
            ]);
            let client = ServiceBuilder::new()
                .layer(requiring(SERVER_KEY))
                .service(script.service());
            let response = client.oneshot(chat("m")).await.unwrap();
            let receipt = response.extensions().get::<Receipt>().unwrap();
            assert!(receipt.signed_receipt().is_some());
            let found = receipt.proof_failures();
            assert_eq!(found.len(), failures, "{found:?}");
            if lie > 0 {
                assert!(found[0].contains("does not add up"), "{found:?}");
                assert!(
                    found[0].contains("1006") && found[0].contains("1005"),
                    "{found:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_quote_over_the_cap_is_refused_without_signing() {
        let script = Scripted::new(vec![quote_answer(100_001)]);
        let layer = layer();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(script.service());
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(matches!(
            error.kind,
            PaymentErrorKind::Policy(super::super::Refusal::OverCap { .. })
        ));
        assert_eq!(layer.signer().signatures(), 0);
        assert_eq!(error.attempts.signatures, 0);
        assert_eq!(script.payments(), [None]);
    }

    #[tokio::test]
    async fn a_second_402_after_paying_gets_no_second_signature() {
        let script = Scripted::new(vec![quote_answer(3_000), quote_answer(3_000)]);
        let layer = layer();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(script.service());
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(
            matches!(error.kind, PaymentErrorKind::RequiredAgain),
            "{error}"
        );
        assert_eq!(layer.signer().signatures(), 1);
        assert_eq!(error.attempts.requests, 2);
    }

    #[tokio::test]
    async fn verification_unavailable_resends_the_same_signature_with_backoff() {
        let unavailable = || error_answer(503, "PAYMENT_VERIFICATION_UNAVAILABLE", None);
        let script = Scripted::new(vec![
            quote_answer(3_000),
            unavailable(),
            error_answer(503, "PAYMENT_VERIFICATION_UNAVAILABLE", Some("5")),
            answer(200, &[], "ok"),
        ]);
        let waits = Arc::new(Waits::default());
        let layer = layer().with_sleeper(waits.clone());
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(script.service());
        client.oneshot(chat("m")).await.unwrap();
        let payments = script.payments();
        assert_eq!(payments.len(), 4);
        assert!(payments[1].is_some());
        assert!(payments[1..].iter().all(|payment| *payment == payments[1]));
        assert_eq!(layer.signer().signatures(), 1);
        // The backoff first, then the server's Retry-After.
        assert_eq!(
            *waits.0.lock().unwrap(),
            [Duration::from_millis(500), Duration::from_secs(5)]
        );

        // Bounded: the retries run out and the error says how many there were.
        let script = Scripted::new(vec![quote_answer(3_000), unavailable(), unavailable()]);
        let layer = layer.with_retry(RetryPolicy::default().with_verification_retries(1));
        let client = ServiceBuilder::new().layer(layer).service(script.service());
        let error = payment_error(client.oneshot(chat("m")).await);
        assert_eq!(
            error.code(),
            Some(ErrorCode::PaymentVerificationUnavailable)
        );
        assert_eq!(error.attempts.verification_retries, 1);
    }

    #[tokio::test]
    async fn payment_refusals_and_api_errors_are_told_apart() {
        let unfunded = error_answer(402, "PAYMENT_UNFUNDED", None);
        let script = Scripted::new(vec![quote_answer(3_000), unfunded]);
        let client = ServiceBuilder::new()
            .layer(layer())
            .service(script.service());
        let error = payment_error(client.oneshot(chat("m")).await);
        assert_eq!(error.code(), Some(ErrorCode::PaymentUnfunded));
        assert!(error.to_string().contains("check balance"));

        let script = Scripted::new(vec![error_answer(400, "INVALID_REQUEST_BODY", None)]);
        let client = ServiceBuilder::new()
            .layer(layer())
            .service(script.service());
        match client.oneshot(chat("m")).await {
            Err(ClientError::Api(error)) => {
                assert_eq!(error.status, 400);
                assert_eq!(error.code.as_deref(), Some("INVALID_REQUEST_BODY"));
                assert!(!error.body.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn retry_after_is_honoured_once_within_its_bound() {
        let script = Scripted::new(vec![
            error_answer(429, "RATE_LIMITED", Some("2")),
            error_answer(429, "RATE_LIMITED", Some("2")),
        ]);
        let waits = Arc::new(Waits::default());
        let client = ServiceBuilder::new()
            .layer(layer().with_sleeper(waits.clone()))
            .service(script.service());
        let error = client.oneshot(chat("m")).await.unwrap_err();
        assert!(error.is_rate_limited(), "{error}");
        assert_eq!(*waits.0.lock().unwrap(), [Duration::from_secs(2)]);
        // Longer than the bound: returned at once.
        let script = Scripted::new(vec![error_answer(503, "MODEL_UNAVAILABLE", Some("600"))]);
        let waits = Arc::new(Waits::default());
        let client = ServiceBuilder::new()
            .layer(layer().with_sleeper(waits.clone()))
            .service(script.service());
        assert!(matches!(
            client.oneshot(chat("m")).await,
            Err(ClientError::Api(_))
        ));
        assert!(waits.0.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_stale_blockhash_is_re_signed_once() {
        let stale = || error_answer(402, "PAYMENT_BLOCKHASH_STALE", None);
        let script = Scripted::new(vec![
            quote_answer(3_000),
            stale(),
            quote_answer(3_000),
            stale(),
        ]);
        let layer = layer();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(script.service());
        // The stale answer carries no quote here, so the re-sign needs one: none -> error.
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(matches!(error.kind, PaymentErrorKind::NoQuote), "{error}");
        let mut stale_quote = quote(3_000);
        stale_quote.error = Some("blockhash_expired".into());
        let stale = || {
            answer(
                402,
                &[("payment-required", codec::encode(&stale_quote))],
                "{}",
            )
        };
        let script = Scripted::new(vec![quote_answer(3_000), stale(), stale()]);
        let layer = self::layer();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(script.service());
        let error = payment_error(client.oneshot(chat("m")).await);
        assert_eq!(error.code(), Some(ErrorCode::PaymentBlockhashStale));
        assert_eq!(layer.signer().signatures(), 2);
        let payments = script.payments();
        assert_ne!(payments[1], payments[2]);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_not_paid_for() {
        let script = Scripted::new(vec![]);
        let client = ServiceBuilder::new()
            .layer(layer().with_max_body_bytes(8))
            .service(script.service());
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(matches!(
            error.kind,
            PaymentErrorKind::BodyTooLarge { limit_bytes: 8 }
        ));
        assert!(script.payments().is_empty());
    }

    #[tokio::test]
    async fn model_unavailable_fails_over_to_another_providers_same_tier_model() {
        let listing = r#"{"data":[
            {"id":"openai/gpt-5-mini","owned_by":"openai","tier":"paid"},
            {"id":"xai/grok","owned_by":"xai","tier":"flat"},
            {"id":"google/gemini-2.5-flash","owned_by":"google","tier":"paid"}]}"#;
        let script = Scripted::new(vec![
            quote_answer(3_000),
            error_answer(503, "MODEL_UNAVAILABLE", None),
            answer(200, &[], listing),
            quote_answer(2_000),
            answer(200, &[], "ok"),
        ]);
        let layer = layer().with_failover(Failover::new());
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(script.service());
        let response = client.oneshot(chat("openai/gpt-5-mini")).await.unwrap();
        assert_eq!(
            response.extensions().get::<Receipt>().unwrap().amount(),
            AtomicAmount::new(2_000)
        );
        let seen = script.seen.lock().unwrap().clone();
        assert_eq!(seen[2].0, "/v1/models");
        let last: serde_json::Value = serde_json::from_slice(&seen[4].2).unwrap();
        assert_eq!(last["model"], "google/gemini-2.5-flash");
        assert_eq!(layer.signer().signatures(), 2);
    }

    /// The real x402 layer (0.002 USD a chat, as `configure` adds to it)
    /// over a handler echoing the body.
    fn echo_server(
        ledger: Arc<DevLedger>,
        configure: impl FnOnce(
            crate::x402::server::X402LayerBuilder,
        ) -> crate::x402::server::X402LayerBuilder,
    ) -> impl Service<
        Request<Full<Bytes>>,
        Response = Response<crate::x402::server::X402Body<Full<Bytes>>>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static {
        let clock = Arc::new(FakeClock::at_unix_secs(NOW));
        let builder = X402Layer::builder()
            .with_host_derived_resource_url()
            .with_payment_option(
                PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9]).unwrap(),
            )
            .with_pricing(
                PriceTable::by_route()
                    .with_usd("POST /v1/chat/completions", "0.002")
                    .unwrap(),
            )
            .with_facilitator(LocalEvmFacilitator::new(ledger, clock.clone()))
            .with_clock(clock);
        let server_layer = configure(builder).build().unwrap();
        ServiceBuilder::new()
            .layer(server_layer)
            .service(service_fn(|request: Request<Full<Bytes>>| async move {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                Ok::<_, Infallible>(Response::new(Full::new(body)))
            }))
    }

    /// What a test server is: a service the client layer wraps.
    trait TestServer:
        Service<
            Request<Full<Bytes>>,
            Response = Response<Full<Bytes>>,
            Error = std::io::Error,
            Future: Send,
        > + Clone
        + Send
        + 'static
    {
    }

    impl<T> TestServer for T where
        T: Service<
                Request<Full<Bytes>>,
                Response = Response<Full<Bytes>>,
                Error = std::io::Error,
                Future: Send,
            > + Clone
            + Send
            + 'static
    {
    }

    /// A server (the real x402 layer, payment identifier on, over an echo
    /// handler) whose first paid answer is lost on the way back: it settled,
    /// then the connection broke.
    fn losing_first_paid_answer(ledger: Arc<DevLedger>) -> impl TestServer {
        let server = echo_server(ledger, |builder| {
            builder.with_payment_identifier(
                crate::x402::server::payment_id::PaymentIdentifier::Optional,
            )
        });
        let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
        service_fn(move |request: Request<Full<Bytes>>| {
            let (server, lost) = (server.clone(), lost.clone());
            async move {
                let paid = request.headers().contains_key(PAYMENT_SIGNATURE);
                let response = server.oneshot(request).await.unwrap();
                let (head, body) = response.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                if paid && !lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "the answer was lost",
                    ));
                }
                Ok(Response::from_parts(head, Full::new(body)))
            }
        })
    }

    /// `server`, noting each request's `PAYMENT-SIGNATURE` (or none) in `seen`.
    fn recording<S>(
        server: S,
        seen: Arc<Mutex<Vec<Option<String>>>>,
    ) -> impl Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = std::io::Error,
        Future = impl Send,
    > + Clone
    + Send
    + 'static
    where
        S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = std::io::Error>
            + Clone
            + Send
            + 'static,
        S::Future: Send,
    {
        service_fn(move |request: Request<Full<Bytes>>| {
            seen.lock().unwrap().push(
                request
                    .headers()
                    .get(PAYMENT_SIGNATURE)
                    .map(|value| value.to_str().unwrap().to_owned()),
            );
            server.clone().oneshot(request)
        })
    }

    #[tokio::test]
    async fn a_payment_identifier_survives_a_transport_failure_and_is_paid_once() {
        let ledger = Arc::new(DevLedger::new());
        let layer = layer();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recording = recording(losing_first_paid_answer(ledger.clone()), seen.clone());
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(recording);
        let response = client.oneshot(chat("openai/gpt-5-mini")).await.unwrap();
        assert_eq!(response.status(), 200);
        let receipt = response.extensions().get::<Receipt>().cloned().unwrap();
        assert!(receipt.settlement().unwrap().success);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains("gpt-5-mini"));
        // One signature, sent twice with one id: one settlement.
        assert_eq!(layer.signer().signatures(), 1);
        assert_eq!(ledger.settlements(), 1);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1], seen[2]);
        let payment: PaymentPayload = codec::decode(seen[1].as_ref().unwrap().as_bytes()).unwrap();
        let id = payment.extensions.unwrap()["payment-identifier"]["info"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(id.starts_with("pay_"), "{id}");
    }

    #[tokio::test]
    async fn the_callers_idempotency_key_is_the_id_and_none_is_sent_undeclared() {
        let ledger = Arc::new(DevLedger::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recording = recording(losing_first_paid_answer(ledger.clone()), seen.clone());
        let client = ServiceBuilder::new().layer(layer()).service(recording);
        let mut request = chat("m");
        let key = super::super::IdempotencyKey::new("order-2026-000001").unwrap();
        request.extensions_mut().insert(key);
        assert_eq!(client.oneshot(request).await.unwrap().status(), 200);
        let header = seen.lock().unwrap()[1].clone().unwrap();
        let payment: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
        assert_eq!(
            payment.extensions.unwrap()["payment-identifier"]["info"]["id"],
            "order-2026-000001"
        );
        // A server that declares nothing gets no extensions, and a transport
        // failure is returned as it is.
        let script = Scripted::new(vec![quote_answer(3_000), answer(200, &[], "ok")]);
        let client = ServiceBuilder::new()
            .layer(layer())
            .service(script.service());
        client.oneshot(chat("m")).await.unwrap();
        let payment: PaymentPayload =
            codec::decode(script.payments()[1].as_ref().unwrap().as_bytes()).unwrap();
        assert_eq!(payment.extensions, None);
    }

    /// A request's `Authorization`, `PAYMENT-SIGNATURE` and `Accept-Payment`.
    type MppSeen = (Option<String>, Option<String>, Option<String>);

    /// The real x402 layer with MPP beside it over an echo handler; with
    /// `mpp_only`, its 402s lose the x402 quote (header and body) and keep
    /// only `WWW-Authenticate: Payment`. Notes each request's credential
    /// and `PAYMENT-SIGNATURE` in `seen`.
    fn mpp_server(
        ledger: Arc<DevLedger>,
        mpp_only: bool,
        seen: Arc<Mutex<Vec<MppSeen>>>,
    ) -> impl TestServer {
        let server = echo_server(ledger, |builder| {
            builder.with_mpp(crate::x402::server::mpp::Mpp::new(&[7u8; 32], "gateway").unwrap())
        });
        service_fn(move |request: Request<Full<Bytes>>| {
            let header = |name: &str| {
                request
                    .headers()
                    .get(name)
                    .map(|value| value.to_str().unwrap().to_owned())
            };
            seen.lock().unwrap().push((
                header("authorization"),
                header(PAYMENT_SIGNATURE),
                header("accept-payment"),
            ));
            let server = server.clone();
            async move {
                let response = server.oneshot(request).await.unwrap();
                let (mut head, body) = response.into_parts();
                let mut body = body.collect().await.unwrap().to_bytes();
                if mpp_only && head.status == StatusCode::PAYMENT_REQUIRED {
                    head.headers.remove("payment-required");
                    let payment: Vec<_> = head
                        .headers
                        .get_all(http::header::WWW_AUTHENTICATE)
                        .iter()
                        .filter(|value| value.as_bytes().starts_with(b"Payment "))
                        .cloned()
                        .collect();
                    head.headers.remove(http::header::WWW_AUTHENTICATE);
                    for value in payment {
                        head.headers.append(http::header::WWW_AUTHENTICATE, value);
                    }
                    body = Bytes::from_static(b"{}");
                }
                Ok(Response::from_parts(head, Full::new(body)))
            }
        })
    }

    #[tokio::test]
    async fn an_mpp_only_server_is_paid_through_mpp_under_the_same_policy() {
        let ledger = Arc::new(DevLedger::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let layer = layer();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(mpp_server(ledger.clone(), true, seen.clone()));
        let response = client.oneshot(chat("m")).await.unwrap();
        assert_eq!(response.status(), 200);
        let receipt = response.extensions().get::<Receipt>().cloned().unwrap();
        assert_eq!(receipt.protocol(), super::super::Protocol::Mpp);
        assert!(receipt.mpp_receipt().unwrap().is_success());
        assert_eq!(
            receipt.transaction(),
            Some(receipt.mpp_receipt().unwrap().reference.as_str())
        );
        // The route's price with the layer's fee, as its x402 quote says.
        assert_eq!(receipt.amount(), AtomicAmount::new(3_000));
        assert!(
            receipt.summary().starts_with(&format!(
                "paid 0.003 USD from {} on eip155:84532 tx 0x",
                DevLedger::DEV_ACCOUNTS[1]
            )),
            "{}",
            receipt.summary()
        );
        assert_eq!(ledger.settlements(), 1);
        assert_eq!(layer.signer().signatures(), 1);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        assert!(
            seen.iter()
                .all(|(_, _, accept)| accept.as_deref() == Some("evm/charge"))
        );
        assert!(seen[1].0.as_deref().unwrap().starts_with("Payment "));
        assert_eq!(seen[1].1, None);
        let debug = format!("{receipt:?}");
        assert!(!debug.contains(seen[1].0.as_deref().unwrap()), "{debug}");

        // Over the cap: refused before signing, as for x402.
        let layer = self::layer().with_policy(
            super::super::SpendPolicy::new()
                .with_max_per_payment_usd("0.001")
                .unwrap(),
        );
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(mpp_server(ledger.clone(), true, Arc::default()));
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(matches!(error.kind, PaymentErrorKind::Policy(_)), "{error}");
        assert_eq!(layer.signer().signatures(), 0);

        // Signed offers required: MPP has none, nothing is signed.
        let layer =
            self::layer().with_policy(super::super::SpendPolicy::new().with_offer_signatures(
                super::super::OfferSignatures::Require(alloy_primitives::Address::ZERO),
            ));
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(mpp_server(ledger.clone(), true, Arc::default()));
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(
            matches!(
                error.kind,
                PaymentErrorKind::Policy(super::super::Refusal::UnsignedOffer)
            ),
            "{error}"
        );
        assert_eq!(layer.signer().signatures(), 0);
        assert_eq!(ledger.settlements(), 1);
    }

    #[tokio::test]
    async fn both_offered_x402_unless_mpp_is_preferred() {
        for protocol in [super::super::Protocol::X402, super::super::Protocol::Mpp] {
            let ledger = Arc::new(DevLedger::new());
            let seen = Arc::new(Mutex::new(Vec::new()));
            let layer =
                layer().with_policy(super::super::SpendPolicy::new().with_protocol(protocol));
            let client = ServiceBuilder::new()
                .layer(layer.clone())
                .service(mpp_server(ledger.clone(), false, seen.clone()));
            let response = client.oneshot(chat("m")).await.unwrap();
            let receipt = response.extensions().get::<Receipt>().cloned().unwrap();
            assert_eq!(receipt.protocol(), protocol);
            assert!(receipt.settlement().unwrap().success);
            assert_eq!(ledger.settlements(), 1);
            let seen = seen.lock().unwrap().clone();
            let mpp = protocol == super::super::Protocol::Mpp;
            assert_eq!(seen[1].0.is_some(), mpp);
            assert_eq!(seen[1].1.is_some(), !mpp);
            assert_eq!(receipt.mpp_receipt().is_some(), mpp);
        }
    }

    #[tokio::test]
    async fn a_402_after_an_mpp_credential_and_unsupported_challenges_get_no_signature() {
        let challenge = |method: &str| {
            format!(
                r#"Payment id="a", realm="r", method="{method}", intent="charge", request="e30""#
            )
        };
        let script = Scripted::new(vec![answer(
            402,
            &[("www-authenticate", challenge("tempo"))],
            "{}",
        )]);
        let layer = layer();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(script.service());
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(
            matches!(&error.kind, PaymentErrorKind::Unsupported(super::super::Unsupported::Method { method, .. }) if method == "tempo"),
            "{error}"
        );
        assert_eq!(layer.signer().signatures(), 0);

        // A server that answers 402 again after the credential: one signature.
        let ledger = Arc::new(DevLedger::new());
        let server = mpp_server(ledger.clone(), true, Arc::default());
        let again = service_fn(move |mut request: Request<Full<Bytes>>| {
            // The credential is dropped on the way: the server asks again.
            request.headers_mut().remove("authorization");
            server.clone().oneshot(request)
        });
        let layer = self::layer();
        let client = ServiceBuilder::new().layer(layer.clone()).service(again);
        let error = payment_error(client.oneshot(chat("m")).await);
        assert!(
            matches!(error.kind, PaymentErrorKind::RequiredAgain),
            "{error}"
        );
        assert_eq!(layer.signer().signatures(), 1);
        assert_eq!(error.attempts.requests, 2);
        assert_eq!(ledger.settlements(), 0);
    }
}

//! [`HttpFacilitator`]: a client of the standard facilitator HTTP API.
//!
//! `POST {base}/verify` and `POST {base}/settle` with
//! `{x402Version, paymentPayload, paymentRequirements}`, `GET {base}/supported`.
//! Every call is bounded by a timeout. An unreachable facilitator, a timeout,
//! a 5xx, or an answer outside the protocol is a [`FacilitatorError`], which
//! the layer answers with `PAYMENT_VERIFICATION_UNAVAILABLE` (503,
//! `Retry-After`) and nothing consumed, so the client may resend the same
//! payment. The exception is a `/settle` that was sent and got no answer
//! within the timeout (or whose answer broke off): the transfer may have
//! happened, so it is [pending](super::FacilitatorErrorKind::Pending) without a
//! transaction ([`FacilitatorError::answer_lost`]); the layer keeps the claim
//! and asks `/settle` again on the resend. A non-2xx answer that still carries
//! a verdict (`isValid` or `success`) counts as that verdict, as the official
//! clients read it.
//!
//! [`HttpFacilitator::new`] speaks plain HTTP (a facilitator on the same
//! host). With the `rustls` feature, [`HttpFacilitator::new_with_tls`] speaks
//! `https://` (and `http://`) with the roots of a `ClientTls`; a facilitator
//! whose certificate is not trusted is unreachable, and the error says why
//! (`invalid peer certificate: UnknownIssuer`). Any other connector goes
//! through [`HttpFacilitator::new_with_connector`].
//!
//! ```
//! use std::time::Duration;
//! use walletgate::x402::facilitator::HttpFacilitator;
//!
//! let facilitator = HttpFacilitator::new("http://127.0.0.1:4020/facilitator")?
//!     .with_timeout(Duration::from_secs(10))
//!     .with_header("authorization", "Bearer facilitator-token")?;
//! # let _ = facilitator;
//! # Ok::<(), walletgate::x402::ConfigError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::api::{Facilitator, FacilitatorError, FacilitatorRequest};
use super::auth::FacilitatorAuth;
use super::idempotency::{IDEMPOTENCY_KEY_HEADER, IdempotencyKey};
use crate::store::BoxFuture;
use crate::x402::ConfigError;
use crate::x402::wire::types::{SettleResponse, SupportedResponse, VerifyResponse};

/// Default bound on one facilitator call, connection included.
pub const DEFAULT_FACILITATOR_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh secret for deriving `Idempotency-Key`s.
fn random_secret() -> Result<[u8; 32], ConfigError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|error| ConfigError::Random(error.to_string()))?;
    Ok(secret)
}

/// Largest facilitator answer read, in bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A facilitator reached over HTTP.
#[derive(Clone)]
pub struct HttpFacilitator<C = HttpConnector> {
    client: Client<C, Full<Bytes>>,
    base_url: String,
    timeout: Duration,
    headers: HeaderMap,
    /// The `Authorization` of each call, computed per call.
    auth: Option<Arc<dyn FacilitatorAuth>>,
    /// What each settlement's `Idempotency-Key` is derived from.
    idempotency_secret: [u8; 32],
}

impl HttpFacilitator<HttpConnector> {
    /// A client of the facilitator at `base_url` (`http://host[:port][/path]`).
    pub fn new(base_url: &str) -> Result<Self, ConfigError> {
        if !base_url.starts_with("http://") {
            return Err(ConfigError::InvalidFacilitatorUrl(format!(
                "{base_url} (new speaks plain http; for https use with_tls, feature rustls)"
            )));
        }
        Self::new_with_connector(base_url, HttpConnector::new())
    }
}

#[cfg(feature = "rustls")]
impl HttpFacilitator<crate::tls::HttpsConnector> {
    /// A client of the facilitator at `base_url` (`https://…` or `http://…`)
    /// that trusts the roots of `tls`.
    ///
    /// ```
    /// use walletgate::tls::ClientTls;
    /// use walletgate::x402::facilitator::HttpFacilitator;
    ///
    /// let facilitator =
    ///     HttpFacilitator::new_with_tls("https://x402.example/facilitator", &ClientTls::webpki_roots())?;
    /// # let _ = facilitator;
    /// # Ok::<(), walletgate::x402::ConfigError>(())
    /// ```
    pub fn new_with_tls(base_url: &str, tls: &crate::tls::ClientTls) -> Result<Self, ConfigError> {
        if !(base_url.starts_with("https://") || base_url.starts_with("http://")) {
            return Err(ConfigError::InvalidFacilitatorUrl(base_url.to_owned()));
        }
        Self::new_with_connector(base_url, tls.https_connector()?)
    }
}

impl<C> HttpFacilitator<C>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    /// A client of the facilitator at `base_url` through `connector` (e.g. a TLS connector).
    pub fn new_with_connector(base_url: &str, connector: C) -> Result<Self, ConfigError> {
        let base_url = base_url.trim_end_matches('/').to_owned();
        let probe = format!("{base_url}/verify");
        match probe.parse::<Uri>() {
            Ok(uri) if uri.scheme().is_some() && uri.authority().is_some() => {}
            _ => return Err(ConfigError::InvalidFacilitatorUrl(base_url)),
        }
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            base_url,
            timeout: DEFAULT_FACILITATOR_TIMEOUT,
            headers: HeaderMap::new(),
            auth: None,
            idempotency_secret: random_secret()?,
        })
    }

    /// Bounds each call (default 30 s).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends `name: value` on every call (e.g. the facilitator's API key).
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self, ConfigError> {
        let name =
            HeaderName::try_from(name).map_err(|_| ConfigError::InvalidHeader(name.to_owned()))?;
        let mut value = HeaderValue::try_from(value)
            .map_err(|_| ConfigError::InvalidHeader(name.to_string()))?;
        value.set_sensitive(true);
        self.headers.insert(name, value);
        Ok(self)
    }

    /// Signs every call with `auth`'s `Authorization`, made for that call's
    /// method and URL (e.g. [`CdpAuth`](super::CdpAuth), feature `cdp`).
    #[must_use]
    pub fn with_auth(mut self, auth: Arc<dyn FacilitatorAuth>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Derives each settlement's `Idempotency-Key` from `secret` (default:
    /// random per client). Replicas that may resend each other's
    /// settlements (a buyer's resend after a lost answer reaching another
    /// replica) share one secret, so the facilitator knows them as the
    /// first caller; keep it as secret as the facilitator's token.
    #[must_use]
    pub fn with_idempotency_secret(mut self, secret: [u8; 32]) -> Self {
        self.idempotency_secret = secret;
        self
    }

    /// The key a settlement of `request` is sent with: the request's own,
    /// or one derived from the signed payment, the same on every retry.
    fn idempotency_key(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<IdempotencyKey, FacilitatorError> {
        if let Some(key) = request.idempotency_key() {
            return Ok(key.clone());
        }
        let payment = serde_json::to_vec(&request.payment_payload().payload)
            .map_err(|error| FacilitatorError::protocol(format!("encoding /settle: {error}")))?;
        Ok(IdempotencyKey::derive(&self.idempotency_secret, &payment))
    }

    /// One call: the status and body, bounded by the timeout.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), FacilitatorError> {
        self.exchange(method, path, body, None)
            .await
            .map_err(|(error, _)| error)
    }

    /// [`call`](Self::call), its error saying whether the request may have
    /// been taken (no answer within the timeout, or its answer broken off):
    /// then whatever it asked for may have happened.
    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> Result<(StatusCode, Bytes), (FacilitatorError, bool)> {
        let uri: Uri = format!("{}{path}", self.base_url).parse().map_err(|_| {
            (
                FacilitatorError::protocol(format!("request to {path}: not a URL")),
                false,
            )
        })?;
        let mut builder = Request::builder().method(method.clone()).uri(uri.clone());
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        if let Some(auth) = &self.auth {
            let authorization = auth.authorization(&method, &uri).map_err(|error| {
                (
                    FacilitatorError::unavailable(format!("{path}: {error}")),
                    false,
                )
            })?;
            builder = builder.header(http::header::AUTHORIZATION, authorization);
        }
        if body.is_some() {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
        }
        if let Some(key) = idempotency_key {
            let mut value = HeaderValue::try_from(key.as_str()).map_err(|_| {
                (
                    FacilitatorError::protocol("an Idempotency-Key that is not a header value"),
                    false,
                )
            })?;
            value.set_sensitive(true);
            builder = builder.header(IDEMPOTENCY_KEY_HEADER, value);
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|error| {
                (
                    FacilitatorError::protocol(format!("request to {path}: {error}")),
                    false,
                )
            })?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|error| {
                // Only a failed connect is sure not to have sent the request:
                // a connection closed after it may have been taken.
                let taken = !error.is_connect();
                let error = FacilitatorError::unavailable(format!(
                    "{path}: {}",
                    crate::error_chain(&error)
                ));
                (error, taken)
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|error| {
                    let error = FacilitatorError::unavailable(format!("{path} answer: {error}"));
                    (error, true)
                })?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                let error = FacilitatorError::unavailable(format!(
                    "{path}: no answer within {:?}",
                    self.timeout
                ));
                (error, true)
            })?
    }

    /// POSTs `request` and reads a verdict that carries `verdict_field`.
    async fn post_for<T: DeserializeOwned>(
        &self,
        path: &str,
        request: &impl Serialize,
        verdict_field: &str,
    ) -> Result<T, FacilitatorError> {
        let body = serde_json::to_vec(request)
            .map_err(|error| FacilitatorError::protocol(format!("encoding {path}: {error}")))?;
        let (status, answer) = self.call(Method::POST, path, Some(body)).await?;
        read_verdict(path, status, &answer, verdict_field)
    }
}

/// A 2xx answer must parse; a non-2xx one counts only if it carries a verdict.
fn read_verdict<T: DeserializeOwned>(
    path: &str,
    status: StatusCode,
    answer: &[u8],
    verdict_field: &str,
) -> Result<T, FacilitatorError> {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(answer).ok();
    let has_verdict = parsed
        .as_ref()
        .is_some_and(|value| value.get(verdict_field).is_some());
    if !status.is_success() && !has_verdict {
        return Err(FacilitatorError::unavailable(format!(
            "{path} answered {status}"
        )));
    }
    let value = parsed.ok_or_else(|| {
        FacilitatorError::protocol(format!("{path} answered {status} without JSON"))
    })?;
    serde_json::from_value(value).map_err(|error| {
        FacilitatorError::protocol(format!(
            "{path} answered {status} outside the protocol: {error}"
        ))
    })
}

/// The TS SDK's (and `walletgate facilitator`'s) "broadcast, no receipt
/// yet" verdict: not a failure, the transfer may still land.
const SETTLEMENT_PENDING: &str = "settlement_pending";

/// A `settlement_pending` answer naming its transaction is
/// [`FacilitatorError::pending`]: the claim must be kept, not released.
fn pending_as_error(settled: SettleResponse) -> Result<SettleResponse, FacilitatorError> {
    if !settled.success
        && settled.error_reason.as_deref() == Some(SETTLEMENT_PENDING)
        && !settled.transaction.is_empty()
    {
        return Err(FacilitatorError::pending(
            settled.transaction,
            settled
                .error_message
                .unwrap_or_else(|| SETTLEMENT_PENDING.to_owned()),
        ));
    }
    Ok(settled)
}

impl<C> Facilitator for HttpFacilitator<C>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(self.post_for("/verify", request, "isValid"))
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            let body = serde_json::to_vec(request).map_err(|error| {
                FacilitatorError::protocol(format!("encoding /settle: {error}"))
            })?;
            let key = self.idempotency_key(request)?;
            match self
                .exchange(Method::POST, "/settle", Some(body), Some(&key))
                .await
            {
                Ok((status, answer)) => {
                    read_verdict("/settle", status, &answer, "success").and_then(pending_as_error)
                }
                // Asked, and no answer: the transfer may have happened; the
                // resend of the same payment asks again.
                Err((error, true)) => Err(FacilitatorError::answer_lost(error.detail())),
                Err((error, false)) => Err(error),
            }
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        Box::pin(async move {
            let (status, answer) = self.call(Method::GET, "/supported", None).await?;
            read_verdict("/supported", status, &answer, "kinds")
        })
    }
}

impl<C> fmt::Debug for HttpFacilitator<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values may be credentials: list names only.
        f.debug_struct("HttpFacilitator")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("auth", &self.auth.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_at_construction() {
        assert!(HttpFacilitator::new("http://127.0.0.1:4020/").is_ok());
        assert!(matches!(
            HttpFacilitator::new("https://x402.example/facilitator"),
            Err(ConfigError::InvalidFacilitatorUrl(_))
        ));
        assert!(HttpFacilitator::new("http://").is_err());
        assert!(HttpFacilitator::new("127.0.0.1:4020").is_err());
    }

    #[cfg(feature = "rustls")]
    #[test]
    fn with_tls_accepts_https_and_http_only() {
        let tls = crate::tls::ClientTls::webpki_roots();
        assert!(HttpFacilitator::new_with_tls("https://x402.example/facilitator", &tls).is_ok());
        assert!(HttpFacilitator::new_with_tls("http://127.0.0.1:4020", &tls).is_ok());
        assert!(matches!(
            HttpFacilitator::new_with_tls("ftp://x402.example", &tls),
            Err(ConfigError::InvalidFacilitatorUrl(_))
        ));
        assert!(HttpFacilitator::new_with_tls("https://", &tls).is_err());
    }

    fn payment(signature: &str) -> FacilitatorRequest {
        let offer = crate::x402::server::PaymentOption::base_sepolia_usdc(
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        )
        .unwrap()
        .requirements_for_amount(crate::x402::wire::AtomicAmount::new(10_000));
        let payload = crate::x402::wire::PaymentPayload {
            x402_version: 2,
            resource: None,
            accepted: offer.clone(),
            payload: serde_json::json!({"signature": signature}),
            extensions: None,
        };
        FacilitatorRequest::new(payload, offer)
    }

    /// A settlement's key is the same on every resend of the same payment
    /// (and on every replica sharing the secret), another for another
    /// payment or secret; a caller's own key wins.
    #[test]
    fn each_settlement_has_a_stable_idempotency_key_of_its_own() {
        fn key(client: &HttpFacilitator, request: &FacilitatorRequest) -> IdempotencyKey {
            client.idempotency_key(request).unwrap()
        }
        let client = HttpFacilitator::new("http://127.0.0.1:1").unwrap();
        let first = key(&client, &payment("0x01"));
        assert_eq!(first, key(&client, &payment("0x01")));
        assert_ne!(first, key(&client, &payment("0x02")));
        let other = HttpFacilitator::new("http://127.0.0.1:1").unwrap();
        assert_ne!(first, key(&other, &payment("0x01")), "a random secret each");
        let shared = [7; 32];
        let replicas = (
            client.clone().with_idempotency_secret(shared),
            other.with_idempotency_secret(shared),
        );
        assert_eq!(
            key(&replicas.0, &payment("0x01")),
            key(&replicas.1, &payment("0x01"))
        );
        let own = IdempotencyKey::new("the-callers-own-key").unwrap();
        let keyed = payment("0x01").with_idempotency_key(own.clone());
        assert_eq!(key(&client, &keyed), own);
    }

    #[test]
    fn debug_hides_header_values() {
        let facilitator = HttpFacilitator::new("http://127.0.0.1:1")
            .unwrap()
            .with_header("x-api-key", "secret-value")
            .unwrap();
        let text = format!("{facilitator:?}");
        assert!(text.contains("x-api-key"));
        assert!(!text.contains("secret-value"));
    }

    #[test]
    fn a_pending_settlement_is_a_pending_error_naming_its_transaction() {
        let pending: SettleResponse = serde_json::from_str(
            r#"{"success":false,"errorReason":"settlement_pending","transaction":"0xabc","network":"eip155:84532"}"#,
        )
        .unwrap();
        let error = pending_as_error(pending).unwrap_err();
        assert_eq!(
            error.kind(),
            &crate::x402::facilitator::FacilitatorErrorKind::Pending
        );
        assert_eq!(error.transaction(), Some("0xabc"));
        let failed: SettleResponse = serde_json::from_str(
            r#"{"success":false,"errorReason":"settlement_pending","transaction":"","network":"eip155:84532"}"#,
        )
        .unwrap();
        assert!(pending_as_error(failed).is_ok());
    }

    #[test]
    fn verdicts_are_read_from_any_status_that_carries_one() {
        let invalid = br#"{"isValid":false,"invalidReason":"insufficient_funds","payer":"0xabc"}"#;
        let verdict: VerifyResponse =
            read_verdict("/verify", StatusCode::BAD_REQUEST, invalid, "isValid").unwrap();
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some("insufficient_funds")
        );
        let outage = read_verdict::<VerifyResponse>(
            "/verify",
            StatusCode::BAD_GATEWAY,
            b"<html>",
            "isValid",
        );
        assert_eq!(
            outage.unwrap_err().kind(),
            &crate::x402::facilitator::FacilitatorErrorKind::Unavailable
        );
        let garbage = read_verdict::<VerifyResponse>("/verify", StatusCode::OK, b"{}", "isValid");
        assert_eq!(
            garbage.unwrap_err().kind(),
            &crate::x402::facilitator::FacilitatorErrorKind::Protocol
        );
        let settled: SettleResponse = read_verdict(
            "/settle",
            StatusCode::OK,
            br#"{"success":true,"transaction":"0x1","network":"eip155:84532"}"#,
            "success",
        )
        .unwrap();
        assert!(settled.success);
    }
}

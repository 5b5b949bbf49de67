//! Paid jobs: a paid request answered 202 with a job, polled with the
//! payment that paid for it (the specification's paid-but-lost replay).

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, StatusCode, Uri};
use http_body::Body;
use http_body_util::Full;
use serde_json::Value;
use tower_service::Service;

use super::error::{ApiError, Attempts, BoxError, ClientError};
use super::receipt::Receipt;
use super::retry::read_error;
use super::transport::{read_capped, send};

/// A paid job (`202 {id, status, poll_url}`), polled by resending the same
/// `PAYMENT-SIGNATURE`: the server answers such a replay uncharged.
///
/// ```text
/// let response = paying_client.oneshot(post_image).await?;   // 202, paid
/// let receipt = response.extensions().get::<Receipt>().cloned().unwrap();
/// let job = ImageJob::new(&uri, &body_bytes, receipt).unwrap();
/// loop {
///     if let Some(done) = job.poll(&plain_client).await? { break done; }
///     tokio::time::sleep(interval).await;
/// }
/// ```
#[derive(Clone, Debug)]
pub struct ImageJob {
    /// The job id.
    pub id: String,
    /// The absolute URL polled.
    pub poll_url: Uri,
    receipt: Receipt,
}

impl ImageJob {
    /// The job of a 202 answer to `request_uri` whose JSON body is `body`,
    /// paid as `receipt` says. `None` if the body names no job, or it was
    /// paid through MPP: a job is polled with its x402 `PAYMENT-SIGNATURE`,
    /// and an MPP credential is single-use.
    pub fn new(request_uri: &Uri, body: &[u8], receipt: Receipt) -> Option<Self> {
        if receipt.protocol() != super::Protocol::X402 {
            return None;
        }
        let json: Value = serde_json::from_slice(body).ok()?;
        let id = json.get("id")?.as_str()?.to_owned();
        let poll = json.get("poll_url")?.as_str()?;
        let poll_url = if poll.starts_with('/') {
            let mut parts = request_uri.clone().into_parts();
            parts.path_and_query = Some(poll.parse().ok()?);
            Uri::from_parts(parts).ok()?
        } else {
            poll.parse().ok()?
        };
        Some(Self {
            id,
            poll_url,
            receipt,
        })
    }

    /// The receipt of the payment that paid for the job.
    pub fn receipt(&self) -> &Receipt {
        &self.receipt
    }

    /// Polls once through `client` (a plain, non-paying client service):
    /// `None` while the job runs (202), its JSON once done (200).
    pub async fn poll<S, ResBody>(&self, client: &S) -> Result<Option<Value>, ClientError>
    where
        S: Service<Request<Full<Bytes>>, Response = http::Response<ResBody>> + Clone,
        S::Error: Into<BoxError>,
        ResBody: Body<Data = Bytes>,
        ResBody::Error: Into<BoxError>,
    {
        let payment = HeaderValue::from_str(self.receipt.payment_header()).map_err(|_| {
            ClientError::Transport("the payment header is not a header value".into())
        })?;
        let request = Request::get(self.poll_url.clone())
            .header("payment-signature", payment)
            .body(Full::new(Bytes::new()))
            .map_err(|error| ClientError::Transport(error.into()))?;
        let response = send(client.clone(), request).await?;
        let status = response.status();
        let body = read_capped(response.into_body()).await?;
        match status {
            StatusCode::ACCEPTED => Ok(None),
            status if status.is_success() => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|error| ClientError::Transport(error.into())),
            status => Err(ClientError::Api(ApiError {
                status,
                code: read_error(status, &body, None).code,
                body,
                attempts: Attempts::default(),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::x402::{facilitator::DevLedger, server::PaymentOption, wire::AtomicAmount};

    #[test]
    fn a_relative_poll_url_is_resolved_against_the_request() {
        let offer = PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9])
            .unwrap()
            .requirements_for_amount(AtomicAmount::new(41_000));
        let receipt = Receipt::new(offer, Arc::from("signed"));
        let uri: Uri = "http://127.0.0.1:7/api/v1/images/generations"
            .parse()
            .unwrap();
        let body = br#"{"id":"imgjob_1","status":"queued","poll_url":"/api/v1/images/generations/imgjob_1"}"#;
        let job = ImageJob::new(&uri, body, receipt).unwrap();
        assert_eq!(job.id, "imgjob_1");
        assert_eq!(
            job.poll_url.to_string(),
            "http://127.0.0.1:7/api/v1/images/generations/imgjob_1"
        );
        assert!(!format!("{job:?}").contains("signed"));
        assert!(ImageJob::new(&uri, b"{}", job.receipt().clone()).is_none());
        let mpp = job
            .receipt()
            .clone()
            .with_protocol(super::super::Protocol::Mpp);
        assert!(ImageJob::new(&uri, body, mpp).is_none());
    }
}

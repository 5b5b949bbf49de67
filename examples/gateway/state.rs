//! The gateway's state, shared by every request, and its upstream call:
//! timeout, classification, failover advice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use walletgate::clock::SharedClock;
use walletgate::envelope::{ErrorCode, GatewayError};
use walletgate::upstream::{classify_upstream, free_model_override, suggests_failover};

use crate::catalogue::{Catalogue, Model};
use crate::gates::Gates;
use crate::images::jobs::ImageJobs;
use crate::request::ChatRequest;
use crate::upstream::{Completion, EventStream, SharedUpstream, UpstreamFault};

/// Everything a request needs, shared by all of them.
pub(crate) struct Gateway {
    pub(crate) catalogue: Catalogue,
    pub(crate) upstream: SharedUpstream,
    pub(crate) upstream_timeout: Duration,
    pub(crate) body_limit_bytes: usize,
    pub(crate) clock: SharedClock,
    /// The free-tier limit and the payment layers the pipelines compose.
    pub(crate) gates: Gates,
    /// Accepted image jobs.
    pub(crate) images: ImageJobs,
    /// The `GET /v1/models` body, rendered once: the catalogue never changes.
    pub(crate) listing: bytes::Bytes,
    /// Its `Content-Length`, formatted once.
    pub(crate) listing_length: http::HeaderValue,
    next_id: AtomicU64,
}

pub(crate) type AppState = Arc<Gateway>;

impl Gateway {
    pub(crate) fn new(
        catalogue: Catalogue,
        upstream: SharedUpstream,
        upstream_timeout: Duration,
        body_limit_bytes: usize,
        clock: SharedClock,
        gates: Gates,
        images: ImageJobs,
    ) -> Self {
        let listing = bytes::Bytes::from(catalogue.listing().to_string());
        let listing_length = http::HeaderValue::from(listing.len());
        Self {
            upstream,
            upstream_timeout,
            body_limit_bytes,
            clock,
            gates,
            images,
            listing,
            listing_length,
            catalogue,
            next_id: AtomicU64::new(1),
        }
    }

    /// A fresh response id such as `chatcmpl-00000000000000000000002a`.
    pub(crate) fn next_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}{n:024x}")
    }

    /// The whole answer, within the upstream timeout.
    pub(crate) async fn complete(
        &self,
        model: &Model,
        request: &ChatRequest,
    ) -> Result<Completion, GatewayError> {
        match tokio::time::timeout(
            self.upstream_timeout,
            self.upstream.complete(model, request),
        )
        .await
        {
            Err(_elapsed) => Err(GatewayError::new(ErrorCode::Timeout)),
            Ok(result) => result.map_err(|fault| self.fault_error(model, false, &fault)),
        }
    }

    /// A started stream, within the upstream timeout.
    pub(crate) async fn stream(
        &self,
        model: &Model,
        request: &ChatRequest,
    ) -> Result<EventStream, GatewayError> {
        match tokio::time::timeout(self.upstream_timeout, self.upstream.stream(model, request))
            .await
        {
            Err(_elapsed) => Err(GatewayError::new(ErrorCode::Timeout)),
            Ok(result) => result.map_err(|fault| self.fault_error(model, true, &fault)),
        }
    }

    /// What the client is told about an upstream fault: the classified code,
    /// the redacted upstream text, and for capacity problems where to fail over.
    pub(crate) fn fault_error(
        &self,
        model: &Model,
        streaming: bool,
        fault: &UpstreamFault,
    ) -> GatewayError {
        let mut code = classify_upstream(fault.status, &fault.text);
        if model.is_free() {
            code = free_model_override(code, streaming);
        }
        let mut error = GatewayError::new(code).with_debug(&fault.text);
        if code == ErrorCode::RateLimited {
            error = error.with_source(model.provider());
        }
        if suggests_failover(code) {
            let alternatives = self.catalogue.same_tier_alternatives(model);
            if !alternatives.is_empty() {
                error = error.with_message(format!(
                    "{} Same-tier models of other providers: {}.",
                    code.default_message(),
                    alternatives.join(", ")
                ));
            }
        }
        error
    }
}

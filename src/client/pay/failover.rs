//! Failover to a same-tier model of another provider.
//!
//! On `MODEL_UNAVAILABLE` or `RATE_LIMITED` the client reads the gateway's
//! `GET …/v1/models` (once per listing URL; cached), finds the requested
//! model's row and picks the first other row with the **same tier** from
//! **another provider**. The tier is the row's `tier` (the gateway example
//! lists it; it equals its `billing_mode`: `paid` per token, `flat`,
//! `per_image`, `free`), else its `billing_mode`; the provider is
//! `owned_by`, else the id before `/`. The request body's `model` is
//! rewritten and the request sent again as a new request (a new quote, a
//! new payment: the refused one was never settled).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Request, Uri};
use http_body::Body;
use http_body_util::Full;
use serde_json::Value;
use tower_service::Service;

use super::error::BoxError;
use super::transport::{read_capped, send};

/// One `GET /v1/models` row, as far as failover reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRow {
    /// The model id, `provider/name`.
    pub id: String,
    /// The provider.
    pub provider: String,
    /// The tier (`tier`, else `billing_mode`).
    pub tier: Option<String>,
}

impl ModelRow {
    fn from_json(row: &Value) -> Option<Self> {
        let id = row.get("id")?.as_str()?.to_owned();
        let provider = row
            .get("owned_by")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| id.split_once('/').map(|(provider, _)| provider.to_owned()))
            .unwrap_or_default();
        let tier = ["tier", "billing_mode"]
            .iter()
            .find_map(|field| row.get(*field).and_then(Value::as_str))
            .map(str::to_owned);
        Some(Self { id, provider, tier })
    }
}

/// The failover rule and its cache of model listings (shared by clones).
#[derive(Clone, Default)]
pub struct Failover {
    listings: Arc<Mutex<HashMap<String, Arc<Vec<ModelRow>>>>>,
}

impl fmt::Debug for Failover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failover").finish_non_exhaustive()
    }
}

impl Failover {
    /// Failover with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The model to fail over to from `model`, among `rows`.
    pub fn alternative<'a>(rows: &'a [ModelRow], model: &str) -> Option<&'a ModelRow> {
        let current = rows.iter().find(|row| row.id == model)?;
        let tier = current.tier.as_deref()?;
        rows.iter()
            .find(|row| row.tier.as_deref() == Some(tier) && row.provider != current.provider)
    }

    /// The body of the same request on another provider's same-tier model, if there is one.
    pub(crate) async fn reroute<S, ResBody>(
        &self,
        inner: S,
        parts: &Parts,
        body: &Bytes,
    ) -> Option<Bytes>
    where
        S: Service<Request<Full<Bytes>>, Response = http::Response<ResBody>> + Clone,
        S::Error: Into<BoxError>,
        ResBody: Body<Data = Bytes>,
        ResBody::Error: Into<BoxError>,
    {
        let mut json: Value = serde_json::from_slice(body).ok()?;
        let model = json.get("model")?.as_str()?.to_owned();
        let url = models_url(&parts.uri)?;
        let rows = self.listing(inner, parts, &url).await?;
        let alternative = Self::alternative(&rows, &model)?;
        json["model"] = Value::String(alternative.id.clone());
        serde_json::to_vec(&json).ok().map(Bytes::from)
    }

    async fn listing<S, ResBody>(
        &self,
        inner: S,
        parts: &Parts,
        url: &Uri,
    ) -> Option<Arc<Vec<ModelRow>>>
    where
        S: Service<Request<Full<Bytes>>, Response = http::Response<ResBody>> + Clone,
        S::Error: Into<BoxError>,
        ResBody: Body<Data = Bytes>,
        ResBody::Error: Into<BoxError>,
    {
        let key = url.to_string();
        if let Some(rows) = self.cached(&key) {
            return Some(rows);
        }
        let mut request = Request::builder().method(Method::GET).uri(url.clone());
        if let Some(host) = parts.headers.get(http::header::HOST) {
            request = request.header(http::header::HOST, host);
        }
        let request = request.body(Full::new(Bytes::new())).ok()?;
        let response = send(inner, request).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let body = read_capped(response.into_body()).await.ok()?;
        let listing: Value = serde_json::from_slice(&body).ok()?;
        let rows: Vec<ModelRow> = listing
            .get("data")?
            .as_array()?
            .iter()
            .filter_map(ModelRow::from_json)
            .collect();
        let rows = Arc::new(rows);
        if let Ok(mut listings) = self.listings.lock() {
            listings.insert(key, rows.clone());
        }
        Some(rows)
    }

    fn cached(&self, key: &str) -> Option<Arc<Vec<ModelRow>>> {
        self.listings.lock().ok()?.get(key).cloned()
    }
}

/// `…/v1/models` beside the request's `…/v1/…` path (a gateway may sit under a prefix).
fn models_url(uri: &Uri) -> Option<Uri> {
    let path = uri.path();
    let base = &path[..path.find("/v1/")?];
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(format!("{base}/v1/models").parse().ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, tier: &str) -> ModelRow {
        ModelRow::from_json(&serde_json::json!({"id": id, "billing_mode": tier})).unwrap()
    }

    #[test]
    fn the_alternative_is_another_providers_model_of_the_same_tier() {
        let rows = [
            row("openai/gpt-5-mini", "paid"),
            row("openai/gpt-5", "paid"),
            row("xai/grok-code-fast", "flat"),
            row("google/gemini-2.5-flash", "paid"),
        ];
        assert_eq!(
            Failover::alternative(&rows, "openai/gpt-5-mini").map(|row| row.id.as_str()),
            Some("google/gemini-2.5-flash")
        );
        assert_eq!(Failover::alternative(&rows, "xai/grok-code-fast"), None);
        assert_eq!(Failover::alternative(&rows, "unknown/model"), None);
    }

    #[test]
    fn the_listing_sits_beside_the_request() {
        let uri: Uri = "http://127.0.0.1:9/api/v1/chat/completions?x=1"
            .parse()
            .unwrap();
        assert_eq!(
            models_url(&uri).unwrap().to_string(),
            "http://127.0.0.1:9/api/v1/models"
        );
        assert!(models_url(&"http://h/other".parse().unwrap()).is_none());
    }
}

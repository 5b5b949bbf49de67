//! An OpenAI-compatible HTTP upstream (`POST {base}/chat/completions`).
//!
//! `https://` (rustls, Mozilla's roots plus `GATEWAY_EXTRA_CA_FILE`) or plain
//! `http://`. An untrusted certificate is a fault whose text says so
//! (`invalid peer certificate: …`), never a silent plain-text fallback.

use std::fmt;

use bytes::{Bytes, BytesMut};
use http::{Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use walletgate::error_chain;
use walletgate::tls::{ClientTls, HttpsConnector};

use super::{
    BoxFuture, Completion, EventStream, FinishReason, StreamEvent, Upstream, UpstreamFault, Usage,
};
use crate::catalogue::Model;
use crate::request::ChatRequest;

/// Largest upstream body read whole (answers and error texts).
const MAX_UPSTREAM_BODY_BYTES: usize = 8 * 1024 * 1024;

/// A provider's API key. Never printed: `Debug` shows only that it is set.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    pub(crate) fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

pub(crate) struct OpenAiUpstream {
    /// `https://host/v1` or `http://host:port/v1`, without a trailing slash.
    base_url: String,
    key: ApiKey,
    client: Client<HttpsConnector, Full<Bytes>>,
}

impl fmt::Debug for OpenAiUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiUpstream")
            .field("base_url", &self.base_url)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl OpenAiUpstream {
    /// An upstream at `base_url` (e.g. `https://api.openai.com/v1` or
    /// `http://127.0.0.1:9000/v1`), trusting the roots of `tls`.
    pub(crate) fn new(base_url: &str, key: ApiKey, tls: &ClientTls) -> Result<Self, String> {
        if !(base_url.starts_with("https://") || base_url.starts_with("http://")) {
            return Err(format!(
                "upstream base URL {base_url:?} must start with https:// or http://"
            ));
        }
        base_url
            .parse::<http::Uri>()
            .map_err(|error| format!("upstream base URL {base_url:?}: {error}"))?;
        let connector = tls.https_connector().map_err(|error| error.to_string())?;
        Ok(Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            key,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    fn request(
        &self,
        model: &Model,
        chat: &ChatRequest,
        stream: bool,
    ) -> Result<Request<Full<Bytes>>, UpstreamFault> {
        let mut body = chat.passthrough.clone();
        body.insert("model".into(), json!(model.upstream_name()));
        body.insert("messages".into(), Value::Array(chat.messages.clone()));
        body.insert("stream".into(), json!(stream));
        // A client that chose `max_completion_tokens` (which newer models
        // require) gets exactly that, not both names.
        if let Some(max_tokens) = chat.max_tokens
            && !body.contains_key("max_completion_tokens")
        {
            body.insert("max_tokens".into(), json!(max_tokens));
        }
        let bytes = serde_json::to_vec(&body)
            .map_err(|error| UpstreamFault::new(None, format!("request encoding: {error}")))?;
        Request::post(format!("{}/chat/completions", self.base_url))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {}", self.key.0))
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|error| UpstreamFault::new(None, format!("request building: {error}")))
    }

    async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, UpstreamFault> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|error| UpstreamFault::new(None, error_chain(&error)))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let text = read_text(response.into_body()).await;
        Err(UpstreamFault::new(Some(status), text))
    }
}

async fn read_text(body: hyper::body::Incoming) -> String {
    match Limited::new(body, MAX_UPSTREAM_BODY_BYTES).collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(error) => format!("unreadable upstream body: {error}"),
    }
}

fn usage_of(value: &Value) -> Usage {
    let count = |key: &str| value.get(key).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        prompt_tokens: count("prompt_tokens"),
        completion_tokens: count("completion_tokens"),
    }
}

fn finish_of(value: Option<&Value>) -> FinishReason {
    match value.and_then(Value::as_str) {
        Some("length") => FinishReason::Length,
        _ => FinishReason::Stop,
    }
}

fn unreadable(what: &str) -> UpstreamFault {
    UpstreamFault::new(None, format!("upstream answered 200 with {what}"))
}

impl Upstream for OpenAiUpstream {
    fn complete<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<Completion, UpstreamFault>> {
        Box::pin(async move {
            let response = self.send(self.request(model, request, false)?).await?;
            let body = Limited::new(response.into_body(), MAX_UPSTREAM_BODY_BYTES)
                .collect()
                .await
                .map_err(|_| unreadable("a body that could not be read"))?
                .to_bytes();
            let value: Value =
                serde_json::from_slice(&body).map_err(|_| unreadable("a body that is not JSON"))?;
            let choice = value
                .pointer("/choices/0")
                .ok_or_else(|| unreadable("no choices"))?;
            Ok(Completion {
                text: choice
                    .pointer("/message/content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                finish: finish_of(choice.get("finish_reason")),
                usage: value.get("usage").map(usage_of).unwrap_or_default(),
            })
        })
    }

    fn stream<'a>(
        &'a self,
        model: &'a Model,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, UpstreamFault>> {
        Box::pin(async move {
            let response = self.send(self.request(model, request, true)?).await?;
            let (sender, receiver) = mpsc::channel(32);
            tokio::spawn(relay_sse(response.into_body(), sender));
            Ok(receiver)
        })
    }
}

/// Reads the upstream's SSE (`data: {chunk}` lines, `data: [DONE]`) and sends
/// its text pieces on; ends with `Finished`, or a fault if the stream broke.
async fn relay_sse(
    mut body: hyper::body::Incoming,
    sender: mpsc::Sender<Result<StreamEvent, UpstreamFault>>,
) {
    let mut pending = BytesMut::new();
    let mut finish = FinishReason::Stop;
    let mut usage = Usage::default();
    loop {
        let frame = match body.frame().await {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(error)) => {
                let _ = sender
                    .send(Err(UpstreamFault::new(None, error_chain(&error))))
                    .await;
                return;
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if pending.len() + data.len() > MAX_UPSTREAM_BODY_BYTES {
            let _ = sender
                .send(Err(unreadable("an oversized stream line")))
                .await;
            return;
        }
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|byte| *byte == b'\n') {
            let line = pending.split_to(end + 1);
            let line = String::from_utf8_lossy(&line);
            let Some(payload) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let payload = payload.trim_start();
            if payload == "[DONE]" {
                let _ = sender
                    .send(Ok(StreamEvent::Finished { finish, usage }))
                    .await;
                return;
            }
            let Ok(chunk) = serde_json::from_str::<Value>(payload) else {
                continue;
            };
            if let Some(error) = chunk.get("error") {
                let _ = sender
                    .send(Err(UpstreamFault::new(None, error.to_string())))
                    .await;
                return;
            }
            if let Some(reason) = chunk
                .pointer("/choices/0/finish_reason")
                .filter(|v| !v.is_null())
            {
                finish = finish_of(Some(reason));
            }
            if let Some(reported) = chunk.get("usage").filter(|v| !v.is_null()) {
                usage = usage_of(reported);
            }
            if let Some(text) = chunk
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                && !text.is_empty()
                && sender
                    .send(Ok(StreamEvent::Text(text.to_owned())))
                    .await
                    .is_err()
            {
                // The client went away.
                return;
            }
        }
    }
    // The upstream closed without [DONE]: the answer may be cut short.
    let _ = sender
        .send(Err(UpstreamFault::new(
            None,
            "upstream stream ended without [DONE]: connection reset",
        )))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::routing::post;

    use crate::catalogue::Catalogue;
    use crate::request::Endpoint;
    use crate::tls_support::serve_https;

    #[test]
    fn key_is_never_in_debug() {
        let upstream = OpenAiUpstream::new(
            "http://127.0.0.1:9/v1",
            ApiKey::new("sk-test-not-a-real-key"),
            &ClientTls::default(),
        )
        .unwrap();
        assert!(!format!("{upstream:?}").contains("sk-test"));
    }

    #[test]
    fn accepts_https_and_http_refuses_garbage() {
        let tls = ClientTls::default();
        assert!(OpenAiUpstream::new("https://api.example/v1", ApiKey::new("k"), &tls).is_ok());
        assert!(OpenAiUpstream::new("http://127.0.0.1:9/v1", ApiKey::new("k"), &tls).is_ok());
        assert!(OpenAiUpstream::new("ftp://api.example/v1", ApiKey::new("k"), &tls).is_err());
        assert!(OpenAiUpstream::new("http://bad host/v1", ApiKey::new("k"), &tls).is_err());
    }

    /// A one-route OpenAI-compatible provider over HTTPS.
    async fn https_provider() -> crate::tls_support::HttpsServer {
        serve_https(axum::Router::new().route(
            "/v1/chat/completions",
            post(|| async {
                axum::Json(json!({
                    "choices": [{"message": {"content": "over tls"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 2, "completion_tokens": 2}
                }))
            }),
        ))
        .await
    }

    async fn complete(upstream: &OpenAiUpstream) -> Result<Completion, UpstreamFault> {
        let model = Catalogue::embedded()
            .get("openai/gpt-5-mini")
            .unwrap()
            .clone();
        let chat = ChatRequest::from_json(
            Endpoint::Chat,
            json!({"model": "openai/gpt-5-mini", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .unwrap();
        upstream.complete(&model, &chat).await
    }

    #[tokio::test]
    async fn https_provider_trusted_through_the_extra_ca() {
        let provider = https_provider().await;
        let tls = ClientTls::webpki_roots()
            .with_extra_ca_pem(provider.ca_pem.as_bytes())
            .unwrap();
        let base = format!("https://{}/v1", provider.address);
        let upstream = OpenAiUpstream::new(&base, ApiKey::new("test-key"), &tls).unwrap();
        let completion = complete(&upstream).await.unwrap();
        assert_eq!(completion.text, "over tls");
        assert_eq!(completion.usage.completion_tokens, 2);
    }

    #[tokio::test]
    async fn untrusted_https_provider_is_a_fault_that_says_why() {
        let provider = https_provider().await;
        let base = format!("https://{}/v1", provider.address);
        let upstream =
            OpenAiUpstream::new(&base, ApiKey::new("test-key"), &ClientTls::webpki_roots())
                .unwrap();
        let Err(fault) = complete(&upstream).await else {
            panic!("an untrusted certificate must not answer");
        };
        assert_eq!(fault.status, None);
        assert!(
            fault
                .text
                .ends_with("client error (Connect): invalid peer certificate: UnknownIssuer"),
            "{}",
            fault.text
        );
    }
}

//! The MCP endpoint at `/mcp`: the same data as the REST routes, as tools,
//! over MCP streamable HTTP (rmcp, revision 2025-11-25 with sessions; rmcp
//! also answers `server/discover` for 2026-07-28 clients).
//!
//! This module mounts the tools of `tools.rs`. What wraps the rmcp service,
//! outermost first:
//!
//! | layer | answers |
//! |---|---|
//! | `ApiKeyLayer` (the REST routes' own, so quotas are shared) | 401 without a valid `X-API-KEY`, 429 over quota, 503 when a store cannot answer |
//! | `WalletJwtLayer::optional_bearer` | 401 `invalid_token` for a present but invalid or expired JWT, naming `/.well-known/oauth-protected-resource/mcp` (RFC 9728 `resource_metadata`); no JWT passes |
//! | [`JsonRpcParse`] | 400 `-32700` for a POST's JSON body that does not parse (rmcp says a bare 415); 204 for an accepted `DELETE` (session termination; rmcp says 202, which the Python client reports as a failure) |
//!
//! Both gates render their refusals as JSON-RPC errors themselves
//! (`with_rejection(`[`jsonrpc_rejection`]`)`): MCP clients read a failed
//! POST's body as JSON-RPC (Python `mcp` 2.x reports only "Server returned an
//! error response" for anything else). Status and headers stay the Area A
//! ones (`WWW-Authenticate` with its RFC 6750 attributes, `Retry-After`).
//!
//! Public tools need only the API key. Wallet tools act for the wallet of the
//! verified JWT of *their own request* (rmcp hands each tool its request's
//! `http::request::Parts`), never for a wallet named in arguments and never
//! for one remembered from `initialize`. Without a JWT, or without the scope
//! a tool needs, the call is a tool error (`isError: true`) naming what is
//! missing, so a model can tell its user; a JWT that expires mid-session gets
//! the 401 above and the client reconnects with a fresh one.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::quotas::ApiKeys;
use axum::body::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tower::Layer;
use tower::Service;
use tower::util::MapRequest;
use walletgate::envelope::DataApiRejection;
use walletgate::wallet_jwt::{JwtVerifier, ResourceMetadataUrl, WalletJwtLayer};

use crate::state::SharedState;
use crate::tools::DataApiTools;

/// Largest request body read, as rmcp's own default (4 MiB).
const MAX_REQUEST_BODY_BYTES: usize = 4 * 1024 * 1024;

/// JSON-RPC code of a gate's refusal (the server-defined range): the HTTP
/// status and headers say which one.
const GATE_REFUSED: i64 = -32001;
/// JSON-RPC "Parse error".
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request".
const INVALID_REQUEST: i64 = -32600;

/// The `/mcp` service stack, outermost first (see the module docs).
pub(crate) type McpService = crate::quotas::Keyed<
    MapRequest<walletgate::wallet_jwt::WalletJwt<JsonRpcParse<RmcpService>>, EndSessionFn>,
>;

type EndSessionFn = fn(Request<axum::body::Body>) -> Request<axum::body::Body>;

/// Ending a session (`DELETE`) acts for no wallet, so its bearer is not
/// checked: a client ending a session whose JWT has just expired (the Python
/// client does, on leaving its context) ends it instead of getting 401.
fn end_session_without_bearer(mut request: Request<axum::body::Body>) -> Request<axum::body::Body> {
    if request.method() == Method::DELETE {
        request.headers_mut().remove(header::AUTHORIZATION);
    }
    request
}

type RmcpService = StreamableHttpService<DataApiTools, LocalSessionManager>;

/// Ends every open `/mcp` stream and session: on shutdown, since an SSE
/// stream never ends by itself and would hold the drain to its deadline.
#[derive(Clone)]
pub(crate) struct CloseStreams(Arc<dyn Fn() + Send + Sync>);

impl CloseStreams {
    pub(crate) fn close(&self) {
        (self.0)();
    }
}

/// The `/mcp` service, ready for `Router::nest_service`.
///
/// `api_keys` should be the layer the REST routes use: clones share the
/// per-key quota, so MCP calls and REST calls spend one budget.
pub(crate) fn service(
    state: SharedState,
    api_keys: ApiKeys,
    verifier: JwtVerifier,
    origin: &str,
    resource_metadata: ResourceMetadataUrl,
) -> (McpService, CloseStreams) {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts(origin))
        .with_allowed_origins(allowed_origins(origin));
    // Every session and stream runs under a child of this token.
    let token = config.cancellation_token.clone();
    let close = CloseStreams(Arc::new(move || token.cancel()));
    let tools = StreamableHttpService::new(
        move || Ok(DataApiTools::new(state.clone())),
        LocalSessionManager::default().into(),
        config,
    );
    let tools = JsonRpcParse { inner: tools };
    let tools = WalletJwtLayer::new(verifier)
        .with_resource_metadata(resource_metadata)
        .optional_bearer()
        .with_rejection(jsonrpc_rejection)
        .layer(tools);
    let tools = MapRequest::new(tools, end_session_without_bearer as EndSessionFn);
    // Same store and quota buckets as the REST routes' layer; its own answers.
    (
        api_keys.with_rejection(jsonrpc_rejection).layer(tools),
        close,
    )
}

/// The authority of `origin` plus loopback: rmcp refuses every other `Host`
/// (DNS-rebinding defence), and its default is loopback only, which would
/// refuse a public deployment.
pub(crate) fn allowed_hosts(origin: &str) -> Vec<String> {
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if let Some(authority) = origin.split_once("://").map(|(_, rest)| rest) {
        // `https://api.example.com` arrives as `Host: api.example.com`;
        // rmcp matches a port-less entry on any port.
        hosts.push(authority.trim_end_matches('/').to_owned());
    }
    hosts
}

/// Browsers may call from the server's own origin or from loopback (local
/// tools such as the MCP inspector); any other present `Origin` gets 403.
pub(crate) fn allowed_origins(origin: &str) -> Vec<String> {
    let origin = origin.trim_end_matches('/');
    // rmcp matches a port-less entry on any port (deprecated), so name the
    // scheme's default port when the origin omits it.
    let has_port = origin
        .split_once("://")
        .and_then(|(_, authority)| http::uri::Authority::try_from(authority).ok())
        .is_some_and(|authority| authority.port().is_some());
    let own = match (has_port, origin.starts_with("https://")) {
        (true, _) => origin.to_owned(),
        (false, true) => format!("{origin}:443"),
        (false, false) => format!("{origin}:80"),
    };
    vec![
        own,
        "http://localhost:*".to_owned(),
        "http://127.0.0.1:*".to_owned(),
        "http://[::1]:*".to_owned(),
    ]
}

/// A JSON-RPC error response without an id (the request was not read).
fn jsonrpc_error(status: StatusCode, code: i64, message: &str) -> Response<Bytes> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message },
    });
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

// ---------------------------------------------------------------------------
// Rejections as JSON-RPC errors

/// A gate's refusal as a JSON-RPC error, the `with_rejection` of both gates:
/// `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":…}}` with the
/// Area A status and headers (`WWW-Authenticate`, `Retry-After`,
/// `Cache-Control: no-store`). The Area A error rides in the extensions, so
/// the access log names the refusal as on every other route.
pub(crate) fn jsonrpc_rejection<E: DataApiRejection>(rejection: E) -> Response<Bytes> {
    let error = rejection.to_data_api_error();
    let mut response = jsonrpc_error(error.status(), GATE_REFUSED, error.message());
    let headers = response.headers_mut();
    error.write_headers(headers);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response.extensions_mut().insert(error);
    response
}

// ---------------------------------------------------------------------------
// Parse errors as JSON-RPC errors

/// Reads the request body (bounded) and answers JSON that does not parse
/// with a JSON-RPC parse error; rmcp would answer a bare 415.
///
/// It also turns rmcp's 415 for parseable JSON that is no JSON-RPC message
/// into 400 `-32600` with a JSON-RPC body. Always ready, like rmcp's service.
#[derive(Clone, Debug)]
pub(crate) struct JsonRpcParse<S> {
    inner: S,
}

type McpResponse = Response<BoxBody<Bytes, Infallible>>;

impl<S, ReqBody> Service<Request<ReqBody>> for JsonRpcParse<S>
where
    S: Service<Request<Full<Bytes>>, Response = McpResponse, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    ReqBody: http_body::Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = McpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<McpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Call the instance that was polled ready; leave a fresh clone behind.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = match Limited::new(body, MAX_REQUEST_BODY_BYTES).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                    let message = format!("request body exceeds {MAX_REQUEST_BODY_BYTES} bytes");
                    return Ok(boxed(jsonrpc_error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        INVALID_REQUEST,
                        &message,
                    )));
                }
                Err(_) => {
                    return Ok(boxed(jsonrpc_error(
                        StatusCode::BAD_REQUEST,
                        INVALID_REQUEST,
                        "could not read the request body",
                    )));
                }
            };
            // Only a POST carries a JSON-RPC message; clients send
            // `Content-Type: application/json` on their DELETE too.
            let json_body = parts.method == Method::POST && is_json(&parts.headers);
            let ends_session = parts.method == Method::DELETE;
            if json_body && serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
                return Ok(boxed(jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    PARSE_ERROR,
                    "Parse error: the body is not valid JSON",
                )));
            }
            let response = inner
                .call(Request::from_parts(parts, Full::new(bytes)))
                .await?;
            if json_body && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                // Valid JSON that rmcp could not read as a JSON-RPC message.
                return Ok(boxed(jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    INVALID_REQUEST,
                    "Invalid Request: the body is not a JSON-RPC 2.0 request, notification or response",
                )));
            }
            if ends_session && response.status() == StatusCode::ACCEPTED {
                // The session is closed; nothing follows. The MCP transport
                // leaves the status open, the Python client accepts 200 or 204.
                let mut ended = Response::new(Full::new(Bytes::new()).boxed());
                *ended.status_mut() = StatusCode::NO_CONTENT;
                return Ok(ended);
            }
            Ok(response)
        })
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn boxed(response: Response<Bytes>) -> McpResponse {
    response.map(|bytes| Full::new(bytes).boxed())
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    async fn body_json<B>(response: Response<B>) -> serde_json::Value
    where
        B: http_body::Body,
        B::Error: std::fmt::Debug,
    {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn gate_rejections_keep_status_and_headers_with_a_jsonrpc_body() {
        use walletgate::wallet_jwt::JwtError;
        let response = jsonrpc_rejection(JwtError::Expired);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            "Bearer error=\"invalid_token\""
        );
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        assert_eq!(
            response
                .extensions()
                .get::<walletgate::envelope::DataApiError>()
                .map(|error| error.message()),
            Some("Wallet JWT expired: refresh it")
        );
        assert_eq!(
            body_json(response.map(Full::new)).await,
            json!({"jsonrpc": "2.0", "id": null,
                   "error": {"code": -32001, "message": "Wallet JWT expired: refresh it"}})
        );
    }

    #[tokio::test]
    async fn a_spent_quota_keeps_retry_after() {
        use walletgate::api_key::ApiKeyError;
        let response = jsonrpc_rejection(ApiKeyError::QuotaExceeded {
            retry_after_secs: 7,
        });
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        assert_eq!(
            body_json(response.map(Full::new)).await["error"]["code"],
            GATE_REFUSED
        );
    }

    #[tokio::test]
    async fn unparsable_json_never_reaches_rmcp() {
        let reached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = reached.clone();
        let rmcp = tower::service_fn(move |_: Request<Full<Bytes>>| {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<McpResponse, Infallible>(Response::new(Full::new(Bytes::new()).boxed())) }
        });
        let request = Request::post("/mcp")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(b"{\"jsonrpc\":")))
            .unwrap();
        let response = JsonRpcParse { inner: rmcp }.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(body_json(response).await["error"]["code"], PARSE_ERROR);
        assert!(!reached.load(std::sync::atomic::Ordering::SeqCst));
    }
}

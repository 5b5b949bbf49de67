//! RFC 9728 protected resource metadata: how this API wants its bearer
//! token, for MCP and OAuth clients that read it from a 401's
//! `WWW-Authenticate: Bearer … resource_metadata="…"`.
//!
//! Two resources, each with its document (public, like the JWKS):
//! `/.well-known/oauth-protected-resource` for the REST API (the resource is
//! the origin) and `/.well-known/oauth-protected-resource/mcp` for the MCP
//! endpoint (the resource is the origin + `/mcp`). Tokens go in the
//! `Authorization` header only; the scopes are exactly those the OpenAPI
//! document's security requirements list. There is no OAuth authorization
//! server here (wallet JWTs come from the SIWE → PAT → exchange flow), so no
//! `authorization_servers` is named rather than one that does not exist.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};
use walletgate::wallet_jwt::{ConfigError, ResourceMetadataUrl};

use crate::openapi::Operation;
use crate::state::SharedState;

/// Where the metadata documents live (RFC 9728 §3: the well-known prefix,
/// then the resource's path).
pub(crate) const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The MCP endpoint's path, the second resource.
pub(crate) const MCP_RESOURCE: &str = "/mcp";

/// The metadata URL of the resource at `origin` + `resource_path`.
pub(crate) fn metadata_url(
    origin: &str,
    resource_path: &str,
) -> Result<ResourceMetadataUrl, ConfigError> {
    ResourceMetadataUrl::new(&format!("{origin}{WELL_KNOWN}{resource_path}"))
}

/// The document of the resource at `origin` + `resource_path`.
pub(crate) fn document(origin: &str, resource_path: &str, operations: &[Operation]) -> Value {
    json!({
        "resource": format!("{origin}{resource_path}"),
        "bearer_methods_supported": ["header"],
        "scopes_supported": crate::openapi::scopes(operations),
        "resource_name": "walletgate data API",
        "resource_documentation": format!("{origin}/api/v2/openapi.json"),
    })
}

/// The document of the resource at `origin` + `resource_path`, serialised
/// once at start (the state keeps the bytes).
pub(crate) fn serialised(origin: &str, resource_path: &str, operations: &[Operation]) -> Bytes {
    Bytes::from(document(origin, resource_path, operations).to_string())
}

/// `GET /.well-known/oauth-protected-resource`.
pub(crate) async fn api_metadata(State(state): State<SharedState>) -> Response {
    crate::openapi_common::json_bytes(state.resource_metadata_api.clone())
}

/// `GET /.well-known/oauth-protected-resource/mcp`.
pub(crate) async fn mcp_metadata(State(state): State<SharedState>) -> Response {
    crate::openapi_common::json_bytes(state.resource_metadata_mcp.clone())
}

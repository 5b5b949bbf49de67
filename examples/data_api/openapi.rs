//! The live API description: `GET /api/v2/openapi.json`, an OpenAPI 3.1
//! document generated from the route table in `routes.rs`.
//!
//! Each [`Operation`] of that table carries its handler, its [`Access`] (for
//! wallet-scoped routes, the very `RequireScopesLayer` that guards it) and its
//! description. `main.rs` mounts the handlers from the table and this module
//! renders the same table, so a route cannot exist without its description
//! and a description cannot claim scopes its guard does not enforce. The body
//! schemas are derived from the body types (`schemars`), so a schema cannot
//! drift from the type it describes; the tests check every response the
//! server gives against them.
//!
//! The document is public (like the JWKS document): clients read paths and
//! scopes from it before they hold a key, and it describes nothing secret.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::handler::Handler;
use axum::response::Response;
use axum::routing::{MethodFilter, MethodRouter};
use http::Method;
use rmcp::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use tower::layer::util::Stack;
use walletgate::wallet_jwt::{RequireScopesLayer, WalletJwtLayer};

use crate::auth::{
    CreateTokenBody, CreatedToken, ExchangeBody, ExchangeResponse, Nonce, Revoked, SignedIn,
    SignedOut, TokenView, VerifyBody,
};
use crate::favorites::Page;
use crate::openapi_common::{json_request_body, json_response, openapi_schema};
pub(crate) use crate::openapi_common::{
    path_parameter, query_parameter, required_query_parameter, schema_ref,
};
use crate::quotas::QuotaView;
use crate::relationships::CallerRole;
use crate::rest::{AgentDeclaration, Counterparty, RelationshipChange, RelationshipList, Removed};
use crate::state::SharedState;

/// The security scheme of the `X-API-KEY` header.
pub(crate) const API_KEY_AUTH: &str = "ApiKeyAuth";
/// The security scheme of the wallet JWT bearer.
pub(crate) const WALLET_AUTH: &str = "WalletAuth";
/// The security scheme of the SIWE session cookie.
pub(crate) const SIWE_SESSION: &str = "SiweSession";
/// The security scheme of the session's refresh cookie.
pub(crate) const SIWE_REFRESH: &str = "SiweRefresh";

/// What a caller must present to reach an operation.
#[derive(Clone, Debug)]
pub(crate) enum Access {
    /// Nothing: discovery documents.
    Public,
    /// `X-API-KEY` only.
    ApiKey,
    /// `X-API-KEY` and the SIWE session cookie; a bearer JWT, if sent, is
    /// verified but never stands in for the session.
    Session,
    /// `X-API-KEY` and the session's refresh cookie.
    RefreshCookie,
    /// `X-API-KEY` and a wallet JWT with the scopes this guard requires.
    Wallet(RequireScopesLayer),
    /// `X-API-KEY`; a wallet JWT is optional and checked per call (the MCP
    /// endpoint: its wallet-scoped tools need one).
    ApiKeyOptionalWallet,
}

impl Access {
    /// The OpenAPI `security` array: alternatives, each a set of schemes.
    fn security(&self) -> Value {
        match self {
            Self::Public => json!([]),
            Self::ApiKey => json!([{ API_KEY_AUTH: [] }]),
            Self::Session => json!([{ API_KEY_AUTH: [], SIWE_SESSION: [] }]),
            Self::RefreshCookie => json!([{ API_KEY_AUTH: [], SIWE_REFRESH: [] }]),
            Self::Wallet(guard) => {
                let scopes: Vec<&str> = guard.scopes().iter().map(|scope| scope.as_str()).collect();
                json!([{ API_KEY_AUTH: [], WALLET_AUTH: scopes }])
            }
            Self::ApiKeyOptionalWallet => {
                json!([{ API_KEY_AUTH: [], WALLET_AUTH: [] }, { API_KEY_AUTH: [] }])
            }
        }
    }

    /// The rejections the gates in front of the handler can answer.
    fn gate_responses(&self) -> Vec<(u16, &'static str)> {
        let keyed = [
            (401, "`X-API-KEY` missing or unknown"),
            (
                429,
                "the API key's quota is spent; `Retry-After` says when to retry",
            ),
        ];
        // The cookies' routes refuse other sites' pages (tokens::refuse_cross_site).
        let cross_site = (
            403,
            "a browser request from another site (`Sec-Fetch-Site` or `Origin`)",
        );
        match self {
            Self::Public => Vec::new(),
            Self::ApiKey | Self::ApiKeyOptionalWallet => keyed.to_vec(),
            Self::Session => vec![
                (
                    401,
                    "`X-API-KEY` missing or unknown, or no valid SIWE session cookie",
                ),
                cross_site,
                keyed[1],
            ],
            Self::RefreshCookie => vec![
                (
                    401,
                    "`X-API-KEY` missing or unknown, or no valid refresh cookie",
                ),
                cross_site,
                keyed[1],
            ],
            Self::Wallet(guard) => {
                let forbidden = if guard.wallet_path_segment().is_some() {
                    "the JWT lacks a required scope (`WWW-Authenticate: Bearer error=\"insufficient_scope\"`), or the path names another wallet"
                } else {
                    "the JWT lacks a required scope (`WWW-Authenticate: Bearer error=\"insufficient_scope\"`)"
                };
                vec![
                    (
                        401,
                        "`X-API-KEY` missing or unknown, or the wallet JWT is missing, invalid or expired (`WWW-Authenticate: Bearer error=\"invalid_token\"`)",
                    ),
                    (403, forbidden),
                    keyed[1],
                ]
            }
        }
    }
}

/// One method on one path: what mounts it and what describes it.
pub(crate) struct Operation {
    method: Method,
    path: &'static str,
    access: Access,
    operation_id: &'static str,
    tag: &'static str,
    summary: &'static str,
    description: Option<&'static str>,
    parameters: Vec<Value>,
    request_body: Option<Value>,
    responses: BTreeMap<u16, (String, Option<Value>)>,
    extensions: Map<String, Value>,
    /// `None` for an operation another module mounts (see [`Operation::mounted_elsewhere`]).
    handler: Option<Mount>,
}

/// The wallet JWT's check, then an operation's scope guard.
pub(crate) type WalletGate = Stack<RequireScopesLayer, WalletJwtLayer>;

/// Routes an operation's method to its handler, behind the wallet gate
/// its access needs.
type Mount = Box<dyn FnOnce(Option<WalletGate>) -> MethodRouter<SharedState>>;

fn mount<H, T>(method: MethodFilter, handler: H) -> Option<Mount>
where
    H: Handler<T, SharedState>,
    T: 'static,
{
    Some(Box::new(move |gate| match gate {
        None => axum::routing::on(method, handler),
        // Inside the handler's own boxed route: axum clones every boxed
        // route below the one it calls on each request, and a gate as a
        // `route_layer` would be one more.
        Some(gate) => axum::routing::on(method, handler.layer(gate)),
    }))
}

impl Operation {
    fn with_handler(
        method: Method,
        path: &'static str,
        operation_id: &'static str,
        handler: Option<Mount>,
    ) -> Self {
        Self {
            method,
            path,
            access: Access::ApiKey,
            operation_id,
            tag: "",
            summary: "",
            description: None,
            parameters: Vec::new(),
            request_body: None,
            responses: BTreeMap::new(),
            extensions: Map::new(),
            handler,
        }
    }

    /// `GET path`, served by `handler`.
    pub(crate) fn get<H, T>(path: &'static str, id: &'static str, handler: H) -> Self
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        Self::with_handler(Method::GET, path, id, mount(MethodFilter::GET, handler))
    }

    /// `POST path`, served by `handler`.
    pub(crate) fn post<H, T>(path: &'static str, id: &'static str, handler: H) -> Self
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        Self::with_handler(Method::POST, path, id, mount(MethodFilter::POST, handler))
    }

    /// `PUT path`, served by `handler`.
    pub(crate) fn put<H, T>(path: &'static str, id: &'static str, handler: H) -> Self
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        Self::with_handler(Method::PUT, path, id, mount(MethodFilter::PUT, handler))
    }

    /// `DELETE path`, served by `handler`.
    pub(crate) fn delete<H, T>(path: &'static str, id: &'static str, handler: H) -> Self
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        Self::with_handler(
            Method::DELETE,
            path,
            id,
            mount(MethodFilter::DELETE, handler),
        )
    }

    /// An operation described here but mounted by another module as a whole
    /// service (the MCP endpoint), named in `x-mounted-by`.
    pub(crate) fn mounted_elsewhere(
        method: Method,
        path: &'static str,
        id: &'static str,
        module: &'static str,
    ) -> Self {
        let mut operation = Self::with_handler(method, path, id, None);
        operation
            .extensions
            .insert("x-mounted-by".to_owned(), Value::from(module));
        operation
    }

    /// Who may call it (default: API key only).
    pub(crate) fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// The tag and one-line summary.
    pub(crate) fn doc(mut self, tag: &'static str, summary: &'static str) -> Self {
        self.tag = tag;
        self.summary = summary;
        self
    }

    /// Longer prose (CommonMark).
    pub(crate) fn description(mut self, text: &'static str) -> Self {
        self.description = Some(text);
        self
    }

    /// A parameter object (`in`: path, query, header or cookie).
    pub(crate) fn parameter(mut self, parameter: Value) -> Self {
        self.parameters.push(parameter);
        self
    }

    /// A JSON request body with `schema`, required.
    pub(crate) fn json_body(mut self, schema: Value) -> Self {
        self.request_body = Some(json_request_body(schema));
        self
    }

    /// A response with a JSON body of `schema`.
    pub(crate) fn response(mut self, status: u16, description: &str, schema: Value) -> Self {
        self.responses
            .insert(status, (description.to_owned(), Some(schema)));
        self
    }

    /// An error response (the `Error` envelope).
    pub(crate) fn error(mut self, status: u16, description: &str) -> Self {
        self.responses
            .insert(status, (description.to_owned(), Some(schema_ref("Error"))));
        self
    }

    /// Another `x-` member of the operation object.
    pub(crate) fn extension(mut self, name: &str, value: Value) -> Self {
        self.extensions.insert(name.to_owned(), value);
        self
    }

    /// The HTTP method.
    #[cfg(test)]
    pub(crate) fn method(&self) -> &Method {
        &self.method
    }

    /// The path template, in axum's and OpenAPI's shared `{name}` syntax.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &'static str {
        self.path
    }

    /// Who may call it.
    #[cfg(test)]
    pub(crate) fn access_rule(&self) -> &Access {
        &self.access
    }

    /// What to mount: path, access and handler, the latter behind
    /// `wallet_gate(guard)` when the access is [`Access::Wallet`]; `None`
    /// when mounted elsewhere.
    pub(crate) fn into_route(
        self,
        wallet_gate: impl Fn(&RequireScopesLayer) -> WalletGate,
    ) -> Option<(&'static str, Access, MethodRouter<SharedState>)> {
        let mount = self.handler?;
        let gate = match &self.access {
            Access::Wallet(guard) => Some(wallet_gate(guard)),
            _ => None,
        };
        Some((self.path, self.access, mount(gate)))
    }

    fn render(&self) -> Value {
        let mut responses = Map::new();
        // Gate rejections first, so an operation's own text for the same
        // status (a 401 with a sharper reason, say) wins.
        for (status, text) in self.access.gate_responses() {
            responses.insert(status.to_string(), error_response(text));
        }
        for (status, (text, schema)) in &self.responses {
            responses.insert(status.to_string(), json_response(text, schema.clone()));
        }
        if let Some(too_many) = responses.get_mut("429") {
            too_many["headers"] = json!({
                "Retry-After": {
                    "description": "Seconds to wait before retrying",
                    "schema": { "type": "integer", "minimum": 1 }
                }
            });
        }
        responses.insert(
            "default".to_owned(),
            error_response("Server fault (5xx): the store or the signing key is unavailable"),
        );

        let mut operation = Map::new();
        operation.insert("operationId".to_owned(), self.operation_id.into());
        operation.insert("tags".to_owned(), json!([self.tag]));
        operation.insert("summary".to_owned(), self.summary.into());
        let mut description = self.description.unwrap_or_default().to_owned();
        if let Access::Wallet(guard) = &self.access {
            let scopes: Vec<String> = guard
                .scopes()
                .iter()
                .map(|scope| format!("`{scope}`"))
                .collect();
            let mut needs = format!("Needs a wallet JWT with scope {}.", scopes.join(", "));
            if let Some(segment) = guard.wallet_path_segment() {
                needs.push_str(&format!(
                    " The path segment after `{segment}` must be the JWT's wallet."
                ));
            }
            description = if description.is_empty() {
                needs
            } else {
                format!("{description}\n\n{needs}")
            };
        }
        if !description.is_empty() {
            operation.insert("description".to_owned(), description.into());
        }
        if !self.parameters.is_empty() {
            operation.insert("parameters".to_owned(), self.parameters.clone().into());
        }
        if let Some(body) = &self.request_body {
            operation.insert("requestBody".to_owned(), body.clone());
        }
        operation.insert("security".to_owned(), self.access.security());
        operation.insert("responses".to_owned(), responses.into());
        operation.extend(self.extensions.clone());
        operation.into()
    }
}

fn error_response(description: &str) -> Value {
    json_response(description, Some(schema_ref("Error")))
}

/// Every scope a wallet-scoped operation's security requirement lists,
/// sorted: what the RFC 9728 metadata offers (`scopes_supported`).
pub(crate) fn scopes(operations: &[Operation]) -> Vec<String> {
    let mut scopes: Vec<String> = operations
        .iter()
        .filter_map(|operation| match &operation.access {
            Access::Wallet(guard) => Some(guard.scopes()),
            _ => None,
        })
        .flat_map(|scopes| scopes.iter().map(|scope| scope.as_str().to_owned()))
        .collect();
    scopes.sort();
    scopes.dedup();
    scopes
}

/// The whole document for a server at `origin`.
pub(crate) fn document(operations: &[Operation], origin: &str) -> Value {
    let mut paths = Map::new();
    for operation in operations {
        let item = paths
            .entry(operation.path.to_owned())
            .or_insert_with(|| json!({}));
        item[operation.method.as_str().to_ascii_lowercase()] = operation.render();
    }
    let info = json!({
        "title": "walletgate data API",
        "version": env!("CARGO_PKG_VERSION"),
        "description": "The Area A reference server: REST under `/api/v2` and MCP at `/mcp`, acting for a wallet only through a verified wallet JWT. Every operation but the discovery documents needs `X-API-KEY`; wallet-scoped operations list the scopes their JWT needs in their security requirement. Sign in with SIWE (nonce, verify), create a personal access token with the session cookie, exchange it for a short-lived wallet JWT.",
        "license": { "name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0" }
    });
    let tags = json!([
            { "name": "discovery", "description": "Public documents" },
            { "name": "auth", "description": "SIWE sign-in, sessions, personal access tokens and the JWT exchange" },
            { "name": "favorites", "description": "A wallet's favorite NFTs" },
            { "name": "agents", "description": "Agent declarations and the agent-relationship handshake" },
        { "name": "mcp", "description": "Model Context Protocol, streamable HTTP" }
    ]);
    let components = json!({
        "securitySchemes": security_schemes(),
        "schemas": schemas()
    });
    crate::openapi_common::document(info, origin, tags, paths, components)
}

fn security_schemes() -> Value {
    json!({
        API_KEY_AUTH: {
            "type": "apiKey", "in": "header", "name": "X-API-KEY",
            "description": "The API key; every operation but the discovery documents needs it."
        },
        WALLET_AUTH: {
            "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
            "description": "A wallet JWT (RFC 9068 `at+jwt`, EdDSA) from `POST /api/v2/auth/tokens/exchange`; verify it with `/.well-known/jwks.json`. A security requirement lists the scopes the operation needs."
        },
        SIWE_SESSION: {
            "type": "apiKey", "in": "cookie", "name": "access_token",
            "description": "The session cookie `POST /api/v2/auth/siwe/verify` sets; only token management accepts it."
        },
        SIWE_REFRESH: {
            "type": "apiKey", "in": "cookie", "name": "refresh_token",
            "description": "The refresh cookie `POST /api/v2/auth/siwe/verify` sets; it buys a new session once."
        }
    })
}

/// The body schemas, derived from the body types (each pulls in the
/// components it refers to), and the few library types written by hand.
fn schemas() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.definitions_path = "/components/schemas".into();
            settings.meta_schema = None;
        })
        .into_generator();
    // Every body type the route table names by its schema name.
    generator.subschema_for::<Page>();
    generator.subschema_for::<RelationshipList>();
    generator.subschema_for::<CallerRole>();
    generator.subschema_for::<Counterparty>();
    generator.subschema_for::<RelationshipChange>();
    generator.subschema_for::<Removed>();
    generator.subschema_for::<AgentDeclaration>();
    generator.subschema_for::<Nonce>();
    generator.subschema_for::<VerifyBody>();
    generator.subschema_for::<SignedIn>();
    generator.subschema_for::<CreateTokenBody>();
    generator.subschema_for::<CreatedToken<'static>>();
    generator.subschema_for::<Revoked>();
    generator.subschema_for::<SignedOut>();
    generator.subschema_for::<QuotaView>();
    generator.subschema_for::<ExchangeBody>();
    generator.subschema_for::<ExchangeResponse>();
    let token_list = generator.subschema_for::<Vec<TokenView>>();
    let mut schemas = generator.take_definitions(true);
    schemas.insert("TokenList".to_owned(), token_list.to_value());
    for (name, schema) in library_schemas() {
        schemas.insert(name.to_owned(), schema);
    }
    Value::Object(schemas)
}

/// Bodies whose type is the library's or a protocol's, not this server's.
fn library_schemas() -> [(&'static str, Value); 5] {
    [
        (
            "ProtectedResourceMetadata",
            json!({
                "type": "object",
                "description": "RFC 9728 protected resource metadata.",
                "required": ["resource", "bearer_methods_supported", "scopes_supported"],
                "properties": {
                    "resource": { "type": "string", "format": "uri" },
                    "bearer_methods_supported": { "type": "array", "items": { "type": "string", "enum": ["header"] } },
                    "scopes_supported": { "type": "array", "items": { "type": "string" } },
                    "resource_name": { "type": "string" },
                    "resource_documentation": { "type": "string", "format": "uri" }
                }
            }),
        ),
        (
            "Error",
            json!({
                "type": "object",
                "required": ["error"],
                "properties": { "error": {
                    "type": "object",
                    "required": ["message", "status", "code"],
                    "properties": {
                        "message": { "type": "string" },
                        "status": { "type": "integer", "description": "The HTTP status" },
                        "code": { "type": "integer", "description": "The gRPC canonical code" }
                    }
                }}
            }),
        ),
        (
            "Jwks",
            json!({
                "type": "object",
                "required": ["keys"],
                "properties": { "keys": { "type": "array", "items": {
                    "type": "object",
                    "required": ["kty", "kid"],
                    "properties": {
                        "kty": { "type": "string" },
                        "kid": { "type": "string" },
                        "crv": { "type": "string" },
                        "x": { "type": "string" },
                        "alg": { "type": "string" },
                        "use": { "type": "string" }
                    }
                }}}
            }),
        ),
        ("OpenApi", openapi_schema()),
        (
            "JsonRpcMessage",
            json!({
                "type": "object",
                "description": "A JSON-RPC 2.0 request, notification or response (MCP).",
                "required": ["jsonrpc"],
                "properties": { "jsonrpc": { "type": "string", "const": "2.0" } }
            }),
        ),
    ]
}

/// The document as JSON bytes, serialised once at startup.
pub(crate) fn serialised(operations: &[Operation], origin: &str) -> serde_json::Result<Bytes> {
    serde_json::to_vec(&document(operations, origin)).map(Bytes::from)
}

/// `GET /api/v2/openapi.json`: the bytes serialised at startup, shared (a
/// `Bytes` clone is a reference count, not a copy).
pub(crate) async fn openapi_json(State(state): State<SharedState>) -> Response {
    crate::openapi_common::json_bytes(state.openapi.clone())
}

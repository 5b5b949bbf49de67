//! State, the route table (every operation with its gate and description)
//! and the composition that mounts it.

use std::sync::Arc;

use axum::Router;
use http::Method;
use serde_json::json;
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota};
use walletgate::clock::{SharedClock, SystemClock};
use walletgate::siwe::{InMemoryNonceStore, SiweVerifier};
use walletgate::tokens::{IssuerConfig, SigningKeys, TokenIssuer};
use walletgate::wallet_jwt::{JwtVerifier, KeySet, RequireScopesLayer, Scope, WalletJwtLayer};

use crate::Config;
use crate::favorites::{DEFAULT_LIMIT, Favorites, MAX_LIMIT, MIN_LIMIT};
use crate::openapi::{
    Access, Operation, path_parameter, query_parameter, required_query_parameter, schema_ref,
};
use crate::relationships::Relationships;
use crate::{auth, mcp, openapi, rest};

/// Everything the handlers share.
pub(crate) struct AppState {
    pub(crate) issuer: TokenIssuer,
    pub(crate) siwe: SiweVerifier,
    pub(crate) favorites: Favorites,
    pub(crate) relationships: Relationships,
    pub(crate) secure_cookies: bool,
    pub(crate) clock: SharedClock,
    /// The live description, rendered once from the route table.
    pub(crate) openapi: serde_json::Value,
}

pub(crate) type SharedState = Arc<AppState>;

/// What a newcomer needs to know at start.
pub(crate) struct DevInfo {
    pub(crate) generated_api_key: Option<String>,
    pub(crate) seeded_wallets: Vec<String>,
}

/// Wallets with development favorites: the first three Hardhat/Anvil accounts.
const SEEDED_WALLETS: [&str; 3] = [
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
];

pub(crate) fn build(config: &Config) -> Result<(Router, DevInfo), Box<dyn std::error::Error>> {
    build_with_clock(config, Arc::new(SystemClock))
}

pub(crate) fn build_with_clock(
    config: &Config,
    clock: SharedClock,
) -> Result<(Router, DevInfo), Box<dyn std::error::Error>> {
    let published = KeySet::new();
    let keys = match &config.signing_key_file {
        Some(path) => {
            let seed: [u8; 32] = std::fs::read(path)?
                .try_into()
                .map_err(|_| "DATA_API_SIGNING_KEY_FILE must hold exactly 32 bytes")?;
            SigningKeys::from_seed(&seed, published.clone())
        }
        None => SigningKeys::generate(published.clone())?,
    };
    let issuer_config = IssuerConfig::new(&config.origin, &config.origin)?
        .with_jwt_lifetime_secs(config.jwt_lifetime_secs)?;
    let issuer = TokenIssuer::in_memory(issuer_config, keys).with_clock(clock.clone());
    let verifier =
        JwtVerifier::new(published, &config.origin, &config.origin)?.with_clock(clock.clone());
    let siwe = SiweVerifier::builder()
        .domain(&config.siwe_domain)
        .uri(&config.siwe_uri)
        .allow_chain_id(config.siwe_chain_id)
        .clock(clock.clone())
        .nonce_store(InMemoryNonceStore::new())
        .build()?;

    let mut favorites = Favorites::default();
    for (index, wallet) in SEEDED_WALLETS.iter().enumerate() {
        favorites.seed(wallet.parse()?, 5 + 40 * index as u32);
    }

    let (api_key, generated_api_key) = match &config.api_key {
        Some(key) => (key.clone(), None),
        None => {
            let mut bytes = [0u8; 24];
            getrandom::fill(&mut bytes)?;
            let key = alloy_primitives::hex::encode(bytes);
            (key.clone(), Some(key))
        }
    };
    let key_store = InMemoryKeyStore::new();
    key_store.insert(
        &api_key,
        ApiKeyRecord::new(ApiKeyId::new("dev")?)
            .with_quota(KeyQuota::per_minute(config.key_per_minute)),
    )?;

    let operations = operations();
    let state = Arc::new(AppState {
        issuer,
        siwe,
        favorites,
        relationships: Relationships::default(),
        secure_cookies: config.origin.starts_with("https://"),
        clock: clock.clone(),
        openapi: openapi::document(&operations, &config.origin),
    });
    let router = router(
        state,
        operations,
        key_store,
        verifier,
        clock,
        &config.origin,
    );
    let dev = DevInfo {
        generated_api_key,
        seeded_wallets: SEEDED_WALLETS
            .iter()
            .map(|wallet| (*wallet).to_owned())
            .collect(),
    };
    Ok((router, dev))
}

/// The route table: every operation of the API, with its gate and its
/// description. [`router`] mounts it and [`openapi::document`] renders it, so
/// the live description cannot drift from what is served.
pub(crate) fn operations() -> Vec<Operation> {
    let wallet = |scope: Scope| Access::Wallet(RequireScopesLayer::new(scope));
    let address = || schema_ref("Address");
    vec![
        // Discovery: public.
        Operation::get("/api/v2/openapi.json", "getOpenApi", openapi::openapi_json)
            .access(Access::Public)
            .doc("discovery", "This document")
            .response(200, "The OpenAPI 3.1 description of this server", schema_ref("OpenApi")),
        Operation::get("/.well-known/jwks.json", "getJwks", auth::jwks)
            .access(Access::Public)
            .doc("discovery", "Public keys that verify wallet JWTs")
            .description("The current signing key and still-valid previous ones, as a JWK set.")
            .response(200, "The JWK set", schema_ref("Jwks")),
        // Sign-in and tokens: API key, then a SIWE session for token management.
        Operation::post("/api/v2/auth/siwe/nonce", "createSiweNonce", auth::nonce)
            .doc("auth", "A single-use SIWE nonce")
            .response(200, "The nonce to put in the SIWE message", schema_ref("Nonce")),
        Operation::post("/api/v2/auth/siwe/verify", "verifySiwe", auth::verify)
            .doc("auth", "Sign in with Ethereum")
            .description("Sends the EIP-4361 message's fields and the EIP-191 signature; the server rebuilds the exact text. Answers `Set-Cookie` with `access_token` (the session) and `refresh_token`.")
            .json_body(schema_ref("SiweVerify"))
            .response(200, "Signed in; the session cookies are set", schema_ref("SignedIn"))
            .error(400, "The body is not a SIWE verify request")
            .error(401, "`X-API-KEY` missing or unknown, or the signature, domain, URI, chain, nonce or time window does not verify"),
        Operation::post("/api/v2/auth/session/refresh", "refreshSession", auth::refresh_session)
            .access(Access::RefreshCookie)
            .doc("auth", "Rotate the session cookies")
            .description("The refresh cookie buys a new session and refresh cookie, once.")
            .response(200, "New session cookies are set", schema_ref("SignedIn")),
        Operation::post("/api/v2/auth/tokens", "createToken", auth::create_token)
            .access(Access::Session)
            .doc("auth", "Create a personal access token")
            .description("Shown once. A personal access token is never a bearer: exchange it for a wallet JWT.")
            .json_body(schema_ref("CreateToken"))
            .response(201, "The new token", schema_ref("CreatedToken"))
            .error(400, "Unknown or ungrantable scopes, a bad lifetime, or too many active tokens"),
        Operation::get("/api/v2/auth/tokens", "listTokens", auth::list_tokens)
            .access(Access::Session)
            .doc("auth", "The session wallet's personal access tokens, without secrets")
            .response(200, "The tokens", schema_ref("TokenList")),
        Operation::post("/api/v2/auth/tokens/{id}/rotate", "rotateToken", auth::rotate_token)
            .access(Access::Session)
            .doc("auth", "Replace a personal access token by a new one")
            .parameter(path_parameter("id", "The token's id", json!({"type": "string"})))
            .response(201, "The replacement", schema_ref("CreatedToken"))
            .error(404, "No such token for this wallet"),
        Operation::delete("/api/v2/auth/tokens/{id}", "revokeToken", auth::revoke_token)
            .access(Access::Session)
            .doc("auth", "Revoke a personal access token and sign out")
            .description("A bearer JWT, if sent, must name the session's wallet. Clears both cookies.")
            .parameter(path_parameter("id", "The token's id", json!({"type": "string"})))
            .response(200, "Revoked", schema_ref("Revoked"))
            .error(403, "The bearer JWT names another wallet than the session")
            .error(404, "No such token for this wallet"),
        Operation::post("/api/v2/auth/tokens/exchange", "exchangeToken", auth::exchange)
            .doc("auth", "Exchange a personal access token for a wallet JWT")
            .json_body(schema_ref("Exchange"))
            .response(200, "A short-lived wallet JWT", schema_ref("WalletJwt"))
            .error(400, "The body is not an exchange request")
            .error(401, "`X-API-KEY` missing or unknown, or the personal access token is unknown, revoked or expired"),
        // Favorites.
        Operation::get("/api/v2/account/{wallet}/favorites", "getFavorites", rest::favorites)
            .access(Access::Wallet(
                RequireScopesLayer::new(Scope::ReadFavorites).wallet_in_path_after("account"),
            ))
            .doc("favorites", "A wallet's favorite NFTs, paged")
            .parameter(path_parameter("wallet", "The JWT's wallet", address()))
            .parameter(query_parameter(
                "limit",
                "Items per page",
                json!({"type": "integer", "minimum": MIN_LIMIT, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}),
            ))
            .parameter(query_parameter(
                "after",
                "The `next` cursor of the previous page",
                json!({"type": "string"}),
            ))
            .response(200, "One page; `next` is present while more remain", schema_ref("FavoritesPage"))
            .error(400, "`limit` outside 1..=100, or `after` is not a cursor of this endpoint"),
        // Agents and relationships.
        Operation::put("/api/v2/accounts/agent", "declareAgent", rest::declare_agent)
            .access(wallet(Scope::WriteWallets))
            .doc("agents", "Declare the JWT's wallet an agent")
            .response(200, "`changed` is false when it already was one", schema_ref("AgentDeclaration")),
        Operation::delete("/api/v2/accounts/agent", "undeclareAgent", rest::undeclare_agent)
            .access(wallet(Scope::WriteWallets))
            .doc("agents", "Undeclare the JWT's wallet as an agent")
            .description("Removes its agent relationships.")
            .response(200, "`changed` is false when it was not one", schema_ref("AgentDeclaration")),
        Operation::get("/api/v2/accounts/agent-relationships", "listOwnRelationships", rest::own_relationships)
            .access(wallet(Scope::ReadWallets))
            .doc("agents", "The JWT's wallet's relationships, in any state")
            .response(200, "The relationships", schema_ref("Relationships")),
        Operation::post("/api/v2/accounts/agent-relationships", "proposeRelationship", rest::propose)
            .access(wallet(Scope::WriteWallets))
            .doc("agents", "Propose a relationship")
            .description(RELATIONSHIP_STATES)
            .json_body(schema_ref("Counterparty"))
            .response(200, "`created` is false when it already existed", schema_ref("RelationshipChange"))
            .error(400, "The body is not a counterparty")
            .error(409, "A wallet cannot be its own agent, or the agent side has not declared itself an agent"),
        Operation::post("/api/v2/accounts/agent-relationships/confirm", "confirmRelationship", rest::confirm)
            .access(wallet(Scope::WriteWallets))
            .doc("agents", "Confirm a relationship that awaits this wallet")
            .description(RELATIONSHIP_STATES)
            .json_body(schema_ref("Counterparty"))
            .response(200, "Confirmed (confirming twice changes nothing)", schema_ref("RelationshipChange"))
            .error(400, "The body is not a counterparty")
            .error(404, "No pending relationship awaits this wallet's confirmation"),
        Operation::delete("/api/v2/accounts/agent-relationships", "removeRelationship", rest::remove)
            .access(wallet(Scope::WriteWallets))
            .doc("agents", "Remove a relationship in any state")
            .parameter(required_query_parameter("counterparty_address", "The other side's wallet", address()))
            .parameter(required_query_parameter("caller_role", "The side the caller speaks for", schema_ref("CallerRole")))
            .response(200, "`removed` is false when none existed", schema_ref("Removed"))
            .error(400, "A query parameter is missing or malformed"),
        Operation::get("/api/v2/accounts/{address}/agent-relationships", "listPublicRelationships", rest::public_relationships)
            .doc("agents", "A wallet's confirmed relationships, for anyone with an API key")
            .parameter(path_parameter("address", "Any wallet", address()))
            .response(200, "Confirmed relationships only", schema_ref("Relationships"))
            .error(400, "`address` is not a wallet address"),
        // MCP: mounted as one service by mcp.rs, described here.
        mcp_operation(Method::POST, "postMcp", "Send a JSON-RPC message (initialize, tools/list, tools/call, …)"),
        mcp_operation(Method::GET, "getMcp", "Open the server-to-client event stream of a session"),
        mcp_operation(Method::DELETE, "deleteMcp", "End a session"),
    ]
}

/// The relationship handshake, for the operations that step through it.
const RELATIONSHIP_STATES: &str = "The handshake: one side proposes (state `PENDING`, awaiting the other side), the other side confirms (`CONFIRMED`); either side removes it in any state. Proposing needs the agent side to be a declared agent; proposing again changes nothing; only the awaited side can confirm. Undeclaring an agent removes its relationships. The public listing shows confirmed ones only.";

/// What `/mcp` promises; examples/data_api/mcp.rs keeps the promise.
const MCP_DESCRIPTION: &str = "Model Context Protocol over streamable HTTP. `X-API-KEY` on every request (401 with a JSON-RPC error body otherwise). Public-data tools need only the key; wallet-scoped tools (favorites, own agent relationships, declare agent, propose / confirm / remove relationship) take the wallet from the bearer JWT, never from arguments: an invalid or expired JWT gets 401 with `WWW-Authenticate: Bearer error=\"invalid_token\"`, a missing scope a tool error naming it.";

/// One method of the MCP endpoint, which mcp.rs mounts as a whole service.
fn mcp_operation(method: Method, id: &'static str, summary: &'static str) -> Operation {
    let operation =
        Operation::mounted_elsewhere(method.clone(), "/mcp", id, "examples/data_api/mcp.rs")
            .access(Access::ApiKeyOptionalWallet)
            .doc("mcp", summary)
            .description(MCP_DESCRIPTION)
            .extension("x-protocol", json!("mcp-streamable-http"));
    if method == Method::POST {
        operation.json_body(schema_ref("JsonRpcMessage")).response(
            200,
            "A JSON-RPC response (`application/json`) or an event stream (`text/event-stream`)",
            schema_ref("JsonRpcMessage"),
        )
    } else {
        operation.response(200, "The session's event stream or its end", json!({}))
    }
}

/// The composition, from the route table: every route but the discovery
/// documents needs `X-API-KEY`; wallet-scoped routes also need a wallet JWT
/// with the scopes their guard names; token management needs the SIWE
/// session cookie instead.
fn router(
    state: SharedState,
    operations: Vec<Operation>,
    key_store: InMemoryKeyStore,
    verifier: JwtVerifier,
    clock: SharedClock,
    origin: &str,
) -> Router {
    let mut public = Router::new();
    let mut keyed = Router::new();
    let mut token_management = Router::new();
    let mut wallet_scoped = Router::new();
    for (path, access, handler) in operations.into_iter().filter_map(Operation::into_route) {
        match access {
            Access::Public => public = public.route(path, handler),
            Access::ApiKey | Access::RefreshCookie | Access::ApiKeyOptionalWallet => {
                keyed = keyed.route(path, handler);
            }
            Access::Session => token_management = token_management.route(path, handler),
            Access::Wallet(guard) => {
                wallet_scoped = wallet_scoped.route(path, handler.route_layer(guard));
            }
        }
    }

    let wallet_scoped = wallet_scoped.route_layer(WalletJwtLayer::new(verifier.clone()));
    // Token management reads the session cookie; a bearer, if sent, is
    // verified so revocation can insist it names the same wallet.
    let token_management =
        token_management.route_layer(WalletJwtLayer::new(verifier.clone()).optional_bearer());

    let api_keys = ApiKeyLayer::new(key_store).with_clock(clock);
    let keyed = keyed
        .merge(wallet_scoped)
        .merge(token_management)
        .layer(api_keys.clone());

    // MCP: one service that applies the same `ApiKeyLayer` (same quotas) itself,
    // inside its JSON-RPC rejection rewriter; the table describes it through
    // `mcp_operation`, and the described tests probe it.
    public
        .nest_service(
            "/mcp",
            mcp::service(state.clone(), api_keys, verifier, origin),
        )
        .merge(keyed)
        .with_state(state)
}

/// Unix seconds as RFC 3339 UTC, e.g. `2026-11-21T12:00:00.000Z`.
pub(crate) fn rfc3339(unix_secs: u64) -> String {
    let millis = i64::try_from(unix_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    walletgate::siwe::Timestamp::from_unix_millis(millis).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_800_000_000), "2027-01-15T08:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00.000Z");
    }
}

//! The route table: every operation of the API with its handler, its gate
//! and its description. `main.rs` mounts it behind the gates and
//! [`openapi::document`] renders it, so the live description cannot drift
//! from what is served.

use http::Method;
use serde_json::json;
use walletgate::wallet_jwt::{RequireScopesLayer, Scope};

use crate::favorites::{DEFAULT_LIMIT, MAX_LIMIT, MIN_LIMIT};
use crate::openapi::{
    Access, Operation, path_parameter, query_parameter, required_query_parameter, schema_ref,
};
use crate::{auth, openapi, protected_resource, quotas, rest};

/// Every operation of the API, in the order the document lists them.
pub(crate) fn operations() -> Vec<Operation> {
    let wallet = |scope: Scope| Access::Wallet(RequireScopesLayer::new(scope));
    let address = || schema_ref("Address");
    vec![
        // Discovery: public.
        Operation::get("/api/v2/openapi.json", "getOpenApi", openapi::openapi_json)
            .access(Access::Public)
            .doc("discovery", "This document")
            .response(200, "The OpenAPI 3.1 description of this server", schema_ref("OpenApi")),
        Operation::get(protected_resource::WELL_KNOWN, "getProtectedResourceMetadata", protected_resource::api_metadata)
            .access(Access::Public)
            .doc("discovery", "RFC 9728 metadata of the REST API")
            .description("How the API wants its bearer (the `Authorization` header) and the scopes its operations require; every bearer 401 and scope 403 names this document in `WWW-Authenticate: Bearer … resource_metadata`. No authorization server: wallet JWTs come from the SIWE and token exchange operations.")
            .response(200, "The protected resource metadata", schema_ref("ProtectedResourceMetadata")),
        Operation::get("/.well-known/oauth-protected-resource/mcp", "getMcpProtectedResourceMetadata", protected_resource::mcp_metadata)
            .access(Access::Public)
            .doc("discovery", "RFC 9728 metadata of the MCP endpoint")
            .description("The same for the resource `/mcp`; its 401s name this document.")
            .response(200, "The protected resource metadata", schema_ref("ProtectedResourceMetadata")),
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
            .error(401, "`X-API-KEY` missing or unknown, or the signature, domain, URI, chain, nonce or time window does not verify")
            .error(403, "A browser request from another site (`Sec-Fetch-Site` or `Origin`): only this server's own pages sign in"),
        Operation::post("/api/v2/auth/session/refresh", "refreshSession", auth::refresh_session)
            .access(Access::RefreshCookie)
            .doc("auth", "Rotate the session cookies")
            .description("The refresh cookie buys a new session and refresh cookie, once.")
            .response(200, "New session cookies are set", schema_ref("SignedIn")),
        Operation::delete("/api/v2/auth/session", "signOut", auth::sign_out)
            .access(Access::Session)
            .doc("auth", "Sign out")
            .description("Ends every session of the session's wallet and clears both cookies; its personal access tokens stay.")
            .response(200, "Signed out", schema_ref("SignedOut")),
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
            .error(403, "The bearer JWT names another wallet than the session, or a browser request from another site (`Sec-Fetch-Site` or `Origin`)")
            .error(404, "No such token for this wallet"),
        Operation::post("/api/v2/auth/tokens/exchange", "exchangeToken", auth::exchange)
            .doc("auth", "Exchange a personal access token for a wallet JWT")
            .json_body(schema_ref("Exchange"))
            .response(200, "A short-lived wallet JWT", schema_ref("WalletJwt"))
            .error(400, "The body is not an exchange request")
            .error(401, "`X-API-KEY` missing or unknown, or the personal access token is unknown, revoked or expired"),
        Operation::get("/api/v2/key/quota", "getKeyQuota", quotas::quota)
            .doc("auth", "What is left of the API key's quota")
            .description("The calling key's requests per window, spent (this request included) and remaining now; one request refills every `windowSeconds / limit` seconds.")
            .response(200, "The key's quota", schema_ref("KeyQuota")),
        // Favorites.
        Operation::get("/api/v2/account/{wallet}/favorites", "getFavorites", rest::favorites)
            .access(Access::Wallet(
                RequireScopesLayer::new(Scope::ReadFavorites).with_wallet_in_path_after("account"),
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

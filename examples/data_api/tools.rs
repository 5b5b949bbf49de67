//! The data API's MCP tools: the same operations as the REST routes
//! (`rest.rs`), for the wallet of the verified JWT of each tool call's own
//! request. `mcp.rs` mounts them behind the gates.

use std::fmt;

use alloy_primitives::Address;
use http::request::Parts;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::schemars::{self, JsonSchema};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::json;
use walletgate::envelope::DataApiError;
use walletgate::wallet_jwt::{Scope, WalletClaims};

use crate::relationships::CallerRole;
use crate::rest::{self, HandshakeStep};
use crate::state::SharedState;

/// The data API's MCP tools; each session gets a clone.
#[derive(Clone)]
pub(crate) struct DataApiTools {
    state: SharedState,
}

impl fmt::Debug for DataApiTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataApiTools").finish_non_exhaustive()
    }
}

/// Arguments naming a wallet to read public data of.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct AddressArgs {
    /// The wallet: `0x` and 40 hex digits.
    address: String,
}

/// Arguments of a favorites page.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct FavoritesArgs {
    /// Items per page, 1 to 100 (default 50).
    #[serde(default)]
    limit: Option<i64>,
    /// The `next` cursor of the previous page.
    #[serde(default)]
    after: Option<String>,
}

/// Arguments of a relationship step.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CounterpartyArgs {
    /// The other side's wallet: `0x` and 40 hex digits.
    counterparty_address: String,
    /// Which side the caller's own wallet (the JWT's) speaks for.
    #[schemars(schema_with = "caller_role_schema")]
    caller_role: CallerRole,
}

fn caller_role_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["AGENT", "OWNER"],
        "description": "AGENT if the caller's wallet is the agent, OWNER if it is the owner"
    })
}

/// A tool's answer: the REST body as structured content, or a tool error.
fn answer<T: serde::Serialize>(result: Result<T, DataApiError>) -> CallToolResult {
    match result.and_then(|value| {
        serde_json::to_value(value).map_err(|_| DataApiError::internal("answer not serializable"))
    }) {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => tool_error(error.message()),
    }
}

fn tool_error(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The wallet of the request's verified JWT, if it grants `scope`.
fn wallet_with(parts: &Parts, scope: Option<Scope>) -> Result<(Address, &WalletClaims), String> {
    let claims = parts.extensions.get::<WalletClaims>().ok_or_else(|| {
        "this tool acts for a wallet and needs a wallet JWT: send `Authorization: Bearer <JWT>` \
         (sign in with SIWE, create a PAT, exchange it at /api/v2/auth/tokens/exchange)"
            .to_owned()
    })?;
    if let Some(scope) = scope {
        // "insufficient_scope: JWT lacks scope read:favorites"
        claims
            .require(scope)
            .map_err(|missing| format!("insufficient_scope: {missing}"))?;
    }
    Ok((claims.wallet(), claims))
}

/// Runs `operation` for the JWT's wallet when it grants `scope`.
fn for_wallet<T: serde::Serialize>(
    parts: &Parts,
    scope: Scope,
    operation: impl FnOnce(Address) -> Result<T, DataApiError>,
) -> CallToolResult {
    match wallet_with(parts, Some(scope)) {
        Ok((wallet, _)) => answer(operation(wallet)),
        Err(message) => tool_error(&message),
    }
}

#[tool_router]
impl DataApiTools {
    pub(crate) fn new(state: SharedState) -> Self {
        Self { state }
    }

    #[tool(
        description = "Confirmed agent relationships of any wallet (public data; pending ones are not shown).",
        annotations(read_only_hint = true)
    )]
    async fn get_agent_relationships(
        &self,
        Parameters(args): Parameters<AddressArgs>,
    ) -> CallToolResult {
        answer(rest::public_relationships_of(&self.state, &args.address))
    }

    #[tool(
        description = "NFT collections known to this server: slug and contract (public data).",
        annotations(read_only_hint = true)
    )]
    async fn list_collections(&self) -> CallToolResult {
        CallToolResult::structured(json!({ "collections": self.state.favorites.collections() }))
    }

    #[tool(
        description = "The wallet, scopes and expiry of the wallet JWT sent with this call (needs a JWT, no scope).",
        annotations(read_only_hint = true)
    )]
    async fn whoami(&self, Extension(parts): Extension<Parts>) -> CallToolResult {
        match wallet_with(&parts, None) {
            Ok((wallet, claims)) => CallToolResult::structured(json!({
                "wallet": wallet.to_checksum(None),
                "scopes": claims.scopes().to_string(),
                "expires_at_unix_secs": claims.expires_at_unix_secs(),
            })),
            Err(message) => tool_error(&message),
        }
    }

    #[tool(
        description = "Favorite NFTs of the JWT's wallet, one page at a time (needs read:favorites). Pass `next` back as `after`.",
        annotations(read_only_hint = true)
    )]
    async fn get_favorites(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<FavoritesArgs>,
    ) -> CallToolResult {
        for_wallet(&parts, Scope::ReadFavorites, |wallet| {
            rest::favorites_of(&self.state, wallet, args.limit, args.after.as_deref())
        })
    }

    #[tool(
        description = "Every agent relationship of the JWT's wallet, pending or confirmed (needs read:wallets).",
        annotations(read_only_hint = true)
    )]
    async fn get_own_agent_relationships(
        &self,
        Extension(parts): Extension<Parts>,
    ) -> CallToolResult {
        for_wallet(&parts, Scope::ReadWallets, |wallet| {
            Ok(rest::own_relationships_of(&self.state, wallet))
        })
    }

    #[tool(
        description = "Declare the JWT's wallet an agent, so owners can relate to it (needs write:wallets).",
        annotations(idempotent_hint = true, destructive_hint = false)
    )]
    async fn declare_agent(&self, Extension(parts): Extension<Parts>) -> CallToolResult {
        for_wallet(&parts, Scope::WriteWallets, |wallet| {
            Ok(rest::set_agent_for(&self.state, wallet, true))
        })
    }

    #[tool(
        description = "Undeclare the JWT's wallet as an agent; drops its agent relationships (needs write:wallets).",
        annotations(idempotent_hint = true, destructive_hint = true)
    )]
    async fn undeclare_agent(&self, Extension(parts): Extension<Parts>) -> CallToolResult {
        for_wallet(&parts, Scope::WriteWallets, |wallet| {
            Ok(rest::set_agent_for(&self.state, wallet, false))
        })
    }

    #[tool(
        description = "Propose an agent relationship between the JWT's wallet and a counterparty; the other side must confirm (needs write:wallets).",
        annotations(idempotent_hint = true, destructive_hint = false)
    )]
    async fn propose_agent_relationship(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<CounterpartyArgs>,
    ) -> CallToolResult {
        self.handshake(&parts, HandshakeStep::Propose, &args)
    }

    #[tool(
        description = "Confirm a pending agent relationship that awaits the JWT's wallet (needs write:wallets).",
        annotations(idempotent_hint = true, destructive_hint = false)
    )]
    async fn confirm_agent_relationship(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<CounterpartyArgs>,
    ) -> CallToolResult {
        self.handshake(&parts, HandshakeStep::Confirm, &args)
    }

    #[tool(
        description = "Remove an agent relationship of the JWT's wallet, pending or confirmed (needs write:wallets).",
        annotations(idempotent_hint = true, destructive_hint = true)
    )]
    async fn remove_agent_relationship(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<CounterpartyArgs>,
    ) -> CallToolResult {
        for_wallet(&parts, Scope::WriteWallets, |wallet| {
            rest::remove_for(
                &self.state,
                wallet,
                &args.counterparty_address,
                args.caller_role,
            )
        })
    }
}

impl DataApiTools {
    fn handshake(
        &self,
        parts: &Parts,
        step: HandshakeStep,
        args: &CounterpartyArgs,
    ) -> CallToolResult {
        for_wallet(parts, Scope::WriteWallets, |wallet| {
            rest::handshake_for(
                &self.state,
                wallet,
                step,
                &args.counterparty_address,
                args.caller_role,
            )
        })
    }
}

#[tool_handler(
    name = "walletgate-data-api",
    instructions = "NFT favorites and agent relationships. Every request needs X-API-KEY; wallet tools also need Authorization: Bearer <wallet JWT> and act for that JWT's wallet only."
)]
impl ServerHandler for DataApiTools {}

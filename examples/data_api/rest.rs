//! The wallet-scoped REST operations: favorites and agent relationships.
//!
//! Every handler takes the wallet from the verified JWT ([`WalletClaims`]),
//! never from the request body. Each handler only unpacks HTTP and calls one
//! operation below (`*_of` / `*_for`); the MCP tools call the same operations,
//! so both surfaces give the same answers.

use std::collections::HashMap;

use alloy_primitives::Address;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};
use rmcp::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use walletgate::envelope::DataApiError;
use walletgate::wallet_jwt::WalletClaims;

use crate::favorites::{MAX_LIMIT, MIN_LIMIT, Page, PageError, checked_limit};
use crate::relationships::{CallerRole, HandshakeError, Relationship};
use crate::state::{AppState, SharedState};
use crate::wire::{json_body, rfc3339, schema};

impl From<PageError> for DataApiError {
    fn from(error: PageError) -> Self {
        DataApiError::bad_request(error.to_string())
    }
}

impl From<HandshakeError> for DataApiError {
    fn from(error: HandshakeError) -> Self {
        match error {
            HandshakeError::NothingToConfirm => DataApiError::not_found(error.to_string()),
            HandshakeError::SelfRelationship | HandshakeError::NotAnAgent(_) => {
                DataApiError::conflict(error.to_string())
            }
        }
    }
}

const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

fn parse_address(text: &str, field: &str) -> Result<Address, DataApiError> {
    text.parse().map_err(|_| {
        DataApiError::bad_request(format!("{field} must be a 0x-prefixed 20-byte address"))
    })
}

/// `GET /api/v2/account/{wallet}/favorites?limit=&after=` (`read:favorites`,
/// the path's wallet must be the JWT's).
pub(crate) async fn favorites(
    State(state): State<SharedState>,
    claims: WalletClaims,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, DataApiError> {
    let limit = query
        .get("limit")
        .map(|text| {
            text.parse::<i64>().map_err(|_| {
                DataApiError::bad_request(format!(
                    "limit must be an integer between {MIN_LIMIT} and {MAX_LIMIT}"
                ))
            })
        })
        .transpose()?;
    let page = favorites_of(
        &state,
        claims.wallet(),
        limit,
        query.get("after").map(String::as_str),
    )?;
    // serde_json writes a page in many small pieces: into a Vec each is a
    // copy, into `Json`'s BytesMut writer each is also a call and a reserve.
    let mut body = Vec::with_capacity(512 * page.nfts.len() + 64);
    serde_json::to_writer(&mut body, &page).map_err(|_| {
        DataApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the page did not serialize",
        )
    })?;
    Ok(([(CONTENT_TYPE, APPLICATION_JSON)], body).into_response())
}

/// One page of `wallet`'s favorites (`limit` checked, default applied).
pub(crate) fn favorites_of<'a>(
    state: &'a AppState,
    wallet: Address,
    limit: Option<i64>,
    after: Option<&str>,
) -> Result<Page<'a>, DataApiError> {
    Ok(state.favorites.page(wallet, checked_limit(limit)?, after)?)
}

/// `PUT /api/v2/accounts/agent` (`write:wallets`): declares the wallet an agent.
pub(crate) async fn declare_agent(
    State(state): State<SharedState>,
    claims: WalletClaims,
) -> Json<AgentDeclaration> {
    Json(set_agent_for(&state, claims.wallet(), true))
}

/// `DELETE /api/v2/accounts/agent` (`write:wallets`): undeclares it.
pub(crate) async fn undeclare_agent(
    State(state): State<SharedState>,
    claims: WalletClaims,
) -> Json<AgentDeclaration> {
    Json(set_agent_for(&state, claims.wallet(), false))
}

/// The answer to declaring or undeclaring an agent.
#[derive(Serialize, JsonSchema)]
pub(crate) struct AgentDeclaration {
    is_agent: bool,
    /// False when the wallet already was (or was not) an agent.
    changed: bool,
}

/// Declares (`is_agent`) or undeclares `wallet` an agent.
pub(crate) fn set_agent_for(state: &AppState, wallet: Address, is_agent: bool) -> AgentDeclaration {
    let changed = if is_agent {
        state.relationships.declare_agent(wallet)
    } else {
        state.relationships.undeclare_agent(wallet)
    };
    AgentDeclaration { is_agent, changed }
}

/// The other side of a relationship, and the side the caller speaks for.
#[derive(Deserialize, JsonSchema)]
pub(crate) struct Counterparty {
    #[schemars(with = "schema::Address")]
    counterparty_address: String,
    caller_role: CallerRole,
}

/// The answer to a handshake step.
#[derive(Serialize, JsonSchema)]
pub(crate) struct RelationshipChange {
    relation: Relationship,
    /// Whether this call created the relationship.
    created: bool,
}

/// The answer to removing a relationship.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Removed {
    /// False when none existed.
    removed: bool,
}

/// A list of relationships.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "Relationships")]
pub(crate) struct RelationshipList {
    relationships: Vec<Relationship>,
}

fn now(state: &AppState) -> String {
    rfc3339(state.clock.now_unix_secs())
}

/// A handshake step `wallet` takes toward a counterparty.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HandshakeStep {
    /// Propose a relationship.
    Propose,
    /// Confirm one that awaits `wallet`.
    Confirm,
}

/// `POST /api/v2/accounts/agent-relationships` (`write:wallets`): proposes.
pub(crate) async fn propose(
    State(state): State<SharedState>,
    claims: WalletClaims,
    body: Bytes,
) -> Result<Json<RelationshipChange>, DataApiError> {
    handshake_body(&state, &claims, &body, HandshakeStep::Propose)
}

/// `POST /api/v2/accounts/agent-relationships/confirm` (`write:wallets`).
pub(crate) async fn confirm(
    State(state): State<SharedState>,
    claims: WalletClaims,
    body: Bytes,
) -> Result<Json<RelationshipChange>, DataApiError> {
    handshake_body(&state, &claims, &body, HandshakeStep::Confirm)
}

/// A handshake step whose counterparty and role come in a JSON body.
fn handshake_body(
    state: &AppState,
    claims: &WalletClaims,
    body: &Bytes,
    step: HandshakeStep,
) -> Result<Json<RelationshipChange>, DataApiError> {
    let body: Counterparty = json_body(body)?;
    let (wallet, role) = (claims.wallet(), body.caller_role);
    Ok(Json(handshake_for(
        state,
        wallet,
        step,
        &body.counterparty_address,
        role,
    )?))
}

/// `wallet` takes `step` toward `counterparty` (hex), speaking as `role`.
pub(crate) fn handshake_for(
    state: &AppState,
    wallet: Address,
    step: HandshakeStep,
    counterparty: &str,
    role: CallerRole,
) -> Result<RelationshipChange, DataApiError> {
    let counterparty = parse_address(counterparty, "counterparty_address")?;
    let relationships = &state.relationships;
    let (relation, created) = match step {
        HandshakeStep::Propose => relationships.propose(wallet, counterparty, role, &now(state)),
        HandshakeStep::Confirm => relationships.confirm(wallet, counterparty, role, &now(state)),
    }?;
    Ok(RelationshipChange { relation, created })
}

/// `DELETE /api/v2/accounts/agent-relationships?caller_role=&counterparty_address=` (`write:wallets`).
pub(crate) async fn remove(
    State(state): State<SharedState>,
    claims: WalletClaims,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Removed>, DataApiError> {
    let counterparty = query
        .get("counterparty_address")
        .ok_or_else(|| DataApiError::bad_request("counterparty_address is required"))?;
    let role: CallerRole = query
        .get("caller_role")
        .and_then(|role| serde_json::from_value(Value::String(role.clone())).ok())
        .ok_or_else(|| DataApiError::bad_request("caller_role must be AGENT or OWNER"))?;
    Ok(Json(remove_for(
        &state,
        claims.wallet(),
        counterparty,
        role,
    )?))
}

/// Removes the relationship between `wallet` (as `role`) and `counterparty` (hex).
pub(crate) fn remove_for(
    state: &AppState,
    wallet: Address,
    counterparty: &str,
    role: CallerRole,
) -> Result<Removed, DataApiError> {
    let counterparty = parse_address(counterparty, "counterparty_address")?;
    let removed = state.relationships.remove(wallet, counterparty, role);
    Ok(Removed { removed })
}

/// `GET /api/v2/accounts/agent-relationships` (`read:wallets`): the wallet's own, any state.
pub(crate) async fn own_relationships(
    State(state): State<SharedState>,
    claims: WalletClaims,
) -> Json<RelationshipList> {
    Json(own_relationships_of(&state, claims.wallet()))
}

/// Every relationship `wallet` is part of, in any state.
pub(crate) fn own_relationships_of(state: &AppState, wallet: Address) -> RelationshipList {
    RelationshipList {
        relationships: state.relationships.own(wallet),
    }
}

/// `GET /api/v2/accounts/{address}/agent-relationships` (API key only): confirmed ones.
pub(crate) async fn public_relationships(
    State(state): State<SharedState>,
    Path(address): Path<String>,
) -> Result<Json<RelationshipList>, DataApiError> {
    Ok(Json(public_relationships_of(&state, &address)?))
}

/// The confirmed relationships of `address` (hex), for anyone to read.
pub(crate) fn public_relationships_of(
    state: &AppState,
    address: &str,
) -> Result<RelationshipList, DataApiError> {
    let wallet = parse_address(address, "address")?;
    Ok(RelationshipList {
        relationships: state.relationships.public(wallet),
    })
}

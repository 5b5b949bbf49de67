//! The wallet-scoped REST operations: favorites and agent relationships.
//!
//! Every handler takes the wallet from the verified JWT ([`WalletClaims`]),
//! never from the request body.

use std::collections::HashMap;

use alloy_primitives::Address;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use walletgate::envelope::DataApiError;
use walletgate::wallet_jwt::WalletClaims;

use crate::app::{SharedState, rfc3339};
use crate::auth::json_body;
use crate::favorites::{MAX_LIMIT, MIN_LIMIT, Page, PageError, checked_limit};
use crate::relationships::{CallerRole, HandshakeError};

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
) -> Result<Json<Page>, DataApiError> {
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
    let limit = checked_limit(limit)?;
    let page = state.favorites.page(
        claims.wallet(),
        limit,
        query.get("after").map(String::as_str),
    )?;
    Ok(Json(page))
}

/// `PUT /api/v2/accounts/agent` (`write:wallets`): declares the wallet an agent.
pub(crate) async fn declare_agent(
    State(state): State<SharedState>,
    claims: WalletClaims,
) -> Json<Value> {
    let changed = state.relationships.declare_agent(claims.wallet());
    Json(json!({ "is_agent": true, "changed": changed }))
}

/// `DELETE /api/v2/accounts/agent` (`write:wallets`): undeclares it.
pub(crate) async fn undeclare_agent(
    State(state): State<SharedState>,
    claims: WalletClaims,
) -> Json<Value> {
    let changed = state.relationships.undeclare_agent(claims.wallet());
    Json(json!({ "is_agent": false, "changed": changed }))
}

#[derive(Deserialize)]
pub(crate) struct Counterparty {
    counterparty_address: String,
    caller_role: CallerRole,
}

fn now(state: &SharedState) -> String {
    rfc3339(state.clock.now_unix_secs())
}

/// One handshake step as `Relationships` defines it.
type HandshakeStep = fn(
    &crate::relationships::Relationships,
    Address,
    Address,
    CallerRole,
    &str,
) -> Result<(crate::relationships::Relationship, bool), HandshakeError>;

/// Runs `step` for the JWT's wallet with the body's counterparty and role.
fn handshake(
    state: &SharedState,
    claims: &WalletClaims,
    body: &Bytes,
    step: HandshakeStep,
) -> Result<Json<Value>, DataApiError> {
    let body: Counterparty = json_body(body)?;
    let counterparty = parse_address(&body.counterparty_address, "counterparty_address")?;
    let (relation, created) = step(
        &state.relationships,
        claims.wallet(),
        counterparty,
        body.caller_role,
        &now(state),
    )?;
    Ok(Json(json!({ "relation": relation, "created": created })))
}

/// `POST /api/v2/accounts/agent-relationships` (`write:wallets`): proposes.
pub(crate) async fn propose(
    State(state): State<SharedState>,
    claims: WalletClaims,
    body: Bytes,
) -> Result<Json<Value>, DataApiError> {
    handshake(
        &state,
        &claims,
        &body,
        crate::relationships::Relationships::propose,
    )
}

/// `POST /api/v2/accounts/agent-relationships/confirm` (`write:wallets`).
pub(crate) async fn confirm(
    State(state): State<SharedState>,
    claims: WalletClaims,
    body: Bytes,
) -> Result<Json<Value>, DataApiError> {
    handshake(
        &state,
        &claims,
        &body,
        crate::relationships::Relationships::confirm,
    )
}

/// `DELETE /api/v2/accounts/agent-relationships?caller_role=&counterparty_address=` (`write:wallets`).
pub(crate) async fn remove(
    State(state): State<SharedState>,
    claims: WalletClaims,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, DataApiError> {
    let counterparty = query
        .get("counterparty_address")
        .ok_or_else(|| DataApiError::bad_request("counterparty_address is required"))?;
    let counterparty = parse_address(counterparty, "counterparty_address")?;
    let role: CallerRole = query
        .get("caller_role")
        .and_then(|role| serde_json::from_value(Value::String(role.clone())).ok())
        .ok_or_else(|| DataApiError::bad_request("caller_role must be AGENT or OWNER"))?;
    let removed = state
        .relationships
        .remove(claims.wallet(), counterparty, role);
    Ok(Json(json!({ "removed": removed })))
}

/// `GET /api/v2/accounts/agent-relationships` (`read:wallets`): the wallet's own, any state.
pub(crate) async fn own_relationships(
    State(state): State<SharedState>,
    claims: WalletClaims,
) -> Json<Value> {
    Json(json!({ "relationships": state.relationships.own(claims.wallet()) }))
}

/// `GET /api/v2/accounts/{address}/agent-relationships` (API key only): confirmed ones.
pub(crate) async fn public_relationships(
    State(state): State<SharedState>,
    Path(address): Path<String>,
) -> Result<Json<Value>, DataApiError> {
    let wallet = parse_address(&address, "address")?;
    Ok(Json(
        json!({ "relationships": state.relationships.public(wallet) }),
    ))
}

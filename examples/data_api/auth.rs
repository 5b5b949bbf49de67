//! Sign-in and token endpoints, on the paths the OpenSea SDK calls.
//!
//! SIWE verify answers with two cookies, `access_token` (the session) and
//! `refresh_token` (rotates it). PAT management (`/api/v2/auth/tokens…`)
//! takes the library's `SessionWallet`, which owns the rule that a bearer JWT
//! never authorises it. The exchange takes a PAT and answers a wallet JWT.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use walletgate::envelope::DataApiError;
use walletgate::siwe::SiweMessageFields;
use walletgate::tokens::{
    AccessToken, NewPat, PatRecord, REFRESH_COOKIE, SessionCookies, SessionWallet, request_cookie,
};
use walletgate::wallet_jwt::{ScopeSet, WalletClaims};

use crate::state::SharedState;
use crate::wire::{json_body, rfc3339};

/// `POST /api/v2/auth/siwe/nonce` -> `{nonce}`.
pub(crate) async fn nonce(
    State(state): State<SharedState>,
) -> Result<Json<serde_json::Value>, DataApiError> {
    let nonce = state.siwe.issue_nonce().await.map_err(|_| {
        DataApiError::new(StatusCode::SERVICE_UNAVAILABLE, "nonce store unavailable")
    })?;
    Ok(Json(json!({ "nonce": nonce })))
}

#[derive(Deserialize)]
struct VerifyBody {
    message: SiweMessageFields,
    signature: String,
}

/// `POST /api/v2/auth/siwe/verify`: the message's fields and signature; the
/// exact text is rebuilt from the fields and checked.
pub(crate) async fn verify(
    State(state): State<SharedState>,
    body: Bytes,
) -> Result<Response, DataApiError> {
    let body: VerifyBody = json_body(&body)?;
    let signed_in = state
        .siwe
        .verify_fields(&body.message, &body.signature)
        .await
        .map_err(|error| {
            if error.is_server_fault() {
                DataApiError::new(StatusCode::SERVICE_UNAVAILABLE, error.to_string())
            } else {
                DataApiError::unauthorized(format!("SIWE verification failed: {error}"))
            }
        })?;
    let cookies = state.issuer.start_session(signed_in.address).await?;
    let address = signed_in.address.to_checksum(None);
    let headers = cookies.set_cookie_headers(state.issuer.config());
    Ok((headers, Json(json!({ "address": address }))).into_response())
}

/// `POST /api/v2/auth/session/refresh`: the refresh cookie buys new cookies once.
pub(crate) async fn refresh_session(
    State(state): State<SharedState>,
    headers: HeaderMap,
) -> Result<Response, DataApiError> {
    let refresh = request_cookie(&headers, REFRESH_COOKIE)
        .ok_or_else(|| DataApiError::unauthorized("the refresh_token cookie is required"))?;
    let (wallet, cookies) = state.issuer.refresh_session(refresh).await?;
    let address = wallet.to_checksum(None);
    let headers = cookies.set_cookie_headers(state.issuer.config());
    Ok((headers, Json(json!({ "address": address }))).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateTokenBody {
    #[serde(default)]
    label: String,
    scopes: Vec<String>,
    expires_in_days: Option<u32>,
}

/// A PAT as listed: never its secret.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenView {
    id: String,
    label: String,
    scopes: Vec<String>,
    created_at: String,
    expires_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_used_at: Option<String>,
    revoked: bool,
}

impl From<&PatRecord> for TokenView {
    fn from(record: &PatRecord) -> Self {
        Self {
            id: record.id.clone(),
            label: record.label.clone(),
            scopes: record.scopes.iter().map(ToString::to_string).collect(),
            created_at: rfc3339(record.created_at),
            expires_at: rfc3339(record.expires_at),
            last_used_at: record.last_used_at.map(rfc3339),
            revoked: record.revoked_at.is_some(),
        }
    }
}

fn created(record: &PatRecord, token: &str) -> Response {
    let scopes: Vec<String> = record.scopes.iter().map(ToString::to_string).collect();
    let body = json!({
        "id": record.id,
        "token": token,
        "label": record.label,
        "scopes": scopes,
        "expiresAt": rfc3339(record.expires_at),
    });
    (StatusCode::CREATED, Json(body)).into_response()
}

/// `POST /api/v2/auth/tokens` (session): creates a PAT, shown once.
pub(crate) async fn create_token(
    State(state): State<SharedState>,
    SessionWallet(wallet): SessionWallet,
    body: Bytes,
) -> Result<Response, DataApiError> {
    let body: CreateTokenBody = json_body(&body)?;
    let scopes: ScopeSet = body.scopes.join(" ").parse().map_err(|_| {
        DataApiError::bad_request("scopes must be scope names such as read:favorites")
    })?;
    let (record, secret) = state
        .issuer
        .create_pat(
            wallet,
            NewPat {
                label: body.label,
                scopes,
                expires_in_days: body.expires_in_days,
            },
        )
        .await?;
    Ok(created(&record, secret.expose()))
}

/// `GET /api/v2/auth/tokens` (session): the wallet's PATs, without secrets.
pub(crate) async fn list_tokens(
    State(state): State<SharedState>,
    SessionWallet(wallet): SessionWallet,
) -> Result<Json<Vec<TokenView>>, DataApiError> {
    let records = state.issuer.list_pats(wallet).await?;
    Ok(Json(records.iter().map(TokenView::from).collect()))
}

/// `POST /api/v2/auth/tokens/{id}/rotate` (session): a new PAT replaces `id`.
pub(crate) async fn rotate_token(
    State(state): State<SharedState>,
    SessionWallet(wallet): SessionWallet,
    Path(id): Path<String>,
) -> Result<Response, DataApiError> {
    let (record, secret) = state.issuer.rotate_pat(wallet, &id).await?;
    Ok(created(&record, secret.expose()))
}

/// `DELETE /api/v2/auth/tokens/{id}` (session; a bearer, if sent, must name
/// the same wallet): revokes the PAT and signs the wallet out.
pub(crate) async fn revoke_token(
    State(state): State<SharedState>,
    SessionWallet(wallet): SessionWallet,
    Path(id): Path<String>,
    bearer: Option<WalletClaims>,
) -> Result<Response, DataApiError> {
    if bearer.is_some_and(|claims| claims.wallet() != wallet) {
        return Err(DataApiError::forbidden(
            "the bearer JWT belongs to another wallet than the session",
        ));
    }
    state.issuer.revoke_pat(wallet, &id).await?;
    let cleared = SessionCookies::cleared_headers(state.issuer.config());
    Ok((cleared, Json(json!({ "id": id, "revoked": true }))).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExchangeBody {
    subject_token: String,
    subject_token_type: String,
}

/// The token types the exchange accepts: the SDK's and RFC 8693's.
const SUBJECT_TOKEN_TYPES: [&str; 2] = [
    "ACCESS_TOKEN",
    "urn:ietf:params:oauth:token-type:access_token",
];

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExchangeResponse {
    #[serde(flatten)]
    token: AccessToken,
    token_scopes: Vec<String>,
}

/// `POST /api/v2/auth/tokens/exchange`: `{subjectToken, subjectTokenType}` ->
/// `{accessToken, tokenType, expiresIn, scope, tokenScopes}`.
pub(crate) async fn exchange(
    State(state): State<SharedState>,
    body: Bytes,
) -> Result<Json<ExchangeResponse>, DataApiError> {
    let body: ExchangeBody = json_body(&body)?;
    if !SUBJECT_TOKEN_TYPES.contains(&body.subject_token_type.as_str()) {
        return Err(DataApiError::bad_request(
            "subjectTokenType must be ACCESS_TOKEN (a personal access token)",
        ));
    }
    let token = state.issuer.exchange(&body.subject_token).await?;
    let token_scopes = token.scope.split(' ').map(str::to_owned).collect();
    Ok(Json(ExchangeResponse {
        token,
        token_scopes,
    }))
}

/// `GET /.well-known/jwks.json`: current and still-valid previous keys.
pub(crate) async fn jwks(State(state): State<SharedState>) -> Json<serde_json::Value> {
    state.issuer.keys().prune(state.clock.now_unix_secs());
    Json(state.issuer.keys().jwks())
}

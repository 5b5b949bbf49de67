//! Sign-in and token endpoints, on the paths the OpenSea SDK calls.
//!
//! SIWE verify answers with two cookies, `access_token` (the session) and
//! `refresh_token` (rotates it). PAT management (`/api/v2/auth/tokens…`)
//! takes the library's `SessionWallet`, which owns the rule that a bearer JWT
//! never authorises it and refuses other sites' pages; sign-in and refresh,
//! which set the cookies, refuse them with the same `refuse_cross_site`.
//! The exchange takes a PAT and answers a wallet JWT.

use std::borrow::Cow;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::schemars::{self, JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use walletgate::envelope::DataApiError;
use walletgate::siwe::SiweMessageFields;
use walletgate::tokens::{
    AccessToken, IssuerConfig, NewPat, PatRecord, REFRESH_COOKIE, SessionCookies, SessionWallet,
    refuse_cross_site, request_cookie,
};
use walletgate::wallet_jwt::{ScopeSet, WalletClaims};

use crate::state::SharedState;
use crate::wire::{json_body, rfc3339, schema};

/// A single-use SIWE nonce.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Nonce {
    #[schemars(length(min = 8))]
    nonce: String,
}

/// `POST /api/v2/auth/siwe/nonce` -> `{nonce}`.
pub(crate) async fn nonce(State(state): State<SharedState>) -> Result<Json<Nonce>, DataApiError> {
    let nonce = state.siwe.issue_nonce().await?;
    Ok(Json(Nonce { nonce }))
}

/// The body of SIWE verify.
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "SiweVerify")]
pub(crate) struct VerifyBody {
    #[schemars(with = "SiweFields")]
    message: SiweMessageFields,
    /// EIP-191 signature, `0x` + 130 hex digits
    signature: String,
}

/// The schema of the library's `SiweMessageFields` (a library type, so
/// written here by hand; the SIWE tests hold it to the parser).
struct SiweFields;

impl JsonSchema for SiweFields {
    fn schema_name() -> Cow<'static, str> {
        "SiweMessageFields".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let address = generator.subschema_for::<schema::Address>();
        let time = generator.subschema_for::<schema::DateTime>();
        json_schema!({
            "type": "object",
            "description": "The EIP-4361 message's fields; the server rebuilds the exact signed text from them. Unknown members (the SDK's `accountType`) are ignored.",
            "required": ["domain", "address", "uri", "version", "chainId", "nonce", "issuedAt"],
            "properties": {
                "scheme": { "type": "string" },
                "domain": { "type": "string" },
                "address": address,
                "statement": { "type": "string" },
                "uri": { "type": "string" },
                "version": { "type": "string", "const": "1" },
                "chainId": { "type": ["integer", "string"] },
                "nonce": { "type": "string" },
                "issuedAt": time,
                "expirationTime": time,
                "notBefore": time,
                "requestId": { "type": "string" },
                "resources": { "type": "array", "items": { "type": "string" } }
            }
        })
    }
}

/// The wallet a session was started (or refreshed) for.
#[derive(Serialize, JsonSchema)]
pub(crate) struct SignedIn {
    #[schemars(with = "schema::Address")]
    address: String,
}

/// `POST /api/v2/auth/siwe/verify`: the message's fields and signature; the
/// exact text is rebuilt from the fields and checked.
pub(crate) async fn verify(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, DataApiError> {
    // Another site's page must not sign the browser in to a wallet of its choosing.
    refuse_cross_site(&headers, state.issuer.config().issuer())?;
    let body: VerifyBody = json_body(&body)?;
    let signed_in = state
        .siwe
        .verify_fields(&body.message, &body.signature)
        .await?;
    let cookies = state.issuer.start_session(signed_in.address).await?;
    let address = signed_in.address.to_checksum(None);
    let headers = cookies.set_cookie_headers(state.issuer.config());
    Ok((headers, Json(SignedIn { address })).into_response())
}

/// `POST /api/v2/auth/session/refresh`: the refresh cookie buys new cookies once.
pub(crate) async fn refresh_session(
    State(state): State<SharedState>,
    headers: HeaderMap,
) -> Result<Response, DataApiError> {
    refuse_cross_site(&headers, state.issuer.config().issuer())?;
    let refresh = request_cookie(&headers, REFRESH_COOKIE)
        .ok_or_else(|| DataApiError::unauthorized("the refresh_token cookie is required"))?;
    let (wallet, cookies) = state.issuer.refresh_session(refresh).await?;
    let address = wallet.to_checksum(None);
    let headers = cookies.set_cookie_headers(state.issuer.config());
    Ok((headers, Json(SignedIn { address })).into_response())
}

/// A session ended.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignedOut {
    #[schemars(with = "schema::Address")]
    address: String,
    #[schemars(extend("const" = true))]
    signed_out: bool,
}

/// `DELETE /api/v2/auth/session` (session): signs the wallet out
/// everywhere and clears both cookies; its tokens stay.
pub(crate) async fn sign_out(
    State(state): State<SharedState>,
    SessionWallet(wallet): SessionWallet,
) -> Result<Response, DataApiError> {
    state.issuer.sign_out(wallet).await?;
    let cleared = SessionCookies::cleared_headers(state.issuer.config());
    let body = SignedOut {
        address: wallet.to_checksum(None),
        signed_out: true,
    };
    Ok((cleared, Json(body)).into_response())
}

/// The body of PAT creation.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "CreateToken")]
pub(crate) struct CreateTokenBody {
    #[serde(default)]
    label: String,
    #[schemars(with = "schema::Scopes")]
    scopes: Vec<String>,
    #[serde(default)]
    #[schemars(with = "u32", range(min = 1, max = IssuerConfig::DEFAULT_PAT_MAX_DAYS))]
    expires_in_days: Option<u32>,
}

/// A PAT as listed: never its secret.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "TokenSummary")]
pub(crate) struct TokenView {
    id: String,
    label: String,
    #[schemars(with = "schema::Scopes")]
    scopes: Vec<String>,
    #[schemars(with = "schema::DateTime")]
    created_at: String,
    #[schemars(with = "schema::DateTime")]
    expires_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "schema::DateTime")]
    last_used_at: Option<String>,
    revoked: bool,
}

/// The personal access token, shown once. It is never a bearer: exchange it for a wallet JWT.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedToken<'a> {
    id: &'a str,
    token: &'a str,
    label: &'a str,
    #[schemars(with = "schema::Scopes")]
    scopes: Vec<String>,
    #[schemars(with = "schema::DateTime")]
    expires_at: String,
}

/// A revoked PAT.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Revoked {
    id: String,
    #[schemars(extend("const" = true))]
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
    let body = CreatedToken {
        id: &record.id,
        token,
        label: &record.label,
        scopes: record.scopes.iter().map(ToString::to_string).collect(),
        expires_at: rfc3339(record.expires_at),
    };
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
    Ok((cleared, Json(Revoked { id, revoked: true })).into_response())
}

/// The body of the PAT -> JWT exchange.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Exchange")]
pub(crate) struct ExchangeBody {
    /// The personal access token
    subject_token: String,
    #[schemars(extend("enum" = SUBJECT_TOKEN_TYPES))]
    subject_token_type: String,
}

/// The token types the exchange accepts: the SDK's and RFC 8693's.
const SUBJECT_TOKEN_TYPES: [&str; 2] = [
    "ACCESS_TOKEN",
    "urn:ietf:params:oauth:token-type:access_token",
];

/// A short-lived wallet JWT, its lifetime and its scopes.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "WalletJwt")]
pub(crate) struct ExchangeResponse {
    /// The wallet JWT
    access_token: String,
    #[schemars(extend("const" = "Bearer"))]
    token_type: &'static str,
    /// Seconds until it expires
    expires_in: u64,
    /// Space-separated scopes
    scope: String,
    #[schemars(with = "schema::Scopes")]
    token_scopes: Vec<String>,
}

impl From<AccessToken> for ExchangeResponse {
    fn from(token: AccessToken) -> Self {
        Self {
            token_scopes: token.scope.split(' ').map(str::to_owned).collect(),
            access_token: token.access_token,
            token_type: token.token_type,
            expires_in: token.expires_in,
            scope: token.scope,
        }
    }
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
    Ok(Json(token.into()))
}

/// `GET /.well-known/jwks.json`: current and still-valid previous keys,
/// cacheable for less than a rotation's overlap.
pub(crate) async fn jwks(State(state): State<SharedState>) -> impl IntoResponse {
    state.issuer.keys().prune(state.clock.now_unix_secs());
    let max_age = state.issuer.config().jwks_max_age_secs();
    (
        [(
            axum::http::header::CACHE_CONTROL,
            format!("public, max-age={max_age}"),
        )],
        Json(state.issuer.keys().jwks()),
    )
}

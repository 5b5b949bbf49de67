//! State and composition: which layers guard which routes.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post, put};
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore, KeyQuota};
use walletgate::clock::{SharedClock, SystemClock};
use walletgate::siwe::{InMemoryNonceStore, SiweVerifier};
use walletgate::tokens::{IssuerConfig, SigningKeys, TokenIssuer};
use walletgate::wallet_jwt::{JwtVerifier, KeySet, RequireScopesLayer, Scope, WalletJwtLayer};

use crate::Config;
use crate::favorites::Favorites;
use crate::relationships::Relationships;
use crate::{auth, mcp, rest};

/// Everything the handlers share.
pub(crate) struct AppState {
    pub(crate) issuer: TokenIssuer,
    pub(crate) siwe: SiweVerifier,
    pub(crate) favorites: Favorites,
    pub(crate) relationships: Relationships,
    pub(crate) secure_cookies: bool,
    pub(crate) clock: SharedClock,
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

/// Requests per minute of the development key.
const DEV_KEY_PER_MINUTE: u32 = 600;

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
    let per_minute = std::num::NonZeroU32::new(DEV_KEY_PER_MINUTE).ok_or("zero quota")?;
    key_store.insert(
        &api_key,
        ApiKeyRecord::new(ApiKeyId::new("dev")?).with_quota(KeyQuota::per_minute(per_minute)),
    )?;

    let state = Arc::new(AppState {
        issuer,
        siwe,
        favorites,
        relationships: Relationships::default(),
        secure_cookies: config.origin.starts_with("https://"),
        clock: clock.clone(),
    });
    let router = router(state, key_store, verifier, clock, &config.origin);
    let dev = DevInfo {
        generated_api_key,
        seeded_wallets: SEEDED_WALLETS
            .iter()
            .map(|wallet| (*wallet).to_owned())
            .collect(),
    };
    Ok((router, dev))
}

fn scopes(scope: Scope) -> RequireScopesLayer {
    RequireScopesLayer::new(scope)
}

/// The composition: every route but the JWKS document needs `X-API-KEY`;
/// wallet-scoped routes also need a wallet JWT with the scope their method
/// names; token management needs the SIWE session cookie instead.
fn router(
    state: SharedState,
    key_store: InMemoryKeyStore,
    verifier: JwtVerifier,
    clock: SharedClock,
    origin: &str,
) -> Router {
    let api_keys = ApiKeyLayer::new(key_store).with_clock(clock);
    let wallet_scoped = Router::new()
        .route(
            "/api/v2/account/{wallet}/favorites",
            get(rest::favorites)
                .route_layer(scopes(Scope::ReadFavorites).wallet_in_path_after("account")),
        )
        .route(
            "/api/v2/accounts/agent",
            put(rest::declare_agent)
                .delete(rest::undeclare_agent)
                .route_layer(scopes(Scope::WriteWallets)),
        )
        .route(
            "/api/v2/accounts/agent-relationships",
            get(rest::own_relationships)
                .route_layer(scopes(Scope::ReadWallets))
                .merge(
                    post(rest::propose)
                        .delete(rest::remove)
                        .route_layer(scopes(Scope::WriteWallets)),
                ),
        )
        .route(
            "/api/v2/accounts/agent-relationships/confirm",
            post(rest::confirm).route_layer(scopes(Scope::WriteWallets)),
        )
        .route_layer(WalletJwtLayer::new(verifier.clone()));

    // Token management reads the session cookie; a bearer, if sent, is
    // verified so revocation can insist it names the same wallet.
    let token_management = Router::new()
        .route(
            "/api/v2/auth/tokens",
            post(auth::create_token).get(auth::list_tokens),
        )
        .route("/api/v2/auth/tokens/{id}/rotate", post(auth::rotate_token))
        .route(
            "/api/v2/auth/tokens/{id}",
            axum::routing::delete(auth::revoke_token),
        )
        .route_layer(WalletJwtLayer::new(verifier.clone()).optional_bearer());

    let keyed = Router::new()
        .merge(wallet_scoped)
        .merge(token_management)
        .route("/api/v2/auth/siwe/nonce", post(auth::nonce))
        .route("/api/v2/auth/siwe/verify", post(auth::verify))
        .route("/api/v2/auth/session/refresh", post(auth::refresh_session))
        .route("/api/v2/auth/tokens/exchange", post(auth::exchange))
        .route(
            "/api/v2/accounts/{address}/agent-relationships",
            get(rest::public_relationships),
        )
        .layer(api_keys.clone());

    Router::new()
        .route("/.well-known/jwks.json", get(auth::jwks))
        // MCP: its own X-API-KEY check (same layer, same quotas), optional JWT.
        .nest_service(
            "/mcp",
            mcp::service(state.clone(), api_keys, verifier, origin),
        )
        .merge(keyed)
        .with_state(state)
}

/// Unix seconds as RFC 3339 UTC (`2026-11-21T12:00:00Z`).
pub(crate) fn rfc3339(unix_secs: u64) -> String {
    // Howard Hinnant's days-to-civil algorithm.
    let days = (unix_secs / 86_400) as i64;
    let secs_of_day = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs_of_day / 3_600,
        secs_of_day / 60 % 60,
        secs_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_800_000_000), "2027-01-15T08:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}

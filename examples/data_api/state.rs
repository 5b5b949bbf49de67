//! What the handlers share: one [`AppState`] behind an `Arc`.

use std::sync::Arc;

use axum::body::Bytes;
use walletgate::clock::SharedClock;
use walletgate::siwe::SiweVerifier;
use walletgate::tokens::{HasTokenIssuer, TokenIssuer};

use crate::favorites::Favorites;
use crate::relationships::Relationships;
use crate::stores::{Pats, Sessions};

/// The issuer over the configured stores (in memory, or Redis).
pub(crate) type Issuer = TokenIssuer<Pats, Sessions>;

/// Everything the handlers share.
pub(crate) struct AppState {
    pub(crate) issuer: Issuer,
    pub(crate) siwe: SiweVerifier,
    pub(crate) favorites: Favorites,
    pub(crate) relationships: Relationships,
    pub(crate) clock: SharedClock,
    /// The live description, rendered and serialised once from the route table.
    pub(crate) openapi: Bytes,
    /// The RFC 9728 metadata document of the REST API, serialised once.
    pub(crate) resource_metadata_api: Bytes,
    /// The RFC 9728 metadata document of the MCP endpoint, serialised once.
    pub(crate) resource_metadata_mcp: Bytes,
}

pub(crate) type SharedState = Arc<AppState>;

/// The sessions behind `SessionWallet`: the issuer that started them.
impl HasTokenIssuer for AppState {
    type Pats = Pats;
    type Sessions = Sessions;

    fn token_issuer(&self) -> &Issuer {
        &self.issuer
    }
}

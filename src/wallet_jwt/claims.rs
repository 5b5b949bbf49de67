//! [`WalletClaims`]: what a verified wallet JWT says.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;

use alloy_primitives::Address;
use http::StatusCode;

use super::{Scope, ScopeError, ScopeSet};
use crate::envelope::{DataApiRejection, data_api_rejection};

/// The verified claims of a wallet JWT.
///
/// [`WalletJwtLayer`](super::WalletJwtLayer) puts them in the request
/// extensions; handlers take them as an extractor. An MCP tool (rmcp hands
/// each tool its request's `http::request::Parts`) reads
/// `parts.extensions.get::<WalletClaims>()` and calls
/// [`WalletClaims::require`]; `None` there means the request had no bearer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletClaims {
    wallet: Address,
    // Shared, not owned: a verified-token cache hit clones the claims on
    // every request (and the extractor again), and a clone is then three
    // counts, not three allocations.
    scopes: Arc<ScopeSet>,
    token_id: Arc<str>,
    pat_id: Arc<str>,
    issued_at_unix_secs: u64,
    expires_at_unix_secs: u64,
}

impl WalletClaims {
    pub(crate) fn new(
        wallet: Address,
        scopes: ScopeSet,
        token_id: String,
        pat_id: String,
        issued_at_unix_secs: u64,
        expires_at_unix_secs: u64,
    ) -> Self {
        Self {
            wallet,
            scopes: Arc::new(scopes),
            token_id: token_id.into(),
            pat_id: pat_id.into(),
            issued_at_unix_secs,
            expires_at_unix_secs,
        }
    }

    /// The wallet; its `Display` is the EIP-55 checksummed address.
    pub fn wallet(&self) -> Address {
        self.wallet
    }

    /// The granted scopes.
    pub fn scopes(&self) -> &ScopeSet {
        &self.scopes
    }

    /// The token id (`jti`).
    pub fn token_id(&self) -> &str {
        &self.token_id
    }

    /// The id of the PAT the token was minted from (`client_id`).
    pub fn pat_id(&self) -> &str {
        &self.pat_id
    }

    /// When the token was issued (`iat`), Unix seconds.
    pub fn issued_at_unix_secs(&self) -> u64 {
        self.issued_at_unix_secs
    }

    /// When the token expires (`exp`), Unix seconds.
    pub fn expires_at_unix_secs(&self) -> u64 {
        self.expires_at_unix_secs
    }

    /// `Ok` if the token grants `scope`; else a 403 `insufficient_scope` error.
    ///
    /// ```
    /// # use walletgate::wallet_jwt::{Scope, ScopeError, WalletClaims};
    /// fn list_favorites(claims: &WalletClaims) -> Result<String, ScopeError> {
    ///     claims.require(Scope::ReadFavorites)?;
    ///     Ok(format!("favorites of {}", claims.wallet()))
    /// }
    /// # let _ = list_favorites;
    /// ```
    ///
    /// # Errors
    /// [`ScopeError`] naming the scope.
    pub fn require(&self, scope: Scope) -> Result<(), ScopeError> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(ScopeError::new(ScopeSet::from(scope)))
        }
    }

    /// `Ok` if the token grants every scope of `scopes`.
    ///
    /// # Errors
    /// [`ScopeError`] naming the missing ones.
    pub fn require_all(&self, scopes: &ScopeSet) -> Result<(), ScopeError> {
        let missing = scopes.missing_from(&self.scopes);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(ScopeError::new(missing))
        }
    }

    /// `Ok` if `wallet` (hex, any case, e.g. from a path) is the token's.
    ///
    /// # Errors
    /// [`WalletMismatch`] (403) otherwise, also when `wallet` is no address.
    pub fn require_wallet(&self, wallet: &str) -> Result<(), WalletMismatch> {
        match parse_wallet(wallet) {
            Some(named) if named == self.wallet => Ok(()),
            _ => Err(WalletMismatch),
        }
    }
}

/// `0x` and 40 hex digits, any case (the checksum is not required).
pub(crate) fn parse_wallet(text: &str) -> Option<Address> {
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))?;
    if hex.len() != 40 {
        return None;
    }
    Address::from_str(hex).ok()
}

/// The request names a wallet other than the JWT's: 403.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalletMismatch;

/// 403: the path (or the arguments) name another wallet.
impl DataApiRejection for WalletMismatch {
    fn kind(&self) -> &'static str {
        "wallet_mismatch"
    }

    fn status(&self) -> StatusCode {
        StatusCode::FORBIDDEN
    }

    fn message(&self) -> Cow<'static, str> {
        Cow::Borrowed("The wallet in the request is not the wallet of the JWT")
    }
}

data_api_rejection!(WalletMismatch);

#[cfg(test)]
mod tests {
    use super::*;

    const WALLET: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

    fn claims() -> WalletClaims {
        WalletClaims::new(
            parse_wallet(WALLET).unwrap(),
            "read:favorites".parse().unwrap(),
            "jti".into(),
            "pat".into(),
            1,
            2,
        )
    }

    #[test]
    fn wallet_displays_checksummed() {
        assert_eq!(claims().wallet().to_string(), WALLET);
    }

    #[test]
    fn wallet_compares_case_insensitively() {
        assert!(claims().require_wallet(&WALLET.to_lowercase()).is_ok());
        assert!(
            claims()
                .require_wallet(&WALLET.to_uppercase().replace("0X", "0x"))
                .is_ok()
        );
        assert!(
            claims()
                .require_wallet("0x0000000000000000000000000000000000000001")
                .is_err()
        );
        assert!(claims().require_wallet("vitalik.eth").is_err());
    }

    #[test]
    fn require_names_the_missing_scope() {
        assert!(claims().require(Scope::ReadFavorites).is_ok());
        let error = claims().require(Scope::WriteWallets).unwrap_err();
        assert_eq!(error.missing().to_string(), "write:wallets");
    }
}

//! Scopes: [`Scope`], [`ScopeSet`] and the error of lacking one.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use http::{HeaderValue, StatusCode};

use crate::envelope::{DataApiRejection, data_api_rejection, insufficient_scope_challenge};

/// One scope a wallet JWT can grant.
///
/// The three the specification names have variants; anything else is
/// [`Scope::Custom`]. Equality, ordering and hashing follow the scope's text,
/// so a custom scope spelled `read:favorites` equals [`Scope::ReadFavorites`].
#[derive(Clone)]
#[non_exhaustive]
pub enum Scope {
    /// `read:favorites`
    ReadFavorites,
    /// `read:wallets`
    ReadWallets,
    /// `write:wallets`
    WriteWallets,
    /// Any other scope token.
    Custom(CustomScope),
}

/// The text of a [`Scope::Custom`]: a valid RFC 6749 scope token.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CustomScope(Box<str>);

impl CustomScope {
    /// The scope's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A scope that is empty or has characters RFC 6749 forbids (space, `"`, `\`,
/// controls, non-ASCII).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidScope;

impl fmt::Display for InvalidScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid scope token")
    }
}

impl std::error::Error for InvalidScope {}

impl Scope {
    /// The scope's text, e.g. `read:favorites`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::ReadFavorites => "read:favorites",
            Self::ReadWallets => "read:wallets",
            Self::WriteWallets => "write:wallets",
            Self::Custom(custom) => custom.as_str(),
        }
    }
}

impl FromStr for Scope {
    type Err = InvalidScope;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
        let valid = !text.is_empty()
            && text
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b));
        if !valid {
            return Err(InvalidScope);
        }
        Ok(match text {
            "read:favorites" => Self::ReadFavorites,
            "read:wallets" => Self::ReadWallets,
            "write:wallets" => Self::WriteWallets,
            other => Self::Custom(CustomScope(other.into())),
        })
    }
}

impl PartialEq for Scope {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Scope {}

impl PartialOrd for Scope {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scope {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for Scope {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scope({})", self.as_str())
    }
}

/// A set of scopes, kept sorted; displays as the space-separated `scope` claim.
///
/// ```
/// use walletgate::wallet_jwt::{Scope, ScopeSet};
///
/// let granted: ScopeSet = "read:favorites read:social".parse()?;
/// assert!(granted.contains(&Scope::ReadFavorites));
/// let needed = ScopeSet::from_iter([Scope::ReadFavorites, Scope::WriteWallets]);
/// assert_eq!(needed.missing_from(&granted).to_string(), "write:wallets");
/// # Ok::<(), walletgate::wallet_jwt::InvalidScope>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct ScopeSet(Vec<Scope>);

impl ScopeSet {
    /// No scope.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `scope` is in the set.
    pub fn contains(&self, scope: &Scope) -> bool {
        self.0.binary_search(scope).is_ok()
    }

    /// The scopes of `self` that `granted` lacks.
    pub fn missing_from(&self, granted: &ScopeSet) -> ScopeSet {
        ScopeSet(
            self.0
                .iter()
                .filter(|s| !granted.contains(s))
                .cloned()
                .collect(),
        )
    }

    /// Adds `scope`.
    pub fn insert(&mut self, scope: Scope) {
        if let Err(at) = self.0.binary_search(&scope) {
            self.0.insert(at, scope);
        }
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many scopes the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The scopes, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &Scope> {
        self.0.iter()
    }
}

impl FromIterator<Scope> for ScopeSet {
    fn from_iter<I: IntoIterator<Item = Scope>>(scopes: I) -> Self {
        let mut scopes: Vec<Scope> = scopes.into_iter().collect();
        scopes.sort();
        scopes.dedup();
        Self(scopes)
    }
}

impl From<Scope> for ScopeSet {
    fn from(scope: Scope) -> Self {
        Self(vec![scope])
    }
}

impl FromStr for ScopeSet {
    type Err = InvalidScope;

    /// Space-separated scopes; repeated spaces are tolerated.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.split(' ')
            .filter(|s| !s.is_empty())
            .map(Scope::from_str)
            .collect()
    }
}

impl fmt::Display for ScopeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, scope) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(scope.as_str())?;
        }
        Ok(())
    }
}

impl fmt::Debug for ScopeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScopeSet({self})")
    }
}

/// The wallet JWT lacks scopes: 403 with
/// `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScopeError {
    missing: ScopeSet,
}

impl ScopeError {
    pub(crate) fn new(missing: ScopeSet) -> Self {
        Self { missing }
    }

    /// The scopes the token lacks.
    pub fn missing(&self) -> &ScopeSet {
        &self.missing
    }
}

/// 403 with `WWW-Authenticate: Bearer error="insufficient_scope",
/// scope="…"` naming the missing scopes (RFC 6750).
impl DataApiRejection for ScopeError {
    fn kind(&self) -> &'static str {
        "insufficient_scope"
    }

    fn status(&self) -> StatusCode {
        StatusCode::FORBIDDEN
    }

    fn message(&self) -> Cow<'static, str> {
        Cow::Owned(format!("JWT lacks scope {}", self.missing))
    }

    fn www_authenticate(&self) -> Option<HeaderValue> {
        Some(insufficient_scope_challenge(&self.missing.to_string()))
    }
}

data_api_rejection!(ScopeError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_scopes_parse_to_their_variants() {
        assert_eq!("read:favorites".parse::<Scope>(), Ok(Scope::ReadFavorites));
        assert!(matches!(
            "write:wallets".parse::<Scope>(),
            Ok(Scope::WriteWallets)
        ));
        assert!(matches!(
            "read:social".parse::<Scope>(),
            Ok(Scope::Custom(_))
        ));
    }

    #[test]
    fn quotes_and_controls_are_not_scopes() {
        assert_eq!("a\"b".parse::<Scope>(), Err(InvalidScope));
        assert_eq!("a\\b".parse::<Scope>(), Err(InvalidScope));
        assert_eq!("a\nb".parse::<Scope>(), Err(InvalidScope));
        assert_eq!("".parse::<Scope>(), Err(InvalidScope));
    }

    #[test]
    fn set_is_sorted_and_deduplicated() {
        let set: ScopeSet = "write:wallets read:favorites  read:favorites"
            .parse()
            .unwrap();
        assert_eq!(set.to_string(), "read:favorites write:wallets");
        assert_eq!(set.len(), 2);
    }

    use crate::envelope::DataApiError;

    #[test]
    fn scope_error_renders_insufficient_scope() {
        let error = ScopeError::new(ScopeSet::from(Scope::ReadFavorites));
        let response = DataApiError::from(error).into_response();
        assert_eq!(response.status(), 403);
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer error=\"insufficient_scope\", scope=\"read:favorites\""
        );
    }
}

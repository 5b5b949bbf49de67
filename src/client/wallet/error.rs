//! What can go wrong on the client side of Area A.

use std::fmt;

/// A wallet client failure. Messages never contain a token, cookie, key or
/// signature.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalletError {
    /// The client configuration is unusable (base URL, API key, …).
    Config(String),
    /// `authenticate` was asked for no scope: the specification wants an
    /// explicit list.
    NoScopes,
    /// The server could not be reached, or did not answer in time.
    Transport(String),
    /// The signer refused or failed to sign the sign-in message.
    Signer(String),
    /// The server answered something this client cannot read.
    Protocol(String),
    /// A sign-in step was refused (nonce, SIWE verify, PAT creation).
    SignInRefused {
        /// The HTTP status of the refusal.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// No credentials are held: sign in first.
    NotSignedIn,
    /// The PAT is expired, revoked or unknown (or was revoked from here):
    /// only a new sign-in helps, so nothing is retried.
    ReauthRequired(String),
    /// 401 again after one refresh and one retry.
    Unauthorized(String),
    /// The server refused the API key (`X-API-KEY`); a new JWT would not help.
    ApiKeyRejected(String),
    /// 403: the JWT lacks `scope` (from `WWW-Authenticate`); sign in again
    /// with it.
    MissingScope {
        /// The scope(s) the server asked for.
        scope: String,
        /// The server's message.
        message: String,
    },
    /// 429 and the `Retry-After` is longer than the client waits (or the
    /// retry was refused again).
    RateLimited {
        /// The server's `Retry-After`, if it sent one.
        retry_after_secs: Option<u64>,
    },
    /// Revoking the PAT failed on the server; local credentials are kept.
    RevokeFailed {
        /// The HTTP status of the refusal.
        status: u16,
        /// The server's message.
        message: String,
    },
}

impl WalletError {
    /// Whether the error is about authentication (the CLI's exit code 2).
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            Self::NoScopes
                | Self::Signer(_)
                | Self::SignInRefused { .. }
                | Self::NotSignedIn
                | Self::ReauthRequired(_)
                | Self::Unauthorized(_)
                | Self::ApiKeyRejected(_)
                | Self::MissingScope { .. }
                | Self::RevokeFailed { .. }
        )
    }
}

impl fmt::Display for WalletError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(message) => write!(f, "configuration: {message}"),
            Self::NoScopes => f.write_str("name at least one scope (for example read:favorites)"),
            Self::Transport(message) => write!(f, "could not reach the server: {message}"),
            Self::Signer(message) => write!(f, "the signer failed: {message}"),
            Self::Protocol(message) => write!(f, "unexpected answer from the server: {message}"),
            Self::SignInRefused { status, message } => {
                write!(f, "sign-in refused ({status}): {message}")
            }
            Self::NotSignedIn => f.write_str("not signed in: sign in again (walletgate login)"),
            Self::ReauthRequired(reason) => write!(f, "{reason}; sign in again"),
            Self::Unauthorized(message) => {
                write!(f, "unauthorized after a token refresh: {message}")
            }
            Self::ApiKeyRejected(message) => write!(f, "API key refused: {message}"),
            Self::MissingScope { scope, message } => {
                write!(f, "the token lacks scope {scope}: {message}")
            }
            Self::RateLimited {
                retry_after_secs: Some(secs),
            } => write!(f, "rate limited: retry after {secs} s"),
            Self::RateLimited {
                retry_after_secs: None,
            } => f.write_str("rate limited"),
            Self::RevokeFailed { status, message } => {
                write!(f, "revoking the token failed ({status}): {message}")
            }
        }
    }
}

impl std::error::Error for WalletError {}

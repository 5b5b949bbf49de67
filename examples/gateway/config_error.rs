//! The gateway's configuration errors: a value that cannot be used, named by
//! its variable.

use std::fmt;

/// A configuration value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ConfigError {
    /// An environment variable has an unusable value.
    Invalid { variable: String, reason: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid { variable, reason } => write!(f, "{variable}: {reason}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// `variable`'s value cannot be used, for `reason` (never the value: it may be a secret).
pub(crate) fn invalid(variable: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        variable: variable.to_owned(),
        reason: reason.into(),
    }
}

//! The exit-code contract, in one place: every command ends through
//! [`Exit`], every failure is reported by [`Failure::report`], and every
//! `--help` ends with [`TABLE`]. Codes 0-3 are `@opensea/cli`'s; 4 tells a
//! refused or failed payment from an authentication failure (a script retries
//! neither the same way); 64 is `sysexits.h`'s `EX_USAGE`.

use std::process::ExitCode;

use serde_json::json;
use walletgate::client::pay::ClientError;
use walletgate::client::wallet::WalletError;

/// The table every command's `--help` ends with.
pub(crate) const TABLE: &str = "\
Exit codes:
  0   ok
  1   API error (the server refused or failed, or the network did)
  2   authentication (no key or API key, refused credentials, sign in again)
  3   rate limited (after the retries allowed)
  4   payment declined or failed (over the cap or budget, unfunded, refused)
  64  usage (an unknown flag, a missing argument, unusable input)";

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Done.
    Ok,
    /// The API answered an error, or the network failed.
    Api,
    /// Authentication failed or is missing.
    Auth,
    /// Rate limited (429), after the retries allowed.
    RateLimited,
    /// A payment was declined before signing or failed after.
    Payment,
    /// The command line or its input is unusable.
    Usage,
}

impl Exit {
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Api => 1,
            Self::Auth => 2,
            Self::RateLimited => 3,
            Self::Payment => 4,
            Self::Usage => 64,
        }
    }

    /// The `kind` of a JSON error.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Api => "api",
            Self::Auth => "authentication",
            Self::RateLimited => "rate_limited",
            Self::Payment => "payment",
            Self::Usage => "usage",
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

impl From<&ClientError> for Exit {
    fn from(error: &ClientError) -> Self {
        match error {
            ClientError::Payment(_) => Self::Payment,
            error if error.is_rate_limited() => Self::RateLimited,
            ClientError::Api(api) if matches!(api.status.as_u16(), 401 | 403) => Self::Auth,
            _ => Self::Api,
        }
    }
}

impl From<&WalletError> for Exit {
    fn from(error: &WalletError) -> Self {
        match error {
            WalletError::RateLimited { .. } => Self::RateLimited,
            error if error.is_auth() => Self::Auth,
            WalletError::Config(_) => Self::Usage,
            _ => Self::Api,
        }
    }
}

/// How results and errors are printed (`--format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Json,
    #[default]
    Text,
}

/// Why a command failed: its exit code, its message and the causes below it.
/// Messages never hold a secret: they are built from errors that redact.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) exit: Exit,
    pub(crate) message: String,
    pub(crate) causes: Vec<String>,
    /// The error's chain as the library joins it, when there was an error.
    chain: Option<String>,
}

impl Failure {
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
            causes: Vec::new(),
            chain: None,
        }
    }

    pub(crate) fn auth(message: impl Into<String>) -> Self {
        Self::new(Exit::Auth, message)
    }

    pub(crate) fn api(message: impl Into<String>) -> Self {
        Self::new(Exit::Api, message)
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    /// `error` and its sources, one message each.
    pub(crate) fn from_error(exit: Exit, error: &(dyn std::error::Error + 'static)) -> Self {
        let mut causes = Vec::new();
        let mut source = error.source();
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        Self {
            exit,
            message: error.to_string(),
            causes,
            chain: Some(walletgate::error_chain(error)),
        }
    }

    /// Adds a cause below the message (e.g. the API's answer).
    pub(crate) fn with_cause(mut self, cause: impl Into<String>) -> Self {
        let cause = cause.into();
        if let Some(chain) = &mut self.chain {
            chain.push_str(": ");
            chain.push_str(&cause);
        }
        self.causes.push(cause);
        self
    }

    /// The whole chain on stderr in plain text; with `--format json`, also
    /// `{"error": {...}}` as the only thing on stdout. Returns the exit code.
    pub(crate) fn report(&self, command: &str, format: Format) -> Exit {
        let chain = self.chain.clone().unwrap_or_else(|| {
            let mut chain = self.message.clone();
            for cause in &self.causes {
                chain.push_str(": ");
                chain.push_str(cause);
            }
            chain
        });
        if command.is_empty() {
            eprintln!("walletgate: {chain}");
        } else {
            eprintln!("walletgate {command}: {chain}");
        }
        if format == Format::Json {
            println!("{}", self.json());
        }
        self.exit
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        json!({
            "error": {
                "kind": self.exit.kind(),
                "message": self.message,
                "causes": self.causes,
                "exit": self.exit.code(),
            }
        })
    }
}

impl From<WalletError> for Failure {
    fn from(error: WalletError) -> Self {
        Self::from_error(Exit::from(&error), &error)
    }
}

impl From<&ClientError> for Failure {
    fn from(error: &ClientError) -> Self {
        let failure = Self::from_error(Exit::from(error), error);
        match error {
            ClientError::Api(api) if !api.body.is_empty() => {
                failure.with_cause(String::from_utf8_lossy(&api.body).into_owned())
            }
            _ => failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use walletgate::client::pay::{ApiError, Attempts};

    use super::*;

    fn api(status: u16) -> ClientError {
        ClientError::Api(ApiError {
            status: StatusCode::from_u16(status).unwrap(),
            code: None,
            body: Default::default(),
            attempts: Attempts::default(),
        })
    }

    #[test]
    fn error_classes_map_to_exit_codes() {
        assert_eq!(Exit::from(&api(500)).code(), 1);
        assert_eq!(Exit::from(&api(401)).code(), 2);
        assert_eq!(Exit::from(&api(429)).code(), 3);
        assert_eq!(
            Exit::from(&ClientError::Transport("refused".into())).code(),
            1
        );
        assert_eq!(Exit::Ok.code(), 0);
        assert_eq!(Exit::Payment.code(), 4);
        assert_eq!(Exit::Usage.code(), 64);
    }

    #[test]
    fn the_table_lists_every_code() {
        for exit in [
            Exit::Ok,
            Exit::Api,
            Exit::Auth,
            Exit::RateLimited,
            Exit::Payment,
            Exit::Usage,
        ] {
            assert!(
                TABLE.contains(&format!("\n  {:<3} ", exit.code())),
                "{exit:?}"
            );
        }
    }

    #[test]
    fn a_json_error_holds_kind_message_causes_and_exit() {
        let failure = Failure::auth("refused").with_cause("401 from the server");
        assert_eq!(
            failure.json(),
            json!({"error": {"kind": "authentication", "message": "refused",
                "causes": ["401 from the server"], "exit": 2}})
        );
    }
}

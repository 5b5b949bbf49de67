//! Exit codes, as `@opensea/cli` uses them: 0 ok, 1 API error, 2 payment or
//! auth error, 3 rate limited.

use std::process::ExitCode;

use walletgate::client::pay::ClientError;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Done.
    Ok,
    /// The API answered an error (or the network failed, or the input was unusable).
    Api,
    /// A payment or authentication failed.
    PaymentOrAuth,
    /// Rate limited (429), after the retries allowed.
    RateLimited,
}

impl Exit {
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Api => 1,
            Self::PaymentOrAuth => 2,
            Self::RateLimited => 3,
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
            ClientError::Payment(_) => Self::PaymentOrAuth,
            error if error.is_rate_limited() => Self::RateLimited,
            ClientError::Api(api) if matches!(api.status.as_u16(), 401 | 403) => {
                Self::PaymentOrAuth
            }
            _ => Self::Api,
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
    }
}

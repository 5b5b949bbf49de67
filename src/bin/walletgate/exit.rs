//! The process exit codes.

/// How a command ended: 0 success, 1 API error, 2 authentication error
/// (including "sign in again"), 3 rate limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    Ok,
    Api,
    Auth,
    RateLimited,
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(match exit {
            Exit::Ok => 0,
            Exit::Api => 1,
            Exit::Auth => 2,
            Exit::RateLimited => 3,
        })
    }
}

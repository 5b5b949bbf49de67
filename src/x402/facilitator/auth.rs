//! [`FacilitatorAuth`]: the `Authorization` of each facilitator call,
//! computed per call from its method and URL (a hosted facilitator wants a
//! fresh short-lived token bound to the call, not a static header).

use std::fmt;

use http::{HeaderValue, Method, Uri};

/// Headers a facilitator call carries, computed per call.
pub trait FacilitatorAuth: Send + Sync + 'static {
    /// The `Authorization` value for a `method` call to `url`; an error makes
    /// the call unavailable (nothing is sent).
    fn authorization(&self, method: &Method, url: &Uri) -> Result<HeaderValue, AuthError>;
}

/// A facilitator credential could not make a header.
#[derive(Debug)]
#[non_exhaustive]
pub struct AuthError {
    reason: &'static str,
}

impl AuthError {
    /// A failure described by `reason` (never a credential).
    pub fn new(reason: &'static str) -> Self {
        Self { reason }
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "facilitator authentication failed: {}", self.reason)
    }
}

impl std::error::Error for AuthError {}

//! The crate's tracing calls (feature `tracing`): a span per layer decision
//! and an event where a failure is answered but not returned. Without the
//! feature every macro expands to nothing, so call sites need no `#[cfg]`;
//! a value used only for tracing is bound with a leading `_`.
//!
//! Fields carry ids, wallets, amounts and codes, never a secret: no API key,
//! PAT, JWT, cookie, signature, payment header or authorization header.

// Some feature sets use none of them.
#![allow(unused_macros)]

/// A span for one layer decision, with its fields, and one `decision` event
/// inside it so a `fmt` subscriber prints it:
/// `trace_decision!(INFO, "api_key", key_id = %id, outcome = "admitted")`.
#[cfg(feature = "tracing")]
macro_rules! trace_decision {
    ($level:ident, $name:literal, $($fields:tt)+) => {{
        let span = ::tracing::span!(::tracing::Level::$level, $name, $($fields)+);
        span.in_scope(|| ::tracing::event!(::tracing::Level::$level, "decision"));
    }};
}

/// Without the feature: nothing.
#[cfg(not(feature = "tracing"))]
macro_rules! trace_decision {
    ($($tokens:tt)*) => {{}};
}

/// A `warn` event: a failure the request survives (its answer stands).
#[cfg(feature = "tracing")]
macro_rules! trace_warn {
    ($($tokens:tt)+) => {
        ::tracing::warn!($($tokens)+)
    };
}

/// Without the feature: nothing.
#[cfg(not(feature = "tracing"))]
macro_rules! trace_warn {
    ($($tokens:tt)*) => {{}};
}

/// An `error` event: a failure someone must look at (money, state).
#[cfg(feature = "tracing")]
macro_rules! trace_error {
    ($($tokens:tt)+) => {
        ::tracing::error!($($tokens)+)
    };
}

/// Without the feature: nothing.
#[cfg(not(feature = "tracing"))]
macro_rules! trace_error {
    ($($tokens:tt)*) => {{}};
}

/// The layer's decision, traced with the client IP and model (when the body
/// was parsed before this layer).
#[cfg(feature = "free-tier")]
pub(crate) fn free_tier_verdict<B>(
    _request: Option<&http::Request<B>>,
    _verdict: &Result<crate::free_tier::Verdict, crate::store::StoreError>,
) {
    #[cfg(feature = "tracing")]
    {
        use crate::envelope::ErrorCode;
        use crate::free_tier::Verdict;
        let extensions = _request.map(http::Request::extensions);
        let client_ip = extensions
            .and_then(|e| e.get::<crate::free_tier::ClientIp>())
            .map(|ip| ip.0);
        let model = extensions
            .and_then(|e| e.get::<crate::gateway::ParsedJson>())
            .and_then(|json| json.0["model"].as_str());
        let client_ip = client_ip.map(tracing::field::display);
        match _verdict {
            Ok(Verdict::Allowed { rate_limit }) => trace_decision!(
                DEBUG,
                "free_tier",
                client_ip,
                model,
                outcome = "admitted",
                remaining = rate_limit.remaining,
            ),
            Ok(Verdict::Refused { rate_limit, .. }) => trace_decision!(
                INFO,
                "free_tier",
                client_ip,
                model,
                outcome = "refused",
                error = ErrorCode::FreeTierRateLimited.as_str(),
                remaining = rate_limit.remaining,
            ),
            Ok(Verdict::AtCapacity) => trace_decision!(
                WARN,
                "free_tier",
                client_ip,
                model,
                outcome = "refused",
                error = ErrorCode::FreeModelFailed.as_str(),
            ),
            Err(error) => trace_decision!(
                ERROR,
                "free_tier",
                client_ip,
                model,
                outcome = "refused",
                error = ErrorCode::InternalError.as_str(),
                reason = %error,
            ),
        }
    }
}

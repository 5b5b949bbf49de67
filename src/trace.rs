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

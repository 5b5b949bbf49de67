//! `x-request-id` on every request and answer.
//!
//! A caller's id is kept when it is at most 64 of `[A-Za-z0-9._-]` (so it is
//! safe in logs and headers), else one is generated. It is set on the request
//! before any gate (the x402 layer hands it to the settlement hook), returned
//! on the answer, and every log event of the request is inside a `request`
//! span carrying it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use tracing::Instrument as _;

pub(crate) const X_REQUEST_ID: &str = "x-request-id";

/// Whether a caller's id is kept as it is.
pub(crate) fn acceptable(id: &[u8]) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(byte))
}

/// A fresh id, 32 hex digits: this process's random 128-bit start plus a
/// counter. Ids only correlate log lines, so they need to be unique, not
/// unpredictable: a random start read once (servers start apart) and a
/// counter give that without a system call per request.
fn generate() -> HeaderValue {
    static START: OnceLock<u128> = OnceLock::new();
    static ISSUED: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(|| {
        let mut bytes = [0u8; 16];
        // Unique enough to correlate lines; a failed read still yields ids.
        let _ = getrandom::fill(&mut bytes);
        u128::from_ne_bytes(bytes)
    });
    let n = ISSUED.fetch_add(1, Ordering::Relaxed);
    let mut digits = [0u8; 32];
    let _ = alloy_primitives::hex::encode_to_slice(
        start.wrapping_add(u128::from(n)).to_be_bytes(),
        &mut digits,
    );
    HeaderValue::from_bytes(&digits).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// The middleware (`axum::middleware::from_fn(request_id::layer)`).
pub(crate) async fn layer(mut request: Request, next: Next) -> Response {
    let id = match request.headers().get(X_REQUEST_ID) {
        Some(id) if acceptable(id.as_bytes()) => id.clone(),
        _ => generate(),
    };
    request.headers_mut().insert(X_REQUEST_ID, id.clone());
    let span = tracing::info_span!("request", request_id = id.to_str().unwrap_or_default());
    let mut response = next.run(request).instrument(span).await;
    response.headers_mut().insert(X_REQUEST_ID, id);
    response
}

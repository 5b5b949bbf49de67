//! `x-request-id` on every request and answer.
//!
//! A caller's id is kept when it is at most 64 of `[A-Za-z0-9._-]` (so it is
//! safe in logs and headers), else one is generated. It is set on the request
//! before any gate (the x402 layer hands it to the settlement hook), returned
//! on the answer, and every log event of the request is inside a `request`
//! span carrying it.

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

/// 16 random bytes as 32 hex digits.
fn generate() -> HeaderValue {
    let mut bytes = [0u8; 16];
    // Unique enough to correlate lines; a failed read still yields a value.
    let _ = getrandom::fill(&mut bytes);
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    HeaderValue::from_str(&hex).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
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

//! The two kinds of axum answer the handlers and steps write by hand: a
//! library error envelope and a JSON body.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;
use walletgate::envelope::{EnvelopeStyle, GatewayError};

/// A gateway error in `style`'s envelope, as an axum response.
pub(crate) fn reject(error: GatewayError, style: EnvelopeStyle) -> Response {
    error.into_response(style).map(Body::from)
}

/// `value` as an `application/json` response with `status`.
pub(crate) fn json(status: StatusCode, value: &Value) -> Response {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

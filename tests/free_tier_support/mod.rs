//! Helpers shared by the free_tier integration tests.
#![allow(dead_code)] // each test file uses a different part

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use walletgate::body::ResponseBody;
use walletgate::free_tier::ClientIp;

pub(crate) type Body = Full<Bytes>;

/// Answers with the `ClientIp` the layer inserted, or `none`.
pub(crate) async fn echo_client_ip(request: Request<Body>) -> Result<Response<Body>, Infallible> {
    let seen = request
        .extensions()
        .get::<ClientIp>()
        .map_or_else(|| "none".to_owned(), ToString::to_string);
    Ok(Response::new(Full::new(Bytes::from(seen))))
}

/// A request to `path` from the socket peer `peer` (none: no peer extension).
pub(crate) fn request(path: &str, peer: Option<&str>, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::builder().uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Full::new(Bytes::new())).unwrap();
    if let Some(peer) = peer {
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
    }
    request
}

pub(crate) async fn text(response: Response<ResponseBody<Body>>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

pub(crate) async fn json(response: Response<ResponseBody<Body>>) -> serde_json::Value {
    serde_json::from_str(&text(response).await).unwrap()
}

//! Both gates in front of a plain hyper server on loopback, no axum.

mod gates_support;

use std::convert::Infallible;

use bytes::Bytes;
use gates_support::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tower::{ServiceBuilder, service_fn};
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore};
use walletgate::wallet_jwt::{WalletClaims, WalletJwtLayer};

async fn wallet_of(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let wallet = request
        .extensions()
        .get::<WalletClaims>()
        .map(|c| c.wallet());
    let body = wallet.map(|w| w.to_string()).unwrap_or_default();
    Ok(Response::new(Full::new(Bytes::from(body))))
}

/// Serves the layered service for exactly `connections` connections.
async fn serve(connections: usize) -> std::net::SocketAddr {
    let store = InMemoryKeyStore::new();
    store
        .insert(API_KEY, ApiKeyRecord::new(ApiKeyId::new("app-1").unwrap()))
        .unwrap();
    let clock = clock();
    let service = ServiceBuilder::new()
        .layer(ApiKeyLayer::new(store))
        .layer(WalletJwtLayer::new(verifier(&clock)))
        .service(service_fn(wallet_of));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..connections {
            let (stream, _) = listener.accept().await.unwrap();
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    address
}

async fn get(address: std::net::SocketAddr, authorization: Option<String>) -> (StatusCode, String) {
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get(format!("/api/v2/account/{WALLET}/favorites"))
        .header("host", "127.0.0.1")
        .header("x-api-key", API_KEY);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn hyper_server_answers_with_the_verified_wallet() {
    let address = serve(1).await;
    let (status, body) = get(address, Some(bearer(&token(&claims())))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, WALLET);
}

#[tokio::test]
async fn hyper_server_sends_the_401_envelope() {
    let address = serve(1).await;
    let (status, body) = get(address, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["status"], 401);
}

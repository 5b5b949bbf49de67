//! `DATA_API_METRICS_LISTEN`'s page after a refused API key and a valid
//! wallet JWT: the library's counters as Prometheus text, no key or wallet
//! in any label.

use super::*;
use crate::metrics_endpoint::{recorder, router, total};

#[tokio::test]
async fn metrics_count_a_refused_key_and_a_valid_jwt() {
    // The process's recorder first: what happens before it is not counted.
    let handle = recorder();
    let server = start().await;
    let favorites = favorites_path(DEV_WALLET_0);
    let wrong_key = "wg_key_not-a-key-of-this-server";
    let refused = server
        .call(Method::GET, &favorites, &[("x-api-key", wrong_key)], None)
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:favorites"])
        .await;
    let auth = bearer(&jwt);
    let read = server
        .keyed(Method::GET, &favorites, &[("authorization", &auth)], None)
        .await;
    assert_eq!(read.status, StatusCode::OK);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(handle)).await });
    let request = Request::get(format!("http://{address}/metrics"));
    let response = server.send(request, Bytes::new()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let page = response.into_body().collect().await.unwrap().to_bytes();
    let page = String::from_utf8(page.to_vec()).unwrap();
    let at_least_one = |name: &str, labels: &[(&str, &str)]| {
        assert!(
            total(&page, name, labels) >= 1.0,
            "{name} {labels:?} in:\n{page}"
        );
    };
    at_least_one(
        "walletgate_api_key_refusals_total",
        &[("reason", "unknown")],
    );
    at_least_one("walletgate_api_key_admitted_total", &[]);
    at_least_one("walletgate_wallet_jwt_authenticated_total", &[]);
    assert!(!page.contains(wrong_key), "{page}");
    assert!(
        !page
            .to_lowercase()
            .contains(&DEV_WALLET_0.to_lowercase()[2..])
    );
    assert!(!page.contains(API_KEY));
}

//! `HttpFacilitator::new_with_tls` against a facilitator served over HTTPS on
//! loopback with a certificate made in the test: trusted through the
//! extra-CA option it pays; untrusted it is unreachable, and says why.

mod tls_support;
mod x402_fixtures;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes as AxumBytes;
use axum::extract::State;
use axum::routing::{get, post};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::ServiceExt;
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::clock::FakeClock;
use walletgate::tls::{ClientTls, HttpsConnector};
use walletgate::x402::{
    facilitator::{
        DevLedger, Facilitator, FacilitatorErrorKind, FacilitatorRequest, HttpFacilitator,
        LocalEvmFacilitator,
    },
    wire::{PaymentRequired, codec},
};
use x402_fixtures::{CHAT, answering, chat_layer};

const NOW: u64 = 1_750_000_000;

/// The standard facilitator API over HTTPS, answered by the local verifier.
async fn https_facilitator(ledger: Arc<DevLedger>) -> tls_support::HttpsServer {
    let local = Arc::new(LocalEvmFacilitator::new(
        ledger,
        Arc::new(FakeClock::at_unix_secs(NOW)),
    ));
    async fn call(local: &LocalEvmFacilitator, path: &str, body: &[u8]) -> String {
        let request: FacilitatorRequest = serde_json::from_slice(body).unwrap();
        if path == "verify" {
            serde_json::to_string(&local.verify(&request).await.unwrap()).unwrap()
        } else {
            serde_json::to_string(&local.settle(&request).await.unwrap()).unwrap()
        }
    }
    let app = axum::Router::new()
        .route(
            "/facilitator/verify",
            post(
                |State(l): State<Arc<LocalEvmFacilitator>>, body: AxumBytes| async move {
                    call(&l, "verify", &body).await
                },
            ),
        )
        .route(
            "/facilitator/settle",
            post(
                |State(l): State<Arc<LocalEvmFacilitator>>, body: AxumBytes| async move {
                    call(&l, "settle", &body).await
                },
            ),
        )
        .route(
            "/facilitator/supported",
            get(|State(l): State<Arc<LocalEvmFacilitator>>| async move {
                serde_json::to_string(&l.supported().await.unwrap()).unwrap()
            }),
        )
        .with_state(local);
    tls_support::serve_https(app).await
}

fn client(server: &tls_support::HttpsServer, tls: &ClientTls) -> HttpFacilitator<HttpsConnector> {
    HttpFacilitator::new_with_tls(&format!("https://{}/facilitator", server.address), tls)
        .unwrap()
        .with_timeout(Duration::from_secs(5))
}

fn chat(payment: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::post(CHAT);
    if let Some(payment) = payment {
        builder = builder.header("payment-signature", payment);
    }
    builder.body(Full::default()).unwrap()
}

/// Quotes, pays with development account 0, and answers the paid response's
/// status and body.
async fn pay_through(facilitator: impl Facilitator) -> (u16, Value) {
    let service = answering(&chat_layer(
        facilitator,
        Arc::new(FakeClock::at_unix_secs(NOW)),
    ));
    let quote = service.clone().oneshot(chat(None)).await.unwrap();
    let quote: PaymentRequired =
        codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
    let header = Payer::dev(0)
        .header_with_nonce(&quote.accepts[0], NOW, sequential_nonce(1))
        .unwrap();
    let response = service.oneshot(chat(Some(&header))).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn trusted_through_the_extra_ca_pem_it_verifies_and_settles() {
    let ledger = Arc::new(DevLedger::new());
    let server = https_facilitator(ledger.clone()).await;
    let tls = ClientTls::webpki_roots()
        .with_extra_ca_pem(server.ca_pem.as_bytes())
        .unwrap();
    let facilitator = client(&server, &tls);
    let supported = facilitator.supported().await.unwrap();
    assert!(!supported.kinds.is_empty());

    let (status, _) = pay_through(facilitator).await;
    assert_eq!(status, 200);
    assert_eq!(ledger.settlements(), 1);
}

#[tokio::test]
async fn trusted_through_an_extra_ca_file() {
    let server = https_facilitator(Arc::new(DevLedger::new())).await;
    let path = std::env::temp_dir().join(format!(
        "walletgate-tls-facilitator-{}-{}.pem",
        std::process::id(),
        server.address.port()
    ));
    std::fs::write(&path, &server.ca_pem).unwrap();
    let tls = ClientTls::without_builtin_roots().with_extra_ca_file(&path);
    std::fs::remove_file(&path).unwrap();
    let facilitator = client(&server, &tls.unwrap());
    assert!(facilitator.supported().await.is_ok());
}

#[tokio::test]
async fn an_untrusted_certificate_is_unreachable_with_a_clear_reason() {
    let ledger = Arc::new(DevLedger::new());
    let server = https_facilitator(ledger.clone()).await;
    // Mozilla's roots alone: no root issued the server's certificate.
    let error = client(&server, &ClientTls::webpki_roots())
        .supported()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    assert!(
        error
            .detail()
            .ends_with("client error (Connect): invalid peer certificate: UnknownIssuer"),
        "{}",
        error.detail()
    );
    // A different self-signed root with the same subject: the signature
    // does not verify.
    let (other_ca, _, _) = tls_support::loopback_certificate();
    let other = ClientTls::without_builtin_roots()
        .with_extra_ca_pem(other_ca.as_bytes())
        .unwrap();
    let error = client(&server, &other).supported().await.unwrap_err();
    assert_eq!(error.kind(), &FacilitatorErrorKind::Unavailable);
    assert!(
        error
            .detail()
            .contains("invalid peer certificate: BadSignature"),
        "{}",
        error.detail()
    );

    // Through the layer: 503, nothing settled, the client may retry.
    let (status, body) = pay_through(client(&server, &ClientTls::webpki_roots())).await;
    assert_eq!(status, 503);
    assert_eq!(body["code"], "PAYMENT_VERIFICATION_UNAVAILABLE");
    assert_eq!(ledger.settlements(), 0);
}

//! A loopback HTTPS server whose certificate is made for the test (rcgen,
//! self-signed for `127.0.0.1` and `localhost`): a client trusts it only
//! through an extra CA (`ClientTls::with_extra_ca_pem` / `_file`).
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::PrivateKeyDer;

/// A running HTTPS server; stops when dropped.
pub struct HttpsServer {
    /// Where it listens (`127.0.0.1:port`).
    pub address: SocketAddr,
    /// Its self-signed certificate, PEM: the root a client must trust.
    pub ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A certificate for `127.0.0.1` and `localhost`, and its PKCS#8 key.
pub fn loopback_certificate() -> (String, Vec<u8>, Vec<u8>) {
    let made =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    (
        made.cert.pem(),
        made.cert.der().to_vec(),
        made.signing_key.serialize_der(),
    )
}

/// Serves `app` over HTTPS (HTTP/1.1) on a free loopback port.
pub async fn serve_https(app: axum::Router) -> HttpsServer {
    let (ca_pem, cert_der, key_der) = loopback_certificate();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.into()], PrivateKeyDer::Pkcs8(key_der.into()))
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake.
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
                    .await;
            });
        }
    });
    HttpsServer {
        address,
        ca_pem,
        task,
    }
}

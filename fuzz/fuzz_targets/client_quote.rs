//! Arbitrary 402 answers through the paying client's quote handling.
//!
//! The input is split at its first NUL: the `PAYMENT-REQUIRED` value and the
//! JSON body. Each is tried through `parse_quote` directly, and the whole
//! answer through `X402PaymentLayer` (spend controls, signing, resend) over
//! an in-memory server that answers it once and 200 after. The client must
//! never panic, never wait, and never send more than one signed payment.
#![no_main]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tower_layer::Layer;
use tower_service::Service;
use walletgate::client::pay::{X402PaymentLayer, parse_quote};
use walletgate::client::payer::DEV_KEYS;
use walletgate::clock::FakeClock;
use walletgate_fuzz::{ready, split_once};

const NOW: u64 = 1_750_000_000;

/// Answers the fuzzed 402 first, 200 after; counts the payments it is sent.
#[derive(Clone)]
struct Server {
    quote: Arc<Mutex<Option<Response<Full<Bytes>>>>>,
    payments: Arc<AtomicU32>,
}

impl Service<Request<Full<Bytes>>> for Server {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> Self::Future {
        if request.headers().contains_key("payment-signature") {
            self.payments.fetch_add(1, Ordering::SeqCst);
        }
        let answer = self.quote.lock().unwrap().take();
        std::future::ready(Ok(answer.unwrap_or_else(|| Response::new(Full::default()))))
    }
}

fuzz_target!(|data: &[u8]| {
    let (header, body) = split_once(data, 0);
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_bytes(header) {
        headers.insert("payment-required", value);
    }
    let _ = parse_quote(&headers, body);
    let _ = parse_quote(&HeaderMap::new(), body);

    let mut quote = Response::builder()
        .status(402)
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap();
    *quote.headers_mut() = headers;
    let server = Server {
        quote: Arc::new(Mutex::new(Some(quote))),
        payments: Arc::default(),
    };
    let key: PrivateKeySigner = DEV_KEYS[1].parse().unwrap();
    let mut client = X402PaymentLayer::new(key)
        .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)))
        .layer(server.clone());
    let _ = ready(
        client.call(
            Request::post("http://gateway/v1/chat/completions")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap(),
        ),
    );
    assert!(server.payments.load(Ordering::SeqCst) <= 1);
});

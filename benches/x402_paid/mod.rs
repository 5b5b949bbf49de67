//! What the x402 benches share: the paid chat service, its offer, and a
//! poll for futures that never wait (everything is in memory).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use walletgate::x402::{
    facilitator::{DevLedger, LocalEvmFacilitator},
    server::{NonceStore, PaymentOption, PriceTable, X402Layer},
    wire::{PaymentRequirements, UsdAmount},
};

/// The fake clock's start, unix seconds.
pub(crate) const NOW: u64 = 1_750_000_000;
/// Who the offer pays.
pub(crate) const PAY_TO: &str = DevLedger::DEV_ACCOUNTS[9];

/// Polls `future` once; it must be ready (nothing in memory waits).
pub(crate) fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-memory payment flow waited"),
    }
}

/// What the benches serve paid requests through: the x402 layer over a
/// handler, cloned per request as a server does.
pub(crate) trait PaidService:
    tower::Service<
        Request<Full<Bytes>>,
        Response = Response<walletgate::x402::server::X402Body<Full<Bytes>>>,
        Error = Infallible,
        Future: Send,
    > + Clone
{
}

impl<S> PaidService for S where
    S: tower::Service<
            Request<Full<Bytes>>,
            Response = Response<walletgate::x402::server::X402Body<Full<Bytes>>>,
            Error = Infallible,
            Future: Send,
        > + Clone
{
}

/// `POST /v1/chat/completions` at 0.002 USD over a handler that answers at once.
pub(crate) fn paid_chat(
    facilitator: LocalEvmFacilitator,
    clock: walletgate::clock::SharedClock,
    nonce_store: Arc<dyn NonceStore>,
) -> impl PaidService {
    paid_chat_with(facilitator, clock, nonce_store, |builder| builder)
}

/// [`paid_chat`], its layer's builder given to `configure` last.
pub(crate) fn paid_chat_with(
    facilitator: LocalEvmFacilitator,
    clock: walletgate::clock::SharedClock,
    nonce_store: Arc<dyn NonceStore>,
    configure: impl FnOnce(
        walletgate::x402::server::X402LayerBuilder,
    ) -> walletgate::x402::server::X402LayerBuilder,
) -> impl PaidService {
    let builder = X402Layer::builder()
        .with_host_derived_resource_url()
        .with_payment_option(PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
        .with_pricing(
            PriceTable::by_route()
                .with_usd("POST /v1/chat/completions", "0.002")
                .unwrap(),
        )
        .with_facilitator(facilitator)
        .with_clock(clock)
        .with_nonce_store(nonce_store);
    let layer = configure(builder).build().unwrap();
    tower::ServiceBuilder::new()
        .layer(layer)
        .service(tower::service_fn(|_request: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"answer"))))
        }))
}

/// The offer the payer signs (what the paid chat quotes).
pub(crate) fn offer() -> PaymentRequirements {
    PaymentOption::base_sepolia_usdc(PAY_TO)
        .unwrap()
        .requirements(UsdAmount::from_micros(3000))
        .unwrap()
}

//! Fixtures shared by the x402 integration tests: the paid route, its price
//! and payee, and a layer over a handler that answers at once. (The payer
//! is the library's: `walletgate::client::payer::Payer`.)
#![allow(dead_code, unreachable_pub)]

/// The paid route of the tests.
pub const CHAT: &str = "/v1/chat/completions";
/// The payee: development account 9.
pub const PAY_TO: &str = walletgate::x402::facilitator::DevLedger::DEV_ACCOUNTS[9];
/// The route's price, 0.002 USD, plus the 0.001 USD fee, in USDC units.
pub const QUOTED_UNITS: u128 = 3000;

/// `POST /v1/chat/completions` at 0.002 USD, paid in Base Sepolia USDC to [`PAY_TO`].
pub fn chat_layer(
    facilitator: impl walletgate::x402::facilitator::Facilitator,
    clock: walletgate::clock::SharedClock,
) -> walletgate::x402::server::X402Layer {
    chat_layer_builder(facilitator, clock).build().unwrap()
}

/// [`chat_layer`]'s configuration, to add to before building.
pub fn chat_layer_builder(
    facilitator: impl walletgate::x402::facilitator::Facilitator,
    clock: walletgate::clock::SharedClock,
) -> walletgate::x402::server::X402LayerBuilder {
    walletgate::x402::server::X402Layer::builder()
        .with_host_derived_resource_url()
        .with_payment_option(
            walletgate::x402::server::PaymentOption::base_sepolia_usdc(PAY_TO).unwrap(),
        )
        .with_pricing(
            walletgate::x402::server::PriceTable::by_route()
                .with_usd(format!("POST {CHAT}"), "0.002")
                .unwrap(),
        )
        .with_facilitator(facilitator)
        .with_clock(clock)
}

/// A `POST` of the paid route, with `payment` as its `PAYMENT-SIGNATURE`.
pub fn chat_request(payment: Option<&str>) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut request = http::Request::post(CHAT);
    if let Some(payment) = payment {
        request = request.header("payment-signature", payment);
    }
    request.body(http_body_util::Full::default()).unwrap()
}

/// A handler that answers 200 at once.
pub type Answering = tower::util::BoxCloneService<
    http::Request<http_body_util::Full<bytes::Bytes>>,
    http::Response<http_body_util::Full<bytes::Bytes>>,
    std::convert::Infallible,
>;

/// `layer` over a handler that answers 200 `answer` at once.
pub fn answering(
    layer: &walletgate::x402::server::X402Layer,
) -> walletgate::x402::server::X402<Answering> {
    let inner = tower::service_fn(
        |_request: http::Request<http_body_util::Full<bytes::Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"answer"),
            )))
        },
    );
    tower::Layer::layer(layer, tower::util::BoxCloneService::new(inner))
}

//! The Solana variant over real TCP, against a small scripted x402
//! facilitator on loopback: quotes with `extra.feePayer`, verification and
//! settlement through `HttpFacilitator`, `PAYMENT_BLOCKHASH_STALE` and
//! `PAYMENT_VERIFICATION_UNAVAILABLE`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use base64::Engine;
use bytes::Bytes;
use http::StatusCode;
use serde_json::json;
use walletgate::envelope::ErrorCode;
use walletgate::tls::ClientTls;
use walletgate::x402::{
    facilitator::{FacilitatorRequest, HttpFacilitator, SOLANA_MAINNET, SOLANA_USDC_MINT},
    wire::{AtomicAmount, Network, PaymentPayload, PaymentRequirements, SettleResponse, codec},
};

use crate::config::{Config, PaymentNetwork};
use crate::payment_network::SolanaSettings;
use crate::payment_tests::assert_payment_rejection;
use crate::request::Endpoint;
use crate::tests::{ENDPOINTS, Server, body, path, serve};

const PAY_TO: &str = "GatewayPayToWa11et1111111111111111111111111";
const FEE_PAYER: &str = "FacFeePayer111111111111111111111111111111111";
const PAYER: &str = "SoLPayer11111111111111111111111111111111111";
const MODEL: &str = "openai/gpt-5-mini";

/// What the scripted facilitator saw and did.
#[derive(Default)]
struct Facilitated {
    verified: Vec<FacilitatorRequest>,
    settled: Vec<AtomicAmount>,
    /// `tx:flaky` payments answered 500 so far.
    flaky_failures: AtomicU32,
}

type Shared = Arc<Mutex<Facilitated>>;

/// The opaque "transaction" of a test payment: its script name, base64.
fn transaction(name: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("tx:{name}"))
}

fn script_of(request: &FacilitatorRequest) -> String {
    let encoded = request.payment_payload().payload["transaction"]
        .as_str()
        .unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .trim_start_matches("tx:")
        .to_owned()
}

/// `POST /verify`: `tx:stale` has an expired blockhash, `tx:flaky` fails
/// once with a 500, anything else is valid.
async fn verify(State(state): State<Shared>, body: Bytes) -> (StatusCode, String) {
    let request: FacilitatorRequest = serde_json::from_slice(&body).unwrap();
    let script = script_of(&request);
    let mut state = state.lock().unwrap();
    if script == "flaky" && state.flaky_failures.fetch_add(1, Ordering::SeqCst) == 0 {
        return (StatusCode::INTERNAL_SERVER_ERROR, "unexpected_error".into());
    }
    state.verified.push(request);
    let verdict = if script == "stale" {
        json!({"isValid": false, "invalidReason": "invalid_exact_svm_blockhash_not_found",
               "invalidMessage": "BlockhashNotFound", "payer": PAYER})
    } else {
        json!({"isValid": true, "payer": PAYER})
    };
    (StatusCode::OK, verdict.to_string())
}

async fn settle(State(state): State<Shared>, body: Bytes) -> String {
    let request: FacilitatorRequest = serde_json::from_slice(&body).unwrap();
    let amount = request.payment_requirements().amount;
    let mut state = state.lock().unwrap();
    state.settled.push(amount);
    let signature = format!("5oLanaSettlementSignature{}", state.settled.len());
    json!({"success": true, "transaction": signature, "network": SOLANA_MAINNET,
           "payer": PAYER, "amount": amount})
    .to_string()
}

async fn supported() -> String {
    json!({"kinds": [{"x402Version": 2, "scheme": "exact", "network": SOLANA_MAINNET,
                      "extra": {"feePayer": FEE_PAYER}}],
           "extensions": [], "signers": {"solana:*": [FEE_PAYER]}})
    .to_string()
}

async fn facilitator() -> (SocketAddr, Shared) {
    let state = Shared::default();
    let router = Router::new()
        .route("/facilitator/verify", post(verify))
        .route("/facilitator/settle", post(settle))
        .route("/facilitator/supported", get(supported))
        .with_state(state.clone());
    (serve(router).await, state)
}

/// The gateway in its Solana variant, its fee payer read from the facilitator.
async fn solana_gateway(facilitator_url: String) -> Server {
    let fee_payer = HttpFacilitator::new_with_tls(&facilitator_url, &ClientTls::default())
        .unwrap()
        .fee_payer(&Network::solana_mainnet())
        .await
        .ok();
    Server::start(Config {
        network: PaymentNetwork::Solana(SolanaSettings {
            facilitator_url,
            pay_to: PAY_TO.into(),
            fee_payer: fee_payer.or_else(|| Some(FEE_PAYER.into())),
        }),
        ..Config::default()
    })
    .await
}

/// A Solana payment of `offer` carrying the scripted `transaction`.
fn solana_payment(offer: &PaymentRequirements, script: &str) -> String {
    codec::encode(&PaymentPayload {
        x402_version: 2,
        resource: None,
        accepted: offer.clone(),
        payload: json!({"transaction": transaction(script)}),
        extensions: None,
    })
}

async fn quote_of(server: &Server, endpoint: Endpoint) -> (String, PaymentRequirements) {
    let request = body(endpoint, MODEL, "hello", false).to_string();
    let reply = server
        .post_once(path(endpoint), request.clone(), None)
        .await;
    assert_eq!(reply.status, 402, "{}", reply.text());
    (request, reply.quote().accepts[0].clone())
}

#[tokio::test]
async fn solana_quotes_carry_the_fee_payer_and_settle_through_the_facilitator() {
    let (address, state) = facilitator().await;
    let server = solana_gateway(format!("http://{address}/facilitator")).await;
    let evm = Server::start(Config::default()).await;
    for endpoint in ENDPOINTS {
        let (request, offer) = quote_of(&server, endpoint).await;
        assert_eq!(offer.network.as_str(), SOLANA_MAINNET);
        assert_eq!(offer.asset, SOLANA_USDC_MINT);
        assert_eq!(offer.pay_to, PAY_TO);
        assert_eq!(
            offer.extra_str("feePayer"),
            Some(FEE_PAYER),
            "from /supported"
        );
        // The same request costs the same in Solana USDC as in Base USDC.
        let (_, evm_offer) = quote_of(&evm, endpoint).await;
        assert_eq!(offer.amount, evm_offer.amount);

        let paid = server
            .post_once(
                path(endpoint),
                request.clone(),
                Some(&solana_payment(&offer, path(endpoint))),
            )
            .await;
        assert_eq!(paid.status, 200, "{}", paid.text());
        let receipt: SettleResponse =
            codec::decode(paid.header("payment-response").unwrap().as_bytes()).unwrap();
        assert!(receipt.success);
        assert!(receipt.transaction.starts_with("5oLanaSettlementSignature"));
        assert_eq!(receipt.payer.as_deref(), Some(PAYER));
        // The facilitator was asked with the server's own offer, and settled exactly it.
        {
            let state = state.lock().unwrap();
            assert_eq!(
                state.verified.last().unwrap().payment_requirements(),
                &offer
            );
            assert_eq!(state.settled.last(), Some(&offer.amount));
        }
        // One transaction, one charge: sent again, it is a replay.
        let replay = server
            .post_once(
                path(endpoint),
                request,
                Some(&solana_payment(&offer, path(endpoint))),
            )
            .await;
        assert_eq!(replay.status, 402, "{}", replay.text());
    }
    assert_eq!(state.lock().unwrap().settled.len(), 3);
}

#[tokio::test]
async fn a_stale_blockhash_is_refused_as_verification_failed_and_nothing_settles() {
    let (address, state) = facilitator().await;
    let server = solana_gateway(format!("http://{address}/facilitator")).await;
    for endpoint in ENDPOINTS {
        let (request, offer) = quote_of(&server, endpoint).await;
        let reply = server
            .post_once(
                path(endpoint),
                request,
                Some(&solana_payment(&offer, "stale")),
            )
            .await;
        let code = ErrorCode::PaymentBlockhashStale;
        assert_payment_rejection(endpoint, &reply, code);
        assert!(
            reply.header("payment-required").is_some(),
            "a fresh quote to re-sign"
        );
        let body = reply.json();
        match endpoint {
            // The JS SDK re-signs only when the body also says verification failed.
            Endpoint::Chat => {
                assert_eq!(body["code"], code.as_str());
                assert_eq!(body["error"], "Payment verification failed");
                assert_eq!(body["payer"], PAYER);
            }
            Endpoint::Messages => assert_eq!(body["error"]["type"], "payment_required"),
            Endpoint::Responses => assert_eq!(body["error"]["code"], code.as_str()),
        }
    }
    assert!(state.lock().unwrap().settled.is_empty());
}

#[tokio::test]
async fn an_unavailable_facilitator_is_a_503_and_the_same_payment_goes_through_later() {
    let (address, state) = facilitator().await;
    let server = solana_gateway(format!("http://{address}/facilitator")).await;
    let (request, offer) = quote_of(&server, Endpoint::Chat).await;
    let payment = solana_payment(&offer, "flaky");
    let failed = server
        .post_once("/v1/chat/completions", request.clone(), Some(&payment))
        .await;
    let code = ErrorCode::PaymentVerificationUnavailable;
    assert_payment_rejection(Endpoint::Chat, &failed, code);
    assert_eq!(failed.header("retry-after"), Some("5"));
    assert_eq!(failed.json()["error"], "Payment verification unavailable");
    assert!(state.lock().unwrap().settled.is_empty());
    // Nothing was consumed: the very same payment succeeds once the facilitator answers.
    let retried = server
        .post_once("/v1/chat/completions", request, Some(&payment))
        .await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(state.lock().unwrap().settled, vec![offer.amount]);

    // A facilitator nobody answers for: every endpoint says so, in its envelope.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let unreachable = solana_gateway(format!("http://{closed}/facilitator")).await;
    for endpoint in ENDPOINTS {
        let (request, offer) = quote_of(&unreachable, endpoint).await;
        assert_eq!(offer.extra_str("feePayer"), Some(FEE_PAYER));
        let reply = unreachable
            .post_once(
                path(endpoint),
                request,
                Some(&solana_payment(&offer, "good")),
            )
            .await;
        assert_payment_rejection(endpoint, &reply, code);
        assert_eq!(reply.header("retry-after"), Some("5"));
    }
}

#[tokio::test]
async fn the_fee_payer_is_read_from_supported_for_its_network_only() {
    let (address, _state) = facilitator().await;
    let facilitator = HttpFacilitator::new(&format!("http://{address}/facilitator")).unwrap();
    let solana = facilitator.fee_payer(&Network::solana_mainnet()).await;
    assert_eq!(solana.unwrap(), FEE_PAYER);
    let evm = facilitator.fee_payer(&Network::base_sepolia()).await;
    let error = evm.unwrap_err();
    assert_eq!(
        error.kind(),
        &walletgate::x402::facilitator::FacilitatorErrorKind::Protocol
    );
    assert!(
        error.detail().contains("no feePayer for eip155:84532"),
        "{error:?}"
    );
}

//! Interop of walletgate's paying side with the official x402 v2 servers:
//! `@x402/express` 2.27 (`tests/interop/x402-express-server`) and the Python
//! `x402` 2.25 Flask middleware (`tests/interop/x402-python-server`), each
//! started on loopback with an in-process facilitator of the standard exact-EVM
//! checks (EIP-712 recovery, payTo, value, time window, nonce not reused).
//!
//! Two drivers pay each server over hyper-util's client:
//! - the paying client, [`X402PaymentLayer`]: each request paid once with a
//!   fresh authorization, the receipt in the response, the spend controls
//!   refusing before anything is signed, and an official refusal after the
//!   payment classified without a second signature;
//! - the lower-level [`Payer`]: the quote decoded with walletgate's codec, one
//!   payment settled, and the same payment replayed, an expired one and a
//!   mis-signed one refused by the servers.
//!
//! Both check the 200, the `PAYMENT-RESPONSE` receipt and the server's own
//! list of settlements (`GET /settlements`). With feature `reqwest`, the
//! reqwest-middleware adapter pays both servers too.
//!
//! Needs Node.js with `npm ci --prefix tests/interop/x402-express-server`, and
//! `tests/interop/x402-python-server/.venv` with its `requirements.txt`
//! (`.ci/run` installs both). Missing ones fail the tests, with that command.
#![cfg(feature = "client")]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tower::{Layer, ServiceExt};
use walletgate::client::pay::{
    ClientError, PaymentError, PaymentErrorKind, Receipt, Refusal, SpendPolicy, X402PaymentLayer,
};
use walletgate::client::payer::Payer;
use walletgate::client::payer::{DEV_KEYS, sequential_nonce};
use walletgate::clock::{Clock, FakeClock, SystemClock};
use walletgate::envelope::ErrorCode;
use walletgate::x402::{
    facilitator::DevLedger,
    wire::{
        ExactEvmDomain, ExactEvmPayload, PaymentPayload, PaymentRequired, PaymentRequirements,
        SettleResponse, TokenId, codec,
    },
};

/// Where the servers are paid: development account 9.
const PAY_TO: &str = DevLedger::DEV_ACCOUNTS[9];
/// `$0.001` in USDC's atomic units (6 decimals), as both servers price `POST /paid`.
const PRICE_UNITS: u128 = 1000;
const BASE_SEPOLIA: &str = "eip155:84532";
const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
/// How long a server may take to print its port (Python imports web3 first).
const STARTUP: Duration = Duration::from_secs(90);
/// The bound on one request: no test waits on a hung server.
const REQUEST: Duration = Duration::from_secs(30);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// An official x402 server implementation this test drives.
#[derive(Clone, Copy, Debug)]
enum Official {
    /// `@x402/express` on Node.js.
    Express,
    /// PyPI `x402`, Flask middleware.
    Python,
}

impl Official {
    fn dir(self) -> PathBuf {
        let folder = match self {
            Self::Express => "x402-express-server",
            Self::Python => "x402-python-server",
        };
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/interop")
            .join(folder)
    }

    /// The command starting the server on a free port, or why it cannot start.
    fn command(self) -> Command {
        let dir = self.dir();
        let mut command = match self {
            Self::Express => {
                assert!(
                    dir.join("node_modules/@x402/express").is_dir()
                        && dir.join("node_modules/@x402/evm").is_dir(),
                    "the official x402 Express server is not installed: run \
                     `npm ci --prefix tests/interop/x402-express-server` (Node.js 20+) first"
                );
                let mut command = Command::new("node");
                command.arg("server.mjs");
                command
            }
            Self::Python => {
                let python = dir.join(".venv/bin/python");
                assert!(
                    python.is_file(),
                    "the official x402 Python server is not installed: run \
                     `python3 -m venv tests/interop/x402-python-server/.venv && \
                     tests/interop/x402-python-server/.venv/bin/pip install -r \
                     tests/interop/x402-python-server/requirements.txt` first"
                );
                let mut command = Command::new(python);
                command.arg("server.py");
                command
            }
        };
        command
            .arg("0")
            .arg(PAY_TO)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }
}

/// A running official server; killed when dropped.
struct Server {
    kind: Official,
    base: String,
    /// Everything the server wrote on stderr (its facilitator's decisions).
    log: Arc<Mutex<String>>,
    _child: Child,
}

impl Server {
    async fn start(kind: Official) -> Self {
        let mut child = kind.command().spawn().unwrap_or_else(|error| {
            panic!("cannot start the {kind:?} server ({error}); the Express one needs `node` (20+) on PATH")
        });
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().expect("piped stderr");
        let sink = log.clone();
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            while let Ok(read @ 1..) = stderr.read(&mut chunk).await {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..read]));
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut first = String::new();
        let read = tokio::time::timeout(STARTUP, stdout.read_line(&mut first)).await;
        let port: u16 = match read {
            Ok(Ok(_)) => first.trim().parse().unwrap_or_else(|_| {
                panic!(
                    "the {kind:?} server's first line is not a port: {first:?}\n{}",
                    log.lock().unwrap()
                )
            }),
            Ok(Err(error)) => panic!("reading the {kind:?} server's port: {error}"),
            Err(_) => panic!(
                "the {kind:?} server printed no port within {STARTUP:?}\n{}",
                log.lock().unwrap()
            ),
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move {
            let mut rest = Vec::new();
            let _ = stdout.read_to_end(&mut rest).await;
        });
        Self {
            kind,
            base: format!("http://127.0.0.1:{port}"),
            log,
            _child: child,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// `POST /paid` with a JSON body and, if given, `PAYMENT-SIGNATURE`.
    async fn post_paid(
        &self,
        client: &HttpClient,
        body: &Value,
        payment: Option<&str>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}/paid", self.base))
            .header("content-type", "application/json")
            .header("accept", "application/json");
        if let Some(payment) = payment {
            request = request.header("PAYMENT-SIGNATURE", payment);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        self.send(client, request).await
    }

    /// `POST /paid` with a JSON body through the paying client `layer`.
    async fn pay_through(
        &self,
        layer: &X402PaymentLayer,
        body: &Value,
    ) -> Result<(StatusCode, Receipt, Value), ClientError> {
        let request = Request::post(format!("{}/paid", self.base))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let paying = layer.layer(client());
        let response = tokio::time::timeout(REQUEST, paying.oneshot(request))
            .await
            .unwrap_or_else(|_| panic!("the {:?} server did not answer in time", self.kind))?;
        let status = response.status();
        let receipt = response
            .extensions()
            .get::<Receipt>()
            .cloned()
            .unwrap_or_else(|| panic!("a paid {:?} answer carries no Receipt", self.kind));
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a readable body")
            .to_bytes();
        let answer = serde_json::from_slice(&body).expect("a JSON answer");
        Ok((status, receipt, answer))
    }

    /// What the server's facilitator settled (`GET /settlements`).
    async fn settlements(&self, client: &HttpClient) -> Vec<Value> {
        let request = Request::get(format!("{}/settlements", self.base))
            .body(Full::default())
            .unwrap();
        let (status, _, body) = self.send(client, request).await;
        assert_eq!(status, StatusCode::OK, "{:?} GET /settlements", self.kind);
        serde_json::from_slice(&body).expect("a JSON list of settlements")
    }

    async fn send(
        &self,
        client: &HttpClient,
        request: Request<Full<Bytes>>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let response = tokio::time::timeout(REQUEST, client.request(request))
            .await
            .unwrap_or_else(|_| panic!("the {:?} server did not answer in time", self.kind))
            .unwrap_or_else(|error| panic!("request to the {:?} server: {error}", self.kind));
        let (parts, body) = response.into_parts();
        let body = tokio::time::timeout(REQUEST, body.collect())
            .await
            .expect("the body within the bound")
            .expect("a readable body")
            .to_bytes();
        (parts.status, parts.headers, body)
    }

    /// Gets the route's 402 and decodes its quote with walletgate's codec.
    async fn quote(&self, client: &HttpClient) -> PaymentRequired {
        let (status, headers, _) = self.post_paid(client, &json!({"ask": "price"}), None).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{:?}", self.kind);
        let header = headers
            .get("payment-required")
            .unwrap_or_else(|| panic!("the {:?} 402 has no PAYMENT-REQUIRED", self.kind));
        codec::decode(header.as_bytes()).unwrap_or_else(|error| {
            panic!(
                "walletgate's codec cannot decode the {:?} quote: {error}",
                self.kind
            )
        })
    }

    /// Pays `POST /paid` with `payment` and expects a refusal: a 402 with a
    /// fresh quote (decoded with walletgate's codec) and no receipt. Returns
    /// the quote's `error`: the facilitator's reason.
    async fn refusal_of(&self, client: &HttpClient, payment: &PaymentPayload) -> String {
        let ask = json!({"question": "refused?"});
        let (status, headers, body) = self
            .post_paid(client, &ask, Some(&codec::encode(payment)))
            .await;
        assert_eq!(
            status,
            StatusCode::PAYMENT_REQUIRED,
            "{:?} accepted a bad payment: {}\n{}",
            self.kind,
            String::from_utf8_lossy(&body),
            self.log()
        );
        assert!(headers.get("payment-response").is_none(), "{:?}", self.kind);
        let quote: PaymentRequired = codec::decode(
            headers
                .get("payment-required")
                .expect("a refusal carries a fresh quote")
                .as_bytes(),
        )
        .expect("walletgate's codec decodes the refusal's quote");
        quote.error.unwrap_or_default()
    }
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn now() -> u64 {
    SystemClock.now_unix_secs()
}

/// The offer both servers make for `POST /paid` (their quotes also carry
/// optional members: the resource's `serviceName` and `tags`).
fn assert_offer(kind: Official, quote: &PaymentRequired) -> PaymentRequirements {
    assert_eq!(quote.x402_version, 2, "{kind:?}");
    assert!(
        quote.resource.url.ends_with("/paid"),
        "{kind:?}: {:?}",
        quote.resource
    );
    // The Express route also declares a Bazaar extension, which walletgate
    // keeps as it came (a payment need not echo it).
    if let Official::Express = kind {
        let extensions = quote.extensions.as_ref();
        assert!(
            extensions.is_some_and(|declared| declared.contains_key("bazaar")),
            "{kind:?}: {extensions:?}"
        );
    }
    let offer = quote.accepts.first().expect("one offer").clone();
    assert_eq!(offer.scheme, "exact", "{kind:?}");
    assert_eq!(offer.network.as_str(), BASE_SEPOLIA, "{kind:?}");
    assert_eq!(offer.amount.units(), PRICE_UNITS, "{kind:?}");
    assert!(
        offer.asset.eq_ignore_ascii_case(BASE_SEPOLIA_USDC),
        "{kind:?}: {}",
        offer.asset
    );
    assert!(
        offer.pay_to.eq_ignore_ascii_case(PAY_TO),
        "{kind:?}: {}",
        offer.pay_to
    );
    assert_eq!(offer.extra_str("name"), Some("USDC"), "{kind:?}");
    assert_eq!(offer.extra_str("version"), Some("2"), "{kind:?}");
    offer
}

/// A paying client over a development key (public, worthless: tests only).
fn paying_layer(account: usize) -> X402PaymentLayer {
    let key: PrivateKeySigner = DEV_KEYS[account].parse().expect("a development key");
    X402PaymentLayer::new(key)
}

/// The payment error of a refused request, or a panic naming what came instead.
fn payment_error(
    kind: Official,
    outcome: Result<(StatusCode, Receipt, Value), ClientError>,
) -> PaymentError {
    match outcome {
        Err(ClientError::Payment(error)) => error,
        Err(other) => panic!("{kind:?}: not a payment error: {other}"),
        Ok((status, receipt, body)) => panic!("{kind:?}: paid ({status}, {receipt:?}): {body}"),
    }
}

async fn the_layer_pays_each_request_once(kind: Official) {
    let server = Server::start(kind).await;
    let layer = paying_layer(2);
    let address = layer.signer().address().to_owned();
    let client = client();

    let mut transactions = Vec::new();
    for (round, question) in ["first", "second"].into_iter().enumerate() {
        let ask = json!({"question": question});
        let (status, receipt, answer) = server
            .pay_through(&layer, &ask)
            .await
            .unwrap_or_else(|error| panic!("{kind:?} {question}: {error}\n{}", server.log()));
        assert_eq!(status, StatusCode::OK, "{kind:?}");
        assert_eq!(answer, json!({"paid": true, "echo": ask}), "{kind:?}");
        assert_eq!(receipt.amount().units(), PRICE_UNITS, "{kind:?}");
        assert_eq!(receipt.network().as_str(), BASE_SEPOLIA, "{kind:?}");
        let settlement = receipt
            .settlement()
            .unwrap_or_else(|| panic!("{kind:?}: the receipt has no settlement"));
        assert!(settlement.success, "{kind:?}: {settlement:?}");
        assert!(
            settlement
                .payer
                .as_deref()
                .is_some_and(|payer| payer.eq_ignore_ascii_case(&address)),
            "{kind:?}: {settlement:?}"
        );
        assert_eq!(layer.signer().signatures(), round as u64 + 1, "{kind:?}");
        transactions.push(receipt.transaction().expect("a transaction").to_owned());
    }

    // Two requests, two authorizations, each settled once.
    let settled = server.settlements(&client).await;
    assert_eq!(settled.len(), 2, "{kind:?}: {settled:?}");
    for (settlement, transaction) in settled.iter().zip(&transactions) {
        assert_eq!(settlement["payer"], address, "{kind:?}");
        assert_eq!(settlement["amount"], PRICE_UNITS.to_string(), "{kind:?}");
        assert_eq!(settlement["transaction"], transaction.as_str(), "{kind:?}");
    }
    assert_ne!(settled[0]["nonce"], settled[1]["nonce"], "{kind:?}");
}

async fn the_layer_refuses_before_signing_and_never_pays_twice(kind: Official) {
    let server = Server::start(kind).await;
    let client = client();
    let ask = json!({"question": "how much?"});

    // Over the cap per payment: refused with nothing signed.
    let capped = paying_layer(3).with_policy(
        SpendPolicy::new()
            .with_max_per_payment_usd("0.0005")
            .unwrap(),
    );
    let error = payment_error(kind, server.pay_through(&capped, &ask).await);
    assert!(
        matches!(
            error.kind,
            PaymentErrorKind::Policy(Refusal::OverCap {
                asked_micros: 1000,
                max_micros: 500
            })
        ),
        "{kind:?}: {error}"
    );
    assert_eq!(
        (error.attempts.requests, error.attempts.signatures),
        (1, 0),
        "{kind:?}"
    );
    assert_eq!(capped.signer().signatures(), 0, "{kind:?}");

    // A budget for one payment and a half: the second is refused unsigned.
    let budgeted =
        paying_layer(4).with_policy(SpendPolicy::new().with_budget_usd("0.0015").unwrap());
    server
        .pay_through(&budgeted, &ask)
        .await
        .unwrap_or_else(|error| panic!("{kind:?}: {error}\n{}", server.log()));
    let error = payment_error(kind, server.pay_through(&budgeted, &ask).await);
    assert!(
        matches!(
            error.kind,
            PaymentErrorKind::Policy(Refusal::OverBudget {
                asked_micros: 1000,
                left_micros: 500
            })
        ),
        "{kind:?}: {error}"
    );
    assert_eq!(budgeted.signer().signatures(), 1, "{kind:?}");

    // A clock an hour slow signs an authorization that expired long ago: the
    // server's facilitator refuses it with its own reason, which the client
    // classifies ("check balance (and the clock)") without signing again.
    let slow = paying_layer(5).with_clock(Arc::new(FakeClock::at_unix_secs(now() - 3600)));
    let error = payment_error(kind, server.pay_through(&slow, &ask).await);
    assert!(
        matches!(
            error.kind,
            PaymentErrorKind::Refused(ErrorCode::PaymentUnfunded)
        ),
        "{kind:?}: {error}\n{}",
        server.log()
    );
    assert_eq!(error.status, Some(StatusCode::PAYMENT_REQUIRED), "{kind:?}");
    assert_eq!(
        (error.attempts.requests, error.attempts.signatures),
        (2, 1),
        "{kind:?}"
    );
    assert_eq!(slow.signer().signatures(), 1, "{kind:?}");
    assert!(
        error.to_string().contains("check balance"),
        "{kind:?}: {error}"
    );

    // Only the budgeted layer's one payment was settled.
    let settled = server.settlements(&client).await;
    assert_eq!(settled.len(), 1, "{kind:?}: {settled:?}");
    assert_eq!(settled[0]["payer"], budgeted.signer().address(), "{kind:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_pays_the_official_express_server_once_per_request() {
    the_layer_pays_each_request_once(Official::Express).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_pays_the_official_python_server_once_per_request() {
    the_layer_pays_each_request_once(Official::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_the_official_express_server_the_layer_refuses_before_signing_and_never_pays_twice()
{
    the_layer_refuses_before_signing_and_never_pays_twice(Official::Express).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_the_official_python_server_the_layer_refuses_before_signing_and_never_pays_twice()
{
    the_layer_refuses_before_signing_and_never_pays_twice(Official::Python).await;
}

/// The reqwest-middleware adapter pays `server` once, as the layer does.
#[cfg(feature = "reqwest")]
async fn the_reqwest_adapter_pays(kind: Official) {
    use walletgate::client::pay::reqwest::{X402Middleware, reqwest_client};
    use walletgate::tls::ClientTls;

    let server = Server::start(kind).await;
    let layer = paying_layer(6);
    let address = layer.signer().address().to_owned();
    let http = reqwest_client(&ClientTls::webpki_roots()).expect("a reqwest client");
    let paying = reqwest_middleware::ClientBuilder::new(http)
        .with(X402Middleware::new(layer.clone()))
        .build();
    let ask = json!({"question": "through reqwest?"});
    let response = tokio::time::timeout(
        REQUEST,
        paying
            .post(format!("{}/paid", server.base))
            .header("content-type", "application/json")
            .body(ask.to_string())
            .send(),
    )
    .await
    .unwrap_or_else(|_| panic!("the {kind:?} server did not answer in time"))
    .unwrap_or_else(|error| panic!("{kind:?}: {error}\n{}", server.log()));
    assert_eq!(response.status(), StatusCode::OK, "{kind:?}");
    let receipt = X402Middleware::receipt(&response)
        .cloned()
        .unwrap_or_else(|| panic!("a paid {kind:?} answer carries no Receipt"));
    let body = response.bytes().await.expect("a readable body");
    let answer: Value = serde_json::from_slice(&body).expect("a JSON answer");
    assert_eq!(answer, json!({"paid": true, "echo": ask}), "{kind:?}");
    let settlement = receipt.settlement().expect("a settlement");
    assert!(settlement.success, "{kind:?}: {settlement:?}");
    assert_eq!(layer.signer().signatures(), 1, "{kind:?}");

    let settled = server.settlements(&client()).await;
    assert_eq!(settled.len(), 1, "{kind:?}: {settled:?}");
    assert_eq!(settled[0]["payer"], address, "{kind:?}");
    assert_eq!(
        settled[0]["transaction"],
        receipt.transaction().expect("a transaction"),
        "{kind:?}"
    );
}

#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reqwest_adapter_pays_the_official_express_server() {
    the_reqwest_adapter_pays(Official::Express).await;
}

#[cfg(feature = "reqwest")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reqwest_adapter_pays_the_official_python_server() {
    the_reqwest_adapter_pays(Official::Python).await;
}

async fn settles_a_payment_and_refuses_its_replay(kind: Official) {
    let server = Server::start(kind).await;
    let client = client();
    let quote = server.quote(&client).await;
    assert_offer(kind, &quote);

    let payer = Payer::dev(0);
    let payment = payer.pay_quote(&quote, now()).unwrap();
    assert_eq!(payment.resource.as_ref(), Some(&quote.resource));
    let header = codec::encode(&payment);
    let ask = json!({"question": "what is paid for?"});
    let (status, headers, body) = server.post_paid(&client, &ask, Some(&header)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{kind:?} refused the payment: {}\n{}",
        String::from_utf8_lossy(&body),
        server.log()
    );
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer, json!({"paid": true, "echo": ask}), "{kind:?}");

    let receipt: SettleResponse = codec::decode(
        headers
            .get("payment-response")
            .unwrap_or_else(|| panic!("the {kind:?} 200 has no PAYMENT-RESPONSE"))
            .as_bytes(),
    )
    .unwrap_or_else(|error| {
        panic!("walletgate's codec cannot decode the {kind:?} receipt: {error}")
    });
    assert!(receipt.success, "{kind:?}: {receipt:?}");
    assert!(
        receipt
            .payer
            .as_deref()
            .is_some_and(|who| who.eq_ignore_ascii_case(&payer.address())),
        "{kind:?}: {receipt:?}"
    );
    assert_eq!(receipt.network.as_str(), BASE_SEPOLIA, "{kind:?}");
    assert_eq!(receipt.transaction.len(), 66, "{kind:?}: {receipt:?}");
    assert_eq!(
        receipt.amount.map(|amount| amount.units()),
        Some(PRICE_UNITS),
        "{kind:?}"
    );

    let settled = server.settlements(&client).await;
    assert_eq!(settled.len(), 1, "{kind:?}: {settled:?}");
    let nonce = payment.exact_evm().unwrap().authorization.nonce;
    assert_eq!(settled[0]["payer"], payer.address(), "{kind:?}");
    assert_eq!(settled[0]["to"], PAY_TO, "{kind:?}");
    assert_eq!(settled[0]["amount"], PRICE_UNITS.to_string(), "{kind:?}");
    assert_eq!(settled[0]["nonce"], nonce, "{kind:?}");
    assert_eq!(settled[0]["transaction"], receipt.transaction, "{kind:?}");

    // The same PAYMENT-SIGNATURE again: its nonce is spent.
    let reason = server.refusal_of(&client, &payment).await;
    assert!(
        reason.contains("nonce_already_used"),
        "{kind:?} replay: {reason:?}\n{}",
        server.log()
    );
    assert_eq!(server.settlements(&client).await.len(), 1, "{kind:?}");
}

async fn refuses_an_expired_or_mis_signed_payment(kind: Official) {
    let server = Server::start(kind).await;
    let client = client();
    let quote = server.quote(&client).await;
    let offer = assert_offer(kind, &quote);
    let payer = Payer::dev(1);

    // Signed long enough ago that validBefore has passed.
    let stale = payer
        .pay_quote(&quote, now() - offer.max_timeout_seconds - 60)
        .unwrap();
    let reason = server.refusal_of(&client, &stale).await;
    assert!(
        reason.ends_with("authorization_valid_before"),
        "{kind:?} expired: {reason:?}\n{}",
        server.log()
    );

    // Signed under another token's EIP-712 domain (Base mainnet USDC's name).
    let authorization = payer.authorization(&offer, now(), sequential_nonce(7));
    let usdc = TokenId::base_sepolia_usdc();
    let other_domain = ExactEvmDomain::new("USD Coin", "2", usdc.chain_id, usdc.asset);
    let mut mis_signed: PaymentPayload = payer
        .sign_with_domain(&offer, authorization, &other_domain)
        .unwrap();
    mis_signed.resource = Some(quote.resource.clone());
    let evm: ExactEvmPayload = mis_signed.exact_evm().unwrap();
    assert_eq!(evm.authorization.from, payer.address());
    let reason = server.refusal_of(&client, &mis_signed).await;
    assert!(
        reason.ends_with("signature"),
        "{kind:?} mis-signed: {reason:?}\n{}",
        server.log()
    );

    assert!(server.settlements(&client).await.is_empty(), "{kind:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pays_the_official_express_server_and_its_replay_is_refused() {
    settles_a_payment_and_refuses_its_replay(Official::Express).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_express_server_refuses_an_expired_or_mis_signed_payment() {
    refuses_an_expired_or_mis_signed_payment(Official::Express).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pays_the_official_python_server_and_its_replay_is_refused() {
    settles_a_payment_and_refuses_its_replay(Official::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_server_refuses_an_expired_or_mis_signed_payment() {
    refuses_an_expired_or_mis_signed_payment(Official::Python).await;
}

//! What the layers' tracing says (feature `tracing`): a paid request, a free
//! request, a refused payment, a wallet-scoped request, a failing settlement
//! hook and a PAT exchange each leave the fields that tell what happened, and
//! none of the request's secrets.
//!
//! The output is captured by a `tracing-subscriber` fmt layer writing into a
//! shared buffer, on the test's own thread (`set_default`, current-thread
//! runtime), so tests running in parallel do not mix their lines.

mod gates_support;
mod x402_fixtures;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tower::{ServiceBuilder, ServiceExt, service_fn};
use tracing_subscriber::fmt::MakeWriter;
use walletgate::api_key::{ApiKeyId, ApiKeyLayer, ApiKeyRecord, InMemoryKeyStore};
use walletgate::client::payer::Payer;
use walletgate::client::payer::sequential_nonce;
use walletgate::clock::FakeClock;
use walletgate::envelope::ErrorCode;
use walletgate::free_tier::{FreeTierLimitLayer, FreeTierQuotas, InMemoryLimiter};
use walletgate::gateway::{JsonBodyLayer, ParsedJson, RequestModel};
use walletgate::wallet_jwt::{RequireScopesLayer, Scope, WalletJwtLayer};
use walletgate::x402::{
    facilitator::{DevLedger, LocalEvmFacilitator},
    server::{
        PaymentOption, Price, RequestPrice, SettledPayment, SettlementHookError, X402, X402Layer,
    },
    wire::{PaymentPayload, PaymentRequired, SettleResponse, codec},
};
use x402_fixtures::{Answering, CHAT, QUOTED_UNITS, answering, chat_layer_builder};

const NOW: u64 = 1_750_000_000;

/// The captured output: every line the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The lines that contain every one of `needles`.
    fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        let text = self.text();
        text.lines()
            .filter(|line| needles.iter().all(|needle| line.contains(needle)))
            .map(str::to_owned)
            .collect()
    }

    /// The one line that contains every one of `needles`.
    fn line_with(&self, needles: &[&str]) -> String {
        let mut lines = self.lines_with(needles);
        assert_eq!(
            lines.len(),
            1,
            "one line with {needles:?} in:\n{}",
            self.text()
        );
        lines.remove(0)
    }

    /// Fails when any of `secrets` appears anywhere in the output.
    fn assert_none_of(&self, secrets: &[&str]) {
        let text = self.text();
        assert!(!text.is_empty(), "nothing was traced");
        for secret in secrets {
            assert!(secret.len() >= 8, "a secret worth looking for: {secret:?}");
            assert!(
                !text.contains(secret),
                "a secret reached the log ({} chars):\n{text}",
                secret.len()
            );
        }
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

/// Captures everything (`TRACE`) traced on this thread until the guard drops.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

fn chat(payment: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::post(CHAT).header("host", "gateway.test");
    if let Some(payment) = payment {
        builder = builder.header("payment-signature", payment);
    }
    builder.body(Full::default()).unwrap()
}

/// The secrets inside a `PAYMENT-SIGNATURE` value: itself, the signature
/// (with and without `0x`) and the authorization's nonce.
fn payment_secrets(header: &str) -> Vec<String> {
    let payload: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
    let signature = payload.payload["signature"].as_str().unwrap().to_owned();
    let nonce = payload.payload["authorization"]["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let bare = signature.trim_start_matches("0x").to_owned();
    vec![header.to_owned(), signature, bare, nonce]
}

/// The paid chat route over the local verifier and ledger, its quote, and
/// development account 0's payment of it with nonce `nonce`.
struct Paid {
    service: X402<Answering>,
    quote: PaymentRequired,
    payer: Payer,
    header: String,
}

async fn paid(nonce: u64) -> Paid {
    paid_with(nonce, None).await
}

/// [`paid`], its settlements handed to `hook` when there is one.
async fn paid_with(nonce: u64, hook: Option<fn(SettledPayment) -> HookAnswer>) -> Paid {
    let clock = FakeClock::at_unix_secs(NOW);
    let ledger = Arc::new(DevLedger::new());
    let facilitator = LocalEvmFacilitator::new(ledger, Arc::new(clock.clone()));
    let mut builder = chat_layer_builder(facilitator, Arc::new(clock));
    if let Some(hook) = hook {
        builder = builder.on_settlement(hook);
    }
    let service = answering(&builder.build().unwrap());
    let quote = service.clone().oneshot(chat(None)).await.unwrap();
    assert_eq!(quote.status(), 402);
    let quote: PaymentRequired =
        codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
    let payer = Payer::dev(0);
    let header = payer
        .header_with_nonce(&quote.accepts[0], NOW, sequential_nonce(nonce))
        .unwrap();
    Paid {
        service,
        quote,
        payer,
        header,
    }
}

#[tokio::test]
async fn a_settled_payment_logs_payer_amount_network_and_transaction_at_info_and_no_signature() {
    let (captured, _guard) = capture();
    let Paid {
        service,
        quote,
        payer,
        header,
    } = paid(7).await;
    let response = service.oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(response.status(), 200);
    let settlement: SettleResponse =
        codec::decode(response.headers()["payment-response"].as_bytes()).unwrap();
    assert!(!settlement.transaction.is_empty());
    let _ = response.into_body().collect().await.unwrap();

    captured.line_with(&["outcome=\"quoted\"", "price=0.003"]);
    let settled = captured.line_with(&["outcome=\"settled\""]);
    assert!(
        settled.contains(" INFO "),
        "RUST_LOG=info shows it: {settled}"
    );
    for field in [
        format!("payer=\"{}\"", payer.address()),
        format!("amount={QUOTED_UNITS}"),
        format!("network={}", quote.accepts[0].network),
        format!("transaction=\"{}\"", settlement.transaction),
        format!("resource=\"http://gateway.test{CHAT}\""),
    ] {
        assert!(settled.contains(&field), "{field} in {settled}");
    }
    let secrets = payment_secrets(&header);
    captured.assert_none_of(&secrets.iter().map(String::as_str).collect::<Vec<_>>());
}

type HookAnswer = std::future::Ready<Result<(), SettlementHookError>>;

#[tokio::test]
async fn a_failing_settlement_hook_is_an_error_event_and_the_payment_stays_settled() {
    let (captured, _guard) = capture();
    let hook: fn(SettledPayment) -> HookAnswer =
        |_| std::future::ready(Err(SettlementHookError::new("accounting offline")));
    let Paid {
        service, header, ..
    } = paid_with(9, Some(hook)).await;
    let response = service.oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(response.status(), 200);

    captured.line_with(&["outcome=\"settled\""]);
    let failed = captured.line_with(&["settlement hook failed"]);
    assert!(failed.contains("ERROR"), "{failed}");
    assert!(failed.contains("accounting offline"), "{failed}");
    let secrets = payment_secrets(&header);
    captured.assert_none_of(&secrets.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_refused_payment_logs_its_error_code_and_payer_and_no_signature() {
    let (captured, _guard) = capture();
    let Paid {
        service,
        payer,
        header,
        ..
    } = paid(8).await;
    let first = service.clone().oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(first.status(), 200);

    // The same authorization again: refused as a replay, not charged twice.
    let replay = service.clone().oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(replay.status(), 402);
    // A signature that is not the payer's: refused before anything is spent.
    let mut forged: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
    forged.payload["signature"] = format!("0x{}1b", "ab".repeat(64)).into();
    forged.payload["authorization"]["nonce"] = format!("{:#066x}", 9).into();
    let forged = codec::encode(&forged);
    let refused = service.oneshot(chat(Some(&forged))).await.unwrap();
    assert_eq!(refused.status(), 402);

    let replayed = captured.line_with(&[
        "outcome=\"refused\"",
        &format!("error=\"{}\"", ErrorCode::PaymentReplay.as_str()),
    ]);
    assert!(
        replayed.contains(&format!("payer=\"{}\"", payer.address())),
        "{replayed}"
    );
    assert!(
        replayed.contains("authorization_already_settled"),
        "{replayed}"
    );
    captured.line_with(&[
        "outcome=\"refused\"",
        &format!("error=\"{}\"", ErrorCode::PaymentInvalid.as_str()),
    ]);
    let mut secrets = payment_secrets(&header);
    secrets.extend(payment_secrets(&forged));
    captured.assert_none_of(&secrets.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_free_request_logs_client_ip_model_and_remaining_then_its_refusal() {
    let (captured, _guard) = capture();
    let clock = FakeClock::at_unix_secs(NOW);
    let limiter =
        InMemoryLimiter::new_with_clock(FreeTierQuotas::new(1, 10).unwrap(), Arc::new(clock));
    let layer = FreeTierLimitLayer::new(|_: &Request<Full<Bytes>>| true).with_store(limiter);
    let service = ServiceBuilder::new().layer(layer).service(service_fn(
        |_request: Request<Full<Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
        },
    ));
    let request = || {
        let mut request = Request::post(CHAT)
            .header("cookie", "session=free-tier-cookie-value-42")
            .body(Full::default())
            .unwrap();
        let peer: SocketAddr = "203.0.113.7:50000".parse().unwrap();
        request.extensions_mut().insert(peer);
        // What a gateway's model step leaves for the layers after it.
        request
            .extensions_mut()
            .insert(RequestModel::new("nvidia/nemotron-super"));
        request
    };
    let admitted = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(admitted.status(), 200);
    let refused = service.oneshot(request()).await.unwrap();
    assert_eq!(refused.status(), 429);

    let admitted = captured.line_with(&["outcome=\"admitted\""]);
    for field in [
        "client_ip=203.0.113.7",
        "model=\"nvidia/nemotron-super\"",
        "remaining=0",
    ] {
        assert!(admitted.contains(field), "{field} in {admitted}");
    }
    let refused = captured.line_with(&["outcome=\"refused\""]);
    for field in [
        "client_ip=203.0.113.7",
        &format!("error=\"{}\"", ErrorCode::FreeTierRateLimited.as_str()),
    ] {
        assert!(refused.contains(field), "{field} in {refused}");
    }
    captured.assert_none_of(&["free-tier-cookie-value-42"]);
}

/// A free-tier store that cannot answer (Redis away) is a WARN naming the
/// code the client is answered, `RATE_LIMIT_UNAVAILABLE`, not an internal error.
#[tokio::test]
async fn a_free_tier_store_that_cannot_answer_is_a_warning_naming_the_503s_code() {
    struct Down;
    impl walletgate::free_tier::FreeTierStore for Down {
        fn check(
            &self,
            _key: walletgate::free_tier::ClientKey,
        ) -> walletgate::store::BoxFuture<
            'static,
            Result<walletgate::free_tier::Verdict, walletgate::store::StoreError>,
        > {
            Box::pin(std::future::ready(Err(walletgate::store::StoreError::new(
                "limiter store down",
            ))))
        }
    }
    let (captured, _guard) = capture();
    let layer = FreeTierLimitLayer::new(|_: &Request<Full<Bytes>>| true).with_store(Down);
    let service = ServiceBuilder::new().layer(layer).service(service_fn(
        |_request: Request<Full<Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
        },
    ));
    let mut request = Request::post(CHAT).body(Full::default()).unwrap();
    let peer: SocketAddr = "203.0.113.7:50000".parse().unwrap();
    request.extensions_mut().insert(peer);
    let refused = service.oneshot(request).await.unwrap();
    assert_eq!(refused.status(), 503);
    let line = captured.line_with(&["outcome=\"refused\""]);
    assert!(line.contains(" WARN "), "{line}");
    let code = format!("error=\"{}\"", ErrorCode::RateLimitUnavailable.as_str());
    assert!(line.contains(&code), "{line}");
}

/// The gateway's stack (body parse, a model step that takes the model out of
/// the parsed body and prices the request once, the free tier on that price,
/// x402 on that price): the free request's `free_tier` span names its model,
/// and a paid model is quoted without a free-tier decision.
#[tokio::test]
async fn a_free_request_on_the_gateway_stack_names_its_model_after_the_body_was_taken_apart() {
    use walletgate::free_tier::IsPricedFree;
    let (captured, _guard) = capture();
    let clock = FakeClock::at_unix_secs(NOW);
    let limiter =
        InMemoryLimiter::new_with_clock(FreeTierQuotas::default(), Arc::new(clock.clone()));
    let payment = X402Layer::builder()
        .with_host_derived_resource_url()
        .with_payment_option(PaymentOption::base_sepolia_usdc(x402_fixtures::PAY_TO).unwrap())
        .with_pricing(RequestPrice::pricing)
        .with_facilitator(LocalEvmFacilitator::new(
            Arc::new(DevLedger::new()),
            Arc::new(clock.clone()),
        ))
        .with_clock(Arc::new(clock))
        .build()
        .unwrap();
    // The gateway example's model step: the parsed body is consumed, and the
    // model and its one price are left in the extensions.
    let model_step = |mut request: Request<Full<Bytes>>| {
        let ParsedJson(mut body) = request.extensions_mut().remove::<ParsedJson>().unwrap();
        let model = body["model"].take();
        let model = model.as_str().unwrap();
        let price = if model.starts_with("nvidia/") {
            Price::Free
        } else {
            Price::usd("0.002").unwrap()
        };
        request.extensions_mut().insert(RequestPrice(price));
        request.extensions_mut().insert(RequestModel::new(model));
        request
    };
    let service = ServiceBuilder::new()
        .layer(JsonBodyLayer::new(1024))
        .map_request(model_step)
        .layer(FreeTierLimitLayer::new(IsPricedFree).with_store(limiter))
        .layer(payment)
        .service(service_fn(|_request: Request<Full<Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
        }));
    let request = |model: &str| {
        let body = serde_json::json!({"model": model, "messages": []}).to_string();
        let mut request = Request::post(CHAT)
            .header("host", "gateway.test")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let peer: SocketAddr = "203.0.113.8:50000".parse().unwrap();
        request.extensions_mut().insert(peer);
        request
    };
    let free = service
        .clone()
        .oneshot(request("nvidia/nemotron-super"))
        .await
        .unwrap();
    assert_eq!(free.status(), 200);
    let paid = service.oneshot(request("openai/gpt-5-mini")).await.unwrap();
    assert_eq!(paid.status(), 402);

    let admitted = captured.line_with(&["free_tier{"]);
    for field in [
        "model=\"nvidia/nemotron-super\"",
        "client_ip=203.0.113.8",
        "outcome=\"admitted\"",
        "remaining=29",
    ] {
        assert!(admitted.contains(field), "{field} in {admitted}");
    }
    captured.line_with(&["x402{", "outcome=\"quoted\""]);
}

#[tokio::test]
async fn a_wallet_scoped_request_logs_key_id_wallet_and_scopes_and_no_key_jwt_or_cookie() {
    use gates_support::{API_KEY, WALLET, bearer, claims, clock, echo, token, verifier};
    let (captured, _guard) = capture();
    let store = InMemoryKeyStore::new();
    store
        .insert(API_KEY, ApiKeyRecord::new(ApiKeyId::new("app-1").unwrap()))
        .unwrap();
    let clock = clock();
    let service = |scope: Scope| {
        ServiceBuilder::new()
            .layer(ApiKeyLayer::new(store.clone()))
            .layer(WalletJwtLayer::new(verifier(&clock)))
            .layer(RequireScopesLayer::new(scope).with_wallet_in_path_after("account"))
            .service(service_fn(echo))
    };
    let jwt = token(&claims());
    const COOKIE: &str = "wg_session=cookie-secret-0123456789";
    let request = || {
        Request::get(format!("/api/v2/account/{WALLET}/favorites"))
            .header("x-api-key", API_KEY)
            .header("authorization", bearer(&jwt))
            .header("cookie", COOKIE)
            .body(Full::default())
            .unwrap()
    };
    let allowed = service(Scope::ReadFavorites)
        .oneshot(request())
        .await
        .unwrap();
    assert_eq!(allowed.status(), 200);
    let refused = service(Scope::WriteWallets)
        .oneshot(request())
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);

    let admitted = captured.lines_with(&["api_key{", "key_id=app-1", "outcome=\"admitted\""]);
    assert_eq!(admitted.len(), 2, "{}", captured.text());
    let mut lines = captured.lines_with(&["wallet_jwt{", "outcome=\"authenticated\""]);
    assert_eq!(lines.len(), 2, "{}", captured.text());
    let allowed = captured.line_with(&["require_scopes{", "outcome=\"allowed\""]);
    let refused = captured.line_with(&["require_scopes{", "outcome=\"insufficient_scope\""]);
    lines.extend([allowed, refused.clone()]);
    for line in &lines {
        assert!(line.contains(&format!("wallet={WALLET}")), "{line}");
        assert!(line.contains("scopes=read:favorites"), "{line}");
    }
    assert!(refused.contains("required=write:wallets"), "{refused}");
    captured.assert_none_of(&[API_KEY, &jwt, "cookie-secret-0123456789", &bearer(&jwt)]);
    // No part of the JWT either: its signature segment alone is a secret.
    let signature = jwt.rsplit('.').next().unwrap();
    captured.assert_none_of(&[signature]);
}

#[tokio::test]
async fn a_token_exchange_logs_wallet_and_pat_id_and_neither_pat_nor_jwt() {
    use walletgate::tokens::{IssuerConfig, NewPat, SigningKeys, TokenIssuer};
    use walletgate::wallet_jwt::KeySet;
    let (captured, _guard) = capture();
    let keys = SigningKeys::generate(KeySet::new()).unwrap();
    let config = IssuerConfig::new("https://api.walletgate.test", "https://api.walletgate.test");
    let issuer = TokenIssuer::in_memory(config.unwrap(), keys)
        .with_clock(Arc::new(FakeClock::at_unix_secs(NOW)));
    let wallet = gates_support::WALLET.parse().unwrap();
    let new_pat = NewPat {
        label: "ci".into(),
        scopes: "read:favorites".parse().unwrap(),
        expires_in_days: Some(1),
    };
    let (record, secret) = issuer.create_pat(wallet, new_pat).await.unwrap();
    let token = issuer.exchange(secret.expose()).await.unwrap();
    let revoked = issuer.revoke_pat(wallet, &record.id).await.unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(issuer.exchange(secret.expose()).await.is_err());

    let exchanged = captured.line_with(&["token_exchange{", "outcome=\"exchanged\""]);
    for field in [
        format!("wallet={}", gates_support::WALLET),
        format!("pat_id=\"{}\"", record.id),
        "scopes=read:favorites".to_owned(),
    ] {
        assert!(exchanged.contains(&field), "{field} in {exchanged}");
    }
    captured.line_with(&["token_exchange{", "outcome=\"refused\""]);
    captured.assert_none_of(&[secret.expose(), &token.access_token]);
}

#[tokio::test]
async fn a_rendered_data_api_rejection_is_one_trace_event_naming_it_and_no_secret() {
    use gates_support::{API_KEY, bearer, claims, clock, echo, token, verifier};
    let (captured, _guard) = capture();
    let store = InMemoryKeyStore::new();
    store
        .insert(API_KEY, ApiKeyRecord::new(ApiKeyId::new("app-1").unwrap()))
        .unwrap();
    let clock = clock();
    let own = |_error| http::Response::new(Bytes::from_static(b"own"));
    let service = ServiceBuilder::new()
        .layer(ApiKeyLayer::new(store.clone()))
        .layer(WalletJwtLayer::new(verifier(&clock)).with_rejection(own))
        .layer(RequireScopesLayer::new(Scope::WriteWallets))
        .service(service_fn(echo));
    let wrong_key = "wrong-key-0123456789abcdef";
    let jwt = token(&claims());
    let tampered = bearer(&format!("{jwt}x"));
    let request = |key: &str, authorization: &str| {
        Request::get("/")
            .header("x-api-key", key)
            .header("authorization", authorization)
            .body(Full::default())
            .unwrap()
    };
    let refused = service.clone().oneshot(request(wrong_key, &bearer(&jwt)));
    assert_eq!(refused.await.unwrap().status(), 401);
    let refused = service.clone().oneshot(request(API_KEY, &tampered));
    assert_eq!(refused.await.unwrap().status(), 200, "the caller's closure");
    let refused = service.oneshot(request(API_KEY, &bearer(&jwt)));
    assert_eq!(refused.await.unwrap().status(), 403);

    for (rejection, kind, status) in [
        ("ApiKeyError", "unknown", 401),
        ("JwtError", "malformed", 401),
        ("RequireScopesRejection", "insufficient_scope", 403),
    ] {
        let line = captured.line_with(&[
            "TRACE",
            "walletgate::rejection",
            &format!("rejection=\"{rejection}\""),
        ]);
        assert!(line.contains(&format!("kind=\"{kind}\"")), "{line}");
        assert!(line.contains(&format!("status={status}")), "{line}");
    }
    captured.assert_none_of(&[wrong_key, API_KEY, &jwt, &tampered]);
}

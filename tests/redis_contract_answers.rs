//! The x402 answer store's contract, run against the in-memory default and
//! the Redis backend with the same assertions; a settlement whose answer
//! was lost resolved by a resend on another replica sharing one Redis; and
//! twenty copies of one payment under one payment identifier over two
//! replicas: one upstream call, one settlement, one answer for all.
//!
//! Redis: `WALLETGATE_TEST_REDIS_URL`, or a redis-server started for this
//! binary; every test takes its own key prefix.

mod redis_support;
mod x402_fixtures;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tower::ServiceExt;
use walletgate::clock::{FakeClock, SharedClock, SystemClock};
use walletgate::redis::{
    RedisAnswerStore, RedisConfig, RedisConnection, RedisLedger, RedisNonceStore,
};
use walletgate::store::BoxFuture;
use walletgate::x402::facilitator::{
    Facilitator, FacilitatorError, FacilitatorRequest, LocalEvmFacilitator,
};
use walletgate::x402::server::{AnswerStore, Begun, InMemoryAnswerStore, KeptAnswer};
use walletgate::x402::wire::{
    PaymentRequired, SettleResponse, SupportedResponse, VerifyResponse, codec,
};

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An answer store, its clock, and how to let `secs` pass for it.
struct Answers {
    store: Arc<dyn AnswerStore>,
    clock: SharedClock,
    pass: Box<dyn Fn(u64) -> Wait>,
}

fn in_memory_answers() -> Answers {
    let clock = FakeClock::at_unix_secs(1_750_000_000);
    let advanced = clock.clone();
    Answers {
        store: Arc::new(InMemoryAnswerStore::new(Arc::new(clock.clone()))),
        clock: Arc::new(clock),
        pass: Box::new(move |secs| {
            advanced.advance(Duration::from_secs(secs));
            Box::pin(async {})
        }),
    }
}

/// The shared Redis of this run: a Redis Cluster when
/// `WALLETGATE_TEST_REDIS_TOPOLOGY=cluster`, else one redis-server.
fn shared_config() -> RedisConfig {
    if redis_support::on_cluster() {
        RedisConfig::cluster(redis_support::shared_cluster_seeds())
    } else {
        RedisConfig::new(redis_support::shared_url())
    }
}

fn connection(test: &str) -> RedisConnection {
    let config = shared_config()
        .with_prefix(redis_support::unique_prefix(test))
        .with_timeout(Duration::from_secs(2));
    RedisConnection::open(&config).unwrap()
}

/// Redis expires on its own clock: time passes for real.
fn redis_answers(test: &str) -> Answers {
    let clock: SharedClock = Arc::new(SystemClock);
    Answers {
        store: Arc::new(RedisAnswerStore::new(connection(test), clock.clone())),
        clock,
        pass: Box::new(|secs| {
            Box::pin(tokio::time::sleep(Duration::from_millis(secs * 1000 + 200)))
        }),
    }
}

fn answer(body: &'static [u8]) -> KeptAnswer {
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    KeptAnswer::new(200, "fingerprint/payer", Bytes::from_static(body))
        .with_headers(&headers)
        .with_payment_response("eyJzdWNjZXNzIjp0cnVlfQ")
}

async fn a_marker_then_an_answer_is_what_later_lookups_find(answers: Answers) {
    let now = answers.clock.now_unix_secs();
    let store = &answers.store;
    assert_eq!(
        store.begin("k", "first", now + 60).await.unwrap(),
        Begun::Started
    );
    assert_eq!(
        store.begin("k", "second", now + 60).await.unwrap(),
        Begun::InFlight("first".into())
    );
    // A marker is no answer.
    assert_eq!(store.kept("k").await.unwrap(), None);
    let kept = answer(b"{\"paid\":true}\x00\xff");
    assert!(store.keep("k", &kept, now + 600).await.unwrap());
    assert_eq!(store.kept("k").await.unwrap(), Some(kept.clone()));
    assert_eq!(
        store.begin("k", "third", now + 60).await.unwrap(),
        Begun::Kept(kept)
    );
    store.forget("k").await.unwrap();
    assert_eq!(store.kept("k").await.unwrap(), None);
    assert_eq!(
        store.begin("k", "fourth", now + 60).await.unwrap(),
        Begun::Started
    );
    // Other keys are independent.
    assert_eq!(store.kept("other").await.unwrap(), None);
}

async fn markers_and_answers_expire(answers: Answers) {
    let now = answers.clock.now_unix_secs();
    let store = &answers.store;
    store.begin("marker", "m", now + 1).await.unwrap();
    store.keep("answer", &answer(b"a"), now + 1).await.unwrap();
    store
        .keep("lasting", &answer(b"b"), now + 600)
        .await
        .unwrap();
    (answers.pass)(2).await;
    assert_eq!(
        store.begin("marker", "again", now + 600).await.unwrap(),
        Begun::Started
    );
    assert_eq!(store.kept("answer").await.unwrap(), None);
    assert_eq!(store.kept("lasting").await.unwrap(), Some(answer(b"b")));
}

async fn one_of_many_concurrent_begins_wins(answers: Answers) {
    let now = answers.clock.now_unix_secs();
    let mut tasks = Vec::new();
    for n in 0..20 {
        let store = answers.store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .begin("contended", &format!("m{n}"), now + 60)
                .await
                .unwrap()
        }));
    }
    let mut started = 0;
    for task in tasks {
        if task.await.unwrap() == Begun::Started {
            started += 1;
        }
    }
    assert_eq!(started, 1);
}

/// Each named contract as a test on each backend.
macro_rules! contract {
    ($in_memory:ident = $memory:expr, $on_redis:ident = $redis:expr; $($name:ident),* $(,)?) => {
        mod $in_memory {
            $(#[tokio::test] async fn $name() { super::$name($memory).await })*
        }
        mod $on_redis {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
              async fn $name() { super::$name($redis(stringify!($name))).await })*
        }
    };
}

contract!(
    answers_in_memory = super::in_memory_answers(),
    answers_redis = super::redis_answers;
    a_marker_then_an_answer_is_what_later_lookups_find,
    markers_and_answers_expire,
    one_of_many_concurrent_begins_wins,
);

/// The `sign-in-with-x` entitlement store's contract, on both backends.
#[cfg(feature = "siwx")]
mod entitlements {
    use super::*;
    use walletgate::redis::RedisEntitlementStore;
    use walletgate::x402::server::{EntitlementStore, InMemoryEntitlementStore, PaymentReceipt};
    use walletgate::x402::wire::{AtomicAmount, Network};

    struct Entitlements {
        store: Arc<dyn EntitlementStore>,
        clock: SharedClock,
        pass: Box<dyn Fn(u64) -> Wait>,
    }

    fn in_memory() -> Entitlements {
        let clock = FakeClock::at_unix_secs(1_750_000_000);
        let advanced = clock.clone();
        Entitlements {
            store: Arc::new(InMemoryEntitlementStore::new(Arc::new(clock.clone()))),
            clock: Arc::new(clock),
            pass: Box::new(move |secs| {
                advanced.advance(Duration::from_secs(secs));
                Box::pin(async {})
            }),
        }
    }

    fn on_redis(test: &str) -> Entitlements {
        let clock: SharedClock = Arc::new(SystemClock);
        Entitlements {
            store: Arc::new(RedisEntitlementStore::new(connection(test), clock.clone())),
            clock,
            pass: Box::new(|secs| {
                Box::pin(tokio::time::sleep(Duration::from_millis(secs * 1000 + 200)))
            }),
        }
    }

    fn receipt(payer: &str) -> PaymentReceipt {
        PaymentReceipt::new(
            payer.into(),
            AtomicAmount::new(2000),
            Network::parse("eip155:84532").unwrap(),
            "eip155:84532/0xaa/0x01".into(),
        )
        .settled("0xfeed".into())
    }

    async fn an_entitlement_is_its_payers_for_its_operation_until_it_expires(
        entitlements: Entitlements,
    ) {
        let now = entitlements.clock.now_unix_secs();
        let store = &entitlements.store;
        let payer = "0xAbCd000000000000000000000000000000000001";
        store
            .entitle(&[1; 32], &receipt(payer), now + 1)
            .await
            .unwrap();
        store
            .entitle(&[2; 32], &receipt(payer), now + 600)
            .await
            .unwrap();
        // The payer in any case; another payer or operation is not entitled.
        let found = store
            .entitlement(&payer.to_ascii_lowercase(), &[1; 32])
            .await
            .unwrap();
        assert_eq!(found, Some(receipt(payer)));
        let other = "0xabcd000000000000000000000000000000000002";
        assert_eq!(store.entitlement(other, &[1; 32]).await.unwrap(), None);
        assert_eq!(store.entitlement(payer, &[3; 32]).await.unwrap(), None);
        (entitlements.pass)(2).await;
        assert_eq!(store.entitlement(payer, &[1; 32]).await.unwrap(), None);
        assert!(store.entitlement(payer, &[2; 32]).await.unwrap().is_some());
    }

    contract!(
        in_memory_store = super::in_memory(),
        redis_store = super::on_redis;
        an_entitlement_is_its_payers_for_its_operation_until_it_expires,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_the_redis_store_bound_is_not_kept() {
    let store =
        RedisAnswerStore::new(connection("bound"), Arc::new(SystemClock)).with_max_answer_bytes(64);
    let large = KeptAnswer::new(200, "b", Bytes::from(vec![b'x'; 65]));
    assert!(!store.keep("large", &large, u64::MAX / 2).await.unwrap());
    assert_eq!(store.kept("large").await.unwrap(), None);
}

/// A settler as walletgate's own behaves: it settles (the transfer lands) but
/// its first answer is "pending, no receipt yet"; asked again for the same
/// payment it answers the same transaction, landed.
struct LostReceipt {
    inner: LocalEvmFacilitator,
    landed: Mutex<Option<SettleResponse>>,
    settles: AtomicUsize,
}

impl Facilitator for LostReceipt {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            self.settles.fetch_add(1, Ordering::SeqCst);
            let landed = self.landed.lock().unwrap().clone();
            if let Some(landed) = landed {
                return Ok(landed);
            }
            let landed = self.inner.settle(request).await?;
            let transaction = landed.transaction.clone();
            *self.landed.lock().unwrap() = Some(landed);
            Err(FacilitatorError::pending(
                transaction,
                "no receipt within the wait",
            ))
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, FacilitatorError>> {
        self.inner.supported()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_settlement_answer_is_resolved_by_the_resend_on_another_replica() {
    use walletgate::client::payer::{Payer, sequential_nonce};

    let conn = connection("second_replica");
    let clock: SharedClock = Arc::new(SystemClock);
    let ledger = RedisLedger::new(conn.clone());
    ledger.fund_dev_accounts().await.unwrap();
    let payer = Payer::dev(0);
    let before = ledger
        .balance_of(&x402_fixtures_token(), payer.address_bytes())
        .await
        .unwrap();
    let facilitator = Arc::new(LostReceipt {
        inner: LocalEvmFacilitator::new(Arc::new(ledger.clone()), clock.clone()),
        landed: Mutex::new(None),
        settles: AtomicUsize::new(0),
    });
    let upstream_calls = Arc::new(AtomicUsize::new(0));
    // Two replicas: their own layers and store handles, one Redis.
    let replica = || {
        let layer = x402_fixtures::chat_layer_builder(facilitator.clone(), clock.clone())
            .with_nonce_store(Arc::new(RedisNonceStore::new(conn.clone(), clock.clone())))
            .with_answer_store(Arc::new(RedisAnswerStore::new(conn.clone(), clock.clone())))
            .build()
            .unwrap();
        let calls = upstream_calls.clone();
        let inner = tower::service_fn(move |_request: http::Request<Full<Bytes>>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(b"{\"paid\":\"answer\"}")))
                        .unwrap(),
                )
            }
        });
        tower::Layer::layer(&layer, tower::util::BoxCloneService::new(inner))
    };
    let (first, second) = (replica(), replica());
    let chat = x402_fixtures::chat_request;
    let quote = first.clone().oneshot(chat(None)).await.unwrap();
    let quote: PaymentRequired =
        codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
    let header = payer
        .header_with_nonce(
            &quote.accepts[0],
            clock.now_unix_secs(),
            sequential_nonce(7),
        )
        .unwrap();

    let pending = first.clone().oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(pending.status(), 503);
    assert!(pending.headers().contains_key("retry-after"));
    let body = pending.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("PAYMENT_VERIFICATION_UNAVAILABLE"));

    // The resend reaches the other replica: the kept answer, no second upstream call.
    let landed = second.clone().oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(landed.status(), 200);
    let settled: SettleResponse =
        codec::decode(landed.headers()["payment-response"].as_bytes()).unwrap();
    assert!(settled.success);
    let body = landed.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{\"paid\":\"answer\"}");
    assert_eq!(upstream_calls.load(Ordering::SeqCst), 1);
    // And again on the first replica: the same answer, still one transfer.
    let again = first.oneshot(chat(Some(&header))).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(upstream_calls.load(Ordering::SeqCst), 1);
    let after = ledger
        .balance_of(&x402_fixtures_token(), payer.address_bytes())
        .await
        .unwrap();
    assert_eq!(before - after, x402_fixtures::QUOTED_UNITS);
    assert_eq!(ledger.settlements().await.unwrap(), 1);
}

/// Base Sepolia USDC, the fixtures' asset.
fn x402_fixtures_token() -> walletgate::x402::wire::TokenId {
    walletgate::x402::facilitator::DevLedger::base_sepolia_usdc()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_copies_of_one_payment_under_one_id_over_two_replicas_pay_and_call_once() {
    use walletgate::client::payer::{Payer, sequential_nonce};
    use walletgate::x402::server::payment_id::PaymentIdentifier;
    use walletgate::x402::wire::PaymentPayload;

    let conn = connection("id_two_replicas");
    let clock: SharedClock = Arc::new(SystemClock);
    let ledger = RedisLedger::new(conn.clone());
    ledger.fund_dev_accounts().await.unwrap();
    let facilitator = Arc::new(LocalEvmFacilitator::new(
        Arc::new(ledger.clone()),
        clock.clone(),
    ));
    let upstream_calls = Arc::new(AtomicUsize::new(0));
    let replica = || {
        let layer = x402_fixtures::chat_layer_builder(facilitator.clone(), clock.clone())
            .with_nonce_store(Arc::new(RedisNonceStore::new(conn.clone(), clock.clone())))
            .with_answer_store(Arc::new(RedisAnswerStore::new(conn.clone(), clock.clone())))
            .with_payment_identifier(PaymentIdentifier::Optional)
            .build()
            .unwrap();
        let calls = upstream_calls.clone();
        let inner = tower::service_fn(move |_request: http::Request<Full<Bytes>>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                // Long enough for the copies to overlap.
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(format!("{{\"call\":{n}}}"))))
                        .unwrap(),
                )
            }
        });
        tower::Layer::layer(&layer, tower::util::BoxCloneService::new(inner))
    };
    let replicas = [replica(), replica()];
    let chat = x402_fixtures::chat_request;
    let quote = replicas[0].clone().oneshot(chat(None)).await.unwrap();
    let quote: PaymentRequired =
        codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
    let declared = quote.extensions.clone().unwrap();
    assert_eq!(declared["payment-identifier"]["info"]["required"], false);
    let id = "pay_0123456789abcdef0123456789abcdef";
    let under_id = |nonce: u8| {
        let header = Payer::dev(0)
            .header_with_nonce(
                &quote.accepts[0],
                clock.now_unix_secs(),
                sequential_nonce(u64::from(nonce)),
            )
            .unwrap();
        let mut payload: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
        let mut extensions = declared.clone();
        extensions["payment-identifier"]["info"]["id"] = id.into();
        payload.extensions = Some(extensions);
        codec::encode(&payload)
    };
    let payment = Arc::new(under_id(1));
    let settlements_before = ledger.settlements().await.unwrap();

    // Twenty copies at once, alternating replicas; each resends on 503 as told.
    let sends = (0..20).map(|copy| {
        let replica = replicas[copy % 2].clone();
        let payment = payment.clone();
        tokio::spawn(async move {
            let mut unavailable = 0;
            loop {
                let answer = replica.clone().oneshot(chat(Some(&payment))).await.unwrap();
                if answer.status() == 503 {
                    assert!(answer.headers().contains_key("retry-after"));
                    unavailable += 1;
                    assert!(unavailable < 100, "still in flight");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                assert_eq!(answer.status(), 200);
                let receipt = answer.headers()["payment-response"].clone();
                let body = answer.into_body().collect().await.unwrap().to_bytes();
                return (body, receipt);
            }
        })
    });
    let mut answers = Vec::new();
    for send in sends {
        answers.push(send.await.unwrap());
    }
    assert!(answers.iter().all(|answer| *answer == answers[0]));
    assert_eq!(upstream_calls.load(Ordering::SeqCst), 1);
    assert_eq!(ledger.settlements().await.unwrap(), settlements_before + 1);

    // A fresh signature for the same request and payer under the id, on
    // either replica: the stored answer, still one settlement.
    for (replica, nonce) in replicas.iter().zip([2u8, 3]) {
        let fresh = replica
            .clone()
            .oneshot(chat(Some(&under_id(nonce))))
            .await
            .unwrap();
        assert_eq!(fresh.status(), 200);
        let body = fresh.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, answers[0].0);
    }
    assert_eq!(upstream_calls.load(Ordering::SeqCst), 1);
    assert_eq!(ledger.settlements().await.unwrap(), settlements_before + 1);
}

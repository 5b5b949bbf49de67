//! One contract per payment store, run against the in-memory default and the
//! Redis backend with the same assertions, so the two cannot drift:
//! `x402::server::NonceStore` (claims, releases, spent authorizations) and
//! `x402::facilitator::Ledger` (check, atomic transfer, used authorizations).
//!
//! Redis: `WALLETGATE_TEST_REDIS_URL`, or a redis-server started for this
//! binary; every test takes its own key prefix.

mod redis_support;
mod x402_fixtures;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256};
use walletgate::clock::{Clock, FakeClock, SharedClock, SystemClock};
use walletgate::redis::{RedisConfig, RedisConnection, RedisLedger, RedisNonceStore};
use walletgate::x402::{
    facilitator::{DevLedger, Ledger, LedgerError, Transfer},
    server::{AuthorizationKey, Claim, NonceStore, PaymentReceipt, SpentAuthorization},
    wire::{AtomicAmount, Network, TokenId},
};

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;
type Balance = Pin<Box<dyn Future<Output = u128> + Send>>;

/// A nonce store, its clock, and how to let `secs` pass for it.
struct Replay {
    store: Arc<dyn NonceStore>,
    clock: SharedClock,
    pass: Box<dyn Fn(u64) -> Wait>,
}

fn in_memory_replay() -> Replay {
    let clock = FakeClock::at_unix_secs(1_750_000_000);
    let advanced = clock.clone();
    Replay {
        store: Arc::new(walletgate::x402::server::InMemoryNonceStore::new(Arc::new(
            clock.clone(),
        ))),
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
fn redis_replay(test: &str) -> Replay {
    let clock: SharedClock = Arc::new(SystemClock);
    Replay {
        store: Arc::new(RedisNonceStore::new(connection(test), clock.clone())),
        clock,
        pass: Box::new(|secs| {
            Box::pin(tokio::time::sleep(Duration::from_millis(secs * 1000 + 200)))
        }),
    }
}

fn key(nonce: u8) -> AuthorizationKey {
    AuthorizationKey::new(
        &Network::base_sepolia(),
        Address::repeat_byte(0xab),
        B256::with_last_byte(nonce),
    )
}

fn spent(transaction: &str) -> SpentAuthorization {
    let receipt = PaymentReceipt::new(
        "0xAbC".into(),
        AtomicAmount::new(1_010_000),
        Network::base_sepolia(),
        key(0x01).as_str().to_owned(),
    );
    SpentAuthorization {
        receipt: receipt.settled(transaction.into()),
        fingerprint: [7; 32],
    }
}

async fn claims_are_exclusive_until_released(replay: Replay) {
    let now = replay.clock.now_unix_secs();
    let store = &replay.store;
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Claimed
    );
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::InFlight
    );
    // A key is its typed parts: the payer's text case does not matter.
    let upper = AuthorizationKey::new(
        &Network::base_sepolia(),
        format!("0x{}", "AB".repeat(20)).parse().unwrap(),
        B256::with_last_byte(1),
    );
    assert_eq!(
        store.claim(&upper, now + 600).await.unwrap(),
        Claim::InFlight
    );
    store.release(&key(0x01)).await;
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Claimed
    );
    // Another authorization is independent.
    assert_eq!(
        store.claim(&key(0x02), now + 600).await.unwrap(),
        Claim::Claimed
    );
}

async fn spent_stays_spent_and_release_keeps_it(replay: Replay) {
    let now = replay.clock.now_unix_secs();
    let store = &replay.store;
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Claimed
    );
    store
        .mark_spent(&key(0x01), spent("0xt1"), now + 600)
        .await
        .unwrap();
    store.release(&key(0x01)).await;
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Spent(spent("0xt1"))
    );
}

async fn a_settling_record_answers_settling_until_spent_or_given_back(replay: Replay) {
    let now = replay.clock.now_unix_secs();
    let store = &replay.store;
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Claimed
    );
    // Outcome not known: the claim becomes a settling record, pending transaction named.
    store
        .mark_settling(&key(0x01), spent("0xpending"), now + 600)
        .await
        .unwrap();
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Settling(spent("0xpending"))
    );
    // Landed on the resend: spent.
    store
        .mark_spent(&key(0x01), spent("0xpending"), now + 600)
        .await
        .unwrap();
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Spent(spent("0xpending"))
    );
    // Failed on the resend: the resend that found it gives it back.
    store.claim(&key(0x02), now + 600).await.unwrap();
    store
        .mark_settling(&key(0x02), spent("0xother"), now + 600)
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&key(0x02), now + 600).await.unwrap(),
        Claim::Settling(_)
    ));
    store.release(&key(0x02)).await;
    assert_eq!(
        store.claim(&key(0x02), now + 600).await.unwrap(),
        Claim::Claimed
    );
}

async fn entries_expire(replay: Replay) {
    let now = replay.clock.now_unix_secs();
    let store = &replay.store;
    // A claim held one second, a spent authorization kept one second.
    assert_eq!(
        store.claim(&key(0x01), now + 1).await.unwrap(),
        Claim::Claimed
    );
    assert_eq!(
        store.claim(&key(0x02), now + 600).await.unwrap(),
        Claim::Claimed
    );
    store
        .mark_spent(&key(0x02), spent("0xt2"), now + 1)
        .await
        .unwrap();
    (replay.pass)(1).await;
    let now = replay.clock.now_unix_secs();
    assert_eq!(
        store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Claimed
    );
    assert_eq!(
        store.claim(&key(0x02), now + 600).await.unwrap(),
        Claim::Claimed
    );
}

async fn one_of_many_concurrent_claims_wins(replay: Replay) {
    let now = replay.clock.now_unix_secs();
    let claims = (0..20).map(|_| {
        let store = replay.store.clone();
        tokio::spawn(async move { store.claim(&key(0x09), now + 600).await.unwrap() })
    });
    let mut won = 0;
    for claim in claims {
        if claim.await.unwrap() == Claim::Claimed {
            won += 1;
        }
    }
    assert_eq!(won, 1);
}

/// Each named contract as a test on each backend: `$memory` and `$redis`
/// build the backend (the Redis one under a key prefix named after the test).
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
    replay_in_memory = super::in_memory_replay(),
    replay_redis = super::redis_replay;
    claims_are_exclusive_until_released,
    spent_stays_spent_and_release_keeps_it,
    a_settling_record_answers_settling_until_spent_or_given_back,
    entries_expire,
    one_of_many_concurrent_claims_wins,
);

/// A ledger and how to fund and read it.
struct Books {
    ledger: Arc<dyn Ledger>,
    fund: Box<dyn Fn(Address, u128) -> Wait>,
    balance: Box<dyn Fn(Address) -> Balance>,
}

fn in_memory_books() -> Books {
    let ledger = Arc::new(DevLedger::empty());
    let (funded, read) = (ledger.clone(), ledger.clone());
    Books {
        ledger,
        fund: Box::new(move |owner, amount| {
            funded.fund(&token(), owner, amount);
            Box::pin(async {})
        }),
        balance: Box::new(move |owner| {
            let balance = read.balance_of(&token(), owner);
            Box::pin(async move { balance })
        }),
    }
}

fn redis_books(test: &str) -> Books {
    let ledger = RedisLedger::new(connection(test));
    let (funded, read) = (ledger.clone(), ledger.clone());
    Books {
        ledger: Arc::new(ledger),
        fund: Box::new(move |owner, amount| {
            let ledger = funded.clone();
            Box::pin(async move { ledger.fund(&token(), owner, amount).await.unwrap() })
        }),
        balance: Box::new(move |owner| {
            let ledger = read.clone();
            Box::pin(async move { ledger.balance_of(&token(), owner).await.unwrap() })
        }),
    }
}

fn token() -> TokenId {
    DevLedger::base_sepolia_usdc()
}

const PAYER: Address = Address::repeat_byte(0x11);
const PAYEE: Address = Address::repeat_byte(0x22);

fn transfer(nonce: u8, value: u128) -> Transfer {
    Transfer {
        token: token(),
        from: PAYER,
        to: PAYEE,
        value,
        nonce: B256::repeat_byte(nonce),
        // Far ahead: the contract is about funds and reuse, not expiry.
        valid_before_unix_secs: u64::MAX,
    }
}

async fn a_transfer_moves_funds_once(books: Books) {
    (books.fund)(PAYER, 5_000_000).await;
    let ledger = &books.ledger;
    ledger.check(&transfer(1, 1_000_000)).await.unwrap();
    let transaction = ledger
        .transfer_with_authorization(&transfer(1, 1_000_000))
        .await
        .unwrap();
    assert!(transaction.starts_with("0x") && transaction.len() == 66);
    assert_eq!((books.balance)(PAYER).await, 4_000_000);
    assert_eq!((books.balance)(PAYEE).await, 1_000_000);
    // The authorization is used now: checked or settled again, refused, nothing moves.
    assert_eq!(
        ledger.check(&transfer(1, 1_000_000)).await,
        Err(LedgerError::AuthorizationUsed)
    );
    assert_eq!(
        ledger
            .transfer_with_authorization(&transfer(1, 1_000_000))
            .await,
        Err(LedgerError::AuthorizationUsed)
    );
    assert_eq!((books.balance)(PAYER).await, 4_000_000);
    // Another nonce settles, with another transaction id.
    let second = ledger
        .transfer_with_authorization(&transfer(2, 1_000_000))
        .await
        .unwrap();
    assert_ne!(second, transaction);
}

async fn insufficient_funds_are_refused_before_and_at_settlement(books: Books) {
    (books.fund)(PAYER, 999).await;
    let ledger = &books.ledger;
    assert_eq!(
        ledger.check(&transfer(1, 1_000)).await,
        Err(LedgerError::InsufficientFunds)
    );
    assert_eq!(
        ledger
            .transfer_with_authorization(&transfer(1, 1_000))
            .await,
        Err(LedgerError::InsufficientFunds)
    );
    assert_eq!((books.balance)(PAYER).await, 999);
    assert_eq!((books.balance)(PAYEE).await, 0);
    // A refused transfer does not use the nonce.
    (books.fund)(PAYER, 1).await;
    ledger
        .transfer_with_authorization(&transfer(1, 1_000))
        .await
        .unwrap();
    assert_eq!((books.balance)(PAYER).await, 0);
}

async fn one_of_many_concurrent_transfers_settles(books: Books) {
    (books.fund)(PAYER, 10_000_000).await;
    let transfers = (0..20).map(|_| {
        let ledger = books.ledger.clone();
        tokio::spawn(async move {
            ledger
                .transfer_with_authorization(&transfer(7, 1_000_000))
                .await
        })
    });
    let mut settled = 0;
    for outcome in transfers {
        match outcome.await.unwrap() {
            Ok(_) => settled += 1,
            Err(error) => assert_eq!(error, LedgerError::AuthorizationUsed),
        }
    }
    assert_eq!(settled, 1);
    assert_eq!((books.balance)(PAYER).await, 9_000_000);
}

contract!(
    ledger_in_memory = super::in_memory_books(),
    ledger_redis = super::redis_books;
    a_transfer_moves_funds_once,
    insufficient_funds_are_refused_before_and_at_settlement,
    one_of_many_concurrent_transfers_settles,
);

#[tokio::test]
async fn dev_accounts_are_funded_once_however_many_replicas_start() {
    let conn = connection("dev_accounts");
    let (a, b) = (RedisLedger::new(conn.clone()), RedisLedger::new(conn));
    a.fund_dev_accounts().await.unwrap();
    let payer: Address = DevLedger::DEV_ACCOUNTS[0].parse().unwrap();
    a.transfer_with_authorization(&Transfer {
        from: payer,
        ..transfer(1, 10)
    })
    .await
    .unwrap();
    // A second replica (or a restart) does not refill what was spent.
    b.fund_dev_accounts().await.unwrap();
    assert_eq!(
        b.balance_of(&token(), payer).await.unwrap(),
        DevLedger::DEV_ACCOUNT_FUNDS - 10
    );
    assert_eq!(b.settlements().await.unwrap(), 1);
}

#[tokio::test]
async fn an_unreachable_redis_is_a_store_error_not_a_decision() {
    let config = RedisConfig::new(format!("redis://127.0.0.1:{}", redis_support::free_port()))
        .with_timeout(Duration::from_millis(250));
    let conn = RedisConnection::open(&config).unwrap();
    let store = RedisNonceStore::new(conn.clone(), Arc::new(SystemClock));
    assert!(store.claim(&key(0x01), u64::MAX).await.is_err());
    let spent_result = store.mark_spent(&key(0x01), spent("0x"), u64::MAX).await;
    assert!(spent_result.is_err());
    // A release that cannot be delivered does not hang or panic.
    store.release(&key(0x01)).await;
    let ledger = RedisLedger::new(conn);
    assert!(matches!(
        ledger.transfer_with_authorization(&transfer(1, 1)).await,
        Err(LedgerError::Unavailable(_))
    ));
    assert!(matches!(
        ledger.check(&transfer(1, 1)).await,
        Err(LedgerError::Unavailable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_unawaited_still_reaches_redis() {
    // A request whose client went away releases from `Drop`: nobody awaits.
    let replay = redis_replay("dropped_release");
    let now = replay.clock.now_unix_secs();
    assert_eq!(
        replay.store.claim(&key(0x01), now + 600).await.unwrap(),
        Claim::Claimed
    );
    drop(replay.store.release(&key(0x01)));
    let mut freed = false;
    for _ in 0..100 {
        match replay.store.claim(&key(0x01), now + 600).await.unwrap() {
            Claim::Claimed => {
                freed = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(freed, "the background release never reached Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_request_costs_two_redis_round_trips() {
    use tower::ServiceExt;
    use walletgate::client::payer::Payer;
    use walletgate::client::payer::sequential_nonce;
    use walletgate::x402::{
        facilitator::LocalEvmFacilitator,
        wire::{PaymentRequired, codec},
    };

    let conn = connection("round_trips");
    let clock: SharedClock = Arc::new(SystemClock);
    let ledger = RedisLedger::new(conn.clone());
    ledger.fund_dev_accounts().await.unwrap();
    let store = RedisNonceStore::new(conn.clone(), clock.clone()).with_ledger_prefetch(&ledger);
    // Another replica's store, paired the same way: on a Redis Cluster the
    // replay keys of a paired store live in the ledger's slot.
    let reader = RedisNonceStore::new(conn.clone(), clock.clone()).with_ledger_prefetch(&ledger);
    let layer = x402_fixtures::chat_layer_builder(
        LocalEvmFacilitator::new(Arc::new(ledger), clock.clone()),
        clock.clone(),
    )
    .with_nonce_store(Arc::new(store))
    .build()
    .unwrap();
    let service = x402_fixtures::answering(&layer);
    let chat = x402_fixtures::chat_request;
    let quote = service.clone().oneshot(chat(None)).await.unwrap();
    let quote: PaymentRequired =
        codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
    let pay = |n| {
        let header = Payer::dev(0)
            .header_with_nonce(
                &quote.accepts[0],
                clock.now_unix_secs(),
                sequential_nonce(n),
            )
            .unwrap();
        let service = service.clone();
        async move { service.oneshot(chat(Some(&header))).await.unwrap().status() }
    };
    // Warm up: every script is loaded into Redis on its first use.
    assert_eq!(pay(1).await, 200);
    let paid = 10;
    let before = conn.round_trips();
    for n in 0..paid {
        assert_eq!(pay(100 + n).await, 200);
    }
    let per_request = (conn.round_trips() - before) as f64 / paid as f64;
    // The claim (which also reads the payer's ledger state for the check) and
    // the transfer (which also marks the authorization spent).
    assert_eq!(per_request, 2.0, "Redis round trips per paid request");
    // The spent record the transfer's script wrote is there, with its receipt,
    // for a replay (or a paid replay) to read.
    let key = AuthorizationKey::new(
        &Network::base_sepolia(),
        Payer::dev(0).address_bytes(),
        sequential_nonce(100),
    );
    match reader.claim(&key, u64::MAX).await.unwrap() {
        Claim::Spent(spent) => {
            assert_eq!(spent.receipt.payer(), Payer::dev(0).address());
            assert_eq!(spent.receipt.amount().units(), x402_fixtures::QUOTED_UNITS);
            assert!(
                spent
                    .receipt
                    .transaction()
                    .is_some_and(|tx| tx.starts_with("0x"))
            );
        }
        other => panic!("not marked spent: {other:?}"),
    }
    assert_eq!(
        pay(100).await,
        402,
        "a settled authorization sent again is a replay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_read_ahead_by_the_claim_decides_as_a_check_of_its_own() {
    let conn = connection("read_ahead");
    let ledger = RedisLedger::new(conn.clone());
    let store = RedisNonceStore::new(conn, Arc::new(SystemClock)).with_ledger_prefetch(&ledger);
    let claim = |nonce: u8| {
        let key = AuthorizationKey::new(&Network::base_sepolia(), PAYER, B256::repeat_byte(nonce));
        let store = store.clone();
        async move { store.claim(&key, u64::MAX).await.unwrap() }
    };
    ledger.fund(&token(), PAYER, 999).await.unwrap();
    assert_eq!(claim(1).await, Claim::Claimed);
    // Read ahead, then asked again of Redis: the same answer.
    assert_eq!(
        ledger.check(&transfer(1, 1_000)).await,
        Err(LedgerError::InsufficientFunds)
    );
    assert_eq!(
        ledger.check(&transfer(1, 1_000)).await,
        Err(LedgerError::InsufficientFunds)
    );
    ledger.fund(&token(), PAYER, 1).await.unwrap();
    assert_eq!(claim(2).await, Claim::Claimed);
    assert_eq!(ledger.check(&transfer(2, 1_000)).await, Ok(()));
    ledger
        .transfer_with_authorization(&transfer(2, 1_000))
        .await
        .unwrap();
    // Released (say the mark-spent was lost) and claimed again: the snapshot knows it is used.
    store
        .release(&AuthorizationKey::new(
            &Network::base_sepolia(),
            PAYER,
            B256::repeat_byte(2),
        ))
        .await;
    assert_eq!(claim(2).await, Claim::Claimed);
    assert_eq!(
        ledger.check(&transfer(2, 1_000)).await,
        Err(LedgerError::AuthorizationUsed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_timed_out_is_taken_back_once_redis_moves_again() {
    // A server of its own: it is paused.
    let server = redis_support::RedisServer::start();
    let config = RedisConfig::new(server.url()).with_timeout(Duration::from_millis(250));
    let store = RedisNonceStore::new(
        RedisConnection::open(&config).unwrap(),
        Arc::new(SystemClock),
    );
    let now = SystemClock.now_unix_secs();
    assert_eq!(
        store.claim(&key(0x05), now + 600).await.unwrap(),
        Claim::Claimed
    );
    let pauser = RedisConnection::open(&config).unwrap();
    pauser
        .call("pause", |mut c| async move {
            redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(1000)
                .arg("ALL")
                .query_async::<()>(&mut c)
                .await
        })
        .await
        .unwrap();
    // Redis runs this claim only after the pause, long after the caller gave up.
    assert!(store.claim(&key(0x01), now + 600).await.is_err());
    let mut outcome = None;
    for _ in 0..40 {
        match store.claim(&key(0x01), now + 600).await {
            Ok(Claim::InFlight) | Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Ok(other) => {
                outcome = Some(other);
                break;
            }
        }
    }
    assert_eq!(
        outcome,
        Some(Claim::Claimed),
        "the timed-out claim was never taken back"
    );
}

/// Redis goes away (its address stops answering, its data stays) between a
/// payment's claim and its settlement: the answer is a 503, nothing is
/// charged, and the claim's release cannot reach Redis. Once Redis answers
/// again the release is sent again, so the same signed payment is payable
/// on its resend, through another replica too, and settles once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_answered_503_while_redis_was_away_is_payable_again_once_it_returns() {
    use http_body_util::Full;
    use tower::ServiceExt;
    use walletgate::client::payer::{Payer, sequential_nonce};
    use walletgate::x402::{
        facilitator::LocalEvmFacilitator,
        wire::{PaymentRequired, codec},
    };

    let server = redis_support::RedisServer::start();
    let address = Arc::new(redis_support::Forwarder::start(server.port()).await);
    let clock: SharedClock = Arc::new(SystemClock);
    // Two replicas: each its own connection, store and ledger.
    let replica = |inner: x402_fixtures::Answering| {
        let config = RedisConfig::new(address.url()).with_timeout(Duration::from_millis(250));
        let conn = RedisConnection::open(&config).unwrap();
        let ledger = RedisLedger::new(conn.clone());
        let store = RedisNonceStore::new(conn, clock.clone()).with_ledger_prefetch(&ledger);
        let layer = x402_fixtures::chat_layer_builder(
            LocalEvmFacilitator::new(Arc::new(ledger.clone()), clock.clone()),
            clock.clone(),
        )
        .with_nonce_store(Arc::new(store))
        .build()
        .unwrap();
        (tower::Layer::layer(&layer, inner), ledger)
    };
    // Replica A's handler takes Redis away while it answers, once.
    let away = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (taking_away, forwarder) = (away.clone(), address.clone());
    let handler = tower::service_fn(move |_request: http::Request<Full<bytes::Bytes>>| {
        if taking_away.swap(false, std::sync::atomic::Ordering::SeqCst) {
            forwarder.point_to(None);
        }
        async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                bytes::Bytes::from_static(b"answer"),
            )))
        }
    });
    let (a, ledger) = replica(tower::util::BoxCloneService::new(handler));
    let answering = tower::service_fn(|_request: http::Request<Full<bytes::Bytes>>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
            bytes::Bytes::from_static(b"answer"),
        )))
    });
    let (b, _) = replica(tower::util::BoxCloneService::new(answering));
    ledger.fund_dev_accounts().await.unwrap();
    let chat = x402_fixtures::chat_request;
    let quote = a.clone().oneshot(chat(None)).await.unwrap();
    let quote: PaymentRequired =
        codec::decode(quote.headers()["payment-required"].as_bytes()).unwrap();
    let payment = Payer::dev(0)
        .header_with_nonce(
            &quote.accepts[0],
            clock.now_unix_secs(),
            sequential_nonce(7),
        )
        .unwrap();

    away.store(true, std::sync::atomic::Ordering::SeqCst);
    let unsettled = a.clone().oneshot(chat(Some(&payment))).await.unwrap();
    assert_eq!(unsettled.status(), 503);
    assert!(unsettled.headers().contains_key("retry-after"));
    // Still away: a resend is a 503 again, never a replay.
    let still = b.clone().oneshot(chat(Some(&payment))).await.unwrap();
    assert_eq!(still.status(), 503);

    address.point_to(Some(server.port()));
    // Replica B never held the claim: only A's retried release frees it.
    let mut statuses = Vec::new();
    for _ in 0..50 {
        let status = b
            .clone()
            .oneshot(chat(Some(&payment)))
            .await
            .unwrap()
            .status();
        statuses.push(status.as_u16());
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        statuses.last(),
        Some(&200),
        "the resend never went through: {statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|status| matches!(status, 200 | 402 | 503)),
        "{statuses:?}"
    );
    assert_eq!(ledger.settlements().await.unwrap(), 1);
    let again = a.clone().oneshot(chat(Some(&payment))).await.unwrap();
    assert_eq!(again.status(), 402, "settled once, then a replay");
    assert_eq!(ledger.settlements().await.unwrap(), 1);
}

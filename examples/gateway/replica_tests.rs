//! Two gateway replicas on one Redis, over real TCP: each its own router,
//! state, payment layers and connection, sharing nothing but Redis.
//!
//! One authorization settles once whichever replica it reaches; a paid image
//! job made on one is recovered on the other, uncharged; a Redis that stops
//! makes paid requests 503 (nothing served, nothing settled) and the same
//! signed payment goes through once Redis is back.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use walletgate::envelope::ErrorCode;
use walletgate::redis::{RedisConnection, RedisLedger};

use crate::redis_settings::RedisSettings;
use walletgate::client::payer::Payer;
use walletgate::x402::facilitator::DevLedger;

use crate::config::Config;
use crate::payment_tests::assert_payment_rejection;
use crate::redis_support::{
    Forwarder, RedisCluster, RedisServer, free_port, shared_cluster_seeds, shared_url,
    unique_prefix,
};
use crate::request::Endpoint;
use crate::tests::{Captured, Reply, Server, body, path, sign_in_proof};

const PAID_MODEL: &str = "anthropic/claude-sonnet-4.6";

/// Two replicas and the ledger they share.
struct Replicas {
    replicas: [Server; 2],
    ledger: RedisLedger,
}

impl Replicas {
    async fn start(redis: RedisSettings) -> Self {
        let config = || Config {
            redis: Some(redis.clone()),
            ..Config::default()
        };
        let replicas = [Server::start(config()).await, Server::start(config()).await];
        let ledger = RedisLedger::new(RedisConnection::open(&redis.config().unwrap()).unwrap());
        // The replicas fund the accounts in the background; make sure before paying.
        ledger.fund_dev_accounts().await.unwrap();
        Self { replicas, ledger }
    }

    async fn balance(&self, payer: &Payer) -> u128 {
        self.ledger
            .balance_of(
                &DevLedger::base_sepolia_usdc(),
                payer.address().parse().unwrap(),
            )
            .await
            .unwrap()
    }
}

fn shared(test: &str) -> RedisSettings {
    RedisSettings::new(shared_url(), unique_prefix(test))
}

fn chat() -> String {
    body(Endpoint::Chat, PAID_MODEL, "hello", false).to_string()
}

/// Served and refused replies; every refusal must be `PAYMENT_REPLAY` in the chat envelope.
fn served_and_replayed(replies: &[Reply]) -> (usize, usize) {
    let (served, refused): (Vec<&Reply>, Vec<&Reply>) =
        replies.iter().partition(|reply| reply.status == 200);
    for reply in &refused {
        assert_payment_rejection(Endpoint::Chat, reply, ErrorCode::PaymentReplay);
    }
    (served.len(), refused.len())
}

/// Under `prefix` on this binary's shared Redis Cluster (three primaries,
/// three replicas).
fn on_cluster(test: &str) -> RedisSettings {
    RedisSettings::cluster(&shared_cluster_seeds(), unique_prefix(test))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_authorization_sent_twenty_times_over_both_replicas_settles_once() {
    twenty_copies_settle_once(shared("twenty_copies")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_one_authorization_sent_twenty_times_over_both_replicas_settles_once() {
    twenty_copies_settle_once(on_cluster("twenty_copies")).await;
}

async fn twenty_copies_settle_once(redis: RedisSettings) {
    let gateways = Replicas::start(redis).await;
    let [a, b] = &gateways.replicas;
    let url = path(Endpoint::Chat);
    let quote = a.post_once(url, chat(), None).await;
    assert_eq!(quote.status, 402, "{}", quote.text());
    let payment = Arc::new(a.sign(&quote, &a.payer));
    let before = gateways.balance(&a.payer).await;

    let sends = (0..20).map(|copy| {
        let server = if copy % 2 == 0 { a } else { b }.clone();
        let payment = payment.clone();
        async move { server.post_once(url, chat(), Some(&payment)).await }
    });
    let replies = futures_join_all(sends).await;
    assert_eq!(served_and_replayed(&replies), (1, 19));
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 1);
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(gateways.balance(&a.payer).await, before - amount);
}

/// `payment` with the payment identifier `id` in its extensions, as the
/// official client's helper writes it over the 402's declaration.
fn under_id(quote: &Reply, payment: &str, id: &str) -> String {
    let mut payload: walletgate::x402::wire::PaymentPayload =
        walletgate::x402::wire::codec::decode(payment.as_bytes()).unwrap();
    let mut extensions = quote.quote().extensions.clone().unwrap();
    extensions["payment-identifier"]["info"]["id"] = id.into();
    payload.extensions = Some(extensions);
    walletgate::x402::wire::codec::encode(&payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_copies_under_one_payment_identifier_over_both_replicas_pay_and_answer_once() {
    let gateways = Replicas::start(shared("twenty_copies_one_id")).await;
    let [a, b] = &gateways.replicas;
    let url = path(Endpoint::Chat);
    let quote = a.post_once(url, chat(), None).await;
    let id = "pay_0123456789abcdef0123456789abcdef";
    let payment = Arc::new(under_id(&quote, &a.sign(&quote, &a.payer), id));
    let before = gateways.balance(&a.payer).await;

    let sends = (0..20).map(|copy| {
        let server = if copy % 2 == 0 { a } else { b }.clone();
        let payment = payment.clone();
        async move {
            // The documented rule: 503 with Retry-After means resend the same payment.
            for _ in 0..200 {
                let reply = server.post_once(url, chat(), Some(&payment)).await;
                if reply.status != 503 {
                    return reply;
                }
                assert!(reply.header("retry-after").is_some());
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("still in flight");
        }
    });
    let replies = futures_join_all(sends).await;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.text(), replies[0].text());
        assert_eq!(
            reply.header("payment-response"),
            replies[0].header("payment-response")
        );
    }
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 1);
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(gateways.balance(&a.payer).await, before - amount);
    // A fresh signature for the same request under the id: the same answer, not charged.
    let fresh = under_id(&quote, &b.sign(&quote, &a.payer), id);
    let again = b.post_once(url, chat(), Some(&fresh)).await;
    assert_eq!(again.text(), replies[0].text());
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_authorizations_sent_ten_times_each_settle_a_hundred_times() {
    // A thousand requests at once on a shared two-core machine: the default
    // 250 ms bound would measure the machine's load, not Redis.
    let redis = shared("hundred_by_ten").with_timeout(Duration::from_secs(30));
    let gateways = Replicas::start(redis).await;
    let [a, b] = &gateways.replicas;
    let url = path(Endpoint::Chat);
    let quote = a.post_once(url, chat(), None).await;
    let payments: Vec<Arc<String>> = (0..100)
        .map(|_| Arc::new(a.sign(&quote, &a.payer)))
        .collect();
    let before = gateways.balance(&a.payer).await;

    let sends = payments.iter().flat_map(|payment| {
        (0..10).map(move |copy| {
            let server = if copy % 2 == 0 { a } else { b }.clone();
            let payment = payment.clone();
            async move { server.post_once(url, chat(), Some(&payment)).await }
        })
    });
    let replies = futures_join_all(sends).await;
    assert_eq!(served_and_replayed(&replies), (100, 900));
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 100);
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(gateways.balance(&a.payer).await, before - 100 * amount);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_image_job_made_on_one_replica_is_recovered_on_the_other_uncharged() {
    let gateways = Replicas::start(shared("image_job")).await;
    let [a, b] = &gateways.replicas;
    let url = "/v1/images/generations";
    let request = json!({"model": "openai/dall-e-3", "prompt": "a red fox"}).to_string();
    let quote = a.post_once(url, request.clone(), None).await;
    assert_eq!(quote.status, 402, "{}", quote.text());
    let payment = a.sign(&quote, &a.payer);
    let before = gateways.balance(&a.payer).await;

    let accepted = a.post_once(url, request.clone(), Some(&payment)).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    let id = accepted.json()["id"].as_str().unwrap().to_owned();
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(gateways.balance(&a.payer).await, before - amount);

    // The answer was lost; the client sends the same signed POST, and the
    // load balancer picks the other replica: the same job, not charged again.
    let recovered = b.post_once(url, request, Some(&payment)).await;
    assert_eq!(recovered.status, 202, "{}", recovered.text());
    assert_eq!(recovered.json()["id"], id.as_str());
    assert!(recovered.header("payment-response").is_some());
    // Polled on the other replica with the paying signature.
    let poll_url = format!("{url}/{id}");
    let request = http::Request::get(b.url(&poll_url)).header("payment-signature", &payment);
    let polled = b
        .send(request.body(http_body_util::Full::default()).unwrap())
        .await;
    assert_eq!(polled.status, 202, "{}", polled.text());
    assert_eq!(polled.json()["id"], id.as_str());
    assert_eq!(gateways.balance(&a.payer).await, before - amount);
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_is_a_503_without_settlement_and_payments_resume_when_it_returns() {
    let mut server = RedisServer::start();
    let port = server.port();
    let redis = RedisSettings::new(server.url(), "outage");
    let gateways = Replicas::start(redis).await;
    let [a, b] = &gateways.replicas;
    let url = path(Endpoint::Chat);
    let quote = a.post_once(url, chat(), None).await;
    let first = a.sign(&quote, &a.payer);
    assert_eq!(a.post_once(url, chat(), Some(&first)).await.status, 200);

    server.stop();
    let payment = a.sign(&quote, &a.payer);
    for replica in [a, b] {
        let refused = replica.post_once(url, chat(), Some(&payment)).await;
        assert_payment_rejection(
            Endpoint::Chat,
            &refused,
            ErrorCode::PaymentVerificationUnavailable,
        );
        // The process is up: what needs no Redis is served.
        assert_eq!(replica.get("/v1/models").await.status, 200);
    }

    // Redis is back (empty: it kept nothing on disk); the accounts are funded
    // again and the same signed payment goes through, once.
    let _server = RedisServer::start_on(port);
    // The first call on a connection Redis dropped fails; it reconnects then.
    let mut funded = false;
    for _ in 0..20 {
        if gateways.ledger.fund_dev_accounts().await.is_ok() {
            funded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(funded, "the ledger's connection did not come back");
    let before = gateways.balance(&a.payer).await;
    let resumed = until_redis_answers(b, &payment).await;
    assert_eq!(resumed.status, 200, "{}", resumed.text());
    let replay = until_redis_answers(a, &payment).await;
    assert_payment_rejection(Endpoint::Chat, &replay, ErrorCode::PaymentReplay);
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 1);
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(gateways.balance(&a.payer).await, before - amount);
}

/// Sends the paid chat request until `replica`'s connection to a restarted
/// Redis is back; until then every answer is the 503 refusal, nothing else.
async fn until_redis_answers(replica: &Server, payment: &str) -> Reply {
    for _ in 0..20 {
        let reply = replica
            .post_once(path(Endpoint::Chat), chat(), Some(payment))
            .await;
        if reply.status != 503 {
            return reply;
        }
        assert_payment_rejection(
            Endpoint::Chat,
            &reply,
            ErrorCode::PaymentVerificationUnavailable,
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("payments did not resume after Redis returned");
}

/// Runs every future at once on the runtime and collects their outputs in order.
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(tasks.len());
    for task in tasks {
        outputs.push(task.await.unwrap());
    }
    outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_does_not_answer_within_its_timeout_is_a_503_and_nothing_is_settled() {
    let server = RedisServer::start();
    let redis = RedisSettings::new(server.url(), "slow");
    let gateways = Replicas::start(redis.clone()).await;
    let [a, _] = &gateways.replicas;
    let url = path(Endpoint::Chat);
    let quote = a.post_once(url, chat(), None).await;
    let warm = a.sign(&quote, &a.payer);
    assert_eq!(a.post_once(url, chat(), Some(&warm)).await.status, 200);
    let before = gateways.balance(&a.payer).await;

    // Redis holds every client's commands for 1.5 s: far past the 250 ms bound.
    let pauser = RedisConnection::open(&redis.config().unwrap()).unwrap();
    pauser
        .call("pause", |mut c| async move {
            redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(1500)
                .arg("ALL")
                .query_async::<()>(&mut c)
                .await
        })
        .await
        .unwrap();
    let payment = a.sign(&quote, &a.payer);
    let slow = a.post_once(url, chat(), Some(&payment)).await;
    assert_payment_rejection(
        Endpoint::Chat,
        &slow,
        ErrorCode::PaymentVerificationUnavailable,
    );

    // Redis runs the timed-out claim once it moves again; the replica takes it
    // back behind it, in the background. Until then the same signed payment is
    // refused (503, or in flight), never charged; then it goes through, once.
    let mut resumed = None;
    for _ in 0..50 {
        let reply = a.post_once(url, chat(), Some(&payment)).await;
        if reply.status == 200 {
            resumed = Some(reply);
            break;
        }
        let code = reply.json()["code"].as_str().unwrap_or_default().to_owned();
        assert!(
            code == "PAYMENT_VERIFICATION_UNAVAILABLE"
                || (code == "PAYMENT_REPLAY" && reply.text().contains("authorization_in_flight")),
            "{}",
            reply.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        resumed.is_some(),
        "the timed-out claim was never taken back"
    );
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(gateways.balance(&a.payer).await, before - amount);
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wallet_that_paid_on_one_replica_signs_in_on_the_other() {
    let redis = shared("siwx");
    // Behind one public origin, with one nonce key, as replicas are deployed.
    let config = || Config {
        redis: Some(redis.clone()),
        public_url: Some("https://pay.example".to_owned()),
        siwx_key: Some([9; 32]),
        ..Config::default()
    };
    let [a, b] = [Server::start(config()).await, Server::start(config()).await];
    let route = path(Endpoint::Chat);
    let quote = a.post_once(route, chat(), None).await;
    let paid = a
        .post_once(route, chat(), Some(&a.sign(&quote, &a.payer)))
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    let ledger = RedisLedger::new(RedisConnection::open(&redis.config().unwrap()).unwrap());
    assert_eq!(ledger.settlements().await.unwrap(), 1);

    // A challenge replica A issued, the proof answered by replica B.
    let challenge = a.post_once(route, chat(), None).await;
    let proof = sign_in_proof(&challenge, &a.payer);
    let signed_in = b.send(sign_in_request(&b, route, &proof)).await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.text());
    assert_eq!(signed_in.body, paid.body);
    // The nonce is spent for both: replayed on A, the normal 402.
    let replayed = a.send(sign_in_request(&a, route, &proof)).await;
    assert_eq!(replayed.status, 402, "{}", replayed.text());
    assert_eq!(ledger.settlements().await.unwrap(), 1);
}

fn sign_in_request(
    server: &Server,
    route: &str,
    proof: &str,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    http::Request::post(server.url(route))
        .header("content-type", "application/json")
        .header("sign-in-with-x", proof)
        .body(http_body_util::Full::new(bytes::Bytes::from(chat())))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_thirty_one_free_calls_alternating_two_replicas_admit_thirty() {
    let redis = on_cluster("free_tier");
    let config = || Config {
        redis: Some(redis.clone()),
        ..Config::default()
    };
    let replicas = [Server::start(config()).await, Server::start(config()).await];
    let body = body(Endpoint::Chat, "nvidia/nemotron-super", "hi", false).to_string();
    let mut statuses = Vec::new();
    for call in 0..31 {
        let reply = replicas[call % 2]
            .post_once(path(Endpoint::Chat), body.clone(), None)
            .await;
        statuses.push(reply.status.as_u16());
    }
    let admitted = statuses.iter().filter(|status| **status == 200).count();
    assert_eq!(admitted, 30, "{statuses:?}");
    assert_eq!(statuses[30], 429, "{statuses:?}");
}

/// What one request of a failover test saw.
struct Sent {
    /// Since the load began.
    at: Duration,
    took: Duration,
    status: u16,
    retry_after: bool,
    /// The payment sent; empty for a free request.
    payment: String,
}

/// A steady small load over both replicas: `requests` chat requests, one
/// every 50 ms, each `free_every`-th one free (the rest paid, each with a
/// payment of its own); `event` is called before each send with the time
/// since the start (to kill, promote, switch).
async fn steady_load(
    gateways: &Replicas,
    quote: &Arc<Reply>,
    requests: usize,
    free_every: Option<usize>,
    mut event: impl FnMut(Duration),
) -> Vec<Sent> {
    const EVERY: Duration = Duration::from_millis(50);
    let [a, b] = &gateways.replicas;
    let url = path(Endpoint::Chat);
    let free_body = body(Endpoint::Chat, "nvidia/nemotron-super", "hi", false).to_string();
    let start = tokio::time::Instant::now();
    let mut sends = Vec::with_capacity(requests);
    for n in 0..requests {
        tokio::time::sleep_until(start + EVERY * n as u32).await;
        event(start.elapsed());
        let server = if n % 2 == 0 { a } else { b }.clone();
        let (quote, free_body) = (quote.clone(), free_body.clone());
        let free = free_every.is_some_and(|every| n % every == every - 1);
        sends.push(tokio::spawn(async move {
            let payment = (!free).then(|| server.sign(&quote, &server.payer));
            let at = start.elapsed();
            let reply = match &payment {
                Some(payment) => server.post_once(url, chat(), Some(payment)).await,
                None => server.post_once(url, free_body, None).await,
            };
            Sent {
                at,
                took: start.elapsed() - at,
                status: reply.status.as_u16(),
                retry_after: reply.header("retry-after").is_some(),
                payment: payment.unwrap_or_default(),
            }
        }));
    }
    let mut sent = Vec::with_capacity(requests);
    for send in sends {
        sent.push(send.await.unwrap());
    }
    sent
}

/// No answer but 200, 402 or 503 with Retry-After; none slower than 2 s
/// (three store calls at most, each bounded by the 250 ms timeout); no
/// 503 answered later than 10 s after `since`; the last 20 served.
fn assert_failover_answers(sent: &[Sent], since: Duration) {
    for one in sent {
        assert!(
            matches!(one.status, 200 | 402 | 503),
            "status {} at {:?}",
            one.status,
            one.at
        );
        if one.status == 503 {
            assert!(one.retry_after, "a 503 without Retry-After at {:?}", one.at);
        }
        assert!(
            one.took < Duration::from_secs(2),
            "{:?} at {:?}",
            one.took,
            one.at
        );
    }
    if let Some(last) = last_503(sent) {
        assert!(
            last < since + Duration::from_secs(10),
            "still 503 {:?} after {since:?}",
            last - since
        );
    }
    let tail = sent.iter().rev().take(20);
    assert!(
        tail.clone().all(|one| one.status == 200),
        "not normal again at the end: {:?}",
        tail.map(|one| one.status).collect::<Vec<_>>()
    );
}

/// When the last 503 was answered, since the load began.
fn last_503(sent: &[Sent]) -> Option<Duration> {
    sent.iter()
        .filter(|one| one.status == 503)
        .map(|one| one.at + one.took)
        .max()
}

/// Nothing settled twice and nothing served unsettled: every payment sent
/// again is a replay if it was served, and is served now (once) if it met a
/// 503; the ledger settled each once and debited each once since `before`.
/// Then the logs of it all are clean.
async fn assert_each_payment_settled_once(
    gateways: &Replicas,
    quote: &Reply,
    before: u128,
    sent: &[Sent],
    logs: &Logs,
) {
    let [a, _] = &gateways.replicas;
    let paid: Vec<&str> = sent
        .iter()
        .filter(|one| !one.payment.is_empty())
        .map(|one| one.payment.as_str())
        .collect();
    for one in sent.iter().filter(|one| !one.payment.is_empty()) {
        let again = until_redis_answers(a, &one.payment).await;
        match one.status {
            200 => assert_payment_rejection(Endpoint::Chat, &again, ErrorCode::PaymentReplay),
            _ => assert_eq!(again.status, 200, "{}", again.text()),
        }
    }
    // The test's own connection may meet a failover on its first call after it.
    let mut settled = gateways.ledger.settlements().await;
    for _ in 0..20 {
        if settled.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        settled = gateways.ledger.settlements().await;
    }
    let amount = quote.quote().accepts[0].amount.units();
    assert_eq!(
        settled.unwrap(),
        paid.len() as u64,
        "one settlement per payment"
    );
    assert_eq!(
        gateways.balance(&a.payer).await,
        before - amount * paid.len() as u128
    );
    logs.assert_clean(&paid);
}

/// SIGKILL of the primary that serves the ledger's slot (and so every paid
/// request's replay key, the gateway's store being paired with the ledger)
/// under a steady small load over two replicas: 200 paid requests, one every
/// 50 ms. While the cluster promotes its replica the answers are 503 with
/// Retry-After (never a 500, never past the timeout), then payments go
/// through again without a restart; nothing settles twice; the logs stay
/// clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_killed_primary_is_a_503_with_retry_after_until_its_replica_takes_over()
 {
    const REQUESTS: usize = 200;
    const KILL_AFTER: Duration = Duration::from_secs(2);
    let logs = Logs::capture();
    let cluster = RedisCluster::start();
    let redis = RedisSettings::cluster(&cluster.seeds(), "failover");
    let gateways = Replicas::start(redis).await;
    let [a, _] = &gateways.replicas;
    let quote = Arc::new(a.post_once(path(Endpoint::Chat), chat(), None).await);
    let before = gateways.balance(&a.payer).await;
    let victim = cluster.primary_for("{x402-ledger}");

    let mut killed_at = None;
    let sent = steady_load(&gateways, &quote, REQUESTS, None, |now| {
        if killed_at.is_none() && now >= KILL_AFTER {
            cluster.kill(victim);
            killed_at = Some(now);
        }
    })
    .await;
    let killed_at = killed_at.unwrap();

    let unavailable = sent.iter().filter(|one| one.status == 503).count();
    let served = sent.iter().filter(|one| one.status == 200).count();
    let slowest = sent.iter().map(|one| one.took).max().unwrap();
    eprintln!(
        "kill test: {REQUESTS} paid requests, primary killed at {killed_at:?}; \
         {served} served, {unavailable} answered 503, the last 503 answered {:?} after the \
         kill, slowest answer {slowest:?}",
        last_503(&sent).map(|at| at.saturating_sub(killed_at)),
    );
    assert_failover_answers(&sent, killed_at);
    assert_each_payment_settled_once(&gateways, &quote, before, &sent, &logs).await;
}

/// A managed Redis endpoint's failover: one address (a forwarder) in front
/// of a primary and its replica. Under a steady load of paid and free
/// requests over two replicas the primary is SIGKILLed, and 2 s later its
/// replica is promoted (`REPLICAOF NO ONE`) and the address switched to it.
/// Until then answers are 503 with Retry-After (never a 500, never past the
/// store timeout), then normal again without a restart; nothing settles
/// twice and nothing is served unsettled; the logs stay clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_switched_over_behind_one_address_is_a_503_with_retry_after_until_the_switch() {
    const REQUESTS: usize = 200;
    const KILL_AFTER: Duration = Duration::from_secs(2);
    const SWITCH_AFTER_KILL: Duration = Duration::from_secs(2);
    // Every eighth request is free: 25 in all, under the free tier's 30.
    const FREE_EVERY: usize = 8;
    let logs = Logs::capture();
    let mut primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(primary.port());
    let address = Forwarder::start(primary.port()).await;
    let redis = RedisSettings::new(address.url(), unique_prefix("switchover"));
    let gateways = Replicas::start(redis).await;
    let [a, _] = &gateways.replicas;
    let quote = Arc::new(a.post_once(path(Endpoint::Chat), chat(), None).await);
    let before = gateways.balance(&a.payer).await;

    let (mut killed_at, mut switched_at) = (None, None);
    let sent = steady_load(&gateways, &quote, REQUESTS, Some(FREE_EVERY), |now| {
        if killed_at.is_none() && now >= KILL_AFTER {
            primary.stop();
            killed_at = Some(now);
        }
        if let Some(killed) = killed_at
            && switched_at.is_none()
            && now >= killed + SWITCH_AFTER_KILL
        {
            replica.promote();
            address.point_to(Some(replica.port()));
            switched_at = Some(now);
        }
    })
    .await;
    let (killed_at, switched_at) = (killed_at.unwrap(), switched_at.unwrap());

    let unavailable = sent.iter().filter(|one| one.status == 503).count();
    let paid = sent.iter().filter(|one| !one.payment.is_empty()).count();
    let served = sent
        .iter()
        .filter(|one| one.status == 200 && !one.payment.is_empty())
        .count();
    // Normal again: when the last 503 was answered, counted from the switch
    // (zero if none was answered after it), and the first 200 sent after it.
    let recovered = last_503(&sent).map_or(Duration::ZERO, |at| at.saturating_sub(switched_at));
    let first_served = sent
        .iter()
        .filter(|one| one.status == 200 && one.at >= switched_at)
        .map(|one| one.at + one.took - switched_at)
        .min();
    let slowest = sent.iter().map(|one| one.took).max().unwrap();
    eprintln!(
        "switchover test: {REQUESTS} requests ({paid} paid), primary killed at {killed_at:?}, \
         replica promoted and the address switched {:?} later; {served} paid served, \
         {unavailable} answered 503, the last 503 answered {recovered:?} after the switch, \
         the first 200 sent after it answered {first_served:?} after it, slowest answer \
         {slowest:?}",
        switched_at - killed_at,
    );
    assert_failover_answers(&sent, switched_at);
    // A payment served before the kill was settled on the primary and
    // replicated (on loopback well within the 50 ms between requests): its
    // resend is a replay.
    assert_each_payment_settled_once(&gateways, &quote, before, &sent, &logs).await;
}

/// `GATEWAY_REDIS_WAIT_REPLICAS` on a primary with one replica: waiting for
/// one is served and settled; waiting for two (more than there are) is a
/// 503 with Retry-After, nothing served, nothing settled, and the same
/// payment goes through once a deployment asks for what it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_more_replicas_than_acknowledge_is_a_503_and_nothing_is_settled() {
    let primary = RedisServer::start();
    let _replica = RedisServer::start_replica_of(primary.port());
    let prefix = unique_prefix("wait_replicas");
    let settings = |replicas| {
        RedisSettings::new(primary.url(), &prefix)
            .with_wait_replicas(replicas)
            .with_timeout(WAIT_TEST_TIMEOUT)
    };
    wait_replicas_decide(settings(1), settings(2)).await;
}

/// The same on the Redis Cluster (one replica per primary): the `WAIT` goes
/// to the primary of the payment's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_waiting_for_more_replicas_than_acknowledge_is_a_503() {
    let prefix = unique_prefix("cluster_wait_replicas");
    let seeds = shared_cluster_seeds();
    let settings = |replicas| {
        RedisSettings::cluster(&seeds, &prefix)
            .with_wait_replicas(replicas)
            .with_timeout(WAIT_TEST_TIMEOUT)
    };
    wait_replicas_decide(settings(1), settings(2)).await;
}

/// The store timeout of the `WAIT` tests: a replica on a busy test machine
/// may take longer than the default 250 ms to acknowledge (Redis waits half
/// of it for the replicas asked for).
const WAIT_TEST_TIMEOUT: Duration = Duration::from_secs(2);

async fn wait_replicas_decide(enough: RedisSettings, too_many: RedisSettings) {
    let served = Replicas::start(enough).await;
    let refused = Server::start(Config {
        redis: Some(too_many),
        ..Config::default()
    })
    .await;
    let [a, _] = &served.replicas;
    let url = path(Endpoint::Chat);
    let quote = a.post_once(url, chat(), None).await;
    let settled = served.ledger.settlements().await.unwrap();
    let paid = a
        .post_once(url, chat(), Some(&a.sign(&quote, &a.payer)))
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    assert_eq!(served.ledger.settlements().await.unwrap(), settled + 1);

    let payment = refused.sign(&quote, &refused.payer);
    let unreplicated = refused.post_once(url, chat(), Some(&payment)).await;
    assert_payment_rejection(
        Endpoint::Chat,
        &unreplicated,
        ErrorCode::PaymentVerificationUnavailable,
    );
    assert!(unreplicated.header("retry-after").is_some());
    assert_eq!(served.ledger.settlements().await.unwrap(), settled + 1);
    // The claim too few replicas acknowledged was given back: the same
    // payment is payable where the replicas asked for are there.
    let mut resent = None;
    for _ in 0..20 {
        let reply = a.post_once(url, chat(), Some(&payment)).await;
        if reply.status == 200 {
            resent = Some(reply);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        resent.is_some(),
        "the unreplicated claim was never given back"
    );
    assert_eq!(served.ledger.settlements().await.unwrap(), settled + 2);
}

/// A cluster URL list whose first seed does not answer: the gateway starts
/// and serves through the seeds that do (redis-rs tries each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_seed_that_does_not_answer_is_passed_over() {
    let mut seeds = vec![format!("redis://127.0.0.1:{}", free_port())];
    seeds.extend(shared_cluster_seeds());
    let gateways =
        Replicas::start(RedisSettings::cluster(&seeds, unique_prefix("dead_seed"))).await;
    let [a, b] = &gateways.replicas;
    let url = path(Endpoint::Chat);
    let quote = a.post_once(url, chat(), None).await;
    assert_eq!(quote.status, 402, "{}", quote.text());
    let paid = b
        .post_once(url, chat(), Some(&b.sign(&quote, &b.payer)))
        .await;
    assert_eq!(paid.status, 200, "{}", paid.text());
    assert_eq!(gateways.ledger.settlements().await.unwrap(), 1);
}

/// Every line the process logs (a global subscriber at DEBUG, installed
/// once: the replicas log from the runtime's worker threads), from the
/// moment a test asks. Tests running beside it add their lines too, which
/// only makes the checks stricter.
struct Logs {
    from: usize,
}

impl Logs {
    fn captured() -> &'static Captured {
        static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
        CAPTURED.get_or_init(|| {
            let captured = Captured::default();
            tracing::subscriber::set_global_default(captured.subscriber())
                .expect("no other global subscriber in the gateway's tests");
            captured
        })
    }

    fn capture() -> Self {
        Self {
            from: Self::captured().len(),
        }
    }

    fn text(&self) -> String {
        Self::captured().text_from(self.from)
    }

    /// No WARN or ERROR line shows a cluster redirection or a cluster state
    /// (the client handles those), and neither any of `payments` (the
    /// `PAYMENT-SIGNATURE` values sent) nor their signatures appear anywhere.
    fn assert_clean(&self, payments: &[&str]) {
        let text = self.text();
        let problems = ["MOVED", "ASK ", "CROSSSLOT", "CLUSTERDOWN", "TRYAGAIN"];
        let mut warnings = 0;
        for line in text.lines() {
            if !(line.contains(" WARN ") || line.contains(" ERROR ")) {
                continue;
            }
            warnings += 1;
            for problem in problems {
                assert!(
                    !line.contains(problem),
                    "{problem} reached a log line: {line}"
                );
            }
        }
        for payment in payments {
            let payload: walletgate::x402::wire::PaymentPayload =
                walletgate::x402::wire::codec::decode(payment.as_bytes()).unwrap();
            let payload = serde_json::to_value(&payload).unwrap();
            let signature = payload["payload"]["signature"].as_str().unwrap();
            for secret in [*payment, signature] {
                assert!(secret.len() >= 32);
                assert!(
                    !text.contains(secret),
                    "a payment's signature reached the log"
                );
            }
        }
        eprintln!(
            "logs: {} lines captured, {warnings} at WARN or ERROR, none with a cluster \
             redirection or a secret",
            text.lines().count()
        );
    }
}

//! `GATEWAY_METRICS_LISTEN`'s page after a paid, a refused and a free
//! request: the library's counters and histograms as Prometheus text, with
//! real `_bucket` series and no payer in any label.

use http::StatusCode;

use crate::metrics_endpoint::{recorder, router, total};
use crate::request::Endpoint;
use crate::tests::{Server, body, path, serve};

const PAID_MODEL: &str = "anthropic/claude-sonnet-4.6";
const FREE_MODEL: &str = "nvidia/nemotron-super";

#[tokio::test]
async fn metrics_count_a_paid_a_refused_and_a_free_request() {
    // The process's recorder first: what happens before it is not counted.
    let handle = recorder();
    let server = Server::start(crate::config::Config::default()).await;
    let chat = path(Endpoint::Chat);

    let paid = server
        .post(chat, &body(Endpoint::Chat, PAID_MODEL, "hi", false))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text());
    let paid_body = body(Endpoint::Chat, PAID_MODEL, "hi", false).to_string();
    let refused = server
        .post_once(chat, paid_body, Some("bm90IGpzb24="))
        .await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
    let free = server
        .post_once(
            chat,
            body(Endpoint::Chat, FREE_MODEL, "hi", false).to_string(),
            None,
        )
        .await;
    assert_eq!(free.status, StatusCode::OK, "{}", free.text());

    let metrics = serve(router(handle)).await;
    let request = http::Request::get(format!("http://{metrics}/metrics"))
        .body(Default::default())
        .unwrap();
    let page = server.send(request).await;
    assert_eq!(page.status, StatusCode::OK);
    let page = page.text();
    let at_least_one = |name: &str, labels: &[(&str, &str)]| {
        assert!(
            total(&page, name, labels) >= 1.0,
            "{name} {labels:?} in:\n{page}"
        );
    };
    at_least_one("walletgate_x402_settlements_total", &[]);
    at_least_one("walletgate_x402_payments_total", &[("outcome", "quoted")]);
    at_least_one("walletgate_x402_payments_total", &[("outcome", "verified")]);
    at_least_one("walletgate_x402_payments_total", &[("outcome", "settled")]);
    at_least_one(
        "walletgate_x402_refusals_total",
        &[("code", "PAYMENT_INVALID")],
    );
    at_least_one(
        "walletgate_free_tier_requests_total",
        &[("outcome", "admitted")],
    );
    // Every stage of a paid request, in order.
    for stage in ["claim", "verify", "inner", "settle"] {
        at_least_one(
            &format!("walletgate_x402_{stage}_duration_seconds_count"),
            &[],
        );
    }
    // A real histogram: cumulative buckets up to +Inf, as configured.
    at_least_one(
        "walletgate_x402_settle_duration_seconds_bucket",
        &[("le", "+Inf")],
    );
    assert!(
        page.contains("walletgate_x402_claim_duration_seconds_bucket{le=\"0.0001\"}"),
        "{page}"
    );
    assert!(page.contains("# TYPE walletgate_x402_settle_duration_seconds histogram"));
    // Labels never name a payer.
    let payer = server.payer.address();
    assert!(
        !page.to_lowercase().contains(&payer.to_lowercase()[2..]),
        "{page}"
    );
}

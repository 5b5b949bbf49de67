//! Who gets limited: peers, trusted proxy chains, IPv6 prefixes, wiring faults.
#![cfg(feature = "free-tier")]

mod free_tier_support;
use free_tier_support as support;
use support::{Body, echo_client_ip, json, text};

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use tower::{Layer, ServiceExt, service_fn};
use walletgate::body::ResponseBody;
use walletgate::clock::FakeClock;
use walletgate::envelope::GatewayError;
use walletgate::free_tier::{
    ClientIpError, ClientIpResolver, ForwardedHeader, FreeTierLimitLayer, FreeTierQuotas,
    InMemoryLimiter, TrustedProxies,
};

type Predicate = fn(&Request<Body>) -> bool;

fn every_request_is_free(_: &Request<Body>) -> bool {
    true
}

fn limiter() -> InMemoryLimiter {
    InMemoryLimiter::new_with_clock(
        FreeTierQuotas::default(),
        Arc::new(FakeClock::at_unix_secs(1_800_000_000)),
    )
}

fn layer(resolver: ClientIpResolver) -> FreeTierLimitLayer<Predicate, InMemoryLimiter> {
    FreeTierLimitLayer::new(every_request_is_free as Predicate)
        .with_store(limiter())
        .with_client_ip(resolver)
}

fn behind_proxies(header: ForwardedHeader) -> ClientIpResolver {
    ClientIpResolver::new()
        .with_trusted_proxies(TrustedProxies::from_cidrs(["10.0.0.0/8", "fd00::/8"]).unwrap())
        .with_forwarded_header(header)
}

fn request(peer: Option<&str>, headers: &[(&str, &str)]) -> Request<Body> {
    support::request("/v1/chat/completions", peer, headers)
}

async fn send(
    layer: &FreeTierLimitLayer<Predicate, InMemoryLimiter>,
    request: Request<Body>,
) -> Response<ResponseBody<Body>> {
    layer
        .layer(service_fn(echo_client_ip))
        .oneshot(request)
        .await
        .unwrap()
}

#[tokio::test]
async fn spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let layer = layer(behind_proxies(ForwardedHeader::XForwardedFor));
    for i in 0..30 {
        let spoofed = format!("192.0.2.{i}");
        let response = send(
            &layer,
            request(Some("203.0.113.50:4000"), &[("x-forwarded-for", &spoofed)]),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(text(response).await, "203.0.113.50");
    }
    // A fresh spoofed address does not buy a fresh bucket.
    let response = send(
        &layer,
        request(
            Some("203.0.113.50:4000"),
            &[("x-forwarded-for", "192.0.2.99")],
        ),
    )
    .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(layer.store().len(), 1);
}

#[tokio::test]
async fn trusted_proxy_chain_resolves_to_the_right_most_untrusted_hop() {
    let layer = layer(behind_proxies(ForwardedHeader::XForwardedFor));
    // Client-written garbage on the left, then the client as the edge proxy
    // saw it, then an inner trusted proxy; the peer is the last proxy.
    let response = send(
        &layer,
        request(
            Some("10.0.0.2:443"),
            &[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.5")],
        ),
    )
    .await;
    assert_eq!(text(response).await, "198.51.100.7");
}

#[tokio::test]
async fn clients_behind_one_proxy_get_their_own_buckets_and_cannot_escape_them() {
    let layer = layer(behind_proxies(ForwardedHeader::XForwardedFor));
    for i in 0..30 {
        // The client prepends a different fake hop every time.
        let chain = format!("192.0.2.{i}, 198.51.100.7, 10.0.0.5");
        let response = send(
            &layer,
            request(Some("10.0.0.2:443"), &[("x-forwarded-for", &chain)]),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    let limited = send(
        &layer,
        request(
            Some("10.0.0.2:443"),
            &[("x-forwarded-for", "10.1.1.1, 198.51.100.7, 10.0.0.5")],
        ),
    )
    .await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let neighbour = send(
        &layer,
        request(
            Some("10.0.0.2:443"),
            &[("x-forwarded-for", "198.51.100.8, 10.0.0.5")],
        ),
    )
    .await;
    assert_eq!(neighbour.status(), StatusCode::OK);
    assert_eq!(text(neighbour).await, "198.51.100.8");
}

#[tokio::test]
async fn rfc_7239_forwarded_through_an_ipv6_proxy() {
    let layer = layer(behind_proxies(ForwardedHeader::Forwarded));
    let response = send(
        &layer,
        request(
            Some("[fd00::2]:443"),
            &[
                ("x-forwarded-for", "192.0.2.1"),
                (
                    "forwarded",
                    "for=192.0.2.1, for=\"[2001:db8:cafe::17]:4711\";proto=https, for=\"[fd00::9]\"",
                ),
            ],
        ),
    )
    .await;
    assert_eq!(text(response).await, "2001:db8:cafe::17");
}

#[tokio::test]
async fn two_ipv6_addresses_in_one_slash_64_share_a_bucket() {
    let layer = layer(ClientIpResolver::new());
    for i in 0..30u32 {
        // Alternate between two interface identifiers of one /64.
        let peer = if i.is_multiple_of(2) {
            "[2001:db8:1:2::1]:5000"
        } else {
            "[2001:db8:1:2:abcd:ef01:2345:6789]:5000"
        };
        assert_eq!(
            send(&layer, request(Some(peer), &[])).await.status(),
            StatusCode::OK
        );
    }
    let refused = send(&layer, request(Some("[2001:db8:1:2::ffff]:1"), &[])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let other_subnet = send(&layer, request(Some("[2001:db8:1:3::1]:1"), &[])).await;
    assert_eq!(other_subnet.status(), StatusCode::OK);
    assert_eq!(layer.store().len(), 2);
}

#[tokio::test]
async fn missing_peer_address_is_a_500_naming_the_wiring_fault() {
    let layer = layer(ClientIpResolver::new());
    let response = send(
        &layer,
        request(None, &[("x-forwarded-for", "198.51.100.7")]),
    )
    .await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        response.extensions().get::<ClientIpError>(),
        Some(&ClientIpError::MissingPeerAddr)
    );
    assert!(response.extensions().get::<GatewayError>().is_some());
    let body = json(response).await;
    assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("ConnectInfo<SocketAddr>"), "{message}");
    // Nothing was counted for anyone.
    assert!(layer.store().is_empty());
}

/// A proxy passes on the header it was sent: a hop that is no address is
/// the request's fault (400 with its own code), never a 500.
#[tokio::test]
async fn malformed_hop_from_a_trusted_proxy_is_a_400() {
    let layer = layer(behind_proxies(ForwardedHeader::XForwardedFor));
    let response = send(
        &layer,
        request(
            Some("10.0.0.2:443"),
            &[("x-forwarded-for", "198.51.100.7, garbage")],
        ),
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = json(response).await;
    assert_eq!(body["error"]["code"], "INVALID_FORWARDED_HEADER");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(layer.store().is_empty());
}

#[cfg(feature = "axum")]
mod with_axum {
    use super::*;
    use std::net::SocketAddr;

    use axum::Router;
    use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
    use axum::routing::post;
    use http_body_util::BodyExt;
    use walletgate::free_tier::ClientIp;

    fn router(is_free: fn(&Request<axum::body::Body>) -> bool) -> Router {
        let layer = FreeTierLimitLayer::new(is_free).with_store(limiter());
        Router::new()
            .route(
                "/v1/chat/completions",
                post(|ClientIp(ip): ClientIp| async move { ip.to_string() }),
            )
            .layer(layer)
    }

    fn post_chat() -> Request<axum::body::Body> {
        Request::post("/v1/chat/completions")
            .body(axum::body::Body::empty())
            .unwrap()
    }

    async fn body_text(response: axum::response::Response) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn mock_connect_info_feeds_the_limiter_and_the_extractor() {
        let app = router(|_| true).layer(MockConnectInfo(SocketAddr::from(([198, 51, 100, 9], 1))));
        for _ in 0..30 {
            let response = app.clone().oneshot(post_chat()).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(body_text(response).await, "198.51.100.9");
        }
        let refused = app.oneshot(post_chat()).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    }

    #[tokio::test]
    async fn connect_info_extension_is_the_peer() {
        let app = router(|_| true);
        let mut request = post_chat();
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([203, 0, 113, 4], 9))));
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(body_text(response).await, "203.0.113.4");
    }

    #[tokio::test]
    async fn client_ip_extractor_without_the_layer_value_is_a_500() {
        // Not free: the layer passes it through and inserts no ClientIp.
        let app = router(|_| false);
        let response = app.oneshot(post_chat()).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let text = body_text(response).await;
        assert!(text.contains("ClientIp is missing"), "{text}");
    }
}

//! Arbitrary forwarding headers from arbitrary peers, through
//! `ClientIpResolver` and the whole `FreeTierLimitLayer`.
//!
//! Input: one byte choosing the header kind and the peer (trusted proxy or
//! not, IPv4 or IPv6), then header lines separated by LF. The resolver must
//! never panic; an untrusted peer is always the client, whatever the headers
//! say; X-Forwarded-For as one line or split into one line per hop resolves
//! the same; the layer answers 200, 429 or (for a malformed header from a
//! trusted proxy only) 400 `INVALID_FORWARDED_HEADER`, never waits.
#![no_main]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tower_layer::Layer;
use tower_service::Service;
use walletgate::clock::FakeClock;
use walletgate::free_tier::{
    ClientIpResolver, ForwardedHeader, FreeTierLimitLayer, FreeTierQuotas, InMemoryLimiter,
    KeyPrefixes, TrustedProxies,
};
use walletgate_fuzz::ready;

type Body = Full<Bytes>;
type Predicate = fn(&Request<Body>) -> bool;

const KINDS: [ForwardedHeader; 3] = [
    ForwardedHeader::XForwardedFor,
    ForwardedHeader::Forwarded,
    ForwardedHeader::XRealIp,
];
const PEERS: [&str; 4] = ["10.1.2.3", "fd00::7", "198.51.100.9", "2001:db8:1::9"];

fn resolver(kind: ForwardedHeader) -> ClientIpResolver {
    ClientIpResolver::new()
        .with_trusted_proxies(TrustedProxies::from_cidrs(["10.0.0.0/8", "fd00::/8"]).unwrap())
        .with_forwarded_header(kind)
}

fn every_request_is_free(_request: &Request<Body>) -> bool {
    true
}

fn layers() -> &'static [FreeTierLimitLayer<Predicate>; 3] {
    static LAYERS: OnceLock<[FreeTierLimitLayer<Predicate>; 3]> = OnceLock::new();
    LAYERS.get_or_init(|| {
        KINDS.map(|kind| {
            let store = InMemoryLimiter::new_with_clock(
                FreeTierQuotas::new(3, 5).unwrap(),
                Arc::new(FakeClock::at_unix_secs(1_800_000_000)),
            );
            FreeTierLimitLayer::new(every_request_is_free as Predicate)
                .with_store(store)
                .with_client_ip(resolver(kind))
        })
    })
}

fn request(peer: IpAddr, name: &http::HeaderName, lines: &[HeaderValue]) -> Request<Body> {
    let mut request = Request::post("/v1/chat/completions")
        .body(Body::default())
        .unwrap();
    for line in lines {
        request.headers_mut().append(name, line.clone());
    }
    request.extensions_mut().insert(SocketAddr::new(peer, 443));
    request
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let kind_index = usize::from(choice % 3);
    let kind = KINDS[kind_index];
    let peer: IpAddr = PEERS[usize::from(choice / 3 % 4)].parse().unwrap();
    let lines: Vec<HeaderValue> = rest
        .split(|&b| b == b'\n')
        .filter_map(|line| HeaderValue::from_bytes(line).ok())
        .collect();
    let resolver = resolver(kind);
    let name = kind.name();
    let req = request(peer, &name, &lines);
    let resolved = resolver.resolve(&req);
    let malformed = resolved.is_err();
    if !resolver.trusted_proxies().contains(peer) {
        assert_eq!(
            resolved.as_ref().ok(),
            Some(&peer),
            "an untrusted peer chose its address"
        );
    }
    if let Ok(client) = &resolved {
        let client = *client;
        let key = KeyPrefixes::default().key(client);
        assert!(key.network().is_ipv4() == client.to_canonical().is_ipv4());
    }
    if kind == ForwardedHeader::XForwardedFor {
        // A list split over several lines is the same list (RFC 9110 §5.3).
        let texts: Option<Vec<&str>> = lines.iter().map(|line| line.to_str().ok()).collect();
        if let Some(texts) = texts {
            let hops: Vec<&str> = texts
                .iter()
                .filter(|text| !text.trim().is_empty())
                .flat_map(|text| text.split(','))
                .collect();
            let split: Option<Vec<HeaderValue>> = hops
                .iter()
                .map(|hop| HeaderValue::from_str(hop).ok())
                .collect();
            // An empty hop would be dropped as an empty line: skip those.
            if let Some(split) = split.filter(|_| hops.iter().all(|hop| !hop.trim().is_empty())) {
                let again = resolver.resolve(&request(peer, &name, &split));
                assert_eq!(again.ok(), resolved.as_ref().ok().copied());
            }
        }
    }
    let mut service = layers()[kind_index].layer(Answer);
    let response = ready(service.call(req)).unwrap();
    let status = response.status().as_u16();
    match status {
        200 | 429 => assert!(!malformed),
        400 => assert!(malformed),
        other => panic!("free tier answered {other}"),
    }
});

/// The free handler: always ready, answers at once.
#[derive(Clone)]
struct Answer;

impl Service<Request<Body>> for Answer {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<Body>) -> Self::Future {
        std::future::ready(Ok(Response::new(Body::default())))
    }
}

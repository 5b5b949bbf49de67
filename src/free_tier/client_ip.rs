//! Who is the client: the socket peer, or the address a trusted proxy vouches for.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use http::header::{FORWARDED, HeaderName};
use http::{Extensions, HeaderMap, Request, request::Parts};

use super::ConfigError;
use crate::envelope::MissingExtension;

/// The resolved client address of a request, as a request extension.
///
/// [`FreeTierLimitLayer`](super::FreeTierLimitLayer) inserts it into every
/// free request it lets through; other layers can resolve their own with
/// [`ClientIpResolver::resolve`]. Handlers read it as an extractor; when it is
/// missing the extractor answers 500 naming the wiring fault, since that is a
/// server bug, never a client error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientIp(pub IpAddr);

impl fmt::Display for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a request's client address could not be resolved.
///
/// The limiter never falls back to a shared bucket: a missing peer address is
/// a wiring fault (500 `INTERNAL_ERROR`), a malformed forwarded hop the
/// request's (400 `INVALID_FORWARDED_HEADER`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientIpError {
    /// No peer address in the request extensions.
    MissingPeerAddr,
    /// A trusted proxy forwarded a hop that is not an IP address.
    MalformedForwardingHeader {
        /// The header that was read.
        header: HeaderName,
    },
}

impl fmt::Display for ClientIpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingPeerAddr => f.write_str(
                "no peer address in the request extensions: serve the app with \
                 axum's `into_make_service_with_connect_info::<SocketAddr>()` \
                 (ConnectInfo<SocketAddr>, walletgate feature \"axum\") or insert \
                 the connection's `SocketAddr` as a request extension",
            ),
            Self::MalformedForwardingHeader { header } => write!(
                f,
                "a trusted proxy forwarded a `{header}` hop that is not an IP address"
            ),
        }
    }
}

impl std::error::Error for ClientIpError {}

/// An IP network in CIDR notation, e.g. `10.0.0.0/8` or `2001:db8::/32`.
///
/// Host bits are cleared on parse (`10.1.2.3/8` is `10.0.0.0/8`); a bare
/// address is a single-host network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpCidr {
    network: IpAddr,
    prefix_len: u8,
}

impl IpCidr {
    /// The network `address/prefix_len`.
    pub fn new(address: IpAddr, prefix_len: u8) -> Result<Self, ConfigError> {
        let address = address.to_canonical();
        let max = max_prefix_len(address);
        if prefix_len > max {
            return Err(ConfigError::PrefixLength {
                prefix_len,
                max_prefix_len: max,
            });
        }
        Ok(Self {
            network: mask(address, prefix_len),
            prefix_len,
        })
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// Whether `address` lies in this network (IPv4-mapped IPv6 addresses
    /// count as IPv4).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        address.is_ipv4() == self.network.is_ipv4()
            && mask(address, self.prefix_len) == self.network
    }
}

impl FromStr for IpCidr {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::InvalidCidr(text.to_owned());
        let (address, prefix_len) = match text.trim().split_once('/') {
            Some((address, len)) => {
                let address: IpAddr = address.parse().map_err(|_| invalid())?;
                let len: u8 = len.parse().map_err(|_| invalid())?;
                (address, len)
            }
            None => {
                let address: IpAddr = text.trim().parse().map_err(|_| invalid())?;
                (address, max_prefix_len(address.to_canonical()))
            }
        };
        Self::new(address, prefix_len)
    }
}

impl fmt::Display for IpCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

fn max_prefix_len(address: IpAddr) -> u8 {
    if address.is_ipv4() { 32 } else { 128 }
}

/// Clears the host bits of `address` beyond `prefix_len`.
pub(crate) fn mask(address: IpAddr, prefix_len: u8) -> IpAddr {
    // `checked_shl` by the full width (prefix 0) yields None: nothing is kept.
    match address {
        IpAddr::V4(v4) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(prefix_len.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & keep))
        }
        IpAddr::V6(v6) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(prefix_len.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & keep))
        }
    }
}

/// The networks whose forwarding headers are believed.
///
/// Empty by default: the socket peer is the client and every forwarding
/// header is ignored, since any client can send one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpCidr>,
}

impl TrustedProxies {
    /// No trusted proxies.
    pub fn none() -> Self {
        Self::default()
    }

    /// Trusts every network in `cidrs` (`"10.0.0.0/8"`, `"::1"`, …).
    pub fn from_cidrs<I>(cidrs: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let networks = cidrs
            .into_iter()
            .map(|cidr| cidr.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self { networks })
    }

    /// Adds one network.
    pub fn with_network(mut self, network: IpCidr) -> Self {
        self.networks.push(network);
        self
    }

    /// The trusted networks.
    pub fn networks(&self) -> &[IpCidr] {
        &self.networks
    }

    /// Whether `address` is a trusted proxy.
    pub fn contains(&self, address: IpAddr) -> bool {
        self.networks.iter().any(|net| net.contains(address))
    }
}

/// Which forwarding header the trusted proxies write.
///
/// Only one is read: a proxy that maintains `X-Forwarded-For` passes a
/// client's own `Forwarded` header through untouched, so reading any header
/// the proxy does not own would let the client choose its address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
    /// `X-Real-IP: client` (one hop).
    XRealIp,
}

impl ForwardedHeader {
    /// The header's name.
    pub fn name(self) -> HeaderName {
        match self {
            Self::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            Self::Forwarded => FORWARDED,
            Self::XRealIp => HeaderName::from_static("x-real-ip"),
        }
    }
}

/// Resolves a request's client address.
///
/// * The socket peer (axum's `ConnectInfo<SocketAddr>` with the `axum`
///   feature, its `MockConnectInfo<SocketAddr>` in tests, or a plain
///   `SocketAddr` extension) is the client, unless it is a
///   [trusted proxy](TrustedProxies).
/// * Behind trusted proxies, the hops listed in the configured
///   [`ForwardedHeader`] are read right to left, skipping trusted proxies:
///   the first untrusted hop is the client (the right-most untrusted address,
///   the only one no client can forge). When every hop is trusted, the
///   left-most is the client.
/// * No peer address is a wiring fault ([`ClientIpError::MissingPeerAddr`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientIpResolver {
    trusted: TrustedProxies,
    header: ForwardedHeader,
}

impl ClientIpResolver {
    /// Peer address only; every forwarding header is ignored.
    pub fn new() -> Self {
        Self::default()
    }

    /// Believes forwarding headers sent by `trusted` peers.
    pub fn with_trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.trusted = trusted;
        self
    }

    /// Reads `header` (default `X-Forwarded-For`) from trusted proxies.
    pub fn with_forwarded_header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// The trusted proxies.
    pub fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted
    }

    /// The client address of `request`.
    pub fn resolve<B>(&self, request: &Request<B>) -> Result<IpAddr, ClientIpError> {
        self.resolve_from(request.extensions(), request.headers())
    }

    /// The client address from a request's extensions and headers.
    pub fn resolve_from(
        &self,
        extensions: &Extensions,
        headers: &HeaderMap,
    ) -> Result<IpAddr, ClientIpError> {
        let peer = peer_addr(extensions)
            .ok_or(ClientIpError::MissingPeerAddr)?
            .to_canonical();
        if !self.trusted.contains(peer) {
            return Ok(peer);
        }
        let name = self.header.name();
        let mut hops: Vec<Option<IpAddr>> = Vec::new();
        for value in headers.get_all(&name) {
            match value.to_str() {
                // An empty field lists no hop; an empty hop inside a list is malformed.
                Ok(text) if text.trim().is_empty() => {}
                Ok(text) => match self.header {
                    ForwardedHeader::XForwardedFor => {
                        hops.extend(text.split(',').map(parse_node));
                    }
                    ForwardedHeader::Forwarded => {
                        hops.extend(split_unquoted(text, ',').map(forwarded_for));
                    }
                    ForwardedHeader::XRealIp => hops.push(parse_node(text)),
                },
                Err(_) => hops.push(None),
            }
        }
        let mut leftmost = peer;
        for hop in hops.iter().rev() {
            let hop = hop
                .ok_or_else(|| ClientIpError::MalformedForwardingHeader {
                    header: name.clone(),
                })?
                .to_canonical();
            if !self.trusted.contains(hop) {
                return Ok(hop);
            }
            leftmost = hop;
        }
        Ok(leftmost)
    }
}

/// The connection's peer address, from whichever extension the server set.
fn peer_addr(extensions: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    {
        use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
        if let Some(ConnectInfo(addr)) = extensions.get::<ConnectInfo<SocketAddr>>() {
            return Some(addr.ip());
        }
        if let Some(MockConnectInfo(addr)) = extensions.get::<MockConnectInfo<SocketAddr>>() {
            return Some(addr.ip());
        }
    }
    extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

/// One hop: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    text.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|inner| inner.parse::<Ipv6Addr>().ok())
        .map(IpAddr::V6)
}

/// The `for=` node of one RFC 7239 element (`for=…;proto=…;by=…`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    split_unquoted(element, ';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| parse_node(value))
            .flatten()
    })
}

/// Splits on `separator` outside double-quoted strings.
fn split_unquoted(text: &str, separator: char) -> impl Iterator<Item = &str> {
    let mut in_quotes = false;
    text.split(move |c: char| {
        if c == '"' {
            in_quotes = !in_quotes;
        }
        c == separator && !in_quotes
    })
}

impl<S: Send + Sync> axum_core::extract::FromRequestParts<S> for ClientIp {
    type Rejection = MissingExtension;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<ClientIp>().copied().ok_or_else(|| {
            MissingExtension::gateway::<Self>(
                "FreeTierLimitLayer (or ClientIpResolver::resolve)",
                parts,
            )
        })
    }
}

impl<S: Send + Sync> axum_core::extract::OptionalFromRequestParts<S> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<ClientIp>().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(peer: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder();
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut request = builder.body(()).unwrap();
        let peer: SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(peer);
        request
    }

    fn behind(cidrs: &[&str], header: ForwardedHeader) -> ClientIpResolver {
        ClientIpResolver::new()
            .with_trusted_proxies(TrustedProxies::from_cidrs(cidrs).unwrap())
            .with_forwarded_header(header)
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn cidr_parse_clears_host_bits_and_matches() {
        let net: IpCidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(net.to_string(), "10.0.0.0/8");
        assert!(net.contains(ip("10.200.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(net.contains(ip("::ffff:10.0.0.9")));
        let v6: IpCidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let host: IpCidr = "192.0.2.7".parse().unwrap();
        assert_eq!(host.prefix_len(), 32);
        let all: IpCidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.1")));
    }

    #[test]
    fn cidr_parse_rejects_garbage_and_long_prefixes() {
        assert_eq!(
            "10.0.0.0/33".parse::<IpCidr>(),
            Err(ConfigError::PrefixLength {
                prefix_len: 33,
                max_prefix_len: 32
            })
        );
        assert!(matches!(
            "not-an-ip".parse::<IpCidr>(),
            Err(ConfigError::InvalidCidr(_))
        ));
        assert!(TrustedProxies::from_cidrs(["10.0.0.0/8", "x/1"]).is_err());
    }

    #[test]
    fn missing_peer_is_a_wiring_fault() {
        let request = Request::new(());
        let err = ClientIpResolver::new().resolve(&request).unwrap_err();
        assert_eq!(err, ClientIpError::MissingPeerAddr);
        assert!(err.to_string().contains("ConnectInfo<SocketAddr>"));
    }

    #[test]
    fn untrusted_peer_headers_are_ignored() {
        let resolver = behind(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let request = request("203.0.113.9:5000", &[("x-forwarded-for", "198.51.100.1")]);
        assert_eq!(resolver.resolve(&request), Ok(ip("203.0.113.9")));
    }

    #[test]
    fn xff_right_most_untrusted_wins() {
        let resolver = behind(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let request = request(
            "10.0.0.2:443",
            &[
                ("x-forwarded-for", "1.1.1.1, 198.51.100.7"),
                ("x-forwarded-for", "10.0.0.5"),
            ],
        );
        assert_eq!(resolver.resolve(&request), Ok(ip("198.51.100.7")));
    }

    #[test]
    fn all_trusted_hops_resolve_to_left_most() {
        let resolver = behind(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let request = request("10.0.0.2:443", &[("x-forwarded-for", "10.9.9.9, 10.0.0.5")]);
        assert_eq!(resolver.resolve(&request), Ok(ip("10.9.9.9")));
        let bare = request_without_header("10.0.0.2:443");
        assert_eq!(resolver.resolve(&bare), Ok(ip("10.0.0.2")));
    }

    fn request_without_header(peer: &str) -> Request<()> {
        request(peer, &[])
    }

    #[test]
    fn forwarded_header_quoted_ipv6_with_port() {
        let resolver = behind(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let request = request(
            "10.0.0.2:443",
            &[(
                "forwarded",
                "for=192.0.2.60;proto=http, For=\"[2001:db8:cafe::17]:4711\";by=10.0.0.2",
            )],
        );
        assert_eq!(resolver.resolve(&request), Ok(ip("2001:db8:cafe::17")));
    }

    #[test]
    fn x_real_ip_from_trusted_peer() {
        let resolver = behind(&["127.0.0.1"], ForwardedHeader::XRealIp);
        let request = request("127.0.0.1:80", &[("x-real-ip", "198.51.100.3")]);
        assert_eq!(resolver.resolve(&request), Ok(ip("198.51.100.3")));
    }

    #[test]
    fn other_headers_than_the_configured_one_are_ignored() {
        let resolver = behind(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let request = request(
            "10.0.0.2:443",
            &[
                ("forwarded", "for=1.1.1.1"),
                ("x-real-ip", "2.2.2.2"),
                ("x-forwarded-for", "198.51.100.7"),
            ],
        );
        assert_eq!(resolver.resolve(&request), Ok(ip("198.51.100.7")));
    }

    #[test]
    fn garbage_from_a_trusted_hop_is_an_error_not_a_shared_bucket() {
        let resolver = behind(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let broken = request("10.0.0.2:443", &[("x-forwarded-for", "1.1.1.1, unknown")]);
        assert!(matches!(
            resolver.resolve(&broken),
            Err(ClientIpError::MalformedForwardingHeader { .. })
        ));
        // Garbage left of the client is the client's own business.
        let request = request("10.0.0.2:443", &[("x-forwarded-for", "junk, 198.51.100.7")]);
        assert_eq!(resolver.resolve(&request), Ok(ip("198.51.100.7")));
    }

    #[test]
    fn empty_forwarding_field_lists_no_hop() {
        let resolver = behind(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let request = request("10.0.0.2:443", &[("x-forwarded-for", " ")]);
        assert_eq!(resolver.resolve(&request), Ok(ip("10.0.0.2")));
        let mut hole = request_without_header("10.0.0.2:443");
        hole.headers_mut()
            .insert("x-forwarded-for", "198.51.100.1,,10.0.0.3".parse().unwrap());
        assert!(resolver.resolve(&hole).is_err());
    }

    #[test]
    fn ipv4_mapped_peer_is_canonical() {
        let request = request("[::ffff:203.0.113.9]:80", &[]);
        assert_eq!(
            ClientIpResolver::new().resolve(&request),
            Ok(ip("203.0.113.9"))
        );
    }

    #[test]
    fn nodes_parse_in_every_spelling() {
        assert_eq!(parse_node(" 1.2.3.4:80 "), Some(ip("1.2.3.4")));
        assert_eq!(parse_node("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("\"[2001:db8::1]:443\""), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("_hidden"), None);
    }

    #[test]
    fn mask_keeps_prefix_bits() {
        assert_eq!(mask(ip("203.0.113.77"), 24), ip("203.0.113.0"));
        assert_eq!(mask(ip("203.0.113.77"), 0), ip("0.0.0.0"));
        assert_eq!(mask(ip("2001:db8:1:2:3:4:5:6"), 64), ip("2001:db8:1:2::"));
        assert_eq!(
            mask(ip("2001:db8:1:2:3:4:5:6"), 128),
            ip("2001:db8:1:2:3:4:5:6")
        );
    }
}

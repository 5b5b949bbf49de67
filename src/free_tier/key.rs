//! The limiter key: a client address cut to its network prefix.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use super::ConfigError;
use super::client_ip::mask;

/// How much of a client address identifies one client.
///
/// IPv6 clients are keyed by their /64 by default: one subscriber usually
/// holds a whole /64 and can rotate through its 2^64 addresses, so per-address
/// buckets would neither limit them nor bound memory. IPv4 clients are keyed by
/// the full address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyPrefixes {
    ipv4_prefix_len: u8,
    ipv6_prefix_len: u8,
}

impl Default for KeyPrefixes {
    fn default() -> Self {
        Self {
            ipv4_prefix_len: 32,
            ipv6_prefix_len: 64,
        }
    }
}

impl KeyPrefixes {
    /// Keys IPv4 clients by their `/ipv4_prefix_len` (1..=32) and IPv6 clients
    /// by their `/ipv6_prefix_len` (1..=128).
    pub fn new(ipv4_prefix_len: u8, ipv6_prefix_len: u8) -> Result<Self, ConfigError> {
        for (prefix_len, max_prefix_len) in [(ipv4_prefix_len, 32), (ipv6_prefix_len, 128)] {
            // A zero prefix would put every client into one shared bucket.
            if prefix_len == 0 || prefix_len > max_prefix_len {
                return Err(ConfigError::PrefixLength {
                    prefix_len,
                    max_prefix_len,
                });
            }
        }
        Ok(Self {
            ipv4_prefix_len,
            ipv6_prefix_len,
        })
    }

    /// The IPv4 prefix length.
    pub fn ipv4_prefix_len(&self) -> u8 {
        self.ipv4_prefix_len
    }

    /// The IPv6 prefix length.
    pub fn ipv6_prefix_len(&self) -> u8 {
        self.ipv6_prefix_len
    }

    /// The key of `client`.
    pub fn key(&self, client: IpAddr) -> ClientKey {
        let network = match client.to_canonical() {
            v4 @ IpAddr::V4(_) => mask(v4, self.ipv4_prefix_len),
            v6 @ IpAddr::V6(_) => mask(v6, self.ipv6_prefix_len),
        };
        let bits = match network {
            // IPv4 lives in the IPv4-mapped range, which canonical IPv6 keys
            // never reach, so the two families cannot collide.
            IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
            IpAddr::V6(v6) => u128::from(v6),
        };
        ClientKey(bits)
    }
}

/// One rate-limited client: its address cut to the configured prefix.
///
/// 16 bytes; [`network`](Self::network) gives it back as an address, for a
/// store that needs a printable key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientKey(u128);

impl ClientKey {
    /// The network address of the key (host bits cleared).
    pub fn network(&self) -> IpAddr {
        Ipv6Addr::from(self.0).to_canonical()
    }

    /// The key as 16 big-endian bytes (IPv4 in its IPv4-mapped form).
    pub fn to_bytes(&self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.network().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> ClientKey {
        KeyPrefixes::default().key(text.parse().unwrap())
    }

    #[test]
    fn one_ipv6_slash_64_is_one_key() {
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff:1:2:3"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("2001:db8:1:2::1").to_string(), "2001:db8:1:2::");
    }

    #[test]
    fn ipv4_is_keyed_per_address_and_never_collides_with_ipv6() {
        assert_ne!(key("203.0.113.1"), key("203.0.113.2"));
        assert_eq!(key("203.0.113.1"), key("::ffff:203.0.113.1"));
        assert_eq!(key("203.0.113.1").to_string(), "203.0.113.1");
        let wide = KeyPrefixes::new(32, 128).unwrap();
        assert_ne!(
            wide.key("203.0.113.1".parse().unwrap()),
            wide.key("::203.0.113.1".parse().unwrap())
        );
    }

    #[test]
    fn prefixes_are_validated() {
        assert!(KeyPrefixes::new(0, 64).is_err());
        assert!(KeyPrefixes::new(32, 129).is_err());
        let p = KeyPrefixes::new(24, 56).unwrap();
        assert_eq!(
            p.key("198.51.100.7".parse().unwrap()),
            p.key("198.51.100.200".parse().unwrap())
        );
        assert_eq!(
            p.key("2001:db8:0:ff00::1".parse().unwrap()),
            p.key("2001:db8:0:ff42::1".parse().unwrap())
        );
    }
}

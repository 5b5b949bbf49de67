//! Configuration errors of the x402 module.

use std::fmt;

use super::wire::ValueError;

/// Why an x402 configuration was refused (at build time, never per request).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value (address, network, amount) is malformed.
    Value(ValueError),
    /// An EVM offer's network is not `eip155:<chain id>`.
    NotEvmNetwork(String),
    /// `maxTimeoutSeconds` must be positive.
    ZeroTimeout,
    /// The layer has no payment option to offer.
    NoPaymentOptions,
    /// The layer has no pricing.
    MissingPricing,
    /// The layer has no facilitator.
    MissingFacilitator,
    /// A base URL is not `http(s)://host[:port][/path]`.
    InvalidBaseUrl(String),
    /// The layer has no public base URL for `resource.url` and was not told
    /// to derive one from the request's `Host`.
    MissingPublicBaseUrl,
    /// A facilitator URL could not be used.
    InvalidFacilitatorUrl(String),
    /// A header name or value is not valid HTTP.
    InvalidHeader(String),
    /// A facilitator credential that cannot be used (its message names the
    /// key, never its secret).
    InvalidCredential(String),
    /// The operating system gave no randomness for a secret.
    Random(String),
    /// The TLS setting of an HTTPS client was refused.
    #[cfg(feature = "rustls")]
    Tls(crate::tls::TlsError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Value(error) => write!(f, "invalid x402 value: {error}"),
            Self::NotEvmNetwork(network) => {
                write!(
                    f,
                    "an EVM payment option needs an eip155 network, got {network:?}"
                )
            }
            Self::ZeroTimeout => f.write_str("maxTimeoutSeconds must be positive"),
            Self::NoPaymentOptions => f.write_str("X402Layer needs at least one payment option"),
            Self::MissingPricing => f.write_str("X402Layer needs a pricing"),
            Self::MissingFacilitator => f.write_str("X402Layer needs a facilitator"),
            Self::InvalidBaseUrl(url) => write!(f, "invalid public base URL {url:?}"),
            Self::MissingPublicBaseUrl => write!(
                f,
                "no public base URL for quotes' resource.url (with_public_base_url, or \
                 with_host_derived_resource_url to trust the Host header)"
            ),
            Self::InvalidFacilitatorUrl(url) => write!(f, "invalid facilitator URL {url:?}"),
            Self::InvalidHeader(name) => write!(f, "invalid header {name:?}"),
            Self::InvalidCredential(why) => write!(f, "invalid credential: {why}"),
            Self::Random(why) => write!(f, "no randomness for a secret: {why}"),
            #[cfg(feature = "rustls")]
            Self::Tls(error) => write!(f, "TLS: {error}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Value(error) => Some(error),
            #[cfg(feature = "rustls")]
            Self::Tls(error) => Some(error),
            _ => None,
        }
    }
}

#[cfg(feature = "rustls")]
impl From<crate::tls::TlsError> for ConfigError {
    fn from(error: crate::tls::TlsError) -> Self {
        Self::Tls(error)
    }
}

impl From<ValueError> for ConfigError {
    fn from(error: ValueError) -> Self {
        Self::Value(error)
    }
}

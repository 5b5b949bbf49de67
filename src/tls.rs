//! HTTPS for walletgate's HTTP clients (feature `rustls`).
//!
//! [`ClientTls`] is the set of roots a client trusts and the connector made
//! from it: Mozilla's roots (`webpki-roots`, compiled in, so a slim container
//! without a CA bundle still verifies public hosts) plus any extra PEM roots,
//! e.g. a private facilitator's CA or a company's TLS-inspecting proxy.
//! rustls runs with the `ring` provider, chosen explicitly so that another
//! provider elsewhere in the dependency tree cannot make the choice ambiguous.
//!
//! A server whose certificate does not chain to a trusted root is refused at
//! the handshake; hyper reports `client error (Connect)` with the cause
//! (e.g. `invalid peer certificate: UnknownIssuer`) in its error's sources,
//! which [`crate::error_chain`] joins into one line.
//!
//! ```
//! use walletgate::tls::ClientTls;
//!
//! let tls = ClientTls::webpki_roots();
//! // let tls = tls.with_extra_ca_file("/etc/walletgate/extra-ca.pem")?;
//! let connector = tls.https_connector()?;
//! # let _ = connector;
//! # Ok::<(), walletgate::tls::TlsError>(())
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

/// The connector of [`ClientTls::https_connector`]: `https://` and `http://`
/// over hyper's TCP connector (e.g. `HttpFacilitator<HttpsConnector>`).
pub type HttpsConnector = hyper_rustls::HttpsConnector<HttpConnector>;

/// Why a TLS client setting was refused (at build time, never per request).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsError {
    /// An extra CA file could not be read.
    ReadCaFile {
        /// The file named.
        path: String,
        /// The I/O error, as text.
        reason: String,
    },
    /// Extra CA PEM text holds no usable `CERTIFICATE` block.
    NoCertificate {
        /// Where the PEM came from (a path, or `PEM text`).
        origin: String,
        /// Why, as text.
        reason: String,
    },
    /// A certificate in extra CA PEM text is not a usable trust anchor.
    InvalidCertificate {
        /// Where the PEM came from (a path, or `PEM text`).
        origin: String,
        /// rustls' reason, as text.
        reason: String,
    },
    /// The crypto provider refused the protocol versions (never with `ring`).
    Provider(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReadCaFile { path, reason } => write!(f, "cannot read CA file {path}: {reason}"),
            Self::NoCertificate { origin, reason } => {
                write!(f, "no CA certificate in {origin}: {reason}")
            }
            Self::InvalidCertificate { origin, reason } => {
                write!(f, "unusable CA certificate in {origin}: {reason}")
            }
            Self::Provider(reason) => write!(f, "TLS provider: {reason}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// The roots an HTTPS client trusts; cheap to clone.
#[derive(Clone)]
pub struct ClientTls {
    roots: Arc<RootCertStore>,
    builtin_roots: bool,
    extra_roots: usize,
}

impl Default for ClientTls {
    /// [`ClientTls::webpki_roots`].
    fn default() -> Self {
        Self::webpki_roots()
    }
}

impl ClientTls {
    /// Trusts Mozilla's root program (`webpki-roots`).
    pub fn webpki_roots() -> Self {
        Self {
            roots: Arc::new(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            }),
            builtin_roots: true,
            extra_roots: 0,
        }
    }

    /// Trusts nothing until extra roots are added: a private PKI only.
    pub fn without_builtin_roots() -> Self {
        Self {
            roots: Arc::new(RootCertStore::empty()),
            builtin_roots: false,
            extra_roots: 0,
        }
    }

    /// Also trusts every `CERTIFICATE` in the PEM file at `path`.
    pub fn with_extra_ca_file(self, path: impl AsRef<Path>) -> Result<Self, TlsError> {
        let path = path.as_ref();
        let pem = std::fs::read(path).map_err(|error| TlsError::ReadCaFile {
            path: path.display().to_string(),
            reason: error.to_string(),
        })?;
        self.add_pem(&pem, &path.display().to_string())
    }

    /// Also trusts every `CERTIFICATE` in `pem`.
    pub fn with_extra_ca_pem(self, pem: &[u8]) -> Result<Self, TlsError> {
        self.add_pem(pem, "PEM text")
    }

    fn add_pem(mut self, pem: &[u8], origin: &str) -> Result<Self, TlsError> {
        let certificates = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| TlsError::NoCertificate {
                origin: origin.to_owned(),
                reason: error.to_string(),
            })?;
        if certificates.is_empty() {
            return Err(TlsError::NoCertificate {
                origin: origin.to_owned(),
                reason: "no -----BEGIN CERTIFICATE----- block".to_owned(),
            });
        }
        let roots = Arc::make_mut(&mut self.roots);
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|error| TlsError::InvalidCertificate {
                    origin: origin.to_owned(),
                    reason: error.to_string(),
                })?;
            self.extra_roots += 1;
        }
        Ok(self)
    }

    /// How many roots are trusted in all.
    pub fn root_count(&self) -> usize {
        self.roots.len()
    }

    /// A rustls client configuration over these roots (`ring` provider,
    /// TLS 1.3 and 1.2, no client certificate).
    pub fn client_config(&self) -> Result<ClientConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::Provider(error.to_string()))?
            .with_root_certificates(Arc::clone(&self.roots))
            .with_no_client_auth())
    }

    /// A hyper connector that speaks `https://` with these roots, and plain
    /// `http://` too (HTTP/1.1).
    pub fn https_connector(&self) -> Result<HttpsConnector, TlsError> {
        Ok(HttpsConnectorBuilder::new()
            .with_tls_config(self.client_config()?)
            .https_or_http()
            .enable_http1()
            .build())
    }
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("builtin_roots", &self.builtin_roots)
            .field("extra_roots", &self.extra_roots)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed_pem() -> String {
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
            .unwrap()
            .cert
            .pem()
    }

    #[test]
    fn webpki_roots_are_the_default() {
        let tls = ClientTls::default();
        assert!(tls.root_count() > 100, "{}", tls.root_count());
        assert!(tls.https_connector().is_ok());
    }

    #[test]
    fn extra_pem_roots_are_added() {
        let tls = ClientTls::without_builtin_roots()
            .with_extra_ca_pem(self_signed_pem().as_bytes())
            .unwrap();
        assert_eq!(tls.root_count(), 1);
        let both = format!("{}{}", self_signed_pem(), self_signed_pem());
        let tls = ClientTls::webpki_roots()
            .with_extra_ca_pem(both.as_bytes())
            .unwrap();
        assert_eq!(tls.root_count(), ClientTls::webpki_roots().root_count() + 2);
        assert_eq!(
            format!("{tls:?}"),
            "ClientTls { builtin_roots: true, extra_roots: 2 }"
        );
    }

    #[test]
    fn unusable_ca_input_is_refused_with_its_origin() {
        let missing = ClientTls::webpki_roots()
            .with_extra_ca_file("/nonexistent/walletgate-ca.pem")
            .unwrap_err();
        assert!(matches!(missing, TlsError::ReadCaFile { .. }));
        assert!(
            missing
                .to_string()
                .contains("/nonexistent/walletgate-ca.pem")
        );

        let empty = ClientTls::webpki_roots()
            .with_extra_ca_pem(b"not a certificate")
            .unwrap_err();
        assert!(matches!(empty, TlsError::NoCertificate { .. }), "{empty}");

        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let invalid = ClientTls::webpki_roots()
            .with_extra_ca_pem(garbage)
            .unwrap_err();
        assert!(
            matches!(invalid, TlsError::InvalidCertificate { .. }),
            "{invalid}"
        );
    }
}

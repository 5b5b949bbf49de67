//! RFC 9728: every bearer challenge names where the protected resource's
//! metadata document is (`resource_metadata="…"`), so an MCP or OAuth client
//! learns how the resource wants its token from the 401 alone.

use std::sync::Arc;

use super::ConfigError;

/// The absolute `http(s)://` URL of a protected resource's metadata document
/// (`https://api.example/.well-known/oauth-protected-resource[/path]`),
/// checked once; set it on [`WalletJwtLayer`](super::WalletJwtLayer) and
/// [`RequireScopesLayer`](super::RequireScopesLayer) with
/// `with_resource_metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceMetadataUrl {
    url: Arc<str>,
    /// `resource_metadata="<url>"`, the challenge's auth-param.
    param: Arc<str>,
}

impl ResourceMetadataUrl {
    /// `url`, refused unless it is an absolute `http(s)://` URL that a quoted
    /// header parameter can carry as is (no quote, backslash, space or
    /// control character).
    pub fn new(url: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::InvalidResourceMetadataUrl(url.to_owned());
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or_else(invalid)?;
        let host = rest.split('/').next().unwrap_or_default();
        let printable = url
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
        if host.is_empty() || !printable || url.contains(['#', '?']) {
            return Err(invalid());
        }
        Ok(Self {
            url: Arc::from(url),
            param: Arc::from(format!("resource_metadata=\"{url}\"")),
        })
    }

    /// The URL.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// `resource_metadata="<url>"`.
    pub(crate) fn param(&self) -> Arc<str> {
        self.param.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_http_urls_a_header_can_quote_are_taken() {
        let url =
            ResourceMetadataUrl::new("https://api.test/.well-known/oauth-protected-resource/mcp")
                .unwrap();
        assert_eq!(
            &*url.param(),
            "resource_metadata=\"https://api.test/.well-known/oauth-protected-resource/mcp\""
        );
        for bad in [
            "/relative",
            "ftp://x/y",
            "https://",
            "https://a/\"b",
            "https://a/ b",
            "https://a/b?c",
            "https://a/\\b",
        ] {
            assert_eq!(
                ResourceMetadataUrl::new(bad),
                Err(ConfigError::InvalidResourceMetadataUrl(bad.to_owned())),
                "{bad}"
            );
        }
    }
}

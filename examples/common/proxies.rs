//! `<PREFIX>_TRUSTED_PROXIES` and `<PREFIX>_FORWARDED_HEADER`: which peers'
//! forwarding header names the client, on the library's
//! [`ClientIpResolver`] (the rightmost address no trusted proxy wrote).

use walletgate::free_tier::{ClientIpResolver, ForwardedHeader, TrustedProxies};

/// The resolver the variables under `prefix` describe; without them the
/// socket peer is the client and every forwarding header is ignored.
/// Errors name the variable.
pub(crate) fn client_ip_from_vars(
    var: &impl Fn(&str) -> Option<String>,
    prefix: &str,
) -> Result<ClientIpResolver, (String, String)> {
    let proxies_variable = format!("{prefix}_TRUSTED_PROXIES");
    let header_variable = format!("{prefix}_FORWARDED_HEADER");
    let mut resolver = ClientIpResolver::new();
    if let Some(list) = var(&proxies_variable) {
        let cidrs = list
            .split(',')
            .map(str::trim)
            .filter(|cidr| !cidr.is_empty());
        let trusted = TrustedProxies::from_cidrs(cidrs)
            .map_err(|error| (proxies_variable.clone(), error.to_string()))?;
        resolver = resolver.with_trusted_proxies(trusted);
    }
    if let Some(header) = var(&header_variable) {
        let header = match header.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => ForwardedHeader::XForwardedFor,
            "forwarded" => ForwardedHeader::Forwarded,
            _ => {
                return Err((
                    header_variable,
                    "expected x-forwarded-for or forwarded".to_owned(),
                ));
            }
        };
        resolver = resolver.with_forwarded_header(header);
    }
    Ok(resolver)
}

//! The RFC 3986 and EIP-4361 character rules the message grammar uses.
//!
//! Hand-written rather than a URI crate: SIWE only needs yes/no answers on a
//! few productions, and it must never normalise what it checks (the signature
//! covers the bytes as written).

use std::net::Ipv6Addr;

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

fn is_gen_delim(b: u8) -> bool {
    matches!(b, b':' | b'/' | b'?' | b'#' | b'[' | b']' | b'@')
}

/// True when every byte is allowed by `allowed` or is part of a `%XX` escape.
fn all_chars_or_pct(text: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let escape = bytes.get(i + 1..i + 3);
            if !escape.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                return false;
            }
            i += 3;
        } else if allowed(b) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

fn is_pchar(b: u8) -> bool {
    is_unreserved(b) || is_sub_delim(b) || matches!(b, b':' | b'@')
}

/// `*pchar` (EIP-4361 `request-id`).
pub(crate) fn is_pchars(text: &str) -> bool {
    all_chars_or_pct(text, is_pchar)
}

/// EIP-4361 `statement = 1*( reserved / unreserved / " " )`.
pub(crate) fn is_statement(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| is_unreserved(b) || is_sub_delim(b) || is_gen_delim(b) || b == b' ')
}

/// RFC 3986 `scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
pub(crate) fn is_scheme(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// EIP-4361 `nonce = 8*( ALPHA / DIGIT )`.
pub(crate) fn is_nonce(text: &str) -> bool {
    text.len() >= 8 && text.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// RFC 3986 `host`; `IP-literal` is `[IPv6]` or `[vX.future]`.
fn is_host(text: &str) -> bool {
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        if let Some(future) = inner.strip_prefix(['v', 'V']) {
            let Some((version, rest)) = future.split_once('.') else {
                return false;
            };
            return !version.is_empty()
                && version.bytes().all(|b| b.is_ascii_hexdigit())
                && !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| is_unreserved(b) || is_sub_delim(b) || b == b':');
        }
        return inner.parse::<Ipv6Addr>().is_ok();
    }
    // `reg-name` also covers every `IPv4address`.
    all_chars_or_pct(text, |b| is_unreserved(b) || is_sub_delim(b))
}

/// RFC 3986 `authority = [ userinfo "@" ] host [ ":" port ]`.
///
/// `require_host` refuses an empty host, as a SIWE `domain` needs one.
pub(crate) fn is_authority(text: &str, require_host: bool) -> bool {
    let (userinfo, host_port) = match text.split_once('@') {
        Some((userinfo, rest)) => (Some(userinfo), rest),
        None => (None, text),
    };
    if let Some(userinfo) = userinfo
        && !all_chars_or_pct(userinfo, |b| {
            is_unreserved(b) || is_sub_delim(b) || b == b':'
        })
    {
        return false;
    }
    let (host, port) = if host_port.starts_with('[') {
        match host_port.find(']') {
            Some(end) => {
                let (host, rest) = host_port.split_at(end + 1);
                match rest.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None if rest.is_empty() => (host, None),
                    None => return false,
                }
            }
            None => return false,
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if port.is_some_and(|p| !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    if require_host && host.is_empty() {
        return false;
    }
    is_host(host)
}

/// RFC 3986 `URI = scheme ":" hier-part [ "?" query ] [ "#" fragment ]`.
pub(crate) fn is_uri(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once(':') else {
        return false;
    };
    if !is_scheme(scheme) {
        return false;
    }
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (rest, None),
    };
    let (hier_part, query) = match rest.split_once('?') {
        Some((hier_part, query)) => (hier_part, Some(query)),
        None => (rest, None),
    };
    let query_char = |b: u8| is_pchar(b) || matches!(b, b'/' | b'?');
    if query.is_some_and(|q| !all_chars_or_pct(q, query_char))
        || fragment.is_some_and(|f| !all_chars_or_pct(f, query_char))
    {
        return false;
    }
    let path_char = |b: u8| is_pchar(b) || b == b'/';
    match hier_part.strip_prefix("//") {
        Some(authority_and_path) => {
            let (authority, path) = match authority_and_path.find('/') {
                Some(slash) => authority_and_path.split_at(slash),
                None => (authority_and_path, ""),
            };
            is_authority(authority, false) && all_chars_or_pct(path, path_char)
        }
        // path-absolute, path-rootless or path-empty: "//" was handled above.
        None => all_chars_or_pct(hier_part, path_char),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_from_the_vectors_and_clients() {
        for uri in [
            "https://service.org/login",
            "https://[::cafe]",
            "https://127.0.0.1:4361",
            "https://127.0.0.1/?query=one#begin",
            "ipfs://Qme7ss3ARVgxv6rXqVPiikMJ8u2NLgmgszg13pYrDKEoiu",
            "read:eligibility",
            "urn:uuid:6f9619ff-8b86-d011-b42d-00cf4fc964ff",
            "file:///etc/hosts",
            "did:key:z6Mk%20x",
        ] {
            assert!(is_uri(uri), "{uri}");
        }
        for uri in [
            ":not_a_rfc3986_valid_uri_",
            "https://service.org/login - https://service.org/login/2",
            "no-colon",
            "1http://x",
            "https://exa mple.com",
            "https://[::cafe",
            "https://host:80a/",
            "https://x/%zz",
            "",
        ] {
            assert!(!is_uri(uri), "{uri}");
        }
    }

    #[test]
    fn authorities() {
        for domain in [
            "service.org",
            "127.0.0.1",
            "test@127.0.0.1",
            "127.0.0.1:8080",
            "localhost:8080",
            "test@127.0.0.1:8080",
            "[::cafe]",
            "[::cafe]:443",
            "[v1.fe80::a+en1]",
        ] {
            assert!(is_authority(domain, true), "{domain}");
        }
        for domain in [
            "#notrfc4501",
            "",
            "a b",
            "[::cafe",
            "[::zz]",
            "host:12x",
            "@",
        ] {
            assert!(!is_authority(domain, true), "{domain}");
        }
    }

    #[test]
    fn statements_follow_the_abnf() {
        assert!(is_statement(
            "Click to sign in and accept the OpenSea Terms of Service (https://opensea.io/tos) and Privacy Policy (https://opensea.io/privacy)."
        ));
        assert!(is_statement(
            "I accept the ServiceOrg Terms of Service: https://service.org/tos"
        ));
        for bad in [
            "",
            "line\nbreak",
            "quote \"",
            "back`tick",
            "percent %",
            "caf\u{e9}",
        ] {
            assert!(!is_statement(bad), "{bad:?}");
        }
    }

    #[test]
    fn nonces_and_schemes() {
        assert!(is_nonce("12341234") && is_nonce("bTyXgcQxn2htgkjJn"));
        assert!(!is_nonce("1234567") && !is_nonce("1234567-"));
        assert!(is_scheme("https") && is_scheme("coap+tcp"));
        assert!(!is_scheme("") && !is_scheme("1x") && !is_scheme("ht tp"));
    }
}

//! Scrubbing upstream error text for the `debug` field.
//!
//! Upstream providers put request ids, endpoint URLs, key fragments and
//! internal hostnames in their error messages. [`redact`] removes those and
//! keeps what a client can act on: the upstream's status code and its own
//! description of the fault.
//!
//! ```
//! use walletgate::envelope::redact;
//!
//! let raw = "401 Unauthorized: Incorrect API key provided: sk-proj-abc123def456ghi789. \
//!            See https://platform.example.com/account/api-keys (request id req_8f2a9c)";
//! let clean = redact(raw);
//! assert!(clean.starts_with("401 Unauthorized: Incorrect API key provided"));
//! assert!(!clean.contains("sk-proj"));
//! assert!(!clean.contains("example.com"));
//! assert!(!clean.contains("req_8f2a9c"));
//! ```

use std::sync::LazyLock;

use regex_lite::Regex;

/// Longest `debug` text kept, in bytes; upstream pages can be huge.
const MAX_DEBUG_LEN: usize = 512;

/// One scrubbing rule: what to find and what stands in its place.
struct Rule {
    pattern: Regex,
    replacement: &'static str,
}

/// The rules, in order: credentials first (they may sit inside URLs or
/// headers), then URLs, addresses and routing details.
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rule = |pattern: &str, replacement: &'static str| Rule {
        // The patterns are constants checked by the tests below.
        pattern: Regex::new(pattern).expect("redaction pattern compiles"),
        replacement,
    };
    vec![
        // URLs first, whole: userinfo, host, path and query keys go with them.
        rule(r#"(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>)}]+"#, "[url]"),
        // PEM blocks.
        rule(
            r"-----BEGIN [A-Z ]+-----[\s\S]*?-----END [A-Z ]+-----",
            "[redacted]",
        ),
        // Authorization header values and bearer/basic tokens.
        rule(
            r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}",
            "$1 [redacted]",
        ),
        // JWTs.
        rule(
            r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
            "[redacted]",
        ),
        // Provider key shapes: sk-…, sk_live_…, pk-…, rk_…, gsk_…, xai-…, ghp_…, brk_…, AIza…, AKIA…
        rule(
            r"\b(?:sk|pk|rk|gsk|xai|brk|ghp|gho|glpat|hf|pat)[-_][A-Za-z0-9_-]{6,}",
            "[redacted]",
        ),
        rule(r"\bAIza[0-9A-Za-z_-]{20,}", "[redacted]"),
        rule(r"\b(?:AKIA|ASIA)[0-9A-Z]{12,}", "[redacted]"),
        // Long hex strings: private keys, signatures, secrets.
        rule(r"\b(?:0x)?[0-9a-fA-F]{64,}\b", "[redacted]"),
        // key=value and "key": "value" credentials, in query strings, JSON or prose.
        // A value may not start with `[`, so text already redacted stays as it is.
        rule(
            r#"(?i)(["']?\b(?:api[_-]?key|apikey|access[_-]?token|refresh[_-]?token|auth[_-]?token|token|secret|client[_-]?secret|password|passwd|pwd|authorization|x-api-key|x-goog-api-key|key|signature|sig)["']?\s*[:=]\s*)["']?[^\s"'&,;)}\]\[][^\s"'&,;)}\]]*["']?"#,
            "$1[redacted]",
        ),
        // E-mail addresses (often the account owner).
        rule(
            r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b",
            "[email]",
        ),
        // IPv4, with an optional port.
        rule(
            r"\b(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?::\d{1,5})?\b",
            "[ip]",
        ),
        // IPv6: four or more groups, or any compressed form with `::`.
        rule(
            r"(?i)\[?\b(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}\b\]?(?::\d{1,5})?",
            "[ip]",
        ),
        rule(
            r"(?i)\[?(?:\b[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?::(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*\b)?\]?(?::\d{1,5})?",
            "[ip]",
        ),
        // Host names: dotted labels ending in a public or internal suffix, with an
        // optional port. A fixed suffix list keeps field paths such as
        // `messages.1.content.0.type` readable.
        rule(
            r"(?i)\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|net|org|io|ai|dev|app|cloud|co|us|uk|de|eu|xyz|info|biz|tech|sh|gg|me|so|run|site|internal|local|localdomain|lan|corp|svc|intra|example|test|invalid)\b(?::\d{1,5})?",
            "[host]",
        ),
        // Request, trace, user and generation ids, named by their key.
        rule(
            r#"(?i)\b((?:request|req|trace|span|correlation|user|gen|generation|model|message|msg|run|session|account)[ _-]?id|x-request-id|x-amzn-requestid|x-trace-id|apim-request-id|cf-ray)["']?\s*[:=#]?\s*["']?[A-Za-z0-9][A-Za-z0-9_.-]{5,}["']?"#,
            "$1=[id]",
        ),
        // Bare ids of the well-known prefixed shapes, and UUIDs.
        rule(
            r"\b(?:req|gen|chatcmpl|msg|resp|run|user)_[A-Za-z0-9]{6,}\b",
            "[id]",
        ),
        rule(
            r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
            "[id]",
        ),
        // Internal routing: which provider, deployment, region, pod or node served it.
        // A value must mix letters with digits, `-` or `_`, so "upstream 402" keeps its status.
        rule(
            r"(?i)\b(provider|upstream|backend|deployment|route|routed to|region|location|cluster|pod|node|shard|replica|endpoint|organization|org|project|peer|served-by)(\s*[:=]\s*|\s+)(?:[A-Za-z0-9._/|-]*[A-Za-z][A-Za-z0-9._/|-]*[0-9_-][A-Za-z0-9._/|-]*|[A-Za-z0-9._/|-]*[0-9_-][A-Za-z0-9._/|-]*[A-Za-z][A-Za-z0-9._/|-]*)",
            "$1$2[internal]",
        ),
        rule(
            r"(?i)\b(?:us|eu|ap|sa|ca|me|af)-(?:east|west|north|south|central|northeast|southeast|northwest|southwest)\d?-\d\b",
            "[internal]",
        ),
    ]
});

/// Removes credentials, URLs, host names, IP addresses and internal routing
/// details from upstream error text, keeping its status code and description.
///
/// The result is trimmed to at most 512 bytes (on a character boundary).
pub fn redact(text: &str) -> String {
    let mut clean = text.to_owned();
    for rule in RULES.iter() {
        if rule.pattern.is_match(&clean) {
            clean = rule
                .pattern
                .replace_all(&clean, rule.replacement)
                .into_owned();
        }
    }
    truncate(clean.trim(), MAX_DEBUG_LEN)
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles() {
        assert!(RULES.len() > 10);
    }

    #[test]
    fn keeps_status_and_description() {
        let text = "Error code: 400 - {'error': {'message': 'max_tokens is too large: 99999. This model supports at most 8192 completion tokens.', 'type': 'invalid_request_error'}}";
        let clean = redact(text);
        assert!(clean.contains("400"));
        assert!(clean.contains("max_tokens is too large: 99999"));
        assert!(clean.contains("8192 completion tokens"));
    }

    #[test]
    fn removes_bearer_and_url_userinfo() {
        let clean = redact(
            "GET https://user:pw@api.internal.example:8443/v1?key=abc failed: Bearer abcdefghijklmnop rejected",
        );
        assert!(!clean.contains("user:pw"));
        assert!(!clean.contains("abcdefghijklmnop"));
        assert!(!clean.contains("8443"));
    }

    #[test]
    fn leaves_timestamps_and_model_ids() {
        let clean = redact("at 12:30:45 model anthropic/claude-sonnet-4.6 returned 529 overloaded");
        assert!(clean.contains("12:30:45"));
        assert!(clean.contains("anthropic/claude-sonnet-4.6"));
        assert!(clean.contains("529 overloaded"));
    }

    #[test]
    fn truncates_on_char_boundary() {
        let long = "é".repeat(600);
        let clean = redact(&long);
        assert!(clean.len() <= MAX_DEBUG_LEN + '…'.len_utf8());
    }
}

//! The `debug` field never carries credentials, URLs, hosts or IPs, and keeps
//! the upstream's status and description (fixtures: realistic upstream errors
//! with planted secrets, `tests/fixtures/upstream_errors.json`).

use serde::Deserialize;
use walletgate::envelope::redact;

#[derive(Deserialize)]
struct Case {
    provider: String,
    text: String,
    planted: Vec<String>,
    keep: Vec<String>,
}

fn cases() -> Vec<Case> {
    let raw = include_str!("fixtures/upstream_errors.json");
    serde_json::from_str(raw).expect("fixture file parses")
}

#[test]
fn fixture_corpus_is_broad() {
    let cases = cases();
    assert!(cases.len() >= 30, "only {} fixtures", cases.len());
    for provider in ["openai", "anthropic", "google", "openrouter", "router"] {
        assert!(
            cases.iter().any(|case| case.provider == provider),
            "no {provider} fixture"
        );
    }
}

#[test]
fn no_planted_secret_url_host_or_ip_survives() {
    let mut leaks = Vec::new();
    for (index, case) in cases().iter().enumerate() {
        let clean = redact(&case.text);
        for planted in &case.planted {
            if clean.contains(planted.as_str()) {
                leaks.push(format!(
                    "case {index} ({}): {planted:?} survived",
                    case.provider
                ));
            }
        }
        for scheme in ["http://", "https://"] {
            if clean.contains(scheme) {
                leaks.push(format!("case {index}: a URL survived"));
            }
        }
    }
    assert!(leaks.is_empty(), "{}", leaks.join("\n"));
}

#[test]
fn status_and_description_remain() {
    let mut lost = Vec::new();
    for (index, case) in cases().iter().enumerate() {
        let clean = redact(&case.text);
        for kept in &case.keep {
            if !clean.contains(kept.as_str()) {
                lost.push(format!(
                    "case {index} ({}): lost {kept:?} in {clean:?}",
                    case.provider
                ));
            }
        }
    }
    assert!(lost.is_empty(), "{}", lost.join("\n"));
}

#[test]
fn redaction_is_idempotent() {
    for case in cases() {
        let once = redact(&case.text);
        assert_eq!(redact(&once), once);
    }
}

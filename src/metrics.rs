//! Counters and histograms where the layers decide (feature `metrics`), on
//! the [`metrics`](https://docs.rs/metrics) facade: install any recorder
//! (`metrics-exporter-prometheus` for a `/metrics` page) and they appear.
//! Without the feature every call here is nothing.
//!
//! Labels are outcomes, error codes and reasons from fixed lists, never a
//! payer, wallet, key id, amount or any other unbounded value.
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `walletgate_x402_payments_total` | counter | `outcome`: `quoted`, `verified`, `settled`, `refused`, `unsettled`, `replayed` |
//! | `walletgate_x402_settlements_total` | counter | |
//! | `walletgate_x402_refusals_total` | counter | `code`: the error code (`PAYMENT_INVALID`, …) |
//! | `walletgate_x402_verify_duration_seconds` | histogram | |
//! | `walletgate_x402_settle_duration_seconds` | histogram | |
//! | `walletgate_x402_settlement_hook_failures_total` | counter | |
//! | `walletgate_free_tier_requests_total` | counter | `outcome`: `admitted`, `refused`; `code` when refused |
//! | `walletgate_api_key_admitted_total` | counter | |
//! | `walletgate_api_key_refusals_total` | counter | `reason`: [`ApiKeyError::code`](crate::api_key::ApiKeyError::code) |
//! | `walletgate_wallet_jwt_authenticated_total` | counter | |
//! | `walletgate_wallet_jwt_refusals_total` | counter | `reason`: [`JwtError::code`](crate::wallet_jwt::JwtError::code) |
//! | `walletgate_store_timeouts_total` | counter | `store`: `redis` |
//! | `walletgate_x402_answer_store_bytes` | gauge | |
//!
//! A Prometheus exporter renders a histogram as a summary unless it is
//! given buckets: give [`DURATION_BUCKETS_SECONDS`] to every name ending
//! in `_duration_seconds` (with `metrics-exporter-prometheus`:
//! `set_buckets_for_metric(Matcher::Suffix("_duration_seconds".into()), DURATION_BUCKETS_SECONDS)`).

/// Paid-request decisions by outcome.
pub const X402_PAYMENTS_TOTAL: &str = "walletgate_x402_payments_total";
/// Payments settled.
pub const X402_SETTLEMENTS_TOTAL: &str = "walletgate_x402_settlements_total";
/// Paid requests refused, by error code.
pub const X402_REFUSALS_TOTAL: &str = "walletgate_x402_refusals_total";
/// How long the replay store took to claim a payment's authorization.
pub const X402_CLAIM_DURATION_SECONDS: &str = "walletgate_x402_claim_duration_seconds";
/// How long the wrapped service took to answer a verified payment (to its
/// head: a stream's body is not counted).
pub const X402_INNER_DURATION_SECONDS: &str = "walletgate_x402_inner_duration_seconds";
/// How long the facilitator took to verify a payment.
pub const X402_VERIFY_DURATION_SECONDS: &str = "walletgate_x402_verify_duration_seconds";
/// How long the facilitator took to settle a payment (success or failure).
pub const X402_SETTLE_DURATION_SECONDS: &str = "walletgate_x402_settle_duration_seconds";
/// Settlement hooks that failed (the payment stays settled).
pub const X402_SETTLEMENT_HOOK_FAILURES_TOTAL: &str =
    "walletgate_x402_settlement_hook_failures_total";
/// Metered settlements whose answer named more than was authorised (the
/// authorised amount was settled).
pub const X402_SETTLEMENT_OVERRUNS_TOTAL: &str = "walletgate_x402_settlement_overruns_total";
/// Metered streams their client left before the end (settled nothing).
pub const X402_METERED_STREAM_CUTS_TOTAL: &str = "walletgate_x402_metered_stream_cuts_total";
/// Free-tier requests admitted and refused.
pub const FREE_TIER_REQUESTS_TOTAL: &str = "walletgate_free_tier_requests_total";
/// Requests an API key admitted.
pub const API_KEY_ADMITTED_TOTAL: &str = "walletgate_api_key_admitted_total";
/// API-key refusals by reason.
pub const API_KEY_REFUSALS_TOTAL: &str = "walletgate_api_key_refusals_total";
/// Requests a wallet JWT authenticated.
pub const WALLET_JWT_AUTHENTICATED_TOTAL: &str = "walletgate_wallet_jwt_authenticated_total";
/// Wallet-JWT refusals by reason.
pub const WALLET_JWT_REFUSALS_TOTAL: &str = "walletgate_wallet_jwt_refusals_total";
/// Store calls that did not answer within their timeout.
pub const STORE_TIMEOUTS_TOTAL: &str = "walletgate_store_timeouts_total";
/// Bytes the in-memory x402 answer store holds (answers and markers; of
/// the store changed last, when a process has several).
pub const X402_ANSWER_STORE_BYTES: &str = "walletgate_x402_answer_store_bytes";

/// Buckets for the `_duration_seconds` histograms: 100 µs to 30 s, an
/// in-memory claim or an in-process verify (tens of microseconds; a tail
/// of milliseconds) to an on-chain settlement (seconds).
pub const DURATION_BUCKETS_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Registers a description of every metric with the installed recorder
/// (the `# HELP` lines of a Prometheus page). Optional; call once after
/// installing the recorder.
#[cfg(feature = "metrics")]
pub fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        X402_PAYMENTS_TOTAL,
        "x402 paid-request decisions by outcome"
    );
    describe_counter!(X402_SETTLEMENTS_TOTAL, "x402 payments settled");
    describe_counter!(
        X402_REFUSALS_TOTAL,
        "x402 paid requests refused, by error code"
    );
    describe_histogram!(
        X402_CLAIM_DURATION_SECONDS,
        Unit::Seconds,
        "replay-store claim latency of a paid request"
    );
    describe_histogram!(
        X402_INNER_DURATION_SECONDS,
        Unit::Seconds,
        "wrapped service's latency to the head of a paid answer"
    );
    describe_histogram!(
        X402_VERIFY_DURATION_SECONDS,
        Unit::Seconds,
        "facilitator verify latency"
    );
    describe_histogram!(
        X402_SETTLE_DURATION_SECONDS,
        Unit::Seconds,
        "facilitator settle latency"
    );
    describe_counter!(
        X402_SETTLEMENT_HOOK_FAILURES_TOTAL,
        "settlement hooks that failed (the payment stays settled)"
    );
    describe_counter!(
        X402_SETTLEMENT_OVERRUNS_TOTAL,
        "metered answers that named more than was authorised"
    );
    describe_counter!(
        X402_METERED_STREAM_CUTS_TOTAL,
        "metered streams their client left before the end (nothing settled)"
    );
    describe_counter!(
        FREE_TIER_REQUESTS_TOTAL,
        "free-tier requests admitted and refused"
    );
    describe_counter!(API_KEY_ADMITTED_TOTAL, "requests an API key admitted");
    describe_counter!(API_KEY_REFUSALS_TOTAL, "API-key refusals by reason");
    describe_counter!(
        WALLET_JWT_AUTHENTICATED_TOTAL,
        "requests a wallet JWT authenticated"
    );
    describe_counter!(WALLET_JWT_REFUSALS_TOTAL, "wallet-JWT refusals by reason");
    describe_counter!(STORE_TIMEOUTS_TOTAL, "store calls past their timeout");
    describe_gauge!(
        X402_ANSWER_STORE_BYTES,
        Unit::Bytes,
        "bytes the in-memory x402 answer store holds"
    );
}

/// One increment of counter `name` with `labels`.
// Some feature sets have no layer that counts.
#[allow(dead_code)]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn count<const N: usize>(name: &'static str, labels: [(&'static str, &'static str); N]) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(name, &labels).increment(1);
}

/// Gauge `name` set to `value`.
#[allow(dead_code)]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn set(name: &'static str, value: usize) {
    // A gauge is an f64: exact up to 2^53 bytes.
    #[cfg(feature = "metrics")]
    ::metrics::gauge!(name).set(value as f64);
}

/// When a measured call started (nothing without the feature).
// Only the x402 layer measures durations.
#[allow(dead_code)]
pub(crate) struct Started(#[cfg(feature = "metrics")] std::time::Instant);

#[allow(dead_code)]
impl Started {
    /// Now.
    pub(crate) fn now() -> Self {
        Self(
            #[cfg(feature = "metrics")]
            std::time::Instant::now(),
        )
    }

    /// The time since [`now`](Self::now) into histogram `name`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn observe(&self, name: &'static str) {
        #[cfg(feature = "metrics")]
        ::metrics::histogram!(name).record(self.0.elapsed().as_secs_f64());
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;

    #[test]
    fn buckets_rise_and_cover_a_settlement() {
        assert!(
            DURATION_BUCKETS_SECONDS
                .windows(2)
                .all(|pair| pair[0] < pair[1])
        );
        assert!(*DURATION_BUCKETS_SECONDS.last().unwrap() >= 10.0);
    }

    #[test]
    fn every_name_is_under_walletgate_and_counters_end_in_total() {
        let counters = [
            X402_PAYMENTS_TOTAL,
            X402_SETTLEMENTS_TOTAL,
            X402_REFUSALS_TOTAL,
            X402_SETTLEMENT_HOOK_FAILURES_TOTAL,
            X402_SETTLEMENT_OVERRUNS_TOTAL,
            X402_METERED_STREAM_CUTS_TOTAL,
            FREE_TIER_REQUESTS_TOTAL,
            API_KEY_ADMITTED_TOTAL,
            API_KEY_REFUSALS_TOTAL,
            WALLET_JWT_AUTHENTICATED_TOTAL,
            WALLET_JWT_REFUSALS_TOTAL,
            STORE_TIMEOUTS_TOTAL,
        ];
        for name in counters {
            assert!(
                name.starts_with("walletgate_") && name.ends_with("_total"),
                "{name}"
            );
        }
        for name in [
            X402_CLAIM_DURATION_SECONDS,
            X402_VERIFY_DURATION_SECONDS,
            X402_INNER_DURATION_SECONDS,
            X402_SETTLE_DURATION_SECONDS,
        ] {
            assert!(name.starts_with("walletgate_") && name.ends_with("_duration_seconds"));
        }
        assert!(X402_ANSWER_STORE_BYTES.starts_with("walletgate_"));
        assert!(X402_ANSWER_STORE_BYTES.ends_with("_bytes"));
    }
}

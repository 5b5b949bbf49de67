//! `{NAME}_METRICS_LISTEN`: the library's counters and histograms (feature
//! `metrics`) as Prometheus text at `GET /metrics`, on an address of its own
//! (a scraper's network, not the public one); off when unset.

use std::net::SocketAddr;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The value of `{NAME}_METRICS_LISTEN` (`variable`), if set: the address
/// to serve `/metrics` on; refused in a build without feature `metrics`.
pub(crate) fn parse_listen(
    variable: &str,
    value: Option<String>,
) -> Result<Option<SocketAddr>, String> {
    let Some(listen) = value.filter(|listen| !listen.is_empty()) else {
        return Ok(None);
    };
    if !cfg!(feature = "metrics") {
        return Err(format!(
            "{variable}: this build lacks the `metrics` feature (--features metrics)"
        ));
    }
    listen
        .parse()
        .map(Some)
        .map_err(|_| format!("{variable}: expected host:port, e.g. 127.0.0.1:9464"))
}

/// The process's Prometheus recorder, installed on first use (one per
/// process: the `metrics` facade has one global recorder), with the
/// library's buckets for every `_duration_seconds` histogram.
pub(crate) fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_duration_seconds".into()),
                    walletgate::metrics::DURATION_BUCKETS_SECONDS,
                )
                .expect("the library's buckets are not empty")
                .install_recorder()
                .expect("the first global metrics recorder of this process");
            #[cfg(feature = "metrics")]
            walletgate::metrics::describe();
            handle
        })
        .clone()
}

/// `GET /metrics`: the Prometheus text of `handle`.
pub(crate) fn router(handle: PrometheusHandle) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let handle = handle.clone();
            async move {
                handle.run_upkeep();
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    handle.render(),
                )
            }
        }),
    )
}

/// Serves `/metrics` on `address` in the background; the bound address.
pub(crate) async fn serve(address: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let app = router(recorder());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(bound)
}

#[cfg(test)]
#[test]
fn the_listen_variable_is_an_address_and_needs_the_feature() {
    assert_eq!(parse_listen("SVC_METRICS_LISTEN", None), Ok(None));
    assert_eq!(
        parse_listen("SVC_METRICS_LISTEN", Some(String::new())),
        Ok(None)
    );
    let read = parse_listen("SVC_METRICS_LISTEN", Some("127.0.0.1:9464".into()));
    if cfg!(feature = "metrics") {
        assert_eq!(read, Ok(Some(SocketAddr::from(([127, 0, 0, 1], 9464)))));
        let refused = parse_listen("SVC_METRICS_LISTEN", Some("metrics".into())).unwrap_err();
        assert!(refused.starts_with("SVC_METRICS_LISTEN:"), "{refused}");
    } else {
        assert!(read.unwrap_err().contains("`metrics`"));
    }
}

/// The samples of a Prometheus text page: `(series, value)`, the series as
/// written (`name{label="value",…}`), comments skipped.
#[cfg(test)]
pub(crate) fn samples(page: &str) -> Vec<(String, f64)> {
    page.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            (series.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

/// The sum of the samples of `name` whose labels include every `labels` pair.
#[cfg(test)]
pub(crate) fn total(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(page)
        .into_iter()
        .filter(|(series, _)| {
            let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
            series_name == name
                && labels
                    .iter()
                    .all(|(key, value)| series_labels.contains(&format!("{key}=\"{value}\"")))
        })
        .map(|(_, value)| value)
        .sum()
}

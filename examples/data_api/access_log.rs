//! One `tracing` event per request (target `access`): method, path (no
//! query), status, time taken, and a rejection's message. Never headers,
//! cookies, query values or bodies, so no credential can reach the log; the
//! tests check that.

use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use tracing::Dispatch;
use tracing::instrument::WithSubscriber as _;
use walletgate::envelope::DataApiError;

/// Where access lines (and the layers' events during a request) go: the
/// process's subscriber, or one writing to a file (tests read it back).
#[derive(Clone)]
pub(crate) struct AccessLog {
    dispatch: Option<Dispatch>,
    client_ip: walletgate::free_tier::ClientIpResolver,
}

impl AccessLog {
    /// Through the process's subscriber (`logging::init`).
    pub(crate) fn global() -> Self {
        Self {
            dispatch: None,
            client_ip: walletgate::free_tier::ClientIpResolver::new(),
        }
    }

    /// Into `path`, whatever the process's subscriber is.
    #[cfg(test)]
    pub(crate) fn to_file(path: &std::path::Path) -> std::io::Result<Self> {
        Ok(Self {
            dispatch: Some(crate::logging::dispatch(Some(path))?),
            client_ip: walletgate::free_tier::ClientIpResolver::new(),
        })
    }

    /// Names the client `client_ip` resolves (trusted proxies) in each line.
    pub(crate) fn with_client_ip(
        mut self,
        client_ip: walletgate::free_tier::ClientIpResolver,
    ) -> Self {
        self.client_ip = client_ip;
        self
    }

    /// Wraps every route of `router`.
    pub(crate) fn around(self, router: Router) -> Router {
        router.layer(middleware::from_fn_with_state(self, record))
    }
}

async fn record(State(log): State<AccessLog>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let client = log.client_ip.resolve(&request).ok();
    let response = match &log.dispatch {
        Some(dispatch) => next.run(request).with_subscriber(dispatch.clone()).await,
        None => next.run(request).await,
    };
    let line = || {
        let error = response.extensions().get::<DataApiError>();
        tracing::info!(
            target: "access",
            method = %method,
            client = client.map(tracing::field::display),
            // A string value, not `%`: the text format quotes and escapes
            // it (a path cannot fake a field), JSON keeps it a plain string.
            path = path.as_str(),
            status = response.status().as_u16(),
            elapsed_ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1000.0),
            request_id = response
                .headers()
                .get(crate::request_id::X_REQUEST_ID)
                .and_then(|id| id.to_str().ok()),
            error = error.map(DataApiError::message),
        );
    };
    match &log.dispatch {
        Some(dispatch) => tracing::dispatcher::with_default(dispatch, line),
        None => line(),
    }
    response
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    /// A path is logged quoted and escaped, so what it holds (a quote, an
    /// `=`) cannot pass for another field of the line.
    #[tokio::test]
    async fn the_path_is_quoted_so_it_cannot_fake_a_field() {
        let path = std::env::temp_dir().join(format!(
            "walletgate-access-quoting-{}.log",
            std::process::id()
        ));
        let router = Router::new().route("/{*rest}", get(|| async { "ok" }));
        let router = AccessLog::to_file(&path).unwrap().around(router);
        let request = http::Request::get(r#"/x"status=500"#)
            .body(Body::empty())
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let line = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(line.contains(r#"path="/x\"status=500""#), "{line}");
        assert!(line.contains("status=200"), "{line}");
        assert_eq!(line.matches("status=500").count(), 1, "{line}");
    }
}

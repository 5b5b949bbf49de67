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
}

impl AccessLog {
    /// Through the process's subscriber (`logging::init`).
    pub(crate) fn global() -> Self {
        Self { dispatch: None }
    }

    /// Into `path`, whatever the process's subscriber is.
    #[cfg(test)]
    pub(crate) fn to_file(path: &std::path::Path) -> std::io::Result<Self> {
        Ok(Self {
            dispatch: Some(crate::logging::dispatch(Some(path))?),
        })
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
    let response = match &log.dispatch {
        Some(dispatch) => next.run(request).with_subscriber(dispatch.clone()).await,
        None => next.run(request).await,
    };
    let line = || {
        let error = response.extensions().get::<DataApiError>();
        tracing::info!(
            target: "access",
            method = %method,
            path = %path,
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

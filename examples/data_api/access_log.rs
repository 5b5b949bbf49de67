//! One line per request: method, path (no query), status, time taken, and a
//! rejection's message. Never headers, cookies, query values or bodies, so no
//! credential can reach the log; the tests check that.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use walletgate::envelope::DataApiError;

/// Where access lines go: standard error, or a file (tests read it back).
#[derive(Clone)]
pub(crate) struct AccessLog {
    file: Option<Arc<Mutex<File>>>,
}

impl AccessLog {
    pub(crate) fn stderr() -> Self {
        Self { file: None }
    }

    pub(crate) fn to_file(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: Some(Arc::new(Mutex::new(File::create(path)?))),
        })
    }

    fn write(&self, line: &str) {
        match &self.file {
            Some(file) => {
                let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
                // A failed log write must not fail the request.
                let _ = writeln!(file, "{line}");
            }
            None => eprintln!("{line}"),
        }
    }

    /// Wraps every route of `router`.
    pub(crate) fn around(self, router: Router) -> Router {
        router.layer(middleware::from_fn_with_state(self, record))
    }
}

async fn record(State(log): State<AccessLog>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let line_start = format!("{} {}", request.method(), request.uri().path());
    let response = next.run(request).await;
    let mut line = format!(
        "{line_start} -> {} in {:.1} ms",
        response.status().as_u16(),
        started.elapsed().as_secs_f64() * 1000.0
    );
    if let Some(error) = response.extensions().get::<DataApiError>() {
        line.push_str(&format!(": {}", error.message()));
    }
    log.write(&line);
    response
}

//! `GET /healthz` (the process answers) and `GET /readyz` (it should get
//! traffic), outside every gate and without credentials.
//!
//! `/readyz` answers 503 while draining (after SIGTERM/SIGINT) and when the
//! configured Redis does not answer a `PING` within its timeout: the routes
//! that need it would answer 503 anyway, so a load balancer should send
//! their traffic to a replica that can serve it.

use axum::Router;
use axum::routing::get;
use http::StatusCode;

use crate::shutdown::Draining;

/// The Redis the stores share (feature `redis`).
#[cfg(feature = "redis")]
pub(crate) type Redis = walletgate::redis::RedisConnection;

/// Without the `redis` feature there is no Redis to ask.
#[cfg(not(feature = "redis"))]
#[derive(Clone)]
pub(crate) enum Redis {}

/// What `/readyz` asks.
#[derive(Clone)]
pub(crate) struct Readiness {
    draining: Draining,
    redis: Option<Redis>,
}

impl Readiness {
    pub(crate) fn new(draining: Draining, redis: Option<Redis>) -> Self {
        Self { draining, redis }
    }

    /// `None` when ready, else why not.
    async fn not_ready(&self) -> Option<&'static str> {
        if self.draining.is_draining() {
            return Some("not ready: draining");
        }
        match &self.redis {
            None => None,
            #[cfg(feature = "redis")]
            Some(redis) => redis
                .call("readiness ping", |mut connection| async move {
                    redis::cmd("PING").query_async::<()>(&mut connection).await
                })
                .await
                .err()
                .map(|_| "not ready: Redis does not answer"),
            #[cfg(not(feature = "redis"))]
            Some(never) => match *never {},
        }
    }
}

/// The two probes.
pub(crate) fn routes(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move {
                    match readiness.not_ready().await {
                        None => (StatusCode::OK, "ready"),
                        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                    }
                }
            }),
        )
}

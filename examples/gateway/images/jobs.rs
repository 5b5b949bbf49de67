//! The job store: accepted image jobs, by id and by the paying authorization.
//!
//! Progress is computed from the clock when asked, so nothing runs in the
//! background. Jobs live behind [`JobStore`]: [`InMemoryJobs`] (the default,
//! bounded by [`MAX_JOBS`]) or, with the `redis` feature, `RedisJobs`
//! (`GATEWAY_REDIS_URL`), which
//! every replica shares, so a paid-but-lost answer is recovered on any of
//! them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use walletgate::clock::SharedClock;
use walletgate::store::StoreError;
use walletgate::x402::server::Price;

use crate::extensions::ImageRequest;
use crate::upstream::BoxFuture;

/// Jobs kept in memory; the oldest are forgotten beyond this (memory stays bounded).
const MAX_JOBS: usize = 10_000;

/// One accepted job.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub(super) id: String,
    pub(super) request: ImageRequest,
    pub(super) price: Price,
    /// The paying authorization: only its replays see the job.
    pub(super) authorization_id: String,
    pub(super) accepted_unix_millis: u64,
}

/// Where accepted jobs are kept.
pub(crate) trait JobStore: Send + Sync + 'static {
    /// Keeps `job`, unless its authorization bought one already: the job
    /// kept for that authorization is returned either way.
    fn accept(&self, job: Job) -> BoxFuture<'_, Result<Job, StoreError>>;

    /// The job `id`.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Job>, StoreError>>;

    /// The job paid by `authorization_id`.
    fn by_authorization<'a>(
        &'a self,
        authorization_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, StoreError>>;
}

/// Accepted jobs, and how they progress.
pub(crate) struct ImageJobs {
    clock: SharedClock,
    duration: Duration,
    store: Arc<dyn JobStore>,
}

impl ImageJobs {
    /// Jobs that take `duration` each, timed by `clock`, kept in `store`.
    pub(crate) fn new(clock: SharedClock, duration: Duration, store: Arc<dyn JobStore>) -> Self {
        Self {
            clock,
            duration,
            store,
        }
    }

    /// The job paid by `authorization_id`, or a new one for `request`.
    pub(super) async fn accept(
        &self,
        request: ImageRequest,
        price: Price,
        authorization_id: &str,
    ) -> Result<Job, StoreError> {
        // Unique across replicas: the time and 32 random bits.
        let random = getrandom::u32().map_err(|_| StoreError::new("no randomness for a job id"))?;
        let now = self.clock.now_unix_millis();
        let job = Job {
            id: format!("imgjob_{now:016x}{random:08x}"),
            request,
            price,
            authorization_id: authorization_id.to_owned(),
            accepted_unix_millis: now,
        };
        self.store.accept(job).await
    }

    pub(super) async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        self.store.get(id).await
    }

    pub(super) async fn by_authorization(
        &self,
        authorization_id: &str,
    ) -> Result<Option<Job>, StoreError> {
        self.store.by_authorization(authorization_id).await
    }

    pub(super) fn progress(&self, job: &Job) -> Progress {
        let elapsed = self
            .clock
            .now_unix_millis()
            .saturating_sub(job.accepted_unix_millis);
        let total = u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX);
        if elapsed >= total {
            Progress::Done
        } else {
            Progress::Running {
                percent: elapsed.saturating_mul(100) / total.max(1),
            }
        }
    }

    pub(super) fn ready_unix_secs(&self, job: &Job) -> u64 {
        let total = u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX);
        job.accepted_unix_millis.saturating_add(total) / 1000
    }
}

/// Where a job stands when asked.
pub(super) enum Progress {
    Running { percent: u64 },
    Done,
}

/// Jobs in this process only.
#[derive(Default)]
pub(crate) struct InMemoryJobs {
    state: Mutex<JobsState>,
}

#[derive(Default)]
struct JobsState {
    by_id: HashMap<String, Job>,
    by_authorization: HashMap<String, String>,
    order: VecDeque<String>,
}

impl InMemoryJobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, JobsState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn accept_now(&self, job: Job) -> Job {
        let mut state = self.lock();
        if let Some(kept) = state
            .by_authorization
            .get(&job.authorization_id)
            .and_then(|id| state.by_id.get(id))
        {
            return kept.clone();
        }
        if state.order.len() >= MAX_JOBS
            && let Some(oldest) = state.order.pop_front()
            && let Some(old) = state.by_id.remove(&oldest)
        {
            state.by_authorization.remove(&old.authorization_id);
        }
        state.order.push_back(job.id.clone());
        state
            .by_authorization
            .insert(job.authorization_id.clone(), job.id.clone());
        state.by_id.insert(job.id.clone(), job.clone());
        job
    }
}

impl JobStore for InMemoryJobs {
    fn accept(&self, job: Job) -> BoxFuture<'_, Result<Job, StoreError>> {
        Box::pin(std::future::ready(Ok(self.accept_now(job))))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Job>, StoreError>> {
        let job = self.lock().by_id.get(id).cloned();
        Box::pin(std::future::ready(Ok(job)))
    }

    fn by_authorization<'a>(
        &'a self,
        authorization_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, StoreError>> {
        let state = self.lock();
        let job = state
            .by_authorization
            .get(authorization_id)
            .and_then(|id| state.by_id.get(id))
            .cloned();
        Box::pin(std::future::ready(Ok(job)))
    }
}

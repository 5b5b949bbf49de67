//! The job store: accepted image jobs, by id and by the paying authorization.
//!
//! Progress is computed from the clock when asked, so nothing runs in the
//! background; memory stays bounded by [`MAX_JOBS`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use walletgate::SharedClock;
use walletgate::x402::Price;

use crate::extensions::ImageRequest;

/// Jobs kept; the oldest are forgotten beyond this (memory stays bounded).
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

/// Accepted jobs, by id and by paying authorization.
pub(crate) struct ImageJobs {
    clock: SharedClock,
    duration: Duration,
    state: Mutex<JobsState>,
}

#[derive(Default)]
struct JobsState {
    by_id: HashMap<String, Job>,
    by_authorization: HashMap<String, String>,
    order: VecDeque<String>,
    next: u64,
}

/// Where a job stands when asked.
pub(super) enum Progress {
    Running { percent: u64 },
    Done,
}

impl ImageJobs {
    /// Jobs that take `duration` each, timed by `clock`.
    pub(crate) fn new(clock: SharedClock, duration: Duration) -> Self {
        Self {
            clock,
            duration,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JobsState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The job paid by `authorization_id`, or a new one for `request`.
    pub(super) fn accept(
        &self,
        request: ImageRequest,
        price: Price,
        authorization_id: &str,
    ) -> Job {
        let mut state = self.lock();
        if let Some(job) = state
            .by_authorization
            .get(authorization_id)
            .and_then(|id| state.by_id.get(id))
        {
            return job.clone();
        }
        state.next += 1;
        let id = format!(
            "imgjob_{:016x}{:08x}",
            self.clock.now_unix_millis(),
            state.next
        );
        let job = Job {
            id: id.clone(),
            request,
            price,
            authorization_id: authorization_id.to_owned(),
            accepted_unix_millis: self.clock.now_unix_millis(),
        };
        if state.order.len() >= MAX_JOBS
            && let Some(oldest) = state.order.pop_front()
            && let Some(old) = state.by_id.remove(&oldest)
        {
            state.by_authorization.remove(&old.authorization_id);
        }
        state.order.push_back(id.clone());
        state
            .by_authorization
            .insert(authorization_id.to_owned(), id.clone());
        state.by_id.insert(id, job.clone());
        job
    }

    pub(super) fn get(&self, id: &str) -> Option<Job> {
        self.lock().by_id.get(id).cloned()
    }

    pub(super) fn by_authorization(&self, authorization_id: &str) -> Option<Job> {
        let state = self.lock();
        let id = state.by_authorization.get(authorization_id)?;
        state.by_id.get(id).cloned()
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

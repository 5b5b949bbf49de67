//! The job store: accepted image jobs, by id and by the paying authorization.
//!
//! Progress is computed from the clock when asked, so nothing runs in the
//! background. Jobs live behind [`JobStore`]: [`InMemoryJobs`] (the default,
//! bounded by [`MAX_JOBS`]) or [`RedisJobs`] (`GATEWAY_REDIS_URL`), which
//! every replica shares, so a paid-but-lost answer is recovered on any of
//! them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use walletgate::SharedClock;
use walletgate::redis::RedisConnection;
use walletgate::store::StoreError;
use walletgate::x402::Price;

use crate::catalogue::Catalogue;
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

/// Jobs in Redis, shared by every replica: `{prefix}:gateway-image:job:{id}`
/// and `{prefix}:gateway-image:paid:{authorization}` hold the same job as
/// JSON (jobs never change), both expiring after the retention.
pub(crate) struct RedisJobs {
    conn: RedisConnection,
    /// Models are stored by id and found again here.
    catalogue: Catalogue,
    retention: Duration,
}

/// The job kept for the authorization, or `ARGV[1]` kept under both keys.
static ACCEPT: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"local kept = redis.call('GET', KEYS[1])
if kept then return kept end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
return ARGV[1]",
    )
});

const SEAM: &str = "gateway-image";

impl RedisJobs {
    /// Jobs kept a day: far beyond any poll of a paid job.
    pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

    pub(crate) fn new(conn: RedisConnection, catalogue: Catalogue) -> Self {
        Self {
            conn,
            catalogue,
            retention: Self::DEFAULT_RETENTION,
        }
    }

    fn encode(job: &Job) -> String {
        json!({
            "id": job.id,
            "model": job.request.model.id,
            "prompt": job.request.prompt,
            "size": job.request.size,
            "n": job.request.count,
            "authorization": job.authorization_id,
            "accepted_ms": job.accepted_unix_millis,
        })
        .to_string()
    }

    /// A stored job; its model and price come from the catalogue again.
    fn decode(&self, text: &str) -> Result<Job, StoreError> {
        let unreadable = || StoreError::new("image job store: unreadable job");
        let value: Value = serde_json::from_str(text).map_err(|_| unreadable())?;
        let text = |field: &str| {
            value
                .get(field)
                .and_then(Value::as_str)
                .ok_or_else(unreadable)
        };
        let number = |field: &str| {
            value
                .get(field)
                .and_then(Value::as_u64)
                .ok_or_else(unreadable)
        };
        let model = self
            .catalogue
            .image_model(text("model")?)
            .ok_or_else(unreadable)?
            .clone();
        let count = number("n")?;
        let price = model.image_price(count).ok_or_else(unreadable)?;
        Ok(Job {
            id: text("id")?.to_owned(),
            request: ImageRequest {
                model,
                prompt: text("prompt")?.to_owned(),
                size: text("size")?.to_owned(),
                count,
            },
            price,
            authorization_id: text("authorization")?.to_owned(),
            accepted_unix_millis: number("accepted_ms")?,
        })
    }

    async fn read(&self, key: String) -> Result<Option<Job>, StoreError> {
        let text: Option<String> = self
            .conn
            .call("image job read", |mut c| async move {
                redis::cmd("GET").arg(key).query_async(&mut c).await
            })
            .await?;
        text.map(|text| self.decode(&text)).transpose()
    }
}

impl JobStore for RedisJobs {
    fn accept(&self, job: Job) -> BoxFuture<'_, Result<Job, StoreError>> {
        Box::pin(async move {
            let paid = self
                .conn
                .key(SEAM, &format!("paid:{}", job.authorization_id));
            let by_id = self.conn.key(SEAM, &format!("job:{}", job.id));
            let encoded = Self::encode(&job);
            let retention = self.retention.as_secs().max(1);
            let kept: String = self
                .conn
                .call("image job accept", |mut c| async move {
                    ACCEPT
                        .key(paid)
                        .key(by_id)
                        .arg(encoded)
                        .arg(retention)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            self.decode(&kept)
        })
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Job>, StoreError>> {
        Box::pin(self.read(self.conn.key(SEAM, &format!("job:{id}"))))
    }

    fn by_authorization<'a>(
        &'a self,
        authorization_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, StoreError>> {
        Box::pin(self.read(self.conn.key(SEAM, &format!("paid:{authorization_id}"))))
    }
}

//! Paid image jobs in Redis (feature `redis`, `GATEWAY_REDIS_URL`).

use std::sync::LazyLock;
use std::time::Duration;

use serde_json::{Value, json};
use walletgate::redis::RedisConnection;
use walletgate::store::StoreError;

use super::jobs::{Job, JobStore};
use crate::catalogue::Catalogue;
use crate::extensions::ImageRequest;
use crate::upstream::BoxFuture;

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

/// Both keys of a job are written by one script: on a Redis Cluster they
/// share this group's hash slot (`{prefix}:{gateway-image}:…`).
const GROUP: &str = SEAM;

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
            let paid =
                (self.conn).grouped_key(GROUP, SEAM, &format!("paid:{}", job.authorization_id));
            let by_id = (self.conn).grouped_key(GROUP, SEAM, &format!("job:{}", job.id));
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
        Box::pin(self.read(self.conn.grouped_key(GROUP, SEAM, &format!("job:{id}"))))
    }

    fn by_authorization<'a>(
        &'a self,
        authorization_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Job>, StoreError>> {
        Box::pin(self.read((self.conn).grouped_key(
            GROUP,
            SEAM,
            &format!("paid:{authorization_id}"),
        )))
    }
}

/// One contract for both job stores: the same assertions in memory and on Redis.
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::images::jobs::InMemoryJobs;
    use crate::redis_support::{shared_url, unique_prefix};

    fn job(id: &str, authorization: &str) -> Job {
        let catalogue = Catalogue::embedded();
        let model = catalogue.image_model("openai/dall-e-3").unwrap().clone();
        Job {
            id: id.to_owned(),
            price: model.image_price(2).unwrap(),
            request: ImageRequest {
                model,
                prompt: "a red fox".to_owned(),
                size: "512x512".to_owned(),
                count: 2,
            },
            authorization_id: authorization.to_owned(),
            accepted_unix_millis: 1_750_000_000_123,
        }
    }

    async fn one_job_per_authorization_found_by_id_and_by_authorization(store: Arc<dyn JobStore>) {
        let kept = store.accept(job("imgjob_1", "auth-1")).await.unwrap();
        assert_eq!(kept.id, "imgjob_1");
        // The same payment again (its answer was lost): the job it bought, no second one.
        let again = store.accept(job("imgjob_2", "auth-1")).await.unwrap();
        assert_eq!(again.id, "imgjob_1");
        assert!(store.get("imgjob_2").await.unwrap().is_none());
        let found = store.get("imgjob_1").await.unwrap().unwrap();
        let expected = job("imgjob_1", "auth-1");
        assert_eq!(found.authorization_id, "auth-1");
        assert_eq!(found.price, expected.price);
        assert_eq!(found.request.model.id, expected.request.model.id);
        assert_eq!(
            (
                found.request.prompt.as_str(),
                found.request.size.as_str(),
                found.request.count
            ),
            ("a red fox", "512x512", 2)
        );
        assert_eq!(found.accepted_unix_millis, expected.accepted_unix_millis);
        assert_eq!(
            store.by_authorization("auth-1").await.unwrap().unwrap().id,
            "imgjob_1"
        );
        assert!(store.by_authorization("auth-2").await.unwrap().is_none());
        // Another payment makes another job.
        let other = store.accept(job("imgjob_3", "auth-2")).await.unwrap();
        assert_eq!(other.id, "imgjob_3");
    }

    #[tokio::test]
    async fn in_memory() {
        one_job_per_authorization_found_by_id_and_by_authorization(Arc::new(
            InMemoryJobs::default(),
        ))
        .await;
    }

    #[tokio::test]
    async fn on_redis() {
        let config =
            walletgate::redis::RedisConfig::new(shared_url()).with_prefix(unique_prefix("jobs"));
        let conn = RedisConnection::open(&config).unwrap();
        let store = RedisJobs::new(conn, Catalogue::embedded());
        one_job_per_authorization_found_by_id_and_by_authorization(Arc::new(store)).await;
    }
}

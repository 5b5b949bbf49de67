//! `{NAME}_REDIS_URL` and `{NAME}_REDIS_PREFIX`: the Redis several replicas
//! of a reference server share (feature `redis`; without the variable every
//! store stays in memory).

use std::fmt;
use std::time::Duration;

/// Where the shared Redis is.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedisSettings {
    /// `redis://host:port/db`; may carry a password, so never printed.
    pub(crate) url: String,
    /// Key prefix: replicas of one service share it.
    pub(crate) prefix: String,
    /// Bound on one Redis call; `None`: the library's default (250 ms).
    pub(crate) timeout: Option<Duration>,
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisSettings {
    /// The Redis at `url`, keys under `prefix`, the default timeout.
    pub(crate) fn new(url: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: prefix.into(),
            timeout: None,
        }
    }

    /// Bounds every Redis call by `timeout` instead of the default.
    #[cfg(test)]
    #[allow(dead_code)] // the gateway's replica tests use it, the data API's do not
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// `{name}_REDIS_URL` (and `{name}_REDIS_PREFIX`, default `walletgate`)
    /// as `var` reads them; `Err((variable, reason))` for an unusable value.
    pub(crate) fn from_vars(
        var: &impl Fn(&str) -> Option<String>,
        name: &str,
    ) -> Result<Option<Self>, (String, String)> {
        let url_variable = format!("{name}_REDIS_URL");
        let Some(url) = var(&url_variable).filter(|url| !url.is_empty()) else {
            return Ok(None);
        };
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err((url_variable, "expected redis://host:port[/db]".into()));
        }
        if !cfg!(feature = "redis") {
            return Err((url_variable, "this build lacks the `redis` feature".into()));
        }
        let prefix = var(&format!("{name}_REDIS_PREFIX")).unwrap_or_else(|| "walletgate".into());
        Ok(Some(Self::new(url, prefix)))
    }

    /// Opens the shared, reconnecting connection (inside a tokio runtime);
    /// it connects lazily, so a server starts while Redis is still down.
    #[cfg(feature = "redis")]
    pub(crate) fn open(
        &self,
    ) -> Result<walletgate::redis::RedisConnection, walletgate::store::StoreError> {
        walletgate::redis::RedisConnection::open(&self.config())
    }

    /// The library's settings for this Redis.
    #[cfg(feature = "redis")]
    pub(crate) fn config(&self) -> walletgate::redis::RedisConfig {
        let config = walletgate::redis::RedisConfig::new(&self.url).with_prefix(&self.prefix);
        match self.timeout {
            Some(timeout) => config.with_timeout(timeout),
            None => config,
        }
    }
}

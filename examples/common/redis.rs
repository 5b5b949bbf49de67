//! `{NAME}_REDIS_URL`, `{NAME}_REDIS_MODE`, `{NAME}_REDIS_PREFIX`,
//! `{NAME}_REDIS_CA_FILE` and `{NAME}_REDIS_WAIT_REPLICAS`: the Redis several
//! replicas of a reference server share (feature `redis`; `rediss://` needs
//! `redis-tls`; without the URL every store stays in memory).
//! `{NAME}_REDIS_MODE=cluster` reads the URL as a comma-separated list of a
//! Redis Cluster's seed nodes.

use std::fmt;
use std::time::Duration;

/// Where the shared Redis is.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedisSettings {
    /// `redis://host:port/db`; may carry a password, so never printed. On a
    /// cluster, the seed nodes' URLs, comma-separated.
    pub(crate) url: String,
    /// A Redis Cluster (`{NAME}_REDIS_MODE=cluster`), not one Redis.
    pub(crate) cluster: bool,
    /// Key prefix: replicas of one service share it.
    pub(crate) prefix: String,
    /// Bound on one Redis call; `None`: the library's default (250 ms).
    pub(crate) timeout: Option<Duration>,
    /// PEM file of the private CA that signed a `rediss://` Redis's
    /// certificate; `None`: Mozilla's roots.
    pub(crate) ca_file: Option<std::path::PathBuf>,
    /// Replicas each write that guards money or replay waits for (`WAIT`); 0: none.
    pub(crate) wait_replicas: u32,
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("cluster", &self.cluster)
            .field("prefix", &self.prefix)
            .field("wait_replicas", &self.wait_replicas)
            .finish_non_exhaustive()
    }
}

impl RedisSettings {
    /// The Redis at `url`, keys under `prefix`, the default timeout.
    pub(crate) fn new(url: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            cluster: false,
            prefix: prefix.into(),
            timeout: None,
            ca_file: None,
            wait_replicas: 0,
        }
    }

    /// Waits for `replicas` replicas after each write that guards money or replay.
    #[cfg(test)]
    #[allow(dead_code)] // the replica tests use it, which need feature `redis`
    pub(crate) fn with_wait_replicas(mut self, replicas: u32) -> Self {
        self.wait_replicas = replicas;
        self
    }

    /// Bounds every Redis call by `timeout` instead of the default.
    #[cfg(test)]
    #[allow(dead_code)] // the replica tests use it, which need feature `redis`
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A Redis Cluster reached through `seeds`, keys under `prefix`.
    #[cfg(test)]
    #[allow(dead_code)] // the gateway's replica tests use it, the data API's do not
    pub(crate) fn cluster(seeds: &[String], prefix: impl Into<String>) -> Self {
        Self {
            cluster: true,
            ..Self::new(seeds.join(","), prefix)
        }
    }

    /// `{name}_REDIS_URL` (and `{name}_REDIS_MODE`, default `standalone`,
    /// `{name}_REDIS_PREFIX`, default `walletgate`, and
    /// `{name}_REDIS_WAIT_REPLICAS`, default 0) as `var` reads them;
    /// `Err((variable, reason))` for an unusable value.
    pub(crate) fn from_vars(
        var: &impl Fn(&str) -> Option<String>,
        name: &str,
    ) -> Result<Option<Self>, (String, String)> {
        let url_variable = format!("{name}_REDIS_URL");
        let Some(url) = var(&url_variable).filter(|url| !url.is_empty()) else {
            return Ok(None);
        };
        if !cfg!(feature = "redis") {
            return Err((url_variable, "this build lacks the `redis` feature".into()));
        }
        #[cfg(feature = "redis")]
        let (cluster, tls) = {
            let mode_variable = format!("{name}_REDIS_MODE");
            let mode: walletgate::redis::RedisMode = var(&mode_variable)
                .unwrap_or_default()
                .parse()
                .map_err(|error: walletgate::redis::RedisUrlError| {
                    (mode_variable.clone(), error.to_string())
                })?;
            walletgate::redis::RedisConfig::from_setting(&url, mode)
                .map_err(|error| (url_variable.clone(), error.to_string()))?;
            (
                mode == walletgate::redis::RedisMode::Cluster,
                url.trim_start().starts_with("rediss://"),
            )
        };
        #[cfg(not(feature = "redis"))]
        let (cluster, tls) = (false, false);
        let urls: Vec<&str> = url.split(',').map(str::trim).collect();
        let ca_variable = format!("{name}_REDIS_CA_FILE");
        let ca_file = var(&ca_variable).filter(|file| !file.is_empty());
        if ca_file.is_some() && !tls {
            return Err((ca_variable, "a CA file needs a rediss:// URL".into()));
        }
        let wait_variable = format!("{name}_REDIS_WAIT_REPLICAS");
        let wait_replicas = match var(&wait_variable).filter(|n| !n.is_empty()) {
            None => 0,
            Some(n) => n.trim().parse::<u32>().map_err(|_| {
                (
                    wait_variable,
                    "expected a number of replicas (0: wait for none)".to_owned(),
                )
            })?,
        };
        let prefix = var(&format!("{name}_REDIS_PREFIX")).unwrap_or_else(|| "walletgate".into());
        let mut settings = Self::new(urls.join(","), prefix);
        settings.cluster = cluster;
        settings.ca_file = ca_file.map(Into::into);
        settings.wait_replicas = wait_replicas;
        Ok(Some(settings))
    }

    /// Opens the shared, reconnecting connection (inside a tokio runtime);
    /// it connects lazily, so a server starts while Redis is still down.
    /// An unreadable CA file or an unusable URL is an error at start.
    #[cfg(feature = "redis")]
    pub(crate) fn open(&self) -> Result<walletgate::redis::RedisConnection, String> {
        let config = self.config()?;
        walletgate::redis::RedisConnection::open(&config)
            .map_err(|err| walletgate::error_chain(&err))
    }

    /// The library's settings for this Redis (reads the CA file, if any).
    #[cfg(feature = "redis")]
    pub(crate) fn config(&self) -> Result<walletgate::redis::RedisConfig, String> {
        let mode = if self.cluster {
            walletgate::redis::RedisMode::Cluster
        } else {
            walletgate::redis::RedisMode::Standalone
        };
        let config = walletgate::redis::RedisConfig::from_setting(&self.url, mode)
            .map_err(|error| error.to_string())?;
        let config = config
            .with_prefix(&self.prefix)
            .with_wait_replicas(self.wait_replicas);
        let config = match self.timeout {
            Some(timeout) => config.with_timeout(timeout),
            None => config,
        };
        #[cfg(feature = "redis-tls")]
        if let Some(file) = &self.ca_file {
            let pem = std::fs::read(file)
                .map_err(|err| format!("Redis CA file {}: {err}", file.display()))?;
            return Ok(config.with_ca_certificates(pem));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Option<RedisSettings>, (String, String)> {
        let var = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        RedisSettings::from_vars(&var, "SVC")
    }

    #[test]
    fn rediss_needs_the_tls_feature_and_a_ca_file_needs_rediss() {
        let tls = read(&[
            ("SVC_REDIS_URL", "rediss://127.0.0.1:6380"),
            ("SVC_REDIS_CA_FILE", "/etc/redis-ca.pem"),
        ]);
        if cfg!(feature = "redis-tls") {
            let settings = tls.unwrap().unwrap();
            assert_eq!(
                settings.ca_file.as_deref(),
                Some(std::path::Path::new("/etc/redis-ca.pem"))
            );
        } else if cfg!(feature = "redis") {
            let (variable, reason) = tls.unwrap_err();
            assert_eq!(variable, "SVC_REDIS_URL");
            assert!(reason.contains("`redis-tls`"), "{reason}");
        }
        if cfg!(feature = "redis") {
            let (variable, _) = read(&[
                ("SVC_REDIS_URL", "redis://127.0.0.1:6379"),
                ("SVC_REDIS_CA_FILE", "/etc/redis-ca.pem"),
            ])
            .unwrap_err();
            assert_eq!(variable, "SVC_REDIS_CA_FILE");
        }
    }

    #[test]
    fn cluster_mode_reads_comma_separated_seeds_of_one_scheme() {
        let standalone = read(&[("SVC_REDIS_URL", "redis://a:6379,redis://b:6379")]);
        let (variable, reason) = standalone.unwrap_err();
        assert_eq!(variable, "SVC_REDIS_URL");
        assert!(reason.contains("REDIS_MODE=cluster"), "{reason}");
        let (variable, _) = read(&[
            ("SVC_REDIS_URL", "redis://a:6379"),
            ("SVC_REDIS_MODE", "sentinel"),
        ])
        .unwrap_err();
        assert_eq!(variable, "SVC_REDIS_MODE");
        if cfg!(feature = "redis") {
            let cluster = read(&[
                ("SVC_REDIS_URL", "redis://a:7000, redis://b:7001"),
                ("SVC_REDIS_MODE", "cluster"),
            ])
            .unwrap()
            .unwrap();
            assert!(cluster.cluster);
            assert_eq!(cluster.url, "redis://a:7000,redis://b:7001");
            let (_, reason) = read(&[
                ("SVC_REDIS_URL", "redis://a:7000,rediss://b:7001"),
                ("SVC_REDIS_MODE", "cluster"),
            ])
            .unwrap_err();
            assert!(reason.contains("mixes"), "{reason}");
        }
    }

    #[test]
    fn wait_replicas_is_a_count_and_a_bad_one_names_the_variable() {
        let url = ("SVC_REDIS_URL", "redis://127.0.0.1:6379");
        if !cfg!(feature = "redis") {
            return;
        }
        assert_eq!(read(&[url]).unwrap().unwrap().wait_replicas, 0);
        let two = read(&[url, ("SVC_REDIS_WAIT_REPLICAS", "2")]);
        assert_eq!(two.unwrap().unwrap().wait_replicas, 2);
        for bad in ["-1", "two", "1.5"] {
            let (variable, reason) = read(&[url, ("SVC_REDIS_WAIT_REPLICAS", bad)]).unwrap_err();
            assert_eq!(variable, "SVC_REDIS_WAIT_REPLICAS", "{bad}");
            assert!(reason.contains("number"), "{reason}");
        }
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn an_unreadable_ca_file_fails_at_start_naming_it() {
        let mut settings = RedisSettings::new("rediss://127.0.0.1:6380", "svc");
        settings.ca_file = Some("/nonexistent/redis-ca.pem".into());
        let opened = settings.open();
        if cfg!(feature = "redis-tls") {
            assert!(opened.unwrap_err().contains("/nonexistent/redis-ca.pem"));
        }
    }
}

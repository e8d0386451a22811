//! [`LockClientBuilder`]: a client's settings, and connecting to the store its URL names.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{ClientInner, LockClient};
use crate::backend::Backend;
use crate::backend::memory::MemoryBackend;
use crate::error::LockError;

/// Settings for a [`LockClient`]; made by [`LockClient::builder`].
///
/// ```
/// # use distlock_runtime as distlock;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockClient;
///
/// let client = LockClient::builder("memory://")
///     .prefix("billing:lock:")
///     .default_lease(Duration::from_secs(5))
///     .default_wait(Duration::from_secs(1))
///     .fencing(true)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `.build().await`"]
pub struct LockClientBuilder {
    pub(super) url: String,
    pub(super) prefix: String,
    pub(super) fencing_prefix: String,
    pub(super) default_lease: Duration,
    pub(super) default_wait: Option<Duration>,
    pub(super) fencing: bool,
    /// Set by the builder: over the URL's `?lock_delay=`.
    pub(super) lock_delay: Option<Duration>,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) node_timeout: Option<Duration>,
    pub(super) sql: crate::backend::sql::SqlOptions,
    pub(super) tls: Option<crate::tls::TlsConfig>,
    pub(super) password: Option<String>,
}

impl LockClientBuilder {
    /// Prefix of every lock key in the backend (default `lock:`), so locks of several
    /// applications sharing one server stay apart.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Prefix of the fencing counters (default `lock-fence:`). It must not overlap the lock
    /// prefix, so a counter can never be mistaken for a lock.
    pub fn fencing_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.fencing_prefix = prefix.into();
        self
    }

    /// Lease of locks whose request does not set one (default 30 s).
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.default_lease = lease;
        self
    }

    /// How long requests wait for a busy lock unless they say (default 10 s; zero = try once).
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.default_wait = Some(wait);
        self
    }

    /// Requests wait for a busy lock as long as it takes unless they say otherwise.
    pub fn default_wait_forever(mut self) -> Self {
        self.default_wait = None;
        self
    }

    /// Hand out fencing tokens on every acquisition unless the request says otherwise
    /// (default off; costs one counter per key in the backend, see the crate docs). On a
    /// store without them, [`build`](Self::build) fails with
    /// [`LockError::Unsupported`](crate::LockError::Unsupported) (which stores: the table in
    /// `distlock::guide::backends`).
    pub fn fencing(mut self, enabled: bool) -> Self {
        self.fencing = enabled;
        self
    }

    /// The lock-delay of every request that names none (default none; the URL's
    /// `?lock_delay=5s` sets it too, and this wins over the URL). After an involuntary loss —
    /// a holder that stopped renewing (crashed, paused, cut off) — nobody is granted the key
    /// until this long after its lease ran out on the store; a release frees it at once. See
    /// [`LockRequest::lock_delay`](crate::LockRequest::lock_delay).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// Bound on establishing a connection (default 3 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Bound on one command's reply (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Redlock (`redlock://`): how long each node may take to answer one command. A node
    /// slower than this is counted as down for that call (and an acquisition whose vote missed
    /// its majority is retried while its `wait` lasts).
    ///
    /// By default it follows the lock's lease: a tenth of it, at least
    /// [`AUTO_NODE_TIMEOUT_MIN`](LockClient::AUTO_NODE_TIMEOUT_MIN) (100 ms) and at most
    /// [`AUTO_NODE_TIMEOUT_MAX`](LockClient::AUTO_NODE_TIMEOUT_MAX) (1 s), never more than a
    /// third of the lease — 500 ms for a 5 s lease, 1 s for the default 30 s. Any value keeps
    /// Redlock's validity accounting honest: a grant counts only if
    /// `lease − elapsed − drift` is positive, with `elapsed` measured. A vote stops waiting
    /// as soon as a majority granted, so a hung minority does not slow acquisitions; the
    /// timeout bounds what a silent node costs a failed vote, a renewal or a release.
    /// Setting it fixes one value for every lock.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// SQL backends (`postgres://`, `mysql://`): the lock table (default `distlock_locks`; `schema.table`
    /// allowed). Fencing counters live in `<table>_fences`. Overrides the URL's `table=`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.sql.table = Some(table.into());
        self
    }

    /// SQL backends: whether connecting creates the lock tables when they are missing
    /// (default `true`). Turn it off when your migrations own the schema — the guide prints
    /// the DDL (`distlock::guide::postgres`, `distlock::guide::mysql`) — and the user
    /// distlock connects as may not create tables. Either way, connecting checks that the tables have the columns distlock needs. Overrides the URL's
    /// `create_table=`.
    pub fn create_table(mut self, create: bool) -> Self {
        self.sql.create_table = Some(create);
        self
    }

    /// SQL backends: how many connections the client opens (default 4, at most 64), plus one
    /// that listens for releases while somebody waits. Statements are pipelined on each
    /// connection, so a few serve many tasks. Overrides the URL's `pool_size=`.
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.sql.pool_size = Some(connections);
        self
    }

    /// TLS trust and identity given in code (certificates from a secret store rather than
    /// files): they win over the URL's file parameters, field by field. The URL still says
    /// whether to use TLS (`rediss://`, `sslmode=`, `etcds://`, …); see [`TlsConfig`].
    ///
    /// [`TlsConfig`]: crate::TlsConfig
    pub fn tls(mut self, tls: crate::tls::TlsConfig) -> Self {
        self.sql.tls = Some(tls.clone());
        self.tls = Some(tls);
        self
    }

    /// The password to authenticate with, kept out of the URL (so it shows in no `ps`
    /// listing, crontab or log line); it replaces a password the URL has. The URL's user name,
    /// if any, is the user. Never shown in an error, a log line or `Debug`.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Validates the settings and connects.
    pub async fn build(self) -> Result<LockClient, LockError> {
        check_lease(self.default_lease, None)?;
        crate::metrics::describe();
        if self.connect_timeout.is_zero()
            || self.response_timeout.is_zero()
            || self.node_timeout.is_some_and(|t| t.is_zero())
        {
            return Err(LockError::Config(
                "connect, response and node timeouts must be longer than zero".into(),
            ));
        }
        if self.prefix.starts_with(&self.fencing_prefix)
            || self.fencing_prefix.starts_with(&self.prefix)
        {
            return Err(LockError::Config(format!(
                "the lock prefix {:?} and the fencing prefix {:?} overlap, so a fencing counter \
                 could collide with a lock; choose prefixes where neither starts with the other",
                self.prefix, self.fencing_prefix
            )));
        }
        let with_password = match &self.password {
            Some(password) => crate::url::with_password(self.url.trim(), password),
            None => self.url.trim().to_owned(),
        };
        // `?lock_delay=` is the client's, on every scheme: taken out before a backend reads
        // the URL's parameters.
        let mut url_delay: Option<Result<Duration, String>> = None;
        let without_delay = crate::url::take_query(&with_password, |name, value| {
            if name != "lock_delay" {
                return false;
            }
            url_delay = Some(crate::url::parse_duration(value).ok_or_else(|| value.to_owned()));
            true
        });
        let url_delay = url_delay.transpose().map_err(|value| {
            LockError::Config(format!(
                "`lock_delay={value}` in `{}` is not a duration: write it as `5s`, `1500ms`, \
                 `2m` or `1h`",
                redact(&with_password)
            ))
        })?;
        let lock_delay = self.lock_delay.or(url_delay).unwrap_or_default();
        check_lock_delay(lock_delay, None)?;
        let url = without_delay.as_str();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(LockError::Config(format!(
                "`{}` is not a lock backend URL: expected `scheme://…`, e.g. \
                 `redis://127.0.0.1:6379` or `memory://`",
                redact(url)
            )));
        };
        let backend: Arc<dyn Backend> = match scheme {
            "memory" => MemoryBackend::named(rest.trim_end_matches('/')),
            "redis" | "rediss" | "redis+unix" | "unix" | "redlock" | "redlocks"
            | "redis+cluster" | "rediss+cluster" | "redis+sentinel" | "rediss+sentinel" => {
                self.connect_redis(scheme, url).await?
            }
            "postgres" | "postgresql" => self.connect_postgres(url).await?,
            "mysql" => self.connect_mysql(url).await?,
            "zk" | "zks" => self.connect_zookeeper(url).await?,
            "etcd" | "etcds" => self.connect_etcd(url).await?,
            "nats" | "natss" => self.connect_nats(url).await?,
            _ => {
                return Err(LockError::Config(format!(
                    "unknown lock backend scheme `{scheme}://` in `{}`: supported are \
                     `memory://`, `redis://` / `rediss://`, `redlock://`, `redis+cluster://`, \
                     `redis+sentinel://`, `postgres://`, `mysql://`, `zk://`, `etcd://` and `nats://`",
                    redact(url)
                )));
            }
        };
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                renewer: crate::renew::Renewer::new(Arc::clone(&backend)),
                hash_tags: backend.capabilities().slot.is_some(),
                backend,
                url: redact(&with_password),
                prefix: self.prefix,
                default_lease: self.default_lease,
                default_wait: self.default_wait,
                fencing: self.fencing,
                lock_delay,
                response_timeout: self.response_timeout,
            }),
        })
    }

    /// The TLS trust and identity of a connection whose URL asks for TLS (`tls`): the URL's
    /// files with what the builder gives over them. A URL that names TLS files, or a builder
    /// given TLS settings, without asking for TLS is an error (it would silently connect in
    /// plain text), as is TLS in a build without the `tls` feature. `plain_to_tls` says how
    /// the URL asks for TLS.
    #[cfg(any(
        feature = "redis",
        feature = "zookeeper",
        feature = "etcd",
        feature = "nats"
    ))]
    fn tls_settings(
        &self,
        tls: bool,
        files: &crate::tls::TlsFiles,
        url: &str,
        plain_to_tls: &str,
    ) -> Result<Option<crate::tls::TlsConfig>, LockError> {
        let shown = redact(url);
        if !tls {
            if let Some((name, _)) = files
                .ca
                .as_ref()
                .or(files.cert.as_ref())
                .or(files.key.as_ref())
            {
                return Err(LockError::Config(format!(
                    "`{name}=` in {shown} applies to TLS connections, and this URL asks for \
                     none: {plain_to_tls}"
                )));
            }
            if self.tls.as_ref().is_some_and(|tls| !tls.is_empty()) {
                return Err(LockError::Config(format!(
                    "TLS settings were given (`LockClientBuilder::tls`), but {shown} asks for \
                     no TLS: {plain_to_tls}"
                )));
            }
            return Ok(None);
        }
        tls_built(&shown, cfg!(feature = "tls"))?;
        files.load(self.tls.as_ref(), &shown).map(Some)
    }

    #[cfg(feature = "redis")]
    async fn connect_redis(&self, scheme: &str, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        let tls = matches!(
            scheme,
            "rediss" | "rediss+cluster" | "rediss+sentinel" | "redlocks"
        );
        let (url, files) = crate::tls::TlsFiles::take(url, ["cacert", "cert", "key"]);
        if tls && url.ends_with("#insecure") {
            return Err(LockError::Config(format!(
                "`#insecure` in {}: distlock does not turn certificate checks off; name the \
                 server's CA instead (`?cacert=/path/ca.pem`)",
                redact(&url)
            )));
        }
        let tls = self.tls_settings(
            tls,
            &files,
            &url,
            "use `rediss://`, `rediss+cluster://`, `rediss+sentinel://` or `redlocks://`",
        )?;
        let (url, replicas) =
            crate::backend::redis::take_replicas(&url).map_err(LockError::Config)?;
        let url = url.as_str();
        let settings = crate::backend::redis::RedisSettings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            fence_prefix: self.fencing_prefix.clone(),
            retries: crate::backend::redis::RETRIES,
            replicas,
            tls,
        };
        match scheme {
            "redlock" | "redlocks" if replicas > 0 => Err(LockError::Config(format!(
                "`replicas` does not apply to `redlock://` (each Redlock node is a master of its \
                 own, and a grant already needs a majority of them): for a master with replicas \
                 use `redis+sentinel://…?replicas={replicas}` or `redis://…?replicas={replicas}`"
            ))),
            "redis+sentinel" | "rediss+sentinel" => Ok(
                crate::backend::redis::RedisBackend::connect_sentinel(url, redact(url), settings)
                    .await?,
            ),
            "redlock" | "redlocks" => {
                if self.fencing {
                    crate::backend::redis::redlock::CAPABILITIES
                        .require(crate::Feature::Fencing, None)?;
                }
                Ok(crate::backend::redis::redlock::RedlockBackend::connect(
                    url,
                    settings,
                    self.node_timeout,
                )
                .await?)
            }
            "redis+cluster" | "rediss+cluster" => {
                if self.prefix.contains('{') || self.fencing_prefix.contains('{') {
                    return Err(LockError::Config(format!(
                        "in a Redis Cluster the lock and fencing prefixes may not contain `{{` \
                         (distlock puts each lock in a hash tag of its own): got {:?} and {:?}",
                        self.prefix, self.fencing_prefix
                    )));
                }
                let nodes = crate::backend::redis::node_urls(url, settings.tls.is_some())
                    .map_err(LockError::Config)?;
                Ok(crate::backend::redis::RedisBackend::connect_cluster(
                    &nodes,
                    redact(url),
                    settings,
                )
                .await?)
            }
            _ => Ok(crate::backend::redis::RedisBackend::connect(url, settings).await?),
        }
    }

    #[cfg(feature = "postgres")]
    async fn connect_postgres(&self, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        let (settings, driver_url) = crate::backend::sql::SqlSettings::from_url(
            url,
            &self.sql,
            self.connect_timeout,
            self.response_timeout,
        )?;
        if settings.named {
            return Err(LockError::Config(format!(
                "`mode=named` in {}: named locks (`GET_LOCK`) are MySQL's and MariaDB's; \
                 PostgreSQL's counterpart is `mode=advisory`",
                crate::url::redact_url(url)
            )));
        }
        if let Some(max_lease) = settings.advisory {
            return Ok(
                crate::backend::postgres::advisory::AdvisoryBackend::connect(
                    &driver_url,
                    settings,
                    max_lease,
                )
                .await?,
            );
        }
        Ok(crate::backend::postgres::PostgresBackend::connect(&driver_url, settings).await?)
    }

    #[cfg(feature = "mysql")]
    async fn connect_mysql(&self, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        let (settings, driver_url) = crate::backend::sql::SqlSettings::from_url(
            url,
            &self.sql,
            self.connect_timeout,
            self.response_timeout,
        )?;
        if settings.advisory.is_some() {
            return Err(LockError::Config(format!(
                "`mode=advisory` in {}: MySQL's and MariaDB's counterpart of PostgreSQL's \
                 advisory locks is `mode=named` (`GET_LOCK`); or leave the mode out (the lock \
                 table)",
                crate::url::redact_url(url)
            )));
        }
        if settings.transaction_pooler || settings.listen_url.is_some() {
            return Err(LockError::Config(format!(
                "`pooler` and `listen_url` in {} are PostgreSQL's: a MySQL lock client keeps no \
                 session state between statements, and waits without `LISTEN`; remove them",
                crate::url::redact_url(url)
            )));
        }
        if settings.named {
            return Ok(
                crate::backend::mysql::named::NamedBackend::connect(&driver_url, settings).await?,
            );
        }
        Ok(crate::backend::mysql::MysqlBackend::connect(&driver_url, settings).await?)
    }

    #[cfg(feature = "zookeeper")]
    async fn connect_zookeeper(&self, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        let (url, files) = crate::tls::TlsFiles::take(url, ["cacert", "cert", "key"]);
        let tls = self.tls_settings(url.starts_with("zks://"), &files, &url, "use `zks://`")?;
        crate::backend::zookeeper::ZookeeperBackend::connect(
            &url,
            tls,
            self.connect_timeout,
            self.response_timeout,
            self.default_lease,
        )
        .await
    }

    #[cfg(feature = "etcd")]
    async fn connect_etcd(&self, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        let (url, files) = crate::tls::TlsFiles::take(url, ["cacert", "cert", "key"]);
        let tls = self.tls_settings(url.starts_with("etcds://"), &files, &url, "use `etcds://`")?;
        crate::backend::etcd::EtcdBackend::connect(
            &url,
            tls,
            self.connect_timeout,
            self.response_timeout,
            self.default_lease,
        )
        .await
    }

    #[cfg(feature = "nats")]
    async fn connect_nats(&self, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        let (url, files) = crate::tls::TlsFiles::take(url, ["cacert", "cert", "key"]);
        let tls = self.tls_settings(url.starts_with("natss://"), &files, &url, "use `natss://`")?;
        let backend = crate::backend::nats::NatsBackend::connect(
            &url,
            tls,
            self.connect_timeout,
            self.response_timeout,
        )
        .await?;
        Ok(backend)
    }

    #[cfg(not(feature = "nats"))]
    async fn connect_nats(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(missing_feature("nats://", "nats"))
    }

    #[cfg(not(feature = "etcd"))]
    async fn connect_etcd(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(missing_feature("etcd://", "etcd"))
    }

    #[cfg(not(feature = "zookeeper"))]
    async fn connect_zookeeper(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(missing_feature("zk://", "zookeeper"))
    }

    #[cfg(not(feature = "mysql"))]
    async fn connect_mysql(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(missing_feature("mysql://", "mysql"))
    }

    #[cfg(not(feature = "postgres"))]
    async fn connect_postgres(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(missing_feature("postgres://", "postgres"))
    }

    #[cfg(not(feature = "redis"))]
    async fn connect_redis(
        &self,
        _scheme: &str,
        _url: &str,
    ) -> Result<Arc<dyn Backend>, LockError> {
        Err(LockError::Config(
            "the Redis backend is disabled: enable distlock's `redis` feature".into(),
        ))
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("fencing_prefix", &self.fencing_prefix)
            .field("default_lease", &self.default_lease)
            .field("default_wait", &self.default_wait)
            .field("fencing", &self.fencing)
            .field("lock_delay", &self.lock_delay)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("node_timeout", &self.node_timeout)
            .field("tls", &self.tls)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// The error of a URL whose backend this build leaves out: the feature that brings it.
#[cfg(not(all(
    feature = "etcd",
    feature = "zookeeper",
    feature = "mysql",
    feature = "postgres",
    feature = "nats"
)))]
fn missing_feature(scheme: &str, feature: &str) -> LockError {
    LockError::Config(format!(
        "`{scheme}` needs distlock's `{feature}` feature: \
         distlock = {{ version = \"…\", features = [\"{feature}\"] }}"
    ))
}

/// A URL that asks for TLS (`shown`, its password redacted) in a build with or without the
/// `tls` feature (`built`): without, the error that names it.
///
/// `./scripts/test.sh` runs `tests/features.rs` in builds with every feature and with none;
/// the build in between (a backend without `tls`) is this function's unit test.
#[cfg(any(
    feature = "redis",
    feature = "zookeeper",
    feature = "etcd",
    feature = "nats"
))]
fn tls_built(shown: &str, built: bool) -> Result<(), LockError> {
    if built {
        return Ok(());
    }
    Err(LockError::Config(format!(
        "{shown} asks for TLS, which needs distlock's `tls` feature: \
         distlock = {{ version = \"…\", features = [\"tls\"] }}"
    )))
}

pub(super) fn redact(url: &str) -> String {
    crate::url::redact_url(url)
}

pub(crate) fn check_lease(lease: Duration, key: Option<&str>) -> Result<(), LockError> {
    let whose = || key.map(|k| format!(" for lock `{k}`")).unwrap_or_default();
    if lease < LockClient::MIN_LEASE {
        let whose = whose();
        return Err(LockError::Config(format!(
            "lease {lease:?}{whose} is too short: it must be at least {:?} so renewal \
             (every lease/3) has time for a round trip",
            LockClient::MIN_LEASE
        )));
    }
    if lease > LockClient::MAX_LEASE {
        let whose = whose();
        return Err(LockError::Config(format!(
            "lease {lease:?}{whose} is too long: it must be at most {:?} (a lock whose holder \
             died stays taken for a whole lease); keep the lease short and let renewal \
             extend it while the holder lives",
            LockClient::MAX_LEASE
        )));
    }
    Ok(())
}

/// A lock-delay is at most the longest lease (7 days): the key stays taken that long after a
/// holder dies.
pub(crate) fn check_lock_delay(delay: Duration, key: Option<&str>) -> Result<(), LockError> {
    if delay > LockClient::MAX_LEASE {
        let whose = key.map(|k| format!(" for lock `{k}`")).unwrap_or_default();
        return Err(LockError::Config(format!(
            "lock_delay {delay:?}{whose} is too long: it must be at most {:?} (after a holder \
             dies, the key stays taken its lease plus the delay)",
            LockClient::MAX_LEASE
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[allow(unused_imports)] // (every test here needs a backend feature)
    use super::*;

    #[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
    #[test]
    fn tls_in_a_build_without_the_tls_feature_names_it() {
        let shown = redact("rediss://:topsecret@127.0.0.1:1");
        let message = tls_built(&shown, false).unwrap_err().to_string();
        assert!(message.contains("`tls` feature"), "{message}");
        assert!(message.contains("rediss://"), "{message}");
        assert!(!message.contains("topsecret"), "password leaked: {message}");
        assert!(tls_built(&shown, true).is_ok());
    }
}

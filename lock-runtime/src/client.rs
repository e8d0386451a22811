//! [`LockClient`]: the handle users connect once and take locks through.

use std::fmt;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, Kind, LockSpec};
use crate::error::LockError;
use crate::guard::{LockGuard, RenewMode};
use crate::key::{LockName, validate_key};
use crate::runtime::BoxFuture;
use crate::token::OwnerToken;
use crate::{local, wait};

/// A connection to a lock backend: cheap to clone (an `Arc` inside), safe to share between
/// tasks and between tokio runtimes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::LockClient;
///
/// let client = LockClient::connect("memory://").await?;
/// let guard = client.lock("order:42").lease(Duration::from_secs(10)).acquire().await?;
/// // ... the work that must not run twice at once ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<ClientInner>,
}

#[cfg(test)]
impl LockClient {
    pub(crate) fn renewer(&self) -> &Arc<crate::renew::Renewer> {
        &self.inner.renewer
    }
}

struct ClientInner {
    backend: Arc<dyn Backend>,
    renewer: Arc<crate::renew::Renewer>,
    url: String,
    prefix: String,
    /// Wrap names in a hash tag (Redis Cluster).
    hash_tags: bool,
    default_lease: Duration,
    default_wait: Option<Duration>,
    fencing: bool,
    /// Bound on one reply (see [`LockClientBuilder::response_timeout`]).
    response_timeout: Duration,
}

impl LockClient {
    /// The key prefix used unless [`LockClientBuilder::prefix`] sets another: the lock for key
    /// `order:42` is the backend key `lock:order:42`.
    pub const DEFAULT_PREFIX: &'static str = "lock:";
    /// Where fencing counters live unless [`LockClientBuilder::fencing_prefix`] says otherwise.
    pub const DEFAULT_FENCING_PREFIX: &'static str = "lock-fence:";
    /// Lease of a lock unless the client or the request sets another.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// How long an acquisition waits for a busy lock unless told otherwise.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
    /// Bound on establishing a connection to the backend.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
    /// Bound on one command's reply.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
    /// Redlock, unless [`LockClientBuilder::node_timeout`] sets one: the node timeout is a tenth
    /// of the lock's lease, at least this (a busy host delays replies by tens of milliseconds)…
    pub const AUTO_NODE_TIMEOUT_MIN: Duration = Duration::from_millis(100);
    /// … and at most this (a hung node costs a renewal or release no more), and never more
    /// than a third of the lease.
    pub const AUTO_NODE_TIMEOUT_MAX: Duration = Duration::from_secs(1);
    /// The shortest lease accepted: renewal runs every lease/3 and needs room for a round trip.
    pub const MIN_LEASE: Duration = Duration::from_millis(10);
    /// The longest lease accepted (7 days). A lease bounds how long a lock outlives a holder
    /// that crashed; renewal keeps a short lease alive for as long as the holder runs.
    pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

    /// Connects with default settings. The URL scheme picks the backend:
    ///
    /// | URL | backend |
    /// |---|---|
    /// | `memory://` or `memory://name` | in this process only (tests, demos, single-process apps) |
    /// | `redis://[:password@]host:port[/db]` | one Redis server |
    /// | `rediss://…` | Redis over TLS (needs the `tls` feature) |
    /// | `redlock://[:password@]h1:p1,h2:p2,h3:p3[,…]` | Redlock across independent Redis masters (no fencing) |
    /// | `redis+cluster://[:password@]h1:p1,h2:p2,…` | a Redis Cluster (any reachable nodes as seeds) |
    /// | `redis+sentinel://[:password@]s1:26379,s2:26379,…/service[/db]` | the master of a Redis Sentinel service, followed through failovers |
    /// | `…?replicas=N` on `redis://`, `redis+sentinel://`, `redis+cluster://` | a grant or renewal counts once N replicas acknowledged it (`WAIT`) |
    /// | `postgres://user:password@host:port/db[?table=…&pool_size=…&create_table=false]` | a lock table in PostgreSQL (`postgres` feature) |
    /// | `mysql://user:password@host:port/db[?table=…&pool_size=…&create_table=false]` | a lock table in MySQL 8 / MariaDB ≥ 10.6 (`mysql` feature) |
    /// | `zk://h1:2181,h2:2181[/chroot][?session_timeout=10s]` | ZooKeeper ephemeral sequential nodes, one session per lease (`zookeeper` feature) |
    /// | `etcd://h1:2379,h2:2379[/prefix]` | etcd keys on leases, one lease per lease length (`etcd` feature) |
    ///
    /// Connecting checks that the server answers and accepts the credentials, bounded by the
    /// connect timeout, so a wrong URL fails here and not at the first lock. The SQL backends
    /// also create their tables if missing (see [`LockClientBuilder::create_table`]) and check
    /// their shape.
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        LockClient::builder(url).build().await
    }

    /// Starts configuring a client for `url` (see [`connect`](Self::connect) for the schemes).
    pub fn builder(url: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder {
            url: url.into(),
            prefix: LockClient::DEFAULT_PREFIX.to_owned(),
            fencing_prefix: LockClient::DEFAULT_FENCING_PREFIX.to_owned(),
            default_lease: LockClient::DEFAULT_LEASE,
            default_wait: Some(LockClient::DEFAULT_WAIT),
            fencing: false,
            connect_timeout: LockClient::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: LockClient::DEFAULT_RESPONSE_TIMEOUT,
            node_timeout: None,
            sql: Default::default(),
        }
    }

    /// Prepares to acquire the lock `key` with this client's defaults; adjust with the
    /// [`LockRequest`] methods, then `.acquire().await` (or just `.await`).
    pub fn lock(&self, key: impl Into<String>) -> LockRequest {
        LockRequest {
            client: self.clone(),
            key: key.into(),
            lease: self.inner.default_lease,
            wait: self.inner.default_wait,
            renew: true,
            fencing: self.inner.fencing,
            fair: false,
            kind: Kind::Exclusive,
            permits: 0,
            set: None,
            min_hold: Duration::ZERO,
        }
    }

    /// Prepares to acquire every lock of `keys` at once, for work that must hold them all —
    /// moving money between two accounts, stock between two warehouses. Keys are
    /// de-duplicated and taken in one canonical order (by the bytes of their backend names),
    /// whatever order they are named in, so two callers naming the same keys in opposite
    /// orders never deadlock each other.
    ///
    /// Where one request can take every key — one Redis script on one server (or one Cluster
    /// slot), one etcd transaction (plain locks), one operation of the `memory://` store — an
    /// attempt takes all of them or none, so
    /// a set that is free is taken in one round trip and nothing is held while a busy key is
    /// waited for. If a key is busy, the keys are waited for one by one in canonical order
    /// (which is what every other backend does from the start); one `wait` covers the whole
    /// set, and when it runs out — or any key fails — every key taken so far is released
    /// before the error returns ([`LockError::Timeout`] names the key that was busy).
    ///
    /// The same [`LockRequest`] methods (`.read()` takes every key shared) and one
    /// [`LockGuard`] for the set: [`LockGuard::keys`], [`LockGuard::fencing_tokens`]; one
    /// watchdog renews every key together, the guard is lost when any key's lease is, and
    /// release gives every key back. No keys at all fails with [`LockError::Config`]; every key
    /// is validated as [`lock`](Self::lock) does, the error naming the bad one. A semaphore, or
    /// a fair request, of several keys is refused with [`LockError::Config`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// let client = lock_runtime::LockClient::connect("memory://").await?;
    /// let both = client.lock_all(["account:7", "account:3"]).acquire().await?;
    /// assert_eq!(both.keys(), ["account:3", "account:7"]); // canonical order
    /// assert!(client.lock("account:7").try_acquire().await?.is_none());
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I>(&self, keys: I) -> LockRequest
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        LockRequest {
            key: keys.first().cloned().unwrap_or_default(),
            set: Some(keys),
            min_hold: Duration::ZERO,
            ..self.lock(String::new())
        }
    }

    /// Prepares to acquire one of the `permits` permits of the semaphore `key`: up to `permits`
    /// holders at once, each with a lease of its own (renewed by its watchdog like a lock's),
    /// so a crashed holder's permit comes back one lease later — no counter that can leak.
    /// The same [`LockRequest`] methods and [`LockGuard`] as [`lock`](Self::lock); a release
    /// wakes a waiter.
    ///
    /// Every holder must ask with the same `permits`: a request whose limit differs from the
    /// one the current holders took theirs under fails with [`LockError::Config`] naming both
    /// numbers, as does asking for a semaphore's name as a lock or the reverse. `permits` of
    /// zero, or more than [`MAX_PERMITS`](Self::MAX_PERMITS), fails with [`LockError::Config`].
    /// Served by every backend but `redlock://` (see the README's backend table).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// let client = lock_runtime::LockClient::connect("memory://").await?;
    /// let first = client.semaphore("gpu-pool", 2).acquire().await?;
    /// let second = client.semaphore("gpu-pool", 2).acquire().await?;
    /// assert!(client.semaphore("gpu-pool", 2).try_acquire().await?.is_none()); // both in use
    /// assert_eq!(first.permits(), Some(2));
    /// first.release().await?; // a permit is free again
    /// let third = client.semaphore("gpu-pool", 2).try_acquire().await?.expect("a permit");
    /// # drop((second, third));
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> LockRequest {
        LockRequest {
            // Out of range: refused by `acquire`, naming the number asked for.
            kind: Kind::Permits(u16::try_from(permits).unwrap_or(0)),
            permits,
            ..self.lock(key)
        }
    }

    /// The most permits a semaphore may have.
    pub const MAX_PERMITS: u32 = u16::MAX as u32;

    /// The backend's name: `memory`, `redis`, …
    pub fn backend_kind(&self) -> &'static str {
        self.inner.backend.store()
    }

    /// The backend URL, with any password replaced by `***`.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The prefix put in front of every lock key in the backend.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The lease used when a request does not set one.
    pub fn default_lease(&self) -> Duration {
        self.inner.default_lease
    }

    /// How long a request waits when it does not say; `None` means forever.
    pub fn default_wait(&self) -> Option<Duration> {
        self.inner.default_wait
    }

    /// `true` when two handles are clones of one client (the same connection and settings).
    pub fn same_client(&self, other: &LockClient) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The backend, for the administrative operations (`admin`).
    pub(crate) fn admin_backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The backend name of `key`: `lock:K`, or `{lock:K}` in a Redis Cluster.
    pub(crate) fn name_of(&self, key: &str) -> String {
        LockName::new(key.to_owned(), &self.inner.prefix, self.inner.hash_tags)
            .full()
            .to_owned()
    }

    /// The key of backend name `name`, if it is a lock of this client's prefix.
    pub(crate) fn key_of(&self, name: &str) -> Option<String> {
        let name = if self.inner.hash_tags {
            name.strip_prefix('{')?.strip_suffix('}')?
        } else {
            name
        };
        let key = name.strip_prefix(self.inner.prefix.as_str())?;
        (!key.is_empty()).then(|| key.to_owned())
    }

    /// The address shared by all clones of this client: equal for two handles exactly when
    /// [`same_client`](Self::same_client) is `true` (while both live).
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.inner.backend.store())
            .field("url", &self.inner.url)
            .field("prefix", &self.inner.prefix)
            .field("default_lease", &self.inner.default_lease)
            .field("default_wait", &self.inner.default_wait)
            .field("fencing", &self.inner.fencing)
            .finish()
    }
}

/// Settings for a [`LockClient`]; made by [`LockClient::builder`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::LockClient;
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
    url: String,
    prefix: String,
    fencing_prefix: String,
    default_lease: Duration,
    default_wait: Option<Duration>,
    fencing: bool,
    connect_timeout: Duration,
    response_timeout: Duration,
    node_timeout: Option<Duration>,
    sql: crate::backend::sql::SqlOptions,
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
    /// (default off; costs one counter per key in the backend, see the crate docs).
    pub fn fencing(mut self, enabled: bool) -> Self {
        self.fencing = enabled;
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
    /// (default `true`). Turn it off when your migrations own the schema — the README prints
    /// the DDL — and the user distlock connects as may not create tables. Either way,
    /// connecting checks that the tables have the columns distlock needs. Overrides the URL's
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
        let url = self.url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(LockError::Config(format!(
                "`{}` is not a lock backend URL: expected `scheme://…`, e.g. \
                 `redis://127.0.0.1:6379` or `memory://`",
                redact(url)
            )));
        };
        let backend: Arc<dyn Backend> = match scheme {
            "memory" => MemoryBackend::named(rest.trim_end_matches('/')),
            "redis" | "rediss" | "redis+unix" | "unix" | "redlock" | "redis+cluster"
            | "redis+sentinel" => self.connect_redis(scheme, url).await?,
            "postgres" | "postgresql" => self.connect_postgres(url).await?,
            "mysql" => self.connect_mysql(url).await?,
            "zk" => self.connect_zookeeper(url).await?,
            "etcd" => self.connect_etcd(url).await?,
            _ => {
                return Err(LockError::Config(format!(
                    "unknown lock backend scheme `{scheme}://` in `{}`: supported are \
                     `memory://`, `redis://` / `rediss://`, `redlock://`, `redis+cluster://`, \
                     `redis+sentinel://`, `postgres://`, `mysql://`, `zk://` and `etcd://`",
                    redact(url)
                )));
            }
        };
        Ok(LockClient {
            inner: Arc::new(ClientInner {
                renewer: crate::renew::Renewer::new(Arc::clone(&backend)),
                hash_tags: backend.capabilities().slot.is_some(),
                backend,
                url: redact(url),
                prefix: self.prefix,
                default_lease: self.default_lease,
                default_wait: self.default_wait,
                fencing: self.fencing,
                response_timeout: self.response_timeout,
            }),
        })
    }

    #[cfg(feature = "redis")]
    async fn connect_redis(&self, scheme: &str, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        if scheme == "rediss" && !cfg!(feature = "tls") {
            return Err(LockError::Config(
                "`rediss://` (Redis over TLS) needs distlock's `tls` feature: \
                 distlock = { version = \"…\", features = [\"tls\"] }"
                    .into(),
            ));
        }
        let (url, replicas) =
            crate::backend::redis::take_replicas(url).map_err(LockError::Config)?;
        let url = url.as_str();
        let settings = crate::backend::redis::RedisSettings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            fence_prefix: self.fencing_prefix.clone(),
            retries: crate::backend::redis::RETRIES,
            replicas,
        };
        match scheme {
            "redlock" if replicas > 0 => Err(LockError::Config(format!(
                "`replicas` does not apply to `redlock://` (each Redlock node is a master of its \
                 own, and a grant already needs a majority of them): for a master with replicas \
                 use `redis+sentinel://…?replicas={replicas}` or `redis://…?replicas={replicas}`"
            ))),
            "redis+sentinel" => Ok(crate::backend::redis::RedisBackend::connect_sentinel(
                url,
                redact(url),
                settings,
            )
            .await?),
            "redlock" => {
                if self.fencing {
                    return Err(LockError::Config(
                        crate::backend::redis::redlock::NO_FENCING.to_owned(),
                    ));
                }
                Ok(crate::backend::redis::redlock::RedlockBackend::connect(
                    url,
                    settings,
                    self.node_timeout,
                )
                .await?)
            }
            "redis+cluster" => {
                if self.prefix.contains('{') || self.fencing_prefix.contains('{') {
                    return Err(LockError::Config(format!(
                        "in a Redis Cluster the lock and fencing prefixes may not contain `{{` \
                         (distlock puts each lock in a hash tag of its own): got {:?} and {:?}",
                        self.prefix, self.fencing_prefix
                    )));
                }
                let nodes = crate::backend::redis::node_urls(url).map_err(LockError::Config)?;
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
                "`mode=advisory` in {}: there is no `GET_LOCK` mode for MySQL and MariaDB (the \
                 server shows nobody who holds a named lock unless performance_schema and its \
                 metadata-lock instrument are on, and its idle timeout counts whole seconds: \
                 see the README, *MySQL and MariaDB*); leave out `mode=advisory` (the lock \
                 table)",
                crate::backend::url::redact_url(url)
            )));
        }
        Ok(crate::backend::mysql::MysqlBackend::connect(&driver_url, settings).await?)
    }

    #[cfg(feature = "zookeeper")]
    async fn connect_zookeeper(&self, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        crate::backend::zookeeper::ZookeeperBackend::connect(
            url,
            self.connect_timeout,
            self.response_timeout,
            self.default_lease,
        )
        .await
    }

    #[cfg(feature = "etcd")]
    async fn connect_etcd(&self, url: &str) -> Result<Arc<dyn Backend>, LockError> {
        crate::backend::etcd::EtcdBackend::connect(
            url,
            self.connect_timeout,
            self.response_timeout,
            self.default_lease,
        )
        .await
    }

    #[cfg(not(feature = "etcd"))]
    async fn connect_etcd(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(LockError::Config(
            "`etcd://` needs distlock's `etcd` feature: \
             distlock = { version = \"…\", features = [\"etcd\"] }"
                .into(),
        ))
    }

    #[cfg(not(feature = "zookeeper"))]
    async fn connect_zookeeper(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(LockError::Config(
            "`zk://` needs distlock's `zookeeper` feature: \
             distlock = { version = \"…\", features = [\"zookeeper\"] }"
                .into(),
        ))
    }

    #[cfg(not(feature = "mysql"))]
    async fn connect_mysql(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(LockError::Config(
            "`mysql://` needs distlock's `mysql` feature: \
             distlock = { version = \"…\", features = [\"mysql\"] }"
                .into(),
        ))
    }

    #[cfg(not(feature = "postgres"))]
    async fn connect_postgres(&self, _url: &str) -> Result<Arc<dyn Backend>, LockError> {
        Err(LockError::Config(
            "`postgres://` needs distlock's `postgres` feature: \
             distlock = { version = \"…\", features = [\"postgres\"] }"
                .into(),
        ))
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
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

fn redact(url: &str) -> String {
    crate::backend::url::redact_url(url)
}

fn check_lease(lease: Duration, key: Option<&str>) -> Result<(), LockError> {
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

/// `min_hold` must fit in the lease: the lock is kept that long without renewal; and the
/// backend must be able to keep it.
fn check_min_hold(
    min_hold_ms: u32,
    lease: Duration,
    key: &str,
    backend: &dyn Backend,
) -> Result<(), LockError> {
    let min_hold = Duration::from_millis(min_hold_ms.into());
    if min_hold_ms > 0
        && let Some(why) = backend.capabilities().min_hold.err()
    {
        return Err(LockError::Config(format!(
            "`{key}`: min_hold {min_hold:?} cannot be kept on this backend: {why}"
        )));
    }
    if min_hold > lease {
        return Err(LockError::Config(format!(
            "`{key}`: min_hold {:?} is longer than the lease {:?}: a lock released early is kept \
             until min_hold without renewal, so it cannot outlive its lease; make the lease at \
             least {:?}, or min_hold shorter",
            min_hold, lease, min_hold
        )));
    }
    Ok(())
}

/// The error of an acquisition of `key` that gave up waiting.
fn timed_out(key: &str, started: tokio::time::Instant, wait: Option<Duration>) -> LockError {
    LockError::Timeout {
        key: key.to_owned(),
        waited: started.elapsed(),
        wait: wait.unwrap_or(Duration::MAX),
    }
}

/// Armed while an all-or-nothing attempt at several keys is in flight or failed: the request
/// may have taken them all, so they are given back in the background.
struct SetInFlight<'a> {
    backend: &'a Arc<dyn Backend>,
    specs: &'a [LockSpec<'a>],
    armed: bool,
}

impl Drop for SetInFlight<'_> {
    fn drop(&mut self) {
        if self.armed && !self.backend.capabilities().undoes_failed_attempts {
            for spec in self.specs {
                wait::release_in_background(self.backend, spec.hold());
            }
        }
    }
}

/// What an acquisition asks for, besides its key.
#[derive(Debug, Clone, Copy)]
struct Params {
    lease: Duration,
    wait: Option<Duration>,
    renewal: RenewMode,
    fencing: bool,
    fair: bool,
    kind: Kind,
}

impl Params {
    /// These parameters for one key of a set: renewed by `renewal` (the key's own watchdog
    /// until the set is complete, or the set's), unless renewal is off.
    fn renewed_by(self, renewal: RenewMode) -> Params {
        match self.renewal {
            RenewMode::Off => self,
            _ => Params { renewal, ..self },
        }
    }

    /// What the waiting loop and the backend are asked for `name` under these parameters.
    fn request<'a>(&self, name: &'a LockName) -> wait::Request<'a> {
        wait::Request {
            name: name.full(),
            key: name.key(),
            lease: self.lease,
            fencing: self.fencing,
            renew: self.renewal != RenewMode::Off,
            fair: self.fair,
            kind: self.kind,
        }
    }
}

impl LockClient {
    /// `lock(key)` with the attribute's options, acquired with inline renewal: what
    /// `run_locked` does on every call, so it borrows the client instead of cloning it.
    pub(crate) async fn acquire_locked(
        &self,
        key: String,
        options: &crate::options::LockOptions,
    ) -> Result<LockGuard, LockError> {
        let params = self.attribute_params(options);
        // (`run_locked` checks and sets the guard's `min_hold`: see `check_min_hold_of`.)
        self.inner.acquire(key, params).await
    }

    /// The attribute's `min_hold` against its lease (the client's default if it names none):
    /// checked by `run_locked` outside the acquisition's future, which it would enlarge.
    pub(crate) fn check_min_hold_of(
        &self,
        options: &crate::options::LockOptions,
        key: &str,
    ) -> Result<(), LockError> {
        let lease = options.lease.unwrap_or(self.inner.default_lease);
        check_min_hold(options.min_hold_ms, lease, key, &*self.inner.backend)
    }

    /// `lock_all(keys)` with the attribute's options: what `run_locked_all` does.
    pub(crate) async fn acquire_locked_all(
        &self,
        keys: Vec<String>,
        options: &crate::options::LockOptions,
    ) -> Result<LockGuard, LockError> {
        let params = self.attribute_params(options);
        if let Some(first) = keys.first() {
            self.check_min_hold_of(options, first)?;
        }
        self.inner.acquire_set(keys, params).await
    }

    /// What the attribute's `options` ask for, with this client's defaults filled in.
    fn attribute_params(&self, options: &crate::options::LockOptions) -> Params {
        use crate::options::WaitFor;
        let inner = &*self.inner;
        Params {
            lease: options.lease.unwrap_or(inner.default_lease),
            wait: match options.wait {
                WaitFor::Default => inner.default_wait,
                WaitFor::Up(wait) => Some(wait),
                WaitFor::Forever => None,
            },
            renewal: if options.renew {
                RenewMode::Inline
            } else {
                RenewMode::Off
            },
            fencing: options.fencing.unwrap_or(inner.fencing),
            fair: options.fair,
            kind: options.kind(),
        }
    }
}

impl ClientInner {
    async fn acquire(&self, key: String, params: Params) -> Result<LockGuard, LockError> {
        #[cfg(feature = "metrics")]
        {
            let started = tokio::time::Instant::now();
            let result = self.acquire_any(key, params).await;
            let outcome = match &result {
                Ok(_) => crate::metrics::Outcome::Acquired,
                Err(LockError::Timeout { .. }) => crate::metrics::Outcome::Timeout,
                // The backend failed (a bad key or a refused fair request is the caller's).
                Err(LockError::Backend { .. } | LockError::Connect { .. }) => {
                    crate::metrics::Outcome::BackendError
                }
                Err(_) => crate::metrics::Outcome::Error,
            };
            crate::metrics::acquisition(self.backend.store(), outcome, started.elapsed());
            result
        }
        #[cfg(not(feature = "metrics"))]
        self.acquire_any(key, params).await
    }

    async fn acquire_any(&self, key: String, params: Params) -> Result<LockGuard, LockError> {
        validate_key(&key)?;
        check_lease(params.lease, Some(&key))?;
        let started = tokio::time::Instant::now();
        let token = OwnerToken::generate();
        let name = LockName::new(key, &self.prefix, self.hash_tags);
        let request = params.request(&name);
        // A reader's share or a semaphore's permit: held together with others.
        let shared = params.kind != Kind::Exclusive;
        // Every backend serves the plain lock: only another kind is asked about.
        if shared && let Err(why) = self.backend.capabilities().serves(params.kind) {
            return Err(LockError::Config(format!("`{}`: {why}", name.key())));
        }
        if params.fair && params.kind == Kind::Shared {
            return Err(LockError::Config(format!(
                "`{}`: a read lock cannot be fair (readers do not queue behind each other, and \
                 a waiting writer already stops new readers from joining); drop `fair`",
                name.key()
            )));
        }
        if params.fair && shared {
            return Err(LockError::Config(format!(
                "`{}`: a semaphore cannot be fair here (on zk:// and etcd:// its waiters are \
                 served in arrival order already); drop `fair`",
                name.key()
            )));
        }
        if params.fair || (shared && self.backend.capabilities().queues_waiters) {
            if !self.backend.capabilities().fair {
                return Err(LockError::Config(format!(
                    "`{}`: fair locks are not available on the {} backend; use redis://, \
                     redis+cluster://, memory://, zk:// or etcd:// (their waiters queue in \
                     arrival order), or drop `fair`",
                    name.key(),
                    self.backend.store()
                )));
            }
            // Straight into the lock's queue on the server: no optimistic first attempt and
            // no local queue, which would let a newcomer or a task of this client pass
            // waiters that came first.
            return Box::pin(self.acquire_fair(name, token, params, started, None)).await;
        }
        // Fast path: when no task of this client waits for the key, try once straight away
        // (one round trip for a free lock) without touching the queue. Not for a backend whose
        // busy attempt joins a queue on the server (ZooKeeper): its place in line must be
        // taken, and given up, by the waiting below.
        let mut failed = None;
        // A reader never queues behind this client's other tasks: readers hold a key together,
        // and the local queue (with its hand-overs) is for the one owner of a plain lock.
        if !self.backend.capabilities().queues_waiters
            && (shared || !self.renewer.local().has_waiters(name.key()))
        {
            // Only the lock is asked for (on Redis one `SET NX PX`, without the holder's TTL):
            // a busy lock is asked again, with its TTL, once this task waits in line.
            let spec = LockSpec {
                waiting: false,
                ..request.spec(&token)
            };
            // `started` doubles as the send time: one clock reading fewer on the hot path.
            match wait::attempt(&self.backend, spec, started).await {
                Ok(Ok(mut acquired)) => {
                    acquired.waited = started.elapsed();
                    let guard = self.guard(name, token, params, acquired);
                    if !shared {
                        // A task that queued meanwhile waits for this guard rather than the
                        // server.
                        self.renewer.local().holding(guard.shared_ref(), false);
                    }
                    return Ok(guard);
                }
                Ok(Err(_)) if params.wait == Some(Duration::ZERO) => {
                    return Err(timed_out(name.key(), started, params.wait));
                }
                Ok(Err(_)) => {} // busy: wait in line below
                Err(failure) if !failure.transient || params.wait == Some(Duration::ZERO) => {
                    if !failure.leftover {
                        return Err(failure.into_error(&*self.backend, name.key()));
                    }
                    // The failed command may have taken the lock after all: give it back before
                    // returning (the caller may exit right after). Boxed: a cold path that
                    // every locked call's future would otherwise carry.
                    return Err(
                        Box::pin(self.give_back_failed(name, token, params, failure)).await,
                    );
                }
                // A transient failure with `wait` left: retried below.
                Err(failure) => failed = Some(failure),
            }
        }
        if shared {
            // Boxed: waiting is a large future that the fast path above should not carry.
            return Box::pin(self.acquire_fair(name, token, params, started, failed)).await;
        }
        Box::pin(self.acquire_queued(name, token, params, started, failed)).await
    }

    /// The error of a fast-path attempt that failed and may still have taken the lock: the
    /// lock is given back first (awaited, at most the response timeout).
    async fn give_back_failed(
        &self,
        name: LockName,
        token: OwnerToken,
        params: Params,
        failure: wait::Failure,
    ) -> LockError {
        let hold = params.request(&name).hold(token.as_str());
        wait::leave(&self.backend, hold, self.response_timeout).await;
        failure.into_error(&*self.backend, name.key())
    }

    /// An acquisition that waits on the server alone, never in this client's local queue: a
    /// fair lock (every attempt goes through the lock's queue on the server), or a reader
    /// (readers hold a key together; `failed` is its first attempt's transient failure).
    async fn acquire_fair(
        &self,
        name: LockName,
        mut token: OwnerToken,
        params: Params,
        started: tokio::time::Instant,
        failed: Option<wait::Failure>,
    ) -> Result<LockGuard, LockError> {
        let key = name.key();
        let request = params.request(&name);
        let span = tracing::debug_span!("distlock.acquire", key = %key, backend = self.backend.store(), fair = params.fair, kind = params.kind.noun());
        let remaining = params
            .wait
            .map(|wait| wait.saturating_sub(started.elapsed()));
        let mut acquired = match wait::acquire(
            &self.backend,
            request,
            &mut token,
            remaining,
            failed,
            None,
            self.response_timeout,
        )
        .instrument(span)
        .await
        {
            Ok(acquired) => acquired,
            Err(LockError::Timeout { .. }) => return Err(timed_out(key, started, params.wait)),
            Err(error) => return Err(error),
        };
        acquired.waited = started.elapsed();
        crate::metrics::waited(self.backend.store(), acquired.waited);
        Ok(self.guard(name, token, params, acquired))
    }

    /// The slow path of [`acquire`](Self::acquire): the lock is busy (or other tasks of this
    /// client wait for it, or the first attempt failed transiently) and the request may wait.
    async fn acquire_queued(
        &self,
        name: LockName,
        mut token: OwnerToken,
        params: Params,
        started: tokio::time::Instant,
        failed: Option<wait::Failure>,
    ) -> Result<LockGuard, LockError> {
        let key = name.key();
        let timeout = |key: &str| timed_out(key, started, params.wait);
        let request = params.request(&name);
        // Queue behind this client's other tasks waiting for the key. (`queued` is declared
        // first so it is dropped after the queue.)
        let local_queues = self.renewer.local();
        let queued = local_queues.enter();
        let queue = local_queues.queue(key);
        let local = match params.wait {
            Some(wait) if wait.is_zero() => match queue.gate.try_lock() {
                Ok(local) => local,
                Err(_) => return Err(timeout(key)),
            },
            Some(wait) => match tokio::time::timeout(wait, queue.gate.lock()).await {
                Ok(local) => local,
                Err(_) => return Err(timeout(key)),
            },
            None => queue.gate.lock().await,
        };
        // At the head of the queue: offer to take the lock over from a guard of this client.
        let mut head = self
            .backend
            .capabilities()
            .hands_over
            .then(|| local::Head::new(Arc::clone(&queue)));
        let remaining = params
            .wait
            .map(|wait| wait.saturating_sub(started.elapsed()));
        let span =
            tracing::debug_span!("distlock.acquire", key = %key, backend = self.backend.store());
        let mut acquired = match wait::acquire(
            &self.backend,
            request,
            &mut token,
            remaining,
            failed,
            head.as_mut(),
            self.response_timeout,
        )
        .instrument(span)
        .await
        {
            Ok(acquired) => acquired,
            Err(LockError::Timeout { .. }) => return Err(timeout(key)),
            Err(error) => return Err(error),
        };
        drop(head);
        acquired.waited = started.elapsed();
        crate::metrics::waited(self.backend.store(), acquired.waited);
        let handed = acquired.handed;
        let guard = self.guard(name, token, params, acquired);
        // The next in line, if any, waits for this guard to hand the lock over or let go.
        if self.backend.capabilities().hands_over {
            queue.holding(guard.shared_ref(), handed);
        }
        drop(local); // the next local waiter now waits on the backend
        drop(queue);
        drop(queued);
        Ok(guard)
    }

    /// [`LockClient::lock_all`]: every key of `keys`, or none.
    async fn acquire_set(&self, keys: Vec<String>, params: Params) -> Result<LockGuard, LockError> {
        let Some(first) = keys.first() else {
            return Err(LockError::Config(
                "`lock_all` was given no keys: name at least one key to lock".into(),
            ));
        };
        for key in &keys {
            validate_key(key)?;
        }
        check_lease(params.lease, Some(first))?;
        let mut names: Vec<LockName> = keys
            .into_iter()
            .map(|key| LockName::new(key, &self.prefix, self.hash_tags))
            .collect();
        names.sort_unstable_by(|a, b| a.full().cmp(b.full()));
        names.dedup_by(|a, b| a.full() == b.full());
        if names.len() == 1 {
            let key = names.swap_remove(0).key().to_owned();
            return self.acquire(key, params).await;
        }
        if let Kind::Permits(_) = params.kind {
            return Err(LockError::Config(format!(
                "`{}`: a semaphore's permit is taken one key at a time; use \
                 `client.semaphore(key, n)` for each",
                names[0].key()
            )));
        }
        if params.fair {
            return Err(LockError::Config(format!(
                "`{}`: several keys cannot be taken as one fair lock (each key's queue would \
                 order its waiters alone); drop `fair`",
                names[0].key()
            )));
        }
        let started = tokio::time::Instant::now();
        // All or nothing in one request where the backend can: nothing is held while a busy
        // key is waited for.
        let full: Vec<&str> = names.iter().map(LockName::full).collect();
        let atomic = self
            .backend
            .capabilities()
            .acquires_sets(&full, params.kind);
        drop(full);
        if atomic {
            match self.try_set(&names, params, started).await {
                Ok(Ok(guards)) => {
                    return Ok(LockGuard::join(guards, &self.renewer, started.elapsed()));
                }
                Ok(Err(busy)) if params.wait == Some(Duration::ZERO) => {
                    return Err(timed_out(names[busy].key(), started, params.wait));
                }
                // Busy: waited for one key at a time below.
                Ok(Err(_)) => {}
                Err(failure) if failure.transient && params.wait != Some(Duration::ZERO) => {}
                // Refused (a name held as another kind): the key-by-key path names the key.
                Err(failure) if failure.source.is::<crate::backend::Refused>() => {}
                Err(failure) => return Err(failure.into_error(&*self.backend, names[0].key())),
            }
        }
        // One by one, in canonical order, each with what is left of the one `wait`; each key
        // is renewed by its own watchdog until the set is complete.
        let each = params.renewed_by(RenewMode::Spawned);
        let mut taken: Vec<LockGuard> = Vec::with_capacity(names.len());
        for name in &names {
            let wait = params
                .wait
                .map(|wait| wait.saturating_sub(started.elapsed()));
            match self
                .acquire(name.key().to_owned(), Params { wait, ..each })
                .await
            {
                Ok(guard) => taken.push(guard),
                Err(error) => {
                    // Everything taken so far goes back before the error returns.
                    let releases = taken
                        .into_iter()
                        .map(|guard| Box::pin(guard.release()) as BoxFuture<'static, _>)
                        .collect();
                    crate::runtime::join_all(releases).await;
                    return Err(match error {
                        LockError::Timeout { key, .. } => timed_out(&key, started, params.wait),
                        error => error,
                    });
                }
            }
        }
        Ok(LockGuard::join(taken, &self.renewer, started.elapsed()))
    }

    /// One all-or-nothing attempt at every key of `names` (see [`Backend::try_acquire_all`]):
    /// the guards, or the index of the first busy key.
    async fn try_set(
        &self,
        names: &[LockName],
        params: Params,
        started: tokio::time::Instant,
    ) -> Result<Result<Vec<LockGuard>, usize>, wait::Failure> {
        // A token per key: each key's hold is released, renewed and watched on its own.
        let tokens: Vec<OwnerToken> = names.iter().map(|_| OwnerToken::generate()).collect();
        let specs: Vec<LockSpec<'_>> = names
            .iter()
            .zip(&tokens)
            .map(|(name, token)| LockSpec {
                waiting: false,
                ..params.request(name).spec(token)
            })
            .collect();
        let mut in_flight = SetInFlight {
            backend: &self.backend,
            specs: &specs,
            armed: true,
        };
        let sent_at = tokio::time::Instant::now();
        match self.backend.try_acquire_all(&specs).await {
            Ok(crate::backend::SetAttempt::Acquired { fencing_tokens }) => {
                in_flight.armed = false;
                let set = params.renewed_by(RenewMode::Set);
                let guards = names
                    .iter()
                    .zip(tokens.iter().zip(fencing_tokens))
                    .map(|(name, (token, fencing_token))| {
                        let acquired = wait::Acquired {
                            fencing_token,
                            sent_at,
                            waited: started.elapsed(),
                            handed: false,
                        };
                        self.guard(name.clone(), token.clone(), set, acquired)
                    })
                    .collect();
                Ok(Ok(guards))
            }
            Ok(crate::backend::SetAttempt::Busy { index }) => {
                in_flight.armed = false;
                Ok(Err(index))
            }
            // The failed request may have taken the keys after all: `in_flight` gives them back
            // in the background.
            Err(source) => Err(wait::Failure::of(source, true)),
        }
    }

    fn guard(
        &self,
        name: LockName,
        token: OwnerToken,
        params: Params,
        acquired: wait::Acquired,
    ) -> LockGuard {
        LockGuard::new(
            &self.renewer,
            name,
            token,
            crate::held::Terms {
                lease: params.lease,
                renewal: params.renewal,
                fair: params.fair,
                kind: params.kind,
            },
            acquired,
        )
    }
}

/// One lock acquisition being prepared; made by [`LockClient::lock`].
///
/// `.await` it directly, or call [`acquire`](Self::acquire) /
/// [`try_acquire`](Self::try_acquire).
#[derive(Clone, Debug)]
#[must_use = "a lock request does nothing until `.acquire().await`"]
pub struct LockRequest {
    client: LockClient,
    key: String,
    lease: Duration,
    wait: Option<Duration>,
    renew: bool,
    fencing: bool,
    fair: bool,
    kind: Kind,
    /// The permits a semaphore's request asked for (as given: checked by `acquire`).
    permits: u32,
    /// Every key of a request made by [`LockClient::lock_all`], as given.
    set: Option<Vec<String>>,
    min_hold: Duration,
}

impl LockRequest {
    /// How long the lock lives if its holder stops renewing it (crashes, hangs, is cut off).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long to wait for a busy lock before failing with [`LockError::Timeout`];
    /// `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Wait for a busy lock as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.wait = None;
        self
    }

    /// Hold the lock at least `min_hold` after it was granted, however early it is released
    /// (ShedLock's `lockAtLeastFor`): a release before then does not free the lock but makes it
    /// end at grant + `min_hold` — renewal stops, and the backend's expiry is set to that
    /// instant — so a short job that every node of a cluster starts on its own timer runs once
    /// per period even when the nodes' clocks differ. A release after `min_hold` is a plain
    /// release; a holder that crashes frees the lock after its lease, as always. Zero (the
    /// default): no minimum. Longer than the [`lease`](Self::lease) fails with
    /// [`LockError::Config`].
    ///
    /// On ZooKeeper and etcd, whose locks live as long as the client's session or lease, the
    /// client deletes the lock at grant + `min_hold`; if the process exits before then, its
    /// session or lease is left to expire (one lease later) rather than closed, so the lock
    /// still outlives `min_hold`.
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = min_hold;
        self
    }

    /// Keep the lease alive (renew every lease/3) while the guard lives; default `true`.
    /// Without renewal the lock ends after one lease and the guard reports it lost.
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// Hand out a fencing token with this lock ([`LockGuard::fencing_token`]).
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// Make this a fair lock: waiters from every process are granted the lock in the order
    /// they asked for it, through a queue the backend keeps beside the lock (as Redisson's
    /// `RFairLock`). A release wakes only the head of the queue; a waiter that gives up or
    /// dies loses its place (a dead one after [`FAIR_QUEUE_TTL`](crate::FAIR_QUEUE_TTL)).
    ///
    /// It costs more than the default lock (on Redis a script per attempt and per release,
    /// touching the queue, instead of one `SET`), and a fair lock is never handed over between
    /// tasks of one client. Every process must take a given key the same way, fair or not: a
    /// plain request ignores the queue. Supported on `redis://`, `redis+cluster://` and
    /// `memory://`; on `zk://` and `etcd://` every lock is fair already. Elsewhere the
    /// acquisition fails with [`LockError::Config`].
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Take the lock shared, as one of its readers: any number of readers hold a key together,
    /// and no writer while they do ([`write`](Self::write), the plain lock, excludes them all).
    /// Each reader has a lease of its own, renewed by its own watchdog. A writer waiting for
    /// the key stops new readers from joining, so readers cannot starve writers. With
    /// [`fencing`](Self::fencing), a reader gets the token of the last write grant (the version
    /// it reads) rather than a new one.
    ///
    /// Served by every backend but `redlock://`, where the acquisition fails with
    /// [`LockError::Config`] saying why. A read lock cannot be [`fair`](Self::fair) (readers do
    /// not queue behind each other, and a waiting writer already stops new readers).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// let client = lock_runtime::LockClient::connect("memory://").await?;
    /// let first = client.lock("price-list").read().acquire().await?;
    /// let second = client.lock("price-list").read().acquire().await?; // readers share it
    /// assert!(client.lock("price-list").try_acquire().await?.is_none()); // a writer waits
    /// first.release().await?;
    /// second.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(mut self) -> Self {
        self.kind = Kind::Shared;
        self
    }

    /// Take the lock exclusively — the default, and the write side of [`read`](Self::read):
    /// one owner, excluding every reader and every other writer of the key. (On a request
    /// made by [`LockClient::semaphore`], `read` and `write` make it a lock request again.)
    pub fn write(mut self) -> Self {
        self.kind = Kind::Exclusive;
        self
    }

    /// The lock key, without the client's prefix (of a request for several keys, the first
    /// named).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Every key of this request, as named (one for [`LockClient::lock`]).
    pub fn keys(&self) -> &[String] {
        self.set
            .as_deref()
            .unwrap_or(std::slice::from_ref(&self.key))
    }

    /// Acquires the lock, waiting up to the request's `wait` for a busy one: woken by the
    /// holder's release, or retrying when the holder's lease runs out.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        if matches!(self.kind, Kind::Permits(_))
            && !(1..=LockClient::MAX_PERMITS).contains(&self.permits)
        {
            return Err(LockError::Config(format!(
                "`{}`: a semaphore of {} permits: ask for 1 to {} (0 could never be acquired)",
                self.key,
                self.permits,
                LockClient::MAX_PERMITS
            )));
        }
        let params = Params {
            lease: self.lease,
            wait: self.wait,
            renewal: if self.renew {
                RenewMode::Spawned
            } else {
                RenewMode::Off
            },
            fencing: self.fencing,
            fair: self.fair,
            kind: self.kind,
        };
        // Whole milliseconds, at most `u32::MAX` (49 days: longer than any lease, refused).
        let min_hold_ms = u32::try_from(self.min_hold.as_millis()).unwrap_or(u32::MAX);
        let first = self.set.as_ref().and_then(|keys| keys.first());
        check_min_hold(
            min_hold_ms,
            self.lease,
            first.unwrap_or(&self.key),
            &*self.client.inner.backend,
        )?;
        let guard = match self.set {
            Some(keys) => Box::pin(self.client.inner.acquire_set(keys, params)).await?,
            None => self.client.inner.acquire(self.key, params).await?,
        };
        guard.hold_at_least(min_hold_ms);
        Ok(guard)
    }

    /// Tries once: `Ok(None)` when somebody else holds the lock. Handy for work that must run
    /// on one node only, where the others simply skip (scheduled jobs).
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.wait(Duration::ZERO).acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl IntoFuture for LockRequest {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = BoxFuture<'static, Result<LockGuard, LockError>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}

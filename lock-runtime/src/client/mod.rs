//! [`LockClient`]: the handle users connect once and take locks through.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, Kind};
use crate::error::LockError;
use crate::key::LockName;

mod acquire;
mod builder;
mod request;
mod semaphore;

pub use builder::LockClientBuilder;
pub(crate) use builder::check_lease;
pub use request::LockRequest;
pub use semaphore::SemaphoreRequest;

/// A connection to a lock backend: cheap to clone (an `Arc` inside), safe to share between
/// tasks and between tokio runtimes.
///
/// ```
/// # use distlock_runtime as distlock;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockClient;
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
    /// The lock-delay of requests that name none (see [`LockClientBuilder::lock_delay`]).
    lock_delay: Duration,
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
    /// The longest lock key accepted, in bytes (UTF-8), without the prefix: a longer key is
    /// [`LockError::InvalidKey`](crate::LockError::InvalidKey).
    pub const MAX_KEY_LEN: usize = crate::key::MAX_KEY_LEN;
    /// How long a fair lock's waiter keeps its place in the queue after its last refresh: a
    /// waiter refreshes every third of it, so one that died loses its place within this.
    pub const FAIR_QUEUE_TTL: Duration = crate::backend::FAIR_QUEUE_TTL;
    /// How often [`Election::observe`](crate::Election::observe) asks the store for the leader
    /// unless [`Election::poll`](crate::Election::poll) says otherwise, besides when the store
    /// announces a change.
    pub const DEFAULT_OBSERVE_POLL: Duration = crate::election::DEFAULT_OBSERVE_POLL;
    /// The environment variable [`init_from_env`](crate::init_from_env) and the `distlock`
    /// command line read the store's URL from: `DISTLOCK_URL`.
    pub const URL_ENV: &'static str = crate::global::URL_ENV;

    /// Connects with default settings. The URL's scheme picks the store, and its parameters
    /// (`?replicas=`, `?mode=advisory` and `?mode=named`, `?pooler=` and `&listen_url=`,
    /// `?lock_delay=`, `?table=`, …) set it up; every URL form and parameter is in
    /// `distlock::guide::backends`, with the table of what each store can do:
    ///
    /// | scheme | store | feature |
    /// |---|---|---|
    /// | `memory://`, `memory://name` | in this process only (tests, demos, one-process apps) | — |
    /// | `redis://`, `rediss://` | one Redis server | `redis` (default); `tls` |
    /// | `redis+cluster://`, `rediss+cluster://` | a Redis Cluster | `redis` |
    /// | `redis+sentinel://`, `rediss+sentinel://` | the master of a Sentinel service, through failovers | `redis` |
    /// | `redlock://`, `redlocks://` | Redlock across N ≥ 3 independent Redis masters | `redis` |
    /// | `postgres://`, `postgresql://` | a lock table, or `?mode=advisory` | `postgres` |
    /// | `mysql://` | a lock table, or `?mode=named` | `mysql` |
    /// | `zk://`, `zks://` | ZooKeeper, Curator's layout | `zookeeper` |
    /// | `etcd://`, `etcds://` | etcd, `concurrency.Mutex`'s layout | `etcd` |
    /// | `nats://`, `natss://` | a NATS JetStream key-value bucket (NATS 2.11+) | `nats` |
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
            lock_delay: None,
            connect_timeout: LockClient::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: LockClient::DEFAULT_RESPONSE_TIMEOUT,
            node_timeout: None,
            sql: Default::default(),
            tls: None,
            password: None,
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
            set: None,
            min_hold: Duration::ZERO,
            max_hold: None,
            lock_delay: self.inner.lock_delay,
            upgradable: false,
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
    /// [`LockGuard`](crate::LockGuard) for the set: [`LockGuard::keys`](crate::LockGuard::keys),
    /// [`LockGuard::fencing_tokens`](crate::LockGuard::fencing_tokens); one
    /// watchdog renews every key together, the guard is lost when any key's lease is, and
    /// release gives every key back. No keys at all fails with [`LockError::Config`]; every key
    /// is validated as [`lock`](Self::lock) does, the error naming the bad one. A semaphore, or
    /// a fair request, of several keys is refused with [`LockError::Config`].
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let both = client.lock_all(["account:7", "account:3"]).acquire().await?;
    /// assert!(both.keys().eq(["account:3", "account:7"])); // canonical order
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
    /// A [`SemaphoreRequest`] has a lock request's settings but not its kinds (no `read`,
    /// `write` or `fair`: a semaphore is none of them), and gives the same
    /// [`LockGuard`](crate::LockGuard); a release wakes a waiter.
    ///
    /// Every holder must ask with the same `permits`: a request whose limit differs from the
    /// one the current holders took theirs under fails with [`LockError::Config`] naming both
    /// numbers, as does asking for a semaphore's name as a lock or the reverse. `permits` of
    /// zero fails with [`LockError::Config`]; the most is `u16::MAX`, the type's bound.
    /// A store without semaphores refuses them with [`LockError::Unsupported`] (which stores:
    /// the table in `distlock::guide::backends`; how they work: `distlock::guide::semaphores`).
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let first = client.semaphore("gpu-pool", 2).acquire().await?;
    /// let second = client.semaphore("gpu-pool", 2).acquire().await?;
    /// assert!(client.semaphore("gpu-pool", 2).try_acquire().await?.is_none()); // both in use
    /// assert_eq!(first.permits(), Some(2));
    /// first.release().await?; // a permit is free again
    /// let third = client.semaphore("gpu-pool", 2).try_acquire().await?.expect("a permit");
    /// # drop((second, third));
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, key: impl Into<String>, permits: u16) -> SemaphoreRequest {
        SemaphoreRequest(LockRequest {
            // Zero: refused by `acquire`.
            kind: Kind::Permits(permits),
            ..self.lock(key)
        })
    }

    /// Closes the client, for a process about to exit (as sqlx's `Pool::close`, Redisson's
    /// `shutdown`): every lock still held through it — by this handle or any clone, a guard
    /// or an annotated call — is given back now, its holder told it is lost first (a body
    /// under `on_lost = "abort"` stops; the guard's `release` then returns
    /// [`LockError::Lost`] and asks the store nothing); releases of dropped guards still
    /// running in the background are awaited; and what the client keeps open on the server
    /// ends (ZooKeeper sessions are closed, etcd leases revoked), so nothing it held waits out
    /// a lease. Later acquisitions through it fail with [`LockError::Config`] naming the key.
    ///
    /// Bounded: a store that does not answer is waited for at most its response timeout per
    /// call (what it held then expires with its lease). A lock released before its
    /// `min_hold` is still kept until then, as a release keeps it. Closing twice is harmless.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let guard = client.lock("report").acquire().await?;
    /// client.close().await;
    /// assert!(guard.is_lost()); // given back by `close`
    /// assert!(client.lock("report").acquire().await.is_err()); // closed
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) {
        let inner = &self.inner;
        let holds = inner.renewer.holds();
        holds.close();
        let renewer = &inner.renewer;
        let held = holds.take_held();
        let releases = held
            .iter()
            .map(|shared| {
                Box::pin(crate::guard::close_out(renewer, shared, acquire::CLOSED))
                    as crate::runtime::BoxFuture<'_, ()>
            })
            .collect();
        crate::runtime::join_all(releases).await;
        if !holds.background_done(inner.response_timeout * 2).await {
            tracing::warn!(
                "distlock: a background release was still running when the client closed; its \
                 lease will expire"
            );
        }
        inner.backend.close().await;
    }

    /// The backend's name: `memory`, `redis`, …
    pub fn backend_kind(&self) -> &'static str {
        self.inner.backend.store()
    }

    /// Whether this client's store serves `feature`: a request that needs a feature it lacks
    /// fails with [`LockError::Unsupported`] before anything is written. The same answers, for
    /// every store, are the table in `distlock::guide::backends`.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// use distlock::{Feature, LockClient};
    /// let client = LockClient::connect("memory://").await?;
    /// assert!(client.supports(Feature::ReadLocks) && client.supports(Feature::Fencing));
    /// let guard = if client.supports(Feature::Upgradable) {
    ///     client.lock("stock").upgradable().acquire().await?
    /// } else {
    ///     client.lock("stock").acquire().await?
    /// };
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn supports(&self, feature: crate::Feature) -> bool {
        self.inner.backend.capabilities().check(feature).is_ok()
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

    /// An address shared by all clones of this client, and by the guards it hands out (its
    /// renewer's): equal for two handles exactly when [`same_client`](Self::same_client) is
    /// `true` (while both live).
    pub(crate) fn identity(&self) -> usize {
        crate::renew::Renewer::identity(&self.inner.renewer)
    }

    /// The renewer its guards share.
    pub(crate) fn renewer(&self) -> &Arc<crate::renew::Renewer> {
        &self.inner.renewer
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

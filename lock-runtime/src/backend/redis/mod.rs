//! `redis://` / `rediss://`: one Redis server (or a Sentinel-managed primary behind one address);
//! `redis+cluster://`: a Redis Cluster. The Redlock backend (`redlock://`) uses one of these per
//! independent master.
//!
//! Layout (kept plain on purpose, so services in other languages share locks with us): the lock
//! for key `K` is the string `<prefix>K` (default `lock:K`) holding the owner token, with a PX
//! TTL. It is the single-instance pattern from the Redis documentation and the layout of
//! redis-py's `Lock`.
//!
//! Round trips: a free lock is taken with one `SET NX PX`; a release is one `EVALSHA`
//! (compare-token, `DEL`, `PUBLISH`); a renewal is one `EVALSHA` (compare-token, `PEXPIRE`).
//! A busy lock costs one more `EVALSHA` to read the holder's TTL. Fencing acquisitions are one
//! `EVALSHA` (`SET NX PX` + `INCR` of the key's counter).
//!
//! Waiters are woken through one pub/sub connection per client: the release script publishes
//! on the channel named like the lock key, and the client subscribes to a channel only while
//! somebody in this process waits on it.
//!
//! In a cluster the client wraps every lock name in a hash tag (`{lock:K}`) and puts fencing
//! counters under `<fence prefix>{lock:K}`, so every key one script touches lives in one slot;
//! scripts are routed by their first key and redis-rs follows `MOVED`/`ASK` redirections. A
//! cluster-wide `PUBLISH` reaches subscribers on every node, so the pub/sub connection is a plain
//! connection to any one node (the next one is tried when it dies). Batched renewals are split
//! by slot, one script call per slot.
//!
//! Files: this one holds the backend and its shared connection; `scripts` the Lua it runs;
//! `cluster` what differs in a Redis Cluster; `pubsub` the wake-on-release subscriber;
//! `nodes` multi-node URLs; `redlock` the Redlock algorithm over several of these backends.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Script, Value,
};

use super::url::redact_url;
use super::{
    Admin, Attempt, Backend, Capabilities, Handover, Hold, Kind, LockSpec, Released, SetAttempt,
    Transient,
};
use crate::error::{BoxError, LockError};
use crate::notify::ReleaseSubscription;
use crate::runtime::{BoxFuture, Revived, RuntimeBound};

mod admin;
mod cluster;
mod nodes;
mod pubsub;
pub(crate) mod redlock;
mod scripts;
pub(crate) mod sentinel;

pub(crate) use cluster::cluster_slot;
pub(crate) use nodes::{node_urls, take_replicas};
use pubsub::Subscriber;
use scripts::VOTE;

/// Prefixes of a fair lock's queue (a list of waiting tokens) and of its waiters' deadlines (a
/// sorted set), before the lock's name: `lock-queue:lock:K`, `lock-queue-deadlines:lock:K`
/// (in a cluster `lock-queue:{lock:K}`, in the lock's slot). Both expire when nobody waits.
const FAIR_QUEUE_PREFIX: &str = "lock-queue:";
const FAIR_DEADLINES_PREFIX: &str = "lock-queue-deadlines:";
/// Prefix of the key where writers waiting for a lock's readers mark it (see `scripts.rs`).
const WRITERS_PREFIX: &str = "lock-writers:";

/// How often a command that failed on a dropped connection is retried (with the same token),
/// unless the settings say otherwise.
pub(crate) const RETRIES: u32 = 3;

/// Connection settings for the Redis backend.
#[derive(Clone, Debug)]
pub(crate) struct RedisSettings {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub fence_prefix: String,
    /// Retries of a command that failed on a dropped connection (Redlock nodes use none: a
    /// node that does not answer is skipped, not waited for).
    pub retries: u32,
    /// `?replicas=N`: grants and renewals count only once N replicas acknowledged them.
    pub replicas: u16,
}

/// How the backend reaches Redis (one per backend, so the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Link {
    Single(redis::Client),
    Cluster(ClusterClient),
    /// The master the sentinels name, asked again whenever a connection is made.
    Sentinel(sentinel::Sentinels),
}

/// A connection of either kind; commands go through it unchanged, or (`Acked`) each followed by
/// `WAIT` for the replicas.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
    /// Every command but `SCRIPT …` is sent in one pipeline with `WAIT <replicas> <timeout>`
    /// after it; how many replicas acknowledged it is left in [`Acks::acked`] for the caller
    /// (see [`RedisBackend::run_acked`]). `WAIT` blocks the connection it is sent on, so this is
    /// a connection of its own; on a cluster connection the pipeline goes to the node of the
    /// command's key, where `WAIT` counts that node's replicas.
    Acked(Box<Connection>, Acks),
}

/// What an acknowledged connection waits for, and what it got.
#[derive(Clone)]
pub(crate) struct Acks {
    replicas: u16,
    /// `WAIT`'s timeout, set per operation from its lease (see `RedisBackend::run_acked`).
    timeout_ms: u64,
    /// How many replicas acknowledged the operation's last command (one cell per operation).
    acked: Arc<std::sync::atomic::AtomicI64>,
}

/// The start of the error an acknowledged command fails with when too few replicas confirmed it.
const NOT_ACKED: &str = "too few replicas acknowledged the write";

/// Whether `error` says a write was not acknowledged by enough replicas (see [`Acks`]).
fn is_not_acked(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Client && error.to_string().contains(NOT_ACKED)
}

impl Connection {
    /// Sets `WAIT`'s timeout for one try of an operation, and the operation's cell for what it
    /// acknowledges (reset: nothing acknowledged yet).
    fn waiting(&mut self, timeout_ms: u64, acked: Option<&Arc<std::sync::atomic::AtomicI64>>) {
        if let (Connection::Acked(_, acks), Some(acked)) = (self, acked) {
            acks.timeout_ms = timeout_ms;
            acked.store(-1, std::sync::atomic::Ordering::Relaxed);
            acks.acked = Arc::clone(acked);
        }
    }
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Connection::Single(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
            Connection::Acked(conn, acks) => {
                if acks.timeout_ms == 0
                    || cmd.args_iter().next() == Some(redis::Arg::Simple(b"SCRIPT"))
                {
                    return conn.req_packed_command(cmd);
                }
                let acks = acks.clone();
                Box::pin(async move {
                    let mut pipeline = redis::pipe();
                    pipeline
                        .add_command(cmd.clone())
                        .cmd("WAIT")
                        .arg(acks.replicas)
                        .arg(acks.timeout_ms);
                    let mut replies = conn.req_packed_commands(&pipeline, 0, 2).await?;
                    let acked = match replies.pop() {
                        Some(Value::Int(n)) => n,
                        _ => 0,
                    };
                    acks.acked
                        .store(acked, std::sync::atomic::Ordering::Relaxed);
                    replies.pop().unwrap_or(Value::Nil).extract_error()
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Acked(conn, _) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(conn) => conn.get_db(),
            Connection::Cluster(conn) => conn.get_db(),
            Connection::Acked(conn, _) => conn.get_db(),
        }
    }
}

/// The shared connection (lane 0) and the grants' connection that waits for replicas (lane 1,
/// used only with `?replicas`).
const SHARED: usize = 0;
const ACKED: usize = 1;

/// The shared connection and its number (see `RedisBackend::connections_made`).
struct SharedConnection {
    bound: RuntimeBound<Connection>,
    number: u64,
}

pub(crate) struct RedisBackend {
    link: Link,
    /// Where the pub/sub connection may go: the server, or every node of a cluster.
    pubsub_nodes: Vec<redis::Client>,
    capabilities: Capabilities,
    url: String,
    settings: RedisSettings,
    config: AsyncConnectionConfig,
    /// One per lane ([`SHARED`], [`ACKED`]).
    connection: [Mutex<Option<SharedConnection>>; 2],
    /// Numbers the connections made, so a failed command forgets only the one it ran on.
    connections_made: std::sync::atomic::AtomicU64,
    reconnecting: tokio::sync::Mutex<()>,
    subscriber: Revived<Subscriber>,
    release: Script,
    renew: Script,
    renew_many: Script,
    write: Script,
    read: Script,
    permit: Script,
    release_read: Script,
    hand_over: Script,
    vote: Script,
    acquire_fair: Script,
    release_fair: Script,
    acquire_all: Script,
}

impl RedisBackend {
    /// Parses the URL, connects (bounded by the connect timeout), checks the server answers
    /// and accepts our credentials, and loads the scripts.
    pub(crate) async fn connect(
        url: &str,
        settings: RedisSettings,
    ) -> Result<Arc<RedisBackend>, LockError> {
        let backend = Arc::new(RedisBackend::new(url, settings)?);
        backend.check().await?;
        Ok(backend)
    }

    /// Parses the URL without connecting (a Redlock node may be down when the client starts).
    pub(crate) fn new(url: &str, settings: RedisSettings) -> Result<RedisBackend, LockError> {
        let shown = redact_url(url);
        let client = redis::Client::open(url)
            .map_err(|e| LockError::Config(format!("invalid Redis URL {shown}: {e}")))?;
        Ok(RedisBackend::with_link(
            Link::Single(client.clone()),
            vec![client],
            "redis",
            shown,
            settings,
        ))
    }

    fn with_link(
        link: Link,
        pubsub_nodes: Vec<redis::Client>,
        kind: &'static str,
        shown: String,
        settings: RedisSettings,
    ) -> RedisBackend {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.response_timeout));
        let capabilities = Capabilities {
            slot: matches!(link, Link::Cluster(_)).then_some(cluster_slot as fn(&str) -> u16),
            sets: true,
            sets_of_shares: true,
            marks_waiting_writers: true,
            fair: true,
            hands_over: true,
            rides_out: matches!(link, Link::Sentinel(_))
                .then_some(rides_out_failover as fn(&BoxError) -> bool),
            ..Capabilities::every_kind(kind)
        };
        RedisBackend {
            link,
            pubsub_nodes,
            capabilities,
            url: shown,
            settings,
            config,
            connection: [Mutex::new(None), Mutex::new(None)],
            connections_made: Default::default(),
            reconnecting: tokio::sync::Mutex::new(()),
            subscriber: Revived::new(),
            release: Script::new(&scripts::release()),
            renew: Script::new(&scripts::renew()),
            renew_many: Script::new(&scripts::renew_many()),
            write: Script::new(&scripts::write()),
            read: Script::new(&scripts::read()),
            permit: Script::new(&scripts::permit()),
            release_read: Script::new(&scripts::release_read()),
            hand_over: Script::new(&scripts::hand_over()),
            vote: Script::new(VOTE),
            acquire_fair: Script::new(&scripts::acquire_fair()),
            release_fair: Script::new(&scripts::release_fair()),
            acquire_all: Script::new(&scripts::acquire_all()),
        }
    }

    /// Connects, checks the server answers and accepts our credentials, and loads the scripts.
    pub(crate) async fn check(&self) -> Result<(), LockError> {
        let (mut conn, _) = self.connection().await.map_err(|e| self.connect_error(e))?;
        let loaded: RedisResult<()> = async {
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            for script in [
                &self.release,
                &self.renew,
                &self.renew_many,
                &self.write,
                &self.read,
                &self.release_read,
                &self.hand_over,
                &self.vote,
                &self.acquire_fair,
                &self.release_fair,
            ] {
                script.load_async(&mut conn).await?;
            }
            Ok(())
        }
        .await;
        loaded.map_err(|e| self.connect_error(e))?;
        if self.settings.replicas > 0 {
            if self.is_cluster() {
                self.check_cluster_replicas(&mut conn).await?;
            } else {
                self.check_replicas(&mut conn).await?;
            }
        }
        Ok(())
    }

    /// With `?replicas=N` on a cluster: every master that serves slots must have N replicas
    /// connected (`CLUSTER NODES`), or the grants in its slots could never be acknowledged.
    async fn check_cluster_replicas(&self, conn: &mut Connection) -> Result<(), LockError> {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(conn)
            .await
            .map_err(|e| self.connect_error(e))?;
        let mut masters: Vec<(&str, &str)> = Vec::new();
        let mut replicas_of: Vec<&str> = Vec::new();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [id, address, flags, master, _, _, _, link, slots @ ..] = fields.as_slice() else {
                continue;
            };
            if flags.contains("fail") {
                continue;
            }
            if flags.contains("master") && !slots.is_empty() {
                let address = address.split('@').next().unwrap_or(address);
                masters.push((id, address));
            } else if flags.contains("slave") && *link == "connected" {
                replicas_of.push(master);
            }
        }
        for (id, address) in masters {
            let count = replicas_of.iter().filter(|m| **m == id).count();
            self.enough_replicas(&format!("the cluster's master {address}"), count)?;
        }
        Ok(())
    }

    /// `Ok` when `count` replicas of `master` are enough for `?replicas`; otherwise the error
    /// that says so.
    fn enough_replicas(&self, master: &str, count: usize) -> Result<(), LockError> {
        let wanted = self.settings.replicas;
        if count >= usize::from(wanted) {
            return Ok(());
        }
        Err(LockError::Connect {
            url: self.url.clone(),
            reason: format!(
                "`replicas={wanted}` asks every grant to be acknowledged by {wanted} replicas, \
                 but {master} has {count} connected: attach more replicas, or lower `replicas`"
            ),
            source: None,
        })
    }

    /// With `?replicas=N`: the server must be a master with N replicas connected, or no grant
    /// could ever be acknowledged.
    async fn check_replicas(&self, conn: &mut Connection) -> Result<(), LockError> {
        let role: Vec<Value> = redis::cmd("ROLE")
            .query_async(conn)
            .await
            .map_err(|e| self.connect_error(e))?;
        match role.as_slice() {
            [Value::BulkString(role), _, Value::Array(replicas), ..] if role == b"master" => {
                self.enough_replicas("the master", replicas.len())
            }
            _ => Err(LockError::Connect {
                url: self.url.clone(),
                reason: format!(
                    "`replicas={}` needs the URL to name a master, and this server is not one \
                     (ROLE answered {role:?}): name the master, or use `redis+sentinel://` to \
                     find it",
                    self.settings.replicas
                ),
                source: None,
            }),
        }
    }

    /// The URL for messages (password redacted).
    pub(crate) fn shown_url(&self) -> &str {
        &self.url
    }

    /// Turns a connection-time failure into an error that says what to check.
    fn connect_error(&self, error: RedisError) -> LockError {
        let authentication = error.kind() == ErrorKind::AuthenticationFailed
            || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"));
        if let (Link::Sentinel(sentinels), false) = (&self.link, authentication) {
            let hint = match error.kind() {
                ErrorKind::MasterNameNotFoundBySentinel => format!(
                    "check the service name: it is the name in the sentinels' `sentinel monitor \
                     <name> …` line (asked for `{}`)",
                    sentinels.service()
                ),
                _ => "Redis Sentinel: is every sentinel down, or the master unreachable?".into(),
            };
            return LockError::Connect {
                url: self.url.clone(),
                reason: format!("{hint} ({error})"),
                source: Some(Box::new(error)),
            };
        }
        let hint = match error.kind() {
            _ if error.code() == Some("NOAUTH") => {
                "the server requires a password: put it in the URL (redis://:password@host:port)"
                    .to_string()
            }
            _ if error.code() == Some("WRONGPASS") => {
                "authentication failed: check the user and password in the URL \
                 (redis://user:password@host:port)"
                    .to_string()
            }
            ErrorKind::AuthenticationFailed => {
                "authentication failed: check the user and password in the URL \
                 (redis://user:password@host:port)"
                    .to_string()
            }
            _ if error.is_connection_refusal() => {
                "connection refused: is redis-server running at that address?".to_string()
            }
            _ if error.is_timeout() => format!(
                "no answer within the connect timeout ({:?}): is the host reachable?",
                self.settings.connect_timeout
            ),
            _ if error.to_string().contains("cluster support disabled") => {
                "this server is not part of a Redis Cluster (`cluster-enabled no`): use \
                 `redis://` for one server, or `redlock://h1:p1,h2:p2,h3:p3` for independent ones"
                    .to_string()
            }
            _ if error.to_string().contains("certificate") => {
                "TLS certificate verification failed: this machine does not trust the server's \
                 certificate (install its CA; `#insecure` at the end of the URL skips the check, \
                 for testing only)"
                    .to_string()
            }
            _ => "the connection failed".to_string(),
        };
        LockError::Connect {
            url: self.url.clone(),
            reason: format!("{hint} ({error})"),
            source: Some(Box::new(error)),
        }
    }

    fn slot(&self, lane: usize) -> MutexGuard<'_, Option<SharedConnection>> {
        self.connection[lane]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// A handle on the live connection of `lane`, and its number.
    fn current(&self, lane: usize) -> Option<(Connection, u64)> {
        let slot = self.slot(lane);
        let shared = slot.as_ref().filter(|s| s.bound.is_alive())?;
        Some((shared.bound.get().clone(), shared.number))
    }

    /// A handle on the shared multiplexed connection (and its number), which is (re)made on the
    /// caller's runtime when there is none or the runtime it was made on has shut down.
    async fn connection(&self) -> RedisResult<(Connection, u64)> {
        self.connection_of(SHARED).await
    }

    async fn connection_of(&self, lane: usize) -> RedisResult<(Connection, u64)> {
        match self.current(lane) {
            Some(current) => Ok(current),
            // Boxed: connecting is a large future, and every command's future would carry
            // its size (and be copied around with it) while only the first ever needs it.
            None => Box::pin(self.reconnect(lane)).await,
        }
    }

    async fn reconnect(&self, lane: usize) -> RedisResult<(Connection, u64)> {
        let _one_at_a_time = self.reconnecting.lock().await;
        if let Some(current) = self.current(lane) {
            return Ok(current);
        }
        let mut conn = match &self.link {
            Link::Single(client) => Connection::Single(
                client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?,
            ),
            Link::Cluster(client) => Connection::Cluster(client.get_async_connection().await?),
            Link::Sentinel(sentinels) => {
                let (_, conn) = sentinels
                    .connect_master(&self.config, self.settings.connect_timeout)
                    .await?;
                sentinels.watch();
                Connection::Single(conn)
            }
        };
        if lane == ACKED {
            let acks = Acks {
                replicas: self.settings.replicas,
                timeout_ms: 0,
                acked: Default::default(),
            };
            conn = Connection::Acked(Box::new(conn), acks);
            // (`acks` above: a cell per operation is set by `run_acked`.)
        }
        let number = self
            .connections_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.slot(lane) = Some(SharedConnection {
            bound: RuntimeBound::new(conn.clone()),
            number,
        });
        tracing::debug!(url = %self.url, lane, "distlock: connected to redis");
        Ok((conn, number))
    }

    /// Forgets connection number `failed` so the next command reconnects, unless another
    /// caller has already replaced it.
    fn invalidate(&self, lane: usize, failed: u64) {
        let mut slot = self.slot(lane);
        if slot
            .as_ref()
            .is_some_and(|current| current.number == failed)
        {
            *slot = None;
        }
    }

    /// Forgets every connection (the sentinels switched the master): the next command asks
    /// them for the master again, and waiters resubscribe there.
    pub(super) fn forget_connections(&self) {
        for lane in [SHARED, ACKED] {
            *self.slot(lane) = None;
        }
        if let Some(subscriber) = self.subscriber.latest() {
            subscriber.close();
        }
    }

    /// Runs `op` on the shared connection, retrying on a dropped connection or timeout with a
    /// fresh connection. `op` gets the attempt number so it can stay idempotent.
    fn run<T, F, Fut>(&self, op: F) -> impl Future<Output = RedisResult<T>>
    where
        F: FnMut(Connection, u32) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        // Not an `async fn` of its own: the loop's future is the whole future (see
        // `locked::footprint`).
        self.run_on(SHARED, Duration::ZERO, None, op)
    }

    /// [`run`](Self::run) for a write that must reach the replicas (`?replicas=N`): a grant,
    /// renewal or hand-over of a lock with `lease`. On the connection that follows each command
    /// with `WAIT`, given half the lease (at most three quarters of the response timeout, which
    /// bounds the whole pipeline; at least 10 ms: a late acknowledgement only shortens what is
    /// left of the lease, counted from the send); an answer that `wrote` (a grant, a renewal: not a busy or not-ours answer, which
    /// stand whatever the replicas have) fails with [`NOT_ACKED`] unless N replicas
    /// acknowledged it. Without `?replicas`, on the shared connection.
    async fn run_acked<T, F, Fut>(
        &self,
        lease: Duration,
        wrote: impl Fn(&T) -> bool,
        op: F,
    ) -> RedisResult<T>
    where
        F: FnMut(Connection, u32) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        if self.settings.replicas == 0 {
            return self.run_on(SHARED, Duration::ZERO, None, op).await;
        }
        let wait = (lease / 2)
            .min(self.settings.response_timeout * 3 / 4)
            .max(Duration::from_millis(10));
        let acked = Arc::new(std::sync::atomic::AtomicI64::new(-1));
        let answer = Box::pin(self.run_on(ACKED, wait, Some(&acked), op)).await?;
        let acked = acked.load(std::sync::atomic::Ordering::Relaxed);
        if wrote(&answer) && acked < i64::from(self.settings.replicas) {
            return Err(RedisError::from((
                ErrorKind::Client,
                NOT_ACKED,
                format!(
                    "{acked} of {} replicas within {wait:?} (`replicas={}`)",
                    self.settings.replicas, self.settings.replicas
                ),
            )));
        }
        Ok(answer)
    }

    /// Runs `op` on `lane` (see [`run`](Self::run)); on the acknowledged lane, `acked` gets how
    /// many replicas acknowledged the last try's last command.
    async fn run_on<T, F, Fut>(
        &self,
        lane: usize,
        wait: Duration,
        acked: Option<&Arc<std::sync::atomic::AtomicI64>>,
        mut op: F,
    ) -> RedisResult<T>
    where
        F: FnMut(Connection, u32) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut attempt = 0;
        loop {
            let result = match self.connection_of(lane).await {
                Ok((mut conn, number)) => {
                    // (No `WAIT` at all for an operation that waits for nothing: a release.)
                    conn.waiting(if wait.is_zero() { 0 } else { millis(wait) }, acked);
                    let outcome = op(conn, attempt).await;
                    if outcome
                        .as_ref()
                        .is_err_and(|e| is_transient(e) || self.failed_over(e))
                    {
                        self.invalidate(lane, number);
                    }
                    outcome
                }
                Err(error) => Err(error),
            };
            match result {
                Err(error)
                    if attempt < self.settings.retries
                        && (is_transient(&error) || self.failed_over(&error)) =>
                {
                    attempt += 1;
                    tracing::debug!(%error, attempt, "distlock: redis command failed, retrying");
                    // Boxed, like the reconnection: off the hot path, out of its future.
                    Box::pin(tokio::time::sleep(super::retry_pause(attempt))).await;
                }
                other => return other,
            }
        }
    }

    /// Whether `error` says the node we write to is no longer the master (`READONLY`): behind
    /// Sentinel, ask the sentinels again.
    fn failed_over(&self, error: &RedisError) -> bool {
        matches!(self.link, Link::Sentinel(_))
            && error.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
    }

    fn fence_key(&self, name: &str) -> String {
        format!("{}{}", self.settings.fence_prefix, name)
    }

    /// Where writers waiting for `name`'s readers mark it.
    fn writers_key(&self, name: &str) -> String {
        format!("{WRITERS_PREFIX}{name}")
    }

    /// An attempt by script (see `scripts::write`, `scripts::read` and `scripts::permit`): a
    /// reader's, a semaphore's permit's, or a plain lock's when it is fenced, waiting, or
    /// retried.
    async fn try_acquire_by_script(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let fence_key = &self.fence_key(spec.name);
        let writers = &self.writers_key(spec.name);
        let lease = millis(spec.lease);
        // The last argument: a waiting writer's mark (ms), or a semaphore's limit.
        let (script, last) = match spec.kind {
            Kind::Exclusive if spec.waiting => (&self.write, millis(crate::wait::FAIR_QUEUE_TTL)),
            Kind::Exclusive => (&self.write, 0),
            Kind::Shared => (&self.read, 0),
            Kind::Permits(limit) => (&self.permit, u64::from(limit)),
        };
        let (taken, value): (i64, i64) = self
            .run_acked(
                spec.lease,
                |&(taken, _): &(i64, i64)| taken == 1,
                |mut conn, _| {
                    let mut call = script.key(spec.name);
                    call.key(fence_key)
                        .key(writers)
                        .arg(spec.token)
                        .arg(lease)
                        .arg(u8::from(spec.fencing))
                        .arg(last);
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await
            .map_err(acquire_error)?;
        scripted_attempt(spec, taken, value)
    }

    /// Runs the release `script` (`scripts::release`, `release_read` or `release_fair`) on
    /// `keys` for `token`: what it saw.
    async fn release_with(
        &self,
        script: &Script,
        keys: &[&str],
        token: &str,
    ) -> Result<Released, BoxError> {
        let mut retried = false;
        // With `?replicas`, on the grants' connection (without `WAIT`): behind every attempt
        // sent before it, so the release of a cancelled attempt can never overtake it.
        let lane = if self.settings.replicas > 0 {
            ACKED
        } else {
            SHARED
        };
        let released: i64 = self
            .run_on(lane, Duration::ZERO, None, |mut conn, attempt| {
                retried |= attempt > 0;
                let call = evalsha_keys_token(script, keys, token);
                async move { query_script(&mut conn, script, &call).await }
            })
            .await?;
        // A cluster connection retries a command inside (after a timeout or a dropped
        // connection, and counts redirections as retries), out of sight: any of its answers
        // may follow an earlier try that landed.
        retried |= self.is_cluster();
        Ok(Released::after_tries(released == 1, retried))
    }

    /// A fair lock's queue and deadline keys.
    fn fair_keys(&self, name: &str) -> (String, String) {
        (
            format!("{FAIR_QUEUE_PREFIX}{name}"),
            format!("{FAIR_DEADLINES_PREFIX}{name}"),
        )
    }

    /// A fair attempt: one script that queues the token unless the lock is free and it is
    /// first in line.
    async fn try_acquire_fair(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let fence_key = self.fence_key(spec.name);
        let (queue, deadlines) = self.fair_keys(spec.name);
        let place = millis(crate::wait::FAIR_QUEUE_TTL);
        let (taken, value): (i64, i64) = self
            .run_acked(
                spec.lease,
                |&(taken, _): &(i64, i64)| taken == 1,
                |mut conn, _| {
                    let mut call = self.acquire_fair.key(spec.name);
                    call.key(&queue)
                        .key(&deadlines)
                        .key(&fence_key)
                        .arg(spec.token)
                        .arg(millis(spec.lease))
                        .arg(place)
                        .arg(u8::from(spec.fencing));
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await
            .map_err(acquire_error)?;
        scripted_attempt(spec, taken, value.max(-2))
    }

    /// Several locks in one script call (see `scripts::acquire_all`).
    async fn acquire_set(&self, specs: &[LockSpec<'_>]) -> Result<SetAttempt, BoxError> {
        let Some(first) = specs.first() else {
            return Ok(SetAttempt::Acquired {
                fencing_tokens: Vec::new(),
            });
        };
        let keys: Vec<[String; 2]> = specs
            .iter()
            .map(|spec| [self.fence_key(spec.name), self.writers_key(spec.name)])
            .collect();
        let answer: Vec<i64> = self
            .run_acked(
                first.lease,
                |answer: &Vec<i64>| answer.first() == Some(&1),
                |mut conn, _| {
                    let mut call = self.acquire_all.prepare_invoke();
                    call.arg(millis(first.lease))
                        .arg(u8::from(first.fencing))
                        .arg(u8::from(first.kind == Kind::Shared));
                    for (spec, [fence, writers]) in specs.iter().zip(&keys) {
                        call.key(spec.name).key(fence).key(writers).arg(spec.token);
                    }
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await
            .map_err(acquire_error)?;
        let index = |i: i64| usize::try_from(i).unwrap_or(usize::MAX);
        match answer.as_slice() {
            [1, tokens @ ..] if tokens.len() == specs.len() => Ok(SetAttempt::Acquired {
                fencing_tokens: tokens
                    .iter()
                    .map(|&t| first.fencing.then_some(t as u64))
                    .collect(),
            }),
            [0, i, _] if index(*i) < specs.len() => Ok(SetAttempt::Busy { index: index(*i) }),
            [2, i, limit] if index(*i) < specs.len() => {
                let held = u16::try_from(*limit).ok().filter(|&n| n > 0);
                Err(super::Refused::kind(held, first.kind))
            }
            other => Err(format!("the set acquisition script answered {other:?}").into()),
        }
    }

    fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// Renews `specs` (all in one slot when in a cluster) with one script call.
    async fn renew_batch(&self, specs: &[LockSpec<'_>]) -> Result<Vec<bool>, BoxError> {
        let lease = specs
            .iter()
            .map(|spec| spec.lease)
            .min()
            .unwrap_or_default();
        let renewed: Vec<i64> = self
            .run_acked(
                lease,
                |renewed: &Vec<i64>| renewed.contains(&1),
                |mut conn, _| {
                    let mut call = self.renew_many.prepare_invoke();
                    for spec in specs {
                        call.key(spec.name)
                            .arg(spec.token)
                            .arg(millis(spec.lease))
                            .arg(u8::from(spec.kind != Kind::Exclusive));
                    }
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await?;
        if renewed.len() != specs.len() {
            return Err(format!(
                "renewal script answered {} results for {} locks",
                renewed.len(),
                specs.len()
            )
            .into());
        }
        Ok(renewed.into_iter().map(|r| r == 1).collect())
    }
    /// One attempt (see [`Backend::try_acquire`]).
    fn attempt<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        if spec.fair {
            // A future of its own: the plain path's stays small (see `locked::footprint`).
            return Box::pin(self.try_acquire_fair(spec));
        }
        Box::pin(async move {
            let lease = millis(spec.lease);
            // The hot path: a first try for a plain lock is one `SET NX PX` (`OK` when set, nil
            // when taken: read as a raw value, no string allocated). A reader, a fenced lock, a
            // waiter (which needs the holder's TTL, and marks a key its readers hold) and a
            // retry on a fresh connection (which must recognize the lock as ours if the lost
            // first try took it) run one script instead.
            let plain = spec.kind == Kind::Exclusive && !spec.fencing && !spec.waiting;
            let taken: Option<bool> = if plain {
                self.run_acked(
                    spec.lease,
                    |taken: &Option<bool>| *taken == Some(true),
                    |mut conn, attempt| {
                        let set = set_nx_px(spec.name, spec.token, lease);
                        async move {
                            if attempt > 0 {
                                return Ok(None);
                            }
                            let set: Value = set.query_async(&mut conn).await?;
                            Ok(Some(set != Value::Nil))
                        }
                    },
                )
                .await
                .map_err(acquire_error)?
            } else {
                None
            };
            match taken {
                Some(true) => Ok(Attempt::Acquired {
                    fencing_token: None,
                }),
                Some(false) => Ok(Attempt::Busy { ttl: None }),
                // Boxed: the plain path's future stays small (see `locked::footprint`).
                None => Box::pin(self.try_acquire_by_script(spec)).await,
            }
        })
    }

    /// Gives back what an attempt whose grant the replicas did not acknowledge may have taken
    /// (quietly: errors are only logged; the lease ends it otherwise).
    async fn give_back_unacked(&self, specs: &[LockSpec<'_>]) {
        for spec in specs {
            let hold = Hold {
                name: spec.name,
                token: spec.token,
                kind: spec.kind,
                fair: spec.fair,
            };
            if let Err(error) = Backend::release(self, hold).await {
                tracing::debug!(%error, key = spec.name, "distlock: giving back an unacknowledged grant failed");
            }
        }
    }
}

/// Whether an acquisition failed because too few replicas acknowledged its grant.
fn not_acked(error: &BoxError) -> bool {
    error
        .downcast_ref::<Transient>()
        .and_then(|t| t.0.downcast_ref::<RedisError>())
        .is_some_and(is_not_acked)
}

/// Errors worth retrying on a fresh connection: the command may or may not have run, so every
/// operation is written to be safe to repeat with the same token.
/// Behind Sentinel: whether a failed release is retried while the lease lasts — the
/// connection dropped or timed out, or the node we wrote to is no longer the master (a failover
/// in progress, over within seconds).
fn rides_out_failover(error: &BoxError) -> bool {
    error.downcast_ref::<RedisError>().is_some_and(|e| {
        is_transient(e) || e.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
    })
}

fn is_transient(error: &RedisError) -> bool {
    if error.kind() == ErrorKind::AuthenticationFailed {
        return false;
    }
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || matches!(
            error.retry_method(),
            redis::RetryMethod::Reconnect
                | redis::RetryMethod::RetryImmediately
                | redis::RetryMethod::WaitAndRetry
        )
}

/// An acquisition's error: transient (retried while the request's `wait` lasts) when the
/// connection dropped, timed out or was refused, or the server said to try again (a cluster
/// failover, a server loading its data); permanent otherwise (authentication, a script error,
/// a lock key holding a value of another type).
pub(crate) fn acquire_error(error: RedisError) -> BoxError {
    let transient = is_transient(&error) || is_not_acked(&error);
    Transient::wrap_if(transient, error)
}

/// `SET <name> <token> NX PX <lease>` in one pre-sized command (the hot path: `redis::cmd`
/// grows its buffers argument by argument).
fn set_nx_px(name: &str, token: &str, lease: u64) -> Cmd {
    let mut set = Cmd::with_capacity(6, 3 + name.len() + token.len() + 4 + 20);
    set.arg("SET")
        .arg(name)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(lease);
    set
}

/// `EVALSHA <script> <n> <keys…> <token>`, pre-sized: what a `ScriptInvocation` sends, without
/// its vector per key and argument and its growing command.
fn evalsha_keys_token(script: &Script, keys: &[&str], token: &str) -> Cmd {
    let hash = script.get_hash();
    let size = 7 + hash.len() + 2 + keys.iter().map(|k| k.len()).sum::<usize>() + token.len();
    let mut call = Cmd::with_capacity(4 + keys.len(), size);
    call.arg("EVALSHA").arg(hash).arg(keys.len());
    for key in keys {
        call.arg(*key);
    }
    call.arg(token);
    call
}

/// Runs an `EVALSHA` of `script`; a server that no longer has the script (`NOSCRIPT`: restarted
/// empty, or `SCRIPT FLUSH`) is given it again and asked once more.
async fn query_script<T: redis::FromRedisValue>(
    conn: &mut Connection,
    script: &Script,
    call: &Cmd,
) -> RedisResult<T> {
    match call.query_async(conn).await {
        Err(error) if error.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            call.query_async(conn).await
        }
        other => other,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// An acquisition script's answer `{taken, value}`: taken with the fencing token `value` (if
/// asked for), busy for `value` ms (a PTTL), or (`2`) refused: the name is held as a semaphore
/// of `value` permits, or (`0`) as a lock (see `scripts`).
fn scripted_attempt(spec: LockSpec<'_>, taken: i64, value: i64) -> Result<Attempt, BoxError> {
    match taken {
        1 => Ok(Attempt::Acquired {
            fencing_token: spec.fencing.then_some(value as u64),
        }),
        2 => {
            let held = u16::try_from(value).ok().filter(|&n| n > 0);
            Err(match (held, spec.kind) {
                (Some(held), Kind::Permits(asked)) => super::Refused::limit(held, asked),
                (held, asked) => super::Refused::kind(held, asked),
            })
        }
        _ => Ok(Attempt::Busy {
            ttl: ttl_from_pttl(value),
        }),
    }
}

fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO), // gone already: retry at once
        ms if ms >= 0 => Some(Duration::from_millis(ms as u64)),
        _ => None, // no TTL (a foreign lock without expiry)
    }
}

impl Backend for RedisBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        if self.settings.replicas > 0 {
            return Box::pin(async move {
                let attempt = self.attempt(spec).await;
                if attempt.as_ref().is_err_and(not_acked) {
                    self.give_back_unacked(&[spec]).await;
                }
                attempt
            });
        }
        self.attempt(spec)
    }

    fn try_acquire_all<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Result<SetAttempt, BoxError>> {
        Box::pin(async move {
            let attempt = self.acquire_set(specs).await;
            if attempt.as_ref().is_err_and(not_acked) {
                self.give_back_unacked(specs).await;
            }
            attempt
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let lease = millis(spec.lease);
            let renewed: i64 = self
                .run_acked(
                    spec.lease,
                    |&renewed: &i64| renewed == 1,
                    |mut conn, _| {
                        let mut call = self.renew.key(spec.name);
                        call.arg(spec.token)
                            .arg(lease)
                            .arg(u8::from(spec.kind != Kind::Exclusive));
                        async move { call.invoke_async(&mut conn).await }
                    },
                )
                .await?;
            Ok(renewed == 1)
        })
    }

    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        Box::pin(async move {
            // The renewer groups locks by `batch_group` (the slot in a cluster), so every spec
            // here shares one slot and one script call takes them all.
            match self.renew_batch(specs).await {
                Ok(renewed) => renewed.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error.to_string()); specs.len()],
            }
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        if hold.fair {
            return Box::pin(async move {
                let (queue, deadlines) = self.fair_keys(name);
                let keys = [name, &queue, &deadlines];
                self.release_with(&self.release_fair, &keys, token).await
            });
        }
        Box::pin(async move {
            let script = match hold.kind {
                Kind::Exclusive => &self.release,
                Kind::Shared | Kind::Permits(_) => &self.release_read,
            };
            let writers = self.writers_key(name);
            self.release_with(script, &[name, &writers], token).await
        })
    }

    fn hand_over<'a>(
        &'a self,
        from: &'a str,
        to: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<Handover, BoxError>> {
        Box::pin(async move {
            let fence_key = self.fence_key(to.name);
            let lease = millis(to.lease);
            let handed: i64 = self
                .run_acked(
                    to.lease,
                    |&handed: &i64| handed != -1,
                    |mut conn, attempt| {
                        let mut call = self.hand_over.key(to.name);
                        call.key(&fence_key)
                            .arg(from)
                            .arg(to.token)
                            .arg(lease)
                            .arg(u8::from(to.fencing))
                            .arg(u8::from(attempt > 0));
                        async move { call.invoke_async(&mut conn).await }
                    },
                )
                .await?;
            Ok(match handed {
                -1 => Handover::NotHeld,
                token => Handover::Handed {
                    fencing_token: to.fencing.then_some(token as u64),
                },
            })
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let (name, token) = (spec.name, spec.fair.then_some(spec.token));
        Box::pin(async move {
            let subscriber = self.subscriber().await?;
            Ok(subscriber.subscribe(name, token).await?)
        })
    }
}

impl Admin for RedisBackend {
    fn inspect<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::admin::Entry>, BoxError>> {
        Box::pin(self.inspect_lock(name))
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<crate::admin::Entry>, BoxError>> {
        Box::pin(self.list_locks(prefix, pattern, limit))
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::admin::Entry>, BoxError>> {
        Box::pin(self.force_release_lock(name))
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(self.version())
    }
}

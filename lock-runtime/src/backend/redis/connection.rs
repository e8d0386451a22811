//! The backend's connections: the shared one (lane 0) and the one that waits for replicas
//! (lane 1, `?replicas`), made again when they drop, and the retries of a command on a fresh
//! one.

use std::future::Future;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Value};

use super::errors::is_transient;
use super::{Link, RedisBackend, millis};
use crate::runtime::RuntimeBound;

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
pub(super) fn is_not_acked(error: &RedisError) -> bool {
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
pub(super) const SHARED: usize = 0;
pub(super) const ACKED: usize = 1;

/// The shared connection and its number (see `RedisBackend::connections_made`).
pub(super) struct SharedConnection {
    bound: RuntimeBound<Connection>,
    number: u64,
}

impl RedisBackend {
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
    pub(super) async fn connection(&self) -> RedisResult<(Connection, u64)> {
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
            if let Connection::Single(single) = &conn {
                self.load_scripts(single).await?;
            }
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

    /// Gives a fresh acknowledged connection's server every script first. A master just
    /// promoted has none (a replica's cache is its own), and there an `EVALSHA` answers
    /// `NOSCRIPT` only after the `WAIT` pipelined behind it has timed out: a renewal after a
    /// failover would lose that timeout (half the lease at most) before its retry with the
    /// script. Loaded at once, the multiplexed connection pipelining them. (A cluster's
    /// connection routes by key: its scripts are given again where `NOSCRIPT` says.)
    async fn load_scripts(&self, conn: &MultiplexedConnection) -> RedisResult<()> {
        let scripts = [
            &self.release,
            &self.renew,
            &self.renew_many,
            &self.write,
            &self.read,
            &self.permit,
            &self.release_read,
            &self.hand_over,
            &self.acquire_fair,
            &self.release_fair,
            &self.acquire_all,
            &self.upgrade,
        ];
        let loads = scripts.map(|script| {
            let mut conn = conn.clone();
            async move { script.load_async(&mut conn).await.map(drop) }
        });
        futures_util::future::try_join_all(loads).await.map(drop)
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
    pub(super) fn run<T, F, Fut>(&self, op: F) -> impl Future<Output = RedisResult<T>>
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
    pub(super) async fn run_acked<T, F, Fut>(
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
    pub(super) async fn run_on<T, F, Fut>(
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
                    Box::pin(tokio::time::sleep(crate::backend::retry_pause(attempt))).await;
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
}

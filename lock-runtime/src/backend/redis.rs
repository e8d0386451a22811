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

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Script, Value,
};
use tokio::sync::{mpsc, oneshot};

use super::{Attempt, Backend, LockSpec, Transient};
use crate::error::{BoxError, LockError};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::{BoxFuture, RuntimeBound};

/// Compare-token delete, then wake the waiters (unless ARGV[2] is `quiet`: Redlock undoing a
/// failed attempt must not wake anyone). Returns 1 if the lock was ours.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= 'quiet' then
    redis.call('PUBLISH', KEYS[1], 'released')
  end
  return 1
end
return 0";

/// Compare-token extend. Returns 1 if the lock was ours and is extended.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// Compare-token extend of many locks at once: KEYS are the locks, ARGV holds a (token, lease)
/// pair per key. Returns 1/0 per key.
const RENEW_MANY: &str = r"
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2 * i - 1] then
    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  else
    out[i] = 0
  end
end
return out";

/// Acquire with a fencing token: {1, token} when taken (or already ours: a retried attempt),
/// {0, pttl} when busy.
const ACQUIRE_FENCED: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}";

/// After a `SET NX` found the key taken: {1, pttl} if it is ours after all (a retried attempt
/// whose first `SET` succeeded), else {0, pttl}; pttl is -2 when the key is gone, -1 without TTL.
const INSPECT: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return {0, -2} end
return {v == ARGV[1] and 1 or 0, redis.call('PTTL', KEYS[1])}";

/// One Redlock vote: take the lock if free (or refresh it if it is already ours: a retried
/// attempt) → {1}; else {0, pttl, holder's token}.
const VOTE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1}
end
if not v then return {0, -2, ''} end
return {0, redis.call('PTTL', KEYS[1]), v}";

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
}

/// How the backend reaches Redis (one per backend, so the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Link {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// A connection of either kind; commands go through it unchanged.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Connection::Single(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
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
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(conn) => conn.get_db(),
            Connection::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The outcome of one Redlock vote on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vote {
    Granted,
    /// Held by `holder` (empty when the key vanished in between) for `pttl` ms more (-1: no TTL).
    Busy {
        pttl: i64,
        holder: String,
    },
}

/// The shared connection and its number (see `RedisBackend::connections_made`).
struct SharedConnection {
    bound: RuntimeBound<Connection>,
    number: u64,
}

pub(crate) struct RedisBackend {
    link: Link,
    /// Where the pub/sub connection may go: the server, or every node of a cluster.
    pubsub_nodes: Vec<redis::Client>,
    kind: &'static str,
    url: String,
    settings: RedisSettings,
    config: AsyncConnectionConfig,
    connection: Mutex<Option<SharedConnection>>,
    /// Numbers the connections made, so a failed command forgets only the one it ran on.
    connections_made: std::sync::atomic::AtomicU64,
    reconnecting: tokio::sync::Mutex<()>,
    subscriber: Mutex<Option<Arc<Subscriber>>>,
    subscribing: tokio::sync::Mutex<()>,
    release: Script,
    renew: Script,
    renew_many: Script,
    acquire_fenced: Script,
    inspect: Script,
    vote: Script,
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

    /// A Redis Cluster reached through any of `nodes` (`redis://[user:password@]host:port`
    /// each); `shown` is the URL for messages. Connects and loads the scripts on every master.
    pub(crate) async fn connect_cluster(
        nodes: &[String],
        shown: String,
        settings: RedisSettings,
    ) -> Result<Arc<RedisBackend>, LockError> {
        let mut clients = Vec::with_capacity(nodes.len());
        for node in nodes {
            let client = redis::Client::open(node.as_str()).map_err(|e| {
                LockError::Config(format!(
                    "invalid node `{}` in Redis Cluster URL {shown}: {e}",
                    redact_url(node)
                ))
            })?;
            clients.push(client);
        }
        let cluster = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            .retries(settings.retries.max(1) * 4)
            .max_retry_wait(200)
            .build()
            .map_err(|e| LockError::Config(format!("invalid Redis Cluster URL {shown}: {e}")))?;
        let backend = Arc::new(RedisBackend::with_link(
            Link::Cluster(cluster),
            clients,
            "redis-cluster",
            shown,
            settings,
        ));
        backend.check().await?;
        Ok(backend)
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
        RedisBackend {
            link,
            pubsub_nodes,
            kind,
            url: shown,
            settings,
            config,
            connection: Mutex::new(None),
            connections_made: Default::default(),
            reconnecting: tokio::sync::Mutex::new(()),
            subscriber: Mutex::new(None),
            subscribing: tokio::sync::Mutex::new(()),
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
            renew_many: Script::new(RENEW_MANY),
            acquire_fenced: Script::new(ACQUIRE_FENCED),
            inspect: Script::new(INSPECT),
            vote: Script::new(VOTE),
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
                &self.acquire_fenced,
                &self.inspect,
                &self.vote,
            ] {
                script.load_async(&mut conn).await?;
            }
            Ok(())
        }
        .await;
        loaded.map_err(|e| self.connect_error(e))
    }

    /// The URL for messages (password redacted).
    pub(crate) fn shown_url(&self) -> &str {
        &self.url
    }

    /// Turns a connection-time failure into an error that says what to check.
    fn connect_error(&self, error: RedisError) -> LockError {
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

    fn slot(&self) -> MutexGuard<'_, Option<SharedConnection>> {
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A handle on the live shared connection, and its number.
    fn current(&self) -> Option<(Connection, u64)> {
        let slot = self.slot();
        let shared = slot.as_ref().filter(|s| s.bound.is_alive())?;
        Some((shared.bound.get().clone(), shared.number))
    }

    /// A handle on the shared multiplexed connection (and its number), which is (re)made on the
    /// caller's runtime when there is none or the runtime it was made on has shut down.
    async fn connection(&self) -> RedisResult<(Connection, u64)> {
        match self.current() {
            Some(current) => Ok(current),
            // Boxed: connecting is a large future, and every command's future would carry
            // its size (and be copied around with it) while only the first ever needs it.
            None => Box::pin(self.reconnect()).await,
        }
    }

    async fn reconnect(&self) -> RedisResult<(Connection, u64)> {
        let _one_at_a_time = self.reconnecting.lock().await;
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let conn = match &self.link {
            Link::Single(client) => Connection::Single(
                client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await?,
            ),
            Link::Cluster(client) => Connection::Cluster(client.get_async_connection().await?),
        };
        let number = self
            .connections_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.slot() = Some(SharedConnection {
            bound: RuntimeBound::new(conn.clone()),
            number,
        });
        tracing::debug!(url = %self.url, "distlock: connected to redis");
        Ok((conn, number))
    }

    /// Forgets connection number `failed` so the next command reconnects, unless another
    /// caller has already replaced it.
    fn invalidate(&self, failed: u64) {
        let mut slot = self.slot();
        if slot
            .as_ref()
            .is_some_and(|current| current.number == failed)
        {
            *slot = None;
        }
    }

    /// Runs `op` on the shared connection, retrying on a dropped connection or timeout with a
    /// fresh connection. `op` gets the attempt number so it can stay idempotent.
    async fn run<T, F, Fut>(&self, mut op: F) -> RedisResult<T>
    where
        F: FnMut(Connection, u32) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut attempt = 0;
        loop {
            let result = match self.connection().await {
                Ok((conn, number)) => {
                    let outcome = op(conn, attempt).await;
                    if outcome.as_ref().is_err_and(is_transient) {
                        self.invalidate(number);
                    }
                    outcome
                }
                Err(error) => Err(error),
            };
            match result {
                Err(error) if attempt < self.settings.retries && is_transient(&error) => {
                    attempt += 1;
                    tracing::debug!(%error, attempt, "distlock: redis command failed, retrying");
                    let backoff = Duration::from_millis(10 * 4u64.pow(attempt - 1));
                    // Boxed, like the reconnection: off the hot path, out of its future.
                    Box::pin(tokio::time::sleep(backoff)).await;
                }
                other => return other,
            }
        }
    }

    /// The live pub/sub subscriber, started on the caller's runtime when needed.
    async fn subscriber(&self) -> RedisResult<Arc<Subscriber>> {
        let current = || {
            self.subscriber
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .filter(|s| s.is_alive())
                .cloned()
        };
        if let Some(subscriber) = current() {
            return Ok(subscriber);
        }
        let _one_at_a_time = self.subscribing.lock().await;
        if let Some(subscriber) = current() {
            return Ok(subscriber);
        }
        // Any node will do in a cluster (a PUBLISH reaches every node): start with a random
        // one so clients spread out, and move on when one does not answer.
        let start = fastrand::usize(..self.pubsub_nodes.len());
        let mut last_error = None;
        let mut pubsub = None;
        for i in 0..self.pubsub_nodes.len() {
            let node = &self.pubsub_nodes[(start + i) % self.pubsub_nodes.len()];
            match tokio::time::timeout(self.settings.connect_timeout, node.get_async_pubsub()).await
            {
                Ok(Ok(connected)) => {
                    pubsub = Some(connected);
                    break;
                }
                Ok(Err(error)) => last_error = Some(error),
                Err(_) => {
                    last_error = Some(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "pub/sub connection timed out",
                    )))
                }
            }
        }
        let Some(pubsub) = pubsub else {
            return Err(last_error.expect("at least one node"));
        };
        let subscriber = Subscriber::start(pubsub, self.settings.response_timeout);
        *self.subscriber.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&subscriber));
        Ok(subscriber)
    }

    fn fence_key(&self, name: &str) -> String {
        format!("{}{}", self.settings.fence_prefix, name)
    }

    /// One Redlock vote on this node (one round trip, no retries beyond the settings').
    pub(crate) async fn vote(&self, name: &str, token: &str, lease: Duration) -> RedisResult<Vote> {
        let lease = millis(lease);
        let reply: Vec<Value> = self
            .run(|mut conn, _| {
                let mut call = self.vote.key(name);
                call.arg(token).arg(lease);
                async move { call.invoke_async(&mut conn).await }
            })
            .await?;
        match reply.as_slice() {
            [_granted] => Ok(Vote::Granted),
            [_, pttl, holder] => Ok(Vote::Busy {
                pttl: redis::from_redis_value_ref(pttl)?,
                holder: redis::from_redis_value_ref(holder)?,
            }),
            _ => Err(RedisError::from((
                ErrorKind::Parse,
                "unexpected reply to the Redlock vote script",
            ))),
        }
    }

    /// Deletes the lock if it holds `token`, without waking anyone: Redlock undoing the partial
    /// locks of an attempt that did not win.
    pub(crate) async fn release_quietly(&self, name: &str, token: &str) -> RedisResult<bool> {
        let released: i64 = self
            .run(|mut conn, _| {
                let mut call = self.release.key(name);
                call.arg(token).arg("quiet");
                async move { call.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(released == 1)
    }

    fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// Renews `specs` (all in one slot when in a cluster) with one script call.
    async fn renew_batch(&self, specs: &[LockSpec<'_>]) -> Result<Vec<bool>, BoxError> {
        let renewed: Vec<i64> = self
            .run(|mut conn, _| {
                let mut call = self.renew_many.prepare_invoke();
                for spec in specs {
                    call.key(spec.name).arg(spec.token).arg(millis(spec.lease));
                }
                async move { call.invoke_async(&mut conn).await }
            })
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
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag, modulo 16384.
pub(crate) fn cluster_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(bytes) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Errors worth retrying on a fresh connection: the command may or may not have run, so every
/// operation is written to be safe to repeat with the same token.
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
    if is_transient(&error) {
        Transient::wrap(error)
    } else {
        error.into()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO), // gone already: retry at once
        ms if ms >= 0 => Some(Duration::from_millis(ms as u64)),
        _ => None, // no TTL (a foreign lock without expiry)
    }
}

impl Backend for RedisBackend {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn hash_tags(&self) -> bool {
        self.is_cluster()
    }

    fn batch_group(&self, name: &str) -> u16 {
        if self.is_cluster() {
            cluster_slot(name)
        } else {
            0
        }
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(async move {
            let lease = millis(spec.lease);
            if spec.fencing {
                let fence_key = self.fence_key(spec.name);
                let (taken, value): (i64, i64) = self
                    .run(|mut conn, _| {
                        let mut call = self.acquire_fenced.key(spec.name);
                        call.key(&fence_key).arg(spec.token).arg(lease);
                        async move { call.invoke_async(&mut conn).await }
                    })
                    .await
                    .map_err(acquire_error)?;
                return Ok(if taken == 1 {
                    Attempt::Acquired {
                        fencing_token: Some(value as u64),
                    }
                } else {
                    Attempt::Busy {
                        ttl: ttl_from_pttl(value),
                    }
                });
            }
            // `OK` when set, nil when taken: read as a raw value, no string allocated.
            let set: Value = self
                .run(|mut conn, _| async move {
                    redis::cmd("SET")
                        .arg(spec.name)
                        .arg(spec.token)
                        .arg("NX")
                        .arg("PX")
                        .arg(lease)
                        .query_async(&mut conn)
                        .await
                })
                .await
                .map_err(acquire_error)?;
            if set != Value::Nil {
                return Ok(Attempt::Acquired {
                    fencing_token: None,
                });
            }
            let (ours, pttl): (i64, i64) = self
                .run(|mut conn, _| {
                    let mut call = self.inspect.key(spec.name);
                    call.arg(spec.token);
                    async move { call.invoke_async(&mut conn).await }
                })
                .await
                .map_err(acquire_error)?;
            Ok(if ours == 1 {
                Attempt::Acquired {
                    fencing_token: None,
                }
            } else {
                Attempt::Busy {
                    ttl: ttl_from_pttl(pttl),
                }
            })
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let lease = millis(spec.lease);
            let renewed: i64 = self
                .run(|mut conn, _| {
                    let mut call = self.renew.key(spec.name);
                    call.arg(spec.token).arg(lease);
                    async move { call.invoke_async(&mut conn).await }
                })
                .await?;
            Ok(renewed == 1)
        })
    }

    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        Box::pin(async move {
            if let [spec] = specs {
                return vec![self.renew(*spec).await.map_err(|e| e.to_string())];
            }
            // The renewer groups locks by `batch_group` (the slot in a cluster), so every spec
            // here shares one slot and one script call takes them all.
            match self.renew_batch(specs).await {
                Ok(renewed) => renewed.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error.to_string()); specs.len()],
            }
        })
    }

    fn release<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let mut retried = false;
            let released: i64 = self
                .run(|mut conn, attempt| {
                    retried |= attempt > 0;
                    let mut call = self.release.key(name);
                    call.arg(token);
                    async move { call.invoke_async(&mut conn).await }
                })
                .await?;
            if released == 0 && retried {
                // The first attempt may have deleted the key before its reply was lost; we
                // cannot tell that apart from an expired lease, so report it as not held.
                tracing::debug!(name, "distlock: release retried after a dropped connection");
            }
            Ok(released == 1)
        })
    }

    fn subscribe<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        Box::pin(async move {
            let subscriber = self.subscriber().await?;
            Ok(subscriber.subscribe(name).await?)
        })
    }
}

/// One pub/sub connection shared by every waiter of a client.
///
/// A command task owns the sink and applies SUBSCRIBE/UNSUBSCRIBE in order (so a key's
/// subscription always matches whether anyone waits on it); a reader task turns messages into
/// hub notifications. When the connection or its runtime dies, the hub is closed, which wakes
/// every waiter so it retries and resubscribes through a new subscriber.
struct Subscriber {
    hub: Arc<ReleaseHub>,
    commands: mpsc::UnboundedSender<Command>,
    dead: Arc<AtomicBool>,
    runtime: RuntimeBound<()>,
    response_timeout: Duration,
}

enum Command {
    Subscribe(String, oneshot::Sender<RedisResult<()>>),
    Unsubscribe(String),
}

/// Closes the hub when the reader task ends or is dropped with its runtime.
struct CloseOnDrop {
    hub: Arc<ReleaseHub>,
    dead: Arc<AtomicBool>,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.dead.store(true, Ordering::SeqCst);
        self.hub.close();
    }
}

impl Subscriber {
    fn start(pubsub: redis::aio::PubSub, response_timeout: Duration) -> Arc<Subscriber> {
        let (mut sink, mut stream) = pubsub.split();
        let (commands, mut queue) = mpsc::unbounded_channel::<Command>();
        let unsubscribe = commands.clone();
        let hub = ReleaseHub::new(Some(Box::new(move |name: &str| {
            let _ = unsubscribe.send(Command::Unsubscribe(name.to_owned()));
        })));
        let dead = Arc::new(AtomicBool::new(false));

        let closer = CloseOnDrop {
            hub: Arc::clone(&hub),
            dead: Arc::clone(&dead),
        };
        tokio::spawn(async move {
            let _closer = closer;
            while let Some(message) = stream.next().await {
                _closer.hub.notify(message.get_channel_name());
            }
            tracing::debug!("distlock: redis pub/sub connection closed");
        });

        let command_dead = Arc::clone(&dead);
        tokio::spawn(async move {
            let mut subscribed = HashSet::new();
            while let Some(command) = queue.recv().await {
                match command {
                    Command::Subscribe(channel, ack) => {
                        let result = if subscribed.contains(&channel) {
                            Ok(())
                        } else {
                            let result = sink.subscribe(&channel).await;
                            if result.is_ok() {
                                subscribed.insert(channel);
                            }
                            result
                        };
                        if result.is_err() {
                            command_dead.store(true, Ordering::SeqCst);
                        }
                        let _ = ack.send(result);
                    }
                    Command::Unsubscribe(channel) => {
                        if subscribed.remove(&channel) && sink.unsubscribe(&channel).await.is_err()
                        {
                            command_dead.store(true, Ordering::SeqCst);
                        }
                    }
                }
            }
        });

        Arc::new(Subscriber {
            hub,
            commands,
            dead,
            runtime: RuntimeBound::new(()),
            response_timeout,
        })
    }

    fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && self.runtime.is_alive()
    }

    /// Registers a waiter and returns once Redis has confirmed the channel subscription.
    async fn subscribe(&self, name: &str) -> RedisResult<ReleaseSubscription> {
        let subscription = self.hub.subscribe(name, || {});
        let (ack, confirmed) = oneshot::channel();
        let gone = || {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "pub/sub connection closed",
            ))
        };
        self.commands
            .send(Command::Subscribe(name.to_owned(), ack))
            .map_err(|_| gone())?;
        match tokio::time::timeout(self.response_timeout, confirmed).await {
            Ok(Ok(result)) => result.map(|()| subscription),
            Ok(Err(_)) => Err(gone()),
            Err(_) => {
                self.dead.store(true, Ordering::SeqCst);
                Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "SUBSCRIBE was not confirmed in time",
                )))
            }
        }
    }
}

/// Splits a multi-node URL (`redlock://[user:password@]h1:p1,h2:p2[/db]`, same for
/// `redis+cluster://`) into one `redis://` URL per node; the credentials and database apply to
/// every node. Errors say what is wrong with the URL (password redacted).
pub(crate) fn node_urls(url: &str) -> Result<Vec<String>, String> {
    let shown = redact_url(url);
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    if hosts.trim().is_empty() {
        return Err(format!(
            "`{shown}` names no nodes: write them comma-separated, e.g. \
             `{scheme}://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002`"
        ));
    }
    let mut nodes: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(format!("`{shown}` has an empty node between commas"));
        }
        if !seen.insert(host) {
            return Err(format!(
                "`{shown}` names the node `{host}` twice; every node must be a different server"
            ));
        }
        nodes.push(match userinfo {
            Some(userinfo) => format!("redis://{userinfo}@{host}{path}"),
            None => format!("redis://{host}{path}"),
        });
    }
    Ok(nodes)
}

/// The URL with any password replaced by `***`, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let userinfo = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{scheme}://{userinfo}@{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::{cluster_slot, redact_url};

    #[test]
    fn slots_match_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(cluster_slot("foo"), 12182);
        assert_eq!(cluster_slot("{user1000}.following"), 3443);
        assert_eq!(cluster_slot("{user1000}.followers"), 3443);
        assert_eq!(cluster_slot("foo{}{bar}"), cluster_slot("foo{}{bar}"));
        assert_eq!(
            cluster_slot("{lock:order:42}"),
            cluster_slot("lock:order:42")
        );
        assert_eq!(
            cluster_slot("lock-fence:{lock:a}b}"),
            cluster_slot("{lock:a}b}")
        );
    }

    #[test]
    fn multi_node_urls_split_into_one_url_per_node() {
        assert_eq!(
            super::node_urls("redlock://:pw@a:1,b:2, c:3/2").unwrap(),
            [
                "redis://:pw@a:1/2",
                "redis://:pw@b:2/2",
                "redis://:pw@c:3/2"
            ]
        );
        assert_eq!(
            super::node_urls("redis+cluster://h:7000").unwrap(),
            ["redis://h:7000"]
        );
        let empty = super::node_urls("redlock://:secret@").unwrap_err();
        assert!(
            empty.contains("names no nodes") && !empty.contains("secret"),
            "{empty}"
        );
        assert!(
            super::node_urls("redlock://a:1,,b:2")
                .unwrap_err()
                .contains("empty node")
        );
        assert!(
            super::node_urls("redlock://a:1,a:1")
                .unwrap_err()
                .contains("twice")
        );
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact_url("redis://:hunter2@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("rediss://app:s3cr@t@h:1"),
            "rediss://app:***@h:1"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(redact_url("redis://tok@h"), "redis://***@h");
    }
}

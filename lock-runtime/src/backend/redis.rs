//! `redis://` / `rediss://`: one Redis server (or a Sentinel-managed primary behind one address).
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

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult, Script};
use tokio::sync::{mpsc, oneshot};

use super::{Attempt, Backend, LockSpec};
use crate::error::{BoxError, LockError};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::{BoxFuture, RuntimeBound};

/// Compare-token delete, then wake the waiters. Returns 1 if the lock was ours.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], 'released')
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

/// How often a command that failed on a dropped connection is retried (with the same token).
const RETRIES: u32 = 3;

/// Connection settings for the Redis backend.
#[derive(Clone, Debug)]
pub(crate) struct RedisSettings {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub fence_prefix: String,
}

pub(crate) struct RedisBackend {
    client: redis::Client,
    url: String,
    settings: RedisSettings,
    config: AsyncConnectionConfig,
    connection: Mutex<Option<Arc<RuntimeBound<MultiplexedConnection>>>>,
    reconnecting: tokio::sync::Mutex<()>,
    subscriber: Mutex<Option<Arc<Subscriber>>>,
    subscribing: tokio::sync::Mutex<()>,
    release: Script,
    renew: Script,
    renew_many: Script,
    acquire_fenced: Script,
    inspect: Script,
}

impl RedisBackend {
    /// Parses the URL, connects (bounded by the connect timeout), checks the server answers
    /// and accepts our credentials, and loads the scripts.
    pub(crate) async fn connect(
        url: &str,
        settings: RedisSettings,
    ) -> Result<Arc<RedisBackend>, LockError> {
        let shown = redact_url(url);
        let client = redis::Client::open(url)
            .map_err(|e| LockError::Config(format!("invalid Redis URL {shown}: {e}")))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.response_timeout));
        let backend = Arc::new(RedisBackend {
            client,
            url: shown,
            settings,
            config,
            connection: Mutex::new(None),
            reconnecting: tokio::sync::Mutex::new(()),
            subscriber: Mutex::new(None),
            subscribing: tokio::sync::Mutex::new(()),
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
            renew_many: Script::new(RENEW_MANY),
            acquire_fenced: Script::new(ACQUIRE_FENCED),
            inspect: Script::new(INSPECT),
        });
        let mut conn = backend
            .connection()
            .await
            .map_err(|e| backend.connect_error(e))?
            .get()
            .clone();
        let loaded: RedisResult<()> = async {
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            for script in [
                &backend.release,
                &backend.renew,
                &backend.renew_many,
                &backend.acquire_fenced,
                &backend.inspect,
            ] {
                script.load_async(&mut conn).await?;
            }
            Ok(())
        }
        .await;
        loaded.map_err(|e| backend.connect_error(e))?;
        Ok(backend)
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

    fn slot(&self) -> MutexGuard<'_, Option<Arc<RuntimeBound<MultiplexedConnection>>>> {
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shared multiplexed connection, (re)made on the caller's runtime when there is none
    /// or the runtime it was made on has shut down.
    async fn connection(&self) -> RedisResult<Arc<RuntimeBound<MultiplexedConnection>>> {
        if let Some(bound) = self.slot().as_ref().filter(|b| b.is_alive()) {
            return Ok(Arc::clone(bound));
        }
        let _one_at_a_time = self.reconnecting.lock().await;
        if let Some(bound) = self.slot().as_ref().filter(|b| b.is_alive()) {
            return Ok(Arc::clone(bound));
        }
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let bound = Arc::new(RuntimeBound::new(conn));
        *self.slot() = Some(Arc::clone(&bound));
        tracing::debug!(url = %self.url, "distlock: connected to redis");
        Ok(bound)
    }

    /// Forgets `failed` so the next command reconnects, unless another caller has already
    /// replaced it.
    fn invalidate(&self, failed: &Arc<RuntimeBound<MultiplexedConnection>>) {
        let mut slot = self.slot();
        if slot
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, failed))
        {
            *slot = None;
        }
    }

    /// Runs `op` on the shared connection, retrying on a dropped connection or timeout with a
    /// fresh connection. `op` gets the attempt number so it can stay idempotent.
    async fn run<T, F, Fut>(&self, mut op: F) -> RedisResult<T>
    where
        F: FnMut(MultiplexedConnection, u32) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut attempt = 0;
        loop {
            let result = match self.connection().await {
                Ok(bound) => {
                    let outcome = op(bound.get().clone(), attempt).await;
                    if outcome.as_ref().is_err_and(is_transient) {
                        self.invalidate(&bound);
                    }
                    outcome
                }
                Err(error) => Err(error),
            };
            match result {
                Err(error) if attempt < RETRIES && is_transient(&error) => {
                    attempt += 1;
                    tracing::debug!(%error, attempt, "distlock: redis command failed, retrying");
                    let backoff = Duration::from_millis(10 * 4u64.pow(attempt - 1));
                    tokio::time::sleep(backoff).await;
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
        let pubsub = match tokio::time::timeout(
            self.settings.connect_timeout,
            self.client.get_async_pubsub(),
        )
        .await
        {
            Ok(pubsub) => pubsub?,
            Err(_) => {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "pub/sub connection timed out",
                )));
            }
        };
        let subscriber = Subscriber::start(pubsub, self.settings.response_timeout);
        *self.subscriber.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&subscriber));
        Ok(subscriber)
    }

    fn fence_key(&self, name: &str) -> String {
        format!("{}{}", self.settings.fence_prefix, name)
    }
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
        "redis"
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
                    .await?;
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
            let set: Option<String> = self
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
                .await?;
            if set.is_some() {
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
                .await?;
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
    ) -> BoxFuture<'a, Result<Vec<bool>, BoxError>> {
        Box::pin(async move {
            if let [spec] = specs {
                return Ok(vec![self.renew(*spec).await?]);
            }
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
    use super::redact_url;

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

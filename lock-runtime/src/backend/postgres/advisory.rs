//! `postgres://…?mode=advisory`: locks as PostgreSQL's session-level advisory locks, each held
//! on a connection of its own, with the lease kept by the server's idle-session timeout.
//!
//! - **The lock** is `pg_advisory_lock(k)` on a connection that holds nothing else; `k` is a
//!   64-bit FNV-1a hash of the lock name (two names with one hash exclude each other: never
//!   two holders of one name). Interoperates with any client that locks the same `k`.
//! - **The lease** is the holder connection's `idle_session_timeout` (PostgreSQL ≥ 14): a
//!   holder that stops talking — paused, hung, partitioned — loses its session, and with it the
//!   lock, one lease after its last statement. Renewal is a statement every lease/3; the holder
//!   counts its lease from the moment it sent its last answered statement, which is before the
//!   server's idle clock started, so the holder always gives up first.
//! - **A server restart** forgets every advisory lock while their holders may still count
//!   themselves holders. Each server start is recorded in `<table>_advisory_starts` before it
//!   grants its first lock (durably); a server whose earlier start granted locks grants none
//!   until it has been up `max_lease_ms` (default 60 s), and no lease longer than that is
//!   accepted. A fresh server waits for nothing. A failover to a standby looks like a restart
//!   the guard cannot see (the standby's postmaster is older): use the lock table where a
//!   failover may happen.
//! - **Waiting** happens inside the server: a waiter whose first try found the lock busy sends
//!   the blocking `pg_advisory_lock(k)` on its connection, and the server grants in arrival
//!   order (a fair lock, without polling); the grant is dated by one more statement, from
//!   whose sending the lease is counted. A waiter that gives up cancels its request (and closes
//!   the connection); a waiter whose process dies is noticed by
//!   `client_connection_check_interval` (1 s).
//! - **Read locks** are the shared advisory lock of the same key (`pg_advisory_lock_shared`):
//!   any number of readers, no writer beside them, each reader's share on its own connection
//!   with its own lease. PostgreSQL's lock queue keeps a waiting writer ahead of readers that
//!   come after it (their try fails while it waits), so readers cannot starve writers.
//! - **Fencing** comes from one sequence, `<table>_advisory_fences`, taken in the granting
//!   statement: strictly increasing across all keys, hence per key. A reader gets the
//!   sequence's last value (`pg_sequence_last_value`) read under its share: no less than the
//!   last write grant's token of its key, less than the next one's.
//! - **What the server shows**: every statement on a holder's connection carries the comment
//!   `/* distlock <lease ms> <fencing token or -> <owner token> <name in hex> [r] */` (`r`: a
//!   reader), so
//!   `pg_stat_activity.query` beside `pg_locks` tells who holds what and since when (the
//!   admin API reads it; other roles' sessions need `pg_read_all_stats`).
//! - **What it cannot do**: semaphores and `min_hold` (a lock ends with the
//!   holder's connection, so it cannot outlive the holder's process) are refused with
//!   `LockError::Config`; a connection pooler in transaction mode would hand the lock's
//!   session to others — connect directly, or through a session-mode pool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::{PgError, RawConnection, acquire_error, connect_error, describe, driver_config};
use crate::admin::{Entry, advisory_key};
use crate::backend::sql::{SqlSettings, millis};
use crate::backend::{
    Admin, Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Refused, Released, Transient,
};
use crate::error::{BoxError, LockError};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

/// Idle connections kept for the next acquisitions.
const IDLE_KEPT: usize = 16;

/// Where one acquisition's connection stands.
#[derive(Debug, Clone)]
enum State {
    /// Holds nothing and waits for nothing: may go back to the idle connections.
    Idle,
    /// Like `Idle`, after a try that found the lock held by another: the server passed the
    /// restart guard, so the waiter may wait inside it.
    Contended,
    /// A statement is under way (or was dropped under way): what it did is unknown, so the
    /// connection is closed, never reused, when the acquisition ends.
    InFlight,
    /// The blocking request waits in the server.
    Waiting,
    /// The server granted the lock to the blocking request (with this fencing token); the
    /// grant is dated by the next attempt.
    Granted(Option<u64>),
    /// The blocking request failed.
    Failed(String),
    /// Held.
    Held(Option<u64>),
}

/// One acquisition's connection.
struct Session {
    client: Arc<Client>,
    state: Mutex<State>,
    /// The task of the blocking request, while it runs.
    waiting: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Session {
    fn state(&self) -> State {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
}

pub(crate) struct AdvisoryBackend {
    config: tokio_postgres::Config,
    settings: SqlSettings,
    /// The longest lease accepted, and how long the server must have been up before a grant.
    max_lease: Duration,
    url: String,
    sequence: String,
    /// `<table>_advisory_starts`: the start of every server incarnation that granted a lock.
    starts: String,
    /// The server incarnation (its start, µs since the epoch) this client last found safe to
    /// grant on: none before it granted a lock, or its predecessor has been gone `max_lease`.
    safe: Mutex<Option<i64>>,
    /// The connections of acquisitions in play, by owner token.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    idle: Mutex<Vec<Arc<Client>>>,
    /// Wakes a waiter whose blocking request was granted.
    hub: Arc<ReleaseHub>,
}

/// The first column of the first row of a simple query's answer.
fn first_value(messages: &[SimpleQueryMessage], column: usize) -> Option<String> {
    messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(column).map(str::to_owned),
        _ => None,
    })
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The comment every statement of a hold carries (see the module docs).
fn note(spec: &LockSpec<'_>, fence: Option<u64>) -> String {
    let fence = fence.map_or_else(|| "-".to_owned(), |f| f.to_string());
    let reader = if spec.kind == Kind::Shared { " r" } else { "" };
    format!(
        " /* distlock {} {fence} {} {}{reader} */",
        millis(spec.lease),
        spec.token,
        hex(spec.name)
    )
}

/// What a holder's comment says.
#[derive(Debug, PartialEq, Eq)]
struct Note {
    lease: Duration,
    fence: Option<u64>,
    token: String,
    name: String,
    reader: bool,
}

fn parse_note(query: &str) -> Option<Note> {
    let start = query.find("/* distlock ")? + "/* distlock ".len();
    let rest = &query[start..];
    let rest = &rest[..rest.find(" */")?];
    let mut parts = rest.split(' ');
    Some(Note {
        lease: Duration::from_millis(parts.next()?.parse().ok()?),
        fence: parts.next()?.parse().ok(),
        token: parts.next()?.to_owned(),
        name: unhex(parts.next()?)?,
        reader: parts.next() == Some("r"),
    })
}

/// The advisory-lock function that takes (`try_`: without waiting) or gives back a hold of
/// `kind`: `pg_try_advisory_lock_shared`, `pg_advisory_unlock`, …
fn function(kind: Kind, verb: &str) -> String {
    let shared = if kind == Kind::Shared { "_shared" } else { "" };
    format!("pg_{verb}{shared}")
}

/// Whether an error means the session is over (the server ended it — idle timeout, a forced
/// release, a shutdown — or the connection is gone): its locks are gone with it.
fn session_over(error: &PgError) -> bool {
    match error {
        PgError::Driver(e) => {
            e.is_closed()
                || e.code().is_some_and(|c| c.code().starts_with("57P"))
                || std::error::Error::source(e)
                    .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
        }
        _ => false,
    }
}

impl AdvisoryBackend {
    /// Connects once to check the server (PostgreSQL ≥ 14 for `idle_session_timeout`) and to
    /// create the fencing sequence if asked.
    pub(crate) async fn connect(
        driver_url: &str,
        settings: SqlSettings,
        max_lease: Duration,
    ) -> Result<Arc<AdvisoryBackend>, LockError> {
        let (mut config, shown) = driver_config(driver_url, &settings)?;
        // A waiter blocked in the server notices a vanished client within a second.
        config.options("-c client_connection_check_interval=1000");
        let backend = Arc::new(AdvisoryBackend {
            config,
            sequence: format!("{}_advisory_fences", settings.table),
            starts: format!("{}_advisory_starts", settings.table),
            safe: Mutex::new(None),
            settings,
            max_lease,
            url: shown,
            sessions: Mutex::new(HashMap::new()),
            idle: Mutex::new(Vec::new()),
            hub: ReleaseHub::new(None),
        });
        let client = backend
            .open()
            .await
            .map_err(|e| connect_error(&backend.config, &backend.url, e))?;
        let version = backend
            .query(&client, "SHOW server_version_num")
            .await
            .map_err(|e| connect_error(&backend.config, &backend.url, e))?;
        let number: u32 = version.parse().unwrap_or(0);
        if number < 140_000 {
            return Err(LockError::Connect {
                url: backend.url.clone(),
                reason: format!(
                    "`mode=advisory` needs PostgreSQL 14 or later (its `idle_session_timeout` \
                     ends a silent holder's session, and its lock, one lease after its last \
                     statement); this server is version {version}: use the lock table \
                     (leave out `mode=advisory`)"
                ),
                source: None,
            });
        }
        // Under a transaction-scoped advisory lock: concurrent `CREATE … IF NOT EXISTS` race.
        let create = format!(
            "BEGIN; SELECT pg_advisory_xact_lock(hashtext('distlock create {s}')); \
             CREATE SEQUENCE IF NOT EXISTS {s}; \
             CREATE TABLE IF NOT EXISTS {t} (started_at bigint PRIMARY KEY); COMMIT",
            s = backend.sequence,
            t = backend.starts
        );
        if backend.settings.create_table
            && let Err(error) = backend.query(&client, &create).await
        {
            return Err(LockError::Connect {
                url: backend.url.clone(),
                reason: format!(
                    "cannot create the fencing sequence `{s}` and the table `{t}` ({error}): \
                     create them once (`CREATE SEQUENCE {s}; CREATE TABLE {t} (started_at \
                     bigint PRIMARY KEY)`) and connect with `create_table=false`",
                    s = backend.sequence,
                    t = backend.starts
                ),
                source: Some(Box::new(error)),
            });
        }
        backend.give_back_connection(Arc::new(client));
        Ok(backend)
    }

    /// Opens one connection and starts the task that drives it.
    async fn open(&self) -> Result<Client, PgError> {
        let limit = self.settings.connect_timeout;
        let connected: (Client, RawConnection) = match tokio::time::timeout(
            limit + Duration::from_millis(100),
            self.config.connect(NoTls),
        )
        .await
        {
            Ok(connected) => connected?,
            Err(_) => {
                return Err(PgError::TimedOut {
                    what: "the connection attempt",
                    after: limit,
                });
            }
        };
        let (client, connection) = connected;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %describe(&error), "distlock: postgres advisory connection ended");
            }
        });
        Ok(client)
    }

    /// Runs `text` as one simple query, bounded by the response timeout; the first value.
    async fn query(&self, client: &Client, text: &str) -> Result<String, PgError> {
        let messages = self
            .simple(client, text, "the advisory-lock statement")
            .await?;
        Ok(first_value(&messages, 0).unwrap_or_default())
    }

    /// Runs `text` as one simple query, bounded by the response timeout: its answer.
    async fn simple(
        &self,
        client: &Client,
        text: &str,
        what: &'static str,
    ) -> Result<Vec<SimpleQueryMessage>, PgError> {
        let limit = self.settings.response_timeout;
        match tokio::time::timeout(limit, client.simple_query(text)).await {
            Ok(answer) => Ok(answer?),
            Err(_) => Err(PgError::TimedOut { what, after: limit }),
        }
    }

    /// Runs `text` on an idle (or new) connection, which goes back afterwards: its first value.
    async fn query_once(&self, text: &str) -> Result<String, PgError> {
        let client = self.connection().await?;
        let value = self.query(&client, text).await?;
        self.give_back_connection(client);
        Ok(value)
    }

    /// An idle connection, or a new one.
    async fn connection(&self) -> Result<Arc<Client>, PgError> {
        loop {
            let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match reused {
                Some(client) if !client.is_closed() => return Ok(client),
                Some(_) => continue,
                None => return self.open().await.map(Arc::new),
            }
        }
    }

    fn give_back_connection(&self, client: Arc<Client>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < IDLE_KEPT && !client.is_closed() {
            idle.push(client);
        }
    }

    fn session(&self, token: &str) -> Option<Arc<Session>> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(token).cloned()
    }

    fn check_spec(&self, spec: &LockSpec<'_>) -> Result<(), BoxError> {
        if spec.lease > self.max_lease {
            return Err(Box::new(Refused(format!(
                "a lease of {:?} is longer than this server's `max_lease_ms` ({:?}): after a \
                 server restart, no advisory lock is granted until the server has been up that \
                 long, so no lease may exceed it; ask for a shorter lease, or raise \
                 `max_lease_ms` in the URL of every client of this server",
                spec.lease, self.max_lease
            ))));
        }
        Ok(())
    }

    /// The granting statement's fencing token, evaluated once the hold is taken: a writer's
    /// is the sequence's next value; a reader's its last (0 before any): at least the token of
    /// the key's last write grant, and below the next one's, which cannot be granted before
    /// the reader lets go.
    fn fence_expression(&self, spec: &LockSpec<'_>) -> String {
        match (spec.fencing, spec.kind) {
            (false, _) => "0".to_owned(),
            (true, Kind::Shared) => {
                format!("coalesce(pg_sequence_last_value('{}'), 0)", self.sequence)
            }
            (true, _) => format!("nextval('{}')", self.sequence),
        }
    }

    /// The restart guard: whether this server incarnation may grant advisory locks now, and
    /// else how long until it may. Recorded in `<table>_advisory_starts` (durably, before the
    /// first grant of an incarnation): a server whose earlier incarnation granted locks grants
    /// none until it has been up `max_lease` — a holder of the old incarnation, paused, may
    /// still count itself a holder until then. A fresh server waits for nothing.
    async fn guard(&self, client: &Client) -> Result<Result<i64, Duration>, BoxError> {
        let text = format!(
            "WITH me AS (SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint \
             AS started_at, (extract(epoch FROM now() - pg_postmaster_start_time()) * 1000)::bigint \
             AS up), mark AS (INSERT INTO {t} (started_at) SELECT started_at FROM me \
             ON CONFLICT DO NOTHING) \
             SELECT me.started_at, me.up, EXISTS (SELECT 1 FROM {t} WHERE {t}.started_at < \
             me.started_at) FROM me",
            t = self.starts
        );
        let messages = self
            .simple(client, &text, "the restart guard")
            .await
            .map_err(acquire_error)?;
        let field = |i| first_value(&messages, i).unwrap_or_default();
        let started: i64 = field(0)
            .parse()
            .map_err(|_| PgError::Unexpected("no answer from the restart guard".into()))?;
        let up = Duration::from_millis(field(1).parse().unwrap_or(0));
        if field(2) == "t" && up < self.max_lease {
            return Ok(Err(self.max_lease - up));
        }
        *self.safe.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
        if field(2) == "t" {
            // Older incarnations are past the guard for good.
            let forget = format!("DELETE FROM {} WHERE started_at < {started}", self.starts);
            let _ = self.query(client, &forget).await;
        }
        Ok(Ok(started))
    }

    /// The try on a connection that holds nothing.
    async fn try_on(&self, session: &Session, spec: &LockSpec<'_>) -> Result<Attempt, BoxError> {
        let key = advisory_key(spec.name);
        // Twice at most: a restart between the guard and the try guards the new server.
        loop {
            let safe = *self.safe.lock().unwrap_or_else(|p| p.into_inner());
            let safe = match safe {
                Some(started) => started,
                None => match self.guard(&session.client).await? {
                    Ok(started) => started,
                    Err(left) => {
                        tracing::debug!(
                            key = spec.name,
                            ?left,
                            "distlock: the server restarted less than max_lease ago; no advisory lock is granted yet"
                        );
                        return Ok(Attempt::Busy { ttl: Some(left) });
                    }
                },
            };
            let text = format!(
                "SELECT CASE WHEN (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint \
                 <> {safe} THEN -2 WHEN NOT {try_lock}({key}) THEN -1 \
                 WHEN set_config('idle_session_timeout', '{lease}', false) = '' THEN -3 \
                 ELSE {fence} END{note}",
                try_lock = function(spec.kind, "try_advisory_lock"),
                lease = millis(spec.lease),
                fence = self.fence_expression(spec),
                note = note(spec, None),
            );
            session.set(State::InFlight);
            let messages = self
                .simple(&session.client, &text, "the advisory lock attempt")
                .await
                .map_err(acquire_error)?;
            let value: i64 = first_value(&messages, 0)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    PgError::Unexpected("no answer to the advisory lock attempt".into())
                })?;
            match value {
                -1 => {
                    session.set(State::Contended);
                    return Ok(Attempt::Busy { ttl: None });
                }
                -2 => {
                    // Another incarnation of the server than the one found safe: guard it first.
                    session.set(State::Idle);
                    *self.safe.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    continue;
                }
                fence if fence < 0 => {
                    // Not an answer this statement gives: the connection's state is unknown.
                    return Err(Box::new(PgError::Unexpected(format!(
                        "the advisory lock attempt answered {fence}"
                    ))));
                }
                fence => {
                    let fence = spec.fencing.then_some(fence as u64);
                    if spec.fencing {
                        // The comment names the fencing token from now on (for the admin API).
                        self.date(session, spec, fence).await?;
                    }
                    session.set(State::Held(fence));
                    return Ok(Attempt::Acquired {
                        fencing_token: fence,
                    });
                }
            }
        }
    }

    /// A statement on a held lock's connection: renews its lease, dates a grant.
    async fn date(
        &self,
        session: &Session,
        spec: &LockSpec<'_>,
        fence: Option<u64>,
    ) -> Result<(), BoxError> {
        let text = format!("SELECT 1{}", note(spec, fence));
        self.query(&session.client, &text)
            .await
            .map(drop)
            .map_err(acquire_error)
    }

    /// Starts the blocking request of the waiter `spec.token`.
    fn block(&self, session: Arc<Session>, spec: &LockSpec<'_>) {
        let key = advisory_key(spec.name);
        let text = format!(
            "SELECT {lock}({key}), set_config('idle_session_timeout', '{lease}', false), \
             {fence}{note}",
            lock = function(spec.kind, "advisory_lock"),
            lease = millis(spec.lease),
            fence = self.fence_expression(spec),
            note = note(spec, None),
        );
        let (name, token, fencing) = (spec.name.to_owned(), spec.token.to_owned(), spec.fencing);
        let hub = Arc::clone(&self.hub);
        session.set(State::Waiting);
        let waiting = Arc::clone(&session);
        let task = tokio::spawn(async move {
            let state = match waiting.client.simple_query(&text).await {
                Ok(messages) => {
                    let fence = first_value(&messages, 2).and_then(|v| v.parse::<u64>().ok());
                    State::Granted(if fencing { fence } else { None })
                }
                Err(error) => State::Failed(describe(&error)),
            };
            waiting.set(state);
            hub.notify_one(&name, &token);
        });
        *session.waiting.lock().unwrap_or_else(|p| p.into_inner()) = Some(task.abort_handle());
    }
}

/// Advisory locks: plain and read locks, queued on the server (a waiting session), so fair; no
/// semaphores, no `min_hold` (a lock lives on its holder's connection).
const CAPABILITIES: Capabilities = Capabilities {
    shared: Ok(()),
    permits: Err(
        "`mode=advisory` has no semaphores yet: use the lock table (leave out \
                  `mode=advisory`)",
    ),
    min_hold: Err(
        "an advisory lock lives on its holder's connection, so it cannot outlive the \
         holder's process as min_hold promises: use the lock table (leave out \
         `mode=advisory`) for min_hold",
    ),
    fair: true,
    queues_waiters: true,
    ..Capabilities::plain("postgres")
};

impl Backend for AdvisoryBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(async move {
            self.check_spec(&spec)?;
            let session = match self.session(spec.token) {
                Some(session) => session,
                None => {
                    let client = self.connection().await.map_err(acquire_error)?;
                    let session = Arc::new(Session {
                        client,
                        state: Mutex::new(State::Idle),
                        waiting: Mutex::new(None),
                    });
                    let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
                    sessions.insert(spec.token.to_owned(), Arc::clone(&session));
                    session
                }
            };
            match session.state() {
                State::Idle | State::Contended => self.try_on(&session, &spec).await,
                State::Waiting => Ok(Attempt::Busy { ttl: None }),
                State::Granted(fence) => {
                    // Dated from now: the lease counts from before this statement was sent.
                    session.set(State::InFlight);
                    self.date(&session, &spec, fence).await?;
                    session.set(State::Held(fence));
                    Ok(Attempt::Acquired {
                        fencing_token: fence,
                    })
                }
                State::Held(fence) => Ok(Attempt::Acquired {
                    fencing_token: fence,
                }),
                State::Failed(why) => {
                    self.sessions
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(spec.token);
                    Err(Transient::wrap(format!(
                        "the advisory lock request failed: {why}"
                    )))
                }
                State::InFlight => Err(Transient::wrap(
                    "an earlier attempt of this acquisition is still under way",
                )),
            }
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let Some(session) = self.session(spec.token) else {
                return Ok(false);
            };
            let State::Held(fence) = session.state() else {
                return Ok(false);
            };
            match self
                .query(&session.client, &format!("SELECT 1{}", note(&spec, fence)))
                .await
            {
                Ok(_) => Ok(true),
                Err(error) if session_over(&error) => Ok(false),
                Err(error) => Err(Box::new(error) as BoxError),
            }
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        Box::pin(async move {
            let session = self
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(hold.token);
            let Some(session) = session else {
                return Ok(Released::NotOurs);
            };
            let state = session.state();
            match state {
                State::Idle | State::Contended => {
                    self.give_back_connection(session.client.clone());
                    Ok(Released::NotOurs)
                }
                State::Held(_) | State::Granted(_) => {
                    let held = matches!(state, State::Held(_));
                    let text = format!(
                        "SELECT {}({}), set_config('idle_session_timeout', '0', false)",
                        function(hold.kind, "advisory_unlock"),
                        advisory_key(hold.name)
                    );
                    match self.query(&session.client, &text).await {
                        Ok(unlocked) if unlocked == "t" => {
                            self.give_back_connection(session.client.clone());
                            Ok(if held {
                                Released::Deleted
                            } else {
                                Released::NotOurs
                            })
                        }
                        // The session ended (its lock with it), or its answer was lost: the
                        // connection is dropped, which ends the session if it still runs.
                        Ok(_) => Ok(Released::NotOurs),
                        Err(PgError::Driver(e))
                            if e.code().is_some_and(|c| c.code().starts_with("57P")) =>
                        {
                            Ok(Released::NotOurs)
                        }
                        Err(error) => self.after_failed_release(hold, error).await,
                    }
                }
                State::Waiting => {
                    if let Some(task) = session
                        .waiting
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take()
                    {
                        task.abort();
                    }
                    // Take the request out of the server's queue now; dropping the connection
                    // ends the session (and a grant that raced the cancel).
                    let cancel = session.client.cancel_token();
                    let _ = tokio::time::timeout(
                        self.settings.response_timeout,
                        cancel.cancel_query(NoTls),
                    )
                    .await;
                    Ok(Released::NotOurs)
                }
                State::InFlight | State::Failed(_) => Ok(Released::NotOurs),
            }
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        Box::pin(async move {
            let subscription = self.hub.subscribe_as(spec.name, Some(spec.token), || {});
            let session = self
                .session(spec.token)
                .ok_or("no connection for this waiter: its attempt was given up")?;
            if matches!(session.state(), State::Contended) {
                self.block(session, &spec);
            }
            Ok(subscription)
        })
    }
}

impl Admin for AdvisoryBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let found = self.held(Some(advisory_key(name))).await?;
            Ok(entries(found).into_iter().find(|entry| entry.name == name))
        })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let mut entries: Vec<Entry> = entries(self.held(None).await?)
                .into_iter()
                .filter(|e| {
                    e.name
                        .strip_prefix(prefix)
                        .is_some_and(|key| crate::admin::glob_match(pattern, key))
                })
                .collect();
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            entries.truncate(limit);
            Ok(entries)
        })
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let key = advisory_key(name);
            let found = self.held(Some(key)).await?;
            let Some(entry) = entries(found).into_iter().find(|entry| entry.name == name) else {
                return Ok(None);
            };
            // Ending a session only signals its backend; the lock is free once the backend has
            // exited. Wait for that (PostgreSQL 14+, which this mode requires), so that the lock
            // is free when this returns: without the wait, a loaded server still showed it held
            // right after (conformance's `the_admin_api_shows_readers`, eight tests at a time).
            let text = format!(
                "SELECT count(pg_terminate_backend(l.pid, {FORCE_RELEASE_WAIT_MS})) \
                 FROM pg_locks l WHERE {} AND l.granted",
                lock_match(key)
            );
            self.query_once(&text).await?;
            Ok(Some(entry))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let version = self.query_once("SHOW server_version").await?;
            Ok(format!("PostgreSQL {version} (advisory locks)"))
        })
    }
}

/// How long a forced release waits for each holder's session to end (milliseconds).
const FORCE_RELEASE_WAIT_MS: u64 = 5_000;

/// The `pg_locks` condition for the advisory lock `key` (a bigint key: high half in `classid`,
/// low half in `objid`, `objsubid` 1) in this database.
fn lock_match(key: i64) -> String {
    let key = key as u64;
    format!(
        "l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = {} AND l.objid = {} \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        key >> 32,
        key & 0xffff_ffff
    )
}

impl AdvisoryBackend {
    /// The locks distlock holds on this database (only `key`'s if given), from `pg_locks` and
    /// the holders' comments in `pg_stat_activity`.
    /// A release whose unlock failed (no answer, a broken connection): its connection is
    /// dropped. Asked on another connection: if the session still holds the lock, it is ended
    /// (`pg_terminate_backend`) — released; if not, the unlock or the session's end freed it —
    /// ambiguous, as a retried release is; if the server cannot be asked, the release failed.
    async fn after_failed_release(
        &self,
        hold: Hold<'_>,
        error: PgError,
    ) -> Result<Released, BoxError> {
        let check = async {
            let held = self.held(Some(advisory_key(hold.name))).await?;
            let ours = held
                .iter()
                .find(|holding| holding.granted && holding.note.token == hold.token);
            let Some(Holding { pid, .. }) = ours else {
                return Ok::<_, BoxError>(Released::Ambiguous { alive_until: None });
            };
            self.query_once(&format!("SELECT pg_terminate_backend({pid})"))
                .await?;
            Ok(Released::Deleted)
        };
        check.await.map_err(|checking| {
            format!(
                "the release got no answer ({error}), and the server could not be asked \
                 whether the lock is still held ({checking})"
            )
            .into()
        })
    }

    /// Every distlock session holding or waiting for an advisory lock in this database (only
    /// for `key` if given), from `pg_locks` and the sessions' comments in `pg_stat_activity`.
    async fn held(&self, key: Option<i64>) -> Result<Vec<Holding>, BoxError> {
        let condition = match key {
            Some(key) => lock_match(key),
            None => "l.locktype = 'advisory' AND l.objsubid = 1 AND l.database = \
                     (SELECT oid FROM pg_database WHERE datname = current_database())"
                .to_owned(),
        };
        let text = format!(
            "SELECT a.query, a.state, \
             (extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint, a.pid, \
             l.granted, l.mode \
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE {condition}"
        );
        let client = self.connection().await?;
        let messages = self
            .simple(&client, &text, "the advisory-lock inspection")
            .await?;
        self.give_back_connection(client);
        let mut found = Vec::new();
        for message in &messages {
            let SimpleQueryMessage::Row(row) = message else {
                continue;
            };
            let Some(mut note) = row.get(0).and_then(parse_note) else {
                continue;
            };
            // The server's word over the comment's.
            note.reader = row.get(5) == Some("ShareLock");
            let idle = row.get(1) == Some("idle");
            let since: u64 = row.get(2).and_then(|v| v.parse().ok()).unwrap_or(0);
            let ttl = if idle {
                note.lease.saturating_sub(Duration::from_millis(since))
            } else {
                note.lease
            };
            found.push(Holding {
                pid: row.get(3).and_then(|v| v.parse().ok()).unwrap_or(0),
                granted: row.get(4) == Some("t"),
                ttl,
                note,
            });
        }
        Ok(found)
    }
}

/// A distlock session's advisory lock, granted or waited for.
struct Holding {
    /// The server process of the session.
    pid: i32,
    granted: bool,
    /// What is left of its lease (counted from its last statement).
    ttl: Duration,
    note: Note,
}

/// The held locks among `found`, by name: a writer's, or its readers (longest share first),
/// with the requests waiting for it.
fn entries(found: Vec<Holding>) -> Vec<Entry> {
    let mut by_name: HashMap<String, Entry> = HashMap::new();
    let mut waiting: HashMap<String, u64> = HashMap::new();
    for holding in found {
        let Holding {
            granted, ttl, note, ..
        } = holding;
        if !granted {
            *waiting.entry(note.name).or_default() += 1;
            continue;
        }
        let entry = by_name.entry(note.name.clone()).or_insert_with(|| Entry {
            name: note.name.clone(),
            ..Entry::default()
        });
        entry.fencing_token = entry.fencing_token.max(note.fence);
        if note.reader {
            entry.readers.push((note.token, Some(ttl)));
        } else {
            entry.token = Some(note.token);
            entry.ttl = Some(ttl);
        }
    }
    by_name
        .into_values()
        .map(|mut entry| {
            entry.readers.sort_by_key(|r| std::cmp::Reverse(r.1));
            entry.waiters = waiting.get(&entry.name).copied();
            entry
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_round_trip_and_keys_are_stable() {
        let spec = LockSpec {
            name: "lock:order:42 */ drop",
            token: "vm:1:2:ab",
            lease: Duration::from_millis(5_000),
            fencing: true,
            renew: true,
            waiting: false,
            fair: false,
            kind: Kind::Exclusive,
        };
        let text = format!("SELECT 1{}", note(&spec, Some(7)));
        assert!(!text[text.find("/*").unwrap() + 2..].contains("*/ drop"));
        assert_eq!(
            parse_note(&text),
            Some(Note {
                lease: Duration::from_millis(5_000),
                fence: Some(7),
                token: "vm:1:2:ab".to_owned(),
                name: "lock:order:42 */ drop".to_owned(),
                reader: false,
            })
        );
        let reader = LockSpec {
            kind: Kind::Shared,
            ..spec
        };
        let text = format!("SELECT 1{}", note(&reader, None));
        let parsed = parse_note(&text).expect("a reader's note");
        assert!(parsed.reader && parsed.fence.is_none());
        assert_eq!(
            function(Kind::Shared, "try_advisory_lock"),
            "pg_try_advisory_lock_shared"
        );
        assert_eq!(
            function(Kind::Exclusive, "advisory_unlock"),
            "pg_advisory_unlock"
        );
        // FNV-1a 64 of "a" (the published test vector).
        assert_eq!(advisory_key("a") as u64, 0xaf63_dc4c_8601_ec8c);
    }
}

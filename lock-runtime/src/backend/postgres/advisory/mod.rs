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
//! - **Upgradable reads** add an exclusive mark beside the share, and upgrade on the share's
//!   own session, ahead of any writer queued meanwhile (see `upgrade`).
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
//!   `LockError::Config`. A connection pooler in transaction mode would hand the lock's
//!   session to others: `pooler=transaction` is refused with `mode=advisory`, and so is a
//!   connection whose startup options did not reach the server (a pooler that drops them)
//!   — connect directly, or through a session-mode pool.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, SimpleQueryMessage};

use super::errors::{PgError, connect_error, driver_config};
use crate::admin::advisory_key;
use crate::backend::sql::errors::{acquire_error, timed};
use crate::backend::sql::{SessionState, SqlSettings, millis};
use crate::backend::{
    Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Refused, Released, Transient, Upgrade,
};
use crate::error::{BoxError, LockError};
use crate::fast_map::FastMap;
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

mod admin;
mod conn;
mod note;
mod share;
mod upgrade;
mod waiting;

use conn::{AdvisoryConn, first_value};

use note::{function, note};

/// Idle connections always kept for the next acquisitions.
const IDLE_KEPT: usize = 16;

/// Idle connections beyond [`IDLE_KEPT`] are kept while they were in use this recently: as many
/// as the last burst of acquisitions needed, so that the next burst does not open (and the
/// server fork, authenticate and tear down) a connection per lock again — measured at 3.6 ms of
/// server CPU per new connection, ≈25 µs per lock + release when 64 tasks took turns with 16
/// connections kept.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// Never more idle connections than this, whatever the burst.
const IDLE_MAX: usize = 256;

/// One acquisition's connection.
struct AdvisorySession {
    client: Arc<AdvisoryConn>,
    state: Mutex<SessionState>,
    /// The task of the blocking request, while it runs.
    waiting: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// An upgradable read's upgrade.
    upgrading: Mutex<upgrade::Upgrading>,
}

impl AdvisorySession {
    fn state(&self) -> SessionState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, state: SessionState) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    fn upgrading(&self) -> std::sync::MutexGuard<'_, upgrade::Upgrading> {
        self.upgrading.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct AdvisoryBackend {
    config: tokio_postgres::Config,
    tls: super::tls::MakeTls,
    settings: SqlSettings,
    /// The longest lease accepted, and how long the server must have been up before a grant.
    max_lease: Duration,
    url: String,
    sequence: String,
    /// `<table>_advisory_starts`: the start of every server incarnation that granted a lock.
    starts: String,
    /// Shared results' statements (`share`), on the lock table's `<table>_shared`.
    share_sql: super::statements::PgShareSql,
    /// The server incarnation (its start, µs since the epoch) this client last found safe to
    /// grant on: none before it granted a lock, or its predecessor has been gone `max_lease`.
    safe: Mutex<Option<i64>>,
    /// The connections of acquisitions in play, by owner token.
    sessions: Mutex<FastMap<String, Arc<AdvisorySession>>>,
    /// Idle connections, each with when it went idle, the most recent last (taken first).
    idle: Mutex<Vec<(Arc<AdvisoryConn>, std::time::Instant)>>,
    /// Wakes a waiter whose blocking request was granted.
    hub: Arc<ReleaseHub>,
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
        let (mut config, tls, shown) = driver_config(driver_url, &settings)?;
        // A waiter blocked in the server notices a vanished client within a second.
        config.options("-c client_connection_check_interval=1000");
        let backend = Arc::new(AdvisoryBackend {
            config,
            tls,
            sequence: format!("{}_advisory_fences", settings.table),
            starts: format!("{}_advisory_starts", settings.table),
            share_sql: super::statements::PgShareSql::new(&settings.table),
            safe: Mutex::new(None),
            settings,
            max_lease,
            url: shown,
            sessions: Mutex::default(),
            idle: Mutex::new(Vec::new()),
            hub: ReleaseHub::new(None),
        });
        let client = backend
            .open()
            .await
            .map_err(|e| connect_error(&backend.config, &backend.url, e))?;
        // One round trip: the version, and the setting its startup options asked for.
        let settings = backend
            .simple(
                &client,
                conn::SERVER_SETTINGS,
                "reading the server's settings",
            )
            .await
            .map_err(|e| connect_error(&backend.config, &backend.url, e))?;
        let setting = |i| first_value(&settings, i).unwrap_or_default();
        if let Some(reason) = conn::refusal(&setting(0), &setting(1)) {
            return Err(LockError::Connect {
                url: backend.url.clone(),
                reason,
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
    async fn open(&self) -> Result<AdvisoryConn, PgError> {
        let client = super::pool::open(
            &self.config,
            &self.tls,
            self.settings.connect_timeout,
            "postgres advisory",
        )
        .await?;
        AdvisoryConn::prepared(client, self.settings.connect_timeout).await
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
        timed(
            what,
            self.settings.response_timeout,
            client.simple_query(text),
        )
        .await
    }

    /// Runs `text` on an idle (or new) connection, which goes back afterwards: its first value.
    async fn query_once(&self, text: &str) -> Result<String, PgError> {
        let client = self.connection().await?;
        let value = self.query(&client, text).await?;
        self.give_back_connection(client);
        Ok(value)
    }

    /// An idle connection (the most recently used), or a new one.
    async fn connection(&self) -> Result<Arc<AdvisoryConn>, PgError> {
        loop {
            let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match reused {
                Some((client, _)) if !client.is_closed() => return Ok(client),
                Some(_) => continue,
                // Boxed: connecting is rare, and every acquisition's future would carry it.
                None => return Box::pin(self.open()).await.map(Arc::new),
            }
        }
    }

    /// Keeps `client` for the next acquisitions; closes the idle connections past
    /// [`IDLE_KEPT`] that nobody used for [`IDLE_FOR`] (the oldest first).
    fn give_back_connection(&self, client: Arc<AdvisoryConn>) {
        let now = std::time::Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stale = idle
            .iter()
            .take(idle.len().saturating_sub(IDLE_KEPT))
            .take_while(|(_, since)| now.duration_since(*since) > IDLE_FOR)
            .count();
        idle.drain(..stale);
        if idle.len() < IDLE_MAX && !client.is_closed() {
            idle.push((client, now));
        }
    }

    fn session(&self, token: &str) -> Option<Arc<AdvisorySession>> {
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
    async fn try_on(
        &self,
        session: &AdvisorySession,
        spec: &LockSpec<'_>,
    ) -> Result<Attempt, BoxError> {
        let key = advisory_key(spec.name);
        // Twice at most: a restart between the guard and the try guards the new server.
        loop {
            let safe = *self.safe.lock().unwrap_or_else(|p| p.into_inner());
            let safe = match safe {
                Some(started) => started,
                None => match Box::pin(self.guard(&session.client)).await? {
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
            // The server's start is checked once per connection (about a fifth of the
            // statement's cost).
            let incarnation = &session.client.incarnation;
            let checked = incarnation.load(std::sync::atomic::Ordering::Relaxed) == safe;
            let check = match checked {
                true => String::new(),
                false => format!(
                    "WHEN (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint \
                     <> {safe} THEN -2 "
                ),
            };
            let try_lock = match crate::token::is_upgradable(spec.token) {
                true => upgrade::try_upgradable(key),
                false => format!("{}({key})", function(spec.kind, "try_advisory_lock")),
            };
            let text = format!(
                "SELECT CASE {check}WHEN NOT {try_lock} THEN -1 \
                 WHEN set_config('idle_session_timeout', '{lease}', false) = '' THEN -3 \
                 ELSE {fence} END{note}",
                lease = millis(spec.lease),
                fence = self.fence_expression(spec),
                note = note(spec, None),
            );
            session.set(SessionState::InFlight);
            let messages = self
                .simple(&session.client, &text, "the advisory lock attempt")
                .await
                .map_err(acquire_error)?;
            let value: i64 = first_value(&messages, 0)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    PgError::Unexpected("no answer to the advisory lock attempt".into())
                })?;
            if value != -2 {
                incarnation.store(safe, std::sync::atomic::Ordering::Relaxed);
            }
            match value {
                -1 => {
                    session.set(SessionState::Contended);
                    return Ok(Attempt::Busy { ttl: None });
                }
                -2 => {
                    // Another incarnation of the server than the one found safe: guard it first.
                    session.set(SessionState::Idle);
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
                    session.set(SessionState::Held(fence));
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
        session: &AdvisorySession,
        spec: &LockSpec<'_>,
        fence: Option<u64>,
    ) -> Result<(), BoxError> {
        let text = format!("SELECT 1{}", note(spec, fence));
        self.query(&session.client, &text)
            .await
            .map(drop)
            .map_err(acquire_error)
    }
}

/// Advisory locks: plain and read locks, queued on the server (a waiting session), so fair; no
/// semaphores, no `min_hold` (a lock lives on its holder's connection).
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    wakes: "the server's grant (a waiting session)",
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
    upgradable: Ok(()),
    shares: Ok(super::share::SHARE_LIMIT),
    lock_delay: Err(
        "an advisory lock ends the moment its session does (the holder's \
         `idle_session_timeout` or its connection closing): nothing is left to keep the key for \
         a lock-delay; use the lock table (leave out `mode=advisory`)",
    ),
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
                    let session = Arc::new(AdvisorySession {
                        client,
                        state: Mutex::new(SessionState::Idle),
                        waiting: Mutex::new(None),
                        upgrading: Mutex::default(),
                    });
                    let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
                    sessions.insert(spec.token.to_owned(), Arc::clone(&session));
                    session
                }
            };
            match session.state() {
                SessionState::Idle | SessionState::Contended => self.try_on(&session, &spec).await,
                SessionState::Waiting => Ok(Attempt::Busy { ttl: None }),
                SessionState::Granted(fence) => {
                    // Dated from now: the lease counts from before this statement was sent.
                    session.set(SessionState::InFlight);
                    Box::pin(self.date(&session, &spec, fence)).await?;
                    session.set(SessionState::Held(fence));
                    Ok(Attempt::Acquired {
                        fencing_token: fence,
                    })
                }
                SessionState::Held(fence) => Ok(Attempt::Acquired {
                    fencing_token: fence,
                }),
                SessionState::Failed(why) => {
                    self.sessions
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(spec.token);
                    Err(Transient::wrap(format!(
                        "the advisory lock request failed: {why}"
                    )))
                }
                SessionState::InFlight => Err(Transient::wrap(
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
            let SessionState::Held(fence) = session.state() else {
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
                SessionState::Idle | SessionState::Contended => {
                    self.give_back_connection(session.client.clone());
                    Ok(Released::NotOurs)
                }
                SessionState::Held(_) | SessionState::Granted(_) => {
                    let held = matches!(state, SessionState::Held(_));
                    let limit = self.settings.response_timeout;
                    let upgradable = crate::token::is_upgradable(hold.token);
                    if upgradable {
                        // Boxed: a rare path kept out of every release's future.
                        Box::pin(self.stop_upgrade(&session)).await;
                    }
                    let unlock = session
                        .client
                        .unlock(hold.kind, upgradable, hold.name, limit);
                    match unlock.await {
                        Ok(true) => {
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
                        Err(error) => Box::pin(self.after_failed_release(hold, error)).await,
                    }
                }
                // Boxed: a rare path kept out of every release's future.
                SessionState::Waiting => Box::pin(self.give_up_waiting(&session)).await,
                SessionState::InFlight | SessionState::Failed(_) => Ok(Released::NotOurs),
            }
        })
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(self.upgrade_share(spec))
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(self.abandon_share_upgrade(spec))
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
            if matches!(session.state(), SessionState::Contended) {
                self.block(session, &spec);
            }
            Ok(subscription)
        })
    }
}

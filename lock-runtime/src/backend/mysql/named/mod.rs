//! `mysql://…?mode=named`: locks as MySQL's and MariaDB's named locks (`GET_LOCK`), each held
//! on a connection of its own, with the lease kept by the server's idle timeout.
//!
//! - **The lock** is `GET_LOCK(n, 0)` on a connection that holds nothing else, `n` the lock's
//!   name as it is when MySQL can take it so (64 characters at most, printable ASCII without
//!   upper case, `~` and `\`), else `distlock#` and 16 hex digits of its 64-bit FNV-1a hash
//!   (see `admin::mysql_lock_name`). Interoperates with any client that locks the same `n`.
//! - **The lease** is the holder connection's `wait_timeout`, the lease rounded up to whole
//!   seconds: a holder that stops talking — paused, hung, partitioned — loses its session, and
//!   with it the lock, that long after its last statement; a holder that dies closes its
//!   socket, and the server frees the lock at once. Renewal is a statement every lease/3 that
//!   also checks the lock is still this session's; the holder counts its lease from the moment
//!   it sent its last answered statement, before the server's idle clock started, so the
//!   holder always gives up first.
//! - **Waiting** happens inside the server: a waiter whose try found the lock busy sends the
//!   blocking `GET_LOCK(n, …)` on its connection and is granted when the holder lets go,
//!   without polling; the grant is dated by one more statement. A waiter that gives up has its
//!   request ended (`KILL QUERY`); one whose process dies leaves the queue with its socket.
//! - **What the server shows**: beside the lock, the holder's connection takes one to four
//!   more named locks, `dl~<id>~<i>~<part>`, whose names carry the note `<fencing token or
//!   ->~<lease ms>~<owner token>` (a name shows at most 64 characters). `distlock list`, `show`
//!   and `release --force` read them with the lock from MariaDB's `METADATA_LOCK_INFO`
//!   (plugin `metadata_lock_info`) or MySQL's `performance_schema.metadata_locks`; hashed
//!   names are resolved by `<table>_names`, written once per client and key.
//! - **Fencing** tokens come from `<table>_fences` (`LAST_INSERT_ID(fence + 1)`) after the
//!   grant: strictly increasing per key.
//! - **What it cannot do**: read locks and semaphores (a named lock has no shared mode), and
//!   `min_hold` (a lock ends with the holder's connection) are refused with `LockError::Config`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::Opts;
use mysql_async::prelude::{FromValue, Queryable};

use super::errors::{MyError, connect_error};
use crate::backend::sql::SqlSettings;
use crate::backend::sql::errors::{acquire_error, timed};
use crate::backend::{
    Attempt, Backend, Capabilities, Hold, LockSpec, Released, Remembered, Transient,
};
use crate::error::{BoxError, LockError};
use crate::fast_map::FastMap;
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

mod admin;
mod conn;
pub(crate) mod names;
mod share;
mod waiting;

use conn::{
    NamedConn, Session, State, expire, grant_on, note_sum, open, session_over, wait_timeout,
};
use names::{is_hashed, lock_name, note_locks, sql};

/// Idle connections kept for the next acquisitions.
const IDLE_MAX: usize = 256;

/// The longest `wait_timeout` the servers take (one year, in seconds; distlock's leases are
/// shorter).
const MAX_WAIT_TIMEOUT: u64 = 31_536_000;

/// How long a blocking request waits in the server at most (the waiting loop ends it sooner).
const BLOCK_SECONDS: u64 = MAX_WAIT_TIMEOUT;

/// How `distlock list`, `show` and `release --force` see who holds a named lock.
#[derive(Debug, Clone)]
enum View {
    /// MariaDB's `information_schema.METADATA_LOCK_INFO` (plugin `metadata_lock_info`).
    MariaDb,
    /// MySQL's `performance_schema.metadata_locks` (its `wait/lock/metadata/sql/mdl`
    /// instrument on).
    MySql,
    /// Neither: why, and what to do.
    None(String),
}

pub(crate) struct NamedBackend {
    opts: Opts,
    settings: SqlSettings,
    /// Shared results' statements (`share`), on the table's `<table>_shared`.
    share_sql: super::share::ShareStatements,
    /// The URL's database, whose named locks these are (see `admin::mysql_lock_name`).
    database: String,
    /// `<table>_fences`: fencing counters, the lock table's.
    fences: String,
    /// `<table>_names`: the keys of hashed lock names.
    names: String,
    view: View,
    /// Hashed names this client recorded in `<table>_names`.
    recorded: Remembered<4096>,
    /// The connections of acquisitions in play, by owner token.
    sessions: Mutex<FastMap<String, Arc<Session>>>,
    /// Idle connections, each with when it went idle, the most recent last (taken first).
    idle: Mutex<Vec<(Arc<NamedConn>, Instant)>>,
    /// Wakes a waiter whose blocking request was granted.
    hub: Arc<ReleaseHub>,
}

impl NamedBackend {
    /// Connects once to learn how the server shows its named locks, and to create the
    /// fencing and names tables if asked.
    pub(crate) async fn connect(
        driver_url: &str,
        settings: SqlSettings,
    ) -> Result<Arc<NamedBackend>, LockError> {
        let (opts, url) = super::driver_opts(driver_url, &settings).await?;
        let conn = open(&opts, settings.connect_timeout)
            .await
            .map_err(|e| connect_error(&opts, &url, e))?;
        let view = {
            let mut c = conn.conn.lock().await;
            let limit = settings.connect_timeout;
            let (version, plugin): (String, i64) = timed(
                "reading the server's version",
                limit,
                c.query_first(
                    "SELECT VERSION(), (SELECT COUNT(*) FROM information_schema.PLUGINS \
                     WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' AND PLUGIN_STATUS = 'ACTIVE')",
                ),
            )
            .await
            .map_err(|e| connect_error(&opts, &url, e))?
            .unwrap_or_default();
            if version.contains("MariaDB") {
                match plugin {
                    0 => View::None(
                        "MariaDB shows who holds a named lock only through its \
                         `metadata_lock_info` plugin: `INSTALL SONAME 'metadata_lock_info'` once \
                         (or start the server with `--plugin-load-add=metadata_lock_info`)"
                            .to_owned(),
                    ),
                    _ => View::MariaDb,
                }
            } else {
                let on: Option<i64> = timed(
                    "reading the server's instruments",
                    limit,
                    c.query_first(
                        "SELECT COUNT(*) FROM performance_schema.setup_instruments \
                         WHERE NAME = 'wait/lock/metadata/sql/mdl' AND ENABLED = 'YES'",
                    ),
                )
                .await
                .unwrap_or(None);
                match on {
                    Some(n) if n > 0 => View::MySql,
                    _ => View::None(
                        "MySQL shows who holds a named lock only in \
                         `performance_schema.metadata_locks`: start the server with \
                         `performance_schema=ON` and the `wait/lock/metadata/sql/mdl` \
                         instrument enabled (MySQL 8's defaults)"
                            .to_owned(),
                    ),
                }
            }
        };
        let fences = format!("{}_fences", settings.table);
        let names = format!("{}_names", settings.table);
        if settings.create_table {
            let create = [
                format!(
                    "CREATE TABLE IF NOT EXISTS {fences} (name VARBINARY(2048) NOT NULL PRIMARY \
                     KEY, fence BIGINT NOT NULL) ENGINE=InnoDB"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {names} (lock_name VARCHAR(64) CHARACTER SET \
                     ascii NOT NULL PRIMARY KEY, name VARBINARY(2048) NOT NULL) ENGINE=InnoDB"
                ),
            ];
            let mut c = conn.conn.lock().await;
            for statement in create {
                let made = timed(
                    "creating the tables",
                    settings.connect_timeout,
                    c.query_drop(&statement),
                )
                .await;
                if let Err(error) = made {
                    return Err(LockError::Connect {
                        url: url.clone(),
                        reason: format!(
                            "cannot create `{fences}` and `{names}` ({error}): create them once \
                             (`{statement}`, and its sibling; see `distlock::guide::mysql`) and \
                             connect with `create_table=false`"
                        ),
                        source: Some(Box::new(error)),
                    });
                }
            }
        }
        let backend = Arc::new(NamedBackend {
            database: opts.db_name().unwrap_or_default().to_owned(),
            opts,
            share_sql: super::share::ShareStatements::new(&settings.table),
            settings,
            fences,
            names,
            view,
            recorded: Remembered::default(),
            sessions: Mutex::default(),
            idle: Mutex::new(Vec::new()),
            hub: ReleaseHub::new(None),
        });
        backend.give_back(Arc::new(conn));
        Ok(backend)
    }

    /// An idle connection (the most recently used) that its server has not timed out and whose
    /// runtime still runs, or a new one.
    async fn connection(&self) -> Result<Arc<NamedConn>, MyError> {
        loop {
            let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match reused {
                Some((conn, since)) => {
                    let timeout = conn.wait_timeout.load(Ordering::Relaxed);
                    let stale = timeout > 0
                        && since.elapsed() + Duration::from_millis(500)
                            >= Duration::from_secs(timeout);
                    if conn.bound.is_alive() && !stale {
                        return Ok(conn);
                    }
                }
                // Boxed: connecting is rare, and every acquisition's future would carry it.
                None => {
                    return Box::pin(open(&self.opts, self.settings.connect_timeout))
                        .await
                        .map(Arc::new);
                }
            }
        }
    }

    /// Keeps `conn` for the next acquisitions.
    fn give_back(&self, conn: Arc<NamedConn>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < IDLE_MAX {
            idle.push((conn, Instant::now()));
        }
    }

    /// The `GET_LOCK` name of `name` (see `admin::mysql_lock_name`).
    fn lock(&self, name: &str) -> String {
        lock_name(&self.database, name)
    }

    /// Drops the acquisition `token`'s connection (closed once nothing uses it).
    fn forget(&self, token: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.remove(token);
    }

    fn session(&self, token: &str) -> Option<Arc<Session>> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(token).cloned()
    }

    /// One statement on `conn`, bounded by the response timeout: its first value.
    async fn first<T: FromValue + Send + 'static>(
        &self,
        conn: &NamedConn,
        what: &'static str,
        text: &str,
        params: &[&[u8]],
    ) -> Result<Option<T>, MyError> {
        let text = sql(text, params);
        let mut c = conn.conn.lock().await;
        timed(what, self.settings.response_timeout, c.query_first(text)).await
    }

    /// One statement on an idle (or new) connection, which goes back afterwards.
    async fn first_once<T: FromValue + Send + 'static>(
        &self,
        what: &'static str,
        text: &str,
        params: &[&[u8]],
    ) -> Result<Option<T>, MyError> {
        let conn = self.connection().await?;
        let value = self.first(&conn, what, text, params).await?;
        self.give_back(conn);
        Ok(value)
    }

    /// Sets the session's `wait_timeout` to `lease`'s, if it runs with another.
    async fn lease_on(&self, conn: &NamedConn, lease: Duration) -> Result<(), MyError> {
        let seconds = wait_timeout(lease);
        if conn.wait_timeout.load(Ordering::Relaxed) == seconds {
            return Ok(());
        }
        let mut c = conn.conn.lock().await;
        timed(
            "setting the lease (wait_timeout)",
            self.settings.response_timeout,
            c.query_drop(format!("SET SESSION wait_timeout = {seconds}")),
        )
        .await?;
        conn.wait_timeout.store(seconds, Ordering::Relaxed);
        Ok(())
    }

    /// The try on a connection that holds nothing: the lock, then (with fencing) the next
    /// token, then the note locks.
    async fn try_on(
        &self,
        session: &Arc<Session>,
        spec: &LockSpec<'_>,
    ) -> Result<Attempt, BoxError> {
        let lock = self.lock(spec.name);
        session.set(State::InFlight);
        self.lease_on(&session.conn, spec.lease)
            .await
            .map_err(acquire_error)?;
        if !spec.fencing {
            let notes = note_locks(spec.token, spec.lease, None);
            let text = format!(
                "SELECT IF(GET_LOCK(?, 0) = 1, {}, -1)",
                note_sum(notes.len())
            );
            let mut params = vec![lock.as_bytes()];
            params.extend(notes.iter().map(|n| n.as_bytes()));
            let taken: Option<i64> = self
                .first(&session.conn, "the named lock attempt", &text, &params)
                .await
                .map_err(acquire_error)?;
            // The server's idle clock — what a listing's TTL counts from — started before
            // this answer came: an unrenewed hold ends a lease after it, never before the
            // listed end (the holder's own lease still counts from before the attempt).
            let answered = tokio::time::Instant::now();
            return match taken {
                Some(-1) => {
                    session.set(State::Contended);
                    Ok(Attempt::Busy { ttl: None })
                }
                Some(n) if n == notes.len() as i64 => {
                    session.set(State::Held(None));
                    expire(
                        session,
                        spec,
                        answered + spec.lease,
                        self.settings.response_timeout,
                    );
                    self.record(&lock, spec.name).await;
                    Ok(Attempt::Acquired {
                        fencing_token: None,
                    })
                }
                other => Err(Box::new(MyError::Unexpected(format!(
                    "the named lock attempt answered {other:?}"
                )))),
            };
        }
        let taken: Option<i64> = self
            .first(
                &session.conn,
                "the named lock attempt",
                "SELECT GET_LOCK(?, 0)",
                &[lock.as_bytes()],
            )
            .await
            .map_err(acquire_error)?;
        if taken != Some(1) {
            session.set(State::Contended);
            return Ok(Attempt::Busy { ttl: None });
        }
        let limit = self.settings.response_timeout;
        let fence = grant_on(
            &session.conn,
            &self.fences,
            spec.name,
            spec.token,
            spec.lease,
            true,
            limit,
        )
        .await
        .map_err(acquire_error)?;
        // After the note locks' answer: the server's idle clock started before it.
        let answered = tokio::time::Instant::now();
        session.set(State::Held(fence));
        expire(
            session,
            spec,
            answered + spec.lease,
            self.settings.response_timeout,
        );
        self.record(&lock, spec.name).await;
        Ok(Attempt::Acquired {
            fencing_token: fence,
        })
    }

    /// Records the key of a hashed lock name in `<table>_names`, once per client (best effort:
    /// without it `distlock list` shows the hashed name).
    async fn record(&self, lock: &str, name: &str) {
        if !is_hashed(lock) || self.recorded.contains(lock) {
            return;
        }
        let text = format!(
            "INSERT IGNORE INTO {} (lock_name, name) VALUES (?, ?)",
            self.names
        );
        let params: [&[u8]; 2] = [lock.as_bytes(), name.as_bytes()];
        match Box::pin(self.first_once::<i64>("recording a hashed name", &text, &params)).await {
            Ok(_) => self.recorded.insert(lock),
            Err(error) => tracing::debug!(
                key = name,
                %error,
                "distlock: could not record a hashed lock name"
            ),
        }
    }

    /// A statement on a held lock's connection that dates the grant (and renews the lease).
    async fn date(&self, session: &Session, name: &str) -> Result<bool, MyError> {
        let mine: Option<i64> = self
            .first(
                &session.conn,
                "the named lock renewal",
                "SELECT IS_USED_LOCK(?) = CONNECTION_ID()",
                &[self.lock(name).as_bytes()],
            )
            .await?;
        Ok(mine == Some(1))
    }
}

/// Named locks: plain locks, queued on the server (a waiting session); no read locks, no
/// semaphores, no `min_hold`.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    wakes: "the server's grant (a waiting session)",
    shared: Err(
        "`mode=named` has no read locks (a named lock has no shared mode): use the lock \
         table (leave out `mode=named`)",
    ),
    permits: Err("`mode=named` has no semaphores: use the lock table (leave out `mode=named`)"),
    min_hold: Err(
        "a named lock lives on its holder's connection, so it cannot outlive the holder's \
         process as min_hold promises: use the lock table (leave out `mode=named`)",
    ),
    queues_waiters: true,
    upgradable: Err(
        "`mode=named` has no read locks, so no upgradable ones: use the lock table (leave out \
         `mode=named`), which has them",
    ),
    lock_delay: Err(
        "a named lock ends the moment its session does (the holder's `wait_timeout` or its \
         connection closing): nothing is left to keep the key for a lock-delay; use the lock \
         table (leave out `mode=named`)",
    ),
    shares: Ok(super::share::SHARE_LIMIT),
    ..Capabilities::plain("mysql")
};

impl Backend for NamedBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(async move {
            let session = match self.session(spec.token) {
                Some(session) => session,
                None => {
                    let conn = self.connection().await.map_err(acquire_error)?;
                    let session = Arc::new(Session {
                        conn,
                        state: Mutex::new(State::Idle),
                        waiting: Mutex::new(None),
                    });
                    let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
                    sessions.insert(spec.token.to_owned(), Arc::clone(&session));
                    session
                }
            };
            match session.state() {
                State::Idle | State::Contended => {
                    let tried = self.try_on(&session, &spec).await;
                    if tried.is_err() {
                        // What the connection did is unknown (a server restart ends every idle
                        // one): the next try starts on another, and dropping this one ends
                        // its session, with anything it may have taken.
                        self.forget(spec.token);
                    }
                    tried
                }
                State::Waiting => Ok(Attempt::Busy { ttl: None }),
                State::Granted(fence) => {
                    session.set(State::InFlight);
                    let held = match Box::pin(self.date(&session, spec.name)).await {
                        Ok(held) => held,
                        Err(error) => {
                            self.forget(spec.token);
                            return Err(acquire_error(error));
                        }
                    };
                    if !held {
                        self.forget(spec.token);
                        return Err(Transient::wrap("the granted named lock was lost at once"));
                    }
                    // The server's idle clock restarted before this answer came (the holder's
                    // lease counts from before the statement was sent).
                    let answered = tokio::time::Instant::now();
                    session.set(State::Held(fence));
                    let limit = self.settings.response_timeout;
                    expire(&session, &spec, answered + spec.lease, limit);
                    self.record(&self.lock(spec.name), spec.name).await;
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
                        "the named lock request failed: {why}"
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
            let State::Held(_) = session.state() else {
                return Ok(false);
            };
            match self.date(&session, spec.name).await {
                Ok(held) => Ok(held),
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
                    self.give_back(Arc::clone(&session.conn));
                    Ok(Released::NotOurs)
                }
                State::Held(_) | State::Granted(_) => {
                    let held = matches!(state, State::Held(_));
                    let released: Result<Option<i64>, MyError> = self
                        .first(
                            &session.conn,
                            "the named lock release",
                            "SELECT RELEASE_ALL_LOCKS()",
                            &[],
                        )
                        .await;
                    match released {
                        Ok(Some(n)) if n > 0 => {
                            // Before the connection serves another acquisition: an unrenewed
                            // hold's end (`expire`) then finds nothing to end on it.
                            session.set(State::Idle);
                            self.give_back(Arc::clone(&session.conn));
                            Ok(if held {
                                Released::Deleted
                            } else {
                                Released::NotOurs
                            })
                        }
                        Ok(_) => Ok(Released::NotOurs),
                        // No answer, or the connection broke: the release may have landed, or
                        // the session ended (its locks with it) — or it still holds the lock.
                        Err(error) => {
                            Box::pin(self.after_failed_release(hold, &session, error)).await
                        }
                    }
                }
                // Boxed: a rare path kept out of every release's future.
                State::Waiting => Box::pin(self.give_up_waiting(&session)).await,
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

#[cfg(test)]
mod tests {
    #[test]
    fn leases_round_up_to_whole_seconds() {
        use std::time::Duration;
        assert_eq!(super::wait_timeout(Duration::from_millis(400)), 1);
        assert_eq!(super::wait_timeout(Duration::from_secs(30)), 30);
        assert_eq!(super::wait_timeout(Duration::from_millis(30_001)), 31);
        assert_eq!(super::note_sum(2), "GET_LOCK(?, 0) + GET_LOCK(?, 0)");
    }
}

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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::{FromValue, Queryable};
use mysql_async::{Conn, Opts};

use super::errors::{MyError, connect_error};
use crate::backend::sql::SqlSettings;
use crate::backend::sql::errors::{acquire_error, timed};
use crate::backend::{
    Attempt, Backend, Capabilities, Hold, LockSpec, Released, Remembered, Transient,
};
use crate::error::{BoxError, LockError};
use crate::fast_map::FastMap;
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::{BoxFuture, RuntimeBound};

mod admin;
pub(crate) mod names;

use names::{is_hashed, lock_name, note_locks, sql};

/// Idle connections kept for the next acquisitions.
const IDLE_MAX: usize = 256;

/// The longest `wait_timeout` the servers take (one year, in seconds; distlock's leases are
/// shorter).
const MAX_WAIT_TIMEOUT: u64 = 31_536_000;

/// How long a blocking request waits in the server at most (the waiting loop ends it sooner).
const BLOCK_SECONDS: u64 = MAX_WAIT_TIMEOUT;

/// One connection: the driver's, its server-side id, the runtime that drives its socket, and
/// the `wait_timeout` (seconds) its session runs with now (0: the server's default).
struct NamedConn {
    conn: tokio::sync::Mutex<Conn>,
    id: u32,
    bound: RuntimeBound<()>,
    wait_timeout: AtomicU64,
}

/// Where one acquisition's connection stands.
#[derive(Debug, Clone)]
enum State {
    /// Holds nothing and waits for nothing: may go back to the idle connections.
    Idle,
    /// Like `Idle`, after a try that found the lock held by another.
    Contended,
    /// A statement is under way (or was dropped under way): the connection is closed, never
    /// reused, when the acquisition ends.
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
    conn: Arc<NamedConn>,
    state: Mutex<State>,
    /// The task of the blocking request, while it runs.
    waiting: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Session {
    fn state(&self) -> State {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
}

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

/// Whether an error means the session is over (killed, timed out, the connection gone): its
/// locks are gone with it.
fn session_over(error: &MyError) -> bool {
    match error {
        MyError::Driver(mysql_async::Error::Io(_)) => true,
        MyError::Driver(mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed)) => {
            true
        }
        MyError::Driver(mysql_async::Error::Server(e)) => matches!(e.code, 1053 | 1927 | 2013),
        _ => false,
    }
}

/// The session's `wait_timeout` for `lease`: whole seconds, rounded up.
fn wait_timeout(lease: Duration) -> u64 {
    let seconds = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    seconds.clamp(1, MAX_WAIT_TIMEOUT)
}

/// `GET_LOCK(?, 0) + …` for `parts` note locks: their sum is `parts` when all were taken.
fn note_sum(parts: usize) -> String {
    vec!["GET_LOCK(?, 0)"; parts].join(" + ")
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
        let started = tokio::time::Instant::now();
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
                        started + spec.lease,
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
        let fence = self
            .granted(&session.conn, spec.name, spec.token, spec.lease, true)
            .await
            .map_err(acquire_error)?;
        session.set(State::Held(fence));
        expire(
            session,
            spec,
            started + spec.lease,
            self.settings.response_timeout,
        );
        self.record(&lock, spec.name).await;
        Ok(Attempt::Acquired {
            fencing_token: fence,
        })
    }

    /// After `GET_LOCK` granted `name` on `conn`: the next fencing token (if asked) and the
    /// note locks.
    async fn granted(
        &self,
        conn: &NamedConn,
        name: &str,
        token: &str,
        lease: Duration,
        fencing: bool,
    ) -> Result<Option<u64>, MyError> {
        grant_on(
            conn,
            &self.fences,
            name,
            token,
            lease,
            fencing,
            self.settings.response_timeout,
        )
        .await
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

    /// Starts the blocking request of the waiter `spec.token`.
    fn block(&self, session: Arc<Session>, spec: &LockSpec<'_>) {
        let lock = self.lock(spec.name);
        let (name, token, lease, fencing) = (
            spec.name.to_owned(),
            spec.token.to_owned(),
            spec.lease,
            spec.fencing,
        );
        let (hub, fences, limit) = (
            Arc::clone(&self.hub),
            self.fences.clone(),
            self.settings.response_timeout,
        );
        session.set(State::Waiting);
        let waiting = Arc::clone(&session);
        let task = tokio::spawn(async move {
            // Without fencing, the note locks come in the same statement as the grant.
            let notes = match fencing {
                false => note_locks(&token, lease, None),
                true => Vec::new(),
            };
            let blocked = async {
                let mut params = vec![lock.as_bytes()];
                params.extend(notes.iter().map(|n| n.as_bytes()));
                let text = match fencing {
                    false => format!(
                        "SELECT IF(GET_LOCK(?, {BLOCK_SECONDS}) = 1, {}, -1)",
                        note_sum(notes.len())
                    ),
                    true => format!("SELECT GET_LOCK(?, {BLOCK_SECONDS})"),
                };
                let mut c = waiting.conn.conn.lock().await;
                c.query_first::<Option<i64>, _>(sql(&text, &params)).await
            };
            let state = match blocked.await {
                Ok(Some(Some(n))) if !fencing && n == notes.len() as i64 => State::Granted(None),
                Ok(Some(Some(1))) if fencing => {
                    match grant_on(&waiting.conn, &fences, &name, &token, lease, fencing, limit)
                        .await
                    {
                        Ok(fence) => State::Granted(fence),
                        Err(error) => State::Failed(error.to_string()),
                    }
                }
                Ok(other) => State::Failed(format!("the blocking GET_LOCK answered {other:?}")),
                Err(error) => State::Failed(MyError::Driver(error).to_string()),
            };
            waiting.set(state);
            hub.notify_one(&name, &token);
        });
        *session.waiting.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Ends the connection `id`'s statement (`KILL QUERY`) or session (`KILL CONNECTION`)
    /// from another connection.
    async fn kill(&self, what: &str, id: u32) -> Result<(), MyError> {
        let text = format!("KILL {what} {id}");
        match self.first_once::<i64>("ending a session", &text, &[]).await {
            // Unknown thread: it has ended already.
            Err(MyError::Driver(mysql_async::Error::Server(e))) if e.code == 1094 => Ok(()),
            other => other.map(drop),
        }
    }

    /// Takes a waiter's blocking request out of the server's queue: ended now, and its answer
    /// (ended, or granted just before) awaited; a grant that raced it is given back.
    async fn give_up_waiting(&self, session: &Session) -> Result<Released, BoxError> {
        let task = session
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let limit = self.settings.response_timeout;
        let _ = tokio::time::timeout(limit, self.kill("QUERY", session.conn.id)).await;
        if let Some(task) = task {
            let abort = task.abort_handle();
            if tokio::time::timeout(limit, task).await.is_err() {
                abort.abort();
            }
        }
        if let State::Granted(_) = session.state() {
            // Granted as it was ended: the session holds the lock, and ends with it.
            let _ = tokio::time::timeout(limit, self.kill("CONNECTION", session.conn.id)).await;
        }
        Ok(Released::NotOurs)
    }

    /// A release whose statement failed (no answer, a broken connection): if the session
    /// still holds the lock, it is ended — released; if not, the release or the session's
    /// end freed it — ambiguous, as a retried release is.
    async fn after_failed_release(
        &self,
        hold: Hold<'_>,
        session: &Session,
        error: MyError,
    ) -> Result<Released, BoxError> {
        let check = || async {
            let holder: Option<Option<u32>> = self
                .first_once(
                    "asking who holds the lock",
                    "SELECT IS_USED_LOCK(?)",
                    &[self.lock(hold.name).as_bytes()],
                )
                .await?;
            if holder.flatten() != Some(session.conn.id) {
                return Ok::<_, MyError>(Released::Ambiguous { alive_until: None });
            }
            self.kill("CONNECTION", session.conn.id).await?;
            Ok(Released::Deleted)
        };
        // A few tries: the path that lost the answer may take a moment to carry one again.
        let mut tries = 0;
        let checked = loop {
            tries += 1;
            match check().await {
                Err(_) if tries < 5 => tokio::time::sleep(Duration::from_millis(200)).await,
                other => break other,
            }
        };
        checked.map_err(|checking| {
            format!(
                "the release got no answer ({error}), and the server could not be asked \
                 whether the lock is still held ({checking})"
            )
            .into()
        })
    }
}

/// Ends an unrenewed hold at the end of its lease (`until`), if it is still held then: the
/// server's idle timeout counts whole seconds, and a live client need not wait for it.
fn expire(
    session: &Arc<Session>,
    spec: &LockSpec<'_>,
    until: tokio::time::Instant,
    limit: Duration,
) {
    if spec.renew {
        return;
    }
    let session = Arc::clone(session);
    tokio::spawn(async move {
        tokio::time::sleep_until(until).await;
        if !matches!(session.state(), State::Held(_)) {
            return;
        }
        let mut c = session.conn.conn.lock().await;
        if matches!(session.state(), State::Held(_)) {
            session.set(State::Idle);
            let _ = timed(
                "ending an unrenewed lease",
                limit,
                c.query_drop("DO RELEASE_ALL_LOCKS()"),
            )
            .await;
        }
    });
}

/// Opens one connection, bounded by `limit`.
async fn open(opts: &Opts, limit: Duration) -> Result<NamedConn, MyError> {
    let conn = timed("connecting", limit, Conn::new(opts.clone())).await?;
    Ok(NamedConn {
        id: conn.id(),
        conn: tokio::sync::Mutex::new(conn),
        bound: RuntimeBound::new(()),
        wait_timeout: AtomicU64::new(0),
    })
}

/// After `GET_LOCK` granted `name` on `conn`: with `fencing`, the next token of `fences`;
/// then the note locks. Each statement bounded by `limit`.
async fn grant_on(
    conn: &NamedConn,
    fences: &str,
    name: &str,
    token: &str,
    lease: Duration,
    fencing: bool,
    limit: Duration,
) -> Result<Option<u64>, MyError> {
    let mut c = conn.conn.lock().await;
    let fence = if fencing {
        let text = format!(
            "INSERT INTO {fences} (name, fence) VALUES (?, LAST_INSERT_ID(1)) \
             ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
        );
        let text = sql(&text, &[name.as_bytes()]);
        timed("the fencing token", limit, c.query_drop(text)).await?;
        Some(
            c.last_insert_id()
                .ok_or_else(|| MyError::Unexpected("no fencing token came back".into()))?,
        )
    } else {
        None
    };
    let notes = note_locks(token, lease, fence);
    let text = format!("SELECT {}", note_sum(notes.len()));
    let params: Vec<&[u8]> = notes.iter().map(|n| n.as_bytes()).collect();
    let text = sql(&text, &params);
    let taken: Option<i64> = timed("the note locks", limit, c.query_first(text)).await?;
    if taken != Some(notes.len() as i64) {
        return Err(MyError::Unexpected(format!(
            "the note locks answered {taken:?}"
        )));
    }
    Ok(fence)
}

/// Named locks: plain locks, queued on the server (a waiting session); no read locks, no
/// semaphores, no `min_hold`.
const CAPABILITIES: Capabilities = Capabilities {
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
                    // Dated from now: the lease counts from before this statement was sent.
                    let started = tokio::time::Instant::now();
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
                    session.set(State::Held(fence));
                    let limit = self.settings.response_timeout;
                    expire(&session, &spec, started + spec.lease, limit);
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

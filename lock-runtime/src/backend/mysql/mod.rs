//! `mysql://`: locks as rows of a table in MySQL 8 or MariaDB ≥ 10.6.
//!
//! The same table and the same fixes as the PostgreSQL backend (see `backend/postgres`): expiry
//! by the database's clock (`UTC_TIMESTAMP(6)`), one atomic `INSERT … ON DUPLICATE KEY UPDATE`
//! per acquisition that takes over only an expired row (or ours), owner checks on release and
//! renewal, renewals batched per tick, fencing counters in `<table>_fences`. A fenced
//! acquisition runs the grant and the counter in one short transaction, so a later grant always
//! gets a larger token.
//!
//! MySQL has no notifications: a waiter asks again after a short pause that doubles from 2 ms
//! to 50 ms (drawn from its upper half), never past the holder's remaining lease.
//!
//! Connections: `pool_size` connections (default 4), each running one statement at a time;
//! the statements about one lock always use the same connection, in the order they were sent,
//! and run to completion even when the caller gives up (finished in the background then) — so
//! the release sent for an abandoned acquisition can never overtake it. The statements of every
//! lock + release are prepared on each connection once, and run by their handles.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Params, Statement, TxOpts, Value};

use super::sql::{PERMITS, READERS};
use super::sql::{SqlSettings, holder_id, like_pattern, millis, slot_of};
use super::url::redact_url;
use super::{Admin, Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, Transient};
use crate::admin::{Entry, holder_from_record};
use crate::error::{BoxError, LockError};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::{BoxFuture, RuntimeBound};

mod statements;

use statements::Sql;

/// Retries of a statement that failed on a broken connection (on a fresh one).
const RETRIES: u32 = 2;

/// A connection, tied to the runtime that drives its socket.
type Slot = Arc<tokio::sync::Mutex<Option<(Session, RuntimeBound<()>)>>>;

/// A connection and the statements of every lock + release, prepared on it: run by handle, a
/// statement is neither looked up in the driver's cache by its text nor scanned for named
/// parameters on each call (both were visible in a profile of the throughput row).
pub(crate) struct Session {
    conn: Conn,
    sql: Arc<Sql>,
    /// Prepared on first use (the table may not exist before).
    hot: Option<Hot>,
}

/// The prepared statements of [`Session`].
#[derive(Clone)]
struct Hot {
    acquire: Statement,
    remaining: Statement,
    renew: Statement,
    release: Statement,
    release_expired: Statement,
}

impl Session {
    /// The hot statements, prepared on this connection the first time.
    async fn hot(&mut self) -> Result<Hot, mysql_async::Error> {
        if let Some(hot) = &self.hot {
            return Ok(hot.clone());
        }
        let (conn, sql) = (&mut self.conn, &self.sql);
        let hot = Hot {
            acquire: conn.prep(sql.acquire.as_str()).await?,
            remaining: conn.prep(sql.remaining.as_str()).await?,
            renew: conn.prep(sql.renew.as_str()).await?,
            release: conn.prep(sql.release.as_str()).await?,
            release_expired: conn.prep(sql.release_expired.as_str()).await?,
        };
        self.hot = Some(hot.clone());
        Ok(hot)
    }
}

impl std::ops::Deref for Session {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }
}

pub(crate) struct MysqlBackend {
    opts: Opts,
    settings: SqlSettings,
    sql: Arc<Sql>,
    holder: String,
    url: String,
    slots: Vec<Slot>,
    /// Wakes this client's waiters when it releases a lock itself (other processes are found by
    /// polling: see [`Backend::release_poll`]).
    hub: Arc<ReleaseHub>,
    /// Tokens of writers that marked a lock's readers while waiting: their marks go once they
    /// have the lock or give up. (A mark forgotten past 65,536 tokens lapses by itself.)
    marked: super::Remembered<65_536>,
}

/// A failed statement: the driver's error, or no reply in time.
#[derive(Debug)]
pub(crate) enum MyError {
    Driver(mysql_async::Error),
    TimedOut { what: &'static str, after: Duration },
    Unexpected(String),
}

impl fmt::Display for MyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MyError::Driver(mysql_async::Error::Server(e)) => {
                write!(f, "{} (error {}, SQLSTATE {})", e.message, e.code, e.state)
            }
            MyError::Driver(e) => write!(f, "{e}"),
            MyError::TimedOut { what, after } => write!(f, "no reply to {what} within {after:?}"),
            MyError::Unexpected(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for MyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MyError::Driver(error) => Some(error),
            _ => None,
        }
    }
}

impl From<mysql_async::Error> for MyError {
    fn from(error: mysql_async::Error) -> MyError {
        MyError::Driver(error)
    }
}

/// Server errors a new try on the same connection may cure: deadlock, lock wait timeout.
const RETRY_ON_THIS_CONNECTION: [u16; 2] = [1213, 1205];

/// Server errors a new connection may cure: too many connections, server shutting down,
/// connection killed, query interrupted, connection lost.
const RETRY_ON_A_NEW_CONNECTION: [u16; 5] = [1040, 1053, 1927, 1317, 2013];

impl MyError {
    fn is_transient(&self) -> bool {
        match self {
            MyError::TimedOut { .. } => true,
            MyError::Unexpected(_) => false,
            MyError::Driver(error) => match error {
                mysql_async::Error::Io(_) => true,
                mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed) => true,
                mysql_async::Error::Server(e) => {
                    RETRY_ON_THIS_CONNECTION.contains(&e.code)
                        || RETRY_ON_A_NEW_CONNECTION.contains(&e.code)
                }
                _ => false,
            },
        }
    }

    fn server_code(&self) -> Option<u16> {
        match self {
            MyError::Driver(mysql_async::Error::Server(e)) => Some(e.code),
            _ => None,
        }
    }

    /// Whether the connection it happened on is still good (a server error leaves it usable).
    fn keeps_connection(&self) -> bool {
        matches!(
            self,
            MyError::Driver(mysql_async::Error::Server(e))
                if !RETRY_ON_A_NEW_CONNECTION.contains(&e.code)
        )
    }
}

fn acquire_error(error: MyError) -> BoxError {
    Transient::wrap_if(error.is_transient(), error)
}

fn micros(d: Duration) -> i64 {
    millis(d).saturating_mul(1000)
}

/// Where a connection's work runs. Either way it completes even if its caller gives up.
#[derive(Clone, Copy, Debug)]
enum Trips {
    /// One statement (the lock + release of a plain lock): in the caller's task, finished in
    /// the background only if the caller drops it — no task per statement, and no hop between
    /// threads for its start and its answer.
    One,
    /// A transaction of several round trips: in a task of its own, on a runtime worker, where
    /// each answer is read as it comes (from a caller outside the workers — `block_on` — each
    /// round trip in place would cost a wake-up across threads: a read lock + release took
    /// 2.2 ms in place, 1.4 ms in a task).
    Many,
}

/// A statement's work on one connection, run (and retried) by [`MysqlBackend::run`].
type Op<T> =
    Arc<dyn Fn(&mut Session) -> BoxFuture<'_, Result<T, mysql_async::Error>> + Send + Sync>;

impl MysqlBackend {
    /// Parses the URL, connects every pooled connection (bounded by the connect timeout),
    /// creates the tables if asked and missing, and checks their shape by preparing every
    /// statement.
    pub(crate) async fn connect(
        driver_url: &str,
        settings: SqlSettings,
    ) -> Result<Arc<MysqlBackend>, LockError> {
        let shown = redact_url(driver_url);
        let opts = Opts::from_url(driver_url)
            .map_err(|e| LockError::Config(format!("invalid MySQL URL {shown}: {e}")))?;
        let mut builder = OptsBuilder::from_opts(opts);
        if !driver_url.contains("prefer_socket") {
            // Talk to the address in the URL, not to a local socket the server reports.
            builder = builder.prefer_socket(false);
        }
        let backend = Arc::new(MysqlBackend {
            opts: builder.into(),
            sql: Arc::new(Sql::new(&settings)),
            holder: holder_id(),
            url: shown,
            slots: (0..settings.pool_size).map(|_| Slot::default()).collect(),
            settings,
            hub: ReleaseHub::new(None),
            marked: Default::default(),
        });
        if backend.settings.create_table {
            let create = backend.sql.create.clone();
            let limit = backend.settings.connect_timeout;
            backend
                .run_on(
                    0,
                    Trips::Many,
                    "creating the lock table",
                    limit,
                    move |conn| {
                        let create = create.clone();
                        Box::pin(async move {
                            for statement in create {
                                conn.query_drop(statement).await?;
                            }
                            Ok(())
                        })
                    },
                )
                .await
                .map_err(|e| backend.setup_error(e))?;
        }
        // Every connection is made now and prepares every statement: a table of the wrong shape
        // fails here, naming what is wrong, and the first locks do not pay for connecting.
        let checks = (0..backend.slots.len()).map(|i| {
            let sql = Arc::clone(&backend.sql);
            // Part of connecting: bounded by the connect timeout.
            let limit = backend.settings.connect_timeout;
            backend.run_on(
                i,
                Trips::Many,
                "preparing the lock statements",
                limit,
                move |conn| {
                    let sql = Arc::clone(&sql);
                    Box::pin(async move {
                        conn.hot().await?;
                        conn.prep(sql.fence.as_str()).await?;
                        Ok(())
                    })
                },
            )
        });
        futures_util::future::try_join_all(checks)
            .await
            .map_err(|e| backend.setup_error(e))?;
        backend.check_token_width().await?;
        Ok(backend)
    }

    /// A table made before owner tokens named their holder has a 64-character `token`
    /// column: every acquisition would fail with "data too long". Said at connect time, with
    /// the fix.
    async fn check_token_width(&self) -> Result<(), LockError> {
        let table = self.settings.table.clone();
        let width = self
            .run_on(
                0,
                Trips::Many,
                "checking the lock table",
                self.settings.connect_timeout,
                move |conn| {
                    let (schema, name) = match table.split_once('.') {
                        Some((schema, name)) => (Some(schema.to_owned()), name.to_owned()),
                        None => (None, table.clone()),
                    };
                    Box::pin(async move {
                        conn.exec_first::<Option<u64>, _, _>(
                            "SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS \
                             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                             AND COLUMN_NAME = 'token'",
                            (schema, name),
                        )
                        .await
                    })
                },
            )
            .await
            .map_err(|e| self.setup_error(e))?
            .flatten();
        match width {
            Some(width) if width < MIN_TOKEN_WIDTH => Err(LockError::Connect {
                url: self.url.clone(),
                reason: format!(
                    "the lock table `{}` has a {width}-character `token` column; owner tokens \
                     are up to {MIN_TOKEN_WIDTH} characters since they name their holder. \
                     Widen it: ALTER TABLE {} MODIFY token VARCHAR(255) CHARACTER SET ascii \
                     NOT NULL",
                    self.settings.table, self.sql.table
                ),
                source: None,
            }),
            _ => Ok(()),
        }
    }

    /// A connection-time failure as an error that says what to check.
    fn connect_error(&self, error: MyError) -> LockError {
        let hint = match (&error, error.server_code()) {
            (_, Some(1045)) => "authentication failed: check the user and password in the URL \
                 (mysql://user:password@host:port/database)"
                .to_owned(),
            (_, Some(1049)) => format!(
                "the database {:?} does not exist: create it (`CREATE DATABASE`) or fix the \
                 URL's path",
                self.opts.db_name().unwrap_or_default()
            ),
            (_, Some(1044)) => "this user may not use that database (GRANT it access)".to_owned(),
            (MyError::TimedOut { what, after }, _) => format!(
                "{what} took longer than {after:?}: is the host reachable, and the server not \
                 overloaded? (raise the builder's connect timeout for slow networks)"
            ),
            (e, _) if e.to_string().to_lowercase().contains("refused") => {
                "connection refused: is MySQL / MariaDB running at that address?".to_owned()
            }
            _ => "the connection failed".to_owned(),
        };
        LockError::Connect {
            url: self.url.clone(),
            reason: format!("{hint} ({error})"),
            source: Some(Box::new(error)),
        }
    }

    /// A failure while setting up the tables or their statements.
    fn setup_error(&self, error: MyError) -> LockError {
        let (table, fences) = (&self.settings.table, self.settings.fence_table());
        let reason = match error.server_code() {
            // No such table.
            Some(1146) if !self.settings.create_table => format!(
                "the lock table `{table}` (or `{fences}`) does not exist ({error}), and \
                 `create_table=false` says not to create it: create both with the DDL in the \
                 README (\"The lock table\"), or let distlock create them"
            ),
            // Unknown column, wrong type, no such table (made by someone else, half).
            Some(1054 | 1146 | 1292 | 1366 | 1406) => format!(
                "the lock table `{table}` (or `{fences}`) does not have the shape distlock \
                 needs: {error}. Create it with the DDL in the README (\"The lock table\"), or \
                 name another table (`table=` in the URL, or the builder's `.table(…)`)"
            ),
            // CREATE command denied.
            Some(1142) => format!(
                "cannot create the lock table `{table}`: the user may not create tables \
                 ({error}). Create it once with the DDL in the README (\"The lock table\") and \
                 connect with `create_table=false`"
            ),
            _ => return self.connect_error(error),
        };
        LockError::Connect {
            url: self.url.clone(),
            reason,
            source: Some(Box::new(error)),
        }
    }

    /// Runs `op`, one statement, on the connection of lock `name` (see [`Trips`]).
    async fn run<T, F>(&self, what: &'static str, name: &str, op: F) -> Result<T, MyError>
    where
        T: Send + 'static,
        F: Fn(&mut Session) -> BoxFuture<'_, Result<T, mysql_async::Error>> + Send + Sync + 'static,
    {
        self.run_with(Trips::One, what, name, op).await
    }

    /// Runs `op`, of `trips`, on the connection of lock `name`.
    async fn run_with<T, F>(
        &self,
        trips: Trips,
        what: &'static str,
        name: &str,
        op: F,
    ) -> Result<T, MyError>
    where
        T: Send + 'static,
        F: Fn(&mut Session) -> BoxFuture<'_, Result<T, mysql_async::Error>> + Send + Sync + 'static,
    {
        let limit = self.settings.response_timeout;
        let i = slot_of(name, self.slots.len());
        self.run_on(i, trips, what, limit, op).await
    }

    /// Runs `op` on connection `i` so that it completes (and keeps the connection's statements
    /// in order) even if the caller stops waiting: see [`Trips`] for where. A broken connection
    /// is replaced and the statement retried on the new one; every statement is safe to repeat
    /// with the same token.
    async fn run_on<T, F>(
        &self,
        i: usize,
        trips: Trips,
        what: &'static str,
        limit: Duration,
        op: F,
    ) -> Result<T, MyError>
    where
        T: Send + 'static,
        F: Fn(&mut Session) -> BoxFuture<'_, Result<T, mysql_async::Error>> + Send + Sync + 'static,
    {
        let op: Op<T> = Arc::new(op);
        let (opts, sql) = (self.opts.clone(), Arc::clone(&self.sql));
        let (connect_timeout, response_timeout) = (self.settings.connect_timeout, limit);
        // The connection is taken here, before the statement starts: statements on one slot
        // run in the order their callers asked, so a cancelled acquisition's clean-up (a
        // release asked for after it) never runs before the acquisition's own statement.
        let mut conn = Arc::clone(&self.slots[i]).lock_owned().await;
        let statements = async move {
            let mut attempt = 0;
            loop {
                if conn
                    .as_ref()
                    .is_some_and(|(_, runtime)| !runtime.is_alive())
                {
                    *conn = None;
                }
                let mut failed = None;
                if conn.is_none() {
                    let fresh = async {
                        let conn = Conn::new(opts.clone()).await?;
                        let sql = Arc::clone(&sql);
                        Ok::<_, mysql_async::Error>(Session {
                            conn,
                            sql,
                            hot: None,
                        })
                    };
                    match tokio::time::timeout(connect_timeout, fresh).await {
                        Ok(Ok(fresh)) => *conn = Some((fresh, RuntimeBound::new(()))),
                        Ok(Err(error)) => failed = Some(MyError::Driver(error)),
                        Err(_) => {
                            failed = Some(MyError::TimedOut {
                                what: "the connection attempt",
                                after: connect_timeout,
                            })
                        }
                    }
                }
                let error = match (failed, conn.as_mut()) {
                    (Some(error), _) => error,
                    (None, Some((c, _))) => {
                        match tokio::time::timeout(response_timeout, op(c)).await {
                            Ok(Ok(value)) => return Ok(value),
                            Ok(Err(error)) => MyError::Driver(error),
                            Err(_) => MyError::TimedOut {
                                what,
                                after: response_timeout,
                            },
                        }
                    }
                    (None, None) => MyError::Unexpected("no connection".into()),
                };
                if !error.keeps_connection() {
                    *conn = None; // broken, or in an unknown state after a timeout
                }
                if attempt < RETRIES && error.is_transient() {
                    attempt += 1;
                    tracing::debug!(%error, attempt, "distlock: mysql statement failed, retrying");
                    tokio::time::sleep(super::retry_pause(attempt)).await;
                    continue;
                }
                return Err(error);
            }
        };
        match trips {
            Trips::One => crate::runtime::FinishIfDropped::new(statements).await,
            Trips::Many => match tokio::spawn(statements).await {
                Ok(result) => result,
                Err(join) => Err(MyError::Unexpected(format!(
                    "the statements' task ended abnormally: {join}"
                ))),
            },
        }
    }
}

/// The narrowest `token` column that holds every owner token (host cut to 64 characters).
const MIN_TOKEN_WIDTH: u64 = 129;

/// A row of the admin statements: (name, token, holder, acquired ms, remaining ms, fence).
type AdminRow = (
    Vec<u8>,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

fn entry((name, token, holder, acquired, remaining, fence): AdminRow) -> Entry {
    Entry {
        name: String::from_utf8_lossy(&name).into_owned(),
        token: Some(token),
        holder: holder_from_record(&holder, acquired.map(|ms| ms.max(0) as u64)),
        ttl: remaining.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        fencing_token: fence.map(|f| f as u64),
        waiters: None,
        readers: Vec::new(),
        permits: None,
    }
}

/// Makes or renews the share of reader `token` in lock `name` (for `lease` µs), in the
/// transaction of a reader's acquisition or renewal.
async fn put_share(
    tx: &mut mysql_async::Transaction<'_>,
    sql: &Sql,
    name: &[u8],
    token: &str,
    lease: i64,
    holder: &str,
) -> Result<(), mysql_async::Error> {
    let params = vec![
        Value::from(name),
        Value::from(token),
        Value::from(token),
        Value::from(lease),
        Value::from(holder),
    ];
    tx.exec_drop(sql.put_share.as_str(), positional(params))
        .await
}

/// Makes the lock row `name` the row of shares `row_token` (readers, or a semaphore's
/// permits), living at least `lease` µs more, in the transaction that made or renewed a share.
async fn shares_row(
    tx: &mut mysql_async::Transaction<'_>,
    sql: &Sql,
    name: &[u8],
    row_token: &str,
    lease: i64,
) -> Result<(), mysql_async::Error> {
    let params = vec![
        Value::from(row_token),
        Value::from(row_token),
        Value::from(lease),
        Value::from(lease),
        Value::from(row_token),
        Value::from(row_token),
        Value::from(name),
    ];
    tx.exec_drop(sql.readers_row.as_str(), positional(params))
        .await
}

/// The token of the lock row a share of `kind` lives in: `readers`, or a semaphore's
/// `permits:<n>`.
fn row_token(kind: Kind) -> String {
    match kind.permits() {
        Some(limit) => format!("{PERMITS}{limit}"),
        None => READERS.to_owned(),
    }
}

/// The limit of a semaphore whose row holds `token`; `None` for a lock's row.
fn semaphore_limit(token: &str) -> Option<u16> {
    token.strip_prefix(PERMITS)?.parse().ok()
}

/// In a reader's transaction: the lock row, locked — `(token, live, remaining µs)` — and
/// whether reader `token`'s share is live.
async fn row_and_share(
    tx: &mut mysql_async::Transaction<'_>,
    sql: &Sql,
    name: &[u8],
    token: &str,
) -> Result<(Option<(String, bool, Option<i64>)>, bool), mysql_async::Error> {
    let row = tx.exec_first(sql.row.as_str(), (name,)).await?;
    let mine: Option<i64> = tx
        .exec_first(sql.share_live.as_str(), (name, token))
        .await?;
    Ok((row, mine.unwrap_or(0) > 0))
}

/// What a reader's attempt found: taken (with the last write grant's fence), or busy for
/// about this many µs.
type ReadAttempt = (bool, Option<i64>, Option<i64>);

impl MysqlBackend {
    /// A reader's attempt, in one transaction that locks the lock row first (see
    /// `Sql::range` for the layout).
    async fn acquire_shared(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        if let Some(busy) = self.plainly_busy(spec).await? {
            return Ok(busy);
        }
        let sql = Arc::clone(&self.sql);
        let (name, token) = (spec.name.as_bytes().to_vec(), spec.token.to_owned());
        let (lease, holder, fencing) = (micros(spec.lease), self.holder.clone(), spec.fencing);
        let (taken, ttl, fence): ReadAttempt = self
            .run_with(
                Trips::Many,
                "the read acquisition",
                spec.name,
                move |conn| {
                    let (sql, name, token, holder) = (
                        Arc::clone(&sql),
                        name.clone(),
                        token.clone(),
                        holder.clone(),
                    );
                    Box::pin(async move {
                        let mut tx = conn.start_transaction(TxOpts::default()).await?;
                        tx.exec_drop(sql.lock_row.as_str(), (name.clone(),)).await?;
                        let (row, mine) = row_and_share(&mut tx, &sql, &name, &token).await?;
                        let (holder_token, live, left) =
                            row.unwrap_or_else(|| (String::new(), false, None));
                        if live && holder_token != READERS {
                            tx.rollback().await?;
                            return Ok((false, left, None));
                        }
                        // A writer waiting holds back a reader without a share yet.
                        if holder_token == READERS && !mine {
                            let marks: Option<(i64, Option<i64>)> = tx
                                .exec_first(sql.marks.as_str(), (name.clone(), name.clone()))
                                .await?;
                            if let Some((n, first)) = marks
                                && n > 0
                            {
                                tx.rollback().await?;
                                let wait = match (live.then_some(left).flatten(), first) {
                                    (Some(a), Some(b)) => Some(a.min(b)),
                                    (a, b) => a.or(b),
                                };
                                return Ok((false, wait, None));
                            }
                        }
                        put_share(&mut tx, &sql, &name, &token, lease, &holder).await?;
                        shares_row(&mut tx, &sql, &name, READERS, lease).await?;
                        let fence: Option<i64> = if fencing {
                            Some(
                                tx.exec_first(sql.last_fence.as_str(), (name,))
                                    .await?
                                    .unwrap_or(0),
                            )
                        } else {
                            None
                        };
                        tx.commit().await?;
                        Ok((true, None, fence))
                    })
                },
            )
            .await
            .map_err(acquire_error)?;
        Ok(if taken {
            Attempt::Acquired {
                fencing_token: fence.map(|f| f as u64),
            }
        } else {
            Attempt::Busy {
                ttl: Some(Duration::from_micros(ttl.unwrap_or(0).max(0) as u64)),
            }
        })
    }

    /// One of the unlocked reads of the lock row (`Sql::peek`, `Sql::peek_permits`) for `spec`:
    /// (token, live, remaining µs, a count, this token's live share).
    async fn peek(
        &self,
        spec: LockSpec<'_>,
        statement: fn(&Sql) -> &String,
    ) -> Result<Option<(String, bool, Option<i64>, i64, i64)>, BoxError> {
        let sql = Arc::clone(&self.sql);
        let name = Value::from(spec.name.as_bytes());
        let params = vec![
            name.clone(),
            name.clone(),
            name.clone(),
            Value::from(spec.token),
            name,
        ];
        self.run("reading the lock", spec.name, move |conn| {
            let (sql, params) = (Arc::clone(&sql), params.clone());
            Box::pin(async move {
                conn.exec_first(statement(&sql).as_str(), positional(params))
                    .await
            })
        })
        .await
        .map_err(acquire_error)
    }

    /// A semaphore's permit, in one transaction that locks the lock row first: a share (as a
    /// reader's) while fewer than `limit` are live; a row held as a lock, or by a semaphore of
    /// another limit, is refused.
    async fn acquire_permit(&self, spec: LockSpec<'_>, limit: u16) -> Result<Attempt, BoxError> {
        // Every permit plainly in use: answered without a transaction, so that waiters polling
        // do not queue on the lock row's lock.
        let row = self.peek(spec, |sql| &sql.peek_permits).await?;
        if let Some((held, true, left, live, 0)) = row {
            if held != row_token(spec.kind) {
                return Err(match semaphore_limit(&held) {
                    Some(held) => super::Refused::limit(held, limit),
                    None => super::Refused::kind(None, spec.kind),
                });
            }
            if live >= i64::from(limit) {
                return Ok(Attempt::Busy {
                    ttl: Some(Duration::from_micros(left.unwrap_or(0).max(0) as u64)),
                });
            }
        }
        let sql = Arc::clone(&self.sql);
        let (name, token) = (spec.name.as_bytes().to_vec(), spec.token.to_owned());
        let (lease, holder, fencing) = (micros(spec.lease), self.holder.clone(), spec.fencing);
        let row_token = row_token(spec.kind);
        let outcome = self
            .run_with(
                Trips::Many,
                "the permit's acquisition",
                spec.name,
                move |conn| {
                    let (sql, name, token, holder, row_token) = (
                        Arc::clone(&sql),
                        name.clone(),
                        token.clone(),
                        holder.clone(),
                        row_token.clone(),
                    );
                    Box::pin(async move {
                        let mut tx = conn.start_transaction(TxOpts::default()).await?;
                        tx.exec_drop(sql.lock_row.as_str(), (name.clone(),)).await?;
                        let (row, mine) = row_and_share(&mut tx, &sql, &name, &token).await?;
                        let (held, live, left) =
                            row.unwrap_or_else(|| (String::new(), false, None));
                        if live && held != row_token {
                            tx.rollback().await?;
                            return Ok(Err(semaphore_limit(&held)));
                        }
                        if !mine && live {
                            let others: Option<(i64, Option<i64>)> = tx
                                .exec_first(sql.shares.as_str(), (name.clone(), name.clone()))
                                .await?;
                            if others.is_some_and(|(n, _)| n >= i64::from(limit)) {
                                tx.rollback().await?;
                                return Ok(Ok((false, left)));
                            }
                        }
                        put_share(&mut tx, &sql, &name, &token, lease, &holder).await?;
                        shares_row(&mut tx, &sql, &name, &row_token, lease).await?;
                        let fence = if fencing {
                            tx.exec_drop(sql.fence.as_str(), (name,)).await?;
                            tx.last_insert_id().map(|f| f as i64)
                        } else {
                            None
                        };
                        tx.commit().await?;
                        Ok(Ok((true, fence)))
                    })
                },
            )
            .await
            .map_err(acquire_error)?;
        match outcome {
            Ok((true, fence)) => Ok(Attempt::Acquired {
                fencing_token: spec.fencing.then(|| fence.unwrap_or(0) as u64),
            }),
            // Every permit in use: until the row's lease (polling sees a release sooner).
            Ok((false, left)) => Ok(Attempt::Busy {
                ttl: Some(Duration::from_micros(left.unwrap_or(0).max(0) as u64)),
            }),
            Err(Some(held)) => Err(super::Refused::limit(held, limit)),
            Err(None) => Err(super::Refused::kind(None, spec.kind)),
        }
    }

    /// A reader's attempt that a plain read shows busy — a live writer holds the lock, or a
    /// writer waits (and this reader has no share yet) — answered without a transaction, so
    /// that waiting readers polling do not queue on the lock row's lock. `None`: it may be
    /// granted; the transaction decides.
    async fn plainly_busy(&self, spec: LockSpec<'_>) -> Result<Option<Attempt>, BoxError> {
        let row = self.peek(spec, |sql| &sql.peek).await?;
        let Some((token, live, left, marks, mine)) = row else {
            return Ok(None);
        };
        if live && let Some(held) = semaphore_limit(&token) {
            return Err(super::Refused::kind(Some(held), spec.kind));
        }
        let writer = live && token != READERS;
        let held_back = token == READERS && marks > 0 && mine == 0;
        Ok((writer || held_back).then(|| Attempt::Busy {
            ttl: Some(Duration::from_micros(left.unwrap_or(0).max(0) as u64)),
        }))
    }

    /// A reader's (or a permit's) renewal: its share lives `lease` more, and the lock row as
    /// long.
    async fn renew_shared(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        let row_token = row_token(spec.kind);
        let sql = Arc::clone(&self.sql);
        let (name, token) = (spec.name.as_bytes().to_vec(), spec.token.to_owned());
        let (lease, holder) = (micros(spec.lease), self.holder.clone());
        let renewed = self
            .run_with(Trips::Many, "the read renewal", spec.name, move |conn| {
                let (sql, name, token, holder, row_token) = (
                    Arc::clone(&sql),
                    name.clone(),
                    token.clone(),
                    holder.clone(),
                    row_token.clone(),
                );
                Box::pin(async move {
                    let mut tx = conn.start_transaction(TxOpts::default()).await?;
                    let (row, mine) = row_and_share(&mut tx, &sql, &name, &token).await?;
                    let held = row.is_some_and(|(t, live, _)| t == row_token && live);
                    if !held || !mine {
                        tx.rollback().await?;
                        return Ok(false);
                    }
                    put_share(&mut tx, &sql, &name, &token, lease, &holder).await?;
                    shares_row(&mut tx, &sql, &name, &row_token, lease).await?;
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .await?;
        Ok(renewed)
    }

    /// A reader's release: its share goes; the lock row then lives until the longest share
    /// left ends — or, with none left, is deleted (or, while writers wait, left to them, its
    /// lease over). `(share was live, readers left)`.
    async fn release_shared(
        &self,
        name: &str,
        token: &str,
        kind: Kind,
    ) -> Result<(bool, bool), MyError> {
        let sql = Arc::clone(&self.sql);
        let (bytes, token) = (name.as_bytes().to_vec(), token.to_owned());
        let row_token = row_token(kind);
        self.run_with(Trips::Many, "the read release", name, move |conn| {
            let (sql, name, token, row_token) = (
                Arc::clone(&sql),
                bytes.clone(),
                token.clone(),
                row_token.clone(),
            );
            Box::pin(async move {
                let mut tx = conn.start_transaction(TxOpts::default()).await?;
                let (row, mine) = row_and_share(&mut tx, &sql, &name, &token).await?;
                tx.exec_drop(sql.drop_share.as_str(), (name.clone(), token))
                    .await?;
                tx.exec_drop(
                    sql.drop_expired_shares.as_str(),
                    (name.clone(), name.clone()),
                )
                .await?;
                let mut left = true;
                if row.is_some_and(|(t, _, _)| t == row_token) {
                    let others: Option<(i64, Option<i64>)> = tx
                        .exec_first(sql.shares.as_str(), (name.clone(), name.clone()))
                        .await?;
                    match others {
                        Some((n, Some(last))) if n > 0 => {
                            tx.exec_drop(sql.readers_until.as_str(), (last, name, row_token))
                                .await?;
                        }
                        _ => {
                            left = false;
                            let marks: Option<(i64, Option<i64>)> = tx
                                .exec_first(sql.marks.as_str(), (name.clone(), name.clone()))
                                .await?;
                            if marks.is_some_and(|(n, _)| n > 0) {
                                tx.exec_drop(sql.readers_until.as_str(), (-1i64, name, row_token))
                                    .await?;
                            } else {
                                tx.exec_drop(sql.drop_readers_row.as_str(), (name, row_token))
                                    .await?;
                            }
                        }
                    }
                }
                tx.commit().await?;
                Ok((mine, left))
            })
        })
        .await
    }

    /// A waiting writer found the lock busy: if readers hold it, mark it so no new reader
    /// joins. Whether it marked.
    async fn mark(&self, spec: LockSpec<'_>) -> Result<bool, MyError> {
        let sql = Arc::clone(&self.sql);
        let params = vec![
            Value::from(spec.name.as_bytes()),
            Value::from(spec.token),
            Value::from(spec.token),
            Value::from(micros(crate::wait::FAIR_QUEUE_TTL)),
            Value::from(self.holder.as_str()),
            Value::from(spec.name.as_bytes()),
        ];
        // Noted before the statement is sent: a mark whose answer is lost is taken back too
        // (as on PostgreSQL); forgotten again if the answer says nothing was marked.
        self.marked.insert(spec.token);
        let marked = self
            .run("marking the readers", spec.name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move {
                    conn.exec_drop(sql.mark.as_str(), positional(params))
                        .await?;
                    Ok(conn.affected_rows() > 0)
                })
            })
            .await?;
        if !marked {
            self.marked.remove(spec.token);
        }
        Ok(marked)
    }

    /// Takes back the mark of writer `token`, if it left one.
    async fn unmark(&self, name: &str, token: &str) -> Result<(), MyError> {
        if !self.marked.remove(token) {
            return Ok(());
        }
        let sql = Arc::clone(&self.sql);
        let params = vec![Value::from(name.as_bytes()), Value::from(token)];
        self.run("taking a mark back", name, move |conn| {
            let (sql, params) = (Arc::clone(&sql), params.clone());
            Box::pin(async move {
                conn.exec_drop(sql.unmark.as_str(), positional(params))
                    .await
            })
        })
        .await
    }

    /// The live readers of lock `name` (admin).
    async fn readers_of(&self, name: &str) -> Result<Vec<(String, Option<Duration>)>, MyError> {
        let sql = Arc::clone(&self.sql);
        let params = vec![Value::from(name.as_bytes()), Value::from(name.as_bytes())];
        let rows: Vec<(String, i64)> = self
            .run("listing the readers", name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move { conn.exec(sql.readers.as_str(), positional(params)).await })
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|(token, ms)| (token, Some(Duration::from_millis(ms.max(0) as u64))))
            .collect())
    }

    /// `entry` with its readers, when readers hold the lock.
    async fn with_readers(&self, mut entry: Entry) -> Result<Entry, MyError> {
        let permits = entry.token.as_deref().and_then(semaphore_limit);
        if permits.is_some() || entry.token.as_deref() == Some(READERS) {
            entry.permits = permits.map(u32::from);
            entry.readers = self.readers_of(&entry.name).await?;
            entry.token = None;
            entry.holder = None;
        }
        Ok(entry)
    }

    async fn inspect_row(&self, name: &str) -> Result<Option<Entry>, MyError> {
        let sql = Arc::clone(&self.sql);
        let params = vec![Value::from(name.as_bytes())];
        let rows = self
            .run("the inspection", name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move {
                    conn.exec::<AdminRow, _, _>(sql.inspect.as_str(), positional(params))
                        .await
                })
            })
            .await?;
        match rows.into_iter().next() {
            Some(row) => Ok(Some(self.with_readers(entry(row)).await?)),
            None => Ok(None),
        }
    }
}

/// The pause before a waiter asks again after its `busy`-th busy answer in a row: doubling from
/// 2 ms to 50 ms, drawn from the upper half, so waiters of several processes spread out.
fn poll_pause(busy: u32) -> Duration {
    crate::wait::doubling_jittered(busy, 2, 50)
}

fn positional(values: Vec<Value>) -> Params {
    Params::Positional(values)
}

/// Every kind, writers' marks; no notifications, so waiters ask again after a short pause.
const CAPABILITIES: Capabilities = Capabilities {
    marks_waiting_writers: true,
    poll: Some(poll_pause),
    ..Capabilities::every_kind("mysql")
};

impl Backend for MysqlBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        match spec.kind {
            Kind::Shared => return Box::pin(self.acquire_shared(spec)),
            Kind::Permits(limit) => return Box::pin(self.acquire_permit(spec, limit)),
            Kind::Exclusive => {}
        }
        Box::pin(async move {
            let sql = Arc::clone(&self.sql);
            let params = vec![
                Value::from(spec.name.as_bytes()),
                Value::from(spec.token),
                Value::from(micros(spec.lease)),
                Value::from(self.holder.as_str()),
            ];
            let (name, fencing) = (spec.name.as_bytes().to_vec(), spec.fencing);
            // A fenced grant is a transaction of four round trips.
            let trips = if fencing { Trips::Many } else { Trips::One };
            let outcome = self
                .run_with(trips, "the acquisition", spec.name, move |conn| {
                    let (sql, params, name) = (Arc::clone(&sql), params.clone(), name.clone());
                    Box::pin(async move {
                        if !fencing {
                            let acquire = conn.hot().await?.acquire;
                            conn.exec_drop(&acquire, positional(params)).await?;
                            let taken = conn.affected_rows() > 0;
                            return Ok((taken, None));
                        }
                        // The grant and the counter commit together: the row lock taken by the
                        // grant holds off the next grant until the token is counted.
                        let acquire = conn.hot().await?.acquire;
                        let mut tx = conn.start_transaction(TxOpts::default()).await?;
                        tx.exec_drop(&acquire, positional(params)).await?;
                        if tx.affected_rows() == 0 {
                            tx.rollback().await?;
                            return Ok((false, None));
                        }
                        tx.exec_drop(sql.fence.as_str(), positional(vec![Value::from(name)]))
                            .await?;
                        let fence = tx.last_insert_id();
                        tx.commit().await?;
                        Ok((true, fence))
                    })
                })
                .await
                .map_err(acquire_error)?;
            match outcome {
                (true, fence) => {
                    if spec.fencing && fence.is_none() {
                        return Err(MyError::Unexpected(
                            "the acquisition returned no fencing token".into(),
                        )
                        .into());
                    }
                    // Its mark, if it left one waiting for readers, goes now.
                    if let Err(error) = self.unmark(spec.name, spec.token).await {
                        tracing::debug!(%error, "distlock: mysql: a writer's mark stays until it lapses");
                    }
                    Ok(Attempt::Acquired {
                        fencing_token: fence,
                    })
                }
                (false, _) => {
                    let name = spec.name.as_bytes().to_vec();
                    let remaining: Option<(Option<i64>, String)> = self
                        .run("reading the holder's lease", spec.name, move |conn| {
                            let name = name.clone();
                            Box::pin(async move {
                                let remaining = conn.hot().await?.remaining;
                                conn.exec_first(&remaining, (name,)).await
                            })
                        })
                        .await
                        .map_err(acquire_error)?;
                    // A waiting writer marks the lock only when readers hold it: a writer
                    // waiting for another writer polls with one statement, as before.
                    if spec.waiting
                        && let Some((Some(left), held)) = &remaining
                        && *left > 0
                        && let Some(held) = semaphore_limit(held)
                    {
                        return Err(super::Refused::kind(Some(held), spec.kind));
                    }
                    let readers = remaining
                        .as_ref()
                        .is_some_and(|(_, token)| token == READERS);
                    let marked =
                        spec.waiting && readers && self.mark(spec).await.map_err(acquire_error)?;
                    // Gone already (released or expired just now): try again soon.
                    let micros = remaining.and_then(|(left, _)| left).unwrap_or(0).max(0);
                    let mut ttl = Duration::from_micros(micros as u64);
                    if marked {
                        ttl = ttl.min(crate::wait::FAIR_QUEUE_TTL / 3);
                    }
                    Ok(Attempt::Busy { ttl: Some(ttl) })
                }
            }
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        if spec.kind != Kind::Exclusive {
            return Box::pin(self.renew_shared(spec));
        }
        Box::pin(async move {
            let params = vec![
                Value::from(micros(spec.lease)),
                Value::from(spec.name.as_bytes()),
                Value::from(spec.token),
            ];
            let renewed = self
                .run("the renewal", spec.name, move |conn| {
                    let params = params.clone();
                    Box::pin(async move {
                        let renew = conn.hot().await?.renew;
                        conn.exec_drop(&renew, positional(params)).await?;
                        Ok(conn.affected_rows())
                    })
                })
                .await?;
            Ok(renewed == 1)
        })
    }

    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        if specs.iter().any(|spec| spec.kind != Kind::Exclusive) {
            // A reader's share (or a permit) is renewed in a transaction of its own.
            return Box::pin(super::renew_each(self, specs));
        }
        Box::pin(async move {
            // One UPDATE per distinct lease (usually one), then one SELECT of what is still
            // ours: a lock still ours and unexpired after the UPDATE was renewed by it.
            let mut leases: Vec<i64> = specs.iter().map(|s| micros(s.lease)).collect();
            leases.sort_unstable();
            leases.dedup();
            let mut updates = Vec::new();
            for lease in leases {
                let mut params = vec![Value::from(lease)];
                let mut n = 0;
                for spec in specs.iter().filter(|s| micros(s.lease) == lease) {
                    params.push(Value::from(spec.name.as_bytes()));
                    params.push(Value::from(spec.token));
                    n += 1;
                }
                updates.push((self.sql.renew_many(n), params));
            }
            let mut check = Vec::with_capacity(specs.len() * 2);
            for spec in specs {
                check.push(Value::from(spec.name.as_bytes()));
                check.push(Value::from(spec.token));
            }
            let still_ours = self.sql.still_ours(specs.len());
            let renewed = self
                .run_with(
                    Trips::Many,
                    "the batched renewal",
                    specs[0].name,
                    move |conn| {
                        let (updates, check, still_ours) =
                            (updates.clone(), check.clone(), still_ours.clone());
                        Box::pin(async move {
                            for (statement, params) in updates {
                                conn.exec_drop(statement, positional(params)).await?;
                            }
                            let names: Vec<Vec<u8>> =
                                conn.exec(still_ours, positional(check)).await?;
                            Ok(names)
                        })
                    },
                )
                .await;
            match renewed {
                Ok(names) => {
                    let names: std::collections::HashSet<Vec<u8>> = names.into_iter().collect();
                    specs
                        .iter()
                        .map(|s| Ok(names.contains(s.name.as_bytes())))
                        .collect()
                }
                Err(error) => vec![Err(error.to_string()); specs.len()],
            }
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        if hold.kind != Kind::Exclusive {
            return Box::pin(async move {
                let (live, left) = self.release_shared(name, token, hold.kind).await?;
                // The last reader's departure frees the lock; every permit's frees a permit.
                if !left || (live && hold.kind != Kind::Shared) {
                    self.hub.notify(name);
                }
                Ok(Released::after_tries(live, false))
            });
        }
        Box::pin(async move {
            if let Err(error) = self.unmark(name, token).await {
                tracing::debug!(%error, "distlock: mysql: a writer's mark stays until it lapses");
            }
            let params = vec![Value::from(name.as_bytes()), Value::from(token)];
            let tries = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let counted = Arc::clone(&tries);
            let released = self
                .run("the release", name, move |conn| {
                    let params = params.clone();
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Box::pin(async move {
                        let hot = conn.hot().await?;
                        conn.exec_drop(&hot.release, positional(params.clone()))
                            .await?;
                        if conn.affected_rows() == 1 {
                            return Ok(true);
                        }
                        // Our lease ran out and nobody took the row over: delete it anyway,
                        // but it was not held any more.
                        conn.exec_drop(&hot.release_expired, positional(params))
                            .await?;
                        Ok(false)
                    })
                })
                .await?;
            if released {
                self.hub.notify(name);
            }
            let retried = tries.load(std::sync::atomic::Ordering::Relaxed) > 1;
            Ok(Released::after_tries(released, retried))
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let name = spec.name;
        Box::pin(async move { Ok(self.hub.subscribe(name, || {})) })
    }
}

impl Admin for MysqlBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move { Ok(self.inspect_row(name).await?) })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let sql = Arc::clone(&self.sql);
            let params = vec![
                Value::from(like_pattern(prefix, pattern).into_bytes()),
                Value::from(u64::try_from(limit).unwrap_or(u64::MAX)),
            ];
            let rows = self
                .run("the listing", prefix, move |conn| {
                    let (sql, params) = (Arc::clone(&sql), params.clone());
                    Box::pin(async move {
                        conn.exec::<AdminRow, _, _>(sql.list.as_str(), positional(params))
                            .await
                    })
                })
                .await?;
            let mut entries = Vec::with_capacity(rows.len());
            for row in rows {
                entries.push(self.with_readers(entry(row)).await?);
            }
            Ok(entries)
        })
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            // No `DELETE … RETURNING` in MySQL: read the row, then delete exactly that holder's
            // row; if another holder took it in between, look again.
            for _ in 0..5 {
                let Some(found) = self.inspect_row(name).await? else {
                    return Ok(None);
                };
                let sql = Arc::clone(&self.sql);
                // Readers hold it: their row, and every share with it.
                let readers = !found.readers.is_empty();
                let token = match (&found.token, found.permits) {
                    (Some(token), _) => token.clone(),
                    (None, Some(limit)) => row_token(Kind::Permits(limit as u16)),
                    (None, None) => READERS.to_owned(),
                };
                let params = vec![Value::from(name.as_bytes()), Value::from(token)];
                let deleted = self
                    .run("the forced release", name, move |conn| {
                        let (sql, params) = (Arc::clone(&sql), params.clone());
                        Box::pin(async move {
                            conn.exec_drop(sql.force_release.as_str(), positional(params.clone()))
                                .await?;
                            let deleted = conn.affected_rows();
                            if readers {
                                let name = params[0].clone();
                                conn.exec_drop(
                                    sql.drop_shares.as_str(),
                                    positional(vec![name.clone(), name]),
                                )
                                .await?;
                            }
                            Ok(deleted)
                        })
                    })
                    .await?;
                if deleted == 1 {
                    self.hub.notify(name);
                    return Ok(Some(found));
                }
            }
            Err("the lock changed hands five times while being released; try again".into())
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let version = self
                .run("the version query", "", |conn| {
                    Box::pin(async move { conn.query_first::<String, _>("SELECT VERSION()").await })
                })
                .await?
                .unwrap_or_default();
            Ok(match version.split_once("-MariaDB") {
                Some((number, _)) => format!("MariaDB {number}"),
                None => format!("MySQL {version}"),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_backs_off_to_a_cap_with_jitter() {
        for _ in 0..1000 {
            let first = poll_pause(1);
            assert!(first >= Duration::from_millis(1) && first <= Duration::from_millis(2));
            let later = poll_pause(30);
            assert!(later >= Duration::from_millis(25) && later <= Duration::from_millis(50));
        }
        let draws: std::collections::HashSet<Duration> = (0..100).map(|_| poll_pause(9)).collect();
        assert!(draws.len() > 5, "jittered: {draws:?}");
    }

    #[test]
    fn batched_statements_have_a_pair_per_lock() {
        let settings = SqlSettings::from_url(
            "mysql://h/db?table=app.locks",
            &Default::default(),
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap()
        .0;
        let sql = Sql::new(&settings);
        assert!(sql.renew_many(3).ends_with("IN ((?, ?), (?, ?), (?, ?))"));
        assert!(sql.still_ours(1).contains("FROM `app`.`locks`"));
        assert_eq!(slot_of("lock:a", 4), slot_of("lock:a", 4));
    }
}

//! `postgres://` / `postgresql://`: locks as rows of a table in PostgreSQL.
//!
//! The classic database lock — a table whose primary key on the lock name makes a second
//! `INSERT` fail — with its flaws fixed:
//!
//! - **Expiry** by the database's clock: a row carries `expires_at = now() + lease`, and an
//!   acquisition takes over a row whose expiry has passed, so a crashed holder blocks nobody
//!   for longer than its lease. Renewal moves `expires_at` (many locks in one statement).
//! - **One atomic statement** per acquisition: `INSERT … ON CONFLICT (name) DO UPDATE … WHERE
//!   expired OR ours`, so there is no read-then-write race, no transaction stays open while
//!   the body runs, and no connection is pinned per held lock.
//! - **Owner checks**: release and renewal compare the owner token.
//! - **Waiting without polling**: a waiter flags the row it waits for, and the release runs
//!   `pg_notify(<table>, name)` in the same statement if the row is flagged (an uncontended
//!   release notifies nobody: notifying commits are serialized cluster-wide); each client
//!   keeps one `LISTEN` connection and wakes its waiters. A waiter that hears nothing retries
//!   when the holder's lease runs out.
//! - **Fencing**: a counter per lock name in `<table>_fences`, raised by the acquiring
//!   statement itself; it outlives the lock's row, so tokens keep rising across releases.
//!
//! Connections: a small pool (default 4, `pool_size`); tokio-postgres pipelines statements on
//! each, so a few connections serve many tasks. A connection that fails is replaced on next
//! use; statements are safe to repeat with the same token.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, NoTls, Statement};

use super::sql::{SqlSettings, holder_id, like_pattern, millis, slot_of};
use super::url::redact_url;
use super::{Admin, Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, Transient};
use crate::admin::{Entry, holder_from_record};
use crate::error::{BoxError, LockError};
use crate::notify::{CloseOnDrop, ReleaseHub, ReleaseSubscription};
use crate::runtime::{BoxFuture, Revived, RuntimeBound};

pub(crate) mod advisory;
mod statements;

use statements::Sql;

/// How often a statement that failed on a dropped connection or a timeout is retried on a
/// fresh connection (with the same token: every statement is safe to repeat).
const RETRIES: u32 = 2;

/// A connection's I/O half, which must be polled for the client to work.
type RawConnection =
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>;

/// A connection with its prepared statements.
struct Conn {
    client: Client,
    acquire: Statement,
    acquire_fenced: Statement,
    remaining: Statement,
    renew: Statement,
    renew_many: Statement,
    release: Statement,
    release_unmarked: Statement,
    release_quiet: Statement,
    read_acquire: Statement,
    read_renew: Statement,
    read_release: Statement,
    permit_acquire: Statement,
    mark: Statement,
    flag: Statement,
    /// Which connection this is (see [`PostgresBackend::invalidate`]).
    number: u64,
}

/// A pool slot: the connection, tied to the runtime whose task drives it.
type Slot = Option<RuntimeBound<Arc<Conn>>>;

pub(crate) struct PostgresBackend {
    config: tokio_postgres::Config,
    settings: SqlSettings,
    sql: Sql,
    /// `host pid N`, stored in each row this client takes.
    holder: String,
    url: String,
    slots: Vec<Mutex<Slot>>,
    connecting: Vec<tokio::sync::Mutex<()>>,
    connections_made: AtomicU64,
    listener: Revived<Listener>,
    /// The tokens of writers that may have marked a readers' row (see [`Self::mark`]): their
    /// release takes the mark back; every other writer's release is the plain delete. (A mark
    /// forgotten past 65,536 tokens lapses by itself within [`crate::wait::FAIR_QUEUE_TTL`].)
    marked: super::Remembered<65_536>,
    /// Names this client found held by another (see [`Backend::release`] below): their
    /// release goes straight to the statement that wakes waiters, which someone probably
    /// flagged; every other release tries the quiet `DELETE` first. A guess either way costs
    /// a round trip or a little server time, never a wrong answer.
    contended: super::Remembered<4096>,
}

/// A failed statement: the driver's error, or no reply within the response timeout.
#[derive(Debug)]
pub(crate) enum PgError {
    Driver(tokio_postgres::Error),
    TimedOut { what: &'static str, after: Duration },
    Unexpected(String),
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Driver(error) => f.write_str(&describe(error)),
            PgError::TimedOut { what, after } => {
                write!(
                    f,
                    "no reply to {what} within the response timeout ({after:?})"
                )
            }
            PgError::Unexpected(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PgError::Driver(error) => Some(error),
            _ => None,
        }
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(error: tokio_postgres::Error) -> PgError {
        PgError::Driver(error)
    }
}

impl PgError {
    /// Whether a new connection or a later try may succeed: the connection broke or timed
    /// out, the server is starting, shutting down or out of connections, or the statement lost
    /// a serialization conflict. Authentication, a missing database or table, a wrong column,
    /// a bad statement are permanent.
    fn is_transient(&self) -> bool {
        match self {
            PgError::TimedOut { .. } => true,
            PgError::Unexpected(_) => false,
            PgError::Driver(error) => match error.code() {
                Some(code) => {
                    let code = code.code();
                    code.starts_with("08") // connection exception
                        || code.starts_with("53") // insufficient resources (too many connections)
                        || code.starts_with("57P") // shutting down, cannot connect now
                        || code == SqlState::T_R_SERIALIZATION_FAILURE.code()
                        || code == SqlState::T_R_DEADLOCK_DETECTED.code()
                }
                // No SQLSTATE: an I/O error, a closed connection, a failed connect.
                None => {
                    error.is_closed()
                        || std::error::Error::source(error)
                            .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
                }
            },
        }
    }
}

/// The driver's error with its cause: the server's message and SQLSTATE when it sent one.
fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let mut text = format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; {detail}"));
        }
        return text;
    }
    match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

/// The driver's configuration from `driver_url` (its password-free form for messages): the
/// connect timeout set, `application_name` = `distlock` unless the URL names one.
fn driver_config(
    driver_url: &str,
    settings: &SqlSettings,
) -> Result<(tokio_postgres::Config, String), LockError> {
    let shown = redact_url(driver_url);
    let mut config: tokio_postgres::Config = driver_url
        .parse()
        .map_err(|e| LockError::Config(format!("invalid PostgreSQL URL {shown}: {e}")))?;
    config.connect_timeout(settings.connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("distlock");
    }
    Ok((config, shown))
}

/// A connection-time failure to `url` as an error that says what to check.
fn connect_error(config: &tokio_postgres::Config, url: &str, error: PgError) -> LockError {
    let hint = match &error {
        PgError::Driver(e) => match e.code() {
            Some(code) if *code == SqlState::INVALID_PASSWORD => {
                "authentication failed: check the user and password in the URL \
                 (postgres://user:password@host:port/database)"
                    .to_owned()
            }
            Some(code) if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
                "the server refuses this user from this host (see its pg_hba.conf), or the \
                 user does not exist"
                    .to_owned()
            }
            Some(code) if *code == SqlState::INVALID_CATALOG_NAME => format!(
                "the database {:?} does not exist: create it (`createdb`) or fix the \
                 URL's path",
                config.get_dbname().unwrap_or_default()
            ),
            Some(code) if *code == SqlState::CANNOT_CONNECT_NOW => {
                "the server is starting up or shutting down: try again".to_owned()
            }
            _ if describe(e).contains("refused") => {
                "connection refused: is PostgreSQL running at that address?".to_owned()
            }
            _ if e.as_db_error().is_none() && describe(e).contains("password") => {
                "the server asks for a password: put it in the URL \
                 (postgres://user:password@host:port/database)"
                    .to_owned()
            }
            _ => "the connection failed".to_owned(),
        },
        PgError::TimedOut { what, after } => format!(
            "{what} took longer than {after:?}: is the host reachable, and the server not \
             overloaded? (raise the builder's connect timeout for slow networks)"
        ),
        PgError::Unexpected(_) => "the connection failed".to_owned(),
    };
    LockError::Connect {
        url: url.to_owned(),
        reason: format!("{hint} ({error})"),
        source: Some(Box::new(error)),
    }
}

/// An acquisition's error: transient (retried while the request's `wait` lasts) or permanent.
fn acquire_error(error: PgError) -> BoxError {
    Transient::wrap_if(error.is_transient(), error)
}

impl PostgresBackend {
    /// Parses the URL, connects (bounded by the connect timeout), creates the tables if asked
    /// and missing, and checks their shape by preparing every statement.
    pub(crate) async fn connect(
        driver_url: &str,
        settings: SqlSettings,
    ) -> Result<Arc<PostgresBackend>, LockError> {
        let (config, shown) = driver_config(driver_url, &settings)?;
        let sql = Sql::new(&settings);
        let backend = Arc::new(PostgresBackend {
            config,
            sql,
            holder: holder_id(),
            url: shown,
            slots: (0..settings.pool_size).map(|_| Mutex::new(None)).collect(),
            connecting: (0..settings.pool_size)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            settings,
            connections_made: AtomicU64::new(0),
            listener: Revived::new(),
            marked: super::Remembered::default(),
            contended: super::Remembered::default(),
        });
        backend.prepare_tables().await?;
        // Every pooled connection is made now, in parallel, and prepares every statement: a
        // table of the wrong shape fails here, naming what is wrong, and the first locks do
        // not pay for connecting (authentication and preparing take several round trips).
        let connecting = (0..backend.slots.len()).map(|i| backend.reconnect(i));
        futures_util::future::try_join_all(connecting)
            .await
            .map_err(|e| backend.setup_error(e))?;
        Ok(backend)
    }

    /// Creates the tables if they are missing (unless the user's migrations own them).
    async fn prepare_tables(&self) -> Result<(), LockError> {
        if !self.settings.create_table {
            return Ok(());
        }
        let client = self.open().await.map_err(|e| self.connect_error(e))?;
        let created = self
            .timed_by(
                "creating the lock table",
                self.settings.connect_timeout,
                client.batch_execute(&self.sql.create),
            )
            .await;
        created.map_err(|e| match e {
            PgError::Driver(ref error)
                if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) =>
            {
                LockError::Connect {
                    url: self.url.clone(),
                    reason: format!(
                        "cannot create the lock table `{}`: the user may not create tables \
                         ({e}). Create it once with the DDL in the README (\"The lock table\") \
                         and connect with `create_table=false`",
                        self.settings.table
                    ),
                    source: Some(Box::new(e)),
                }
            }
            e => self.setup_error(e),
        })
    }

    /// Connects, bounded by the connect timeout; the caller drives the connection.
    async fn connect_raw(&self, what: &'static str) -> Result<(Client, RawConnection), PgError> {
        let limit = self.settings.connect_timeout;
        // The driver's own timeout covers the TCP connect; this one the whole handshake.
        match tokio::time::timeout(
            limit + Duration::from_millis(100),
            self.config.connect(NoTls),
        )
        .await
        {
            Ok(connected) => Ok(connected?),
            Err(_) => Err(PgError::TimedOut { what, after: limit }),
        }
    }

    /// Opens one connection and starts the task that drives it (it ends with the client).
    async fn open(&self) -> Result<Client, PgError> {
        let (client, connection) = self.connect_raw("the connection attempt").await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %describe(&error), "distlock: postgres connection ended");
            }
        });
        Ok(client)
    }

    /// A connection-time failure as an error that says what to check.
    fn connect_error(&self, error: PgError) -> LockError {
        connect_error(&self.config, &self.url, error)
    }

    /// A failure while setting up the table or its statements: a connection problem, or a
    /// table that exists with another shape.
    fn setup_error(&self, error: PgError) -> LockError {
        let shape = matches!(&error, PgError::Driver(e) if e.code().is_some_and(|code| {
            [
                SqlState::UNDEFINED_TABLE,
                SqlState::UNDEFINED_COLUMN,
                SqlState::DATATYPE_MISMATCH,
                SqlState::INVALID_COLUMN_REFERENCE,
                SqlState::WRONG_OBJECT_TYPE,
                SqlState::UNDEFINED_FUNCTION,
            ]
            .contains(code)
        }));
        if !shape {
            return self.connect_error(error);
        }
        if matches!(&error, PgError::Driver(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE)) {
            return LockError::Connect {
                url: self.url.clone(),
                reason: format!(
                    "the lock table `{}` (or `{}`) does not exist ({error}), and \
                     `create_table=false` says not to create it: create both with the DDL in \
                     the README (\"The lock table\"), or let distlock create them",
                    self.settings.table,
                    self.settings.fence_table()
                ),
                source: Some(Box::new(error)),
            };
        }
        LockError::Connect {
            url: self.url.clone(),
            reason: format!(
                "the lock table `{}` (or `{}`) does not have the shape distlock needs: {error}. \
                 Create it with the DDL in the README (\"The lock table\"), or name another \
                 table (`table=` in the URL, or the builder's `.table(…)`)",
                self.settings.table,
                self.settings.fence_table()
            ),
            source: Some(Box::new(error)),
        }
    }

    /// Runs `future` bounded by the response timeout.
    async fn timed<T>(
        &self,
        what: &'static str,
        future: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        self.timed_by(what, self.settings.response_timeout, future)
            .await
    }

    /// Runs `future` bounded by `limit`.
    async fn timed_by<T>(
        &self,
        what: &'static str,
        limit: Duration,
        future: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        match tokio::time::timeout(limit, future).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(PgError::TimedOut { what, after: limit }),
        }
    }

    fn slot(&self, i: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.slots[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self, i: usize) -> Option<Arc<Conn>> {
        let slot = self.slot(i);
        let bound = slot.as_ref()?;
        (bound.is_alive() && !bound.get().client.is_closed()).then(|| Arc::clone(bound.get()))
    }

    /// The pooled connection for lock `name`, made on the caller's runtime when its slot is
    /// empty, broken, or was made on a runtime that has shut down.
    ///
    /// Every statement about one lock goes through the same connection, which runs them in the
    /// order they were sent: the release an abandoned acquisition sends in the background can
    /// never overtake that acquisition. Different locks spread over the pool.
    async fn connection(&self, name: &str) -> Result<Arc<Conn>, PgError> {
        let i = slot_of(name, self.slots.len());
        match self.live(i) {
            Some(conn) => Ok(conn),
            None => Box::pin(self.reconnect(i)).await,
        }
    }

    async fn reconnect(&self, i: usize) -> Result<Arc<Conn>, PgError> {
        let _one_at_a_time = self.connecting[i].lock().await;
        if let Some(conn) = self.live(i) {
            return Ok(conn);
        }
        let client = self.open().await?;
        // Sent together: the connection pipelines them, one round trip for all.
        let lock_params = [Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT];
        let acquiring = futures_util::future::try_join4(
            client.prepare_typed(&self.sql.acquire, &lock_params),
            client.prepare_typed(&self.sql.acquire_fenced, &lock_params),
            client.prepare_typed(&self.sql.remaining, &[Type::TEXT]),
            client.prepare_typed(&self.sql.release_unmarked, &[Type::TEXT, Type::TEXT]),
        );
        let prepared = futures_util::future::try_join4(
            acquiring,
            client.prepare_typed(&self.sql.renew, &[Type::TEXT, Type::TEXT, Type::INT8]),
            client.prepare_typed(
                &self.sql.renew_many,
                &[Type::TEXT_ARRAY, Type::TEXT_ARRAY, Type::INT8_ARRAY],
            ),
            client.prepare_typed(&self.sql.release, &[Type::TEXT, Type::TEXT]),
        );
        let reading = futures_util::future::try_join5(
            client.prepare_typed(&self.sql.read_acquire, &lock_params),
            client.prepare_typed(
                &self.sql.read_renew,
                &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT],
            ),
            client.prepare_typed(
                &self.sql.read_release,
                &[Type::TEXT, Type::TEXT, Type::TEXT],
            ),
            futures_util::future::try_join(
                client.prepare_typed(&self.sql.mark, &[Type::TEXT, Type::TEXT, Type::INT8]),
                client.prepare_typed(&self.sql.flag, &[Type::TEXT]),
            ),
            client.prepare_typed(
                &self.sql.permit_acquire,
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::TEXT,
                    Type::INT8,
                    Type::BOOL,
                ],
            ),
        );
        let prepared = futures_util::future::try_join3(
            prepared,
            reading,
            client.prepare_typed(&self.sql.release_quiet, &[Type::TEXT, Type::TEXT]),
        );
        // Part of connecting: bounded by the connect timeout (a busy server or another client
        // creating the tables can hold it up for longer than one statement may take).
        let (
            ((acquire, acquire_fenced, remaining, release_unmarked), renew, renew_many, release),
            (read_acquire, read_renew, read_release, (mark, flag), permit_acquire),
            release_quiet,
        ) = self
            .timed_by(
                "preparing the lock statements",
                self.settings.connect_timeout,
                prepared,
            )
            .await?;
        let conn = Arc::new(Conn {
            client,
            acquire,
            acquire_fenced,
            remaining,
            renew,
            renew_many,
            release,
            release_unmarked,
            release_quiet,
            read_acquire,
            read_renew,
            read_release,
            permit_acquire,
            mark,
            flag,
            number: self.connections_made.fetch_add(1, Ordering::Relaxed),
        });
        *self.slot(i) = Some(RuntimeBound::new(Arc::clone(&conn)));
        tracing::debug!(url = %self.url, slot = i, "distlock: connected to postgres");
        Ok(conn)
    }

    /// Forgets connection `number` so its slot reconnects, unless it was replaced already.
    fn invalidate(&self, number: u64) {
        for i in 0..self.slots.len() {
            let mut slot = self.slot(i);
            if slot.as_ref().is_some_and(|b| b.get().number == number) {
                *slot = None;
            }
        }
    }

    /// Runs `op` on a pooled connection, bounded by the response timeout; a transient failure
    /// drops that connection and retries on another (the statements are idempotent per token).
    async fn run<T, F, Fut>(&self, what: &'static str, name: &str, mut op: F) -> Result<T, PgError>
    where
        F: FnMut(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut attempt = 0;
        loop {
            let result = match self.connection(name).await {
                Ok(conn) => {
                    let number = conn.number;
                    let outcome = self.timed(what, op(conn)).await;
                    if outcome.as_ref().is_err_and(PgError::is_transient) {
                        self.invalidate(number);
                    }
                    outcome
                }
                Err(error) => Err(error),
            };
            match result {
                Err(error) if attempt < RETRIES && error.is_transient() => {
                    attempt += 1;
                    tracing::debug!(%error, attempt, "distlock: postgres statement failed, retrying");
                    Box::pin(tokio::time::sleep(super::retry_pause(attempt))).await;
                }
                other => return other,
            }
        }
    }

    /// The live `LISTEN` connection, started on the caller's runtime when needed.
    async fn listener(&self) -> Result<Arc<Listener>, PgError> {
        self.listener
            .get(Listener::is_alive, || Box::pin(Listener::start(self)))
            .await
    }
}

impl PostgresBackend {
    /// A reader's attempt (see `statements::Sql::read_acquire`).
    async fn acquire_shared(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let lease = millis(spec.lease);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&spec.name, &spec.token, &lease, &self.holder];
        let row = self
            .run("the read acquisition", spec.name, |conn| async move {
                conn.client.query_one(&conn.read_acquire, &params).await
            })
            .await
            .map_err(acquire_error)?;
        let get = |i| -> Result<Option<i64>, BoxError> {
            row.try_get(i).map_err(|e| acquire_error(PgError::from(e)))
        };
        let taken: bool = row
            .try_get(0)
            .map_err(|e| acquire_error(PgError::from(e)))?;
        if taken {
            return Ok(Attempt::Acquired {
                fencing_token: spec
                    .fencing
                    .then(|| get(1).ok().flatten().unwrap_or(0) as u64),
            });
        }
        let row_token: Option<String> = row
            .try_get(4)
            .map_err(|e| acquire_error(PgError::from(e)))?;
        if let Some(held) = row_token.as_deref().and_then(semaphore_limit) {
            return Err(super::Refused::kind(Some(held), spec.kind));
        }
        if spec.waiting
            && row_token
                .as_deref()
                .is_some_and(|t| t != super::sql::READERS)
        {
            // A writer holds it: flag its row, so that its release wakes this reader.
            let flagged = self
                .run("flagging the writer's row", spec.name, |conn| async move {
                    conn.client.query_opt(&conn.flag, &[&spec.name]).await
                })
                .await
                .map_err(acquire_error)?;
            let Some(flagged) = flagged else {
                return Ok(busy(None)); // released or changed meanwhile: ask again at once
            };
            return Ok(busy(
                flagged.try_get(0).map_err(|e| acquire_error(e.into()))?,
            ));
        }
        // Busy: until the holder's lease ends, or sooner when a waiting writer's mark lapses.
        let ttl_ms = match (get(2)?, get(3)?) {
            (Some(row), Some(mark)) => Some(row.min(mark)),
            (row, mark) => row.or(mark),
        };
        Ok(busy(ttl_ms))
    }

    /// A semaphore's permit (see `statements::Sql::permit_acquire`).
    async fn acquire_permit(&self, spec: LockSpec<'_>, limit: u16) -> Result<Attempt, BoxError> {
        let lease = millis(spec.lease);
        let row_token = permits_token(limit);
        let limit_param = i64::from(limit);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &spec.name,
            &spec.token,
            &lease,
            &row_token,
            &limit_param,
            &spec.fencing,
        ];
        let row = self
            .run("the permit's acquisition", spec.name, |conn| async move {
                conn.client.query_one(&conn.permit_acquire, &params).await
            })
            .await
            .map_err(acquire_error)?;
        let failed = |e| acquire_error(PgError::from(e));
        if row.try_get::<_, bool>(0).map_err(failed)? {
            let fence: Option<i64> = row.try_get(1).map_err(failed)?;
            return Ok(Attempt::Acquired {
                fencing_token: spec.fencing.then(|| fence.unwrap_or(0) as u64),
            });
        }
        let held: Option<String> = row.try_get(2).map_err(failed)?;
        match held.as_deref() {
            // Free, or taken, after the statement's snapshot: ask again at once.
            None => Ok(busy(None)),
            Some(held) if held == row_token => Ok(busy(row.try_get(3).map_err(failed)?)),
            Some(held) => Err(match semaphore_limit(held) {
                Some(held) => super::Refused::limit(held, limit),
                None => super::Refused::kind(None, spec.kind),
            }),
        }
    }

    /// A waiting writer's busy attempt: marks the readers holding the row (keeping new
    /// readers out), and asks again in time to keep the mark.
    async fn mark(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let mark = millis(crate::wait::FAIR_QUEUE_TTL);
        // Noted before the statement is sent: a mark whose answer is lost is taken back too.
        self.marked.insert(spec.token);
        let row = self
            .run("marking the readers", spec.name, |conn| async move {
                conn.client
                    .query_opt(&conn.mark, &[&spec.name, &spec.token, &mark])
                    .await
            })
            .await
            .map_err(acquire_error)?;
        let Some(row) = row else {
            return Ok(busy(None)); // released meanwhile: ask again at once
        };
        let ttl_ms: Option<i64> = row.try_get(0).map_err(|e| acquire_error(e.into()))?;
        let marked: bool = row.try_get(1).map_err(|e| acquire_error(e.into()))?;
        let token: Option<String> = row.try_get(2).map_err(|e| acquire_error(e.into()))?;
        if let Some(held) = token.as_deref().and_then(semaphore_limit)
            && ttl_ms.is_some_and(|ms| ms > 0)
        {
            return Err(super::Refused::kind(Some(held), spec.kind));
        }
        Ok(busy(match (ttl_ms, marked) {
            (Some(ms), true) => Some(ms.min(mark / 3)),
            (ttl, _) => ttl,
        }))
    }
}

/// A busy answer with the holder's remaining lease. No row (released or taken just now, after
/// the statement's snapshot): retry soon.
/// A row of the admin statements: (name, token, holder, acquired ms, remaining ms, fence).
fn entry(row: &tokio_postgres::Row) -> Entry {
    let acquired: Option<i64> = row.get(3);
    let remaining: Option<i64> = row.get(4);
    let fence: Option<i64> = row.get(5);
    let token: Option<String> = row.get(1);
    let record: &str = row.get(2);
    // A writer's record may end with the flag of a waiter (`statements::WAITED`).
    let record = record.strip_suffix("\n?").unwrap_or(record);
    let mut entry = Entry {
        name: row.get(0),
        token: token.clone(),
        holder: holder_from_record(record, acquired.map(|ms| ms.max(0) as u64)),
        ttl: remaining.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        fencing_token: fence.map(|f| f as u64),
        waiters: None,
        readers: Vec::new(),
        permits: None,
    };
    let permits = token.as_deref().and_then(semaphore_limit);
    if permits.is_some() || token.as_deref() == Some(super::sql::READERS) {
        super::sql::readers_entry(&mut entry, record, remaining.unwrap_or(0));
        entry.permits = permits.map(u32::from);
    }
    entry
}

/// The token of the row a share of `kind` lives in: `readers`, or a semaphore's `permits:<n>`;
/// `None` for a plain lock (its row holds its owner's token).
fn row_token(kind: Kind) -> Option<String> {
    match kind {
        Kind::Exclusive => None,
        Kind::Shared => Some(super::sql::READERS.to_owned()),
        Kind::Permits(limit) => Some(permits_token(limit)),
    }
}

/// The token of a row holding the permits of a semaphore of `limit`.
fn permits_token(limit: u16) -> String {
    format!("{}{limit}", super::sql::PERMITS)
}

/// The limit of a semaphore whose row holds `token`; `None` for a lock's row.
fn semaphore_limit(token: &str) -> Option<u16> {
    token.strip_prefix(super::sql::PERMITS)?.parse().ok()
}

fn busy(ttl_ms: Option<i64>) -> Attempt {
    Attempt::Busy {
        ttl: Some(Duration::from_millis(ttl_ms.unwrap_or(0).max(0) as u64)),
    }
}

/// One `LISTEN` connection per client. Its driver task turns notifications (payload: the lock
/// name) into hub wake-ups; when the connection dies the hub is closed, which wakes every
/// waiter so it retries and listens again through a new connection.
struct Listener {
    hub: Arc<ReleaseHub>,
    dead: Arc<AtomicBool>,
    runtime: RuntimeBound<()>,
    /// Keeps the connection open.
    _client: Client,
}

impl Listener {
    async fn start(backend: &PostgresBackend) -> Result<Arc<Listener>, PgError> {
        let (client, mut connection) = backend.connect_raw("the LISTEN connection").await?;
        let hub = ReleaseHub::new(None);
        let dead = Arc::new(AtomicBool::new(false));
        let closer = CloseOnDrop {
            hub: Arc::clone(&hub),
            dead: Arc::clone(&dead),
        };
        tokio::spawn(async move {
            let _closer = closer;
            let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => _closer.hub.notify(n.payload()),
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(error = %describe(&error), "distlock: postgres LISTEN connection ended");
                        break;
                    }
                }
            }
        });
        backend
            .timed("LISTEN", client.batch_execute(&backend.sql.listen))
            .await?;
        Ok(Arc::new(Listener {
            hub,
            dead,
            runtime: RuntimeBound::new(()),
            _client: client,
        }))
    }

    fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && self.runtime.is_alive()
    }
}

/// The lock table: every kind, writers' marks, woken by `NOTIFY`.
const CAPABILITIES: Capabilities = Capabilities {
    marks_waiting_writers: true,
    ..Capabilities::every_kind("postgres")
};

impl Backend for PostgresBackend {
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
            let lease = millis(spec.lease);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&spec.name, &spec.token, &lease, &self.holder];
            if !spec.fencing {
                let taken = self
                    .run("the acquisition", spec.name, |conn| async move {
                        conn.client.execute(&conn.acquire, &params).await
                    })
                    .await
                    .map_err(acquire_error)?;
                if taken == 1 {
                    return Ok(Attempt::Acquired {
                        fencing_token: None,
                    });
                }
                self.contended.insert(spec.name);
                if spec.waiting {
                    return self.mark(spec).await;
                }
                let remaining = self
                    .run("reading the holder's lease", spec.name, |conn| async move {
                        conn.client.query_opt(&conn.remaining, &[&spec.name]).await
                    })
                    .await
                    .map_err(acquire_error)?;
                let ttl_ms: Option<i64> = match remaining {
                    Some(row) => row.try_get(0).map_err(|e| acquire_error(e.into()))?,
                    None => None,
                };
                return Ok(busy(ttl_ms));
            }
            let row = self
                .run("the acquisition", spec.name, |conn| async move {
                    conn.client.query_one(&conn.acquire_fenced, &params).await
                })
                .await
                .map_err(acquire_error)?;
            let taken: bool = row.try_get(0).map_err(|e| acquire_error(e.into()))?;
            if taken {
                let fence: Option<i64> = row.try_get(1).map_err(|e| acquire_error(e.into()))?;
                let Some(fence) = fence else {
                    return Err(PgError::Unexpected(
                        "the acquisition returned no fencing token".into(),
                    )
                    .into());
                };
                return Ok(Attempt::Acquired {
                    fencing_token: Some(fence as u64),
                });
            }
            self.contended.insert(spec.name);
            if spec.waiting {
                return self.mark(spec).await;
            }
            let ttl_ms: Option<i64> = row.try_get(2).map_err(|e| acquire_error(e.into()))?;
            Ok(busy(ttl_ms))
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let lease = millis(spec.lease);
            let row_token = row_token(spec.kind);
            let renewed = self
                .run("the renewal", spec.name, |conn| {
                    let row_token = row_token.as_deref();
                    async move {
                        match row_token {
                            Some(row) => {
                                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                                    [&spec.name, &spec.token, &lease, &row];
                                conn.client.execute(&conn.read_renew, &params).await
                            }
                            None => {
                                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                                    [&spec.name, &spec.token, &lease];
                                conn.client.execute(&conn.renew, &params).await
                            }
                        }
                    }
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
            // A reader's share is renewed in its readers' row: one statement each.
            return Box::pin(super::renew_each(self, specs));
        }
        Box::pin(async move {
            let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
            let tokens: Vec<&str> = specs.iter().map(|s| s.token).collect();
            let leases: Vec<i64> = specs.iter().map(|s| millis(s.lease)).collect();
            let renewed = self
                .run("the batched renewal", specs[0].name, |conn| {
                    let (names, tokens, leases) = (&names, &tokens, &leases);
                    async move {
                        conn.client
                            .query(&conn.renew_many, &[names, tokens, leases])
                            .await
                    }
                })
                .await;
            match renewed {
                Ok(rows) => {
                    let renewed: std::collections::HashSet<String> =
                        rows.iter().filter_map(|r| r.try_get(0).ok()).collect();
                    specs.iter().map(|s| Ok(renewed.contains(s.name))).collect()
                }
                Err(error) => vec![Err(error.to_string()); specs.len()],
            }
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        let row_token = row_token(hold.kind);
        let marked = row_token.is_none() && self.marked.remove(token);
        Box::pin(async move {
            let mut tries = 0;
            if row_token.is_none() && !marked && !self.contended.contains(name) {
                // The common case first: ours, live, no one waiting → one `DELETE` that
                // returns nothing. Anything else (0 rows) is the full statement's to decide.
                // A name found busy before likely has a waiter: the full statement at once.
                let deleted = self
                    .run("the release", name, |conn| {
                        tries += 1;
                        async move {
                            conn.client
                                .execute(&conn.release_quiet, &[&name, &token])
                                .await
                        }
                    })
                    .await?;
                if deleted == 1 {
                    return Ok(Released::Deleted);
                }
                // A retried quiet try may have deleted the row unseen: `tries` then stays
                // above 1 below, so finding nothing there is ambiguous, not "not ours".
                tries -= 1;
            }
            let released = self
                .run("the release", name, |conn| {
                    tries += 1;
                    let row_token = row_token.as_deref();
                    async move {
                        match row_token {
                            Some(row) => {
                                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                                    [&name, &token, &row];
                                conn.client.query(&conn.read_release, &params).await
                            }
                            None if marked => {
                                conn.client.query(&conn.release, &[&name, &token]).await
                            }
                            None => {
                                conn.client
                                    .query(&conn.release_unmarked, &[&name, &token])
                                    .await
                            }
                        }
                    }
                })
                .await?;
            // A writer's release: a `true` row when the lock was ours (a `false` one: only its
            // mark went); a reader's: one row saying whether its share was live.
            let deleted = released
                .first()
                .is_some_and(|row| row.try_get::<_, bool>(0).unwrap_or(false));
            Ok(Released::after_tries(deleted, tries > 1))
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let name = spec.name;
        Box::pin(async move {
            let listener = self.listener().await?;
            // The connection has listened since it started: a release from now on is heard.
            Ok(listener.hub.subscribe(name, || {}))
        })
    }
}

impl Admin for PostgresBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let rows = self
                .run("the inspection", name, |conn| async move {
                    conn.client.query(&self.sql.inspect, &[&name]).await
                })
                .await?;
            Ok(rows.first().map(entry))
        })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let like = like_pattern(prefix, pattern);
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = self
                .run("the listing", prefix, |conn| {
                    let like = &like;
                    async move { conn.client.query(&self.sql.list, &[like, &limit]).await }
                })
                .await?;
            Ok(rows.iter().map(entry).collect())
        })
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let rows = self
                .run("the forced release", name, |conn| async move {
                    conn.client.query(&self.sql.force_release, &[&name]).await
                })
                .await?;
            Ok(rows.first().map(entry))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let rows = self
                .run("the version query", "", |conn| async move {
                    conn.client.query("SHOW server_version", &[]).await
                })
                .await?;
            let version: String = rows.first().map(|r| r.get(0)).unwrap_or_default();
            Ok(format!("PostgreSQL {version}"))
        })
    }
}

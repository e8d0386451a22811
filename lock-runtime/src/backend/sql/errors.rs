//! Failed statements on the SQL stores: one error over either driver's, which failures a retry
//! may cure, and what a failure to connect or to set up the tables says to check.

use std::fmt;
use std::time::Duration;

use super::SqlSettings;
use crate::backend::{Transient, retry_pause};
use crate::error::{BoxError, LockError};

/// How often a statement that failed on a dropped connection or a timeout is retried on a
/// fresh connection (with the same token: every statement is safe to repeat).
pub(crate) const STATEMENT_RETRIES: u32 = 2;

/// A failed statement: the driver's error, or no reply within the response timeout.
#[derive(Debug)]
pub(crate) enum SqlError<E> {
    Driver(E),
    TimedOut { what: &'static str, after: Duration },
    Unexpected(String),
}

/// A driver's error, as [`SqlError`] classifies it.
pub(crate) trait DriverError: std::error::Error + Send + Sync + 'static {
    /// Whether a new connection or a later try may succeed.
    fn is_transient(&self) -> bool;
}

impl<E: DriverError> SqlError<E> {
    /// Whether a new connection or a later try may succeed: a timeout may, an unexpected answer
    /// may not; the driver's error as the driver says.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            SqlError::TimedOut { .. } => true,
            SqlError::Unexpected(_) => false,
            SqlError::Driver(error) => error.is_transient(),
        }
    }
}

impl<E: DriverError> SqlError<E>
where
    SqlError<E>: fmt::Display,
{
    /// Whether the statement that failed with this error, retried `attempt` times so far, is
    /// tried again: a transient failure, at most [`STATEMENT_RETRIES`] times, after a pause
    /// (the retry counted in `attempt`).
    pub(crate) async fn retried(&self, attempt: &mut u32, store: &str) -> bool {
        if *attempt < STATEMENT_RETRIES && self.is_transient() {
            *attempt += 1;
            tracing::debug!(error = %self, attempt = *attempt, "distlock: {store} statement failed, retrying");
            Box::pin(tokio::time::sleep(retry_pause(*attempt))).await;
            return true;
        }
        false
    }
}

impl<E: DriverError> std::error::Error for SqlError<E>
where
    SqlError<E>: fmt::Display,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SqlError::Driver(error) => Some(error),
            _ => None,
        }
    }
}

/// An acquisition's error: transient (retried while the request's `wait` lasts) or permanent.
pub(crate) fn acquire_error<E: DriverError>(error: SqlError<E>) -> BoxError
where
    SqlError<E>: fmt::Display,
{
    Transient::wrap_if(error.is_transient(), error)
}

/// The shared results' table is missing and `create_table=false` leaves it to the user: what
/// to create (`ddl`).
pub(crate) fn missing_share_table(ddl: &str) -> BoxError {
    format!(
        "the shared results' table is missing, and `create_table=false` leaves it to you: \
         create it once ({})",
        ddl.replace('\n', " ")
    )
    .into()
}

/// Runs `future` bounded by `limit`.
///
/// A combinator, not an `async fn`, which would keep `future` twice in its state (the
/// argument, and the timeout awaiting it).
pub(crate) fn timed<T, E>(
    what: &'static str,
    limit: Duration,
    future: impl Future<Output = Result<T, E>>,
) -> impl Future<Output = Result<T, SqlError<E>>> {
    use futures_util::FutureExt as _;
    tokio::time::timeout(limit, future).map(move |answer| match answer {
        Ok(result) => result.map_err(SqlError::Driver),
        Err(_) => Err(SqlError::TimedOut { what, after: limit }),
    })
}

/// What to check when the connection attempt took too long.
pub(crate) fn timed_out_hint(what: &str, after: Duration) -> String {
    format!(
        "{what} took longer than {after:?}: is the host reachable, and the server not \
         overloaded? (raise the builder's connect timeout for slow networks)"
    )
}

/// What to check when the server refused the user's password; `scheme`: the URL's.
pub(crate) fn authentication_hint(scheme: &str) -> String {
    format!(
        "authentication failed: check the user and password in the URL \
         ({scheme}://user:password@host:port/database)"
    )
}

/// What to check when the URL's database does not exist; `create`: how to make one.
pub(crate) fn missing_database_hint(database: &str, create: &str) -> String {
    format!("the database {database:?} does not exist: create it ({create}) or fix the URL's path")
}

/// What to check when the connection was refused; `server`: the database's name.
pub(crate) fn refused_hint(server: &str) -> String {
    format!("connection refused: is {server} running at that address?")
}

/// Any other connection-time failure.
pub(crate) const CONNECTION_FAILED: &str = "the connection failed";

/// A connection-time failure to `url` as an error that says what to check (`hint`).
pub(crate) fn connect_failure<E: DriverError>(
    url: &str,
    hint: String,
    error: SqlError<E>,
) -> LockError
where
    SqlError<E>: fmt::Display,
{
    LockError::Connect {
        url: url.to_owned(),
        reason: format!("{hint} ({error})"),
        source: Some(Box::new(error)),
    }
}

/// What is wrong with the tables, as a failure to set them up shows it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TableTrouble {
    /// The tables do not exist, and `create_table=false` says not to create them.
    Missing,
    /// A table exists with another shape (a column missing or of another type).
    Shape,
    /// The user may not create tables.
    CannotCreate,
}

/// A failure to set up the tables of `settings` on the server at `url`, with the fix.
pub(crate) fn table_error<E: DriverError>(
    url: &str,
    settings: &SqlSettings,
    trouble: TableTrouble,
    error: SqlError<E>,
) -> LockError
where
    SqlError<E>: fmt::Display,
{
    let (table, fences) = (&settings.table, settings.fence_table());
    let reason = match trouble {
        TableTrouble::Missing => format!(
            "the lock table `{table}` (or `{fences}`) does not exist ({error}), and \
             `create_table=false` says not to create it: create both with the DDL in the \
             distlock's guide (`distlock::guide::postgres` or `::mysql`, \"The lock table\"), or let distlock create them"
        ),
        TableTrouble::Shape => format!(
            "the lock table `{table}` (or `{fences}`) does not have the shape distlock \
             needs: {error}. Create it with the DDL in distlock's guide (`distlock::guide::postgres` or `::mysql`, \"The lock table\"), or \
             name another table (`table=` in the URL, or the builder's `.table(…)`)"
        ),
        TableTrouble::CannotCreate => format!(
            "cannot create the lock table `{table}`: the user may not create tables \
             ({error}). Create it once with the DDL in distlock's guide (`distlock::guide::postgres` or `::mysql`, \"The lock table\") and \
             connect with `create_table=false`"
        ),
    };
    LockError::Connect {
        url: url.to_owned(),
        reason,
        source: Some(Box::new(error)),
    }
}

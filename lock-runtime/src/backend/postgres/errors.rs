//! The PostgreSQL driver's errors: how they read, which of them a retry may cure, and what a
//! failure to connect or to set up the tables says to check.

use std::fmt;

use tokio_postgres::error::SqlState;

use super::PostgresBackend;
use crate::backend::sql::SqlSettings;
use crate::backend::sql::errors::{
    CONNECTION_FAILED, DriverError, SqlError, TableTrouble, authentication_hint, connect_failure,
    missing_database_hint, refused_hint, table_error, timed_out_hint,
};
use crate::error::LockError;
use crate::url::redact_url;

/// A failed statement: the driver's error, or no reply within the response timeout.
pub(crate) type PgError = SqlError<tokio_postgres::Error>;

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

impl From<tokio_postgres::Error> for PgError {
    fn from(error: tokio_postgres::Error) -> PgError {
        PgError::Driver(error)
    }
}

impl DriverError for tokio_postgres::Error {
    /// Whether a new connection or a later try may succeed: the connection broke or timed
    /// out, the server is starting, shutting down or out of connections, or the statement lost
    /// a serialization conflict. Authentication, a missing database or table, a wrong column,
    /// a bad statement are permanent.
    fn is_transient(&self) -> bool {
        let error = self;
        match error.code() {
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
        }
    }
}

/// What a prepared statement lost between transactions means.
const POOLER_HINT: &str = ". A connection pooler in transaction mode (PgBouncer's \
    `pool_mode = transaction`, RDS Proxy, Supavisor) seems to be between: add \
    `pooler=transaction` to the URL";

/// The driver's error with its cause: the server's message and SQLSTATE when it sent one.
pub(super) fn describe(error: &tokio_postgres::Error) -> String {
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
        if [
            SqlState::INVALID_SQL_STATEMENT_NAME,
            SqlState::DUPLICATE_PSTATEMENT,
        ]
        .contains(db.code())
        {
            text.push_str(POOLER_HINT);
        }
        return text;
    }
    match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

/// The driver's configuration from `driver_url` and the TLS connector its `sslmode` and files
/// ask for (its password-free form for messages): the connect timeout set,
/// `application_name` = `distlock` unless the URL names one.
pub(super) fn driver_config(
    driver_url: &str,
    settings: &SqlSettings,
) -> Result<(tokio_postgres::Config, super::tls::MakeTls, String), LockError> {
    let (driver_url, mode, tls) = super::tls::secure(driver_url, settings.tls.as_ref())?;
    let shown = redact_url(&driver_url);
    let mut config: tokio_postgres::Config = driver_url
        .parse()
        .map_err(|e| LockError::Config(format!("invalid PostgreSQL URL {shown}: {e}")))?;
    config.ssl_mode(mode);
    config.connect_timeout(settings.connect_timeout);
    if config.get_application_name().is_none() {
        config.application_name("distlock");
    }
    Ok((config, tls, shown))
}

/// A connection-time failure to `url` as an error that says what to check.
pub(super) fn connect_error(
    config: &tokio_postgres::Config,
    url: &str,
    error: PgError,
) -> LockError {
    let mut tls = crate::tls::explain(&crate::tls::chain(&error), "sslrootcert");
    let hint = match &error {
        PgError::Driver(e) => match e.code() {
            Some(code) if *code == SqlState::INVALID_PASSWORD => authentication_hint("postgres"),
            Some(code)
                if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                    && describe(e).contains("no encryption") =>
            {
                "the server accepts TLS connections only (its pg_hba.conf has `hostssl` lines \
                 for this host): connect with `sslmode=verify-full` (and \
                 `sslrootcert=/path/ca.pem` for a private CA)"
                    .to_owned()
            }
            Some(code)
                if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                    && describe(e).contains("certificate") =>
            {
                "the server wants a client certificate it trusts (pg_hba's `cert` method or \
                 `clientcert=`): give `sslcert=` and `sslkey=`"
                    .to_owned()
            }
            Some(code) if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
                "the server refuses this user from this host (see its pg_hba.conf), or the \
                 user does not exist"
                    .to_owned()
            }
            Some(code) if *code == SqlState::INVALID_CATALOG_NAME => {
                missing_database_hint(config.get_dbname().unwrap_or_default(), "`createdb`")
            }
            Some(code) if *code == SqlState::CANNOT_CONNECT_NOW => {
                "the server is starting up or shutting down: try again".to_owned()
            }
            _ if describe(e).contains("unsupported startup parameter") => {
                "a connection pooler (PgBouncer) answered, and it refuses the `options` startup \
                 parameter that `mode=advisory` sends: an advisory lock belongs to a server \
                 session, which a pooler in transaction mode hands to others. Give \
                 `mode=advisory` a URL of the server itself or of a pool in session mode, or \
                 use the lock table through the pooler (leave out `mode=advisory`, add \
                 `pooler=transaction`)"
                    .to_owned()
            }
            _ if tls.is_some() => tls.take().unwrap_or_default(),
            _ if describe(e).contains("refused") => refused_hint("PostgreSQL"),
            _ if e.as_db_error().is_none() && describe(e).contains("password") => {
                "the server asks for a password: put it in the URL \
                 (postgres://user:password@host:port/database)"
                    .to_owned()
            }
            _ => CONNECTION_FAILED.to_owned(),
        },
        PgError::TimedOut { what, after } => timed_out_hint(what, *after),
        PgError::Unexpected(_) => CONNECTION_FAILED.to_owned(),
    };
    connect_failure(url, hint, error)
}

impl PostgresBackend {
    /// A connection-time failure as an error that says what to check.
    pub(super) fn connect_error(&self, error: PgError) -> LockError {
        connect_error(&self.config, &self.url, error)
    }

    /// A failure while setting up the table or its statements: a connection problem, or a
    /// table that exists with another shape.
    pub(super) fn setup_error(&self, error: PgError) -> LockError {
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
        let trouble = if matches!(&error, PgError::Driver(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE))
        {
            TableTrouble::Missing
        } else {
            TableTrouble::Shape
        };
        table_error(&self.url, &self.settings, trouble, error)
    }
}

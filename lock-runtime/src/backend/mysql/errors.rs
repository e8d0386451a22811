//! The MySQL driver's errors: how they read, which of them a retry (on this connection or a
//! new one) may cure, and what a failure to connect or to set up the tables says to check.

use std::fmt;

use super::MysqlBackend;
use crate::backend::sql::errors::{
    CONNECTION_FAILED, DriverError, SqlError, TableTrouble, authentication_hint, connect_failure,
    missing_database_hint, refused_hint, table_error, timed_out_hint,
};
use crate::error::LockError;

/// A failed statement: the driver's error, or no reply in time.
pub(crate) type MyError = SqlError<mysql_async::Error>;

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

impl DriverError for mysql_async::Error {
    fn is_transient(&self) -> bool {
        match self {
            mysql_async::Error::Io(_) => true,
            mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed) => true,
            mysql_async::Error::Server(e) => {
                RETRY_ON_THIS_CONNECTION.contains(&e.code)
                    || RETRY_ON_A_NEW_CONNECTION.contains(&e.code)
            }
            _ => false,
        }
    }
}

impl MyError {
    pub(super) fn server_code(&self) -> Option<u16> {
        match self {
            MyError::Driver(mysql_async::Error::Server(e)) => Some(e.code),
            _ => None,
        }
    }

    /// Whether the connection it happened on is still good (a server error leaves it usable).
    pub(super) fn keeps_connection(&self) -> bool {
        matches!(
            self,
            MyError::Driver(mysql_async::Error::Server(e))
                if !RETRY_ON_A_NEW_CONNECTION.contains(&e.code)
        )
    }
}

impl MysqlBackend {
    /// A connection-time failure as an error that says what to check.
    pub(super) fn connect_error(&self, error: MyError) -> LockError {
        connect_error(&self.opts, &self.url, error)
    }
}

/// A connection-time failure to the server of `opts` (`url` as messages show it) as an error
/// that says what to check.
pub(super) fn connect_error(opts: &mysql_async::Opts, url: &str, error: MyError) -> LockError {
    let mut tls = crate::tls::explain(&crate::tls::chain(&error), "ssl-ca");
    let hint = match (&error, error.server_code()) {
        (_, Some(1045)) if opts.ssl_opts().is_none() => format!(
            "{}; or the server accepts TLS connections only (`require_secure_transport`, \
                 or a user `REQUIRE SSL`): leave out `ssl-mode=DISABLED`",
            authentication_hint("mysql")
        ),
        (_, Some(1045)) => authentication_hint("mysql"),
        (_, Some(3159)) => "the server accepts TLS connections only \
                 (`require_secure_transport`): leave out `ssl-mode=DISABLED`"
            .to_owned(),
        _ if tls.is_some() => tls.take().unwrap_or_default(),
        (_, Some(1049)) => {
            missing_database_hint(opts.db_name().unwrap_or_default(), "`CREATE DATABASE`")
        }
        (_, Some(1044)) => "this user may not use that database (GRANT it access)".to_owned(),
        (MyError::TimedOut { what, after }, _) => timed_out_hint(what, *after),
        (e, _) if e.to_string().to_lowercase().contains("refused") => {
            refused_hint("MySQL / MariaDB")
        }
        _ => CONNECTION_FAILED.to_owned(),
    };
    connect_failure(url, hint, error)
}

impl MysqlBackend {
    /// A failure while setting up the tables or their statements.
    pub(super) fn setup_error(&self, error: MyError) -> LockError {
        let trouble = match error.server_code() {
            // No such table.
            Some(1146) if !self.settings.create_table => TableTrouble::Missing,
            // Unknown column, wrong type, no such table (made by someone else, half).
            Some(1054 | 1146 | 1292 | 1366 | 1406) => TableTrouble::Shape,
            // CREATE command denied.
            Some(1142) => TableTrouble::CannotCreate,
            _ => return self.connect_error(error),
        };
        table_error(&self.url, &self.settings, trouble, error)
    }
}

//! Shared results (`LockRequest::share`) on the lock table's database: the table
//! `<table>_shared` (name, value `LONGBLOB`, expires_at by the database's clock), created on
//! first use unless `create_table=false` (then the error prints its DDL).

use std::sync::Arc;

use mysql_async::Value;
use mysql_async::prelude::Queryable;

use super::errors::MyError;
use super::pool::Trips;
use super::{MysqlBackend, micros, positional};
use crate::backend::sql::errors::{SqlError, missing_share_table};
use crate::backend::sql::quoted;
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// The largest value stored: MariaDB's default `max_allowed_packet` (16 MiB; MySQL 8's is
/// 64 MiB), less room for the statement around it.
pub(super) const SHARE_LIMIT: usize = 16 * 1024 * 1024 - 4096;

/// MySQL's and MariaDB's "table doesn't exist".
pub(super) const NO_SUCH_TABLE: u16 = 1146;

/// The shared results' table, as the guide prints it (`distlock::guide::share`).
pub(crate) fn my_share_ddl(table: &str) -> String {
    let v = quoted(&format!("{table}_shared"), '`');
    format!(
        "CREATE TABLE IF NOT EXISTS {v} (
    name       VARBINARY(2048) NOT NULL PRIMARY KEY,
    value      LONGBLOB NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    INDEX (expires_at)
) ENGINE=InnoDB"
    )
}

/// The shared results' statements for `table` (the lock table mode's and `mode=named`'s).
pub(super) struct ShareStatements {
    pub(super) get: String,
    pub(super) put: String,
    pub(super) sweep: String,
    pub(super) drop_live: String,
    pub(super) drop_any: String,
    pub(super) create: String,
}

impl ShareStatements {
    pub(super) fn new(table: &str) -> ShareStatements {
        let v = quoted(&format!("{table}_shared"), '`');
        ShareStatements {
            get: format!("SELECT value FROM {v} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"),
            put: format!(
                "INSERT INTO {v} (name, value, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE value = VALUES(value), expires_at = VALUES(expires_at)"
            ),
            sweep: format!(
                "DELETE FROM {v} WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE LIMIT 8"
            ),
            drop_live: format!("DELETE FROM {v} WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"),
            drop_any: format!("DELETE FROM {v} WHERE name = ?"),
            create: my_share_ddl(table),
        }
    }
}

impl MysqlBackend {
    /// Runs the work `make` builds on lock `name`'s connection; a missing table is created
    /// (unless the user's migrations own the tables) and the work run again.
    async fn share_run<T, F>(
        &self,
        what: &'static str,
        name: &str,
        make: impl Fn() -> F,
    ) -> Result<T, BoxError>
    where
        T: Send + 'static,
        F: super::pool::SessionWork<T>,
    {
        match self.run_with(Trips::Many, what, name, make()).await {
            Err(SqlError::Driver(mysql_async::Error::Server(ref error)))
                if error.code == NO_SUCH_TABLE =>
            {
                if !self.settings.create_table {
                    return Err(missing_share_table(&my_share_ddl(&self.settings.table)));
                }
                let create = self.share_sql.create.clone();
                self.run_with(
                    Trips::Many,
                    "creating the shared results' table",
                    name,
                    move |conn| {
                        let create = create.clone();
                        Box::pin(async move { conn.query_drop(create).await })
                    },
                )
                .await
                .map_err(boxed)?;
                self.run_with(Trips::Many, what, name, make())
                    .await
                    .map_err(boxed)
            }
            answer => answer.map_err(boxed),
        }
    }
}

fn boxed(error: MyError) -> BoxError {
    Box::new(error)
}

impl SharedStore for MysqlBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move {
            let sql = Arc::clone(&self.share_sql);
            let name_bytes = name.as_bytes().to_vec();
            self.share_run("reading a shared result", name, || {
                let (sql, name) = (Arc::clone(&sql), name_bytes.clone());
                move |conn: &mut super::pool::MySession| {
                    let (sql, name) = (Arc::clone(&sql), name.clone());
                    Box::pin(async move {
                        conn.exec_first::<Vec<u8>, _, _>(sql.get.as_str(), (name,))
                            .await
                    }) as crate::runtime::BoxFuture<'_, _>
                }
            })
            .await
        })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let Stored { name, value, ttl } = entry;
        Box::pin(async move {
            let sql = Arc::clone(&self.share_sql);
            let params = vec![
                Value::from(name.as_bytes()),
                Value::from(value),
                Value::from(micros(ttl)),
            ];
            self.share_run("storing a shared result", name, || {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                move |conn: &mut super::pool::MySession| {
                    let (sql, params) = (Arc::clone(&sql), params.clone());
                    Box::pin(async move {
                        conn.exec_drop(sql.put.as_str(), positional(params)).await?;
                        // A few long-expired results of keys nobody asks for again.
                        conn.query_drop(sql.sweep.as_str()).await
                    }) as crate::runtime::BoxFuture<'_, _>
                }
            })
            .await
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let sql = Arc::clone(&self.share_sql);
            let name_bytes = name.as_bytes().to_vec();
            self.share_run("dropping a shared result", name, || {
                let (sql, name) = (Arc::clone(&sql), name_bytes.clone());
                move |conn: &mut super::pool::MySession| {
                    let (sql, name) = (Arc::clone(&sql), name.clone());
                    Box::pin(async move {
                        conn.exec_drop(sql.drop_live.as_str(), (name.clone(),))
                            .await?;
                        let live = conn.affected_rows() > 0;
                        conn.exec_drop(sql.drop_any.as_str(), (name,)).await?;
                        Ok(live)
                    }) as crate::runtime::BoxFuture<'_, _>
                }
            })
            .await
        })
    }
}

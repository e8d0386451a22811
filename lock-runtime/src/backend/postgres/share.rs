//! Shared results (`LockRequest::share`) on the lock table's database: the table
//! `<table>_shared` (name, value `bytea`, expires_at by the database's clock), created on first
//! use unless `create_table=false` (then the error prints its DDL). Its statements are prepared
//! on a connection the first time it runs them (sent unnamed behind a transaction pooler).

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::PostgresBackend;
use super::errors::PgError;
use super::statements::pg_share_ddl;
use crate::backend::sql::errors::missing_share_table;
use crate::backend::sql::millis;
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// The largest value stored: PostgreSQL's largest field is 1 GB.
pub(super) const SHARE_LIMIT: usize = 1_000_000_000;

/// Which statement of the three.
#[derive(Clone, Copy)]
enum Op {
    Get,
    Put,
    Drop,
}

impl PostgresBackend {
    /// Runs one shared-result statement; a missing table is created (unless the user's
    /// migrations own the tables) and the statement run again.
    async fn share_statement(
        &self,
        op: Op,
        name: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, BoxError> {
        let (text, types, what) = match op {
            Op::Get => (
                &self.sql.share.get,
                &[Type::TEXT][..],
                "reading a shared result",
            ),
            Op::Put => (
                &self.sql.share.put,
                &[Type::TEXT, Type::BYTEA, Type::INT8][..],
                "storing a shared result",
            ),
            Op::Drop => (
                &self.sql.share.drop,
                &[Type::TEXT][..],
                "dropping a shared result",
            ),
        };
        let mut created = false;
        loop {
            let answer = self
                .run(what, name, |conn| async move {
                    let cell = match op {
                        Op::Get => &conn.share_get,
                        Op::Put => &conn.share_put,
                        Op::Drop => &conn.share_drop,
                    };
                    conn.rare(cell, text, types, params).await
                })
                .await;
            match answer {
                Err(PgError::Driver(ref error))
                    if error.code() == Some(&SqlState::UNDEFINED_TABLE) && !created =>
                {
                    if !self.settings.create_table {
                        return Err(missing_share_table(&pg_share_ddl(&self.settings.table)));
                    }
                    self.run(
                        "creating the shared results' table",
                        name,
                        |conn| async move {
                            conn.client.batch_execute(&self.sql.share.create).await?;
                            Ok(Vec::<tokio_postgres::Row>::new())
                        },
                    )
                    .await?;
                    created = true;
                }
                answer => return Ok(answer?),
            }
        }
    }
}

/// The value a `PgShareSql::get` found, if any.
pub(super) fn value_of(rows: &[tokio_postgres::Row]) -> Result<Option<Vec<u8>>, BoxError> {
    match rows.first() {
        Some(row) => Ok(Some(row.try_get::<_, Vec<u8>>(0).map_err(PgError::from)?)),
        None => Ok(None),
    }
}

/// Whether a `PgShareSql::drop` deleted a live value.
pub(super) fn dropped(rows: &[tokio_postgres::Row]) -> Result<bool, BoxError> {
    let first = rows
        .first()
        .ok_or("no answer to the shared result's delete")?;
    Ok(first.try_get::<_, bool>(0).map_err(PgError::from)?)
}

impl SharedStore for PostgresBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move { value_of(&self.share_statement(Op::Get, name, &[&name]).await?) })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let Stored { name, value, ttl } = entry;
        Box::pin(async move {
            let ms = millis(ttl);
            self.share_statement(Op::Put, name, &[&name, &value, &ms])
                .await?;
            Ok(())
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move { dropped(&self.share_statement(Op::Drop, name, &[&name]).await?) })
    }
}

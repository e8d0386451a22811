//! Shared results (`LockRequest::share`) in `mode=advisory`: the lock table's
//! `<table>_shared` (see `postgres::share`), on an idle connection of this client's, each
//! statement unnamed (one round trip).

use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::super::errors::PgError;
use super::super::share::{dropped, value_of};
use super::super::statements::pg_share_ddl;
use super::AdvisoryBackend;
use crate::backend::sql::errors::{missing_share_table, timed};
use crate::backend::sql::millis;
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl AdvisoryBackend {
    /// Runs one shared-result statement; a missing table is created (unless the user's
    /// migrations own the tables) and the statement run again.
    async fn share_query(
        &self,
        text: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, BoxError> {
        let limit = self.settings.response_timeout;
        let mut created = false;
        loop {
            let client = self.connection().await?;
            let answer = timed(
                "a shared result's statement",
                limit,
                client.query_typed(text, params),
            )
            .await;
            match answer {
                Err(PgError::Driver(ref error))
                    if error.code() == Some(&SqlState::UNDEFINED_TABLE) && !created =>
                {
                    if !self.settings.create_table {
                        return Err(missing_share_table(&pg_share_ddl(&self.settings.table)));
                    }
                    timed(
                        "creating the shared results' table",
                        limit,
                        client.batch_execute(&self.share_sql.create),
                    )
                    .await?;
                    self.give_back_connection(client);
                    created = true;
                }
                Ok(rows) => {
                    self.give_back_connection(client);
                    return Ok(rows);
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

impl SharedStore for AdvisoryBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move {
            value_of(
                &self
                    .share_query(&self.share_sql.get, &[(&name, Type::TEXT)])
                    .await?,
            )
        })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let Stored { name, value, ttl } = entry;
        Box::pin(async move {
            let ms = millis(ttl);
            self.share_query(
                &self.share_sql.put,
                &[
                    (&name, Type::TEXT),
                    (&value, Type::BYTEA),
                    (&ms, Type::INT8),
                ],
            )
            .await?;
            Ok(())
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            dropped(
                &self
                    .share_query(&self.share_sql.drop, &[(&name, Type::TEXT)])
                    .await?,
            )
        })
    }
}

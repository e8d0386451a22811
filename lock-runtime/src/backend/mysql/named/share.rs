//! Shared results (`LockRequest::share`) in `mode=named`: the table `<table>_shared` (see
//! `mysql::share`), on an idle connection of this client's.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};

use super::super::errors::MyError;
use super::super::share::{NO_SUCH_TABLE, my_share_ddl};
use super::super::{micros, positional};
use super::NamedBackend;
use crate::backend::sql::errors::{SqlError, missing_share_table, timed};
use crate::backend::{SharedStore, Stored};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// What one piece of shared-result work does on a connection.
#[derive(Clone, Copy)]
enum Op {
    Get,
    Put,
    Drop,
}

/// Its answer.
enum Answer {
    Value(Option<Vec<u8>>),
    Dropped(bool),
    Done,
}

impl NamedBackend {
    async fn share_work(
        &self,
        op: Op,
        name: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<Answer, BoxError> {
        let limit = self.settings.response_timeout;
        let mut created = false;
        loop {
            let conn = self.connection().await?;
            let answer = {
                let mut c = conn.conn.lock().await;
                timed(
                    "a shared result's statement",
                    limit,
                    work(&self.share_sql, &mut c, op, name, value, ttl),
                )
                .await
            };
            match answer {
                Err(SqlError::Driver(mysql_async::Error::Server(ref error)))
                    if error.code == NO_SUCH_TABLE && !created =>
                {
                    if !self.settings.create_table {
                        return Err(missing_share_table(&my_share_ddl(&self.settings.table)));
                    }
                    {
                        let mut c = conn.conn.lock().await;
                        let create = c.query_drop(self.share_sql.create.as_str());
                        timed("creating the shared results' table", limit, create)
                            .await
                            .map_err(boxed)?;
                    }
                    self.give_back(conn);
                    created = true;
                }
                Ok(answer) => {
                    self.give_back(conn);
                    return Ok(answer);
                }
                Err(error) => return Err(boxed(error)),
            }
        }
    }
}

/// `op`'s statements on `conn`.
async fn work(
    sql: &super::super::share::ShareStatements,
    conn: &mut Conn,
    op: Op,
    name: &str,
    value: &[u8],
    ttl: Duration,
) -> Result<Answer, mysql_async::Error> {
    let name = name.as_bytes().to_vec();
    match op {
        Op::Get => Ok(Answer::Value(
            conn.exec_first::<Vec<u8>, _, _>(sql.get.as_str(), (name,))
                .await?,
        )),
        Op::Put => {
            let params = vec![
                Value::from(name),
                Value::from(value),
                Value::from(micros(ttl)),
            ];
            conn.exec_drop(sql.put.as_str(), positional(params)).await?;
            conn.query_drop(sql.sweep.as_str()).await?;
            Ok(Answer::Done)
        }
        Op::Drop => {
            conn.exec_drop(sql.drop_live.as_str(), (name.clone(),))
                .await?;
            let live = conn.affected_rows() > 0;
            conn.exec_drop(sql.drop_any.as_str(), (name,)).await?;
            Ok(Answer::Dropped(live))
        }
    }
}

fn boxed(error: MyError) -> BoxError {
    Box::new(error)
}

impl SharedStore for NamedBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move {
            match self.share_work(Op::Get, name, &[], Duration::ZERO).await? {
                Answer::Value(value) => Ok(value),
                _ => unreachable!("a read answers a value"),
            }
        })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let Stored { name, value, ttl } = entry;
        Box::pin(async move { self.share_work(Op::Put, name, value, ttl).await.map(drop) })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            match self.share_work(Op::Drop, name, &[], Duration::ZERO).await? {
                Answer::Dropped(live) => Ok(live),
                _ => unreachable!("a drop answers whether it was live"),
            }
        })
    }
}

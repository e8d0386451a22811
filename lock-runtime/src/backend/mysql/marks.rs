//! Waiting writers' marks on a lock held by readers (rows `name + 0x02 + token`): made while a
//! writer waits, so no new reader joins; taken back once it has the lock or gives up.

use std::sync::Arc;

use mysql_async::Value;
use mysql_async::prelude::Queryable;

use super::errors::MyError;
use super::pool::Trips;
use super::{MysqlBackend, micros, positional};
use crate::backend::LockSpec;

impl MysqlBackend {
    /// A waiting writer found the lock busy: if readers hold it, mark it so no new reader
    /// joins. Whether it marked.
    pub(super) async fn mark(&self, spec: LockSpec<'_>) -> Result<bool, MyError> {
        let sql = Arc::clone(&self.sql);
        let params = vec![
            Value::from(spec.name.as_bytes()),
            Value::from(spec.token),
            Value::from(spec.token),
            Value::from(micros(crate::backend::FAIR_QUEUE_TTL)),
            Value::from(self.holder.as_str()),
            Value::from(spec.name.as_bytes()),
        ];
        // Noted before the statement is sent: a mark whose answer is lost is taken back too
        // (as on PostgreSQL); forgotten again if the answer says nothing was marked — unless
        // an earlier attempt marked: that mark is still there (it lapses on its own). A writer
        // that read the row as the readers' and found it a writer's by the time it marked (an
        // upgrade, or another writer, in between) used to forget its earlier mark, which then
        // outlived this writer's grant and release by up to its 5 s (the upgrade's conformance
        // case on MariaDB found it left behind in 2 of 4 runs beside two busy loops).
        let marked_before = self.marked.contains(spec.token);
        self.marked.insert(spec.token);
        // A share alone is no longer once marked: its release takes the full path, which
        // leaves the row to this writer (see `MyStatements::share_alone`).
        let marked = self
            .run_with(Trips::Many, "marking the readers", spec.name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move {
                    let name = params[0].clone();
                    conn.exec_drop(sql.mark.as_str(), positional(params))
                        .await?;
                    if conn.affected_rows() == 0 {
                        return Ok(false);
                    }
                    conn.exec_drop(sql.not_alone.as_str(), positional(vec![name]))
                        .await?;
                    Ok(true)
                })
            })
            .await?;
        if !marked && !marked_before {
            self.marked.remove(spec.token);
        }
        Ok(marked)
    }

    /// Takes back the mark of writer `token`, if it left one.
    pub(super) async fn unmark(&self, name: &str, token: &str) -> Result<(), MyError> {
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
}

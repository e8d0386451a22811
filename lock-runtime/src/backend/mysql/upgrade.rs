//! Upgradable reads on the lock table: an upgradable share is a reader's share row whose token
//! starts with `^` (a second live one is refused). Its upgrade, one transaction that locks the
//! lock row first, turns the readers' lock row into the writer's (same token) once the share is
//! alone, and until then marks the lock as a waiting writer does, so no new reader joins.
//! Waiters poll (no notifications on MySQL): the upgrade asks again as they do. The
//! transaction is the table's procedure `<table>_supg1` where the user may create it (one
//! `CALL`), else statements. An upgradable share taken alone (without fencing) and still alone
//! is upgraded first by one `UPDATE` of its lock row (`MyStatements::upgrade_alone`).

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{TxOpts, Value};

use super::pool::Trips;
use super::shared::{LockedRow, locked, name_and_token};
use super::{MysqlBackend, micros, positional};
use crate::backend::sql::errors::acquire_error;
use crate::backend::sql::shares::READERS;
use crate::backend::{FAIR_QUEUE_TTL, LockSpec, Upgrade};
use crate::error::BoxError;

impl MysqlBackend {
    /// One upgrade attempt of `spec`'s upgradable share. Between the attempts that mark the
    /// lock (a third of a mark's life apart), a plain read that shows other readers still
    /// there answers busy without locking the lock row: the upgrade polls as waiters do, and
    /// each locked attempt holds up every reader of the key.
    pub(super) async fn upgrade_share(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        let marked_at = self.upgrade_marked_at(spec.token);
        if marked_at.is_none() && self.upgrade_alone(spec).await? {
            return Ok(Upgrade::Done {
                fencing_token: None,
            });
        }
        if marked_at.is_some_and(|at| at.elapsed() < FAIR_QUEUE_TTL / 3)
            && let Some(ttl) = self.readers_still_there(spec).await?
        {
            return Ok(Upgrade::Busy { ttl });
        }
        let outcome = self.upgrade_locked(spec).await;
        let mut upgrading = self.upgrading.lock().unwrap_or_else(|p| p.into_inner());
        match &outcome {
            Ok(Upgrade::Busy { .. }) => {
                upgrading.insert(spec.token.to_owned(), std::time::Instant::now());
            }
            _ => {
                upgrading.remove(spec.token);
            }
        }
        outcome
    }

    /// The common case without fencing: the upgradable share was taken alone
    /// (`MyStatements::share_alone`) and is still alone, so one `UPDATE` of the lock row
    /// upgrades it (`MyStatements::upgrade_alone`). Whether it did; if not, the name is remembered as
    /// shared, and the full upgrade decides (a retry whose first try upgraded finds it done
    /// there).
    async fn upgrade_alone(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        if spec.fencing || self.contended.contains(spec.name) {
            return Ok(false);
        }
        let sql = Arc::clone(&self.sql);
        let params = vec![
            Value::from(spec.token),
            Value::from(self.holder.as_str()),
            Value::from(micros(spec.lease)),
            Value::from(spec.name.as_bytes()),
            Value::from(spec.token),
        ];
        let upgraded = self
            .run("the upgrade", spec.name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move {
                    match conn
                        .exec_drop(sql.upgrade_alone.as_str(), positional(params))
                        .await
                    {
                        Ok(()) => Ok(conn.affected_rows() == 1),
                        // Chosen as a deadlock's victim (1213): nothing was written.
                        Err(mysql_async::Error::Server(e)) if e.code == 1213 => Ok(false),
                        Err(e) => Err(e),
                    }
                })
            })
            .await
            .map_err(acquire_error)?;
        if !upgraded {
            self.contended.insert(spec.name);
        }
        Ok(upgraded)
    }

    /// When the upgrade of `token` last marked the lock, if it waits.
    fn upgrade_marked_at(&self, token: &str) -> Option<std::time::Instant> {
        let upgrading = self.upgrading.lock().unwrap_or_else(|p| p.into_inner());
        upgrading.get(token).copied()
    }

    /// A plain read (nothing locked): `Some` with how long the other readers hold at most if
    /// `spec`'s share is live beside them; `None`: the locked attempt decides.
    async fn readers_still_there(
        &self,
        spec: LockSpec<'_>,
    ) -> Result<Option<Option<Duration>>, BoxError> {
        let sql = Arc::clone(&self.sql);
        let (name, token) = (spec.name.as_bytes().to_vec(), spec.token.to_owned());
        let row: Option<LockedRow> = self
            .run("reading the lock", spec.name, move |conn| {
                let sql = Arc::clone(&sql);
                let params = name_and_token(&name, &token);
                Box::pin(async move { conn.exec_first(sql.share_peek.as_str(), params).await })
            })
            .await
            .map_err(acquire_error)?;
        Ok(match row {
            Some((Some(held), Some(true), mine, others, last, _))
                if held == READERS && mine > 0 && others > 0 =>
            {
                Some(last.map(|us| Duration::from_micros(us.max(1_000) as u64)))
            }
            _ => None,
        })
    }

    /// An upgrade attempt in one transaction that locks the lock row first: the table's
    /// procedure (one round trip) where this client has it, else the statements.
    async fn upgrade_locked(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        if let Some(outcome) = self.upgrade_by_call(spec).await? {
            return Ok(outcome);
        }
        self.upgrade_by_statements(spec).await
    }

    /// An upgrade attempt by the table's procedure (`MyStatements::call_upgrade`); `None` if
    /// this client has no procedures (any more).
    async fn upgrade_by_call(&self, spec: LockSpec<'_>) -> Result<Option<Upgrade>, BoxError> {
        if !self.procedures.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        let sql = Arc::clone(&self.sql);
        let params = vec![
            Value::from(spec.name.as_bytes()),
            Value::from(spec.token),
            Value::from(self.holder.as_str()),
            Value::from(micros(spec.lease)),
            Value::from(micros(FAIR_QUEUE_TTL)),
            Value::from(spec.fencing),
        ];
        let called = self
            .run("the upgrade", spec.name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move {
                    conn.exec_first::<(i64, Option<i64>, Option<i64>), _, _>(
                        sql.call_upgrade.as_str(),
                        positional(params),
                    )
                    .await
                })
            })
            .await;
        let (outcome, fence, last) = match called {
            Ok(Some(row)) => row,
            Ok(None) => return Err("the upgrade's procedure returned no row".into()),
            Err(error) if self.procedures_gone(&error) => return Ok(None),
            Err(error) => return Err(acquire_error(error)),
        };
        Ok(Some(match outcome {
            0 => Upgrade::Done {
                fencing_token: spec.fencing.then(|| fence.unwrap_or(0) as u64),
            },
            1 => Upgrade::Busy {
                ttl: last.map(|us| Duration::from_micros(us.max(1_000) as u64)),
            },
            _ => Upgrade::Lost,
        }))
    }

    /// An upgrade attempt by statements, in one transaction.
    async fn upgrade_by_statements(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        let sql = Arc::clone(&self.sql);
        let name = spec.name.as_bytes().to_vec();
        let (token, holder) = (spec.token.to_owned(), self.holder.clone());
        let (lease, mark, fencing) = (micros(spec.lease), micros(FAIR_QUEUE_TTL), spec.fencing);
        let outcome = self
            .run_with(Trips::Many, "the upgrade", spec.name, move |conn| {
                let (sql, name) = (Arc::clone(&sql), name.clone());
                let (token, holder) = (token.clone(), holder.clone());
                Box::pin(async move {
                    let mut tx = conn.start_transaction(TxOpts::default()).await?;
                    tx.exec_drop(sql.lock_row.as_str(), (name.clone(),)).await?;
                    let row = locked(&mut tx, &sql, &name, &token).await?;
                    if row.live && row.token.as_deref() == Some(token.as_str()) {
                        // Upgraded already: a retry whose first answer was lost.
                        let fence: Option<i64> =
                            tx.exec_first(sql.last_fence.as_str(), (name,)).await?;
                        tx.rollback().await?;
                        return Ok(Upgrade::Done {
                            fencing_token: fencing.then(|| fence.unwrap_or(0) as u64),
                        });
                    }
                    if !(row.live && row.mine && row.token.as_deref() == Some(READERS)) {
                        tx.rollback().await?;
                        return Ok(Upgrade::Lost);
                    }
                    if row.others > 0 {
                        // Other readers: mark the lock (no new reader joins) and wait.
                        let params = vec![
                            Value::from(name.as_slice()),
                            Value::from(token.as_str()),
                            Value::from(token.as_str()),
                            Value::from(mark),
                            Value::from(holder.as_str()),
                            Value::from(name.as_slice()),
                        ];
                        tx.exec_drop(sql.mark.as_str(), positional(params)).await?;
                        tx.commit().await?;
                        return Ok(Upgrade::Busy {
                            ttl: row
                                .last
                                .map(|us| Duration::from_micros(us.max(1_000) as u64)),
                        });
                    }
                    // Alone: the share and its mark go, and the lock row is the writer's.
                    let params = (name.clone(), name.clone(), name.clone(), token.clone());
                    tx.exec_drop(sql.drop_share.as_str(), params).await?;
                    tx.exec_drop(sql.unmark.as_str(), (name.clone(), token.clone()))
                        .await?;
                    let params = (token, holder, lease, name.clone());
                    tx.exec_drop(sql.upgrade_row.as_str(), params).await?;
                    let fence = match fencing {
                        true => {
                            tx.exec_drop(sql.fence.as_str(), (name,)).await?;
                            tx.last_insert_id()
                        }
                        false => None,
                    };
                    tx.commit().await?;
                    Ok(Upgrade::Done {
                        fencing_token: fencing.then(|| fence.unwrap_or(0)),
                    })
                })
            })
            .await
            .map_err(acquire_error)?;
        Ok(outcome)
    }

    /// Takes back the mark of an upgrade given up (the share stays).
    pub(super) async fn abandon_share_upgrade(&self, spec: LockSpec<'_>) -> Result<(), BoxError> {
        self.upgrading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(spec.token);
        let sql = Arc::clone(&self.sql);
        let params = vec![Value::from(spec.name.as_bytes()), Value::from(spec.token)];
        self.run("taking an upgrade's mark back", spec.name, move |conn| {
            let (sql, params) = (Arc::clone(&sql), params.clone());
            Box::pin(async move {
                conn.exec_drop(sql.unmark.as_str(), positional(params))
                    .await
            })
        })
        .await
        .map_err(acquire_error)?;
        Ok(())
    }
}

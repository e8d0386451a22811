//! Acquisitions on the lock table: a writer's (with or without fencing), a reader's, a
//! semaphore's permit, and a waiting writer's mark on the readers it waits for.

use tokio_postgres::types::ToSql;

use super::PostgresBackend;
use super::errors::PgError;
use super::pool::one;
use crate::backend::sql::errors::acquire_error;
use crate::backend::sql::millis;
use crate::backend::sql::shares::{READERS, semaphore_limit, shares_token};
use crate::backend::{Attempt, LockSpec, Refused};
use crate::error::BoxError;

impl PostgresBackend {
    /// A writer's attempt: the plain lock (see `statements::PgStatements::acquire`).
    pub(super) async fn acquire_exclusive(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let lease = millis(spec.lease);
        let params: [&(dyn ToSql + Sync); 4] = [&spec.name, &spec.token, &lease, &self.holder];
        let slot = self.affinity.pick(spec.token, spec.name);
        if !spec.fencing {
            let taken = self
                .run_on(slot, "the acquisition", |conn| async move {
                    conn.execute(&conn.acquire, &params).await
                })
                .await
                .map_err(acquire_error)?;
            if taken == 1 {
                return Ok(Attempt::Acquired {
                    fencing_token: None,
                });
            }
            self.affinity.forget(spec.token);
            self.contended.insert(spec.name);
            if spec.waiting {
                return self.mark(spec).await;
            }
            let remaining = self
                .run("reading the holder's lease", spec.name, |conn| async move {
                    conn.query(&conn.remaining, &[&spec.name]).await
                })
                .await
                .map_err(acquire_error)?
                .into_iter()
                .next();
            let ttl_ms: Option<i64> = match remaining {
                Some(row) => row.try_get(0).map_err(|e| acquire_error(e.into()))?,
                None => None,
            };
            return Ok(busy(ttl_ms));
        }
        let row = self
            .run_on(slot, "the acquisition", |conn| async move {
                conn.query(&conn.acquire_fenced, &params).await
            })
            .await
            .and_then(|rows| one(rows, "the acquisition"))
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
        self.affinity.forget(spec.token);
        self.contended.insert(spec.name);
        if spec.waiting {
            return self.mark(spec).await;
        }
        let ttl_ms: Option<i64> = row.try_get(2).map_err(|e| acquire_error(e.into()))?;
        Ok(busy(ttl_ms))
    }

    /// The common case of a reader's or a permit's attempt without fencing: the first share
    /// of a free row (`statements::PgStatements::share_join`). Whether it was taken; if not,
    /// the name is remembered as shared or busy, and the full statement decides.
    async fn lone_share(&self, spec: LockSpec<'_>, row_token: &str) -> Result<bool, BoxError> {
        if spec.fencing || self.contended.contains(spec.name) {
            return Ok(false);
        }
        let lease = millis(spec.lease);
        let params: [&(dyn ToSql + Sync); 4] = [&spec.name, &spec.token, &lease, &row_token];
        let taken = self
            .run("the share's acquisition", spec.name, |conn| async move {
                conn.execute(&conn.share_join, &params).await
            })
            .await
            .map_err(acquire_error)?;
        if taken != 1 {
            self.contended.insert(spec.name);
        }
        Ok(taken == 1)
    }

    /// A reader's attempt (see `statements::PgStatements::read_acquire`).
    pub(super) async fn acquire_shared(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        if self.lone_share(spec, READERS).await? {
            return Ok(Attempt::Acquired {
                fencing_token: None,
            });
        }
        let lease = millis(spec.lease);
        let params: [&(dyn ToSql + Sync); 4] = [&spec.name, &spec.token, &lease, &self.holder];
        let row = self
            .run("the read acquisition", spec.name, |conn| async move {
                conn.query(&conn.read_acquire, &params).await
            })
            .await
            .and_then(|rows| one(rows, "the read acquisition"))
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
            return Err(Refused::kind(Some(held), spec.kind));
        }
        if spec.waiting && row_token.as_deref().is_some_and(|t| t != READERS) {
            // A writer holds it: flag its row, so that its release wakes this reader.
            let flagged = self
                .run("flagging the writer's row", spec.name, |conn| async move {
                    conn.query(&conn.flag, &[&spec.name]).await
                })
                .await
                .map_err(acquire_error)?
                .into_iter()
                .next();
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

    /// A semaphore's permit (see `statements::PgStatements::permit_acquire`).
    pub(super) async fn acquire_permit(
        &self,
        spec: LockSpec<'_>,
        limit: u16,
    ) -> Result<Attempt, BoxError> {
        let row_token = shares_token(spec.kind);
        if self.lone_share(spec, &row_token).await? {
            return Ok(Attempt::Acquired {
                fencing_token: None,
            });
        }
        let lease = millis(spec.lease);
        let limit_param = i64::from(limit);
        let params: [&(dyn ToSql + Sync); 6] = [
            &spec.name,
            &spec.token,
            &lease,
            &row_token,
            &limit_param,
            &spec.fencing,
        ];
        let row = self
            .run("the permit's acquisition", spec.name, |conn| async move {
                conn.query(&conn.permit_acquire, &params).await
            })
            .await
            .and_then(|rows| one(rows, "the permit's acquisition"))
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
                Some(held) => Refused::limit(held, limit),
                None => Refused::kind(None, spec.kind),
            }),
        }
    }

    /// A waiting writer's busy attempt: marks the readers holding the row (keeping new
    /// readers out), and asks again in time to keep the mark.
    async fn mark(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let mark = millis(crate::backend::FAIR_QUEUE_TTL);
        // Noted before the statement is sent: a mark whose answer is lost is taken back too.
        self.marked.insert(spec.token);
        let row = self
            .run("marking the readers", spec.name, |conn| async move {
                conn.query(&conn.mark, &[&spec.name, &spec.token, &mark])
                    .await
            })
            .await
            .map_err(acquire_error)?
            .into_iter()
            .next();
        let Some(row) = row else {
            return Ok(busy(None)); // released meanwhile: ask again at once
        };
        let ttl_ms: Option<i64> = row.try_get(0).map_err(|e| acquire_error(e.into()))?;
        let marked: bool = row.try_get(1).map_err(|e| acquire_error(e.into()))?;
        let token: Option<String> = row.try_get(2).map_err(|e| acquire_error(e.into()))?;
        if let Some(held) = token.as_deref().and_then(semaphore_limit)
            && ttl_ms.is_some_and(|ms| ms > 0)
        {
            return Err(Refused::kind(Some(held), spec.kind));
        }
        Ok(busy(match (ttl_ms, marked) {
            (Some(ms), true) => Some(ms.min(mark / 3)),
            (ttl, _) => ttl,
        }))
    }
}

/// A busy answer with the holder's remaining lease in ms.
fn busy(ttl_ms: Option<i64>) -> Attempt {
    crate::backend::sql::shares::busy_for(ttl_ms, std::time::Duration::from_millis)
}

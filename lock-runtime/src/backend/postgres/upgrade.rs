//! Upgradable reads on the lock table (see `statements::PgStatements::upgrade`): an upgradable
//! share is a reader's line whose token starts with `^`; its upgrade turns the readers' row
//! into the writer's once the share is alone, and marks the row against new readers until
//! then, as a waiting writer does. The share alone on a row without marks, the common case,
//! is upgraded by a plain `UPDATE` first (`upgrade_alone`), half the full statement's time.

use tokio_postgres::types::{ToSql, Type};

use super::PostgresBackend;
use super::errors::PgError;
use super::pool::one;
use crate::backend::sql::errors::acquire_error;
use crate::backend::sql::millis;
use crate::backend::{FAIR_QUEUE_TTL, LockSpec, Upgrade};
use crate::error::BoxError;

impl PostgresBackend {
    /// One upgrade attempt of `spec`'s upgradable share.
    pub(super) async fn upgrade_share(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        let lease = millis(spec.lease);
        let mark = millis(FAIR_QUEUE_TTL);
        let params: [&(dyn ToSql + Sync); 6] = [
            &spec.name,
            &spec.token,
            &lease,
            &self.holder,
            &spec.fencing,
            &mark,
        ];
        let row = self
            .run("the upgrade", spec.name, |conn| async move {
                // Prepared on a connection the first time it runs an upgrade: most clients
                // never do.
                let alone = conn
                    .rare(
                        &conn.upgrade_alone,
                        &self.sql.upgrade_alone,
                        &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT, Type::BOOL],
                        &params[..5],
                    )
                    .await?;
                if let Some(row) = alone.first()
                    && row.try_get::<_, i32>(0)? == 1
                {
                    return Ok(alone);
                }
                let types = [
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::TEXT,
                    Type::BOOL,
                    Type::INT8,
                ];
                conn.rare(&conn.upgrade, &self.sql.upgrade, &types, &params)
                    .await
            })
            .await
            .and_then(|rows| one(rows, "the upgrade"))
            .map_err(acquire_error)?;
        let failed = |e| acquire_error(PgError::from(e));
        let outcome: i32 = row.try_get(0).map_err(failed)?;
        let fence: Option<i64> = row.try_get(1).map_err(failed)?;
        let others_ms: Option<i64> = row.try_get(2).map_err(failed)?;
        Ok(match outcome {
            1 => Upgrade::Done {
                fencing_token: spec.fencing.then(|| fence.unwrap_or(0) as u64),
            },
            0 => Upgrade::Busy {
                ttl: others_ms.map(|ms| std::time::Duration::from_millis(ms.max(1) as u64)),
            },
            _ => Upgrade::Lost,
        })
    }

    /// Takes back the mark of an upgrade given up (the share stays), waking the readers it
    /// kept out.
    pub(super) async fn abandon_share_upgrade(&self, spec: LockSpec<'_>) -> Result<(), BoxError> {
        self.run(
            "taking an upgrade's mark back",
            spec.name,
            |conn| async move {
                conn.rare(
                    &conn.abandon_upgrade,
                    &self.sql.abandon_upgrade,
                    &[Type::TEXT, Type::TEXT],
                    &[&spec.name, &spec.token],
                )
                .await
            },
        )
        .await
        .map_err(acquire_error)?;
        if self.polls {
            self.local.notify(spec.name);
        }
        Ok(())
    }
}

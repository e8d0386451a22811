//! The connections of a `MysqlBackend`: one per pool slot, each with the hot statements
//! prepared on it, and how a statement's work runs on one (and is retried on a new one).

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Statement};

use super::MysqlBackend;
use super::errors::MyError;
use super::statements::MyStatements;
use crate::backend::sql::errors::timed;
use crate::backend::sql::slot_of;
use crate::runtime::{BoxFuture, RuntimeBound};

/// A connection, tied to the runtime that drives its socket.
pub(super) type MySlot = Arc<tokio::sync::Mutex<Option<(MySession, RuntimeBound<()>)>>>;

/// A connection and the statements of every lock + release, prepared on it: run by handle, a
/// statement is neither looked up in the driver's cache by its text nor scanned for named
/// parameters on each call (both were visible in a profile of the throughput row).
pub(crate) struct MySession {
    pub(super) conn: Conn,
    pub(super) sql: Arc<MyStatements>,
    /// Prepared on first use (the table may not exist before).
    pub(super) hot: Option<Hot>,
}

/// The prepared statements of [`MySession`].
#[derive(Clone)]
pub(super) struct Hot {
    pub(super) acquire: Statement,
    pub(super) remaining: Statement,
    pub(super) renew: Statement,
    pub(super) release: Statement,
    pub(super) release_expired: Statement,
    pub(super) share_alone: Statement,
    pub(super) leave_alone: Statement,
}

impl MySession {
    /// The hot statements, prepared on this connection the first time.
    pub(super) async fn hot(&mut self) -> Result<Hot, mysql_async::Error> {
        if let Some(hot) = &self.hot {
            return Ok(hot.clone());
        }
        let (conn, sql) = (&mut self.conn, &self.sql);
        let hot = Hot {
            acquire: conn.prep(sql.acquire.as_str()).await?,
            remaining: conn.prep(sql.remaining.as_str()).await?,
            renew: conn.prep(sql.renew.as_str()).await?,
            release: conn.prep(sql.release.as_str()).await?,
            release_expired: conn.prep(sql.release_expired.as_str()).await?,
            share_alone: conn.prep(sql.share_alone.as_str()).await?,
            leave_alone: conn.prep(sql.leave_alone.as_str()).await?,
        };
        self.hot = Some(hot.clone());
        Ok(hot)
    }
}

impl std::ops::Deref for MySession {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl std::ops::DerefMut for MySession {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }
}

/// Where a connection's work runs. Either way it completes even if its caller gives up.
#[derive(Clone, Copy, Debug)]
pub(super) enum Trips {
    /// One statement (the lock + release of a plain lock): in the caller's task, finished in
    /// the background only if the caller drops it — no task per statement, and no hop between
    /// threads for its start and its answer.
    One,
    /// A transaction of several round trips: in a task of its own, on a runtime worker, where
    /// each answer is read as it comes (from a caller outside the workers — `block_on` — each
    /// round trip in place would cost a wake-up across threads: a read lock + release took
    /// 2.2 ms in place, 1.4 ms in a task).
    Many,
}

/// A statement's work on one connection, run (and retried) by [`MysqlBackend::run`].
pub(super) trait SessionWork<T>:
    Fn(&mut MySession) -> BoxFuture<'_, Result<T, mysql_async::Error>> + Send + Sync + 'static
{
}

impl<T, F> SessionWork<T> for F where
    F: Fn(&mut MySession) -> BoxFuture<'_, Result<T, mysql_async::Error>> + Send + Sync + 'static
{
}

/// [`SessionWork`], shared with the task that runs it.
type MyOp<T> =
    Arc<dyn Fn(&mut MySession) -> BoxFuture<'_, Result<T, mysql_async::Error>> + Send + Sync>;

impl MysqlBackend {
    /// Runs `op`, one statement, on the connection of lock `name` (see [`Trips`]).
    pub(super) async fn run<T, F>(
        &self,
        what: &'static str,
        name: &str,
        op: F,
    ) -> Result<T, MyError>
    where
        T: Send + 'static,
        F: SessionWork<T>,
    {
        self.run_with(Trips::One, what, name, op).await
    }

    /// Runs `op`, of `trips`, on the connection of lock `name`.
    pub(super) async fn run_with<T, F>(
        &self,
        trips: Trips,
        what: &'static str,
        name: &str,
        op: F,
    ) -> Result<T, MyError>
    where
        T: Send + 'static,
        F: SessionWork<T>,
    {
        let limit = self.settings.response_timeout;
        let i = slot_of(name, self.slots.len());
        self.run_on(i, trips, what, limit, op).await
    }

    /// Runs `op` on connection `i` so that it completes (and keeps the connection's statements
    /// in order) even if the caller stops waiting: see [`Trips`] for where. A broken connection
    /// is replaced and the statement retried on the new one; every statement is safe to repeat
    /// with the same token.
    pub(super) async fn run_on<T, F>(
        &self,
        i: usize,
        trips: Trips,
        what: &'static str,
        limit: Duration,
        op: F,
    ) -> Result<T, MyError>
    where
        T: Send + 'static,
        F: SessionWork<T>,
    {
        let op: MyOp<T> = Arc::new(op);
        let (opts, sql) = (self.opts.clone(), Arc::clone(&self.sql));
        let (connect_timeout, response_timeout) = (self.settings.connect_timeout, limit);
        // The connection is taken here, before the statement starts: statements on one slot
        // run in the order their callers asked, so a cancelled acquisition's clean-up (a
        // release asked for after it) never runs before the acquisition's own statement.
        let mut conn = Arc::clone(&self.slots[i]).lock_owned().await;
        let statements = async move {
            let mut attempt = 0;
            loop {
                if conn
                    .as_ref()
                    .is_some_and(|(_, runtime)| !runtime.is_alive())
                {
                    *conn = None;
                }
                let mut failed = None;
                if conn.is_none() {
                    let fresh = async {
                        let conn = Conn::new(opts.clone()).await?;
                        let sql = Arc::clone(&sql);
                        Ok::<_, mysql_async::Error>(MySession {
                            conn,
                            sql,
                            hot: None,
                        })
                    };
                    match timed("the connection attempt", connect_timeout, fresh).await {
                        Ok(fresh) => *conn = Some((fresh, RuntimeBound::new(()))),
                        Err(error) => failed = Some(error),
                    }
                }
                let error = match (failed, conn.as_mut()) {
                    (Some(error), _) => error,
                    (None, Some((c, _))) => match timed(what, response_timeout, op(c)).await {
                        Ok(value) => return Ok(value),
                        Err(error) => error,
                    },
                    (None, None) => MyError::Unexpected("no connection".into()),
                };
                if !error.keeps_connection() {
                    *conn = None; // broken, or in an unknown state after a timeout
                }
                if error.retried(&mut attempt, "mysql").await {
                    continue;
                }
                return Err(error);
            }
        };
        match trips {
            Trips::One => crate::runtime::FinishIfDropped::new(statements).await,
            Trips::Many => match tokio::spawn(statements).await {
                Ok(result) => result,
                Err(join) => Err(MyError::Unexpected(format!(
                    "the statements' task ended abnormally: {join}"
                ))),
            },
        }
    }
}

//! Readers' shares and a semaphore's permits on MySQL: one acquisition for both kinds (the
//! statements that differ passed in), their renewal and release, and a waiting writer's mark.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mysql_async::prelude::Queryable;
use mysql_async::{TxOpts, Value};

use super::errors::MyError;
use super::pool::Trips;
use super::statements::MyStatements;
use super::{MysqlBackend, busy_us, micros, positional};
use crate::backend::sql::errors::acquire_error;
use crate::backend::sql::shares::{READERS, semaphore_limit, shares_token};
use crate::backend::{Attempt, Kind, LockSpec, Refused};
use crate::error::BoxError;

/// Makes or renews the share of `token` in lock `name` (for `lease` µs) and makes the lock row
/// the row of shares `row_token` (readers, or a semaphore's permits) living at least as long:
/// one statement, in the transaction of a share's acquisition or renewal, which decided it.
async fn take_share(
    tx: &mut mysql_async::Transaction<'_>,
    share: &Share,
    lease: i64,
) -> Result<(), mysql_async::Error> {
    let Share {
        sql,
        name,
        token,
        holder,
        row_token,
    } = share;
    let (name, token, row_token) = (name.as_slice(), token.as_str(), row_token.as_str());
    let params = vec![
        Value::from(name),
        Value::from(token),
        Value::from(token),
        Value::from(lease),
        Value::from(holder.as_str()),
        Value::from(name),
        Value::from(row_token),
        Value::from(lease),
        Value::from(row_token),
        Value::from(row_token),
        Value::from(row_token),
        Value::from(row_token),
        Value::from(row_token),
        Value::from(token),
    ];
    tx.exec_drop(sql.take_share.as_str(), positional(params))
        .await
}

/// What a share's renewal and release decide on, read with the lock row locked
/// (`MyStatements::share_locked`): the row's token (`None` without a lock row) and whether it
/// is live, whether share `token` is live, the other live shares and µs until the last of them
/// ends, the live writers' marks.
pub(super) struct Locked {
    pub(super) token: Option<String>,
    pub(super) live: bool,
    pub(super) mine: bool,
    pub(super) others: i64,
    pub(super) last: Option<i64>,
    marks: i64,
}

/// `:name` and `:token` of the shares' statements.
pub(super) fn name_and_token(name: &[u8], token: &str) -> mysql_async::Params {
    let named = [
        (b"name".to_vec(), Value::from(name)),
        (b"token".to_vec(), Value::from(token)),
    ];
    mysql_async::Params::Named(named.into_iter().collect())
}

/// Locks the lock row `name` (with its shares and marks) for the transaction and reads
/// [`Locked`].
pub(super) async fn locked(
    tx: &mut mysql_async::Transaction<'_>,
    sql: &MyStatements,
    name: &[u8],
    token: &str,
) -> Result<Locked, mysql_async::Error> {
    let row: Option<LockedRow> = tx
        .exec_first(sql.share_locked.as_str(), name_and_token(name, token))
        .await?;
    let (token, live, mine, others, last, marks) = row.unwrap_or_default();
    Ok(Locked {
        token,
        live: live.unwrap_or(false),
        mine: mine > 0,
        others,
        last,
        marks,
    })
}

/// The row of `MyStatements::share_locked`.
pub(super) type LockedRow = (Option<String>, Option<bool>, i64, i64, Option<i64>, i64);

/// A share's acquisition's read of the locked lock row (`MyStatements::marks_state`,
/// `MyStatements::permits_state`): (token, live, remaining µs, this share live, live rows
/// that keep a new share out, µs until the first or last of them ends).
type ShareState = (
    Option<String>,
    Option<bool>,
    Option<i64>,
    i64,
    i64,
    Option<i64>,
);

/// What a reader's acquisition and a semaphore permit's differ in, besides their kind: the
/// statements and numbers [`MysqlBackend::acquire_share`] is given.
pub(super) struct ShareRules {
    /// The acquisition, for messages: `the read acquisition`, `the permit's acquisition`.
    what: &'static str,
    /// `token, name` → the lock row, this share, and what keeps a new share out: waiting
    /// writers' marks (`MyStatements::marks_state`), or the live permits
    /// (`MyStatements::permits_state`).
    state: fn(&MyStatements) -> &String,
    /// How many of those keep it out: one writer's mark, or the semaphore's limit.
    full_at: i64,
}

/// What a share's statements name, moved into work that may run more than once (on a new
/// connection after a broken one).
#[derive(Clone)]
struct Share {
    sql: Arc<MyStatements>,
    name: Vec<u8>,
    token: String,
    holder: String,
    /// The lock row's token while shares hold it (see `shares_token`).
    row_token: String,
}

impl Share {
    fn of(backend: &MysqlBackend, spec: &LockSpec<'_>) -> Share {
        Share {
            sql: Arc::clone(&backend.sql),
            name: spec.name.as_bytes().to_vec(),
            token: spec.token.to_owned(),
            holder: backend.holder.clone(),
            row_token: shares_token(spec.kind),
        }
    }
}

impl ShareRules {
    /// A reader's: a writer waiting holds back a reader without a share yet.
    pub(super) fn reader() -> ShareRules {
        ShareRules {
            what: "the read acquisition",
            state: |sql| &sql.marks_state,
            full_at: 1,
        }
    }

    /// A permit's of a semaphore of `limit`: every permit in use holds it back.
    pub(super) fn permit(limit: u16) -> ShareRules {
        ShareRules {
            what: "the permit's acquisition",
            state: |sql| &sql.permits_state,
            full_at: i64::from(limit),
        }
    }
}

/// The row `MyStatements::call_take` answers: (0 taken, 1 busy, 2 held as another token; the
/// lock row's token, live, remaining µs; µs until the first writer's mark ends; the fencing
/// token).
type TakeCall = (
    i64,
    Option<String>,
    Option<bool>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// How long a busy share's attempt waits, in µs: a reader until the writer holding the lock
/// (`live`, `left` µs) or the first waiting writer's mark (`first` µs) ends; a permit until the
/// row's lease (polling sees a release sooner).
fn busy_wait(kind: Kind, live: bool, left: Option<i64>, first: Option<i64>) -> Option<i64> {
    match kind {
        Kind::Shared => match (live.then_some(left).flatten(), first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        },
        _ => left,
    }
}

/// What a share's attempt found: taken (with a fence when asked for: the last write grant's
/// for a reader, a new one for a permit), busy for about this many µs, or the lock row live
/// with another token (a writer's, or a semaphore's of another limit) and this many µs left.
enum ShareAttempt {
    Taken(Option<i64>),
    Busy(Option<i64>),
    HeldAs(String, Option<i64>),
}

impl MysqlBackend {
    /// A reader's attempt (see `MyStatements::state` for the layout) or a semaphore's permit
    /// (`spec.kind`), in one transaction that locks the lock row first: a share (a permit's as
    /// a reader's) while nothing keeps it out — for a reader, a writer holding the lock or one
    /// waiting; for a permit, `limit` live permits — and a row held as a lock, or by a semaphore
    /// of another limit, is refused to a permit.
    pub(super) async fn acquire_share(
        &self,
        spec: LockSpec<'_>,
        rules: ShareRules,
    ) -> Result<Attempt, BoxError> {
        if self.lone_share(spec).await? {
            return Ok(Attempt::Acquired {
                fencing_token: None,
            });
        }
        // A first try goes straight to the transaction; a waiter's retry reads first, so that
        // waiters polling a plainly busy lock do not queue on the lock row's lock.
        if spec.waiting {
            let plainly = match spec.kind {
                Kind::Permits(limit) => self.permits_in_use(spec, limit).await?,
                _ => self.plainly_busy(spec).await?,
            };
            if let Some(busy) = plainly {
                return Ok(busy);
            }
        }
        // An upgradable share is taken by the statements, which refuse a second one.
        let by_call = match crate::token::is_upgradable(spec.token) {
            true => None,
            false => self.take_by_call(spec, rules.full_at, rules.what).await?,
        };
        let outcome = match by_call {
            Some(outcome) => outcome,
            None => self.take_by_statements(spec, rules).await?,
        };
        match outcome {
            ShareAttempt::Taken(fence) => Ok(Attempt::Acquired {
                fencing_token: spec.fencing.then(|| fence.unwrap_or(0) as u64),
            }),
            ShareAttempt::Busy(wait) => Ok(busy_us(wait)),
            ShareAttempt::HeldAs(held, left) => match spec.kind {
                Kind::Permits(limit) => Err(match semaphore_limit(&held) {
                    Some(held) => Refused::limit(held, limit),
                    None => Refused::kind(None, spec.kind),
                }),
                // A writer holds it: busy until its lease ends.
                _ => Ok(busy_us(left)),
            },
        }
    }

    /// The common case of a reader's or a permit's attempt without fencing: the first share
    /// of a free name, one plain `INSERT` (`MyStatements::share_alone`). Whether it was
    /// taken; if not, the name is remembered as shared or busy, and the full acquisition
    /// decides.
    async fn lone_share(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        if spec.fencing || self.contended.contains(spec.name) {
            return Ok(false);
        }
        let (name, token, lease) = (spec.name.as_bytes(), spec.token, micros(spec.lease));
        let params = vec![
            Value::from(name),
            Value::from(shares_token(spec.kind)),
            Value::from(lease),
            Value::from(token),
            Value::from(name),
            Value::from(token),
            Value::from(token),
            Value::from(lease),
            Value::from(self.holder.as_str()),
        ];
        let taken = self
            .run("the share's acquisition", spec.name, move |conn| {
                let params = params.clone();
                Box::pin(async move {
                    let alone = conn.hot().await?.share_alone;
                    match conn.exec_drop(&alone, positional(params)).await {
                        Ok(()) => Ok(conn.affected_rows() == 2),
                        // The lock row exists (1062), or a lone share of another client took
                        // it just now (1213): nothing was written.
                        Err(mysql_async::Error::Server(e)) if matches!(e.code, 1062 | 1213) => {
                            Ok(false)
                        }
                        Err(e) => Err(e),
                    }
                })
            })
            .await
            .map_err(acquire_error)?;
        if !taken {
            self.contended.insert(spec.name);
        }
        Ok(taken)
    }

    /// A share's attempt by the table's procedure (`MyStatements::call_take`): one round trip.
    /// `None` if this client has no procedures (any more: a call that finds them gone, or
    /// refused, says so for the next ones too).
    async fn take_by_call(
        &self,
        spec: LockSpec<'_>,
        full_at: i64,
        what: &'static str,
    ) -> Result<Option<ShareAttempt>, BoxError> {
        if !self.procedures.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let sql = Arc::clone(&self.sql);
        let kind = spec.kind;
        let fence: u8 = match (spec.fencing, kind) {
            (false, _) => 0,
            (true, Kind::Shared) => 1,
            (true, _) => 2,
        };
        let params = vec![
            Value::from(spec.name.as_bytes()),
            Value::from(spec.token),
            Value::from(shares_token(kind)),
            Value::from(micros(spec.lease)),
            Value::from(self.holder.as_str()),
            Value::from(kind != Kind::Shared),
            Value::from(full_at),
            Value::from(fence),
        ];
        let called = self
            .run(what, spec.name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move {
                    conn.exec_first::<TakeCall, _, _>(sql.call_take.as_str(), positional(params))
                        .await
                })
            })
            .await;
        let (outcome, held, live, left, first, fence) = match called {
            Ok(Some(row)) => row,
            Ok(None) => return Err(MyError::Unexpected(format!("{what} returned no row")).into()),
            Err(error) if self.procedures_gone(&error) => return Ok(None),
            Err(error) => return Err(acquire_error(error)),
        };
        let live = live.unwrap_or(false);
        Ok(Some(match outcome {
            0 => ShareAttempt::Taken(fence),
            2 => ShareAttempt::HeldAs(held.unwrap_or_default(), left),
            _ => ShareAttempt::Busy(busy_wait(kind, live, left, first)),
        }))
    }

    /// Whether `error` says this client's procedures are gone (dropped, or a server restarted
    /// without them) or refused: the statements do the work from now on.
    pub(super) fn procedures_gone(&self, error: &MyError) -> bool {
        let gone = matches!(error.server_code(), Some(1305 | 1370));
        if gone {
            tracing::debug!(%error, "distlock: mysql: shares taken by statements from now on");
            self.procedures.store(false, Ordering::Relaxed);
        }
        gone
    }

    /// A share's attempt by statements, in one transaction.
    async fn take_by_statements(
        &self,
        spec: LockSpec<'_>,
        rules: ShareRules,
    ) -> Result<ShareAttempt, BoxError> {
        let share = Share::of(self, &spec);
        let (lease, fencing, kind) = (micros(spec.lease), spec.fencing, spec.kind);
        let ShareRules {
            what,
            state,
            full_at,
        } = rules;
        let outcome = self
            .run_with(Trips::Many, what, spec.name, move |conn| {
                let s = share.clone();
                Box::pin(async move {
                    let mut tx = conn.start_transaction(TxOpts::default()).await?;
                    tx.exec_drop(s.sql.lock_row.as_str(), (s.name.clone(),))
                        .await?;
                    // Read once the row is locked: nobody changes the shares or marks meanwhile.
                    let found: Option<ShareState> = tx
                        .exec_first(state(&s.sql).as_str(), name_and_token(&s.name, &s.token))
                        .await?;
                    let (held, live, left, mine, n, first) = found.unwrap_or_default();
                    let (held, live) = (held.unwrap_or_default(), live.unwrap_or(false));
                    if live && held != s.row_token {
                        tx.rollback().await?;
                        return Ok(ShareAttempt::HeldAs(held, left));
                    }
                    // A writer waiting holds back a reader without a share yet; every permit
                    // in use, a permit.
                    let counted = mine == 0
                        && match kind {
                            Kind::Shared => held == s.row_token,
                            _ => live,
                        };
                    if counted && n >= full_at {
                        tx.rollback().await?;
                        return Ok(ShareAttempt::Busy(busy_wait(kind, live, left, first)));
                    }
                    // An upgradable share beside another live one: refused, busy.
                    if mine == 0 && crate::token::is_upgradable(&s.token) {
                        let others: Option<i64> = tx
                            .exec_first(
                                s.sql.other_upgradable.as_str(),
                                (
                                    s.name.clone(),
                                    s.name.clone(),
                                    s.name.clone(),
                                    s.token.clone(),
                                ),
                            )
                            .await?;
                        if others.unwrap_or(0) > 0 {
                            tx.rollback().await?;
                            return Ok(ShareAttempt::Busy(busy_wait(kind, live, left, first)));
                        }
                    }
                    take_share(&mut tx, &s, lease).await?;
                    let fence = match (fencing, kind) {
                        (false, _) => None,
                        (true, Kind::Shared) => Some(
                            tx.exec_first(s.sql.last_fence.as_str(), (s.name,))
                                .await?
                                .unwrap_or(0),
                        ),
                        (true, _) => {
                            tx.exec_drop(s.sql.fence.as_str(), (s.name,)).await?;
                            tx.last_insert_id().map(|f| f as i64)
                        }
                    };
                    tx.commit().await?;
                    Ok(ShareAttempt::Taken(fence))
                })
            })
            .await
            .map_err(acquire_error)?;
        Ok(outcome)
    }

    /// One of the unlocked reads of the lock row (`MyStatements::peek`, `MyStatements::peek_permits`) for `spec`:
    /// (token, live, remaining µs, a count, this token's live share).
    async fn peek(
        &self,
        spec: LockSpec<'_>,
        statement: fn(&MyStatements) -> &String,
    ) -> Result<Option<(String, bool, Option<i64>, i64, i64)>, BoxError> {
        let sql = Arc::clone(&self.sql);
        let name = Value::from(spec.name.as_bytes());
        let params = vec![
            name.clone(),
            name.clone(),
            name.clone(),
            Value::from(spec.token),
            name,
        ];
        self.run("reading the lock", spec.name, move |conn| {
            let (sql, params) = (Arc::clone(&sql), params.clone());
            Box::pin(async move {
                conn.exec_first(statement(&sql).as_str(), positional(params))
                    .await
            })
        })
        .await
        .map_err(acquire_error)
    }

    /// A permit's attempt that a plain read shows busy — every permit in use — or refused — a
    /// row held as a lock, or by a semaphore of another limit — answered without a transaction.
    /// `None`: the transaction decides.
    async fn permits_in_use(
        &self,
        spec: LockSpec<'_>,
        limit: u16,
    ) -> Result<Option<Attempt>, BoxError> {
        // Every permit plainly in use: answered without a transaction, so that waiters polling
        // do not queue on the lock row's lock.
        let row = self.peek(spec, |sql| &sql.peek_permits).await?;
        if let Some((held, true, left, live, 0)) = row {
            if held != shares_token(spec.kind) {
                return Err(match semaphore_limit(&held) {
                    Some(held) => Refused::limit(held, limit),
                    None => Refused::kind(None, spec.kind),
                });
            }
            if live >= i64::from(limit) {
                return Ok(Some(busy_us(left)));
            }
        }
        Ok(None)
    }

    /// A reader's attempt that a plain read shows busy — a live writer holds the lock, or a
    /// writer waits (and this reader has no share yet) — answered without a transaction, so
    /// that waiting readers polling do not queue on the lock row's lock. `None`: it may be
    /// granted; the transaction decides.
    async fn plainly_busy(&self, spec: LockSpec<'_>) -> Result<Option<Attempt>, BoxError> {
        let row = self.peek(spec, |sql| &sql.peek).await?;
        let Some((token, live, left, marks, mine)) = row else {
            return Ok(None);
        };
        if live && let Some(held) = semaphore_limit(&token) {
            return Err(Refused::kind(Some(held), spec.kind));
        }
        let writer = live && token != READERS;
        let held_back = token == READERS && marks > 0 && mine == 0;
        if writer || held_back {
            return Ok(Some(busy_us(left)));
        }
        // An upgradable share waiting for another one to leave: read, not locked, as above.
        if live && token == READERS && mine == 0 && crate::token::is_upgradable(spec.token) {
            let sql = Arc::clone(&self.sql);
            let name = Value::from(spec.name.as_bytes());
            let params = vec![name.clone(), name.clone(), name, Value::from(spec.token)];
            let others: Option<i64> = self
                .run("reading the lock", spec.name, move |conn| {
                    let (sql, params) = (Arc::clone(&sql), params.clone());
                    Box::pin(async move {
                        conn.exec_first(sql.other_upgradable.as_str(), positional(params))
                            .await
                    })
                })
                .await
                .map_err(acquire_error)?;
            if others.unwrap_or(0) > 0 {
                return Ok(Some(busy_us(left)));
            }
        }
        Ok(None)
    }

    /// A reader's (or a permit's) renewal: its share lives `lease` more, and the lock row as
    /// long.
    pub(super) async fn renew_shared(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        let (share, lease) = (Share::of(self, &spec), micros(spec.lease));
        let renewed = self
            .run_with(Trips::Many, "the read renewal", spec.name, move |conn| {
                let s = share.clone();
                Box::pin(async move {
                    let mut tx = conn.start_transaction(TxOpts::default()).await?;
                    let row = locked(&mut tx, &s.sql, &s.name, &s.token).await?;
                    if row.live
                        && row.token.as_deref() == Some(s.token.as_str())
                        && crate::token::is_upgradable(&s.token)
                    {
                        // Upgraded while this renewal was on its way: renewed as the lock it
                        // became.
                        tx.exec_drop(
                            s.sql.renew.as_str(),
                            (lease, s.name.clone(), s.token.clone()),
                        )
                        .await?;
                        tx.commit().await?;
                        return Ok(true);
                    }
                    if !(row.token.as_ref() == Some(&s.row_token) && row.live && row.mine) {
                        tx.rollback().await?;
                        return Ok(false);
                    }
                    take_share(&mut tx, &s, lease).await?;
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .await?;
        Ok(renewed)
    }

    /// A reader's release: its share goes; the lock row then lives until the longest share
    /// left ends — or, with none left, is deleted (or, while writers wait, left to them, its
    /// lease over). `(share was live, readers left, retried)`: a share found gone after a
    /// retried try may have been released by the try whose answer was lost.
    pub(super) async fn release_shared(
        &self,
        name: &str,
        token: &str,
        kind: Kind,
    ) -> Result<(bool, bool, bool), MyError> {
        let row_token = shares_token(kind);
        let tries = Arc::new(std::sync::atomic::AtomicU32::new(0));
        if !self.contended.contains(name) {
            // A lone share, no writer waiting: it and its lock row go in one `DELETE`.
            let counted = Arc::clone(&tries);
            let params = vec![
                Value::from(name.as_bytes()),
                Value::from(token),
                Value::from(name.as_bytes()),
                Value::from(row_token.as_str()),
                Value::from(token),
            ];
            let alone = self
                .run("the read release", name, move |conn| {
                    let params = params.clone();
                    counted.fetch_add(1, Ordering::Relaxed);
                    Box::pin(async move {
                        let leave = conn.hot().await?.leave_alone;
                        conn.exec_drop(&leave, positional(params)).await?;
                        Ok(conn.affected_rows() == 2)
                    })
                })
                .await?;
            if alone {
                return Ok((true, false, false));
            }
            self.contended.insert(name); // other shares, a writer's mark, or a renewal
        }
        let retried = tries.load(Ordering::Relaxed) > 1;
        self.release_full(name, token, row_token)
            .await
            .map(|(live, left)| (live, left, retried))
    }

    /// [`release_shared`](Self::release_shared) by the full transaction (or the procedure).
    async fn release_full(
        &self,
        name: &str,
        token: &str,
        row_token: String,
    ) -> Result<(bool, bool), MyError> {
        if self.procedures.load(Ordering::Relaxed) {
            let sql = Arc::clone(&self.sql);
            let params = vec![
                Value::from(name.as_bytes()),
                Value::from(token),
                Value::from(row_token.as_str()),
            ];
            let called = self
                .run("the read release", name, move |conn| {
                    let (sql, params) = (Arc::clone(&sql), params.clone());
                    Box::pin(async move {
                        conn.exec_first::<(bool, bool), _, _>(
                            sql.call_give.as_str(),
                            positional(params),
                        )
                        .await
                    })
                })
                .await;
            match called {
                Ok(Some(given)) => return Ok(given),
                Ok(None) => {
                    return Err(MyError::Unexpected(
                        "the read release returned no row".into(),
                    ));
                }
                Err(error) if self.procedures_gone(&error) => {}
                Err(error) => return Err(error),
            }
        }
        let sql = Arc::clone(&self.sql);
        let (bytes, token) = (name.as_bytes().to_vec(), token.to_owned());
        self.run_with(Trips::Many, "the read release", name, move |conn| {
            let (sql, name, token, row_token) = (
                Arc::clone(&sql),
                bytes.clone(),
                token.clone(),
                row_token.clone(),
            );
            Box::pin(async move {
                let mut tx = conn.start_transaction(TxOpts::default()).await?;
                let row = locked(&mut tx, &sql, &name, &token).await?;
                let ours = row.token.as_ref() == Some(&row_token);
                let last = ours && row.others == 0;
                if last && row.marks == 0 {
                    // The last share: its row goes with it, in one statement.
                    let params = vec![
                        Value::from(name.clone()),
                        Value::from(row_token),
                        Value::from(name.clone()),
                        Value::from(name.clone()),
                        Value::from(name),
                        Value::from(token),
                    ];
                    tx.exec_drop(sql.drop_last_share.as_str(), positional(params))
                        .await?;
                } else {
                    let params = (name.clone(), name.clone(), name.clone(), token);
                    tx.exec_drop(sql.drop_share.as_str(), params).await?;
                    if ours {
                        // The row lives until the last share left ends; with none left but
                        // writers waiting, it is left to them, its lease over.
                        let until = if last { -1 } else { row.last.unwrap_or(-1) };
                        tx.exec_drop(sql.readers_until.as_str(), (until, name, row_token))
                            .await?;
                    }
                }
                tx.commit().await?;
                Ok((row.mine, !last))
            })
        })
        .await
    }
}

//! Upgradable reads on advisory locks.
//!
//! - **The upgradable share** is the reader's shared advisory lock of the key `k`, taken
//!   after an exclusive advisory lock of the mark `(hi, lo)` — the two halves of `k` in the
//!   two-int4 key space, which is PostgreSQL's own (`objsubid` 2), apart from the bigint
//!   keys (`objsubid` 1). Plain readers coexist with it; a writer waits for it as for any
//!   reader; a second upgradable request waits for the mark.
//! - **The upgrade** is the exclusive lock of `k` asked for on the share's own session. Tried
//!   first (`pg_try_advisory_lock`: granted at once when no other reader holds `k` and no
//!   writer waits). Otherwise a blocking `pg_advisory_lock(k)`: PostgreSQL's lock manager puts
//!   a request whose session holds a lock conflicting with a waiter's request ahead of that
//!   waiter (`ProcSleep`), so a writer queued before the upgrade stays behind it; readers that
//!   come later queue behind the upgrade (their request conflicts with a waiting exclusive
//!   one). The try alone would not do: with a writer waiting, it conflicts with the lock's
//!   wait mask and fails every time.
//! - **The lease while it waits.** The session's connection also carries its renewals, which
//!   would queue behind a request that waits for long. The request runs under a
//!   `lock_timeout` (a third of the lease, at most half the response timeout) and is asked
//!   again at once when that runs out: the renewal queued behind it is answered in between. A
//!   session whose statement runs is not idle, so the server's idle timeout (the lease) waits
//!   too; the holder counts its lease from answered statements only.
//! - **Given up**: the waiting request is cancelled (and stopped from being asked again); an
//!   exclusive lock granted just before the cancel is let go. The share and the mark stay.
//! - **Release** lets go of everything the session holds (`pg_advisory_unlock_all`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_postgres::error::SqlState;

use super::conn::first_value;
use super::note::note;
use super::{AdvisoryBackend, AdvisorySession, session_over};
use crate::admin::advisory_key;
use crate::backend::postgres::errors::{PgError, describe};
use crate::backend::sql::errors::acquire_error;
use crate::backend::sql::{SessionState, millis};
use crate::backend::{Kind, LockSpec, Transient, Upgrade};
use crate::error::BoxError;

/// Where an upgradable read's upgrade stands, on its session.
#[derive(Default)]
pub(super) enum Upgrading {
    /// Not asked for (or given up).
    #[default]
    No,
    /// The blocking request waits in the server; `stop` keeps it from being asked again.
    Waiting {
        task: tokio::task::JoinHandle<()>,
        stop: Arc<AtomicBool>,
    },
    /// The blocking request was granted (with this fencing token).
    Granted(Option<u64>),
    /// The blocking request failed: why, and whether the session is over (the share with it).
    Failed(String, bool),
    /// Upgraded: the session holds the write lock (with this fencing token).
    Done(Option<u64>),
}

/// The mark of `key` that upgradable reads take exclusively: its two halves, as the two-int4
/// advisory key `(hi, lo)`.
pub(super) fn mark(key: i64) -> String {
    format!("{}, {}", (key >> 32) as i32, key as i32)
}

/// The expression that takes `spec`'s upgradable share of `key` if it can, else nothing:
/// the mark, then the share (the mark let go again if the share is busy).
pub(super) fn try_upgradable(key: i64) -> String {
    let mark = mark(key);
    format!(
        "(CASE WHEN NOT pg_try_advisory_lock({mark}) THEN false \
         WHEN pg_try_advisory_lock_shared({key}) THEN true \
         ELSE NOT pg_advisory_unlock({mark}) END)"
    )
}

/// The statement part that waits for `key`'s upgradable share: the mark, then the share.
pub(super) fn lock_upgradable(key: i64) -> String {
    format!(
        "pg_advisory_lock({}), pg_advisory_lock_shared({key})",
        mark(key)
    )
}

impl AdvisoryBackend {
    /// How long one blocking upgrade request waits before it is asked again (letting the
    /// renewal queued behind it through): a third of the lease, at most half the response
    /// timeout (a renewal's answer is awaited that long), at least 20 ms.
    fn upgrade_round(&self, lease: Duration) -> Duration {
        (lease / 3)
            .min(self.settings.response_timeout / 2)
            .max(Duration::from_millis(20))
    }

    /// One upgrade attempt of `spec`'s upgradable share.
    pub(super) async fn upgrade_share(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        let Some(session) = self.session(spec.token) else {
            return Ok(Upgrade::Lost);
        };
        if !matches!(session.state(), SessionState::Held(_)) {
            return Ok(Upgrade::Lost);
        }
        let now = std::mem::take(&mut *session.upgrading());
        match now {
            Upgrading::Done(fence) => {
                *session.upgrading() = Upgrading::Done(fence);
                Ok(Upgrade::Done {
                    fencing_token: fence,
                })
            }
            waiting @ Upgrading::Waiting { .. } => {
                *session.upgrading() = waiting;
                Ok(Upgrade::Busy { ttl: None })
            }
            Upgrading::Granted(fence) => self.upgraded(&session, &spec, fence).await,
            Upgrading::Failed(_, true) => Ok(Upgrade::Lost),
            Upgrading::Failed(why, false) => Err(Transient::wrap(format!(
                "the upgrade's request failed: {why}"
            ))),
            Upgrading::No => {
                let key = advisory_key(spec.name);
                let fence = self.upgrade_fence(&spec);
                let text = format!(
                    "SELECT CASE WHEN pg_try_advisory_lock({key}) THEN {fence} ELSE -1 END{}",
                    note(&spec, None)
                );
                let answer = match self.query(&session.client, &text).await {
                    Ok(answer) => answer,
                    Err(error) if session_over(&error) => return Ok(Upgrade::Lost),
                    Err(error) => return Err(acquire_error(error)),
                };
                match answer.parse::<i64>() {
                    Ok(-1) => {
                        self.wait_for_upgrade(&session, &spec);
                        Ok(Upgrade::Busy { ttl: None })
                    }
                    Ok(fence) if fence >= 0 => {
                        let fence = spec.fencing.then_some(fence as u64);
                        self.upgraded(&session, &spec, fence).await
                    }
                    _ => Err(Box::new(PgError::Unexpected(format!(
                        "the upgrade's try answered {answer:?}"
                    )))),
                }
            }
        }
    }

    /// The upgrade's fencing token, evaluated once the write lock is granted: a writer's.
    fn upgrade_fence(&self, spec: &LockSpec<'_>) -> String {
        self.fence_expression(&LockSpec {
            kind: Kind::Exclusive,
            ..*spec
        })
    }

    /// The session holds the write lock: renewals name its fencing token from now on (the
    /// admin API reads it from the comment, dated at once when there is one).
    async fn upgraded(
        &self,
        session: &AdvisorySession,
        spec: &LockSpec<'_>,
        fence: Option<u64>,
    ) -> Result<Upgrade, BoxError> {
        *session.upgrading() = Upgrading::Done(fence);
        session.set(SessionState::Held(fence));
        if fence.is_some() {
            let written = LockSpec {
                kind: Kind::Exclusive,
                ..*spec
            };
            self.date(session, &written, fence).await?;
        }
        Ok(Upgrade::Done {
            fencing_token: fence,
        })
    }

    /// Starts the blocking request of `spec`'s upgrade, asked again each round until granted,
    /// failed or stopped; the upgrade is woken when it ends.
    fn wait_for_upgrade(&self, session: &Arc<AdvisorySession>, spec: &LockSpec<'_>) {
        let key = advisory_key(spec.name);
        let round = millis(self.upgrade_round(spec.lease));
        let text = format!(
            "WITH t AS (SELECT set_config('lock_timeout', '{round}', true)) \
             SELECT pg_advisory_lock({key}), {fence} FROM t{note}",
            fence = self.upgrade_fence(spec),
            note = note(spec, None),
        );
        let (name, token, fencing) = (spec.name.to_owned(), spec.token.to_owned(), spec.fencing);
        let hub = Arc::clone(&self.hub);
        let stop = Arc::new(AtomicBool::new(false));
        let waiting = Arc::clone(session);
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let outcome = loop {
                if stopped.load(Ordering::Acquire) {
                    break Upgrading::No;
                }
                match waiting.client.simple_query(&text).await {
                    Ok(messages) => {
                        let fence = first_value(&messages, 1).and_then(|v| v.parse::<u64>().ok());
                        break Upgrading::Granted(if fencing { fence } else { None });
                    }
                    // Its round is over: the renewal queued behind it goes through, and it
                    // is asked again (ahead of any writer queued since, as before).
                    Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {}
                    Err(error) if error.code() == Some(&SqlState::QUERY_CANCELED) => {
                        break Upgrading::No;
                    }
                    Err(error) => {
                        let why = describe(&error);
                        break Upgrading::Failed(why, session_over(&PgError::Driver(error)));
                    }
                }
            };
            // Not overwritten if given up meanwhile (`No` then, or already taken).
            let mut upgrading = waiting.upgrading();
            if matches!(*upgrading, Upgrading::Waiting { .. }) {
                *upgrading = outcome;
            } else if let Upgrading::Granted(_) = outcome {
                *upgrading = outcome;
            }
            drop(upgrading);
            hub.notify_one(&name, &token);
        });
        *session.upgrading() = Upgrading::Waiting { task, stop };
    }

    /// Gives up `spec`'s upgrade: a waiting request is cancelled, and a write lock granted
    /// before the cancel took effect is let go; the share and the mark stay.
    pub(super) async fn abandon_share_upgrade(&self, spec: LockSpec<'_>) -> Result<(), BoxError> {
        let Some(session) = self.session(spec.token) else {
            return Ok(());
        };
        self.stop_upgrade(&session).await;
        let granted = std::mem::take(&mut *session.upgrading());
        if let Upgrading::Granted(_) = granted {
            let text = format!("SELECT pg_advisory_unlock({})", advisory_key(spec.name));
            self.query(&session.client, &text).await?;
        }
        Ok(())
    }

    /// Ends the blocking request of an upgrade, if one waits: stopped, cancelled, awaited.
    /// What it ended with stays in the session (a grant that came first, say).
    pub(super) async fn stop_upgrade(&self, session: &AdvisorySession) {
        let waiting = {
            let mut upgrading = session.upgrading();
            match std::mem::take(&mut *upgrading) {
                Upgrading::Waiting { task, stop } => Some((task, stop)),
                other => {
                    *upgrading = other;
                    None
                }
            }
        };
        let Some((task, stop)) = waiting else {
            return;
        };
        // Taken out of `Waiting` (`No` left behind), the task records only a grant.
        stop.store(true, Ordering::Release);
        // A cancel that came between two rounds finds nothing to cancel: the round under way
        // then ends within its `lock_timeout`, below the response timeout `cancel` waits.
        self.cancel(session, Some(task)).await;
    }
}

//! Waiting inside the server (the blocking `GET_LOCK`), giving it up, and a release whose
//! answer was lost.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::conn::{Session, State, grant_on, note_sum};
use super::names::{note_locks, sql};
use super::{BLOCK_SECONDS, MyError, NamedBackend};
use crate::backend::{Hold, LockSpec, Released};
use crate::error::BoxError;

impl NamedBackend {
    /// Starts the blocking request of the waiter `spec.token`.
    pub(super) fn block(&self, session: Arc<Session>, spec: &LockSpec<'_>) {
        let lock = self.lock(spec.name);
        let (name, token, lease, fencing) = (
            spec.name.to_owned(),
            spec.token.to_owned(),
            spec.lease,
            spec.fencing,
        );
        let (hub, fences, limit) = (
            Arc::clone(&self.hub),
            self.fences.clone(),
            self.settings.response_timeout,
        );
        session.set(State::Waiting);
        let waiting = Arc::clone(&session);
        let task = tokio::spawn(async move {
            // Without fencing, the note locks come in the same statement as the grant.
            let notes = match fencing {
                false => note_locks(&token, lease, None),
                true => Vec::new(),
            };
            let blocked = async {
                let mut params = vec![lock.as_bytes()];
                params.extend(notes.iter().map(|n| n.as_bytes()));
                let text = match fencing {
                    false => format!(
                        "SELECT IF(GET_LOCK(?, {BLOCK_SECONDS}) = 1, {}, -1)",
                        note_sum(notes.len())
                    ),
                    true => format!("SELECT GET_LOCK(?, {BLOCK_SECONDS})"),
                };
                let mut c = waiting.conn.conn.lock().await;
                c.query_first::<Option<i64>, _>(sql(&text, &params)).await
            };
            let state = match blocked.await {
                Ok(Some(Some(n))) if !fencing && n == notes.len() as i64 => State::Granted(None),
                Ok(Some(Some(1))) if fencing => {
                    match grant_on(&waiting.conn, &fences, &name, &token, lease, fencing, limit)
                        .await
                    {
                        Ok(fence) => State::Granted(fence),
                        Err(error) => State::Failed(error.to_string()),
                    }
                }
                Ok(other) => State::Failed(format!("the blocking GET_LOCK answered {other:?}")),
                Err(error) => State::Failed(MyError::Driver(error).to_string()),
            };
            waiting.set(state);
            hub.notify_one(&name, &token);
        });
        *session.waiting.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Ends the connection `id`'s statement (`KILL QUERY`) or session (`KILL CONNECTION`)
    /// from another connection.
    pub(super) async fn kill(&self, what: &str, id: u32) -> Result<(), MyError> {
        let text = format!("KILL {what} {id}");
        match self.first_once::<i64>("ending a session", &text, &[]).await {
            // Unknown thread: it has ended already.
            Err(MyError::Driver(mysql_async::Error::Server(e))) if e.code == 1094 => Ok(()),
            other => other.map(drop),
        }
    }

    /// Takes a waiter's blocking request out of the server's queue: ended now, and its answer
    /// (ended, or granted just before) awaited; a grant that raced it is given back.
    pub(super) async fn give_up_waiting(&self, session: &Session) -> Result<Released, BoxError> {
        let task = session
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let limit = self.settings.response_timeout;
        let _ = tokio::time::timeout(limit, self.kill("QUERY", session.conn.id)).await;
        if let Some(task) = task {
            let abort = task.abort_handle();
            if tokio::time::timeout(limit, task).await.is_err() {
                abort.abort();
            }
        }
        if let State::Granted(_) = session.state() {
            // Granted as it was ended: the session holds the lock, and ends with it.
            let _ = tokio::time::timeout(limit, self.kill("CONNECTION", session.conn.id)).await;
        }
        Ok(Released::NotOurs)
    }

    /// A release whose statement failed (no answer, a broken connection): if the session
    /// still holds the lock, it is ended — released; if not, the release or the session's
    /// end freed it — ambiguous, as a retried release is.
    pub(super) async fn after_failed_release(
        &self,
        hold: Hold<'_>,
        session: &Session,
        error: MyError,
    ) -> Result<Released, BoxError> {
        let check = || async {
            let holder: Option<Option<u32>> = self
                .first_once(
                    "asking who holds the lock",
                    "SELECT IS_USED_LOCK(?)",
                    &[self.lock(hold.name).as_bytes()],
                )
                .await?;
            if holder.flatten() != Some(session.conn.id) {
                return Ok::<_, MyError>(Released::Ambiguous { alive_until: None });
            }
            self.kill("CONNECTION", session.conn.id).await?;
            Ok(Released::Deleted)
        };
        // A few tries: the path that lost the answer may take a moment to carry one again.
        let mut tries = 0;
        let checked = loop {
            tries += 1;
            match check().await {
                Err(_) if tries < 5 => tokio::time::sleep(Duration::from_millis(200)).await,
                other => break other,
            }
        };
        checked.map_err(|checking| {
            format!(
                "the release got no answer ({error}), and the server could not be asked \
                 whether the lock is still held ({checking})"
            )
            .into()
        })
    }
}

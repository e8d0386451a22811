//! The blocking requests of `mode=advisory`'s waiters: started in a task of their own once a
//! try found the lock busy, and taken out of the server's queue when the waiter gives up.

use std::sync::Arc;

use super::conn::first_value;
use super::note::{function, note};
use super::{AdvisoryBackend, AdvisorySession, upgrade};
use crate::admin::advisory_key;
use crate::backend::postgres::errors::describe;
use crate::backend::sql::{SessionState, millis};
use crate::backend::{LockSpec, Released};
use crate::error::BoxError;

impl AdvisoryBackend {
    /// Starts the blocking request of the waiter `spec.token`.
    pub(super) fn block(&self, session: Arc<AdvisorySession>, spec: &LockSpec<'_>) {
        let key = advisory_key(spec.name);
        let lock = match crate::token::is_upgradable(spec.token) {
            // Two columns: the fencing token stays the third.
            true => upgrade::lock_upgradable(key),
            false => format!("{}({key}), 0", function(spec.kind, "advisory_lock")),
        };
        let text = format!(
            "SELECT {lock}, set_config('idle_session_timeout', '{lease}', false), \
             {fence}{note}",
            lease = millis(spec.lease),
            fence = self.fence_expression(spec),
            note = note(spec, None),
        );
        let (name, token, fencing) = (spec.name.to_owned(), spec.token.to_owned(), spec.fencing);
        let hub = Arc::clone(&self.hub);
        session.set(SessionState::Waiting);
        let waiting = Arc::clone(&session);
        let task = tokio::spawn(async move {
            let state = match waiting.client.simple_query(&text).await {
                Ok(messages) => {
                    let fence = first_value(&messages, 3).and_then(|v| v.parse::<u64>().ok());
                    SessionState::Granted(if fencing { fence } else { None })
                }
                Err(error) => SessionState::Failed(describe(&error)),
            };
            waiting.set(state);
            hub.notify_one(&name, &token);
        });
        *session.waiting.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Takes a waiter's blocking request out of the server's queue: cancelled now, and its
    /// answer (cancelled, or granted just before) awaited. Dropping the connection after ends
    /// the session, and a grant that raced the cancel.
    pub(super) async fn give_up_waiting(
        &self,
        session: &AdvisorySession,
    ) -> Result<Released, BoxError> {
        let task = session
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.cancel(session, task).await;
        Ok(Released::NotOurs)
    }

    /// Cancels the statement running on `session`'s connection, then awaits `task`, the one
    /// that sent it (aborted past the response timeout). A cancel is a signal to the waiting
    /// backend, which leaves the lock's queue a moment later: waiting for the request's answer
    /// means that a reader that tries right after is not still queued behind the request.
    pub(super) async fn cancel(
        &self,
        session: &AdvisorySession,
        task: Option<tokio::task::JoinHandle<()>>,
    ) {
        let limit = self.settings.response_timeout;
        let cancel = session.client.cancel_token();
        let _ = tokio::time::timeout(
            limit,
            cancel.cancel_query(crate::backend::postgres::tls::connector(&self.tls)),
        )
        .await;
        if let Some(task) = task {
            let abort = task.abort_handle();
            if tokio::time::timeout(limit, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

//! One ZooKeeper session and its liveness, measured on this process's monotonic clock.
//!
//! ZooKeeper expires a session when the server has heard nothing from its client for the
//! session timeout; the session's ephemeral nodes — its locks — go with it. The client library
//! only notices much later (it reports a session expired 7/5 of the timeout after losing its
//! connection). So each session has a heartbeat of its own: a cheap read every timeout/4,
//! and the session counts as alive only until the send time of the last answered read plus
//! the timeout, minus the drift margin. The server received that read after it was sent, so
//! it cannot expire the session before then: a session this process calls alive is alive on
//! the server, and every lock on it is reported lost before the server can give it away.
//!
//! A session for locks with a lock-delay has the lease plus the delay as its timeout on the
//! server; this process counts it alive for the timeout less the delay (the lease), and
//! heartbeats every quarter of that. A holder that stops is reported lost when its lease ends,
//! and the server expires its session, and deletes its nodes, the delay later.

use std::sync::Mutex;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::backend::loss::{Closer, Loss, Sentinel};
use crate::backend::{counted, drift};

/// A session, its negotiated timeout, and whether it still holds.
pub(crate) struct ZkSession {
    /// Taken out (and so closed, once the last clone is dropped) when the session is lost.
    client: Mutex<Option<zk::Client>>,
    /// The timeout the server granted (it clamps the one asked for to its own bounds), the
    /// lock-delay included.
    pub timeout: Duration,
    pub loss: std::sync::Arc<Loss>,
    heartbeat: AbortHandle,
    closer: Closer,
}

impl ZkSession {
    /// Starts the heartbeat of a session opened at `opened_at` (a reading taken before the
    /// connect request went out), whose last `delay` of its timeout is a lock-delay (not
    /// counted here: see the module docs).
    /// The session is closed on the server (on a connection of its own, `hosts`) when it is
    /// dropped (the client is gone) or its runtime shuts down: its nodes go at once.
    pub(crate) fn start(
        client: zk::Client,
        delay: Duration,
        opened_at: Instant,
        shown: String,
        access: &super::ensemble::Ensemble,
        connect_timeout: Duration,
        bound: Duration,
    ) -> ZkSession {
        let timeout = client.session_timeout();
        let counted = counted(timeout, delay);
        let loss = std::sync::Arc::new(Loss::default());
        loss.confirm(opened_at + counted - drift(counted));
        let closer = closer(
            access.clone(),
            client.session().clone(),
            timeout,
            connect_timeout,
            bound,
        );
        let sentinel = Sentinel {
            loss: std::sync::Arc::clone(&loss),
            closer: closer.clone(),
        };
        let (beating, kept) = (client.clone(), std::sync::Arc::clone(&loss));
        let heartbeat = tokio::spawn(async move {
            let _sentinel = sentinel;
            heartbeat(beating, delay, kept, opened_at, shown).await
        })
        .abort_handle();
        ZkSession {
            client: Mutex::new(Some(client)),
            timeout,
            loss,
            heartbeat,
            closer,
        }
    }

    /// The client, unless the session is lost or its heartbeat died with its runtime.
    pub(crate) fn client(&self) -> Option<zk::Client> {
        if !self.is_usable() {
            return None;
        }
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A lock on it must live until `until` (its `min_hold`), even if this process goes
    /// first: see [`Closer::keep_until`].
    pub(crate) fn keep_until(&self, until: Instant) {
        self.closer.keep_until(until);
    }

    pub(crate) fn is_usable(&self) -> bool {
        !self.loss.is_lost() && !self.heartbeat.is_finished()
    }

    /// Gives the session up: every lock on it is lost, and the connection closes once the
    /// last request in flight is done (the server then deletes the session's nodes at once,
    /// if it can still be reached).
    pub(crate) fn abandon(&self, why: String) {
        self.loss.mark(why);
        self.heartbeat.abort();
        self.client.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl crate::backend::loss::Closes for ZkSession {
    /// Closes the session on the server now (its client is closing): see
    /// [`Closer::close_now`].
    fn close(&self) -> crate::runtime::BoxFuture<'_, ()> {
        Box::pin(async move {
            self.closer.close_now(&self.loss).await;
            self.heartbeat.abort();
            self.client.lock().unwrap_or_else(|p| p.into_inner()).take();
        })
    }
}

impl Drop for ZkSession {
    fn drop(&mut self) {
        // Closed, so its nodes — locks, places in line — go now, not one timeout later.
        self.closer.close_dropped(&self.loss);
        self.heartbeat.abort();
    }
}

/// Closes session `info` on a connection of its own: attaches to it and closes it (see
/// [`Closer`]).
fn closer(
    access: super::ensemble::Ensemble,
    info: zk::SessionInfo,
    timeout: Duration,
    connect_timeout: Duration,
    bound: Duration,
) -> Closer {
    let close: crate::runtime::Closing = std::sync::Arc::new(move || {
        let (access, info) = (access.clone(), info.clone());
        Box::pin(async move {
            let connecting = access.connect(|connector| {
                connector
                    .with_session(info)
                    .with_session_timeout(timeout)
                    .with_connection_timeout(connect_timeout)
            });
            let Ok(client) = connecting.await else {
                return; // expired or closed already, or unreachable: nothing more to do
            };
            let mut states = client.state_watcher();
            // Dropping the last handle sends `CloseSession`.
            drop(client);
            while !matches!(
                states.changed().await,
                zk::SessionState::Closed | zk::SessionState::Expired | zk::SessionState::AuthFailed
            ) {}
        })
    });
    Closer::new(close, bound)
}

/// Confirms the session every counted timeout/4 and marks it lost as soon as it may have
/// expired, the lock-delay not counted.
async fn heartbeat(
    client: zk::Client,
    delay: Duration,
    loss: std::sync::Arc<Loss>,
    opened_at: Instant,
    shown: String,
) {
    let timeout = counted(client.session_timeout(), delay);
    let margin = drift(timeout);
    let interval = (timeout / 4).max(Duration::from_millis(5));
    let retry_pause = (timeout / 20).max(Duration::from_millis(5));
    let mut states = client.state_watcher();
    let mut confirmed_at = opened_at;
    loop {
        loss.confirm(confirmed_at + timeout - margin);
        tokio::time::sleep_until(confirmed_at + interval).await;
        let valid_until = confirmed_at + timeout - margin;
        loop {
            let sent_at = Instant::now();
            if sent_at >= valid_until {
                loss.mark(format!(
                    "no answer from ZooKeeper ({shown}) for the session timeout ({timeout:?}): \
                     the server may have expired the session"
                ));
                return;
            }
            let answer = tokio::select! {
                answer = tokio::time::timeout_at(valid_until, client.check_stat("/")) => answer,
                state = states.changed() => match state {
                    zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed => {
                        loss.mark(format!("the ZooKeeper session ended ({state:?})"));
                        return;
                    }
                    _ => continue,
                },
            };
            match answer {
                Ok(Ok(_)) => {
                    confirmed_at = sent_at;
                    break;
                }
                Ok(Err(error @ (zk::Error::SessionExpired | zk::Error::ClientClosed))) => {
                    loss.mark(format!("the ZooKeeper session ended: {error}"));
                    return;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "distlock: ZooKeeper heartbeat failed, retrying");
                    tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until)).await;
                }
                Err(_) => {} // the deadline passed: the loop marks the loss
            }
        }
    }
}

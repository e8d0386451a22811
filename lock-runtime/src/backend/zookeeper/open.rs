//! Sessions: the chroot made at connect time, one session per lease (or the one the URL
//! pins), and a client of any usable session for requests tied to no lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::session::ZkSession;
use super::{ZkFailure, ZookeeperBackend, is_transient};
use crate::backend::Transient;
use crate::error::BoxError;

impl ZookeeperBackend {
    /// Opens a session (without the chroot: to create it) and creates the chroot's nodes.
    pub(super) async fn create_chroot(&self) -> Result<(), BoxError> {
        if self.url.chroot.is_empty() {
            return Ok(());
        }
        let client = self
            .open(self.connect_timeout.max(Duration::from_secs(2)), "")
            .await?;
        let persistent = zk::CreateMode::Persistent.with_acls(self.access.acls());
        match self
            .call(
                "create the chroot",
                client.mkdir(&self.url.chroot, &persistent),
            )
            .await
        {
            Ok(()) | Err(ZkFailure::Server(zk::Error::NodeExists)) => Ok(()),
            Err(ZkFailure::Server(
                error @ (zk::Error::NoAuth | zk::Error::NoChildrenForEphemerals),
            )) => Err(format!(
                "cannot create the chroot `{}` ({}): {error}; create it by hand, with an \
                     ACL that lets this client create nodes under it",
                self.url.chroot, self.shown
            )
            .into()),
            Err(failure) => Err(self.failed("create the chroot", failure)),
        }
    }

    /// Connects a client with a session of `timeout`, rooted at `chroot`.
    async fn open(&self, timeout: Duration, chroot: &str) -> Result<zk::Client, BoxError> {
        let connecting = self.access.connect(|connector| {
            connector
                .with_session_timeout(timeout)
                .with_connection_timeout(self.connect_timeout)
        });
        let client = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                let why = match error {
                    zk::Error::Timeout | zk::Error::ConnectionLoss | zk::Error::NoHosts => {
                        self.why_not().await
                    }
                    _ => String::new(),
                };
                return Err(Transient::wrap_if(
                    is_transient(&error),
                    format!(
                        "cannot open a ZooKeeper session at {}: {error}; {why}check that the \
                         ensemble is up and reachable from here",
                        self.shown
                    ),
                ));
            }
            Err(_) => {
                let why = self.why_not().await;
                return Err(Transient::wrap(format!(
                    "cannot reach ZooKeeper at {} within the connect timeout ({:?}): {why}check \
                     that the ensemble is up and reachable from here",
                    self.shown, self.connect_timeout
                )));
            }
        };
        if chroot.is_empty() {
            return Ok(client);
        }
        client.chroot(chroot.to_owned()).map_err(|_| {
            BoxError::from(format!(
                "`{chroot}` is not a valid ZooKeeper chroot ({})",
                self.shown
            ))
        })
    }

    /// Why no session opened, as far as a TLS handshake of our own tells (the ZooKeeper
    /// client retries a failed handshake until its timeout and says no more), ending in `; `.
    async fn why_not(&self) -> String {
        match self.access.why_not(self.connect_timeout).await {
            Some(why) => format!("{why}; "),
            None if !self.url.secure => {
                "if the port is the servers' secure client port, use `zks://`; ".to_owned()
            }
            None => String::new(),
        }
    }

    /// The session for locks of `lease` (a spec's: the lock-delay in it) and `lock_delay`: an
    /// open one, or a new one. Its timeout is the lease (or the URL's `session_timeout`) plus
    /// the delay; the holder counts on the lease alone (see [`ZkSession`]).
    pub(super) async fn session_for(
        &self,
        lease: Duration,
        lock_delay: Duration,
    ) -> Result<Arc<ZkSession>, BoxError> {
        let timeout = self
            .url
            .session_timeout
            .unwrap_or(lease.saturating_sub(lock_delay))
            + lock_delay;
        let wanted = (timeout, lock_delay);
        let usable = |sessions: &HashMap<(Duration, Duration), Arc<ZkSession>>| {
            sessions
                .get(&wanted)
                .filter(|s| s.is_usable())
                .map(Arc::clone)
        };
        if let Some(session) = usable(&self.sessions.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(session);
        }
        let _opening = self.opening.lock().await;
        if let Some(session) = usable(&self.sessions.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(session);
        }
        let opened_at = Instant::now();
        // Boxed: every acquisition awaits `session_for`, and only the first per timeout opens.
        let client = Box::pin(self.open(timeout, &self.url.chroot)).await?;
        if !lock_delay.is_zero() && client.session_timeout() < timeout {
            // Dropped, so closed: its timeout would expire a stopped holder's nodes sooner
            // than its lease plus the delay.
            return Err(format!(
                "ZooKeeper ({}) granted a session timeout of {:?}, not the {timeout:?} asked \
                 for (the lease plus lock_delay {lock_delay:?}): its maxSessionTimeout is \
                 lower, so the lock-delay cannot be kept; raise maxSessionTimeout on the \
                 servers, or shorten the lease or lock_delay",
                self.shown,
                client.session_timeout()
            )
            .into());
        }
        if client.session_timeout() != timeout {
            tracing::debug!(
                asked = ?timeout,
                granted = ?client.session_timeout(),
                "distlock: ZooKeeper granted another session timeout than the lease (its \
                 minSessionTimeout/maxSessionTimeout)"
            );
        }
        let session = Arc::new(ZkSession::start(
            client,
            lock_delay,
            opened_at,
            self.shown.clone(),
            &self.access,
            self.connect_timeout,
            self.response_timeout,
        ));
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(wanted, Arc::clone(&session));
        Ok(session)
    }

    /// A client of a usable session already open, if any.
    pub(super) fn open_client(&self) -> Option<zk::Client> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find_map(|s| s.client())
    }

    /// A client of a usable session, for requests that are not tied to a lease.
    pub(super) async fn any_client(&self) -> Result<zk::Client, BoxError> {
        match self.open_client() {
            Some(client) => Ok(client),
            None => self
                .session_for(self.default_lease, Duration::ZERO)
                .await?
                .client()
                .ok_or_else(|| Transient::wrap("the ZooKeeper session was lost as it opened")),
        }
    }

    /// Gives up `session` if `error` says it is over.
    pub(super) fn note_session_error(&self, session: &ZkSession, failure: &ZkFailure) {
        if let ZkFailure::Server(error @ (zk::Error::SessionExpired | zk::Error::ClientClosed)) =
            failure
        {
            session.abandon(format!("the ZooKeeper session ended: {error}"));
        }
    }
}

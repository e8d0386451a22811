//! The ZooKeeper backend (`zk://`): Apache Curator's `InterProcessMutex` recipe.
//!
//! A lock is a queue of ephemeral sequential nodes under one parent per lock name,
//! `/<encoded name>/<owner token>-<sequence>` (under the URL's chroot). The lowest sequence
//! number holds the lock; every other node is a waiter that watches only the node just before
//! its own, so a release wakes exactly one waiter — the next in line, across all processes:
//! waiters are served in the order they arrived. The parents are container nodes, which the
//! server deletes once they have been empty for a while.
//!
//! Liveness is per session, not per lock: a node lives as long as the session that created
//! it. Each distinct lease gets a session whose timeout is that lease (or one session for all
//! locks when the URL pins `session_timeout`), so a crashed holder's lock is freed one lease
//! after its last heartbeat, as on every other backend. See [`session`] for how a session's
//! loss is detected before the server can give its locks away. A lock-delay is added to the
//! timeout and not counted by the holder: locks with one are on a session of their own per
//! (timeout, delay).
//!
//! Fencing tokens are the holder node's creation zxid: ZooKeeper's transaction id, which
//! strictly increases across the whole ensemble (leader changes included) and so across the
//! successive holders of a lock, whatever happens to its parent node.

mod acquire;
mod admin;
mod check;
mod ensemble;
mod lost;
mod open;
mod path;
mod release;
mod session;
mod share;
mod upgrade;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

use self::path::{ZkUrl, parse_url};
#[cfg(feature = "testing")]
pub(crate) use self::path::{parent_of, parse_node};
use self::session::ZkSession;
use super::sql::holder_id;
use super::{Attempt, Backend, Capabilities, Hold, LockSpec, Released, Transient, Upgrade};
use crate::error::{BoxError, LockError};
use crate::fast_map::FastMap;
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

/// The event of `watcher`, awaited by a task of its own. A watcher dropped before it fires
/// costs a request (the client asks the server to remove the watch); one left to fire costs
/// nothing more, and each of ours fires soon enough: it watches a node or queue this client's
/// own release changes, or it ends with its session.
fn detach(watcher: zk::OneshotWatcher) -> tokio::sync::oneshot::Receiver<zk::WatchedEvent> {
    let (tell, told) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = tell.send(watcher.changed().await);
    });
    told
}

/// A node this client made: a held lock or a place in a lock's queue.
struct Node {
    /// The node's full path (under the chroot).
    path: String,
    /// The session that owns it.
    session: Arc<ZkSession>,
    /// Its creation zxid: the fencing token if it comes to hold the lock.
    czxid: i64,
    /// The predecessor watch of a waiter, or the end-of-lease timer of an unrenewed lock.
    task: Option<AbortHandle>,
    /// A holder's watch on its queue, set by the list that found it first (no request of its
    /// own): any change to the queue — its own node deleted included — fires it, and the
    /// holder's loss watch ([`ZookeeperBackend::watch_lost`]) then looks at its node.
    queue_watch: Option<tokio::sync::oneshot::Receiver<zk::WatchedEvent>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The `zk://` backend.
pub(crate) struct ZookeeperBackend {
    url: ZkUrl,
    /// Hosts, TLS, authentication: how sessions connect.
    access: ensemble::Ensemble,
    /// The URL as messages show it.
    shown: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The lease of a lock whose own lease is not known here (a release after a restart of
    /// this client's bookkeeping): the client's default.
    default_lease: Duration,
    /// Sessions by timeout and the lock-delay in it.
    sessions: Mutex<HashMap<(Duration, Duration), Arc<ZkSession>>>,
    /// Held while a session is being opened, so concurrent acquisitions open one, not many.
    opening: tokio::sync::Mutex<()>,
    /// This client's nodes, by owner token.
    nodes: Mutex<FastMap<String, Node>>,
    /// The owner tokens of this client's acquisitions in play (see [`super::InPlay`]).
    in_play: super::InPlay,
    /// Parents this client made or found lately, the last 4,096 at most (see
    /// [`Self::create_and_list`]).
    parents: super::Remembered<4096>,
    /// Wake-ups by owner token: a waiter's predecessor is gone.
    hub: Arc<ReleaseHub>,
    holder: String,
    /// The server's version, once `srvr` told it (admin API).
    version: std::sync::OnceLock<String>,
}

/// Errors that waiting may cure: the connection or session broke, the server is busy.
fn is_transient(error: &zk::Error) -> bool {
    use zk::Error::*;
    matches!(
        error,
        ConnectionLoss
            | Timeout
            | SessionExpired
            | SessionMoved
            | ClientClosed
            | NoHosts
            | Throttled
    )
}

impl ZookeeperBackend {
    /// Connects: parses the URL, opens a session for the default lease, and creates the
    /// chroot if it is missing. Fails with an error naming the URL if ZooKeeper cannot be
    /// reached within `connect_timeout`.
    pub(crate) async fn connect(
        url: &str,
        tls: Option<crate::tls::TlsConfig>,
        connect_timeout: Duration,
        response_timeout: Duration,
        default_lease: Duration,
    ) -> Result<Arc<dyn Backend>, LockError> {
        let parsed = parse_url(url)?;
        let shown = crate::url::redact_url(url);
        let backend = ZookeeperBackend {
            access: ensemble::Ensemble::new(&parsed, tls, &shown)?,
            shown,
            url: parsed,
            connect_timeout,
            response_timeout,
            default_lease,
            sessions: Mutex::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            nodes: Mutex::default(),
            in_play: super::InPlay::default(),
            parents: super::Remembered::default(),
            hub: ReleaseHub::new(None),
            holder: holder_id(),
            version: std::sync::OnceLock::new(),
        };
        let fail = |source: BoxError| LockError::Connect {
            url: backend.shown.clone(),
            reason: source.to_string(),
            source: Some(source),
        };
        backend.create_chroot().await.map_err(fail)?;
        backend
            .session_for(default_lease, Duration::ZERO)
            .await
            .map_err(fail)?;
        Ok(Arc::new(backend))
    }

    fn nodes(&self) -> MutexGuard<'_, FastMap<String, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The path and session of `token`'s node, if this client has one.
    fn node_of(&self, token: &str) -> Option<(String, Arc<ZkSession>)> {
        self.nodes()
            .get(token)
            .map(|node| (node.path.clone(), Arc::clone(&node.session)))
    }

    /// Runs one request, bounded by the response timeout; errors name the operation and
    /// the URL, and say whether waiting may cure them.
    fn call<T>(
        &self,
        op: &str,
        request: impl std::future::Future<Output = Result<T, zk::Error>>,
    ) -> impl std::future::Future<Output = Result<T, ZkFailure>> {
        let store = ("ZooKeeper", self.shown.as_str());
        ZkFailure::bounded(store, self.response_timeout, op, request)
    }

    fn failed(&self, op: &str, failure: ZkFailure) -> BoxError {
        match failure {
            ZkFailure::Server(error) => Transient::wrap_if(
                is_transient(&error),
                format!("ZooKeeper `{op}` failed ({}): {error}", self.shown),
            ),
            ZkFailure::Other(error) => error,
        }
    }
}

/// A request's failure: the server's error, or one of ours (a timeout).
type ZkFailure = super::CallFailure<zk::Error>;

/// Every kind, queued on the server (so fair), kept alive by the client's session.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    wakes: "a watch on the node before its own",
    announces: true,
    fair: true,
    queues_waiters: true,
    keeps_alive: true,
    upgradable: Ok(()),
    shares: Ok(share::SHARE_LIMIT),
    ..Capabilities::every_kind("zookeeper")
};

impl Backend for ZookeeperBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(self.in_play.attempt(spec.token, move || self.acquire(spec)))
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(self.check(spec))
    }

    fn end_in<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        // A node lives as long as its session: the client deletes it at the end (see
        // `guard::give_back::keep_until_min_hold`), and the session is not closed before then.
        if let Some((_, session)) = self.node_of(spec.token) {
            session.keep_until(Instant::now() + spec.lease);
        }
        Box::pin(self.check(spec))
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        Box::pin(self.in_play.release(token, move || async move {
            match crate::token::is_upgradable(token) {
                // Boxed: the rare path, kept out of every release's own box.
                true => Box::pin(self.delete_upgradable(name, token)).await,
                false => self.delete(name, token).await,
            }
        }))
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(self.upgrade(spec))
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(self.drop_upgrade(spec.token))
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let subscription = self.hub.subscribe(spec.token, || {});
        Box::pin(async move { Ok(subscription) })
    }

    fn lost<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, String> {
        Box::pin(self.watch_lost(spec))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        super::loss::close_all(&self.sessions)
    }
}

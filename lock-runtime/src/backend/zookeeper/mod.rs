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
//! loss is detected before the server can give its locks away.
//!
//! Fencing tokens are the holder node's creation zxid: ZooKeeper's transaction id, which
//! strictly increases across the whole ensemble (leader changes included) and so across the
//! successive holders of a lock, whatever happens to its parent node.

mod path;
mod session;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use zookeeper_client as zk;

pub(crate) use self::path::parent_of;
use self::path::{
    ZkUrl, decode, is_reader, node_prefix, parse_node, parse_url, sequence_of, token_of,
};
use self::session::Session;
use super::sql::holder_id;
use super::{Admin, Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, Transient};
use crate::admin::{Entry, glob_match, holder_from_record};
use crate::error::{BoxError, LockError};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

/// Open to every client: distlock's nodes carry no secrets, and ZooKeeper authentication is
/// not supported yet.
fn queue_node() -> zk::CreateOptions<'static> {
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all())
}

/// A lock's parent node: a container, which the server deletes once it has been empty a while.
const CONTAINER: zk::CreateOptions<'static> =
    zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());

/// A queue's children, listed with a watch on the queue (see [`Node::queue_watch`]).
type Listed = Result<(Vec<String>, zk::OneshotWatcher), ZkFailure>;

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
    session: Arc<Session>,
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
    /// The URL as messages show it.
    shown: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The lease of a lock whose own lease is not known here (a release after a restart of
    /// this client's bookkeeping): the client's default.
    default_lease: Duration,
    /// Sessions by timeout.
    sessions: Mutex<HashMap<Duration, Arc<Session>>>,
    /// Held while a session is being opened, so concurrent acquisitions open one, not many.
    opening: tokio::sync::Mutex<()>,
    /// This client's nodes, by owner token.
    nodes: Mutex<HashMap<String, Node>>,
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

/// How long a waiter's place left behind by an attempt whose reply never came is looked for in
/// the background while the server does not answer (its session ends by then at the latest, for
/// a lease up to this long).
const LEFTOVER_SEARCH: Duration = Duration::from_secs(60);

/// The node an attempt whose reply never came may have made (found by the `token` in its name
/// under `parent`) is deleted once the server answers again: it is on a session this client
/// keeps alive, and would hold up every waiter behind it.
fn delete_token_later(client: zk::Client, parent: String, token: String, timeout: Duration) {
    tokio::spawn(async move {
        let give_up = Instant::now() + LEFTOVER_SEARCH;
        let mut attempt = 0;
        while Instant::now() < give_up {
            attempt += 1;
            tokio::time::sleep(super::retry_pause(attempt.min(4))).await;
            let children = match tokio::time::timeout(timeout, client.list_children(&parent)).await
            {
                Ok(Ok(children)) => children,
                Ok(Err(zk::Error::NoNode)) => return,
                _ => continue,
            };
            let Some(child) = children.iter().find(|c| token_of(c) == token) else {
                return;
            };
            let path = format!("{parent}/{child}");
            if let Ok(Ok(()) | Err(zk::Error::NoNode)) =
                tokio::time::timeout(timeout, client.delete(&path, None)).await
            {
                tracing::debug!(node = %path, "distlock: zookeeper: a given-up attempt's node deleted later");
                return;
            }
        }
    });
}

/// A release that failed for good reports its error, but its node must not outlive it: the
/// session it lives on is kept alive for the client's other locks, so the node would hold the
/// lock for as long as the client runs. It is deleted in the background once the server answers
/// again (restarted, or the client reconnected), or goes with its session.
fn delete_later(client: zk::Client, path: String, session: Arc<Session>, timeout: Duration) {
    tokio::spawn(async move {
        let mut attempt = 0;
        while session.is_usable() {
            attempt += 1;
            tokio::time::sleep(super::retry_pause(attempt.min(4))).await;
            if let Ok(Ok(()) | Err(zk::Error::NoNode)) =
                tokio::time::timeout(timeout, client.delete(&path, None)).await
            {
                tracing::debug!("distlock: zookeeper: a failed release's node deleted later");
                return;
            }
        }
    });
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
        connect_timeout: Duration,
        response_timeout: Duration,
        default_lease: Duration,
    ) -> Result<Arc<dyn Backend>, LockError> {
        let parsed = parse_url(url)?;
        let backend = ZookeeperBackend {
            shown: super::url::redact_url(url),
            url: parsed,
            connect_timeout,
            response_timeout,
            default_lease,
            sessions: Mutex::new(HashMap::new()),
            opening: tokio::sync::Mutex::new(()),
            nodes: Mutex::new(HashMap::new()),
            in_play: super::InPlay::default(),
            parents: super::Remembered::default(),
            hub: ReleaseHub::new(None),
            holder: holder_id(),
            version: std::sync::OnceLock::new(),
        };
        let fail = |source: BoxError| LockError::Backend {
            backend: "zookeeper",
            op: "connect",
            key: String::new(),
            source,
        };
        backend.create_chroot().await.map_err(fail)?;
        backend.session_for(default_lease).await.map_err(fail)?;
        Ok(Arc::new(backend))
    }

    fn nodes(&self) -> MutexGuard<'_, HashMap<String, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The path and session of `token`'s node, if this client has one.
    fn node_of(&self, token: &str) -> Option<(String, Arc<Session>)> {
        self.nodes()
            .get(token)
            .map(|node| (node.path.clone(), Arc::clone(&node.session)))
    }

    /// Runs one request, bounded by the response timeout; errors name the operation and
    /// the URL, and say whether waiting may cure them.
    async fn call<T>(
        &self,
        op: &str,
        request: impl std::future::Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, ZkFailure> {
        match tokio::time::timeout(self.response_timeout, request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(ZkFailure::Server(error)),
            Err(_) => Err(ZkFailure::Other(Transient::wrap(format!(
                "ZooKeeper ({}) did not answer `{op}` within the response timeout ({:?})",
                self.shown, self.response_timeout
            )))),
        }
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

    /// Opens a session (without the chroot: to create it) and creates the chroot's nodes.
    async fn create_chroot(&self) -> Result<(), BoxError> {
        if self.url.chroot.is_empty() {
            return Ok(());
        }
        let client = self
            .open(self.connect_timeout.max(Duration::from_secs(2)), "")
            .await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
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
        let connector = zk::Client::connector()
            .with_session_timeout(timeout)
            .with_connection_timeout(self.connect_timeout);
        let connecting = connector.connect(&self.url.hosts);
        let client = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                return Err(Transient::wrap_if(
                    is_transient(&error),
                    format!(
                        "cannot open a ZooKeeper session at {}: {error}; check that the \
                         ensemble is up and reachable from here",
                        self.shown
                    ),
                ));
            }
            Err(_) => {
                return Err(Transient::wrap(format!(
                    "cannot reach ZooKeeper at {} within the connect timeout ({:?}); check \
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

    /// The session for locks of `lease`: an open one, or a new one.
    async fn session_for(&self, lease: Duration) -> Result<Arc<Session>, BoxError> {
        let timeout = self.url.session_timeout.unwrap_or(lease);
        let usable = |sessions: &HashMap<Duration, Arc<Session>>| {
            sessions
                .get(&timeout)
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
        let client = self.open(timeout, &self.url.chroot).await?;
        if client.session_timeout() != timeout {
            tracing::debug!(
                asked = ?timeout,
                granted = ?client.session_timeout(),
                "distlock: ZooKeeper granted another session timeout than the lease (its \
                 minSessionTimeout/maxSessionTimeout)"
            );
        }
        let session = Arc::new(Session::start(
            client,
            opened_at,
            self.shown.clone(),
            &self.url.hosts,
            self.connect_timeout,
            self.response_timeout,
        ));
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(timeout, Arc::clone(&session));
        Ok(session)
    }

    /// A client of a usable session already open, if any.
    fn open_client(&self) -> Option<zk::Client> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find_map(|s| s.client())
    }

    /// A client of a usable session, for requests that are not tied to a lease.
    async fn any_client(&self) -> Result<zk::Client, BoxError> {
        match self.open_client() {
            Some(client) => Ok(client),
            None => self
                .session_for(self.default_lease)
                .await?
                .client()
                .ok_or_else(|| Transient::wrap("the ZooKeeper session was lost as it opened")),
        }
    }

    /// Gives up `session` if `error` says it is over.
    fn note_session_error(&self, session: &Session, failure: &ZkFailure) {
        if let ZkFailure::Server(error @ (zk::Error::SessionExpired | zk::Error::ClientClosed)) =
            failure
        {
            session.abandon(format!("the ZooKeeper session ended: {error}"));
        }
    }

    /// What a waiter's node holds: who made it, with which lease.
    fn node_data(&self, spec: LockSpec<'_>) -> String {
        format!(
            "holder={}\nlease_ms={}\nrenew={}\n",
            self.holder,
            spec.lease.as_millis(),
            spec.renew
        )
    }

    /// Creates this waiter's node in `parent`'s queue and lists the queue with a watch on it,
    /// in one round trip: the list is sent right behind the create, and a session's requests
    /// are served in order. A parent this client has not seen lately is created in the same
    /// round trip, first (an empty queue's parent is a container the server deletes after a
    /// while): a fresh key costs one request more than a used one, and no round trip more.
    async fn create_and_list(
        &self,
        client: &zk::Client,
        session: &Arc<Session>,
        parent: &str,
        spec: LockSpec<'_>,
    ) -> Result<(String, i64, Listed), BoxError> {
        let prefix = node_prefix(parent, spec.token, spec.kind);
        let data = self.node_data(spec);
        let options = queue_node();
        let mut known = self.parents.contains(parent);
        for _ in 0..4 {
            let make_parent = (!known).then(|| client.create(parent, &[], &CONTAINER));
            let create = client.create(&prefix, data.as_bytes(), &options);
            let list = client.list_and_watch_children(parent);
            let made = match make_parent {
                Some(make_parent) => self.call("create", make_parent).await,
                None => Err(ZkFailure::Server(zk::Error::NodeExists)),
            };
            let created = self.call("create", create).await;
            // The parent's failure matters only if the node was not made either.
            if let (Err(failure), Err(_)) = (made, &created)
                && !matches!(failure, ZkFailure::Server(zk::Error::NodeExists))
            {
                self.note_session_error(session, &failure);
                return Err(self.failed("create", failure));
            }
            match created {
                Ok((stat, sequence)) => {
                    self.parents.insert(parent);
                    let listed = self.call("list", list).await;
                    return Ok((format!("{prefix}{sequence}"), stat.czxid, listed));
                }
                // The parent is gone (deleted by the server as an empty container) or was
                // never made: make it, then the node.
                Err(ZkFailure::Server(zk::Error::NoNode)) => {
                    self.parents.remove(parent);
                    known = false;
                }
                Err(failure) => {
                    self.note_session_error(session, &failure);
                    return Err(self.failed("create", failure));
                }
            }
        }
        Err(Transient::wrap(format!(
            "the parent node `{parent}` kept disappearing ({})",
            self.shown
        )))
    }

    async fn acquire(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let started = Instant::now();
        let session = self.session_for(spec.lease).await?;
        let client = session
            .client()
            .ok_or_else(|| Transient::wrap("the ZooKeeper session was lost as it opened"))?;
        let parent = parent_of(spec.name);
        for _ in 0..8 {
            // Our node: made by an earlier attempt with this token (a waiter keeps its place),
            // or made now.
            let known = self.nodes().get(spec.token).and_then(|node| {
                Arc::ptr_eq(&node.session, &session).then(|| (node.path.clone(), node.czxid))
            });
            let (path, czxid, listed) = match known {
                Some((path, czxid)) => {
                    let listed = self
                        .call("list", client.list_and_watch_children(&parent))
                        .await;
                    (path, czxid, listed)
                }
                None => {
                    let (path, czxid, listed) = self
                        .create_and_list(&client, &session, &parent, spec)
                        .await?;
                    let stale = self.nodes().insert(
                        spec.token.to_owned(),
                        Node {
                            path: path.clone(),
                            session: Arc::clone(&session),
                            czxid,
                            task: None,
                            queue_watch: None,
                        },
                    );
                    if let Some(stale) = stale {
                        // A place in line on a lost session: delete whatever is left of it.
                        let client = client.clone();
                        tokio::spawn(async move {
                            let _ = client.delete(&stale.path, None).await;
                        });
                    }
                    (path, czxid, listed)
                }
            };
            let (children, queue_watch) = match listed {
                Ok(listed) => listed,
                Err(ZkFailure::Server(zk::Error::NoNode)) => {
                    self.nodes().remove(spec.token);
                    continue;
                }
                Err(failure) => {
                    self.note_session_error(&session, &failure);
                    return Err(self.failed("list", failure));
                }
            };
            // Kept by a holder; anyone else leaves it to fire (see `detach`).
            let queue_watch = detach(queue_watch);
            let mine = &path[parent.len() + 1..];
            // A create whose reply was lost (the connection dropped, the server restarted) may
            // have made a node all the same, and its retry another: the earlier one, ahead of
            // ours and on our own live session, would hold us up for good. Every node with our
            // token is ours (Curator's "protection"): the others go.
            let orphans: Vec<&str> = children
                .iter()
                .map(String::as_str)
                .filter(|child| *child != mine && token_of(child) == spec.token)
                .collect();
            for orphan in &orphans {
                let orphan = format!("{parent}/{orphan}");
                match self.call("delete", client.delete(&orphan, None)).await {
                    Ok(()) | Err(ZkFailure::Server(zk::Error::NoNode)) => {
                        tracing::debug!(node = %orphan, "distlock: zookeeper: deleted a node of a create whose reply was lost");
                    }
                    Err(failure) => {
                        self.note_session_error(&session, &failure);
                        return Err(self.failed("delete", failure));
                    }
                }
            }
            let mut queue: Vec<(i64, &str)> = children
                .iter()
                .filter(|child| !orphans.contains(&child.as_str()))
                .filter_map(|child| Some((sequence_of(child)?, child.as_str())))
                .collect();
            queue.sort_unstable();
            let Some(place) = queue.iter().position(|&(_, child)| child == mine) else {
                // Our node is gone (deleted behind our back): join the queue again.
                self.nodes().remove(spec.token);
                continue;
            };
            // A name is one kind, and a semaphore has one limit: the oldest node says which.
            if place > 0
                && let Some(refused) =
                    crate::backend::Refused::between(parse_node(queue[0].1).0, spec.kind)
            {
                self.nodes().remove(spec.token);
                if let Err(failure) = self.call("delete", client.delete(&path, None)).await {
                    self.note_session_error(&session, &failure);
                }
                return Err(refused);
            }
            // Curator's read/write recipe: a writer waits for every node before its own, a
            // reader only for the writers before it — so a waiting writer also holds back every
            // reader that comes after it, and readers cannot starve writers. The node to watch
            // is the last one that holds us up.
            //
            // A semaphore of `n`: the first `n` nodes hold its permits. The first waiter (at
            // `n`) is admitted by any holder's departure, so it watches the queue; every later
            // one watches the node before it, which wakes it by leaving or, admitted, by
            // touching its own node (below): each departure wakes one waiter.
            let blocker = match spec.kind {
                Kind::Exclusive => place.checked_sub(1),
                Kind::Shared => queue[..place]
                    .iter()
                    .rposition(|&(_, child)| !is_reader(child)),
                Kind::Permits(n) => (place >= n as usize).then(|| place - 1),
            };
            let Some(blocker) = blocker else {
                if let Some(node) = self.nodes().get_mut(spec.token) {
                    node.queue_watch = Some(queue_watch);
                }
                if !spec.renew {
                    self.end_after_lease(spec, &client, &path, started);
                }
                if let Kind::Permits(_) = spec.kind
                    && place + 1 < queue.len()
                {
                    // Admitted with a node behind this one, which may watch it as waiting
                    // (even on a first attempt: the node behind may have looked before this
                    // one did): it is first in line now and must watch the queue instead.
                    let data = self.node_data(spec);
                    if let Err(failure) = self
                        .call("touch", client.set_data(&path, data.as_bytes(), None))
                        .await
                    {
                        self.note_session_error(&session, &failure);
                    }
                }
                return Ok(Attempt::Acquired {
                    fencing_token: spec.fencing.then_some(czxid as u64),
                });
            };
            if let Kind::Permits(n) = spec.kind
                && place == n as usize
            {
                // First in line: woken by any change to the queue (a holder leaving).
                let (children, watcher) = match self
                    .call("watch", client.list_and_watch_children(&parent))
                    .await
                {
                    Ok(found) => found,
                    Err(ZkFailure::Server(zk::Error::NoNode)) => continue,
                    Err(failure) => {
                        self.note_session_error(&session, &failure);
                        return Err(self.failed("watch", failure));
                    }
                };
                let ahead = children
                    .iter()
                    .filter(|child| sequence_of(child).is_some_and(|seq| seq < queue[place].0))
                    .count();
                if ahead < n as usize {
                    continue; // a permit came free meanwhile: look again
                }
                self.wake_on(spec.token, async move {
                    let _ = watcher.changed().await;
                });
                return Ok(Attempt::Busy {
                    ttl: Some(session.timeout),
                });
            }
            // Watch only the node that holds us up: its deletion makes us a holder or moves us
            // up (it gave up), so a release wakes only those it may admit.
            let before = format!("{parent}/{}", queue[blocker].1);
            let watcher = match self
                .call("watch", client.check_and_watch_stat(&before))
                .await
            {
                // A node of our own session that no acquisition of ours knows: a create of an
                // attempt given up (its reply lost, the server restarting) that landed all the
                // same. Nobody would ever delete it while the session lives: it goes now.
                Ok((Some(stat), _))
                    if stat.ephemeral_owner == client.session_id().0
                        && !self.in_play.contains(token_of(queue[blocker].1)) =>
                {
                    match self.call("delete", client.delete(&before, None)).await {
                        Ok(()) | Err(ZkFailure::Server(zk::Error::NoNode)) => {
                            tracing::debug!(node = %before, "distlock: zookeeper: deleted an orphaned node of this session");
                            continue;
                        }
                        Err(failure) => {
                            self.note_session_error(&session, &failure);
                            return Err(self.failed("delete", failure));
                        }
                    }
                }
                // A permit's predecessor written since its creation was admitted (its holder
                // writes it once): this waiter may be first in line now.
                Ok((Some(stat), _)) if spec.kind.permits().is_some() && stat.version > 0 => {
                    continue;
                }
                Ok((Some(_), watcher)) => watcher,
                Ok((None, _)) => continue, // gone already: look again
                Err(failure) => {
                    self.note_session_error(&session, &failure);
                    return Err(self.failed("watch", failure));
                }
            };
            self.wake_on(spec.token, async move {
                watcher.changed().await;
            });
            return Ok(Attempt::Busy {
                ttl: Some(session.timeout),
            });
        }
        Err(Transient::wrap(format!(
            "the queue of `{}` kept changing under this waiter ({})",
            spec.name, self.shown
        )))
    }

    /// Wakes the waiter `token` once `watch` fires (the one watch it keeps: a new one replaces
    /// the last).
    fn wake_on(&self, token: &str, watch: impl Future<Output = ()> + Send + 'static) {
        let hub = Arc::clone(&self.hub);
        let owner = token.to_owned();
        let task = tokio::spawn(async move {
            watch.await;
            hub.notify(&owner);
        })
        .abort_handle();
        if let Some(node) = self.nodes().get_mut(token) {
            if let Some(previous) = node.task.replace(task) {
                previous.abort();
            }
        } else {
            task.abort();
        }
    }

    /// An unrenewed lock ends after its lease: its node is deleted then, whatever its session.
    fn end_after_lease(
        &self,
        spec: LockSpec<'_>,
        client: &zk::Client,
        path: &str,
        started: Instant,
    ) {
        let client = client.clone();
        let path = path.to_owned();
        let end = started + spec.lease;
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(end).await;
            let _ = client.delete(&path, None).await;
        })
        .abort_handle();
        if let Some(node) = self.nodes().get_mut(spec.token) {
            node.task = Some(task);
        }
    }

    async fn delete(&self, name: &str, token: &str) -> Result<Released, BoxError> {
        let node = self.nodes().remove(token);
        let (path, session, client) = match node {
            Some(mut node) => {
                let client = match node.session.client().or_else(|| self.open_client()) {
                    Some(client) => client,
                    // The node's session is lost, and no other is open: the node goes with its
                    // session (closed, or expired one timeout later). Opening a session just for
                    // this would outlive a runtime shutting down, whose guards are dropped here.
                    None => return Ok(Released::NotOurs),
                };
                (
                    Some(std::mem::take(&mut node.path)),
                    Some(Arc::clone(&node.session)),
                    client,
                )
            }
            None => (None, None, self.any_client().await?),
        };
        // A node of a session this client has lost was not held any more, deleted or not.
        let alive = session.as_ref().is_none_or(|session| session.is_usable());
        let path = match path {
            Some(path) => path,
            // An attempt whose reply never came: find its node by the token in its name.
            None => {
                let parent = parent_of(name);
                let children = match self.call("list", client.list_children(&parent)).await {
                    Ok(children) => children,
                    Err(ZkFailure::Server(zk::Error::NoNode)) => return Ok(Released::NotOurs),
                    Err(failure) => {
                        // The attempt's create may have landed all the same: look again, and
                        // delete it, once the server answers.
                        delete_token_later(client, parent, token.to_owned(), self.response_timeout);
                        return Err(self.failed("list", failure));
                    }
                };
                match children.iter().find(|c| token_of(c) == token) {
                    Some(child) => format!("{parent}/{child}"),
                    None => return Ok(Released::NotOurs),
                }
            }
        };
        // A delete whose answer is lost (the connection dropped, a slow server) is retried on
        // the same session: the client library reconnects it.
        let mut attempt = 0;
        loop {
            match self.call("delete", client.delete(&path, None)).await {
                Ok(()) if alive => return Ok(Released::Deleted),
                Ok(()) => return Ok(Released::NotOurs),
                Err(ZkFailure::Server(zk::Error::NoNode)) if attempt > 0 && alive => {
                    return Ok(Released::Ambiguous {
                        alive_until: session.and_then(|session| session.loss.alive_until()),
                    });
                }
                Err(ZkFailure::Server(zk::Error::NoNode)) => return Ok(Released::NotOurs),
                Err(ZkFailure::Server(
                    zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Throttled,
                )) if attempt < 3 => {}
                Err(ZkFailure::Other(_)) if attempt < 3 => {}
                Err(failure) => {
                    if let Some(session) = session.filter(|session| session.is_usable()) {
                        delete_later(client, path, session, self.response_timeout);
                    }
                    return Err(self.failed("delete", failure));
                }
            }
            attempt += 1;
            tokio::time::sleep(super::retry_pause(attempt)).await;
        }
    }

    async fn check(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        let known = self.node_of(spec.token);
        let Some((path, session)) = known else {
            return Ok(false);
        };
        let Some(client) = session.client() else {
            return Ok(false);
        };
        match self.call("exists", client.check_stat(&path)).await {
            Ok(stat) => Ok(stat.is_some() && session.is_usable()),
            Err(failure) => Err(self.failed("exists", failure)),
        }
    }

    async fn watch_lost(&self, spec: LockSpec<'_>) -> String {
        let known = self.nodes().get_mut(spec.token).map(|node| {
            let queue_watch = node.queue_watch.take();
            (node.path.clone(), Arc::clone(&node.session), queue_watch)
        });
        let Some((path, session, queue_watch)) = known else {
            // Released already: the watchdog's first poll can run on another thread while
            // the guard releases (an abort does not stop a poll under way). Nothing to report.
            return std::future::pending().await;
        };
        let loss = Arc::clone(&session.loss);
        // Whether this client still counts the node as its own (not released meanwhile).
        let ours = || self.nodes().contains_key(spec.token);
        let deleted = || format!("its node `{path}` was deleted");
        let watched = async {
            // First the queue's watch, set when the lock was granted: while nothing in the
            // queue changes, the node is there, and watching it cost no request.
            if let Some(queue_watch) = queue_watch {
                let event = queue_watch.await;
                if !ours() {
                    return std::future::pending().await;
                }
                // The queue itself is gone: so is the node.
                if let Ok(zk::WatchedEvent {
                    event_type: zk::EventType::NodeDeleted,
                    ..
                }) = event
                {
                    return deleted();
                }
                // A child came or went (or a session event): look at the node itself now.
            }
            loop {
                let Some(client) = session.client() else {
                    return std::future::pending().await;
                };
                // Released meanwhile (the release can run on another thread): nothing to watch.
                if !ours() {
                    return std::future::pending().await;
                }
                let why = match self.call("watch", client.check_and_watch_stat(&path)).await {
                    Ok((None, _)) => Some(deleted()),
                    Ok((Some(_), watcher)) => match detach(watcher).await.map(|e| e.event_type) {
                        Ok(zk::EventType::NodeDeleted) => Some(deleted()),
                        Ok(zk::EventType::NodeDataChanged) => {
                            Some(format!("its node `{path}` was changed by another client"))
                        }
                        // A session event: the heartbeat decides whether the session is over.
                        _ => None,
                    },
                    // The heartbeat bounds how long this may go on.
                    Err(_) => None,
                };
                match why {
                    Some(why) if ours() => return why,
                    // Deleted by this client's own release: nothing was lost.
                    Some(_) => return std::future::pending().await,
                    None => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        };
        tokio::select! {
            why = loss.wait() => why,
            why = watched => why,
        }
    }
}

/// A request's failure: the server's error, or one of ours (a timeout).
enum ZkFailure {
    Server(zk::Error),
    Other(BoxError),
}

/// Every kind, queued on the server (so fair), kept alive by the client's session.
const CAPABILITIES: Capabilities = Capabilities {
    fair: true,
    queues_waiters: true,
    keeps_alive: true,
    ..Capabilities::every_kind("zookeeper")
};

impl Backend for ZookeeperBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(self.in_play.attempt(spec.token, self.acquire(spec)))
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(self.check(spec))
    }

    fn end_in<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        // A node lives as long as its session: the client deletes it at the end (see
        // `guard::keep_until_min_hold`), and the session is not closed before then.
        if let Some((_, session)) = self.node_of(spec.token) {
            session.keep_until(Instant::now() + spec.lease);
        }
        Box::pin(self.check(spec))
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        Box::pin(self.in_play.release(token, self.delete(name, token)))
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
}

impl Admin for ZookeeperBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move { Ok(self.holder_of(name).await?.map(|(entry, _)| entry)) })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let client = self.any_client().await?;
            let parents = self
                .call("list", client.list_children("/"))
                .await
                .map_err(|f| self.failed("list", f))?;
            let mut names: Vec<String> = parents
                .iter()
                .filter_map(|parent| decode(parent))
                .filter(|name| {
                    name.strip_prefix(prefix)
                        .is_some_and(|key| glob_match(pattern, key))
                })
                .collect();
            names.sort();
            let mut entries = Vec::new();
            for name in names {
                if entries.len() >= limit {
                    break;
                }
                if let Some((entry, _)) = self.holder_of(&name).await? {
                    entries.push(entry);
                }
            }
            Ok(entries)
        })
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let Some((entry, paths)) = self.holder_of(name).await? else {
                return Ok(None);
            };
            let client = self.any_client().await?;
            // Deleting the holders' nodes wakes the next in line (it watches such a node) and
            // tells each holder at once (it watches its own node too).
            for path in paths {
                match self.call("delete", client.delete(&path, None)).await {
                    Ok(()) | Err(ZkFailure::Server(zk::Error::NoNode)) => {}
                    Err(failure) => return Err(self.failed("delete", failure)),
                }
            }
            Ok(Some(entry))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let client = self.any_client().await?;
            self.call("exists", client.check_stat("/"))
                .await
                .map_err(|f| self.failed("exists", f))?;
            // The version comes from the `srvr` four-letter word (whitelisted by default).
            if let Some(version) = self.version.get() {
                return Ok(version.clone());
            }
            let version = match self.srvr().await {
                Some(version) => self.version.get_or_init(|| version).clone(),
                None => "ZooKeeper (version unknown: `srvr` is not whitelisted)".to_owned(),
            };
            Ok(version)
        })
    }
}

impl ZookeeperBackend {
    /// The holder of lock `name` — the lowest sequence in its queue, or the readers at its
    /// head — and their nodes' paths.
    async fn holder_of(&self, name: &str) -> Result<Option<(Entry, Vec<String>)>, BoxError> {
        let client = self.any_client().await?;
        let parent = parent_of(name);
        'look: for _ in 0..5 {
            let children = match self.call("list", client.list_children(&parent)).await {
                Ok(children) => children,
                Err(ZkFailure::Server(zk::Error::NoNode)) => return Ok(None),
                Err(failure) => return Err(self.failed("list", failure)),
            };
            let mut queue: Vec<(i64, &String)> = children
                .iter()
                .filter_map(|child| Some((sequence_of(child)?, child)))
                .collect();
            queue.sort();
            let Some((_, first)) = queue.first() else {
                return Ok(None);
            };
            // Readers at the head of the queue hold the lock together; the first `n` nodes of
            // a semaphore of `n` hold its permits.
            let permits = parse_node(first).0.permits();
            let holders: Vec<&String> = if let Some(n) = permits {
                queue
                    .iter()
                    .map(|(_, child)| *child)
                    .take(n as usize)
                    .collect()
            } else if is_reader(first) {
                queue
                    .iter()
                    .map(|(_, child)| *child)
                    .take_while(|child| is_reader(child))
                    .collect()
            } else {
                vec![first]
            };
            let mut found = Vec::with_capacity(holders.len());
            for child in &holders {
                let path = format!("{parent}/{child}");
                match self.call("get", client.get_data(&path)).await {
                    Ok((data, stat)) => found.push((path, token_of(child), data, stat)),
                    // Released in between: look again.
                    Err(ZkFailure::Server(zk::Error::NoNode)) => continue 'look,
                    Err(failure) => return Err(self.failed("get", failure)),
                }
            }
            let holder_of = |data: &[u8], stat: &zk::Stat| {
                let data = String::from_utf8_lossy(data);
                let record = data
                    .lines()
                    .find_map(|line| line.strip_prefix("holder="))
                    .unwrap_or_default()
                    .to_owned();
                holder_from_record(&record, u64::try_from(stat.ctime).ok())
            };
            let waiters = Some((queue.len() - holders.len()) as u64);
            let entry = if permits.is_some() || is_reader(first) {
                let tokens = found.iter().map(|f| f.1.to_owned()).collect();
                Entry {
                    permits,
                    ..Entry::read_by(name, tokens, waiters)
                }
            } else {
                let (_, token, data, stat) = &found[0];
                Entry {
                    name: name.to_owned(),
                    token: Some((*token).to_owned()),
                    holder: holder_of(data, stat),
                    ttl: None,
                    fencing_token: u64::try_from(stat.czxid).ok(),
                    waiters,
                    readers: Vec::new(),
                    permits: None,
                }
            };
            return Ok(Some((entry, found.into_iter().map(|f| f.0).collect())));
        }
        Err("the lock changed hands five times while being looked at; try again".into())
    }

    /// `srvr` on the first host: `Zookeeper version: 3.8.4-…` → `ZooKeeper 3.8.4`.
    async fn srvr(&self) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let host = self.url.hosts.split(',').next()?;
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
            stream.write_all(b"srvr").await.ok()?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.ok()?;
            let line = answer
                .lines()
                .find_map(|l| l.strip_prefix("Zookeeper version: "))?;
            let version = line.split(['-', ',']).next()?.trim();
            Some(format!("ZooKeeper {version}"))
        };
        tokio::time::timeout(self.response_timeout, exchange)
            .await
            .ok()
            .flatten()
    }
}

//! Taking a lock: this waiter's node made and the queue listed in one round trip, then the
//! walk to the node that holds it up.

use std::sync::Arc;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::path::{entry_of, node_prefix, parent_of, parse_node, sequence_of, token_of};
use super::session::ZkSession;
use super::{Node, ZkFailure, ZookeeperBackend, detach};
use crate::backend::queue::{Turn, refusal, turn, upgradable_turn};
use crate::backend::{Attempt, Kind, LockSpec, Transient};
use crate::error::BoxError;

/// A place in a lock's queue, under the client's ACL ([`Ensemble::acls`](super::ensemble::Ensemble::acls)).
pub(super) fn queue_node(acls: zk::Acls<'static>) -> zk::CreateOptions<'static> {
    zk::CreateMode::EphemeralSequential.with_acls(acls)
}

/// A lock's parent node: a container, which the server deletes once it has been empty a while.
fn container(acls: zk::Acls<'static>) -> zk::CreateOptions<'static> {
    zk::CreateMode::Container.with_acls(acls)
}

/// A queue's children, listed with a watch on the queue (see [`Node::queue_watch`]).
type Listed = Result<(Vec<String>, zk::OneshotWatcher), ZkFailure>;

impl ZookeeperBackend {
    /// What a waiter's node holds: who made it, with which lease.
    pub(super) fn node_data(&self, spec: LockSpec<'_>) -> String {
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
        session: &Arc<ZkSession>,
        parent: &str,
        spec: LockSpec<'_>,
    ) -> Result<(String, i64, Listed), BoxError> {
        let prefix = node_prefix(parent, spec.token, spec.kind, self.url.recipe);
        let data = self.node_data(spec);
        let options = queue_node(self.access.acls());
        let mut known = self.parents.contains(parent);
        for _ in 0..4 {
            let make_parent =
                (!known).then(|| client.create(parent, &[], &container(self.access.acls())));
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

    pub(super) async fn acquire(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let started = Instant::now();
        let session = self.session_for(spec.lease, spec.lock_delay).await?;
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
                    // The rare paths are boxed: the attempt's own box (every acquisition's)
                    // holds only what the common path holds across its awaits.
                    let listed =
                        Box::pin(self.call("list", client.list_and_watch_children(&parent))).await;
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
                match Box::pin(self.call("delete", client.delete(&orphan, None))).await {
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
            // The kinds of the nodes ahead of ours, oldest first.
            let kinds_ahead = queue[..place].iter().map(|&(_, child)| parse_node(child).0);
            // A name is one kind, and a semaphore has one limit: the oldest node says which.
            if let Some(refused) = refusal(kinds_ahead.clone().next(), spec.kind) {
                self.nodes().remove(spec.token);
                if let Err(failure) =
                    Box::pin(self.call("delete", client.delete(&path, None))).await
                {
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
            // An upgradable share waits for writers and for another upgradable share.
            let turn = if crate::token::is_upgradable(spec.token) {
                let ahead: Vec<_> = queue[..place].iter().map(|&(_, c)| entry_of(c)).collect();
                upgradable_turn(&ahead)
            } else {
                turn(spec.kind, kinds_ahead)
            };
            let blocker = match turn {
                Turn::WaitFor(blocker) => blocker,
                Turn::Holds => {
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
                        let touch =
                            self.call("touch", client.set_data(&path, data.as_bytes(), None));
                        if let Err(failure) = Box::pin(touch).await {
                            self.note_session_error(&session, &failure);
                        }
                    }
                    return Ok(Attempt::Acquired {
                        fencing_token: spec.fencing.then_some(czxid as u64),
                    });
                }
                Turn::FirstInLine => {
                    // First in line (at `place`, the semaphore's `n`): woken by any change to
                    // the queue (a holder leaving).
                    let watch = self.call("watch", client.list_and_watch_children(&parent));
                    let (children, watcher) = match Box::pin(watch).await {
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
                    if ahead < place {
                        continue; // a permit came free meanwhile: look again
                    }
                    self.wake_on(spec.token, async move {
                        let _ = watcher.changed().await;
                    });
                    return Ok(Attempt::Busy {
                        ttl: Some(session.timeout),
                    });
                }
            };
            // Watch only the node that holds us up: its deletion makes us a holder or moves us
            // up (it gave up), so a release wakes only those it may admit.
            let before = format!("{parent}/{}", queue[blocker].1);
            let watcher = match Box::pin(self.call("watch", client.check_and_watch_stat(&before)))
                .await
            {
                // A node of our own session that no acquisition of ours knows: a create of an
                // attempt given up (its reply lost, the server restarting) that landed all the
                // same. Nobody would ever delete it while the session lives: it goes now.
                Ok((Some(stat), _))
                    if stat.ephemeral_owner == client.session_id().0
                        && !self.in_play.contains(token_of(queue[blocker].1)) =>
                {
                    match Box::pin(self.call("delete", client.delete(&before, None))).await {
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
        self.wake_on_node(token, token, watch);
    }

    /// Wakes the waiter `owner` once `watch` fires, a task kept with the node of `token` (an
    /// upgrade's wake-up goes with its own node, not with the share's).
    pub(super) fn wake_on_node(
        &self,
        token: &str,
        owner: &str,
        watch: impl Future<Output = ()> + Send + 'static,
    ) {
        let hub = Arc::clone(&self.hub);
        let owner = owner.to_owned();
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
}

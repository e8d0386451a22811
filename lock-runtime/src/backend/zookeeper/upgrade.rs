//! Upgradable reads: an upgradable share is a reader's node whose token is upgradable (`^…`);
//! the upgrade adds a writer's node of its own (`!^…`, on the share's session) at the tail of
//! the queue, which readers that come later wait for as for any writer, and holds the write
//! lock once the readers beside the share are gone ([`upgrade_turn`]). A writer that queued
//! behind the share before the upgrade waits for the share, which stays: it comes after.
//!
//! The upgraded lock's fencing token is the share's creation zxid: every writer that held the
//! lock before it queued (and was created) ahead of the share, every writer after it behind.
//! The upgrade's own node is younger than a writer queued before it, so its zxid would not do.

use std::sync::Arc;

use zookeeper_client as zk;

use super::path::{entry_of, node_prefix, parent_of, sequence_of, token_of};
use super::{Node, ZkFailure, ZookeeperBackend};
use crate::backend::queue::{Turn, upgrade_turn};
use crate::backend::{Kind, LockSpec, Released, Transient, Upgrade};
use crate::error::BoxError;

impl ZookeeperBackend {
    /// One attempt of [`Backend::upgrade`](crate::backend::Backend::upgrade).
    pub(super) async fn upgrade(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        let Some((share_path, session, share_czxid)) = self
            .nodes()
            .get(spec.token)
            .map(|node| (node.path.clone(), Arc::clone(&node.session), node.czxid))
        else {
            return Ok(Upgrade::Lost);
        };
        let Some(client) = session.client() else {
            return Ok(Upgrade::Lost);
        };
        let parent = parent_of(spec.name);
        let up_token = crate::token::upgrade_entry(spec.token);
        let known = self.nodes().get(&up_token).map(|node| node.path.clone());
        // The queue listed right behind the create, in the same round trip (a session's
        // requests are served in order): the first look.
        let mut listed_with_create = None;
        let up_path = match known {
            Some(path) => path,
            None => {
                // In play before it exists: a waiter of this client that finds it ahead (on this
                // session) must not take it for a leftover and delete it.
                self.in_play.insert(&up_token);
                let prefix = node_prefix(&parent, &up_token, Kind::Exclusive, self.url.recipe);
                let data = self.node_data(spec);
                let create = client.create(
                    &prefix,
                    data.as_bytes(),
                    &super::acquire::queue_node(self.access.acls()),
                );
                let list = client.list_children(&parent);
                match self.call("create", create).await {
                    Ok((stat, sequence)) => {
                        listed_with_create = Some(self.call("list", list).await);
                        let path = format!("{prefix}{sequence}");
                        self.nodes().insert(
                            up_token.clone(),
                            Node {
                                path: path.clone(),
                                session: Arc::clone(&session),
                                czxid: stat.czxid,
                                task: None,
                                queue_watch: None,
                            },
                        );
                        path
                    }
                    Err(ZkFailure::Server(zk::Error::NoNode)) => {
                        self.in_play.forget(&[&up_token]);
                        return Ok(Upgrade::Lost);
                    }
                    Err(failure) => {
                        // Its create may land all the same: the next attempt finds the node by
                        // its token and keeps one.
                        self.note_session_error(&session, &failure);
                        return Err(self.failed("create", failure));
                    }
                }
            }
        };
        let share = &share_path[parent.len() + 1..];
        let mine = &up_path[parent.len() + 1..];
        for _ in 0..8 {
            let listed = match listed_with_create.take() {
                Some(listed) => listed,
                None => self.call("list", client.list_children(&parent)).await,
            };
            let children = match listed {
                Ok(children) => children,
                Err(ZkFailure::Server(zk::Error::NoNode)) => return Ok(Upgrade::Lost),
                Err(failure) => {
                    self.note_session_error(&session, &failure);
                    return Err(self.failed("list", failure));
                }
            };
            // A create of an earlier attempt whose reply was lost may have made a second node.
            for extra in children
                .iter()
                .filter(|child| *child != mine && token_of(child) == up_token)
            {
                let extra = format!("{parent}/{extra}");
                let _ = self.call("delete", client.delete(&extra, None)).await;
            }
            let mut queue: Vec<(i64, &str)> = children
                .iter()
                .filter(|child| *child == mine || token_of(child) != up_token)
                .filter_map(|child| Some((sequence_of(child)?, child.as_str())))
                .collect();
            queue.sort_unstable();
            let Some(share_at) = queue.iter().position(|&(_, child)| child == share) else {
                return Ok(Upgrade::Lost);
            };
            let Some(up_at) = queue.iter().position(|&(_, child)| child == mine) else {
                // Deleted behind our back: the next attempt makes it again.
                self.nodes().remove(&up_token);
                return Ok(Upgrade::Busy { ttl: None });
            };
            let entries: Vec<_> = queue.iter().map(|&(_, child)| entry_of(child)).collect();
            let blocker = match upgrade_turn(&entries, share_at, up_at) {
                Turn::Holds => {
                    return Ok(Upgrade::Done {
                        fencing_token: spec.fencing.then_some(share_czxid as u64),
                    });
                }
                Turn::WaitFor(blocker) => blocker,
                Turn::FirstInLine => unreachable!("an upgrade is never a semaphore's waiter"),
            };
            let before = format!("{parent}/{}", queue[blocker].1);
            match self
                .call("watch", client.check_and_watch_stat(&before))
                .await
            {
                Ok((Some(_), watcher)) => {
                    self.wake_on_node(&up_token, spec.token, async move {
                        watcher.changed().await;
                    });
                    return Ok(Upgrade::Busy {
                        ttl: Some(session.timeout),
                    });
                }
                Ok((None, _)) => continue, // gone already: look again
                Err(failure) => {
                    self.note_session_error(&session, &failure);
                    return Err(self.failed("watch", failure));
                }
            }
        }
        Err(Transient::wrap(format!(
            "the queue of `{}` kept changing under an upgrade ({})",
            spec.name, self.shown
        )))
    }

    /// An upgradable read's release: its share's node, then the node its upgrade added, if
    /// any — in that order, so that the writers queued behind the share come next, then the
    /// readers that came after the upgrade (the other order would let those readers in beside
    /// a holder that still holds). Both nodes are on the share's session, which serves its
    /// requests in order: when the share's node is known, the second delete is sent right
    /// behind the first, and the release costs one round trip.
    pub(super) async fn delete_upgradable(
        &self,
        name: &str,
        token: &str,
    ) -> Result<Released, BoxError> {
        let dropped = |result: Result<(), BoxError>| {
            if let Err(error) = result {
                tracing::debug!(key = name, %error, "distlock: zookeeper: an upgrade's node was not deleted; it goes with its session");
            }
        };
        // Known: the share's delete is sent on the first poll, before the upgrade's.
        if self.nodes().contains_key(token) {
            let both =
                futures_util::future::join(self.delete(name, token), self.drop_upgrade(token));
            let (released, upgrade) = both.await;
            dropped(upgrade);
            return released;
        }
        let released = self.delete(name, token).await;
        dropped(self.drop_upgrade(token).await);
        released
    }

    /// Deletes the node an upgrade of the share `token` added, if any: the upgrade given up
    /// (the readers it held back wake), or the upgraded lock released after its share.
    pub(super) async fn drop_upgrade(&self, token: &str) -> Result<(), BoxError> {
        let up_token = crate::token::upgrade_entry(token);
        let Some(node) = self.nodes().remove(&up_token) else {
            self.in_play.forget(&[&up_token]);
            return Ok(());
        };
        let result = match node.session.client() {
            Some(client) => match self.call("delete", client.delete(&node.path, None)).await {
                Ok(()) | Err(ZkFailure::Server(zk::Error::NoNode)) => Ok(()),
                Err(failure) => Err(self.failed("delete", failure)),
            },
            // Its session is gone, and the node with it.
            None => Ok(()),
        };
        self.in_play.forget(&[&up_token]);
        result
    }
}

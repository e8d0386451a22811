//! Watching a held node: renewal's check, and lost detection (the queue's watch first, then
//! the node's own).

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use super::{ZookeeperBackend, detach};
use crate::backend::LockSpec;
use crate::error::BoxError;

impl ZookeeperBackend {
    pub(super) async fn check(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
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

    pub(super) async fn watch_lost(&self, spec: LockSpec<'_>) -> String {
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

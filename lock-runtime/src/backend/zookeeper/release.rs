//! Giving a node up: its deletion, retried on the same session; and the background deletions
//! of nodes a failed release or a lost reply left behind.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::path::{parent_of, token_of};
use super::session::ZkSession;
use super::{ZkFailure, ZookeeperBackend};
use crate::backend::Released;
use crate::error::BoxError;

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
            tokio::time::sleep(crate::backend::retry_pause(attempt.min(4))).await;
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
fn delete_later(client: zk::Client, path: String, session: Arc<ZkSession>, timeout: Duration) {
    tokio::spawn(async move {
        let mut attempt = 0;
        while session.is_usable() {
            attempt += 1;
            tokio::time::sleep(crate::backend::retry_pause(attempt.min(4))).await;
            if let Ok(Ok(()) | Err(zk::Error::NoNode)) =
                tokio::time::timeout(timeout, client.delete(&path, None)).await
            {
                tracing::debug!("distlock: zookeeper: a failed release's node deleted later");
                return;
            }
        }
    });
}

impl ZookeeperBackend {
    pub(super) async fn delete(&self, name: &str, token: &str) -> Result<Released, BoxError> {
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
            tokio::time::sleep(crate::backend::retry_pause(attempt)).await;
        }
    }
}

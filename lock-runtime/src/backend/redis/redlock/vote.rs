//! The vote: sent to every node at once, reported when it does not win, and undone on every
//! node (chased in the background on the nodes that do not answer).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::{ErrorKind, RedisError, RedisResult, Value};
use tokio::time::Instant;

use super::RedlockBackend;
use super::outcome::{NodeOutcome, bounded};
use crate::backend::redis::errors::acquire_error;
use crate::backend::redis::{RedisBackend, millis};
use crate::backend::{Backend, Hold, LockSpec, Released};
use crate::error::BoxError;

impl RedlockBackend {
    /// Sends the vote to every node at once and collects the answers until a majority has
    /// granted the lock (the others are not waited for: `None`) or every node has answered or
    /// timed out.
    pub(super) async fn vote(&self, spec: LockSpec<'_>) -> Vec<Option<NodeOutcome<Vote>>> {
        let timeout = self.timeout_for(super::holder_lease(spec));
        let mut votes: Vec<Option<NodeOutcome<Vote>>> = self.nodes.iter().map(|_| None).collect();
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| async move {
                let call = async move {
                    node.vote(spec.name, spec.token, spec.lease)
                        .await
                        .map_err(acquire_error)
                };
                (i, bounded(node, timeout, call).await)
            })
            .collect();
        let mut granted = 0;
        while let Some((i, outcome)) = pending.next().await {
            if matches!(outcome, NodeOutcome::Answered(Vote::Granted)) {
                granted += 1;
            }
            votes[i] = Some(outcome);
            if granted >= self.quorum {
                break;
            }
        }
        votes
    }

    /// Every node and what it said, for the error of a vote that did not win.
    pub(super) fn vote_report(&self, votes: &[Option<NodeOutcome<Vote>>]) -> String {
        let mut report = String::new();
        for (node, vote) in self.nodes.iter().zip(votes) {
            let url = node.shown_url();
            let _ = match vote {
                Some(NodeOutcome::Answered(Vote::Granted)) => {
                    write!(report, "{url}: granted (undone); ")
                }
                Some(NodeOutcome::Answered(Vote::Busy { holder, .. })) if holder.is_empty() => {
                    write!(report, "{url}: busy, then free; ")
                }
                Some(NodeOutcome::Answered(Vote::Busy { pttl, .. })) if *pttl < 0 => {
                    write!(report, "{url}: held by another owner, without expiry; ")
                }
                Some(NodeOutcome::Answered(Vote::Busy { pttl, .. })) => {
                    write!(report, "{url}: held by another owner for {pttl} ms more; ")
                }
                Some(NodeOutcome::Failed { why, .. }) => write!(report, "{why}; "),
                None => write!(report, "{url}: not waited for; "),
            };
        }
        report.truncate(report.trim_end_matches("; ").len());
        report
    }

    /// Deletes our token everywhere (a lost vote's partial locks, and nodes that timed out:
    /// their `SET` may still land). Quietly — without waking waiters — unless our token may
    /// have sat on a majority (`loud`): a waiter that saw it there as the holder sleeps until
    /// its lease ends or a release notification comes, so it must get one.
    ///
    /// A node that does not confirm the delete within the node timeout is chased in the
    /// background until it does or the lease is over: an abandoned token would block that node
    /// for a whole lease, and a few of them (one per contender whose vote timed out) leave too
    /// few free nodes for anyone to win a majority — the stall 32 contenders on five nodes
    /// used to show.
    pub(super) async fn undo(&self, spec: LockSpec<'_>, loud: bool, sent_at: Instant) {
        let outcomes = self
            .on_all(
                self.timeout_for(super::holder_lease(spec)),
                |node| async move { delete(node, spec.name, spec.token, loud).await },
            )
            .await;
        let silent: Vec<Arc<RedisBackend>> = outcomes
            .iter()
            .zip(&self.nodes)
            .filter(|(outcome, _)| !matches!(outcome, NodeOutcome::Answered(_)))
            .map(|(_, node)| Arc::clone(node))
            .collect();
        if !silent.is_empty() {
            chase(silent, spec, loud, sent_at + spec.lease);
        }
    }
}

/// Deletes the lock on `node` if it holds `token`: with a release notification when `loud`.
async fn delete(
    node: &RedisBackend,
    name: &str,
    token: &str,
    loud: bool,
) -> Result<bool, BoxError> {
    if loud {
        Ok(node.release(Hold::exclusive(name, token)).await? == Released::Deleted)
    } else {
        Ok(node.release_quietly(name, token).await?)
    }
}

/// Keeps deleting `spec`'s token on `nodes` in the background — each retried with a growing
/// pause until it answers — until `until` (the end of the token's lease, after which the
/// token is gone anyway).
fn chase(nodes: Vec<Arc<RedisBackend>>, spec: LockSpec<'_>, loud: bool, until: Instant) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return; // no runtime: the lease is the backstop
    };
    let (name, token): (Arc<str>, Arc<str>) = (Arc::from(spec.name), Arc::from(spec.token));
    for node in nodes {
        let (name, token) = (Arc::clone(&name), Arc::clone(&token));
        runtime.spawn(async move {
            let mut pause = Duration::from_millis(20);
            while Instant::now() < until {
                let left = until.saturating_duration_since(Instant::now());
                if let Ok(Ok(_)) = tokio::time::timeout(left, delete(&node, &name, &token, loud)).await {
                    tracing::debug!(node = node.shown_url(), %name, "distlock: late Redlock clean-up done");
                    return;
                }
                tokio::time::sleep(pause.min(until.saturating_duration_since(Instant::now())))
                    .await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        });
    }
}

/// The outcome of one Redlock vote on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vote {
    Granted,
    /// Held by `holder` (empty when the key vanished in between) for `pttl` ms more (-1: no TTL).
    Busy {
        pttl: i64,
        holder: String,
    },
}

impl RedisBackend {
    /// One Redlock vote on this node (one round trip, no retries beyond the settings').
    pub(crate) async fn vote(&self, name: &str, token: &str, lease: Duration) -> RedisResult<Vote> {
        let lease = millis(lease);
        let reply: Vec<Value> = self
            .run(|mut conn, _| {
                let mut call = self.vote.key(name);
                call.arg(token).arg(lease);
                async move { call.invoke_async(&mut conn).await }
            })
            .await?;
        match reply.as_slice() {
            [_granted] => Ok(Vote::Granted),
            [_, pttl, holder] => Ok(Vote::Busy {
                pttl: redis::from_redis_value_ref(pttl)?,
                holder: redis::from_redis_value_ref(holder)?,
            }),
            _ => Err(RedisError::from((
                ErrorKind::Parse,
                "unexpected reply to the Redlock vote script",
            ))),
        }
    }

    /// Deletes the lock if it holds `token`, without waking anyone: Redlock undoing the partial
    /// locks of an attempt that did not win.
    pub(crate) async fn release_quietly(&self, name: &str, token: &str) -> RedisResult<bool> {
        let released: i64 = self
            .run(|mut conn, _| {
                let mut call = self.release.key(name);
                call.arg(token).arg("quiet");
                async move { call.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(released == 1)
    }
}

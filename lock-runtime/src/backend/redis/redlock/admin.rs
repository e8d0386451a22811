//! The admin API on Redlock: every node asked, the lock as a majority holds it.

use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;

use super::RedlockBackend;
use crate::admin::{Entry, Listing};
use crate::backend::Admin;
use crate::backend::Freed;
use crate::backend::redis::RedisBackend;
use crate::backend::redis::admin::inspect_each;
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// How long the admin API waits for a Redlock node.
const ADMIN_NODE_TIMEOUT: Duration = Duration::from_secs(2);

impl RedlockBackend {
    /// `op` on every node at once, each bounded by [`ADMIN_NODE_TIMEOUT`]: the answers of the
    /// nodes that gave one, or an error when fewer than a majority did.
    pub(super) async fn on_every_node<'a, T, F, Fut>(&'a self, op: F) -> Result<Vec<T>, BoxError>
    where
        F: Fn(&'a RedisBackend) -> Fut,
        Fut: Future<Output = Result<T, BoxError>>,
    {
        let answers = join_all(
            self.nodes
                .iter()
                .map(|node| tokio::time::timeout(ADMIN_NODE_TIMEOUT, op(node))),
        )
        .await;
        let mut ok = Vec::with_capacity(answers.len());
        let mut failures = Vec::new();
        for (node, answer) in self.nodes.iter().zip(answers) {
            match answer {
                Ok(Ok(value)) => ok.push(value),
                Ok(Err(e)) => failures.push(format!("{}: {e}", node.shown_url())),
                Err(_) => failures.push(format!(
                    "{}: no answer within {ADMIN_NODE_TIMEOUT:?}",
                    node.shown_url()
                )),
            }
        }
        if ok.len() < self.quorum {
            return Err(format!(
                "only {} of {} Redlock nodes answered, fewer than the majority of {} ({})",
                ok.len(),
                self.nodes.len(),
                self.quorum,
                failures.join("; ")
            )
            .into());
        }
        Ok(ok)
    }

    /// The lock as a majority of nodes hold it: the token on at least `quorum` of `found`, with
    /// the shortest of their leases. A token on fewer nodes (an attempt that lost its vote,
    /// copies left by a node that was down) holds nothing.
    fn majority(&self, found: Vec<Option<Entry>>) -> Option<Entry> {
        let entries: Vec<_> = found.into_iter().flatten().collect();
        let mut best: Option<(usize, Entry)> = None;
        for entry in &entries {
            let same: Vec<_> = entries.iter().filter(|e| e.token == entry.token).collect();
            if same.len() >= self.quorum && best.as_ref().is_none_or(|(n, _)| same.len() > *n) {
                let mut entry = entry.clone();
                entry.ttl = same.iter().filter_map(|e| e.ttl).min();
                best = Some((same.len(), entry));
            }
        }
        best.map(|(_, entry)| entry)
    }
}

impl Admin for RedlockBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let found = self.on_every_node(|node| node.inspect_lock(name)).await?;
            // A node that did not answer may hold the token that would have made a majority:
            // then nobody can be said to hold the lock, nor anybody not to.
            let unanswered = self.nodes.len() - found.len();
            let most = found
                .iter()
                .flatten()
                .map(|e| {
                    found
                        .iter()
                        .flatten()
                        .filter(|o| o.token == e.token)
                        .count()
                })
                .max()
                .unwrap_or(0);
            match self.majority(found) {
                Some(entry) => Ok(Some(entry)),
                None if unanswered > 0 && most + unanswered >= self.quorum => Err(format!(
                    "cannot tell who holds it: {unanswered} of {} Redlock nodes did not answer \
                     within {ADMIN_NODE_TIMEOUT:?}, and without them no owner has a majority",
                    self.nodes.len()
                )
                .into()),
                None => Ok(None),
            }
        })
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let listed = self.on_every_node(|node| node.list_locks(listing)).await?;
            let mut names: Vec<String> = listed.into_iter().flatten().map(|e| e.name).collect();
            names.sort();
            names.dedup();
            inspect_each(&names, |name| self.inspect(name)).await
        })
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            // First a look, then a delete of what it saw — never an unconditional DEL. The
            // nodes' deletes land at different moments (a slow node's after `on_every_node`
            // gave up on it): a waiter woken by the first can win a majority with a node the
            // old holder never had, and a blind DEL reaching that node later would take its
            // grant away (leaving it on a minority: a lock nobody holds, a second grant
            // possible).
            let seen = self.on_every_node(|node| node.inspect_lock(name)).await?;
            let mut tokens: Vec<String> = seen
                .iter()
                .flatten()
                .filter_map(|e| e.token.clone())
                .collect();
            tokens.sort();
            tokens.dedup();
            if tokens.is_empty() {
                return Ok(None);
            }
            let found = self
                .on_every_node(|node| node.force_release_of(name, &tokens))
                .await?;
            // Deleted where one of the tokens seen was still there; reported as the majority
            // held it.
            let removed: Vec<Option<Entry>> = found
                .into_iter()
                .map(|e| e.filter(|e| e.token.as_ref().is_some_and(|t| tokens.contains(t))))
                .collect();
            let any = removed.iter().flatten().next().cloned();
            Ok(self.majority(removed).or(any))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let versions = self.on_every_node(|node| node.version()).await?;
            Ok(format!(
                "{} of {} nodes answered: {}",
                versions.len(),
                self.nodes.len(),
                versions.join(", ")
            ))
        })
    }
    /// Every node's announcements: a lock changes on a majority of them, so each change is
    /// announced by several (the watch lists once for them all, or twice).
    fn changes<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::admin::ChangeFeed>, BoxError>> {
        Box::pin(async move {
            let mut servers = Vec::with_capacity(self.nodes.len());
            for node in &self.nodes {
                servers.extend(node.servers().await?);
            }
            let config = &self.nodes[0].config;
            Ok(Some(
                super::super::admin::track(&servers, config, prefix).await?,
            ))
        })
    }
}

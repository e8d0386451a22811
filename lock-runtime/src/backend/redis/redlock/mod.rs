//! `redlock://h1:p1,h2:p2,h3:p3[,…]`: the distributed-lock algorithm of the Redis documentation
//! across N independent Redis masters.
//!
//! - **Acquire**: one vote script on every node at once, each bounded by the node timeout.
//!   The lock is ours when a majority (N/2+1) granted it *and* the validity left,
//!   `lease − elapsed − drift` (drift = 1 % of the lease + 2 ms), is still positive. Otherwise
//!   the partial locks are deleted on every node at once — quietly (no wake-up) unless our
//!   token may have held a majority that other waiters saw and now wait on — and the attempt
//!   reports the lock busy — with the holder's remaining lease when one token holds a majority,
//!   or a random short delay when the vote was split, so contenders fall out of step instead of
//!   livelocking.
//! - **Renew**: on every node at once; it counts only when a majority confirms (the watchdog
//!   above bounds the whole renewal by the validity). When a majority can no longer confirm,
//!   the lock is lost.
//! - **Release**: on every node at once; a node that does not answer within the node timeout is
//!   skipped, not waited for (its copy expires with the lease).
//! - **Wake-on-release**: a waiter subscribes on every reachable node; a release notification
//!   from any of them wakes it.
//! - **Fencing**: refused. A Redlock counter would live on N independent nodes with no
//!   consensus between them; a node restarted empty or a minority partition can hand out a
//!   number that is not larger than one already given. We do not hand out a token we cannot
//!   keep monotonic: use one Redis (`redis://`) or a consensus store when you need fencing.
//!
//! Node restarts: a node restarted empty forgets the locks it held, and can then help a second
//! client win a majority for a lock the first still holds (the Redis documentation's example).
//! Run the nodes with `appendonly yes` and `appendfsync always`, or keep a restarted node out
//! for longer than the longest lease; the test suite shows both the double grant and that
//! `appendfsync always` prevents it.
//!
//! Files: this one holds the backend, its connection and the lock operations; `vote` the vote
//! and its undoing; `outcome` the nodes' answers and the majorities over them; `admin` the
//! admin API.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::{RedisBackend, RedisSettings, node_urls};
use crate::LockClient;
use crate::backend::drift;
use crate::backend::{Attempt, Backend, Capabilities, Hold, LockSpec, Released, Transient};
use crate::error::{BoxError, LockError};
use crate::notify::ReleaseSubscription;
use crate::runtime::BoxFuture;
use crate::url::redact_url;

mod admin;
mod outcome;
mod vote;

use crate::backend::{SharedStore, Stored};
use outcome::NodeOutcome;
use vote::Vote;

/// Why fencing is refused; part of every such error.
pub(crate) const NO_FENCING: &str = "Redlock cannot hand out fencing tokens: a counter spread \
     over independent nodes without consensus cannot be kept monotonic (a node restarted empty \
     would count again from an older value). Use `redis://` (one server) when you need fencing";

/// Why read locks are refused; the whole message of such an error.
pub(crate) const NO_READ_LOCKS: &str = "Redlock has no read locks: a reader's share would need a \
     majority vote of its own, and a writer would have to see every reader on a majority of \
     independent nodes that do not talk to each other, so a restarted node could admit a writer \
     beside live readers. Use `redis://` or `redis+cluster://` for read/write locks, or take the \
     plain (write) lock on Redlock";

/// Why Redlock refuses semaphores.
pub(crate) const NO_SEMAPHORES: &str = "Redlock has no semaphores: a permit would need a \
     majority vote of its own, and independent nodes that each count the permits they saw can \
     together admit more than the limit (with a limit of 2 on nodes A, B, C: permits granted on A+B, \
     on B+C and on A+C — no node saw more than two). Use `redis://` or `redis+cluster://` for \
     semaphores";

/// The smallest number of nodes that tolerates one failure.
const MIN_NODES: usize = 3;

pub(crate) struct RedlockBackend {
    nodes: Vec<Arc<RedisBackend>>,
    quorum: usize,
    /// `None`: derived from each lock's lease ([`auto_node_timeout`]).
    node_timeout: Option<Duration>,
}

/// The lease its holder counts on: the TTL of `spec` less its lock-delay.
pub(super) fn holder_lease(spec: LockSpec<'_>) -> Duration {
    spec.lease.saturating_sub(spec.lock_delay)
}

/// The node timeout when none is configured: a tenth of the lease, at least
/// [`LockClient::AUTO_NODE_TIMEOUT_MIN`] (a busy host's scheduling delays are tens of
/// milliseconds) and at most [`LockClient::AUTO_NODE_TIMEOUT_MAX`], but never more than a
/// third of the lease (the renewal interval).
///
/// It keeps the validity accounting honest at any value: a grant counts only when
/// `lease − elapsed − drift` is positive, with `elapsed` measured, not assumed. A vote returns
/// as soon as a majority granted, so a hung minority costs an acquisition nothing; a renewal
/// or release waits at most this long for a silent node.
///
/// [`LockClient::AUTO_NODE_TIMEOUT_MIN`]: crate::LockClient::AUTO_NODE_TIMEOUT_MIN
/// [`LockClient::AUTO_NODE_TIMEOUT_MAX`]: crate::LockClient::AUTO_NODE_TIMEOUT_MAX
pub(crate) fn auto_node_timeout(lease: Duration) -> Duration {
    (lease / 10)
        .clamp(
            LockClient::AUTO_NODE_TIMEOUT_MIN,
            LockClient::AUTO_NODE_TIMEOUT_MAX,
        )
        .min(lease / 3)
}

impl RedlockBackend {
    /// Parses the node list and connects to every node at once. A majority must answer; the
    /// others are connected to later, when they come back.
    pub(crate) async fn connect(
        url: &str,
        settings: RedisSettings,
        node_timeout: Option<Duration>,
    ) -> Result<Arc<RedlockBackend>, LockError> {
        let shown = redact_url(url);
        let urls = node_urls(url, settings.tls.is_some()).map_err(LockError::Config)?;
        if urls.len() < MIN_NODES {
            return Err(LockError::Config(format!(
                "`{shown}` names {} node(s); Redlock needs at least {MIN_NODES} independent \
                 Redis masters to survive the loss of one (use `redis://host:port` for a single \
                 server)",
                urls.len()
            )));
        }
        // One retry per node, inside the node timeout: a node that restarted, or whose last
        // call was cut short by the node timeout, answers the first command on its old
        // connection with a broken pipe; the retry reconnects. A node that does not answer at
        // all is still skipped after the node timeout.
        let settings = RedisSettings {
            retries: 1,
            ..settings
        };
        let mut nodes = Vec::with_capacity(urls.len());
        for node in &urls {
            nodes.push(Arc::new(RedisBackend::new(node, settings.clone())?));
        }
        let checks = join_all(nodes.iter().map(|node| node.check())).await;
        let failures: Vec<String> = checks
            .into_iter()
            .filter_map(Result::err)
            .map(|error| error.to_string())
            .collect();
        let quorum = nodes.len() / 2 + 1;
        if nodes.len() - failures.len() < quorum {
            return Err(LockError::Connect {
                url: shown,
                reason: format!(
                    "only {} of {} Redlock nodes answered, a majority ({quorum}) is needed: {}",
                    nodes.len() - failures.len(),
                    nodes.len(),
                    failures.join("; ")
                ),
                source: None,
            });
        }
        for failure in &failures {
            tracing::warn!(%failure, "distlock: a Redlock node is down; going on with the majority");
        }
        Ok(Arc::new(RedlockBackend {
            nodes,
            quorum,
            node_timeout,
        }))
    }

    /// The node timeout for commands about a lock with this lease (the holder's: see
    /// [`holder_lease`]).
    fn timeout_for(&self, lease: Duration) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| auto_node_timeout(lease))
    }
}

/// Plain locks only; a lost vote is undone on every node by the attempt itself. A lock-delay
/// lengthens each node's TTL; a grant's validity counts the holder's lease alone.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    wakes: "a pub/sub message (from any node)",
    announces: true,
    undoes_failed_attempts: true,
    shares: Ok(super::share::SHARE_LIMIT),
    shared: Err(NO_READ_LOCKS),
    permits: Err(NO_SEMAPHORES),
    fencing: Err(NO_FENCING),
    ..Capabilities::plain("redlock")
};

/// A shared result is written to every node and read from all that answer (a majority must):
/// any node's copy is the result. Not a vote: a result lost on some nodes only makes a caller
/// compute it again.
impl SharedStore for RedlockBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        Box::pin(async move {
            let copies = self.on_every_node(|node| node.shared_get(name)).await?;
            Ok(copies.into_iter().flatten().next())
        })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(async move {
            self.on_every_node(|node| node.shared_put(entry))
                .await
                .map(drop)
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let dropped = self.on_every_node(|node| node.shared_drop(name)).await?;
            Ok(dropped.into_iter().any(|d| d))
        })
    }
}

impl Backend for RedlockBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(async move {
            // (A request with fencing never gets here: `Capabilities::fencing` refuses it.)
            let started = Instant::now();
            let votes = self.vote(spec).await;
            let elapsed = started.elapsed();
            let granted = votes
                .iter()
                .filter(|v| matches!(v, Some(NodeOutcome::Answered(Vote::Granted))))
                .count();
            // The holder's lease: the TTL voted with, less a lock-delay (which only keeps the
            // key taken after a holder stopped renewing, and is no validity of this grant).
            let lease = holder_lease(spec);
            let margin = drift(lease);
            let valid = lease > elapsed + margin;
            if granted >= self.quorum && valid {
                return Ok(Attempt::Acquired {
                    fencing_token: None,
                });
            }
            let unknown = votes
                .iter()
                .filter(|v| !matches!(v, Some(NodeOutcome::Answered(_))))
                .count();
            self.undo(spec, granted + unknown >= self.quorum, started)
                .await;
            let answered = votes
                .iter()
                .filter(|v| matches!(v, Some(NodeOutcome::Answered(_))))
                .count();
            if answered < self.quorum {
                let permanent = votes
                    .iter()
                    .filter(|v| {
                        matches!(
                            v,
                            Some(NodeOutcome::Failed {
                                permanent: true,
                                ..
                            })
                        )
                    })
                    .count();
                let message = format!(
                    "a majority of the Redlock nodes was unreachable: {answered} of {} answered \
                     the acquisition, {} are needed; {}",
                    self.nodes.len(),
                    self.quorum,
                    self.vote_report(&votes)
                );
                // Slow, down or refusing nodes may be back at the next attempt; nodes that
                // refuse us for good (authentication, a script error) will not.
                return Err(if permanent > self.nodes.len() - self.quorum {
                    message.into()
                } else {
                    Transient::wrap(message)
                });
            }
            if granted >= self.quorum {
                return Err(Transient::wrap(format!(
                    "the lock was granted by {granted} of {} Redlock nodes, but only after \
                     {elapsed:?}, which leaves no validity of the {:?} lease (drift margin \
                     {margin:?}); the partial locks were released. A node is answering slowly: \
                     check the network, or use a longer lease",
                    self.nodes.len(),
                    lease
                )));
            }
            // Busy. If one owner holds a majority, wait for its lease (or its release);
            // otherwise the vote was split between contenders: retry after a random delay.
            let mut holders: HashMap<&str, Vec<i64>> = HashMap::new();
            for vote in votes.iter().flatten() {
                if let NodeOutcome::Answered(Vote::Busy { pttl, holder }) = vote
                    && !holder.is_empty()
                {
                    holders.entry(holder.as_str()).or_default().push(*pttl);
                }
            }
            let owner = holders
                .into_values()
                .find(|pttls| pttls.len() >= self.quorum);
            let ttl = match owner {
                Some(pttls) if pttls.iter().any(|&p| p < 0) => None,
                Some(pttls) => pttls
                    .into_iter()
                    .min()
                    .map(|ms| Duration::from_millis(ms as u64)),
                None => Some(Duration::from_millis(fastrand::u64(2..=30))),
            };
            Ok(Attempt::Busy { ttl })
        })
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let outcomes = self
                .on_all(self.timeout_for(holder_lease(spec)), |node| async move {
                    node.renew(spec).await
                })
                .await;
            self.count(&outcomes, "renewal", |renewed| *renewed)
        })
    }

    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        Box::pin(async move {
            let shortest = specs.iter().map(|spec| holder_lease(*spec)).min();
            let timeout = self.timeout_for(shortest.unwrap_or(LockClient::MAX_LEASE));
            let outcomes = self
                .on_all(
                    timeout,
                    |node| async move { Ok(node.renew_many(specs).await) },
                )
                .await;
            (0..specs.len())
                .map(|i| {
                    let per_lock: Vec<NodeOutcome<bool>> = outcomes
                        .iter()
                        .zip(&self.nodes)
                        .map(|(outcome, node)| match outcome {
                            NodeOutcome::Answered(results) => match &results[i] {
                                Ok(renewed) => NodeOutcome::Answered(*renewed),
                                Err(why) => {
                                    NodeOutcome::failed(format!("{}: {why}", node.shown_url()))
                                }
                            },
                            NodeOutcome::Failed { why, permanent } => NodeOutcome::Failed {
                                why: why.clone(),
                                permanent: *permanent,
                            },
                        })
                        .collect();
                    self.count(&per_lock, "renewal", |renewed| *renewed)
                        .map_err(|e| e.to_string())
                })
                .collect()
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        Box::pin(async move {
            // The lease is not known here: wait as long as for the longest automatic timeout.
            let timeout = self
                .node_timeout
                .unwrap_or(LockClient::AUTO_NODE_TIMEOUT_MAX);
            let outcomes = self
                .on_all(timeout, |node| async move {
                    node.release(Hold::exclusive(name, token)).await
                })
                .await;
            // Deleted on a majority: released. Deleted or maybe deleted (a node's reply was
            // lost and its retry found the key not ours) on a majority: ambiguous, which the
            // guard settles by its lease. Not ours on more than a minority: not ours.
            let (mut deleted, mut ambiguous, mut not_ours) = (0, 0, 0);
            for outcome in &outcomes {
                match outcome {
                    NodeOutcome::Answered(Released::Deleted) => deleted += 1,
                    NodeOutcome::Answered(Released::Ambiguous { .. }) => ambiguous += 1,
                    NodeOutcome::Answered(Released::NotOurs) => not_ours += 1,
                    NodeOutcome::Failed { .. } => {}
                }
            }
            if deleted >= self.quorum {
                Ok(Released::Deleted)
            } else if deleted + ambiguous >= self.quorum {
                Ok(Released::Ambiguous { alive_until: None })
            } else if not_ours > self.nodes.len() - self.quorum {
                Ok(Released::NotOurs)
            } else {
                Err(self.unreachable_error("release", &outcomes))
            }
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        Box::pin(async move {
            let timeout = self
                .node_timeout
                .unwrap_or(LockClient::AUTO_NODE_TIMEOUT_MAX);
            let outcomes = self
                .on_all(timeout, |node| async move { node.subscribe(spec).await })
                .await;
            let mut failures = Vec::new();
            let mut subscriptions = Vec::new();
            for outcome in outcomes {
                match outcome {
                    NodeOutcome::Answered(subscription) => subscriptions.push(subscription),
                    NodeOutcome::Failed { why, .. } => failures.push(why),
                }
            }
            ReleaseSubscription::merge(subscriptions).ok_or_else(|| {
                format!(
                    "no Redlock node accepted the subscription: {}",
                    failures.join("; ")
                )
                .into()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fencing_refusal_says_why_and_what_to_use() {
        assert!(super::NO_FENCING.contains("monotonic"));
        assert!(super::NO_FENCING.contains("redis://"));
    }
}

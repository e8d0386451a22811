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

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use redis::{ErrorKind, RedisError, RedisResult, Value};

use super::{RedisBackend, RedisSettings, acquire_error, millis, node_urls};
use crate::LockClient;
use crate::backend::drift;
use crate::backend::url::redact_url;
use crate::backend::{Admin, Attempt, Backend, Capabilities, Hold, LockSpec, Released, Transient};
use crate::error::{BoxError, LockError};
use crate::notify::ReleaseSubscription;
use crate::runtime::BoxFuture;

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

/// Why Redlock refuses semaphores (a `LockError::Config`).
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

/// What one node did within the node timeout.
enum Outcome<T> {
    Answered(T),
    Failed {
        /// `<node url>: <what happened>`.
        why: String,
        /// Retrying cannot cure it (authentication, a script error).
        permanent: bool,
    },
}

impl<T> Outcome<T> {
    fn failed(why: impl Into<String>) -> Outcome<T> {
        Outcome::Failed {
            why: why.into(),
            permanent: false,
        }
    }
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
        let urls = node_urls(url).map_err(LockError::Config)?;
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

    /// The node timeout for commands about a lock with this lease.
    fn timeout_for(&self, lease: Duration) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| auto_node_timeout(lease))
    }

    /// Runs `op` on every node at once, each bounded by `timeout`.
    async fn on_all<'a, T, F, Fut>(&'a self, timeout: Duration, op: F) -> Vec<Outcome<T>>
    where
        F: Fn(&'a RedisBackend) -> Fut,
        Fut: Future<Output = Result<T, BoxError>> + 'a,
    {
        join_all(
            self.nodes
                .iter()
                .map(|node| bounded(node, timeout, op(node))),
        )
        .await
    }

    fn unreachable_error<T>(&self, op: &str, outcomes: &[Outcome<T>]) -> BoxError {
        let answered = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Answered(_)))
            .count();
        let mut message = format!(
            "a majority of the Redlock nodes was unreachable: {answered} of {} answered the \
             {op}, {} are needed;",
            self.nodes.len(),
            self.quorum
        );
        for outcome in outcomes {
            if let Outcome::Failed { why, .. } = outcome {
                let _ = write!(message, " {why};");
            }
        }
        message.pop();
        message.into()
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
    async fn undo(&self, spec: LockSpec<'_>, loud: bool, sent_at: Instant) {
        let outcomes = self
            .on_all(self.timeout_for(spec.lease), |node| async move {
                delete(node, spec.name, spec.token, loud).await
            })
            .await;
        let silent: Vec<Arc<RedisBackend>> = outcomes
            .iter()
            .zip(&self.nodes)
            .filter(|(outcome, _)| !matches!(outcome, Outcome::Answered(_)))
            .map(|(_, node)| Arc::clone(node))
            .collect();
        if !silent.is_empty() {
            chase(silent, spec, loud, sent_at + spec.lease);
        }
    }
}

/// `call` on `node`, bounded by `timeout`, as an [`Outcome`].
async fn bounded<T>(
    node: &RedisBackend,
    timeout: Duration,
    call: impl Future<Output = Result<T, BoxError>>,
) -> Outcome<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Outcome::Answered(value),
        Ok(Err(error)) => Outcome::Failed {
            why: format!("{}: {}", node.shown_url(), describe(&*error)),
            permanent: !error.is::<Transient>(),
        },
        Err(_) => Outcome::failed(format!("{}: timed out after {timeout:?}", node.shown_url())),
    }
}

/// A node's error in a few words: `refused` for a refused connection, the error otherwise.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let error = match error.downcast_ref::<Transient>() {
        Some(transient) => &*transient.0,
        None => error,
    };
    match error.downcast_ref::<redis::RedisError>() {
        Some(redis) if redis.is_connection_refusal() => {
            "refused (is redis-server running there?)".to_owned()
        }
        _ => error.to_string(),
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

/// How long the admin API waits for a Redlock node.
const ADMIN_NODE_TIMEOUT: Duration = Duration::from_secs(2);

impl RedlockBackend {
    /// `op` on every node at once, each bounded by [`ADMIN_NODE_TIMEOUT`]: the answers of the
    /// nodes that gave one, or an error when fewer than a majority did.
    async fn on_every_node<'a, T, F, Fut>(&'a self, op: F) -> Result<Vec<T>, BoxError>
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
    fn majority(&self, found: Vec<Option<crate::admin::Entry>>) -> Option<crate::admin::Entry> {
        let entries: Vec<_> = found.into_iter().flatten().collect();
        let mut best: Option<(usize, crate::admin::Entry)> = None;
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

/// Plain locks only; a lost vote is undone on every node by the attempt itself.
const CAPABILITIES: Capabilities = Capabilities {
    undoes_failed_attempts: true,
    shared: Err(NO_READ_LOCKS),
    permits: Err(NO_SEMAPHORES),
    ..Capabilities::plain("redlock")
};

impl Backend for RedlockBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(async move {
            if spec.fencing {
                return Err(NO_FENCING.into());
            }
            let started = Instant::now();
            let votes = self.vote(spec).await;
            let elapsed = started.elapsed();
            let granted = votes
                .iter()
                .filter(|v| matches!(v, Some(Outcome::Answered(Vote::Granted))))
                .count();
            let margin = drift(spec.lease);
            let valid = spec.lease > elapsed + margin;
            if granted >= self.quorum && valid {
                return Ok(Attempt::Acquired {
                    fencing_token: None,
                });
            }
            let unknown = votes
                .iter()
                .filter(|v| !matches!(v, Some(Outcome::Answered(_))))
                .count();
            self.undo(spec, granted + unknown >= self.quorum, started)
                .await;
            let answered = votes
                .iter()
                .filter(|v| matches!(v, Some(Outcome::Answered(_))))
                .count();
            if answered < self.quorum {
                let permanent = votes
                    .iter()
                    .filter(|v| {
                        matches!(
                            v,
                            Some(Outcome::Failed {
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
                    spec.lease
                )));
            }
            // Busy. If one owner holds a majority, wait for its lease (or its release);
            // otherwise the vote was split between contenders: retry after a random delay.
            let mut holders: HashMap<&str, Vec<i64>> = HashMap::new();
            for vote in votes.iter().flatten() {
                if let Outcome::Answered(Vote::Busy { pttl, holder }) = vote
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
                .on_all(self.timeout_for(spec.lease), |node| async move {
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
            let shortest = specs.iter().map(|spec| spec.lease).min();
            let timeout = self.timeout_for(shortest.unwrap_or(LockClient::MAX_LEASE));
            let outcomes = self
                .on_all(
                    timeout,
                    |node| async move { Ok(node.renew_many(specs).await) },
                )
                .await;
            (0..specs.len())
                .map(|i| {
                    let per_lock: Vec<Outcome<bool>> = outcomes
                        .iter()
                        .zip(&self.nodes)
                        .map(|(outcome, node)| match outcome {
                            Outcome::Answered(results) => match &results[i] {
                                Ok(renewed) => Outcome::Answered(*renewed),
                                Err(why) => Outcome::failed(format!("{}: {why}", node.shown_url())),
                            },
                            Outcome::Failed { why, permanent } => Outcome::Failed {
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
                    Outcome::Answered(Released::Deleted) => deleted += 1,
                    Outcome::Answered(Released::Ambiguous { .. }) => ambiguous += 1,
                    Outcome::Answered(Released::NotOurs) => not_ours += 1,
                    Outcome::Failed { .. } => {}
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
                    Outcome::Answered(subscription) => subscriptions.push(subscription),
                    Outcome::Failed { why, .. } => failures.push(why),
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

impl Admin for RedlockBackend {
    fn inspect<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::admin::Entry>, BoxError>> {
        Box::pin(async move {
            let found = self.on_every_node(|node| node.inspect_lock(name)).await?;
            Ok(self.majority(found))
        })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<crate::admin::Entry>, BoxError>> {
        Box::pin(async move {
            let listed = self
                .on_every_node(|node| node.list_locks(prefix, pattern, limit))
                .await?;
            let mut names: Vec<String> = listed.into_iter().flatten().map(|e| e.name).collect();
            names.sort();
            names.dedup();
            let found = join_all(names.iter().map(|name| self.inspect(name))).await;
            let mut entries = Vec::with_capacity(found.len());
            for entry in found {
                entries.extend(entry?);
            }
            Ok(entries)
        })
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::admin::Entry>, BoxError>> {
        Box::pin(async move {
            let found = self
                .on_every_node(|node| node.force_release_lock(name))
                .await?;
            // Deleted on every node that answered, majority or not; reported as the majority
            // held it.
            let any = found.iter().flatten().next().cloned();
            Ok(self.majority(found).or(any))
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
}

impl RedlockBackend {
    /// Sends the vote to every node at once and collects the answers until a majority has
    /// granted the lock (the others are not waited for: `None`) or every node has answered or
    /// timed out.
    async fn vote(&self, spec: LockSpec<'_>) -> Vec<Option<Outcome<Vote>>> {
        let timeout = self.timeout_for(spec.lease);
        let mut votes: Vec<Option<Outcome<Vote>>> = self.nodes.iter().map(|_| None).collect();
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
            if matches!(outcome, Outcome::Answered(Vote::Granted)) {
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
    fn vote_report(&self, votes: &[Option<Outcome<Vote>>]) -> String {
        let mut report = String::new();
        for (node, vote) in self.nodes.iter().zip(votes) {
            let url = node.shown_url();
            let _ = match vote {
                Some(Outcome::Answered(Vote::Granted)) => {
                    write!(report, "{url}: granted (undone); ")
                }
                Some(Outcome::Answered(Vote::Busy { holder, .. })) if holder.is_empty() => {
                    write!(report, "{url}: busy, then free; ")
                }
                Some(Outcome::Answered(Vote::Busy { pttl, .. })) if *pttl < 0 => {
                    write!(report, "{url}: held by another owner, without expiry; ")
                }
                Some(Outcome::Answered(Vote::Busy { pttl, .. })) => {
                    write!(report, "{url}: held by another owner for {pttl} ms more; ")
                }
                Some(Outcome::Failed { why, .. }) => write!(report, "{why}; "),
                None => write!(report, "{url}: not waited for; "),
            };
        }
        report.truncate(report.trim_end_matches("; ").len());
        report
    }

    /// A majority decision over the nodes' answers: `true` when a majority said yes, `false`
    /// when a majority can no longer say yes, an error when too few answered to tell.
    fn count<T>(
        &self,
        outcomes: &[Outcome<T>],
        op: &str,
        yes: impl Fn(&T) -> bool,
    ) -> Result<bool, BoxError> {
        let (mut confirmed, mut refused) = (0, 0);
        for outcome in outcomes {
            if let Outcome::Answered(answer) = outcome {
                if yes(answer) {
                    confirmed += 1;
                } else {
                    refused += 1;
                }
            }
        }
        if confirmed >= self.quorum {
            Ok(true)
        } else if refused > self.nodes.len() - self.quorum {
            Ok(false)
        } else {
            Err(self.unreachable_error(op, outcomes))
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_fencing_refusal_says_why_and_what_to_use() {
        assert!(super::NO_FENCING.contains("monotonic"));
        assert!(super::NO_FENCING.contains("redis://"));
    }
}

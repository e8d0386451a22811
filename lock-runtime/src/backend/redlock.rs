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

use futures_util::future::join_all;
use tokio::time::Instant;

use super::redis::{RedisBackend, RedisSettings, Vote, node_urls, redact_url};
use super::{Attempt, Backend, LockSpec};
use crate::error::{BoxError, LockError};
use crate::notify::ReleaseSubscription;
use crate::renew::drift;
use crate::runtime::BoxFuture;

/// Why fencing is refused; part of every such error.
pub(crate) const NO_FENCING: &str = "Redlock cannot hand out fencing tokens: a counter spread \
     over independent nodes without consensus cannot be kept monotonic (a node restarted empty \
     would count again from an older value). Use `redis://` (one server) when you need fencing";

/// The smallest number of nodes that tolerates one failure.
const MIN_NODES: usize = 3;

pub(crate) struct RedlockBackend {
    nodes: Vec<Arc<RedisBackend>>,
    quorum: usize,
    node_timeout: Duration,
}

/// What one node did within the node timeout.
enum Outcome<T> {
    Answered(T),
    Failed(String),
}

impl RedlockBackend {
    /// Parses the node list and connects to every node at once. A majority must answer; the
    /// others are connected to later, when they come back.
    pub(crate) async fn connect(
        url: &str,
        settings: RedisSettings,
        node_timeout: Duration,
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

    /// Runs `op` on every node at once, each bounded by the node timeout.
    async fn on_all<'a, T, F, Fut>(&'a self, op: F) -> Vec<Outcome<T>>
    where
        F: Fn(&'a RedisBackend) -> Fut,
        Fut: Future<Output = Result<T, BoxError>> + 'a,
    {
        join_all(self.nodes.iter().map(|node| {
            let call = op(node);
            async move {
                match tokio::time::timeout(self.node_timeout, call).await {
                    Ok(Ok(value)) => Outcome::Answered(value),
                    Ok(Err(error)) => Outcome::Failed(format!("{}: {error}", node.shown_url())),
                    Err(_) => Outcome::Failed(format!(
                        "{}: no answer within the node timeout ({:?})",
                        node.shown_url(),
                        self.node_timeout
                    )),
                }
            }
        }))
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
            if let Outcome::Failed(why) = outcome {
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
    async fn undo(&self, spec: LockSpec<'_>, loud: bool) {
        self.on_all(|node| async move {
            if loud {
                node.release(spec.name, spec.token).await.map(|_| ())
            } else {
                node.release_quietly(spec.name, spec.token)
                    .await
                    .map(|_| ())
                    .map_err(BoxError::from)
            }
        })
        .await;
    }
}

impl Backend for RedlockBackend {
    fn kind(&self) -> &'static str {
        "redlock"
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        Box::pin(async move {
            if spec.fencing {
                return Err(NO_FENCING.into());
            }
            let started = Instant::now();
            let votes = self
                .on_all(|node| async move {
                    node.vote(spec.name, spec.token, spec.lease)
                        .await
                        .map_err(BoxError::from)
                })
                .await;
            let elapsed = started.elapsed();
            let granted = votes
                .iter()
                .filter(|v| matches!(v, Outcome::Answered(Vote::Granted)))
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
                .filter(|v| matches!(v, Outcome::Failed(_)))
                .count();
            self.undo(spec, granted + unknown >= self.quorum).await;
            let answered = votes
                .iter()
                .filter(|v| matches!(v, Outcome::Answered(_)))
                .count();
            if answered < self.quorum {
                return Err(self.unreachable_error("acquisition", &votes));
            }
            if granted >= self.quorum {
                return Err(format!(
                    "the lock was granted by {granted} of {} Redlock nodes, but only after \
                     {elapsed:?}, which leaves no validity of the {:?} lease (drift margin \
                     {margin:?}); the partial locks were released. A node is answering slowly: \
                     check the network, or use a longer lease",
                    self.nodes.len(),
                    spec.lease
                )
                .into());
            }
            // Busy. If one owner holds a majority, wait for its lease (or its release);
            // otherwise the vote was split between contenders: retry after a random delay.
            let mut holders: HashMap<&str, Vec<i64>> = HashMap::new();
            for vote in &votes {
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
                .on_all(|node| async move { node.renew(spec).await })
                .await;
            self.count(&outcomes, "renewal", |renewed| *renewed)
        })
    }

    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        Box::pin(async move {
            let outcomes = self
                .on_all(|node| async move { Ok(node.renew_many(specs).await) })
                .await;
            (0..specs.len())
                .map(|i| {
                    let per_lock: Vec<Outcome<bool>> = outcomes
                        .iter()
                        .zip(&self.nodes)
                        .map(|(outcome, node)| match outcome {
                            Outcome::Answered(results) => match &results[i] {
                                Ok(renewed) => Outcome::Answered(*renewed),
                                Err(why) => Outcome::Failed(format!("{}: {why}", node.shown_url())),
                            },
                            Outcome::Failed(why) => Outcome::Failed(why.clone()),
                        })
                        .collect();
                    self.count(&per_lock, "renewal", |renewed| *renewed)
                        .map_err(|e| e.to_string())
                })
                .collect()
        })
    }

    fn release<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let outcomes = self
                .on_all(|node| async move { node.release(name, token).await })
                .await;
            self.count(&outcomes, "release", |released| *released)
        })
    }

    fn subscribe<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        Box::pin(async move {
            let outcomes = self
                .on_all(|node| async move { node.subscribe(name).await })
                .await;
            let mut failures = Vec::new();
            let mut subscriptions = Vec::new();
            for outcome in outcomes {
                match outcome {
                    Outcome::Answered(subscription) => subscriptions.push(subscription),
                    Outcome::Failed(why) => failures.push(why),
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

impl RedlockBackend {
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_fencing_refusal_says_why_and_what_to_use() {
        assert!(super::NO_FENCING.contains("monotonic"));
        assert!(super::NO_FENCING.contains("redis://"));
    }
}

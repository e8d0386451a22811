//! What the nodes answered: each node's outcome within the node timeout, and the majority
//! decisions over them.

use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;

use super::RedlockBackend;
use crate::backend::Transient;
use crate::backend::redis::RedisBackend;
use crate::error::BoxError;

/// What one node did within the node timeout.
pub(super) enum NodeOutcome<T> {
    Answered(T),
    Failed {
        /// `<node url>: <what happened>`.
        why: String,
        /// Retrying cannot cure it (authentication, a script error).
        permanent: bool,
    },
}

impl<T> NodeOutcome<T> {
    pub(super) fn failed(why: impl Into<String>) -> NodeOutcome<T> {
        NodeOutcome::Failed {
            why: why.into(),
            permanent: false,
        }
    }
}

impl RedlockBackend {
    /// Runs `op` on every node at once, each bounded by `timeout`.
    pub(super) async fn on_all<'a, T, F, Fut>(
        &'a self,
        timeout: Duration,
        op: F,
    ) -> Vec<NodeOutcome<T>>
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

    pub(super) fn unreachable_error<T>(&self, op: &str, outcomes: &[NodeOutcome<T>]) -> BoxError {
        let answered = outcomes
            .iter()
            .filter(|o| matches!(o, NodeOutcome::Answered(_)))
            .count();
        let mut message = format!(
            "a majority of the Redlock nodes was unreachable: {answered} of {} answered the \
             {op}, {} are needed;",
            self.nodes.len(),
            self.quorum
        );
        for outcome in outcomes {
            if let NodeOutcome::Failed { why, .. } = outcome {
                let _ = write!(message, " {why};");
            }
        }
        message.pop();
        message.into()
    }

    /// A majority decision over the nodes' answers: `true` when a majority said yes, `false`
    /// when a majority can no longer say yes, an error when too few answered to tell.
    pub(super) fn count<T>(
        &self,
        outcomes: &[NodeOutcome<T>],
        op: &str,
        yes: impl Fn(&T) -> bool,
    ) -> Result<bool, BoxError> {
        let (mut confirmed, mut refused) = (0, 0);
        for outcome in outcomes {
            if let NodeOutcome::Answered(answer) = outcome {
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

/// `call` on `node`, bounded by `timeout`, as an [`NodeOutcome`] (a combinator: an `async fn`
/// would keep `call` twice in its state).
pub(super) fn bounded<T>(
    node: &RedisBackend,
    timeout: Duration,
    call: impl Future<Output = Result<T, BoxError>>,
) -> impl Future<Output = NodeOutcome<T>> {
    use futures_util::FutureExt as _;
    tokio::time::timeout(timeout, call).map(move |answer| match answer {
        Ok(Ok(value)) => NodeOutcome::Answered(value),
        Ok(Err(error)) => NodeOutcome::Failed {
            why: format!("{}: {}", node.shown_url(), describe_failure(&*error)),
            permanent: !error.is::<Transient>(),
        },
        Err(_) => NodeOutcome::failed(format!("{}: timed out after {timeout:?}", node.shown_url())),
    })
}

/// A node's error in a few words: `refused` for a refused connection, the error otherwise.
fn describe_failure(error: &(dyn std::error::Error + 'static)) -> String {
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

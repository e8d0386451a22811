//! One etcd lease and its liveness, measured on this process's monotonic clock.
//!
//! etcd deletes a lease's keys — the locks on it — once its leader has had no keepalive for
//! the lease's TTL. Each lease here is kept alive on a stream of its own, one keepalive every
//! TTL/4, and counts as alive only until the send time of the last answered keepalive plus the
//! TTL the answer gave, minus the drift margin. The leader renewed the lease after that
//! keepalive was sent (and a new leader extends every lease when it takes over), so a lease
//! this process calls alive is alive in the cluster, and every lock on it is reported lost
//! before etcd can give it to anyone else.
//!
//! A lease for locks with a lock-delay has a TTL on etcd of the lock's lease plus the delay,
//! in whole seconds each; this process counts it alive for the TTL less the delay, and keeps
//! it alive every quarter of that. A holder that stops (killed, paused, cut off) is reported
//! lost when its lease ends, and etcd deletes its keys the delay later.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::proto::{self, LeaseKeepAliveRequest, LeaseKeepAliveResponse};
use super::rpc::Rpc;
use crate::backend::loss::{Closer, Loss, Sentinel};
use crate::backend::{counted, drift};

/// A granted lease, kept alive until it is lost or given up.
pub(crate) struct Lease {
    pub id: i64,
    /// The TTL etcd granted (it may raise the one asked for to its minimum), the lock-delay
    /// included.
    pub ttl: Duration,
    pub loss: Arc<Loss>,
    keepalive: AbortHandle,
    closer: Closer,
}

impl Lease {
    /// Starts keeping alive lease `id` of `ttl` (whose last `delay` is a lock-delay: not
    /// counted here), granted by a request sent at `sent_at`. `closer` revokes it: when the
    /// lease is dropped (the client is gone) or its runtime shuts down.
    pub(crate) fn start(
        rpc: Rpc,
        id: i64,
        (ttl, delay): (Duration, Duration),
        sent_at: Instant,
        shown: String,
        closer: Closer,
    ) -> Lease {
        let loss = Arc::new(Loss::default());
        let counted = counted(ttl, delay);
        loss.confirm(sent_at + counted - drift(counted));
        let sentinel = Sentinel {
            loss: Arc::clone(&loss),
            closer: closer.clone(),
        };
        let kept = Arc::clone(&loss);
        let keepalive = tokio::spawn(async move {
            let _sentinel = sentinel;
            keep_alive(rpc, id, (ttl, delay), sent_at, kept, shown).await
        })
        .abort_handle();
        Lease {
            id,
            ttl,
            loss,
            keepalive,
            closer,
        }
    }

    /// A lock on it must live until `until` (its `min_hold`), even if this process goes
    /// first: see [`Closer::keep_until`].
    pub(crate) fn keep_until(&self, until: Instant) {
        self.closer.keep_until(until);
    }

    /// Whether locks may still be taken and trusted on this lease.
    pub(crate) fn is_usable(&self) -> bool {
        !self.loss.is_lost() && !self.keepalive.is_finished()
    }

    /// Gives the lease up: every lock on it is lost, and it is revoked (its keys deleted at
    /// once) if etcd can still be reached.
    pub(crate) fn abandon(&self, why: String, rpc: &Rpc) {
        self.loss.mark(why);
        self.keepalive.abort();
        let rpc = rpc.clone();
        let id = self.id;
        tokio::spawn(async move {
            let revoke = rpc.unary::<_, proto::LeaseRevokeResponse>(
                proto::path::LEASE_REVOKE,
                proto::LeaseRevokeRequest { id },
            );
            let _ = tokio::time::timeout(Duration::from_secs(5), revoke).await;
        });
    }
}

impl crate::backend::loss::Closes for Lease {
    /// Revokes the lease now (its client is closing): see [`Closer::close_now`].
    fn close(&self) -> crate::runtime::BoxFuture<'_, ()> {
        Box::pin(async move {
            self.closer.close_now(&self.loss).await;
            self.keepalive.abort();
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Revoked, so its keys — locks, places in line — go now, not one TTL later.
        self.closer.close_dropped(&self.loss);
        self.keepalive.abort();
    }
}

/// Revokes lease `id` on a connection of its own (see [`Closer`]).
pub(crate) fn revoker(
    access: super::rpc::Access,
    connect_timeout: Duration,
    bound: Duration,
    id: i64,
) -> Closer {
    let close: crate::runtime::Closing = Arc::new(move || {
        let access = access.clone();
        Box::pin(async move {
            if let Ok(rpc) = Rpc::new(&access, connect_timeout) {
                let _ = rpc
                    .unary::<_, proto::LeaseRevokeResponse>(
                        proto::path::LEASE_REVOKE,
                        proto::LeaseRevokeRequest { id },
                    )
                    .await;
            }
        })
    });
    Closer::new(close, bound)
}

/// Confirms the lease every counted TTL/4 and marks it lost as soon as it may have expired,
/// the lock-delay not counted (see the module docs).
async fn keep_alive(
    rpc: Rpc,
    id: i64,
    (mut ttl, delay): (Duration, Duration),
    granted_at: Instant,
    loss: Arc<Loss>,
    shown: String,
) {
    let mut stream = None;
    let mut confirmed_at = granted_at;
    loop {
        let counted = counted(ttl, delay);
        let interval = (counted / 4).max(Duration::from_millis(5));
        let retry_pause = (counted / 20).max(Duration::from_millis(5));
        loss.confirm(confirmed_at + counted - drift(counted));
        tokio::time::sleep_until(confirmed_at + interval).await;
        let valid_until = confirmed_at + counted - drift(counted);
        loop {
            let sent_at = Instant::now();
            if sent_at >= valid_until {
                loss.mark(format!(
                    "no keepalive of its etcd lease was answered ({shown}) within the lease's \
                     TTL ({counted:?}): etcd may have expired it"
                ));
                return;
            }
            if stream.is_none() {
                let opening = rpc.stream::<_, LeaseKeepAliveResponse>(
                    proto::path::LEASE_KEEP_ALIVE,
                    LeaseKeepAliveRequest { id },
                    false,
                );
                match tokio::time::timeout_at(valid_until, opening).await {
                    Ok(Ok(opened)) => stream = Some(opened),
                    Ok(Err(status)) => {
                        rpc.note(&status);
                        tracing::debug!(%status, "distlock: etcd keepalive stream failed, retrying");
                        tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until))
                            .await;
                        continue;
                    }
                    Err(_) => continue, // the deadline passed: the loop marks the loss
                }
            } else if let Some((sender, _)) = &stream
                && sender.send(LeaseKeepAliveRequest { id }).await.is_err()
            {
                stream = None;
                continue;
            }
            let Some((_, answers)) = &mut stream else {
                continue;
            };
            let answer = tokio::time::timeout_at(valid_until, answers.message()).await;
            match answer {
                Ok(Ok(Some(ref answer))) if answer.ttl > 0 => {
                    confirmed_at = sent_at;
                    ttl = Duration::from_secs(answer.ttl as u64);
                    break;
                }
                Ok(Ok(Some(_))) => {
                    loss.mark(format!(
                        "etcd ({shown}) says its lease {id:x} has expired or was revoked"
                    ));
                    return;
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    if let Ok(Err(status)) = &answer {
                        // Newer etcd checks the token of every keepalive.
                        rpc.note(status);
                    }
                    stream = None;
                    tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until)).await;
                }
                Err(_) => {} // the deadline passed: the loop marks the loss
            }
        }
    }
}

//! A semaphore's permits: admitted among the first `n` keys of the queue, or woken by a
//! departure (the first waiter) or by the key before it (every later one).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Status;

use super::EtcdBackend;
use super::keys::kind_of;
use super::lease::Lease;
use super::lost::next_answer;
use super::proto::{self, KeyValue, PutRequest, RangeRequest, RangeResponse, path};
use super::rpc::Rpc;
use super::watch::Watches;
use crate::backend::queue::{Turn, turn};
use crate::backend::{Attempt, LockSpec};
use crate::error::BoxError;

impl EtcdBackend {
    /// A permit of a semaphore of `limit` whose key `key` in `queue` was created at `created`,
    /// at its place among `head`, the first keys of the queue (at most `limit + 1`; or further
    /// back): granted if fewer than `limit` keys are before it — decided with the attempt's own
    /// transaction, so that a key is never admitted behind the back of a waiter that saw it
    /// waiting. Otherwise the first waiter (at `limit`) watches the queue for a departure, and
    /// every later one the key just before its own — which wakes it by leaving or, admitted
    /// after waiting, by writing its own key once: each departure wakes one waiter, in arrival
    /// order.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn await_permit(
        &self,
        spec: LockSpec<'_>,
        limit: u16,
        lease: &Arc<Lease>,
        (queue, key): (&[u8], &[u8]),
        started: Instant,
        created: i64,
        head: &[KeyValue],
    ) -> Result<Attempt, BoxError> {
        let queue_end = proto::prefix_end(queue);
        let place = head.iter().position(|kv| kv.create_revision == created);
        let at_head = place.map(|place| turn(spec.kind, head[..place].iter().map(kind_of)));
        if let (Some(place), Some(Turn::Holds)) = (place, at_head) {
            // A key after this one, in line when this attempt ran, may watch it as waiting:
            // wake it (a key made later saw this one admitted).
            if place + 1 < head.len() {
                let touched: Result<proto::PutResponse, _> = self
                    .call(
                        "put",
                        self.rpc.unary(
                            path::PUT,
                            PutRequest {
                                key: key.to_vec(),
                                value: self.value_of(spec).into_bytes(),
                                lease: lease.id,
                            },
                        ),
                    )
                    .await;
                match touched {
                    Ok(put) => {
                        let at = put.header.as_ref().map_or(0, |h| h.revision);
                        if let Some(held) = self.keys().get_mut(spec.token) {
                            held.written = at;
                        }
                    }
                    Err(failure) => return Err(self.failed("put", failure)),
                }
            }
            return self.granted(spec, lease, key, started, created);
        }
        if at_head == Some(Turn::FirstInLine) {
            return Ok(self.wait_for_permit(
                spec,
                lease,
                PermitWatch::Departure {
                    queue: queue.to_vec(),
                    queue_end,
                    created,
                    limit,
                },
            ));
        }
        let before: RangeResponse = self
            .call(
                "range",
                self.rpc.unary(
                    path::RANGE,
                    RangeRequest {
                        key: queue.to_vec(),
                        range_end: queue_end.clone(),
                        // Enough to tell fewer than `limit`, exactly `limit` and more ahead
                        // (etcd's `count` is taken before the revision filter: no use here).
                        limit: i64::from(limit) + 1,
                        sort_order: proto::DESCEND,
                        sort_target: proto::SORT_BY_CREATE,
                        keys_only: true,
                        max_create_revision: created - 1,
                    },
                ),
            )
            .await
            .map_err(|f| self.failed("range", f))?;
        // Further back: the key just before this one, unless the queue moved meanwhile. (The
        // keys came newest first: oldest first, they are the queue ahead.)
        let Turn::WaitFor(index) = turn(spec.kind, before.kvs.iter().rev().map(kind_of)) else {
            return Ok(Attempt::Busy {
                ttl: Some(Duration::ZERO),
            });
        };
        let Some(predecessor) = before.kvs.into_iter().rev().nth(index) else {
            return Ok(Attempt::Busy {
                ttl: Some(Duration::ZERO),
            });
        };
        if predecessor.mod_revision != predecessor.create_revision {
            // Written since its creation: admitted already, so this one may be first in line.
            return Ok(Attempt::Busy {
                ttl: Some(Duration::ZERO),
            });
        }
        Ok(self.wait_for_permit(
            spec,
            lease,
            PermitWatch::Change {
                key: predecessor.key,
                created: predecessor.create_revision,
            },
        ))
    }

    /// A permit's waiter is busy: woken once `watch` sees what it waits for.
    fn wait_for_permit(&self, spec: LockSpec<'_>, lease: &Lease, watch: PermitWatch) -> Attempt {
        let (rpc, watches, hub, token) = (
            self.rpc.clone(),
            Arc::clone(&self.watches),
            Arc::clone(&self.hub),
            spec.token.to_owned(),
        );
        let task = tokio::spawn(async move {
            // Woken by the watch, or at once if a look after it was set up shows the change
            // happened already, or by a failed watch (the waiter looks again).
            let _ = watch.wait(&rpc, &watches).await;
            hub.notify(&token);
        })
        .abort_handle();
        self.keep_task(spec.token, task);
        Attempt::Busy {
            ttl: Some(lease.ttl),
        }
    }
}

/// What a permit's waiter waits for (see `EtcdBackend::await_permit`).
enum PermitWatch {
    /// The first waiter: a key before its own (created at `created`) leaving the queue, so
    /// that fewer than `limit` are ahead.
    Departure {
        queue: Vec<u8>,
        queue_end: Vec<u8>,
        created: i64,
        limit: u16,
    },
    /// A later waiter: the key before its own (created at `created`) written (admitted, its
    /// holder writes it once: a queue key is written at its creation and at most once more)
    /// or leaving — found again under its name with another create revision, it left.
    Change { key: Vec<u8>, created: i64 },
}

impl PermitWatch {
    /// Returns once what it waits for happened. The watch starts at the current revision (a
    /// watch from a past revision may be served by etcd's catch-up loop, up to 100 ms late),
    /// and a look once it is set up catches what happened before.
    async fn wait(self, rpc: &Rpc, watches: &Watches) -> Result<(), Status> {
        let (key, range_end, filters) = match &self {
            PermitWatch::Departure {
                queue, queue_end, ..
            } => (queue.clone(), queue_end.clone(), vec![proto::NOPUT]),
            PermitWatch::Change { key, .. } => (key.clone(), Vec::new(), Vec::new()),
        };
        let mut events = watches.open(key, range_end, 0, filters);
        loop {
            let answer = next_answer(&mut events).await?;
            if !answer.events.is_empty() {
                return Ok(());
            }
            if answer.created && self.happened(rpc).await? {
                return Ok(());
            }
        }
    }

    /// Whether it happened already.
    async fn happened(&self, rpc: &Rpc) -> Result<bool, Status> {
        let (request, limit) = match self {
            PermitWatch::Departure {
                queue,
                queue_end,
                created,
                limit,
            } => (
                RangeRequest {
                    key: queue.clone(),
                    range_end: queue_end.clone(),
                    limit: i64::from(*limit),
                    keys_only: true,
                    max_create_revision: created - 1,
                    sort_order: proto::ASCEND,
                    sort_target: proto::SORT_BY_CREATE,
                },
                Some(*limit),
            ),
            PermitWatch::Change { key, .. } => (
                RangeRequest {
                    key: key.clone(),
                    keys_only: true,
                    ..Default::default()
                },
                None,
            ),
        };
        let now: RangeResponse = rpc.unary(path::RANGE, request).await?;
        Ok(match (self, limit) {
            (PermitWatch::Departure { .. }, Some(limit)) => {
                (now.kvs.len() as u64) < u64::from(limit)
            }
            (PermitWatch::Change { created, .. }, _) => now.kvs.first().is_none_or(|kv| {
                kv.mod_revision != kv.create_revision || kv.create_revision != *created
            }),
            _ => true,
        })
    }
}

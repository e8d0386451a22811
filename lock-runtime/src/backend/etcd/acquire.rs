//! Taking a lock: an attempt's transaction (its key, made if absent, and the head of the
//! queue), the walk to the key that holds it up, and sets of plain locks in one transaction.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tonic::{Code, Status};

use super::keys::{entry_of, kind_of};
use super::lease::Lease;
use super::lost::watch_delete;
use super::proto::{
    self, Compare, CompareWith, PutRequest, RangeRequest, RangeResponse, RequestOp, RequestUnion,
    Response, TxnRequest, TxnResponse, path,
};
use super::release::delete_if_created;
use super::{EtcdBackend, EtcdFailure, OwnKey, is_transient};
use crate::backend::queue::{Turn, refusal, turn, upgradable_turn};
use crate::backend::{Attempt, Kind, LockSpec, SetAttempt, Transient};
use crate::error::BoxError;

impl EtcdBackend {
    /// Runs the acquiring transaction of `tokens` (one, or a set of keys) so that it completes
    /// even if the caller gives up (finished in the background then), and a release of any of
    /// the tokens can wait for it.
    pub(super) async fn txn_of(
        &self,
        tokens: &[&str],
        txn: TxnRequest,
    ) -> Result<TxnResponse, EtcdFailure> {
        let gates: Vec<_> = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            tokens
                .iter()
                .map(|token| Arc::clone(in_flight.entry((*token).to_owned()).or_default()))
                .collect()
        };
        let mut running = Vec::with_capacity(gates.len());
        for gate in gates {
            running.push(gate.lock_owned().await);
        }
        let rpc = self.rpc.clone();
        let bound = self.response_timeout;
        // In the caller's task (no task spawned, no wake-up across threads), the gates held
        // until the answer; a caller that gives up leaves the rest to the background.
        let answer = crate::runtime::FinishIfDropped::new(async move {
            let _running = running;
            match tokio::time::timeout(bound, rpc.unary(path::TXN, txn)).await {
                Ok(answer) => answer,
                Err(_) => Err(Status::deadline_exceeded(
                    "no answer within the response timeout",
                )),
            }
        });
        // Bounded inside (the same response timeout an outer bound would add): its failure is
        // the server's status, or the deadline's.
        let answer = answer.await.map_err(EtcdFailure::Server);
        let refused = |status: &Status| !is_transient(status) || status.code() == Code::NotFound;
        if let Err(failure) = &answer
            && !matches!(failure, EtcdFailure::Server(status) if refused(status))
        {
            let mut unanswered = self.unanswered.lock().unwrap_or_else(|p| p.into_inner());
            unanswered.extend(tokens.iter().map(|token| (*token).to_owned()));
        }
        answer
    }

    /// What a queue key holds: its owner token, who made it, with which lease, since when.
    pub(super) fn value_of(&self, spec: LockSpec<'_>) -> String {
        format!(
            "token={}\nholder={}\nlease_ms={}\nrenew={}\njoined_unix_ms={}\n",
            spec.token,
            self.holder,
            spec.lease.as_millis(),
            spec.renew,
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis()
        )
    }

    pub(super) async fn acquire(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let started = Instant::now();
        let lease = self.lease_for(spec.lease, spec.lock_delay).await?;
        let queue = self.queue_key(spec.name);
        let key = self.slots.key(spec.token, &queue, lease.id, spec.kind);
        let queue_end = proto::prefix_end(&queue);
        // The head of the queue: its first key — or, for a semaphore of `n`, its first `n + 1`
        // (the holders, and the first waiter).
        let head_len = spec.kind.permits().map_or(1, |n| i64::from(n) + 1);
        let head = || {
            op(RequestUnion::Range(RangeRequest {
                key: queue.clone(),
                range_end: queue_end.clone(),
                limit: head_len,
                sort_order: proto::ASCEND,
                sort_target: proto::SORT_BY_CREATE,
                keys_only: true,
                ..Default::default()
            }))
        };
        let value = self.value_of(spec);
        // A token with no key of its own known has none (short of an earlier attempt whose
        // answer was lost): its first transaction carries no failure branch — a quarter of the
        // request's bytes. Should the key exist after all, the empty answer sends it round
        // again with the branch.
        let mut known = self.keys().contains_key(spec.token);
        for _ in 0..8 {
            // Our key, made now if absent (a waiter keeps its place between attempts), and
            // the head of the queue, in one transaction.
            let txn = TxnRequest {
                compare: vec![proto::absent(key.clone())],
                success: vec![
                    op(RequestUnion::Put(PutRequest {
                        key: key.clone(),
                        value: value.clone().into_bytes(),
                        lease: lease.id,
                    })),
                    head(),
                ],
                failure: match known {
                    true => vec![
                        op(RequestUnion::Range(RangeRequest {
                            key: key.clone(),
                            ..Default::default()
                        })),
                        head(),
                    ],
                    false => Vec::new(),
                },
            };
            known = true;
            let answer = match self.txn_of(std::slice::from_ref(&spec.token), txn).await {
                Ok(answer) => answer,
                Err(failure) => {
                    self.note_lease_error(&lease, &failure);
                    return Err(self.failed("acquire", failure));
                }
            };
            let revision = answer.header.as_ref().map_or(0, |h| h.revision);
            let mut ranges = answer.responses.into_iter().map(|r| match r.response {
                Some(Response::Range(range)) => range.kvs,
                _ => Vec::new(),
            });
            let mine = ranges.next().unwrap_or_default();
            let first = ranges.next().unwrap_or_default();
            // The key is named by the live lease (see `keys::Slots`): a key found under that
            // name was put on it, by an earlier attempt of this token.
            let created = if answer.succeeded {
                revision
            } else {
                match mine.first() {
                    Some(kv) => kv.create_revision,
                    None => continue,
                }
            };
            {
                // Recorded anew unless this very key (same revision, same lease) is known: an
                // earlier attempt's record may belong to a key that died with a lost lease.
                let mut keys = self.keys();
                let known = keys.get(spec.token).is_some_and(|held| {
                    held.revision == created && Arc::ptr_eq(&held.lease, &lease)
                });
                if !known {
                    keys.insert(
                        spec.token.to_owned(),
                        OwnKey::created(key.clone(), &lease, created),
                    );
                }
            }
            // A name is one kind, and a semaphore has one limit: the oldest key says which.
            let head = first.first().filter(|head| head.create_revision != created);
            if let Some(refused) = refusal(head.map(kind_of), spec.kind) {
                self.keys().remove(spec.token);
                // The rare paths are boxed: the attempt's own box (every acquisition's) holds
                // only what the common path holds across its awaits.
                if Box::pin(self.delete_key(key.clone())).await.is_ok() {
                    self.slots.free(spec.token);
                }
                return Err(refused);
            }
            if let Kind::Permits(limit) = spec.kind {
                return Box::pin(self.await_permit(
                    spec,
                    limit,
                    &lease,
                    (&queue, &key),
                    started,
                    created,
                    &first,
                ))
                .await;
            }
            if first.first().map(|kv| kv.create_revision) == Some(created) {
                return self.granted(spec, &lease, &key, started, created);
            }
            // Watch only the key that holds us up: its deletion makes us a holder or moves us
            // up (it gave up), so a release wakes only those it may admit. A writer waits for
            // the key just before its own; a reader (Curator's recipe, on create revisions)
            // only for the last writer's before its own — so a waiting writer also holds back
            // every reader after it, and readers cannot starve writers.
            let shared = spec.kind == Kind::Shared;
            let before: RangeResponse = match Box::pin(self.call(
                "range",
                self.rpc.unary(
                    path::RANGE,
                    RangeRequest {
                        key: queue.clone(),
                        range_end: queue_end.clone(),
                        limit: if shared { 0 } else { 1 },
                        sort_order: proto::DESCEND,
                        sort_target: proto::SORT_BY_CREATE,
                        keys_only: true,
                        max_create_revision: created - 1,
                    },
                ),
            ))
            .await
            {
                Ok(before) => before,
                Err(failure) => return Err(self.failed("range", failure)),
            };
            if before.kvs.is_empty() && !shared {
                continue; // the queue moved: look again
            }
            // The keys before ours came newest first: oldest first, they are the queue ahead.
            // An upgradable share waits for writers and for another upgradable share.
            let turn = if crate::token::is_upgradable(spec.token) {
                let ahead: Vec<_> = before.kvs.iter().rev().map(entry_of).collect();
                upgradable_turn(&ahead)
            } else {
                turn(spec.kind, before.kvs.iter().rev().map(kind_of))
            };
            let predecessor = match turn {
                Turn::WaitFor(index) => before.kvs.into_iter().rev().nth(index),
                Turn::Holds => None,
                Turn::FirstInLine => unreachable!("only a semaphore's waiter is first in line"),
            };
            let Some(predecessor) = predecessor else {
                // Only readers ahead of this reader: it holds the key with them.
                return self.granted(spec, &lease, &key, started, created);
            };
            // A key on our own lease that no acquisition of ours knows: an attempt given up (its
            // reply lost, a leader change, a restart) whose put landed all the same. Nobody
            // would ever delete it while the lease lives: it goes now.
            let orphan = predecessor.lease == lease.id
                && self
                    .slots
                    .token_of(&predecessor.key)
                    .is_none_or(|token| !self.in_play.contains(&token));
            if orphan {
                match Box::pin(self.delete_key(predecessor.key)).await {
                    Ok(_) => {
                        tracing::debug!("distlock: etcd: deleted an orphaned key of this lease");
                        continue;
                    }
                    Err(failure) => return Err(self.failed("delete", failure)),
                }
            }
            let task = tokio::spawn(watch_delete(
                self.rpc.clone(),
                Arc::clone(&self.watches),
                (predecessor.key, predecessor.create_revision),
                Arc::clone(&self.hub),
                spec.token.to_owned(),
            ))
            .abort_handle();
            self.keep_task(spec.token, task);
            return Ok(Attempt::Busy {
                ttl: Some(lease.ttl),
            });
        }
        Err(Transient::wrap(format!(
            "the queue of `{}` kept changing under this waiter ({})",
            spec.name, self.shown
        )))
    }

    /// Several plain locks in one transaction: if every lock's queue is empty (a range compare
    /// of `CREATE == 0` holds for an empty range), a key for each is put on the lease — all
    /// created at one revision, each lock's fencing token; otherwise nothing is written and
    /// the first lock whose queue has a key is busy. Each spec has a token of its own, recorded
    /// as its own key (released, checked and watched alone).
    pub(super) async fn acquire_set(&self, specs: &[LockSpec<'_>]) -> Result<SetAttempt, BoxError> {
        let Some(first) = specs.first().copied() else {
            return Ok(SetAttempt::Acquired {
                fencing_tokens: Vec::new(),
            });
        };
        let started = Instant::now();
        let lease = self.lease_for(first.lease, first.lock_delay).await?;
        let keys: Vec<(Vec<u8>, Vec<u8>)> = specs
            .iter()
            .map(|spec| {
                let queue = self.queue_key(spec.name);
                let key = self.slots.key(spec.token, &queue, lease.id, spec.kind);
                (queue, key)
            })
            .collect();
        let txn = TxnRequest {
            compare: keys
                .iter()
                .map(|(queue, _)| Compare {
                    result: proto::EQUAL,
                    target: proto::COMPARE_CREATE,
                    key: queue.clone(),
                    range_end: proto::prefix_end(queue),
                    target_union: Some(CompareWith::CreateRevision(0)),
                })
                .collect(),
            success: keys
                .iter()
                .zip(specs)
                .map(|((_, key), spec)| {
                    op(RequestUnion::Put(PutRequest {
                        key: key.clone(),
                        value: self.value_of(*spec).into_bytes(),
                        lease: lease.id,
                    }))
                })
                .collect(),
            failure: keys
                .iter()
                .map(|(queue, _)| {
                    op(RequestUnion::Range(RangeRequest {
                        key: queue.clone(),
                        range_end: proto::prefix_end(queue),
                        limit: 1,
                        keys_only: true,
                        ..Default::default()
                    }))
                })
                .collect(),
        };
        let tokens: Vec<&str> = specs.iter().map(|spec| spec.token).collect();
        let answer = match self.txn_of(&tokens, txn).await {
            Ok(answer) => answer,
            Err(failure) => {
                self.note_lease_error(&lease, &failure);
                return Err(self.failed("acquire", failure));
            }
        };
        if !answer.succeeded {
            // Nothing was written (`try_acquire_all` is done with the tokens).
            let index = answer
                .responses
                .iter()
                .position(|r| matches!(&r.response, Some(Response::Range(range)) if !range.kvs.is_empty()))
                .unwrap_or(0);
            return Ok(SetAttempt::Busy { index });
        }
        let created = answer.header.as_ref().map_or(0, |h| h.revision);
        {
            let mut held = self.keys();
            for (spec, (_, key)) in specs.iter().zip(&keys) {
                held.insert(
                    spec.token.to_owned(),
                    OwnKey::created(key.clone(), &lease, created),
                );
            }
        }
        let mut fencing_tokens = Vec::with_capacity(specs.len());
        for (spec, (_, key)) in specs.iter().zip(&keys) {
            match self.granted(*spec, &lease, key, started, created)? {
                Attempt::Acquired { fencing_token } => fencing_tokens.push(fencing_token),
                Attempt::Busy { .. } => unreachable!("`granted` grants or fails"),
            }
        }
        Ok(SetAttempt::Acquired { fencing_tokens })
    }

    /// Keeps `task` (a waiter's watch) with the key of `token`, replacing (and stopping) the
    /// one before; stops it at once if the key is not this client's any more.
    pub(super) fn keep_task(&self, token: &str, task: AbortHandle) {
        if let Some(held) = self.keys().get_mut(token) {
            if let Some(previous) = held.task.replace(task) {
                previous.abort();
            }
        } else {
            task.abort();
        }
    }

    /// The lock is `spec`'s (its key, created at revision `created`, heads the queue or has only
    /// readers before it): granted, unless its lease was lost meanwhile.
    pub(super) fn granted(
        &self,
        spec: LockSpec<'_>,
        lease: &Lease,
        key: &[u8],
        started: Instant,
        created: i64,
    ) -> Result<Attempt, BoxError> {
        if !lease.is_usable() {
            return Err(Transient::wrap(format!(
                "the etcd lease of `{}` was lost as it was granted ({})",
                spec.name, self.shown
            )));
        }
        if !spec.renew {
            self.end_after_lease(spec, key, started, created);
        }
        Ok(Attempt::Acquired {
            fencing_token: spec.fencing.then_some(created as u64),
        })
    }

    /// An unrenewed lock ends after its lease: its key (created at `created`) is deleted then,
    /// whatever its lease.
    fn end_after_lease(&self, spec: LockSpec<'_>, key: &[u8], started: Instant, created: i64) {
        let rpc = self.rpc.clone();
        let key = key.to_vec();
        let end = started + spec.lease;
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(end).await;
            for attempt in 1..=3 {
                if delete_if_created(&rpc, &key, created, Duration::from_secs(2))
                    .await
                    .is_some()
                {
                    return;
                }
                tokio::time::sleep(crate::backend::retry_pause(attempt)).await;
            }
        })
        .abort_handle();
        if let Some(held) = self.keys().get_mut(spec.token) {
            held.task = Some(task);
        }
    }
}

pub(super) fn op(request: RequestUnion) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

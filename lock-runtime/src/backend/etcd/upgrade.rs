//! Upgradable reads: an upgradable share is a reader's key ending `-u`; the upgrade puts a
//! writer's key of its own (on the share's lease) at the tail of the queue, which readers that
//! come later wait for as for any writer, and holds the write lock once the readers beside the
//! share are gone ([`upgrade_turn`]). A writer that queued behind the share before the upgrade
//! waits for the share, which stays: it comes after.
//!
//! The upgraded lock's fencing token is the share's create revision: every writer that held the
//! lock before it was created ahead of the share, every writer after it behind. The upgrade's
//! own key is younger than a writer queued before it, so its revision would not do.

use std::sync::Arc;

use super::acquire::op;
use super::keys::entry_of;
use super::lost::watch_delete;
use super::proto::{
    self, PutRequest, RangeRequest, RangeResponse, RequestUnion, Response, TxnRequest, path,
};
use super::{EtcdBackend, OwnKey};
use crate::backend::queue::{Turn, upgrade_turn};
use crate::backend::{Kind, LockSpec, Released, Transient, Upgrade};
use crate::error::BoxError;

impl EtcdBackend {
    /// One attempt of [`Backend::upgrade`](crate::backend::Backend::upgrade).
    pub(super) async fn upgrade(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        let Some((share_key, lease, share_revision)) = self
            .keys()
            .get(spec.token)
            .map(|own| (own.key.clone(), Arc::clone(&own.lease), own.revision))
        else {
            return Ok(Upgrade::Lost);
        };
        if !lease.is_usable() {
            return Ok(Upgrade::Lost);
        }
        let queue = self.queue_key(spec.name);
        let up_token = crate::token::upgrade_entry(spec.token);
        let up_key = self.slots.key(&up_token, &queue, lease.id, Kind::Exclusive);
        let queue_end = proto::prefix_end(&queue);
        let list_queue = || RangeRequest {
            key: queue.clone(),
            range_end: queue_end.clone(),
            sort_order: proto::ASCEND,
            sort_target: proto::SORT_BY_CREATE,
            keys_only: true,
            ..Default::default()
        };
        // The queue as the transaction that put the upgrade's key saw it: the first look, in
        // the same round trip.
        let mut listed_with_put: Option<RangeResponse> = None;
        let known = self.keys().get(&up_token).map(|own| own.revision);
        if known.is_none() {
            // In play before it exists: a waiter of this client that finds it ahead (on this
            // lease) must not take it for a leftover and delete it.
            self.in_play.insert(&up_token);
            let value = self.value_of(LockSpec {
                token: &up_token,
                kind: Kind::Exclusive,
                ..spec
            });
            let txn = TxnRequest {
                compare: vec![proto::absent(up_key.clone())],
                success: vec![
                    op(RequestUnion::Put(PutRequest {
                        key: up_key.clone(),
                        value: value.into_bytes(),
                        lease: lease.id,
                    })),
                    op(RequestUnion::Range(list_queue())),
                ],
                // Made by an earlier attempt whose answer was lost.
                failure: vec![
                    op(RequestUnion::Range(RangeRequest {
                        key: up_key.clone(),
                        ..Default::default()
                    })),
                    op(RequestUnion::Range(list_queue())),
                ],
            };
            let answer = match self.txn_of(&[&up_token], txn).await {
                Ok(answer) => answer,
                Err(failure) => {
                    self.note_lease_error(&lease, &failure);
                    return Err(self.failed("upgrade", failure));
                }
            };
            let revision = answer.header.as_ref().map_or(0, |h| h.revision);
            let mut ranges = answer
                .responses
                .into_iter()
                .filter_map(|r| match r.response {
                    Some(Response::Range(range)) => Some(range),
                    _ => None,
                });
            let created = if answer.succeeded {
                revision
            } else {
                match ranges.next().and_then(|range| range.kvs.into_iter().next()) {
                    Some(kv) => kv.create_revision,
                    None => return Ok(Upgrade::Busy { ttl: None }),
                }
            };
            listed_with_put = ranges.next();
            self.keys().insert(
                up_token.clone(),
                OwnKey::created(up_key.clone(), &lease, created),
            );
        }
        for _ in 0..8 {
            let listed = match listed_with_put.take() {
                Some(listed) => listed,
                None => match self
                    .call("range", self.rpc.unary(path::RANGE, list_queue()))
                    .await
                {
                    Ok(listed) => listed,
                    Err(failure) => return Err(self.failed("range", failure)),
                },
            };
            let kvs = listed.kvs;
            let Some(share_at) = kvs
                .iter()
                .position(|kv| kv.key == share_key && kv.create_revision == share_revision)
            else {
                return Ok(Upgrade::Lost);
            };
            let Some(up_at) = kvs.iter().position(|kv| kv.key == up_key) else {
                // Deleted behind our back: the next attempt puts it again.
                self.keys().remove(&up_token);
                return Ok(Upgrade::Busy { ttl: None });
            };
            let entries: Vec<_> = kvs.iter().map(entry_of).collect();
            let blocker = match upgrade_turn(&entries, share_at, up_at) {
                Turn::Holds => {
                    return Ok(Upgrade::Done {
                        fencing_token: spec.fencing.then_some(share_revision as u64),
                    });
                }
                Turn::WaitFor(blocker) => &kvs[blocker],
                Turn::FirstInLine => unreachable!("an upgrade is never a semaphore's waiter"),
            };
            // A key on our own lease that no acquisition of ours knows: an attempt given up
            // whose put landed all the same (see `acquire`). It goes now.
            let orphan = blocker.lease == lease.id
                && self
                    .slots
                    .token_of(&blocker.key)
                    .is_none_or(|token| !self.in_play.contains(&token));
            if orphan {
                match self.delete_key(blocker.key.clone()).await {
                    Ok(_) => continue,
                    Err(failure) => return Err(self.failed("delete", failure)),
                }
            }
            let task = tokio::spawn(watch_delete(
                self.rpc.clone(),
                Arc::clone(&self.watches),
                (blocker.key.clone(), blocker.create_revision),
                Arc::clone(&self.hub),
                spec.token.to_owned(),
            ))
            .abort_handle();
            self.keep_task(&up_token, task);
            return Ok(Upgrade::Busy {
                ttl: Some(lease.ttl),
            });
        }
        Err(Transient::wrap(format!(
            "the queue of `{}` kept changing under an upgrade ({})",
            spec.name, self.shown
        )))
    }

    /// An upgradable read's release: its share's key, then the key its upgrade added, if any
    /// — never the other way round, which would let the readers queued behind the upgrade in
    /// beside a holder that still holds. When both keys are held and settled (no acquiring
    /// transaction in flight or unanswered), one transaction deletes both at one revision:
    /// one round trip.
    pub(super) async fn release_upgradable(
        &self,
        name: &str,
        token: &str,
    ) -> Result<Released, BoxError> {
        if let Some(released) = self.delete_both(token).await {
            return Ok(released);
        }
        let released = self.release_key(token).await;
        if let Err(error) = self.drop_upgrade(token).await {
            tracing::debug!(key = name, %error, "distlock: etcd: an upgrade's key was not deleted; it goes with its lease");
        }
        released
    }

    /// Deletes the share `token`'s key and its upgrade's in one transaction, if both are held
    /// and settled: what the share's release saw; `None` (nothing changed) otherwise, or if
    /// the transaction failed.
    async fn delete_both(&self, token: &str) -> Option<Released> {
        let up_token = crate::token::upgrade_entry(token);
        // No acquiring transaction on its way (its gate, kept until the release, is free)
        // and none unanswered.
        let settled = |t: &str| {
            self.in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(t)
                .is_none_or(|gate| gate.try_lock().is_ok())
                && !self
                    .unanswered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(t)
        };
        if !settled(token) || !settled(&up_token) {
            return None;
        }
        let (share, upgrade) = {
            let mut keys = self.keys();
            if !keys.contains_key(token) || !keys.contains_key(&up_token) {
                return None;
            }
            (keys.remove(token)?, keys.remove(&up_token)?)
        };
        let delete = |key: &[u8]| proto::RequestOp {
            request: Some(RequestUnion::DeleteRange(proto::DeleteRangeRequest {
                key: key.to_vec(),
                range_end: Vec::new(),
            })),
        };
        let txn = TxnRequest {
            compare: Vec::new(),
            success: vec![delete(&share.key), delete(&upgrade.key)],
            failure: Vec::new(),
        };
        let answer: Result<proto::TxnResponse, _> =
            self.call("txn", self.rpc.unary(path::TXN, txn)).await;
        let Ok(answer) = answer else {
            // Given back: the release goes the usual way, with its retries.
            let mut keys = self.keys();
            keys.insert(token.to_owned(), share);
            keys.insert(up_token, upgrade);
            return None;
        };
        let deleted = matches!(
            answer.responses.first().and_then(|r| r.response.as_ref()),
            Some(Response::DeleteRange(d)) if d.deleted > 0
        );
        let alive = share.lease.is_usable();
        {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            in_flight.remove(token);
            in_flight.remove(&up_token);
        }
        self.slots.free(token);
        self.slots.free(&up_token);
        self.in_play.forget(&[&up_token]);
        Some(match deleted && alive {
            true => Released::Deleted,
            false => Released::NotOurs,
        })
    }

    /// Deletes the key an upgrade of the share `token` added, if any: the upgrade given up (the
    /// readers it held back wake), or the upgraded lock released after its share.
    pub(super) async fn drop_upgrade(&self, token: &str) -> Result<(), BoxError> {
        let up_token = crate::token::upgrade_entry(token);
        let result = match self.slots.of(&up_token) {
            Some(_) => self.release_key(&up_token).await.map(|_| ()),
            None => Ok(()),
        };
        self.in_play.forget(&[&up_token]);
        result
    }
}

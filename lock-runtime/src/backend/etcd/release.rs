//! Giving a key up: its deletion, retried briefly; and the background deletions of keys a
//! release or a lost reply left behind.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::keys::Slots;
use super::lease::Lease;
use super::lost::next_answer;
use super::proto::{
    self, Compare, CompareWith, DeleteRangeRequest, DeleteRangeResponse, RequestOp, RequestUnion,
    TxnRequest, TxnResponse, path,
};
use super::rpc::Rpc;
use super::{EtcdBackend, EtcdFailure, is_transient};
use crate::backend::Released;
use crate::error::BoxError;

/// How long a key left behind by an attempt whose reply never came is retried for deletion in
/// the background while etcd does not answer.
const LEFTOVER_SEARCH: Duration = Duration::from_secs(60);

impl EtcdBackend {
    pub(super) async fn delete_key(&self, key: Vec<u8>) -> Result<bool, EtcdFailure> {
        let deleted: DeleteRangeResponse = self
            .call(
                "delete",
                self.rpc.unary(
                    path::DELETE_RANGE,
                    DeleteRangeRequest {
                        key,
                        range_end: Vec::new(),
                    },
                ),
            )
            .await?;
        Ok(deleted.deleted > 0)
    }

    pub(super) async fn release_key(&self, token: &str) -> Result<Released, BoxError> {
        // Waits for the token's acquiring transaction, if one was sent: a release must not run
        // before it (the key it puts would be left behind). The gate stays until it is passed,
        // so that a second release of the same token (a cancelled acquisition's, and its place
        // in line's) waits for the transaction too.
        let gate = self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned();
        if let Some(gate) = gate {
            let _done = gate.lock().await;
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            if in_flight.get(token).is_some_and(|g| Arc::ptr_eq(g, &gate)) {
                in_flight.remove(token);
            }
        }
        let held = self.keys().remove(token);
        let unanswered = self
            .unanswered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token);
        // Its key, reserved by its first attempt (whether it holds it, waits in line, or never
        // heard back). None: nothing was ever sent.
        let Some(key) = self.slots.of(token) else {
            return Ok(Released::NotOurs);
        };
        let lease = held.map(|held| Arc::clone(&held.lease));
        let released = self.delete_held(token, key.clone(), lease).await;
        match &released {
            // Gone now, or never there: an acquiring transaction still held back by etcd
            // could put it after all, on a lease this client keeps alive.
            Ok(_) if unanswered => self.sweep_later(token, key),
            Ok(_) => self.slots.free(token),
            // Freed by the deletion left to the background (`delete_later`).
            Err(_) => {}
        }
        released
    }

    /// Deletes `token`'s key `key` (what [`release_key`](Self::release_key) releases); `lease`
    /// if this client knows it made it, on that lease.
    async fn delete_held(
        &self,
        token: &str,
        key: Vec<u8>,
        lease: Option<Arc<Lease>>,
    ) -> Result<Released, BoxError> {
        // A key on a lease this client has given up was not held any more, deleted or not.
        let alive = lease.as_ref().is_none_or(|lease| lease.is_usable());
        // A release that fails is retried briefly: a leader election or a member going away
        // fails a call, and a lock left behind holds up everyone until its lease runs out.
        let mut attempt = 0;
        loop {
            match self.delete_key(key.clone()).await {
                Ok(true) if alive => return Ok(Released::Deleted),
                Ok(true) => return Ok(Released::NotOurs),
                // An earlier try may have deleted it (its reply lost in a leader change).
                Ok(false) if attempt > 0 && alive => {
                    return Ok(Released::Ambiguous {
                        alive_until: lease.and_then(|lease| lease.loss.alive_until()),
                    });
                }
                Ok(false) => return Ok(Released::NotOurs),
                Err(EtcdFailure::Server(status)) if is_transient(&status) && attempt < 3 => {}
                Err(EtcdFailure::Other(_)) if attempt < 3 => {}
                Err(failure) => {
                    match lease {
                        Some(lease) if lease.is_usable() => {
                            self.delete_later(token, key, move || lease.is_usable());
                        }
                        // Gone with its lease.
                        Some(_) => self.slots.free(token),
                        // An attempt whose reply never came: its put may have landed all the
                        // same, on a lease this client keeps alive.
                        None => {
                            let give_up = Instant::now() + LEFTOVER_SEARCH;
                            self.delete_later(token, key, move || Instant::now() < give_up);
                        }
                    }
                    return Err(self.failed("delete", failure));
                }
            }
            attempt += 1;
            tokio::time::sleep(crate::backend::retry_pause(attempt)).await;
        }
    }

    /// Watches the key of a released token whose acquiring transaction got no answer, for
    /// [`LEFTOVER_SEARCH`], and deletes it if that transaction puts it after all (the key stays
    /// reserved for the token meanwhile, so whatever appears under it is that late put); then
    /// frees its slot.
    fn sweep_later(&self, token: &str, key: Vec<u8>) {
        let (rpc, watches) = (self.rpc.clone(), Arc::clone(&self.watches));
        let response_timeout = self.response_timeout;
        let freed = Freed(Arc::clone(&self.slots), token.to_owned());
        tokio::spawn(async move {
            let _freed = freed;
            let until = Instant::now() + LEFTOVER_SEARCH;
            while Instant::now() < until {
                let mut watch = watches.open(key.clone(), Vec::new(), 0, vec![proto::NODELETE]);
                // Each answer is a put, or the created reply — then a delete finds a put made
                // before the watch began. A failed watch is set again after a pause.
                let watching = async {
                    while next_answer(&mut watch).await.is_ok() {
                        if delete_within(&rpc, &key, response_timeout).await == Some(true) {
                            tracing::debug!("distlock: etcd: a late acquisition's key deleted");
                        }
                    }
                };
                if tokio::time::timeout_at(until, watching).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    /// A release that failed for good reports its error, but its key must not outlive it: the
    /// lease it lives on is kept alive for the client's other locks, so the key would hold the
    /// lock for as long as the client runs. It is deleted in the background once etcd answers
    /// again (the server restarted, the leader elected), while `go_on` says so (its lease is
    /// usable; for an attempt whose reply never came, for [`LEFTOVER_SEARCH`]). Its slot is
    /// freed then.
    fn delete_later(&self, token: &str, key: Vec<u8>, go_on: impl Fn() -> bool + Send + 'static) {
        let rpc = self.rpc.clone();
        let response_timeout = self.response_timeout;
        let freed = Freed(Arc::clone(&self.slots), token.to_owned());
        tokio::spawn(async move {
            let _freed = freed;
            let mut attempt = 0;
            while go_on() {
                attempt += 1;
                tokio::time::sleep(crate::backend::retry_pause(attempt.min(4))).await;
                if delete_within(&rpc, &key, response_timeout).await.is_some() {
                    tracing::debug!("distlock: etcd: a failed release's key deleted later");
                    return;
                }
            }
        });
    }
}

/// Deletes `key` if it is still the one created at revision `created` (a key's name is used
/// again once its slot is free: a deletion sent late must not take a newer acquisition's key);
/// from a task of its own, `Some(deleted)` if etcd answered within `bound`.
pub(super) async fn delete_if_created(
    rpc: &Rpc,
    key: &[u8],
    created: i64,
    bound: Duration,
) -> Option<bool> {
    let txn = rpc.unary::<_, TxnResponse>(
        path::TXN,
        TxnRequest {
            compare: vec![Compare {
                result: proto::EQUAL,
                target: proto::COMPARE_CREATE,
                key: key.to_vec(),
                target_union: Some(CompareWith::CreateRevision(created)),
                range_end: Vec::new(),
            }],
            success: vec![RequestOp {
                request: Some(RequestUnion::DeleteRange(DeleteRangeRequest {
                    key: key.to_vec(),
                    range_end: Vec::new(),
                })),
            }],
            failure: Vec::new(),
        },
    );
    match tokio::time::timeout(bound, txn).await {
        Ok(Ok(answer)) => Some(answer.succeeded),
        _ => None,
    }
}

/// Frees a token's slot when dropped: when the background work on its key ends, however it
/// ends (its task finished, or dropped with its runtime).
struct Freed(Arc<Slots>, String);

impl Drop for Freed {
    fn drop(&mut self) {
        self.0.free(&self.1);
    }
}

/// Deletes `key` from a task of its own (no `&EtcdBackend` there): `Some(deleted)` if etcd
/// answered within `bound`.
pub(super) async fn delete_within(rpc: &Rpc, key: &[u8], bound: Duration) -> Option<bool> {
    let delete = rpc.unary::<_, DeleteRangeResponse>(
        path::DELETE_RANGE,
        DeleteRangeRequest {
            key: key.to_vec(),
            range_end: Vec::new(),
        },
    );
    match tokio::time::timeout(bound, delete).await {
        Ok(Ok(gone)) => Some(gone.deleted > 0),
        _ => None,
    }
}

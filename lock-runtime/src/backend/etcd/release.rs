//! Giving a key up: its deletion, retried briefly; and the background deletions of keys a
//! release or a lost reply left behind.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::lost::next_answer;
use super::proto::{self, DeleteRangeRequest, DeleteRangeResponse, path};
use super::rpc::Rpc;
use super::{EtcdBackend, EtcdFailure, OwnKey, is_transient};
use crate::backend::{Kind, Released};
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

    pub(super) async fn release_key(
        &self,
        name: &str,
        token: &str,
        kind: Kind,
    ) -> Result<Released, BoxError> {
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
        let released = self.delete_held(name, token, kind, held).await;
        if unanswered && released.is_ok() {
            // Gone now, or never there: an acquiring transaction still held back by etcd
            // could put it after all, on a lease this client keeps alive.
            self.sweep_later(self.key_of(name, token, kind).1);
        }
        released
    }

    /// Deletes `token`'s key (what [`release_key`](Self::release_key) releases).
    async fn delete_held(
        &self,
        name: &str,
        token: &str,
        kind: Kind,
        held: Option<OwnKey>,
    ) -> Result<Released, BoxError> {
        let (key, lease) = match held {
            Some(mut held) => (std::mem::take(&mut held.key), Some(Arc::clone(&held.lease))),
            // An attempt whose reply never came: its key is known from the token.
            None => (self.key_of(name, token, kind).1, None),
        };
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
                            self.delete_later(key, move || lease.is_usable());
                        }
                        Some(_) => {}
                        // An attempt whose reply never came: its put may have landed all the
                        // same, on a lease this client keeps alive.
                        None => {
                            let give_up = Instant::now() + LEFTOVER_SEARCH;
                            self.delete_later(key, move || Instant::now() < give_up);
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
    /// [`LEFTOVER_SEARCH`], and deletes it if that transaction puts it after all (a token is
    /// never used again once released, so whatever appears under its key is that late put).
    fn sweep_later(&self, key: Vec<u8>) {
        let (rpc, watches) = (self.rpc.clone(), Arc::clone(&self.watches));
        let response_timeout = self.response_timeout;
        tokio::spawn(async move {
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
    /// usable; for an attempt whose reply never came, for [`LEFTOVER_SEARCH`]).
    fn delete_later(&self, key: Vec<u8>, go_on: impl Fn() -> bool + Send + 'static) {
        let rpc = self.rpc.clone();
        let response_timeout = self.response_timeout;
        tokio::spawn(async move {
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

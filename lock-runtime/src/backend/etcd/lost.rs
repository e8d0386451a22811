//! Watching keys: a holder's own key (renewal's check and lost detection), and a waiter's
//! predecessor.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Code, Status};

use super::EtcdBackend;
use super::proto::{self, RangeRequest, RangeResponse, path};
use super::rpc::Rpc;
use super::watch::{EtcdWatch, Watches};
use crate::backend::LockSpec;
use crate::error::BoxError;
use crate::notify::ReleaseHub;

impl EtcdBackend {
    pub(super) async fn check(&self, spec: LockSpec<'_>) -> Result<bool, BoxError> {
        let known = self
            .keys()
            .get(spec.token)
            .map(|held| (held.key.clone(), Arc::clone(&held.lease), held.revision));
        let Some((key, lease, revision)) = known else {
            return Ok(false);
        };
        let found: RangeResponse = self
            .call(
                "range",
                self.rpc.unary(
                    path::RANGE,
                    RangeRequest {
                        key,
                        ..Default::default()
                    },
                ),
            )
            .await
            .map_err(|failure| self.failed("range", failure))?;
        Ok(lease.is_usable()
            && found
                .kvs
                .first()
                .is_some_and(|kv| kv.create_revision == revision && kv.lease == lease.id))
    }

    pub(super) async fn watch_lost(&self, spec: LockSpec<'_>) -> String {
        let known = self
            .keys()
            .get(spec.token)
            .map(|held| (held.key.clone(), Arc::clone(&held.lease), held.written));
        let Some((key, lease, revision)) = known else {
            // Released already: the watchdog's first poll can run on another thread while
            // the guard releases. Nothing to report.
            return std::future::pending().await;
        };
        // Whether this client still counts the key as its own (not released meanwhile).
        let ours = || self.keys().contains_key(spec.token);
        let shown_key = String::from_utf8_lossy(&key).into_owned();
        let watched = async {
            // Most locks are released long before anyone could take their key away: the watch
            // starts only shortly before the first renewal interval ends (from the key's
            // creation, so nothing since is missed), and a short hold costs the stream no
            // watch opened and cancelled. The lease's loss is the keepalive's, at once.
            tokio::time::sleep(key_watch_after(spec.lease)).await;
            loop {
                let why = match watch_held(&self.rpc, &self.watches, key.clone(), revision).await {
                    Ok(Change::Deleted) => Some(format!("its key `{shown_key}` was deleted")),
                    Ok(Change::Put) => Some(format!(
                        "its key `{shown_key}` was changed by another client"
                    )),
                    // The keepalive bounds how long this may go on.
                    Err(_) => None,
                };
                match why {
                    Some(why) if ours() => return why,
                    // Deleted by this client's own release: nothing was lost.
                    Some(_) => return std::future::pending().await,
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        };
        tokio::select! {
            why = lease.loss.wait() => why,
            why = watched => why,
        }
    }
}

/// How long after a grant the holder's key is first watched: one renewal interval (a third
/// of the lease), less the 100 ms etcd may take to serve a watch that starts in the past and a
/// margin, so that a key deleted or changed by another client is reported within one renewal
/// interval, as on every store.
fn key_watch_after(lease: Duration) -> Duration {
    (lease / 3).saturating_sub(Duration::from_millis(150))
}

/// What happened to a watched key.
enum Change {
    Deleted,
    Put,
}

/// Waits for the deletion of `key` (a waiter's predecessor), created at revision `created`.
///
/// The watch starts from the present, not from a past revision: etcd serves a watch that
/// starts in the past from a catch-up loop that runs every 100 ms, and the waiter would wake
/// up to 100 ms late. Once the watch is in place the key is read once, so a deletion between
/// the caller's last look and the watch's start is not missed.
///
/// etcd (3.4) reads the store's revision for a watch "from now" just before registering it;
/// a write in between leaves the watch behind, in the catch-up loop. The created reply carries
/// the revision it read: when the read that follows sees a later one, the watch may be behind,
/// and it is made again (a few times; after that, the catch-up loop delivers within 100 ms).
///
/// A key found again under that name with another create revision is a later acquisition's
/// (a client puts its key under the same name each time): the one waited for is gone.
async fn watch_deletion(
    rpc: &Rpc,
    watches: &Watches,
    (key, created): (Vec<u8>, i64),
) -> Result<(), Status> {
    let mut attempts = 0;
    'watch: loop {
        attempts += 1;
        let mut events = watches.open(key.clone(), Vec::new(), 0, Vec::new());
        let mut checked = false;
        loop {
            let answer = next_answer(&mut events).await?;
            if answer.events.iter().any(|e| e.r#type == proto::DELETE) {
                return Ok(());
            }
            if answer.created && !checked {
                checked = true;
                let now: RangeResponse = rpc
                    .unary(
                        path::RANGE,
                        RangeRequest {
                            key: key.clone(),
                            keys_only: true,
                            ..Default::default()
                        },
                    )
                    .await?;
                if now
                    .kvs
                    .first()
                    .is_none_or(|kv| kv.create_revision != created)
                {
                    return Ok(());
                }
                let read_at = |header: &Option<proto::ResponseHeader>| {
                    header.as_ref().map_or(0, |h| h.revision)
                };
                if read_at(&now.header) != read_at(&answer.header) && attempts < 4 {
                    continue 'watch;
                }
            }
        }
    }
}

/// Waits for the first change of a held lock's `key` after its creation at `revision`.
///
/// Watched from the revision after its creation, so nothing since is missed; on a busy
/// cluster etcd may serve such a watch from its catch-up loop, up to 100 ms late, which the
/// holder's lease covers many times over (its loss is found by the keepalive, not by this).
async fn watch_held(
    rpc: &Rpc,
    watches: &Watches,
    key: Vec<u8>,
    revision: i64,
) -> Result<Change, Status> {
    let mut events = watches.open(key.clone(), Vec::new(), revision + 1, Vec::new());
    loop {
        let answer = match next_answer(&mut events).await {
            Ok(answer) => answer,
            // The history since the key's creation was compacted: look at the key itself.
            Err(status) if status.code() == Code::OutOfRange => {
                let now: RangeResponse = rpc
                    .unary(
                        path::RANGE,
                        RangeRequest {
                            key: key.clone(),
                            ..Default::default()
                        },
                    )
                    .await?;
                return match now.kvs.first() {
                    None => Ok(Change::Deleted),
                    Some(kv) if kv.mod_revision != revision => Ok(Change::Put),
                    Some(_) => {
                        let from = now.header.map_or(0, |h| h.revision) + 1;
                        events = watches.open(key.clone(), Vec::new(), from, Vec::new());
                        continue;
                    }
                };
            }
            Err(status) => return Err(status),
        };
        if let Some(event) = answer.events.first() {
            return Ok(if event.r#type == proto::DELETE {
                Change::Deleted
            } else {
                Change::Put
            });
        }
    }
}

/// The next answer on a watch stream; a cancelled watch is an error (`OutOfRange` when its
/// start revision was compacted away).
pub(super) async fn next_answer(watch: &mut EtcdWatch) -> Result<proto::WatchResponse, Status> {
    let answer = watch.answer().await?;
    if answer.canceled {
        return Err(if answer.compact_revision > 0 {
            Status::out_of_range("the watched revisions were compacted")
        } else {
            Status::unavailable(format!("the watch was cancelled: {}", answer.cancel_reason))
        });
    }
    Ok(answer)
}

/// A waiter's watch on the key before its own: wakes the waiter `token` once that key is
/// deleted — or once the watch fails, so the waiter looks again rather than sleeps on.
pub(super) async fn watch_delete(
    rpc: Rpc,
    watches: Arc<Watches>,
    key: (Vec<u8>, i64),
    hub: Arc<ReleaseHub>,
    token: String,
) {
    let _ = watch_deletion(&rpc, &watches, key).await;
    hub.notify(&token);
}

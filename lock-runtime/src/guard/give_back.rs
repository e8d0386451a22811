//! Giving a lock back: a guard's release (one key, or a set), what the store's answer means for
//! the guard, `min_hold`, and the hand-over of a released lock to a task of this client that
//! waits for it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{HeldLock, OneKey};
use crate::backend::{Backend, Handover, Hold, Released};
use crate::error::{BoxError, LockError};
use crate::local::{Handed, Offer};
use crate::renew;

/// Releases every key of a set: `first` (which holds the set's watchdog) and `more`.
pub(super) async fn release_set(first: OneKey, more: Vec<OneKey>) -> Result<(), LockError> {
    let releases = std::iter::once(first)
        .chain(more)
        .map(|held| Box::pin(give_back_held(held)) as crate::runtime::BoxFuture<'static, _>)
        .collect();
    let outcomes = crate::runtime::join_all(releases).await;
    // The error that says most: a backend's failure, then the key whose loss lost the set, then
    // a key that was not ours any more, then any.
    match outcomes.into_iter().min_by_key(|(_, what)| *what) {
        Some((result, _)) => result,
        None => Ok(()),
    }
}

/// What giving back one key of a set found, in the order a set's release reports them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Found {
    /// The backend failed.
    Failed,
    /// The key whose loss lost the set (its watchdog saw it go).
    LostTheSet,
    /// The store said the key was not ours any more.
    NotOurs,
    /// Ours at the release, but the guard had been told it was lost.
    LostEarlier,
    /// Released.
    Released,
}

/// [`LockGuard::release`] of one key.
pub(super) async fn release_held(held: OneKey) -> Result<(), LockError> {
    give_back_held(held).await.0
}

/// Gives back one key: what the caller is told, and what the release found.
async fn give_back_held(mut held: OneKey) -> (Result<(), LockError>, Found) {
    held.shared.renewal_stopped();
    if let Some(watchdog) = held.watchdog.take() {
        watchdog.stop();
    }
    let shared = Arc::clone(&held.shared);
    let result = give_back(&held.renewer, &shared).await;
    // Past this point the release happened (or failed for good): nothing left for Drop.
    held.armed = false;
    let was_lost = shared.is_lost();
    let blamed = shared
        .lost_the_set
        .load(std::sync::atomic::Ordering::Relaxed);
    match result {
        Ok(true) if !was_lost => {
            tracing::debug!(key = %shared.key(), "distlock: released");
            shared.end_hold_span("released");
            (Ok(()), Found::Released)
        }
        Ok(ours) => {
            let found = if blamed {
                Found::LostTheSet
            } else if !ours {
                Found::NotOurs
            } else {
                Found::LostEarlier
            };
            shared.mark_lost("not held at release");
            shared.end_hold_span("lost");
            let lost = LockError::Lost {
                key: shared.key().to_owned(),
            };
            (Err(lost), found)
        }
        Err(source) => {
            tracing::warn!(key = %shared.key(), backend = shared.backend, error = %source, "distlock: release failed; the lock ends with its lease");
            shared.end_hold_span("release failed");
            let failed = LockError::Backend {
                backend: shared.backend,
                op: "release",
                key: shared.key().to_owned(),
                source,
            };
            (Err(failed), Found::Failed)
        }
    }
}

/// Whether a release gave back a lock that was still ours, from what the backend saw: the one
/// rule for every backend. An ambiguous answer (an earlier try's reply was lost, and a retry
/// found the lock not ours) counts as released while the lease is still valid on this
/// process's monotonic clock — nobody else can have taken the lock before then, so the earlier
/// try deleted it — and as lost after.
fn settle(shared: &HeldLock, released: Released) -> bool {
    match released {
        Released::Deleted => true,
        Released::NotOurs => false,
        Released::Ambiguous { alive_until } => {
            let until = alive_until.unwrap_or_else(|| shared.valid_until());
            let valid = Instant::now() < until;
            tracing::debug!(key = %shared.key(), valid, "distlock: a release was retried after a lost reply and found the lock not ours; the first try released it if the lease was still valid");
            valid
        }
    }
}

/// Gives a lock back: to the next task of this client in line for the key if it offered to
/// take it over (one hand-over command, see [`crate::local`]), else to the server (released,
/// waking the waiters). `Ok(false)`: it was not ours any more.
pub(super) async fn give_back(
    renewer: &renew::Renewer,
    shared: &Arc<HeldLock>,
) -> Result<bool, BoxError> {
    if shared.given_back.load(std::sync::atomic::Ordering::Acquire) {
        // Given back by `LockClient::close`, which told the guard it was lost.
        return Ok(false);
    }
    let result = if let Some(left) = shared.min_hold_left() {
        keep_until_min_hold(renewer, shared, left).await
    } else if !shared.plan.local_queue || renewer.holds().is_closed() {
        // The next in line is the head of the lock's queue on the server, not a task here (a
        // fair guard, or a reader, is never a local holder: nothing to let go of locally).
        release_within_lease(renewer.backend(), shared).await
    } else {
        hand_back(renewer, shared).await
    };
    let result = result.map(|released| settle(shared, released));
    if result.is_err() {
        crate::metrics::release_failed(shared.backend);
    }
    result
}

/// How much later than `min_hold` the store ends a lock released before it, if the process
/// that holds it does not release it at `min_hold` itself (it died meanwhile): at most this,
/// and never past one lease after the grant.
pub(crate) const MIN_HOLD_MARGIN: Duration = Duration::from_millis(250);

/// [`give_back`] before `min_hold` has passed (`left` of it): the lock is not freed but made to
/// end on the server when `min_hold` does, and released for good then by a task of this
/// process (waking its waiters) if the process still runs; never handed over.
async fn keep_until_min_hold(
    renewer: &renew::Renewer,
    shared: &Arc<HeldLock>,
    left: Duration,
) -> Result<Released, BoxError> {
    let backend = renewer.backend();
    // The store ends it a little after the instant this process releases it: that release
    // (compare-and-delete) then still finds the lock ours and wakes its waiters — who may be
    // sleeping out the rest of the lease they saw — rather than losing the race to the expiry.
    // Never past a lease from the grant (a waiter never sleeps past that).
    let margin = MIN_HOLD_MARGIN.min(shared.lease.saturating_sub(shared.min_hold()));
    let spec = crate::backend::LockSpec {
        lease: left + margin,
        ..shared.spec()
    };
    let ends_at = Instant::now() + left;
    let kept = backend.end_in(spec).await?;
    if shared.plan.local_queue {
        // A task of this client waiting for the key asks the server again (and learns when
        // the lock ends) instead of waiting for a hand-over that will not come.
        renewer.local().let_go(shared);
    }
    if !kept {
        return Ok(Released::NotOurs);
    }
    tracing::debug!(key = %shared.key(), ?left, "distlock: released before min_hold: the lock ends when min_hold has passed");
    let (backend, shared) = (Arc::clone(backend), Arc::clone(shared));
    tokio::spawn(async move {
        tokio::time::sleep_until(ends_at).await;
        if let Err(error) = backend.release(shared.hold()).await {
            tracing::debug!(key = %shared.key(), %error, "distlock: the release at the end of min_hold failed; the lock ends by its expiry");
        }
    });
    Ok(Released::Deleted)
}

/// [`give_back`] of a plain lock: a hand-over to a waiting task of this client, or a release.
async fn hand_back(renewer: &renew::Renewer, shared: &Arc<HeldLock>) -> Result<Released, BoxError> {
    let backend = renewer.backend();
    let local = renewer.local();
    let name = shared.name.full();
    let mut offer = local.take_offer(shared);
    if offer.is_none() && local.may_offer(shared.key()) {
        // The next in line may be about to offer (it was just let through its gate, as this
        // lock was granted): let it run once rather than release past it.
        tokio::task::yield_now().await;
        offer = local.take_offer(shared);
    }
    if let Some(offer) = offer {
        let sent_at = Instant::now();
        let mut in_flight = HandoverInFlight {
            offer: Some(offer),
            backend,
            name,
        };
        let to = in_flight.offer.as_ref().expect("just set").spec(name);
        let outcome = backend.hand_over(shared.token.as_str(), to).await;
        let offer = in_flight.offer.take().expect("taken once");
        match outcome {
            Ok(Handover::Handed { fencing_token }) => {
                tracing::debug!(key = %shared.key(), "distlock: handed over to the next task in line");
                let handed = Handed::Acquired {
                    fencing_token,
                    sent_at,
                };
                if offer.reply.send(handed).is_err() {
                    // The waiter left meanwhile: the lock holds a token nobody will use.
                    crate::attempt::release_in_background(
                        backend,
                        Hold::exclusive(name, &offer.token),
                    );
                }
                return Ok(Released::Deleted);
            }
            Ok(Handover::NotHeld) => {
                // Nothing changed on the server: the waiter goes on asking for itself.
                drop(offer);
                local.let_go(shared);
                return Ok(Released::NotOurs);
            }
            Err(error) => {
                tracing::debug!(key = %shared.key(), %error, "distlock: hand-over failed; releasing instead");
                let _ = offer.reply.send(Handed::Unknown);
                crate::attempt::release_in_background(backend, Hold::exclusive(name, &offer.token));
                // The hand-over may have landed (`?replicas=`: its write ran, its WAIT came
                // back short; or its reply was lost): the key then holds the waiter's token,
                // or nothing once the line above ran. Not finding ours is ambiguous, as after
                // a retried release: released while our lease is still valid (`settle`).
                let released = release_within_lease(backend, shared).await;
                local.let_go(shared);
                return match released {
                    Ok(Released::NotOurs) => Ok(Released::Ambiguous { alive_until: None }),
                    other => other,
                };
            }
        }
    }
    let released = release_within_lease(backend, shared).await;
    local.let_go(shared);
    released
}

/// Releases `shared`'s lock; a failure the backend expects to pass (a failover under way, see
/// [`Backend::rides_out`]) is retried while the lease is still valid — until then the lock is
/// ours on the server anyway, and a release that lands frees it for the waiters sooner than
/// its expiry would.
async fn release_within_lease(
    backend: &Arc<dyn Backend>,
    shared: &HeldLock,
) -> Result<Released, BoxError> {
    let mut attempt = 0;
    loop {
        let released = backend.release(shared.hold()).await;
        match &released {
            Err(error) if backend.capabilities().rides_out(error) => {
                attempt += 1;
                let pause = crate::backend::retry_pause(attempt).min(Duration::from_millis(500));
                if Instant::now() + pause >= shared.valid_until() {
                    return released;
                }
                tracing::debug!(key = %shared.key(), %error, attempt, "distlock: release failed; retrying within the lease");
                tokio::time::sleep(pause).await;
            }
            // An earlier try may have landed with its reply lost: not finding the lock now
            // is ambiguous (see `settle`).
            Ok(Released::NotOurs) if attempt > 0 => {
                return Ok(Released::Ambiguous { alive_until: None });
            }
            _ => return released,
        }
    }
}

/// Armed while a hand-over command is in flight: if the releasing future is dropped then, the
/// command may still land, so the waiter is told to go on with a new token and the token it
/// offered is removed in the background.
struct HandoverInFlight<'a> {
    offer: Option<Offer>,
    backend: &'a Arc<dyn Backend>,
    name: &'a str,
}

impl Drop for HandoverInFlight<'_> {
    fn drop(&mut self) {
        if let Some(offer) = self.offer.take() {
            let _ = offer.reply.send(Handed::Unknown);
            crate::attempt::release_in_background(
                self.backend,
                Hold::exclusive(self.name, &offer.token),
            );
        }
    }
}

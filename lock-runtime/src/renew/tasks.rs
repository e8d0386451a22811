//! The watchdog tasks themselves: renewing a held lock (or a set of them) every lease/3 until
//! it is lost or reaches its `max_hold`, and ending a capped hold on a store whose locks live on
//! a session.

use std::sync::Arc;

use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::{NO_ANSWER, NOT_CONFIRMED, NOT_OURS, Renewer, grid_step, on_grid};
use crate::held::HeldLock;

/// How a [`watchdog`] ended: the lock was lost, or reached its `max_hold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Lost,
    /// Renewal stopped at `max_hold` (the hold is marked lost). On a backend that keeps locks
    /// alive by a session the lock lives on until it is given back: see [`end_capped`].
    Capped,
}

/// Sleeps until `cap` (forever without one). The timer is boxed: this future sits inside every
/// locked call's future on ZooKeeper and etcd, and most holds have no cap.
async fn until_cap(cap: Option<Instant>) {
    match cap {
        Some(cap) => Box::pin(tokio::time::sleep_until(cap)).await,
        None => std::future::pending().await,
    }
}

/// Ends on the server a hold that reached its `max_hold` on a backend whose locks live as long
/// as the client's session or lease (ZooKeeper, etcd), which no stopped renewal would end:
/// the watchdog task of a guard releases it. (The attribute's own release does it for its
/// body, after the body is stopped or told; a lock whose lease distlock renews ends by itself
/// within one lease.)
pub(crate) async fn end_capped(renewer: &Renewer, shared: &HeldLock) {
    if !renewer.backend.capabilities().keeps_alive {
        return;
    }
    match renewer.backend.release(shared.hold()).await {
        Ok(_) => {
            tracing::debug!(key = %shared.key(), "distlock: max_hold reached: the lock was given back")
        }
        Err(error) => {
            tracing::warn!(key = %shared.key(), %error, "distlock: max_hold reached, and giving the lock back failed; it ends with the client's session")
        }
    }
}

/// Renews every lease/3 until the lock is lost or reaches its `max_hold` (then returns) —
/// forever otherwise.
pub(crate) async fn watchdog(shared: Arc<HeldLock>, renewer: Arc<Renewer>) -> Ended {
    let backend = renewer.backend();
    // (`max_hold`'s deadline is read from `shared` where needed, not kept across the awaits:
    // this future sits inside every locked call's.)
    if backend.capabilities().keeps_alive {
        // The backend keeps the lock alive (a session's heartbeats): wait for it to say lost.
        tokio::select! {
            why = backend.lost(shared.spec()) => {
                shared.mark_lost(&why);
                return Ended::Lost;
            }
            () = until_cap(shared.hold_cap()) => {
                shared.mark_capped();
                return Ended::Capped;
            }
        }
    }
    let lease = shared.lease;
    let interval = lease / 3;
    let retry_pause = super::retry_pause(lease);
    // Renew up to one grid step early, on the shared grid, so renewals batch.
    let step = grid_step(interval);
    loop {
        let due = shared.confirmed_at() + interval;
        if let Some(cap) = shared.hold_cap()
            && cap <= due
        {
            // The last renewal has been made: the lease runs out at most one lease after the cap.
            tokio::time::sleep_until(cap).await;
            shared.mark_capped();
            return Ended::Capped;
        }
        tokio::time::sleep_until(on_grid(due, step, due - step)).await;
        // The lease is only known to last until the last confirmed renewal plus the lease
        // (minus the drift margin), on this process's monotonic clock; failures are retried
        // until then and not a moment later.
        let valid_until = shared.valid_until();
        loop {
            let sent_at = Instant::now();
            if shared.hold_cap().is_some_and(|cap| sent_at >= cap) {
                shared.mark_capped();
                return Ended::Capped;
            }
            if sent_at >= valid_until {
                shared.mark_lost(NOT_CONFIRMED);
                return Ended::Lost;
            }
            match tokio::time::timeout_at(valid_until, renewer.renew(Arc::clone(&shared))).await {
                Ok(Ok(true)) => {
                    tracing::trace!(key = %shared.key(), "distlock: renewed");
                    crate::metrics::renewed(shared.backend, 1);
                    shared.confirm(sent_at);
                    break;
                }
                Ok(Ok(false)) => {
                    shared.mark_lost(NOT_OURS);
                    return Ended::Lost;
                }
                Ok(Err(error)) => {
                    crate::metrics::renewal_failed(shared.backend);
                    tracing::warn!(key = %shared.key(), %error, "distlock: renewal failed, retrying until the lease ends");
                    tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until)).await;
                }
                Err(_) => {
                    shared.mark_lost(NO_ANSWER);
                    return Ended::Lost;
                }
            }
        }
    }
}

/// Starts renewing every lock of a set together (several keys of one guard). Aborted when the
/// guard is released or dropped.
pub(crate) fn spawn_set_watchdog(set: Vec<Arc<HeldLock>>, renewer: Arc<Renewer>) -> AbortHandle {
    tokio::spawn(set_watchdog(set, renewer)).abort_handle()
}

/// [`watchdog`] for several locks held as one: every lease/3 of the earliest confirmation,
/// all are renewed at the same instant, so they go to the backend in one batch; the set is
/// valid until the earliest of their validities, and the moment any one is lost, all are
/// marked lost (the guard holds all of them or is lost).
async fn set_watchdog(set: Vec<Arc<HeldLock>>, renewer: Arc<Renewer>) {
    let lose_all = |why: &str| {
        for shared in &set {
            shared.mark_lost(why);
        }
    };
    let backend = renewer.backend();
    // The set's `max_hold`: every key was granted with the same one.
    let cap = set.iter().filter_map(|shared| shared.hold_cap()).min();
    if backend.capabilities().keeps_alive {
        let losses = set
            .iter()
            .enumerate()
            .map(|(i, shared)| {
                let lost = backend.lost(shared.spec());
                Box::pin(async move { (i, lost.await) }) as crate::runtime::BoxFuture<'_, _>
            })
            .collect();
        let first_lost = crate::runtime::first_of::<(usize, String)>(losses);
        tokio::select! {
            (gone, why) = first_lost => lost_by(&set, gone, &why),
            () = until_cap(cap) => {
                for shared in &set {
                    shared.mark_capped();
                }
                for shared in &set {
                    end_capped(&renewer, shared).await;
                }
            }
        }
        return;
    }
    let Some(lease) = set.first().map(|shared| shared.lease) else {
        return;
    };
    let interval = lease / 3;
    let retry_pause = super::retry_pause(lease);
    let earliest = |at: fn(&HeldLock) -> Instant| set.iter().map(|s| at(s)).min();
    let capped = || {
        for shared in &set {
            shared.mark_capped();
        }
    };
    loop {
        let Some(confirmed) = earliest(HeldLock::confirmed_at) else {
            return;
        };
        if let Some(cap) = cap
            && cap <= confirmed + interval
        {
            tokio::time::sleep_until(cap).await;
            capped();
            return;
        }
        tokio::time::sleep_until(confirmed + interval).await;
        let Some(valid_until) = earliest(HeldLock::valid_until) else {
            return;
        };
        loop {
            let sent_at = Instant::now();
            if cap.is_some_and(|cap| sent_at >= cap) {
                capped();
                return;
            }
            if sent_at >= valid_until {
                lose_all(NOT_CONFIRMED);
                return;
            }
            let renewals = set
                .iter()
                .map(|shared| {
                    let renewal = renewer.renew(Arc::clone(shared));
                    Box::pin(renewal) as crate::runtime::BoxFuture<'_, _>
                })
                .collect();
            let renewed = crate::runtime::join_all(renewals);
            let Ok(renewed) = tokio::time::timeout_at(valid_until, renewed).await else {
                lose_all(NO_ANSWER);
                return;
            };
            if let Some(gone) = renewed.iter().position(|r| matches!(r, Ok(false))) {
                lost_by(&set, gone, NOT_OURS);
                return;
            }
            let mut failed = None;
            for (shared, result) in set.iter().zip(renewed) {
                match result {
                    Ok(_) => shared.confirm(sent_at),
                    Err(error) => failed = Some(error),
                }
            }
            let Some(error) = failed else {
                crate::metrics::renewed(set[0].backend, set.len() as u64);
                break;
            };
            crate::metrics::renewal_failed(set[0].backend);
            tracing::warn!(key = %set[0].key(), %error, "distlock: renewal of a set of locks failed, retrying until the lease ends");
            tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until)).await;
        }
    }
}

/// The set's key at `gone` is lost (`why`), and with it the set: that key first, with its own
/// reason (a release names it), then every other key.
fn lost_by(set: &[Arc<HeldLock>], gone: usize, why: &str) {
    set[gone].mark_lost(why);
    set[gone]
        .lost_the_set
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let because = format!("`{}`, another key of the set, was lost", set[gone].key());
    for shared in set {
        shared.mark_lost(&because);
    }
}

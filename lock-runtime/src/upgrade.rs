//! [`LockGuard::upgrade`](crate::LockGuard::upgrade): an upgradable read becomes the write
//! lock without letting go.
//!
//! The store does the upgrade in one atomic step once the upgradable share is the key's only
//! live one: the share becomes the plain lock (same token), so no writer and no reader can get
//! in between. Until then each attempt marks the key, as a waiting writer does, so no new
//! reader joins; a writer that waited before the upgrade still finds the key held (by the
//! upgradable share, then by the upgraded lock) and comes after. The last other reader's
//! release wakes the upgrade; without a notification it asks again when the readers' leases
//! (or its mark) run out. Given up — the request's `wait` over, or the future dropped — its
//! mark goes and the share stays as it was.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backend, FAIR_QUEUE_TTL, LockSpec, Transient, Upgrade};
use crate::error::LockError;
use crate::held::HeldLock;

/// Upgrades `shared` (an upgradable read) on `backend`, waiting up to the request's `wait`.
pub(crate) async fn upgrade(
    shared: &Arc<HeldLock>,
    backend: &Arc<dyn Backend>,
    nested: bool,
) -> Result<(), LockError> {
    let key = shared.key();
    if !shared.is_upgradable() || nested {
        let why = if nested {
            "this guard was granted inside a scope that holds the key: upgrade the guard that \
             took it"
        } else {
            "only a lock taken with `.upgradable()` can be upgraded (a plain read cannot: two \
             readers upgrading at once would each wait for the other)"
        };
        return Err(LockError::Config(format!("`{key}`: {why}")));
    }
    if shared.upgraded.load(Ordering::Acquire) {
        return Ok(());
    }
    if shared.is_lost() {
        return Err(LockError::Lost {
            key: key.to_owned(),
        });
    }
    let started = Instant::now();
    let deadline = shared.wait.and_then(|wait| started.checked_add(wait));
    let spec = || LockSpec {
        waiting: true,
        fencing: shared.fencing_token.is_some(),
        kind: shared.acquired_kind,
        ..shared.spec()
    };
    // Listening from the first busy answer on (an upgrade with no other reader left needs no
    // wake-up: one round trip), and asked again at once then: a reader that left between that
    // answer and the subscription is seen.
    let mut subscription = None;
    let mut subscribed = false;
    let mut pending = Pending {
        backend: Arc::clone(backend),
        shared: Arc::clone(shared),
        armed: true,
    };
    let mut failures = 0u32;
    let mut busy = 0u32;
    loop {
        let ttl = match backend.upgrade(spec()).await {
            Ok(Upgrade::Done { fencing_token }) => {
                shared
                    .upgraded_fence
                    .store(fencing_token.unwrap_or(0), Ordering::Release);
                shared.upgraded.store(true, Ordering::Release);
                pending.armed = false;
                tracing::debug!(key, waited = ?started.elapsed(), fencing_token, "distlock: upgraded to the write lock");
                return Ok(());
            }
            Ok(Upgrade::Busy { ttl }) => {
                failures = 0;
                if !subscribed {
                    subscribed = true;
                    subscription = backend.subscribe(spec()).await.ok();
                    continue;
                }
                ttl
            }
            Ok(Upgrade::Lost) => {
                pending.armed = false;
                shared.mark_lost("its upgradable share was gone when it upgraded");
                return Err(LockError::Lost {
                    key: key.to_owned(),
                });
            }
            Err(error) if error.is::<Transient>() && failures < 3 => {
                failures += 1;
                Some(crate::backend::retry_pause(failures))
            }
            Err(source) => {
                pending.abandon().await;
                return Err(LockError::Backend {
                    backend: backend.store(),
                    op: "upgrade",
                    key: key.to_owned(),
                    source,
                });
            }
        };
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            pending.abandon().await;
            return Err(LockError::Timeout {
                key: key.to_owned(),
                waited: now - started,
                wait: shared.wait.unwrap_or(Duration::MAX),
            });
        }
        // Ask again when the readers' leases or this mark run out at the latest (a third of
        // the mark's life, so it never lapses while the upgrade waits).
        let mut pause = ttl.unwrap_or(FAIR_QUEUE_TTL / 3).min(FAIR_QUEUE_TTL / 3);
        // A store whose releases reach no listener here (PostgreSQL behind a transaction
        // pooler without `listen_url`): ask again as its waiters do.
        if let Some(poll) = backend.capabilities().poll {
            busy += 1;
            pause = pause.min(poll.pause(busy));
        }
        let wake_at = deadline.map_or(now + pause, |deadline| deadline.min(now + pause));
        let lost = crate::held::lost(Arc::clone(shared));
        match subscription.as_mut() {
            Some(subscription) => {
                tokio::select! {
                    _ = subscription.released() => {}
                    _ = tokio::time::sleep_until(wake_at) => {}
                    _ = lost => {}
                }
            }
            None => {
                tokio::select! {
                    _ = tokio::time::sleep_until(wake_at) => {}
                    _ = lost => {}
                }
            }
        }
        if shared.is_lost() {
            pending.abandon().await;
            return Err(LockError::Lost {
                key: key.to_owned(),
            });
        }
    }
}

/// An upgrade that has marked the key: given up (or dropped), its mark goes, so new readers
/// are not kept out until it lapses.
struct Pending {
    backend: Arc<dyn Backend>,
    shared: Arc<HeldLock>,
    armed: bool,
}

impl Pending {
    async fn abandon(&mut self) {
        if std::mem::take(&mut self.armed) {
            let spec = self.shared.spec();
            if let Err(error) = self.backend.abandon_upgrade(spec).await {
                tracing::debug!(key = %self.shared.key(), %error, "distlock: could not take an abandoned upgrade's mark back; it lapses by itself");
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Cancelled mid-wait: take the mark back in the background.
        let (backend, shared) = (Arc::clone(&self.backend), Arc::clone(&self.shared));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = backend.abandon_upgrade(shared.spec()).await;
            });
        }
    }
}

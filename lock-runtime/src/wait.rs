//! Acquisition: one attempt, then — if the lock is busy and the request may wait — sleep until
//! the holder releases it (a notification) or its lease runs out (a timer), never polling.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Attempt, Backend, LockSpec};
use crate::error::LockError;
use crate::notify::ReleaseSubscription;
use crate::runtime::{DetachedJob, run_detached};

/// Retry interval when the holder's lock has no TTL at all (a foreign client that set none).
const NO_TTL_RETRY: Duration = Duration::from_millis(250);

/// A successful acquisition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquired {
    pub fencing_token: Option<u64>,
    /// When the winning attempt was sent: the lease is counted from here, never from the reply,
    /// so the holder's view of its lease ends no later than the server's.
    pub sent_at: Instant,
    /// How long the acquisition took, waiting included.
    pub waited: Duration,
}

/// One attempt, sent at `sent_at` (a clock reading taken just before: the lease is counted
/// from it): `Ok(Ok(acquired))` if the lock is ours, `Ok(Err(ttl))` if it is busy (with the
/// holder's remaining lease when known).
pub(crate) async fn attempt(
    backend: &Arc<dyn Backend>,
    spec: LockSpec<'_>,
    key: &str,
    sent_at: Instant,
) -> Result<Result<Acquired, Option<Duration>>, LockError> {
    let in_flight = InFlight {
        backend,
        spec,
        armed: true,
    };
    let attempt = backend.try_acquire(spec).await;
    if attempt.is_ok() {
        in_flight.disarm();
    } else {
        // A failed attempt (timeout, dropped connection) may still have taken the lock on the
        // server: drop the armed guard, which releases our token in the background.
        drop(in_flight);
    }
    match attempt {
        Ok(Attempt::Acquired { fencing_token }) => Ok(Ok(Acquired {
            fencing_token,
            sent_at,
            waited: Duration::ZERO,
        })),
        Ok(Attempt::Busy { ttl }) => Ok(Err(ttl)),
        Err(source) => Err(LockError::Backend {
            backend: backend.kind(),
            op: "acquire",
            key: key.to_owned(),
            source,
        }),
    }
}

/// Attempts until the lock is ours or `wait` has passed (`None`: no deadline).
pub(crate) async fn acquire(
    backend: &Arc<dyn Backend>,
    spec: LockSpec<'_>,
    key: &str,
    wait: Option<Duration>,
) -> Result<Acquired, LockError> {
    let started = Instant::now();
    // A wait too long to represent (`Duration::MAX`) is a wait without deadline.
    let deadline = wait.and_then(|wait| started.checked_add(wait));
    let mut subscription: Option<ReleaseSubscription> = None;
    let mut notifications_work = true;
    loop {
        let ttl = match attempt(backend, spec, key, Instant::now()).await? {
            Ok(mut acquired) => {
                acquired.waited = started.elapsed();
                let (waited, fencing_token) = (acquired.waited, acquired.fencing_token);
                tracing::debug!(key, ?waited, fencing_token, "distlock: acquired");
                return Ok(acquired);
            }
            Err(ttl) => ttl,
        };
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            let waited = now - started;
            tracing::debug!(key, ?waited, "distlock: timed out waiting");
            return Err(LockError::Timeout {
                key: key.to_owned(),
                waited,
            });
        }
        // Listen for the release before trying again, so a release that lands between the
        // attempt and the wait still wakes us.
        if notifications_work && subscription.as_ref().is_none_or(|s| s.is_closed()) {
            subscription = None;
            match backend.subscribe(spec.name).await {
                Ok(fresh) => {
                    subscription = Some(fresh);
                    continue;
                }
                Err(error) => {
                    notifications_work = false;
                    tracing::warn!(key, %error, "distlock: cannot listen for releases; waiting for the holder's lease to run out instead");
                }
            }
        }
        let pause = match ttl {
            Some(ttl) => ttl + jitter(ttl),
            None => NO_TTL_RETRY,
        };
        let wake_at = match deadline {
            Some(deadline) => deadline.min(now + pause),
            None => now + pause,
        };
        tracing::trace!(key, ?ttl, "distlock: lock busy, waiting");
        match subscription.as_mut() {
            Some(subscription) => {
                tokio::select! {
                    _ = subscription.released() => {}
                    _ = tokio::time::sleep_until(wake_at) => {}
                }
            }
            None => tokio::time::sleep_until(wake_at).await,
        }
    }
}

/// Armed while an acquisition attempt is in flight. If the caller drops the acquisition then
/// (a timeout around `acquire()`), the command may already have taken the lock on the server
/// with a token nobody will ever hold: release it in the background rather than leave it
/// blocking everyone for a whole lease.
struct InFlight<'a> {
    backend: &'a Arc<dyn Backend>,
    spec: LockSpec<'a>,
    armed: bool,
}

impl InFlight<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let backend = Arc::clone(self.backend);
        let name: Arc<str> = Arc::from(self.spec.name);
        let token: Arc<str> = Arc::from(self.spec.token);
        tracing::debug!(name = %name, "distlock: acquisition cancelled mid-attempt, releasing");
        let job: DetachedJob = Arc::new(move || {
            let (backend, name, token) =
                (Arc::clone(&backend), Arc::clone(&name), Arc::clone(&token));
            Box::pin(async move {
                let _ = backend.release(&name, &token).await;
            })
        });
        run_detached(job);
    }
}

/// A random delay added to a TTL-based retry, so waiters that saw the same TTL do not all hit
/// the server at the same instant: up to 1/8 of the TTL, at most 50 ms, at least 1 ms.
fn jitter(ttl: Duration) -> Duration {
    let spread = (ttl / 8).min(Duration::from_millis(50));
    let micros = u64::try_from(spread.as_micros()).unwrap_or(u64::MAX);
    Duration::from_millis(1) + Duration::from_micros(fastrand::u64(0..=micros))
}

#[cfg(test)]
mod tests {
    use super::jitter;
    use std::time::Duration;

    #[test]
    fn jitter_is_bounded() {
        for _ in 0..1000 {
            let j = jitter(Duration::from_secs(30));
            assert!(j >= Duration::from_millis(1) && j <= Duration::from_millis(51));
            let j = jitter(Duration::ZERO);
            assert_eq!(j, Duration::from_millis(1));
        }
    }
}

//! One attempt at a lock, and what an attempt or a waiter that gives up leaves behind: a
//! token that may have landed on the server after all (its reply lost, the caller gone) is
//! released — awaited by an acquisition that returns, in the background otherwise.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Attempt, Backend, Hold, LockSpec, Transient};
use crate::error::{BoxError, LockError};
use crate::plan::Params;
use crate::runtime::{DetachedJob, run_detached};

/// A successful acquisition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquired {
    pub fencing_token: Option<u64>,
    /// When the winning attempt was sent: the lease is counted from here, never from the reply,
    /// so the holder's view of its lease ends no later than the server's.
    pub sent_at: Instant,
    /// How long the acquisition took, waiting included.
    pub waited: Duration,
    /// Whether another guard of this client handed the lock over (see [`crate::local`]).
    pub handed: bool,
}

/// A failed attempt: the backend's error, and whether waiting may cure it (see
/// [`Transient`]).
#[derive(Debug)]
pub(crate) struct Failure {
    pub transient: bool,
    pub source: BoxError,
    /// Whether the failed attempt may still have written its token on the server (a command
    /// whose reply was lost may have taken the lock or a place in its queue), so that token
    /// must be released: awaited by an acquisition that returns, in the background by one that
    /// tries again with a new token.
    pub leftover: bool,
}

impl Failure {
    pub(crate) fn of(source: BoxError, leftover: bool) -> Failure {
        match source.downcast::<Transient>() {
            Ok(transient) => Failure {
                transient: true,
                source: transient.0,
                leftover,
            },
            Err(source) => Failure {
                transient: false,
                source,
                leftover,
            },
        }
    }

    /// The error an acquisition of `key` reports for this failure.
    pub(crate) fn into_error(self, backend: &dyn Backend, key: &str) -> LockError {
        if let Some(refused) = self.source.downcast_ref::<crate::backend::Refused>() {
            return LockError::Config(format!("`{key}`: {refused}"));
        }
        LockError::Backend {
            backend: backend.store(),
            op: "acquire",
            key: key.to_owned(),
            source: self.source,
        }
    }
}

/// One attempt, sent at `sent_at` (a clock reading taken just before: the lease is counted
/// from it): `Ok(Ok(acquired))` if the lock is ours, `Ok(Err(ttl))` if it is busy (with the
/// holder's remaining lease when known). A failure is `leftover` as the plan says (see
/// [`Plan::leftover`](crate::plan::Plan::leftover)).
pub(crate) async fn attempt(
    backend: &Arc<dyn Backend>,
    spec: LockSpec<'_>,
    sent_at: Instant,
    leftover: bool,
) -> Result<Result<Acquired, Option<Duration>>, Failure> {
    let in_flight = InFlight {
        backend,
        spec,
        armed: true,
    };
    let attempt = backend.try_acquire(spec).await;
    // Answered: only a cancellation from here on would leave the token unaccounted for. A
    // failed attempt (timeout, dropped connection) may still have taken the lock on the
    // server: the caller releases it (see `Failure::leftover`).
    in_flight.disarm();
    match attempt {
        Ok(Attempt::Acquired { fencing_token }) => Ok(Ok(Acquired {
            fencing_token,
            sent_at,
            waited: Duration::ZERO,
            handed: false,
        })),
        Ok(Attempt::Busy { ttl }) => Ok(Err(ttl)),
        Err(source) => Err(Failure::of(source, leftover)),
    }
}

/// Gives up whatever `token` may hold on `name` — a lock a failed attempt took after all, a
/// place in the lock's queue — before an acquisition returns without the lock, so that the
/// next in line is not held up by it even if this process exits right after. Awaited for at
/// most `within` (the response timeout); past that, it goes on in the background.
pub(crate) async fn leave(backend: &Arc<dyn Backend>, hold: Hold<'_>, within: Duration) {
    match tokio::time::timeout(within, backend.release(hold)).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            let name = hold.name;
            tracing::debug!(%name, %error, "distlock: could not leave the lock's queue; its entry ends with its lease");
        }
        Err(_) => release_in_background(backend, hold),
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
        tracing::debug!(name = %self.spec.name, "distlock: acquisition cancelled mid-attempt, releasing");
        release_in_background(self.backend, self.spec.hold());
    }
}

/// Releases `token`'s hold on `name` — a lock, or a place in a backend's queue — in the
/// background, on a runtime that outlives the caller if need be.
pub(crate) fn release_in_background(backend: &Arc<dyn Backend>, hold: Hold<'_>) {
    let backend = Arc::clone(backend);
    let name: Arc<str> = Arc::from(hold.name);
    let token: Arc<str> = Arc::from(hold.token);
    let (kind, fair) = (hold.kind, hold.fair);
    let job: DetachedJob = Arc::new(move || {
        let (backend, name, token) = (Arc::clone(&backend), Arc::clone(&name), Arc::clone(&token));
        Box::pin(async move {
            let hold = Hold {
                name: &name,
                token: &token,
                kind,
                fair,
            };
            let _ = backend.release(hold).await;
        })
    });
    run_detached(job);
}

/// For an acquisition that [keeps a place in line](crate::plan::Plan::keeps_place) on the server: armed
/// while it keeps that place. An acquisition that ends without the lock — timeout,
/// error, or the caller dropping it — gives its place up, so the next in line is not stuck
/// behind a waiter that left.
pub(crate) struct PlaceInLine<'a> {
    pub(crate) backend: &'a Arc<dyn Backend>,
    /// The lock's backend name.
    pub(crate) name: &'a str,
    pub(crate) params: Params,
    pub(crate) token: Option<String>,
    /// How long giving the place up may hold up a returning acquisition (the response timeout).
    pub(crate) within: Duration,
}

impl PlaceInLine<'_> {
    /// The place became the lock (`acquired`, handed over by a task of this client): there is
    /// nothing left to give up.
    pub(crate) fn holds(&mut self, acquired: Acquired) -> Acquired {
        self.token = None;
        acquired
    }

    /// The hold `token` has, or asks for, on the lock.
    pub(crate) fn hold<'t>(&'t self, token: &'t str) -> Hold<'t> {
        self.params.hold(self.name, token)
    }

    /// Gives the place up before the acquisition returns (see [`leave`]).
    pub(crate) async fn leave(&mut self) {
        if let Some(token) = self.token.take() {
            tracing::debug!(name = %self.name, "distlock: leaving the queue");
            leave(self.backend, self.hold(&token), self.within).await;
        }
    }
}

impl Drop for PlaceInLine<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            tracing::debug!(name = %self.name, "distlock: leaving the queue");
            release_in_background(self.backend, self.hold(&token));
        }
    }
}

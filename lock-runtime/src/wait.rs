//! Acquisition: one attempt, then — if the lock is busy and the request may wait — sleep until
//! the holder releases it (a notification) or its lease runs out (a timer), never polling.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::attempt::{Acquired, Failure, PlaceInLine, attempt, release_in_background};
use crate::backend::{Backend, FAIR_QUEUE_TTL, LockSpec, doubling_jittered};
use crate::error::{BoxError, LockError};
use crate::key::LockName;
use crate::local::{Gone, Handed, Head, Outcome};
use crate::notify::ReleaseSubscription;
use crate::plan::{Params, Plan};
use crate::token::OwnerToken;

/// Retry interval when the holder's lock has no TTL at all (a foreign client that set none).
const NO_TTL_RETRY: Duration = Duration::from_millis(250);

/// After a guard of this client let go of a key on the server, how long the next local waiter
/// waits for the release's notification (which the waiters of other processes get at the same
/// time) before it asks the server anyway.
const RELEASE_NOTICE: Duration = Duration::from_millis(100);

/// After a failed SUBSCRIBE, how long a waiter waits before it asks the server again and tries
/// to subscribe again (sooner if the holder's lease ends first).
const SUBSCRIBE_RETRY: Duration = Duration::from_secs(1);

/// The source of the error an acquisition reports when transient failures lasted its whole
/// `wait`: the last failure, and how long and how often it was retried.
#[derive(Debug)]
struct StillFailing {
    attempts: u32,
    waited: Duration,
    last: BoxError,
}

impl fmt::Display for StillFailing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (still failing after {} attempts over {:?}, the whole `wait`: check that the \
             backend is up and reachable, or raise `wait` to ride out longer outages)",
            self.last, self.attempts, self.waited
        )
    }
}

impl std::error::Error for StillFailing {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.last)
    }
}

/// Attempts until the lock is ours or `wait` has passed (`None`: no deadline).
///
/// A busy lock is waited for (release notification, or the holder's TTL). A transient failure
/// (see [`Transient`]) is retried after a jittered, growing pause until the deadline, each time
/// with a fresh owner token: the failed attempt may still land on the server, and its clean-up
/// (released in the background) must not remove the lock a later attempt takes. A permanent
/// failure ends the acquisition at once. `failed` is the fast path's transient failure, if the
/// first attempt was already made and failed.
///
/// `head`, on a backend that hands locks over, is this task's place at the head of the key's
/// local queue: it offers to take the lock over from a guard of this client (see
/// [`crate::local`]), and while such a guard holds the key nothing is asked of the server.
///
/// One round of the loop is the steps of [`Waiter`], in order: recover from a failure, listen,
/// defer to a local holder, ask the server, give up at the deadline, listen again, sleep.
pub(crate) async fn acquire(
    backend: &Arc<dyn Backend>,
    (name, params, plan): (&LockName, Params, Plan),
    token: &mut OwnerToken,
    wait: Option<Duration>,
    failed: Option<Failure>,
    head: Option<&mut Head>,
    leave_within: Duration,
) -> Result<Acquired, LockError> {
    let mut waiter = Waiter::new(
        backend,
        (name, params, plan),
        token,
        wait,
        head,
        leave_within,
    );
    let mut pending = failed;
    loop {
        if let Some(failure) = pending.take() {
            waiter.recover(failure).await?;
        }
        // Listen for releases before asking the server (a backend without a queue of waiters
        // needs no place in line to listen): a release after the attempt then wakes us, and a
        // busy attempt need not be repeated once subscribed.
        if plan.listen_first {
            waiter.listen().await;
        }
        match waiter.defer_to_local_holder().await {
            Local::Acquired(acquired) => return Ok(acquired),
            Local::Again => continue,
            Local::AskTheServer => {}
        }
        let ttl = match waiter.ask().await? {
            Asked::Acquired(acquired) => return Ok(acquired),
            Asked::Busy(ttl) => ttl,
            Asked::Failed(failure) => {
                pending = Some(failure);
                continue;
            }
        };
        waiter.give_up_at_deadline().await?;
        // Listen for the release before trying again, so a release that lands between the
        // attempt and the wait still wakes us (a backend with a queue of waiters listens once
        // its attempt has a place in line). Newly listening: ask again at once.
        if waiter.listen().await {
            continue;
        }
        if let Some(acquired) = waiter.sleep(ttl).await {
            return Ok(acquired);
        }
    }
}

/// What deferring to a guard of this client that holds the key came to.
enum Local {
    /// It handed the lock over.
    Acquired(Acquired),
    /// Its answer means starting the round again (with a new token if the hand-over may have
    /// written ours).
    Again,
    /// Nobody here holds the key, or the holder let go: ask the server.
    AskTheServer,
}

/// What asking the server came to.
enum Asked {
    Acquired(Acquired),
    /// Busy, with the holder's remaining lease when known.
    Busy(Option<Duration>),
    /// A transient failure, to recover from while `wait` lasts.
    Failed(Failure),
}

/// Listening for releases of the lock: the subscription, and after a failed SUBSCRIBE, when to
/// try again (waiting relies on the holder's TTL until then).
#[derive(Default)]
struct Listening {
    subscription: Option<ReleaseSubscription>,
    retry_at: Option<Instant>,
}

/// One acquisition's waiting: what every step of [`acquire`] reads and updates.
struct Waiter<'a, 'h> {
    backend: &'a Arc<dyn Backend>,
    name: &'a LockName,
    params: Params,
    /// A failed attempt may have left its token (see [`Plan::leftover`]).
    leftover: bool,
    token: &'h mut OwnerToken,
    wait: Option<Duration>,
    started: Instant,
    deadline: Option<Instant>,
    listening: Listening,
    /// Transient failures so far.
    failures: u32,
    /// Busy attempts in a row, for stores that poll for releases (`Capabilities::poll`).
    busy: u32,
    place: PlaceInLine<'a>,
    head: Option<&'h mut Head>,
}

impl<'a, 'h> Waiter<'a, 'h> {
    fn new(
        backend: &'a Arc<dyn Backend>,
        (name, params, plan): (&'a LockName, Params, Plan),
        token: &'h mut OwnerToken,
        wait: Option<Duration>,
        head: Option<&'h mut Head>,
        leave_within: Duration,
    ) -> Self {
        let started = Instant::now();
        Waiter {
            backend,
            name,
            params,
            leftover: plan.leftover,
            wait,
            started,
            // A wait too long to represent (`Duration::MAX`) is a wait without deadline.
            deadline: wait.and_then(|wait| started.checked_add(wait)),
            listening: Listening::default(),
            failures: 0,
            busy: 0,
            place: PlaceInLine {
                backend,
                name: name.full(),
                params,
                token: plan.keeps_place.then(|| token.as_str().to_owned()),
                within: leave_within,
            },
            token,
            head,
        }
    }

    fn key(&self) -> &'a str {
        self.name.key()
    }

    /// Takes a new owner token for the next attempt (and the place in line it keeps).
    fn fresh_token(&mut self) {
        *self.token = self.token.another();
        if self.place.token.is_some() {
            self.place.token = Some(self.token.as_str().to_owned());
        }
    }

    fn spec(&self) -> LockSpec<'_> {
        self.params.spec(self.name, self.token.as_str())
    }

    /// After a transient failure: gives up (its place given back) if the deadline has passed;
    /// else gives the failed attempt's token back in the background, takes a fresh one, and
    /// pauses before the next round (a jittered backoff).
    async fn recover(&mut self, failure: Failure) -> Result<(), LockError> {
        self.failures += 1;
        let (key, failures) = (self.key(), self.failures);
        let now = Instant::now();
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            let waited = now - self.started;
            tracing::debug!(key, ?waited, failures, "distlock: gave up retrying");
            if failure.leftover {
                self.place.token = Some(self.token.as_str().to_owned());
            }
            self.place.leave().await;
            let backend = &**self.backend;
            return Err(if failures == 1 {
                failure.into_error(backend, key)
            } else {
                Failure {
                    transient: true,
                    source: Box::new(StillFailing {
                        attempts: failures,
                        waited,
                        last: failure.source,
                    }),
                    leftover: false,
                }
                .into_error(backend, key)
            });
        }
        if failure.leftover {
            release_in_background(self.backend, self.place.hold(self.token.as_str()));
        }
        if failures == 1 {
            tracing::warn!(key, error = %failure.source, "distlock: acquisition failed; retrying until its `wait` ends");
        } else {
            tracing::debug!(key, error = %failure.source, failures, "distlock: acquisition failed again; retrying");
        }
        // The failed attempt's place was given up with it (just above).
        self.fresh_token();
        let pause = backoff(failures);
        let wake_at = self
            .deadline
            .map_or(now + pause, |deadline| deadline.min(now + pause));
        tokio::time::sleep_until(wake_at).await;
        Ok(())
    }

    /// Subscribes to the lock's releases unless listening already (or a failed SUBSCRIBE is
    /// not due to be retried yet). `true` if it subscribed now.
    async fn listen(&mut self) -> bool {
        let now = Instant::now();
        let listening = &mut self.listening;
        if listening
            .subscription
            .as_ref()
            .is_some_and(|s| !s.is_closed())
            || listening.retry_at.is_some_and(|at| now < at)
        {
            return false;
        }
        listening.subscription = None;
        let spec = self.params.spec(self.name, self.token.as_str());
        match self.backend.subscribe(spec).await {
            Ok(fresh) => {
                listening.subscription = Some(fresh);
                listening.retry_at = None;
                true
            }
            Err(error) => {
                listening.retry_at = Some(Instant::now() + SUBSCRIBE_RETRY);
                let key = self.key();
                tracing::warn!(key, %error, "distlock: cannot listen for releases; waiting for the holder's lease to run out instead");
                false
            }
        }
    }

    /// While a guard of this client holds the key: waits for it to hand the lock over, let go
    /// of it or lose it, asking the server nothing meanwhile; then takes the offer back before
    /// the server is asked (if a holder already took it, its answer comes first).
    async fn defer_to_local_holder(&mut self) -> Local {
        let Some(head) = self.head.as_deref_mut() else {
            return Local::AskTheServer;
        };
        let (started, key) = (self.started, self.name.key());
        if let Some(holder) = head.holder() {
            head.offer(self.params.spec(self.name, self.token.as_str()));
            let queue = head.queue();
            let wake_at = self.deadline.unwrap_or_else(far_future);
            if let Some(subscription) = self.listening.subscription.as_mut() {
                subscription.mark_seen();
            }
            tokio::select! {
                outcome = head.answer() => {
                    return match handed(outcome, self.token, started, key) {
                        Some(acquired) => Local::Acquired(self.place.holds(acquired)),
                        None => Local::Again,
                    };
                }
                gone = queue.holder_gone(&holder) => {
                    if gone == Gone::LetGo
                        && let Some(subscription) = self.listening.subscription.as_mut()
                    {
                        // Released on the server: compete for it on equal terms with the
                        // waiters of other processes, which learn of the release from its
                        // notification, rather than with a head start.
                        let notice = Instant::now() + RELEASE_NOTICE;
                        tokio::select! {
                            _ = subscription.released() => {}
                            _ = tokio::time::sleep_until(notice.min(wake_at)) => {}
                        }
                    }
                }
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
        match head.withdraw().await {
            Some(outcome) => match handed(outcome, self.token, started, key) {
                Some(acquired) => Local::Acquired(self.place.holds(acquired)),
                None => Local::Again,
            },
            None => Local::AskTheServer,
        }
    }

    /// One attempt on the server. A permanent failure ends the acquisition (its place given
    /// back, and whatever the failed attempt may have taken).
    async fn ask(&mut self) -> Result<Asked, LockError> {
        let key = self.key();
        match attempt(self.backend, self.spec(), Instant::now(), self.leftover).await {
            Ok(Ok(mut acquired)) => {
                self.place.token = None;
                acquired.waited = self.started.elapsed();
                let (waited, fencing_token) = (acquired.waited, acquired.fencing_token);
                tracing::debug!(key, ?waited, fencing_token, "distlock: acquired");
                Ok(Asked::Acquired(acquired))
            }
            Ok(Err(ttl)) => {
                self.busy += 1;
                if !self.leftover {
                    // The store may still be undoing this attempt (see `Plan::leftover`).
                    self.fresh_token();
                }
                Ok(Asked::Busy(ttl))
            }
            Err(failure) if failure.transient => Ok(Asked::Failed(failure)),
            Err(failure) => {
                if failure.leftover {
                    self.place.token = Some(self.token.as_str().to_owned());
                }
                self.place.leave().await;
                Err(failure.into_error(&**self.backend, key))
            }
        }
    }

    /// After a busy answer: past the deadline, the place is given back and the acquisition
    /// times out.
    async fn give_up_at_deadline(&mut self) -> Result<(), LockError> {
        if self
            .deadline
            .is_none_or(|deadline| Instant::now() < deadline)
        {
            return Ok(());
        }
        self.place.leave().await;
        let waited = Instant::now() - self.started;
        let key = self.key();
        tracing::debug!(key, ?waited, "distlock: timed out waiting");
        if self.wait == Some(Duration::ZERO) {
            return Err(LockError::Busy {
                key: key.to_owned(),
            });
        }
        Err(LockError::Timeout {
            key: key.to_owned(),
            waited,
            wait: self.wait.unwrap_or(Duration::MAX),
        })
    }

    /// Sleeps until a release is heard, the holder's lease (`ttl`) runs out, a backend that
    /// cannot announce releases is due to be asked again, a fair waiter must keep its place,
    /// a failed subscription is due to be retried, or the deadline — or until a guard of this
    /// client hands the lock over, which this returns.
    async fn sleep(&mut self, ttl: Option<Duration>) -> Option<Acquired> {
        let now = Instant::now();
        let until_lease_ends = match ttl {
            Some(ttl) => ttl + jitter(ttl),
            None => NO_TTL_RETRY,
        };
        // A backend that cannot announce releases is asked again sooner, never later than the
        // holder's lease ends.
        let pause = match self
            .backend
            .capabilities()
            .poll
            .map(|poll| poll.pause(self.busy))
        {
            Some(poll) => poll.min(until_lease_ends),
            None => until_lease_ends,
        };
        // A fair waiter asks again in time to keep its place in the queue.
        let pause = if self.params.fair {
            pause.min(FAIR_QUEUE_TTL / 3)
        } else {
            pause
        };
        // Not listening (the subscription failed: the connection was cut, the server is coming
        // back): a release now would go unnoticed, so ask again, and try to listen again, when
        // the subscription is due to be retried — not only when the holder's lease ends.
        let pause = match (&self.listening.subscription, self.listening.retry_at) {
            (None, Some(at)) => pause.min(at.saturating_duration_since(now)),
            _ => pause,
        };
        let wake_at = match self.deadline {
            Some(deadline) => deadline.min(now + pause),
            None => now + pause,
        };
        let (started, key) = (self.started, self.key());
        tracing::trace!(key, ?ttl, "distlock: lock busy, waiting");
        if let Some(head) = self.head.as_deref_mut() {
            head.offer(self.params.spec(self.name, self.token.as_str()));
        }
        let head = &mut self.head;
        let handover = async {
            match head.as_deref_mut() {
                Some(head) => head.answer().await,
                None => std::future::pending().await,
            }
        };
        let outcome = match self.listening.subscription.as_mut() {
            Some(subscription) => {
                tokio::select! {
                    outcome = handover => Some(outcome),
                    _ = subscription.released() => None,
                    _ = tokio::time::sleep_until(wake_at) => None,
                }
            }
            None => {
                tokio::select! {
                    outcome = handover => Some(outcome),
                    _ = tokio::time::sleep_until(wake_at) => None,
                }
            }
        };
        let acquired = handed(outcome?, self.token, started, key)?;
        Some(self.place.holds(acquired))
    }
}

/// An instant no wait reaches (a wait without deadline).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// What a holder's answer to our offer means for the waiting loop: the lock, or `None` to go
/// on (with a new token if the hand-over may have written ours).
fn handed(
    outcome: Outcome,
    token: &mut OwnerToken,
    started: Instant,
    key: &str,
) -> Option<Acquired> {
    match outcome {
        Outcome::Handed(Handed::Acquired {
            fencing_token,
            sent_at,
        }) => {
            let waited = started.elapsed();
            tracing::debug!(key, ?waited, fencing_token, "distlock: handed over");
            Some(Acquired {
                fencing_token,
                sent_at,
                waited,
                handed: true,
            })
        }
        Outcome::Handed(Handed::Unknown) => {
            *token = token.another();
            None
        }
        Outcome::NotHanded => None,
    }
}

/// The pause before retrying after the `failures`-th transient failure in a row: doubling from
/// 10 ms up to 250 ms, each drawn at random from the upper half of that range, so the clients
/// that failed together (a node restarting) do not come back in lockstep.
fn backoff(failures: u32) -> Duration {
    doubling_jittered(failures, 10, 250)
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
    use super::{backoff, jitter};
    use std::time::Duration;

    #[test]
    fn backoff_grows_to_a_cap_and_is_jittered() {
        for _ in 0..1000 {
            let first = backoff(1);
            assert!(first >= Duration::from_millis(5) && first <= Duration::from_millis(10));
            let later = backoff(40);
            assert!(later >= Duration::from_millis(125) && later <= Duration::from_millis(250));
        }
        let draws: std::collections::HashSet<Duration> = (0..100).map(|_| backoff(6)).collect();
        assert!(draws.len() > 10, "backoff must be jittered, got {draws:?}");
    }

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

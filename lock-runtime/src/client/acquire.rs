//! How a client acquires: the checks of a request, the fast path, the waits (on the server
//! alone, or behind this client's other tasks), and sets of keys.

use std::sync::Arc;
use std::time::Duration;

use tracing::{Instrument, Span};

use super::ClientInner;
use super::builder::check_lease;
use crate::backend::{Backend, Kind, LockSpec};
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::key::{LockName, validate_key};
use crate::plan::{Params, Plan, RenewMode};
use crate::runtime::BoxFuture;
use crate::token::OwnerToken;
use crate::{attempt, local, wait};

/// `min_hold` must fit in the lease: the lock is kept that long without renewal; and the
/// backend must be able to keep it.
pub(super) fn check_min_hold(
    min_hold_ms: u32,
    lease: Duration,
    key: &str,
    backend: &dyn Backend,
) -> Result<(), LockError> {
    let min_hold = Duration::from_millis(min_hold_ms.into());
    if min_hold_ms > 0 {
        backend
            .capabilities()
            .require(crate::Feature::MinHold, Some(key))?;
    }
    if min_hold > lease {
        return Err(LockError::Config(format!(
            "`{key}`: min_hold {:?} is longer than the lease {:?}: a lock released early is kept \
             until min_hold without renewal, so it cannot outlive its lease; make the lease at \
             least {:?}, or min_hold shorter",
            min_hold, lease, min_hold
        )));
    }
    Ok(())
}

/// The attribute's `max_hold` (milliseconds, zero: none) must be at least the lease: renewal
/// stops there, and a lock that cannot be renewed even once could not be kept.
pub(super) fn check_max_hold(
    max_hold_ms: u32,
    lease: Duration,
    key: &str,
) -> Result<(), LockError> {
    if max_hold_ms == 0 {
        return Ok(());
    }
    check_max_hold_duration(Duration::from_millis(max_hold_ms.into()), lease, key)
}

/// [`check_max_hold`] of a request's `max_hold`.
pub(super) fn check_max_hold_duration(
    max_hold: Duration,
    lease: Duration,
    key: &str,
) -> Result<(), LockError> {
    if max_hold < lease {
        return Err(LockError::Config(format!(
            "`{key}`: max_hold {max_hold:?} is shorter than the lease {lease:?}: renewal stops at \
             max_hold, which must leave the lease to run at least once; make max_hold at least \
             {lease:?}, or the lease shorter"
        )));
    }
    if max_hold.as_millis() > u128::from(u32::MAX) {
        return Err(LockError::Config(format!(
            "`{key}`: max_hold {max_hold:?} is longer than 49 days (u32::MAX milliseconds), the \
             longest kept; leave max_hold out for no cap"
        )));
    }
    Ok(())
}

/// The error of an acquisition of `key` that gave up waiting: [`LockError::Busy`] when it was
/// asked once.
pub(super) fn timed_out(
    key: &str,
    started: tokio::time::Instant,
    wait: Option<Duration>,
) -> LockError {
    if wait == Some(Duration::ZERO) {
        return LockError::Busy {
            key: key.to_owned(),
        };
    }
    LockError::Timeout {
        key: key.to_owned(),
        waited: started.elapsed(),
        wait: wait.unwrap_or(Duration::MAX),
    }
}

/// Armed while an all-or-nothing attempt at several keys is in flight or failed: the request
/// may have taken them all, so they are given back in the background (unless the store undoes
/// a failed attempt itself: see [`Plan::leftover`]).
struct SetInFlight<'a> {
    backend: &'a Arc<dyn Backend>,
    specs: &'a [LockSpec<'a>],
    armed: bool,
}

impl Drop for SetInFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            for spec in self.specs {
                attempt::release_in_background(self.backend, spec.hold());
            }
        }
    }
}

/// The acquisition's span, `distlock.acquire` (fields documented in `distlock::guide::metrics`):
/// `waited_ms`, `outcome`, `fencing_token` and `error` are recorded when it ends.
fn acquire_span(key: &dyn std::fmt::Display, backend: &'static str, params: &Params) -> Span {
    tracing::info_span!(
        "distlock.acquire",
        key = %key,
        backend,
        kind = params.kind.span_name(),
        fair = params.fair,
        wait_ms = params.wait.map(|wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
        waited_ms = tracing::field::Empty,
        outcome = tracing::field::Empty,
        fencing_token = tracing::field::Empty,
        error = tracing::field::Empty,
    )
}

/// Several keys, as a span shows them: `a, b`.
struct Joined<'a>(&'a [String]);

impl std::fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, key) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(key)?;
        }
        Ok(())
    }
}

/// The metrics of an acquisition that ended (with the `metrics` feature).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn count_acquisition(
    backend: &'static str,
    started: tokio::time::Instant,
    result: &Result<LockGuard, LockError>,
) {
    #[cfg(feature = "metrics")]
    crate::metrics::acquisition(
        backend,
        match result {
            Ok(_) => crate::metrics::Ended::Acquired,
            Err(LockError::Busy { .. } | LockError::Timeout { .. }) => {
                crate::metrics::Ended::Timeout
            }
            // The backend failed (a bad key or a refused fair request is the caller's).
            Err(LockError::Backend { .. } | LockError::Connect { .. }) => {
                crate::metrics::Ended::BackendError
            }
            Err(_) => crate::metrics::Ended::Error,
        },
        started.elapsed(),
    );
}

/// Records how an acquisition ended on its span, and opens each granted key's hold span
/// beside it, under the caller's span.
fn acquisition_ended(
    span: &Span,
    started: tokio::time::Instant,
    result: &Result<LockGuard, LockError>,
) {
    let outcome = match result {
        Ok(_) => "acquired",
        Err(LockError::Busy { .. }) => "busy",
        Err(LockError::Timeout { .. }) => "timeout",
        Err(_) => "error",
    };
    let waited = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    span.record("waited_ms", waited);
    span.record("outcome", outcome);
    match result {
        Ok(guard) => {
            if let Some(token) = guard.fencing_token() {
                span.record("fencing_token", token);
            }
            holds_began(guard);
        }
        Err(error) => {
            span.record("error", tracing::field::display(error));
        }
    }
}

/// Opens the hold span of each key of `guard`, under the span current now (the caller's).
fn holds_began(guard: &LockGuard) {
    // No subscriber wants `info` spans: nothing to open (the hot path's usual case).
    if !tracing::level_enabled!(tracing::Level::INFO) {
        return;
    }
    let caller = Span::current();
    for shared in guard.every() {
        shared.begin_hold_span(&caller);
    }
}

impl ClientInner {
    /// Acquires `key`. Without a subscriber for its span (the common case of a benchmark or a
    /// service that does not trace) the acquisition's future carries no span: every locked
    /// call's future holds this one, and its size is watched (`locked::footprint`). With one,
    /// the traced acquisition is boxed (a subscriber allocates per span anyway).
    pub(super) async fn acquire(
        &self,
        key: String,
        params: Params,
    ) -> Result<LockGuard, LockError> {
        // (The span is decided outside this future: a local span would keep a slot in it.)
        let (key, params) = match self.traced(key, params) {
            Ok(traced) => return traced.await,
            Err(untraced) => untraced,
        };
        let started = tokio::time::Instant::now();
        let result = self.acquire_any(key, params).await;
        count_acquisition(self.backend.store(), started, &result);
        if let Ok(guard) = &result {
            // (A subscriber may want the holds and not the acquisitions.)
            holds_began(guard);
        }
        result
    }

    /// The traced acquisition, boxed, when a subscriber wants its span; else the request back.
    #[allow(clippy::type_complexity)]
    fn traced(
        &self,
        key: String,
        params: Params,
    ) -> Result<BoxFuture<'_, Result<LockGuard, LockError>>, (String, Params)> {
        let span = acquire_span(&key, self.backend.store(), &params);
        if span.is_disabled() {
            return Err((key, params));
        }
        Ok(Box::pin(self.acquire_traced(key, params, span)))
    }

    /// [`acquire`](Self::acquire) inside its span.
    async fn acquire_traced(
        &self,
        key: String,
        params: Params,
        span: Span,
    ) -> Result<LockGuard, LockError> {
        let started = tokio::time::Instant::now();
        let result = self.acquire_any(key, params).instrument(span.clone()).await;
        count_acquisition(self.backend.store(), started, &result);
        acquisition_ended(&span, started, &result);
        result
    }

    async fn acquire_any(&self, key: String, params: Params) -> Result<LockGuard, LockError> {
        validate_key(&key)?;
        if self.renewer.holds().is_closed() {
            return Err(closed(&key));
        }
        check_lease(params.lease, Some(&key))?;
        let started = tokio::time::Instant::now();
        let mut token = if params.upgradable {
            OwnerToken::generate_upgradable()
        } else {
            OwnerToken::generate()
        };
        let name = LockName::new(key, &self.prefix, self.hash_tags);
        let plan = Plan::of(&params, self.backend.capabilities(), name.key())?;
        // Fast path: when no task of this client waits for the key, try once straight away
        // (one round trip for a free lock) without touching the queue. A reader never queues
        // behind this client's other tasks: readers hold a key together, and the local queue
        // (with its hand-overs) is for the one owner of a plain lock.
        let mut failed = None;
        if plan.fast_try && !(plan.local_queue && self.renewer.local().has_waiters(name.key())) {
            // Only the lock is asked for (on Redis one `SET NX PX`, without the holder's TTL):
            // a busy lock is asked again, with its TTL, once this task waits in line.
            let spec = LockSpec {
                waiting: false,
                ..params.spec(&name, token.as_str())
            };
            // `started` doubles as the send time: one clock reading fewer on the hot path.
            match attempt::attempt(&self.backend, spec, started, plan.leftover).await {
                Ok(Ok(mut acquired)) => {
                    acquired.waited = started.elapsed();
                    let guard = self.guard(name, token, params, plan, acquired);
                    if plan.local_queue {
                        // A task that queued meanwhile waits for this guard rather than the
                        // server.
                        self.renewer.local().holding(guard.shared_ref(), false);
                    }
                    return Ok(guard);
                }
                Ok(Err(_)) if params.wait == Some(Duration::ZERO) => {
                    return Err(timed_out(name.key(), started, params.wait));
                }
                // Busy: wait in line below, with a fresh token where the store may still be
                // undoing this attempt (see `Plan::leftover`).
                Ok(Err(_)) if !plan.leftover => token = token.another(),
                Ok(Err(_)) => {}
                Err(failure) if !failure.transient || params.wait == Some(Duration::ZERO) => {
                    if !failure.leftover {
                        return Err(failure.into_error(&*self.backend, name.key()));
                    }
                    // The failed command may have taken the lock after all: give it back before
                    // returning (the caller may exit right after). Boxed: a cold path that
                    // every locked call's future would otherwise carry.
                    return Err(
                        Box::pin(self.give_back_failed(name, token, params, failure)).await,
                    );
                }
                // A transient failure with `wait` left: retried below.
                Err(failure) => failed = Some(failure),
            }
        }
        // Boxed: waiting is a large future that the fast path above should not carry.
        if plan.local_queue {
            Box::pin(self.acquire_queued(name, token, params, plan, started, failed)).await
        } else {
            // Readers, permits and fair locks wait on the server alone (see
            // `Plan::local_queue`): a fair lock goes straight into the lock's queue there, with
            // no optimistic first attempt and no local queue, which would let a newcomer or a
            // task of this client pass waiters that came first.
            let waited =
                self.wait_in_line((&name, params, plan), &mut token, started, failed, None);
            let acquired = Box::pin(waited).await?;
            Ok(self.guard(name, token, params, plan, acquired))
        }
    }

    /// The error of a fast-path attempt that failed and may still have taken the lock: the
    /// lock is given back first (awaited, at most the response timeout).
    async fn give_back_failed(
        &self,
        name: LockName,
        token: OwnerToken,
        params: Params,
        failure: attempt::Failure,
    ) -> LockError {
        let hold = params.hold(name.full(), token.as_str());
        attempt::leave(&self.backend, hold, self.response_timeout).await;
        failure.into_error(&*self.backend, name.key())
    }

    /// Waits for the lock (see [`wait::acquire`]) with what is left of the request's `wait`
    /// since `started`: the lock, or the error, a timeout naming the whole `wait`.
    async fn wait_in_line(
        &self,
        (name, params, plan): (&LockName, Params, Plan),
        token: &mut OwnerToken,
        started: tokio::time::Instant,
        failed: Option<attempt::Failure>,
        head: Option<&mut local::Head>,
    ) -> Result<attempt::Acquired, LockError> {
        let key = name.key();
        let remaining = params
            .wait
            .map(|wait| wait.saturating_sub(started.elapsed()));
        let waited = wait::acquire(
            &self.backend,
            (name, params, plan),
            token,
            remaining,
            failed,
            head,
            self.response_timeout,
        )
        .await;
        let mut acquired = match waited {
            Ok(acquired) => acquired,
            Err(LockError::Busy { .. } | LockError::Timeout { .. }) => {
                return Err(timed_out(key, started, params.wait));
            }
            Err(error) => return Err(error),
        };
        acquired.waited = started.elapsed();
        crate::metrics::waited(self.backend.store(), acquired.waited);
        Ok(acquired)
    }

    /// The slow path of [`acquire`](Self::acquire): the lock is busy (or other tasks of this
    /// client wait for it, or the first attempt failed transiently) and the request may wait.
    async fn acquire_queued(
        &self,
        name: LockName,
        mut token: OwnerToken,
        params: Params,
        plan: Plan,
        started: tokio::time::Instant,
        failed: Option<attempt::Failure>,
    ) -> Result<LockGuard, LockError> {
        let key = name.key();
        let timeout = |key: &str| timed_out(key, started, params.wait);
        // Queue behind this client's other tasks waiting for the key. (`queued` is declared
        // first so it is dropped after the queue.)
        let local_queues = self.renewer.local();
        let queued = local_queues.enter();
        let queue = local_queues.queue(key);
        let local = match params.wait {
            Some(wait) if wait.is_zero() => match queue.gate.try_lock() {
                Ok(local) => local,
                Err(_) => return Err(timeout(key)),
            },
            Some(wait) => match tokio::time::timeout(wait, queue.gate.lock()).await {
                Ok(local) => local,
                Err(_) => return Err(timeout(key)),
            },
            None => queue.gate.lock().await,
        };
        // At the head of the queue: offer to take the lock over from a guard of this client.
        let mut head = plan.hand_over.then(|| local::Head::new(Arc::clone(&queue)));
        let acquired = self
            .wait_in_line(
                (&name, params, plan),
                &mut token,
                started,
                failed,
                head.as_mut(),
            )
            .await?;
        drop(head);
        let handed = acquired.handed;
        let guard = self.guard(name, token, params, plan, acquired);
        // The next in line, if any, waits for this guard to hand the lock over or let go.
        if plan.hand_over {
            queue.holding(guard.shared_ref(), handed);
        }
        drop(local); // the next local waiter now waits on the backend
        drop(queue);
        drop(queued);
        Ok(guard)
    }

    /// [`LockClient::lock_all`]: every key of `keys`, or none.
    pub(super) async fn acquire_set(
        &self,
        keys: Vec<String>,
        params: Params,
    ) -> Result<LockGuard, LockError> {
        if keys.len() == 1 {
            // One key: the plain acquisition, with its own span.
            return Box::pin(self.acquire_set_any(keys, params)).await;
        }
        let span = acquire_span(&Joined(&keys), self.backend.store(), &params);
        let started = tokio::time::Instant::now();
        let result = Box::pin(self.acquire_set_any(keys, params))
            .instrument(span.clone())
            .await;
        count_acquisition(self.backend.store(), started, &result);
        if span.is_disabled() {
            if let Ok(guard) = &result {
                holds_began(guard);
            }
        } else {
            acquisition_ended(&span, started, &result);
        }
        result
    }

    async fn acquire_set_any(
        &self,
        keys: Vec<String>,
        params: Params,
    ) -> Result<LockGuard, LockError> {
        let Some(first) = keys.first() else {
            return Err(LockError::Config(
                "`lock_all` was given no keys: name at least one key to lock".into(),
            ));
        };
        if self.renewer.holds().is_closed() {
            return Err(closed(first));
        }
        for key in &keys {
            validate_key(key)?;
        }
        check_lease(params.lease, Some(first))?;
        let mut names: Vec<LockName> = keys
            .into_iter()
            .map(|key| LockName::new(key, &self.prefix, self.hash_tags))
            .collect();
        names.sort_unstable_by(|a, b| a.full().cmp(b.full()));
        names.dedup_by(|a, b| a.full() == b.full());
        if names.len() == 1 {
            let key = names.swap_remove(0).key().to_owned();
            return self.acquire(key, params).await;
        }
        if let Kind::Permits(_) = params.kind {
            return Err(LockError::Config(format!(
                "`{}`: a semaphore's permit is taken one key at a time; use \
                 `client.semaphore(key, n)` for each",
                names[0].key()
            )));
        }
        if params.fair {
            return Err(LockError::Config(format!(
                "`{}`: several keys cannot be taken as one fair lock (each key's queue would \
                 order its waiters alone); drop `fair`",
                names[0].key()
            )));
        }
        let started = tokio::time::Instant::now();
        // All or nothing in one request where the backend can: nothing is held while a busy
        // key is waited for.
        let full: Vec<&str> = names.iter().map(LockName::full).collect();
        let atomic = self
            .backend
            .capabilities()
            .acquires_sets(&full, params.kind);
        drop(full);
        // (A store that takes sets serves every kind it takes them of: no refusal here.)
        let plan = Plan::of(&params, self.backend.capabilities(), names[0].key()).ok();
        if atomic && let Some(plan) = plan {
            match self.try_set(&names, params, plan, started).await {
                Ok(Ok(guards)) => {
                    return Ok(LockGuard::join(guards, &self.renewer, started.elapsed()));
                }
                Ok(Err(busy)) if params.wait == Some(Duration::ZERO) => {
                    return Err(timed_out(names[busy].key(), started, params.wait));
                }
                // Busy: waited for one key at a time below.
                Ok(Err(_)) => {}
                Err(failure) if failure.transient && params.wait != Some(Duration::ZERO) => {}
                // Refused (a name held as another kind): the key-by-key path names the key.
                Err(failure) if failure.source.is::<crate::backend::Refused>() => {}
                Err(failure) => return Err(failure.into_error(&*self.backend, names[0].key())),
            }
        }
        // One by one, in canonical order, each with what is left of the one `wait`; each key
        // is renewed by its own watchdog until the set is complete.
        let each = params.renewed_by(RenewMode::Spawned);
        let mut taken: Vec<LockGuard> = Vec::with_capacity(names.len());
        for name in &names {
            let wait = params
                .wait
                .map(|wait| wait.saturating_sub(started.elapsed()));
            // (Not `acquire`: the set is one acquisition, with one span and one count.)
            match Box::pin(self.acquire_any(name.key().to_owned(), Params { wait, ..each })).await {
                Ok(guard) => taken.push(guard),
                Err(error) => {
                    // Everything taken so far goes back before the error returns.
                    let releases = taken
                        .into_iter()
                        .map(|guard| Box::pin(guard.release()) as BoxFuture<'static, _>)
                        .collect();
                    crate::runtime::join_all(releases).await;
                    return Err(match error {
                        LockError::Busy { key } | LockError::Timeout { key, .. } => {
                            timed_out(&key, started, params.wait)
                        }
                        error => error,
                    });
                }
            }
        }
        Ok(LockGuard::join(taken, &self.renewer, started.elapsed()))
    }

    /// One all-or-nothing attempt at every key of `names` (see [`Backend::try_acquire_all`]):
    /// the guards, or the index of the first busy key.
    async fn try_set(
        &self,
        names: &[LockName],
        params: Params,
        plan: Plan,
        started: tokio::time::Instant,
    ) -> Result<Result<Vec<LockGuard>, usize>, attempt::Failure> {
        // A token per key: each key's hold is released, renewed and watched on its own.
        let tokens: Vec<OwnerToken> = names.iter().map(|_| OwnerToken::generate()).collect();
        let specs: Vec<LockSpec<'_>> = names
            .iter()
            .zip(&tokens)
            .map(|(name, token)| LockSpec {
                waiting: false,
                ..params.spec(name, token.as_str())
            })
            .collect();
        let mut in_flight = SetInFlight {
            backend: &self.backend,
            specs: &specs,
            armed: plan.leftover,
        };
        let sent_at = tokio::time::Instant::now();
        match self.backend.try_acquire_all(&specs).await {
            Ok(crate::backend::SetAttempt::Acquired { fencing_tokens }) => {
                in_flight.armed = false;
                let set = params.renewed_by(RenewMode::Set);
                let guards = names
                    .iter()
                    .zip(tokens.iter().zip(fencing_tokens))
                    .map(|(name, (token, fencing_token))| {
                        let acquired = attempt::Acquired {
                            fencing_token,
                            sent_at,
                            waited: started.elapsed(),
                            handed: false,
                        };
                        self.guard(name.clone(), token.clone(), set, plan, acquired)
                    })
                    .collect();
                Ok(Ok(guards))
            }
            Ok(crate::backend::SetAttempt::Busy { index }) => {
                in_flight.armed = false;
                Ok(Err(index))
            }
            // The failed request may have taken the keys after all: `in_flight` gives them back
            // in the background.
            Err(source) => Err(attempt::Failure::of(source, true)),
        }
    }

    fn guard(
        &self,
        name: LockName,
        token: OwnerToken,
        params: Params,
        plan: Plan,
        acquired: attempt::Acquired,
    ) -> LockGuard {
        let guard = LockGuard::new(&self.renewer, name, token, params, plan, acquired);
        if self.renewer.holds().is_closed() {
            // Granted to a waiter as the client closed: lost at once (its holder stops, its
            // release or drop gives it back).
            guard.shared_ref().mark_lost(CLOSED);
        }
        guard
    }
}

/// Why a lock of a closed client is lost.
pub(crate) const CLOSED: &str = "the lock client was closed";

/// An acquisition asked of a closed client.
fn closed(key: &str) -> LockError {
    LockError::Config(format!(
        "`{key}`: this lock client was closed (`LockClient::close`); connect a new one to lock again"
    ))
}

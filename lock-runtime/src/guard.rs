//! [`LockGuard`]: proof that this process holds a lock, and the duty to give it back.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::attempt::Acquired;
use crate::backend::{Backend, Handover, Hold, Kind, Released, drift};
use crate::error::{BoxError, LockError};
pub(crate) use crate::held::{HeldLock, lost};
use crate::key::LockName;
use crate::local::{Handed, Offer};
use crate::notify::LostFlag;
use crate::plan::{Params, Plan, RenewMode};
use crate::renew;
use crate::runtime::{DetachedJob, run_detached};
use crate::token::OwnerToken;

/// A held lock.
///
/// While it lives, a watchdog renews the lease every lease/3 (unless renewal was turned off) and
/// watches for the lock being lost. Give it back with [`release`](Self::release), which waits for
/// the backend's answer. If the guard is dropped instead — a panic, a cancelled future, an early
/// return — the release is spawned in the background (never blocking the dropping thread), and
/// if even that cannot run, the lease expires on its own.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    held: OneKey,
    /// With inline renewal, until [`until_lost`](Self::until_lost) takes it: the renewal loop
    /// is still to be run by the caller.
    inline: bool,
    /// A guard over several keys ([`LockClient::lock_all`](crate::LockClient::lock_all)): the
    /// keys after `held`'s, in canonical order. (Boxed: one pointer in every locked call's
    /// future.)
    set: Option<Box<Set>>,
}

/// The rest of a guard over several keys.
struct Set {
    more: Vec<OneKey>,
    /// How long the whole set took to acquire.
    waited: Duration,
}

/// The part of a guard that releases on drop. `armed` is cleared once a release was awaited
/// to completion.
struct OneKey {
    shared: Arc<HeldLock>,
    /// The client's renewer, which also holds its backend (one shared handle per guard).
    renewer: Arc<renew::Renewer>,
    watchdog: Option<renew::Watchdog>,
    armed: bool,
    /// Granted within a scope that holds the key already (see [`LockGuard::nested`]): gives
    /// nothing back, the hold that covers it does.
    nested: bool,
}

impl LockGuard {
    pub(crate) fn new(
        renewer: &Arc<renew::Renewer>,
        name: LockName,
        token: OwnerToken,
        params: Params,
        plan: Plan,
        acquired: Acquired,
    ) -> LockGuard {
        let Params {
            lease,
            wait,
            renewal,
            fair,
            kind,
            max_hold_ms,
            lock_delay_ms,
            ..
        } = params;
        let renew = renewal != RenewMode::Off;
        let lease_end = acquired.sent_at + lease - drift(lease);
        let shared = Arc::new(HeldLock {
            name,
            token,
            lease,
            fencing_token: acquired.fencing_token,
            waited: acquired.waited,
            lost: LostFlag::default(),
            unrenewed_end: (!renew).then_some(lease_end),
            fair,
            acquired_kind: kind,
            upgraded: std::sync::atomic::AtomicBool::new(false),
            upgraded_fence: std::sync::atomic::AtomicU64::new(0),
            wait,
            plan,
            backend: renewer.backend().store(),
            granted_at: acquired.sent_at,
            confirmed_ns: std::sync::atomic::AtomicU64::new(0),
            lost_the_set: std::sync::atomic::AtomicBool::new(false),
            min_hold_ms: std::sync::atomic::AtomicU32::new(0),
            max_hold: (max_hold_ms > 0).then(|| Duration::from_millis(max_hold_ms.into())),
            lock_delay: Duration::from_millis(lock_delay_ms.into()),
            hold_span: std::sync::Mutex::new(None),
        });
        crate::metrics::held(shared.backend, 1.0);
        let watchdog =
            (renewal == RenewMode::Spawned).then(|| renew::watch(Arc::clone(&shared), renewer));
        LockGuard {
            held: OneKey {
                shared,
                renewer: Arc::clone(renewer),
                watchdog,
                armed: true,
                nested: false,
            },
            inline: renewal == RenewMode::Inline,
            set: None,
        }
    }

    /// One guard over the keys of `guards` (distinct, in canonical order, each acquired with
    /// [`RenewMode::Set`] or [`RenewMode::Spawned`], or all without renewal), acquired in
    /// `waited`: their own watchdogs stop, and one renews them all together.
    pub(crate) fn join(
        guards: Vec<LockGuard>,
        renewer: &Arc<renew::Renewer>,
        waited: Duration,
    ) -> LockGuard {
        let mut all: Vec<OneKey> = guards.into_iter().map(|guard| guard.held).collect();
        let renewed = all.iter().all(|held| held.shared.unrenewed_end.is_none());
        for held in &mut all {
            if let Some(watchdog) = held.watchdog.take() {
                watchdog.stop();
            }
        }
        let shared = all.iter().map(|held| Arc::clone(&held.shared)).collect();
        let mut all = all.into_iter();
        let Some(mut first) = all.next() else {
            unreachable!("a set of locks has at least one key");
        };
        if renewed {
            first.watchdog = Some(renew::Watchdog::Task(renew::spawn_set_watchdog(
                shared,
                Arc::clone(renewer),
            )));
        }
        LockGuard {
            held: first,
            inline: false,
            set: Some(Box::new(Set {
                more: all.collect(),
                waited,
            })),
        }
    }

    /// A guard for keys this task holds already in scope (`locks`: an annotated function's
    /// body, [`scope`](Self::scope)), granted without a round trip: it renews nothing and gives
    /// nothing back; the hold that covers it does, when it ends.
    pub(crate) fn nested(renewer: &Arc<renew::Renewer>, locks: Vec<Arc<HeldLock>>) -> LockGuard {
        let mut all = locks.into_iter().map(|shared| OneKey {
            shared,
            renewer: Arc::clone(renewer),
            watchdog: None,
            armed: false,
            nested: true,
        });
        let Some(held) = all.next() else {
            unreachable!("a nested guard covers at least one key");
        };
        let more: Vec<OneKey> = all.collect();
        LockGuard {
            held,
            inline: false,
            set: (!more.is_empty()).then(|| {
                Box::new(Set {
                    more,
                    waited: Duration::ZERO,
                })
            }),
        }
    }

    /// Runs `future` as this guard's holder: inside it, and in everything it awaits in this
    /// task, a `#[distributed_lock]` function or a `client.lock(key).acquire()` for a key this
    /// guard holds, on the client that took it, is granted at once without a round trip — as in
    /// the body of an annotated function — and [`current()`](crate::current) reports the lock.
    /// The nested holds end with this guard: its release frees the key.
    ///
    /// Only inside `future`: code of the same task outside it (another branch of a `join!`)
    /// is another owner and waits, as a spawned task does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// # let client = lock_runtime::LockClient::connect("memory://").await?;
    /// let guard = client.lock("report").acquire().await?;
    /// guard
    ///     .scope(async {
    ///         // Granted here at once: this task holds `report` in scope.
    ///         let inner = client.lock("report").try_acquire().await?;
    ///         assert!(inner.is_some());
    ///         Ok::<_, lock_runtime::LockError>(())
    ///     })
    ///     .await?;
    /// guard.release().await?; // frees `report`
    /// # Ok(()) }
    /// ```
    pub async fn scope<F: Future>(&self, future: F) -> F::Output {
        let client = renew::Renewer::identity(&self.held.renewer);
        crate::scope::enter_all(client, self.every().cloned().collect(), future).await
    }

    /// Holds every key at least `min_hold_ms` after its grant (`LockRequest::min_hold`): set
    /// as the acquisition returns the guard.
    pub(crate) fn hold_at_least(&self, min_hold_ms: u32) {
        if min_hold_ms > 0 {
            for shared in self.every() {
                shared
                    .min_hold_ms
                    .store(min_hold_ms, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Every key's shared state, in canonical order.
    pub(crate) fn every(&self) -> impl Iterator<Item = &Arc<HeldLock>> {
        let more = self.set.as_deref().map_or(&[][..], |set| &set.more[..]);
        std::iter::once(&self.held.shared).chain(more.iter().map(|held| &held.shared))
    }

    /// The keys held, without the client's prefix: one for [`LockClient::lock`], every
    /// distinct key in canonical order (by their backend names' bytes) for
    /// [`LockClient::lock_all`].
    ///
    /// [`LockClient::lock`]: crate::LockClient::lock
    /// [`LockClient::lock_all`]: crate::LockClient::lock_all
    /// The same type as [`LockRequest::keys`](crate::LockRequest::keys).
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.every().map(|shared| shared.key())
    }

    /// The fencing tokens of this acquisition, one per key in the order of
    /// [`keys`](Self::keys), if fencing was asked for (empty otherwise): each strictly greater
    /// than the token of every earlier write grant of its key.
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.every()
            .filter_map(|shared| shared.fencing_token())
            .collect()
    }

    /// The lock key, without the client's prefix (of a guard over several keys, the first in
    /// canonical order: see [`keys`](Self::keys)).
    pub fn key(&self) -> &str {
        self.held.shared.key()
    }

    /// A future to poll alongside the guarded work (what `#[distributed_lock]` does): it
    /// resolves only when the lock is lost. For a guard acquired with inline renewal it is the
    /// renewal loop itself (renewing every lease/3); otherwise it is [`lost`](Self::lost).
    ///
    /// One future whose two cases share their space, rather than two futures side by side:
    /// it lives inside every locked call's future.
    pub(crate) fn until_lost(&mut self) -> impl Future<Output = ()> + Send + 'static {
        // (Never a guard over several keys: `run_locked_all` races its body against
        // [`lost`](Self::lost), and the set's own watchdog renews it.)
        debug_assert!(
            self.set.is_none(),
            "until_lost of a guard over several keys"
        );
        let shared = Arc::clone(&self.held.shared);
        let renewal = std::mem::take(&mut self.inline).then(|| Arc::clone(&self.held.renewer));
        async move {
            match renewal {
                // (At `max_hold` the attribute stops or tells its body, then releases.)
                Some(renewer) => _ = renew::watchdog(shared, renewer).await,
                None => lost(shared).await,
            }
        }
    }

    /// The owner token stored in the backend (for tests that check who holds a lock).
    #[cfg(feature = "testing")]
    pub(crate) fn owner_token(&self) -> &str {
        self.held.shared.token.as_str()
    }

    pub(crate) fn shared(&self) -> Arc<HeldLock> {
        Arc::clone(&self.held.shared)
    }

    pub(crate) fn shared_ref(&self) -> &Arc<HeldLock> {
        &self.held.shared
    }

    /// Which side of the key's read/write lock this guard holds: [`LockMode::Write`] for a
    /// plain lock.
    ///
    /// [`LockMode::Write`]: crate::LockMode::Write
    pub fn mode(&self) -> crate::LockMode {
        if self.held.shared.is_upgradable() && self.held.shared.kind() == Kind::Shared {
            crate::LockMode::Upgradable
        } else {
            crate::LockMode::of(self.held.shared.kind())
        }
    }

    /// Makes an upgradable read ([`LockRequest::upgradable`](crate::LockRequest::upgradable))
    /// the write lock of its key without letting go: waits, up to the request's `wait`, for
    /// the key's other readers to leave (no new reader joins meanwhile), then holds the key as
    /// its writer — no writer or reader gets in between. With fencing, the guard's
    /// [`fencing_token`](Self::fencing_token) is then a new one, above every earlier token of
    /// the key. [`mode`](Self::mode) says [`Write`](crate::LockMode::Write) from then on.
    ///
    /// Errors: [`LockError::Timeout`] when `wait` passes first, and
    /// [`LockError::Lost`] if the read lock was lost; either way — and if this future is
    /// dropped — the guard holds what it held before (a lost one, nothing). A guard not taken
    /// with `.upgradable()` is a [`LockError::Config`]. Upgrading an upgraded guard does
    /// nothing.
    pub async fn upgrade(&mut self) -> Result<(), LockError> {
        if self.set.is_some() {
            return Err(LockError::Config(format!(
                "`{}`: a guard over several keys cannot be upgraded",
                self.key()
            )));
        }
        let held = &self.held;
        crate::upgrade::upgrade(&held.shared, held.renewer.backend(), held.nested).await
    }

    /// For a semaphore's permit ([`LockClient::semaphore`](crate::LockClient::semaphore)), the
    /// semaphore's limit; `None` for a lock.
    pub fn permits(&self) -> Option<u32> {
        self.held.shared.acquired_kind.permits()
    }

    /// The lease this lock was taken with.
    pub fn lease(&self) -> Duration {
        self.held.shared.lease
    }

    /// How long the acquisition took, waiting for a busy lock included (of a guard over
    /// several keys, for all of them).
    pub fn waited(&self) -> Duration {
        match &self.set {
            Some(set) => set.waited,
            None => self.held.shared.waited,
        }
    }

    /// The fencing token of this acquisition, if fencing was asked for: strictly greater than
    /// the token of every earlier holder of the same key. Pass it to the storage you write to
    /// and have it reject writes carrying a smaller token than it has seen. (Of a guard over
    /// several keys, the first key's: see [`fencing_tokens`](Self::fencing_tokens).)
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.shared.fencing_token()
    }

    /// `true` once the lease is known lost: a renewal found another owner, or no renewal could
    /// be confirmed before the lease ended (or, without renewal, the lease has run out). A
    /// guard over several keys is lost when any of them is.
    pub fn is_lost(&self) -> bool {
        self.every().any(|shared| shared.is_lost())
    }

    /// A future that resolves when the lease is lost; it never resolves if the lock is
    /// released first. It does not borrow the guard, so it can race the guarded work:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// # let client = lock_runtime::LockClient::connect("memory://").await?;
    /// # async fn do_the_work() {}
    /// let guard = client.lock("report").acquire().await?;
    /// tokio::select! {
    ///     _ = do_the_work() => guard.release().await?,
    ///     _ = guard.lost() => return Err(lock_runtime::LockError::Lost { key: "report".into() }),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let set: Vec<Arc<HeldLock>> = self.every().cloned().collect();
        any_lost(set)
    }

    /// Gives the lock back and waits for the backend to confirm.
    ///
    /// Returns [`LockError::Lost`] if the lock was no longer ours (its lease expired and maybe
    /// someone else holds it now; their lock is left intact), so the caller learns that the
    /// guarded work may not have run exclusively.
    ///
    /// A guard over several keys gives every one back (concurrently); the error, if any, is a
    /// backend's failure first, then `Lost` naming the key whose loss lost the set.
    pub async fn release(self) -> Result<(), LockError> {
        if self.held.nested {
            // The hold that covers it gives the keys back; say if they are lost already.
            return match self.every().find(|shared| shared.is_lost()) {
                Some(shared) => Err(LockError::Lost {
                    key: shared.key().to_owned(),
                }),
                None => Ok(()),
            };
        }
        let LockGuard { held, set, .. } = self;
        match set {
            None => release_held(held).await,
            Some(set) => Box::pin(release_set(held, set.more)).await,
        }
    }
}

/// Resolves when any lock of `set` is lost.
async fn any_lost(mut set: Vec<Arc<HeldLock>>) {
    if set.len() == 1 {
        return lost(set.remove(0)).await;
    }
    let losses = set
        .into_iter()
        .map(|shared| Box::pin(lost(shared)) as crate::runtime::BoxFuture<'static, ()>)
        .collect();
    crate::runtime::first_of(losses).await
}

/// Releases every key of a set: `first` (which holds the set's watchdog) and `more`.
async fn release_set(first: OneKey, more: Vec<OneKey>) -> Result<(), LockError> {
    let releases = std::iter::once(first)
        .chain(more)
        .map(|held| Box::pin(give_back_held(held)) as crate::runtime::BoxFuture<'static, _>)
        .collect();
    let outcomes = crate::runtime::join_all(releases).await;
    // The error that says most: a backend's failure, then a key that was not ours any more
    // (the one whose loss lost the set), then any.
    let rank = |(result, held): &(Result<(), LockError>, bool)| match result {
        Ok(()) => 3,
        Err(LockError::Backend { .. }) => 0,
        Err(_) if !held => 1,
        Err(_) => 2,
    };
    match outcomes.into_iter().min_by_key(rank) {
        Some((result, _)) => result,
        None => Ok(()),
    }
}

/// [`LockGuard::release`] of one key.
async fn release_held(held: OneKey) -> Result<(), LockError> {
    give_back_held(held).await.0
}

/// Gives back one key: what the caller is told, and whether the key was still held by this
/// guard's own account (ours at release, and not the key whose loss lost its set).
async fn give_back_held(mut held: OneKey) -> (Result<(), LockError>, bool) {
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
            (Ok(()), true)
        }
        Ok(ours) => {
            let ours = ours && !blamed;
            shared.mark_lost("not held at release");
            shared.end_hold_span("lost");
            let lost = LockError::Lost {
                key: shared.key().to_owned(),
            };
            (Err(lost), ours)
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
            (Err(failed), true)
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
async fn give_back(renewer: &renew::Renewer, shared: &Arc<HeldLock>) -> Result<bool, BoxError> {
    let result = if let Some(left) = shared.min_hold_left() {
        keep_until_min_hold(renewer, shared, left).await
    } else if !shared.plan.local_queue {
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

impl Drop for OneKey {
    fn drop(&mut self) {
        if self.nested {
            return;
        }
        crate::metrics::held(self.shared.backend, -1.0);
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop();
        }
        // (Already ended by a release or a loss: nothing recorded.)
        self.shared.end_hold_span("dropped");
        if !self.armed {
            return;
        }
        tracing::debug!(key = %self.shared.key(), "distlock: guard dropped, releasing in the background");
        let renewer = Arc::clone(&self.renewer);
        let shared = Arc::clone(&self.shared);
        let job: DetachedJob = Arc::new(move || {
            let renewer = Arc::clone(&renewer);
            let shared = Arc::clone(&shared);
            Box::pin(async move {
                if let Err(error) = give_back(&renewer, &shared).await {
                    tracing::warn!(key = %shared.key(), %error, "distlock: background release failed; the lease will expire");
                }
            })
        });
        run_detached(job);
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("LockGuard");
        if self.set.is_some() {
            f.field("keys", &self.keys().collect::<Vec<_>>())
                .field("fencing_tokens", &self.fencing_tokens());
        } else {
            f.field("key", &self.held.shared.key())
                .field("fencing_token", &self.held.shared.fencing_token());
        }
        f.field("mode", &self.mode())
            .field("permits", &self.permits())
            .field("lease", &self.held.shared.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

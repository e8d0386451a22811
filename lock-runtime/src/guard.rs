//! [`LockGuard`]: proof that this process holds a lock, and the duty to give it back.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::attempt::Acquired;
use crate::backend::{Kind, drift};
use crate::error::LockError;
pub(crate) use crate::held::{HeldLock, lost};
use crate::key::LockName;
use crate::notify::LostFlag;
use crate::plan::{Params, Plan, RenewMode};
use crate::renew;
use crate::runtime::{DetachedJob, run_detached};
use crate::token::OwnerToken;

mod give_back;

use give_back::{give_back, release_held, release_set};

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
            renewed_here: std::sync::atomic::AtomicBool::new(
                renew && !renewer.backend().capabilities().keeps_alive,
            ),
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
            given_back: std::sync::atomic::AtomicBool::new(false),
        });
        renewer.holds().register(&shared);
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
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// # let client = distlock::LockClient::connect("memory://").await?;
    /// let guard = client.lock("report").acquire().await?;
    /// guard
    ///     .scope(async {
    ///         // Granted here at once: this task holds `report` in scope.
    ///         let inner = client.lock("report").try_acquire().await?;
    ///         assert!(inner.is_some());
    ///         Ok::<_, distlock::LockError>(())
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
    /// [`keys`](Self::keys), if fencing was asked for (none otherwise): each strictly greater
    /// than the token of every earlier write grant of its key. An iterator, as `keys` is.
    pub fn fencing_tokens(&self) -> impl Iterator<Item = u64> + '_ {
        self.every().filter_map(|shared| shared.fencing_token())
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
    pub fn permits(&self) -> Option<u16> {
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
    /// be confirmed before the lease ended (or, without renewal, the lease has run out). The
    /// clock decides the second by itself: a hold past its last confirmed lease (less the drift
    /// margin) is lost even if its renewals never got to run (a runtime kept busy), and stays
    /// lost. A guard over several keys is lost when any of them is.
    pub fn is_lost(&self) -> bool {
        self.every().any(|shared| shared.is_lost())
    }

    /// A future that resolves when the lease is lost; it never resolves if the lock is
    /// released first. It does not borrow the guard, so it can race the guarded work:
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// # let client = distlock::LockClient::connect("memory://").await?;
    /// # async fn do_the_work() {}
    /// let guard = client.lock("report").acquire().await?;
    /// tokio::select! {
    ///     _ = do_the_work() => guard.release().await?,
    ///     _ = guard.lost() => return Err(distlock::LockError::Lost { key: "report".into() }),
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

/// Gives back a lock still held as its client closes ([`LockClient::close`]): its holder is
/// told it is lost first (a body under `on_lost = "abort"` stops), and the guard's own release
/// or drop asks the store nothing afterwards.
///
/// [`LockClient::close`]: crate::LockClient::close
pub(crate) async fn close_out(renewer: &renew::Renewer, shared: &Arc<HeldLock>, why: &str) {
    shared.mark_lost(why);
    shared.renewal_stopped();
    if let Err(error) = give_back(renewer, shared).await {
        tracing::warn!(key = %shared.key(), %error, "distlock: release at close failed; the lease will expire");
    }
    shared
        .given_back
        .store(true, std::sync::atomic::Ordering::Release);
}

impl Drop for OneKey {
    fn drop(&mut self) {
        if self.nested {
            return;
        }
        crate::metrics::held(self.shared.backend, -1.0);
        self.shared.renewal_stopped();
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
        // Counted until the job is gone: `LockClient::close` waits for it.
        let running = renewer.holds().running();
        let job: DetachedJob = Arc::new(move || {
            let _ = &running;
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
                .field("fencing_tokens", &self.fencing_tokens().collect::<Vec<_>>());
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

//! [`LockRequest`]: one acquisition being prepared; the attribute's options as the same
//! [`Params`].

use std::future::IntoFuture;
use std::time::Duration;

use super::LockClient;
use super::acquire::{check_max_hold, check_max_hold_duration, check_min_hold};
use crate::backend::Kind;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::plan::{Params, RenewMode};
use crate::runtime::BoxFuture;

impl LockClient {
    /// `lock(key)` with the attribute's options, acquired with inline renewal: what
    /// `run_locked` does on every call, so it borrows the client instead of cloning it.
    pub(crate) async fn acquire_locked(
        &self,
        key: String,
        options: &crate::options::LockOptions,
    ) -> Result<LockGuard, LockError> {
        let params = self.attribute_params(options);
        // (`run_locked` checks and sets the guard's `min_hold`: see `check_min_hold_of`.)
        self.inner.acquire(key, params).await
    }

    /// The attribute's `min_hold` against its lease (the client's default if it names none):
    /// checked by `run_locked` outside the acquisition's future, which it would enlarge.
    pub(crate) fn check_min_hold_of(
        &self,
        options: &crate::options::LockOptions,
        key: &str,
    ) -> Result<(), LockError> {
        let lease = options.lease.unwrap_or(self.inner.default_lease);
        check_min_hold(options.min_hold_ms, lease, key, &*self.inner.backend)?;
        if let Some(ms) = options.lock_delay_ms {
            super::builder::check_lock_delay(Duration::from_millis(ms.into()), Some(key))?;
        }
        check_max_hold(options.max_hold_ms, lease, key)
    }

    /// `lock_all(keys)` with the attribute's options: what `run_locked_all` does.
    pub(crate) async fn acquire_locked_all(
        &self,
        keys: Vec<String>,
        options: &crate::options::LockOptions,
    ) -> Result<LockGuard, LockError> {
        let params = self.attribute_params(options);
        if let Some(first) = keys.first() {
            self.check_min_hold_of(options, first)?;
        }
        self.inner.acquire_set(keys, params).await
    }

    /// What the attribute's `options` ask for, with this client's defaults filled in.
    fn attribute_params(&self, options: &crate::options::LockOptions) -> Params {
        use crate::options::WaitFor;
        let inner = &*self.inner;
        Params {
            lease: options.lease.unwrap_or(inner.default_lease),
            wait: match options.wait {
                WaitFor::Default => inner.default_wait,
                WaitFor::Up(wait) => Some(wait),
                WaitFor::Forever => None,
            },
            renewal: if options.renew {
                RenewMode::Inline
            } else {
                RenewMode::Off
            },
            fencing: options.fencing.unwrap_or(inner.fencing),
            fair: options.fair,
            kind: options.kind(),
            max_hold_ms: options.max_hold_ms,
            lock_delay_ms: options
                .lock_delay_ms
                .unwrap_or_else(|| delay_ms(inner.lock_delay)),
            upgradable: false,
        }
    }
}

/// A lock-delay in whole milliseconds (checked at most 7 days where it is set: fits).
fn delay_ms(delay: Duration) -> u32 {
    u32::try_from(delay.as_millis()).unwrap_or(u32::MAX)
}

/// One lock acquisition being prepared; made by [`LockClient::lock`].
///
/// `.await` it directly, or call [`acquire`](Self::acquire) /
/// [`try_acquire`](Self::try_acquire).
#[derive(Clone, Debug)]
#[must_use = "a lock request does nothing until `.acquire().await`"]
pub struct LockRequest {
    pub(super) client: LockClient,
    pub(super) key: String,
    pub(super) lease: Duration,
    pub(super) wait: Option<Duration>,
    pub(super) renew: bool,
    pub(super) fencing: bool,
    pub(super) fair: bool,
    pub(super) kind: Kind,
    /// Every key of a request made by [`LockClient::lock_all`], as given.
    pub(super) set: Option<Vec<String>>,
    pub(super) min_hold: Duration,
    pub(super) max_hold: Option<Duration>,
    pub(super) lock_delay: Duration,
    /// [`upgradable`](Self::upgradable): a read that may become the write lock.
    pub(super) upgradable: bool,
}

impl LockRequest {
    /// The client the request was made by.
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    pub(crate) fn client(&self) -> &LockClient {
        &self.client
    }

    /// Whether it asks for the write lock (not a reader's share, upgradable or not).
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    pub(crate) fn is_write(&self) -> bool {
        self.kind == Kind::Exclusive && !self.upgradable
    }

    /// How long the lock lives if its holder stops renewing it (crashes, hangs, is cut off).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long to wait for a busy lock before failing with [`LockError::Timeout`];
    /// `Duration::ZERO` tries once, failing with [`LockError::Busy`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Wait for a busy lock as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.wait = None;
        self
    }

    /// Hold the lock at least `min_hold` after it was granted, however early it is released
    /// (ShedLock's `lockAtLeastFor`): a release before then does not free the lock but makes it
    /// end at grant + `min_hold` — renewal stops, and the backend's expiry is set to that
    /// instant — so a short job that every node of a cluster starts on its own timer runs once
    /// per period even when the nodes' clocks differ. A release after `min_hold` is a plain
    /// release; a holder that crashes frees the lock after its lease, as always. Zero (the
    /// default): no minimum. Longer than the [`lease`](Self::lease) fails with
    /// [`LockError::Config`]; a store that cannot keep it (a lock that ends with its holder's
    /// connection) refuses it with [`LockError::Unsupported`] (which stores: the table in `distlock::guide::backends`).
    ///
    /// On ZooKeeper and etcd, whose locks live as long as the client's session or lease, the
    /// client deletes the lock at grant + `min_hold`; if the process exits before then, its
    /// session or lease is left to expire (one lease later) rather than closed, so the lock
    /// still outlives `min_hold`.
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = min_hold;
        self
    }

    /// Hold the lock at most `max_hold` after it was granted: the watchdog stops renewing
    /// then and the guard is lost ([`LockGuard::is_lost`], [`LockGuard::lost`]; the
    /// attribute's body is stopped or told, as its `on_lost` says), so a holder that hangs
    /// while its watchdog still runs cannot keep the lock forever (RedLock.net#68). Another
    /// client is granted the lock at most one lease after `max_hold`: the last renewal's lease
    /// runs out (on ZooKeeper and etcd, whose locks live as long as the client's session, the
    /// guard's watchdog deletes the lock at `max_hold`). A release before then is a plain
    /// release. Costs no round trip: it is a deadline of the watchdog.
    ///
    /// At least the [`lease`](Self::lease) (a shorter one fails with [`LockError::Config`]),
    /// at most 49 days (`u32::MAX` milliseconds). Without renewal it changes nothing: the lock
    /// ends after one lease anyway.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let guard = client
    ///     .lock("nightly-export")
    ///     .lease(Duration::from_millis(100))
    ///     .max_hold(Duration::from_millis(300))
    ///     .acquire()
    ///     .await?;
    /// guard.lost().await; // renewed twice, then let go at 300 ms
    /// assert!(guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// After an involuntary loss of this hold — its holder stopped renewing (crashed, paused,
    /// cut off from the store) — nobody is granted the key until `delay` after its lease ran
    /// out on the store (Consul's and Chubby's lock-delay), so a holder that has not yet
    /// noticed it lost the lock finds nobody else inside for that long: a guard for resources
    /// that cannot check a fencing token. A release (or [`force_release`]) frees the key at
    /// once, as without it. Default: the client's ([`LockClientBuilder::lock_delay`], the
    /// URL's `?lock_delay=`), none unless set.
    ///
    /// Kept by the store's own expiry: each grant and renewal sets the hold to end `lease` +
    /// `delay` later, while this process counts on the lease alone (its guard is lost at the
    /// lease's end, as without a delay). It adds no round trip. A store whose locks end with a
    /// session (not by an expiry it can lengthen) refuses it with [`LockError::Unsupported`]
    /// saying why (which stores: the table in `distlock::guide::backends`). At most 7 days.
    ///
    /// [`force_release`]: LockClient::force_release
    /// [`LockClientBuilder::lock_delay`]: crate::LockClientBuilder::lock_delay
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Keep the lease alive (renew every lease/3) while the guard lives; default `true`.
    /// Without renewal the lock ends after one lease and the guard reports it lost.
    pub fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// Hand out a fencing token with this lock ([`LockGuard::fencing_token`]); a store
    /// without them refuses with [`LockError::Unsupported`].
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// Make this a fair lock: waiters from every process are granted the lock in the order
    /// they asked for it, through a queue the backend keeps beside the lock (as Redisson's
    /// `RFairLock`). A release wakes only the head of the queue; a waiter that gives up or
    /// dies loses its place (a dead one after [`LockClient::FAIR_QUEUE_TTL`]).
    ///
    /// It costs more than the default lock (on Redis a script per attempt and per release,
    /// touching the queue, instead of one `SET`), and a fair lock is never handed over between
    /// tasks of one client. Every process must take a given key the same way, fair or not: a
    /// plain request ignores the queue. A store that queues its waiters (ZooKeeper, etcd) makes
    /// every lock fair already. A store that cannot serve waiters in arrival order refuses it
    /// with [`LockError::Unsupported`] (which stores: the table in `distlock::guide::backends`).
    pub fn fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// Take the lock shared, as one of its readers: any number of readers hold a key together,
    /// and no writer while they do ([`write`](Self::write), the plain lock, excludes them all).
    /// Each reader has a lease of its own, renewed by its own watchdog. A writer waiting for
    /// the key stops new readers from joining, so readers cannot starve writers. With
    /// [`fencing`](Self::fencing), a reader gets the token of the last write grant (the version
    /// it reads) rather than a new one.
    ///
    /// A store without read locks refuses them with [`LockError::Unsupported`] saying why
    /// (which stores: the table in `distlock::guide::backends`). A read lock cannot be [`fair`](Self::fair)
    /// ([`LockError::Config`]: readers do not queue behind each other, and a waiting writer
    /// already stops new readers).
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let first = client.lock("price-list").read().acquire().await?;
    /// let second = client.lock("price-list").read().acquire().await?; // readers share it
    /// assert!(client.lock("price-list").try_acquire().await?.is_none()); // a writer waits
    /// first.release().await?;
    /// second.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(mut self) -> Self {
        self.kind = Kind::Shared;
        self.upgradable = false;
        self
    }

    /// Take an upgradable read lock: a reader's share that at most one holder of the key
    /// has at a time. It coexists with plain [`read`](Self::read)ers and excludes writers
    /// and other upgradable holders; [`LockGuard::upgrade`] then makes it the write lock
    /// without letting go — no writer gets in between, which a release and a new write
    /// acquisition would allow. The classic use: read a row, decide, then write it.
    ///
    /// A store without them refuses them with [`LockError::Unsupported`] saying why (which
    /// stores: the table in `distlock::guide::backends`). Not for several keys at once, nor [`fair`](Self::fair)
    /// ([`LockError::Config`]). See `distlock::guide::upgradable`.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let mut guard = client.lock("row:7").upgradable().acquire().await?;
    /// let reader = client.lock("row:7").read().acquire().await?; // plain readers join
    /// assert!(client.lock("row:7").upgradable().try_acquire().await?.is_none());
    /// reader.release().await?;
    /// guard.upgrade().await?; // now the writer: no reader or writer got in between
    /// assert_eq!(guard.mode(), distlock::LockMode::Write);
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn upgradable(mut self) -> Self {
        self.kind = Kind::Shared;
        self.upgradable = true;
        self
    }

    /// Take the lock exclusively — the default, and the write side of [`read`](Self::read):
    /// one owner, excluding every reader and every other writer of the key.
    pub fn write(mut self) -> Self {
        self.kind = Kind::Exclusive;
        self.upgradable = false;
        self
    }

    /// The lock key, without the client's prefix (of a request for several keys, the first
    /// named).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Every key of this request, as named (one for [`LockClient::lock`]); the same type as
    /// [`LockGuard::keys`].
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.key_list().iter().map(String::as_str)
    }

    fn key_list(&self) -> &[String] {
        self.set
            .as_deref()
            .unwrap_or(std::slice::from_ref(&self.key))
    }

    /// Acquires the lock, waiting up to the request's `wait` for a busy one: woken by the
    /// holder's release, or retrying when the holder's lease runs out.
    ///
    /// Reentrant in scope: in the body of a `#[distributed_lock]` function, or in a future run
    /// by [`LockGuard::scope`], a key this task holds there on this client is granted at once,
    /// without a round trip, as a nested annotated call is (a write under a read fails with
    /// [`LockError::WriteUnderRead`]). The guard it gives renews and releases nothing: the hold that
    /// covers it frees the key when it ends (`lease` and `min_hold` are that hold's). Of
    /// several keys, only those not held in scope are acquired.
    pub async fn acquire(mut self) -> Result<LockGuard, LockError> {
        if self.kind == Kind::Permits(0) {
            return Err(LockError::Config(format!(
                "`{}`: a semaphore of 0 permits could never be acquired: ask for at least 1",
                self.key,
            )));
        }
        if self.upgradable && self.set.is_some() {
            return Err(LockError::Config(format!(
                "`{}`: an upgradable read is of one key (its upgrade takes that key's write \
                 lock); take the keys one by one",
                self.key
            )));
        }
        if let Some(nested) = self.held_in_scope()? {
            return Ok(nested);
        }
        let params = Params {
            lease: self.lease,
            wait: self.wait,
            renewal: if self.renew {
                RenewMode::Spawned
            } else {
                RenewMode::Off
            },
            fencing: self.fencing,
            fair: self.fair,
            kind: self.kind,
            lock_delay_ms: delay_ms(self.lock_delay),
            upgradable: self.upgradable,
            max_hold_ms: match self.max_hold {
                // Zero: shorter than any lease, refused below.
                Some(max_hold) => u32::try_from(max_hold.as_millis())
                    .unwrap_or(u32::MAX)
                    .max(1),
                None => 0,
            },
        };
        // Whole milliseconds, at most `u32::MAX` (49 days: longer than any lease, refused).
        let min_hold_ms = u32::try_from(self.min_hold.as_millis()).unwrap_or(u32::MAX);
        let first = self.set.as_ref().and_then(|keys| keys.first());
        check_min_hold(
            min_hold_ms,
            self.lease,
            first.unwrap_or(&self.key),
            &*self.client.inner.backend,
        )?;
        if let Some(max_hold) = self.max_hold {
            check_max_hold_duration(max_hold, self.lease, first.unwrap_or(&self.key))?;
        }
        super::builder::check_lock_delay(self.lock_delay, Some(first.unwrap_or(&self.key)))?;
        let guard = match self.set {
            Some(keys) => Box::pin(self.client.inner.acquire_set(keys, params)).await?,
            None => self.client.inner.acquire(self.key, params).await?,
        };
        guard.hold_at_least(min_hold_ms);
        Ok(guard)
    }

    /// A guard for the keys this task holds in scope on this client, if it holds them all;
    /// if it holds some, the request keeps only the others. A kind the hold cannot grant is
    /// refused as a nested annotated call is.
    fn held_in_scope(&mut self) -> Result<Option<LockGuard>, LockError> {
        let mut held: Vec<std::sync::Arc<crate::held::HeldLock>> = Vec::new();
        let mut wanted = Vec::new();
        for key in self.key_list() {
            match crate::scope::held(self.client.identity(), key) {
                Some(lock) => {
                    if let Some(error) = crate::scope::nested_refusal(lock.kind(), self.kind, key) {
                        return Err(error);
                    }
                    if !held.iter().any(|h| std::sync::Arc::ptr_eq(h, &lock)) {
                        held.push(lock);
                    }
                }
                None => wanted.push(key.clone()),
            }
        }
        if held.is_empty() {
            return Ok(None);
        }
        if wanted.is_empty() {
            tracing::trace!(key = %self.key, "distlock: held in scope, granted without a round trip");
            return Ok(Some(LockGuard::nested(self.client.renewer(), held)));
        }
        self.key = wanted[0].clone();
        self.set = Some(wanted);
        Ok(None)
    }

    /// Tries once: `Ok(None)` when somebody else holds the lock. Handy for work that must run
    /// on one node only, where the others simply skip (scheduled jobs).
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.wait(Duration::ZERO).acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(error) if error.is_busy() => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl IntoFuture for LockRequest {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = BoxFuture<'static, Result<LockGuard, LockError>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}

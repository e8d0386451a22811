//! The backend trait: the handful of operations a lock store must provide.
//!
//! Everything above it — owner tokens, waiting, renewal scheduling, lost detection, fencing
//! plumbing, release on drop, tracing — is written once in the rest of the crate. A backend
//! only has to make each operation atomic with respect to the owner token.

use std::time::Duration;

use tokio::time::Instant;

use crate::admin::{Entry, Listing};
use crate::error::BoxError;
use crate::notify::ReleaseSubscription;
use crate::runtime::BoxFuture;

pub(crate) use capabilities::Capabilities;

mod capabilities;
pub(crate) mod catalog;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod dated;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod loss;
pub(crate) mod memory;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "nats")]
pub(crate) mod nats;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) mod queue;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) use queue::InPlay;
#[cfg(any(feature = "zookeeper", feature = "postgres", feature = "mysql"))]
mod remembered;
#[cfg(any(feature = "zookeeper", feature = "postgres", feature = "mysql"))]
pub(crate) use remembered::Remembered;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod sql;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

/// Marks a backend error that may go away by itself — a timeout, a dropped or refused
/// connection, a cluster failover in progress, a Redlock vote that missed its majority because
/// nodes were slow or down — so an acquisition with `wait` left retries it instead of failing.
/// Errors not wrapped in it (authentication, a script error, a key of the wrong type) are
/// permanent: retrying cannot cure them, so they fail at once.
#[derive(Debug)]
pub(crate) struct Transient(pub BoxError);

#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
impl Transient {
    /// `error`, marked as transient.
    pub(crate) fn wrap(error: impl Into<BoxError>) -> BoxError {
        Box::new(Transient(error.into()))
    }

    /// `error`, marked as transient if `transient`: a backend's acquisition error.
    pub(crate) fn wrap_if(transient: bool, error: impl Into<BoxError>) -> BoxError {
        if transient {
            Transient::wrap(error)
        } else {
            error.into()
        }
    }
}

impl std::fmt::Display for Transient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Transient {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A call's failure on a store whose client is our own (ZooKeeper, etcd): the server's error,
/// or one of ours (a timeout).
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) enum CallFailure<E> {
    Server(E),
    Other(BoxError),
}

#[cfg(any(feature = "zookeeper", feature = "etcd"))]
impl<E> CallFailure<E> {
    /// Runs `request`, bounded by `timeout`: running out of it is a transient failure that
    /// names the `store`, its URL (`shown`) and the operation `op`.
    ///
    /// A combinator, not an `async fn`: an `async fn` would keep `request` twice in its state
    /// (the argument, and the timeout awaiting it), which every caller's future then carries.
    pub(crate) fn bounded<T>(
        (store, shown): (&str, &str),
        timeout: std::time::Duration,
        op: &str,
        request: impl std::future::Future<Output = Result<T, E>>,
    ) -> impl std::future::Future<Output = Result<T, Self>> {
        use futures_util::FutureExt as _;
        tokio::time::timeout(timeout, request).map(move |answer| match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(CallFailure::Server(error)),
            Err(_) => Err(CallFailure::Other(Transient::wrap(format!(
                "{store} ({shown}) did not answer `{op}` within the response timeout ({timeout:?})"
            )))),
        })
    }
}

/// What a release saw on the server. The backend reports it; the guard decides what it means
/// for the caller (see `guard::give_back`): one rule for every backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lock held our token, and is deleted now.
    Deleted,
    /// The lock did not hold our token (someone else's, or nobody's): our lease had ended.
    NotOurs,
    /// Unknown: an earlier try's reply was lost (a timeout, a dropped connection, a leader
    /// change), and a retry found the lock not ours. The earlier try may have deleted it — and
    /// someone else taken it since — or the lease may have run out before. `alive_until` is,
    /// for a backend that keeps its locks alive itself (a ZooKeeper session, an etcd lease),
    /// until when on this process's monotonic clock that session or lease was known alive;
    /// `None` for a backend whose leases the runtime renews (the guard knows their end).
    Ambiguous { alive_until: Option<Instant> },
}

impl Released {
    /// What a retried release found: `deleted` by this try, or else ambiguous if an earlier
    /// try may have landed (`retried`), not ours otherwise.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "mysql")),
        allow(dead_code)
    )]
    pub(crate) fn after_tries(deleted: bool, retried: bool) -> Released {
        match (deleted, retried) {
            (true, _) => Released::Deleted,
            (false, true) => Released::Ambiguous { alive_until: None },
            (false, false) => Released::NotOurs,
        }
    }
}

/// The pause before a backend retries a command on a fresh connection, its `attempt`-th retry
/// (from 1): 10, 40, 160 ms. Short: the command runs again with the same token, inside the
/// caller's own bounds.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
pub(crate) fn retry_pause(attempt: u32) -> Duration {
    Duration::from_millis(10 * 4u64.pow(attempt.clamp(1, 8) - 1))
}

/// The pause before the `n`-th try (from 1): `first_ms` doubling up to `cap_ms`, drawn at
/// random from the upper half of that step, so clients that failed or waited together spread
/// out instead of returning in lockstep.
pub(crate) fn doubling_jittered(n: u32, first_ms: u64, cap_ms: u64) -> Duration {
    let ceiling = first_ms
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(cap_ms);
    Duration::from_millis(fastrand::u64(ceiling / 2..=ceiling))
}

/// How long a fair lock's waiter keeps its place in the lock's queue without asking again:
/// a waiter refreshes its place every third of it while it waits, so a waiter whose process
/// died is dropped from the queue at most this long after its last refresh, and the waiters
/// behind it move up.
pub(crate) const FAIR_QUEUE_TTL: Duration = Duration::from_secs(5);

/// The clock-drift margin subtracted from every lease, as in the Redlock algorithm: 1 % of the
/// lease plus 2 ms. The holder considers its lease over this much before the server does.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// What a holder counts of a session or lease of `timeout` on the store (ZooKeeper's, etcd's)
/// whose last `lock_delay` is a lock-delay: the rest, its own lease (at least 100 ms: the store
/// may have raised the timeout asked for, never lowered it below the delay — see each
/// backend's opening of one).
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) fn counted(timeout: Duration, lock_delay: Duration) -> Duration {
    timeout
        .saturating_sub(lock_delay)
        .max(Duration::from_millis(100))
}

/// What kind of hold a request asks for (`../shared/DESIGN.md`, "Lock kinds"). The layers
/// above the backend — waiting, renewal, lost detection, reentrancy, metrics, the admin view —
/// treat every kind alike; a backend learns the kind from [`LockSpec::kind`] and [`Hold::kind`]
/// and says which kinds it serves with [`Capabilities::serves`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// One owner: the plain lock, which is also the write side of a read/write lock (a plain
    /// lock excludes the readers of its key and is excluded by them).
    Exclusive,
    /// One of any number of readers of the key, excluding writers. Each reader has a lease of
    /// its own; a writer waiting for the key stops new readers from joining.
    Shared,
    /// One of at most `n` permits of a semaphore (`n` ≥ 1, the limit this request was made
    /// under; at most 65,535, which keeps this enum — inside every acquisition's future — at
    /// four bytes). Each permit has a lease of its own, like a reader's share; a name held as a
    /// semaphore is never a lock, nor the reverse.
    Permits(u16),
}

impl Kind {
    /// The kind as spans name it: `write`, `read` or `permit`.
    pub(crate) fn span_name(self) -> &'static str {
        match self {
            Kind::Exclusive => "write",
            Kind::Shared => "read",
            Kind::Permits(_) => "permit",
        }
    }

    /// The word for messages: `lock`, `read lock`, `semaphore permit`.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Exclusive => "lock",
            Kind::Shared => "read lock",
            Kind::Permits(_) => "semaphore permit",
        }
    }

    /// The semaphore's limit, for a permit.
    pub(crate) fn permits(self) -> Option<u16> {
        match self {
            Kind::Permits(n) => Some(n),
            _ => None,
        }
    }
}

/// A request the store refuses because of what the name already holds: a semaphore asked for
/// under another limit than its holders', or a name held as one kind asked for as another.
/// It becomes a [`LockError::Config`](crate::LockError::Config) naming the key: waiting cannot
/// cure it.
#[derive(Debug)]
pub(crate) struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// A semaphore held under `held` permits asked for with `asked`.
    pub(crate) fn limit(held: u16, asked: u16) -> BoxError {
        Box::new(Refused(format!(
            "the semaphore is held under a limit of {held} permits, and this request asks for \
             {asked}: every holder of a semaphore must ask with the same limit (change it once \
             no permit is held)"
        )))
    }

    /// Why a request of kind `asked` is refused where the name is held (or first asked for) as
    /// `first`: a name is one kind (a semaphore, or a lock with its readers), and a semaphore
    /// has one limit. The queue-based stores ask it of their queue's oldest entry; a nested
    /// call of the attribute, of the lock its task holds.
    pub(crate) fn between(first: Kind, asked: Kind) -> Option<BoxError> {
        match (first, asked) {
            (Kind::Permits(held), Kind::Permits(asked)) if held != asked => {
                Some(Refused::limit(held, asked))
            }
            (Kind::Permits(held), Kind::Exclusive | Kind::Shared) => {
                Some(Refused::kind(Some(held), asked))
            }
            (Kind::Exclusive | Kind::Shared, Kind::Permits(_)) => Some(Refused::kind(None, asked)),
            _ => None,
        }
    }

    /// A name held as `held` (a semaphore of `held_permits`, or a lock) asked for as `asked`.
    pub(crate) fn kind(held_permits: Option<u16>, asked: Kind) -> BoxError {
        let held = match held_permits {
            Some(n) => format!("a semaphore of {n} permits"),
            None => "a lock (or its readers)".to_owned(),
        };
        let take = match held_permits {
            Some(n) => format!("take it with `client.semaphore(key, {n})` / `permits = {n}`"),
            None => "take it with `client.lock(key)`, or name the semaphore differently".to_owned(),
        };
        Box::new(Refused(format!(
            "the name is held as {held}, and this request asks for a {}: a name is one kind \
             ({take})",
            asked.noun()
        )))
    }
}

/// One hold on a lock as a release, renewal or clean-up names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold<'a> {
    /// The backend key (prefix included).
    pub name: &'a str,
    /// The owner token of the acquisition.
    pub token: &'a str,
    /// Which kind of hold it is (a reader's share, or the lock itself).
    pub kind: Kind,
    /// Taken as a fair lock: releasing also gives up the token's place in the lock's queue
    /// and wakes the next in line.
    pub fair: bool,
}

/// What one acquisition attempt asks of the backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockSpec<'a> {
    /// The backend key (prefix included), e.g. `lock:order:42`.
    pub name: &'a str,
    /// The owner token of this acquisition.
    pub token: &'a str,
    /// How long the lock lives unless renewed.
    pub lease: Duration,
    /// Whether to hand out a fencing token.
    pub fencing: bool,
    /// Whether the holder keeps the lock alive past one lease. A backend that keeps its locks
    /// alive itself (see [`Capabilities::keeps_alive`]) must end an unrenewed lock after `lease`.
    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))]
    pub renew: bool,
    /// Whether the attempt is made by a waiter, which needs the holder's remaining lease with
    /// a busy answer. The first, optimistic attempt of an acquisition only asks for the lock
    /// (one command on Redis), and learns the lease when it goes on to wait.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub waiting: bool,
    /// Whether the lock is fair: granted in arrival order through a queue on the server (see
    /// [`Capabilities::fair`]).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub fair: bool,
    /// The kind of hold asked for.
    pub kind: Kind,
    /// The part of `lease` that is a lock-delay: the store keeps the hold this much longer
    /// than the holder counts on (zero: none). A store that judges a grant by the time left
    /// of its lease (Redlock's validity) leaves it out.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub lock_delay: Duration,
}

impl<'a> Hold<'a> {
    /// The plain lock `name` held (or asked for) by `token`.
    pub(crate) fn exclusive(name: &'a str, token: &'a str) -> Hold<'a> {
        Hold {
            name,
            token,
            kind: Kind::Exclusive,
            fair: false,
        }
    }
}

/// Renews `specs` one by one, each with the backend's plain renewal (a batch that a backend
/// cannot renew in one call: readers' shares on the SQL backends).
pub(crate) async fn renew_each<B: Backend + ?Sized>(
    backend: &B,
    specs: &[LockSpec<'_>],
) -> Vec<Result<bool, String>> {
    let mut renewed = Vec::with_capacity(specs.len());
    for spec in specs {
        renewed.push(backend.renew(*spec).await.map_err(|e| e.to_string()));
    }
    renewed
}

impl<'a> LockSpec<'a> {
    /// The hold this attempt asks for, as a release names it.
    pub(crate) fn hold(&self) -> Hold<'a> {
        Hold {
            name: self.name,
            token: self.token,
            kind: self.kind,
            fair: self.fair,
        }
    }
}

/// The outcome of [`Backend::hand_over`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) enum Handover {
    /// The lock now holds the waiter's token; with a fencing token when it asked for one.
    Handed { fencing_token: Option<u64> },
    /// The lock did not hold the releasing token (lease lost): nothing changed.
    NotHeld,
}

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours; with a fencing token when one was asked for.
    Acquired { fencing_token: Option<u64> },
    /// Somebody else holds it; `ttl` is their remaining lease when the backend knows it.
    Busy { ttl: Option<Duration> },
}

/// The outcome of one [`Backend::upgrade`] attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Upgrade {
    /// The share is now the write lock; with a new fencing token when one was asked for.
    Done { fencing_token: Option<u64> },
    /// Other readers still hold the key (they are kept from joining anew meanwhile); `ttl`:
    /// how long to wait at most before asking again.
    Busy { ttl: Option<Duration> },
    /// The upgradable share is gone (expired, or the key was forced free).
    Lost,
}

/// The outcome of [`Backend::try_acquire_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetAttempt {
    /// Every lock of the set is ours; one fencing token per lock (in the order asked) when
    /// they were asked for.
    Acquired { fencing_tokens: Vec<Option<u64>> },
    /// The lock at `index` is busy: nothing was taken. (A waiting set goes on key by key,
    /// each with its own wake-up: no holder's lease is needed here.)
    Busy { index: usize },
}

/// A lock store. Implementations must be cheap to share (`Arc<dyn Backend>`).
pub(crate) trait Backend: Admin + SharedStore + Send + Sync + 'static {
    /// What the store can do: built once, when the backend connects.
    fn capabilities(&self) -> &Capabilities;

    /// Takes the lock if it is free. Must be idempotent for the same token: a retried attempt
    /// whose first try succeeded must report `Acquired`, not `Busy`. Errors that waiting may
    /// cure are wrapped in [`Transient`]; every other error fails the acquisition at once.
    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>>;

    /// Takes every lock of `specs` (an owner token each, distinct names in canonical order,
    /// one kind, lease and fencing for all, no fair requests, no waiters' marks), all or
    /// nothing: if any is busy, nothing is taken and the first busy one is named. Like
    /// [`try_acquire`](Self::try_acquire) it must be idempotent for the same tokens, and marks
    /// errors waiting may cure as [`Transient`]. Only called when the store's
    /// [`Capabilities::acquires_sets`] said yes.
    fn try_acquire_all<'a>(
        &'a self,
        _specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Result<SetAttempt, BoxError>> {
        Box::pin(async { Err("this backend cannot take several locks in one request".into()) })
    }

    /// Extends the lease to `spec.lease` from now if the lock still holds `spec.token`.
    /// `Ok(false)` means somebody else holds it, or nobody does.
    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>>;

    /// Renews several locks of one [group](Capabilities::group) in one round trip where the
    /// backend can (the default renews them one by one). One result per spec, in order. The
    /// renewer sends a lone lock to [`renew`](Self::renew) instead.
    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        Box::pin(renew_each(self, specs))
    }

    /// A release before `min_hold` has passed: the hold (still `spec.token`'s) is not freed
    /// but ends `spec.lease` from now, by the store's own clock where it can — renewal has
    /// stopped, and the client releases it for good at that instant if it still runs.
    /// `Ok(false)`: it was not ours any more. The default sets the hold's lease to that, as a
    /// renewal does (every renewal sets the expiry, shorter or longer); a backend that keeps
    /// its locks alive itself keeps the session or lease they live on from being closed early.
    fn end_in<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        self.renew(spec)
    }

    /// Gives up `hold`: deletes the lock (or the reader's share) if it still holds the token,
    /// and wakes the waiters the release may admit; a token that only waits (a fair lock's
    /// place in line, a writer's mark that stops new readers) gives up its place. What it saw:
    /// a backend that retries a release whose reply was lost reports what the retry found as
    /// [`Released::Ambiguous`], never as [`Released::NotOurs`].
    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>>;

    /// Passes the lock held with `from` to `to.token` (with `to.lease`, and a new fencing
    /// token if `to.fencing`) in one atomic step, without releasing it: nobody else can take
    /// it in between and nobody is woken. Must be safe to retry with the same arguments. Only
    /// called when the store [hands over](Capabilities::hands_over).
    fn hand_over<'a>(
        &'a self,
        _from: &'a str,
        _to: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<Handover, BoxError>> {
        Box::pin(async { Err("this backend cannot hand a lock over".into()) })
    }

    /// Makes the upgradable read share `spec.token` holds on `spec.name` the write lock
    /// (with `spec.lease`, and a new fencing token if `spec.fencing`) once it is the key's
    /// only live share; until then marks the key so no new reader joins (as a waiting writer
    /// does), and answers busy. A share already upgraded (a retry) counts as done. Only called
    /// when the store serves [upgradable reads](Capabilities::upgradable); a store that does
    /// must wake a waiting upgrade when the last other reader leaves.
    fn upgrade<'a>(&'a self, _spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(async { Err("this backend cannot upgrade a read lock".into()) })
    }

    /// Gives up an upgrade that will not be waited for any longer: the mark that keeps new
    /// readers out goes (the share stays as it was).
    fn abandon_upgrade<'a>(&'a self, _spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(async { Ok(()) })
    }

    /// Starts listening for releases of `spec.name` that concern the waiter `spec.token` (a
    /// backend with a queue wakes only the next in line). The returned subscription must
    /// already be active (a release after this future resolves is seen).
    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>>;

    /// For a backend that [keeps its locks alive](Capabilities::keeps_alive): resolves, with
    /// the reason, once the lock held with `spec.token` can no longer be trusted — its session
    /// is (or, by this process's monotonic clock, may be) over, or its entry was deleted or
    /// changed. It must resolve before the store can grant the lock to anyone else: one loss
    /// of a session resolves it for every lock on that session.
    fn lost<'a>(&'a self, _spec: LockSpec<'a>) -> BoxFuture<'a, String> {
        Box::pin(std::future::pending())
    }

    /// Ends what the client keeps open on the server — ZooKeeper sessions, etcd leases — once
    /// its locks were given back ([`LockClient::close`](crate::LockClient::close)); a store
    /// whose locks hang on nothing but their keys has nothing to end (the default).
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

impl dyn Backend {
    /// The store's name for messages, traces and metrics.
    pub(crate) fn store(&self) -> &'static str {
        self.capabilities().store
    }
}

/// Where a store keeps shared results (`LockRequest::share`): read, write with a TTL, drop.
/// The encoding, the size limit ([`Capabilities::shares`]), the share's length and the warnings
/// are the engine's (`share.rs`); a store only keeps bytes. A store that keeps none says why in
/// its capabilities, and these are never called.
pub(crate) trait SharedStore {
    /// The bytes stored under `name` by [`shared_put`](Self::shared_put), if they still live.
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>>;

    /// Stores `entry.value` under `entry.name` for `entry.ttl` (by the store's clock where it
    /// has one), replacing what was there. The value is at most the store's limit.
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>>;

    /// Drops the bytes stored under `name`: whether they lived.
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>>;
}

/// A shared result to keep: `value` under `name` for `ttl`.
#[derive(Clone, Copy)]
pub(crate) struct Stored<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
    pub ttl: Duration,
}

/// What [`Admin::force_release`] answers: the entry it removed, if the lock was held.
pub(crate) type Freed<'a> = BoxFuture<'a, Result<Option<Entry>, BoxError>>;

/// What the admin API asks of a store (`distlock list`, `show`, `release --force`, `ping`): not
/// on any acquisition's path. Every store answers the first four.
pub(crate) trait Admin {
    /// The lock `name` as the store holds it now (`None`: free).
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>>;

    /// The held locks whose name is `prefix` followed by a key matching the glob `pattern`
    /// (see [`glob_match`](crate::admin::glob_match)), about `limit` of them at most (the
    /// caller filters, sorts and cuts again).
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>>;

    /// Deletes the lock `name` whoever holds it and wakes its waiters; what was removed.
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a>;

    /// One request to the server: its version.
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>>;

    /// Starts following changes to the locks whose name starts with `prefix` (a store may
    /// follow more): the feed is live when the future resolves, so a change after that is
    /// announced. `None` (the default): the store announces no changes; the caller polls.
    fn changes<'a>(
        &'a self,
        _prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::admin::ChangeFeed>, BoxError>> {
        Box::pin(async { Ok(None) })
    }

    /// The raw floor of one lock (for `LockClient::raw_pair`): the store's own conditional
    /// create of `name` holding `token` for `lease`, then its delete, on this client's
    /// connection and nothing more. `None` (the default): not measured on this store.
    fn raw_pair<'a>(
        &'a self,
        _name: &'a str,
        _token: &'a str,
        _lease: std::time::Duration,
    ) -> BoxFuture<'a, Option<Result<(), BoxError>>> {
        Box::pin(async { None })
    }

    /// The store's own settings that matter to distlock, for `LockClient::check` (the replicas
    /// `?replicas=` asks for, a Cluster's slots, the server's clock): none by default.
    fn diagnose(&self) -> BoxFuture<'_, Vec<crate::admin::Finding>> {
        Box::pin(async { Vec::new() })
    }
}

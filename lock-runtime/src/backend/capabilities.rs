//! What a store can do, given as data: each backend builds one [`Capabilities`] when it
//! connects, and the engine reads it — instead of asking the store a dozen yes/no questions at
//! run time (the way madelson/DistributedLock's stores say what they can do by the interfaces
//! they implement).

use std::time::Duration;

use crate::LockError;
use crate::error::{BoxError, Feature};

use super::Kind;

/// What a store can do. Built once per backend; `Copy`, so the engine keeps its own.
#[derive(Clone, Copy)]
pub(crate) struct Capabilities {
    /// The store's name for messages, traces and metrics: `memory`, `redis`, `postgres`, …
    pub store: &'static str,
    /// Redis Cluster: the hash slot of a lock name. Lock names are then wrapped in a hash tag
    /// (`{lock:K}`) so that every key a script touches for one lock lands in one slot, renewals
    /// are sent per slot (a dead master delays only its own), and a set of keys is taken in one
    /// request only when they share a slot.
    pub slot: Option<fn(&str) -> u16>,
    /// One request takes a set of plain locks, all or nothing (one Redis script — in a
    /// cluster, only keys of one [slot](Self::slot) —, one etcd transaction, one map operation
    /// in memory; see [`Backend::try_acquire_all`](super::Backend::try_acquire_all)). Otherwise
    /// several keys are taken one by one, in their canonical order.
    pub sets: bool,
    /// [`sets`](Self::sets) of readers' shares and permits too (not on etcd: readers and
    /// permits queue behind the keys before them).
    pub sets_of_shares: bool,
    /// A failed attempt has already removed whatever it may have written (Redlock undoes a
    /// lost vote on every node itself). Otherwise the engine releases a failed attempt's token
    /// in the background, in case the failed command took the lock after all.
    pub undoes_failed_attempts: bool,
    /// Read locks: served, or why not (for a [`LockError::Unsupported`] naming the key).
    pub shared: Result<(), &'static str>,
    /// Semaphores: served, or why not.
    pub permits: Result<(), &'static str>,
    /// `min_hold`: kept, or why not.
    pub min_hold: Result<(), &'static str>,
    /// `lock_delay`: kept (the store's own expiry of a hold is its lease plus the delay, and a
    /// release deletes it at once), or why not.
    pub lock_delay: Result<(), &'static str>,
    /// Fencing tokens (and so elections, whose terms they are): served, or why not.
    pub fencing: Result<(), &'static str>,
    /// Upgradable read locks ([`Backend::upgrade`](super::Backend::upgrade)); `Err` says why
    /// not.
    pub upgradable: Result<(), &'static str>,
    /// A writer that waits marks the lock so that no new reader joins (a mark beside the
    /// readers' shares): an acquisition of an exclusive lock that ends without it gives its
    /// mark up, as a waiter in a queue gives up its place.
    pub marks_waiting_writers: bool,
    /// A reader that waits keeps a place in line beside the readers' shares (behind the
    /// writers that waited before it, ahead of those after: writers and readers do not starve
    /// each other): an acquisition of a read lock that ends without it gives its place up.
    pub queues_readers: bool,
    /// The store grants a lock in arrival order across processes (a request with `fair`): with
    /// a queue of its own for fair requests (Redis, memory), or because its waiters always
    /// queue (`queues_waiters`).
    pub fair: bool,
    /// A busy attempt leaves a place in a queue on the server (a ZooKeeper node, an etcd key,
    /// a waiting advisory-lock session) that the waiter keeps between attempts: then an
    /// acquisition that ends without the lock — timeout, error, cancellation — releases its
    /// token, and the token is kept across busy attempts so the place in line is kept too.
    pub queues_waiters: bool,
    /// [`hand_over`](super::Backend::hand_over) is supported: a guard that releases a key
    /// another task of its client waits for passes the lock straight to it.
    pub hands_over: bool,
    /// The store keeps the locks it granted alive by itself — a ZooKeeper session, an etcd
    /// lease — rather than by a per-lock lease the runtime renews. Then no watchdog calls
    /// [`renew`](super::Backend::renew): it awaits [`lost`](super::Backend::lost) instead, and
    /// the store ends locks acquired without renewal after their lease itself.
    pub keeps_alive: bool,
    /// Which failed releases are worth retrying for as long as the lease lasts: the store is
    /// expected back within seconds (Redis Sentinel failing over to a replica). Without it a
    /// failed release is reported at once (the lock then ends by its expiry).
    pub rides_out: Option<fn(&BoxError) -> bool>,
    /// For a store that cannot announce releases to other processes (MySQL has no
    /// notifications): how long a waiter pauses before asking again after its `busy`-th busy
    /// answer in a row. The waiting loop never pauses past the holder's remaining lease.
    /// `None`: wait for a release notification or the holder's lease.
    pub poll: Option<Polling>,
    /// What wakes a waiter when the lock is released, in words (the table in
    /// `distlock::guide::backends`); a store that [polls](Self::poll) says so there instead.
    pub wakes: &'static str,
    /// The store announces changes to the locks (a key-space notification, a watch), so
    /// `watch` lists them again when told; otherwise it lists them every interval.
    pub announces: bool,
    /// Shared results (`LockRequest::share`): the largest stored value the store takes, in
    /// bytes, or why it keeps none.
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    pub shares: Result<usize, &'static str>,
}

/// How a waiter that no release can reach asks again: after its `busy`-th busy answer in a
/// row, `first_ms` doubling up to `cap_ms`, drawn from the upper half of that step so waiters
/// of several processes spread out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Polling {
    pub first_ms: u64,
    pub cap_ms: u64,
}

impl Polling {
    /// The SQL lock tables' polling (MySQL's; PostgreSQL's behind a pooler without
    /// `listen_url`): from 2 ms, doubling to 50 ms.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) const SQL: Polling = Polling {
        first_ms: 2,
        cap_ms: 50,
    };

    /// The pause after the `busy`-th busy answer in a row.
    pub(crate) fn pause(self, busy: u32) -> Duration {
        super::doubling_jittered(busy, self.first_ms, self.cap_ms)
    }
}

/// Why a store without upgradable read locks refuses them: every store serves them but
/// Redlock, and PostgreSQL's advisory and MySQL's named modes, which say why themselves.
pub(crate) const NO_UPGRADABLE: &str = "they are served on redis://, redis+cluster://, \
     redis+sentinel://, postgres:// and mysql:// (the lock tables), zk://, etcd:// and \
     memory:// (not on this store); take the write lock where you would upgrade";

/// Why a store without fair locks refuses them.
pub(crate) const NO_FAIR: &str = "its waiters are not served in arrival order across \
     processes; use a store whose are (the table in distlock::guide::backends), or drop `fair`";

/// Why a store keeps no shared results: every built-in store keeps them; a store added later
/// says so until it does.
pub(crate) const NO_SHARES: &str = "this store has no place for them yet";

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("store", &self.store)
            .field("slots", &self.slot.is_some())
            .field("sets", &self.sets)
            .field("fair", &self.fair)
            .field("queues_waiters", &self.queues_waiters)
            .field("hands_over", &self.hands_over)
            .field("keeps_alive", &self.keeps_alive)
            .finish_non_exhaustive()
    }
}

impl Capabilities {
    /// A store of plain locks, renewed by the runtime, woken by release notifications, and
    /// nothing more: every other capability is switched on by the backend that has it.
    pub(crate) const fn plain(store: &'static str) -> Capabilities {
        Capabilities {
            store,
            slot: None,
            sets: false,
            sets_of_shares: false,
            undoes_failed_attempts: false,
            shared: Err("this store has no read locks; take the plain lock instead"),
            permits: Err("this store has no semaphores"),
            min_hold: Ok(()),
            lock_delay: Ok(()),
            fencing: Ok(()),
            upgradable: Err(NO_UPGRADABLE),
            marks_waiting_writers: false,
            queues_readers: false,
            fair: false,
            queues_waiters: false,
            hands_over: false,
            keeps_alive: false,
            rides_out: None,
            poll: None,
            wakes: "a release notification",
            announces: false,
            shares: Err(NO_SHARES),
        }
    }

    /// [`plain`](Self::plain), serving every kind: read locks and semaphores too.
    pub(crate) const fn every_kind(store: &'static str) -> Capabilities {
        Capabilities {
            shared: Ok(()),
            permits: Ok(()),
            ..Capabilities::plain(store)
        }
    }

    /// Whether `feature` is served; `Err` says why not.
    pub(crate) fn check(&self, feature: Feature) -> Result<(), &'static str> {
        match feature {
            Feature::ReadLocks => self.shared,
            Feature::Semaphores => self.permits,
            Feature::Upgradable => self.serves(Kind::Shared).and(self.upgradable),
            Feature::Fair if self.fair => Ok(()),
            Feature::Fair => Err(NO_FAIR),
            Feature::MinHold => self.min_hold,
            Feature::LockDelay => self.lock_delay,
            Feature::Fencing | Feature::Elections => self.fencing,
            Feature::SharedResults => self.shares.map(|_| ()),
        }
    }

    /// [`check`](Self::check) as the error a refusal is: [`LockError::Unsupported`] naming
    /// this store, `feature` and `key`.
    pub(crate) fn require(&self, feature: Feature, key: Option<&str>) -> Result<(), LockError> {
        self.check(feature).map_err(|why| LockError::Unsupported {
            backend: self.store,
            feature,
            key: key.map(str::to_owned),
            reason: why,
        })
    }

    /// Whether holds of `kind` are served; `Err` says why not.
    pub(crate) fn serves(&self, kind: Kind) -> Result<(), &'static str> {
        match kind {
            Kind::Exclusive => Ok(()),
            Kind::Shared => self.shared,
            Kind::Permits(_) => self.permits,
        }
    }

    /// Which renewals may share one `renew_many` call: locks of different groups are renewed by
    /// separate, concurrent calls (a cluster's hash slot; one group elsewhere).
    pub(crate) fn group(&self, name: &str) -> u16 {
        self.slot.map_or(0, |slot| slot(name))
    }

    /// Whether the locks `names` (sorted, distinct), held as `kind`, are taken in one atomic
    /// request.
    pub(crate) fn acquires_sets(&self, names: &[&str], kind: Kind) -> bool {
        let kinds = self.sets && (kind == Kind::Exclusive || self.sets_of_shares);
        // One script runs on one node: in a cluster, only keys of one slot.
        kinds
            && names
                .windows(2)
                .all(|pair| self.group(pair[0]) == self.group(pair[1]))
    }

    /// Whether a failed release is retried for as long as the lease lasts.
    pub(crate) fn rides_out(&self, error: &BoxError) -> bool {
        self.rides_out.is_some_and(|rides_out| rides_out(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pauses docs/guide/postgres.md and docs/guide/mysql.md state for waiters that poll:
    /// from 2 ms, doubling to 50 ms, drawn from the upper half.
    #[test]
    fn sql_polling_backs_off_from_2_to_50_ms_with_jitter() {
        for _ in 0..1000 {
            let first = Polling::SQL.pause(1);
            assert!(first >= Duration::from_millis(1) && first <= Duration::from_millis(2));
            let later = Polling::SQL.pause(30);
            assert!(later >= Duration::from_millis(25) && later <= Duration::from_millis(50));
        }
        let draws: std::collections::HashSet<Duration> =
            (0..100).map(|_| Polling::SQL.pause(9)).collect();
        assert!(draws.len() > 5, "jittered: {draws:?}");
    }
}

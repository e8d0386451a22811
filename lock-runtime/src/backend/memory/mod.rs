//! `memory://`: locks inside one process, with the same semantics as the networked backends
//! (owner tokens, expiry, renewal, wake-on-release, fencing).
//!
//! `memory://` is one process-wide store; `memory://name` is a separate named store. Clients
//! connected to the same URL share locks, exactly as two clients of one Redis server do.
//! It excludes nobody outside this process: use it for single-process apps, demos and tests.
//!
//! Files: this one holds the store and its plain and shared operations; `state` what it holds
//! and how an attempt of each kind changes it; `fair` the fair locks' queues; `admin` the admin
//! API; `hooks` test support.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::{Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, SetAttempt, Upgrade};
use crate::error::BoxError;
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

mod admin;
mod fair;
#[cfg(any(test, feature = "testing"))]
mod hooks;
mod state;

use super::{SharedStore, Stored};
use state::MemoryState;

/// Shared results: each value with the instant it expires.
type Values = HashMap<String, (Arc<[u8]>, Instant)>;

/// The in-process lock store.
pub(crate) struct MemoryBackend {
    state: Mutex<MemoryState>,
    hub: Arc<ReleaseHub>,
    /// Marked after each acquisition and release, for the admin API's watches.
    changes: tokio::sync::watch::Sender<()>,
    /// Test support: a simulated round trip of `min..=max` ms for every operation, packed as
    /// `min << 32 | max` (0: none). Tests use it to run the slow-backend case of the
    /// conformance suite on `memory://` too.
    latency_ms: AtomicU64,
    /// Shared results (`LockRequest::share`): each value with the instant it expires.
    #[cfg_attr(not(feature = "share"), allow(dead_code))]
    values: Mutex<Values>,
}

impl MemoryBackend {
    /// The store for `memory://name` (`""` for plain `memory://`), shared by every client
    /// connected to the same URL while at least one of them is alive.
    pub(crate) fn named(name: &str) -> Arc<MemoryBackend> {
        static STORES: OnceLock<Mutex<HashMap<String, Weak<MemoryBackend>>>> = OnceLock::new();
        let mut stores = STORES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(store) = stores.get(name).and_then(Weak::upgrade) {
            return store;
        }
        stores.retain(|_, store| store.strong_count() > 0);
        let store = Arc::new(MemoryBackend {
            state: Mutex::new(MemoryState::default()),
            hub: ReleaseHub::new(None),
            changes: tokio::sync::watch::Sender::new(()),
            latency_ms: AtomicU64::new(0),
            values: Mutex::default(),
        });
        stores.insert(name.to_owned(), Arc::downgrade(&store));
        store
    }

    fn state(&self) -> MutexGuard<'_, MemoryState> {
        // Every mutation below is a single map operation; a panic cannot leave it half-done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn acquire_now(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        self.state().attempt(spec, Instant::now())
    }

    /// Tells the watches (if any) that what the store holds changed.
    pub(super) fn changed(&self) {
        if self.changes.receiver_count() > 0 {
            self.changes.send_replace(());
        }
    }

    /// `attempt`, announced to the watches when it took the lock.
    fn announced<T>(
        &self,
        attempt: Result<T, BoxError>,
        taken: impl Fn(&T) -> bool,
    ) -> Result<T, BoxError> {
        if attempt.as_ref().is_ok_and(taken) {
            self.changed();
        }
        attempt
    }

    /// Several locks, all or nothing, under one hold of the store: each is taken as alone;
    /// at the first busy one, those taken before it are removed again (nobody saw them).
    fn acquire_all_now(&self, specs: &[LockSpec<'_>]) -> Result<SetAttempt, BoxError> {
        let now = Instant::now();
        let mut state = self.state();
        let mut fencing_tokens = Vec::with_capacity(specs.len());
        for (index, spec) in specs.iter().enumerate() {
            let attempt = state.attempt(*spec, now);
            if let Ok(Attempt::Acquired { fencing_token }) = attempt {
                fencing_tokens.push(fencing_token);
                continue;
            }
            for taken in &specs[..index] {
                state.undo(taken);
            }
            return match attempt? {
                Attempt::Busy { .. } => Ok(SetAttempt::Busy { index }),
                Attempt::Acquired { .. } => unreachable!("handled above"),
            };
        }
        Ok(SetAttempt::Acquired { fencing_tokens })
    }

    fn renew_now(&self, spec: LockSpec<'_>) -> bool {
        let now = Instant::now();
        let mut state = self.state();
        if spec.kind != Kind::Exclusive {
            let share = state
                .readers
                .get_mut(spec.name)
                .and_then(|readers| readers.shares.get_mut(spec.token));
            match share {
                Some(until) if *until > now => {
                    *until = now + spec.lease;
                    return true;
                }
                // An upgradable share upgraded meanwhile is our write lock: renewed as one.
                _ if !crate::token::is_upgradable(spec.token) => return false,
                _ => {}
            }
        }
        match state.locks.get_mut(spec.name) {
            Some(held) if held.token == spec.token && held.expires_at > now => {
                held.expires_at = now + spec.lease;
                true
            }
            _ => false,
        }
    }

    fn release_now(&self, name: &str, token: &str) -> bool {
        let now = Instant::now();
        let mut state = self.state();
        let ours = matches!(state.locks.get(name), Some(held) if held.token == token);
        if !ours {
            // A writer that gives up waiting takes its mark back: readers may join again.
            let unmarked = state.readers.get_mut(name).is_some_and(|readers| {
                readers.writers.remove(token).is_some() && readers.writers.is_empty()
            });
            drop(state);
            if unmarked {
                self.hub.notify(name);
            }
            return false;
        }
        let live = state
            .locks
            .remove(name)
            .is_some_and(|held| held.expires_at > now);
        drop(state);
        if live {
            self.hub.notify(name);
        }
        live
    }

    /// A reader's release: its share ends; the last reader's departure wakes the waiters. A
    /// semaphore's permit: every release wakes them (a permit is free).
    fn release_shared_now(&self, name: &str, token: &str) -> bool {
        let now = Instant::now();
        let mut state = self.state();
        let Some(readers) = state.readers.get_mut(name) else {
            return false;
        };
        let live = readers
            .shares
            .remove(token)
            .is_some_and(|until| until > now);
        let semaphore = readers.permits.is_some();
        let last = readers.live_until(now).is_none();
        // Only an upgradable share is left: it may be waiting to upgrade.
        let upgradable_alone = readers.shares.len() == 1
            && readers
                .shares
                .keys()
                .all(|token| crate::token::is_upgradable(token));
        if last && readers.writers.is_empty() {
            state.readers.remove(name);
        }
        drop(state);
        if live && (last || semaphore || upgradable_alone || crate::token::is_upgradable(token)) {
            self.hub.notify(name);
        }
        live
    }

    /// Runs `op` now, or — with a simulated latency — after half of it, answering after the
    /// other half.
    fn answer<'a, T: Send + 'a>(
        &'a self,
        op: impl FnOnce() -> Result<T, BoxError> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, BoxError>> {
        let latency = self.latency_ms.load(Ordering::Relaxed);
        if latency == 0 {
            let value = op();
            return Box::pin(async move { value });
        }
        Box::pin(async move {
            let total =
                Duration::from_millis(fastrand::u64((latency >> 32)..=(latency & 0xffff_ffff)));
            tokio::time::sleep(total / 2).await;
            let value = op();
            tokio::time::sleep(total - total / 2).await;
            value
        })
    }
}

/// A release's answer in one process: nothing is ever ambiguous.
fn released(deleted: bool) -> Released {
    if deleted {
        Released::Deleted
    } else {
        Released::NotOurs
    }
}

/// Every kind, fair locks, sets of any kind in one map operation, writers' marks.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    wakes: "an in-process notification",
    announces: true,
    sets: true,
    sets_of_shares: true,
    marks_waiting_writers: true,
    fair: true,
    upgradable: Ok(()),
    // No limit but the process's memory.
    shares: Ok(usize::MAX),
    ..Capabilities::every_kind("memory")
};

impl MemoryBackend {
    fn values(&self) -> MutexGuard<'_, Values> {
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SharedStore for MemoryBackend {
    fn shared_get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, BoxError>> {
        self.answer(move || {
            let mut values = self.values();
            match values.get(name) {
                Some((value, until)) if *until > Instant::now() => Ok(Some(value.to_vec())),
                Some(_) => {
                    values.remove(name);
                    Ok(None)
                }
                None => Ok(None),
            }
        })
    }

    fn shared_put<'a>(&'a self, entry: Stored<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        let Stored { name, value, ttl } = entry;
        self.answer(move || {
            let now = Instant::now();
            let mut values = self.values();
            // Expired values nobody asks for again are swept as the map doubles.
            if values.len() >= 64 && values.len().is_power_of_two() {
                values.retain(|_, (_, until)| *until > now);
            }
            values.insert(name.to_owned(), (value.into(), now + ttl));
            Ok(())
        })
    }

    fn shared_drop<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, BoxError>> {
        self.answer(move || {
            let now = Instant::now();
            Ok(self
                .values()
                .remove(name)
                .is_some_and(|(_, until)| until > now))
        })
    }
}

impl Backend for MemoryBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        let taken = |a: &Attempt| matches!(a, Attempt::Acquired { .. });
        if spec.fair {
            return self.answer(move || self.announced(self.acquire_fair_now(spec), taken));
        }
        self.answer(move || self.announced(self.acquire_now(spec), taken))
    }

    fn try_acquire_all<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Result<SetAttempt, BoxError>> {
        let taken = |a: &SetAttempt| matches!(a, SetAttempt::Acquired { .. });
        self.answer(move || self.announced(self.acquire_all_now(specs), taken))
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        self.answer(move || Ok(self.renew_now(spec)))
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        self.answer(move || {
            let deleted = match (hold.kind, hold.fair) {
                (Kind::Shared | Kind::Permits(_), _) => self.release_shared_now(name, token),
                (Kind::Exclusive, true) => self.release_fair_now(name, token),
                (Kind::Exclusive, false) => self.release_now(name, token),
            };
            if deleted {
                self.changed();
            }
            Ok(released(deleted))
        })
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        self.answer(move || {
            let upgraded = self.state().upgrade(spec, Instant::now());
            if matches!(upgraded, Upgrade::Done { .. }) {
                self.changed();
            }
            Ok(upgraded)
        })
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        self.answer(move || {
            if self.state().abandon_upgrade(spec.name, spec.token) {
                // Readers kept out by the mark may join now.
                self.hub.notify(spec.name);
            }
            Ok(())
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let name = spec.name;
        let subscription = self
            .hub
            .subscribe_as(name, spec.fair.then_some(spec.token), || {});
        Box::pin(async move { Ok(subscription) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(name: &'a str, token: &'a str, lease_ms: u64, fencing: bool) -> LockSpec<'a> {
        LockSpec {
            name,
            token,
            lease: Duration::from_millis(lease_ms),
            fencing,
            renew: true,
            waiting: false,
            fair: false,
            kind: Kind::Exclusive,
            lock_delay: Duration::ZERO,
        }
    }

    #[test]
    fn expired_locks_can_be_taken_and_not_renewed_or_released() {
        let store = MemoryBackend::named("unit-expiry");
        assert!(matches!(
            store.acquire_now(spec("k", "a", 20, false)).unwrap(),
            Attempt::Acquired { .. }
        ));
        assert!(matches!(
            store.acquire_now(spec("k", "b", 20, false)).unwrap(),
            Attempt::Busy { ttl: Some(_) }
        ));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!store.renew_now(spec("k", "a", 20, false)));
        assert!(matches!(
            store.acquire_now(spec("k", "b", 1000, false)).unwrap(),
            Attempt::Acquired { .. }
        ));
        assert!(!store.release_now("k", "a"));
        assert_eq!(store.peek("k").map(|(t, _)| t), Some("b".to_string()));
    }

    #[test]
    fn sweep_bounds_memory_of_abandoned_keys() {
        let store = MemoryBackend::named("unit-sweep");
        for i in 0..10_000 {
            let name = format!("k{i}");
            store.acquire_now(spec(&name, "t", 1, false)).unwrap();
            if i == 5_000 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
        store.acquire_now(spec("last", "t", 1000, false)).unwrap();
        assert!(store.state().locks.len() < 10_000);
    }

    #[test]
    fn fencing_counters_increase_per_key() {
        let store = MemoryBackend::named("unit-fence");
        let mut last = 0;
        for i in 0..5 {
            let token = format!("t{i}");
            let Attempt::Acquired {
                fencing_token: Some(fence),
            } = store.acquire_now(spec("f", &token, 1000, true)).unwrap()
            else {
                panic!("expected a fencing token");
            };
            assert!(fence > last);
            last = fence;
            assert!(store.release_now("f", &token));
        }
    }
}

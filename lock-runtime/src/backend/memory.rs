//! `memory://`: locks inside one process, with the same semantics as the networked backends
//! (owner tokens, expiry, renewal, wake-on-release, fencing).
//!
//! `memory://` is one process-wide store; `memory://name` is a separate named store. Clients
//! connected to the same URL share locks, exactly as two clients of one Redis server do.
//! It excludes nobody outside this process: use it for single-process apps, demos and tests.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::{Admin, Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, SetAttempt};
use crate::admin::{Entry, glob_match};
use crate::error::BoxError;
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;

/// The in-process lock store.
pub(crate) struct MemoryBackend {
    state: Mutex<State>,
    hub: Arc<ReleaseHub>,
    /// Test support: a simulated round trip of `min..=max` ms for every operation, packed as
    /// `min << 32 | max` (0: none). Tests use it to run the slow-backend case of the
    /// conformance suite on `memory://` too.
    latency_ms: AtomicU64,
}

#[derive(Default)]
struct State {
    locks: HashMap<String, Held>,
    /// Fencing counters live as long as the store, like Redis counter keys: one `u64` per
    /// key that was ever locked with fencing.
    fences: HashMap<String, u64>,
    /// Size of `locks` after the last sweep of expired entries.
    swept_len: usize,
    /// Fair locks' queues: waiting tokens in arrival order, each with the instant its place
    /// lapses unless the waiter asks again. Removed when empty.
    queues: HashMap<String, VecDeque<(String, Instant)>>,
    /// Read locks: the readers of a key, and the writers waiting for them to leave. Removed
    /// once neither has a live entry.
    readers: HashMap<String, Readers>,
}

/// The readers of one key, or the holders of a semaphore's permits, as the Redis backend keeps
/// them (see `redis/scripts.rs`).
#[derive(Default)]
struct Readers {
    /// Each reader's (or permit's) token and the end of its own lease.
    shares: HashMap<String, Instant>,
    /// A semaphore's limit: the shares are its permits. `None`: a read lock's readers.
    permits: Option<u16>,
    /// Writers waiting for the readers to leave, each with the instant its mark lapses unless
    /// the writer asks again: while one is marked, no new reader joins.
    writers: HashMap<String, Instant>,
}

impl Readers {
    /// Drops lapsed shares and marks; the end of the last live share, if any.
    fn live_until(&mut self, now: Instant) -> Option<Instant> {
        self.shares.retain(|_, until| *until > now);
        self.writers.retain(|_, until| *until > now);
        self.shares.values().max().copied()
    }

    /// When the first live writer's mark lapses, if a writer waits.
    fn writer_waits(&self) -> Option<Instant> {
        self.writers.values().min().copied()
    }
}

struct Held {
    token: String,
    expires_at: Instant,
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
            state: Mutex::new(State::default()),
            hub: ReleaseHub::new(None),
            latency_ms: AtomicU64::new(0),
        });
        stores.insert(name.to_owned(), Arc::downgrade(&store));
        store
    }

    /// The live lock `name` — a writer, or its readers — for the admin API.
    fn entry(&self, name: &str, now: Instant) -> Option<Entry> {
        let mut state = self.state();
        let fencing_token = state.fences.get(name).copied();
        if let Some(held) = state.locks.get(name).filter(|held| held.expires_at > now) {
            return Some(Entry {
                name: name.to_owned(),
                token: Some(held.token.clone()),
                holder: None,
                ttl: Some(held.expires_at - now),
                fencing_token,
                waiters: state.queues.get(name).map(|q| q.len() as u64),
                readers: Vec::new(),
                permits: None,
            });
        }
        let readers = state.readers.get_mut(name)?;
        let until = readers.live_until(now)?;
        Some(Entry {
            name: name.to_owned(),
            token: None,
            holder: None,
            ttl: Some(until - now),
            fencing_token,
            waiters: (!readers.writers.is_empty()).then_some(readers.writers.len() as u64),
            readers: readers
                .shares
                .iter()
                .map(|(token, until)| (token.clone(), Some(*until - now)))
                .collect(),
            permits: readers.permits.map(u32::from),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every mutation below is a single map operation; a panic cannot leave it half-done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn acquire_now(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        self.state().attempt(spec, Instant::now())
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

    /// A fair attempt: as the Redis backend's fair script (see `redis/scripts.rs`).
    fn acquire_fair_now(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(held) = state.semaphore(spec.name, now) {
            return Err(super::Refused::kind(Some(held), spec.kind));
        }
        let head = state.next_in_line(spec.name, now);
        let held = state
            .locks
            .get(spec.name)
            .filter(|held| held.expires_at > now)
            .map(|held| held.expires_at - now);
        if held.is_none() && head.as_deref().is_none_or(|head| head == spec.token) {
            if head.is_some()
                && let Some(queue) = state.queues.get_mut(spec.name)
            {
                queue.pop_front();
                if queue.is_empty() {
                    state.queues.remove(spec.name);
                }
            }
            return Ok(state.acquire(spec, now));
        }
        let until = now + crate::wait::FAIR_QUEUE_TTL;
        let queue = state.queues.entry(spec.name.to_owned()).or_default();
        match queue.iter_mut().find(|(token, _)| token == spec.token) {
            Some(place) => place.1 = until,
            None => queue.push_back((spec.token.to_owned(), until)),
        }
        let ttl = held.unwrap_or_else(|| {
            // Free, but another is first in line: until its place lapses, unless woken first.
            queue.front().map_or(Duration::ZERO, |(_, lapses)| {
                lapses.saturating_duration_since(now)
            })
        });
        Ok(Attempt::Busy { ttl: Some(ttl) })
    }

    /// A fair release: the holder's token frees the lock and wakes the next in line; a waiting
    /// token gives up its place (waking the next if it was first in line of a free lock).
    fn release_fair_now(&self, name: &str, token: &str) -> bool {
        let now = Instant::now();
        let mut state = self.state();
        let released = matches!(state.locks.get(name), Some(held) if held.token == token);
        if released {
            state.locks.remove(name);
        } else {
            let Some(queue) = state.queues.get_mut(name) else {
                return false;
            };
            let Some(at) = queue.iter().position(|(t, _)| t == token) else {
                return false;
            };
            queue.remove(at);
            let free = state
                .locks
                .get(name)
                .is_none_or(|held| held.expires_at <= now);
            if at != 0 || !free {
                return false;
            }
        }
        let head = state.next_in_line(name, now);
        drop(state);
        if let Some(head) = head {
            self.hub.notify_one(name, &head);
        }
        released
    }

    fn renew_now(&self, spec: LockSpec<'_>) -> bool {
        let now = Instant::now();
        let mut state = self.state();
        if spec.kind != Kind::Exclusive {
            let share = state
                .readers
                .get_mut(spec.name)
                .and_then(|readers| readers.shares.get_mut(spec.token));
            return match share {
                Some(until) if *until > now => {
                    *until = now + spec.lease;
                    true
                }
                _ => false,
            };
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
        if last && readers.writers.is_empty() {
            state.readers.remove(name);
        }
        drop(state);
        if live && (last || semaphore) {
            self.hub.notify(name);
        }
        live
    }

    /// Simulates a round trip of `min..=max` for every operation from now on (`None`: off);
    /// test support. Half of it passes before the operation takes effect, half after, like a
    /// request and its reply on a network.
    #[cfg(feature = "testing")]
    pub(crate) fn set_latency(&self, latency: Option<(Duration, Duration)>) {
        let ms = |d: Duration| {
            u64::try_from(d.as_millis())
                .unwrap_or(0)
                .min(u64::from(u32::MAX))
        };
        let packed = latency.map_or(0, |(min, max)| (ms(min) << 32) | ms(max).max(ms(min)));
        self.latency_ms.store(packed, Ordering::Relaxed);
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

    /// What the store holds for `name`: the owner token and remaining lease (test support).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn peek(&self, name: &str) -> Option<(String, Duration)> {
        let now = Instant::now();
        self.state()
            .locks
            .get(name)
            .filter(|held| held.expires_at > now)
            .map(|held| (held.token.clone(), held.expires_at - now))
    }

    /// The live readers of `name`: token and remaining share, longest first (test support).
    #[cfg(feature = "testing")]
    pub(crate) fn readers_of(&self, name: &str) -> Vec<(String, Duration)> {
        let now = Instant::now();
        let mut readers: Vec<(String, Duration)> = self
            .state()
            .readers
            .get(name)
            .map(|readers| {
                readers
                    .shares
                    .iter()
                    .filter(|(_, until)| **until > now)
                    .map(|(token, until)| (token.clone(), *until - now))
                    .collect()
            })
            .unwrap_or_default();
        readers.sort_by_key(|r| std::cmp::Reverse(r.1));
        readers
    }

    /// How many waiters stand in `name`'s fair queue (test support).
    #[cfg(feature = "testing")]
    pub(crate) fn queued(&self, name: &str) -> usize {
        self.state().queues.get(name).map_or(0, VecDeque::len)
    }

    /// Overwrites or deletes `name` behind its holder's back (test support for fault tests).
    #[cfg(feature = "testing")]
    pub(crate) fn force(&self, name: &str, value: Option<(&str, Duration)>) {
        let mut state = self.state();
        match value {
            Some((token, ttl)) => {
                state.locks.insert(
                    name.to_owned(),
                    Held {
                        token: token.to_owned(),
                        expires_at: Instant::now() + ttl,
                    },
                );
            }
            None => {
                state.locks.remove(name);
            }
        }
    }
}

impl State {
    /// The limit of the semaphore `name` if permits of it are held: a name is one kind, so a
    /// lock (or a read lock) asked for on it is refused.
    fn semaphore(&mut self, name: &str, now: Instant) -> Option<u16> {
        let readers = self.readers.get_mut(name)?;
        readers.live_until(now)?;
        readers.permits
    }

    /// One attempt of any kind (no queue considered); a name is one kind.
    fn attempt(&mut self, spec: LockSpec<'_>, now: Instant) -> Result<Attempt, BoxError> {
        match (spec.kind, self.semaphore(spec.name, now)) {
            (Kind::Permits(n), _) => self.acquire_permit(spec, n, now),
            (kind, Some(held)) => Err(super::Refused::kind(Some(held), kind)),
            (Kind::Exclusive, None) => Ok(self.acquire(spec, now)),
            (Kind::Shared, None) => Ok(self.acquire_shared(spec, now)),
        }
    }

    /// Takes the lock for `spec` if it is free (no queue considered).
    fn acquire(&mut self, spec: LockSpec<'_>, now: Instant) -> Attempt {
        if let Some(held) = self.locks.get(spec.name)
            && held.expires_at > now
        {
            return Attempt::Busy {
                ttl: Some(held.expires_at - now),
            };
        }
        if let Some(readers) = self.readers.get_mut(spec.name) {
            match readers.live_until(now) {
                Some(until) => {
                    // Readers hold it: a waiter marks the key so no new reader joins, and asks
                    // again in time to keep its mark.
                    let mut ttl = until - now;
                    if spec.waiting {
                        readers
                            .writers
                            .insert(spec.token.to_owned(), now + crate::wait::FAIR_QUEUE_TTL);
                        ttl = ttl.min(crate::wait::FAIR_QUEUE_TTL / 3);
                    }
                    return Attempt::Busy { ttl: Some(ttl) };
                }
                None => {
                    readers.writers.remove(spec.token);
                    if readers.writers.is_empty() {
                        self.readers.remove(spec.name);
                    }
                }
            }
        }
        self.sweep(now);
        self.locks.insert(
            spec.name.to_owned(),
            Held {
                token: spec.token.to_owned(),
                expires_at: now + spec.lease,
            },
        );
        let fencing_token = spec.fencing.then(|| {
            let counter = self.fences.entry(spec.name.to_owned()).or_insert(0);
            *counter += 1;
            *counter
        });
        Attempt::Acquired { fencing_token }
    }

    /// Takes one of the `n` permits of the semaphore `spec.name` if fewer are held; a name held
    /// as a lock, or a semaphore held under another limit, is refused.
    fn acquire_permit(
        &mut self,
        spec: LockSpec<'_>,
        n: u16,
        now: Instant,
    ) -> Result<Attempt, BoxError> {
        if self
            .locks
            .get(spec.name)
            .is_some_and(|held| held.expires_at > now)
        {
            return Err(super::Refused::kind(None, spec.kind));
        }
        let readers = self.readers.entry(spec.name.to_owned()).or_default();
        if readers.live_until(now).is_some() {
            match readers.permits {
                None => return Err(super::Refused::kind(None, spec.kind)),
                Some(held) if held != n => return Err(super::Refused::limit(held, n)),
                Some(_) => {}
            }
        }
        readers.permits = Some(n);
        if !readers.shares.contains_key(spec.token) && readers.shares.len() >= n as usize {
            // Until the first permit's lease ends, unless a release wakes us first.
            let first = readers.shares.values().min().copied().unwrap_or(now);
            return Ok(Attempt::Busy {
                ttl: Some(first.saturating_duration_since(now)),
            });
        }
        readers
            .shares
            .insert(spec.token.to_owned(), now + spec.lease);
        // Every grant its own, rising token.
        let fencing_token = spec.fencing.then(|| {
            let counter = self.fences.entry(spec.name.to_owned()).or_insert(0);
            *counter += 1;
            *counter
        });
        Ok(Attempt::Acquired { fencing_token })
    }

    /// Takes a reader's share of `spec.name` unless a writer holds the key or waits for it.
    fn acquire_shared(&mut self, spec: LockSpec<'_>, now: Instant) -> Attempt {
        if let Some(held) = self.locks.get(spec.name)
            && held.expires_at > now
        {
            return Attempt::Busy {
                ttl: Some(held.expires_at - now),
            };
        }
        let readers = self.readers.entry(spec.name.to_owned()).or_default();
        readers.live_until(now);
        if !readers.shares.contains_key(spec.token)
            && let Some(lapses) = readers.writer_waits()
        {
            return Attempt::Busy {
                ttl: Some(lapses - now),
            };
        }
        readers
            .shares
            .insert(spec.token.to_owned(), now + spec.lease);
        // A reader reads what the last writer wrote: its fencing token, not a new one.
        let fencing_token = spec
            .fencing
            .then(|| self.fences.get(spec.name).copied().unwrap_or(0));
        Attempt::Acquired { fencing_token }
    }

    /// Removes what `spec` was just granted, inside the same hold of the store (a set's
    /// acquisition that found a later lock busy).
    fn undo(&mut self, spec: &LockSpec<'_>) {
        if spec.kind == Kind::Exclusive {
            if self
                .locks
                .get(spec.name)
                .is_some_and(|held| held.token == spec.token)
            {
                self.locks.remove(spec.name);
            }
            return;
        }
        if let Some(readers) = self.readers.get_mut(spec.name) {
            readers.shares.remove(spec.token);
            if readers.shares.is_empty() && readers.writers.is_empty() {
                self.readers.remove(spec.name);
            }
        }
    }

    /// The first token in `name`'s queue whose place has not lapsed (lapsed ones dropped).
    fn next_in_line(&mut self, name: &str, now: Instant) -> Option<String> {
        let queue = self.queues.get_mut(name)?;
        while queue.front().is_some_and(|(_, lapses)| *lapses <= now) {
            queue.pop_front();
        }
        let head = queue.front().map(|(token, _)| token.clone());
        if head.is_none() {
            self.queues.remove(name);
        }
        head
    }

    /// Drops expired locks once the map has doubled since the last sweep, so keys that are
    /// never touched again do not pile up; amortized O(1) per acquisition.
    fn sweep(&mut self, now: Instant) {
        if self.locks.len() >= 64 && self.locks.len() >= 2 * self.swept_len {
            self.locks.retain(|_, held| held.expires_at > now);
            self.swept_len = self.locks.len();
        }
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
const CAPABILITIES: Capabilities = Capabilities {
    sets: true,
    sets_of_shares: true,
    marks_waiting_writers: true,
    fair: true,
    ..Capabilities::every_kind("memory")
};

impl Backend for MemoryBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        if spec.fair {
            return self.answer(move || self.acquire_fair_now(spec));
        }
        self.answer(move || self.acquire_now(spec))
    }

    fn try_acquire_all<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Result<SetAttempt, BoxError>> {
        self.answer(move || self.acquire_all_now(specs))
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        self.answer(move || Ok(self.renew_now(spec)))
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        self.answer(move || {
            Ok(released(match (hold.kind, hold.fair) {
                (Kind::Shared | Kind::Permits(_), _) => self.release_shared_now(name, token),
                (Kind::Exclusive, true) => self.release_fair_now(name, token),
                (Kind::Exclusive, false) => self.release_now(name, token),
            }))
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

impl Admin for MemoryBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move { Ok(self.entry(name, Instant::now())) })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        pattern: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let now = Instant::now();
            let matches = |name: &String| {
                name.strip_prefix(prefix)
                    .is_some_and(|key| glob_match(pattern, key))
            };
            let names: Vec<String> = {
                let state = self.state();
                let writers = state
                    .locks
                    .iter()
                    .filter(|(name, held)| held.expires_at > now && matches(name))
                    .map(|(name, _)| name.clone());
                let read = state
                    .readers
                    .iter()
                    .filter(|(name, readers)| {
                        readers.shares.values().any(|until| *until > now) && matches(name)
                    })
                    .map(|(name, _)| name.clone());
                writers.chain(read).take(limit).collect()
            };
            Ok(names
                .iter()
                .filter_map(|name| self.entry(name, now))
                .collect())
        })
    }
    fn force_release<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let now = Instant::now();
            let entry = self.entry(name, now);
            if entry.as_ref().is_some_and(|e| !e.readers.is_empty()) {
                // Every reader's share goes at once; their holders learn it at their next
                // renewal.
                self.state().readers.remove(name);
                self.hub.notify(name);
            }
            let token = entry.as_ref().and_then(|e| e.token.clone());
            if let Some(token) = token {
                if self.state().queues.contains_key(name) {
                    self.release_fair_now(name, &token);
                } else {
                    self.release_now(name, &token);
                }
            }
            Ok(entry)
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async {
            Ok(format!(
                "in-process (lock-runtime {})",
                env!("CARGO_PKG_VERSION")
            ))
        })
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

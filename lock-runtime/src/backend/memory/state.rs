//! What the store holds: plain locks, readers' shares and semaphores' permits, writers' marks,
//! fencing counters; and how one attempt of each kind changes it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::backend::{Attempt, Kind, LockSpec, Upgrade};
use crate::error::BoxError;
use crate::fast_map::FastMap;

#[derive(Default)]
pub(super) struct MemoryState {
    pub(super) locks: FastMap<String, WriterLease>,
    /// Fencing counters live as long as the store, like Redis counter keys: one `u64` per
    /// key that was ever locked with fencing.
    pub(super) fences: FastMap<String, u64>,
    /// Size of `locks` after the last sweep of expired entries.
    swept_len: usize,
    /// Fair locks' queues: waiting tokens in arrival order, each with the instant its place
    /// lapses unless the waiter asks again. Removed when empty.
    pub(super) queues: FastMap<String, VecDeque<(String, Instant)>>,
    /// Read locks: the readers of a key, and the writers waiting for them to leave. Removed
    /// once neither has a live entry.
    pub(super) readers: FastMap<String, Readers>,
}

/// The readers of one key, or the holders of a semaphore's permits, as the Redis backend keeps
/// them (see `redis/scripts.rs`).
#[derive(Default)]
pub(super) struct Readers {
    /// Each reader's (or permit's) token and the end of its own lease.
    pub(super) shares: FastMap<String, Instant>,
    /// A semaphore's limit: the shares are its permits. `None`: a read lock's readers.
    pub(super) permits: Option<u16>,
    /// Writers waiting for the readers to leave, each with the instant its mark lapses unless
    /// the writer asks again: while one is marked, no new reader joins.
    pub(super) writers: FastMap<String, Instant>,
}

impl Readers {
    /// Drops lapsed shares and marks; the end of the last live share, if any.
    pub(super) fn live_until(&mut self, now: Instant) -> Option<Instant> {
        self.shares.retain(|_, until| *until > now);
        self.writers.retain(|_, until| *until > now);
        self.shares.values().max().copied()
    }

    /// The end of the lease of another upgradable share than `token`'s, if one is held (call
    /// after [`live_until`](Self::live_until)).
    fn upgradable_other_than(&self, token: &str) -> Option<Instant> {
        self.shares
            .iter()
            .find(|(other, _)| crate::token::is_upgradable(other) && other.as_str() != token)
            .map(|(_, until)| *until)
    }

    /// When the first live writer's mark lapses, if a writer waits.
    fn writer_waits(&self) -> Option<Instant> {
        self.writers.values().min().copied()
    }
}

/// A plain lock (a writer): its owner token and the end of its lease.
pub(super) struct WriterLease {
    pub(super) token: String,
    pub(super) expires_at: Instant,
}

impl MemoryState {
    /// The limit of the semaphore `name` if permits of it are held: a name is one kind, so a
    /// lock (or a read lock) asked for on it is refused.
    pub(super) fn semaphore(&mut self, name: &str, now: Instant) -> Option<u16> {
        let readers = self.readers.get_mut(name)?;
        readers.live_until(now)?;
        readers.permits
    }

    /// One attempt of any kind (no queue considered); a name is one kind.
    pub(super) fn attempt(
        &mut self,
        spec: LockSpec<'_>,
        now: Instant,
    ) -> Result<Attempt, BoxError> {
        match (spec.kind, self.semaphore(spec.name, now)) {
            (Kind::Permits(n), _) => self.acquire_permit(spec, n, now),
            (kind, Some(held)) => Err(crate::backend::Refused::kind(Some(held), kind)),
            (Kind::Exclusive, None) => Ok(self.acquire(spec, now)),
            (Kind::Shared, None) => Ok(self.acquire_shared(spec, now)),
        }
    }

    /// What is left of the lease of the plain lock (a writer) holding `name`, if one does.
    pub(super) fn writer_left(&self, name: &str, now: Instant) -> Option<Duration> {
        self.locks
            .get(name)
            .filter(|held| held.expires_at > now)
            .map(|held| held.expires_at - now)
    }

    /// The next fencing token of `name`: its counter, one up.
    fn next_fence(&mut self, name: &str) -> u64 {
        let counter = self.fences.entry(name.to_owned()).or_insert(0);
        *counter += 1;
        *counter
    }

    /// Makes `spec.token` the plain lock of `spec.name` (its lease from `now`): the fencing
    /// token of this grant, when asked for.
    fn grant_write(&mut self, spec: LockSpec<'_>, now: Instant) -> Option<u64> {
        self.locks.insert(
            spec.name.to_owned(),
            WriterLease {
                token: spec.token.to_owned(),
                expires_at: now + spec.lease,
            },
        );
        spec.fencing.then(|| self.next_fence(spec.name))
    }

    /// Takes the lock for `spec` if it is free (no queue considered).
    pub(super) fn acquire(&mut self, spec: LockSpec<'_>, now: Instant) -> Attempt {
        if let Some(ttl) = self.writer_left(spec.name, now) {
            return Attempt::Busy { ttl: Some(ttl) };
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
                            .insert(spec.token.to_owned(), now + crate::backend::FAIR_QUEUE_TTL);
                        ttl = ttl.min(crate::backend::FAIR_QUEUE_TTL / 3);
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
        let fencing_token = self.grant_write(spec, now);
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
            return Err(crate::backend::Refused::kind(None, spec.kind));
        }
        let readers = self.readers.entry(spec.name.to_owned()).or_default();
        if readers.live_until(now).is_some() {
            match readers.permits {
                None => return Err(crate::backend::Refused::kind(None, spec.kind)),
                Some(held) if held != n => return Err(crate::backend::Refused::limit(held, n)),
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
        let fencing_token = spec.fencing.then(|| self.next_fence(spec.name));
        Ok(Attempt::Acquired { fencing_token })
    }

    /// Takes a reader's share of `spec.name` unless a writer holds the key or waits for it.
    fn acquire_shared(&mut self, spec: LockSpec<'_>, now: Instant) -> Attempt {
        if let Some(ttl) = self.writer_left(spec.name, now) {
            return Attempt::Busy { ttl: Some(ttl) };
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
        // One upgradable share at a time (its token says which it is).
        if crate::token::is_upgradable(spec.token)
            && let Some(until) = readers.upgradable_other_than(spec.token)
        {
            return Attempt::Busy {
                ttl: Some(until - now),
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

    /// One upgrade attempt of the upgradable share `spec.token` (see `Backend::upgrade`).
    pub(super) fn upgrade(&mut self, spec: LockSpec<'_>, now: Instant) -> Upgrade {
        if self
            .locks
            .get(spec.name)
            .is_some_and(|held| held.token == spec.token && held.expires_at > now)
        {
            // Upgraded already (a retry).
            let fencing_token = spec
                .fencing
                .then(|| self.fences.get(spec.name).copied().unwrap_or(0));
            return Upgrade::Done { fencing_token };
        }
        let Some(readers) = self.readers.get_mut(spec.name) else {
            return Upgrade::Lost;
        };
        readers.live_until(now);
        if !readers.shares.contains_key(spec.token) {
            return Upgrade::Lost;
        }
        let others = readers
            .shares
            .iter()
            .filter(|(token, _)| token.as_str() != spec.token)
            .map(|(_, until)| *until)
            .max();
        if let Some(until) = others {
            readers
                .writers
                .insert(spec.token.to_owned(), now + crate::backend::FAIR_QUEUE_TTL);
            return Upgrade::Busy {
                ttl: Some((until - now).min(crate::backend::FAIR_QUEUE_TTL / 3)),
            };
        }
        readers.shares.remove(spec.token);
        readers.writers.remove(spec.token);
        if readers.shares.is_empty() && readers.writers.is_empty() {
            self.readers.remove(spec.name);
        }
        let fencing_token = self.grant_write(spec, now);
        Upgrade::Done { fencing_token }
    }

    /// Takes back the mark of an upgrade given up; whether new readers may join now.
    pub(super) fn abandon_upgrade(&mut self, name: &str, token: &str) -> bool {
        let Some(readers) = self.readers.get_mut(name) else {
            return false;
        };
        readers.writers.remove(token).is_some() && readers.writers.is_empty()
    }

    /// Removes what `spec` was just granted, inside the same hold of the store (a set's
    /// acquisition that found a later lock busy).
    pub(super) fn undo(&mut self, spec: &LockSpec<'_>) {
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

    /// Drops expired locks once the map has doubled since the last sweep, so keys that are
    /// never touched again do not pile up; amortized O(1) per acquisition.
    fn sweep(&mut self, now: Instant) {
        if self.locks.len() >= 64 && self.locks.len() >= 2 * self.swept_len {
            self.locks.retain(|_, held| held.expires_at > now);
            self.swept_len = self.locks.len();
        }
    }
}

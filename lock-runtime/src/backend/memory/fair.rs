//! Fair locks: a queue of waiting tokens per lock, served in arrival order.

use std::time::{Duration, Instant};

use super::MemoryBackend;
use super::state::MemoryState;
use crate::backend::{Attempt, LockSpec};
use crate::error::BoxError;

impl MemoryBackend {
    /// A fair attempt: as the Redis backend's fair script (see `redis/scripts.rs`).
    pub(super) fn acquire_fair_now(&self, spec: LockSpec<'_>) -> Result<Attempt, BoxError> {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(held) = state.semaphore(spec.name, now) {
            return Err(crate::backend::Refused::kind(Some(held), spec.kind));
        }
        let head = state.next_in_line(spec.name, now);
        let held = state.writer_left(spec.name, now);
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
        let until = now + crate::backend::FAIR_QUEUE_TTL;
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
    pub(super) fn release_fair_now(&self, name: &str, token: &str) -> bool {
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
}

impl MemoryState {
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
}

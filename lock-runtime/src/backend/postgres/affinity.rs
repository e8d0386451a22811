//! Which pooled connection a plain lock's statements run on ([`Affinity`]).

use crate::backend::sql::slot_of;

/// Which pooled connection a plain lock's statements run on, by owner token: its acquisition
/// takes the connection with the fewest statements in flight (the first of equals: one task
/// alone keeps one warm connection), and its release and renewals follow it there, in order
/// after it — so the release sent in the background for an abandoned acquisition still never
/// overtakes it. A token it does not know runs on its lock name's connection (`slot_of`), as
/// every statement of the other kinds does.
///
/// Why: with each lock's statements on its name's connection, tasks on fresh keys land on
/// random connections — some queue behind others while one sits idle, and a lone task moves
/// between connections. Measured on PostgreSQL (64 tasks on keys of their own, alternated runs
/// of the benchmark's row 7 against the same statements sent by hand): 0.82× → 0.90× the
/// by-hand throughput, fresh-key latency 1.18× → 1.09×.
pub(crate) struct Affinity {
    tokens: [std::sync::Mutex<std::collections::HashMap<Box<str>, usize>>; 8],
    in_flight: Vec<std::sync::atomic::AtomicUsize>,
}

/// Tokens one shard of an [`Affinity`] remembers at most (eight shards); past it, a new
/// token's statements run on its name's connection, as if unknown.
const AFFINITY_SHARD_CAP: usize = 1 << 16;

/// A statement in flight on a connection of an [`Affinity`]: counted until dropped.
pub(crate) struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Affinity {
    pub(crate) fn new(slots: usize) -> Affinity {
        Affinity {
            tokens: Default::default(),
            in_flight: (0..slots).map(|_| Default::default()).collect(),
        }
    }

    fn shard(
        &self,
        token: &str,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<Box<str>, usize>> {
        let shard = &self.tokens[slot_of(token, self.tokens.len())];
        shard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection for an acquisition by `token` of lock `name`: the one its earlier
    /// statements went to if any is remembered (an attempt that failed without an answer may
    /// still land there: the next goes after it), else the least busy, remembered for the token.
    pub(crate) fn pick(&self, token: &str, name: &str) -> usize {
        let mut shard = self.shard(token);
        if let Some(&i) = shard.get(token) {
            return i;
        }
        if shard.len() >= AFFINITY_SHARD_CAP {
            return slot_of(name, self.in_flight.len());
        }
        let mut best = (usize::MAX, 0);
        for (i, n) in self.in_flight.iter().enumerate() {
            let n = n.load(std::sync::atomic::Ordering::Relaxed);
            if n < best.0 {
                best = (n, i);
            }
        }
        shard.insert(token.into(), best.1);
        best.1
    }

    /// The connection of `token`'s statements (its acquisition's), else `name`'s.
    pub(crate) fn of(&self, token: &str, name: &str) -> usize {
        match self.shard(token).get(token) {
            Some(&i) => i,
            None => slot_of(name, self.in_flight.len()),
        }
    }

    /// `token` is answered and not held (any more): its next acquisition picks again.
    pub(crate) fn forget(&self, token: &str) {
        self.shard(token).remove(token);
    }

    /// Counts a statement in flight on connection `i` until the answer is dropped.
    pub(crate) fn busy(&self, i: usize) -> InFlight<'_> {
        let n = &self.in_flight[i];
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_keeps_its_connection_until_forgotten_and_the_least_busy_is_picked() {
        let affinity = Affinity::new(4);
        // Nothing in flight: the first connection, so a lone task keeps one warm.
        assert_eq!(affinity.pick("t1", "a"), 0);
        let busy = affinity.busy(0);
        // Another token goes to the next least busy; `t1` stays where it is.
        assert_eq!(affinity.pick("t2", "b"), 1);
        assert_eq!(affinity.pick("t1", "a"), 0);
        assert_eq!(affinity.of("t1", "a"), 0);
        drop(busy);
        // Forgotten: its statements go by name, and its next acquisition picks afresh.
        affinity.forget("t2");
        assert_eq!(affinity.of("t2", "b"), slot_of("b", 4));
        assert_eq!(affinity.pick("t2", "b"), 0);
    }
}

//! Whose turn it is in a lock's queue on the server (ZooKeeper's nodes, etcd's keys): one rule
//! for both stores, as Apache Curator's `LockInternals` asks the kind's predicate whether a
//! place in line holds the lock or whom it must watch.
//!
//! A queue is ordered by arrival (a node's sequence number, a key's create revision). The
//! rule looks only at the kinds of the entries ahead of a place; each store fetches them its
//! own way and keeps its own checks that its view of the queue is current.

use super::{Kind, Refused};
use crate::error::BoxError;

/// What a place in line is to do, by the kinds ahead of it (see [`turn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// It holds the lock (a reader with only readers ahead, one of a semaphore's first `n`).
    Holds,
    /// A semaphore's first waiter (at `n`): any holder's departure admits it, so it watches
    /// the whole queue.
    FirstInLine,
    /// It waits for the entry at this index of those ahead (oldest first): the last one that
    /// holds it up. Its deletion makes this place a holder or moves it up (it gave up), so a
    /// release wakes only those it may admit.
    WaitFor(usize),
}

/// The turn of a place asking for `asked`, with the kinds of the entries `ahead` of it, oldest
/// first (an iterator that runs both ways and knows its length).
///
/// Curator's read/write recipe: a writer waits for every entry before its own (it watches the
/// one just before), a reader only for the writers before it (it watches the last of them) —
/// so a waiting writer also holds back every reader that comes after it, and readers cannot
/// starve writers.
///
/// A semaphore of `n`: the first `n` entries hold its permits. The first waiter (at `n`) is
/// admitted by any holder's departure, so it watches the queue; every later one watches the
/// entry before it, which wakes it by leaving or, admitted, by writing its own entry once: each
/// departure wakes one waiter.
///
/// Only what decides the answer need be in `ahead`: for a writer, at least the entry just
/// before its own; for a reader, every entry back to the last writer; for a semaphore of `n`,
/// the last `n + 1` at least (the answer is the same for any length past `n`).
pub(crate) fn turn(
    asked: Kind,
    mut ahead: impl DoubleEndedIterator<Item = Kind> + ExactSizeIterator,
) -> Turn {
    let place = ahead.len();
    let blocker = match asked {
        Kind::Exclusive => place.checked_sub(1),
        Kind::Shared => ahead.rposition(|kind| kind != Kind::Shared),
        Kind::Permits(n) if place == n as usize => return Turn::FirstInLine,
        Kind::Permits(n) => (place >= n as usize).then(|| place - 1),
    };
    match blocker {
        Some(blocker) => Turn::WaitFor(blocker),
        None => Turn::Holds,
    }
}

/// An entry of a queue as the rules of upgradable reads see it: its kind, and whether it is an
/// upgradable reader's share (a `Shared` entry whose token is upgradable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub kind: Kind,
    pub upgradable: bool,
}

/// The turn of an upgradable reader's share with the entries `ahead` of it, oldest first: it
/// waits for the last writer ahead, as a reader does, and for another upgradable share ahead
/// (one upgradable holder at a time); plain readers ahead do not hold it up.
pub(crate) fn upgradable_turn(ahead: &[Entry]) -> Turn {
    match ahead
        .iter()
        .rposition(|entry| entry.kind != Kind::Shared || entry.upgradable)
    {
        Some(blocker) => Turn::WaitFor(blocker),
        None => Turn::Holds,
    }
}

/// The turn of an upgrade: the entry at `upgrade` (a writer's entry, which readers that come
/// after it wait for as they would for a writer) made for the upgradable share at `share`,
/// in `queue`, oldest first.
///
/// The upgrade holds the write lock once no other share is held: every entry ahead of the
/// share (readers: the share holds, so no writer is ahead of it) and the plain readers that
/// joined behind it before the first writer. Another upgradable share behind it waits for it
/// and holds nothing, but the plain readers behind that one hold (they wait for writers only).
/// Entries past the first writer hold nothing: that writer waits for the share, which stays,
/// and whatever queued behind the writer waits for it; so a writer queued before the upgrade
/// still comes after it. It waits for the last of those that hold it up.
pub(crate) fn upgrade_turn(queue: &[Entry], share: usize, upgrade: usize) -> Turn {
    let behind = &queue[share + 1..upgrade.max(share + 1)];
    let first_writer = behind
        .iter()
        .position(|entry| entry.kind != Kind::Shared)
        .unwrap_or(behind.len());
    let last_reader_behind = behind[..first_writer]
        .iter()
        .rposition(|entry| !entry.upgradable)
        .map(|at| share + 1 + at);
    match last_reader_behind.or_else(|| share.checked_sub(1)) {
        Some(blocker) => Turn::WaitFor(blocker),
        None => Turn::Holds,
    }
}

/// Why a request of kind `asked` is refused, where `head` is the kind of the oldest entry of
/// the queue ahead of it (`None`: it is the oldest itself). A name is one kind (a semaphore, or
/// a lock with its readers), and a semaphore has one limit: the oldest entry says which.
pub(crate) fn refusal(head: Option<Kind>, asked: Kind) -> Option<BoxError> {
    Refused::between(head?, asked)
}

/// The owner tokens of a client's acquisitions in play on a backend whose waiters queue on its
/// own session or lease (ZooKeeper, etcd): from an acquisition's first attempt until its release
/// is done. A node or key of the client's own session or lease whose token is not here belongs
/// to nobody — an attempt given up whose create landed all the same — and may be deleted.
#[derive(Default)]
pub(crate) struct InPlay(std::sync::Mutex<crate::fast_map::FastSet<String>>);

impl InPlay {
    fn tokens(&self) -> std::sync::MutexGuard<'_, crate::fast_map::FastSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn contains(&self, token: &str) -> bool {
        self.tokens().contains(token)
    }

    /// Runs an acquisition `attempt` of `token`: in play from now on, unless it fails.
    ///
    /// It takes what makes the attempt, not the attempt: a future passed in and awaited would
    /// stand twice in this one's state (the argument, and the future awaited), and every
    /// attempt's box would carry both.
    pub(crate) async fn attempt<T, E, F>(
        &self,
        token: &str,
        attempt: impl FnOnce() -> F,
    ) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        self.tokens().insert(token.to_owned());
        let result = attempt().await;
        if result.is_err() {
            self.tokens().remove(token);
        }
        result
    }

    /// [`attempt`](Self::attempt) of several tokens at once (a set of keys).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) async fn attempt_all<T, E, F>(
        &self,
        tokens: &[&str],
        attempt: impl FnOnce() -> F,
    ) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        self.tokens()
            .extend(tokens.iter().map(|token| (*token).to_owned()));
        let result = attempt().await;
        if result.is_err() {
            self.forget(tokens);
        }
        result
    }

    /// Puts `token` in play: an entry made outside an acquisition (an upgrade's).
    pub(crate) fn insert(&self, token: &str) {
        self.tokens().insert(token.to_owned());
    }

    /// Takes `tokens` out of play: an attempt that wrote nothing.
    pub(crate) fn forget(&self, tokens: &[&str]) {
        let mut in_play = self.tokens();
        for token in tokens {
            in_play.remove(*token);
        }
    }

    /// Runs the `release` of `token`: out of play once it is done, whatever it found. It takes
    /// what makes the release, as [`attempt`](Self::attempt) does.
    pub(crate) async fn release<T, F>(&self, token: &str, release: impl FnOnce() -> F) -> T
    where
        F: std::future::Future<Output = T>,
    {
        let released = release().await;
        self.tokens().remove(token);
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::{Exclusive as W, Permits, Shared as R};

    fn turn_of(asked: Kind, ahead: &[Kind]) -> Turn {
        turn(asked, ahead.iter().copied())
    }

    #[test]
    fn the_head_holds() {
        assert_eq!(turn_of(W, &[]), Turn::Holds);
        assert_eq!(turn_of(R, &[]), Turn::Holds);
        assert_eq!(turn_of(Permits(1), &[]), Turn::Holds);
        assert_eq!(turn_of(Permits(3), &[]), Turn::Holds);
    }

    #[test]
    fn a_writer_waits_for_the_entry_just_before_its_own() {
        assert_eq!(turn_of(W, &[W]), Turn::WaitFor(0));
        assert_eq!(turn_of(W, &[R]), Turn::WaitFor(0));
        assert_eq!(turn_of(W, &[R, R, R]), Turn::WaitFor(2));
        assert_eq!(turn_of(W, &[W, R, W]), Turn::WaitFor(2));
    }

    #[test]
    fn a_reader_behind_readers_only_holds() {
        assert_eq!(turn_of(R, &[R]), Turn::Holds);
        assert_eq!(turn_of(R, &[R, R, R]), Turn::Holds);
    }

    #[test]
    fn a_reader_waits_for_the_last_writer_before_it() {
        assert_eq!(turn_of(R, &[W]), Turn::WaitFor(0));
        assert_eq!(turn_of(R, &[R, R, W]), Turn::WaitFor(2));
        assert_eq!(turn_of(R, &[R, W, R, R]), Turn::WaitFor(1));
        assert_eq!(turn_of(R, &[W, R, W, R]), Turn::WaitFor(2));
        assert_eq!(turn_of(R, &[W, R]), Turn::WaitFor(0));
    }

    #[test]
    fn a_semaphores_first_n_hold_the_next_watches_the_queue_later_ones_their_predecessor() {
        let p = Permits(3);
        assert_eq!(turn_of(p, &[p]), Turn::Holds);
        // n - 1 ahead: the last permit.
        assert_eq!(turn_of(p, &[p, p]), Turn::Holds);
        // n ahead: the first waiter.
        assert_eq!(turn_of(p, &[p, p, p]), Turn::FirstInLine);
        // n + 1 and more ahead: the entry just before.
        assert_eq!(turn_of(p, &[p, p, p, p]), Turn::WaitFor(3));
        assert_eq!(turn_of(p, &[p, p, p, p, p]), Turn::WaitFor(4));
        let one = Permits(1);
        assert_eq!(turn_of(one, &[one]), Turn::FirstInLine);
        assert_eq!(turn_of(one, &[one, one]), Turn::WaitFor(1));
    }

    fn entries(kinds: &str) -> Vec<Entry> {
        kinds
            .chars()
            .map(|c| match c {
                'R' => Entry {
                    kind: R,
                    upgradable: false,
                },
                'U' => Entry {
                    kind: R,
                    upgradable: true,
                },
                _ => Entry {
                    kind: W,
                    upgradable: false,
                },
            })
            .collect()
    }

    #[test]
    fn an_upgradable_share_waits_for_writers_and_other_upgradable_shares_only() {
        assert_eq!(upgradable_turn(&entries("")), Turn::Holds);
        assert_eq!(upgradable_turn(&entries("RRR")), Turn::Holds);
        assert_eq!(upgradable_turn(&entries("RUR")), Turn::WaitFor(1));
        assert_eq!(upgradable_turn(&entries("WRR")), Turn::WaitFor(0));
        assert_eq!(upgradable_turn(&entries("UWR")), Turn::WaitFor(1));
    }

    #[test]
    fn an_upgrade_waits_for_the_shares_held_beside_its_own_and_nothing_queued_behind_a_writer() {
        // Alone: the share at 0, its upgrade entry at 1.
        assert_eq!(upgrade_turn(&entries("UW"), 0, 1), Turn::Holds);
        // Readers ahead of the share: the last of them.
        assert_eq!(upgrade_turn(&entries("RRUW"), 2, 3), Turn::WaitFor(1));
        // Readers that joined behind the share: the last of them.
        assert_eq!(upgrade_turn(&entries("URRW"), 0, 3), Turn::WaitFor(2));
        assert_eq!(upgrade_turn(&entries("RURW"), 1, 3), Turn::WaitFor(2));
        // A writer queued behind the share (before the upgrade): what queued behind it holds
        // nothing, and the writer waits for the share.
        assert_eq!(upgrade_turn(&entries("UWRRW"), 0, 4), Turn::Holds);
        assert_eq!(upgrade_turn(&entries("URWRW"), 0, 4), Turn::WaitFor(1));
        // Another upgradable share behind waits for this one, and holds nothing; the plain
        // readers behind it hold (they wait for writers only).
        assert_eq!(upgrade_turn(&entries("UUW"), 0, 2), Turn::Holds);
        assert_eq!(upgrade_turn(&entries("UURW"), 0, 3), Turn::WaitFor(2));
        assert_eq!(upgrade_turn(&entries("UURUW"), 0, 4), Turn::WaitFor(2));
        assert_eq!(upgrade_turn(&entries("RUURWRW"), 1, 6), Turn::WaitFor(3));
    }

    #[test]
    fn a_partial_view_gives_the_same_answer() {
        // etcd fetches the entries before a place newest first, with a limit: a writer sees
        // only the one just before its own, a semaphore of `n` the last `n + 1`.
        let newest_first = [W, R, R, W];
        let turn = turn(W, newest_first[..1].iter().rev().copied());
        assert_eq!(turn, Turn::WaitFor(0));
        let p = Permits(2);
        let view = [p, p, p];
        assert_eq!(turn_of(p, &view), Turn::WaitFor(2));
        assert_eq!(turn_of(p, &[p, p, p, p, p]), Turn::WaitFor(4));
    }

    #[test]
    fn the_oldest_entry_says_what_the_name_is() {
        assert!(refusal(None, Permits(2)).is_none());
        assert!(refusal(Some(W), R).is_none());
        assert!(refusal(Some(R), W).is_none());
        assert!(refusal(Some(Permits(2)), Permits(2)).is_none());
        let limit = refusal(Some(Permits(2)), Permits(3)).unwrap().to_string();
        assert!(limit.contains("limit of 2 permits"), "{limit}");
        let kind = refusal(Some(Permits(2)), W).unwrap().to_string();
        assert!(kind.contains("a semaphore of 2 permits"), "{kind}");
        let kind = refusal(Some(R), Permits(2)).unwrap().to_string();
        assert!(kind.contains("a lock (or its readers)"), "{kind}");
    }
}

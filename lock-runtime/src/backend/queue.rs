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

    /// Takes `tokens` out of play: an attempt that wrote nothing.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
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

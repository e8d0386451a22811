//! A name's table: every hold on a key that is not one plain lock — readers' shares, a
//! semaphore's permits, fair locks and their queue, a writer waiting for readers (its mark
//! keeps new readers out), an upgrade under way — kept in the key's one value, rewritten by a
//! compare-and-set on its revision (as the plain lock's own writes are).
//!
//! Each place has its own end, in the server's time: a place written now ends its lease after
//! the stamp of the message that wrote it (`+<ms>`); the others keep theirs, resolved against
//! the stamp of the message they were read from (`@<unix ms>`). A write drops the places whose
//! end the last stamp has passed, so a dead holder's share goes within a lease of its
//! departure by the server's clock, and the key's own TTL — the last end among its places —
//! ends the whole table when nobody writes it. A place granted by a write gets that write's
//! revision (`=`), its fencing token.
//!
//! The rules are Redis's (and the SQL tables'): readers share the key while no writer holds
//! it or waits for it; a writer that waits marks the table, and no new reader joins; a
//! semaphore of `n` grants while fewer than `n` permits are held; a fair lock is granted to
//! the oldest waiting place; an upgrade waits for the other shares to leave, keeping new
//! readers out meanwhile. A plain lock that finds the key free is written bare (its token
//! alone), and a table holds it only when other places stay beside it.

use std::time::Duration;

use crate::backend::{Kind, Refused};
use crate::error::BoxError;

/// The first line of a table (a bare token never starts with it: tokens carry no `/`).
pub(super) const TABLE: &str = "distlock-table/1\n";

/// What a place is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// It holds the key (a share, a permit, the lock).
    Held,
    /// It waits: a writer's mark, a fair lock's place in line.
    Waiting,
    /// A held upgradable share whose upgrade waits for the other shares to leave.
    Upgrading,
}

/// When a place ends: in the server's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// At this instant, unix ms by the server's stamps.
    At(u64),
    /// This long after the stamp of the message that writes it.
    For(u64),
}

/// One place of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Place {
    pub token: String,
    pub kind: Kind,
    pub state: State,
    /// The revision that granted it (its fencing token; 0 while it waits); `None`: the write
    /// that carries it.
    pub fence: Option<u64>,
    pub until: Until,
}

impl Place {
    fn holds(&self) -> bool {
        self.state != State::Waiting
    }

    /// Its end, resolved (a place just written ends a lease after `now`).
    pub(super) fn ends(&self, now: u64) -> u64 {
        match self.until {
            Until::At(at) => at,
            Until::For(ms) => now + ms,
        }
    }

    fn upgradable(&self) -> bool {
        self.kind == Kind::Shared && crate::token::is_upgradable(&self.token)
    }
}

/// The places of a table's value, resolved against the stamp (unix ms) and revision of the
/// message it was read from; `None`: not a table (a bare token).
pub(super) fn parse(value: &str, stamp: u64, revision: u64) -> Option<Vec<Place>> {
    let body = value.strip_prefix(TABLE)?;
    let mut places = Vec::new();
    for line in body.lines() {
        let mut fields = line.splitn(4, ' ');
        let (head, fence, until, token) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let mut head = head.chars();
        let state = match head.next()? {
            'h' => State::Held,
            'w' => State::Waiting,
            'u' => State::Upgrading,
            _ => return None,
        };
        let kind = match head.next()? {
            'W' => Kind::Exclusive,
            'R' => Kind::Shared,
            'P' => Kind::Permits(head.as_str().parse().ok()?),
            _ => return None,
        };
        let fence = match fence {
            "=" => revision,
            fence => fence.parse().ok()?,
        };
        let until = match until.split_at_checked(1)? {
            ("@", at) => at.parse().ok()?,
            ("+", ms) => stamp + ms.parse::<u64>().ok()?,
            _ => return None,
        };
        places.push(Place {
            token: token.to_owned(),
            kind,
            state,
            fence: Some(fence),
            until: Until::At(until),
        });
    }
    Some(places)
}

/// The value of a table of `places`.
pub(super) fn encode(places: &[Place]) -> String {
    use std::fmt::Write as _;
    let mut value = String::with_capacity(TABLE.len() + places.len() * 80);
    value.push_str(TABLE);
    for place in places {
        let state = match place.state {
            State::Held => 'h',
            State::Waiting => 'w',
            State::Upgrading => 'u',
        };
        let _ = match place.kind {
            Kind::Exclusive => write!(value, "{state}W"),
            Kind::Shared => write!(value, "{state}R"),
            Kind::Permits(n) => write!(value, "{state}P{n}"),
        };
        let _ = match place.fence {
            Some(fence) => write!(value, " {fence}"),
            None => write!(value, " ="),
        };
        let _ = match place.until {
            Until::At(at) => write!(value, " @{at}"),
            Until::For(ms) => write!(value, " +{ms}"),
        };
        let _ = writeln!(value, " {}", place.token);
    }
    value
}

/// The TTL of a table's key written at about `now`: its last place's end, at least a second.
pub(super) fn key_ttl(places: &[Place], now: u64) -> Duration {
    let last = places
        .iter()
        .map(|place| place.ends(now).saturating_sub(now))
        .max()
        .unwrap_or(0);
    Duration::from_millis(last.max(1))
}

/// Drops the places (but `keep`'s) whose end `now` has passed: whether any went.
pub(super) fn prune(places: &mut Vec<Place>, now: u64, keep: &str) -> bool {
    let before = places.len();
    places.retain(|place| place.token == keep || place.ends(now) > now);
    places.len() != before
}

/// What an acquisition asks of a table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ask<'a> {
    pub token: &'a str,
    pub kind: Kind,
    pub fair: bool,
    /// Made by a waiter (not an acquisition's first, optimistic try): a writer leaves its mark
    /// (a fair lock its place in line) when busy, which its acquisition takes out again if it
    /// ends without the lock.
    pub waiting: bool,
    /// The hold's lease on the store (its lock-delay included), in ms.
    pub lease: u64,
}

/// What an acquisition does with the table it read.
#[derive(Debug)]
pub(super) enum Decision {
    /// Its place holds already (a retry whose first try landed), granted at this revision: its
    /// end moved a lease on (write the table).
    Holds(u64),
    /// Granted: write the table (its place now held, granted by that write).
    Grant,
    /// Busy: write the table first if `write` (its mark made or refreshed, or places that
    /// ended dropped), then wait at most `ttl`.
    Busy { write: bool, ttl: Duration },
    /// The name is another kind (or a semaphore of another limit).
    Refused(BoxError),
}

/// What `ask` does with `places` (pruned of ended places already), at `now` (unix ms, the
/// server's stamp). The table is changed in place as the decision says it is written.
pub(super) fn decide(places: &mut Vec<Place>, ask: Ask<'_>, now: u64) -> Decision {
    let own = places.iter().position(|place| place.token == ask.token);
    if let Some(own) = own
        && places[own].holds()
    {
        places[own].until = Until::For(ask.lease);
        return Decision::Holds(places[own].fence.unwrap_or(0));
    }
    if let Some(head) = places.iter().find(|place| place.token != ask.token)
        && let Some(refused) = Refused::between(head.kind, ask.kind)
    {
        return Decision::Refused(refused);
    }
    let upgradable = ask.kind == Kind::Shared && crate::token::is_upgradable(ask.token);
    // The places that keep this one out, and how long they last at most. Waiting places count
    // only ahead of this one's (a place not made yet comes after every other).
    let blocks = |(at, place): (usize, &Place)| {
        if place.token == ask.token {
            return false;
        }
        let waits_ahead = place.state == State::Waiting && own.is_none_or(|own| at < own);
        match ask.kind {
            // Every holder; a reader that waits ahead (it came first, and goes first: writers
            // do not starve readers); of a fair lock, every place ahead.
            Kind::Exclusive => {
                place.holds() || (waits_ahead && (ask.fair || place.kind == Kind::Shared))
            }
            // A writer that holds, or waits ahead (readers do not starve writers); an upgrade
            // under way; an upgradable share, or request ahead, for an upgradable request.
            Kind::Shared => {
                (place.kind == Kind::Exclusive && (place.holds() || waits_ahead))
                    || place.state == State::Upgrading
                    || (upgradable && place.upgradable() && (place.holds() || waits_ahead))
            }
            Kind::Permits(_) => place.holds(),
        }
    };
    let blockers: Vec<&Place> = places
        .iter()
        .enumerate()
        .filter(|entry| blocks(*entry))
        .map(|(_, place)| place)
        .collect();
    let full = match ask.kind {
        Kind::Permits(n) => blockers.len() >= usize::from(n),
        _ => !blockers.is_empty(),
    };
    if !full {
        let granted = Place {
            token: ask.token.to_owned(),
            kind: ask.kind,
            state: State::Held,
            fence: None,
            until: Until::For(ask.lease),
        };
        match own {
            Some(own) => places[own] = granted,
            None => places.push(granted),
        }
        return Decision::Grant;
    }
    let ends = blockers
        .iter()
        .map(|place| place.ends(now).saturating_sub(now))
        .min()
        .unwrap_or(ask.lease);
    let mut ttl = Duration::from_millis(ends.max(1));
    // A waiting writer or reader keeps a place in line (a writer's mark keeps later readers
    // out), refreshed before it ends; a semaphore's waiters race.
    let mut write = false;
    if ask.kind.permits().is_none() && ask.waiting {
        ttl = ttl.min(Duration::from_millis(ask.lease / 3).max(Duration::from_millis(1)));
        let mark = Place {
            token: ask.token.to_owned(),
            kind: ask.kind,
            state: State::Waiting,
            fence: Some(0),
            until: Until::For(ask.lease),
        };
        match own {
            Some(own) => {
                // Refreshed once half its lease is gone.
                if places[own].ends(now).saturating_sub(now) < ask.lease / 2 {
                    places[own] = mark;
                    write = true;
                }
            }
            None => {
                places.push(mark);
                write = true;
            }
        }
    }
    Decision::Busy { write, ttl }
}

/// What an upgrade of the upgradable share `token` does with the table.
#[derive(Debug)]
pub(super) enum Upgraded {
    /// The share is gone.
    Lost,
    /// No other share holds: the place is now the write lock (write the table).
    Done,
    /// Other shares hold: the place is marked as upgrading (write the table if `write`), and
    /// the upgrade waits at most `ttl`.
    Busy { write: bool, ttl: Duration },
}

/// The upgrade of `token`'s share in `places` at `now`, with the writer's lease `lease` (ms).
pub(super) fn upgrade(places: &mut [Place], token: &str, lease: u64, now: u64) -> Upgraded {
    let Some(own) = places
        .iter()
        .position(|place| place.token == token && place.holds())
    else {
        return Upgraded::Lost;
    };
    let others = places
        .iter()
        .filter(|place| place.token != token && place.holds())
        .map(|place| place.ends(now).saturating_sub(now))
        .min();
    let place = &mut places[own];
    match others {
        None => {
            *place = Place {
                token: token.to_owned(),
                kind: Kind::Exclusive,
                state: State::Held,
                fence: None,
                until: Until::For(lease),
            };
            Upgraded::Done
        }
        Some(ends) => {
            let write = place.state != State::Upgrading;
            place.state = State::Upgrading;
            let ttl = Duration::from_millis(ends.min(lease / 3).max(1));
            Upgraded::Busy { write, ttl }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(token: &str, kind: Kind, state: State, until: u64) -> Place {
        Place {
            token: token.to_owned(),
            kind,
            state,
            fence: Some(7),
            until: Until::At(until),
        }
    }

    fn ask(token: &str, kind: Kind) -> Ask<'_> {
        Ask {
            token,
            kind,
            fair: false,
            waiting: true,
            lease: 3_000,
        }
    }

    #[test]
    fn a_table_round_trips_with_its_own_place_resolved_against_the_stamp() {
        let mut places = vec![
            place("a:1:x", Kind::Shared, State::Held, 5_000),
            place("b:2:y", Kind::Permits(3), State::Upgrading, 6_000),
        ];
        places.push(Place {
            token: "c:3:z".into(),
            kind: Kind::Exclusive,
            state: State::Waiting,
            fence: None,
            until: Until::For(2_500),
        });
        let value = encode(&places);
        let read = parse(&value, 1_000, 42).unwrap();
        assert_eq!(read[0], places[0]);
        assert_eq!(read[1], places[1]);
        assert_eq!(read[2].fence, Some(42));
        assert_eq!(read[2].until, Until::At(3_500));
        assert!(parse("a:1:x", 0, 0).is_none());
        assert!(parse(&format!("{TABLE}hX 1 @2 t\n"), 0, 0).is_none());
    }

    #[test]
    fn readers_share_until_a_writer_holds_or_waits() {
        let mut places = vec![place("r1", Kind::Shared, State::Held, 9_000)];
        assert!(matches!(
            decide(&mut places, ask("r2", Kind::Shared), 1_000),
            Decision::Grant
        ));
        // A writer waits, with a mark, coming back before it ends.
        match decide(&mut places, ask("w", Kind::Exclusive), 1_000) {
            Decision::Busy { write: true, ttl } => assert_eq!(ttl, Duration::from_millis(1_000)),
            other => panic!("{other:?}"),
        }
        assert_eq!(places.last().unwrap().state, State::Waiting);
        // No new reader while it waits: one waits behind it.
        assert!(matches!(
            decide(&mut places, ask("r3", Kind::Shared), 1_000),
            Decision::Busy { write: true, .. }
        ));
        let up = format!("{}u", crate::token::UPGRADABLE);
        assert!(matches!(
            decide(&mut places.clone(), ask(&up, Kind::Shared), 1_000),
            Decision::Busy { .. }
        ));
        // Nor does a writer go ahead of a reader that waits ahead of it.
        let mut reader_first = vec![
            place("w0", Kind::Exclusive, State::Held, 9_000),
            place("r4", Kind::Shared, State::Waiting, 9_000),
        ];
        assert!(matches!(
            decide(&mut reader_first, ask("w1", Kind::Exclusive), 1_000),
            Decision::Busy { write: true, .. }
        ));
        reader_first.remove(0);
        assert!(matches!(
            decide(&mut reader_first, ask("w1", Kind::Exclusive), 1_000),
            Decision::Busy { .. }
        ));
        assert!(matches!(
            decide(&mut reader_first, ask("r4", Kind::Shared), 1_000),
            Decision::Grant
        ));
        places.retain(|place| place.token != "r3");
        // The readers gone, the writer is granted over its own mark.
        places.retain(|place| place.kind != Kind::Shared);
        assert!(matches!(
            decide(&mut places, ask("w", Kind::Exclusive), 1_000),
            Decision::Grant
        ));
        assert_eq!(places.len(), 1);
        assert_eq!(places[0].state, State::Held);
    }

    #[test]
    fn a_semaphore_grants_n_and_refuses_another_limit_or_kind() {
        let p = Kind::Permits(2);
        let mut places = Vec::new();
        assert!(matches!(
            decide(&mut places, ask("a", p), 0),
            Decision::Grant
        ));
        assert!(matches!(
            decide(&mut places, ask("b", p), 0),
            Decision::Grant
        ));
        assert!(matches!(
            decide(&mut places, ask("a", p), 0),
            Decision::Holds(_)
        ));
        assert!(matches!(
            decide(&mut places, ask("c", p), 0),
            Decision::Busy { write: false, .. }
        ));
        assert!(matches!(
            decide(&mut places, ask("c", Kind::Permits(3)), 0),
            Decision::Refused(_)
        ));
        assert!(matches!(
            decide(&mut places, ask("c", Kind::Shared), 0),
            Decision::Refused(_)
        ));
    }

    #[test]
    fn a_fair_lock_goes_to_the_oldest_waiting_place() {
        let fair = |token| Ask {
            fair: true,
            ..ask(token, Kind::Exclusive)
        };
        let mut places = vec![place("a", Kind::Exclusive, State::Held, 9_000)];
        assert!(matches!(
            decide(&mut places, fair("b"), 0),
            Decision::Busy { write: true, .. }
        ));
        assert!(matches!(
            decide(&mut places, fair("c"), 0),
            Decision::Busy { write: true, .. }
        ));
        places.remove(0);
        assert!(matches!(
            decide(&mut places, fair("c"), 0),
            Decision::Busy { .. }
        ));
        assert!(matches!(decide(&mut places, fair("b"), 0), Decision::Grant));
    }

    #[test]
    fn ended_places_are_dropped_and_the_key_lives_as_long_as_its_last() {
        let mut places = vec![
            place("a", Kind::Shared, State::Held, 1_000),
            place("b", Kind::Shared, State::Held, 4_000),
        ];
        assert!(prune(&mut places, 2_000, "z"));
        assert_eq!(places.len(), 1);
        assert_eq!(key_ttl(&places, 2_000), Duration::from_millis(2_000));
    }

    #[test]
    fn an_upgrade_waits_for_the_other_shares_and_keeps_readers_out() {
        let up = format!("{}u", crate::token::UPGRADABLE);
        let mut places = vec![
            place(&up, Kind::Shared, State::Held, 9_000),
            place("r", Kind::Shared, State::Held, 5_000),
        ];
        assert!(matches!(
            upgrade(&mut places, &up, 3_000, 1_000),
            Upgraded::Busy { write: true, .. }
        ));
        assert!(matches!(
            decide(&mut places, ask("r2", Kind::Shared), 1_000),
            Decision::Busy { .. }
        ));
        places.remove(1);
        assert!(matches!(
            upgrade(&mut places, &up, 3_000, 1_000),
            Upgraded::Done
        ));
        assert_eq!(places[0].kind, Kind::Exclusive);
        assert!(matches!(
            upgrade(&mut places, "gone", 3_000, 1_000),
            Upgraded::Lost
        ));
    }
}

//! Readers' shares and a semaphore's permits, as both SQL stores keep them in a lock row: the
//! row's token, the shares, and what the admin API and an acquisition's busy answer show.

use std::time::Duration;

use crate::admin::{Entry, holder_from_record};
use crate::backend::{Attempt, Kind};

/// The `token` of a lock row held by readers. Their shares live in the row's `holder` column,
/// one line each — `<token> <end, unix ms>` — beside the marks of writers waiting for them to
/// leave (`!<token> <lapse, unix ms>`); the row's `expires_at` is the end of the longest live
/// share. A writer's plain acquisition finds the row live and waits, as for another writer,
/// so the layout of a plain lock is unchanged. (A token is `host:pid:ms:hex`: never `readers`,
/// never with a space.)
pub(crate) const READERS: &str = "readers";

/// The `token` of a lock row held by a semaphore's permits is this prefix and the limit its
/// holders took them under (`permits:4`); the permits are shares in `holder`, as readers' are.
pub(crate) const PERMITS: &str = "permits:";

/// A readers' row as the admin API shows it: `row_left_ms` is what is left of the row's lease,
/// which ends with the longest share — the server's clock, read off the shares themselves.
/// Fills `entry`'s readers (with their own remaining leases) and waiters (the writers' marks).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn readers_entry(entry: &mut Entry, holder: &str, row_left_ms: i64) {
    let last = shares(holder)
        .filter(|(_, _, mark)| !mark)
        .map(|(_, end, _)| end)
        .max()
        .unwrap_or(0);
    let now = last - row_left_ms;
    let left = |at: i64| Duration::from_millis((at - now).max(0) as u64);
    entry.readers = shares(holder)
        .filter(|(_, end, mark)| !mark && *end > now)
        .map(|(token, end, _)| (token.to_owned(), Some(left(end))))
        .collect();
    let marks = shares(holder)
        .filter(|(_, lapse, mark)| *mark && *lapse > now)
        .count();
    entry.waiters = (marks > 0).then_some(marks as u64);
    entry.token = None;
    entry.holder = None;
}

/// A readers' row's `holder` column as `(token, end or lapse in unix ms, is a writer's mark)`.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn shares(holder: &str) -> impl Iterator<Item = (&str, i64, bool)> {
    holder.lines().filter_map(|line| {
        let (token, at) = line.split_once(' ')?;
        let at = at.trim().parse().ok()?;
        Some(match token.strip_prefix('!') {
            Some(token) => (token, at, true),
            None => (token, at, false),
        })
    })
}

/// The token of the lock row a share of `kind` lives in: `readers`, or a semaphore's
/// `permits:<n>`.
pub(crate) fn shares_token(kind: Kind) -> String {
    match kind.permits() {
        Some(limit) => format!("{PERMITS}{limit}"),
        None => READERS.to_owned(),
    }
}

/// The limit of a semaphore whose row holds `token`; `None` for a lock's row.
pub(crate) fn semaphore_limit(token: &str) -> Option<u16> {
    token.strip_prefix(PERMITS)?.parse().ok()
}

/// Whether a row holding `token` is a row of shares: `Some` with the semaphore's limit for
/// permits, `Some(None)` for readers; `None` for a lock's row.
pub(crate) fn shares_of(token: Option<&str>) -> Option<Option<u16>> {
    let permits = token.and_then(semaphore_limit);
    (permits.is_some() || token == Some(READERS)).then_some(permits)
}

/// A row of the admin statements: (name, token, holder, acquired ms, remaining ms, fence), as
/// a plain lock's entry (the caller fills in a row of shares).
pub(crate) fn row_entry(
    name: String,
    token: Option<String>,
    record: &str,
    acquired: Option<i64>,
    remaining: Option<i64>,
    fence: Option<i64>,
) -> Entry {
    Entry {
        name,
        token,
        holder: holder_from_record(record, acquired.map(|ms| ms.max(0) as u64)),
        ttl: remaining.map(|ms| Duration::from_millis(ms.max(0) as u64)),
        fencing_token: fence.map(|f| f as u64),
        waiters: None,
        readers: Vec::new(),
        permits: None,
    }
}

/// A busy answer with the holder's remaining lease (in `unit`s: `Duration::from_millis`, or
/// `Duration::from_micros`). No row (released or taken just now, after the statement's
/// snapshot): retry soon.
pub(crate) fn busy_for(left: Option<i64>, unit: fn(u64) -> Duration) -> Attempt {
    Attempt::Busy {
        ttl: Some(unit(left.unwrap_or(0).max(0) as u64)),
    }
}

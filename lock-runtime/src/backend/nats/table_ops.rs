//! Holds kept in a key's table (`table`): each operation reads the key from the stream's
//! leader, changes the table as the rules say, and writes it back expecting the revision it
//! read — read again when another write came between.

use std::sync::Arc;
use std::time::Duration;

use super::news::News;
use super::table::{self, Ask, Decision, Place, State, Upgraded};
use super::{
    Conflict, Conn, FENCE_HEADER, Last, NatsBackend, Put, Written, last_of, write_bytes, write_to,
};
use crate::backend::{Attempt, Hold, Kind, LockSpec, Transient, Upgrade};
use crate::error::BoxError;

/// The header of a table's write that dropped or released a place (or let an upgrade go):
/// the listener wakes the key's waiters on it, as on a delete — of a fair lock's queue, only
/// the oldest waiting place, whose token the header holds (`-`: every waiter).
pub(super) const LEFT_HEADER: &str = "Distlock-Left";

/// How often an operation reads the table again after another write came between.
const TRIES: usize = 16;

/// A table to write: its value, the key's TTL, and its headers.
pub(super) struct TablePut {
    value: String,
    ttl: Duration,
    headers: Vec<(&'static str, String)>,
}

impl TablePut {
    /// `places` (not empty) as written at about `now`, with `left` when a place went.
    fn of(places: &[Place], now: u64, left: bool) -> TablePut {
        TablePut {
            value: table::encode(places),
            ttl: table::key_ttl(places, now),
            headers: if left {
                vec![(LEFT_HEADER, next_in_line(places).to_owned())]
            } else {
                Vec::new()
            },
        }
    }

    pub(super) async fn write(
        &self,
        conn: &Conn,
        subject: String,
        expected: u64,
    ) -> Result<Result<u64, Conflict>, BoxError> {
        let put = Put {
            value: self.value.as_bytes(),
            lease: self.ttl,
            headers: &self.headers,
        };
        write_bytes(conn, subject, Some(expected), Some(put)).await
    }
}

/// Whom a departure from `places` wakes: the oldest waiting place of a fair lock's queue (a
/// table of writers only), or `-`: every waiter of the key (readers, permits, writers' marks).
fn next_in_line(places: &[Place]) -> &str {
    let queue = places.iter().all(|place| place.kind == Kind::Exclusive);
    places
        .iter()
        .find(|place| queue && place.state == State::Waiting)
        .map_or("-", |place| place.token.as_str())
}

/// The key as a table: its places (none for a free key), the revision a write expects and the
/// stamp (unix ms) its places are judged by; `Err` with the message when it holds a plain
/// lock's bare token, and that token.
fn read_table(last: Option<&Last>) -> Result<(Vec<Place>, u64, u64), (&Last, &str)> {
    let Some(last) = last else {
        return Ok((Vec::new(), 0, super::unix_now().as_millis() as u64));
    };
    match &last.token {
        None => Ok((Vec::new(), last.revision, last.stamp)),
        Some(value) => match table::parse(value, last.stamp, last.revision) {
            Some(places) => Ok((places, last.revision, last.stamp)),
            None => Err((last, value)),
        },
    }
}

/// Writes `places` over `expected` (or deletes the key when none stays).
async fn write_places(
    conn: &Conn,
    subject: &str,
    expected: u64,
    places: &[Place],
    now: u64,
    left: bool,
) -> Result<Result<u64, Conflict>, BoxError> {
    if places.is_empty() {
        return write_to(conn, subject.to_owned(), Some(expected), None).await;
    }
    TablePut::of(places, now, left)
        .write(conn, subject.to_owned(), expected)
        .await
}

/// What [`leave`] did.
pub(super) enum Left {
    /// The place went; the key was deleted by this revision (no place stayed), or rewritten.
    Gone { deleted: Option<u64> },
    /// No place of the token's was there.
    NotThere,
}

/// Takes `token`'s place (held or waiting) out of the table at `subject`, or deletes the
/// key if it holds `token` bare; `None`: another write came between every try.
pub(super) async fn leave(conn: &Conn, subject: &str, token: &str) -> Result<Left, BoxError> {
    for _ in 0..TRIES {
        let last = last_of(conn, subject).await?;
        if let Some(left) = leave_once(conn, subject, token, last.as_ref()).await? {
            return Ok(left);
        }
    }
    Err(Transient::wrap(format!(
        "`{subject}` changed under {TRIES} attempts to take a place out of it"
    )))
}

/// One try of [`leave`] over `last` as read; `None`: another write came between.
async fn leave_once(
    conn: &Conn,
    subject: &str,
    token: &str,
    last: Option<&Last>,
) -> Result<Option<Left>, BoxError> {
    let (mut places, revision, now) = match read_table(last) {
        Ok(read) => read,
        Err((last, bare)) if bare == token => {
            return Ok(
                match write_to(conn, subject.to_owned(), Some(last.revision), None).await? {
                    Ok(deleted) => Some(Left::Gone {
                        deleted: Some(deleted),
                    }),
                    Err(Conflict) => None,
                },
            );
        }
        Err(_) => return Ok(Some(Left::NotThere)),
    };
    let Some(own) = places.iter().position(|place| place.token == token) else {
        return Ok(Some(Left::NotThere));
    };
    places.remove(own);
    table::prune(&mut places, now, token);
    Ok(
        match write_places(conn, subject, revision, &places, now, true).await? {
            Ok(written) => Some(Left::Gone {
                deleted: places.is_empty().then_some(written),
            }),
            Err(Conflict) => None,
        },
    )
}

impl NatsBackend {
    /// An acquisition of a place in `spec.name`'s table (a reader's share, a permit, a fair
    /// lock, a plain lock that found a table), over `read` when the key was just read.
    pub(super) async fn acquire_place(
        &self,
        conn: &Arc<Conn>,
        spec: LockSpec<'_>,
        mut read: Option<Last>,
    ) -> Result<Attempt, BoxError> {
        let lease = spec.lease.as_millis() as u64;
        // The guard counts its lease from the attempt's start: an attempt that keeps losing
        // races for the table (many waiters rewriting it) answers busy after a tenth of the
        // lease, and the next one starts afresh, rather than be granted with its lease spent.
        let started = tokio::time::Instant::now();
        for tried in 0..TRIES {
            if tried > 0 && started.elapsed() >= spec.lease / 10 {
                return Ok(Attempt::Busy {
                    ttl: Some(Duration::from_millis(1)),
                });
            }
            let last = match read.take() {
                Some(last) => Some(last),
                None => self.last(conn, spec.name).await?,
            };
            let (mut places, revision, now) = match read_table(last.as_ref()) {
                Ok(read) => read,
                Err((last, bare)) => {
                    if bare == spec.token {
                        // A retry whose plain put landed.
                        return self.landed(conn, spec, last).await;
                    }
                    // A plain lock holds the key: a semaphore is another kind; the others wait
                    // for its release (a delete wakes them).
                    if let Some(refused) =
                        crate::backend::Refused::between(Kind::Exclusive, spec.kind)
                    {
                        return Err(refused);
                    }
                    self.hear(spec.name, Some(News::Held));
                    return Ok(Attempt::Busy { ttl: last.ttl });
                }
            };
            let pruned = table::prune(&mut places, now, spec.token);
            let ask = Ask {
                token: spec.token,
                kind: spec.kind,
                fair: spec.fair,
                waiting: spec.waiting,
                lease,
            };
            match table::decide(&mut places, ask, now) {
                // Its place, granted by an earlier try (maybe long before), renewed: the guard
                // counts its lease from this attempt.
                Decision::Holds(fence) => {
                    let renewed = (&places[..], now, pruned);
                    if self
                        .write_renewed(conn, spec, renewed, revision, fence)
                        .await?
                    {
                        return Ok(Attempt::Acquired {
                            fencing_token: spec.fencing.then_some(fence),
                        });
                    }
                }
                Decision::Refused(refused) => return Err(refused),
                Decision::Grant => {
                    // A plain lock alone on the key is written bare, as on a free key.
                    let bare = spec.kind == Kind::Exclusive && !spec.fair && places.len() == 1;
                    let put = (!bare).then(|| TablePut::of(&places, now, pruned));
                    if let Ok(granted) = self.put_in_flight(conn, spec, revision, put).await? {
                        self.hear(spec.name, None);
                        return Ok(Attempt::Acquired {
                            fencing_token: spec.fencing.then_some(granted),
                        });
                    }
                }
                Decision::Busy { write, ttl } => {
                    self.hear(spec.name, Some(News::Held));
                    if !write && !pruned {
                        return Ok(Attempt::Busy { ttl: Some(ttl) });
                    }
                    let written = if write {
                        // The waiter's mark: its release takes it out again.
                        let put = TablePut::of(&places, now, pruned);
                        self.put_in_flight(conn, spec, revision, Some(put)).await?
                    } else {
                        write_places(conn, &self.subject(spec.name), revision, &places, now, true)
                            .await?
                    };
                    if written.is_ok() {
                        return Ok(Attempt::Busy { ttl: Some(ttl) });
                    }
                }
            }
        }
        Ok(Attempt::Busy {
            ttl: Some(Duration::from_millis(50)),
        })
    }

    /// The renewal of a place: its end moved a lease on from this write's stamp (the places
    /// that ended dropped on the way).
    pub(super) async fn renew_place(
        &self,
        conn: &Arc<Conn>,
        spec: LockSpec<'_>,
    ) -> Result<bool, BoxError> {
        for _ in 0..TRIES {
            let last = self.last(conn, spec.name).await?;
            let Ok((mut places, revision, now)) = read_table(last.as_ref()) else {
                self.forget(spec.token);
                return Ok(false);
            };
            let pruned = table::prune(&mut places, now, spec.token);
            let Some(own) = places
                .iter_mut()
                .find(|place| place.token == spec.token && place.state != State::Waiting)
            else {
                self.forget(spec.token);
                return Ok(false);
            };
            if own.ends(now) <= now {
                // Ended before this renewal was read: somebody may have been granted since.
                self.forget(spec.token);
                return Ok(false);
            }
            own.until = table::Until::For(spec.lease.as_millis() as u64);
            let granted = own.fence.unwrap_or(0);
            let renewed = (&places[..], now, pruned);
            if self
                .write_renewed(conn, spec, renewed, revision, granted)
                .await?
            {
                return Ok(true);
            }
        }
        Err(Transient::wrap(format!(
            "`{}` changed under {TRIES} attempts to renew a place in it",
            spec.name
        )))
    }

    /// Writes `places` (as of `now`, `pruned` of ended places), in which `spec.token`'s place
    /// was renewed, over `revision` — as a plain lock's renewal does, with the grant's revision
    /// (the watch skips it) — and remembers the write; `false`: another write came between.
    async fn write_renewed(
        &self,
        conn: &Conn,
        spec: LockSpec<'_>,
        (places, now, pruned): (&[Place], u64, bool),
        revision: u64,
        granted: u64,
    ) -> Result<bool, BoxError> {
        let mut put = TablePut::of(places, now, pruned);
        put.headers.push((FENCE_HEADER, granted.to_string()));
        let subject = self.subject(spec.name);
        let Ok(written) = put.write(conn, subject, revision).await? else {
            return Ok(false);
        };
        let known = Written {
            last: written,
            granted,
            table: true,
        };
        self.remember(spec.token, known);
        Ok(true)
    }

    /// A release's try over `last` as read: `Some(deleted)` what it found (whether the place
    /// was there), `None`: another write came between.
    pub(super) async fn leave_place(
        &self,
        conn: &Conn,
        hold: Hold<'_>,
        last: Last,
    ) -> Result<Option<bool>, BoxError> {
        let subject = self.subject(hold.name);
        Ok(
            match leave_once(conn, &subject, hold.token, Some(&last)).await? {
                Some(Left::Gone { deleted }) => {
                    self.forget(hold.token);
                    if let Some(revision) = deleted {
                        let freed = News::Freed(revision, tokio::time::Instant::now());
                        self.hear(hold.name, Some(freed));
                    }
                    Some(true)
                }
                Some(Left::NotThere) => {
                    self.forget(hold.token);
                    Some(false)
                }
                None => None,
            },
        )
    }

    /// An upgrade of the upgradable share `spec.token`: the write lock once no other share
    /// holds; until then its place keeps new readers out.
    pub(super) async fn upgrade_place(&self, spec: LockSpec<'_>) -> Result<Upgrade, BoxError> {
        let conn = self.conn().await.map_err(Transient::wrap)?;
        let subject = self.subject(spec.name);
        for _ in 0..TRIES {
            let last = self.last(&conn, spec.name).await?;
            let Ok((mut places, revision, now)) = read_table(last.as_ref()) else {
                return Ok(Upgrade::Lost);
            };
            let pruned = table::prune(&mut places, now, spec.token);
            if places
                .iter()
                .any(|place| place.token == spec.token && place.ends(now) <= now)
            {
                return Ok(Upgrade::Lost);
            }
            let lease = spec.lease.as_millis() as u64;
            let (put, busy) = match table::upgrade(&mut places, spec.token, lease, now) {
                Upgraded::Lost => return Ok(Upgrade::Lost),
                Upgraded::Done => (TablePut::of(&places, now, pruned), None),
                Upgraded::Busy { write, ttl } if write || pruned => {
                    (TablePut::of(&places, now, pruned), Some(ttl))
                }
                Upgraded::Busy { ttl, .. } => return Ok(Upgrade::Busy { ttl: Some(ttl) }),
            };
            if let Ok(written) = put.write(&conn, subject.clone(), revision).await? {
                if let Some(ttl) = busy {
                    return Ok(Upgrade::Busy { ttl: Some(ttl) });
                }
                self.remember(
                    spec.token,
                    Written {
                        last: written,
                        granted: written,
                        table: true,
                    },
                );
                return Ok(Upgrade::Done {
                    fencing_token: spec.fencing.then_some(written),
                });
            }
        }
        Ok(Upgrade::Busy {
            ttl: Some(Duration::from_millis(50)),
        })
    }

    /// An upgrade given up: the share holds as it did, and readers may join again.
    pub(super) async fn abandon_place(&self, spec: LockSpec<'_>) -> Result<(), BoxError> {
        let conn = self.conn().await.map_err(Transient::wrap)?;
        let subject = self.subject(spec.name);
        for _ in 0..TRIES {
            let last = self.last(&conn, spec.name).await?;
            let Ok((mut places, revision, now)) = read_table(last.as_ref()) else {
                return Ok(());
            };
            let Some(own) = places
                .iter_mut()
                .find(|place| place.token == spec.token && place.state == State::Upgrading)
            else {
                return Ok(());
            };
            own.state = State::Held;
            table::prune(&mut places, now, spec.token);
            if write_places(&conn, &subject, revision, &places, now, true)
                .await?
                .is_ok()
            {
                return Ok(());
            }
        }
        Err(Transient::wrap(format!(
            "`{}` changed under {TRIES} attempts to give an upgrade up",
            spec.name
        )))
    }
}

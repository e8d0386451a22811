//! The admin API on advisory locks: who holds a key (from `pg_locks` and the holders'
//! comments in `pg_stat_activity`), the held locks matching a pattern, a forced release (the
//! holders' sessions ended), the server's version; and a release whose unlock got no answer.

use std::collections::HashMap;
use std::time::Duration;

use tokio_postgres::SimpleQueryMessage;

use super::AdvisoryBackend;
use super::note::{Note, parse_note};
use crate::admin::{Entry, Listing, advisory_key};
use crate::backend::postgres::PgError;
use crate::backend::{Admin, Freed, Hold, Released};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl Admin for AdvisoryBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let found = self.held(Some(advisory_key(name))).await?;
            Ok(entries(found).into_iter().find(|entry| entry.name == name))
        })
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let mut entries: Vec<Entry> = entries(self.held(None).await?)
                .into_iter()
                .filter(|e| listing.matches(&e.name))
                .collect();
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            entries.truncate(listing.limit);
            Ok(entries)
        })
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            let key = advisory_key(name);
            let found = self.held(Some(key)).await?;
            let Some(entry) = entries(found).into_iter().find(|entry| entry.name == name) else {
                return Ok(None);
            };
            // Ending a session only signals its backend; the lock is free once the backend has
            // exited. Wait for that (PostgreSQL 14+, which this mode requires), so that the lock
            // is free when this returns: without the wait, a loaded server still showed it held
            // right after (conformance's `the_admin_api_shows_readers`, eight tests at a time).
            let text = format!(
                "SELECT count(pg_terminate_backend(l.pid, {FORCE_RELEASE_WAIT_MS})) \
                 FROM pg_locks l WHERE {} AND l.granted",
                lock_match(key)
            );
            self.query_once(&text).await?;
            Ok(Some(entry))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let version = self.query_once("SHOW server_version").await?;
            Ok(format!("PostgreSQL {version} (advisory locks)"))
        })
    }
}

/// How long a forced release waits for each holder's session to end (milliseconds).
const FORCE_RELEASE_WAIT_MS: u64 = 5_000;

/// The `pg_locks` condition for the advisory lock `key` (a bigint key: high half in `classid`,
/// low half in `objid`, `objsubid` 1) in this database.
fn lock_match(key: i64) -> String {
    let key = key as u64;
    format!(
        "l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = {} AND l.objid = {} \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        key >> 32,
        key & 0xffff_ffff
    )
}

impl AdvisoryBackend {
    /// The locks distlock holds on this database (only `key`'s if given), from `pg_locks` and
    /// the holders' comments in `pg_stat_activity`.
    /// A release whose unlock failed (no answer, a broken connection): its connection is
    /// dropped. Asked on another connection: if the session still holds the lock, it is ended
    /// (`pg_terminate_backend`) — released; if not, the unlock or the session's end freed it —
    /// ambiguous, as a retried release is; if the server cannot be asked, the release failed.
    pub(super) async fn after_failed_release(
        &self,
        hold: Hold<'_>,
        error: PgError,
    ) -> Result<Released, BoxError> {
        let check = async {
            let held = self.held(Some(advisory_key(hold.name))).await?;
            let ours = held
                .iter()
                .find(|holding| holding.granted && holding.note.token == hold.token);
            let Some(Holding { pid, .. }) = ours else {
                return Ok::<_, BoxError>(Released::Ambiguous { alive_until: None });
            };
            self.query_once(&format!("SELECT pg_terminate_backend({pid})"))
                .await?;
            Ok(Released::Deleted)
        };
        check.await.map_err(|checking| {
            format!(
                "the release got no answer ({error}), and the server could not be asked \
                 whether the lock is still held ({checking})"
            )
            .into()
        })
    }

    /// Every distlock session holding or waiting for an advisory lock in this database (only
    /// for `key` if given), from `pg_locks` and the sessions' comments in `pg_stat_activity`.
    async fn held(&self, key: Option<i64>) -> Result<Vec<Holding>, BoxError> {
        let condition = match key {
            Some(key) => lock_match(key),
            None => "l.locktype = 'advisory' AND l.objsubid = 1 AND l.database = \
                     (SELECT oid FROM pg_database WHERE datname = current_database())"
                .to_owned(),
        };
        let text = format!(
            "SELECT a.query, a.state, \
             (extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint, a.pid, \
             l.granted, l.mode \
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE {condition}"
        );
        let client = self.connection().await?;
        let messages = self
            .simple(&client, &text, "the advisory-lock inspection")
            .await?;
        self.give_back_connection(client);
        let mut found = Vec::new();
        for message in &messages {
            let SimpleQueryMessage::Row(row) = message else {
                continue;
            };
            let Some(mut note) = row.get(0).and_then(parse_note) else {
                continue;
            };
            // The server's word over the comment's.
            note.reader = row.get(5) == Some("ShareLock");
            let idle = row.get(1) == Some("idle");
            let since: u64 = row.get(2).and_then(|v| v.parse().ok()).unwrap_or(0);
            let ttl = if idle {
                note.lease.saturating_sub(Duration::from_millis(since))
            } else {
                note.lease
            };
            found.push(Holding {
                pid: row.get(3).and_then(|v| v.parse().ok()).unwrap_or(0),
                granted: row.get(4) == Some("t"),
                ttl,
                note,
            });
        }
        // An upgraded read's session holds the write lock beside its share: shown as the
        // writer it is.
        let writers: Vec<i32> = found
            .iter()
            .filter(|h| h.granted && !h.note.reader)
            .map(|h| h.pid)
            .collect();
        found.retain(|h| !(h.granted && h.note.reader && writers.contains(&h.pid)));
        Ok(found)
    }
}

/// A distlock session's advisory lock, granted or waited for.
struct Holding {
    /// The server process of the session.
    pid: i32,
    granted: bool,
    /// What is left of its lease (counted from its last statement).
    ttl: Duration,
    note: Note,
}

/// The held locks among `found`, by name: a writer's, or its readers (longest share first),
/// with the requests waiting for it.
fn entries(found: Vec<Holding>) -> Vec<Entry> {
    let mut by_name: HashMap<String, Entry> = HashMap::new();
    let mut waiting: HashMap<String, u64> = HashMap::new();
    for holding in found {
        let Holding {
            granted, ttl, note, ..
        } = holding;
        if !granted {
            *waiting.entry(note.name).or_default() += 1;
            continue;
        }
        let entry = by_name.entry(note.name.clone()).or_insert_with(|| Entry {
            name: note.name.clone(),
            ..Entry::default()
        });
        entry.fencing_token = entry.fencing_token.max(note.fence);
        if note.reader {
            entry.readers.push((note.token, Some(ttl)));
        } else {
            entry.token = Some(note.token);
            entry.ttl = Some(ttl);
        }
    }
    by_name
        .into_values()
        .map(|mut entry| {
            entry.readers.sort_by_key(|r| std::cmp::Reverse(r.1));
            entry.waiters = waiting.get(&entry.name).copied();
            entry
        })
        .collect()
}

//! The admin API on named locks: who holds a key, the held locks matching a pattern, a forced
//! release (the holder's session ended), the server's version — read from the server's list
//! of metadata locks, where each holder's note locks name its owner token, lease and fencing
//! token (see `names`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::names::{NOTE, is_hashed, parse_note, sql};
use super::{NamedBackend, View};
use crate::admin::{Entry, Listing};
use crate::backend::Admin;
use crate::backend::Freed;
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// How long a forced release waits for the holder's session to end.
const FORCE_RELEASE_WAIT: Duration = Duration::from_secs(5);

impl Admin for NamedBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let found = self.held(Some(name)).await?;
            Ok(found
                .into_iter()
                .find(|(_, entry)| entry.name == name)
                .map(|(_, e)| e))
        })
    }

    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let mut entries: Vec<Entry> = self
                .held(None)
                .await?
                .into_iter()
                .map(|(_, entry)| entry)
                .filter(|e| listing.matches(&e.name))
                .collect();
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            entries.truncate(listing.limit);
            Ok(entries)
        })
    }

    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            let found = self.held(Some(name)).await?;
            let Some((id, entry)) = found.into_iter().find(|(_, entry)| entry.name == name) else {
                return Ok(None);
            };
            self.kill("CONNECTION", id).await?;
            // The lock is free once the killed session has ended: wait for that, so that it
            // is free when this returns.
            let deadline = tokio::time::Instant::now() + FORCE_RELEASE_WAIT;
            loop {
                let holder: Option<Option<u32>> = self
                    .first_once(
                        "asking who holds the lock",
                        "SELECT IS_USED_LOCK(?)",
                        &[self.lock(name).as_bytes()],
                    )
                    .await?;
                if holder.flatten() != Some(id) || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(Some(entry))
        })
    }

    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let version: Option<String> = self
                .first_once("reading the version", "SELECT VERSION()", &[])
                .await?;
            Ok(format!("{} (named locks)", version.unwrap_or_default()))
        })
    }
}

impl NamedBackend {
    /// The named locks distlock holds on this server (only `name`'s if given), each with the
    /// holder's connection id.
    async fn held(&self, name: Option<&str>) -> Result<Vec<(u32, Entry)>, BoxError> {
        let only = if name.is_some() {
            "= IS_USED_LOCK(?)"
        } else {
            "IS NOT NULL"
        };
        let text = match &self.view {
            View::MariaDb => format!(
                "SELECT m.THREAD_ID, m.TABLE_SCHEMA, p.COMMAND, CAST(p.TIME_MS AS SIGNED) \
                 FROM information_schema.METADATA_LOCK_INFO m \
                 JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID \
                 WHERE m.LOCK_TYPE = 'User lock' AND m.THREAD_ID {only}"
            ),
            View::MySql => format!(
                "SELECT t.PROCESSLIST_ID, m.OBJECT_NAME, t.PROCESSLIST_COMMAND, \
                 t.PROCESSLIST_TIME * 1000 FROM performance_schema.metadata_locks m \
                 JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID \
                 WHERE m.OBJECT_TYPE = 'USER LEVEL LOCK' AND m.LOCK_STATUS = 'GRANTED' \
                 AND t.PROCESSLIST_ID {only}"
            ),
            View::None(why) => {
                return Err(
                    format!("this server does not show who holds a named lock: {why}").into(),
                );
            }
        };
        let lock = name.map(|name| self.lock(name));
        let params: Vec<&[u8]> = lock.iter().map(|l| l.as_bytes()).collect();
        let text = sql(&text, &params);
        let conn = self.connection().await?;
        let rows: Vec<(u32, String, Option<String>, Option<i64>)> = {
            use mysql_async::prelude::Queryable;
            let mut c = conn.conn.lock().await;
            crate::backend::sql::errors::timed(
                "the named-lock inspection",
                self.settings.response_timeout,
                c.query(text),
            )
            .await?
        };
        self.give_back(conn);
        // By connection: its locks, and how long it has been idle.
        let mut by_id: BTreeMap<u32, (Vec<String>, Duration)> = BTreeMap::new();
        for (id, lock, command, ms) in rows {
            let idle = match command.as_deref() {
                Some("Sleep") => Duration::from_millis(ms.unwrap_or(0).max(0) as u64),
                _ => Duration::ZERO,
            };
            let held = by_id.entry(id).or_insert_with(|| (Vec::new(), idle));
            held.0.push(lock);
        }
        let hashed: Vec<String> = by_id
            .values()
            .flat_map(|(locks, _)| locks.iter())
            .filter(|lock| is_hashed(lock))
            .cloned()
            .collect();
        let keys = self.keys_of(&hashed).await;
        let scope = match self.database.as_str() {
            "" => String::new(),
            database => format!("{database}/"),
        };
        let scope = scope.as_str();
        let mut found = Vec::new();
        for (id, (locks, idle)) in by_id {
            let Some(note) = parse_note(locks.iter().map(String::as_str)) else {
                continue;
            };
            for lock in locks.iter().filter(|lock| !lock.starts_with(NOTE)) {
                // This database's: a verbatim `<database>/<name>`, or a hashed name recorded
                // in its `<table>_names` (the locks of other databases are theirs).
                let name = match (keys.get(lock), scope) {
                    (Some(key), _) => key.clone(),
                    (None, "") => lock.clone(),
                    (None, scope) => match lock.strip_prefix(scope) {
                        Some(name) => name.to_owned(),
                        None => continue,
                    },
                };
                found.push((
                    id,
                    Entry {
                        name,
                        token: Some(note.token.clone()),
                        ttl: Some(note.lease.saturating_sub(idle)),
                        fencing_token: note.fence,
                        ..Entry::default()
                    },
                ));
            }
        }
        Ok(found)
    }

    /// The keys of the hashed lock names `locks`, from `<table>_names` (those it has).
    async fn keys_of(&self, locks: &[String]) -> BTreeMap<String, String> {
        let mut keys = BTreeMap::new();
        if locks.is_empty() {
            return keys;
        }
        let marks = vec!["?"; locks.len()].join(", ");
        let text = format!(
            "SELECT lock_name, name FROM {} WHERE lock_name IN ({marks})",
            self.names
        );
        let params: Vec<&[u8]> = locks.iter().map(|l| l.as_bytes()).collect();
        let text = sql(&text, &params);
        let Ok(conn) = self.connection().await else {
            return keys;
        };
        let rows: Result<Vec<(String, Vec<u8>)>, _> = {
            use mysql_async::prelude::Queryable;
            let mut c = conn.conn.lock().await;
            crate::backend::sql::errors::timed(
                "reading hashed names",
                self.settings.response_timeout,
                c.query(text),
            )
            .await
        };
        self.give_back(conn);
        for (lock, name) in rows.unwrap_or_default() {
            if let Ok(name) = String::from_utf8(name) {
                keys.insert(lock, name);
            }
        }
        keys
    }
}

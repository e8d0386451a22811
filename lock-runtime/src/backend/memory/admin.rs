//! The admin API on the in-process store.

use std::time::Instant;

use super::MemoryBackend;
use crate::admin::{ChangeFeed, Entry, Listing};
use crate::backend::Admin;
use crate::backend::Freed;
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl MemoryBackend {
    /// The live lock `name` — a writer, or its readers — for the admin API.
    fn entry(&self, name: &str, now: Instant) -> Option<Entry> {
        let mut state = self.state();
        let fencing_token = state.fences.get(name).copied();
        if let Some(held) = state.locks.get(name).filter(|held| held.expires_at > now) {
            return Some(Entry {
                name: name.to_owned(),
                token: Some(held.token.clone()),
                holder: None,
                ttl: Some(held.expires_at - now),
                fencing_token,
                waiters: state.queues.get(name).map(|q| q.len() as u64),
                readers: Vec::new(),
                permits: None,
            });
        }
        let readers = state.readers.get_mut(name)?;
        let until = readers.live_until(now)?;
        Some(Entry {
            name: name.to_owned(),
            token: None,
            holder: None,
            ttl: Some(until - now),
            fencing_token,
            waiters: (!readers.writers.is_empty()).then_some(readers.writers.len() as u64),
            readers: readers
                .shares
                .iter()
                .map(|(token, until)| (token.clone(), Some(*until - now)))
                .collect(),
            permits: readers.permits,
        })
    }
}

impl Admin for MemoryBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move { Ok(self.entry(name, Instant::now())) })
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let now = Instant::now();
            let matches = |name: &String| listing.matches(name);
            let names: Vec<String> = {
                let state = self.state();
                let writers = state
                    .locks
                    .iter()
                    .filter(|(name, held)| held.expires_at > now && matches(name))
                    .map(|(name, _)| name.clone());
                let read = state
                    .readers
                    .iter()
                    .filter(|(name, readers)| {
                        readers.shares.values().any(|until| *until > now) && matches(name)
                    })
                    .map(|(name, _)| name.clone());
                writers.chain(read).take(listing.limit).collect()
            };
            Ok(names
                .iter()
                .filter_map(|name| self.entry(name, now))
                .collect())
        })
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            let now = Instant::now();
            let entry = self.entry(name, now);
            if entry.as_ref().is_some_and(|e| !e.readers.is_empty()) {
                // Every reader's share goes at once; their holders learn it at their next
                // renewal.
                self.state().readers.remove(name);
                self.hub.notify(name);
            }
            let token = entry.as_ref().and_then(|e| e.token.clone());
            if let Some(token) = token {
                if self.state().queues.contains_key(name) {
                    self.release_fair_now(name, &token);
                } else {
                    self.release_now(name, &token);
                }
            }
            self.changed();
            Ok(entry)
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async {
            Ok(format!(
                "in-process (lock-runtime {})",
                env!("CARGO_PKG_VERSION")
            ))
        })
    }
    fn changes<'a>(
        &'a self,
        _prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChangeFeed>, BoxError>> {
        let feed = ChangeFeed::of(self.changes.subscribe());
        Box::pin(async move { Ok(Some(feed)) })
    }
}

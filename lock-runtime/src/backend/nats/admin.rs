//! The admin API on NATS: a lock is its key's last message; the bucket's subjects list them.

use futures_util::TryStreamExt as _;

use std::time::Duration;

use super::{EVENTS, FENCE_HEADER, Last, NatsBackend, table};
use crate::admin::{ChangeFeed, Entry, Finding, Listing};
use crate::backend::Kind;
use crate::backend::{Admin, Freed};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl NatsBackend {
    fn entry(name: &str, last: Last) -> Option<Entry> {
        let value = last.token?;
        let Some(mut places) = table::parse(&value, last.stamp, last.revision) else {
            return Some(Entry {
                name: name.to_owned(),
                token: Some(value),
                ttl: last.ttl,
                fencing_token: Some(last.granted),
                ..Entry::default()
            });
        };
        // The places that ended but were not dropped yet are gone already.
        let now = super::unix_now().as_millis() as u64;
        places.retain(|place| place.ends(now) > now);
        let left = |place: &table::Place| Some(Duration::from_millis(place.ends(now) - now));
        let waiters = places
            .iter()
            .filter(|place| place.state == table::State::Waiting)
            .count();
        let writer = places
            .iter()
            .find(|place| place.kind == Kind::Exclusive && place.state == table::State::Held);
        let mut readers: Vec<(String, Option<Duration>)> = places
            .iter()
            .filter(|place| place.kind != Kind::Exclusive && place.state != table::State::Waiting)
            .map(|place| (place.token.clone(), left(place)))
            .collect();
        readers.sort_by_key(|reader| std::cmp::Reverse(reader.1));
        if writer.is_none() && readers.is_empty() {
            return None;
        }
        Some(Entry {
            name: name.to_owned(),
            token: writer.map(|place| place.token.clone()),
            ttl: writer.and_then(left),
            fencing_token: places.iter().filter_map(|place| place.fence).max(),
            waiters: Some(waiters as u64),
            readers,
            permits: places.iter().find_map(|place| place.kind.permits()),
            ..Entry::default()
        })
    }

    async fn inspect_key(&self, name: &str) -> Result<Option<Entry>, BoxError> {
        let conn = self.conn().await?;
        Ok(self
            .last(&conn, name)
            .await?
            .and_then(|last| NatsBackend::entry(name, last)))
    }

    async fn list_keys(&self, listing: Listing<'_>) -> Result<Vec<Entry>, BoxError> {
        let conn = self.conn().await?;
        let prefix = format!("$KV.{}.", self.bucket);
        let subjects: Vec<(String, usize)> = conn
            .stream
            .info_with_subjects(format!("{prefix}>"))
            .await?
            .try_collect()
            .await?;
        let mut names: Vec<String> = subjects
            .into_iter()
            .filter_map(|(subject, _)| NatsBackend::name_of(subject.strip_prefix(&prefix)?))
            .filter(|name| listing.matches(name))
            .collect();
        names.sort();
        let mut entries = Vec::new();
        for name in names {
            if entries.len() >= listing.limit {
                break;
            }
            if let Some(entry) = self
                .last(&conn, &name)
                .await?
                .and_then(|last| NatsBackend::entry(&name, last))
            {
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    /// Deletes the key whoever holds it — expecting the revision just read, so a holder that
    /// came between is not the one removed — and names the holder it removed.
    async fn force_release_key(&self, name: &str) -> Result<Option<Entry>, BoxError> {
        let conn = self.conn().await?;
        for _ in 0..5 {
            let Some(last) = self.last(&conn, name).await? else {
                return Ok(None);
            };
            let revision = last.revision;
            let Some(entry) = NatsBackend::entry(name, last) else {
                return Ok(None);
            };
            if self.write(&conn, name, revision, None).await?.is_ok() {
                return Ok(Some(entry));
            }
        }
        Err(format!("`{name}` changed under every attempt to release it; try again").into())
    }

    async fn version(&self) -> Result<String, BoxError> {
        let conn = self.conn().await?;
        // One request to the server (the stream's state), then its version from the
        // connection's handshake.
        let mut stream = conn.stream.clone();
        stream.info().await?;
        Ok(format!("NATS {}", conn.client.server_info().version))
    }

    /// A subscription of its own to the bucket's republished writes (grants, releases, expiry
    /// markers; renewals, which carry the grant's revision, change no holder and are skipped),
    /// confirmed by the server before the feed is returned.
    async fn follow(&self) -> Result<Option<ChangeFeed>, BoxError> {
        let conn = self.conn().await?;
        let mut events = conn
            .client
            .subscribe(format!("{EVENTS}.{}.>", self.bucket))
            .await?;
        tokio::time::timeout(self.response_timeout, conn.client.flush())
            .await
            .map_err(|_| {
                format!(
                    "the server did not confirm the watch's subscription within the response \
                     timeout ({:?})",
                    self.response_timeout
                )
            })??;
        Ok(Some(ChangeFeed::spawn(move |changed| async move {
            use futures_util::StreamExt as _;
            // Keeps the connection (and so the subscription) open.
            let _conn = conn;
            while let Some(event) = events.next().await {
                let renewal = event
                    .headers
                    .as_ref()
                    .is_some_and(|headers| headers.get(FENCE_HEADER).is_some());
                if !renewal {
                    changed.send_replace(());
                }
            }
        })))
    }

    async fn diagnose_bucket(&self) -> Vec<Finding> {
        let found = format!(
            "bucket `{}`: one revision per key, per-key TTLs with markers, republished writes \
             wake waiters",
            self.bucket
        );
        match self.conn().await {
            // The connection checked the bucket's settings when it opened.
            Ok(_) => vec![Finding::pass("bucket", found)],
            Err(error) => vec![Finding::fail(
                "bucket",
                error.to_string(),
                "name a bucket distlock may create (`?bucket=`), or fix the one named",
            )],
        }
    }
}

impl Admin for NatsBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(self.inspect_key(name))
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(self.list_keys(listing))
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(self.force_release_key(name))
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(self.version())
    }
    fn changes<'a>(
        &'a self,
        _prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChangeFeed>, BoxError>> {
        Box::pin(self.follow())
    }
    fn diagnose(&self) -> BoxFuture<'_, Vec<Finding>> {
        Box::pin(self.diagnose_bucket())
    }
    /// A put expecting no revision, with the TTL, then a delete expecting its revision: the
    /// two raw publishes of a lock.
    fn raw_pair<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        lease: std::time::Duration,
    ) -> BoxFuture<'a, Option<Result<(), BoxError>>> {
        Box::pin(async move {
            let pair = async {
                let conn = self.conn().await?;
                let put = Some((token, lease, None));
                // Over the delete this client wrote last (a used key's marker stays a second),
                // or none; read only when that guess is stale.
                let expected = self.expected_free(name).unwrap_or(0);
                let revision = match self.write(&conn, name, expected, put).await? {
                    Ok(revision) => revision,
                    Err(_) => match self.last(&conn, name).await? {
                        Some(Last { token: Some(_), .. }) => {
                            return Err(format!("`{name}` is held: nothing taken").into());
                        }
                        last => {
                            let expected = last.map_or(0, |last| last.revision);
                            self.write(&conn, name, expected, put)
                                .await?
                                .map_err(|_| format!("`{name}` changed meanwhile: try again"))?
                        }
                    },
                };
                let deleted = self.write(&conn, name, revision, None).await?;
                if let Ok(deleted) = deleted {
                    let at = tokio::time::Instant::now();
                    self.hear(name, Some(super::news::News::Freed(deleted, at)));
                }
                Ok::<(), BoxError>(())
            };
            Some(pair.await)
        })
    }
}

//! The admin API on NATS: a lock is its key's last message; the bucket's subjects list them.

use futures_util::TryStreamExt as _;

use super::{Last, NatsBackend};
use crate::admin::{Entry, Finding, Listing};
use crate::backend::{Admin, Freed};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl NatsBackend {
    fn entry(name: &str, last: Last) -> Option<Entry> {
        Some(Entry {
            name: name.to_owned(),
            token: Some(last.token?),
            ttl: last.ttl,
            fencing_token: Some(last.granted),
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
    fn diagnose(&self) -> BoxFuture<'_, Vec<Finding>> {
        Box::pin(self.diagnose_bucket())
    }
}

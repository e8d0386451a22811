//! The admin API on the lock table: a lock's row, the rows matching a pattern, a forced
//! release, the server's version.

use tokio_postgres::types::Type;

use super::PostgresBackend;
use crate::admin::{Entry, Listing};
use crate::backend::Admin;
use crate::backend::Freed;
use crate::backend::sql::like_pattern;
use crate::backend::sql::shares::{readers_entry, row_entry, shares_of};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

impl Admin for PostgresBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move {
            let rows = self
                .run("the inspection", name, |conn| async move {
                    conn.text(&self.sql.inspect, &[Type::TEXT], &[&name]).await
                })
                .await?;
            Ok(rows.first().map(pg_entry))
        })
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let like = like_pattern(listing.prefix, listing.pattern);
            let limit = i64::try_from(listing.limit).unwrap_or(i64::MAX);
            let rows = self
                .run("the listing", listing.prefix, |conn| {
                    let like = &like;
                    async move {
                        conn.text(&self.sql.list, &[Type::TEXT, Type::INT8], &[like, &limit])
                            .await
                    }
                })
                .await?;
            Ok(rows.iter().map(pg_entry).collect())
        })
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            let rows = self
                .run("the forced release", name, |conn| async move {
                    conn.text(&self.sql.force_release, &[Type::TEXT], &[&name])
                        .await
                })
                .await?;
            Ok(rows.first().map(pg_entry))
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let rows = self
                .run("the version query", "", |conn| async move {
                    conn.text("SHOW server_version", &[], &[]).await
                })
                .await?;
            let version: String = rows.first().map(|r| r.get(0)).unwrap_or_default();
            Ok(format!("PostgreSQL {version}"))
        })
    }
    fn diagnose(&self) -> BoxFuture<'_, Vec<crate::admin::Finding>> {
        Box::pin(self.diagnose_server())
    }
    fn raw_pair<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        lease: std::time::Duration,
    ) -> BoxFuture<'a, Option<Result<(), BoxError>>> {
        Box::pin(async move { Some(self.raw_pair_of(name, token, lease).await) })
    }
}

/// A row of the admin statements: (name, token, holder, acquired ms, remaining ms, fence).
fn pg_entry(row: &tokio_postgres::Row) -> Entry {
    let acquired: Option<i64> = row.get(3);
    let remaining: Option<i64> = row.get(4);
    let fence: Option<i64> = row.get(5);
    let token: Option<String> = row.get(1);
    let record: &str = row.get(2);
    // A writer's record may end with the flag of a waiter (`statements::WAITED`).
    let record = record.strip_suffix("\n?").unwrap_or(record);
    let mut entry = row_entry(
        row.get(0),
        token.clone(),
        record,
        acquired,
        remaining,
        fence,
    );
    if let Some(permits) = shares_of(token.as_deref()) {
        readers_entry(&mut entry, record, remaining.unwrap_or(0));
        entry.permits = permits;
    }
    entry
}

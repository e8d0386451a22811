//! The admin API on MySQL's lock table: a lock's row (with its readers or permits), the rows
//! matching a pattern, a forced release, the server's version.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::Value;
use mysql_async::prelude::Queryable;

use super::errors::MyError;
use super::{MysqlBackend, positional};
use crate::admin::{Entry, Listing};
use crate::backend::sql::like_pattern;
use crate::backend::sql::shares::{READERS, row_entry, shares_of, shares_token};
use crate::backend::{Admin, Freed, Kind};
use crate::error::BoxError;
use crate::runtime::BoxFuture;

/// A row of the admin statements: (name, token, holder, acquired ms, remaining ms, fence).
type AdminRow = (
    Vec<u8>,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

fn my_entry((name, token, holder, acquired, remaining, fence): AdminRow) -> Entry {
    let name = String::from_utf8_lossy(&name).into_owned();
    row_entry(name, Some(token), &holder, acquired, remaining, fence)
}

impl MysqlBackend {
    /// The live readers of lock `name` (admin).
    async fn readers_of(&self, name: &str) -> Result<Vec<(String, Option<Duration>)>, MyError> {
        let sql = Arc::clone(&self.sql);
        let params = vec![Value::from(name.as_bytes()), Value::from(name.as_bytes())];
        let rows: Vec<(String, i64)> = self
            .run("listing the readers", name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move { conn.exec(sql.readers.as_str(), positional(params)).await })
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|(token, ms)| (token, Some(Duration::from_millis(ms.max(0) as u64))))
            .collect())
    }

    /// `entry` with its readers, when readers hold the lock.
    async fn with_readers(&self, mut entry: Entry) -> Result<Entry, MyError> {
        if let Some(permits) = shares_of(entry.token.as_deref()) {
            entry.permits = permits;
            entry.readers = self.readers_of(&entry.name).await?;
            entry.token = None;
            entry.holder = None;
        }
        Ok(entry)
    }

    async fn inspect_row(&self, name: &str) -> Result<Option<Entry>, MyError> {
        let sql = Arc::clone(&self.sql);
        let params = vec![Value::from(name.as_bytes())];
        let rows = self
            .run("the inspection", name, move |conn| {
                let (sql, params) = (Arc::clone(&sql), params.clone());
                Box::pin(async move {
                    conn.exec::<AdminRow, _, _>(sql.inspect.as_str(), positional(params))
                        .await
                })
            })
            .await?;
        match rows.into_iter().next() {
            Some(row) => Ok(Some(self.with_readers(my_entry(row)).await?)),
            None => Ok(None),
        }
    }
}

impl Admin for MysqlBackend {
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Entry>, BoxError>> {
        Box::pin(async move { Ok(self.inspect_row(name).await?) })
    }
    fn list<'a>(&'a self, listing: Listing<'a>) -> BoxFuture<'a, Result<Vec<Entry>, BoxError>> {
        Box::pin(async move {
            let sql = Arc::clone(&self.sql);
            let params = vec![
                Value::from(like_pattern(listing.prefix, listing.pattern).into_bytes()),
                Value::from(u64::try_from(listing.limit).unwrap_or(u64::MAX)),
            ];
            let rows = self
                .run("the listing", listing.prefix, move |conn| {
                    let (sql, params) = (Arc::clone(&sql), params.clone());
                    Box::pin(async move {
                        conn.exec::<AdminRow, _, _>(sql.list.as_str(), positional(params))
                            .await
                    })
                })
                .await?;
            let mut entries = Vec::with_capacity(rows.len());
            for row in rows {
                entries.push(self.with_readers(my_entry(row)).await?);
            }
            Ok(entries)
        })
    }
    fn force_release<'a>(&'a self, name: &'a str) -> Freed<'a> {
        Box::pin(async move {
            // No `DELETE … RETURNING` in MySQL: read the row, then delete exactly that holder's
            // row; if another holder took it in between, look again.
            for _ in 0..5 {
                let Some(found) = self.inspect_row(name).await? else {
                    return Ok(None);
                };
                let sql = Arc::clone(&self.sql);
                // Readers hold it: their row, and every share with it.
                let readers = !found.readers.is_empty();
                let token = match (&found.token, found.permits) {
                    (Some(token), _) => token.clone(),
                    (None, Some(limit)) => shares_token(Kind::Permits(limit)),
                    (None, None) => READERS.to_owned(),
                };
                let upgraded = token.clone();
                let params = vec![Value::from(name.as_bytes()), Value::from(token)];
                let deleted = self
                    .run("the forced release", name, move |conn| {
                        let (sql, params) = (Arc::clone(&sql), params.clone());
                        let upgraded = upgraded.clone();
                        Box::pin(async move {
                            conn.exec_drop(sql.force_release.as_str(), positional(params.clone()))
                                .await?;
                            let deleted = conn.affected_rows();
                            if deleted == 1 && crate::token::is_upgradable(&upgraded) {
                                // An upgraded lock: the share row its upgrade left goes too.
                                let (name, token) = (params[0].clone(), params[1].clone());
                                conn.exec_drop(
                                    sql.drop_share.as_str(),
                                    positional(vec![name.clone(), name.clone(), name, token]),
                                )
                                .await?;
                            }
                            if readers {
                                let name = params[0].clone();
                                conn.exec_drop(
                                    sql.drop_shares.as_str(),
                                    positional(vec![name.clone(), name]),
                                )
                                .await?;
                            }
                            Ok(deleted)
                        })
                    })
                    .await?;
                if deleted == 1 {
                    self.hub.notify(name);
                    return Ok(Some(found));
                }
            }
            Err("the lock changed hands five times while being released; try again".into())
        })
    }
    fn server_version(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(async move {
            let version = self
                .run("the version query", "", |conn| {
                    Box::pin(async move { conn.query_first::<String, _>("SELECT VERSION()").await })
                })
                .await?
                .unwrap_or_default();
            Ok(match version.split_once("-MariaDB") {
                Some((number, _)) => format!("MariaDB {number}"),
                None => format!("MySQL {version}"),
            })
        })
    }
    /// The lock's own statements and nothing around them: its acquisition, then its release.
    fn raw_pair<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        lease: std::time::Duration,
    ) -> BoxFuture<'a, Option<Result<(), BoxError>>> {
        use mysql_async::Value;
        Box::pin(async move {
            let taken = self
                .run("the raw pair", name, {
                    let params = vec![
                        Value::from(name.as_bytes()),
                        Value::from(token),
                        Value::from(super::micros(lease)),
                        Value::from(self.holder.as_str()),
                    ];
                    move |conn| {
                        let params = params.clone();
                        Box::pin(async move {
                            let acquire = conn.hot().await?.acquire;
                            conn.exec_drop(&acquire, super::positional(params)).await?;
                            Ok(conn.affected_rows())
                        })
                    }
                })
                .await;
            let pair = match taken {
                Ok(1) => self
                    .run("the raw pair", name, {
                        let params = vec![Value::from(name.as_bytes()), Value::from(token)];
                        move |conn| {
                            let params = params.clone();
                            Box::pin(async move {
                                let release = conn.hot().await?.release;
                                conn.exec_drop(&release, super::positional(params)).await
                            })
                        }
                    })
                    .await
                    .map_err(BoxError::from),
                Ok(_) => Err(format!("`{name}` is held: nothing taken").into()),
                Err(error) => Err(error.into()),
            };
            Some(pair)
        })
    }
    /// Who the server says this client is (`CURRENT_USER()`, `Ssl_cipher`), and its clock
    /// (`UNIX_TIMESTAMP(NOW(6))`) against this host's: the lock statements judge a lease by the
    /// server's `NOW(3)`.
    fn diagnose(&self) -> BoxFuture<'_, Vec<crate::admin::Finding>> {
        Box::pin(async move {
            let clock = crate::admin::clock_check(async {
                self.run("the clock query", "", |conn| {
                    Box::pin(async move {
                        conn.query_first::<String, _>("SELECT UNIX_TIMESTAMP(NOW(6))")
                            .await
                    })
                })
                .await
                .ok()??
                .parse::<f64>()
                .ok()
            })
            .await;
            let identity = self
                .run("the identity query", "", |conn| {
                    Box::pin(async move {
                        let user = conn
                            .query_first::<String, _>("SELECT CURRENT_USER()")
                            .await?;
                        // (`SHOW`: MariaDB and MySQL 8 alike.)
                        let cipher = conn
                            .query_first::<(String, String), _>(
                                "SHOW SESSION STATUS LIKE 'Ssl_cipher'",
                            )
                            .await?
                            .map(|(_, cipher)| cipher);
                        Ok((user, cipher))
                    })
                })
                .await;
            let (user, cipher) = identity.unwrap_or_default();
            let tls = cipher.filter(|cipher| !cipher.is_empty());
            vec![
                crate::admin::identity_finding(user.as_deref(), tls.as_deref()),
                clock,
            ]
        })
    }
}

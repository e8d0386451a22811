//! `mysql://`: locks as rows of a table in MySQL 8 or MariaDB ≥ 10.6.
//!
//! The same table and the same fixes as the PostgreSQL backend (see `backend/postgres`): expiry
//! by the database's clock (`UTC_TIMESTAMP(6)`), one atomic `INSERT … ON DUPLICATE KEY UPDATE`
//! per acquisition that takes over only an expired row (or ours), owner checks on release and
//! renewal, renewals batched per tick, fencing counters in `<table>_fences`. A fenced
//! acquisition runs the grant and the counter in one short transaction, so a later grant always
//! gets a larger token.
//!
//! MySQL has no notifications: a waiter asks again after a short pause that doubles from 2 ms
//! to 50 ms (drawn from its upper half), never past the holder's remaining lease.
//!
//! Connections: `pool_size` connections (default 4), each running one statement at a time;
//! the statements about one lock always use the same connection, in the order they were sent,
//! and run to completion even when the caller gives up (finished in the background then) — so
//! the release sent for an abandoned acquisition can never overtake it. The statements of every
//! lock + release are prepared on each connection once, and run by their handles.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Params, TxOpts, Value};

use super::sql::errors::acquire_error;
use super::sql::shares::{READERS, busy_for, semaphore_limit};
use super::sql::{SqlSettings, holder_id, millis, renewed_by_name};
use super::{Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, Upgrade};
use crate::error::{BoxError, LockError};
use crate::notify::{ReleaseHub, ReleaseSubscription};
use crate::runtime::BoxFuture;
use crate::url::redact_url;

mod admin;
mod errors;
mod marks;
pub(crate) mod named;
mod pool;
mod share;
mod shared;
mod statements;
mod tls;
mod upgrade;

pub(crate) use errors::MyError;
use pool::{MySlot, Trips};
use shared::ShareRules;
use statements::MyStatements;

pub(crate) struct MysqlBackend {
    opts: Opts,
    settings: SqlSettings,
    sql: Arc<MyStatements>,
    /// Shared results' statements (`share`).
    share_sql: Arc<share::ShareStatements>,
    holder: String,
    url: String,
    slots: Vec<MySlot>,
    /// Wakes this client's waiters when it releases a lock itself (other processes are found by
    /// polling: see [`Capabilities::poll`](crate::backend::Capabilities::poll)).
    hub: Arc<ReleaseHub>,
    /// Tokens of writers that marked a lock's readers while waiting: their marks go once they
    /// have the lock or give up. (A mark forgotten past 65,536 tokens lapses by itself.)
    marked: super::Remembered<65_536>,
    /// Names this client found shared or busy (their readers and permits then go straight to
    /// the full statements: see `MyStatements::share_alone`).
    contended: super::Remembered<4096>,
    /// Whether a share is taken and given back by the table's procedures (one `CALL` each),
    /// made when this client created the tables; cleared if a call finds them gone.
    procedures: std::sync::atomic::AtomicBool,
    /// Upgrades waiting for readers to leave, by token: when each last marked the lock. Its
    /// attempts in between read without locking the lock row (see `MysqlBackend::upgrade`).
    upgrading: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// Microseconds of `d` for a statement parameter, at least 1000.
fn micros(d: Duration) -> i64 {
    millis(d).saturating_mul(1000)
}

/// A busy answer with the holder's remaining lease in µs.
fn busy_us(left: Option<i64>) -> Attempt {
    busy_for(left, Duration::from_micros)
}

/// The driver's options for `driver_url` (TLS settled: a `PREFERRED` server that offers no TLS
/// is asked once) and the URL as messages show it (password redacted).
pub(crate) async fn driver_opts(
    driver_url: &str,
    settings: &SqlSettings,
) -> Result<(Opts, String), LockError> {
    let (driver_url, secure) = tls::secure(driver_url, settings.tls.as_ref())?;
    let shown = redact_url(&driver_url);
    let opts = Opts::from_url(&driver_url)
        .map_err(|e| LockError::Config(format!("invalid MySQL URL {shown}: {e}")))?;
    let mut builder = OptsBuilder::from_opts(opts);
    if !driver_url.contains("prefer_socket") {
        // Talk to the address in the URL, not to a local socket the server reports.
        builder = builder.prefer_socket(false);
    }
    let builder = match secure {
        tls::Secure::Plain => builder,
        #[cfg(feature = "tls")]
        tls::Secure::Tls(ssl) => builder.ssl_opts(ssl),
        #[cfg(feature = "tls")]
        tls::Secure::Preferred(ssl) => {
            // Asked once: a server that offers no TLS gets plain connections (any other
            // failure shows when the pool connects, with what to check).
            let with_tls = builder.clone().ssl_opts(ssl);
            let probe = mysql_async::Conn::new(with_tls.clone());
            match tokio::time::timeout(settings.connect_timeout, probe).await {
                Ok(Err(error)) if tls::offers_no_tls(&error) => builder,
                Ok(Ok(conn)) => {
                    let _ = conn.disconnect().await;
                    with_tls
                }
                _ => with_tls,
            }
        }
    };
    Ok((builder.into(), shown))
}

impl MysqlBackend {
    /// Parses the URL, connects every pooled connection (bounded by the connect timeout),
    /// creates the tables if asked and missing, and checks their shape by preparing every
    /// statement.
    pub(crate) async fn connect(
        driver_url: &str,
        settings: SqlSettings,
    ) -> Result<Arc<MysqlBackend>, LockError> {
        let (opts, shown) = driver_opts(driver_url, &settings).await?;
        let backend = Arc::new(MysqlBackend {
            opts,
            sql: Arc::new(MyStatements::new(&settings)),
            share_sql: Arc::new(share::ShareStatements::new(&settings.table)),
            holder: holder_id(),
            url: shown,
            slots: (0..settings.pool_size).map(|_| MySlot::default()).collect(),
            settings,
            hub: ReleaseHub::new(None),
            marked: Default::default(),
            upgrading: Default::default(),
            contended: Default::default(),
            procedures: Default::default(),
        });
        if backend.settings.create_table {
            let create = backend.sql.create.clone();
            let limit = backend.settings.connect_timeout;
            backend
                .run_on(
                    0,
                    Trips::Many,
                    "creating the lock table",
                    limit,
                    move |conn| {
                        let create = create.clone();
                        Box::pin(async move {
                            for statement in create {
                                conn.query_drop(statement).await?;
                            }
                            Ok(())
                        })
                    },
                )
                .await
                .map_err(|e| backend.setup_error(e))?;
            backend.create_procedures().await;
        }
        // Every connection is made now and prepares every statement: a table of the wrong shape
        // fails here, naming what is wrong, and the first locks do not pay for connecting.
        let checks = (0..backend.slots.len()).map(|i| {
            let sql = Arc::clone(&backend.sql);
            // Part of connecting: bounded by the connect timeout.
            let limit = backend.settings.connect_timeout;
            backend.run_on(
                i,
                Trips::Many,
                "preparing the lock statements",
                limit,
                move |conn| {
                    let sql = Arc::clone(&sql);
                    Box::pin(async move {
                        conn.hot().await?;
                        conn.prep(sql.fence.as_str()).await?;
                        Ok(())
                    })
                },
            )
        });
        futures_util::future::try_join_all(checks)
            .await
            .map_err(|e| backend.setup_error(e))?;
        backend.check_token_width().await?;
        Ok(backend)
    }

    /// Creates the share procedures (`MyStatements::procedures`) if missing. A user who may
    /// not (no `CREATE ROUTINE`), or a server that cannot (MySQL before 8.0.29 has no `CREATE
    /// PROCEDURE IF NOT EXISTS`), gets the same transactions as statements.
    async fn create_procedures(&self) {
        let procedures = self.sql.procedures.clone();
        let created = self
            .run_on(
                0,
                Trips::Many,
                "creating the share procedures",
                self.settings.connect_timeout,
                move |conn| {
                    let procedures = procedures.clone();
                    Box::pin(async move {
                        for procedure in procedures {
                            conn.query_drop(procedure).await?;
                        }
                        Ok(())
                    })
                },
            )
            .await;
        match created {
            Ok(()) => self
                .procedures
                .store(true, std::sync::atomic::Ordering::Relaxed),
            Err(error) => {
                tracing::debug!(%error, "distlock: mysql: shares taken by statements, not procedures")
            }
        }
    }

    /// A table made before owner tokens named their holder has a 64-character `token`
    /// column: every acquisition would fail with "data too long". Said at connect time, with
    /// the fix.
    async fn check_token_width(&self) -> Result<(), LockError> {
        let table = self.settings.table.clone();
        let width = self
            .run_on(
                0,
                Trips::Many,
                "checking the lock table",
                self.settings.connect_timeout,
                move |conn| {
                    let (schema, name) = match table.split_once('.') {
                        Some((schema, name)) => (Some(schema.to_owned()), name.to_owned()),
                        None => (None, table.clone()),
                    };
                    Box::pin(async move {
                        conn.exec_first::<Option<u64>, _, _>(
                            "SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS \
                             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                             AND COLUMN_NAME = 'token'",
                            (schema, name),
                        )
                        .await
                    })
                },
            )
            .await
            .map_err(|e| self.setup_error(e))?
            .flatten();
        match width {
            Some(width) if width < MIN_TOKEN_WIDTH => Err(LockError::Connect {
                url: self.url.clone(),
                reason: format!(
                    "the lock table `{}` has a {width}-character `token` column; owner tokens \
                     are up to {MIN_TOKEN_WIDTH} characters since they name their holder. \
                     Widen it: ALTER TABLE {} MODIFY token VARCHAR(255) CHARACTER SET ascii \
                     NOT NULL",
                    self.settings.table, self.sql.table
                ),
                source: None,
            }),
            _ => Ok(()),
        }
    }
}

/// The narrowest `token` column that holds every owner token (host cut to 64 characters).
const MIN_TOKEN_WIDTH: u64 = 129;

fn positional(values: Vec<Value>) -> Params {
    Params::Positional(values)
}

/// Every kind, writers' marks; no notifications, so waiters ask again after a short pause.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    marks_waiting_writers: true,
    upgradable: Ok(()),
    shares: Ok(share::SHARE_LIMIT),
    poll: Some(super::capabilities::Polling::SQL),
    ..Capabilities::every_kind("mysql")
};

impl Backend for MysqlBackend {
    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        match spec.kind {
            Kind::Shared => return Box::pin(self.acquire_share(spec, ShareRules::reader())),
            Kind::Permits(limit) => {
                return Box::pin(self.acquire_share(spec, ShareRules::permit(limit)));
            }
            Kind::Exclusive => {}
        }
        Box::pin(async move {
            let sql = Arc::clone(&self.sql);
            let params = vec![
                Value::from(spec.name.as_bytes()),
                Value::from(spec.token),
                Value::from(micros(spec.lease)),
                Value::from(self.holder.as_str()),
            ];
            let (name, fencing) = (spec.name.as_bytes().to_vec(), spec.fencing);
            // A fenced grant is a transaction of four round trips.
            let trips = if fencing { Trips::Many } else { Trips::One };
            let outcome = self
                .run_with(trips, "the acquisition", spec.name, move |conn| {
                    let (sql, params, name) = (Arc::clone(&sql), params.clone(), name.clone());
                    Box::pin(async move {
                        if !fencing {
                            let acquire = conn.hot().await?.acquire;
                            conn.exec_drop(&acquire, positional(params)).await?;
                            let taken = conn.affected_rows() > 0;
                            return Ok((taken, None));
                        }
                        // The grant and the counter commit together: the row lock taken by the
                        // grant holds off the next grant until the token is counted.
                        let acquire = conn.hot().await?.acquire;
                        let mut tx = conn.start_transaction(TxOpts::default()).await?;
                        tx.exec_drop(&acquire, positional(params)).await?;
                        if tx.affected_rows() == 0 {
                            tx.rollback().await?;
                            return Ok((false, None));
                        }
                        tx.exec_drop(sql.fence.as_str(), positional(vec![Value::from(name)]))
                            .await?;
                        let fence = tx.last_insert_id();
                        tx.commit().await?;
                        Ok((true, fence))
                    })
                })
                .await
                .map_err(acquire_error)?;
            match outcome {
                (true, fence) => {
                    if spec.fencing && fence.is_none() {
                        return Err(MyError::Unexpected(
                            "the acquisition returned no fencing token".into(),
                        )
                        .into());
                    }
                    // Its mark, if it left one waiting for readers, goes now.
                    if let Err(error) = self.unmark(spec.name, spec.token).await {
                        tracing::debug!(%error, "distlock: mysql: a writer's mark stays until it lapses");
                    }
                    Ok(Attempt::Acquired {
                        fencing_token: fence,
                    })
                }
                (false, _) => {
                    let name = spec.name.as_bytes().to_vec();
                    let remaining: Option<(Option<i64>, String)> = self
                        .run("reading the holder's lease", spec.name, move |conn| {
                            let name = name.clone();
                            Box::pin(async move {
                                let remaining = conn.hot().await?.remaining;
                                conn.exec_first(&remaining, (name,)).await
                            })
                        })
                        .await
                        .map_err(acquire_error)?;
                    // A waiting writer marks the lock only when readers hold it: a writer
                    // waiting for another writer polls with one statement, as before.
                    if spec.waiting
                        && let Some((Some(left), held)) = &remaining
                        && *left > 0
                        && let Some(held) = semaphore_limit(held)
                    {
                        return Err(super::Refused::kind(Some(held), spec.kind));
                    }
                    let readers = remaining
                        .as_ref()
                        .is_some_and(|(_, token)| token == READERS);
                    let marked =
                        spec.waiting && readers && self.mark(spec).await.map_err(acquire_error)?;
                    // Gone already (released or expired just now): try again soon.
                    let micros = remaining.and_then(|(left, _)| left).unwrap_or(0).max(0);
                    let mut ttl = Duration::from_micros(micros as u64);
                    if marked {
                        ttl = ttl.min(crate::backend::FAIR_QUEUE_TTL / 3);
                    }
                    Ok(Attempt::Busy { ttl: Some(ttl) })
                }
            }
        })
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(self.upgrade_share(spec))
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(self.abandon_share_upgrade(spec))
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        if spec.kind != Kind::Exclusive {
            return Box::pin(self.renew_shared(spec));
        }
        Box::pin(async move {
            let params = vec![
                Value::from(micros(spec.lease)),
                Value::from(spec.name.as_bytes()),
                Value::from(spec.token),
            ];
            let renewed = self
                .run("the renewal", spec.name, move |conn| {
                    let params = params.clone();
                    Box::pin(async move {
                        let renew = conn.hot().await?.renew;
                        conn.exec_drop(&renew, positional(params)).await?;
                        Ok(conn.affected_rows())
                    })
                })
                .await?;
            Ok(renewed == 1)
        })
    }

    fn renew_many<'a>(
        &'a self,
        specs: &'a [LockSpec<'a>],
    ) -> BoxFuture<'a, Vec<Result<bool, String>>> {
        if specs.iter().any(|spec| spec.kind != Kind::Exclusive) {
            // A reader's share (or a permit) is renewed in a transaction of its own.
            return Box::pin(super::renew_each(self, specs));
        }
        Box::pin(async move {
            // One UPDATE per distinct lease (usually one), then one SELECT of what is still
            // ours: a lock still ours and unexpired after the UPDATE was renewed by it.
            let mut leases: Vec<i64> = specs.iter().map(|s| micros(s.lease)).collect();
            leases.sort_unstable();
            leases.dedup();
            let mut updates = Vec::new();
            for lease in leases {
                let mut params = vec![Value::from(lease)];
                let mut n = 0;
                for spec in specs.iter().filter(|s| micros(s.lease) == lease) {
                    params.push(Value::from(spec.name.as_bytes()));
                    params.push(Value::from(spec.token));
                    n += 1;
                }
                updates.push((self.sql.renew_many(n), params));
            }
            let mut check = Vec::with_capacity(specs.len() * 2);
            for spec in specs {
                check.push(Value::from(spec.name.as_bytes()));
                check.push(Value::from(spec.token));
            }
            let still_ours = self.sql.still_ours(specs.len());
            let renewed = self
                .run_with(
                    Trips::Many,
                    "the batched renewal",
                    specs[0].name,
                    move |conn| {
                        let (updates, check, still_ours) =
                            (updates.clone(), check.clone(), still_ours.clone());
                        Box::pin(async move {
                            for (statement, params) in updates {
                                conn.exec_drop(statement, positional(params)).await?;
                            }
                            let names: Vec<Vec<u8>> =
                                conn.exec(still_ours, positional(check)).await?;
                            Ok(names)
                        })
                    },
                )
                .await;
            renewed_by_name(specs, renewed, str::as_bytes)
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let (name, token) = (hold.name, hold.token);
        if hold.kind != Kind::Exclusive {
            return Box::pin(async move {
                let (live, left, retried) = self.release_shared(name, token, hold.kind).await?;
                // The last reader's departure frees the lock; every permit's frees a permit.
                if !left || (live && hold.kind != Kind::Shared) {
                    self.hub.notify(name);
                }
                Ok(Released::after_tries(live, retried))
            });
        }
        Box::pin(async move {
            if let Err(error) = self.unmark(name, token).await {
                tracing::debug!(%error, "distlock: mysql: a writer's mark stays until it lapses");
            }
            // An upgraded lock's rows (see `MyStatements::release_upgraded`).
            let upgraded = crate::token::is_upgradable(token).then(|| Arc::clone(&self.sql));
            let params = vec![Value::from(name.as_bytes()), Value::from(token)];
            let tries = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let counted = Arc::clone(&tries);
            let released = self
                .run("the release", name, move |conn| {
                    let (params, upgraded) = (params.clone(), upgraded.clone());
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Box::pin(async move {
                        if let Some(sql) = upgraded {
                            let [n, t] = [params[0].clone(), params[1].clone()];
                            let held = vec![n.clone(), t.clone(), n.clone(), t.clone()];
                            conn.exec_drop(sql.release_upgraded.as_str(), positional(held))
                                .await?;
                            if conn.affected_rows() > 0 {
                                return Ok(true);
                            }
                            let expired = vec![n.clone(), n, t.clone(), t];
                            conn.exec_drop(
                                sql.release_upgraded_expired.as_str(),
                                positional(expired),
                            )
                            .await?;
                            return Ok(false);
                        }
                        let hot = conn.hot().await?;
                        conn.exec_drop(&hot.release, positional(params.clone()))
                            .await?;
                        if conn.affected_rows() == 1 {
                            return Ok(true);
                        }
                        // Our lease ran out and nobody took the row over: delete it anyway,
                        // but it was not held any more.
                        conn.exec_drop(&hot.release_expired, positional(params))
                            .await?;
                        Ok(false)
                    })
                })
                .await?;
            if released {
                self.hub.notify(name);
            }
            let retried = tries.load(std::sync::atomic::Ordering::Relaxed) > 1;
            Ok(Released::after_tries(released, retried))
        })
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let name = spec.name;
        Box::pin(async move { Ok(self.hub.subscribe(name, || {})) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sql::slot_of;

    #[test]
    fn batched_statements_have_a_pair_per_lock() {
        let settings = SqlSettings::from_url(
            "mysql://h/db?table=app.locks",
            &Default::default(),
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap()
        .0;
        let sql = MyStatements::new(&settings);
        assert!(sql.renew_many(3).ends_with("IN ((?, ?), (?, ?), (?, ?))"));
        assert!(sql.still_ours(1).contains("FROM `app`.`locks`"));
        assert_eq!(slot_of("lock:a", 4), slot_of("lock:a", 4));
    }
}

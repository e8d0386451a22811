//! `postgres://` / `postgresql://`: locks as rows of a table in PostgreSQL.
//!
//! The classic database lock — a table whose primary key on the lock name makes a second
//! `INSERT` fail — with its flaws fixed:
//!
//! - **Expiry** by the database's clock: a row carries `expires_at = now() + lease`, and an
//!   acquisition takes over a row whose expiry has passed, so a crashed holder blocks nobody
//!   for longer than its lease. Renewal moves `expires_at` (many locks in one statement).
//! - **One atomic statement** per acquisition: `INSERT … ON CONFLICT (name) DO UPDATE … WHERE
//!   expired OR ours`, so there is no read-then-write race, no transaction stays open while
//!   the body runs, and no connection is pinned per held lock.
//! - **Owner checks**: release and renewal compare the owner token.
//! - **Waiting without polling**: a waiter flags the row it waits for, and the release runs
//!   `pg_notify(<table>, name)` in the same statement if the row is flagged (an uncontended
//!   release notifies nobody: notifying commits are serialized cluster-wide); each client
//!   keeps one `LISTEN` connection and wakes its waiters. A waiter that hears nothing retries
//!   when the holder's lease runs out.
//! - **Fencing**: a counter per lock name in `<table>_fences`, raised by the acquiring
//!   statement itself; it outlives the lock's row, so tokens keep rising across releases.
//! - **Readers and permits** share one row: its token says `readers` (or `permits:<n>`), its
//!   `holder` column holds a line per share and per waiting writer's mark. A lone reader
//!   takes and gives back its share with a plain `INSERT` and `DELETE`, as a writer does; a
//!   reader that joins others, and any name seen shared or busy before, goes through the full
//!   statements (one pass over the row's lines each).
//!
//! Connections: a small pool (default 4, `pool_size`); tokio-postgres pipelines statements on
//! each, so a few connections serve many tasks. A connection that fails is replaced on next
//! use; statements are safe to repeat with the same token. Each connection runs with
//! `enable_seqscan = off`, so the table is read by its primary key even when the planner
//! believes it empty (after autovacuum truncated it), when cached plans would scan it whole.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::sql::errors::{TableTrouble, table_error, timed};
use super::sql::shares::shares_token;
use super::sql::{SqlSettings, holder_id, millis, renewed_by_name};
use super::{Attempt, Backend, Capabilities, Hold, Kind, LockSpec, Released, Upgrade};
use crate::error::{BoxError, LockError};
use crate::notify::ReleaseSubscription;
use crate::runtime::{BoxFuture, Revived};

mod acquire;
mod admin;
pub(crate) mod advisory;
mod affinity;
mod check;
mod encoded;
mod errors;
mod pool;
mod share;
mod statements;
mod tls;
mod upgrade;

pub(crate) use errors::PgError;
use errors::driver_config;
use pool::{Listener, PgSlot};
use statements::PgStatements;

pub(crate) struct PostgresBackend {
    config: tokio_postgres::Config,
    tls: tls::MakeTls,
    settings: SqlSettings,
    sql: PgStatements,
    /// `host pid N`, stored in each row this client takes.
    holder: String,
    url: String,
    slots: Vec<Mutex<PgSlot>>,
    connecting: Vec<tokio::sync::Mutex<()>>,
    connections_made: AtomicU64,
    listener: Revived<Listener>,
    /// Where `LISTEN` connects when the URL goes through a transaction pooler: the server
    /// itself (`listen_url=`).
    listen: Option<(tokio_postgres::Config, tls::MakeTls, String)>,
    /// Behind a transaction pooler without `listen_url`: nothing tells this client of other
    /// clients' releases, so its waiters ask again after a bounded pause ([`Polling::SQL`]),
    /// and its own releases wake its own waiters through `local`.
    polls: bool,
    local: Arc<crate::notify::ReleaseHub>,
    /// The tokens of writers that may have marked a readers' row (see [`Self::mark`]): their
    /// release takes the mark back; every other writer's release is the plain delete. (A mark
    /// forgotten past 65,536 tokens lapses by itself within [`crate::backend::FAIR_QUEUE_TTL`].)
    marked: super::Remembered<65_536>,
    /// Names this client found held by another (see [`Backend::release`] below): their
    /// release goes straight to the statement that wakes waiters, which someone probably
    /// flagged; every other release tries the quiet `DELETE` first. A guess either way costs
    /// a round trip or a little server time, never a wrong answer.
    contended: super::Remembered<4096>,
    /// The connection of each plain lock's statements, by token.
    affinity: affinity::Affinity,
}

impl PostgresBackend {
    /// Parses the URL, connects (bounded by the connect timeout), creates the tables if asked
    /// and missing, and checks their shape by preparing every statement.
    pub(crate) async fn connect(
        driver_url: &str,
        settings: SqlSettings,
    ) -> Result<Arc<PostgresBackend>, LockError> {
        let (config, tls, shown) = driver_config(driver_url, &settings)?;
        let listen = match &settings.listen_url {
            Some(url) => Some(driver_config(url, &settings)?),
            None => None,
        };
        let polls = settings.transaction_pooler && listen.is_none();
        let sql = PgStatements::new(&settings);
        let pool_size = settings.pool_size;
        let backend = Arc::new(PostgresBackend {
            config,
            tls,
            sql,
            holder: holder_id(),
            url: shown,
            slots: (0..settings.pool_size).map(|_| Mutex::new(None)).collect(),
            connecting: (0..settings.pool_size)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            settings,
            connections_made: AtomicU64::new(0),
            listener: Revived::new(),
            listen,
            polls,
            local: crate::notify::ReleaseHub::new(None),
            marked: super::Remembered::default(),
            contended: super::Remembered::default(),
            affinity: affinity::Affinity::new(pool_size),
        });
        backend.prepare_tables().await?;
        // Every pooled connection is made now, in parallel, and prepares every statement: a
        // table of the wrong shape fails here, naming what is wrong, and the first locks do
        // not pay for connecting (authentication and preparing take several round trips).
        let connecting = (0..backend.slots.len()).map(|i| backend.reconnect(i));
        futures_util::future::try_join_all(connecting)
            .await
            .map_err(|e| backend.setup_error(e))?;
        backend.probe_listen().await?;
        Ok(backend)
    }

    /// Creates the tables if they are missing (unless the user's migrations own them).
    async fn prepare_tables(&self) -> Result<(), LockError> {
        if !self.settings.create_table {
            return Ok(());
        }
        let client = self.open().await.map_err(|e| self.connect_error(e))?;
        let created = timed(
            "creating the lock table",
            self.settings.connect_timeout,
            client.batch_execute(&self.sql.create),
        )
        .await;
        created.map_err(|e| match e {
            PgError::Driver(ref error)
                if error.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) =>
            {
                table_error(&self.url, &self.settings, TableTrouble::CannotCreate, e)
            }
            e => self.setup_error(e),
        })
    }
}

/// A release statement's parameters: `name, token`, and a share's row token (`readers`,
/// `permits:<n>`) when `.1` says so.
#[derive(Clone, Copy)]
struct HoldParams<'a>([&'a (dyn tokio_postgres::types::ToSql + Sync); 3], bool);

impl<'a> HoldParams<'a> {
    fn get(&self) -> &[&'a (dyn tokio_postgres::types::ToSql + Sync)] {
        &self.0[..if self.1 { 3 } else { 2 }]
    }
}

/// The token of the row a share of `kind` lives in: `readers`, or a semaphore's `permits:<n>`;
/// `None` for a plain lock (its row holds its owner's token).
fn row_token(kind: Kind) -> Option<String> {
    match kind {
        Kind::Exclusive => None,
        Kind::Shared | Kind::Permits(_) => Some(shares_token(kind)),
    }
}

/// The lock table: every kind, writers' marks, woken by `NOTIFY`.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    wakes: "`LISTEN`/`NOTIFY`",
    marks_waiting_writers: true,
    upgradable: Ok(()),
    shares: Ok(share::SHARE_LIMIT),
    ..Capabilities::every_kind("postgres")
};

/// The lock table behind a transaction pooler without `listen_url`: waiters ask again.
pub(crate) const POLLING: Capabilities = Capabilities {
    poll: Some(super::capabilities::Polling::SQL),
    ..CAPABILITIES
};

impl Backend for PostgresBackend {
    fn capabilities(&self) -> &Capabilities {
        match self.polls {
            true => &POLLING,
            false => &CAPABILITIES,
        }
    }

    fn try_acquire<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Attempt, BoxError>> {
        match spec.kind {
            Kind::Shared => Box::pin(self.acquire_shared(spec)),
            Kind::Permits(limit) => Box::pin(self.acquire_permit(spec, limit)),
            Kind::Exclusive => Box::pin(self.acquire_exclusive(spec)),
        }
    }

    fn upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<Upgrade, BoxError>> {
        Box::pin(self.upgrade_share(spec))
    }

    fn abandon_upgrade<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(self.abandon_share_upgrade(spec))
    }

    fn renew<'a>(&'a self, spec: LockSpec<'a>) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            let lease = millis(spec.lease);
            let row_token = row_token(spec.kind);
            let slot = self.affinity.of(spec.token, spec.name);
            let renewed = self
                .run_on(slot, "the renewal", |conn| {
                    let row_token = row_token.as_deref();
                    async move {
                        match row_token {
                            Some(row) => {
                                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                                    [&spec.name, &spec.token, &lease, &row];
                                conn.execute(&conn.read_renew, &params).await
                            }
                            None => {
                                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                                    [&spec.name, &spec.token, &lease];
                                conn.execute(&conn.renew, &params).await
                            }
                        }
                    }
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
            // A reader's share is renewed in its readers' row: one statement each.
            return Box::pin(super::renew_each(self, specs));
        }
        Box::pin(async move {
            let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
            let tokens: Vec<&str> = specs.iter().map(|s| s.token).collect();
            let leases: Vec<i64> = specs.iter().map(|s| millis(s.lease)).collect();
            let renewed = self
                .run("the batched renewal", specs[0].name, |conn| {
                    let (names, tokens, leases) = (&names, &tokens, &leases);
                    async move { conn.query(&conn.renew_many, &[names, tokens, leases]).await }
                })
                .await;
            let renewed = renewed
                .as_ref()
                .map(|rows| rows.iter().filter_map(|r| r.try_get::<_, String>(0).ok()));
            renewed_by_name(specs, renewed, |name| name)
        })
    }

    fn release<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        if self.polls {
            // Nobody hears `NOTIFY`: this client's own waiters are woken here.
            return Box::pin(async move {
                let released = self.release_row(hold).await;
                self.local.notify(hold.name);
                released
            });
        }
        self.release_row(hold)
    }

    fn subscribe<'a>(
        &'a self,
        spec: LockSpec<'a>,
    ) -> BoxFuture<'a, Result<ReleaseSubscription, BoxError>> {
        let name = spec.name;
        if self.polls {
            return Box::pin(async move { Ok(self.local.subscribe(name, || {})) });
        }
        Box::pin(async move {
            let listener = self.listener().await?;
            // The connection has listened since it started: a release from now on is heard.
            Ok(listener.hub.subscribe(name, || {}))
        })
    }
}

impl PostgresBackend {
    /// Gives back `hold`'s row (or share), waking the waiters `NOTIFY` reaches.
    fn release_row<'a>(&'a self, hold: Hold<'a>) -> BoxFuture<'a, Result<Released, BoxError>> {
        let token = hold.token;
        let row_token = row_token(hold.kind);
        let marked = row_token.is_none() && self.marked.remove(token);
        Box::pin(async move {
            let released = self.release_on(hold, marked, row_token).await;
            self.affinity.forget(token);
            released
        })
    }

    /// [`release_row`](Self::release_row)'s statements, on the connection of `hold`'s token.
    async fn release_on(
        &self,
        hold: Hold<'_>,
        marked: bool,
        row_token: Option<String>,
    ) -> Result<Released, BoxError> {
        let (name, token) = (hold.name, hold.token);
        let slot = self.affinity.of(token, name);
        let row = row_token.as_deref().unwrap_or_default();
        let params = HoldParams([&name, &token, &row], row_token.is_some());
        let mut tries = 0;
        // The common case first: a writer's row or a lone share, live, no one waiting →
        // one `DELETE` that returns nothing. Anything else (0 rows) is the full
        // statement's to decide. A name found busy (or shared) before likely has a waiter
        // (or other shares): the full statement at once. The lone permit of a semaphore
        // of one may have waiters, which only the full statement wakes.
        let quiet = match hold.kind {
            Kind::Exclusive => !marked,
            Kind::Shared => true,
            Kind::Permits(n) => n > 1,
        };
        // An upgradable share's departure wakes those waiting to take one, who leave no
        // mark: its lone release notifies (a statement prepared when first run).
        let upgradable = hold.kind == Kind::Shared && crate::token::is_upgradable(token);
        if quiet && !self.contended.contains(name) {
            let deleted = self
                .run_on(slot, "the release", |conn| {
                    tries += 1;
                    async move {
                        if upgradable {
                            let (cell, text) = (
                                &conn.upgradable_release_alone,
                                &self.sql.upgradable_release_alone,
                            );
                            let rows = conn.rare(cell, text, &[Type::TEXT; 3], params.get());
                            let count = rows.await?.first().map(|row| row.try_get(0));
                            return Ok(count.transpose()?.unwrap_or(0i64) as u64);
                        }
                        let quiet = match params.1 {
                            true => &conn.share_release_alone,
                            false => &conn.release_quiet,
                        };
                        conn.execute(quiet, params.get()).await
                    }
                })
                .await?;
            if deleted == 1 {
                return Ok(Released::Deleted);
            }
            if params.1 {
                self.contended.insert(name); // other shares, or a writer's mark
            }
            // A retried quiet try may have deleted the row unseen: `tries` then stays
            // above 1 below, so finding nothing there is ambiguous, not "not ours".
            tries -= 1;
        }
        let released = self
            .run_on(slot, "the release", |conn| {
                tries += 1;
                async move {
                    let full = match (params.1, marked) {
                        (true, _) => &conn.read_release,
                        (false, true) => &conn.release,
                        (false, false) => &conn.release_unmarked,
                    };
                    conn.query(full, params.get()).await
                }
            })
            .await?;
        // A writer's release: a `true` row when the lock was ours (a `false` one: only its
        // mark went); a reader's: one row saying whether its share was live.
        let deleted = released
            .first()
            .is_some_and(|row| row.try_get::<_, bool>(0).unwrap_or(false));
        Ok(Released::after_tries(deleted, tries > 1))
    }
}

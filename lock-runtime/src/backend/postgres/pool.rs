//! The connections of a `PostgresBackend`: the pool its statements run on, each connection
//! with its prepared statements, and the `LISTEN` connection that hears releases.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::types::{Kind, ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Row, Statement};

use super::PostgresBackend;
use super::encoded::encode;
use super::errors::{PgError, describe};
use crate::backend::sql::errors::timed;
use crate::backend::sql::slot_of;
use crate::error::LockError;
use crate::notify::{CloseOnDrop, ReleaseHub};
use crate::runtime::RuntimeBound;

use super::tls::{MakeTls, RawConnection};

/// A statement of the lock table on one connection.
pub(super) enum Stmt {
    /// Prepared when the connection opened (named on the server, planned once).
    Prepared(Statement),
    /// Behind a pooler in transaction mode, where a statement prepared in one transaction is
    /// on another server connection by the next: sent whole each time as the unnamed
    /// statement, with its parameters' types, in one round trip (parse, bind, execute).
    Unnamed(String, Vec<Type>),
}

/// A connection with its lock statements.
pub(super) struct Conn {
    pub(super) client: Client,
    /// Behind a transaction pooler: one statement at a time on this connection (see
    /// [`Conn::alone`]); owned by the statement until its answer, even without its caller.
    one_at_a_time: Option<Arc<tokio::sync::Mutex<()>>>,
    /// This connection, for a statement that finishes without its caller (see
    /// [`Conn::alone`]).
    me: std::sync::Weak<Conn>,
    /// How long a statement whose caller left may still take before the connection is given
    /// up (the response timeout).
    response_timeout: Duration,
    /// A statement's answer was left unread: the connection was closed (see [`Conn::alone`]).
    given_up: AtomicBool,
    /// The task that drives the connection: aborted (the socket closed) when it is given up.
    driver: Option<tokio::task::AbortHandle>,
    pub(super) acquire: Stmt,
    pub(super) acquire_fenced: Stmt,
    pub(super) remaining: Stmt,
    pub(super) renew: Stmt,
    pub(super) renew_many: Stmt,
    pub(super) release: Stmt,
    pub(super) release_unmarked: Stmt,
    pub(super) release_quiet: Stmt,
    pub(super) read_acquire: Stmt,
    pub(super) share_join: Stmt,
    pub(super) read_renew: Stmt,
    pub(super) read_release: Stmt,
    pub(super) share_release_alone: Stmt,
    pub(super) permit_acquire: Stmt,
    pub(super) mark: Stmt,
    pub(super) flag: Stmt,
    /// The upgrade statements (see [`Conn::rare`]): prepared on this connection the first
    /// time it runs them.
    pub(super) upgrade: tokio::sync::OnceCell<Statement>,
    pub(super) abandon_upgrade: tokio::sync::OnceCell<Statement>,
    pub(super) upgradable_release_alone: tokio::sync::OnceCell<Statement>,
    pub(super) upgrade_alone: tokio::sync::OnceCell<Statement>,
    /// The shared results' statements (`postgres::share`), prepared as the upgrade's are.
    pub(super) share_get: tokio::sync::OnceCell<Statement>,
    pub(super) share_put: tokio::sync::OnceCell<Statement>,
    pub(super) share_drop: tokio::sync::OnceCell<Statement>,
    /// Which connection this is (see [`PostgresBackend::invalidate`]).
    pub(super) number: u64,
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Conn {
    /// Runs `statement`: the rows it changed.
    pub(super) async fn execute(
        &self,
        statement: &Stmt,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        match statement {
            Stmt::Prepared(prepared) => self.client.execute(prepared, params).await,
            Stmt::Unnamed(text, types) => Ok(self.alone(text, types, params).await?.1),
        }
    }

    /// Runs `statement`: the rows it returned.
    pub(super) async fn query(
        &self,
        statement: &Stmt,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        match statement {
            Stmt::Prepared(prepared) => self.client.query(prepared, params).await,
            Stmt::Unnamed(text, types) => Ok(self.alone(text, types, params).await?.0),
        }
    }

    /// Runs `text`, a statement that only some clients run (an upgrade's, a shared result's): prepared on this
    /// connection the first time, kept in `cell`, and run prepared from then on. Behind a
    /// transaction pooler, as the unnamed statement. Unprepared, the upgrade's statement was
    /// planned on every call: 5.0x a read lock's time, measured 2026-11-29.
    pub(super) async fn rare(
        &self,
        cell: &tokio::sync::OnceCell<Statement>,
        text: &str,
        types: &[Type],
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        if self.one_at_a_time.is_some() {
            return self.text(text, types, params).await;
        }
        let prepared = cell
            .get_or_try_init(|| self.client.prepare_typed(text, types))
            .await?;
        self.client.query(prepared, params).await
    }

    /// Runs `text` as the unnamed statement (one round trip, safe through any pooler): the
    /// statements run too rarely to be prepared (the admin API's).
    pub(super) async fn text(
        &self,
        text: &str,
        types: &[Type],
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        Ok(self.alone(text, types, params).await?.0)
    }

    /// Runs `text` as the unnamed statement: its rows and how many it changed.
    ///
    /// Behind a transaction pooler, statements on one connection are never pipelined: each is
    /// sent once the one before has been answered in full. Through PgBouncer 1.18, under load,
    /// pipelined statements got other statements' answers (a lock statement reading another's
    /// — `WrongType`, `invalid column` —, a release answered `Lost`, a connection failing at
    /// its first statement with `unexpected message from server`); one at a time, they did
    /// not (issue 70's notes).
    ///
    /// A statement whose caller stops waiting for it (a cancelled acquisition) is finished
    /// in the background, keeping the connection's turn until its answer, as MySQL's are
    /// (`FinishIfDropped`): the next statement about the same lock — that acquisition's
    /// clean-up — runs after it, never before. Closing the connection instead did not stop
    /// the statement (PgBouncer 1.18 still sends a query it buffered for a client that has
    /// gone, and the server finishes one it runs), and the clean-up, on a new connection,
    /// could overtake it: an `INSERT` landing after its `DELETE` left a lock nobody held for
    /// its whole lease. Only a statement unanswered for the response timeout gives its
    /// connection up (closed): one that ran after the server came back, long after its
    /// caller gave up, left a lock held.
    async fn alone(
        &self,
        text: &str,
        types: &[Type],
        params: Params<'_>,
    ) -> Result<(Vec<Row>, u64), tokio_postgres::Error> {
        let Some(one_at_a_time) = &self.one_at_a_time else {
            return unnamed(&self.client, text, types, params).await;
        };
        let (Some(conn), Some(encoded)) = (self.me.upgrade(), encode(types, params)) else {
            // A parameter the driver refuses: it says why, sending nothing.
            return unnamed(&self.client, text, types, params).await;
        };
        let turn = Arc::clone(one_at_a_time).lock_owned().await;
        if self.given_up() {
            // Closed under this call: its response timeout ends it, and it is retried on
            // another connection.
            drop(turn);
            return std::future::pending().await;
        }
        let (text, types): (Arc<str>, Vec<Type>) = (Arc::from(text), types.to_vec());
        let finished = crate::runtime::FinishIfDropped::new(async move {
            let params: Vec<&(dyn ToSql + Sync)> =
                encoded.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            let unanswered = GiveUpUnlessAnswered(&conn);
            let answer = tokio::time::timeout(
                conn.response_timeout,
                unnamed(&conn.client, &text, &types, &params),
            )
            .await;
            let answer = answer.ok()?; // unanswered: `unanswered` gives the connection up
            std::mem::forget(unanswered);
            drop(turn); // the next statement's turn: this one was answered in full
            Some(answer)
        });
        match finished.await {
            Some(answer) => answer,
            // Given up: the caller's own response timeout ends it, and it is retried.
            None => std::future::pending().await,
        }
    }

    /// Whether this connection was given up (see [`alone`](Self::alone)).
    pub(super) fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }
}

/// Gives a connection up when dropped: a statement unanswered within the response timeout
/// (or dropped with its runtime).
struct GiveUpUnlessAnswered<'a>(&'a Conn);

impl Drop for GiveUpUnlessAnswered<'_> {
    fn drop(&mut self) {
        self.0.given_up.store(true, Ordering::Release);
        if let Some(driver) = &self.0.driver {
            driver.abort();
        }
    }
}

/// Runs `text` as the unnamed statement on `client`: its rows and how many it changed.
async fn unnamed(
    client: &Client,
    text: &str,
    types: &[Type],
    params: Params<'_>,
) -> Result<(Vec<Row>, u64), tokio_postgres::Error> {
    let typed = params.iter().copied().zip(types.iter().cloned());
    let rows = client.query_typed_raw(text, typed).await?;
    futures_util::pin_mut!(rows);
    let mut all = Vec::new();
    while let Some(row) = rows.next().await {
        all.push(row?);
    }
    Ok((all, rows.rows_affected().unwrap_or(0)))
}

/// The first row a statement that always answers one returned, or why there is none.
pub(super) fn one(rows: Vec<Row>, what: &str) -> Result<Row, PgError> {
    rows.into_iter()
        .next()
        .ok_or_else(|| PgError::Unexpected(format!("{what} returned no row")))
}

/// A type as `PREPARE` names it (`text`, `text[]`).
fn type_name(ty: &Type) -> String {
    match ty.kind() {
        Kind::Array(element) => format!("{}[]", element.name()),
        _ => ty.name().to_owned(),
    }
}

/// A pool slot: the connection, tied to the runtime whose task drives it.
pub(super) type PgSlot = Option<RuntimeBound<Arc<Conn>>>;

/// Connects with `config`, bounded by `limit` (the connect timeout); the caller drives the
/// connection.
pub(super) async fn connect_raw(
    config: &tokio_postgres::Config,
    tls: &MakeTls,
    limit: Duration,
    what: &'static str,
) -> Result<(Client, RawConnection), PgError> {
    // The driver's own timeout covers the TCP connect; this one the whole handshake.
    match tokio::time::timeout(
        limit + Duration::from_millis(100),
        config.connect(super::tls::connector(tls)),
    )
    .await
    {
        Ok(connected) => Ok(connected?),
        Err(_) => Err(PgError::TimedOut { what, after: limit }),
    }
}

/// Opens one connection with `config` (bounded by `limit`) and starts the task that drives it
/// (it ends with the client); `kind` names the connection in the trace of its end.
pub(super) async fn open(
    config: &tokio_postgres::Config,
    tls: &MakeTls,
    limit: Duration,
    kind: &'static str,
) -> Result<Client, PgError> {
    Ok(open_driven(config, tls, limit, kind).await?.0)
}

/// [`open`], with the handle that aborts the task driving the connection (which closes it).
pub(super) async fn open_driven(
    config: &tokio_postgres::Config,
    tls: &MakeTls,
    limit: Duration,
    kind: &'static str,
) -> Result<(Client, tokio::task::AbortHandle), PgError> {
    let (client, connection) = connect_raw(config, tls, limit, "the connection attempt").await?;
    let driver = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(error = %describe(&error), "distlock: {kind} connection ended");
        }
    });
    Ok((client, driver.abort_handle()))
}

impl PostgresBackend {
    /// Connects, bounded by the connect timeout; the caller drives the connection.
    async fn connect_raw(&self, what: &'static str) -> Result<(Client, RawConnection), PgError> {
        connect_raw(&self.config, &self.tls, self.settings.connect_timeout, what).await
    }

    /// Opens one connection and starts the task that drives it (it ends with the client).
    pub(super) async fn open(&self) -> Result<Client, PgError> {
        open(
            &self.config,
            &self.tls,
            self.settings.connect_timeout,
            "postgres",
        )
        .await
    }

    /// Runs `future` bounded by the response timeout.
    fn timed<T>(
        &self,
        what: &'static str,
        future: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> impl Future<Output = Result<T, PgError>> {
        timed(what, self.settings.response_timeout, future)
    }

    fn slot(&self, i: usize) -> std::sync::MutexGuard<'_, PgSlot> {
        self.slots[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self, i: usize) -> Option<Arc<Conn>> {
        let slot = self.slot(i);
        let bound = slot.as_ref()?;
        let conn = bound.get();
        (bound.is_alive() && !conn.client.is_closed() && !conn.given_up()).then(|| Arc::clone(conn))
    }

    /// The pooled connection for lock `name`, made on the caller's runtime when its slot is
    /// empty, broken, or was made on a runtime that has shut down.
    ///
    /// Every statement of one owner token goes through the same connection (`i`: its name's,
    /// or for a plain lock its acquisition's, see [`super::affinity::Affinity`]), which runs
    /// them in the order they were sent: the release an abandoned acquisition sends in the
    /// background can never overtake that acquisition. Different locks spread over the pool.
    async fn connection(&self, i: usize) -> Result<Arc<Conn>, PgError> {
        match self.live(i) {
            Some(conn) => Ok(conn),
            None => Box::pin(self.reconnect(i)).await,
        }
    }

    pub(super) async fn reconnect(&self, i: usize) -> Result<Arc<Conn>, PgError> {
        let _one_at_a_time = self.connecting[i].lock().await;
        if let Some(conn) = self.live(i) {
            return Ok(conn);
        }
        let (client, driver) = open_driven(
            &self.config,
            &self.tls,
            self.settings.connect_timeout,
            "postgres",
        )
        .await?;
        let texts = self.statement_texts();
        let statements = if self.settings.transaction_pooler {
            self.check_statements(&client, &texts).await?;
            texts
                .into_iter()
                .map(|(text, types)| Stmt::Unnamed(text.to_owned(), types))
                .collect::<Vec<_>>()
        } else {
            // Sent together: the connection pipelines them, one round trip for all. First,
            // the lock table is to be read by its primary key whatever its size looks like:
            // once autovacuum has emptied and truncated it, the planner believes it empty,
            // and the plans a connection caches then scan the whole heap for every release
            // and renewal while it fills with dead rows again (a third of the server's CPU
            // per lock + release in issue 53's profile). Only this client's connections, only
            // its own statements. (Behind a transaction pooler nothing is cached: each
            // statement is planned for the table as it is.)
            let index_only = client.batch_execute("SET enable_seqscan = off");
            let prepared = futures_util::future::try_join_all(
                texts
                    .iter()
                    .map(|(text, types)| client.prepare_typed(text, types)),
            );
            // Part of connecting: bounded by the connect timeout (a busy server or another
            // client creating the tables can hold it up for longer than one statement may
            // take).
            let ((), prepared) = timed(
                "preparing the lock statements",
                self.settings.connect_timeout,
                futures_util::future::try_join(index_only, prepared),
            )
            .await?;
            prepared.into_iter().map(Stmt::Prepared).collect()
        };
        let Ok::<[Stmt; 16], _>(
            [
                acquire,
                acquire_fenced,
                remaining,
                renew,
                renew_many,
                release,
                release_unmarked,
                release_quiet,
                read_acquire,
                share_join,
                read_renew,
                read_release,
                share_release_alone,
                permit_acquire,
                mark,
                flag,
            ],
        ) = statements.try_into()
        else {
            unreachable!("one statement per text");
        };
        let pooled = self.settings.transaction_pooler;
        let conn = Arc::new_cyclic(|me| Conn {
            client,
            one_at_a_time: pooled.then(|| Arc::new(tokio::sync::Mutex::new(()))),
            me: me.clone(),
            response_timeout: self.settings.response_timeout,
            given_up: AtomicBool::new(false),
            driver: pooled.then_some(driver),
            acquire,
            acquire_fenced,
            remaining,
            renew,
            renew_many,
            release,
            release_unmarked,
            release_quiet,
            read_acquire,
            share_join,
            read_renew,
            read_release,
            share_release_alone,
            permit_acquire,
            mark,
            flag,
            upgrade: tokio::sync::OnceCell::new(),
            abandon_upgrade: tokio::sync::OnceCell::new(),
            upgradable_release_alone: tokio::sync::OnceCell::new(),
            upgrade_alone: tokio::sync::OnceCell::new(),
            share_get: tokio::sync::OnceCell::new(),
            share_put: tokio::sync::OnceCell::new(),
            share_drop: tokio::sync::OnceCell::new(),
            number: self.connections_made.fetch_add(1, Ordering::Relaxed),
        });
        *self.slot(i) = Some(RuntimeBound::new(Arc::clone(&conn)));
        tracing::debug!(url = %self.url, slot = i, "distlock: connected to postgres");
        Ok(conn)
    }

    /// Each lock statement's text and parameter types, in [`Conn`]'s order.
    fn statement_texts(&self) -> Vec<(&str, Vec<Type>)> {
        use Type as T;
        let sql = &self.sql;
        let lock = || vec![T::TEXT, T::TEXT, T::INT8, T::TEXT];
        vec![
            (&sql.acquire, lock()),
            (&sql.acquire_fenced, lock()),
            (&sql.remaining, vec![T::TEXT]),
            (&sql.renew, vec![T::TEXT, T::TEXT, T::INT8]),
            (
                &sql.renew_many,
                vec![T::TEXT_ARRAY, T::TEXT_ARRAY, T::INT8_ARRAY],
            ),
            (&sql.release, vec![T::TEXT, T::TEXT]),
            (&sql.release_unmarked, vec![T::TEXT, T::TEXT]),
            (&sql.release_quiet, vec![T::TEXT, T::TEXT]),
            (&sql.read_acquire, lock()),
            (&sql.share_join, lock()),
            (&sql.read_renew, vec![T::TEXT, T::TEXT, T::INT8, T::TEXT]),
            (&sql.read_release, vec![T::TEXT, T::TEXT, T::TEXT]),
            (&sql.share_release_alone, vec![T::TEXT, T::TEXT, T::TEXT]),
            (
                &sql.permit_acquire,
                vec![T::TEXT, T::TEXT, T::INT8, T::TEXT, T::INT8, T::BOOL],
            ),
            (&sql.mark, vec![T::TEXT, T::TEXT, T::INT8]),
            (&sql.flag, vec![T::TEXT]),
        ]
        .into_iter()
        .map(|(text, types)| (text.as_str(), types))
        .collect()
    }

    /// Behind a transaction pooler: checks the table's shape as preparing would, by
    /// `PREPARE` and `DEALLOCATE` of every statement in one simple query — one transaction,
    /// so on one server connection, which keeps nothing afterwards.
    async fn check_statements(
        &self,
        client: &Client,
        texts: &[(&str, Vec<Type>)],
    ) -> Result<(), PgError> {
        let mut batch = String::new();
        for (i, (text, types)) in texts.iter().enumerate() {
            let types: Vec<String> = types.iter().map(type_name).collect();
            batch.push_str(&format!(
                "PREPARE distlock_check_{i} ({}) AS {text}; DEALLOCATE distlock_check_{i};\n",
                types.join(", ")
            ));
        }
        timed(
            "checking the lock statements",
            self.settings.connect_timeout,
            client.batch_execute(&batch),
        )
        .await
    }

    /// Forgets connection `number` so its slot reconnects, unless it was replaced already.
    fn invalidate(&self, number: u64) {
        for i in 0..self.slots.len() {
            let mut slot = self.slot(i);
            if slot.as_ref().is_some_and(|b| b.get().number == number) {
                *slot = None;
            }
        }
    }

    /// Runs `op` on lock `name`'s pooled connection, bounded by the response timeout; a
    /// transient failure drops that connection and retries on a new one (the statements are
    /// idempotent per token).
    pub(super) async fn run<T, F, Fut>(
        &self,
        what: &'static str,
        name: &str,
        op: F,
    ) -> Result<T, PgError>
    where
        F: FnMut(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        self.run_on(slot_of(name, self.slots.len()), what, op).await
    }

    /// [`run`](Self::run) on connection `i` (see [`super::affinity::Affinity`]).
    pub(super) async fn run_on<T, F, Fut>(
        &self,
        i: usize,
        what: &'static str,
        mut op: F,
    ) -> Result<T, PgError>
    where
        F: FnMut(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut attempt = 0;
        loop {
            let result = match self.connection(i).await {
                Ok(conn) => {
                    let number = conn.number;
                    let _counted = self.affinity.busy(i);
                    let outcome = self.timed(what, op(conn)).await;
                    if outcome.as_ref().is_err_and(PgError::is_transient) {
                        self.invalidate(number);
                    }
                    outcome
                }
                Err(error) => Err(error),
            };
            match result {
                Err(error) => {
                    if !error.retried(&mut attempt, "postgres").await {
                        return Err(error);
                    }
                }
                other => return other,
            }
        }
    }

    /// With `listen_url`: proves at connect that its `LISTEN` hears a `NOTIFY` sent through
    /// the pooler (the same server and database), so a wrong `listen_url` fails now, not as
    /// waiters that hear no release.
    pub(super) async fn probe_listen(&self) -> Result<(), LockError> {
        let Some((config, _, shown)) = &self.listen else {
            return Ok(());
        };
        let listener = self
            .listener()
            .await
            .map_err(|e| super::errors::connect_error(config, shown, e))?;
        let probe = format!("distlock probe {} {}", self.holder, fastrand::u64(..));
        let mut heard = listener.hub.subscribe(&probe, || {});
        let channel = self.settings.table.as_str();
        self.run("the LISTEN probe", &probe, |conn| {
            let probe = probe.as_str();
            async move {
                conn.text(
                    "SELECT pg_notify($1, $2)",
                    &[Type::TEXT, Type::TEXT],
                    &[&channel, &probe],
                )
                .await
            }
        })
        .await
        .map_err(|e| self.connect_error(e))?;
        let limit = self.settings.connect_timeout;
        let waited = tokio::time::timeout(limit, heard.released()).await;
        if waited.is_err() || heard.is_closed() {
            return Err(LockError::Connect {
                url: self.url.clone(),
                reason: format!(
                    "`listen_url` ({shown}) heard no `NOTIFY` sent through the URL within \
                     {limit:?}: it must reach the same PostgreSQL server and database as the \
                     pooler does (the server itself, not the pooler), or waiters would never \
                     hear a release"
                ),
                source: None,
            });
        }
        Ok(())
    }

    /// The live `LISTEN` connection, started on the caller's runtime when needed.
    pub(super) async fn listener(&self) -> Result<Arc<Listener>, PgError> {
        self.listener
            .get(Listener::is_alive, || Box::pin(Listener::start(self)))
            .await
    }
}

/// One `LISTEN` connection per client. Its driver task turns notifications (payload: the lock
/// name) into hub wake-ups; when the connection dies the hub is closed, which wakes every
/// waiter so it retries and listens again through a new connection.
pub(super) struct Listener {
    pub(super) hub: Arc<ReleaseHub>,
    dead: Arc<AtomicBool>,
    runtime: RuntimeBound<()>,
    /// Keeps the connection open.
    _client: Client,
}

impl Listener {
    async fn start(backend: &PostgresBackend) -> Result<Arc<Listener>, PgError> {
        // Behind a transaction pooler, `LISTEN` goes to the server itself (`listen_url`).
        let (client, mut connection) = match &backend.listen {
            Some((config, tls, _)) => {
                connect_raw(
                    config,
                    tls,
                    backend.settings.connect_timeout,
                    "the LISTEN connection (listen_url)",
                )
                .await?
            }
            None => backend.connect_raw("the LISTEN connection").await?,
        };
        let hub = ReleaseHub::new(None);
        let (closer, dead) = CloseOnDrop::new(&hub);
        tokio::spawn(async move {
            let _closer = closer;
            let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => _closer.hub.notify(n.payload()),
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(error = %describe(&error), "distlock: postgres LISTEN connection ended");
                        break;
                    }
                }
            }
        });
        backend
            .timed("LISTEN", client.batch_execute(&backend.sql.listen))
            .await?;
        Ok(Arc::new(Listener {
            hub,
            dead,
            runtime: RuntimeBound::new(()),
            _client: client,
        }))
    }

    fn is_alive(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && self.runtime.is_alive()
    }
}

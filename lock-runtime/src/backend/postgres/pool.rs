//! The connections of a `PostgresBackend`: the pool its statements run on, each connection
//! with its prepared statements, and the `LISTEN` connection that hears releases.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, Statement};

use super::PostgresBackend;
use super::errors::{PgError, describe};
use crate::backend::sql::errors::timed;
use crate::backend::sql::slot_of;
use crate::notify::{CloseOnDrop, ReleaseHub};
use crate::runtime::RuntimeBound;

use super::tls::{MakeTls, RawConnection};

/// A connection with its prepared statements.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) acquire: Statement,
    pub(super) acquire_fenced: Statement,
    pub(super) remaining: Statement,
    pub(super) renew: Statement,
    pub(super) renew_many: Statement,
    pub(super) release: Statement,
    pub(super) release_unmarked: Statement,
    pub(super) release_quiet: Statement,
    pub(super) read_acquire: Statement,
    pub(super) share_join: Statement,
    pub(super) read_renew: Statement,
    pub(super) read_release: Statement,
    pub(super) share_release_alone: Statement,
    pub(super) permit_acquire: Statement,
    pub(super) mark: Statement,
    pub(super) flag: Statement,
    /// Which connection this is (see [`PostgresBackend::invalidate`]).
    pub(super) number: u64,
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
    let (client, connection) = connect_raw(config, tls, limit, "the connection attempt").await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(error = %describe(&error), "distlock: {kind} connection ended");
        }
    });
    Ok(client)
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
        (bound.is_alive() && !bound.get().client.is_closed()).then(|| Arc::clone(bound.get()))
    }

    /// The pooled connection for lock `name`, made on the caller's runtime when its slot is
    /// empty, broken, or was made on a runtime that has shut down.
    ///
    /// Every statement about one lock goes through the same connection, which runs them in the
    /// order they were sent: the release an abandoned acquisition sends in the background can
    /// never overtake that acquisition. Different locks spread over the pool.
    async fn connection(&self, name: &str) -> Result<Arc<Conn>, PgError> {
        let i = slot_of(name, self.slots.len());
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
        let client = self.open().await?;
        // Sent together: the connection pipelines them, one round trip for all. First, the
        // lock table is to be read by its primary key whatever its size looks like: once
        // autovacuum has emptied and truncated it, the planner believes it empty, and the
        // plans a connection caches then scan the whole heap for every release and renewal
        // while it fills with dead rows again (a third of the server's CPU per lock + release
        // in issue 53's profile). Only this client's connections, only its own statements.
        let index_only = client.batch_execute("SET enable_seqscan = off");
        let lock_params = [Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT];
        let acquiring = futures_util::future::try_join4(
            client.prepare_typed(&self.sql.acquire, &lock_params),
            client.prepare_typed(&self.sql.acquire_fenced, &lock_params),
            client.prepare_typed(&self.sql.remaining, &[Type::TEXT]),
            client.prepare_typed(&self.sql.release_unmarked, &[Type::TEXT, Type::TEXT]),
        );
        let prepared = futures_util::future::try_join4(
            acquiring,
            client.prepare_typed(&self.sql.renew, &[Type::TEXT, Type::TEXT, Type::INT8]),
            client.prepare_typed(
                &self.sql.renew_many,
                &[Type::TEXT_ARRAY, Type::TEXT_ARRAY, Type::INT8_ARRAY],
            ),
            client.prepare_typed(&self.sql.release, &[Type::TEXT, Type::TEXT]),
        );
        let reading = futures_util::future::try_join5(
            client.prepare_typed(&self.sql.read_acquire, &lock_params),
            client.prepare_typed(
                &self.sql.read_renew,
                &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT],
            ),
            client.prepare_typed(
                &self.sql.read_release,
                &[Type::TEXT, Type::TEXT, Type::TEXT],
            ),
            futures_util::future::try_join(
                client.prepare_typed(&self.sql.mark, &[Type::TEXT, Type::TEXT, Type::INT8]),
                client.prepare_typed(&self.sql.flag, &[Type::TEXT]),
            ),
            client.prepare_typed(
                &self.sql.permit_acquire,
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::TEXT,
                    Type::INT8,
                    Type::BOOL,
                ],
            ),
        );
        let prepared = futures_util::future::try_join4(
            index_only,
            prepared,
            reading,
            futures_util::future::try_join3(
                client.prepare_typed(&self.sql.release_quiet, &[Type::TEXT, Type::TEXT]),
                client.prepare_typed(
                    &self.sql.share_release_alone,
                    &[Type::TEXT, Type::TEXT, Type::TEXT],
                ),
                client.prepare_typed(&self.sql.share_join, &lock_params),
            ),
        );
        // Part of connecting: bounded by the connect timeout (a busy server or another client
        // creating the tables can hold it up for longer than one statement may take).
        let (
            (),
            ((acquire, acquire_fenced, remaining, release_unmarked), renew, renew_many, release),
            (read_acquire, read_renew, read_release, (mark, flag), permit_acquire),
            (release_quiet, share_release_alone, share_join),
        ) = timed(
            "preparing the lock statements",
            self.settings.connect_timeout,
            prepared,
        )
        .await?;
        let conn = Arc::new(Conn {
            client,
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
            number: self.connections_made.fetch_add(1, Ordering::Relaxed),
        });
        *self.slot(i) = Some(RuntimeBound::new(Arc::clone(&conn)));
        tracing::debug!(url = %self.url, slot = i, "distlock: connected to postgres");
        Ok(conn)
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

    /// Runs `op` on a pooled connection, bounded by the response timeout; a transient failure
    /// drops that connection and retries on another (the statements are idempotent per token).
    pub(super) async fn run<T, F, Fut>(
        &self,
        what: &'static str,
        name: &str,
        mut op: F,
    ) -> Result<T, PgError>
    where
        F: FnMut(Arc<Conn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut attempt = 0;
        loop {
            let result = match self.connection(name).await {
                Ok(conn) => {
                    let number = conn.number;
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
        let (client, mut connection) = backend.connect_raw("the LISTEN connection").await?;
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

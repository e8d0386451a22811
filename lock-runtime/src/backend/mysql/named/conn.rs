//! One connection of `mode=named` and where an acquisition on it stands; the statements that
//! finish a grant on it, and the end of an unrenewed hold.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

use super::names::{note_locks, sql};
use super::{MAX_WAIT_TIMEOUT, MyError};
use crate::backend::LockSpec;
use crate::backend::sql::errors::timed;
use crate::runtime::RuntimeBound;

/// One connection: the driver's, its server-side id, the runtime that drives its socket, and
/// the `wait_timeout` (seconds) its session runs with now (0: the server's default).
pub(super) struct NamedConn {
    pub(super) conn: tokio::sync::Mutex<Conn>,
    pub(super) id: u32,
    pub(super) bound: RuntimeBound<()>,
    pub(super) wait_timeout: AtomicU64,
}

pub(super) use crate::backend::sql::SessionState as State;

/// One acquisition's connection.
pub(super) struct Session {
    pub(super) conn: Arc<NamedConn>,
    pub(super) state: Mutex<State>,
    /// The task of the blocking request, while it runs.
    pub(super) waiting: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Session {
    pub(super) fn state(&self) -> State {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
}

/// Whether an error means the session is over (killed, timed out, the connection gone): its
/// locks are gone with it.
pub(super) fn session_over(error: &MyError) -> bool {
    match error {
        MyError::Driver(mysql_async::Error::Io(_)) => true,
        MyError::Driver(mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed)) => {
            true
        }
        MyError::Driver(mysql_async::Error::Server(e)) => matches!(e.code, 1053 | 1927 | 2013),
        _ => false,
    }
}

/// The session's `wait_timeout` for `lease`: whole seconds, rounded up.
pub(super) fn wait_timeout(lease: Duration) -> u64 {
    let seconds = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    seconds.clamp(1, MAX_WAIT_TIMEOUT)
}

/// `GET_LOCK(?, 0) + …` for `parts` note locks: their sum is `parts` when all were taken.
pub(super) fn note_sum(parts: usize) -> String {
    vec!["GET_LOCK(?, 0)"; parts].join(" + ")
}

/// Ends an unrenewed hold at the end of its lease (`until`), if it is still held then: the
/// server's idle timeout counts whole seconds, and a live client need not wait for it.
/// `until` is a lease after the answer of the hold's last statement, not after its sending:
/// the listing's TTL counts from the server's idle clock, which started in between, and a
/// hold ended before the end it was listed with would be seen as released, not expired.
pub(super) fn expire(
    session: &Arc<Session>,
    spec: &LockSpec<'_>,
    until: tokio::time::Instant,
    limit: Duration,
) {
    if spec.renew {
        return;
    }
    let session = Arc::clone(session);
    tokio::spawn(async move {
        tokio::time::sleep_until(until).await;
        if !matches!(session.state(), State::Held(_)) {
            return;
        }
        let mut c = session.conn.conn.lock().await;
        if matches!(session.state(), State::Held(_)) {
            session.set(State::Idle);
            let _ = timed(
                "ending an unrenewed lease",
                limit,
                c.query_drop("DO RELEASE_ALL_LOCKS()"),
            )
            .await;
        }
    });
}

/// Opens one connection, bounded by `limit`.
pub(super) async fn open(opts: &Opts, limit: Duration) -> Result<NamedConn, MyError> {
    let conn = timed("connecting", limit, Conn::new(opts.clone())).await?;
    Ok(NamedConn {
        id: conn.id(),
        conn: tokio::sync::Mutex::new(conn),
        bound: RuntimeBound::new(()),
        wait_timeout: AtomicU64::new(0),
    })
}

/// After `GET_LOCK` granted `name` on `conn`: with `fencing`, the next token of `fences`;
/// then the note locks. Each statement bounded by `limit`.
pub(super) async fn grant_on(
    conn: &NamedConn,
    fences: &str,
    name: &str,
    token: &str,
    lease: Duration,
    fencing: bool,
    limit: Duration,
) -> Result<Option<u64>, MyError> {
    let mut c = conn.conn.lock().await;
    let fence = if fencing {
        let text = format!(
            "INSERT INTO {fences} (name, fence) VALUES (?, LAST_INSERT_ID(1)) \
             ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
        );
        let text = sql(&text, &[name.as_bytes()]);
        timed("the fencing token", limit, c.query_drop(text)).await?;
        Some(
            c.last_insert_id()
                .ok_or_else(|| MyError::Unexpected("no fencing token came back".into()))?,
        )
    } else {
        None
    };
    let notes = note_locks(token, lease, fence);
    let text = format!("SELECT {}", note_sum(notes.len()));
    let params: Vec<&[u8]> = notes.iter().map(|n| n.as_bytes()).collect();
    let text = sql(&text, &params);
    let taken: Option<i64> = timed("the note locks", limit, c.query_first(text)).await?;
    if taken != Some(notes.len() as i64) {
        return Err(MyError::Unexpected(format!(
            "the note locks answered {taken:?}"
        )));
    }
    Ok(fence)
}

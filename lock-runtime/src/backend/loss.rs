//! The loss of a session or lease that keeps many locks alive at once (a ZooKeeper session, an
//! etcd lease): one flag, set once, that every lock on it waits on.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::notify::LostFlag;
use crate::runtime::{BoxFuture, Closing, close_now, close_soon};

/// Why a session can no longer be trusted, once it cannot: a guard's lost flag, with the
/// reason every lock on the session reports.
#[derive(Default)]
pub(crate) struct Loss {
    flag: LostFlag,
    why: OnceLock<String>,
    /// Until when, on this process's monotonic clock, the session is known alive: its last
    /// confirmation plus its timeout, minus the drift margin (`None` before the first).
    alive_until: Mutex<Option<Instant>>,
}

impl Loss {
    /// Records a confirmation: the session lives at least until `until`.
    pub(crate) fn confirm(&self, until: Instant) {
        let mut alive = self.alive_until.lock().unwrap_or_else(|p| p.into_inner());
        *alive = Some(alive.map_or(until, |known| known.max(until)));
    }

    /// Until when the session is known alive (an instant in the past once it is lost).
    pub(crate) fn alive_until(&self) -> Option<Instant> {
        if self.is_lost() {
            return Some(Instant::now());
        }
        *self.alive_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the session lost; the first reason given is kept.
    pub(crate) fn mark(&self, why: String) {
        let _ = self.why.set(why);
        self.flag.set();
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.flag.get()
    }

    /// Resolves with the reason once the session is lost.
    pub(crate) async fn wait(&self) -> String {
        self.flag.wait().await;
        self.why.get().cloned().unwrap_or_default()
    }
}

/// How a session is closed on the server, and for how long a close may hold up the thread
/// that drops it.
#[derive(Clone)]
pub(crate) struct Closer {
    pub close: Closing,
    pub bound: Duration,
    /// Until when a lock on the session must outlive this process: a release before its
    /// `min_hold` (see [`keep_until`](Self::keep_until)).
    pub kept_until: Arc<Mutex<Option<Instant>>>,
}

impl Closer {
    /// A closer that runs `close`, holding up a dropping thread at most `bound`.
    pub(crate) fn new(close: Closing, bound: Duration) -> Closer {
        Closer {
            close,
            bound,
            kept_until: Arc::default(),
        }
    }

    /// A lock on the session must live until `until` (its `min_hold`) even if this process
    /// goes first: until then, the session is not closed when the client goes but left to
    /// expire — one timeout (the lock's lease, at least its `min_hold`) after its last
    /// heartbeat.
    pub(crate) fn keep_until(&self, until: Instant) {
        let mut kept = self.kept_until.lock().unwrap_or_else(|p| p.into_inner());
        *kept = Some(kept.map_or(until, |known| known.max(until)));
    }

    /// Whether the session may be closed now (no lock on it must outlive the process).
    fn may_close(&self) -> bool {
        let kept = self.kept_until.lock().unwrap_or_else(|p| p.into_inner());
        kept.is_none_or(|until| Instant::now() >= until)
    }

    /// Its client is closing ([`LockClient::close`](crate::LockClient::close)): marked lost,
    /// so that nothing else closes it again, and closed on the server, awaited (at most its
    /// bound) — unless a lock on it is kept for its `min_hold`.
    pub(crate) async fn close_now(&self, loss: &Loss) {
        if loss.is_lost() {
            return;
        }
        loss.mark("the lock client was closed".into());
        if self.may_close() {
            let _ = tokio::time::timeout(self.bound, (self.close)()).await;
        }
    }

    /// The session is being dropped (its client is gone): marked lost, so that nothing else
    /// closes it again, and closed on the server — without blocking while a runtime runs, to
    /// completion if the runtime is shutting down — unless a lock on it is kept for its
    /// `min_hold`.
    pub(crate) fn close_dropped(&self, loss: &Loss) {
        if loss.is_lost() {
            return; // given up already: closed (or expired) on the server
        }
        loss.mark("the lock client was dropped".into());
        if self.may_close() {
            close_soon(Arc::clone(&self.close), self.bound);
        }
    }
}

/// What a client keeps open on the server and ends when it closes (a ZooKeeper session, an
/// etcd lease).
pub(crate) trait Closes: Send + Sync {
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// Takes every entry of `open` out and ends them all at once ([`Backend::close`]).
///
/// [`Backend::close`]: crate::backend::Backend::close
pub(crate) fn close_all<K, T: Closes + 'static>(
    open: &Mutex<std::collections::HashMap<K, Arc<T>>>,
) -> BoxFuture<'static, ()> {
    let ended: Vec<Arc<T>> = std::mem::take(&mut *open.lock().unwrap_or_else(|p| p.into_inner()))
        .into_values()
        .collect();
    Box::pin(async move {
        let closing = ended.iter().map(|each| each.close()).collect();
        crate::runtime::join_all(closing).await;
    })
}

/// Lives in the task that keeps a session alive (a heartbeat, a keepalive stream). Dropped with
/// that task by its runtime shutting down — the process ending, a `#[tokio::test]` finishing —
/// while the session still counts as alive, it marks the session lost (nothing keeps it alive
/// any more) and closes it on the server before the thread goes on, so that the locks and
/// places in line it holds go at once rather than one session timeout later.
pub(crate) struct Sentinel {
    pub loss: Arc<Loss>,
    pub closer: Closer,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if self.loss.is_lost() {
            return; // lost, given up or closed by its owner: nothing left to do here
        }
        self.loss
            .mark("its runtime shut down: nothing keeps the session alive".into());
        if !self.closer.may_close() {
            return; // a lock on it is kept for its `min_hold`: the session expires instead
        }
        close_now(Arc::clone(&self.closer.close), self.closer.bound);
    }
}

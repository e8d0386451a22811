//! What [`LockClient::close`](crate::LockClient::close) needs to know about a client: the
//! locks its guards hold, whether it was closed, and the releases of dropped guards still
//! running in the background.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::held::HeldLock;

/// One client's holds, shared by its clones and its guards (it lives in the client's renewer).
#[derive(Default)]
pub(crate) struct Holds {
    closed: AtomicBool,
    held: Mutex<Registry>,
    background: Arc<Background>,
}

/// The locks granted through the client, as weak references: a guard that is gone is pruned
/// on a later insertion, so the list stays within twice the locks alive.
#[derive(Default)]
struct Registry {
    locks: Vec<Weak<HeldLock>>,
    prune_at: usize,
}

#[derive(Default)]
struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// A release running in the background; counted until dropped.
pub(crate) struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Holds {
    /// A lock granted through the client (not a nested grant: its covering hold is here).
    pub(crate) fn register(&self, shared: &Arc<HeldLock>) {
        let mut registry = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if registry.locks.len() >= registry.prune_at {
            registry.locks.retain(|lock| lock.strong_count() > 0);
            registry.prune_at = (registry.locks.len() * 2).max(64);
        }
        registry.locks.push(Arc::downgrade(shared));
    }

    /// Closes the client: later acquisitions fail. `false` if it was closed already.
    pub(crate) fn close(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The locks still held through the client (their guards alive, not given back), taken
    /// out of the registry.
    pub(crate) fn take_held(&self) -> Vec<Arc<HeldLock>> {
        let locks = std::mem::take(&mut self.held.lock().unwrap_or_else(|p| p.into_inner()).locks);
        locks
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|shared| !shared.given_back.load(Ordering::Acquire))
            .collect()
    }

    /// Counts a release starting in the background, until the returned value is dropped.
    pub(crate) fn running(&self) -> Running {
        self.background.running.fetch_add(1, Ordering::AcqRel);
        Running(Arc::clone(&self.background))
    }

    /// Waits until no release counted by [`running`](Self::running) runs, at most `bound`.
    /// `false` if some still ran then.
    pub(crate) async fn background_done(&self, bound: Duration) -> bool {
        let background = &self.background;
        let done = async {
            loop {
                let idle = background.idle.notified();
                let mut idle = std::pin::pin!(idle);
                idle.as_mut().enable();
                if background.running.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        tokio::time::timeout(bound, done).await.is_ok()
    }
}

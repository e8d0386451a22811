//! Release notifications shared by all waiters of one client.
//!
//! A [`ReleaseHub`] maps a backend key to a `watch` channel whose value counts the releases
//! seen for that key. A waiter subscribes *before* its retry, so a release that happens between
//! the retry and the wait still marks the channel changed: no wake-up is ever missed, and no
//! waiter polls. One hub serves every waiter of a client (one shared subscription, not one per
//! waiter); entries live only while someone waits on the key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

type IdleHook = Box<dyn Fn(&str) + Send + Sync>;

/// Per-key release counters with reference-counted subscriptions.
pub(crate) struct ReleaseHub {
    entries: Mutex<HashMap<String, Entry>>,
    /// Called (under the hub's lock, so calls are ordered) when the last waiter of a key leaves;
    /// the Redis backend uses it to UNSUBSCRIBE.
    on_idle: Option<IdleHook>,
}

struct Entry {
    releases: watch::Sender<u64>,
    waiters: usize,
}

impl ReleaseHub {
    pub(crate) fn new(on_idle: Option<IdleHook>) -> Arc<ReleaseHub> {
        Arc::new(ReleaseHub {
            entries: Mutex::new(HashMap::new()),
            on_idle,
        })
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent (every mutation
        // is a single insert/remove/increment), so poisoning is ignored.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a waiter for `key`. The returned `bool` is `true` for the first waiter of the
    /// key, which is when a backend must start listening for it. `on_first` runs under the
    /// hub's lock, so it is ordered with the `on_idle` of a previous generation.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        key: &str,
        on_first: impl FnOnce(),
    ) -> ReleaseSubscription {
        let mut entries = self.entries();
        let entry = entries.entry(key.to_owned()).or_insert_with(|| Entry {
            releases: watch::Sender::new(0),
            waiters: 0,
        });
        entry.waiters += 1;
        let rx = entry.releases.subscribe();
        if entry.waiters == 1 {
            on_first();
        }
        ReleaseSubscription {
            rx,
            closed: false,
            _registration: Registration {
                hub: Arc::clone(self),
                key: key.to_owned(),
            },
        }
    }

    /// Wakes every waiter of `key`.
    pub(crate) fn notify(&self, key: &str) {
        if let Some(entry) = self.entries().get(key) {
            entry.releases.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Drops every channel: all current waiters wake up and see their subscription closed
    /// (used when the backend's notification stream dies, so waiters retry and resubscribe).
    pub(crate) fn close(&self) {
        self.entries().clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }
}

struct Registration {
    hub: Arc<ReleaseHub>,
    key: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut entries = self.hub.entries();
        if let Some(entry) = entries.get_mut(&self.key) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                entries.remove(&self.key);
                if let Some(hook) = &self.hub.on_idle {
                    hook(&self.key);
                }
            }
        }
    }
}

/// A waiter's handle on release notifications for one key.
pub struct ReleaseSubscription {
    rx: watch::Receiver<u64>,
    closed: bool,
    /// Deregisters the waiter when the subscription is dropped.
    _registration: Registration,
}

impl ReleaseSubscription {
    /// Resolves when the key has been released since the subscription was made or since the
    /// last call returned. Once the subscription is closed it never resolves again.
    pub(crate) async fn released(&mut self) {
        if self.closed {
            return std::future::pending().await;
        }
        if self.rx.changed().await.is_err() {
            self.closed = true;
        }
    }

    /// `true` when the notification stream behind this subscription is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed || self.rx.has_changed().is_err()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn a_release_before_the_wait_is_not_missed() {
        let hub = ReleaseHub::new(None);
        let mut sub = hub.subscribe("k", || {});
        hub.notify("k");
        tokio::time::timeout(Duration::from_secs(1), sub.released())
            .await
            .expect("release published before the wait must still wake the waiter");
    }

    #[tokio::test]
    async fn entries_are_refcounted_and_idle_hook_runs_once() {
        let idle = Arc::new(AtomicUsize::new(0));
        let idle2 = Arc::clone(&idle);
        let hub = ReleaseHub::new(Some(Box::new(move |_| {
            idle2.fetch_add(1, Ordering::SeqCst);
        })));
        let firsts = AtomicUsize::new(0);
        let a = hub.subscribe("k", || {
            firsts.fetch_add(1, Ordering::SeqCst);
        });
        let b = hub.subscribe("k", || {
            firsts.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(firsts.load(Ordering::SeqCst), 1);
        drop(a);
        assert_eq!(hub.len(), 1);
        assert_eq!(idle.load(Ordering::SeqCst), 0);
        drop(b);
        assert_eq!(hub.len(), 0);
        assert_eq!(idle.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn close_wakes_waiters_once_then_stays_quiet() {
        let hub = ReleaseHub::new(None);
        let mut sub = hub.subscribe("k", || {});
        hub.close();
        tokio::time::timeout(Duration::from_secs(1), sub.released())
            .await
            .expect("closing the hub wakes waiters");
        assert!(sub.is_closed());
        assert!(
            tokio::time::timeout(Duration::from_millis(50), sub.released())
                .await
                .is_err(),
            "a closed subscription must not spin"
        );
    }
}

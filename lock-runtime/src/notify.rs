//! Release notifications shared by all waiters of one client.
//!
//! A [`ReleaseHub`] maps a backend key to a `watch` channel whose value counts the releases
//! seen for that key. A waiter subscribes *before* its retry, so a release that happens between
//! the retry and the wait still marks the channel changed: no wake-up is ever missed, and no
//! waiter polls. One hub serves every waiter of a client (one shared subscription, not one per
//! waiter); entries live only while someone waits on the key.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, watch};

use crate::fast_map::FastMap;

type IdleHook = Box<dyn Fn(&str) + Send + Sync>;

/// Per-key release counters with reference-counted subscriptions.
pub(crate) struct ReleaseHub {
    entries: Mutex<FastMap<String, Listeners>>,
    /// Called (under the hub's lock, so calls are ordered) when the last waiter of a key leaves;
    /// the Redis backend uses it to UNSUBSCRIBE.
    on_idle: Option<IdleHook>,
    /// Set (under the entries' lock) by [`close`](Self::close): the stream behind the hub is
    /// gone, so a waiter that subscribes afterwards gets a closed subscription, never one that
    /// nothing will wake.
    closed: AtomicBool,
}

struct Listeners {
    releases: watch::Sender<u64>,
    /// Waiters of a fair lock, by owner token: a release wakes only the one it names.
    targeted: FastMap<String, watch::Sender<u64>>,
    waiters: usize,
}

impl ReleaseHub {
    pub(crate) fn new(on_idle: Option<IdleHook>) -> Arc<ReleaseHub> {
        Arc::new(ReleaseHub {
            entries: Mutex::default(),
            on_idle,
            closed: AtomicBool::new(false),
        })
    }

    fn entries(&self) -> MutexGuard<'_, FastMap<String, Listeners>> {
        // A panic while holding this lock cannot leave the map inconsistent (every mutation
        // is a single insert/remove/increment), so poisoning is ignored.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a waiter for `key`. The returned `bool` is `true` for the first waiter of the
    /// key, which is when a backend must start listening for it. `on_first` runs under the
    /// hub's lock, so it is ordered with the `on_idle` of a previous generation.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", test)),
        allow(dead_code)
    )]
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        key: &str,
        on_first: impl FnOnce(),
    ) -> ReleaseSubscription {
        self.subscribe_as(key, None, on_first)
    }

    /// [`subscribe`](Self::subscribe) for the waiter `token` of a fair lock: woken by
    /// [`notify`](Self::notify), and by [`notify_one`](Self::notify_one) only when it names
    /// `token`.
    pub(crate) fn subscribe_as(
        self: &Arc<Self>,
        key: &str,
        token: Option<&str>,
        on_first: impl FnOnce(),
    ) -> ReleaseSubscription {
        let mut entries = self.entries();
        let rx = if self.closed.load(Ordering::Relaxed) {
            // Its stream died between the backend's liveness check and this call: closed from
            // the start (its sender dropped: it wakes its waiter once), so the waiter
            // resubscribes through a new stream. Nothing registered to take back.
            watch::channel(0).1
        } else {
            let entry = entries.entry(key.to_owned()).or_insert_with(|| Listeners {
                releases: watch::Sender::new(0),
                targeted: FastMap::default(),
                waiters: 0,
            });
            entry.waiters += 1;
            let rx = match token {
                Some(token) => entry
                    .targeted
                    .entry(token.to_owned())
                    .or_insert_with(|| watch::Sender::new(0))
                    .subscribe(),
                None => entry.releases.subscribe(),
            };
            if entry.waiters == 1 {
                on_first();
            }
            rx
        };
        ReleaseSubscription {
            first: Channel {
                rx,
                closed: false,
                _registration: Registration {
                    hub: Arc::clone(self),
                    key: key.to_owned(),
                    token: token.map(str::to_owned),
                },
            },
            more: Vec::new(),
        }
    }

    /// Wakes every waiter of `key`.
    pub(crate) fn notify(&self, key: &str) {
        if let Some(entry) = self.entries().get(key) {
            entry.releases.send_modify(|n| *n = n.wrapping_add(1));
            for targeted in entry.targeted.values() {
                targeted.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// Wakes the waiters of `key` that are not in a fair lock's queue, and the fair waiter
    /// `token` (the next in line): a fair release wakes one waiter, not a herd.
    pub(crate) fn notify_one(&self, key: &str, token: &str) {
        if let Some(entry) = self.entries().get(key) {
            entry.releases.send_modify(|n| *n = n.wrapping_add(1));
            if let Some(targeted) = entry.targeted.get(token) {
                targeted.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// Drops every channel: all current waiters wake up and see their subscription closed
    /// (used when the backend's notification stream dies, so waiters retry and resubscribe),
    /// and so does every later subscription.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "nats")),
        allow(dead_code)
    )]
    pub(crate) fn close(&self) {
        let mut entries = self.entries();
        self.closed.store(true, Ordering::Relaxed);
        entries.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }
}

/// Held by the task that reads a backend's notifications: when the task ends, or is dropped
/// with its runtime, it marks the listener dead and closes the hub, so every waiter wakes,
/// retries and subscribes again through a new listener.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "nats")),
    allow(dead_code)
)]
pub(crate) struct CloseOnDrop {
    pub hub: Arc<ReleaseHub>,
    pub dead: Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(any(feature = "redis", feature = "postgres", feature = "nats"))]
impl CloseOnDrop {
    /// The closer of `hub`, and the flag it sets: the listener's `dead`.
    pub(crate) fn new(hub: &Arc<ReleaseHub>) -> (CloseOnDrop, Arc<std::sync::atomic::AtomicBool>) {
        let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let closer = CloseOnDrop {
            hub: Arc::clone(hub),
            dead: Arc::clone(&dead),
        };
        (closer, dead)
    }
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.dead.store(true, std::sync::atomic::Ordering::SeqCst);
        self.hub.close();
    }
}

struct Registration {
    hub: Arc<ReleaseHub>,
    key: String,
    token: Option<String>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut entries = self.hub.entries();
        if let Some(entry) = entries.get_mut(&self.key) {
            if let Some(token) = &self.token {
                entry.targeted.remove(token);
            }
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

/// A waiter's handle on release notifications for one key: from one hub, or from several
/// (one per Redlock node) merged, where any of them wakes the waiter.
pub struct ReleaseSubscription {
    first: Channel,
    more: Vec<Channel>,
}

struct Channel {
    rx: watch::Receiver<u64>,
    closed: bool,
    /// Deregisters the waiter when the subscription is dropped.
    _registration: Registration,
}

impl Channel {
    async fn released(&mut self) {
        if self.closed {
            return std::future::pending().await;
        }
        if self.rx.changed().await.is_err() {
            self.closed = true;
        }
    }

    fn is_closed(&self) -> bool {
        self.closed || self.rx.has_changed().is_err()
    }
}

impl ReleaseSubscription {
    /// One subscription that wakes on a release seen by any of `subscriptions`; `None` when
    /// there are none.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn merge(subscriptions: Vec<ReleaseSubscription>) -> Option<ReleaseSubscription> {
        let mut channels = subscriptions
            .into_iter()
            .flat_map(|s| std::iter::once(s.first).chain(s.more));
        let first = channels.next()?;
        Some(ReleaseSubscription {
            first,
            more: channels.collect(),
        })
    }

    /// Resolves when the key has been released since the subscription was made or since the
    /// last call returned. Once the subscription is closed it never resolves again.
    pub(crate) async fn released(&mut self) {
        if self.more.is_empty() {
            return self.first.released().await;
        }
        let mut waits: Vec<_> = std::iter::once(&mut self.first)
            .chain(self.more.iter_mut())
            .map(|channel| Box::pin(channel.released()))
            .collect();
        std::future::poll_fn(|cx| {
            for wait in &mut waits {
                if wait.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        })
        .await
    }

    /// Forgets the releases seen so far: [`released`](Self::released) waits for the next.
    pub(crate) fn mark_seen(&mut self) {
        for channel in std::iter::once(&mut self.first).chain(self.more.iter_mut()) {
            channel.rx.borrow_and_update();
        }
    }

    /// `true` when a notification stream behind this subscription is gone (the waiter then
    /// resubscribes, so a node that comes back is listened to again).
    pub(crate) fn is_closed(&self) -> bool {
        self.first.is_closed() || self.more.iter().any(Channel::is_closed)
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
    async fn a_merged_subscription_wakes_on_any_hub() {
        let (a, b) = (ReleaseHub::new(None), ReleaseHub::new(None));
        let mut merged =
            ReleaseSubscription::merge(vec![a.subscribe("k", || {}), b.subscribe("k", || {})])
                .expect("two subscriptions");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), merged.released())
                .await
                .is_err(),
            "nothing released yet"
        );
        b.notify("k");
        tokio::time::timeout(Duration::from_secs(1), merged.released())
            .await
            .expect("a release on the second hub wakes the waiter");
        assert!(!merged.is_closed());
        a.close();
        assert!(merged.is_closed(), "one stream gone: resubscribe");
        assert!(ReleaseSubscription::merge(Vec::new()).is_none());
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

    /// A waiter that found the backend's stream alive, and subscribed just after the stream
    /// died and closed the hub, must see its subscription closed: before, it got a fresh entry
    /// in the dead hub that nothing would ever wake or close, and slept until the holder's
    /// lease or its own deadline (a Redlock waiter cut off, granted 7.3 s late).
    #[tokio::test]
    async fn subscribing_to_a_closed_hub_gives_a_closed_subscription() {
        let hub = ReleaseHub::new(None);
        hub.close();
        let firsts = AtomicUsize::new(0);
        let sub = hub.subscribe("k", || {
            firsts.fetch_add(1, Ordering::SeqCst);
        });
        assert!(sub.is_closed(), "nothing will ever notify it: resubscribe");
        assert_eq!(hub.len(), 0, "a closed hub keeps no entries");
        assert_eq!(
            firsts.load(Ordering::SeqCst),
            0,
            "nothing to start listening on"
        );
        let mut merged = ReleaseSubscription::merge(vec![
            ReleaseHub::new(None).subscribe("k", || {}),
            hub.subscribe_as("k", Some("token"), || {}),
        ])
        .expect("two subscriptions");
        assert!(merged.is_closed());
        tokio::time::timeout(Duration::from_secs(1), merged.released())
            .await
            .expect("a closed subscription does not put its waiter to sleep");
        drop(sub);
        assert_eq!(hub.len(), 0);
    }
}

/// A one-way "lost" flag with waiters: an atomic to read, a [`Notify`] to wait on. (Cheaper
/// than a `watch` channel, which allocates and wakes eight lists on drop: this is on the path
/// of every lock call.)
#[derive(Default)]
pub(crate) struct LostFlag {
    flag: AtomicBool,
    waiters: Notify,
}

impl LostFlag {
    /// Raises the flag and wakes the waiters; `true` if it was not raised before.
    pub(crate) fn set(&self) -> bool {
        let first = !self.flag.swap(true, Ordering::AcqRel);
        if first {
            self.waiters.notify_waiters();
        }
        first
    }

    pub(crate) fn get(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves once the flag is raised.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.waiters.notified();
            tokio::pin!(notified);
            // Register before checking, so a `set` in between is not missed.
            notified.as_mut().enable();
            if self.get() {
                return;
            }
            notified.await;
        }
    }
}

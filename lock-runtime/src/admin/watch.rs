//! Following locks as they are taken and given back: [`LockClient::watch`].
//!
//! A [`LockWatch`] keeps the last listing of the locks matching its pattern and reports what
//! changed between two listings. It lists again when the store announces a change — Redis
//! (`CLIENT TRACKING` in broadcast mode on every server that holds the keys: one server, each
//! node of a cluster, the master the sentinels name, each Redlock node), ZooKeeper (a
//! persistent recursive watch), etcd (a watch of the key prefix) and `memory://` — or, where
//! the store announces nothing (PostgreSQL, MySQL/MariaDB), every
//! [`poll`](LockWatch::poll) interval.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::LockInfo;
use crate::LockClient;
use crate::error::LockError;

/// How many locks one listing reports at most.
const LIMIT: usize = 10_000;

/// With a change feed, the watch still lists this often: a change the feed could not carry
/// (its connection was replaced in between) is then seen within this time.
const SAFETY: Duration = Duration::from_secs(30);

/// How long a failed change feed is left alone before it is asked for again (the watch polls
/// meanwhile).
const FEED_RETRY: Duration = Duration::from_secs(5);

/// A lock whose lease ran out less than this after the moment it was last seen to end is
/// reported [`Expired`](LockEvent::Expired); a lock gone earlier, [`Released`](LockEvent::Released).
const EXPIRY_SLACK: Duration = Duration::from_millis(25);

/// What changed for one lock between two listings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockEvent {
    /// Held when the watch started (the first listing).
    Held(LockInfo),
    /// Taken since the last listing — or taken over: then the previous holder's
    /// [`Released`](Self::Released) or [`Expired`](Self::Expired) comes just before it. For a
    /// read lock or a semaphore: a reader (a permit's holder) joined.
    Acquired(LockInfo),
    /// Gone before its lease ran out: released, or released by force; for a read lock or a
    /// semaphore, also a reader (a permit's holder) leaving while others stay. The lock as it
    /// was last seen.
    Released(LockInfo),
    /// Gone as its lease ran out: its holder stopped renewing it. The lock as it was last seen.
    Expired(LockInfo),
}

impl LockEvent {
    /// The lock the event is about (as last seen, for a release or an expiry).
    pub fn lock(&self) -> &LockInfo {
        match self {
            LockEvent::Held(lock)
            | LockEvent::Acquired(lock)
            | LockEvent::Released(lock)
            | LockEvent::Expired(lock) => lock,
        }
    }

    /// `held`, `acquired`, `released` or `expired`.
    pub fn name(&self) -> &'static str {
        match self {
            LockEvent::Held(_) => "held",
            LockEvent::Acquired(_) => "acquired",
            LockEvent::Released(_) => "released",
            LockEvent::Expired(_) => "expired",
        }
    }

    /// Ends before beginnings, for one key.
    fn rank(&self) -> u8 {
        match self {
            LockEvent::Released(_) | LockEvent::Expired(_) => 0,
            LockEvent::Held(_) | LockEvent::Acquired(_) => 1,
        }
    }
}

/// A stream of [`LockEvent`]s for the locks whose key matches a glob: what
/// [`LockClient::watch`] returns. Each [`next`](Self::next) waits for the next change.
///
/// It compares listings, so a lock taken and given back between two of them is not reported:
/// with a store that announces changes, a hold shorter than about one listing's round trip;
/// with a polled one, shorter than the poll interval. A holder that renews its lock causes no
/// event.
#[must_use = "a watch reports nothing until `.next().await` or `.into_stream()`"]
pub struct LockWatch {
    client: LockClient,
    pattern: String,
    poll: Duration,
    feed: Follower,
    /// The last listing: each lock, and when its lease (as listed) would run out.
    known: HashMap<String, (LockInfo, Option<Instant>)>,
    pending: VecDeque<LockEvent>,
    listed: bool,
    /// The last listing failed: the next [`next`](LockWatch::next) lists at once.
    due: bool,
}

/// A store's change feed as a watcher keeps it: asked for once, and again a while after it
/// failed. [`LockWatch`] and [`Election::observe`](crate::Election::observe) wait on it.
pub(crate) struct Follower {
    client: LockClient,
    /// The backend names followed: the client's prefix and the literal start of a pattern.
    prefix: String,
    feed: Feed,
}

enum Feed {
    /// Not asked for yet.
    Unknown,
    /// The store announces changes.
    Live(ChangeFeed),
    /// The store announces nothing: the watcher polls.
    None,
    /// The feed failed (or ended): the watcher polls until it asks again, at this instant.
    Failed(Instant),
}

impl Follower {
    /// Follows the locks whose key matches the glob `pattern` (the feed is asked for by
    /// [`follow`](Self::follow)).
    pub(crate) fn new(client: &LockClient, pattern: &str) -> Follower {
        Follower {
            client: client.clone(),
            prefix: format!("{}{}", client.prefix(), literal_prefix(pattern)),
            feed: Feed::Unknown,
        }
    }

    /// Whether the store's announcements wake this follower now.
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.feed, Feed::Live(_))
    }

    /// Asks the store for its change feed when there is none yet (or a while after a
    /// failure). Call it before a look at the store: no change after that look goes
    /// unannounced.
    pub(crate) async fn follow(&mut self) {
        let ask = match self.feed {
            Feed::Unknown => true,
            Feed::Failed(at) => Instant::now() >= at,
            Feed::Live(_) | Feed::None => false,
        };
        if !ask {
            return;
        }
        self.feed = match self.client.admin_backend().changes(&self.prefix).await {
            Ok(Some(feed)) => Feed::Live(feed),
            Ok(None) => Feed::None,
            Err(error) => {
                tracing::debug!(error = %error, "distlock: no change feed; polling");
                Feed::Failed(Instant::now() + FEED_RETRY)
            }
        };
    }

    /// Until the store announces a change or `until` (with a live feed), or until `poll`
    /// from now (without one: then also no later than the moment to ask for it again).
    pub(crate) async fn wait(&mut self, until: Instant, poll: Duration) {
        let now = Instant::now();
        let feed = match &mut self.feed {
            Feed::Live(feed) => feed,
            Feed::Failed(retry) => {
                return tokio::time::sleep_until((now + poll).min(*retry)).await;
            }
            Feed::Unknown | Feed::None => return tokio::time::sleep_until(now + poll).await,
        };
        tokio::select! {
            changed = feed.changed.changed() => {
                if changed.is_err() {
                    tracing::debug!("distlock: the change feed ended; polling");
                    self.feed = Feed::Failed(Instant::now() + FEED_RETRY);
                }
            }
            () = tokio::time::sleep_until(until) => {}
        }
    }
}

impl LockClient {
    /// Follows the locks whose key matches the glob `pattern` (as in [`list`](Self::list)):
    /// the first events are the locks held now ([`LockEvent::Held`]), then each acquisition,
    /// release and expiry as it is seen.
    ///
    /// The watch lists the locks again as soon as the store announces a change (Redis,
    /// ZooKeeper, etcd, `memory://`), else every
    /// [`poll`](LockWatch::poll) interval (500 ms by default): see
    /// [`LockWatch::follows_store`].
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// use distlock::{LockClient, admin::LockEvent};
    ///
    /// let client = LockClient::connect("memory://watch-doc").await?;
    /// let mut watch = client.watch("order:*").await;
    /// let guard = client.lock("order:7").acquire().await?;
    /// let event = watch.next().await?;
    /// assert!(matches!(&event, LockEvent::Held(lock) if lock.key == "order:7"));
    /// guard.release().await?;
    /// assert_eq!(watch.next().await?.name(), "released");
    /// # Ok(()) }
    /// ```
    pub async fn watch(&self, pattern: &str) -> LockWatch {
        let mut watch = LockWatch {
            client: self.clone(),
            pattern: pattern.to_owned(),
            poll: Duration::from_millis(500),
            feed: Follower::new(self, pattern),
            known: HashMap::new(),
            pending: VecDeque::new(),
            listed: false,
            due: false,
        };
        watch.feed.follow().await;
        watch
    }
}

impl LockWatch {
    /// How often to list the locks when the store announces no changes (default 500 ms).
    pub fn poll(mut self, interval: Duration) -> Self {
        self.poll = interval.max(Duration::from_millis(1));
        self
    }

    /// Whether the watch is woken by the store's own announcements of changes (`true`), or
    /// polls (`false`: the store has none, or they failed; the watch asks for them again
    /// every few seconds).
    pub fn follows_store(&self) -> bool {
        self.feed.is_live()
    }

    /// The watch as a [`Stream`](futures_util::Stream) of events, as
    /// [`Election::observe`](crate::Election::observe) is: a failed listing is an `Err` item,
    /// and the stream goes on; it ends only when dropped.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// use futures_util::StreamExt;
    /// use distlock::LockClient;
    ///
    /// let client = LockClient::connect("memory://watch-stream-doc").await?;
    /// let _held = client.lock("job:a").acquire().await?;
    /// let events = client.watch("job:*").await.into_stream();
    /// let first: Vec<_> = events.take(1).collect().await;
    /// assert_eq!(first[0].as_ref().map(|e| e.name()).ok(), Some("held"));
    /// # Ok(()) }
    /// ```
    pub fn into_stream(
        self,
    ) -> impl futures_util::Stream<Item = Result<LockEvent, LockError>> + Send + 'static {
        futures_util::stream::unfold(self, |mut watch| async move {
            let event = watch.next().await;
            Some((event, watch))
        })
    }

    /// The next change, waiting for it as long as it takes (put a timeout around it to stop).
    ///
    /// Errors: [`LockError::Backend`] when a listing fails; the watch can be asked again (it
    /// lists again, and reports what changed meanwhile).
    pub async fn next(&mut self) -> Result<LockEvent, LockError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if self.listed && !self.due {
                self.wait().await;
            }
            self.feed.follow().await;
            let listed = self.list().await;
            self.due = listed.is_err();
            listed?;
        }
    }

    /// Until the store announces a change, a listed lease runs out (a store need not
    /// announce an expiry), or the poll interval passes.
    async fn wait(&mut self) {
        let now = Instant::now();
        let lease_end = self.known.values().filter_map(|(_, end)| *end).min();
        let until = lease_end
            .map_or(now + SAFETY, |end| end + EXPIRY_SLACK)
            .min(now + SAFETY);
        self.feed.wait(until, self.poll).await;
    }

    /// Lists the locks and queues what changed since the last listing.
    async fn list(&mut self) -> Result<(), LockError> {
        // Sent at `now`, answered at `answered`: the store looked somewhere in between. A
        // listed lease is counted from `now` (it ends no later than that says); a lock found
        // gone is compared with `answered` — on a busy host the store may look long after the
        // query was sent, and a lease that ran out meanwhile is an expiry.
        let now = Instant::now();
        let listed = self.client.list(&self.pattern, LIMIT).await?;
        let answered = Instant::now();
        let current: HashMap<String, (LockInfo, Option<Instant>)> = listed
            .into_iter()
            .map(|info| {
                let end = info.ttl.map(|ttl| now + ttl);
                (info.key.clone(), (info, end))
            })
            .collect();
        let previous = std::mem::take(&mut self.known);
        let mut events = Vec::new();
        for (key, (old, end)) in &previous {
            if !has_holder_outside(old, current.get(key).map(|(new, _)| new)) {
                continue;
            }
            // Its listed lease is over: whoever holds it now (if anyone) took it after that.
            events.push(match end {
                Some(end) if *end <= answered + EXPIRY_SLACK => LockEvent::Expired(old.clone()),
                _ => LockEvent::Released(old.clone()),
            });
        }
        for (key, (new, _)) in &current {
            if !self.listed {
                events.push(LockEvent::Held(new.clone()));
            } else if has_holder_outside(new, previous.get(key).map(|(old, _)| old)) {
                events.push(LockEvent::Acquired(new.clone()));
            }
        }
        events.sort_by(|a, b| (&a.lock().key, a.rank()).cmp(&(&b.lock().key, b.rank())));
        self.pending.extend(events);
        self.known = current;
        self.listed = true;
        Ok(())
    }
}

/// Whether `lock` has a holder `other` lacks (any holder, when `other` is `None`). A
/// holder is an owner token: the writer's, or each reader's (a semaphore's permits'). A
/// renewal changes none of them; a takeover, a reader joining or leaving does.
fn has_holder_outside(lock: &LockInfo, other: Option<&LockInfo>) -> bool {
    fn holders(lock: &LockInfo) -> impl Iterator<Item = &str> {
        let readers = lock.readers.iter().map(|r| r.token.as_str());
        lock.token.as_deref().into_iter().chain(readers)
    }
    other.is_none_or(|other| holders(lock).any(|h| !holders(other).any(|o| o == h)))
}

/// The part of a glob before its first wildcard or escape: every key it matches starts with it.
fn literal_prefix(pattern: &str) -> &str {
    let end = pattern.find(['*', '?', '\\']).unwrap_or(pattern.len());
    &pattern[..end]
}

/// A store's announcements of changes under a prefix: the receiver is marked changed after
/// each acquisition, release or expiry there (and may be after other writes). It fails once
/// the announcements stopped (the connection or session behind them ended). Dropping it stops
/// whatever task feeds it.
pub(crate) struct ChangeFeed {
    changed: watch::Receiver<()>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ChangeFeed {
    /// A feed of a sender the store keeps (`memory://`).
    pub(crate) fn of(changed: watch::Receiver<()>) -> ChangeFeed {
        ChangeFeed {
            changed,
            task: None,
        }
    }

    /// A feed driven by `task`, which marks the sender at each change and ends (dropping it)
    /// when the announcements stop. Aborted when the feed is dropped.
    #[cfg_attr(
        not(any(feature = "redis", feature = "zookeeper", feature = "etcd")),
        allow(dead_code)
    )]
    pub(crate) fn spawn<F>(task: impl FnOnce(watch::Sender<()>) -> F) -> ChangeFeed
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (sender, changed) = watch::channel(());
        ChangeFeed {
            changed,
            task: Some(tokio::spawn(task(sender))),
        }
    }
}

impl Drop for ChangeFeed {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_prefixes_stop_at_the_first_wildcard() {
        assert_eq!(literal_prefix("order:*"), "order:");
        assert_eq!(literal_prefix("a?b*"), "a");
        assert_eq!(literal_prefix(r"a\*"), "a");
        assert_eq!(literal_prefix("exact"), "exact");
        assert_eq!(literal_prefix("*"), "");
    }
}

//! The tasks of one client that want the same key, and handing the lock from one to the next
//! without letting go of it on the server.
//!
//! Tasks of a client waiting for one key queue on the key's *gate* (FIFO): only the head of
//! the queue talks to the backend, so a release does not set off a herd of local waiters. On a
//! backend that can [hand a lock over](crate::backend::Backend::hands_over) (Redis), the head
//! also leaves an *offer* — its token, lease and fencing wish — and a guard of the same client
//! that releases the key passes the lock straight to it with one command (compare the token,
//! set the waiter's): no `DEL`, no `PUBLISH`, no failed `SET` by the waiter, no wake-up of other
//! processes that would only lose the race. While a guard of this client holds the key, the
//! head does not ask the server at all: it waits for the hand-over, or for the holder to let go
//! or lose its lease.
//!
//! Hand-overs are bounded: after [`MAX_LOCAL_HANDOFFS`] in a row the holder releases the lock
//! on the server, where waiters of other processes compete for it on equal terms (a cohort
//! lock, as in Dice, Marathe and Shavit's *Lock Cohorting*): a process with a steady stream of
//! local waiters cannot keep a key from the others.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::backend::LockSpec;
use crate::fast_map::FastMap;
use crate::held::HeldLock;

/// How many times in a row a lock passes between tasks of one client before it is released on
/// the server for everyone.
pub(crate) const MAX_LOCAL_HANDOFFS: u32 = 8;

/// A client's local queues, one per key with local waiters.
pub(crate) struct LocalQueues {
    /// Tasks past the fast path (queued on a gate or about to be): while it is zero, an
    /// acquisition or a release knows there are no local waiters without locking `by_key`.
    queued: AtomicUsize,
    by_key: Mutex<Gates>,
    /// Whether the backend can hand a lock over (offers are made only then).
    hands_over: bool,
}

#[derive(Default)]
struct Gates {
    by_key: FastMap<String, Weak<KeyQueue>>,
    swept_len: usize,
}

/// The local queue of one key.
pub(crate) struct KeyQueue {
    /// FIFO among the waiting tasks: its holder is the head of the queue. Held while waiting
    /// only, never while holding the lock, so a stale guard cannot block anyone beyond its
    /// lease.
    pub(crate) gate: tokio::sync::Mutex<()>,
    state: Mutex<KeyState>,
    /// Notified when the registered holder lets go (released, not handed over).
    let_go: Notify,
}

#[derive(Default)]
struct KeyState {
    /// A guard of this client that holds the key, registered while waiters may exist.
    holder: Option<Arc<HeldLock>>,
    /// The head's offer to take the lock over.
    offer: Option<Offer>,
    /// Hand-overs since the lock was last taken on the server.
    handoffs: u32,
}

/// A waiting task's offer to take a lock over: what its own acquisition would have asked for.
pub(crate) struct Offer {
    pub token: String,
    pub lease: Duration,
    pub fencing: bool,
    pub renew: bool,
    pub reply: oneshot::Sender<Handed>,
}

impl Offer {
    /// The waiter's side of the lock, under the holder's backend name.
    pub(crate) fn spec<'a>(&'a self, name: &'a str) -> LockSpec<'a> {
        LockSpec {
            name,
            token: &self.token,
            lease: self.lease,
            fencing: self.fencing,
            renew: self.renew,
            waiting: true,
            fair: false,
            kind: crate::backend::Kind::Exclusive,
            lock_delay: Duration::ZERO,
        }
    }
}

/// What a releasing holder tells the waiter whose offer it took.
#[derive(Debug)]
pub(crate) enum Handed {
    /// The lock is the waiter's now; its lease counts from `sent_at`.
    Acquired {
        fencing_token: Option<u64>,
        sent_at: Instant,
    },
    /// The hand-over failed without a clear answer: the waiter's token may or may not be in
    /// the key (the holder removes it in the background), so the waiter goes on with a new
    /// token.
    Unknown,
}

impl LocalQueues {
    pub(crate) fn new(hands_over: bool) -> LocalQueues {
        LocalQueues {
            queued: AtomicUsize::new(0),
            by_key: Mutex::new(Gates::default()),
            hands_over,
        }
    }

    fn gates(&self) -> MutexGuard<'_, Gates> {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a task as queued while the returned value lives.
    pub(crate) fn enter(&self) -> Queued<'_> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        Queued(&self.queued)
    }

    /// How many tasks of this client are in a key's queue (waiting, or at its head asking the
    /// store): for distlock's own tests (`testing::local_queued`).
    #[cfg(feature = "testing")]
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// `true` while some task of this client waits for `key` (it holds the key's queue).
    pub(crate) fn has_waiters(&self, key: &str) -> bool {
        self.existing(key).is_some()
    }

    /// `true` when a task of this client waits for `key` on a backend that hands locks over:
    /// its head may be about to offer.
    pub(crate) fn may_offer(&self, key: &str) -> bool {
        self.hands_over && self.has_waiters(key)
    }

    /// The queue of `key`, if some task is in it.
    fn existing(&self, key: &str) -> Option<Arc<KeyQueue>> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.gates().by_key.get(key).and_then(Weak::upgrade)
    }

    /// The queue of `key`, made if there is none.
    pub(crate) fn queue(&self, key: &str) -> Arc<KeyQueue> {
        let mut gates = self.gates();
        if let Some(queue) = gates.by_key.get(key).and_then(Weak::upgrade) {
            return queue;
        }
        // Forget queues nobody uses once the map has doubled: amortized O(1).
        if gates.by_key.len() >= 64 && gates.by_key.len() >= 2 * gates.swept_len {
            gates.by_key.retain(|_, queue| queue.strong_count() > 0);
            gates.swept_len = gates.by_key.len();
        }
        let queue = Arc::new(KeyQueue {
            gate: tokio::sync::Mutex::new(()),
            state: Mutex::new(KeyState::default()),
            let_go: Notify::new(),
        });
        gates.by_key.insert(key.to_owned(), Arc::downgrade(&queue));
        queue
    }

    /// Registers a new guard as the key's local holder when tasks of this client wait for the
    /// key (`handed`: it got the lock from another guard rather than from the server).
    pub(crate) fn holding(&self, shared: &Arc<HeldLock>, handed: bool) {
        if !self.hands_over {
            return;
        }
        if let Some(queue) = self.existing(shared.key()) {
            queue.holding(shared, handed);
        }
    }

    /// For a guard about to release its lock: the offer of the next local waiter, if the lock
    /// should pass to it rather than be released on the server.
    pub(crate) fn take_offer(&self, shared: &Arc<HeldLock>) -> Option<Offer> {
        if !self.hands_over || shared.is_lost() {
            return None;
        }
        let queue = self.existing(shared.key())?;
        let mut state = queue.state();
        if state.handoffs >= MAX_LOCAL_HANDOFFS {
            return None;
        }
        let offer = state.offer.take()?;
        state.handoffs += 1;
        if state
            .holder
            .as_ref()
            .is_some_and(|h| Arc::ptr_eq(h, shared))
        {
            state.holder = None;
        }
        Some(offer)
    }

    /// A guard let go of its lock on the server (released, or dropped with its lease lost):
    /// it is no longer the key's local holder.
    pub(crate) fn let_go(&self, shared: &Arc<HeldLock>) {
        if !self.hands_over {
            return;
        }
        if let Some(queue) = self.existing(shared.key()) {
            let mut state = queue.state();
            if state
                .holder
                .as_ref()
                .is_some_and(|h| Arc::ptr_eq(h, shared))
            {
                state.holder = None;
                state.handoffs = 0;
                drop(state);
                queue.let_go.notify_waiters();
            }
        }
    }
}

impl KeyQueue {
    fn state(&self) -> MutexGuard<'_, KeyState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn holding(&self, shared: &Arc<HeldLock>, handed: bool) {
        let mut state = self.state();
        state.holder = Some(Arc::clone(shared));
        if !handed {
            state.handoffs = 0;
        }
    }

    /// Resolves when `holder` lets go of the key (released it on the server, or handed it
    /// over) or loses it.
    pub(crate) async fn holder_gone(&self, holder: &Arc<HeldLock>) -> Gone {
        let lost = crate::held::lost(Arc::clone(holder));
        tokio::pin!(lost);
        loop {
            let let_go = self.let_go.notified();
            tokio::pin!(let_go);
            let_go.as_mut().enable();
            let still = self
                .state()
                .holder
                .as_ref()
                .is_some_and(|h| Arc::ptr_eq(h, holder));
            if !still {
                return Gone::LetGo;
            }
            tokio::select! {
                _ = &mut let_go => {}
                _ = &mut lost => return Gone::Lost,
            }
        }
    }
}

/// Counts a task in [`LocalQueues`]' `queued` while it lives.
pub(crate) struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The head of a key's local queue, on a backend that hands locks over: makes and takes back
/// its offer. Dropping it takes the offer back (or, if a holder already took it, leaves the
/// holder to remove the waiter's token, which nobody will use).
pub(crate) struct Head {
    queue: Arc<KeyQueue>,
    /// The token of the offer in the queue, while there is one.
    offered: Option<String>,
    /// The answer to an offer a holder took.
    reply: Option<oneshot::Receiver<Handed>>,
}

/// How a local holder went (see [`KeyQueue::holder_gone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    LetGo,
    Lost,
}

/// What became of an offer.
pub(crate) enum Outcome {
    /// A holder passed the lock over, or failed to (see [`Handed`]).
    Handed(Handed),
    /// A holder took the offer but could not pass the lock (it was no longer its own).
    NotHanded,
}

impl Head {
    pub(crate) fn new(queue: Arc<KeyQueue>) -> Head {
        Head {
            queue,
            offered: None,
            reply: None,
        }
    }

    /// Leaves an offer for `spec`'s token (replacing an earlier one of this head's).
    pub(crate) fn offer(&mut self, spec: LockSpec<'_>) {
        if self.offered.as_deref() == Some(spec.token) {
            return;
        }
        // An earlier offer (another token) is taken back first; if a holder already took it,
        // or took one before, its answer decides.
        if !self.take_back() || self.reply.is_some() {
            return;
        }
        let (reply, answer) = oneshot::channel();
        let offer = Offer {
            token: spec.token.to_owned(),
            lease: spec.lease,
            fencing: spec.fencing,
            renew: spec.renew,
            reply,
        };
        self.queue.state().offer = Some(offer);
        self.offered = Some(spec.token.to_owned());
        self.reply = Some(answer);
        // After the offer is in place: a holder that sees this event hands the lock over.
        tracing::trace!(
            lock = spec.name,
            "distlock: offered to take the lock over from a guard of this client"
        );
    }

    /// Takes the offer back before asking the server. `Some` when a holder took it already:
    /// then its answer (awaited here, one round trip at most) decides.
    pub(crate) async fn withdraw(&mut self) -> Option<Outcome> {
        if self.take_back() && self.reply.is_none() {
            return None;
        }
        Some(self.answer().await)
    }

    /// Removes our offer if it is still in the queue; `false` if a holder took it.
    fn take_back(&mut self) -> bool {
        let Some(token) = self.offered.take() else {
            return true;
        };
        let mut state = self.queue.state();
        if state.offer.as_ref().is_some_and(|o| o.token == token) {
            state.offer = None;
            self.reply = None;
            true
        } else {
            false
        }
    }

    /// Resolves when a holder answers our offer; never while nobody took it.
    pub(crate) async fn answer(&mut self) -> Outcome {
        let Some(reply) = self.reply.as_mut() else {
            return std::future::pending().await;
        };
        let outcome = match reply.await {
            Ok(handed) => Outcome::Handed(handed),
            Err(_) => Outcome::NotHanded,
        };
        self.reply = None;
        self.offered = None;
        outcome
    }

    /// The guard of this client holding the key, if one is registered and not lost.
    pub(crate) fn holder(&self) -> Option<Arc<HeldLock>> {
        self.queue
            .state()
            .holder
            .clone()
            .filter(|holder| !holder.is_lost())
    }

    /// The key's queue.
    pub(crate) fn queue(&self) -> Arc<KeyQueue> {
        Arc::clone(&self.queue)
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        self.take_back();
    }
}

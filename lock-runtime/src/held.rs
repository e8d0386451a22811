//! What a held lock's guard, its watchdog and this client's local queue share: the floor
//! beneath `guard`, `renew`, `local` and `wait` (none of which it knows).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Hold, Kind, LockSpec, drift};
use crate::key::LockName;
pub(crate) use crate::notify::LostFlag;
use crate::plan::Plan;
use crate::token::OwnerToken;

/// One lock held: what a guard, its watchdog and this client's local queue share.
pub(crate) struct HeldLock {
    pub name: LockName,
    pub token: OwnerToken,
    pub lease: Duration,
    pub fencing_token: Option<u64>,
    pub waited: Duration,
    pub lost: LostFlag,
    /// Without renewal, the instant the lease ends (minus the drift margin).
    pub unrenewed_end: Option<Instant>,
    /// Renewed by this process's watchdog (`renew::tasks`), which confirms each renewal: the
    /// hold is lost once [`valid_until`](Self::valid_until) passes unconfirmed, whether the
    /// watchdog has run since or not (a busy runtime can hold it up). `false` without renewal
    /// (see `unrenewed_end`) and on a store whose session keeps the lock alive (ZooKeeper,
    /// etcd), whose heartbeat says when it is lost. Cleared when the guard stops renewing to
    /// give the lock back (or is dropped): the release's answer says then whether it was held.
    pub renewed_here: std::sync::atomic::AtomicBool,
    /// Taken as a fair lock: released through the lock's queue, never handed over.
    pub fair: bool,
    /// The kind of hold as granted: a reader's share is released on the server, never handed
    /// over. An upgradable read, once upgraded, is the write lock: see [`kind`](Self::kind).
    pub acquired_kind: Kind,
    /// An upgradable read that [`LockGuard::upgrade`](crate::LockGuard::upgrade) made the
    /// write lock: renewed and released as one from then on.
    pub upgraded: std::sync::atomic::AtomicBool,
    /// The fencing token the upgrade was granted (`0`: none asked for).
    pub upgraded_fence: std::sync::atomic::AtomicU64,
    /// The request's `wait` (`None`: forever): how long an upgrade waits for the readers.
    pub wait: Option<Duration>,
    /// How it was acquired, which says how it is given back: to this client's local queue
    /// first ([`Plan::local_queue`]), or to the server.
    pub plan: Plan,
    /// The backend's kind (`redis`, …), for metrics.
    pub backend: &'static str,
    /// When the lease was granted (the acquisition's send time)…
    pub granted_at: Instant,
    /// … and, in nanoseconds after that, when it was last confirmed (renewed).
    pub confirmed_ns: std::sync::atomic::AtomicU64,
    /// Of a key of several held as one: its own loss lost the set (the others were marked
    /// lost with it), so a release names this key.
    pub lost_the_set: std::sync::atomic::AtomicBool,
    /// `min_hold` in milliseconds (zero: none): the lock is held at least this long after
    /// `granted_at`. Set right after the grant (see `LockGuard::hold_at_least`): kept out of
    /// the acquisition's own state, which every locked call's future carries.
    pub min_hold_ms: std::sync::atomic::AtomicU32,
    /// `max_hold` (`LockRequest::max_hold`): renewal stops at `granted_at` + this, and the
    /// hold is lost then.
    pub max_hold: Option<Duration>,
    /// `lock_delay`: the store keeps the hold this much longer than the lease after each
    /// grant or renewal (see [`Params::store_lease`](crate::plan::Params::store_lease)).
    pub lock_delay: Duration,
    /// The hold's span (`distlock.hold`, see `distlock::guide::metrics`): open from the grant
    /// until the hold ends, when [`end_hold_span`](Self::end_hold_span) records how and closes
    /// it. `None` before the grant is reported, and after.
    pub hold_span: std::sync::Mutex<Option<tracing::Span>>,
    /// Given back by [`LockClient::close`](crate::LockClient::close): the guard's own release
    /// (or drop) then asks the store nothing.
    pub given_back: std::sync::atomic::AtomicBool,
}

impl HeldLock {
    /// Records a renewal sent at `sent_at` and confirmed: the lease lasts from then.
    pub(crate) fn confirm(&self, sent_at: Instant) {
        let ns = u64::try_from(
            sent_at
                .saturating_duration_since(self.granted_at)
                .as_nanos(),
        )
        .unwrap_or(u64::MAX);
        self.confirmed_ns
            .fetch_max(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// Until when, on this process's monotonic clock, nobody else can hold the lock: the last
    /// confirmation plus the lease, minus the drift margin.
    pub(crate) fn valid_until(&self) -> Instant {
        self.confirmed_at() + self.lease - drift(self.lease)
    }

    /// When the lease was last confirmed: the grant, or the send time of the last renewal.
    pub(crate) fn confirmed_at(&self) -> Instant {
        let ns = self.confirmed_ns.load(std::sync::atomic::Ordering::Relaxed);
        self.granted_at + Duration::from_nanos(ns)
    }

    /// The lock's `min_hold` (zero: none).
    pub(crate) fn min_hold(&self) -> Duration {
        let ms = self.min_hold_ms.load(std::sync::atomic::Ordering::Relaxed);
        Duration::from_millis(ms.into())
    }

    /// With `min_hold`, how much of it is left now (`None`: none, or it has passed): a
    /// release now must leave the lock to end that much later instead of freeing it.
    pub(crate) fn min_hold_left(&self) -> Option<Duration> {
        let min_hold = self.min_hold();
        if min_hold.is_zero() {
            return None;
        }
        let left = (self.granted_at + min_hold).saturating_duration_since(Instant::now());
        // Less than a millisecond: a backend's expiry cannot be set that finely; release.
        (left >= Duration::from_millis(1)).then_some(left)
    }

    /// With `max_hold`, the instant renewal stops and the hold is lost.
    pub(crate) fn hold_cap(&self) -> Option<Instant> {
        self.max_hold.map(|max_hold| self.granted_at + max_hold)
    }

    /// Marks the hold lost because it reached its `max_hold`.
    pub(crate) fn mark_capped(&self) {
        if let Some(max_hold) = self.max_hold {
            self.mark_lost(&format!(
                "held for its max_hold ({max_hold:?}): renewal stopped"
            ));
        }
    }

    /// The kind of hold now: as granted, or the write lock once upgraded.
    pub(crate) fn kind(&self) -> Kind {
        if self.upgraded.load(std::sync::atomic::Ordering::Acquire) {
            Kind::Exclusive
        } else {
            self.acquired_kind
        }
    }

    /// Whether this is an upgradable read (upgraded or not).
    pub(crate) fn is_upgradable(&self) -> bool {
        crate::token::is_upgradable(self.token.as_str())
    }

    /// The hold's fencing token: the grant's, or the upgrade's once upgraded (when asked for).
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        if self.upgraded.load(std::sync::atomic::Ordering::Acquire) {
            return self.fencing_token.map(|_| {
                self.upgraded_fence
                    .load(std::sync::atomic::Ordering::Acquire)
            });
        }
        self.fencing_token
    }

    /// The lock key, without the client's prefix.
    pub(crate) fn key(&self) -> &str {
        self.name.key()
    }

    pub(crate) fn spec(&self) -> LockSpec<'_> {
        LockSpec {
            name: self.name.full(),
            token: self.token.as_str(),
            lease: self.lease + self.lock_delay,
            fencing: false,
            renew: true,
            waiting: false,
            fair: self.fair,
            kind: self.kind(),
            lock_delay: self.lock_delay,
        }
    }

    /// This guard's hold, as a release names it.
    pub(crate) fn hold(&self) -> Hold<'_> {
        self.spec().hold()
    }

    pub(crate) fn mark_lost(&self, why: &str) {
        if self.lost.set() {
            tracing::warn!(key = %self.key(), backend = self.backend, why, "distlock: lock lost");
            crate::metrics::lease_lost(self.backend);
            self.end_hold_span("lost");
        }
    }

    /// Opens the hold's span as a child of `parent` (the acquiring caller's span), once.
    pub(crate) fn begin_hold_span(&self, parent: &tracing::Span) {
        let span = tracing::info_span!(
            parent: parent,
            "distlock.hold",
            key = %self.key(),
            backend = self.backend,
            kind = self.acquired_kind.span_name(),
            fencing_token = tracing::field::Empty,
            lease_ms = u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX),
            held_ms = tracing::field::Empty,
            ended = tracing::field::Empty,
        );
        if span.is_disabled() {
            return;
        }
        if let Some(token) = self.fencing_token {
            span.record("fencing_token", token);
        }
        let mut slot = self
            .hold_span
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(span);
        }
    }

    /// Records how the hold ended (`released`, `lost`, `dropped`, `release failed`) and how
    /// long it lasted, and closes its span. Only the first end counts.
    pub(crate) fn end_hold_span(&self, ended: &'static str) {
        let span = self
            .hold_span
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(span) = span {
            let held = self.granted_at.elapsed();
            span.record(
                "held_ms",
                u64::try_from(held.as_millis()).unwrap_or(u64::MAX),
            );
            span.record("ended", ended);
        }
    }

    /// Whether the hold is lost: marked so, or past the end of its lease — unrenewed, or
    /// renewed here and not confirmed in time. A renewed hold found past its last confirmed
    /// lease is marked lost then (a renewal answered later does not bring it back: another
    /// client may have held the lock in between, as far as this process can tell).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.get() {
            return true;
        }
        let now = Instant::now();
        if self.unrenewed_end.is_some_and(|end| now >= end) {
            return true;
        }
        if self.renewed_here.load(std::sync::atomic::Ordering::Acquire) && now >= self.valid_until()
        {
            self.mark_lost("no renewal confirmed before the lease ended");
            return true;
        }
        false
    }

    /// The guard stopped renewing the hold to give it back (or was dropped): its lease is no
    /// longer counted here (see [`renewed_here`](Self::renewed_here)).
    pub(crate) fn renewal_stopped(&self) {
        self.renewed_here
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// When the hold is next due to be found lost by the clock alone (see
    /// [`is_lost`](Self::is_lost)); `None`: only when marked.
    fn lost_by_clock_at(&self) -> Option<Instant> {
        match self.unrenewed_end {
            Some(end) => Some(end),
            None => self
                .renewed_here
                .load(std::sync::atomic::Ordering::Acquire)
                .then(|| self.valid_until()),
        }
    }
}

/// Resolves when `shared`'s lock is known lost; never, once it is released.
pub(crate) async fn lost(shared: Arc<HeldLock>) {
    // Once released, nobody sets the flag: the future stays pending.
    let flagged = shared.lost.wait();
    let mut flagged = std::pin::pin!(flagged);
    while let Some(end) = shared.lost_by_clock_at() {
        tokio::select! {
            _ = &mut flagged => return,
            _ = tokio::time::sleep_until(end) => {
                // A renewal confirmed since moved the end on: wait for the new one.
                if shared.is_lost() {
                    return;
                }
            }
        }
    }
    flagged.await
}

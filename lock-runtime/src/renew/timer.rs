//! The renewal timer: one task per client and runtime that holds every guard's entry until its
//! next renewal, renews the locks that come due — in batches, one task per cluster slot group
//! side by side — and puts each back at its next grid slot (or starts the watchdog task of a
//! hold with a `max_hold`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::*;

/// The watchdogs of one client on one runtime that are still to start, by start time.
pub(crate) struct Timer {
    runtime: tokio::runtime::Id,
    state: Mutex<TimerState>,
    /// Wakes the timer task for an entry due before it meant to wake.
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct TimerState {
    due: std::collections::BTreeMap<(Instant, u64), Arc<Deferred>>,
    /// Tie-breaker of entries due at the same instant.
    next: u64,
    /// When the timer task wakes anyway: an entry due earlier notifies it.
    wakes_at: Option<Instant>,
    /// The timer task (ended: none runs; it ends after a while with nothing to start, or with
    /// its runtime).
    task: Option<AbortHandle>,
}

/// How long a timer task with nothing to start waits for more before it ends.
const TIMER_IDLE: Duration = Duration::from_secs(10);

impl Renewer {
    /// The timer of the current runtime (`runtime`), made if missing; the timers of runtimes
    /// that are gone are forgotten.
    fn timer(&self, runtime: &tokio::runtime::Handle) -> Arc<Timer> {
        let id = runtime.id();
        let mut timers = self.timers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(timer) = timers.iter().find(|timer| timer.runtime == id) {
            return Arc::clone(timer);
        }
        timers.retain(|timer| {
            let state = timer.state.lock().unwrap_or_else(|p| p.into_inner());
            state.task.as_ref().is_some_and(|task| !task.is_finished())
        });
        let timer = Arc::new(Timer {
            runtime: id,
            state: Mutex::new(TimerState::default()),
            wake: tokio::sync::Notify::new(),
        });
        timers.push(Arc::clone(&timer));
        timer
    }
}

#[cfg(test)]
impl Renewer {
    /// Watchdogs waiting to start, over every runtime's timer.
    pub(super) fn deferred(&self) -> usize {
        let timers = self.timers.lock().unwrap_or_else(|p| p.into_inner());
        timers
            .iter()
            .map(|timer| {
                timer
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .due
                    .len()
            })
            .sum()
    }

    pub(super) fn started(&self) -> usize {
        self.started.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Starts each watchdog of `timer` when it is due; ends once nothing was left to start for
/// [`TIMER_IDLE`].
/// It holds its client's renewer weakly: a client dropped with no lock held is not kept alive
/// (with its connections) by the timer's idle wait.
async fn run_timer(renewer: std::sync::Weak<Renewer>, timer: Arc<Timer>) {
    let mut idle = false;
    loop {
        let now = Instant::now();
        let mut starting = Vec::new();
        let wake_at = {
            let mut state = timer.state.lock().unwrap_or_else(|p| p.into_inner());
            while let Some(entry) = state.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                starting.push(entry.remove());
            }
            let wake_at = match state.due.first_key_value() {
                Some(((at, _), _)) => {
                    idle = false;
                    *at
                }
                None if (idle && starting.is_empty()) || renewer.strong_count() == 0 => {
                    // Nothing to start for a while, or the client is gone: end (a new lock
                    // starts a new task).
                    state.task = None;
                    state.wakes_at = None;
                    return;
                }
                None => {
                    idle = true;
                    now + TIMER_IDLE
                }
            };
            state.wakes_at = Some(wake_at);
            wake_at
        };
        // (A held lock's guard holds the renewer: with entries due, it is there.)
        if let Some(renewer) = renewer.upgrade() {
            let mut renewing = Vec::new();
            for deferred in starting {
                if deferred.start(&renewer) {
                    renewing.push(deferred);
                }
            }
            if !renewing.is_empty() {
                let renewer = Arc::clone(&renewer);
                tokio::spawn(async move { renew_due(renewer, renewing).await });
            }
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = timer.wake.notified() => idle = false,
        }
    }
}

/// A watchdog still to start: its timer entry, and whether it started (or was stopped first).
pub(crate) struct Deferred {
    shared: Arc<HeldLock>,
    renewer: std::sync::Weak<Renewer>,
    timer: Arc<Timer>,
    state: Mutex<DeferredState>,
}

enum DeferredState {
    /// Made, not in the timer's map yet.
    Waiting,
    /// A hold with a `max_hold`: its watchdog task.
    Running(AbortHandle),
    /// Renewed by its timer (no task of its own): waiting in the timer's map under this key.
    Scheduled((Instant, u64)),
    /// Renewed by its timer: a renewal is under way.
    InFlight,
    Stopped,
}

impl Deferred {
    /// `shared`'s entry in the timer of `runtime`, due at `at`.
    pub(super) fn schedule(
        shared: Arc<HeldLock>,
        renewer: &Arc<Renewer>,
        runtime: &tokio::runtime::Handle,
        at: Instant,
    ) -> Arc<Deferred> {
        let deferred = Arc::new(Deferred {
            shared,
            renewer: Arc::downgrade(renewer),
            timer: renewer.timer(runtime),
            state: Mutex::new(DeferredState::Waiting),
        });
        reschedule(&deferred, at);
        deferred
    }

    /// Due: renewed by the timer now (`true`), or — a hold with a `max_hold` — its watchdog
    /// task starts; nothing if the guard stopped it first.
    fn start(&self, renewer: &Arc<Renewer>) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*state, DeferredState::Scheduled(_)) {
            return false;
        }
        if self.shared.max_hold.is_none() {
            *state = DeferredState::InFlight;
            return true;
        }
        #[cfg(test)]
        renewer
            .started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let task = tokio::spawn(watchdog(Arc::clone(&self.shared), Arc::clone(renewer)));
        // (A lock distlock renews itself ends within one lease of its `max_hold`: nothing to
        // give back when the watchdog stops there.)
        *state = DeferredState::Running(task.abort_handle());
        false
    }

    pub(super) fn stop(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, DeferredState::Stopped) {
            DeferredState::Running(task) => task.abort(),
            DeferredState::Scheduled(key) => {
                let mut timer = self.timer.state.lock().unwrap_or_else(|p| p.into_inner());
                timer.due.remove(&key);
            }
            DeferredState::Waiting | DeferredState::InFlight | DeferredState::Stopped => {}
        }
    }
}

impl Deferred {
    /// Whether its guard stopped it (released or dropped).
    fn stopped(&self) -> bool {
        matches!(
            *self.state.lock().unwrap_or_else(|p| p.into_inner()),
            DeferredState::Stopped
        )
    }
}

/// Into the timer's map at `at`: when made, and after each renewal by the timer (unless
/// stopped meanwhile). Wakes the timer task, or starts it, if it would wake later.
pub(super) fn reschedule(deferred: &Arc<Deferred>, at: Instant) {
    let mut state = deferred.state.lock().unwrap_or_else(|p| p.into_inner());
    if !matches!(*state, DeferredState::InFlight | DeferredState::Waiting) {
        return;
    }
    let timer = &deferred.timer;
    let mut ts = timer.state.lock().unwrap_or_else(|p| p.into_inner());
    let key = (at, ts.next);
    ts.next += 1;
    ts.due.insert(key, Arc::clone(deferred));
    *state = DeferredState::Scheduled(key);
    let running = ts.task.as_ref().is_some_and(|task| !task.is_finished());
    if !running {
        ts.wakes_at = Some(at);
        if let Some(renewer) = deferred.renewer.upgrade() {
            ts.task = Some(
                tokio::spawn(run_timer(Arc::downgrade(&renewer), Arc::clone(timer))).abort_handle(),
            );
        }
    } else if ts.wakes_at.is_none_or(|wakes_at| at < wakes_at) {
        ts.wakes_at = Some(at);
        timer.wake.notify_one();
    }
}

/// A renewal by the timer ended the lock's renewals (lost): nothing more to schedule.
fn end_timer_renewal(deferred: &Deferred) {
    let mut state = deferred.state.lock().unwrap_or_else(|p| p.into_inner());
    if let DeferredState::InFlight = *state {
        *state = DeferredState::Stopped;
    }
}

/// Renews the locks the timer found due: one backend call per group (a cluster slot) of up to
/// [`MAX_BATCH`], the groups side by side (a dead master delays only its own slots' locks),
/// and schedules each lock's next renewal — or marks it lost.
async fn renew_due(renewer: Arc<Renewer>, due: Vec<Arc<Deferred>>) {
    let now = Instant::now();
    let mut groups: std::collections::HashMap<u16, Vec<Arc<Deferred>>> = Default::default();
    for deferred in due {
        let shared = &deferred.shared;
        if now >= shared.valid_until() {
            shared.mark_lost(NOT_CONFIRMED);
            end_timer_renewal(&deferred);
            continue;
        }
        let group = renewer.backend.capabilities().group(shared.spec().name);
        groups.entry(group).or_default().push(deferred);
    }
    let mut groups = groups.into_values();
    let first = groups.next();
    for group in groups {
        let renewer = Arc::clone(&renewer);
        tokio::spawn(async move { renew_group(&renewer, group).await });
    }
    if let Some(group) = first {
        renew_group(&renewer, group).await;
    }
}

/// [`renew_due`]'s renewals of one group, [`MAX_BATCH`] at a time.
async fn renew_group(renewer: &Renewer, group: Vec<Arc<Deferred>>) {
    for chunk in group.chunks(MAX_BATCH) {
        let sent_at = Instant::now();
        let specs: Vec<LockSpec<'_>> = chunk.iter().map(|d| d.shared.spec()).collect();
        // Not past the first lease among them to end: the others are tried again after it.
        let valid_until = chunk
            .iter()
            .map(|d| d.shared.valid_until())
            .min()
            .unwrap_or(sent_at);
        let call = renew_specs(&*renewer.backend, &specs);
        let results = tokio::time::timeout_at(valid_until, call)
            .await
            .unwrap_or_else(|_| vec![Err(NO_ANSWER.to_owned()); chunk.len()]);
        drop(specs);
        let now = Instant::now();
        for (deferred, result) in chunk.iter().zip(results) {
            if deferred.stopped() {
                // Released (or dropped) while its renewal was under way: nothing to tell.
                continue;
            }
            let shared = &deferred.shared;
            let interval = shared.lease / 3;
            match result {
                Ok(true) => {
                    tracing::trace!(key = %shared.key(), "distlock: renewed");
                    crate::metrics::renewed(shared.backend, 1);
                    shared.confirm(sent_at);
                    let next = shared.confirmed_at() + interval;
                    reschedule(
                        deferred,
                        on_grid(next, grid_step(interval), next - grid_step(interval)),
                    );
                }
                Ok(false) => {
                    shared.mark_lost(NOT_OURS);
                    end_timer_renewal(deferred);
                }
                Err(error) => {
                    // Known to last until the last confirmed renewal plus the lease; retried
                    // until then and not a moment later.
                    let valid_until = shared.valid_until();
                    if now >= valid_until {
                        shared.mark_lost(NO_ANSWER);
                        end_timer_renewal(deferred);
                        continue;
                    }
                    crate::metrics::renewal_failed(shared.backend);
                    tracing::warn!(key = %shared.key(), %error, "distlock: renewal failed, retrying until the lease ends");
                    let pause = retry_pause(shared.lease);
                    reschedule(deferred, (now + pause).min(valid_until));
                }
            }
        }
    }
}

/// The grid renewals of locks renewed every `interval` are snapped to.
pub(super) fn grid_step(interval: Duration) -> Duration {
    (interval / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

//! The watchdog: keeps a held lock's lease alive and notices when it is lost.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::backend::{Backend, LockSpec};
use crate::error::BoxError;
use crate::held::HeldLock;
use crate::local::LocalQueues;

mod tasks;
pub(crate) use tasks::{Ended, end_capped, spawn_set_watchdog, watchdog};

/// Most locks renewed by one backend call (one Lua script on Redis).
const MAX_BATCH: usize = 500;

/// Batches the renewals of one client: watchdogs wake on a shared time grid, and the renewals
/// that come due together go to the backend as one call (one `EVALSHA` for up to 500 locks on
/// Redis) instead of one round trip each.
///
/// There is no long-lived task: the first renewal of a batch spawns a short task that waits
/// one timer tick (1 ms) for the others, then sends them all. If that task dies with its runtime
/// before it took the batch, the next renewal, on whatever runtime, spawns another: the batch
/// never waits on a task that is gone, and renewals whose watchdog died with it are dropped.
pub(crate) struct Renewer {
    backend: Arc<dyn Backend>,
    pending: Mutex<Batch>,
    /// Watchdogs not started yet, one timer per runtime (see [`Watchdog`]).
    timers: Mutex<Vec<Arc<Timer>>>,
    /// Deferred watchdogs started so far (tests).
    #[cfg(test)]
    started: std::sync::atomic::AtomicUsize,
    /// The client's local queues (here because every guard holds its client's renewer).
    local: LocalQueues,
    /// The client's holds, for `LockClient::close` (here for the same reason).
    holds: crate::closing::Holds,
}

struct DueRenewal {
    shared: Arc<HeldLock>,
    reply: oneshot::Sender<Result<bool, String>>,
}

/// The renewals waiting for the batch task, and that task while it has not taken them yet.
#[derive(Default)]
struct Batch {
    entries: Vec<DueRenewal>,
    /// The task that will take `entries`. A task whose runtime shut down before it ran is
    /// finished without having taken them.
    task: Option<AbortHandle>,
}

impl Renewer {
    /// Its address: the identity of the client it serves and of that client's guards.
    pub(crate) fn identity(this: &Arc<Renewer>) -> usize {
        Arc::as_ptr(this) as usize
    }

    pub(crate) fn new(backend: Arc<dyn Backend>) -> Arc<Renewer> {
        Arc::new(Renewer {
            local: LocalQueues::new(backend.capabilities().hands_over),
            backend,
            pending: Mutex::new(Batch::default()),
            timers: Mutex::new(Vec::new()),
            #[cfg(test)]
            started: Default::default(),
            holds: crate::closing::Holds::default(),
        })
    }

    pub(crate) fn holds(&self) -> &crate::closing::Holds {
        &self.holds
    }

    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    pub(crate) fn local(&self) -> &LocalQueues {
        &self.local
    }

    /// Renews `shared`'s lock, together with whatever else is due now.
    async fn renew(self: &Arc<Self>, shared: Arc<HeldLock>) -> Result<bool, BoxError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.entries.push(DueRenewal { shared, reply });
            // The first renewal of a batch, or the first since its task died with its runtime
            // before taking the batch (without this, the batch would wait on that task forever,
            // and every lock of this client would run out on the next runtime).
            if pending.task.as_ref().is_none_or(|task| task.is_finished()) {
                let renewer = Arc::clone(self);
                let task = tokio::spawn(async move {
                    // Let the other watchdogs woken at this grid instant join the batch: they
                    // were all fired by the same timer tick, so one more tick collects them.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let batch = {
                        let mut pending = renewer.pending.lock().unwrap_or_else(|p| p.into_inner());
                        pending.task = None;
                        std::mem::take(&mut pending.entries)
                    };
                    // A renewal whose watchdog is gone (with its runtime) asks for nothing.
                    let mut batch = batch
                        .into_iter()
                        .filter(|pending| !pending.reply.is_closed())
                        .peekable();
                    while batch.peek().is_some() {
                        let chunk: Vec<DueRenewal> = batch.by_ref().take(MAX_BATCH).collect();
                        renewer.send(chunk).await;
                    }
                });
                pending.task = Some(task.abort_handle());
            }
        }
        match answer.await {
            Ok(result) => result.map_err(BoxError::from),
            Err(_) => Err("the renewal batch was dropped (its runtime shut down)".into()),
        }
    }

    /// Sends one chunk: one call per batch group (a cluster slot), each answered as soon as it
    /// is done, so a dead master delays only the locks on its own slots.
    async fn send(self: &Arc<Self>, chunk: Vec<DueRenewal>) {
        let mut groups: std::collections::HashMap<u16, Vec<DueRenewal>> = Default::default();
        for pending in chunk {
            let group = self
                .backend
                .capabilities()
                .group(pending.shared.spec().name);
            groups.entry(group).or_default().push(pending);
        }
        let mut groups = groups.into_values();
        let first = groups.next();
        for group in groups {
            let renewer = Arc::clone(self);
            tokio::spawn(async move { renewer.send_group(group).await });
        }
        if let Some(group) = first {
            self.send_group(group).await;
        }
    }

    async fn send_group(&self, chunk: Vec<DueRenewal>) {
        let specs: Vec<LockSpec<'_>> = chunk.iter().map(|p| p.shared.spec()).collect();
        let results = renew_specs(&*self.backend, &specs).await;
        drop(specs);
        for (pending, renewed) in chunk.into_iter().zip(results) {
            let _ = pending.reply.send(renewed);
        }
    }
}

/// Renews `specs` (one group) in one backend call; a lone lock takes the backend's plain
/// renewal (a simpler statement than a batch's). One result per spec.
async fn renew_specs(backend: &dyn Backend, specs: &[LockSpec<'_>]) -> Vec<Result<bool, String>> {
    match specs {
        [spec] => vec![backend.renew(*spec).await.map_err(|e| e.to_string())],
        _ => backend.renew_many(specs).await,
    }
}

/// Why a renewed hold is lost: no renewal was confirmed before its lease ended.
const NOT_CONFIRMED: &str = "no renewal confirmed before the lease ended";
/// Why a renewed hold is lost: the renewal found the store held by another owner, or nothing.
const NOT_OURS: &str = "renewal found the lock held by another owner or gone";
/// Why a renewed hold is lost: the renewal's answer did not come before the lease ended.
const NO_ANSWER: &str = "renewal did not answer before the lease ended";

/// The pause before a failed renewal is tried again (within the lease).
fn retry_pause(lease: Duration) -> Duration {
    (lease / 20).max(Duration::from_millis(5))
}

/// `t` rounded down to a grid of `step` shared by the whole process, so watchdogs of locks with
/// the same lease wake together and their renewals batch. Never earlier than `floor`.
fn on_grid(t: Instant, step: Duration, floor: Instant) -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    if t <= epoch || step.is_zero() {
        return t;
    }
    let step = step.as_nanos();
    let since = (t - epoch).as_nanos();
    let snapped =
        epoch + Duration::from_nanos(u64::try_from(since / step * step).unwrap_or(u64::MAX));
    snapped.max(floor)
}

/// A guard's watchdog: a task, or — on a backend whose leases distlock renews itself — a timer
/// entry that starts the task only when the first renewal comes near (see [`watch`]). Stopped
/// when the guard is released or dropped.
pub(crate) enum Watchdog {
    Task(AbortHandle),
    Deferred(Arc<Deferred>),
}

impl Watchdog {
    pub(crate) fn stop(self) {
        match self {
            Watchdog::Task(task) => task.abort(),
            Watchdog::Deferred(deferred) => deferred.stop(),
        }
    }
}

/// Starts watching a held lock: renewing it every lease/3, and noticing its loss.
///
/// A backend that keeps leases alive itself (a ZooKeeper session, an etcd lease) is asked at
/// once to tell of the loss, in a task of the lock's own. Every other backend's lease needs
/// nothing before its first renewal, one lease/3 after the grant: most locks are released long
/// before. Their watchdog task is started only then, by one timer task per client and runtime;
/// until then a lock costs an entry in that timer's map, and no task, no wake-up — a task spawned
/// and aborted per lock was most of the client's own work per lock + release (two to three
/// context switches, measured on MariaDB).
pub(crate) fn watch(shared: Arc<HeldLock>, renewer: &Arc<Renewer>) -> Watchdog {
    let runtime = match tokio::runtime::Handle::try_current() {
        Ok(runtime) if !renewer.backend.capabilities().keeps_alive => runtime,
        _ => {
            let renewer = Arc::clone(renewer);
            return Watchdog::Task(
                tokio::spawn(async move {
                    if let Ended::Capped = watchdog(Arc::clone(&shared), Arc::clone(&renewer)).await
                    {
                        end_capped(&renewer, &shared).await;
                    }
                })
                .abort_handle(),
            );
        }
    };
    let interval = shared.lease / 3;
    let step = grid_step(interval);
    let due = shared.confirmed_at() + interval;
    // Renewed by the timer at its first renewal, on the grid; a hold with a `max_hold` has its
    // watchdog task started one grid step ahead (the task then sleeps to the grid).
    let at = match shared.max_hold {
        None => on_grid(due, step, due - step),
        Some(_) => due.checked_sub(step).unwrap_or_else(Instant::now),
    };
    let deferred = Arc::new(Deferred {
        shared,
        renewer: Arc::downgrade(renewer),
        timer: renewer.timer(&runtime),
        state: Mutex::new(DeferredState::Waiting),
    });
    reschedule(&deferred, at);
    Watchdog::Deferred(deferred)
}

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
    fn deferred(&self) -> usize {
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

    fn started(&self) -> usize {
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

    fn stop(&self) {
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
fn reschedule(deferred: &Arc<Deferred>, at: Instant) {
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
fn grid_step(interval: Duration) -> Duration {
    (interval / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::on_grid;
    use std::time::Duration;
    use tokio::time::Instant;

    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A batch whose task died with its runtime before it took the batch holds up no later
    /// renewal: the next one, on another runtime, is sent and answered. (It used to wait on the
    /// dead task forever, and every lock of the client then ran out: `tests/global.rs` saw
    /// "renewal works on this runtime" fail about once in 20 runs.)
    #[test]
    fn a_batch_task_that_died_with_its_runtime_holds_up_no_later_renewal() {
        let first = current_thread();
        let (client, guard) = first.block_on(async {
            let client = crate::LockClient::connect("memory://dead-batch-task")
                .await
                .unwrap();
            let guard = client
                .lock("k")
                .lease(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            (client, guard)
        });
        let renewer = std::sync::Arc::clone(client.renewer());
        first.block_on(async {
            // The renewal joins a batch and spawns its task, which waits a tick before taking
            // it; the runtime goes before that tick.
            let renewal = renewer.renew(guard.shared());
            tokio::select! {
                _ = renewal => panic!("answered before its batch task ran"),
                _ = tokio::task::yield_now() => {}
            }
        });
        drop(first);
        let second = current_thread();
        let renewed = second.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), renewer.renew(guard.shared())).await
        });
        assert!(
            matches!(renewed, Ok(Ok(true))),
            "the renewal on the next runtime: {renewed:?}"
        );
        second.block_on(async { guard.release().await.unwrap() });
    }

    /// A renewed hold whose watchdog cannot run (its runtime's only thread is busy past the
    /// lease) is reported lost by the clock: `is_lost()` answers `true` at once, the lost
    /// future resolves, and it stays lost once the watchdog runs. The store had let the lock
    /// go: another client takes it. A hold released in time is not reported lost, however
    /// long its release then takes.
    #[test]
    fn a_renewed_hold_is_lost_past_its_lease_even_if_its_watchdog_could_not_run() {
        let runtime = current_thread();
        runtime.block_on(async {
            let client = crate::LockClient::connect("memory://starved-watchdog")
                .await
                .unwrap();
            let lease = Duration::from_millis(300);
            let guard = client.lock("starved").lease(lease).acquire().await.unwrap();
            assert!(!guard.is_lost());
            // Nothing else runs on this thread meanwhile: no watchdog, no renewal.
            std::thread::sleep(lease + Duration::from_millis(100));
            assert!(guard.is_lost(), "past its lease, unrenewed, and not lost");
            tokio::time::timeout(Duration::from_millis(50), guard.lost())
                .await
                .expect("the lost future did not resolve");
            tokio::time::sleep(lease).await;
            assert!(guard.is_lost(), "found again after the watchdog ran");
            let other = client.lock("starved").try_acquire().await.unwrap();
            assert!(other.is_some(), "the store still held the lock");
            assert!(matches!(
                guard.release().await,
                Err(crate::LockError::Lost { .. })
            ));

            // Renewed as usual for three leases: never lost.
            let guard = client.lock("renewed").lease(lease).acquire().await.unwrap();
            for _ in 0..9 {
                tokio::time::sleep(lease / 3).await;
                assert!(!guard.is_lost(), "lost while renewed");
            }
            guard.release().await.unwrap();
        });
    }

    /// A lock released before its first renewal never starts a watchdog task, and leaves no
    /// timer entry behind, by release or by drop; one held past lease/3 gets its watchdog then,
    /// and is renewed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watchdog_starts_only_when_its_first_renewal_comes_near() {
        let client = crate::LockClient::connect("memory://deferred-watchdogs")
            .await
            .unwrap();
        let renewer = client.renewer();
        for i in 0..50 {
            let guard = client.lock(format!("k{i}")).acquire().await.unwrap();
            assert_eq!(
                renewer.deferred(),
                1,
                "the held lock waits for its watchdog"
            );
            guard.release().await.unwrap();
        }
        let dropped = client.lock("dropped").acquire().await.unwrap();
        drop(dropped);
        assert_eq!(
            renewer.deferred(),
            0,
            "released and dropped locks left entries"
        );
        assert_eq!(renewer.started(), 0, "a watchdog started for a short hold");

        // Held for five leases of 300 ms: the client's timer renews it (every 100 ms), with no
        // task of its own; back in the timer's map between renewals.
        let lease = Duration::from_millis(300);
        let guard = client.lock("long").lease(lease).acquire().await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(renewer.started(), 0, "a watchdog task started");
        tokio::time::sleep(lease * 5).await;
        assert!(!guard.is_lost(), "not renewed");
        let other = client.lock("long").try_acquire().await.unwrap();
        assert!(other.is_none(), "the lock ran out while held");
        guard.release().await.unwrap();
        assert_eq!(renewer.deferred(), 0, "a released lock stayed in the timer");
        // A hold with `max_hold` has a watchdog task of its own (it ends renewal at the cap).
        let capped = client
            .lock("capped")
            .lease(lease)
            .max_hold(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(renewer.started(), 1);
        capped.release().await.unwrap();

        // The timer task (still waiting, idle) does not keep a dropped client alive.
        let weak = std::sync::Arc::downgrade(renewer);
        drop(client);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            weak.upgrade().is_none(),
            "the timer task kept the client's renewer"
        );
    }

    #[test]
    fn grid_snaps_down_within_one_step() {
        let now = Instant::now();
        let step = Duration::from_millis(100);
        for offset in [0u64, 7, 99, 100, 1234] {
            let t = now + Duration::from_millis(offset);
            let snapped = on_grid(t, step, t - step);
            assert!(snapped <= t && t - snapped <= step, "{offset}");
        }
        let a = on_grid(now + Duration::from_millis(1010), step, now);
        let b = on_grid(now + Duration::from_millis(1090), step, now);
        assert!(a == b || b - a == step);
    }
}

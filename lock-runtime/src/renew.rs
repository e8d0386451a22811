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
        })
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
        // A lone lock takes the backend's plain renewal (a simpler statement than a batch's).
        let results = match specs.as_slice() {
            [spec] => vec![self.backend.renew(*spec).await.map_err(|e| e.to_string())],
            _ => self.backend.renew_many(&specs).await,
        };
        drop(specs);
        for (pending, renewed) in chunk.into_iter().zip(results) {
            let _ = pending.reply.send(renewed);
        }
    }
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
    // Started one grid step ahead of its first renewal (the watchdog then sleeps to the grid).
    let step = grid_step(interval);
    let start_at = (shared.confirmed_at() + interval)
        .checked_sub(step)
        .unwrap_or_else(Instant::now);
    let timer = renewer.timer(&runtime);
    let mut state = timer.state.lock().unwrap_or_else(|p| p.into_inner());
    let key = (start_at, state.next);
    state.next += 1;
    let deferred = Arc::new(Deferred {
        shared,
        timer: Arc::clone(&timer),
        key,
        state: Mutex::new(DeferredState::Waiting),
    });
    state.due.insert(key, Arc::clone(&deferred));
    let running = state.task.as_ref().is_some_and(|task| !task.is_finished());
    if !running {
        state.wakes_at = Some(start_at);
        state.task = Some(
            runtime
                .spawn(run_timer(Arc::downgrade(renewer), Arc::clone(&timer)))
                .abort_handle(),
        );
    } else if state.wakes_at.is_none_or(|wakes_at| start_at < wakes_at) {
        state.wakes_at = Some(start_at);
        timer.wake.notify_one();
    }
    drop(state);
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
            for deferred in starting {
                deferred.start(&renewer);
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
    timer: Arc<Timer>,
    key: (Instant, u64),
    state: Mutex<DeferredState>,
}

enum DeferredState {
    Waiting,
    Running(AbortHandle),
    Stopped,
}

impl Deferred {
    /// Due: the watchdog task starts, unless the guard stopped it first.
    fn start(&self, renewer: &Arc<Renewer>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let DeferredState::Waiting = *state {
            #[cfg(test)]
            renewer
                .started
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let task = tokio::spawn(watchdog(Arc::clone(&self.shared), Arc::clone(renewer)));
            // (A lock distlock renews itself ends within one lease of its `max_hold`: nothing
            // to give back when the watchdog stops there.)
            *state = DeferredState::Running(task.abort_handle());
        }
    }

    fn stop(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, DeferredState::Stopped) {
            DeferredState::Waiting => {
                let mut timer = self.timer.state.lock().unwrap_or_else(|p| p.into_inner());
                timer.due.remove(&self.key);
            }
            DeferredState::Running(task) => task.abort(),
            DeferredState::Stopped => {}
        }
    }
}

/// The grid renewals of locks renewed every `interval` are snapped to.
fn grid_step(interval: Duration) -> Duration {
    (interval / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

/// How a [`watchdog`] ended: the lock was lost, or reached its `max_hold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Lost,
    /// Renewal stopped at `max_hold` (the hold is marked lost). On a backend that keeps locks
    /// alive by a session the lock lives on until it is given back: see [`end_capped`].
    Capped,
}

/// Sleeps until `cap` (forever without one). The timer is boxed: this future sits inside every
/// locked call's future on ZooKeeper and etcd, and most holds have no cap.
async fn until_cap(cap: Option<Instant>) {
    match cap {
        Some(cap) => Box::pin(tokio::time::sleep_until(cap)).await,
        None => std::future::pending().await,
    }
}

/// Ends on the server a hold that reached its `max_hold` on a backend whose locks live as long
/// as the client's session or lease (ZooKeeper, etcd), which no stopped renewal would end:
/// the watchdog task of a guard releases it. (The attribute's own release does it for its
/// body, after the body is stopped or told; a lock whose lease distlock renews ends by itself
/// within one lease.)
pub(crate) async fn end_capped(renewer: &Renewer, shared: &HeldLock) {
    if !renewer.backend.capabilities().keeps_alive {
        return;
    }
    match renewer.backend.release(shared.hold()).await {
        Ok(_) => {
            tracing::debug!(key = %shared.key(), "distlock: max_hold reached: the lock was given back")
        }
        Err(error) => {
            tracing::warn!(key = %shared.key(), %error, "distlock: max_hold reached, and giving the lock back failed; it ends with the client's session")
        }
    }
}

/// Renews every lease/3 until the lock is lost or reaches its `max_hold` (then returns) —
/// forever otherwise.
pub(crate) async fn watchdog(shared: Arc<HeldLock>, renewer: Arc<Renewer>) -> Ended {
    let backend = renewer.backend();
    // (`max_hold`'s deadline is read from `shared` where needed, not kept across the awaits:
    // this future sits inside every locked call's.)
    if backend.capabilities().keeps_alive {
        // The backend keeps the lock alive (a session's heartbeats): wait for it to say lost.
        tokio::select! {
            why = backend.lost(shared.spec()) => {
                shared.mark_lost(&why);
                return Ended::Lost;
            }
            () = until_cap(shared.hold_cap()) => {
                shared.mark_capped();
                return Ended::Capped;
            }
        }
    }
    let lease = shared.lease;
    let interval = lease / 3;
    let retry_pause = (lease / 20).max(Duration::from_millis(5));
    // Renew up to one grid step early, on the shared grid, so renewals batch.
    let step = grid_step(interval);
    loop {
        let due = shared.confirmed_at() + interval;
        if let Some(cap) = shared.hold_cap()
            && cap <= due
        {
            // The last renewal has been made: the lease runs out at most one lease after the cap.
            tokio::time::sleep_until(cap).await;
            shared.mark_capped();
            return Ended::Capped;
        }
        tokio::time::sleep_until(on_grid(due, step, due - step)).await;
        // The lease is only known to last until the last confirmed renewal plus the lease
        // (minus the drift margin), on this process's monotonic clock; failures are retried
        // until then and not a moment later.
        let valid_until = shared.valid_until();
        loop {
            let sent_at = Instant::now();
            if shared.hold_cap().is_some_and(|cap| sent_at >= cap) {
                shared.mark_capped();
                return Ended::Capped;
            }
            if sent_at >= valid_until {
                shared.mark_lost("no renewal confirmed before the lease ended");
                return Ended::Lost;
            }
            match tokio::time::timeout_at(valid_until, renewer.renew(Arc::clone(&shared))).await {
                Ok(Ok(true)) => {
                    tracing::trace!(key = %shared.key(), "distlock: renewed");
                    crate::metrics::renewed(shared.backend, 1);
                    shared.confirm(sent_at);
                    break;
                }
                Ok(Ok(false)) => {
                    shared.mark_lost("renewal found the lock held by another owner or gone");
                    return Ended::Lost;
                }
                Ok(Err(error)) => {
                    crate::metrics::renewal_failed(shared.backend);
                    tracing::warn!(key = %shared.key(), %error, "distlock: renewal failed, retrying until the lease ends");
                    tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until)).await;
                }
                Err(_) => {
                    shared.mark_lost("renewal did not answer before the lease ended");
                    return Ended::Lost;
                }
            }
        }
    }
}

/// Starts renewing every lock of a set together (several keys of one guard). Aborted when the
/// guard is released or dropped.
pub(crate) fn spawn_set_watchdog(set: Vec<Arc<HeldLock>>, renewer: Arc<Renewer>) -> AbortHandle {
    tokio::spawn(set_watchdog(set, renewer)).abort_handle()
}

/// [`watchdog`] for several locks held as one: every lease/3 of the earliest confirmation,
/// all are renewed at the same instant, so they go to the backend in one batch; the set is
/// valid until the earliest of their validities, and the moment any one is lost, all are
/// marked lost (the guard holds all of them or is lost).
async fn set_watchdog(set: Vec<Arc<HeldLock>>, renewer: Arc<Renewer>) {
    let lose_all = |why: &str| {
        for shared in &set {
            shared.mark_lost(why);
        }
    };
    let backend = renewer.backend();
    // The set's `max_hold`: every key was granted with the same one.
    let cap = set.iter().filter_map(|shared| shared.hold_cap()).min();
    if backend.capabilities().keeps_alive {
        let losses = set
            .iter()
            .enumerate()
            .map(|(i, shared)| {
                let lost = backend.lost(shared.spec());
                Box::pin(async move { (i, lost.await) }) as crate::runtime::BoxFuture<'_, _>
            })
            .collect();
        let first_lost = crate::runtime::first_of::<(usize, String)>(losses);
        tokio::select! {
            (gone, why) = first_lost => lost_by(&set, gone, &why),
            () = until_cap(cap) => {
                for shared in &set {
                    shared.mark_capped();
                }
                for shared in &set {
                    end_capped(&renewer, shared).await;
                }
            }
        }
        return;
    }
    let Some(lease) = set.first().map(|shared| shared.lease) else {
        return;
    };
    let interval = lease / 3;
    let retry_pause = (lease / 20).max(Duration::from_millis(5));
    let earliest = |at: fn(&HeldLock) -> Instant| set.iter().map(|s| at(s)).min();
    let capped = || {
        for shared in &set {
            shared.mark_capped();
        }
    };
    loop {
        let Some(confirmed) = earliest(HeldLock::confirmed_at) else {
            return;
        };
        if let Some(cap) = cap
            && cap <= confirmed + interval
        {
            tokio::time::sleep_until(cap).await;
            capped();
            return;
        }
        tokio::time::sleep_until(confirmed + interval).await;
        let Some(valid_until) = earliest(HeldLock::valid_until) else {
            return;
        };
        loop {
            let sent_at = Instant::now();
            if cap.is_some_and(|cap| sent_at >= cap) {
                capped();
                return;
            }
            if sent_at >= valid_until {
                lose_all("no renewal confirmed before the lease ended");
                return;
            }
            let renewals = set
                .iter()
                .map(|shared| {
                    let renewal = renewer.renew(Arc::clone(shared));
                    Box::pin(renewal) as crate::runtime::BoxFuture<'_, _>
                })
                .collect();
            let renewed = crate::runtime::join_all(renewals);
            let Ok(renewed) = tokio::time::timeout_at(valid_until, renewed).await else {
                lose_all("renewal did not answer before the lease ended");
                return;
            };
            if let Some(gone) = renewed.iter().position(|r| matches!(r, Ok(false))) {
                lost_by(
                    &set,
                    gone,
                    "renewal found the lock held by another owner or gone",
                );
                return;
            }
            let mut failed = None;
            for (shared, result) in set.iter().zip(renewed) {
                match result {
                    Ok(_) => shared.confirm(sent_at),
                    Err(error) => failed = Some(error),
                }
            }
            let Some(error) = failed else {
                crate::metrics::renewed(set[0].backend, set.len() as u64);
                break;
            };
            crate::metrics::renewal_failed(set[0].backend);
            tracing::warn!(key = %set[0].key(), %error, "distlock: renewal of a set of locks failed, retrying until the lease ends");
            tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until)).await;
        }
    }
}

/// The set's key at `gone` is lost (`why`), and with it the set: that key first, with its own
/// reason (a release names it), then every other key.
fn lost_by(set: &[Arc<HeldLock>], gone: usize, why: &str) {
    set[gone].mark_lost(why);
    set[gone]
        .lost_the_set
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let because = format!("`{}`, another key of the set, was lost", set[gone].key());
    for shared in set {
        shared.mark_lost(&because);
    }
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

        // Held for five leases of 300 ms: its watchdog starts before the first renewal (at
        // 100 ms), and renews it.
        let lease = Duration::from_millis(300);
        let guard = client.lock("long").lease(lease).acquire().await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(renewer.started(), 1);
        assert_eq!(renewer.deferred(), 0);
        tokio::time::sleep(lease * 5).await;
        assert!(!guard.is_lost(), "not renewed");
        let other = client.lock("long").try_acquire().await.unwrap();
        assert!(other.is_none(), "the lock ran out while held");
        guard.release().await.unwrap();

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

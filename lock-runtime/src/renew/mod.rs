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
mod timer;

pub(crate) use tasks::{Ended, end_capped, spawn_set_watchdog, watchdog};
use timer::{Deferred, Timer, grid_step};

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
    Watchdog::Deferred(Deferred::schedule(shared, renewer, &runtime, at))
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

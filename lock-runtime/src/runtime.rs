//! Living with several tokio runtimes.
//!
//! Users call locked functions from `#[tokio::test]`s, where every test has its own runtime and
//! the one that created the client may already be gone. Two tools make that work:
//!
//! - [`RuntimeBound`] wraps a value whose background tasks (a connection's driver) run on the
//!   runtime that created it, and tells when that runtime has shut down, so the owner can
//!   rebuild the value on the caller's runtime instead of talking to a dead task.
//! - [`run_detached`] runs clean-up work (the release of a dropped guard) on the current runtime,
//!   and falls back to a small background thread when there is no runtime or the runtime drops
//!   the task because it is shutting down. It never blocks the caller: `Drop` must not `block_on`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

/// A boxed, sendable future.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A value tied to the runtime it was created on.
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) struct RuntimeBound<T> {
    value: T,
    alive: oneshot::Sender<()>,
}

#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
impl<T> RuntimeBound<T> {
    /// Binds `value` to the current runtime. Must be called from within a runtime.
    pub(crate) fn new(value: T) -> RuntimeBound<T> {
        let (alive, watched) = oneshot::channel::<()>();
        // This task ends when `alive` is dropped, or is dropped itself when its runtime shuts
        // down; either way `alive.is_closed()` turns true.
        tokio::spawn(async move {
            let _ = watched.await;
        });
        RuntimeBound { value, alive }
    }

    /// `false` once the runtime that created the value has shut down.
    pub(crate) fn is_alive(&self) -> bool {
        !self.alive.is_closed()
    }

    pub(crate) fn get(&self) -> &T {
        &self.value
    }
}

/// A client's background connection — the Redis pub/sub subscriber, the PostgreSQL `LISTEN`
/// connection — started on first use and again whenever the last one died (its connection
/// broke or its runtime shut down), one start at a time.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "nats")),
    allow(dead_code)
)]
pub(crate) struct Revived<T> {
    current: std::sync::Mutex<Option<Arc<T>>>,
    starting: tokio::sync::Mutex<()>,
}

#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "nats")),
    allow(dead_code)
)]
impl<T> Revived<T> {
    pub(crate) fn new() -> Revived<T> {
        Revived {
            current: std::sync::Mutex::new(None),
            starting: tokio::sync::Mutex::new(()),
        }
    }

    /// The one started last, if any (alive or not).
    #[cfg(feature = "redis")]
    pub(crate) fn latest(&self) -> Option<Arc<T>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The live one (`alive`), or a new one from `start`.
    pub(crate) async fn get<E, Fut>(
        &self,
        alive: impl Fn(&T) -> bool,
        start: impl FnOnce() -> Fut,
    ) -> Result<Arc<T>, E>
    where
        Fut: Future<Output = Result<Arc<T>, E>>,
    {
        let current = || {
            self.current
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .filter(|t| alive(t))
                .cloned()
        };
        if let Some(live) = current() {
            return Ok(live);
        }
        let _one_at_a_time = self.starting.lock().await;
        if let Some(live) = current() {
            return Ok(live);
        }
        let started = start().await?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&started));
        Ok(started)
    }
}

/// A piece of clean-up work that is safe to run more than once (it is idempotent).
pub(crate) type DetachedJob = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// Runs `job` without waiting for it: on the current runtime when there is one, otherwise, or
/// if that runtime drops the task before it finishes, on the background clean-up thread.
pub(crate) fn run_detached(job: DetachedJob) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let mut fallback = Fallback(Some(Arc::clone(&job)));
            handle.spawn(async move {
                job().await;
                fallback.disarm();
            });
        }
        Err(_) => submit_to_reaper(job),
    }
}

/// A future run in its caller's task, and finished in the background if the caller drops it
/// unfinished — what `tokio::spawn` + `JoinHandle` gives, without a task (and its cross-thread
/// wake-ups) on the common path where the caller waits for the answer. For statements that must
/// complete once sent: a MySQL statement holding its connection, whose dropping would leave the
/// connection mid-exchange and the next caller's statement behind a cancelled one; etcd's
/// acquiring transaction, which a release of its token waits for; a PostgreSQL statement
/// behind a transaction pooler, which keeps its connection's turn until answered.
#[cfg(any(feature = "mysql", feature = "etcd", feature = "postgres"))]
pub(crate) struct FinishIfDropped<T: Send + 'static>(Option<BoxFuture<'static, T>>);

#[cfg(any(feature = "mysql", feature = "etcd", feature = "postgres"))]
impl<T: Send + 'static> FinishIfDropped<T> {
    pub(crate) fn new(future: impl Future<Output = T> + Send + 'static) -> FinishIfDropped<T> {
        FinishIfDropped(Some(Box::pin(future)))
    }
}

#[cfg(any(feature = "mysql", feature = "etcd", feature = "postgres"))]
impl<T: Send + 'static> Future for FinishIfDropped<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        let Some(future) = self.0.as_mut() else {
            panic!("FinishIfDropped polled after it completed");
        };
        let output = std::task::ready!(future.as_mut().poll(cx));
        self.0 = None;
        std::task::Poll::Ready(output)
    }
}

#[cfg(any(feature = "mysql", feature = "etcd", feature = "postgres"))]
impl<T: Send + 'static> Drop for FinishIfDropped<T> {
    fn drop(&mut self) {
        let Some(future) = self.0.take() else { return };
        // A one-shot job: run again (its runtime shut down first), it finds nothing left.
        let rest = std::sync::Mutex::new(Some(future));
        run_detached(Arc::new(move || {
            let future = rest.lock().unwrap_or_else(|p| p.into_inner()).take();
            Box::pin(async move {
                if let Some(future) = future {
                    let _ = future.await;
                }
            })
        }));
    }
}

/// Hands the job to the background thread if it is dropped unfinished.
struct Fallback(Option<DetachedJob>);

impl Fallback {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Fallback {
    fn drop(&mut self) {
        if let Some(job) = self.0.take() {
            submit_to_reaper(job);
        }
    }
}

fn submit_to_reaper(job: DetachedJob) {
    static REAPER: OnceLock<Option<mpsc::UnboundedSender<DetachedJob>>> = OnceLock::new();
    let reaper = REAPER.get_or_init(|| {
        let (tx, mut rx) = mpsc::unbounded_channel::<DetachedJob>();
        let started = std::thread::Builder::new()
            .name("distlock-cleanup".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        tracing::error!(%error, "distlock: cannot start the clean-up runtime; dropped locks will expire by their lease");
                        return;
                    }
                };
                runtime.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(job());
                    }
                });
            });
        match started {
            Ok(_) => Some(tx),
            Err(error) => {
                tracing::error!(%error, "distlock: cannot start the clean-up thread; dropped locks will expire by their lease");
                None
            }
        }
    });
    if let Some(tx) = reaper {
        let _ = tx.send(job);
    }
}

/// Clean-up that must be done although it starts in `Drop`, and before the process ends if it
/// is ending: closing a ZooKeeper session, revoking an etcd lease — so that what they hold goes
/// at once rather than one lease later. Made anew on every run (it opens its own connection:
/// the runtime of the one it closes may be gone).
#[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
pub(crate) type Closing = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// Runs `close` without blocking when it can, to completion when it must: on the current
/// runtime when there is one; on a thread of its own, waited for at most `bound`, when there is
/// none or when the runtime drops the task unfinished because it is shutting down (the process
/// may be about to exit: a task left to the reaper thread would die with it).
#[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
pub(crate) fn close_soon(close: Closing, bound: std::time::Duration) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let mut unfinished = CloseUnfinished(Some((Arc::clone(&close), bound)));
            handle.spawn(async move {
                let _ = tokio::time::timeout(bound, close()).await;
                unfinished.disarm();
            });
        }
        Err(_) => close_now(close, bound),
    }
}

/// Runs `close` on a thread with a runtime of its own and waits for it, at most `bound`. For
/// `Drop` during a runtime's shutdown or without a runtime: it blocks the calling thread.
#[cfg_attr(not(any(feature = "zookeeper", feature = "etcd")), allow(dead_code))]
pub(crate) fn close_now(close: Closing, bound: std::time::Duration) {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let started = std::thread::Builder::new()
        .name("distlock-close".into())
        .spawn(move || {
            if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                runtime.block_on(async {
                    let _ = tokio::time::timeout(bound, close()).await;
                });
            }
            let _ = done.send(());
        });
    if started.is_ok() {
        let _ = finished.recv_timeout(bound + std::time::Duration::from_millis(50));
    }
}

/// Closes on a thread of its own if dropped while armed (its task dropped by a runtime that is
/// shutting down).
struct CloseUnfinished(Option<(Closing, std::time::Duration)>);

impl CloseUnfinished {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for CloseUnfinished {
    fn drop(&mut self) {
        if let Some((close, bound)) = self.0.take() {
            close_now(close, bound);
        }
    }
}

/// Runs `futures` concurrently; their outputs, in order. (A few lines rather than a
/// dependency: the memory-only build has no `futures-util`.)
pub(crate) async fn join_all<'a, T: Send + 'a>(futures: Vec<BoxFuture<'a, T>>) -> Vec<T> {
    let mut pending: Vec<Option<BoxFuture<'a, T>>> = futures.into_iter().map(Some).collect();
    let mut done: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut all = true;
        for (slot, out) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *out = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(done.iter_mut().filter_map(Option::take).collect())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// The output of whichever of `futures` finishes first (pending forever if there are none).
pub(crate) async fn first_of<'a, T: Send + 'a>(mut futures: Vec<BoxFuture<'a, T>>) -> T {
    std::future::poll_fn(move |cx| {
        for future in futures.iter_mut() {
            if let std::task::Poll::Ready(value) = future.as_mut().poll(cx) {
                return std::task::Poll::Ready(value);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn runtime_bound_notices_its_runtime_shutting_down() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bound = runtime.block_on(async { RuntimeBound::new(7) });
        assert!(bound.is_alive());
        drop(runtime);
        assert!(!bound.is_alive());
        assert_eq!(*bound.get(), 7);
    }

    #[test]
    fn detached_job_runs_without_a_runtime_and_after_a_shutdown() {
        let runs = Arc::new(AtomicUsize::new(0));
        let job_runs = Arc::clone(&runs);
        let job: DetachedJob = Arc::new(move || {
            let runs = Arc::clone(&job_runs);
            Box::pin(async move {
                runs.fetch_add(1, Ordering::SeqCst);
            })
        });
        // No runtime at all.
        run_detached(Arc::clone(&job));
        // A runtime that shuts down before the spawned task ever runs.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async { run_detached(Arc::clone(&job)) });
        drop(runtime);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while runs.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    /// Run in place while awaited; dropped unfinished, the rest runs in the background — on
    /// the current runtime, or on the clean-up thread outside any runtime.
    #[cfg(feature = "mysql")]
    #[test]
    fn a_future_dropped_unfinished_is_finished_in_the_background() {
        let finished = Arc::new(AtomicUsize::new(0));
        let work = |finished: &Arc<AtomicUsize>| {
            let finished = Arc::clone(finished);
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                7
            }
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        // Awaited: the output, once.
        let output = runtime.block_on(FinishIfDropped::new(work(&finished)));
        assert_eq!((output, finished.load(Ordering::SeqCst)), (7, 1));
        // Dropped after its first poll, inside a runtime.
        runtime.block_on(async {
            let started = FinishIfDropped::new(work(&finished));
            let cut = tokio::time::timeout(Duration::from_millis(1), started).await;
            assert!(cut.is_err());
            assert_eq!(finished.load(Ordering::SeqCst), 1, "not run to the end yet");
            tokio::time::sleep(Duration::from_millis(200)).await;
        });
        assert_eq!(
            finished.load(Ordering::SeqCst),
            2,
            "not finished after its drop"
        );
        // Dropped outside any runtime (its timer's runtime still running): the clean-up thread
        // finishes it.
        let mut started = Box::pin(FinishIfDropped::new(work(&finished)));
        runtime.block_on(async {
            let _ = futures_util::poll!(started.as_mut());
        });
        drop(started);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while finished.load(Ordering::SeqCst) < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(finished.load(Ordering::SeqCst), 3);
        drop(runtime);
    }
}

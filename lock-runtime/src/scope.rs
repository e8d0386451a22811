//! The locks the current task holds in scope — the body of a `#[distributed_lock]` function, or
//! a future run by [`LockGuard::scope`](crate::LockGuard::scope): task-scoped reentrancy and
//! [`current()`].
//!
//! Each scope runs inside a tokio task-local holding a linked list of the locks entered so far
//! (innermost first). A nested call for the same key on the same client — an annotated
//! function or `client.lock(key).acquire()` — finds its key in the list and is granted without
//! acquiring anything. A task spawned from the body starts with an empty list: it is another
//! owner and waits like any other; so is code of the same task outside the scope (two
//! branches of one `join!` that each acquire `k` by hand exclude each other).

use std::sync::Arc;

use crate::error::LockError;
use crate::held::HeldLock;

tokio::task_local! {
    static HELD: Option<TaskLock>;
}

/// The innermost lock of a task, held by value in the task-local (no allocation for a call
/// that is not nested); the outer ones are behind `parent`.
#[derive(Clone)]
pub(crate) struct TaskLock {
    /// Which client took the lock (`LockClient::identity`): compared, never dereferenced.
    /// (The scope's owner — `run_locked`'s client, a guard's renewer — outlives the entry, so
    /// the address is never reused while it exists; and no refcount is touched on the hot
    /// path.)
    pub client: usize,
    pub lock: Arc<HeldLock>,
    pub parent: Option<Arc<TaskLock>>,
}

/// The innermost lock held by the current task through a `#[distributed_lock]` function.
///
/// Returned by [`current()`]; cheap to clone, and valid after the function returns (it then
/// reports what the lock was).
#[derive(Clone)]
pub struct CurrentLock {
    lock: Arc<HeldLock>,
}

impl CurrentLock {
    /// The lock key, as rendered from the template (without the client's prefix).
    pub fn key(&self) -> &str {
        self.lock.key()
    }

    /// Which side of the key's read/write lock is held (`mode = "read"` or the write side).
    pub fn mode(&self) -> crate::LockMode {
        crate::LockMode::of(self.lock.kind())
    }

    /// For a semaphore's permit (`permits = n`), the semaphore's limit `n`; `None` for a lock.
    pub fn permits(&self) -> Option<u16> {
        self.lock.acquired_kind.permits()
    }

    /// The fencing token of this acquisition, when the lock was taken with `fencing = true`.
    pub fn fencing_token(&self) -> Option<u64> {
        self.lock.fencing_token
    }

    /// `true` once the lease is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// Resolves once the lease is known to be lost (at once if it is): for a body with
    /// `on_lost = "continue"` that stops its own work, in a `tokio::select!`, as
    /// [`LockGuard::lost`](crate::LockGuard::lost) does for a guard. Pending forever for a lock
    /// that ends otherwise (released). It owns what it needs: it outlives the borrow.
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let guard = client.lock("export").acquire().await?;
    /// // As in a `#[distributed_lock(key = "export", on_lost = "continue")]` body:
    /// let outcome = guard
    ///     .scope(async {
    ///         let lock = distlock::current().expect("inside the lock's scope");
    ///         tokio::select! {
    ///             () = lock.lost() => "stopped: the lock was lost",
    ///             () = tokio::time::sleep(std::time::Duration::from_millis(10)) => "done",
    ///         }
    ///     })
    ///     .await;
    /// assert_eq!(outcome, "done");
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        crate::held::lost(Arc::clone(&self.lock))
    }
}

impl std::fmt::Debug for CurrentLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentLock")
            .field("key", &self.key())
            .field("mode", &self.mode())
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// The innermost lock this task holds through a `#[distributed_lock]` function — in the body
/// and in everything it awaits — or `None` outside any.
///
/// ```
/// # use distlock_runtime as distlock;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert!(distlock::current().is_none());
/// # }
/// ```
pub fn current() -> Option<CurrentLock> {
    HELD.try_with(|top| {
        top.as_ref().map(|e| CurrentLock {
            lock: Arc::clone(&e.lock),
        })
    })
    .ok()
    .flatten()
}

/// This task's lock on `key` through the client of identity `client` (`LockClient::identity`),
/// if it holds one.
pub(crate) fn held(client: usize, key: &str) -> Option<Arc<HeldLock>> {
    HELD.try_with(|top| {
        let mut next = top.as_ref();
        while let Some(entry) = next {
            if entry.lock.key() == key && entry.client == client {
                return Some(Arc::clone(&entry.lock));
            }
            next = entry.parent.as_deref();
        }
        None
    })
    .ok()
    .flatten()
}

/// Runs `body` with `lock`, taken by the client of identity `client`, as the innermost held lock
/// of this task.
pub(crate) async fn enter<F: std::future::Future>(
    client: usize,
    lock: Arc<HeldLock>,
    body: F,
) -> F::Output {
    // Only a nested call allocates: its outer lock moves behind an `Arc`.
    let parent = HELD
        .try_with(|top| top.clone().map(Arc::new))
        .ok()
        .flatten();
    let entry = TaskLock {
        client,
        lock,
        parent,
    };
    HELD.scope(Some(entry), body).await
}

/// Runs `body` with every lock of `locks`, taken by the client of identity `client`
/// (`LockClient::identity`), held by this task (the first the innermost, what [`current()`]
/// reports).
pub(crate) async fn enter_all<F: std::future::Future>(
    client: usize,
    locks: Vec<Arc<HeldLock>>,
    body: F,
) -> F::Output {
    let mut top = HELD.try_with(Clone::clone).ok().flatten();
    for lock in locks.into_iter().rev() {
        top = Some(TaskLock {
            client,
            lock,
            parent: top.map(Arc::new),
        });
    }
    HELD.scope(top, body).await
}

/// Why a nested call asking for `asked` on a key its task holds as `held` cannot be granted
/// locally, if it cannot. A read under a write or under a read is granted; a write under a read
/// could never be (this task's own share excludes every writer). A permit under a permit of the
/// same semaphore is granted too; a name is one kind, and a semaphore has one limit. (A cold
/// function: the messages are built outside every locked call's future.)
#[cold]
pub(crate) fn nested_refusal(
    held: crate::backend::Kind,
    asked: crate::backend::Kind,
    key: &str,
) -> Option<LockError> {
    use crate::backend::{Kind, Refused};
    if (held, asked) == (Kind::Shared, Kind::Exclusive) {
        return Some(LockError::WriteUnderRead { key: key.into() });
    }
    let why = Refused::between(held, asked)?;
    Some(LockError::Config(format!("`{key}`: {why}")))
}

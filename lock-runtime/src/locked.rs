//! What `#[distributed_lock]` expands to: [`run_locked`] takes the lock through the call's
//! client (`client = …`, else [`with_client`](crate::with_client)'s, else the global one), runs
//! the body, and gives the lock back on every exit path.

use std::future::Future;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::LockError;
use crate::global;
use crate::options::{LockOptions, OnLost};
use crate::scope;

/// The return type of a `#[distributed_lock]` function: `Result<T, E>` with
/// `E: From<LockError>`, so a lock failure can be returned as the function's error.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock]` functions must return `Result<T, E>` where `E: From<distlock::LockError>`, not `{Self}`",
    label = "this must be `Result<T, E>` with `E: From<distlock::LockError>`",
    note = "the lock can fail (busy past `wait`, lost, backend down): return e.g. `Result<T, distlock::LockError>`, `anyhow::Result<T>`, or your error type with `impl From<distlock::LockError>`"
)]
pub trait LockedReturn: Sized {
    /// The value returned for a lock failure.
    fn from_lock_error(error: LockError) -> Self;

    /// [`run_locked`] for this return type. The generated code calls it as
    /// `<ReturnType as LockedReturn>::run_locked(…)`, so a wrong return type is reported once,
    /// at the function's `-> ReturnType`.
    fn run_locked<F, B>(
        client: Option<LockClient>,
        options: LockOptions,
        key: String,
        body: F,
        busy: B,
    ) -> impl Future<Output = Self>
    where
        F: Future<Output = Self>,
        B: FnOnce(LockError) -> Self,
    {
        run_locked(client, options, key, body, busy)
    }

    /// [`run_locked_all`] for this return type (a key list: `key = ["…", "…"]`).
    fn run_locked_all<F, B>(
        client: Option<LockClient>,
        options: LockOptions,
        keys: Vec<String>,
        body: F,
        busy: B,
    ) -> impl Future<Output = Self>
    where
        F: Future<Output = Self>,
        B: FnOnce(LockError) -> Self,
    {
        run_locked_all(client, options, keys, body, busy)
    }
}

/// `on_busy = "skip"`: what a call returns when its acquisition failed — for a lock still busy
/// as `wait` ends, `Ok(Default::default())` without running the body (other failures are still
/// errors); the `Ok` type must implement `Default` (`()`, `Option<T>`, a count). The generated
/// code names it once, at the argument (a function item: nothing in the call's future).
pub fn skip_when_busy<T: Default, E: From<LockError>>(error: LockError) -> Result<T, E> {
    match error {
        LockError::Busy { .. } | LockError::Timeout { .. } => {
            tracing::debug!(%error, "distlock: busy, the call is skipped (on_busy = \"skip\")");
            Ok(T::default())
        }
        error => Err(E::from(error)),
    }
}

/// A `lease` given in code (`lease = LEASE`), checked as the call is made: one outside
/// [`LockClient::MIN_LEASE`]..=[`LockClient::MAX_LEASE`] is a [`LockError::Config`] naming the
/// annotated function and its key (a string literal was checked at compile time instead).
#[cold]
pub fn lease_out_of_range(lease: Duration, function: &str, key: &str) -> Option<LockError> {
    let Err(LockError::Config(why)) = crate::client::check_lease(lease, Some(key)) else {
        return None;
    };
    Some(LockError::Config(format!("`{function}`: {why}")))
}

/// What `client = …` may give: a [`LockClient`], a reference to one, or an `Arc` of one.
#[diagnostic::on_unimplemented(
    message = "`client = …` must give a `distlock::LockClient` (or a reference to one), not `{Self}`",
    label = "this is not a `LockClient`",
    note = "e.g. `client = self.locks` for a field `locks: LockClient`, or `client = locks()` for a function returning `&LockClient`"
)]
pub trait AsLockClient {
    /// The client.
    fn as_lock_client(&self) -> &LockClient;
}

impl AsLockClient for LockClient {
    fn as_lock_client(&self) -> &LockClient {
        self
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for &T {
    fn as_lock_client(&self) -> &LockClient {
        (**self).as_lock_client()
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for std::sync::Arc<T> {
    fn as_lock_client(&self) -> &LockClient {
        (**self).as_lock_client()
    }
}

impl<T, E: From<LockError>> LockedReturn for Result<T, E> {
    fn from_lock_error(error: LockError) -> Self {
        Err(E::from(error))
    }
}

/// The call's client once `global::resolve` filled its slot: read in place each time, so the
/// argument stays the future's only slot for it (a second would grow every locked call's
/// future).
macro_rules! resolved {
    ($client:ident) => {
        $client.as_ref().expect("resolved above")
    };
}

/// Runs `body` while `guard` holds its locks, raced against `until_lost` (which, for the
/// attribute's inline renewal, is also what renews them): if the locks are lost first,
/// `on_lost` says whether the body runs on or is dropped. Normal exit: the release is awaited
/// before the caller returns. A macro, not a function: every locked call's future is moved
/// around whole, and an inner future of its own would add its arguments' copies to it (1,816
/// bytes against the 1,536 that `footprint` allows).
macro_rules! hold_while {
    ($guard:ident, $body:ident, $until_lost:ident, $on_lost:expr) => {{
        tokio::pin!($body);
        tokio::pin!($until_lost);
        let output = tokio::select! {
            biased;
            output = &mut $body => output,
            () = &mut $until_lost => match $on_lost {
                OnLost::Continue => $body.await,
                OnLost::Abort => {
                    let key = $guard.keys().collect::<Vec<_>>().join(", ");
                    // The lock is gone; the release only cleans up if it somehow is not.
                    drop($guard);
                    return R::from_lock_error(LockError::Lost { key });
                }
            },
        };
        if let Err(error) = $guard.release().await {
            // The body has finished and its effects are done: return its result rather than
            // an error a caller might retry; say what happened (the error names the key).
            tracing::warn!(%error, "distlock: the lock was not held to the end of the body");
        }
        output
    }};
}

/// Runs `body` while holding the lock `key` of `client` (`client = …`), else of the task's
/// client ([`with_client`](crate::with_client)), else of the global one.
///
/// - A nested call for a key this task already holds on the same client runs at once, without
///   a round trip; the outermost call releases. A nested write call for a key this task holds
///   for reading fails with [`LockError::WriteUnderRead`].
/// - `on_lost = Abort`: the body is raced against the lost signal and dropped when it fires.
/// - Normal exit: the release is awaited before returning. Panic or cancellation: the guard's
///   drop spawns the release.
pub async fn run_locked<R, F, B>(
    mut client: Option<LockClient>,
    options: LockOptions,
    key: String,
    body: F,
    busy: B,
) -> R
where
    R: LockedReturn,
    F: Future<Output = R>,
    B: FnOnce(LockError) -> R,
{
    if let Err(error) = global::resolve(&mut client) {
        return R::from_lock_error(error);
    }
    if let Some(lock) = scope::held(resolved!(client).identity(), &key) {
        if let Some(error) = scope::nested_refusal(lock.kind(), options.kind(), &key) {
            return R::from_lock_error(error);
        }
        tracing::trace!(key, "distlock: reentrant call, no acquisition");
        return scope::enter(resolved!(client).identity(), lock, body).await;
    }
    if let Err(error) = resolved!(client).check_min_hold_of(&options, &key) {
        return R::from_lock_error(error);
    }
    let mut guard = match resolved!(client).acquire_locked(key, &options).await {
        Ok(guard) => guard,
        Err(error) => return busy(error),
    };
    guard.hold_at_least(options.min_hold_ms);
    // Renewal runs here, in the caller's task, raced against the body: nothing is spawned, and
    // it stops the moment the body finishes. It resolves only when the lock is lost.
    let until_lost = guard.until_lost();
    let body = scope::enter(resolved!(client).identity(), guard.shared(), body);
    hold_while!(guard, body, until_lost, options.on_lost)
}

/// Runs `body` while holding every lock of `keys` (the attribute's key list) through the
/// call's client (as [`run_locked`] finds it): the keys are de-duplicated and taken in canonical order, all or nothing (see
/// [`LockClient::lock_all`](crate::LockClient::lock_all)), and given back on every exit path.
///
/// Keys this task already holds on the same client are granted reentrantly (refused as
/// [`run_locked`] refuses them); only the others are acquired — after the ones held, so the
/// canonical order cannot protect such a nested call (`distlock::guide::several_keys`).
pub async fn run_locked_all<R, F, B>(
    mut client: Option<LockClient>,
    options: LockOptions,
    keys: Vec<String>,
    body: F,
    busy: B,
) -> R
where
    R: LockedReturn,
    F: Future<Output = R>,
    B: FnOnce(LockError) -> R,
{
    if let Err(error) = global::resolve(&mut client) {
        return R::from_lock_error(error);
    }
    let mut wanted = Vec::with_capacity(keys.len());
    for key in keys {
        match scope::held(resolved!(client).identity(), &key) {
            Some(lock) => {
                if let Some(error) = scope::nested_refusal(lock.kind(), options.kind(), &key) {
                    return R::from_lock_error(error);
                }
            }
            None => wanted.push(key),
        }
    }
    if wanted.is_empty() {
        tracing::trace!("distlock: reentrant call, every key held already");
        return body.await;
    }
    let guard = match resolved!(client).acquire_locked_all(wanted, &options).await {
        Ok(guard) => guard,
        Err(error) => return busy(error),
    };
    guard.hold_at_least(options.min_hold_ms);
    let until_lost = guard.lost();
    let body = scope::enter_all(
        resolved!(client).identity(),
        guard.every().cloned().collect(),
        body,
    );
    hold_while!(guard, body, until_lost, options.on_lost)
}

/// The hot path's memory footprint. Every locked call's future is moved around whole, and
/// the backend's futures are boxed once per command: sizes past glibc's per-thread cache
/// (1,032 bytes) take malloc's slow path on every call. Cold paths (connecting, waiting,
/// retrying) are boxed separately so they do not inflate these.
#[cfg(test)]
mod footprint {
    use crate::options::WaitFor;
    #[cfg(feature = "redis")]
    use std::time::Duration;

    use super::*;
    #[cfg(feature = "redis")]
    use crate::backend::{Backend, LockSpec};

    const OPTIONS: LockOptions = LockOptions {
        lease: None,
        wait: WaitFor::Default,
        renew: true,
        on_lost: OnLost::Abort,
        fencing: None,
        fair: false,
        mode: crate::LockMode::Write,
        permits: None,
        min_hold_ms: 0,
        max_hold_ms: 0,
        lock_delay_ms: None,
    };

    /// 1,536 bytes until the call's own client (`client = …`, `with_client`) took a slot of
    /// 8 more: an argument keeps its slot for the future's whole life. 1,600 since `max_hold`
    /// and `lock_delay` (the options' 12 bytes, which the call and its acquisition each keep,
    /// and the watchdog's `max_hold` timer beside a session store's loss; from 1,664 as first
    /// written: the timer boxed, the deadline read where needed, the delay in milliseconds).
    /// 1,632 since a store's request (`LockSpec`, two of them alive across awaits) carries its
    /// lock-delay: Redlock judges a grant's validity by the holder's lease alone.
    #[test]
    fn a_locked_call_future_stays_small() {
        let call = run_locked::<Result<(), LockError>, _, _>(
            None,
            OPTIONS,
            "k".into(),
            async { Ok(()) },
            LockedReturn::from_lock_error,
        );
        let size = std::mem::size_of_val(&call);
        assert!(size <= 1632, "run_locked's future grew to {size} bytes");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_command_futures_fit_the_allocator_cache() {
        let settings = crate::backend::redis::RedisSettings {
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            fence_prefix: "lock-fence:".into(),
            retries: crate::backend::redis::RETRIES,
            replicas: 0,
            tls: None,
        };
        let redis = crate::backend::redis::RedisBackend::new("redis://127.0.0.1:1", settings)
            .expect("a valid URL");
        let spec = LockSpec {
            name: "lock:k",
            token: "t",
            lease: Duration::from_secs(1),
            fencing: false,
            renew: true,
            waiting: false,
            fair: false,
            kind: crate::backend::Kind::Exclusive,
            lock_delay: Duration::ZERO,
        };
        for (op, size) in [
            (
                "try_acquire",
                std::mem::size_of_val(&*redis.try_acquire(spec)),
            ),
            (
                "release",
                std::mem::size_of_val(&*redis.release(spec.hold())),
            ),
            ("renew", std::mem::size_of_val(&*redis.renew(spec))),
        ] {
            assert!(size <= 1024, "the Redis {op} future grew to {size} bytes");
        }
    }
}

//! [`SemaphoreRequest`]: a permit of a semaphore being prepared. A type of its own, so the
//! settings that would make it another kind of lock (`read`, `write`, `fair`) do not compile.

use std::future::IntoFuture;
use std::time::Duration;

use super::LockRequest;
use crate::backend::Kind;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::runtime::BoxFuture;

/// One permit of a semaphore being prepared; made by
/// [`LockClient::semaphore`](crate::LockClient::semaphore).
///
/// The settings are a [`LockRequest`]'s, with the same defaults and meaning, less those that
/// would make it another kind of lock. `.await` it directly, or call
/// [`acquire`](Self::acquire) / [`try_acquire`](Self::try_acquire).
///
/// ```compile_fail
/// # use distlock_runtime as distlock;
/// # async fn f(client: distlock::LockClient) {
/// let guard = client.semaphore("gpu-pool", 3).read().acquire().await; // no `read` on a semaphore
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a semaphore request does nothing until `.acquire().await`"]
pub struct SemaphoreRequest(pub(super) LockRequest);

impl SemaphoreRequest {
    /// How long the permit lives if its holder stops renewing it (crashes, hangs, is cut off):
    /// it comes back to the semaphore then. See [`LockRequest::lease`].
    pub fn lease(self, lease: Duration) -> Self {
        SemaphoreRequest(self.0.lease(lease))
    }

    /// How long to wait while every permit is held before failing with
    /// [`LockError::Timeout`]; `Duration::ZERO` tries once ([`LockError::Busy`]).
    pub fn wait(self, wait: Duration) -> Self {
        SemaphoreRequest(self.0.wait(wait))
    }

    /// Wait for a permit as long as it takes.
    pub fn wait_forever(self) -> Self {
        SemaphoreRequest(self.0.wait_forever())
    }

    /// Hold the permit at least `min_hold` after it was granted. See [`LockRequest::min_hold`].
    pub fn min_hold(self, min_hold: Duration) -> Self {
        SemaphoreRequest(self.0.min_hold(min_hold))
    }

    /// Hold the permit at most `max_hold` after it was granted: renewal stops then and the
    /// guard is lost. See [`LockRequest::max_hold`].
    pub fn max_hold(self, max_hold: Duration) -> Self {
        SemaphoreRequest(self.0.max_hold(max_hold))
    }

    /// After an involuntary loss of this permit (its holder stopped renewing), it comes back
    /// `delay` after its lease ran out on the store, not at once. See
    /// [`LockRequest::lock_delay`].
    pub fn lock_delay(self, delay: Duration) -> Self {
        SemaphoreRequest(self.0.lock_delay(delay))
    }

    /// Keep the permit's lease alive (renew every lease/3) while the guard lives; default
    /// `true`.
    pub fn renew(self, renew: bool) -> Self {
        SemaphoreRequest(self.0.renew(renew))
    }

    /// Hand out a fencing token with this permit, rising with every grant of the semaphore.
    pub fn fencing(self, fencing: bool) -> Self {
        SemaphoreRequest(self.0.fencing(fencing))
    }

    /// The semaphore's key, without the client's prefix.
    pub fn key(&self) -> &str {
        self.0.key()
    }

    /// How many permits the semaphore has, as asked for.
    pub fn permits(&self) -> u16 {
        match self.0.kind {
            Kind::Permits(permits) => permits,
            // A `SemaphoreRequest` is made by `LockClient::semaphore` alone.
            _ => 0,
        }
    }

    /// The permits of this semaphore not held right now: its limit minus the permits whose
    /// lease has not run out (an expired permit is free, whether or not the store has removed
    /// it yet; acquisitions waiting in line hold none). Never above the limit, never below
    /// zero; exact while nothing changes, a snapshot otherwise — a permit taken or given back
    /// a moment later is not seen, so do not acquire on the strength of it (`try_acquire` is
    /// the atomic question). One read on the server (the admin API's
    /// [`inspect`](super::LockClient::inspect)): no acquisition, no write, nothing in line.
    ///
    /// A key held as a lock or read lock, or as a semaphore of another limit, fails with
    /// [`LockError::Config`] as an acquisition would; a store without semaphores with
    /// [`LockError::Unsupported`].
    ///
    /// ```
    /// # use distlock_runtime as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock::LockError> {
    /// let client = distlock::LockClient::connect("memory://").await?;
    /// let pool = client.semaphore("gpu", 3);
    /// assert_eq!(pool.available().await?, 3);
    /// let one = pool.clone().acquire().await?;
    /// assert_eq!(pool.available().await?, 2);
    /// one.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn available(&self) -> Result<u16, LockError> {
        let request = &self.0;
        let permits = self.permits();
        if permits == 0 {
            return Err(LockError::Config(format!(
                "`{}`: a semaphore of 0 permits could never be acquired: ask for at least 1",
                request.key,
            )));
        }
        let in_use = request.client.permits_in_use(&request.key, permits).await?;
        Ok(permits - in_use)
    }

    /// Acquires a permit, waiting up to the request's `wait` while every permit is held:
    /// woken by a holder's release, or retrying when a holder's lease runs out.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        self.0.acquire().await
    }

    /// Tries once: `Ok(None)` when every permit is held.
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        self.0.try_acquire().await
    }
}

impl IntoFuture for SemaphoreRequest {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = BoxFuture<'static, Result<LockGuard, LockError>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.0.acquire())
    }
}

//! The one error type of distlock.

use std::error::Error as StdError;
use std::time::Duration;

/// A boxed error from a backend's client library (redis-rs, …), kept as the `source`.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Every message names what failed (the lock key, or the server address with its password
/// redacted) and says what to do about it.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// [`client()`](crate::client) was called, or a locked function ran, before [`init`](crate::init).
    #[error(
        "distlock has no global lock client: call `distlock::init(LockClient::connect(url).await?)` \
         or `distlock::init_from_env().await` (reads DISTLOCK_URL) once at startup, before the first lock"
    )]
    NotInitialized,

    /// [`init`](crate::init) was called a second time.
    #[error(
        "distlock's global lock client is already initialized: call `distlock::init` once per process \
         (use `distlock::client()` to reach the installed client)"
    )]
    AlreadyInitialized,

    /// The lock stayed busy for the whole `wait` — or, asked once (`wait` zero), was busy.
    #[error("{}", timeout_message(key, *waited, *wait))]
    Timeout {
        /// The lock key, without the client's prefix.
        key: String,
        /// How long the acquisition waited before giving up.
        waited: Duration,
        /// The `wait` the acquisition was given: zero for a try-once.
        wait: Duration,
    },

    /// The lease ended while the lock was meant to be held: it expired before a renewal could
    /// confirm it, or another owner holds the key now.
    #[error(
        "lock `{key}` was lost: its lease expired or another owner took the key, so the guarded \
         work may not have run exclusively (lengthen the lease or check the backend's health)"
    )]
    Lost {
        /// The lock key, without the client's prefix.
        key: String,
    },

    /// The lock key cannot be used (empty, too long, control characters).
    #[error("invalid lock key `{key}`: {reason}")]
    InvalidKey {
        /// The offending key (shortened when it is very long).
        key: String,
        /// Why it was rejected and what is allowed.
        reason: String,
    },

    /// A task holding a read lock asked for the write lock on the same key (a nested
    /// `#[distributed_lock]` call): it could never be granted, since the task's own share
    /// excludes every writer, so it fails at once instead of waiting out `wait`.
    #[error(
        "this task holds a read lock on `{key}` and asked for its write lock: it could never be \
         granted (the task's own read lock excludes every writer); take the write lock in the \
         outer call instead (a read under a write is granted), or release the read lock first"
    )]
    Upgrade {
        /// The key.
        key: String,
    },

    /// A configuration value is unusable: an invalid URL or scheme, a zero lease, …
    #[error("invalid distlock configuration: {0}")]
    Config(String),

    /// The backend could not be reached, or refused the connection (wrong password, …).
    #[error("cannot connect to the lock backend at {url}: {reason}")]
    Connect {
        /// The backend URL with any password replaced by `***`.
        url: String,
        /// What went wrong and what to check.
        reason: String,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
    },

    /// The backend failed while operating on a lock (connection dropped and not recoverable,
    /// server error, timeout, …).
    #[error("{backend} backend failed to {op} lock `{key}`: {source}")]
    Backend {
        /// Which backend (`redis`, `memory`, …).
        backend: &'static str,
        /// The operation: `acquire`, `renew`, `release`.
        op: &'static str,
        /// The lock key, without the client's prefix.
        key: String,
        /// The client library's error.
        #[source]
        source: BoxError,
    },

    /// The backend cannot do this administrative operation (list, inspect, force-release):
    /// `reason` says why, and what can. Every store built in answers all of them today; a
    /// store that cannot is expected to say so with this.
    #[error("the {backend} backend cannot {op} locks: {reason}")]
    Unsupported {
        /// Which backend (`redlock`, `memory`, …).
        backend: &'static str,
        /// The operation: `list`, `inspect`, `release`, `ping`.
        op: &'static str,
        /// Why not, and what to use instead.
        reason: String,
    },
}

/// The part of a timeout's message for a lock its own task may hold: a guard is reentrant only
/// inside its scope, so a task that took `key` by hand and asks for it again outside
/// `guard.scope(..)` waits for itself.
const HELD_HERE: &str = "; a guard is reentrant only inside its `#[distributed_lock]` body or \
    `guard.scope(..)`, so a task that holds the key by hand waits for itself elsewhere";

/// [`LockError::Timeout`]'s message: a try-once was refused because the lock is busy, and is
/// not told to fail fast (it did); a wait that ran out is told what to change.
fn timeout_message(key: &str, waited: Duration, wait: Duration) -> String {
    if wait.is_zero() {
        format!(
            "lock `{key}` is busy: it is held by another process, or by another guard of this \
             one (asked once, as `wait = 0` says; give a `wait` to queue for it instead{HELD_HERE})"
        )
    } else {
        format!(
            "timed out after {waited:?} waiting for lock `{key}`: it is still held by another \
             process, or by another guard of this one (raise `wait`, or use `wait = 0` to fail \
             fast{HELD_HERE})"
        )
    }
}

impl LockError {
    /// The lock key this error is about, when it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Timeout { key, .. }
            | LockError::Lost { key }
            | LockError::InvalidKey { key, .. }
            | LockError::Upgrade { key }
            | LockError::Backend { key, .. } => Some(key),
            _ => None,
        }
    }

    /// `true` for [`LockError::Timeout`]: the lock was busy, nothing is broken.
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// `true` for [`LockError::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeout does not claim "another owner": the holder may be a guard of the same task,
    /// taken by hand, which is reentrant only inside its scope; the message says so.
    #[test]
    fn a_timeout_names_a_guard_of_this_process_as_a_possible_holder() {
        for wait in [Duration::ZERO, Duration::from_secs(2)] {
            let message = LockError::Timeout {
                key: "order:7".into(),
                waited: wait,
                wait,
            }
            .to_string();
            assert!(message.contains("`order:7`"), "{message}");
            assert!(message.contains("another guard of this one"), "{message}");
            assert!(message.contains("guard.scope(..)"), "{message}");
            assert!(!message.contains("another owner"), "{message}");
        }
    }
}

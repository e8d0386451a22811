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

    /// Asked once (`wait` zero, `wait = "0s"`), the lock was busy: held by another owner.
    /// [`try_acquire`](crate::LockRequest::try_acquire) returns `Ok(None)` instead.
    #[error(
        "lock `{key}` is busy: it is held by another process, or by another guard of this one \
         (asked once, as `wait = 0` says; give a `wait` to queue for it instead{HELD_HERE})"
    )]
    Busy {
        /// The lock key, without the client's prefix.
        key: String,
    },

    /// The lock stayed busy for the whole `wait` (a non-zero one: asked once, a busy lock is
    /// [`LockError::Busy`]).
    #[error(
        "timed out after {waited:?} waiting for lock `{key}`: it is still held by another \
         process, or by another guard of this one (raise `wait`, or use `wait = 0` to fail \
         fast{HELD_HERE})"
    )]
    Timeout {
        /// The lock key, without the client's prefix.
        key: String,
        /// How long the acquisition waited before giving up.
        waited: Duration,
        /// The `wait` the acquisition was given.
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

    /// A task holding a read lock asked for the write lock of the same key in its scope (a
    /// nested `#[distributed_lock]` call, or a request inside `guard.scope(..)`): it could
    /// never be granted, since the task's own share excludes every writer, so it fails at
    /// once instead of waiting out `wait`.
    #[error(
        "this task holds a read lock on `{key}` and asked for its write lock: it could never be \
         granted (the task's own read lock excludes every writer); take the write lock in the \
         outer call instead (a read under a write is granted), or release the read lock first"
    )]
    WriteUnderRead {
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
    /// server error, timeout, …), or answering an admin call (`list`, `inspect`, `ping`, …).
    #[error("{backend} backend failed to {op}{}: {source}", of_lock(.key))]
    Backend {
        /// Which backend (`redis`, `memory`, …).
        backend: &'static str,
        /// The operation: `acquire`, `renew`, `release`; an admin call's (`list`, `inspect`,
        /// `release`, `ping`, `available`, …).
        op: &'static str,
        /// The lock key, without the client's prefix (empty for a call about no lock: `ping`,
        /// `list`).
        key: String,
        /// The client library's error.
        #[source]
        source: BoxError,
    },

    /// The result stored for `key` by a shared call (`LockRequest::share`, the attribute's
    /// `share = …`) cannot be used as this call's result: another type stored it, or it is
    /// not a result distlock stored. `reason` says which, and what to do.
    #[error("the result shared under lock `{key}` cannot be used: {reason}")]
    Shared {
        /// The lock key, without the client's prefix.
        key: String,
        /// Why not, and what to do.
        reason: String,
    },

    /// The store cannot do what was asked — a kind of lock, a setting, elections, shared
    /// results — for any key: nothing was taken or written. `reason` says why and what can;
    /// what every store can do is the table in `distlock::guide::backends`. A setting that is
    /// wrong on every store (a zero lease, a fair read lock) is [`LockError::Config`] instead.
    #[error(
        "the {backend} store cannot serve {feature}{}: {reason} (what each store can do: \
         distlock::guide::backends)",
        for_key(.key)
    )]
    Unsupported {
        /// Which store (`redlock`, `mysql`, …; its mode is in `reason`).
        backend: &'static str,
        /// What it cannot serve.
        feature: Feature,
        /// The lock key (without the client's prefix) or election name asked for, when there
        /// was one.
        key: Option<String>,
        /// Why not, and what to use instead (the store's own words, fixed per store).
        reason: &'static str,
    },
}

/// ` lock `key``, or nothing for a call about no lock.
fn of_lock(key: &str) -> String {
    match key {
        "" => String::new(),
        key => format!(" lock `{key}`"),
    }
}

fn for_key(key: &Option<String>) -> String {
    key.as_deref()
        .map_or_else(String::new, |key| format!(" (asked for `{key}`)"))
}

/// Something a store may or may not serve: what a [`LockError::Unsupported`] names, and a
/// column of the table of what each store can do (`distlock::guide::backends`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// Read locks (`LockRequest::read`, `mode = "read"`).
    ReadLocks,
    /// Semaphores (`LockClient::semaphore`, `permits = N`).
    Semaphores,
    /// Upgradable read locks (`LockRequest::upgradable`).
    Upgradable,
    /// Fair locks, granted in arrival order (`LockRequest::fair`).
    Fair,
    /// `min_hold`: a lock kept after an early release.
    MinHold,
    /// `lock_delay`: a dead holder's key kept past its lease.
    LockDelay,
    /// Fencing tokens (`LockRequest::fencing`).
    Fencing,
    /// Leader elections (`LockClient::election`), whose terms are fencing tokens.
    Elections,
    /// Shared results (`LockRequest::share`, `share = …`).
    SharedResults,
}

impl Feature {
    /// Every feature, in the table's order.
    pub const ALL: [Feature; 9] = [
        Feature::ReadLocks,
        Feature::Semaphores,
        Feature::Upgradable,
        Feature::Fair,
        Feature::MinHold,
        Feature::LockDelay,
        Feature::Fencing,
        Feature::Elections,
        Feature::SharedResults,
    ];
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Feature::ReadLocks => "read locks",
            Feature::Semaphores => "semaphores",
            Feature::Upgradable => "upgradable read locks",
            Feature::Fair => "fair locks",
            Feature::MinHold => "`min_hold`",
            Feature::LockDelay => "`lock_delay`",
            Feature::Fencing => "fencing tokens",
            Feature::Elections => "elections",
            Feature::SharedResults => "shared results (`share`)",
        })
    }
}

/// The part of a timeout's message for a lock its own task may hold: a guard is reentrant only
/// inside its scope, so a task that took `key` by hand and asks for it again outside
/// `guard.scope(..)` waits for itself.
const HELD_HERE: &str = "; a guard is reentrant only inside its `#[distributed_lock]` body or \
    `guard.scope(..)`, so a task that holds the key by hand waits for itself elsewhere";

impl LockError {
    /// The lock key this error is about, when it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Busy { key }
            | LockError::Timeout { key, .. }
            | LockError::Lost { key }
            | LockError::InvalidKey { key, .. }
            | LockError::WriteUnderRead { key }
            | LockError::Shared { key, .. }
            | LockError::Backend { key, .. } => Some(key),
            LockError::Unsupported { key, .. } => key.as_deref(),
            _ => None,
        }
    }

    /// `true` for [`LockError::Busy`] and [`LockError::Timeout`]: another owner held the lock,
    /// asked once or for the whole `wait`; nothing is broken.
    pub fn is_busy(&self) -> bool {
        matches!(self, LockError::Busy { .. } | LockError::Timeout { .. })
    }

    /// `true` for [`LockError::Timeout`]: a non-zero `wait` ran out with the lock still busy.
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// `true` for [`LockError::Unsupported`]: the store cannot serve what was asked (a kind
    /// of lock, a setting), on any key; another store, or another request, can.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, LockError::Unsupported { .. })
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
    /// A backend failure names the lock it was about, and a call about none (`ping`) does not
    /// pretend one: "failed to ping: …", never "failed to ping lock ``".
    #[test]
    fn a_backend_failure_names_its_lock_only_when_there_is_one() {
        let failed = |op, key: &str| LockError::Backend {
            backend: "redis",
            op,
            key: key.into(),
            source: "connection refused".into(),
        };
        assert_eq!(
            failed("acquire", "order:7").to_string(),
            "redis backend failed to acquire lock `order:7`: connection refused"
        );
        assert_eq!(
            failed("ping", "").to_string(),
            "redis backend failed to ping: connection refused"
        );
    }

    #[test]
    fn a_timeout_names_a_guard_of_this_process_as_a_possible_holder() {
        let wait = Duration::from_secs(2);
        for error in [
            LockError::Busy {
                key: "order:7".into(),
            },
            LockError::Timeout {
                key: "order:7".into(),
                waited: wait,
                wait,
            },
        ] {
            let message = error.to_string();
            assert!(message.contains("`order:7`"), "{message}");
            assert!(message.contains("another guard of this one"), "{message}");
            assert!(message.contains("guard.scope(..)"), "{message}");
            assert!(!message.contains("another owner"), "{message}");
        }
    }
}

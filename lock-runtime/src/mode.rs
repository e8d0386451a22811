//! [`LockMode`]: the two sides of a read/write lock, as users name them.

use crate::backend::Kind;

/// Which side of a key's read/write lock a request takes.
///
/// The write side *is* the plain lock: `client.lock(k)` and `#[distributed_lock]` without
/// `mode` take it, so readers can be added to a key without touching its writers.
///
/// `#[non_exhaustive]`: a later release may add a mode; match the ones you handle and keep a
/// `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockMode {
    /// One owner, excluding readers and other writers (the plain lock).
    #[default]
    Write,
    /// One of any number of readers, excluding writers.
    Read,
    /// The one upgradable reader of the key, beside any number of plain readers
    /// ([`LockRequest::upgradable`](crate::LockRequest::upgradable)); a guard reports
    /// [`Write`](Self::Write) once [upgraded](crate::LockGuard::upgrade).
    Upgradable,
}

impl LockMode {
    pub(crate) fn kind(self) -> Kind {
        match self {
            LockMode::Write => Kind::Exclusive,
            LockMode::Read | LockMode::Upgradable => Kind::Shared,
        }
    }

    /// The mode a hold of `kind` reports: a semaphore's permit, held together with others,
    /// reports [`LockMode::Read`].
    pub(crate) fn of(kind: Kind) -> LockMode {
        match kind {
            Kind::Exclusive => LockMode::Write,
            Kind::Shared | Kind::Permits(_) => LockMode::Read,
        }
    }
}

//! The attribute's arguments as the runtime receives them: the floor beneath `client` (which
//! acquires with them) and `locked` (which the generated code calls with them).

use std::time::Duration;

/// What to do when the lease is lost while the body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at once and return `Err(LockError::Lost)`.
    Abort,
    /// Let the body finish; `current().is_lost()` reports the loss.
    Continue,
}

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// The client's default.
    Default,
    /// At most this long (zero: try once).
    Up(Duration),
    /// As long as it takes.
    Forever,
}

/// The attribute's arguments, checked at compile time.
#[derive(Debug, Clone, Copy)]
pub struct LockOptions {
    /// `lease = "…"`; `None` for the client's default.
    pub lease: Option<Duration>,
    /// `wait = "…"`.
    pub wait: WaitFor,
    /// `renew = …`.
    pub renew: bool,
    /// `on_lost = "…"`.
    pub on_lost: OnLost,
    /// `fencing = …`; `None` for the client's default.
    pub fencing: Option<bool>,
    /// `fair = …`.
    pub fair: bool,
    /// `mode = "read"` / `"write"` (the default).
    pub mode: crate::LockMode,
    /// `permits = n`: a permit of the semaphore `key` of `n` permits, not a lock. (Non-zero:
    /// four bytes, inside every locked call's future.)
    pub permits: Option<std::num::NonZeroU16>,
    /// `min_hold = "…"` in milliseconds: the lock is held at least this long after the grant,
    /// however early the body returns (zero: no minimum). (Four bytes, inside every locked
    /// call's future; at most the longest lease, 7 days, which fits.)
    pub min_hold_ms: u32,
    /// `max_hold = "…"` in milliseconds: renewal stops this long after the grant, and the hold
    /// is lost then (zero: no cap). At most `u32::MAX` ms (49 days), checked at compile time.
    pub max_hold_ms: u32,
    /// `lock_delay = "…"` in milliseconds (at most 7 days: fits); `None` for the client's
    /// default. (Eight bytes rather than a `Duration`'s sixteen, inside every locked call's
    /// future.)
    pub lock_delay_ms: Option<u32>,
}

impl LockOptions {
    /// The kind of hold these options ask for.
    pub(crate) fn kind(&self) -> crate::backend::Kind {
        match self.permits {
            Some(n) => crate::backend::Kind::Permits(n.get()),
            None => self.mode.kind(),
        }
    }
}

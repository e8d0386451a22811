//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): the
//! application installs the exporter it likes (Prometheus, StatsD, OpenTelemetry …) and these
//! record into it. Every metric is labelled by `backend` (`redis`, `postgres`, …) and never by
//! the lock key, whose values are unbounded. Without the feature every function here is empty
//! and inlined away.
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `distlock_acquisitions_total` | counter | `backend`, `outcome` | acquisitions by outcome: `acquired`, `timeout`, `error` |
//! | `distlock_acquire_seconds` | histogram | `backend`, `outcome` | time from the call to its outcome (waiting included) |
//! | `distlock_wait_seconds` | histogram | `backend` | time to the lock of acquisitions that waited (the lock was busy at the first try, other tasks of this client waited for it, or the lock is fair) |
//! | `distlock_locks_held` | gauge | `backend` | locks held by guards of this process right now |
//! | `distlock_leases_lost_total` | counter | `backend` | locks found lost while held |
//! | `distlock_renewals_total` | counter | `backend` | leases renewed (a batched renewal counts each lock) |
//! | `distlock_renewal_failures_total` | counter | `backend` | renewals that failed (retried until the lease ends) |
//! | `distlock_backend_errors_total` | counter | `backend`, `op` | failed backend calls: `op` is `acquire`, `renew` or `release` |

use std::time::Duration;

/// Names of every metric, for exporters' allow-lists and the tests.
pub const METRIC_NAMES: &[&str] = &[
    ACQUISITIONS,
    ACQUIRE_SECONDS,
    WAIT_SECONDS,
    LOCKS_HELD,
    LEASES_LOST,
    RENEWALS,
    RENEWAL_FAILURES,
    BACKEND_ERRORS,
];

const ACQUISITIONS: &str = "distlock_acquisitions_total";
const ACQUIRE_SECONDS: &str = "distlock_acquire_seconds";
const WAIT_SECONDS: &str = "distlock_wait_seconds";
const LOCKS_HELD: &str = "distlock_locks_held";
const LEASES_LOST: &str = "distlock_leases_lost_total";
const RENEWALS: &str = "distlock_renewals_total";
const RENEWAL_FAILURES: &str = "distlock_renewal_failures_total";
const BACKEND_ERRORS: &str = "distlock_backend_errors_total";

/// How an acquisition ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg(feature = "metrics")]
pub(crate) enum Ended {
    Acquired,
    Timeout,
    /// Failed in the backend: also counted in `distlock_backend_errors_total`.
    BackendError,
    /// Refused before the backend was asked (an invalid key, a fair lock where there is none).
    Error,
}

#[cfg(feature = "metrics")]
impl Ended {
    fn label(self) -> &'static str {
        match self {
            Ended::Acquired => "acquired",
            Ended::Timeout => "timeout",
            Ended::BackendError | Ended::Error => "error",
        }
    }
}

/// Which backend call failed.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) enum Call {
    Acquire,
    Renew,
    Release,
}

impl Call {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Call::Acquire => "acquire",
            Call::Renew => "renew",
            Call::Release => "release",
        }
    }
}

/// Describes every metric to the installed recorder (units and help texts). Called once per
/// client; recorders ignore repeats.
#[inline]
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!(
            ACQUISITIONS,
            "Lock acquisitions by outcome (acquired, timeout, error)."
        );
        describe_histogram!(
            ACQUIRE_SECONDS,
            Unit::Seconds,
            "Time from asking for a lock to the outcome, waiting included."
        );
        describe_histogram!(
            WAIT_SECONDS,
            Unit::Seconds,
            "Time acquisitions that found the lock busy waited for it."
        );
        describe_gauge!(LOCKS_HELD, "Locks held by guards of this process.");
        describe_counter!(LEASES_LOST, "Locks found lost while held.");
        describe_counter!(RENEWALS, "Leases renewed.");
        describe_counter!(RENEWAL_FAILURES, "Renewals that failed and were retried.");
        describe_counter!(BACKEND_ERRORS, "Failed backend calls by operation.");
    }
}

/// An acquisition ended with `outcome` after `elapsed`.
#[cfg(feature = "metrics")]
pub(crate) fn acquisition(backend: &'static str, outcome: Ended, elapsed: Duration) {
    let label = outcome.label();
    metrics::counter!(ACQUISITIONS, "backend" => backend, "outcome" => label).increment(1);
    metrics::histogram!(ACQUIRE_SECONDS, "backend" => backend, "outcome" => label)
        .record(elapsed.as_secs_f64());
    if outcome == Ended::BackendError {
        metrics::counter!(BACKEND_ERRORS, "backend" => backend, "op" => Call::Acquire.label())
            .increment(1);
    }
}

/// An acquisition that went through the waiting loop (the lock was busy at the first try,
/// other tasks of this client were waiting for it, or the lock is fair) got it after `waited`.
#[inline]
pub(crate) fn waited(backend: &'static str, waited: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(WAIT_SECONDS, "backend" => backend).record(waited.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, waited);
}

/// A guard started (`+1`) or stopped (`-1`) holding a lock.
#[inline]
pub(crate) fn held(backend: &'static str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(LOCKS_HELD, "backend" => backend).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, delta);
}

/// A held lock was found lost.
#[inline]
pub(crate) fn lease_lost(backend: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(LEASES_LOST, "backend" => backend).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
}

/// `count` leases renewed.
#[inline]
pub(crate) fn renewed(backend: &'static str, count: u64) {
    #[cfg(feature = "metrics")]
    metrics::counter!(RENEWALS, "backend" => backend).increment(count);
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, count);
}

/// A renewal failed (it is retried until the lease ends).
#[inline]
pub(crate) fn renewal_failed(backend: &'static str) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(RENEWAL_FAILURES, "backend" => backend).increment(1);
        metrics::counter!(BACKEND_ERRORS, "backend" => backend, "op" => Call::Renew.label())
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
}

/// A release failed (the lease will run out on the server).
#[inline]
pub(crate) fn release_failed(backend: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(BACKEND_ERRORS, "backend" => backend, "op" => Call::Release.label())
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
}

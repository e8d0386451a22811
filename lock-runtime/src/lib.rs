//! The engine behind [distlock](https://docs.rs/distlock): lock clients, guards, renewal,
//! waiting and backends. Use it through the `distlock` crate, which re-exports all of this.
//!
//! # Model
//!
//! A lock is a key in a backend (`lock:order:42` in Redis) whose value is an owner token — the
//! holder's host, process id and start time, and 128 fresh random bits — and which expires
//! after its *lease*. [`LockClient::lock`] builds a request;
//! acquiring it returns a [`LockGuard`]. While the guard lives, a watchdog renews the lease every
//! lease/3; if a renewal finds another owner, or none can be confirmed before the lease ends
//! (on the monotonic clock, minus a drift margin of 1 % + 2 ms), the guard is marked lost at
//! once ([`LockGuard::is_lost`], [`LockGuard::lost`]). Release and renewal compare the owner
//! token atomically: nobody can release or extend a lock they do not hold.
//!
//! A busy lock is waited for without polling: the release wakes waiters (Redis pub/sub, one
//! subscription per client), and otherwise they retry when the holder's lease runs out.
//!
//! # Fencing tokens
//!
//! With fencing on, every acquisition gets a number strictly greater than every earlier
//! holder's of the same key. The counter lives in the backend next to the lock: on Redis the
//! key `lock-fence:<prefix><key>` (an integer, about 60–100 bytes of server memory per key),
//! which never expires — expiring it would let numbers go backwards. Keys that are never reused
//! (a lock per request id) therefore leave one counter each behind; use fencing for long-lived
//! resource keys, or clean counters up when the resource itself is deleted.
//!
//! ```
//! # use distlock_runtime as distlock;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::LockError> {
//! use std::time::Duration;
//! use distlock::LockClient;
//!
//! let client = LockClient::builder("memory://").fencing(true).build().await?;
//! let first = client.lock("invoice:7").acquire().await?;
//! let a = first.fencing_token().unwrap();
//! first.release().await?;
//! let second = client.lock("invoice:7").wait(Duration::ZERO).acquire().await?;
//! assert!(second.fencing_token().unwrap() > a);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admin;
mod attempt;
mod backend;
mod client;
mod closing;
mod election;
mod error;
mod fast_map;
pub mod fence;
mod global;
mod guard;
mod held;
mod key;
mod local;
mod locked;
pub mod metrics;
mod mode;
mod notify;
mod options;
mod plan;
mod renew;
mod runtime;
mod scope;
mod share;
mod tls;
mod token;
mod upgrade;
mod url;
mod wait;

#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;

pub use admin::{Checkup, Finding, Holder, LockEvent, LockInfo, LockWatch, ReaderInfo, ServerInfo};
pub use client::{LockClient, LockClientBuilder, LockRequest, SemaphoreRequest};
pub use election::{Election, Leader, Leadership};
pub use error::{BoxError, Feature, LockError};
pub use global::{client, init, init_from_env, with_client};
pub use guard::LockGuard;
pub use mode::LockMode;
pub use scope::{CurrentLock, current};
#[cfg(feature = "share")]
pub use share::SharedRequest;
pub use tls::TlsConfig;

/// What `#[distributed_lock]` expands to. Not a stable API: use the attribute.
#[doc(hidden)]
pub mod __private {
    /// The table of what each store can do (docs/guide/backends.md holds it), rendered from
    /// the stores' capabilities.
    pub use crate::backend::catalog::{store_supports, table as capabilities_table};
    pub use crate::locked::{
        AsLockClient, LockedReturn, lease_out_of_range, run_locked, run_locked_all, skip_when_busy,
    };
    pub use crate::mode::LockMode;
    pub use crate::options::{LockOptions, OnLost, WaitFor};
    pub use crate::share::{Codec, SharedReturn, run_shared};
}

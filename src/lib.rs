//! # distlock — declarative distributed locks
//!
//! Take a lock that holds across every process of a service, keep its lease alive while the
//! work runs, and give it back on every exit path.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::LockError> {
//! use std::time::Duration;
//! use distlock::LockClient;
//!
//! // `redis://127.0.0.1:6379` in production; `memory://` inside one process.
//! let client = LockClient::connect("memory://").await?;
//! let guard = client
//!     .lock("order:42")
//!     .lease(Duration::from_secs(10))
//!     .wait(Duration::from_secs(2))
//!     .acquire()
//!     .await?;
//! // ... read, modify, write: nobody else holds `order:42` ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! The global client, for code that should not pass a client around:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::LockError> {
//! distlock::init(distlock::LockClient::connect("memory://").await?)?;
//! let guard = distlock::client()?.lock("daily-report").acquire().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! See the README for backends, URL schemes and the exact semantics of leases, renewal, lost
//! locks, fencing tokens and exit paths.

pub use lock_macros::distributed_lock;
pub use lock_runtime::{
    BoxError, CurrentLock, LockClient, LockClientBuilder, LockError, LockGuard, LockRequest,
    MAX_KEY_LEN, URL_ENV, client, current, init, init_from_env,
};

#[doc(hidden)]
pub mod __private {
    //! Used by the code `#[distributed_lock]` generates and by distlock's tests; not a public API.
    pub use lock_runtime::__private::*;
    pub use lock_runtime::testing;
}

//! # distlock — declarative distributed locks
//!
//! Put `#[distributed_lock]` on an `async fn` and it runs only while this process holds the
//! lock named by its key, cluster-wide: the key is built from the arguments, the lease is
//! renewed while the body runs, and the lock is given back on every exit path — return, `?`,
//! panic, cancellation, runtime shutdown.
//!
//! ```
//! use distlock::{LockClient, LockError, distributed_lock};
//!
//! #[distributed_lock(key = "order:<id>", lease = "10s", wait = "2s")]
//! async fn next_order_id(id: u64) -> Result<u64, LockError> {
//!     // runs while this process holds "order:<id>"
//!     Ok(id + 1)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // `redis://127.0.0.1:6379` in production; `memory://` inside one process.
//! distlock::init(LockClient::connect("memory://").await?)?;
//! assert_eq!(next_order_id(42).await?, 43);
//! # Ok(()) }
//! ```
//!
//! ## The attribute
//!
//! | argument | default | meaning |
//! |---|---|---|
//! | `key = "order:<id>"` | required | the lock key; `<name>` is a parameter, `<name.field>` a field path, `<self.field>` in methods; `<<` / `>>` are literal angle brackets; values render with `Display`. A list, `key = ["account:<from>", "account:<to>"]`, holds every key at once, taken in one canonical order ([`LockClient::lock_all`]) |
//! | `lease = "10s"` | client's (30 s) | how long the lock lives if this process stops renewing it; units `ms`, `s`, `m`, `h`; at least `10ms`. `lease`, `wait`, `min_hold`, `max_hold` and `lock_delay` also take a [`Duration`](std::time::Duration) from code (`lease = LEASE`, `wait = config.wait()`), checked when the call is made |
//! | `wait = "2s"` | client's (10 s) | how long to wait for a busy lock; `"0s"` tries once; `"forever"` |
//! | `renew = true` | `true` | renew every lease/3 while the body runs |
//! | `on_lost = "abort"` | `"abort"` | `"abort"`: the body is dropped and the call returns `Err(LockError::Lost)`; `"continue"`: the body finishes and [`current()`] reports `is_lost()` |
//! | `fencing = true` | client's (`false`) | hand out a strictly increasing fencing token, read with [`current()`] |
//! | `fair = true` | `false` | grant the lock in arrival order across processes, through a queue on the server ([`LockRequest::fair`]) |
//! | `mode = "read"` | `"write"` | the shared side of the key's read/write lock ([`LockRequest::read`]) |
//! | `permits = 4` (or a `u16` constant) | none | one of that many permits of the semaphore `key`, not a lock ([`LockClient::semaphore`]) |
//! | `min_hold = "55s"` | none | hold the lock at least this long after the grant, however soon the body returns: an earlier release leaves it to end then ([`LockRequest::min_hold`]); at most `lease` |
//! | `max_hold = "1h"` | none | renewal stops this long after the grant and the lock is lost then (the body stopped or told, as `on_lost` says), so a hung body cannot hold it forever ([`LockRequest::max_hold`]); at least `lease` |
//! | `lock_delay = "5s"` | client's (none) | after an involuntary loss (the holder crashed or paused), nobody else is granted the key until this long after its lease ran out; a release frees it at once ([`LockRequest::lock_delay`]); stores whose locks expire by a TTL |
//! | `on_busy = "skip"` | `"error"` | a lock still busy when `wait` ends returns `Ok(Default::default())` without running the body (`Ok(())`, `Ok(None)`), instead of `Err(LockError::Timeout)` |
//! | `client = self.locks` | the task's, else the global | the lock client of this function: an expression evaluated at each call giving a [`LockClient`] or a reference to one (a field, `&self.locks`, a function's result); another type is a compile error at the expression |
//! | `crate = "path"` | `distlock` | where distlock is, for renamed dependencies |
//!
//! The function must be `async` and return `Result<T, E>` with `E: From<LockError>`
//! (`anyhow::Result<T>` and other aliases work); lock failures come back as that error. It may
//! be a free function, an inherent or trait-impl method (`&self`, `&mut self`,
//! `self: Arc<Self>`), generic, take `impl Trait` arguments or borrow; the attribute adds no
//! `Send` bound of its own. Mistakes in the arguments or the key template are compile errors
//! pointing at the template.
//!
//! A nested call for the same key in the same task (on the same client) is granted at once,
//! without a round trip, and the outermost call releases. Other tasks are other owners.
//!
//! A function without `client = …` uses the client of [`with_client`] around the call (a
//! test's own backend, say), else the global client installed with [`init`] (or
//! [`init_from_env`], which reads `DISTLOCK_URL`); with none of them it returns
//! `Err(LockError::NotInitialized)`. A library names its own client, and so never depends on
//! the application's global:
//!
//! ```
//! use distlock::{LockClient, LockError, distributed_lock};
//!
//! pub struct Repository {
//!     locks: LockClient,
//! }
//!
//! impl Repository {
//!     #[distributed_lock(key = "order:<id>", lease = "10s", client = self.locks)]
//!     pub async fn save(&self, id: u64) -> Result<(), LockError> {
//!         Ok(())
//!     }
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), LockError> {
//! let repository = Repository { locks: LockClient::connect("memory://").await? };
//! repository.save(7).await?; // no `distlock::init` needed
//! # Ok(()) }
//! ```
//!
//! ## Without the attribute
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), distlock::LockError> {
//! use std::time::Duration;
//! use distlock::LockClient;
//!
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
//! Every setting of a client and of a request (the [guide](guide::requests) says what each
//! does):
//!
//! ```no_run
//! # async fn settings(ca: Vec<u8>, cert: Vec<u8>, key: Vec<u8>) -> Result<(), distlock::LockError> {
//! use std::time::Duration;
//! use distlock::{LockClient, TlsConfig};
//!
//! let client = LockClient::builder("postgres://app@db.internal/app?sslmode=verify-full")
//!     .prefix("lock:")                       // of every lock's name in the store
//!     .fencing_prefix("lock-fence:")         // where fencing counters live
//!     .default_lease(Duration::from_secs(30))
//!     .default_wait(Duration::from_secs(10)) // or .default_wait_forever()
//!     .fencing(true)
//!     .connect_timeout(Duration::from_secs(3))
//!     .response_timeout(Duration::from_secs(2))
//!     .node_timeout(Duration::from_millis(500)) // Redlock: one node's answer
//!     .table("distlock_locks")               // SQL: the lock table ...
//!     .create_table(false)                   // ... made by your migrations
//!     .pool_size(8)
//!     .tls(TlsConfig::new().ca_pem(ca).client_identity(cert, key))
//!     .password("from a secret store")
//!     .build()
//!     .await?;
//! let guard = client
//!     .lock("report:daily")
//!     .lease(Duration::from_secs(60))
//!     .wait(Duration::from_secs(5))          // or .wait_forever()
//!     .renew(true)
//!     .fencing(true)
//!     .min_hold(Duration::from_secs(55))
//!     .write()                               // the default; .read() for a shared lock
//!     .acquire()
//!     .await?;
//! guard.release().await?;
//! let fair = client.lock("queue:7").fair().acquire().await?;
//! fair.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Backends and features
//!
//! [`LockClient::connect`] takes the store's URL; its scheme picks the backend, which its
//! feature must have compiled in (a missing one is a [`LockError::Config`] naming the feature).
//!
//! | feature | default | URLs |
//! |---|---|---|
//! | — | always | `memory://`, `memory://name`: in this process only (tests, demos, one-process apps) |
//! | `redis` | yes | `redis://`, `redlock://h1,h2,h3`, `redis+cluster://`, `redis+sentinel://…/service[?replicas=N]` |
//! | `postgres` | | `postgres://` (a lock table; `?mode=advisory` for advisory locks) |
//! | `mysql` | | `mysql://` (MariaDB ≥ 10.6, tested with 10.11; MySQL 8 written to its documentation, not yet tested) |
//! | `zookeeper` | | `zk://` (Curator's lock layout) |
//! | `etcd` | | `etcd://` (`concurrency.Mutex`'s layout) |
//! | `nats` | | `nats://` (a JetStream key-value bucket, NATS 2.11+; every lock kind) |
//! | `tls` | | `rediss://`, `sslmode=`, `ssl-mode=`, `zks://`, `etcds://`, `natss://`: TLS through rustls |
//! | `metrics` | | metrics through the `metrics` facade ([`metrics`]) |
//! | `share` | | compute once, share the result: `share = "60s"`, [`LockRequest::share`] (serde) |
//!
//! ## The guide
//!
//! The [`guide`] holds the reference: [what a lock promises](guide::semantics), [cancel
//! safety](guide::cancel_safety), a page per lock kind ([read/write](guide::read_write),
//! [semaphores](guide::semaphores), [upgradable reads](guide::upgradable), [several
//! keys](guide::several_keys), [fair](guide::fair), [`min_hold`](guide::min_hold),
//! [`max_hold`](guide::max_hold), [lock-delay](guide::lock_delay), [free
//! permits](guide::free_permits), [shared results](guide::share),
//! [elections](guide::elections)), [what each store can do](guide::backends) and per store
//! ([Redis](guide::redis), [PostgreSQL](guide::postgres), [MySQL](guide::mysql),
//! [ZooKeeper](guide::zookeeper), [etcd](guide::etcd), [`memory://`](guide::memory),
//! [TLS](guide::tls), [sharing locks with other languages](guide::interop)), the
//! [command line](guide::cli), [metrics and logs](guide::metrics) and [errors](guide::errors).
//!
//! ## Observability
//!
//! Every acquisition is a `tracing` span, `distlock.acquire` (key, backend, kind, how long it
//! waited, its outcome), and every hold another, `distlock.hold`, from the grant to the
//! release (key, fencing token, how long it was held, how it ended: released, lost, dropped),
//! both children of the caller's span; failed renewals and lost locks are `warn` events. Any
//! subscriber shows them — `tracing-subscriber`'s `fmt`, or `tracing-opentelemetry` for traces.
//! With the `metrics` feature, counters and histograms go through the `metrics` facade. Both:
//! [`guide::metrics`].
//!
//! ## Cancel safety
//!
//! With `on_lost = "abort"` (the default), a body whose lease is found lost is dropped at its
//! next `.await`, as a caller's `timeout` or `select!` drops it: work split across two awaits
//! (debit, then credit) can be torn. Make the write one atomic step, or pass the
//! [fencing token](CurrentLock::fencing_token) with it and let the storage refuse stale
//! ones: [`guide::cancel_safety`].

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod guide;

pub use distlock_macros::distributed_lock;
#[cfg(feature = "share")]
pub use distlock_runtime::SharedRequest;
pub use distlock_runtime::admin;
pub use distlock_runtime::fence;
pub use distlock_runtime::metrics;
pub use distlock_runtime::{
    BoxError, Checkup, CurrentLock, Election, Feature, Finding, Holder, Leader, Leadership,
    LockClient, LockClientBuilder, LockError, LockEvent, LockGuard, LockInfo, LockMode,
    LockRequest, LockWatch, ReaderInfo, SemaphoreRequest, ServerInfo, TlsConfig, client, current,
    init, init_from_env, with_client,
};

#[doc(hidden)]
pub mod __private {
    //! Used by the code `#[distributed_lock]` generates and by distlock's tests; not a public API.
    pub use distlock_runtime::__private::*;
    #[cfg(feature = "testing")]
    pub use distlock_runtime::testing;
}

/// The README's code blocks, compiled as doc tests so that what it shows keeps building.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

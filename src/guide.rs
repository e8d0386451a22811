//! The reference behind the README: what each lock kind does, how each backend keeps it, and
//! what is promised when things fail.
//!
//! Start with the crate's front page ([`crate`]) for the attribute and the API; come here for
//! the details.
//!
//! | page | what is in it |
//! |---|---|
//! | [`attribute`] | `#[distributed_lock]` in full: every argument, the functions it goes on, exit paths, reentrancy, the compile errors |
//! | [`requests`] | the API without the attribute: requests, guards, the client's settings |
//! | [`semantics`] | leases, renewal, lost locks, waiting, exit paths, fencing tokens, failures and retries |
//! | [`cancel_safety`] | what `on_lost = "abort"` and a dropped future do to a body, and how to write one a lost lease cannot tear |
//! | [`read_write`] | read/write locks |
//! | [`semaphores`] | counting semaphores whose permits live on leases |
//! | [`several_keys`] | one lock over several keys, deadlock-free |
//! | [`fair`] | locks granted in arrival order across processes |
//! | [`min_hold`] | scheduled work that must run once per period (`min_hold`) |
//! | [`max_hold`] | a cap on holding: a hung holder cannot renew forever (`max_hold`) |
//! | [`lock_delay`] | after a holder dies or pauses, nobody else inside for a while (`lock_delay`) |
//! | [`free_permits`] | how many of a semaphore's permits are free (`available()`) |
//! | [`upgradable`] | an upgradable read lock: read, then write without letting go |
//! | [`share`] | compute once, share the result with every caller (`share`) |
//! | [`elections`] | leader election with identities and terms |
//! | [`backends`] | every URL, and how to choose a backend |
//! | [`tls`] | TLS and authentication on every backend |
//! | [`memory`] | the in-process backend (`memory://`) |
//! | [`redis`] | one Redis, Redlock, Sentinel (`?replicas`) and Cluster |
//! | [`postgres`] | PostgreSQL: the lock table and advisory locks |
//! | [`mysql`] | MySQL and MariaDB: the lock table and named locks |
//! | [`zookeeper`] | ZooKeeper: sessions, queues, fair waiting |
//! | [`etcd`] | etcd: leases, revisions, watches |
//! | [`interop`] | sharing locks with redis-py, Apache Curator and `etcdctl lock` |
//! | [`cli`] | the `distlock` command line: `run`, `elect`, `hold`, `list`, … |
//! | [`metrics`] | metrics and logs |
//! | [`errors`] | every `LockError`, and when it happens |

#[doc = include_str!("../docs/guide/attribute.md")]
pub mod attribute {}
#[doc = include_str!("../docs/guide/requests.md")]
pub mod requests {}
#[doc = include_str!("../docs/guide/semantics.md")]
pub mod semantics {}
#[doc = include_str!("../docs/guide/cancel_safety.md")]
pub mod cancel_safety {}
#[doc = include_str!("../docs/guide/read_write.md")]
pub mod read_write {}
#[doc = include_str!("../docs/guide/semaphores.md")]
pub mod semaphores {}
#[doc = include_str!("../docs/guide/several_keys.md")]
pub mod several_keys {}
#[doc = include_str!("../docs/guide/fair.md")]
pub mod fair {}
#[doc = include_str!("../docs/guide/min_hold.md")]
pub mod min_hold {}
#[doc = include_str!("../docs/guide/max_hold.md")]
pub mod max_hold {}
#[doc = include_str!("../docs/guide/lock_delay.md")]
pub mod lock_delay {}
#[doc = include_str!("../docs/guide/free_permits.md")]
pub mod free_permits {}
#[doc = include_str!("../docs/guide/share.md")]
pub mod share {}
#[doc = include_str!("../docs/guide/upgradable.md")]
pub mod upgradable {}
#[doc = include_str!("../docs/guide/elections.md")]
pub mod elections {}
#[doc = include_str!("../docs/guide/backends.md")]
pub mod backends {}
#[doc = include_str!("../docs/guide/tls.md")]
pub mod tls {}
#[doc = include_str!("../docs/guide/memory.md")]
pub mod memory {}
#[doc = include_str!("../docs/guide/redis.md")]
pub mod redis {}
#[doc = include_str!("../docs/guide/postgres.md")]
pub mod postgres {}
#[doc = include_str!("../docs/guide/mysql.md")]
pub mod mysql {}
#[doc = include_str!("../docs/guide/zookeeper.md")]
pub mod zookeeper {}
#[doc = include_str!("../docs/guide/etcd.md")]
pub mod etcd {}
#[doc = include_str!("../docs/guide/interop.md")]
pub mod interop {}
#[doc = include_str!("../docs/guide/cli.md")]
pub mod cli {}
#[doc = include_str!("../docs/guide/metrics.md")]
pub mod metrics {}
#[doc = include_str!("../docs/guide/errors.md")]
pub mod errors {}

//! distlock's integration tests: one binary, a module per area.
//!
//! Every area used to be a binary of its own (`tests/<area>.rs`), and each compiled the test
//! harness again and linked every dependency again (20 binaries of 100–280 MB). Now the harness
//! is the workspace crate `distlock-test-support` (`support`), compiled once, and the areas are
//! modules of this one binary, as cargo's own `tests/testsuite` and rust-analyzer's
//! `tests/slow-tests` are. Only the tests that set the process-global client stay in binaries
//! of their own (`tests/global.rs`, `tests/attribute_*.rs`): a process has one global.
//!
//! Run one area with a filter on its module path, as `./scripts/test.sh` does:
//!
//! ```text
//! cargo test --all-features --test it -- conformance::redis::
//! cargo test --all-features --test it -- history:: --test-threads 2
//! ```
//!
//! The servers a test needs are started by the harness on free loopback ports; the shared ones
//! (`RedisServer::shared()` and its kind) are started once for the whole binary.

mod attribute_round_trips;
mod cluster;
mod conformance;
mod errors;
mod etcd;
mod examples;
mod faults;
mod history;
mod interop;
mod mysql;
mod mysql_named;
#[cfg(feature = "nats")]
mod nats;
mod pgbouncer;
mod postgres;
mod redis;
mod redlock;
mod sentinel;
mod share;
mod spans;
mod tls;
mod tls_etcd;
mod tls_mysql;
mod tls_nats;
mod tls_postgres;
mod tls_zookeeper;
mod zookeeper;

/// The body of every helper copy of this binary: a test that starts a helper process
/// (`support::helper::spawn`, `support::history::Helper::spawn`) runs this binary again with
/// the filter `helper_process --exact`, and its role in the environment. In a normal run it
/// returns at once.
#[test]
fn helper_process() {
    support::helper::run();
}

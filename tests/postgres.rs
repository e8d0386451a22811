//! `postgres://` beyond the conformance and fault suites (`tests/conformance.rs`,
//! `tests/faults.rs`), on real PostgreSQL servers the tests start. The scenarios are the lock
//! tables' own, written once in `tests/support/sql.rs` and run on MariaDB too:
//!
//! - what the table holds (holder, expiry by the database's clock, fencing counters that outlive
//!   the rows), and the DDL the README prints;
//! - renewals of many locks batched into one statement per tick (counted in the server's log);
//! - bad input: a wrong password, a missing database, a table of the wrong shape, a missing
//!   table with `create_table=false`, an unreachable server.
#![cfg(feature = "postgres")]

mod support;

use support::fixture::PostgresFixture;
use support::postgres::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_names_its_holder_and_expires_by_the_database_clock() {
    support::sql::the_row_names_its_holder_and_expires_by_the_database_clock(PostgresFixture::new()).await;
}

/// The README prints the DDL; tables made from it work with `create_table=false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_made_from_the_readme_ddl_work_without_create_table() {
    support::sql::tables_made_from_the_readme_ddl_work_without_create_table(
        PostgresServer::shared(),
    )
    .await;
}

/// Fifty locks renewed for 3 s: a few writes per renewal round, not fifty (counted in the server's statement log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_locks_are_batched() {
    support::sql::renewals_of_many_locks_are_batched(PostgresFixture::own()).await;
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_at_connect_naming_the_cause() {
    support::sql::bad_input_fails_at_connect_naming_the_cause(PostgresServer::shared()).await;
}

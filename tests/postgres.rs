//! `postgres://` beyond the conformance and fault suites (`tests/conformance.rs`,
//! `tests/faults.rs`), on real PostgreSQL servers the tests start:
//!
//! - what the table holds (holder, expiry by the database's clock, fencing counters that outlive
//!   the rows), and the DDL the README prints;
//! - renewals of many locks batched into one statement per tick (counted in the server's log);
//! - bad input: a wrong password, a missing database, a table of the wrong shape, a missing
//!   table with `create_table=false`, an unreachable server.
#![cfg(feature = "postgres")]

mod support;

use std::time::Duration;

use support::fixture::{Fixture, PostgresFixture};
use support::postgres::PostgresServer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `count(*)` of `sql`.
async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_names_its_holder_and_expires_by_the_database_clock() {
    let fixture = PostgresFixture::new();
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let sql = fixture.sql().await;
    let table = fixture.table().to_owned();
    let mut last_fence = 0;
    for round in 0..3 {
        let guard = client
            .lock("row")
            .lease(ms(20_000))
            .acquire()
            .await
            .unwrap();
        let row = sql
            .query_one(
                &format!(
                    "SELECT token, holder, \
                     (extract(epoch FROM expires_at - now()) * 1000)::int8, \
                     (extract(epoch FROM now() - acquired_at) * 1000)::int8 \
                     FROM {table} WHERE name = 'lock:row'"
                ),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            row.get::<_, String>(0),
            distlock::__private::testing::owner_token(&guard)
        );
        let holder: String = row.get(1);
        assert!(
            holder.ends_with(&format!(" pid {}", std::process::id())),
            "{holder}"
        );
        let left: i64 = row.get(2);
        assert!((18_000..=20_000).contains(&left), "expires in {left} ms");
        assert!(row.get::<_, i64>(3) < 2_000, "acquired_at is the grant");
        // The fencing counter lives in its own table and keeps rising across releases.
        let fence: i64 = sql
            .query_one(
                &format!("SELECT fence FROM {table}_fences WHERE name = 'lock:row'"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(Some(fence as u64), guard.fencing_token());
        assert!(
            fence > last_fence,
            "round {round}: {fence} after {last_fence}"
        );
        last_fence = fence;
        guard.release().await.unwrap();
        assert_eq!(
            count(&sql, &format!("SELECT count(*) FROM {table}")).await,
            0,
            "a released lock leaves no row"
        );
    }
    // A row whose expiry passed is taken over in one statement, whoever left it.
    sql.execute(
        &format!(
            "INSERT INTO {table} VALUES ('lock:stale', 'crashed-owner', now() - interval '1 \
             second', 'a crashed host pid 1', now() - interval '1 minute')"
        ),
        &[],
    )
    .await
    .unwrap();
    let taken = client.lock("stale").wait(Duration::ZERO).acquire().await;
    assert!(taken.is_ok(), "an expired row is taken over: {taken:?}");
    assert_eq!(
        fixture.holder("lock:stale").await.as_deref(),
        Some(distlock::__private::testing::owner_token(&taken.unwrap()))
    );
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

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

// ---------------------------------------------------------------------------------------------
// Waking waiters.

/// A writer's release wakes waiters with a `NOTIFY` only when someone waits for its row: an
/// uncontended release sends none (a `NOTIFY` serializes the commits of every notifying
/// transaction on the server), and a waiter — of another client — flags the row before it
/// waits, so the release that ends its wait wakes it at once, not at the holder's lease end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_notifies_only_when_someone_waits() {
    use std::time::{Duration, Instant};

    let server = PostgresServer::shared();
    let url = server.url_with_own_table();
    let table = url.rsplit_once("table=").expect("a table").1.to_owned();
    let client = distlock::LockClient::connect(&url).await.unwrap();
    // Our own listener on the table's channel.
    let (listener, mut connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    let (heard, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    let _ = heard.send(n.payload().to_owned());
                }
                Some(Ok(_)) => {}
                _ => break,
            }
        }
    });
    listener
        .batch_execute(&format!("LISTEN \"{table}\""))
        .await
        .unwrap();

    // Uncontended, and a try-once that found the lock busy: nobody waits, nothing is sent.
    for _ in 0..3 {
        client
            .lock("alone")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let holder = client
        .lock("shared")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let other = distlock::LockClient::connect(&url).await.unwrap();
    assert!(other.lock("shared").try_acquire().await.unwrap().is_none());

    // A waiter of another client flags the holder's row, then waits.
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock("shared")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        let woken = Instant::now();
        guard.release().await.unwrap();
        woken
    });
    let record = || async {
        let row = listener
            .query_opt(
                &format!("SELECT holder FROM \"{table}\" WHERE name = 'lock:shared'"),
                &[],
            )
            .await
            .unwrap();
        row.map(|row| row.get::<_, String>(0)).unwrap_or_default()
    };
    assert!(
        support::eventually(Duration::from_secs(20), || async {
            record().await.ends_with("\n?")
        })
        .await,
        "the waiter never flagged the row: {:?}",
        record().await
    );
    // The admin view reads the holder without the flag.
    let info = client.inspect("shared").await.unwrap().expect("held");
    assert!(info.holder.is_some(), "{info:?}");

    let released = Instant::now();
    holder.release().await.unwrap();
    let woken = waiter.await.unwrap();
    assert!(
        woken.duration_since(released) < Duration::from_secs(10),
        "woken {:?} after the release (the holder's lease is 30 s)",
        woken.duration_since(released)
    );
    // Notifications arrive in commit order: the first is the contended release's.
    let first = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
        .await
        .expect("the contended release notified")
        .unwrap();
    assert_eq!(first, "lock:shared", "an uncontended release notified");
}

//! `mysql://` beyond the conformance and fault suites (`tests/it/conformance.rs`,
//! `tests/it/faults.rs`), on real MariaDB servers the tests start. The scenarios shared with
//! PostgreSQL are written once in `test-support/src/sql.rs`; what only MariaDB has (a token column
//! too narrow, waiting by polling) is here:
//!
//! - what the table holds (holder, expiry by the database's clock in UTC, an expired row taken
//!   over, fencing counters rising across releases), and the DDL the guide prints;
//! - renewals of many locks batched (the server's `Com_update` counter);
//! - a lone read lock or permit taken and given back by one plain statement each, as a plain
//!   lock is (the server's `Com_insert`, `Com_delete_multi`); shared ones by one `CALL` each
//!   (`Com_call_procedure`), and by statements, with the same promises, once the procedures
//!   are gone;
//! - waiting without notifications: a waiter of another client gets a released lock within the
//!   polling cap, long before the holder's lease would end;
//! - bad input: a wrong password, a missing database, a table of the wrong shape, a missing
//!   table with `create_table=false`, an unreachable server.
#![cfg(feature = "mysql")]

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use mysql_async::prelude::Queryable;
use support::fixture::{Fixture, MysqlFixture};
use support::mysql::MysqlServer;
use support::unique;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_names_its_holder_and_expires_by_the_database_clock() {
    support::sql::the_row_names_its_holder_and_expires_by_the_database_clock(MysqlFixture::new())
        .await;
}

/// The guide prints the DDL; tables made from it work with `create_table=false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_made_from_the_guides_ddl_work_without_create_table() {
    support::sql::tables_made_from_the_guides_ddl_work_without_create_table(MysqlServer::shared())
        .await;
}

/// A table made before owner tokens named their holder (a 64-character `token` column) is
/// refused at connect time with the statement that widens it; widened, it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_a_narrow_token_column_is_refused_with_the_fix() {
    let server = MysqlServer::shared();
    let mut conn = server.conn().await;
    let table = unique("narrow").replace('-', "_");
    conn.query_drop(format!(
        "CREATE TABLE {table} (name VARBINARY(2048) NOT NULL PRIMARY KEY, \
         token VARCHAR(64) CHARACTER SET ascii NOT NULL, expires_at DATETIME(6) NOT NULL, \
         holder VARCHAR(255) NOT NULL, acquired_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
    ))
    .await
    .unwrap();
    let url = format!("{}?table={table}", server.url());
    let error = LockClient::connect(&url).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, LockError::Connect { .. }), "{message}");
    assert!(
        message.contains("64-character `token` column") && message.contains("ALTER TABLE"),
        "{message}"
    );
    conn.query_drop(format!(
        "ALTER TABLE {table} MODIFY token VARCHAR(255) CHARACTER SET ascii NOT NULL"
    ))
    .await
    .unwrap();
    let client = LockClient::connect(&url).await.unwrap();
    client
        .lock("widened")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Fifty locks renewed for 3 s: a few writes per renewal round, not fifty (counted by the server's `Com_insert/update/delete`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_locks_are_batched() {
    support::sql::renewals_of_many_locks_are_batched(MysqlFixture::own()).await;
}

/// A read lock and a semaphore's permit are taken and given back by the table's procedures, one
/// `CALL` each way (the server's `Com_call_procedure`, on a server of this test's own). With
/// the procedures dropped, the client notices at its next call and goes on with statements:
/// readers share, a writer is kept out and then granted, the permit limit holds, no row is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_take_one_call_each_way_and_statements_once_the_procedures_are_gone() {
    let fixture = MysqlFixture::own();
    let client = fixture.client().await;
    let calls = || procedure_calls(&fixture);
    // A lock row there already (expired, as readers leave it to a writer): the client's
    // lone-share `INSERT` meets it, and the name's shares go through the procedures.
    let mut conn = fixture.server.conn().await;
    for i in 0..5 {
        conn.exec_drop(
            format!(
                "INSERT INTO {} VALUES (?, 'readers', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, \
                 'readers', UTC_TIMESTAMP(6))",
                fixture.table()
            ),
            (format!("lock:called:{i}").into_bytes(),),
        )
        .await
        .unwrap();
    }
    let before = calls().await;
    for i in 0..5 {
        let read = client.lock(format!("called:{i}")).read().acquire().await;
        read.unwrap().release().await.unwrap();
        let permit = client.semaphore(format!("called:{i}"), 4).acquire().await;
        permit.unwrap().release().await.unwrap();
    }
    assert_eq!(
        calls().await - before,
        20,
        "one CALL per acquisition and per release"
    );

    for procedure in ["sacq2", "srel2"] {
        conn.query_drop(format!("DROP PROCEDURE {}_{procedure}", fixture.table()))
            .await
            .unwrap();
    }
    let reader = client.lock("gone").read().lease(ms(10_000));
    let (one, two) = (reader.clone().acquire().await, reader.acquire().await);
    let (one, two) = (one.unwrap(), two.unwrap());
    let writer = || client.lock("gone").wait(ms(0)).try_acquire();
    assert!(
        writer().await.unwrap().is_none(),
        "readers keep a writer out"
    );
    one.release().await.unwrap();
    assert!(
        writer().await.unwrap().is_none(),
        "one reader left keeps it out"
    );
    two.release().await.unwrap();
    writer().await.unwrap().unwrap().release().await.unwrap();

    let permit = || {
        client
            .semaphore("gone:permits", 2)
            .wait(ms(0))
            .try_acquire()
    };
    let (a, b) = (permit().await.unwrap(), permit().await.unwrap());
    assert!(permit().await.unwrap().is_none(), "the limit holds");
    a.unwrap().release().await.unwrap();
    let c = permit()
        .await
        .unwrap()
        .expect("a released permit is free again");
    b.unwrap().release().await.unwrap();
    c.release().await.unwrap();
    let left: Vec<Vec<u8>> = fixture
        .rows(&format!("SELECT name FROM {}", fixture.table()), ())
        .await;
    assert!(left.is_empty(), "rows left behind: {left:?}");
    assert_eq!(
        calls().await - before,
        21,
        "the first call after the drop, then statements"
    );
}

/// An upgradable read's upgrade is one `CALL` of the table's procedure `<table>_supg1`. With
/// the procedure dropped, the client notices at its next upgrade and goes on with statements:
/// the upgrade still waits for a reader, then holds the lock with a new fencing token, and
/// leaves no row behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_is_one_call_and_statements_once_the_procedure_is_gone() {
    let fixture = MysqlFixture::own();
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let calls = || procedure_calls(&fixture);
    let mut up = client.lock("climb").upgradable().acquire().await.unwrap();
    let before = calls().await;
    up.upgrade().await.unwrap();
    assert_eq!(calls().await - before, 1, "one CALL for the upgrade");
    let token = distlock::__private::testing::owner_token(&up).to_owned();
    assert_eq!(fixture.holder("lock:climb").await, Some(token));
    let first = up.fencing_token().unwrap();
    up.release().await.unwrap();

    let mut conn = fixture.server.conn().await;
    conn.query_drop(format!("DROP PROCEDURE {}_supg1", fixture.table()))
        .await
        .unwrap();
    let up = client
        .lock("climb")
        .upgradable()
        .wait(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let reader = client.lock("climb").read().acquire().await.unwrap();
    let up = upgraded_once_the_reader_leaves(up, reader).await;
    let token = distlock::__private::testing::owner_token(&up).to_owned();
    assert_eq!(fixture.holder("lock:climb").await, Some(token));
    assert!(up.fencing_token().unwrap() > first);
    up.release().await.unwrap();
    let left: Vec<Vec<u8>> = fixture
        .rows(&format!("SELECT name FROM {}", fixture.table()), ())
        .await;
    assert!(left.is_empty(), "rows left behind: {left:?}");
}

/// An upgradable read taken alone (without fencing) and still alone is upgraded by one
/// `UPDATE` of its lock row (the server's `Com_update`), no `CALL`: the lock row becomes the
/// writer's, its share row no longer counts as a reader, and readers, writers and other
/// upgradable requests stay out; the release deletes both rows, and so do a release after the
/// lease ran out and a forced release. Beside another reader, that `UPDATE` changes nothing
/// and the procedure upgrades, once the reader has left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_alone_is_one_update_and_beside_a_reader_the_procedure() {
    let fixture = MysqlFixture::own();
    let (a, b) = (fixture.client().await, fixture.client().await);
    let table = fixture.table().to_owned();
    let rows = || async {
        let rows: Vec<(Vec<u8>, String, i64)> = fixture
            .rows(
                &format!(
                    "SELECT name, token, expires_at > UTC_TIMESTAMP(6) FROM {table} ORDER BY name"
                ),
                (),
            )
            .await;
        rows.into_iter()
            .map(|(n, t, live)| (String::from_utf8_lossy(&n).into_owned(), t, live == 1))
            .collect::<Vec<_>>()
    };
    let counted = || status(&fixture, ["COM_UPDATE", "COM_CALL_PROCEDURE"]);

    let mut up = a.lock("alone").upgradable().acquire().await.unwrap();
    let token = distlock::__private::testing::owner_token(&up).to_owned();
    let before = counted().await;
    up.upgrade().await.unwrap();
    assert_eq!(
        since(before, counted().await),
        [1, 0],
        "one UPDATE, no CALL"
    );
    assert_eq!(fixture.holder("lock:alone").await, Some(token.clone()));
    let share = format!("lock:alone\u{1}{token}");
    assert_eq!(
        rows().await,
        [
            ("lock:alone".to_owned(), token.clone(), true),
            (share.clone(), token.clone(), true)
        ],
        "the lock row the writer's, the share row left as it was"
    );
    assert!(
        fixture.readers("lock:alone").await.is_empty(),
        "a reader left"
    );
    let try_b = |mode: u8| {
        let request = b.lock("alone").wait(ms(0));
        let request = match mode {
            0 => request.read(),
            1 => request.upgradable(),
            _ => request,
        };
        request.try_acquire()
    };
    for mode in 0..3 {
        assert!(try_b(mode).await.unwrap().is_none(), "mode {mode} let in");
    }
    up.release().await.unwrap();
    assert!(rows().await.is_empty(), "rows left: {:?}", rows().await);

    // Its lease ran out (by the table's clock) before the release: both rows still go.
    let mut up = a.lock("alone").upgradable().acquire().await.unwrap();
    up.upgrade().await.unwrap();
    fixture
        .rows::<i64>(
            &format!(
                "UPDATE {table} SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND \
                 WHERE name = 'lock:alone'"
            ),
            (),
        )
        .await;
    let _ = up.release().await;
    assert!(rows().await.is_empty(), "rows left: {:?}", rows().await);

    // Released by force: both rows go, and a reader then is a lone reader again.
    let mut up = a.lock("alone").upgradable().acquire().await.unwrap();
    up.upgrade().await.unwrap();
    let forced = b
        .force_release("alone")
        .await
        .unwrap()
        .expect("it was held");
    assert_eq!(forced.key, "alone");
    assert!(rows().await.is_empty(), "rows left: {:?}", rows().await);
    drop(up);

    // Beside a reader of another client: the UPDATE changes nothing, the procedure waits.
    let up = a
        .lock("beside")
        .upgradable()
        .wait(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let token = distlock::__private::testing::owner_token(&up).to_owned();
    let reader = b.lock("beside").read().acquire().await.unwrap();
    let before = counted().await;
    let up = upgraded_once_the_reader_leaves(up, reader).await;
    // (The statements the procedures run count too, so only the calls are told apart.)
    let [_, calls] = since(before, counted().await);
    assert!(calls >= 1, "the procedure upgraded");
    assert_eq!(fixture.holder("lock:beside").await, Some(token));
    up.release().await.unwrap();
    assert!(rows().await.is_empty(), "rows left: {:?}", rows().await);
}

/// How many procedures the server has called (`Com_call_procedure`).
async fn procedure_calls(fixture: &MysqlFixture) -> u64 {
    let [calls] = status(fixture, ["COM_CALL_PROCEDURE"]).await;
    calls
}

/// The server's statement counters: (`Com_insert`, `Com_delete_multi`, `Com_call_procedure`).
async fn counters(fixture: &MysqlFixture) -> [u64; 3] {
    status(
        fixture,
        ["COM_INSERT", "COM_DELETE_MULTI", "COM_CALL_PROCEDURE"],
    )
    .await
}

/// The server's status variables `names` (statements count inside a procedure too).
async fn status<const N: usize>(fixture: &MysqlFixture, names: [&str; N]) -> [u64; N] {
    let mut counted = [0; N];
    for (i, name) in names.into_iter().enumerate() {
        let rows = fixture
            .rows::<String>(
                "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME = ?",
                (name,),
            )
            .await;
        counted[i] = rows[0].parse().unwrap();
    }
    counted
}

fn since<const N: usize>(before: [u64; N], after: [u64; N]) -> [u64; N] {
    std::array::from_fn(|i| after[i] - before[i])
}

/// Upgrades `up` beside `reader`, which holds the same key: the upgrade waits while the reader
/// holds, and is granted once it has left.
async fn upgraded_once_the_reader_leaves(
    mut up: distlock::LockGuard,
    reader: distlock::LockGuard,
) -> distlock::LockGuard {
    let upgrading = tokio::spawn(async move {
        let upgraded = up.upgrade().await;
        (up, upgraded)
    });
    tokio::time::sleep(ms(300)).await;
    assert!(!upgrading.is_finished(), "upgraded beside a reader");
    reader.release().await.unwrap();
    let (up, upgraded) = tokio::time::timeout(ms(5_000), upgrading)
        .await
        .expect("upgraded once the reader left")
        .unwrap();
    upgraded.unwrap();
    up
}

/// A lone read lock and a lone permit cost what a plain lock does: one `INSERT` (the lock row
/// and the share) and one `DELETE` of both (the server's `Com_insert`, `Com_delete_multi`), no
/// `CALL`. A second reader of another client takes the full path, and so does every release
/// after it: the lock row stays until the last share goes. A lone share's renewal keeps it
/// alone; a writer's mark does not, and the share's release leaves the row to the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_reader_costs_what_a_writer_does() {
    let fixture = MysqlFixture::own();
    let (a, b, c) = (
        fixture.client().await,
        fixture.client().await,
        fixture.client().await,
    );
    let names = || async {
        let rows: Vec<Vec<u8>> = fixture
            .rows(&format!("SELECT name FROM {}", fixture.table()), ())
            .await;
        rows.into_iter()
            .map(|n| String::from_utf8_lossy(&n).into_owned())
            .collect::<Vec<_>>()
    };

    let before = counters(&fixture).await;
    let read = a.lock("lone").read().acquire().await.unwrap();
    assert_eq!(names().await.len(), 2, "the lock row and the share");
    read.release().await.unwrap();
    let permit = a.semaphore("lone:permits", 2).acquire().await.unwrap();
    permit.release().await.unwrap();
    assert_eq!(
        since(before, counters(&fixture).await),
        [2, 2, 0],
        "one INSERT and one DELETE per pair, no CALL"
    );
    assert!(names().await.is_empty(), "rows left: {:?}", names().await);

    // Two readers share; a writer is kept out until both have gone.
    let first = a.lock("two").read().acquire().await.unwrap();
    let before = counters(&fixture).await;
    let second = b.lock("two").read().acquire().await.unwrap();
    let writer = || c.lock("two").wait(ms(0)).try_acquire();
    assert!(
        writer().await.unwrap().is_none(),
        "readers keep a writer out"
    );
    first.release().await.unwrap();
    assert!(
        writer().await.unwrap().is_none(),
        "one reader left keeps it out"
    );
    second.release().await.unwrap();
    assert_eq!(
        since(before, counters(&fixture).await)[2],
        3,
        "the second reader's acquisition and both releases take the full path"
    );
    writer().await.unwrap().unwrap().release().await.unwrap();
    assert!(names().await.is_empty(), "rows left: {:?}", names().await);

    // Renewed (a 1.5 s lease, renewed every 0.5 s), a lone share still leaves alone.
    let renewed = a
        .lock("renewed")
        .read()
        .lease(ms(1_500))
        .acquire()
        .await
        .unwrap();
    let expiry = || async {
        let rows: Vec<i64> = fixture
            .rows(
                &format!(
                    "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, acquired_at, expires_at) AS SIGNED) \
                     FROM {} WHERE name = 'lock:renewed'",
                    fixture.table()
                ),
                (),
            )
            .await;
        rows[0]
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while expiry().await <= 1_500_000 {
        assert!(Instant::now() < deadline, "the share was never renewed");
        tokio::time::sleep(ms(100)).await;
    }
    let before = counters(&fixture).await;
    renewed.release().await.unwrap();
    assert_eq!(
        since(before, counters(&fixture).await)[1..],
        [1, 0],
        "a renewed lone share: one DELETE, no CALL"
    );
    assert!(names().await.is_empty(), "rows left: {:?}", names().await);

    // A writer waiting marks the readers: a new reader stays out, and the lone share's
    // release takes the full path, which leaves the row to the writer.
    let held = a.lock("marked").read().acquire().await.unwrap();
    let waiting = tokio::spawn({
        let c = c.clone();
        async move {
            c.lock("marked")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !names()
        .await
        .iter()
        .any(|n| n.starts_with("lock:marked\u{2}"))
    {
        assert!(
            Instant::now() < deadline,
            "the writer never marked the readers"
        );
        tokio::time::sleep(ms(20)).await;
    }
    assert!(
        b.lock("marked")
            .read()
            .wait(ms(0))
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a writer waiting keeps a new reader out"
    );
    let before = counters(&fixture).await;
    held.release().await.unwrap();
    assert_eq!(
        since(before, counters(&fixture).await)[2],
        1,
        "the marked share's release takes the full path"
    );
    let writer = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the writer gets the lock once the reader has gone")
        .unwrap()
        .unwrap();
    writer.release().await.unwrap();
    assert!(names().await.is_empty(), "rows left: {:?}", names().await);
}

/// No notifications on MySQL: a waiter of another client polls, and gets the released lock
/// within the polling cap (50 ms plus a round trip), not when the 30 s lease would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_polls_and_gets_a_released_lock_soon() {
    let fixture = MysqlFixture::new();
    let holder = fixture.client().await;
    let waiter = fixture.client().await;
    let mut handoffs = Vec::new();
    for _ in 0..5 {
        let guard = holder
            .lock("polled")
            .lease(ms(30_000))
            .acquire()
            .await
            .unwrap();
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let guard = waiter
                    .lock("polled")
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap();
                (Instant::now(), guard)
            }
        });
        tokio::time::sleep(ms(400)).await; // the waiter backs off to its cap
        let released = Instant::now();
        guard.release().await.unwrap();
        let (granted, next) = waiting.await.unwrap();
        handoffs.push(granted - released);
        next.release().await.unwrap();
    }
    handoffs.sort();
    assert!(
        handoffs[2] < ms(500),
        "median handoff {:?}: the waiter did not poll ({handoffs:?})",
        handoffs[2]
    );
    eprintln!("mysql handoff by polling, sorted: {handoffs:?}");
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_at_connect_naming_the_cause() {
    support::sql::bad_input_fails_at_connect_naming_the_cause(MysqlServer::shared()).await;
}

/// `mode=advisory` is PostgreSQL's: on MySQL it is refused at connect, naming MySQL's
/// counterpart (`mode=named`, `GET_LOCK`) and the lock table, and nothing is written to the
/// server (no table of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisory_mode_is_refused_saying_why() {
    let server = MysqlServer::shared();
    let table = unique("advisory").replace('-', "_");
    let url = format!("{}?mode=advisory&table={table}", server.url());
    match LockClient::connect(&url).await {
        Err(LockError::Config(message)) => {
            for says in [
                "`mode=advisory`",
                "`mode=named`",
                "GET_LOCK",
                "leave the mode out",
            ] {
                assert!(message.contains(says), "{message} (wanted {says:?})");
            }
            assert!(
                !message.contains(support::mysql::PASSWORD),
                "the password is redacted: {message}"
            );
        }
        other => panic!("expected a Config error, got {other:?}"),
    }
    let mut conn = mysql_async::Conn::from_url(server.url()).await.unwrap();
    let tables: Vec<String> = conn
        .query(format!("SHOW TABLES LIKE '{table}%'"))
        .await
        .unwrap();
    assert!(tables.is_empty(), "a refused URL created {tables:?}");
    conn.disconnect().await.unwrap();
}

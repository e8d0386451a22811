//! `mysql://` beyond the conformance suite, on real MariaDB servers the tests start:
//!
//! - what the table holds (holder, expiry by the database's clock in UTC, an expired row taken
//!   over, fencing counters rising across releases), and the DDL the README prints;
//! - renewals of many locks batched (the server's `Com_update` counter);
//! - waiting without notifications: a waiter of another client gets a released lock within the
//!   polling cap, long before the holder's lease would end;
//! - faults: `kill -9` of a holder process, a holder paused (SIGSTOP) past its lease whose stale
//!   write `fence::SQL_FENCED_UPDATE` (with `?` placeholders) refuses, a database restart with
//!   its data kept, the holder's connection cut;
//! - bad input: a wrong password, a missing database, a table of the wrong shape, a missing
//!   table with `create_table=false`, an unreachable server.
#![cfg(feature = "mysql")]

mod support;

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use mysql_async::prelude::Queryable;
use support::fixture::{Fixture, MysqlFixture};
use support::history::{self, Helper, now_ns};
use support::mysql::MysqlServer;
use support::proxy::DelayProxy;
use support::unique;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn owner(guard: &distlock::LockGuard) -> String {
    distlock::__private::testing::owner_token(guard).to_owned()
}

/// `fence::SQL_FENCED_UPDATE` for MySQL: `?` placeholders in order of appearance, on table
/// `resource`; its parameters are `(value, token, id, token)`.
fn fenced_update_mysql(resource: &str) -> String {
    let shipped = distlock::fence::SQL_FENCED_UPDATE;
    assert_eq!(
        shipped, "UPDATE resource SET value = $2, fence = $1 WHERE id = $3 AND fence <= $1",
        "the shipped statement changed: adapt the parameter order below"
    );
    shipped
        .replace("resource", resource)
        .replace("$1", "?")
        .replace("$2", "?")
        .replace("$3", "?")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_names_its_holder_and_expires_by_the_database_clock() {
    let fixture = MysqlFixture::new();
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let table = fixture.table().to_owned();
    let mut last_fence = 0;
    for round in 0..3 {
        let guard = client
            .lock("row")
            .lease(ms(20_000))
            .acquire()
            .await
            .unwrap();
        let rows: Vec<(String, String, i64, i64)> = fixture
            .rows(
                &format!(
                    "SELECT token, holder, \
                     TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), \
                     TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6)) \
                     FROM {table} WHERE name = 'lock:row'"
                ),
                (),
            )
            .await;
        let (token, holder, left_us, since_us) = rows.into_iter().next().expect("a row");
        assert_eq!(token, owner(&guard));
        assert!(
            holder.ends_with(&format!(" pid {}", std::process::id())),
            "{holder}"
        );
        assert!(
            (18_000_000..=20_000_000).contains(&left_us),
            "expires in {left_us} µs"
        );
        assert!(since_us < 2_000_000, "acquired_at is the grant");
        let fence: Vec<i64> = fixture
            .rows(
                &format!("SELECT fence FROM {table}_fences WHERE name = 'lock:row'"),
                (),
            )
            .await;
        assert_eq!(fence.first().map(|f| *f as u64), guard.fencing_token());
        assert!(
            fence[0] > last_fence,
            "round {round}: {} after {last_fence}",
            fence[0]
        );
        last_fence = fence[0];
        guard.release().await.unwrap();
        let left: Vec<i64> = fixture
            .rows(&format!("SELECT count(*) FROM {table}"), ())
            .await;
        assert_eq!(left, [0], "a released lock leaves no row");
    }
    fixture
        .rows::<i64>(
            &format!(
                "INSERT INTO {table} VALUES ('lock:stale', 'crashed-owner', \
                 UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, 'a crashed host pid 1', \
                 UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE)"
            ),
            (),
        )
        .await;
    let taken = client
        .lock("stale")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("an expired row is taken over");
    assert_eq!(fixture.holder("lock:stale").await, Some(owner(&taken)));
    // A lock name is bytes, compared exactly: case and trailing spaces make other locks.
    let upper = client.lock("STALE").wait(Duration::ZERO).acquire().await;
    assert!(upper.is_ok(), "`STALE` is another lock than `stale`");
    let spaced = client.lock("stale ").wait(Duration::ZERO).acquire().await;
    assert!(spaced.is_ok(), "`stale ` is another lock than `stale`");
}

/// The README prints this DDL; tables made from it work with `create_table=false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_made_from_the_readme_ddl_work_without_create_table() {
    let server = MysqlServer::shared();
    let mut conn = server.conn().await;
    let table = unique("migrated").replace('-', "_");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("CREATE TABLE IF NOT EXISTS distlock_locks (\n    name        VARBINARY")
        .expect("the README prints the MySQL DDL");
    let ddl = &readme[start..];
    let ddl = &ddl[..ddl.find("```").expect("the DDL block ends")];
    for statement in ddl.split(';').filter(|s| !s.trim().is_empty()) {
        conn.query_drop(statement.replace("distlock_locks", &table))
            .await
            .expect("the README's DDL runs");
    }
    let url = format!("{}?table={table}&create_table=false", server.url());
    let client = LockClient::builder(&url)
        .fencing(true)
        .build()
        .await
        .unwrap();
    let guard = client.lock("migrated").acquire().await.unwrap();
    assert_eq!(guard.fencing_token(), Some(1));
    guard.release().await.unwrap();
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

/// Fifty locks renewed for 3 s (10 rounds): a few UPDATE statements per round, not fifty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_locks_are_batched() {
    let server = MysqlServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut conn = server.conn().await;
    let lease = ms(900);
    let mut taking = Vec::new();
    for i in 0..50 {
        let client = client.clone();
        taking.push(tokio::spawn(async move {
            client
                .lock(format!("many:{i}"))
                .lease(lease)
                .acquire()
                .await
        }));
    }
    let mut guards = Vec::new();
    for task in taking {
        guards.push(task.await.unwrap().unwrap());
    }
    let updates = async |conn: &mut mysql_async::Conn| -> u64 {
        let row: Option<(String, u64)> = conn
            .query_first("SHOW GLOBAL STATUS LIKE 'Com_update'")
            .await
            .unwrap();
        row.unwrap().1
    };
    let before = updates(&mut conn).await;
    let watched = ms(3_000);
    tokio::time::sleep(watched).await;
    let statements = updates(&mut conn).await - before;
    for guard in &guards {
        assert!(!guard.is_lost(), "a renewed lock was lost");
    }
    let stale: Option<i64> = conn
        .query_first(
            "SELECT count(*) FROM distlock_locks \
             WHERE expires_at < UTC_TIMESTAMP(6) + INTERVAL 300000 MICROSECOND",
        )
        .await
        .unwrap();
    assert_eq!(stale, Some(0), "locks whose expiry was not moved forward");
    assert!(
        (5..=40).contains(&statements),
        "{statements} UPDATE statements renewed 50 locks over {watched:?} (500 unbatched)"
    );
    eprintln!("50 locks, {watched:?}: {statements} renewal UPDATEs");
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
// Faults.

/// The helper entry point: a holder process (see `tests/postgres.rs`, same protocol).
#[test]
fn my_holder_process() {
    let Some(dir) = history::helper_dir() else {
        return;
    };
    let var = history::helper_var;
    history::helper_runtime().block_on(async {
        let url = var("LOCK_URL");
        let client = LockClient::builder(url.as_str())
            .fencing(true)
            .response_timeout(ms(300))
            .build()
            .await
            .unwrap();
        let guard = client
            .lock(var("LOCK_KEY"))
            .lease(ms(var("LEASE_MS").parse().unwrap()))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        let token = guard.fencing_token().expect("fencing is on");
        let line = format!("{token} {} {}", now_ns(), owner(&guard));
        history::write_file(&dir.join("acquired"), &line);
        if var("MODE") != "fenced" {
            std::future::pending::<()>().await;
        }
        history::read_when_there(&dir.join("write-again"), Duration::from_secs(60)).await;
        // The stale holder writes without asking whether it still holds the lock.
        let mut conn = plain_conn(&url).await;
        conn.exec_drop(
            fenced_update_mysql(&var("RESOURCE")),
            (
                "written by the stale holder",
                token as i64,
                1_i64,
                token as i64,
            ),
        )
        .await
        .unwrap();
        history::write_file(&dir.join("wrote"), &conn.affected_rows().to_string());
    });
}

async fn plain_conn(url: &str) -> mysql_async::Conn {
    let base = url.split('?').next().unwrap();
    let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(base).unwrap())
        .prefer_socket(false);
    mysql_async::Conn::new(opts).await.unwrap()
}

fn spawn_holder(url: &str, key: &str, lease: Duration, mode: &str, resource: &str) -> Helper {
    let dir = history::scratch_dir("my-holder");
    let env = [
        ("LOCK_URL", url.to_owned()),
        ("LOCK_KEY", key.to_owned()),
        ("LEASE_MS", lease.as_millis().to_string()),
        ("MODE", mode.to_owned()),
        ("RESOURCE", resource.to_owned()),
    ];
    let mut helper = Helper::spawn("my_holder_process", &dir, &env);
    helper.owns_dir = true;
    helper
}

async fn acquired(helper: &Helper) -> (u64, String) {
    let line = helper.read("acquired", Duration::from_secs(30)).await;
    let parts: Vec<&str> = line.split(' ').collect();
    (parts[0].parse().unwrap(), parts[2].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_blocks_nobody_longer_than_its_lease() {
    let fixture = MysqlFixture::new();
    let key = unique("killed");
    let lease = ms(1_000);
    let mut holder = spawn_holder(&fixture.url(), &key, lease, "hold", "");
    let (first_token, owner_token) = acquired(&holder).await;
    let name = format!("lock:{key}");
    assert_eq!(fixture.holder(&name).await, Some(owner_token));
    tokio::time::sleep(ms(500)).await;
    let before_read = now_ns();
    let ttl = fixture.ttl(&name).await.expect("held");
    holder.signal(libc::SIGKILL);
    let killed_at = now_ns();
    let _ = holder.child.wait();

    let client = fixture.builder().fencing(true).build().await.unwrap();
    let guard = client
        .lock(key.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let granted_at = now_ns();
    let lease_end = before_read + ttl.as_nanos() as u64;
    assert!(
        granted_at + 2_000_000 >= lease_end,
        "granted {} ms before the killed holder's lease ended",
        (lease_end - granted_at) / 1_000_000
    );
    let after_kill = Duration::from_nanos(granted_at - killed_at);
    assert!(
        after_kill < lease + ms(700),
        "granted {after_kill:?} after the kill"
    );
    assert!(guard.fencing_token() > Some(first_token));
    assert_eq!(fixture.holder(&name).await, Some(owner(&guard)));
    guard.release().await.unwrap();
    eprintln!("mysql: a killed holder's lock granted again {after_kill:?} after the kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_stale_write_is_refused_by_sql_fenced_update() {
    let fixture = MysqlFixture::new();
    let resource = unique("resource").replace('-', "_");
    fixture
        .rows::<i64>(
            &format!(
                "CREATE TABLE {resource} (id BIGINT PRIMARY KEY, value TEXT, fence BIGINT NOT \
                 NULL DEFAULT 0)"
            ),
            (),
        )
        .await;
    fixture
        .rows::<i64>(
            &format!("INSERT INTO {resource} (id, value) VALUES (1, 'initial')"),
            (),
        )
        .await;
    let key = unique("paused");
    let holder = spawn_holder(&fixture.url(), &key, ms(500), "fenced", &resource);
    let (stale_token, _) = acquired(&holder).await;
    holder.signal(libc::SIGSTOP);

    let client = fixture.builder().fencing(true).build().await.unwrap();
    let guard = client
        .lock(key.as_str())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let token = guard.fencing_token().unwrap();
    assert!(token > stale_token);
    let mut conn = fixture.server.conn().await;
    conn.exec_drop(
        fenced_update_mysql(&resource),
        (
            "written by the new holder",
            token as i64,
            1_i64,
            token as i64,
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        conn.affected_rows(),
        1,
        "the new holder's write goes through"
    );

    holder.signal(libc::SIGCONT);
    history::write_file(&holder.dir.join("write-again"), "go");
    assert_eq!(
        holder.read("wrote", Duration::from_secs(10)).await,
        "0",
        "the stale write must update no row"
    );
    let row: Option<(String, i64)> = conn
        .query_first(format!("SELECT value, fence FROM {resource} WHERE id = 1"))
        .await
        .unwrap();
    assert_eq!(
        row,
        Some(("written by the new holder".to_owned(), token as i64))
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_keeps_held_locks_held() {
    let mut server = MysqlServer::start();
    let url = format!("{}?table=restart_locks", server.url());
    let holder = LockClient::builder(&url)
        .connect_timeout(ms(500))
        .response_timeout(ms(500))
        .build()
        .await
        .unwrap();
    let waiter = LockClient::connect(&url).await.unwrap();
    let lease = ms(8_000);
    let guard = holder.lock("kept").lease(lease).acquire().await.unwrap();
    assert!(waiter.lock("kept").try_acquire().await.unwrap().is_none());

    let stopped = Instant::now();
    tokio::task::block_in_place(|| {
        server.stop();
        server.restart();
    });
    let down_for = stopped.elapsed();
    let mut conn = server.conn().await;
    let held_by: Option<String> = conn
        .query_first(
            "SELECT token FROM restart_locks WHERE name = 'lock:kept' \
             AND expires_at > UTC_TIMESTAMP(6)",
        )
        .await
        .unwrap();
    assert_eq!(held_by, Some(owner(&guard)), "still held after the restart");
    assert!(waiter.lock("kept").try_acquire().await.unwrap().is_none());
    let renewed_by = Instant::now() + lease;
    loop {
        let left: Option<i64> = conn
            .query_first(
                "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) \
                 FROM restart_locks WHERE name = 'lock:kept'",
            )
            .await
            .unwrap();
        if left.unwrap_or(0) > 7_000_000 {
            break;
        }
        assert!(
            Instant::now() < renewed_by,
            "the lease was not renewed after the restart"
        );
        tokio::time::sleep(ms(20)).await;
    }
    assert!(
        !guard.is_lost(),
        "the guard reported a loss it did not have"
    );
    guard.release().await.unwrap();
    let next = waiter
        .lock("kept")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("free after the release");
    next.release().await.unwrap();
    eprintln!("mysql restart: down {down_for:?}, lock kept and renewed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_from_the_database_is_told_before_its_lease_ends() {
    let fixture = MysqlFixture::new();
    let proxy = DelayProxy::start(fixture.server.port()).await;
    let through_proxy = fixture.url().replace(
        &format!(":{}/", fixture.server.port()),
        &format!(":{}/", proxy.port()),
    );
    let holder = LockClient::builder(&through_proxy)
        .response_timeout(ms(300))
        .connect_timeout(ms(300))
        .build()
        .await
        .unwrap();
    let lease = ms(1_500);
    let guard = holder.lock("cut").lease(lease).acquire().await.unwrap();
    tokio::time::sleep(ms(200)).await;
    let cut_at = Instant::now();
    proxy.set_blackhole(true);
    tokio::time::timeout(lease + ms(500), guard.lost())
        .await
        .expect("the holder is told");
    let told_after = cut_at.elapsed();
    assert!(
        told_after < lease,
        "told {told_after:?} after the cut, past the {lease:?} lease"
    );
    let other = fixture.client().await;
    let next = other
        .lock("cut")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let next_after = cut_at.elapsed();
    assert!(
        next_after + ms(250) >= lease && next_after > told_after,
        "the next holder came {next_after:?} after the cut, the loss was told after {told_after:?}"
    );
    next.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Bad input.

fn connect_error(error: LockError) -> String {
    assert!(
        matches!(error, LockError::Connect { .. } | LockError::Config(_)),
        "{error:?}"
    );
    error.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_at_connect_naming_the_cause() {
    let server = MysqlServer::shared();
    let port = server.port();
    let wrong_password = format!("mysql://distlock:not-it@127.0.0.1:{port}/distlock");
    let e = connect_error(LockClient::connect(&wrong_password).await.unwrap_err());
    assert!(
        e.contains("authentication failed") && !e.contains("not-it"),
        "{e}"
    );

    let e = connect_error(
        LockClient::connect(&server.url_for("no_such_db"))
            .await
            .unwrap_err(),
    );
    assert!(e.contains("\"no_such_db\" does not exist"), "{e}");

    let mut conn = server.conn().await;
    let bad = unique("bad_shape").replace('-', "_");
    conn.query_drop(format!(
        "CREATE TABLE {bad} (name VARBINARY(255) PRIMARY KEY, owner TEXT)"
    ))
    .await
    .unwrap();
    let e = connect_error(
        LockClient::connect(&format!("{}?table={bad}", server.url()))
            .await
            .unwrap_err(),
    );
    assert!(
        e.contains(&format!("`{bad}`"))
            && e.contains("does not have the shape")
            && e.contains("README"),
        "{e}"
    );
    let rows: Option<i64> = conn
        .query_first(format!("SELECT count(*) FROM {bad}"))
        .await
        .unwrap();
    assert_eq!(
        rows,
        Some(0),
        "nothing written to a table of the wrong shape"
    );

    let missing = unique("missing").replace('-', "_");
    let e = connect_error(
        LockClient::connect(&format!(
            "{}?table={missing}&create_table=false",
            server.url()
        ))
        .await
        .unwrap_err(),
    );
    assert!(
        e.contains(&format!("`{missing}`")) && e.contains("does not exist") && e.contains("DDL"),
        "{e}"
    );
    let created: Option<i64> = conn
        .query_first(format!(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = '{missing}'"
        ))
        .await
        .unwrap();
    assert_eq!(created, Some(0), "create_table=false creates nothing");

    let nobody = format!("mysql://u:pw@127.0.0.1:{}/db", support::free_port());
    let e = connect_error(LockClient::connect(&nobody).await.unwrap_err());
    assert!(
        e.contains("connection refused") && !e.contains(":pw@"),
        "{e}"
    );
}

//! `postgres://` beyond the conformance suite, on real PostgreSQL servers the tests start:
//!
//! - what the table holds (holder, expiry by the database's clock, fencing counters that outlive
//!   the rows), and the DDL the README prints;
//! - renewals of many locks batched into one statement per tick (counted in the server's log);
//! - faults: `kill -9` of a holder process, a holder paused (SIGSTOP) past its lease whose stale
//!   write `fence::SQL_FENCED_UPDATE` refuses, a database restart with its data kept, the
//!   holder's connection cut;
//! - bad input: a wrong password, a missing database, a table of the wrong shape, a missing
//!   table with `create_table=false`, an unreachable server.
#![cfg(feature = "postgres")]

mod support;

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use support::fixture::{Fixture, PostgresFixture};
use support::history::{self, Helper, now_ns};
use support::postgres::PostgresServer;
use support::proxy::DelayProxy;
use support::{eventually, unique};

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
            count(sql, &format!("SELECT count(*) FROM {table}")).await,
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

/// The README prints this DDL; connecting with `create_table=false` to tables made from it
/// works, and nothing else is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_made_from_the_readme_ddl_work_without_create_table() {
    let server = PostgresServer::shared();
    let sql = server.client().await;
    let table = unique("migrated").replace('-', "_");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("CREATE TABLE IF NOT EXISTS distlock_locks (")
        .expect("the README prints the PostgreSQL DDL");
    let ddl = &readme[start..];
    let ddl = &ddl[..ddl.find("```").expect("the DDL block ends")];
    sql.batch_execute(&ddl.replace("distlock_locks", &table))
        .await
        .expect("the README's DDL runs");
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

/// Fifty locks renewed for a while: one batched statement per renewal tick, not fifty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_locks_are_one_statement_per_tick() {
    let server = PostgresServer::start_with(&["-c", "log_statement=all"]);
    let client = LockClient::connect(&server.url()).await.unwrap();
    let sql = server.client().await;
    let lease = ms(900); // renewed every 300 ms
    // Taken together, as a burst of requests would: their renewals come due together.
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
    let log_before = server.log().len();
    let watched = ms(3_000);
    tokio::time::sleep(watched).await;
    let log = server.log();
    let log = &log[log_before..];
    let batched = log.matches("unnest(").count();
    let single = log
        .matches("WHERE name = $1 AND token = $2 AND expires_at")
        .count();
    for guard in &guards {
        assert!(!guard.is_lost(), "a renewed lock was lost");
    }
    let stale = count(
        &sql,
        "SELECT count(*) FROM distlock_locks WHERE expires_at < now() + interval '300 ms'",
    )
    .await;
    assert_eq!(stale, 0, "locks whose expiry was not moved forward");
    assert_eq!(count(&sql, "SELECT count(*) FROM distlock_locks").await, 50);
    // 3 s / 300 ms = 10 renewal rounds of 50 locks: 500 statements unbatched. Batched, each
    // round is a statement or a few (locks whose renewals fall on neighbouring 30 ms grid steps
    // go separately).
    assert!(
        batched >= 5 && batched + single <= 40,
        "{batched} batched and {single} single renewal statements for 50 locks over {watched:?}"
    );
    eprintln!("50 locks, {watched:?}: {batched} batched renewal statements, {single} single ones");
}

// ---------------------------------------------------------------------------------------------
// Faults.

/// The helper entry point: a holder process. Acquires `LOCK_KEY` (fencing) and writes
/// `acquired` (`fencing-token now-ns owner-token`); in mode `fenced` it then waits for the file
/// `write-again` and writes the fenced resource with its token, reporting the rows updated.
#[test]
fn pg_holder_process() {
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
        let line = format!(
            "{token} {} {}",
            now_ns(),
            distlock::__private::testing::owner_token(&guard)
        );
        history::write_file(&dir.join("acquired"), &line);
        if var("MODE") != "fenced" {
            std::future::pending::<()>().await;
        }
        history::read_when_there(&dir.join("write-again"), Duration::from_secs(60)).await;
        // The stale holder writes without asking whether it still holds the lock: the pause can
        // fall between any check and the write, so only the resource can refuse.
        let sql = plain_client(&url).await;
        let fenced_update =
            distlock::fence::SQL_FENCED_UPDATE.replace("resource", &var("RESOURCE"));
        let rows = sql
            .execute(
                &fenced_update,
                &[&(token as i64), &"written by the stale holder", &1_i64],
            )
            .await
            .unwrap();
        history::write_file(&dir.join("wrote"), &rows.to_string());
    });
}

async fn plain_client(url: &str) -> tokio_postgres::Client {
    let base = url.split('?').next().unwrap();
    let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn spawn_holder(url: &str, key: &str, lease: Duration, mode: &str) -> Helper {
    let dir = history::scratch_dir("pg-holder");
    let env = [
        ("LOCK_URL", url.to_owned()),
        ("LOCK_KEY", key.to_owned()),
        ("LEASE_MS", lease.as_millis().to_string()),
        ("MODE", mode.to_owned()),
    ];
    let mut helper = Helper::spawn("pg_holder_process", &dir, &env);
    helper.owns_dir = true;
    helper
}

/// `(fencing token, owner token)` from a holder's `acquired` file.
async fn acquired(helper: &Helper) -> (u64, String) {
    let line = helper.read("acquired", Duration::from_secs(30)).await;
    let parts: Vec<&str> = line.split(' ').collect();
    (parts[0].parse().unwrap(), parts[2].to_owned())
}

/// `kill -9` of the holder: the next grant comes when the row's expiry passes, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_blocks_nobody_longer_than_its_lease() {
    let fixture = PostgresFixture::new();
    let key = unique("killed");
    let lease = ms(1_000);
    let mut holder = spawn_holder(&fixture.url(), &key, lease, "hold");
    let (first_token, owner) = acquired(&holder).await;
    let name = format!("lock:{key}");
    assert_eq!(fixture.holder(&name).await, Some(owner));
    tokio::time::sleep(ms(500)).await; // renewed a time or two
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
    assert_eq!(
        fixture.holder(&name).await,
        Some(distlock::__private::testing::owner_token(&guard).to_owned())
    );
    guard.release().await.unwrap();
    eprintln!("postgres: a killed holder's lock granted again {after_kill:?} after the kill");
}

/// A holder paused past its lease resumes and writes: `fence::SQL_FENCED_UPDATE`, run against
/// the database, refuses its stale token after the new holder wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_stale_write_is_refused_by_sql_fenced_update() {
    let fixture = PostgresFixture::new();
    let sql = fixture.sql().await;
    let resource = unique("resource").replace('-', "_");
    // The resource table of the fence docs, under a name of this test's own.
    sql.batch_execute(&format!(
        "CREATE TABLE {resource} (id bigint PRIMARY KEY, value text, fence bigint NOT NULL \
         DEFAULT 0); INSERT INTO {resource} (id, value) VALUES (1, 'initial')"
    ))
    .await
    .unwrap();
    let fenced_update = distlock::fence::SQL_FENCED_UPDATE.replace("resource", &resource);
    let url = fixture.url();
    let key = unique("paused");
    let holder = {
        let dir = history::scratch_dir("pg-holder");
        let env = [
            ("LOCK_URL", url.clone()),
            ("LOCK_KEY", key.clone()),
            ("LEASE_MS", "500".to_owned()),
            ("MODE", "fenced".to_owned()),
            ("RESOURCE", resource.clone()),
        ];
        let mut helper = Helper::spawn("pg_holder_process", &dir, &env);
        helper.owns_dir = true;
        helper
    };
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
    let written = sql
        .execute(
            &fenced_update,
            &[&(token as i64), &"written by the new holder", &1_i64],
        )
        .await
        .unwrap();
    assert_eq!(written, 1, "the new holder's write goes through");

    holder.signal(libc::SIGCONT);
    history::write_file(&holder.dir.join("write-again"), "go");
    assert_eq!(
        holder.read("wrote", Duration::from_secs(10)).await,
        "0",
        "the stale write must update no row"
    );
    let row = sql
        .query_one(
            &format!("SELECT value, fence FROM {resource} WHERE id = 1"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "written by the new holder");
    assert_eq!(row.get::<_, i64>(1), token as i64);
    guard.release().await.unwrap();
}

/// The database restarts (its data kept) while a lock is held: the lock stays held, renewal
/// resumes on new connections before the lease ends, waiting for releases works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_keeps_held_locks_held() {
    let mut server = PostgresServer::start();
    let url = format!("{}?table=restart_locks", server.url());
    let holder = LockClient::builder(&url)
        .connect_timeout(ms(500))
        .response_timeout(ms(500))
        .build()
        .await
        .unwrap();
    let waiter = LockClient::connect(&url).await.unwrap();
    let lease = ms(6_000);
    let guard = holder.lock("kept").lease(lease).acquire().await.unwrap();
    // The waiter listens before the restart; its LISTEN connection dies with the server.
    assert!(waiter.lock("kept").try_acquire().await.unwrap().is_none());

    let stopped = Instant::now();
    tokio::task::block_in_place(|| {
        server.stop();
        server.restart();
    });
    let down_for = stopped.elapsed();
    let sql = server.client().await;
    let token = distlock::__private::testing::owner_token(&guard);
    let held_by: Option<String> = sql
        .query_opt(
            "SELECT token FROM restart_locks WHERE name = 'lock:kept' AND expires_at > now()",
            &[],
        )
        .await
        .unwrap()
        .map(|r| r.get(0));
    assert_eq!(
        held_by.as_deref(),
        Some(token),
        "still held after the restart"
    );
    assert!(waiter.lock("kept").try_acquire().await.unwrap().is_none());
    // Renewal resumes: the expiry moves forward again, and the guard never reported a loss.
    let expiry = || async {
        sql.query_one(
            "SELECT (extract(epoch FROM expires_at - now()) * 1000)::int8 FROM restart_locks \
             WHERE name = 'lock:kept'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
    };
    assert!(
        eventually(lease, || async { expiry().await > 5_000 }).await,
        "the lease was not renewed after the restart"
    );
    assert!(
        !guard.is_lost(),
        "the guard reported a loss it did not have"
    );

    // A waiter after the restart is woken by the release (NOTIFY), not by the 6 s lease.
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let started = Instant::now();
            let guard = waiter
                .lock("kept")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap();
            (started.elapsed(), guard)
        }
    });
    tokio::time::sleep(ms(300)).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (_, next) = waiting.await.unwrap();
    let handoff = released_at.elapsed();
    assert!(
        handoff < ms(2_000),
        "the waiter got the lock {handoff:?} after the release: not woken by it"
    );
    next.release().await.unwrap();
    eprintln!("postgres restart: down {down_for:?}, lock kept, handoff after it {handoff:?}");
}

/// The holder's connection is cut (a blackholed proxy) past its lease: the guard reports the
/// loss before the lease ends by the holder's clock, and another client takes the lock after
/// the row expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_from_the_database_is_told_before_its_lease_ends() {
    let fixture = PostgresFixture::new();
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
    // The last renewal before the cut came at most 200 ms before it, so the row's expiry — the
    // database's clock — is at least `lease - 200 ms` after the cut.
    let next_after = cut_at.elapsed();
    assert!(
        next_after + ms(250) >= lease && next_after > told_after,
        "the next holder came {next_after:?} after the cut, the loss was told after {told_after:?}"
    );
    next.release().await.unwrap();
    eprintln!("postgres cut: loss told after {told_after:?}, next holder after {next_after:?}");
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
    let server = PostgresServer::shared();
    let port = server.port();
    let wrong_password = format!("postgres://postgres:not-it@127.0.0.1:{port}/postgres");
    let e = connect_error(LockClient::connect(&wrong_password).await.unwrap_err());
    assert!(
        e.contains("authentication failed") && !e.contains("not-it"),
        "{e}"
    );

    let missing_db = server.url_for("no_such_db");
    let e = connect_error(LockClient::connect(&missing_db).await.unwrap_err());
    assert!(e.contains("\"no_such_db\" does not exist"), "{e}");

    let sql = server.client().await;
    let bad = unique("bad_shape").replace('-', "_");
    sql.batch_execute(&format!(
        "CREATE TABLE {bad} (name text PRIMARY KEY, owner text)"
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
    assert_eq!(
        count(&sql, &format!("SELECT count(*) FROM {bad}")).await,
        0,
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
    let created = count(
        &sql,
        &format!("SELECT count(*) FROM pg_tables WHERE tablename = '{missing}'"),
    )
    .await;
    assert_eq!(created, 0, "create_table=false creates nothing");

    let e = connect_error(
        LockClient::connect(&format!("{}?table=x;drop", server.url()))
            .await
            .unwrap_err(),
    );
    assert!(e.contains("invalid lock table name"), "{e}");

    let nobody = format!(
        "postgres://postgres:pw@127.0.0.1:{}/postgres",
        support::free_port()
    );
    let e = connect_error(LockClient::connect(&nobody).await.unwrap_err());
    assert!(
        e.contains("connection refused") && !e.contains(":pw@"),
        "{e}"
    );
}

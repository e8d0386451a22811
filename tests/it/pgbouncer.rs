//! `postgres://` through PgBouncer 1.18 in transaction mode, beyond the conformance cases and
//! fault scenarios that run through it (`conformance::pgbouncer*`,
//! `faults::scenarios::{behind_pgbouncer, pgbouncer_itself}`):
//!
//! - what `pooler=transaction` changes: without it, a lock client whose prepared statements
//!   are gone from the server connection PgBouncer hands it fails naming the parameter; with
//!   it, the same client carries on;
//! - `listen_url` is proven at connect: one that hears nothing of the URL's releases is
//!   refused, and so are malformed or misplaced parameters;
//! - `mode=advisory` never holds a lock that belongs to nobody: refused with
//!   `pooler=transaction`, and refused at connect when PgBouncer drops its startup options;
//! - a waiter without `listen_url` polls within the stated bounds: it is granted soon after a
//!   release by another process's client, and asks a bounded number of times while it waits;
//! - many tasks sharing one pooled connection each get their own statement's answer.
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use support::fixture::{Fixture, PostgresFixture};
use support::pgbouncer::PgBouncer;
use support::postgres::PostgresServer;

/// Ends every server connection PgBouncer holds for distlock (as a server failover or
/// PgBouncer's `server_lifetime` does): PgBouncer keeps its clients and opens new server
/// connections, which hold none of the old connections' prepared statements.
async fn end_server_connections(server: &PostgresServer) {
    let admin = server.client().await;
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'distlock' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .expect("terminate the server connections");
    assert!(!ended.is_empty(), "no server connection of distlock's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pooler_transaction_a_lost_statement_names_the_parameter() {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    let table = format!("locks_{}", std::process::id());
    let through = format!("{}?table={table}", bouncer.url());
    // Both connect: preparing works on whichever server connection PgBouncer lends.
    let direct_mode = LockClient::connect(&through).await.expect("connects");
    let pooled_mode = LockClient::connect(&format!("{through}&pooler=transaction"))
        .await
        .expect("connects");
    pooled_mode
        .lock("b")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Every server connection from now on is new: whatever was prepared is gone.
    end_server_connections(&server).await;
    // PgBouncer itself keeps running: give it a moment to notice its server connections ended.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let error = direct_mode
        .lock("a")
        .acquire()
        .await
        .expect_err("its prepared statements are gone from the new server connection");
    let message = error.to_string();
    assert!(
        message.contains("does not exist") && message.contains("add `pooler=transaction`"),
        "{message}"
    );
    // With `pooler=transaction` nothing lives on the server connection: it carries on, and the
    // lock is the table's row.
    let guard = pooled_mode
        .lock("b")
        .acquire()
        .await
        .expect("through the pooler");
    let admin = server.client().await;
    let held: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE name = 'lock:b' AND expires_at > now()"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, 1);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_url_that_hears_nothing_is_refused_at_connect() {
    let server = PostgresServer::shared();
    let bouncer = PgBouncer::shared();
    let admin = server.client().await;
    let other = format!("other_{}", std::process::id());
    admin
        .batch_execute(&format!("CREATE DATABASE {other}"))
        .await
        .expect("create a second database");
    // `NOTIFY` is per database: a `LISTEN` in another database hears nothing.
    let url = format!(
        "{}?pooler=transaction&listen_url={}",
        bouncer.url(),
        server.url_for(&other)
    );
    let started = Instant::now();
    let error = LockClient::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect_err("a listen_url on another database");
    let message = error.to_string();
    assert!(
        matches!(error, LockError::Connect { .. })
            && message.contains("`listen_url`")
            && message.contains("heard no `NOTIFY`")
            && !message.contains(support::postgres::PASSWORD),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The same through the right database connects, and its `LISTEN` runs on the server
    // itself: PgBouncer's clients are not where it listens.
    let url = format!(
        "{}?pooler=transaction&listen_url={}",
        bouncer.url(),
        server.url()
    );
    LockClient::connect(&url)
        .await
        .expect("the right listen_url");
    admin
        .batch_execute(&format!("DROP DATABASE {other} WITH (FORCE)"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooler_parameters_are_checked() {
    let server = PostgresServer::shared();
    let bouncer = PgBouncer::shared();
    let cases = [
        (
            format!("{}?pooler=statement", bouncer.url()),
            "`pooler=statement`",
        ),
        (
            format!("{}?listen_url={}", server.url(), server.url()),
            "add `pooler=transaction`",
        ),
        (
            format!("{}?pooler=transaction&listen_url=localhost", bouncer.url()),
            "expected a `postgres://` URL",
        ),
        (
            format!("{}?pooler=transaction&mode=advisory", bouncer.url()),
            "an advisory lock belongs to a server session",
        ),
    ];
    for (url, says) in cases {
        match LockClient::connect(&url).await {
            Err(LockError::Config(message)) => {
                assert!(message.contains(says), "{url}: {message}");
                assert!(!message.contains(support::postgres::PASSWORD), "{message}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
}

/// PgBouncer drops the `options` startup parameter (`ignore_startup_parameters`), and with it
/// the setting `mode=advisory` asks for: the client is refused at connect instead of holding
/// advisory locks on server sessions that PgBouncer hands to others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_mode_through_a_pooler_is_refused_at_connect() {
    let bouncer = PgBouncer::shared();
    let url = format!("{}?mode=advisory", bouncer.url());
    match LockClient::connect(&url).await {
        Err(LockError::Connect { reason, .. }) => assert!(
            reason.contains("drops startup options") && reason.contains("pooler=transaction"),
            "{reason}"
        ),
        other => panic!("advisory mode through PgBouncer: {other:?}"),
    }
    // The server itself serves it.
    let direct = format!("{}?mode=advisory", PostgresServer::shared().url());
    LockClient::connect(&direct).await.expect("directly");
}

/// Without `listen_url` a waiter polls: it is granted within a poll pause (≤ 50 ms, plus the
/// round trips of a busy machine) of a release by another client, and while it waits it asks
/// about once per pause — counted in the server's statement log, not hundreds of times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_waiter_is_granted_soon_and_asks_a_bounded_number_of_times() {
    let fixture = PostgresFixture::own_pgbouncer(false);
    let holder = fixture.client().await;
    let waiter = fixture.client().await;
    let guard = holder
        .lock("polled")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let asks_before = attempts(&fixture);
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock("polled")
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (guard, Instant::now())
    });
    let waited = Duration::from_secs(2);
    tokio::time::sleep(waited).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (granted, granted_at) = waiting.await.unwrap();
    let granted = granted.expect("granted after the release");
    let after = granted_at.duration_since(released_at);
    assert!(
        after < Duration::from_secs(1),
        "granted {after:?} after the release"
    );
    let asks = attempts(&fixture) - asks_before;
    println!("{asks} attempts in {waited:?}; granted {after:?} after the release");
    // One ask per pause of 25–50 ms once backed off: about 40–80 in 2 s.
    assert!(
        (5..=200).contains(&asks),
        "{asks} attempts in {waited:?} of waiting"
    );
    assert_eq!(
        fixture.holder("lock:polled").await.as_deref(),
        Some(distlock::__private::testing::owner_token(&granted))
    );
    granted.release().await.unwrap();
}

/// Many tasks share one pooled connection (`pool_size=1`) in each of two clients: each gets
/// its own statement's answer (its fencing token, its own token read back, its release),
/// nothing is left held, and PgBouncer never sees a server answer nobody asked for. Behind a
/// pooler distlock sends one statement at a time per connection: pipelined through PgBouncer
/// 1.18, statements got other statements' answers under load (in the conformance suite, with
/// two CPU hogs: 2 runs in 6; one at a time, none in 17). Idle, this test did not reproduce
/// that with pipelining either: it is the pattern to widen when it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_a_pooled_connection_each_get_their_own_answer() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 25;
    let fixture = PostgresFixture::own_pgbouncer(false);
    let url = format!("{}&pool_size=1", fixture.url());
    let clients = [
        LockClient::connect(&url).await.expect("connects"),
        LockClient::connect(&url).await.expect("connects"),
    ];
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = clients[t % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let key = format!("shared-{t}-{round}");
                let guard = client
                    .lock(&key)
                    .lease(Duration::from_secs(30))
                    .fencing(round % 2 == 0)
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("acquire {key}: {e:?}"));
                if round % 2 == 0 {
                    assert!(guard.fencing_token().is_some(), "{key}: no fencing token");
                }
                let seen = client
                    .inspect(&key)
                    .await
                    .unwrap_or_else(|e| panic!("inspect {key}: {e:?}"))
                    .unwrap_or_else(|| panic!("{key}: not held while its guard lives"));
                assert_eq!(
                    seen.token.as_deref(),
                    Some(distlock::__private::testing::owner_token(&guard)),
                    "{key}: another holder's answer"
                );
                guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("release {key}: {e:?}"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task failed");
    }
    for t in 0..TASKS {
        for round in 0..ROUNDS {
            let name = format!("lock:shared-{t}-{round}");
            assert_eq!(fixture.holder(&name).await, None, "{name} left held");
        }
    }
    let log = fixture.bouncer().log();
    assert!(
        !log.contains("server conn crashed"),
        "PgBouncer saw a server answer nobody asked for:\n{log}"
    );
}

/// The acquisitions of the fixture's table in its server's statement log.
fn attempts(fixture: &PostgresFixture) -> usize {
    fixture
        .server
        .log()
        .matches(&format!("INSERT INTO \"{}\" ", fixture.table()))
        .count()
}

/// An acquisition cancelled while its statement waits in the server (here behind another
/// session's lock on the row) leaves no lock behind once that statement lands: the statement
/// is finished on its own connection, and the clean-up the cancelled acquisition sends runs
/// after it there. (Closing the connection at the cancellation did not stop the statement:
/// the clean-up, on a new connection, ran first and found nothing, and the statement then
/// took the lock for its whole 30 s lease, held by nobody.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_cancelled_while_its_statement_waits_leaves_no_lock() {
    let fixture = PostgresFixture::own_pgbouncer(false);
    // Connecting creates the lock table.
    let client = fixture.client().await;
    fixture
        .overwrite("lock:cancel", "blocker", Duration::from_secs(60))
        .await;
    let blocker = fixture.server.client().await;
    let table = fixture.table();
    blocker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM \"{table}\" WHERE name = 'lock:cancel' FOR UPDATE"
        ))
        .await
        .unwrap();
    let attempt = client
        .lock("cancel")
        .lease(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
        .acquire();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), attempt)
            .await
            .is_err(),
        "the acquisition waits behind the row lock"
    );
    // The acquisition's statement waits in the server for the row.
    let waiting = || async {
        let rows = blocker
            .query(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE '%' || $1 || '%'",
                &[&table],
            )
            .await
            .unwrap();
        rows[0].get::<_, i64>(0) > 0
    };
    assert!(
        support::eventually(Duration::from_secs(5), waiting).await,
        "the cancelled acquisition's statement is not waiting in the server"
    );
    // Time for a clean-up that does not wait for the statement to run first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker
        .batch_execute(&format!(
            "DELETE FROM \"{table}\" WHERE name = 'lock:cancel'; COMMIT"
        ))
        .await
        .unwrap();
    // The statement lands now; its clean-up follows it.
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            !waiting().await && fixture.holder("lock:cancel").await.is_none()
        })
        .await,
        "a cancelled acquisition left a lock nobody holds: {:?}",
        fixture.holder("lock:cancel").await
    );
    let free = client
        .lock("cancel")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("the key is free");
    free.release().await.unwrap();
}

/// `distlock check` (`LockClient::check`) finds a transaction pooler the URL does not declare:
/// through PgBouncer in transaction mode without `pooler=transaction` its `pooler` line fails,
/// naming the parameter; with it, and straight to the server, the line passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_an_undeclared_transaction_pooler() {
    let server = PostgresServer::start();
    let bouncer = PgBouncer::start(&server);
    let table = format!("locks_check_{}", std::process::id());
    let pooler = |url: String| async move {
        let client = LockClient::connect(&url).await.expect("connects");
        let checkup = client.check().await;
        let line = checkup
            .findings
            .iter()
            .find(|f| f.check == "pooler")
            .unwrap_or_else(|| panic!("no pooler line: {checkup:#?}"))
            .clone();
        (line, checkup)
    };
    let (line, checkup) = pooler(format!("{}?table={table}", bouncer.url())).await;
    assert!(!line.passed, "{checkup:#?}");
    assert!(!checkup.passed());
    assert!(line.found.contains("transaction pooler"), "{line:?}");
    assert!(
        line.fix.as_deref().unwrap().contains("pooler=transaction"),
        "{line:?}"
    );
    // The rest passes, but for the lock itself where its prepared statements went missing on
    // the server connection the pooler lent (the check's own transactions move them about):
    // then its fix is the same parameter.
    for finding in &checkup.findings {
        match finding.check {
            "pooler" => {}
            "lock" if !finding.passed => assert!(
                finding
                    .fix
                    .as_deref()
                    .unwrap()
                    .contains("pooler=transaction"),
                "{finding:?}"
            ),
            _ => assert!(finding.passed, "{finding:?}"),
        }
    }
    let (line, checkup) = pooler(format!(
        "{}?table={table}&pooler=transaction",
        bouncer.url()
    ))
    .await;
    assert!(line.passed && checkup.passed(), "{checkup:#?}");
    let (line, checkup) = pooler(format!("{}?table={table}", server.url())).await;
    assert!(line.passed && checkup.passed(), "{checkup:#?}");
    assert!(line.found.contains("no transaction pooler"), "{line:?}");
    let clock = checkup
        .findings
        .iter()
        .find(|f| f.check == "clock")
        .unwrap();
    assert!(
        clock.passed && clock.found.contains("ms from this host's"),
        "{clock:?}"
    );
}

//! `mysql://…?mode=named` (MySQL's and MariaDB's named locks, `GET_LOCK`) beyond the
//! conformance and fault suites (`conformance::named`, `faults::scenarios::named`), on real
//! MariaDB servers the tests start:
//!
//! - the lock is the named lock `admin::mysql_lock_name(database, name)`: another program's
//!   `GET_LOCK` of that name excludes distlock and the reverse, and a waiter is woken by the
//!   server when the other program lets go;
//! - a key that cannot be a lock name as it is is hashed, and still listed by its key;
//! - named locks belong to the URL's database: two databases never exclude each other;
//! - an unrenewed hold is ended by the client at its lease end, and one released before
//!   ends nothing then (its connection may hold another lock by then);
//! - after a server restart the client takes locks again (its idle connections died);
//! - one statement takes an unfenced lock and one gives it back (the server's `Com_select`),
//!   and no table is written;
//! - the mode's refusals: `mode=advisory` on MySQL, `mode=named` on PostgreSQL, read locks.
#![cfg(feature = "mysql")]

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use mysql_async::prelude::Queryable;
use support::fixture::{Fixture, NamedFixture};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Another program's `GET_LOCK` of `mysql_lock_name(database, "lock:<key>")` excludes
/// distlock, a distlock waiter is granted by the server as soon as that program lets go, and
/// while distlock holds the lock the other program cannot take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_programs_get_lock_and_distlock_exclude_each_other() {
    let fixture = NamedFixture::new();
    let client = fixture.client().await;
    let name = fixture.lock_name("lock:interop");
    let mut other = fixture.server.conn().await;
    let taken: Option<i64> = other
        .exec_first("SELECT GET_LOCK(?, 0)", (name.as_str(),))
        .await
        .unwrap();
    assert_eq!(taken, Some(1));
    assert!(
        client
            .lock("interop")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            let guard = client.lock("interop").wait(ms(10_000)).acquire().await;
            (guard, Instant::now())
        })
    };
    tokio::time::sleep(ms(300)).await;
    let released_at = Instant::now();
    let _: Option<i64> = other
        .exec_first("SELECT RELEASE_LOCK(?)", (name.as_str(),))
        .await
        .unwrap();
    let (guard, granted_at) = waiter.await.unwrap();
    let guard = guard.expect("the waiter is granted");
    let after = granted_at.duration_since(released_at);
    // The server grants the waiting `GET_LOCK` at the release: no polling pause.
    assert!(after < ms(1_000), "granted {after:?} after the release");
    assert_eq!(
        fixture.holder("lock:interop").await.as_deref(),
        Some(distlock::__private::testing::owner_token(&guard))
    );
    let blocked: Option<i64> = other
        .exec_first("SELECT GET_LOCK(?, 0)", (name.as_str(),))
        .await
        .unwrap();
    assert_eq!(
        blocked,
        Some(0),
        "the other program cannot take a held lock"
    );
    guard.release().await.unwrap();
    let free: Option<Option<u32>> = other
        .exec_first("SELECT IS_USED_LOCK(?)", (name.as_str(),))
        .await
        .unwrap();
    assert_eq!(free, Some(None), "released on the server");
}

/// A key with upper case (or longer than the name limit) is hashed into the lock name; the
/// key is recorded in `<table>_names`, so `list` and `inspect` show it by its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_key_is_listed_by_its_key() {
    let fixture = NamedFixture::new();
    let client = fixture.client().await;
    let long = format!("Report:{}", "x".repeat(80));
    let _one = client.lock("Order:ABC").acquire().await.unwrap();
    let _two = client.lock(long.as_str()).acquire().await.unwrap();
    for key in ["Order:ABC", long.as_str()] {
        let lock = fixture.lock_name(&format!("lock:{key}"));
        assert!(lock.starts_with("distlock#") && lock.len() == 25, "{lock}");
        let used: Vec<Option<u32>> = fixture.rows("SELECT IS_USED_LOCK(?)", (lock,)).await;
        assert!(used[0].is_some(), "the hashed name of {key} is held");
    }
    let recorded: Vec<Vec<u8>> = fixture
        .rows(
            &format!(
                "SELECT name FROM {}.distlock_locks_names ORDER BY name",
                fixture.database()
            ),
            (),
        )
        .await;
    assert_eq!(
        recorded,
        [
            b"lock:Order:ABC".to_vec(),
            format!("lock:{long}").into_bytes()
        ]
    );
    let listed = client.list("*", 10).await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["Order:ABC", long.as_str()]);
    let info = client.inspect("Order:ABC").await.unwrap().expect("held");
    assert_eq!(
        info.token.as_deref(),
        Some(distlock::__private::testing::owner_token(&_one))
    );
}

/// A server's named locks are server-wide; distlock's belong to the URL's database, as its
/// lock table does: the same key in two databases is two locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_do_not_share_named_locks() {
    let (a, b) = (NamedFixture::new(), NamedFixture::new());
    let one = a
        .client()
        .await
        .lock("shared-name")
        .acquire()
        .await
        .unwrap();
    let two = b
        .client()
        .await
        .lock("shared-name")
        .try_acquire()
        .await
        .unwrap()
        .expect("another database's lock of the same key is free");
    assert_ne!(
        a.lock_name("lock:shared-name"),
        b.lock_name("lock:shared-name")
    );
    assert!(a.holder("lock:shared-name").await.is_some());
    assert!(b.holder("lock:shared-name").await.is_some());
    one.release().await.unwrap();
    two.release().await.unwrap();
}

/// On a server of its own: 200 unfenced lock + release pairs are 400 `SELECT`s (one each
/// way), one `SET` of the session's `wait_timeout`, and no write to any table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_statement_takes_a_lock_and_one_gives_it_back() {
    let fixture = NamedFixture::own();
    let client = fixture.client().await;
    // The first pair opens its connection and sets its `wait_timeout`.
    client
        .lock("count:warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let counters = async || {
        let rows: Vec<(String, u64)> = fixture
            .rows(
                "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME IN ('COM_SELECT', 'COM_SET_OPTION', 'COM_INSERT', \
                 'COM_UPDATE', 'COM_DELETE') ORDER BY VARIABLE_NAME",
                (),
            )
            .await;
        rows.into_iter().map(|(_, n)| n).collect::<Vec<u64>>()
    };
    // Each reading counts itself: the statements of the fixture's own after the first.
    let before = counters().await;
    let own_before = fixture.statements();
    for i in 0..200 {
        let guard = client.lock(format!("count:{i}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let after = counters().await;
    let own = fixture.statements() - own_before;
    // COM_DELETE, COM_INSERT, COM_SELECT, COM_SET_OPTION, COM_UPDATE.
    let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        delta[0] + delta[1] + delta[4],
        0,
        "no table written: {delta:?}"
    );
    assert_eq!(delta[2] - own, 400, "one SELECT each way: {delta:?}");
    assert_eq!(
        delta[3], 0,
        "wait_timeout set once per connection: {delta:?}"
    );
}

/// An unrenewed hold is ended by the client at its lease end, unless it was released before:
/// then its connection may already hold another acquisition's lock, which must stay held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrenewed_hold_released_early_ends_nothing_at_its_lease_end() {
    let fixture = NamedFixture::new();
    let client = fixture.client().await;
    let early = client
        .lock("early")
        .lease(ms(1_000))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    early.release().await.unwrap();
    // The released connection is the idle one this acquisition takes.
    let next = client
        .lock("next")
        .lease(ms(30_000))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(1_500)).await;
    assert_eq!(
        fixture.holder("lock:next").await.as_deref(),
        Some(distlock::__private::testing::owner_token(&next)),
        "the next acquisition's lock is still held on the server"
    );
    assert!(!next.is_lost());
    next.release().await.unwrap();
    // And an unrenewed hold not released is ended on the server at its lease end.
    let kept = client
        .lock("kept")
        .lease(ms(300))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let ended = support::eventually(ms(1_000), || async {
        !fixture.anything_at("lock:kept").await
    })
    .await;
    assert!(ended, "the unrenewed hold is ended at its lease end");
    drop(kept);
}

/// A server restart ends every idle connection the client keeps: the next acquisition that
/// picks one up fails on it, and is retried on a new connection within its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_server_restart_the_client_takes_locks_again() {
    let mut fixture = NamedFixture::own();
    let client = fixture.client().await;
    for i in 0..3 {
        let guard = client.lock(format!("before:{i}")).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let server = fixture.server.own_mut();
    server.kill();
    server.restart();
    let guard = client
        .lock("after")
        .wait(ms(10_000))
        .acquire()
        .await
        .expect("granted on a new connection");
    assert_eq!(
        fixture.holder("lock:after").await.as_deref(),
        Some(distlock::__private::testing::owner_token(&guard))
    );
    guard.release().await.unwrap();
    assert!(!fixture.anything_at("lock:after").await);
}

/// `mode=advisory` on MySQL names `mode=named`; `mode=named` on PostgreSQL names
/// `mode=advisory`; read locks are refused as the backend table says, and nothing is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_modes_refusals_say_what_to_use() {
    let fixture = NamedFixture::new();
    let url = fixture.url().replace("mode=named", "mode=advisory");
    let err = LockClient::connect(&url).await.unwrap_err();
    assert!(
        matches!(&err, LockError::Config(m) if m.contains("mode=named")),
        "{err}"
    );
    let err = LockClient::connect("postgres://u:p@127.0.0.1:1/db?mode=named")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Config(m) if m.contains("mode=advisory")),
        "{err}"
    );
    let client = fixture.client().await;
    let err = client.lock("reader").read().acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::Unsupported { feature: distlock::Feature::ReadLocks, reason, .. } if reason.contains("mode=named")),
        "{err}"
    );
    assert!(!fixture.anything_at("lock:reader").await);
}

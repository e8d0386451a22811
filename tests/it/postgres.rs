//! `postgres://` beyond the conformance and fault suites (`tests/it/conformance.rs`,
//! `tests/it/faults.rs`), on real PostgreSQL servers the tests start. The scenarios are the lock
//! tables' own, written once in `test-support/src/sql.rs` and run on MariaDB too:
//!
//! - what the table holds (holder, expiry by the database's clock, fencing counters that outlive
//!   the rows), and the DDL the guide prints;
//! - renewals of many locks batched into one statement per tick (counted in the server's log);
//! - bad input: a wrong password, a missing database, a table of the wrong shape, a missing
//!   table with `create_table=false`, an unreachable server;
//! - `mode=advisory`: the lock is the server's advisory lock on the name's hash (a program that
//!   locks it by hand is excluded, and excludes), waiters wait inside the server without
//!   polling, a restarted server grants nothing for `max_lease_ms`, and what the mode cannot do
//!   is refused naming the cause.
#![cfg(feature = "postgres")]

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use distlock::LockError;
use support::fixture::PostgresFixture;
use support::postgres::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_names_its_holder_and_expires_by_the_database_clock() {
    support::sql::the_row_names_its_holder_and_expires_by_the_database_clock(PostgresFixture::new()).await;
}

/// The guide prints the DDL; tables made from it work with `create_table=false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_made_from_the_guides_ddl_work_without_create_table() {
    support::sql::tables_made_from_the_guides_ddl_work_without_create_table(
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

/// The lock table is read by its primary key even when the planner believes it empty — as it
/// does once autovacuum has emptied and truncated it, which is when a connection's cached
/// plans are made again. A plan made then scans the whole heap for each release and renewal
/// while the heap fills with dead rows again (issue 53's profile: a third of the server's CPU
/// per lock + release). Counted in the server's statistics: no sequential scan of the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_vacuumed_empty_is_still_read_by_its_index() {
    use std::time::Duration;

    let server = PostgresServer::shared();
    let url = server.url_with_own_table();
    let table = url.rsplit_once("table=").expect("a table").1.to_owned();
    let client = distlock::LockClient::connect(&url).await.unwrap();
    let admin = server.client().await;
    admin
        .batch_execute(&format!("VACUUM \"{table}\""))
        .await
        .unwrap();
    let scans = || async {
        let row = admin
            .query_one(
                "SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) FROM pg_stat_user_tables \
                 WHERE relname = $1",
                &[&table],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    let (seq_before, idx_before) = scans().await;
    // Past the five custom plans: the generic plan, the one a connection keeps.
    let pairs = 20;
    for _ in 0..pairs {
        let guard = client.lock("order:1").acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    assert!(client.inspect("order:1").await.unwrap().is_none());
    // A backend sends its counters when it goes idle, within a second or so.
    let counted = support::eventually(Duration::from_secs(20), || async {
        let (seq, idx) = scans().await;
        seq - seq_before + idx - idx_before >= pairs
    })
    .await;
    let (seq, idx) = scans().await;
    assert!(counted, "the releases were never counted: {seq} / {idx}");
    assert_eq!(
        seq - seq_before,
        0,
        "{} sequential and {} index scans of `{table}` for {pairs} lock + release pairs",
        seq - seq_before,
        idx - idx_before
    );
}

/// The statements `server` (started with `log_statement=all`) has executed so far, in order:
/// the first line of each, from its log.
fn executed(server: &PostgresServer) -> Vec<String> {
    server
        .log()
        .lines()
        .filter(|line| line.contains("LOG:  execute "))
        .map(|line| line.split_once(": ").map_or("", |(_, sql)| sql).to_owned())
        .collect()
}

/// A lone reader (or permit) takes and gives back its share as a writer takes and gives back
/// its lock: one `INSERT`, one `DELETE` (counted in the server's statement log). A reader that
/// joins another's share, and the readers' departures, go through the full statements: both
/// hold the row together, the first to leave leaves the row to the other, the last deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_reader_costs_what_a_writer_does() {
    use std::time::Duration;

    let server = PostgresServer::start_with(&["-c", "log_statement=all"]);
    let url = server.url_with_own_table();
    let statements = || executed(&server);
    let first = distlock::LockClient::connect(&url).await.unwrap();
    // What one lock + release of `request` sends.
    // A request's future (a semaphore's request is a type of its own).
    let sent_by = |acquisition: Pin<
        Box<dyn Future<Output = Result<distlock::LockGuard, LockError>> + Send>,
    >| {
        let before = statements().len();
        async move {
            let guard = acquisition.await.unwrap();
            guard.release().await.unwrap();
            assert!(
                support::eventually(Duration::from_secs(10), || async {
                    statements().len() >= before + 2
                })
                .await
            );
            tokio::time::sleep(Duration::from_millis(300)).await; // anything more is logged
            statements()[before..]
                .iter()
                .map(|sql| sql.trim().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let requests = [
        first.lock("doc").read().into_future(),
        first.semaphore("pool", 2).into_future(),
    ];
    for request in requests {
        let sent = sent_by(request).await;
        assert_eq!(sent.len(), 2, "{sent:#?}");
        assert!(sent[0].contains(": INSERT INTO"), "{sent:#?}");
        assert!(sent[1].contains(": DELETE FROM"), "{sent:#?}");
    }
    assert!(first.inspect("doc").await.unwrap().is_none());
    assert!(first.inspect("pool").await.unwrap().is_none());
    // The lone permit of a semaphore of one may have a waiter: the full release wakes it.
    let sent = sent_by(first.semaphore("one", 1).into_future()).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(sent[1].contains(": WITH cur AS"), "{sent:#?}");

    // Two readers of two clients: the second joins the first's share.
    let second = distlock::LockClient::connect(&url).await.unwrap();
    let a = first.lock("doc").read().acquire().await.unwrap();
    let b = second
        .lock("doc")
        .read()
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("a reader joins another");
    let readers = |info: Option<distlock::LockInfo>| info.map_or(0, |info| info.readers.len());
    assert_eq!(readers(first.inspect("doc").await.unwrap()), 2);
    // A writer is held back by them.
    assert!(first.lock("doc").try_acquire().await.unwrap().is_none());
    a.release().await.unwrap();
    assert_eq!(readers(first.inspect("doc").await.unwrap()), 1);
    assert!(first.lock("doc").try_acquire().await.unwrap().is_none());
    b.release().await.unwrap();
    assert!(first.inspect("doc").await.unwrap().is_none());
    let writer = first.lock("doc").try_acquire().await.unwrap();
    assert!(writer.is_some(), "the last reader left the row behind");
}

/// An upgradable read alone on its row is upgraded by one `UPDATE` (with the fence's upsert,
/// `WITH up AS`), not the full statement (`WITH cur AS`), whose many parts cost twice its time
/// (the bench's row 7, the upgrade alone). Beside a reader the one `UPDATE` changes nothing and
/// the full statement marks the row; once the reader leaves, the upgrade holds the key as its
/// writer with a new fence. Counted in the server's statement log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_alone_is_one_update_and_beside_a_reader_the_full_statement() {
    use std::time::Duration;

    let server = PostgresServer::start_with(&["-c", "log_statement=all"]);
    let url = server.url_with_own_table();
    let statements = || executed(&server);
    let first = distlock::LockClient::connect(&url).await.unwrap();
    let second = distlock::LockClient::connect(&url).await.unwrap();
    let earlier = first.lock("row").fencing(true).acquire().await.unwrap();
    let earlier_fence = earlier.fencing_token().unwrap();
    earlier.release().await.unwrap();

    let upgradable = || first.lock("row").upgradable().fencing(true).acquire();
    let mut up = upgradable().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // the acquisition's, logged
    let before = statements().len();
    up.upgrade().await.unwrap();
    assert!(
        support::eventually(Duration::from_secs(10), || async {
            statements().len() > before
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // anything more is logged
    let sent = statements()[before..].to_vec();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert!(sent[0].contains("WITH up AS"), "{sent:#?}");
    let fence = up.fencing_token().unwrap();
    assert!(fence > earlier_fence, "{fence} ≤ {earlier_fence}");
    let info = second.inspect("row").await.unwrap().expect("held");
    assert!(info.readers.is_empty(), "{info:?}");
    assert_eq!(info.fencing_token, Some(fence));
    up.release().await.unwrap();

    // Beside a reader: the one UPDATE changes nothing, the full statement marks the row.
    let mut up = upgradable().await.unwrap();
    let reader = second.lock("row").read().acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = statements().len();
    let upgrading = tokio::spawn(async move {
        let upgraded = up.upgrade().await;
        (up, upgraded)
    });
    assert!(
        support::eventually(Duration::from_secs(10), || async {
            statements().len() >= before + 2
        })
        .await
    );
    let sent = statements()[before..].to_vec();
    assert!(sent[0].contains("WITH up AS"), "{sent:#?}");
    assert!(sent[1].contains("WITH cur AS"), "{sent:#?}");
    assert!(!upgrading.is_finished(), "upgraded beside a reader");
    reader.release().await.unwrap();
    let (up, upgraded) = tokio::time::timeout(Duration::from_secs(5), upgrading)
        .await
        .expect("upgraded once the reader left")
        .unwrap();
    upgraded.unwrap();
    assert!(up.fencing_token().unwrap() > fence);
    let info = second.inspect("row").await.unwrap().expect("held");
    assert!(info.readers.is_empty(), "{info:?}");
    up.release().await.unwrap();
    assert!(second.inspect("row").await.unwrap().is_none());
}

// ---------------------------------------------------------------------------------------------
// `mode=advisory`: PostgreSQL's advisory locks.

mod advisory {
    use std::time::{Duration, Instant};

    use distlock::{LockClient, LockError};

    use support::fixture::{AdvisoryFixture, Fixture};
    use support::postgres::PostgresServer;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A burst of more locks at once than the 16 idle connections always kept, then another:
    /// the second burst takes every lock on a connection the first one opened (the server's
    /// backend pids are the same), where keeping 16 would open one per lock past them again —
    /// a process started, authenticated and torn down per lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_burst_of_locks_reuses_the_connections_of_the_first() {
        let fixture = AdvisoryFixture::new();
        let client = fixture.client().await;
        let sql = fixture.sql().await;
        let backends = || async {
            let rows = sql
                .query(
                    "SELECT pid FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .unwrap();
            rows.iter()
                .map(|row| row.get::<_, i32>(0))
                .collect::<std::collections::BTreeSet<_>>()
        };
        let burst = |round: usize| {
            let client = client.clone();
            async move {
                let guards = futures_util::future::try_join_all(
                    (0..40).map(|i| client.lock(format!("burst-{round}-{i}")).acquire()),
                )
                .await
                .unwrap();
                for guard in guards {
                    guard.release().await.unwrap();
                }
            }
        };
        burst(0).await;
        let first = backends().await;
        assert!(
            first.len() >= 40,
            "the first burst's connections are kept: {first:?}"
        );
        burst(1).await;
        let second = backends().await;
        let opened: Vec<_> = second.difference(&first).collect();
        assert!(
            opened.is_empty(),
            "the second burst opened {} connections ({opened:?})",
            opened.len()
        );
    }

    /// The lock is `pg_advisory_lock(advisory_key(name))`: a program that locks the same key by
    /// hand excludes distlock, and distlock excludes it; the holder's session is idle with
    /// `idle_session_timeout` = the lease.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_lock_is_the_servers_advisory_lock_on_the_names_hash() {
        let fixture = AdvisoryFixture::new();
        let client = fixture.client().await;
        let key = distlock::admin::advisory_key("lock:interop");
        let other = fixture.sql().await;
        let taken: bool = other
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .unwrap()
            .get(0);
        assert!(taken);
        assert!(
            client
                .lock("interop")
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "a lock taken by hand on the same key excludes distlock"
        );
        let _: bool = other
            .query_one("SELECT pg_advisory_unlock($1)", &[&key])
            .await
            .unwrap()
            .get(0);
        let guard = client
            .lock("interop")
            .lease(ms(4_000))
            .acquire()
            .await
            .unwrap();
        let again: bool = other
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .unwrap()
            .get(0);
        assert!(
            !again,
            "distlock's lock excludes a program that locks by hand"
        );
        let (_, lease, token, _) = fixture.held("lock:interop").await.expect("held");
        assert_eq!(lease, ms(4_000));
        assert_eq!(token, distlock::__private::testing::owner_token(&guard));
        guard.release().await.unwrap();
        assert_eq!(fixture.held("lock:interop").await, None);
    }

    /// A reader holds `pg_advisory_lock_shared(advisory_key(name))`: a program that takes the
    /// key's shared lock by hand reads beside it, one that takes the exclusive lock cannot; a
    /// writer by hand keeps distlock's readers out. A reader's fencing token is the fencing
    /// sequence's last value, which the next writer's exceeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_holds_the_keys_shared_advisory_lock() {
        let fixture = AdvisoryFixture::new();
        let client = fixture.builder().fencing(true).build().await.unwrap();
        let key = distlock::admin::advisory_key("lock:shelf");
        let other = fixture.sql().await;
        // One advisory-lock function on the key, by hand, on the fixture's connection.
        let by_hand = |function: &'static str| {
            let other = other.clone();
            async move {
                let taken: bool = other
                    .query_one(&format!("SELECT {function}($1)"), &[&key])
                    .await
                    .unwrap()
                    .get(0);
                taken
            }
        };
        let written = client.lock("shelf").acquire().await.unwrap();
        let written_token = written.fencing_token().expect("a writer's token");
        written.release().await.unwrap();
        let reader = client
            .lock("shelf")
            .read()
            .lease(ms(4_000))
            .acquire()
            .await
            .unwrap();
        let read_token = reader.fencing_token().expect("a reader's token");
        assert!(
            read_token >= written_token,
            "{read_token} < {written_token}"
        );
        let last: i64 = other
            .query_one("SELECT last_value FROM distlock_locks_advisory_fences", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(read_token, last as u64, "the sequence's last value");
        assert!(
            !by_hand("pg_try_advisory_lock").await,
            "a writer by hand got in beside distlock's reader"
        );
        assert!(
            by_hand("pg_try_advisory_lock_shared").await,
            "a reader by hand shares the key with distlock's"
        );
        let shown = client.inspect("shelf").await.unwrap().expect("read-locked");
        assert_eq!(shown.mode, distlock::LockMode::Read);
        assert_eq!(
            shown
                .readers
                .iter()
                .map(|r| r.token.as_str())
                .collect::<Vec<_>>(),
            [distlock::__private::testing::owner_token(&reader)],
            "the reader by hand wrote no comment: only distlock's reader is shown"
        );
        reader.release().await.unwrap();
        assert!(fixture.readers("lock:shelf").await.is_empty());
        // The share taken by hand is still there: it keeps distlock's writer out; then a
        // writer by hand keeps distlock's reader out.
        assert!(client.lock("shelf").try_acquire().await.unwrap().is_none());
        by_hand("pg_advisory_unlock_shared").await;
        assert!(by_hand("pg_try_advisory_lock").await, "a writer by hand");
        assert!(
            client
                .lock("shelf")
                .read()
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "a reader got in beside a writer by hand"
        );
        by_hand("pg_advisory_unlock").await;
        let next = client.lock("shelf").acquire().await.unwrap();
        assert!(next.fencing_token().unwrap() > read_token);
        next.release().await.unwrap();
        assert!(!fixture.anything_at("lock:shelf").await);
    }

    /// An upgradable read is the key's shared advisory lock beside the exclusive mark `(hi,
    /// lo)` (the two-int4 key of the same halves, `objsubid` 2). Its upgrade waits in the
    /// server on the share's session, past several leases (renewals answered between its
    /// rounds), ahead of a writer queued before it and with new readers kept out; woken by the
    /// last reader's release, it holds the write lock, and its release lets go of everything
    /// the session held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upgrade_waits_in_the_server_past_its_lease_ahead_of_a_queued_writer() {
        let fixture = AdvisoryFixture::new();
        let client = fixture.builder().fencing(true).build().await.unwrap();
        let other_client = fixture.client().await;
        let key = distlock::admin::advisory_key("lock:climb");
        let sql = fixture.sql().await;
        // `pid`'s advisory locks on the key's halves: (objsubid, mode, granted).
        let locks_of = |pid: i32| {
            let sql = sql.clone();
            async move {
                let rows = sql
                    .query(
                        "SELECT objsubid::int4, mode, granted FROM pg_locks \
                         WHERE locktype = 'advisory' AND pid = $1 \
                         AND classid = $2::int8::oid AND objid = $3::int8::oid \
                         ORDER BY objsubid, mode",
                        &[
                            &pid,
                            &((key as u64 >> 32) as i64),
                            &((key as u64 & 0xffff_ffff) as i64),
                        ],
                    )
                    .await
                    .unwrap();
                rows.iter()
                    .map(|r| {
                        (
                            r.get::<_, i32>(0),
                            r.get::<_, String>(1),
                            r.get::<_, bool>(2),
                        )
                    })
                    .collect::<Vec<_>>()
            }
        };
        let mut up = client
            .lock("climb")
            .upgradable()
            .lease(ms(300))
            .wait(ms(10_000))
            .acquire()
            .await
            .unwrap();
        let (pid, ..) = fixture
            .holds("lock:climb", "ShareLock")
            .await
            .into_iter()
            .next()
            .expect("the upgradable share");
        let mark_and_share = vec![
            (1, "ShareLock".to_owned(), true),
            (2, "ExclusiveLock".to_owned(), true),
        ];
        assert_eq!(locks_of(pid).await, mark_and_share);
        // A reader by hand, and a writer queued behind it before the upgrade.
        let by_hand = fixture.sql().await;
        by_hand
            .execute("SELECT pg_advisory_lock_shared($1)", &[&key])
            .await
            .unwrap();
        let writer = tokio::spawn({
            let other_client = other_client.clone();
            async move {
                let guard = other_client.lock("climb").wait(ms(20_000)).acquire().await;
                (guard, Instant::now())
            }
        });
        tokio::time::sleep(ms(300)).await;
        let upgrading = tokio::spawn(async move {
            let upgraded = up.upgrade().await;
            (up, upgraded, Instant::now())
        });
        // Four leases: the upgrade waits, its share renewed between its rounds.
        tokio::time::sleep(ms(1_200)).await;
        assert!(!upgrading.is_finished(), "upgraded beside a reader");
        let mut waiting = mark_and_share.clone();
        waiting.insert(0, (1, "ExclusiveLock".to_owned(), false));
        let now = locks_of(pid).await;
        // Between two rounds the request is briefly out of the queue.
        assert!(now == waiting || now == mark_and_share, "{now:?}");
        assert!(
            other_client
                .lock("climb")
                .read()
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "a reader joined while the upgrade waited"
        );
        let released_at = Instant::now();
        by_hand
            .execute("SELECT pg_advisory_unlock_shared($1)", &[&key])
            .await
            .unwrap();
        let (up, upgraded, upgraded_at) = tokio::time::timeout(ms(5_000), upgrading)
            .await
            .expect("upgraded once the reader left")
            .unwrap();
        upgraded.expect("upgraded, the share kept through four leases");
        assert!(
            upgraded_at - released_at < ms(1_000),
            "upgraded {:?} after the reader left",
            upgraded_at - released_at
        );
        assert_eq!(
            locks_of(pid).await,
            [
                (1, "ExclusiveLock".to_owned(), true),
                (1, "ShareLock".to_owned(), true),
                (2, "ExclusiveLock".to_owned(), true),
            ]
        );
        let shown = client.inspect("climb").await.unwrap().expect("held");
        assert_eq!(shown.mode, distlock::LockMode::Write);
        assert!(shown.readers.is_empty(), "{:?}", shown.readers);
        tokio::time::sleep(ms(600)).await;
        assert!(!up.is_lost(), "the upgraded lock was not renewed");
        assert!(!writer.is_finished(), "the queued writer got in");
        up.release().await.unwrap();
        assert_eq!(locks_of(pid).await, [], "the session still holds a lock");
        let (granted, _) = tokio::time::timeout(ms(5_000), writer)
            .await
            .expect("the writer is granted after the release")
            .unwrap();
        granted.unwrap().release().await.unwrap();
        assert!(!fixture.anything_at("lock:climb").await);
    }

    /// The server's start (the restart guard) is checked by the first try on a connection
    /// only — a connection lives on one server incarnation: five locks taken one after another
    /// on the one connection kept send it once, not five times (the server's statement log).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_checks_the_servers_start_once() {
        let fixture = AdvisoryFixture::own();
        let client = fixture.client().await;
        for _ in 0..5 {
            let guard = client.lock("again").acquire().await.unwrap();
            guard.release().await.unwrap();
        }
        let tries = || {
            let log = fixture.server.log();
            let tries: Vec<String> = log
                .lines()
                .filter(|line| line.contains("try_advisory_lock("))
                .map(str::to_owned)
                .collect();
            tries
        };
        assert!(
            support::eventually(Duration::from_secs(10), || async { tries().len() >= 5 }).await,
            "{:#?}",
            tries()
        );
        let tries = tries();
        let checks = tries
            .iter()
            .filter(|line| line.contains("pg_postmaster_start_time"))
            .count();
        assert_eq!((tries.len(), checks), (5, 1), "{tries:#?}");
    }

    /// A waiter waits inside the server: after its try and its one blocking request it sends
    /// nothing until the release, then one statement that dates its grant (counted in the
    /// server's statement log by its owner token).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_waits_in_the_server_without_polling() {
        let fixture = AdvisoryFixture::own();
        let (holder, waiter) = (fixture.client().await, fixture.client().await);
        let guard = holder
            .lock("queue")
            .lease(ms(3_000))
            .acquire()
            .await
            .unwrap();
        let waiting = tokio::spawn(async move {
            let guard = waiter
                .lock("queue")
                .lease(ms(3_000))
                .wait(ms(20_000))
                .acquire()
                .await;
            (guard, Instant::now())
        });
        tokio::time::sleep(ms(2_000)).await;
        let log = fixture.server.log();
        let mine = distlock::__private::testing::owner_token(&guard).to_owned();
        let theirs: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("/* distlock ") && !line.contains(&mine))
            .collect();
        assert_eq!(
            theirs.len(),
            2,
            "the waiter's try and its blocking request, nothing in 2 s of waiting: {theirs:#?}"
        );
        assert!(theirs[1].contains("pg_advisory_lock("), "{theirs:#?}");
        let released_at = Instant::now();
        guard.release().await.unwrap();
        let (granted, at) = waiting.await.unwrap();
        let granted = granted.unwrap();
        assert!(
            at - released_at < ms(1_000),
            "granted {:?} after the release",
            at - released_at
        );
        let token = distlock::__private::testing::owner_token(&granted).to_owned();
        assert_eq!(fixture.holder("lock:queue").await, Some(token));
        granted.release().await.unwrap();
    }

    /// A restarted server whose earlier run granted locks grants none until it has been up
    /// `max_lease_ms` (a paused holder of the earlier run may still count itself a holder);
    /// the incarnation is on record in `<table>_advisory_starts`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_server_grants_nothing_for_max_lease() {
        let mut server = PostgresServer::start();
        let url = format!("{}?mode=advisory&max_lease_ms=3000", server.url());
        let client = LockClient::builder(url.as_str())
            .default_lease(ms(3_000))
            .build()
            .await
            .unwrap();
        // A fresh server grants at once.
        let guard = client.lock("guarded").try_acquire().await.unwrap();
        guard
            .expect("a fresh server grants at once")
            .release()
            .await
            .unwrap();
        server.kill();
        server.restart();
        let restarted = Instant::now();
        let refused = client.lock("guarded").try_acquire().await;
        assert!(
            matches!(refused, Ok(None)),
            "granted {:?} after the restart: {refused:?}",
            restarted.elapsed()
        );
        let guard = client
            .lock("guarded")
            .wait(ms(10_000))
            .acquire()
            .await
            .unwrap();
        let after = restarted.elapsed();
        assert!(after >= ms(2_500), "granted {after:?} after the restart");
        assert!(
            after < ms(6_000),
            "granted only {after:?} after the restart"
        );
        guard.release().await.unwrap();
        let (sql, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let runs: i64 = sql
            .query_one("SELECT count(*) FROM distlock_locks_advisory_starts", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            runs, 1,
            "the runs before this one are forgotten once it passed the guard"
        );
    }

    /// What the mode cannot do fails before anything is taken, naming the key and the cause:
    /// a lease over `max_lease_ms` (a reader's too), semaphores, `min_hold`; and bad URL
    /// options.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_it_cannot_do_is_refused_naming_the_cause() {
        let fixture = AdvisoryFixture::new();
        let url = format!("{}?mode=advisory&max_lease_ms=5000", fixture.server.url());
        let client = LockClient::builder(url.as_str())
            .default_lease(ms(5_000))
            .build()
            .await
            .unwrap();
        let expect_config =
            |result: Result<distlock::LockGuard, LockError>, says: &[&str]| match result {
                Err(LockError::Config(message)) => {
                    for word in says {
                        assert!(message.contains(word), "{message} (wanted {word:?})");
                    }
                }
                other => panic!("expected a Config error, got {other:?}"),
            };
        expect_config(
            client.lock("long").lease(ms(6_000)).acquire().await,
            &["`long`", "max_lease_ms", "6s"],
        );
        expect_config(
            client
                .lock("shared")
                .read()
                .lease(ms(6_000))
                .acquire()
                .await,
            &["`shared`", "max_lease_ms", "6s"],
        );
        let expect_unsupported = |result: Result<distlock::LockGuard, LockError>,
                                  feature,
                                  says: &str| match result {
            Err(error @ LockError::Unsupported { .. }) => {
                let message = error.to_string();
                assert!(
                    matches!(&error, LockError::Unsupported { feature: f, .. } if *f == feature),
                    "{message}"
                );
                assert!(message.contains(says), "{message} (wanted {says:?})");
            }
            other => panic!("expected {feature} refused as Unsupported, got {other:?}"),
        };
        expect_unsupported(
            client.semaphore("permits", 2).acquire().await,
            distlock::Feature::Semaphores,
            "`permits`",
        );
        expect_unsupported(
            client.lock("held").min_hold(ms(1_000)).acquire().await,
            distlock::Feature::MinHold,
            "advisory",
        );
        for name in ["long", "shared", "permits", "held"] {
            assert_eq!(fixture.held(&format!("lock:{name}")).await, None, "{name}");
        }
        for (query, says) in [
            ("mode=rows", "`mode=rows`"),
            ("max_lease_ms=5000", "applies to `mode=advisory` only"),
            ("mode=advisory&max_lease_ms=0", "`max_lease_ms=0`"),
        ] {
            let url = format!("{}?{query}", fixture.server.url());
            match LockClient::connect(&url).await {
                Err(LockError::Config(message)) => assert!(message.contains(says), "{message}"),
                other => panic!("{query}: {other:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Nothing left behind by the tests themselves.

/// A test server killed the way every test server ends (SIGKILL) leaves nothing outside its
/// scratch directory: its dynamic shared memory lives in the data directory
/// (`dynamic_shared_memory_type=mmap`), not in `/dev/shm` where a killed server's segments stay
/// until the machine reboots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_test_server_leaves_no_shared_memory_behind() {
    let mut server = PostgresServer::start();
    let client = server.client().await;
    client.simple_query("SELECT 1").await.expect("a query");
    let segments: Vec<String> = std::fs::read_dir(server.dir().join("data/pg_dynshmem"))
        .expect("pg_dynshmem")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .collect();
    assert!(
        segments.iter().any(|name| name.starts_with("mmap.")),
        "the server's dynamic shared memory is not in its data directory: {segments:?}"
    );
    let dir = server.dir().to_path_buf();
    server.kill();
    drop(server);
    assert!(!dir.exists(), "{} is still there", dir.display());
    for name in segments {
        let handle = name.trim_start_matches("mmap.");
        let in_shm = std::path::Path::new("/dev/shm").join(format!("PostgreSQL.{handle}"));
        assert!(!in_shm.exists(), "{} was left behind", in_shm.display());
    }
}

/// The scratch directory of a test process that was killed (a time limit, a hung run stopped by
/// hand) is removed by the next test process's harness; a live process's is left alone.
#[test]
fn a_killed_test_processs_scratch_is_swept_by_the_next() {
    let mut gone = std::process::Command::new("true")
        .spawn()
        .expect("`true` runs");
    let dead = gone.id();
    gone.wait().expect("`true` ends");
    let tmp = std::env::temp_dir();
    let stale = tmp.join(format!("distlock-pg-{dead}-7"));
    let live = tmp.join(format!("distlock-pg-{}-999999", std::process::id()));
    for dir in [&stale, &live] {
        std::fs::create_dir_all(dir.join("data")).expect("a scratch directory");
    }
    support::sweep_stale_scratch();
    let (stale_left, live_left) = (stale.exists(), live.exists());
    let _ = std::fs::remove_dir_all(&live);
    assert!(!stale_left, "{} was not swept", stale.display());
    assert!(live_left, "{} (this process's) was removed", live.display());
}

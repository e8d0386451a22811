//! The etcd backend against real members, what only etcd has: the queue on the server (one
//! watch per waiter, served in arrival order), leases shared by lock length, cancelled waiters,
//! and bad input. Its faults (a killed, paused or partitioned holder, a restart, a cluster
//! losing its leader and then its majority, …) are in the fault suite, `tests/faults.rs`.

#![cfg(feature = "etcd")]

mod support;

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use support::etcd::{EtcdMember, http_call};
use support::eventually;
use support::fixture::{EtcdFixture, Fixture};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How many watchers the member serves (its `etcd_debugging_mvcc_watcher_total` gauge).
fn watchers(port: u16) -> u64 {
    let metrics = http_call(port, "GET", "/metrics", "").expect("/metrics answers");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .expect("the watcher gauge") as u64
}

/// Six clients (to etcd: six processes) queue for a held lock one after another. Each waiter
/// watches only the key before its own — the member serves one watcher per waiter plus the
/// holder's watch on its own key, not one per waiter per key — and the lock goes to them in
/// the order they arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order_and_each_watches_one_key() {
    const WAITERS: usize = 6;
    // A member of this test's own: its watcher count is this test's alone.
    let member = EtcdMember::start();
    let url = member.url("fair");
    let queue = format!(
        "fair/{}",
        distlock::__private::testing::etcd_queue("lock:fair")
    );
    let etcd = distlock::__private::testing::EtcdInspector::new(&format!(
        "127.0.0.1:{}",
        member.client_port
    ));
    let holder = LockClient::connect(&url).await.unwrap();
    let guard = holder
        .lock("fair")
        .lease(ms(5_000))
        .acquire()
        .await
        .unwrap();
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let client = LockClient::connect(&url).await.unwrap();
        let order = order_tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = client
                .lock("fair")
                .lease(ms(5_000))
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            order.send(i).unwrap();
            tokio::time::sleep(ms(20)).await;
            guard.release().await.unwrap();
        }));
        // Wait until this waiter's key is in the queue before the next one arrives.
        assert!(
            eventually(Duration::from_secs(5), || async {
                etcd.keys(&queue).await.len() == i + 2
            })
            .await,
            "waiter {i} did not join the queue"
        );
    }
    let port = member.client_port;
    let expected = WAITERS as u64 + 1;
    assert!(
        eventually(Duration::from_secs(5), || async {
            watchers(port) == expected
        })
        .await,
        "{} watchers for {WAITERS} waiters and one holder",
        watchers(port)
    );
    guard.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..WAITERS {
        order.push(
            tokio::time::timeout(Duration::from_secs(20), order_rx.recv())
                .await
                .expect("every waiter gets the lock")
                .unwrap(),
        );
    }
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "served out of order"
    );
    for task in tasks {
        task.await.unwrap();
    }
    assert!(etcd.keys(&queue).await.is_empty());
    assert!(
        eventually(Duration::from_secs(5), || async { watchers(port) == 0 }).await,
        "{} watchers left after every lock was released",
        watchers(port)
    );
}

/// A waiter cancelled mid-wait deletes its key; the waiter behind it is not stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_queue_and_the_next_is_not_stuck() {
    let fixture = EtcdFixture::new();
    let queue = fixture.queue("lock:cancel");
    let in_line = || async { fixture.etcd().keys(&queue).await.len() };
    let holder = fixture.client().await;
    let guard = holder.lock("cancel").acquire().await.unwrap();
    let second = fixture.client().await;
    let cancelled = tokio::spawn(async move {
        second
            .lock("cancel")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
    });
    assert!(eventually(Duration::from_secs(5), || async { in_line().await == 2 }).await);
    let third = fixture.client().await;
    let next = tokio::spawn(async move {
        let guard = third
            .lock("cancel")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    assert!(eventually(Duration::from_secs(5), || async { in_line().await == 3 }).await);
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(5), || async { in_line().await == 2 }).await,
        "the cancelled waiter's key is still queued: {:?}",
        fixture.etcd().keys(&queue).await
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (granted_at, guard) = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the waiter behind the cancelled one is not stuck")
        .unwrap();
    assert!(granted_at - released_at < ms(1_000));
    guard.release().await.unwrap();
    assert_eq!(in_line().await, 0);
}

/// Locks share an etcd lease by TTL (whole seconds, rounded up): a 300 ms and a 1 s lock ride
/// one lease, a 5 s lock another; so one keepalive renews any number of locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_share_a_lease_per_ttl() {
    let fixture = EtcdFixture::new();
    let lease_of = |name: &'static str| {
        let fixture = &fixture;
        async move { fixture.holder_key(name).await.unwrap().lease }
    };
    let client = fixture.client().await;
    let a = client.lock("a").lease(ms(300)).acquire().await.unwrap();
    let b = client.lock("b").lease(ms(1_000)).acquire().await.unwrap();
    let c = client.lock("c").lease(ms(5_000)).acquire().await.unwrap();
    assert_ne!(lease_of("lock:a").await, 0);
    assert_eq!(lease_of("lock:a").await, lease_of("lock:b").await);
    assert_ne!(lease_of("lock:a").await, lease_of("lock:c").await);
    // Held for several TTLs on keepalives alone.
    tokio::time::sleep(ms(2_500)).await;
    assert!(!a.is_lost() && !b.is_lost() && !c.is_lost());
    for guard in [a, b, c] {
        guard.release().await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_with_an_error_that_names_the_cause() {
    let nobody = format!("etcd://127.0.0.1:{}/x", support::free_port());
    let started = Instant::now();
    let e = LockClient::builder(&nobody)
        .connect_timeout(ms(1_000))
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("etcd") && e.contains(&nobody) && e.contains("reachable"),
        "{e}"
    );
    assert!(started.elapsed() < ms(5_000), "{:?}", started.elapsed());

    let member = EtcdMember::shared();
    for (url, says) in [
        (format!("{}?table=x", member.url("a")), "takes none"),
        ("etcd://127.0.0.1:notaport/a".to_owned(), "not a port"),
        (
            "etcd://root:secret@127.0.0.1:2379".to_owned(),
            "not supported",
        ),
        ("etcd://,127.0.0.1:2379".to_owned(), "a host is missing"),
    ] {
        let err = LockClient::connect(&url).await.unwrap_err();
        assert!(matches!(err, LockError::Config(_)), "{url}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(says), "{url}: {message}");
        assert!(!message.contains("secret"), "password leaked: {message}");
    }
}

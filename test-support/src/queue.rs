//! What the backends that queue waiters on the server (ZooKeeper, etcd) share: the order they
//! serve waiters in, and a cancelled waiter's place. Each backend's test adds what only it can
//! see (who watches what).

use std::future::Future;
use std::time::{Duration, Instant};

use distlock::{LockClient, LockGuard};

use super::eventually;

const LEASE: Duration = Duration::from_secs(5);

/// Clients of `url` (separate clients: to the server, separate processes) queue for `key`,
/// held by `holder`, one after another: each has joined the line (`in_line()` counts the holder
/// and every waiter) before the next arrives. Then `while_queued` runs (the backend's own
/// checks), the holder releases, and the waiters must be served in the order they arrived; the
/// line is empty afterwards.
pub async fn served_in_arrival_order<N: Future<Output = usize>>(
    url: &str,
    key: &'static str,
    holder: LockGuard,
    waiters: usize,
    in_line: impl Fn() -> N,
    while_queued: impl Future<Output = ()>,
) {
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let client = LockClient::connect(url).await.unwrap();
        let order = order_tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = client
                .lock(key)
                .lease(LEASE)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            order.send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        }));
        // Wait until this waiter is in line before the next one arrives.
        assert!(
            eventually(Duration::from_secs(5), || async {
                in_line().await == i + 2
            })
            .await,
            "waiter {i} did not join the line"
        );
    }
    while_queued.await;
    holder.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..waiters {
        order.push(
            tokio::time::timeout(Duration::from_secs(20), order_rx.recv())
                .await
                .expect("every waiter gets the lock")
                .unwrap(),
        );
    }
    assert_eq!(
        order,
        (0..waiters).collect::<Vec<_>>(),
        "served out of order"
    );
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(in_line().await, 0, "the line is empty after every release");
}

/// A waiter cancelled mid-wait leaves the line (`in_line()` counts the holder and every
/// waiter); the waiter behind it is not stuck: it is granted the lock < 1 s after the release.
pub async fn a_cancelled_waiter_leaves_the_line<N: Future<Output = usize>>(
    url: &str,
    key: &'static str,
    in_line: impl Fn() -> N,
) {
    let client = || async { LockClient::connect(url).await.unwrap() };
    let holding = client().await;
    let guard = holding.lock(key).acquire().await.unwrap();
    let second = client().await;
    let cancelled = tokio::spawn(async move {
        second
            .lock(key)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
    });
    assert!(eventually(Duration::from_secs(5), || async { in_line().await == 2 }).await);
    let third = client().await;
    let next = tokio::spawn(async move {
        let guard = third
            .lock(key)
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
        "the cancelled waiter is still in line"
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (granted_at, guard) = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the waiter behind the cancelled one is not stuck")
        .unwrap();
    assert!(granted_at - released_at < Duration::from_millis(1_000));
    guard.release().await.unwrap();
    assert_eq!(in_line().await, 0);
}

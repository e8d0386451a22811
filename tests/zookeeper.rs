//! The ZooKeeper backend against real servers: the queue on the server (one watch per waiter,
//! served in arrival order), sessions as leases (a killed holder, a partitioned holder), an
//! ensemble losing its leader, a minority and a majority, cancelled waiters, empty parents,
//! fencing across a parent's deletion, and bad input.

#![cfg(feature = "zookeeper")]

mod support;

use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use support::fixture::{Fixture, ZookeeperFixture};
use support::history::{self, Helper, now_ns};
use support::proxy::DelayProxy;
use support::zookeeper::{ZkEnsemble, ZkServer, four_letter};
use support::{eventually, unique};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Each lock node under `parent` → how many sessions watch it (ZooKeeper's `wchp`).
fn watchers_under(port: u16, parent: &str) -> Vec<(String, usize)> {
    let reply = four_letter(port, "wchp").expect("wchp answers");
    let mut watched: Vec<(String, usize)> = Vec::new();
    for line in reply.lines() {
        if line.starts_with('/') {
            watched.push((line.to_owned(), 0));
        } else if line.trim().starts_with("0x")
            && let Some(last) = watched.last_mut()
        {
            last.1 += 1;
        }
    }
    watched.retain(|(path, _)| path.starts_with(&format!("{parent}/")));
    watched
}

/// Six clients (six sessions: to ZooKeeper, six processes) queue for a held lock one after
/// another. Each waiter's node watches only its predecessor — no node is watched by more than
/// its owner and its successor, so a release wakes one waiter — and the lock goes to them in
/// the order they arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order_and_each_watches_one_node() {
    const WAITERS: usize = 6;
    let fixture = ZookeeperFixture::new();
    let holder = fixture.client().await;
    let guard = holder
        .lock("fair")
        .lease(ms(5_000))
        .acquire()
        .await
        .unwrap();
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let client = fixture.client().await;
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
        // Wait until this waiter's node is in the queue before the next one arrives.
        assert!(
            eventually(Duration::from_secs(5), || async {
                fixture.queue("lock:fair").await.len() == i + 2
            })
            .await,
            "waiter {i} did not join the queue"
        );
    }
    let parent = fixture.parent("lock:fair");
    let port = fixture.server.client_port;
    assert!(
        eventually(Duration::from_secs(5), || async {
            watchers_under(port, &parent).len() >= WAITERS
        })
        .await,
        "every waiter watches a node: {:?}",
        watchers_under(port, &parent)
    );
    let watched = watchers_under(port, &parent);
    for (path, sessions) in &watched {
        assert!(
            *sessions <= 2,
            "{path} is watched by {sessions} sessions: a herd"
        );
    }
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
    assert!(fixture.queue("lock:fair").await.is_empty());
}

/// A waiter cancelled mid-wait removes its node; the waiter behind it is not stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_queue_and_the_next_is_not_stuck() {
    let fixture = ZookeeperFixture::new();
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
    assert!(
        eventually(Duration::from_secs(5), || async {
            fixture.queue("lock:cancel").await.len() == 2
        })
        .await
    );
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
    assert!(
        eventually(Duration::from_secs(5), || async {
            fixture.queue("lock:cancel").await.len() == 3
        })
        .await
    );
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(5), || async {
            fixture.queue("lock:cancel").await.len() == 2
        })
        .await,
        "the cancelled waiter's node is still queued: {:?}",
        fixture.queue("lock:cancel").await
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (granted_at, guard) = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the waiter behind the cancelled one is not stuck")
        .unwrap();
    assert!(granted_at - released_at < ms(1_000));
    guard.release().await.unwrap();
    assert!(fixture.queue("lock:cancel").await.is_empty());
}

/// An empty lock parent is a container node: the server removes it. The fencing token (the
/// holder node's creation zxid) still rises when the parent is made again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_parents_go_and_fencing_tokens_rise_across_them() {
    let fixture = ZookeeperFixture::new();
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let zk = fixture.zk().await;
    let parent = fixture.parent("lock:parent");
    let mut last = 0;
    for round in 0..3 {
        let guard = client.lock("parent").acquire().await.unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "round {round}: token {token} after {last}");
        last = token;
        guard.release().await.unwrap();
        assert!(
            eventually(Duration::from_secs(10), || async {
                matches!(zk.check_stat(&parent).await, Ok(None))
            })
            .await,
            "round {round}: the empty parent {parent} was not removed"
        );
    }
}

/// With `session_timeout=` in the URL every lock shares one session, whatever its lease;
/// without it each lease has a session of its own (the lease is the session timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_follow_leases_unless_the_url_pins_one() {
    let fixture = ZookeeperFixture::new();
    let owner = |name: &'static str| {
        let fixture = &fixture;
        async move { fixture.holder_node(name).await.unwrap().2.ephemeral_owner }
    };
    let client = fixture.client().await;
    let short = client.lock("a").lease(ms(2_000)).acquire().await.unwrap();
    let long = client.lock("b").lease(ms(20_000)).acquire().await.unwrap();
    assert_ne!(owner("lock:a").await, owner("lock:b").await);
    short.release().await.unwrap();
    long.release().await.unwrap();

    let pinned = LockClient::connect(&format!("{}?session_timeout=3s", fixture.url()))
        .await
        .unwrap();
    let short = pinned.lock("a").lease(ms(2_000)).acquire().await.unwrap();
    let long = pinned.lock("b").lease(ms(20_000)).acquire().await.unwrap();
    assert_eq!(owner("lock:a").await, owner("lock:b").await);
    short.release().await.unwrap();
    long.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Faults.

/// The helper entry point: a holder process. Acquires `LOCK_KEY` with fencing and a lease of
/// `LEASE_MS`, writes `acquired` (`fencing-token now-ns`), then holds until killed.
#[test]
fn zk_holder_process() {
    let Some(dir) = history::helper_dir() else {
        return;
    };
    let var = history::helper_var;
    history::helper_runtime().block_on(async {
        let client = LockClient::builder(var("LOCK_URL"))
            .fencing(true)
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
        let token = guard.fencing_token().unwrap();
        history::write_file(&dir.join("acquired"), &format!("{token} {}", now_ns()));
        std::future::pending::<()>().await;
    });
}

/// `kill -9` of the holder: its session's heartbeats stop, and the server frees the lock when
/// the session times out — not before, and not much later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_is_freed_after_its_session_times_out() {
    let fixture = ZookeeperFixture::new();
    let key = unique("killed");
    let lease = ms(2_000);
    let dir = history::scratch_dir("zk-holder");
    let env = [
        ("LOCK_URL", fixture.url()),
        ("LOCK_KEY", key.clone()),
        ("LEASE_MS", lease.as_millis().to_string()),
    ];
    let mut holder = Helper::spawn("zk_holder_process", &dir, &env);
    holder.owns_dir = true;
    let line = holder.read("acquired", Duration::from_secs(30)).await;
    let first_token: u64 = line.split(' ').next().unwrap().parse().unwrap();
    tokio::time::sleep(ms(500)).await;
    holder.signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let _ = holder.child.wait();
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let guard = client
        .lock(key.as_str())
        .lease(lease)
        .wait(Duration::from_secs(15))
        .acquire()
        .await
        .unwrap();
    let after = killed_at.elapsed();
    // The server last heard from the holder at most a third of the timeout before the kill
    // (its client pings that often), so the session cannot end sooner than this.
    assert!(
        after >= lease * 3 / 5,
        "granted {after:?} after the kill: before the session timed out"
    );
    assert!(
        after < lease + ms(3_000),
        "granted {after:?} after the kill"
    );
    assert!(guard.fencing_token().unwrap() > first_token);
    guard.release().await.unwrap();
    eprintln!("zookeeper: a killed holder's lock granted again {after:?} after the kill");
}

/// A holder cut off by a blackholing proxy is told its lock is lost before another client is
/// granted it: the heartbeat gives the session up before the server can expire it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_is_told_before_anyone_else_is_granted() {
    let fixture = ZookeeperFixture::new();
    let proxy = DelayProxy::start(fixture.server.client_port).await;
    let through_proxy = format!("zk://127.0.0.1:{}{}", proxy.port(), fixture.chroot);
    let holder = LockClient::builder(&through_proxy)
        .fencing(true)
        .build()
        .await
        .unwrap();
    let lease = ms(1_500);
    let guard = holder.lock("cut").lease(lease).acquire().await.unwrap();
    let held_token = guard.fencing_token().unwrap();
    let lost = guard.lost();
    let told = tokio::spawn(async move {
        lost.await;
        now_ns()
    });
    tokio::time::sleep(ms(300)).await;
    let cut_at = Instant::now();
    proxy.set_blackhole(true);
    let other = fixture.builder().fencing(true).build().await.unwrap();
    let next = other
        .lock("cut")
        .lease(lease)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let granted_ns = now_ns();
    let told_ns = tokio::time::timeout(Duration::from_secs(5), told)
        .await
        .expect("the holder is told")
        .unwrap();
    assert!(
        told_ns < granted_ns,
        "told {} ms after the next holder was granted",
        (told_ns - granted_ns) / 1_000_000
    );
    assert!(next.fencing_token().unwrap() > held_token);
    assert!(guard.is_lost());
    assert!(
        guard.release().await.is_err(),
        "a lost lock cannot be released"
    );
    next.release().await.unwrap();
    eprintln!(
        "zookeeper cut: told after {:?}, next holder {} ms later",
        cut_at
            .elapsed()
            .saturating_sub(Duration::from_nanos(now_ns() - told_ns)),
        (granted_ns - told_ns) / 1_000_000
    );
}

/// A three-server ensemble: the leader killed (a held lock stays held, service continues on
/// the remaining majority), then a majority down (acquisitions fail within their `wait` with an
/// error that says what to check; the held lock is reported lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_keeps_locks_through_a_leader_loss_and_refuses_without_a_majority() {
    let mut ensemble = ZkEnsemble::start();
    let url = ensemble.url(&format!("/{}", unique("ensemble")));
    let client = LockClient::builder(&url)
        .fencing(true)
        .connect_timeout(ms(2_000))
        .build()
        .await
        .unwrap();
    let lease = ms(10_000);
    let held = client.lock("kept").lease(lease).acquire().await.unwrap();
    let token = held.fencing_token().unwrap();

    let leader = ensemble.leader(Duration::from_secs(10)).expect("a leader");
    ensemble.servers[leader].kill();
    let killed_at = Instant::now();
    let new_leader = ensemble
        .leader(Duration::from_secs(30))
        .expect("the remaining two elect a leader");
    assert_ne!(new_leader, leader);
    eprintln!(
        "zookeeper ensemble: new leader after {:?}",
        killed_at.elapsed()
    );
    // The minority is gone: the service goes on, and the held lock is still ours.
    let other = LockClient::builder(&url)
        .fencing(true)
        .build()
        .await
        .unwrap();
    assert!(other.lock("kept").try_acquire().await.unwrap().is_none());
    let fresh = other
        .lock("fresh")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquisitions go on with a majority");
    assert!(fresh.fencing_token().unwrap() > token);
    fresh.release().await.unwrap();
    assert!(
        !held.is_lost(),
        "the held lock was lost with the old leader"
    );

    // A majority down: nobody can be granted anything.
    let second = ensemble
        .servers
        .iter()
        .position(|s| s.is_running())
        .unwrap();
    ensemble.servers[second].kill();
    let started = Instant::now();
    let err = other
        .lock("refused")
        .wait(ms(3_000))
        .acquire()
        .await
        .unwrap_err();
    let took = started.elapsed();
    let message = err.to_string();
    assert!(
        matches!(err, LockError::Backend { .. }) && message.contains("zookeeper"),
        "{message}"
    );
    // The wait, then the last attempt's reply (at most the response timeout, 2 s by default),
    // then giving up its place in line before returning (at most the response timeout again).
    let bound = ms(3_000) + 2 * LockClient::DEFAULT_RESPONSE_TIMEOUT + ms(500);
    assert!(took < bound, "failed after {took:?}");
    // The held lock cannot be confirmed any more: it is reported lost within its lease.
    tokio::time::timeout(lease + ms(1_000), held.lost())
        .await
        .expect("the holder is told once its session cannot be confirmed");
    eprintln!("zookeeper ensemble without a majority: refused after {took:?}: {message}");
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_with_an_error_that_names_the_cause() {
    let nobody = format!("zk://127.0.0.1:{}/x", support::free_port());
    let started = Instant::now();
    let e = LockClient::builder(&nobody)
        .connect_timeout(ms(1_000))
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ZooKeeper") && e.contains(&nobody) && e.contains("reachable"),
        "{e}"
    );
    assert!(started.elapsed() < ms(5_000), "{:?}", started.elapsed());

    let server = ZkServer::shared();
    for (url, says) in [
        (server.url("/a//b"), "empty path component"),
        (server.url("/a/"), "empty path component"),
        (server.url("/a/../b"), "`.` and `..`"),
        (
            format!("{}?session_timeout=soon", server.url("/a")),
            "expected a duration",
        ),
        (
            format!("{}?table=x", server.url("/a")),
            "unknown parameter `table`",
        ),
    ] {
        let err = LockClient::connect(&url).await.unwrap_err();
        assert!(matches!(err, LockError::Config(_)), "{url}: {err:?}");
        assert!(err.to_string().contains(says), "{url}: {err}");
    }
    // A chroot that does not exist yet is created.
    let chroot = format!("/{}/nested/chroot", unique("made"));
    let client = LockClient::connect(&server.url(&chroot)).await.unwrap();
    client
        .lock("k")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let zk = support::zookeeper::client(server.client_port).await;
    assert!(zk.check_stat(&chroot).await.unwrap().is_some());
}

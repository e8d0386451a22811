//! The ZooKeeper backend against real servers, what only ZooKeeper has: the queue on the server
//! (one watch per waiter, served in arrival order), sessions per lease, cancelled waiters, empty
//! parents, fencing across a parent's deletion, and bad input. Its faults (a killed, paused or
//! partitioned holder, a restart, an ensemble losing its leader and then its majority, …) are in
//! the fault suite, `tests/it/faults.rs`.

#![cfg(feature = "zookeeper")]

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::fixture::{Fixture, ZookeeperFixture};
use support::zookeeper::{ZkServer, four_letter};
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
/// another and are served in the order they arrived. Each waiter's node watches only its
/// predecessor — no node is watched by more than its owner and its successor, so a release
/// wakes one waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order_and_each_watches_one_node() {
    const WAITERS: usize = 6;
    let fixture = ZookeeperFixture::new();
    let holder = fixture.client().await;
    let guard = holder.lock("fair").acquire().await.unwrap();
    let parent = fixture.parent("lock:fair");
    let port = fixture.server.client_port;
    let no_herd = async {
        assert!(
            eventually(Duration::from_secs(5), || async {
                watchers_under(port, &parent).len() >= WAITERS
            })
            .await,
            "every waiter watches a node: {:?}",
            watchers_under(port, &parent)
        );
        for (path, sessions) in watchers_under(port, &parent) {
            assert!(
                sessions <= 2,
                "{path} is watched by {sessions} sessions: a herd"
            );
        }
    };
    let in_line = || async { fixture.queue("lock:fair").await.len() };
    support::queue::served_in_arrival_order(
        &fixture.url(),
        "fair",
        guard,
        WAITERS,
        in_line,
        no_herd,
    )
    .await;
}

/// A waiter cancelled mid-wait removes its node; the waiter behind it is not stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_queue_and_the_next_is_not_stuck() {
    let fixture = ZookeeperFixture::new();
    let in_line = || async { fixture.queue("lock:cancel").await.len() };
    support::queue::a_cancelled_waiter_leaves_the_line(&fixture.url(), "cancel", in_line).await;
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

/// The requests the server receives per lock + release (`mntr`'s `zk_packets_received`), on a
/// server of this test's own: a used key costs the recipe's three — create, list (sent behind
/// the create, one round trip for both), delete — and a fresh key one more, its parent,
/// created in the same round trip. The holder's loss watch costs none: the list sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_costs_the_recipes_requests_and_no_more() {
    let fixture = ZookeeperFixture::own();
    let port = fixture.server.client_port;
    let received = || {
        let reply = four_letter(port, "mntr").expect("mntr answers");
        reply
            .lines()
            .find_map(|l| {
                l.strip_prefix("zk_packets_received")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .expect("mntr reports zk_packets_received")
    };
    let client = fixture.client().await;
    // The session is opened here, not counted below; the used key's parent becomes known.
    client
        .lock("used")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    const CALLS: u64 = 100;
    // A ping of the session's heartbeat (and `mntr`'s own connection) may land in a count.
    let slack = 10;
    // Whatever the connect left in flight lands before the counts.
    tokio::time::sleep(ms(500)).await;
    // The server deletes an empty lock parent (a container) every `checkIntervalMs` (200 ms
    // here): a used key whose parent went would pay for a fresh one. A child that is not in the
    // queue (no sequence number) keeps it.
    let zk = fixture.zk().await;
    let used = fixture.parent("lock:used");
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let container =
        zookeeper_client::CreateMode::Container.with_acls(zookeeper_client::Acls::anyone_all());
    match zk.create(&used, &[], &container).await {
        Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
        Err(e) => panic!("cannot create {used}: {e}"),
    }
    zk.create(&format!("{used}/keep"), &[], &persistent)
        .await
        .unwrap();
    for (fresh, per_call) in [(true, 4), (false, 3)] {
        let before = received();
        for i in 0..CALLS {
            let key = if fresh {
                format!("fresh:{i}")
            } else {
                "used".to_owned()
            };
            let guard = client.lock(key).acquire().await.unwrap();
            guard.release().await.unwrap();
        }
        // A watch's clean-up or a late request would arrive after the calls.
        tokio::time::sleep(ms(200)).await;
        let requests = received() - before;
        assert!(
            requests >= CALLS * per_call && requests <= CALLS * per_call + slack,
            "{} key: {requests} requests for {CALLS} lock + release, expected {} (+ {slack})",
            if fresh { "a fresh" } else { "a used" },
            CALLS * per_call
        );
    }
}

/// The holder's loss watch, both ways it is set up: with nobody else in the queue it is the
/// queue's watch from the grant's list; once a waiter joins, that watch fires and the holder
/// watches its own node. Either way a deletion behind its back is reported as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_is_told_its_node_was_deleted_alone_or_with_waiters() {
    let fixture = ZookeeperFixture::new();
    let zk = fixture.zk().await;
    let client = fixture.client().await;
    let other = fixture.client().await;
    for waiter in [false, true] {
        let name = unique("deleted");
        let guard = client.lock(&name).acquire().await.unwrap();
        let queued = waiter.then(|| {
            let (other, name) = (other.clone(), name.clone());
            tokio::spawn(async move {
                other
                    .lock(name)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
            })
        });
        let parent = fixture.parent(&format!("lock:{name}"));
        if waiter {
            assert!(
                eventually(Duration::from_secs(5), || async {
                    zk.list_children(&parent).await.is_ok_and(|c| c.len() == 2)
                })
                .await,
                "the waiter joined the queue"
            );
            // Let the holder see the queue change and watch its own node.
            tokio::time::sleep(ms(200)).await;
        }
        assert!(!guard.is_lost());
        let (first, _, _) = fixture.holder_node(&format!("lock:{name}")).await.unwrap();
        zk.delete(&format!("{parent}/{first}"), None).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("waiter {waiter}: the holder was not told its node went"));
        assert!(guard.is_lost());
        if let Some(queued) = queued {
            let next = queued
                .await
                .unwrap()
                .expect("the waiter is granted the lock");
            next.release().await.unwrap();
        }
        drop(guard);
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
// Bad input.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_with_an_error_that_names_the_cause() {
    let nobody = format!("zk://127.0.0.1:{}/x", support::free_port());
    support::nobody_listening_fails_within_the_connect_timeout(&nobody, "ZooKeeper").await;

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

/// A lock-delay is kept by a session whose timeout is the lease plus the delay. A server whose
/// `maxSessionTimeout` is lower grants less, which would expire a stopped holder's node sooner:
/// the acquisition fails saying so, and writes nothing. A delay that fits is granted, and the
/// session it asked for is the lease plus the delay (the server's own session list says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_beyond_the_servers_max_session_timeout_is_refused() {
    let fixture = ZookeeperFixture::configured("maxSessionTimeout=3000\n");
    let client = fixture.client().await;
    let with_delay = |delay| {
        let request = client.lock("capped").lease(ms(1_000)).lock_delay(delay);
        request.wait(Duration::ZERO).acquire()
    };
    let refused = with_delay(ms(5_000))
        .await
        .expect_err("a lock-delay the server cannot keep");
    let message = refused.to_string();
    assert!(
        message.contains("maxSessionTimeout") && message.contains("lock_delay"),
        "{message}"
    );
    assert!(
        !fixture.anything_at("lock:capped").await,
        "the refused acquisition left a node"
    );
    let granted = with_delay(ms(1_500))
        .await
        .expect("a lock-delay within maxSessionTimeout");
    let sessions = four_letter(fixture.server.client_port, "cons").expect("cons answers");
    assert!(
        sessions.contains("to=2500"),
        "no session of the lease plus the delay (2500 ms): {sessions}"
    );
    granted.release().await.unwrap();
    assert!(!fixture.anything_at("lock:capped").await);
}

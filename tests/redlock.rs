//! Redlock under faults, against real `redis-server` processes: nodes killed, paused, slow,
//! and restarted empty. Each test asserts what the servers hold afterwards.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use support::RedisServer;
use support::fixture::{Fixture, RedlockFixture};
use support::proxy::DelayProxy;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `redlock://` over explicit ports (some of them proxies).
fn url_of_ports(ports: &[u16]) -> String {
    let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("redlock://{}", nodes.join(","))
}

/// 16 tasks of two clients take one key 10 times each; a counter updated non-atomically under
/// the lock proves exclusion, and every hold is checked on the servers.
async fn contend(fixture: &RedlockFixture, clients: &[LockClient], rounds: usize) -> usize {
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let client = clients[t % clients.len()].clone();
        let (inside, done, counter) = (inside.clone(), done.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = client
                    .lock("contended")
                    .lease(Duration::from_secs(5))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("granted with a majority up");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                let read = counter.load(Ordering::SeqCst);
                tokio::time::sleep(ms(2)).await; // long enough for the servers to be seen

                counter.store(read + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // Meanwhile, look at the servers: whenever the lock is held, a majority holds one token.
    let mut majority_seen = 0;
    while done.load(Ordering::SeqCst) < 16 * rounds {
        let values = fixture.values("lock:contended").await;
        if values.iter().flatten().count() > 0 && fixture.holder("lock:contended").await.is_some() {
            majority_seen += 1;
        }
        tokio::time::sleep(ms(5)).await;
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 16 * rounds, "lost updates");
    majority_seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_nodes_down_locks_are_still_granted_and_exclusive() {
    let mut fixture = RedlockFixture::new(5);
    let before = LockClient::connect(&fixture.url()).await.unwrap();
    fixture.servers[1].kill();
    fixture.servers[3].kill();
    // A client started while two nodes are down connects to the majority.
    let after = LockClient::connect(&fixture.url()).await.unwrap();
    let seen = contend(&fixture, &[before, after], 10).await;
    assert!(seen > 0, "the servers were never seen holding the lock");
    for (i, server) in fixture.servers.iter().enumerate() {
        if server.is_running() {
            assert_eq!(server.get("lock:contended").await, None, "node {i} kept it");
        }
    }
    // And one held lock sits on exactly the three live nodes.
    let client = LockClient::connect(&fixture.url()).await.unwrap();
    let guard = client.lock("one").acquire().await.unwrap();
    let values = fixture.values("lock:one").await;
    assert_eq!(values.iter().flatten().count(), 3, "{values:?}");
    guard.release().await.unwrap();
    assert_eq!(fixture.values("lock:one").await, vec![None; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_nodes_down_acquisition_fails_fast_naming_the_lost_majority() {
    let mut fixture = RedlockFixture::new(5);
    let client = fixture
        .builder()
        .node_timeout(ms(100))
        .build()
        .await
        .unwrap();
    fixture.servers[0].kill();
    fixture.servers[2].kill();
    fixture.servers[4].pause(); // hung, not refused: only the node timeout bounds it
    let started = Instant::now();
    let error = client
        .lock("order:7")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap_err();
    let took = started.elapsed();
    let message = error.to_string();
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(
        message.contains("majority") && message.contains("unreachable"),
        "{message}"
    );
    assert!(
        message.contains("order:7") && message.contains("2 of 5"),
        "{message}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // No stray keys on the live nodes.
    for i in [1, 3] {
        let mut conn = fixture.servers[i].connection().await;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        assert_eq!(keys, 0, "node {i} holds a stray key");
    }
    // A new client cannot start without a majority either, and says so.
    let refused = fixture
        .builder()
        .node_timeout(ms(100))
        .connect_timeout(ms(300))
        .build()
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("only 2 of 5 Redlock nodes answered"),
        "{refused}"
    );
    fixture.servers[4].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_arrives_after_the_lease_is_rejected_and_its_locks_released() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let slow = DelayProxy::start(servers[2].port()).await;
    let url = url_of_ports(&[servers[0].port(), servers[1].port(), slow.port()]);
    let client = LockClient::builder(url)
        .node_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    // The third node gets the vote 600 ms late: the vote is complete only after the 500 ms
    // lease, so the grant has no validity left, although all three nodes said yes.
    slow.set_request_delay(ms(600));
    let vote = tokio::spawn({
        let client = client.clone();
        async move {
            let started = Instant::now();
            let result = client
                .lock("late")
                .lease(ms(500))
                .wait(Duration::ZERO)
                .acquire()
                .await;
            (result, started.elapsed())
        }
    });
    tokio::time::sleep(ms(200)).await;
    slow.set_request_delay(Duration::ZERO); // the clean-up gets through at once
    let (result, took) = vote.await.unwrap();
    let error = result.expect_err("a grant without validity must be rejected");
    let message = error.to_string();
    assert!(
        message.contains("granted by 3 of 3") && message.contains("no validity"),
        "{message}"
    );
    assert!(message.contains("released"), "{message}");
    // The slow node took the lock at ~600 ms with a 500 ms lease: without the clean-up it
    // would hold it until ~1.1 s. We look before that.
    assert!(took < ms(1000), "took {took:?}");
    assert_eq!(
        servers[2].get("lock:late").await,
        None,
        "the late node's lock was not released"
    );
    assert_eq!(servers[0].get("lock:late").await, None);
    assert_eq!(servers[1].get("lock:late").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_simultaneous_acquirers_on_five_nodes_never_two_winners() {
    let fixture = RedlockFixture::new(5);
    let mut clients = Vec::new();
    for _ in 0..32 {
        clients.push(fixture.client().await);
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let wins = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let began = Instant::now();
    let first_win = Arc::new(std::sync::Mutex::new(None::<Duration>));
    let mut tasks = Vec::new();
    for client in clients {
        let (inside, wins, start, first_win) = (
            inside.clone(),
            wins.clone(),
            start.clone(),
            first_win.clone(),
        );
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..2 {
                let guard = client
                    .lock("race")
                    .lease(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("every contender wins eventually");
                first_win
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| began.elapsed());
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two winners");
                tokio::time::sleep(ms(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                wins.fetch_add(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total = began.elapsed();
    let first = first_win.lock().unwrap().expect("somebody won");
    println!("32 contenders × 2 on 5 nodes: first win after {first:?}, all 64 in {total:?}");
    assert_eq!(wins.load(Ordering::SeqCst), 64);
    assert!(first < Duration::from_secs(3), "first win after {first:?}");
    assert!(total < Duration::from_secs(45), "64 wins took {total:?}");
    assert_eq!(fixture.values("lock:race").await, vec![None; 5]);
}

/// Client 1 takes the lock while nodes D and E are down, so only A, B and C hold it. D and E
/// come back, then C restarts. Client 2 then asks for the lock.
async fn restart_scenario(servers: Vec<RedisServer>) -> (RedlockFixture, Result<(), LockError>) {
    let mut fixture = RedlockFixture { servers };
    fixture.servers[3].kill();
    fixture.servers[4].kill();
    let one = fixture
        .builder()
        .node_timeout(ms(200))
        .build()
        .await
        .unwrap();
    let held = one
        .lock("job")
        .lease(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let token = fixture.holder("lock:job").await.expect("held");
    assert_eq!(
        fixture.values("lock:job").await,
        [
            Some(token.clone()),
            Some(token.clone()),
            Some(token.clone()),
            None,
            None
        ]
    );
    fixture.servers[3].restart();
    fixture.servers[4].restart();
    fixture.servers[2].restart();
    let two = fixture
        .builder()
        .node_timeout(ms(200))
        .build()
        .await
        .unwrap();
    let second = two.lock("job").wait(Duration::ZERO).acquire().await;
    let outcome = match second {
        Ok(guard) => {
            // Both believe they hold it: the double grant.
            assert!(!held.is_lost() && !guard.is_lost());
            let values = fixture.values("lock:job").await;
            assert_eq!(&values[..2], [Some(token.clone()), Some(token.clone())]);
            let other = values[2].clone().expect("client 2 holds C");
            assert_ne!(other, token);
            assert_eq!(
                &values[2..],
                [Some(other.clone()), Some(other.clone()), Some(other)]
            );
            std::mem::forget(guard); // keep the servers' view for the caller
            Ok(())
        }
        Err(error) => {
            assert_eq!(fixture.values("lock:job").await[2], Some(token.clone()));
            Err(error)
        }
    };
    std::mem::forget(held);
    (fixture, outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_lets_a_second_client_win_a_held_lock() {
    let servers = (0..5).map(|_| RedisServer::start()).collect();
    let (_fixture, second) = restart_scenario(servers).await;
    assert!(
        second.is_ok(),
        "without persistence, C forgets the lock and client 2 wins C, D, E: the double grant \
         the Redis documentation warns about"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appendfsync_always_on_every_node_prevents_the_double_grant() {
    let servers = (0..5).map(|_| RedisServer::start_persistent()).collect();
    let (_fixture, second) = restart_scenario(servers).await;
    match second {
        Err(LockError::Timeout { key, .. }) => assert_eq!(key, "job"),
        other => panic!(
            "C reloaded the lock from its append-only file, so client 2 must find it busy: {other:?}"
        ),
    }
}

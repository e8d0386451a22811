//! Redlock under faults, against real `redis-server` processes: nodes killed, paused, slow,
//! and restarted empty. Each test asserts what the servers hold afterwards.

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

/// 16 tasks of two clients take one key `rounds` times each; a counter updated non-atomically
/// under the lock proves exclusion, and every holder checks that a majority of the nodes
/// (of all of them, running or not) stores its token while it holds the lock. Returns the
/// number of holds checked.
async fn contend(fixture: &RedlockFixture, clients: &[LockClient], rounds: usize) -> usize {
    let inside = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicUsize::new(0));
    let checked = Arc::new(AtomicUsize::new(0));
    let majority = fixture.servers.len() / 2 + 1;
    let running: Arc<Vec<String>> = Arc::new(
        fixture
            .servers
            .iter()
            .filter(|s| s.is_running())
            .map(RedisServer::url)
            .collect(),
    );
    let tasks = (0..16).map(|t| {
        let client = clients[t % clients.len()].clone();
        let (inside, counter, checked) = (inside.clone(), counter.clone(), checked.clone());
        let running = running.clone();
        tokio::spawn(async move {
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
                let token = distlock::__private::testing::owner_token(&guard);
                let mut values = Vec::new();
                for url in running.iter() {
                    let mut conn = redis::Client::open(url.as_str())
                        .unwrap()
                        .get_multiplexed_async_connection()
                        .await
                        .unwrap();
                    let value: Option<String> = redis::cmd("GET")
                        .arg("lock:contended")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    values.push(value);
                }
                let holding = values
                    .iter()
                    .filter(|v| v.as_deref() == Some(token))
                    .count();
                assert!(
                    holding >= majority,
                    "held on {holding} nodes only: {values:?}"
                );
                checked.fetch_add(1, Ordering::SeqCst);
                counter.store(read + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        })
    });
    for task in tasks.collect::<Vec<_>>() {
        task.await.expect("contending task");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 16 * rounds, "lost updates");
    checked.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_nodes_down_locks_are_still_granted_and_exclusive() {
    let mut fixture = RedlockFixture::new(5);
    let before = LockClient::connect(&fixture.url()).await.unwrap();
    fixture.servers[1].kill();
    fixture.servers[3].kill();
    // A client started while two nodes are down connects to the majority.
    let after = LockClient::connect(&fixture.url()).await.unwrap();
    let checked = contend(&fixture, &[before, after], 10).await;
    assert_eq!(checked, 160);
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

/// Three of five nodes down (two refusing, one hung): an acquisition keeps retrying for its
/// whole `wait` — a majority back in time would still grant it — then fails with an error that
/// names every node and what happened to it. `wait = 0` tries exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_nodes_down_fails_after_the_wait_naming_every_node() {
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
        .wait(ms(1_000))
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
        message.contains("order:7")
            && message.contains("2 of 5 answered")
            && message.contains("still failing after"),
        "{message}"
    );
    for (i, what) in [
        (0, "refused"),
        (1, "granted (undone)"),
        (2, "refused"),
        (3, "granted (undone)"),
        (4, "timed out after 100ms"),
    ] {
        let node = format!("127.0.0.1:{}: {what}", fixture.servers[i].port());
        assert!(
            message.contains(&node),
            "node {i} should read `{node}`: {message}"
        );
    }
    assert!(took >= ms(1_000), "gave up before the wait ended: {took:?}");
    assert!(took < ms(2_500), "took {took:?}");
    // No stray keys on the live nodes.
    for i in [1, 3] {
        let mut conn = fixture.servers[i].connection().await;
        let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        assert_eq!(keys, 0, "node {i} holds a stray key");
    }
    // `wait = 0`: one vote (and its undo) per live node, no retry.
    for i in [1, 3] {
        fixture.servers[i].reset_stats().await;
    }
    let started = Instant::now();
    let error = client
        .lock("order:7")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(!error.to_string().contains("still failing"), "{error}");
    assert!(started.elapsed() < ms(1_000), "{:?}", started.elapsed());
    for i in [1, 3] {
        let scripts = fixture.servers[i].command_calls("evalsha").await;
        assert_eq!(scripts, 2, "node {i}: one vote and one undo, got {scripts}");
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

/// Two of three nodes go down, and come back while an acquisition waits: it is granted, on a
/// majority, although every vote before the restart missed its majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_back_within_the_wait_grants_the_lock() {
    let mut fixture = RedlockFixture::new(3);
    let client = fixture.client().await;
    fixture.servers[0].kill();
    fixture.servers[1].kill();
    let acquiring = tokio::spawn({
        let client = client.clone();
        async move {
            let started = Instant::now();
            let guard = client
                .lock("comeback")
                .wait(Duration::from_secs(10))
                .acquire()
                .await;
            (guard, started.elapsed())
        }
    });
    tokio::time::sleep(ms(500)).await;
    tokio::task::block_in_place(|| {
        fixture.servers[0].restart();
        fixture.servers[1].restart();
    });
    let (guard, took) = acquiring.await.unwrap();
    let guard = guard.unwrap_or_else(|e| panic!("the lock once a majority is back: {e}"));
    assert!(took >= ms(400), "granted without a majority: {took:?}");
    let token = distlock::__private::testing::owner_token(&guard).to_owned();
    let values = fixture.values("lock:comeback").await;
    let holding = values
        .iter()
        .filter(|v| v.as_deref() == Some(&token))
        .count();
    assert!(
        holding >= 2,
        "the winning token must sit on a majority: {values:?}"
    );
    guard.release().await.unwrap();
    assert_eq!(fixture.values("lock:comeback").await, vec![None; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_arrives_after_the_lease_is_rejected_and_its_locks_released() {
    late_grant(Duration::ZERO).await;
}

/// A lock-delay lengthens the TTL each node keeps (lease + delay), not a grant's validity: a
/// majority complete after the lease is still no grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_adds_no_validity_to_a_late_grant() {
    late_grant(ms(5_000)).await;
}

async fn late_grant(lock_delay: Duration) {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let slow = [
        DelayProxy::start(servers[1].port()).await,
        DelayProxy::start(servers[2].port()).await,
    ];
    let url = url_of_ports(&[servers[0].port(), slow[0].port(), slow[1].port()]);
    let client = LockClient::builder(url)
        .node_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    // Two nodes get the vote 600 ms late: the majority is complete only after the 500 ms
    // lease, so the grant has no validity left, although a majority said yes.
    for proxy in &slow {
        proxy.set_request_delay(ms(600));
    }
    let vote = tokio::spawn({
        let client = client.clone();
        async move {
            let started = Instant::now();
            let result = client
                .lock("late")
                .lease(ms(500))
                .lock_delay(lock_delay)
                .wait(Duration::ZERO)
                .acquire()
                .await;
            (result, started.elapsed())
        }
    });
    tokio::time::sleep(ms(200)).await;
    for proxy in &slow {
        proxy.set_request_delay(Duration::ZERO); // the clean-up gets through at once
    }
    let (result, took) = vote.await.unwrap();
    let error = result.expect_err("a grant without validity must be rejected");
    let message = error.to_string();
    assert!(
        message.contains("granted by") && message.contains("no validity"),
        "{message}"
    );
    assert!(message.contains("released"), "{message}");
    // The slow nodes took the lock at ~600 ms with a 500 ms lease: without the clean-up they
    // would hold it until ~1.1 s. We look before that.
    assert!(took < ms(1000), "took {took:?}");
    for server in &servers {
        assert_eq!(
            server.get("lock:late").await,
            None,
            "a late node's lock was not released"
        );
    }
}

/// 32 clients start voting at the same instant on five nodes, twice each. Never two winners;
/// and no handoff waits for a lease to run out: the next holder is granted well within the
/// 5 s lease of the last release (a stall — an abandoned partial vote blocking nodes until its
/// lease expired, or a missed wake-up — shows as a gap of a whole lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_simultaneous_acquirers_on_five_nodes_never_two_winners() {
    let lease = Duration::from_secs(5);
    let fixture = RedlockFixture::new(5);
    let mut clients = Vec::new();
    for _ in 0..32 {
        clients.push(fixture.client().await);
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let holds = Arc::new(std::sync::Mutex::new(Vec::<(Instant, Instant)>::new()));
    let began = Instant::now();
    let mut tasks = Vec::new();
    for client in clients {
        let (inside, start, holds) = (inside.clone(), start.clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..2 {
                let guard = client
                    .lock("race")
                    .lease(lease)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("every contender wins eventually");
                let acquired = Instant::now();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two winners");
                tokio::time::sleep(ms(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                let released = Instant::now();
                guard.release().await.unwrap();
                holds.lock().unwrap().push((acquired, released));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total = began.elapsed();
    let mut holds = holds.lock().unwrap().clone();
    holds.sort();
    assert_eq!(holds.len(), 64);
    let first = holds[0].0 - began;
    let longest_handoff = holds
        .windows(2)
        .map(|pair| pair[1].0.saturating_duration_since(pair[0].1))
        .max()
        .unwrap();
    println!(
        "32 contenders × 2 on 5 nodes: first win after {first:?}, longest handoff \
         {longest_handoff:?}, all 64 in {total:?}"
    );
    assert!(first < Duration::from_secs(3), "first win after {first:?}");
    assert!(
        longest_handoff < lease / 2,
        "a handoff took {longest_handoff:?}: a waiter sat out a lease of {lease:?}"
    );
    assert_eq!(fixture.values("lock:race").await, vec![None; 5]);
}

/// Client 1 takes the lock while nodes D and E are down, so only A, B and C hold it. D and E
/// come back, then C restarts. Client 2 then asks for the lock.
async fn restart_scenario(servers: Vec<RedisServer>) -> (RedlockFixture, Result<(), LockError>) {
    let mut fixture = RedlockFixture::of(servers);
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
        Err(error) if error.is_busy() => assert_eq!(error.key(), Some("job")),
        other => panic!(
            "C reloaded the lock from its append-only file, so client 2 must find it busy: {other:?}"
        ),
    }
}

/// The quoted arguments of the commands `MONITOR` shows on one node, in order, each command
/// one `Vec` (`["evalsha", "<sha>", "1", "lock:k", "<token>", "2000"]`).
struct Monitor {
    lines: Arc<std::sync::Mutex<Vec<Vec<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Monitor {
    async fn start(port: u16) -> Monitor {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("MONITOR connects");
        stream.write_all(b"MONITOR\r\n").await.unwrap();
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).await.unwrap();
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let lines = Arc::clone(&lines);
            async move {
                let mut line = String::new();
                while reader.read_line(&mut line).await.is_ok_and(|n| n > 0) {
                    // `+1700000000.123456 [0 127.0.0.1:5000] "evalsha" "…" "1" "lock:k" …`
                    let args: Vec<String> = line
                        .split('"')
                        .skip(1)
                        .step_by(2)
                        .map(str::to_owned)
                        .collect();
                    lines.lock().unwrap().push(args);
                    line.clear();
                }
            }
        });
        Monitor { lines, task }
    }

    fn stop(self) -> Vec<Vec<String>> {
        self.task.abort();
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

/// A Redlock attempt that finds the lock busy is undone on every node, and a node that does not
/// confirm the undo in time is chased in the background until the lease is over. So every
/// attempt after a busy one must carry a new owner token: with the old one, a late delete
/// removes the lock a later attempt won on that node, a third client can win a majority
/// beside it, and the first holder's release finds its lock `Lost` — what a slow TLS path did
/// to `conformance::redlock_tls::a_slow_backend_still_grants_waiting_acquisitions` on a busy
/// machine. MONITOR on a node shows the token of each vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_vote_after_a_busy_one_carries_a_fresh_token() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    let url = url_of_ports(&ports);
    let monitor = Monitor::start(ports[0]).await;
    let holder = LockClient::connect(&url).await.unwrap();
    let waiter = LockClient::connect(&url).await.unwrap();
    let lease = ms(2_000);
    let held = holder.lock("fresh").lease(lease).acquire().await.unwrap();
    let held_token = distlock::__private::testing::owner_token(&held).to_owned();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("fresh")
            .lease(lease)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
    });
    tokio::time::sleep(ms(300)).await;
    assert!(!waiting.is_finished(), "granted while held");
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().expect("granted after the release");
    let won = distlock::__private::testing::owner_token(&guard).to_owned();
    guard.release().await.unwrap();
    tokio::time::sleep(ms(100)).await;
    let commands = monitor.stop();
    // The waiter's votes: the lock's key, a token that is not the holder's, then the lease
    // (a renewal would show the lease too, but none is due within 300 ms of a 2 s lease; an
    // undo or release shows no number after the token).
    let votes: Vec<&str> = commands
        .iter()
        .filter_map(|args| match args.as_slice() {
            [command, _, _, key, token, lease_ms, ..]
                if command.eq_ignore_ascii_case("evalsha")
                    && key == "lock:fresh"
                    && *token != held_token
                    && *lease_ms == "2000" =>
            {
                Some(token.as_str())
            }
            _ => None,
        })
        .collect();
    assert!(
        votes.len() >= 2,
        "the waiter should have voted while the lock was busy and again after the release: \
         {votes:?} in {commands:?}"
    );
    let distinct: std::collections::HashSet<&str> = votes.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        votes.len(),
        "a vote after a busy one reused its token: {votes:?}"
    );
    assert_eq!(
        votes.last(),
        Some(&won.as_str()),
        "the winning vote's token"
    );
    for server in &servers {
        assert_eq!(server.get("lock:fresh").await, None, "left behind");
    }
}

/// A forced release whose deletes reach the nodes at different moments never takes away a
/// grant made after it looked: the old holder's lock is on nodes B and C only (A never got
/// it); the admin's requests reach C 500 ms and A 1 s late; a newcomer that cannot reach C
/// asks 300 ms in, once B's delete has landed, and wins A and B. A's delete, landing last,
/// must leave the newcomer's token there: a blind `DEL` removed it, leaving the newcomer on
/// one node of three — a lock nobody holds, which `inspect` showed as free (the conformance
/// case's failure on a busy machine) and another client could take while it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_forced_release_never_removes_a_later_grant() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let direct: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    // The holder reaches A through a blackholed proxy: its grant is B's and C's.
    let holder_to_a = DelayProxy::start(direct[0]).await;
    holder_to_a.set_blackhole(true);
    let holder = LockClient::builder(url_of_ports(&[holder_to_a.port(), direct[1], direct[2]]))
        .response_timeout(ms(500))
        .build()
        .await
        .unwrap();
    let held = holder
        .lock("forced")
        .lease(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let held_token = distlock::__private::testing::owner_token(&held).to_owned();
    assert_eq!(servers[0].get("lock:forced").await, None, "A never got it");
    assert_eq!(
        servers[1].get("lock:forced").await.as_deref(),
        Some(held_token.as_str())
    );

    // The admin's requests: at once to B, 500 ms late to C, 1 s late to A.
    let admin_to_a = DelayProxy::start(direct[0]).await;
    let admin_to_c = DelayProxy::start(direct[2]).await;
    let admin = LockClient::builder(url_of_ports(&[
        admin_to_a.port(),
        direct[1],
        admin_to_c.port(),
    ]))
    .response_timeout(ms(5_000))
    .build()
    .await
    .unwrap();
    // The admin scripts loaded on every node first: each delete below is one request.
    for key in ["warm", "forced-warm"] {
        admin.inspect(key).await.unwrap();
        admin.force_release(key).await.unwrap();
    }
    // The newcomer reaches A and B; C, once it is connected, never answers it.
    let newcomer_to_c = DelayProxy::start(direct[2]).await;
    let newcomer = LockClient::builder(url_of_ports(&[direct[0], direct[1], newcomer_to_c.port()]))
        .response_timeout(ms(300))
        .build()
        .await
        .unwrap();
    newcomer.ping().await.unwrap();
    newcomer_to_c.set_blackhole(true);
    admin_to_a.set_request_delay(ms(1_000));
    admin_to_c.set_request_delay(ms(500));
    let forcing = tokio::spawn({
        let admin = admin.clone();
        async move { admin.force_release("forced").await }
    });
    tokio::time::sleep(ms(300)).await;
    let granted = newcomer
        .lock("forced")
        .lease(ms(10_000))
        .wait(ms(10_000))
        .acquire()
        .await
        .expect("the newcomer gets the lock");
    let token = distlock::__private::testing::owner_token(&granted).to_owned();
    let removed = forcing.await.unwrap().unwrap().expect("it was held");
    assert_eq!(removed.token.as_deref(), Some(held_token.as_str()));
    // Every delete has landed (the slowest, A's, a second late).
    tokio::time::sleep(ms(1_500)).await;
    let mut on = Vec::new();
    for server in &servers {
        on.push(server.get("lock:forced").await);
    }
    let holding = on
        .iter()
        .filter(|t| t.as_deref() == Some(token.as_str()))
        .count();
    assert!(
        holding >= 2,
        "the newcomer's token is on {holding} of 3 nodes after the forced release: {on:?}"
    );
    admin_to_a.set_request_delay(Duration::ZERO);
    admin_to_c.set_request_delay(Duration::ZERO);
    let seen = admin
        .inspect("forced")
        .await
        .unwrap()
        .expect("the newcomer holds it");
    assert_eq!(seen.token.as_deref(), Some(token.as_str()));
    granted.release().await.unwrap();
    drop(held);
}

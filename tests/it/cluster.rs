//! Redis Cluster under faults, against a real cluster made with `redis-cli --cluster create`:
//! a master killed while its locks are held, and a slot moved while locks live in it.

use std::time::{Duration, Instant};

use distlock::__private::testing::cluster_slot;
use distlock::LockClient;
use support::cluster::RedisCluster;
use support::eventually;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A lock key whose backend name (`{lock:<key>}`) lands in `slot`.
fn key_in_slot(slot: u16, label: &str) -> String {
    (0..)
        .map(|n| format!("{label}-{n}"))
        .find(|key| cluster_slot(&format!("lock:{key}")) == slot)
        .expect("some key hashes to every slot")
}

/// `distlock check` on a Cluster that no longer serves every slot (a master's range
/// unassigned on every node with `CLUSTER DELSLOTSRANGE`): the `cluster` line fails, naming the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_slots_no_master_serves() {
    let cluster = RedisCluster::start(3, 0);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let checkup = client.check().await;
    assert!(checkup.passed(), "{checkup:#?}");
    // Every node forgets who serves slots 0-99 (the owner stops serving them).
    for node in 0..3 {
        let () = cluster.query(
            node,
            redis::cmd("CLUSTER").arg("DELSLOTSRANGE").arg(0).arg(99),
        );
    }
    let line = eventually(Duration::from_secs(10), || async {
        let checkup = client.check().await;
        checkup
            .findings
            .iter()
            .any(|f| f.check == "cluster" && !f.passed)
    })
    .await;
    assert!(line, "the cluster line failed");
    let checkup = client.check().await;
    let cluster_line = checkup
        .findings
        .iter()
        .find(|f| f.check == "cluster")
        .unwrap();
    assert!(
        cluster_line.found.contains("16284 of 16384 slots assigned"),
        "{cluster_line:?}"
    );
    assert!(
        cluster_line
            .fix
            .as_deref()
            .unwrap_or_default()
            .contains("redis-cli --cluster fix"),
        "{cluster_line:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_hands_its_locks_to_the_replica_or_reports_them_lost() {
    let mut cluster = RedisCluster::start(3, 1);
    let client = LockClient::builder(cluster.url())
        .connect_timeout(ms(500))
        .response_timeout(ms(500))
        .build()
        .await
        .unwrap();
    let lease = Duration::from_secs(4);
    let mut guards = Vec::new();
    for i in 0..24 {
        let key = format!("job:{i}");
        let guard = client
            .lock(key.as_str())
            .lease(lease)
            .acquire()
            .await
            .unwrap();
        let name = format!("{{lock:{key}}}");
        let token = cluster.get(&name).await.expect("held in the cluster");
        let owner = cluster.owner_of(cluster.slot(&name, 0), 0);
        guards.push((key, name, token, owner, guard));
    }
    let victim = guards[0].3;
    let survivor = (0..3).find(|&i| i != victim).expect("another master");
    let on_victim = guards.iter().filter(|g| g.3 == victim).count();
    assert!(on_victim > 0 && on_victim < guards.len());
    // Let the replica catch up (replication is asynchronous), then crash the master.
    tokio::time::sleep(ms(200)).await;
    cluster.nodes[victim].kill();
    let killed_at = Instant::now();
    // An acquisition on the dead master's slots while the failover is under way: the errors
    // it meets (refused, CLUSTERDOWN) are transient, so it retries within its wait and gets
    // the lock from the promoted replica.
    let slot = cluster.slot(&guards[0].1, survivor);
    let during = key_in_slot(slot, "during");
    let during_failover = tokio::spawn({
        let (client, during) = (client.clone(), during.clone());
        async move {
            let guard = client
                .lock(during.as_str())
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (guard, Instant::now())
        }
    });
    let cluster_ref = &cluster;
    tokio::task::block_in_place(|| {
        cluster_ref.wait_for_failover(slot, victim, survivor, Duration::from_secs(30))
    });
    let recovered = killed_at.elapsed();
    let (guard, granted_at) = during_failover.await.unwrap();
    let guard = guard.unwrap_or_else(|e| panic!("acquire during the failover: {e}"));
    assert!(granted_at > killed_at);
    assert_eq!(
        cluster.get(&format!("{{lock:{during}}}")).await.as_deref(),
        Some(distlock::__private::testing::owner_token(&guard)),
        "the lock taken during the failover is on the promoted replica"
    );
    guard.release().await.unwrap();

    // New locks succeed everywhere, on the failed master's slots too.
    for (key, ..) in guards.iter().filter(|g| g.3 == victim) {
        let fresh = format!("{key}:after");
        let guard = client
            .lock(fresh.as_str())
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire after failover: {e}"));
        assert!(cluster.get(&format!("{{lock:{fresh}}}")).await.is_some());
        guard.release().await.unwrap();
    }

    // Every holder on the failed master either still holds its lock on the promoted replica
    // (renewed there) or has been told it is lost; nobody else is affected.
    tokio::time::sleep(lease).await;
    let (mut kept, mut lost) = (0, 0);
    for (key, name, token, owner, guard) in &guards {
        let now = cluster.get(name).await;
        if *owner != victim {
            assert!(!guard.is_lost(), "{key} on a healthy master was lost");
            assert_eq!(now.as_ref(), Some(token), "{key} on a healthy master");
        } else if guard.is_lost() {
            lost += 1;
            assert_ne!(now.as_ref(), Some(token), "{key} lost but still held");
        } else {
            kept += 1;
            assert_eq!(
                now.as_ref(),
                Some(token),
                "{key} kept but not on the replica"
            );
            let mut conn = cluster.connection().await;
            let pttl: i64 = redis::cmd("PTTL")
                .arg(name)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(
                pttl > (lease / 3).as_millis() as i64,
                "{key} kept, so renewals must reach the new master (pttl {pttl})"
            );
        }
    }
    println!(
        "failover after {recovered:?}: {kept} locks kept on the promoted replica, {lost} \
         reported lost, {} on healthy masters untouched",
        guards.len() - on_victim
    );
    assert_eq!(kept + lost, on_victim);
    for (_, name, _, _, guard) in guards {
        let was_lost = guard.is_lost();
        let released = guard.release().await;
        assert_eq!(released.is_ok(), !was_lost, "{released:?}");
        assert_eq!(cluster.get(&name).await, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_follow_moved_and_ask_while_their_slot_is_resharded() {
    let cluster = RedisCluster::start(3, 0);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let held = client
        .lock("moving")
        .lease(ms(900))
        .acquire()
        .await
        .unwrap();
    let name = "{lock:moving}";
    let slot = cluster.slot(name, 0);
    assert_eq!(
        slot,
        cluster_slot(name),
        "our slot function agrees with the server"
    );
    let from = cluster.owner_of(slot, 0);
    let to = (from + 1) % 3;
    let neighbour = key_in_slot(slot, "neighbour");
    let mut during = None;
    cluster
        .migrate_slot(slot, from, to, || async {
            // Half-moved: the source answers ASK for keys it does not have.
            during = Some(
                client
                    .lock(neighbour.as_str())
                    .lease(Duration::from_secs(10))
                    .acquire()
                    .await
                    .expect("a lock in a migrating slot (ASK is followed)"),
            );
        })
        .await;
    let during = during.unwrap();
    assert_eq!(cluster.owner_of(slot, from), to);
    // The held lock moved with its slot and keeps being renewed on the new node (MOVED).
    tokio::time::sleep(ms(1500)).await;
    assert!(!held.is_lost(), "renewal must follow the slot");
    let on_new_node: Option<String> = cluster.query(to, redis::cmd("GET").arg(name));
    assert!(on_new_node.is_some(), "the lock lives on the new owner");
    let pttl: i64 = cluster.query(to, redis::cmd("PTTL").arg(name));
    assert!(pttl > 300, "renewed on the new owner (pttl {pttl})");
    let neighbour_name = format!("{{lock:{neighbour}}}");
    let on_new_node: Option<String> = cluster.query(to, redis::cmd("GET").arg(&neighbour_name));
    assert!(
        on_new_node.is_some(),
        "the ASK-redirected lock is on the importing node"
    );

    // Release and wake-up work after the move.
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let started = Instant::now();
            let guard = client
                .lock("moving")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
                .unwrap();
            (started.elapsed(), guard)
        }
    });
    tokio::time::sleep(ms(100)).await;
    held.release().await.unwrap();
    let (waited, second) = waiter.await.unwrap();
    assert!(
        waited < ms(800),
        "woken by the release, not the lease: {waited:?}"
    );
    second.release().await.unwrap();
    during.release().await.unwrap();
    assert!(
        eventually(ms(500), || async {
            cluster.get(name).await.is_none() && cluster.get(&neighbour_name).await.is_none()
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_without_replica_tells_its_holders_they_lost_the_lock() {
    let mut cluster = RedisCluster::start(3, 0);
    for i in 0..3 {
        // Let the other masters serve their slots while one is down.
        let () = cluster.query(
            i,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("cluster-require-full-coverage")
                .arg("no"),
        );
    }
    let client = LockClient::builder(cluster.url())
        .connect_timeout(ms(300))
        .response_timeout(ms(300))
        .build()
        .await
        .unwrap();
    let lease = ms(1500);
    let mut guards = Vec::new();
    for i in 0..12 {
        let key = format!("task:{i}");
        let guard = client
            .lock(key.as_str())
            .lease(lease)
            .acquire()
            .await
            .unwrap();
        let name = format!("{{lock:{key}}}");
        let owner = cluster.owner_of(cluster.slot(&name, 0), 0);
        guards.push((name, owner, guard));
    }
    let victim = guards[0].1;
    cluster.nodes[victim].kill();
    let killed_at = Instant::now();
    for (name, owner, guard) in &guards {
        if *owner == victim {
            tokio::time::timeout(lease + ms(500), guard.lost())
                .await
                .unwrap_or_else(|_| panic!("{name}: holder not told within its lease"));
        }
    }
    let told_within = killed_at.elapsed();
    assert!(told_within <= lease + ms(500), "{told_within:?}");
    let survivor = (0..3).find(|&i| i != victim).unwrap();
    for (name, owner, guard) in &guards {
        if *owner != victim {
            assert!(!guard.is_lost(), "{name} on a live master was lost");
            let held: Option<String> = cluster.query(*owner, redis::cmd("GET").arg(name));
            assert!(held.is_some(), "{name} on a live master is gone");
        }
    }
    // The master comes back (empty: no persistence): its slots work again.
    cluster.nodes[victim].restart();
    let slot = cluster.slot(&guards[0].0, survivor);
    tokio::task::block_in_place(|| cluster.wait_until_ok(victim, Duration::from_secs(20)));
    assert_eq!(cluster.owner_of(slot, victim), victim);
    let again = client
        .lock("task:0")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the restarted master's slots take locks again");
    assert!(cluster.get("{lock:task:0}").await.is_some());
    again.release().await.unwrap();
    println!("holders on the killed master told they lost the lock within {told_within:?}");
}

/// A fair lock in a cluster: the lock, its queue and its deadlines share the lock's slot (one
/// script touches all three), waiters of two clients are granted in arrival order, and nothing
/// is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_keeps_its_queue_in_the_locks_slot() {
    let cluster = RedisCluster::start(3, 0);
    let clients = [
        LockClient::connect(&cluster.url()).await.unwrap(),
        LockClient::connect(&cluster.url()).await.unwrap(),
    ];
    let holder = clients[0]
        .lock("fair")
        .fair()
        .lease(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let queue_len = || async {
        let mut conn = cluster.connection().await;
        let len: i64 = redis::cmd("LLEN")
            .arg("lock-queue:{lock:fair}")
            .query_async(&mut conn)
            .await
            .unwrap();
        len
    };
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for arrival in 0..4 {
        let (client, order) = (clients[arrival % 2].clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = client
                .lock("fair")
                .fair()
                .wait(ms(20_000))
                .acquire()
                .await
                .unwrap();
            order.lock().unwrap().push(arrival);
            guard.release().await.unwrap();
        }));
        assert!(
            eventually(ms(5_000), || async { queue_len().await > arrival as i64 }).await,
            "waiter {arrival} never queued"
        );
    }
    let lock_slot = cluster.slot("{lock:fair}", 0);
    assert_eq!(cluster.slot("lock-queue:{lock:fair}", 0), lock_slot);
    assert_eq!(
        cluster.slot("lock-queue-deadlines:{lock:fair}", 0),
        lock_slot
    );
    holder.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(ms(20_000), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(queue_len().await, 0);
    assert_eq!(cluster.get("{lock:fair}").await, None);
}

/// `EVALSHA` calls node `i` served (`INFO commandstats`).
fn evalshas(cluster: &RedisCluster, i: usize) -> u64 {
    let info: String = cluster.query(i, redis::cmd("INFO").arg("commandstats"));
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Two keys whose hash tags share a slot are taken by one script on that slot's master, all or
/// nothing; two keys of different slots one by one, in canonical order — both held, both
/// given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_one_slot_are_taken_in_one_script_and_others_one_by_one() {
    let cluster = RedisCluster::start(3, 0);
    let client = LockClient::connect(&cluster.url()).await.unwrap();
    let first = "set-0".to_owned();
    let slot = cluster_slot(&format!("lock:{first}"));
    let second = (1..)
        .map(|n| format!("set-{n}"))
        .find(|key| cluster_slot(&format!("lock:{key}")) == slot)
        .expect("another key of the same slot");
    let owner = cluster.owner_of(slot, 0);
    // Warm: the script's first call on a node loads it.
    let warm = client.lock_all([&first, &second]).acquire().await.unwrap();
    warm.release().await.unwrap();

    let before = evalshas(&cluster, owner);
    let set = client.lock_all([&second, &first]).acquire().await.unwrap();
    assert_eq!(
        evalshas(&cluster, owner) - before,
        1,
        "one script for the set"
    );
    for key in [&first, &second] {
        assert!(
            cluster.get(&format!("{{lock:{key}}}")).await.is_some(),
            "{key}"
        );
    }
    // A busy set takes nothing: its free key stays free.
    let other = LockClient::connect(&cluster.url()).await.unwrap();
    let third = key_in_slot(slot, "set-third");
    assert!(
        other
            .lock_all([&third, &first])
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(cluster.get(&format!("{{lock:{third}}}")).await, None);
    set.release().await.unwrap();
    for key in [&first, &second] {
        assert_eq!(cluster.get(&format!("{{lock:{key}}}")).await, None, "{key}");
    }

    // Different slots: key by key, still one guard over both.
    let elsewhere = key_in_slot((slot + 8192) % 16384, "set-far");
    let set = client
        .lock_all([&elsewhere, &first])
        .acquire()
        .await
        .unwrap();
    assert_eq!(set.keys().count(), 2);
    assert!(
        cluster
            .get(&format!("{{lock:{elsewhere}}}"))
            .await
            .is_some()
    );
    set.release().await.unwrap();
    assert_eq!(cluster.get(&format!("{{lock:{elsewhere}}}")).await, None);
}

/// The replica (node index) of master `master`, from each node's `ROLE`.
fn replica_of(cluster: &RedisCluster, master: usize) -> usize {
    let port = i64::from(cluster.nodes[master].port());
    (0..cluster.nodes.len())
        .find(|&j| {
            let role: Vec<redis::Value> = cluster.query(j, &redis::cmd("ROLE"));
            matches!(role.as_slice(),
                [redis::Value::BulkString(r), _, redis::Value::Int(p), ..] if r == b"slave" && *p == port)
        })
        .expect("every master has a replica")
}

/// What replica `node` holds at `name` (a cluster replica answers reads after `READONLY`).
async fn on_replica(cluster: &RedisCluster, node: usize, name: &str) -> Option<String> {
    let mut conn = cluster.nodes[node].connection().await;
    let (value,): (Option<String>,) = redis::pipe()
        .cmd("READONLY")
        .ignore()
        .cmd("GET")
        .arg(name)
        .query_async(&mut conn)
        .await
        .unwrap();
    value
}

/// `?replicas=1` on a cluster: every grant, whichever master owns its slot, is on that master's
/// replica when `acquire` returns (the `WAIT` goes to the key's master, in one pipeline with the
/// script); with one replica paused, grants in its master's slots are refused and given back,
/// while the other masters' keep being granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replicas_a_grant_waits_for_its_masters_replica() {
    let cluster = RedisCluster::start(3, 1);
    let client = LockClient::connect(&format!("{}?replicas=1", cluster.url()))
        .await
        .unwrap();
    let mut masters_seen = std::collections::HashSet::new();
    for i in 0..12 {
        let key = format!("acked:{i}");
        let guard = client.lock(key.as_str()).acquire().await.unwrap();
        let name = format!("{{lock:{key}}}");
        let owner = cluster.owner_of(cluster.slot(&name, 0), 0);
        masters_seen.insert(owner);
        let replica = replica_of(&cluster, owner);
        assert_eq!(
            on_replica(&cluster, replica, &name).await,
            cluster.get(&name).await,
            "the grant of {key} is on its master's replica"
        );
        guard.release().await.unwrap();
    }
    assert_eq!(masters_seen.len(), 3, "keys on every master");

    let victim_slot = cluster.slot("{lock:acked:0}", 0);
    let victim = cluster.owner_of(victim_slot, 0);
    let paused = replica_of(&cluster, victim);
    cluster.nodes[paused].pause();
    let refused = key_in_slot(victim_slot, "refused");
    let result = client
        .lock(refused.as_str())
        .lease(ms(2_000))
        .wait(ms(1_200))
        .acquire()
        .await;
    let elsewhere = (0..)
        .map(|n| format!("fine-{n}"))
        .find(|k| cluster.owner_of(cluster.slot(&format!("{{lock:{k}}}"), 0), 0) != victim)
        .unwrap();
    let granted = client
        .lock(elsewhere.as_str())
        .wait(ms(2_000))
        .acquire()
        .await;
    let left = cluster.get(&format!("{{lock:{refused}}}")).await;
    cluster.nodes[paused].resume();
    assert!(
        result.is_err(),
        "a grant its replica did not acknowledge: {result:?}"
    );
    assert_eq!(left, None, "the unacknowledged grant was given back");
    granted
        .expect("keys of the other masters are still granted")
        .release()
        .await
        .unwrap();
}

/// `?replicas=2` on a cluster whose masters have one replica each: refused at connect, naming a
/// master and how many replicas it has; `?replicas=1` connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_replicas_asked_of_a_cluster_is_refused_at_connect() {
    let cluster = RedisCluster::start(3, 1);
    let Err(error) = LockClient::connect(&format!("{}?replicas=2", cluster.url())).await else {
        panic!("two replicas asked of masters that have one: connected");
    };
    let message = error.to_string();
    assert!(
        message.contains("replicas=2") && message.contains("has 1 connected"),
        "{message}"
    );
    LockClient::connect(&format!("{}?replicas=1", cluster.url()))
        .await
        .expect("one replica asked: connects");
}

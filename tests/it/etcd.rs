//! The etcd backend against real members, what only etcd has: the queue on the server (one
//! watch per waiter, served in arrival order), leases shared by lock length, cancelled waiters,
//! and bad input. Its faults (a killed, paused or partitioned holder, a restart, a cluster
//! losing its leader and then its majority, …) are in the fault suite, `tests/it/faults.rs`.

#![cfg(feature = "etcd")]

use std::time::Duration;

use distlock::{LockClient, LockError};
use support::etcd::{EtcdMember, http_call};
use support::eventually;
use support::fixture::{EtcdFixture, Fixture};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One of the member's gauges (`/metrics`), by name.
fn gauge(port: u16, name: &str) -> u64 {
    let metrics = http_call(port, "GET", "/metrics", "").expect("/metrics answers");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no gauge {name}")) as u64
}

/// How many watchers the member serves (its `etcd_debugging_mvcc_watcher_total` gauge).
fn watchers(port: u16) -> u64 {
    gauge(port, "etcd_debugging_mvcc_watcher_total")
}

/// How many watch streams the member serves.
fn watch_streams(port: u16) -> u64 {
    gauge(port, "etcd_debugging_mvcc_watch_stream_total")
}

/// A client's watches ride one stream: 20 held locks (each watched for its loss) and a waiter
/// are 21 watchers on one watch stream, not 21 streams; a release takes its watch back at
/// once (the member's watcher count falls to the waiter's, then to none); the stream goes
/// with the client. A holder's key is watched from shortly before its first renewal interval
/// ends: a lock of a 30 s lease held for a moment opens no watch at all (the 20 are held on a
/// lease of 450 ms, watched at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_watches_share_one_stream_and_are_taken_back_at_release() {
    const HELD: u64 = 20;
    // A member of this test's own: its gauges are this test's alone.
    let member = EtcdMember::start();
    let port = member.client_port;
    let url = member.url("mux");
    let client = LockClient::connect(&url).await.unwrap();
    let brief = client
        .lock("brief")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(watchers(port), 0, "a lock held for a moment is not watched");
    brief.release().await.unwrap();
    let mut guards = Vec::new();
    for i in 0..HELD {
        let lock = client.lock(format!("held:{i}"));
        guards.push(
            lock.lease(Duration::from_millis(450))
                .acquire()
                .await
                .unwrap(),
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || async { watchers(port) == HELD }).await,
        "{} watchers for {HELD} held locks",
        watchers(port)
    );
    assert_eq!(watch_streams(port), 1, "one watch stream for the client");

    // A waiter of the same client watches the holder's key on that stream too.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("held:0")
                .lease(Duration::from_millis(450))
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            watchers(port) == HELD + 1
        })
        .await,
        "{} watchers with a waiter",
        watchers(port)
    );
    assert_eq!(watch_streams(port), 1);

    // Released, each watch is cancelled on the stream; the waiter gets the lock (and its own
    // loss watch) as the first holder's key goes.
    for guard in guards.drain(..) {
        guard.release().await.unwrap();
    }
    let second = waiting.await.unwrap().expect("the waiter gets the lock");
    assert!(
        eventually(Duration::from_secs(5), || async { watchers(port) == 1 }).await,
        "{} watchers with one lock held",
        watchers(port)
    );
    second.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async { watchers(port) == 0 }).await,
        "{} watchers left after every release",
        watchers(port)
    );
    assert_eq!(
        watch_streams(port),
        1,
        "the stream stays while the client lives"
    );
    drop(client);
    assert!(
        eventually(Duration::from_secs(5), || async {
            watch_streams(port) == 0
        })
        .await,
        "{} watch streams left after the client went",
        watch_streams(port)
    );
}

/// Six clients (to etcd: six processes) queue for a held lock one after another and are
/// served in the order they arrived. Each waiter watches only the key before its own — the
/// member serves one watcher per waiter plus the holder's watch on its own key, not one per
/// waiter per key — and no watcher is left after the releases.
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
    // A lease of 450 ms: the holder's own key is watched at once (see above).
    let lease = Duration::from_millis(450);
    let guard = holder.lock("fair").lease(lease).acquire().await.unwrap();
    let port = member.client_port;
    let each_watches_one_key = async {
        let expected = WAITERS as u64 + 1;
        assert!(
            eventually(Duration::from_secs(5), || async {
                watchers(port) == expected
            })
            .await,
            "{} watchers for {WAITERS} waiters and one holder",
            watchers(port)
        );
    };
    let in_line = || async { etcd.keys(&queue).await.len() };
    support::queue::served_in_arrival_order(
        &url,
        "fair",
        guard,
        WAITERS,
        in_line,
        each_watches_one_key,
    )
    .await;
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
    support::queue::a_cancelled_waiter_leaves_the_line(&fixture.url(), "cancel", in_line).await;
}

/// An acquisition sent to a member that is down, hung or just restarting gives up at its
/// response timeout, but etcd may still apply its transaction later — after the release that
/// gave the attempt's place back deleted nothing, and after the retry with a new token took
/// the lock and released it. Whatever order the member applies them in, nothing is left in
/// the queue afterwards (a key put late, on the lease this client keeps alive, would hold the
/// lock for as long as the client runs), and the lock is free for another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_applied_after_its_attempt_gave_up_leaves_nothing_behind() {
    let mut member = EtcdMember::start();
    let url = member.url("late");
    let client = LockClient::builder(&url)
        .response_timeout(ms(300))
        .build()
        .await
        .unwrap();
    for round in 0..4 {
        let name = format!("late:{round}");
        let queue = format!(
            "late/{}",
            distlock::__private::testing::etcd_queue(&format!("lock:{name}"))
        );
        // Hung, then dead, then back with its data: the attempts meanwhile time out.
        member.pause();
        let acquiring = {
            let (client, name) = (client.clone(), name.clone());
            tokio::spawn(async move { client.lock(name.as_str()).wait(ms(10_000)).acquire().await })
        };
        tokio::time::sleep(ms(100 + 150 * round)).await;
        member.kill();
        tokio::task::block_in_place(|| member.restart());
        let guard = acquiring
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("round {round}: the lock once the member is back: {err}"));
        guard.release().await.unwrap();
        let etcd = distlock::__private::testing::EtcdInspector::new(&format!(
            "127.0.0.1:{}",
            member.client_port
        ));
        // Any transaction held back is applied within this.
        tokio::time::sleep(ms(1_500)).await;
        assert!(
            eventually(Duration::from_secs(5), || async {
                etcd.keys(&queue).await.is_empty()
            })
            .await,
            "round {round}: left in the queue: {:?}",
            etcd.keys(&queue).await
        );
        let other = LockClient::connect(&url).await.unwrap();
        let guard = other
            .lock(name.as_str())
            .wait(ms(0))
            .acquire()
            .await
            .unwrap_or_else(|err| panic!("round {round}: the lock is free: {err}"));
        guard.release().await.unwrap();
    }
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

/// Several plain locks in one transaction: a free set's keys are all created at one revision
/// (taken one by one they would have three), which is each key's fencing token; a set with a
/// busy key writes nothing; every key is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_set_is_one_transaction_and_a_busy_set_writes_nothing() {
    let fixture = EtcdFixture::new();
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let set = client
        .lock_all(["set:c", "set:a", "set:b"])
        .acquire()
        .await
        .unwrap();
    let mut revisions = Vec::new();
    for name in ["lock:set:a", "lock:set:b", "lock:set:c"] {
        revisions.push(fixture.holder_key(name).await.expect(name).create_revision);
    }
    assert!(
        revisions.iter().all(|&r| r == revisions[0]),
        "created at {revisions:?}: not one transaction"
    );
    assert_eq!(
        set.fencing_tokens().collect::<Vec<_>>(),
        [revisions[0] as u64; 3]
    );

    let other = fixture.client().await;
    let busy = other
        .lock_all(["set:z", "set:b"])
        .try_acquire()
        .await
        .unwrap();
    assert!(busy.is_none());
    assert!(
        fixture.holder_key("lock:set:z").await.is_none(),
        "a busy set wrote"
    );
    // Waiting, it goes key by key: it gets `set:b` once the set is released.
    let waiting = tokio::spawn(async move {
        other
            .lock_all(["set:z", "set:b"])
            .wait(Duration::from_secs(10))
            .acquire()
            .await
    });
    tokio::time::sleep(ms(200)).await;
    set.release().await.unwrap();
    let second = waiting.await.unwrap().expect("the set once it was free");
    assert_eq!(second.keys().collect::<Vec<_>>(), ["set:b", "set:z"]);
    second.release().await.unwrap();
    for name in ["lock:set:a", "lock:set:b", "lock:set:c", "lock:set:z"] {
        assert!(
            fixture.holder_key(name).await.is_none(),
            "{name} left behind"
        );
    }
}

/// A client that takes a lock again and again puts one key again and again, named by its lease
/// as etcd's own mutex names its key, not a key per acquisition: etcd keeps every deleted key
/// in its index until the cluster is compacted, and each look at the queue walks past them.
/// Each acquisition still has its own owner token (in the value) and fencing token (the key's
/// create revision). Two holds at once in one client (two readers) take two keys. A holder
/// that releases and asks again at once goes behind a waiter of another client, under that
/// same key name: the waiter, which watched the key's first life, is granted first and not held
/// up by its second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_again_puts_the_same_key_and_a_waiter_still_goes_first() {
    let fixture = EtcdFixture::new();
    let client = fixture.builder().fencing(true).build().await.unwrap();
    let (mut names, mut tokens, mut fences) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..4 {
        let guard = client.lock("again").acquire().await.unwrap();
        let key = fixture.holder_key("lock:again").await.expect("held");
        names.push(key.key.clone());
        tokens.push(fixture.holder("lock:again").await.expect("a token"));
        fences.push(guard.fencing_token().expect("fencing"));
        assert_eq!(guard.fencing_token(), Some(key.create_revision as u64));
        guard.release().await.unwrap();
    }
    names.dedup();
    assert_eq!(names.len(), 1, "one key name per lease: {names:?}");
    tokens.sort();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        4,
        "an owner token per acquisition: {tokens:?}"
    );
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");

    let one = client.lock("two").read().acquire().await.unwrap();
    let two = client.lock("two").read().acquire().await.unwrap();
    let keys = fixture.etcd().keys(&fixture.queue("lock:two")).await;
    assert_eq!(keys.len(), 2, "two readers, two keys: {keys:?}");
    assert_ne!(keys[0].key, keys[1].key);
    one.release().await.unwrap();
    two.release().await.unwrap();

    // A holder, a waiter of another client, and the holder asking again right after its
    // release: same key name, a later place.
    let held = client.lock("line").acquire().await.unwrap();
    let first = fixture.holder_key("lock:line").await.expect("held");
    let other = fixture.client().await;
    let waiter = tokio::spawn(async move {
        let guard = other.lock("line").wait(ms(10_000)).acquire().await?;
        let granted = std::time::Instant::now();
        tokio::time::sleep(ms(300)).await;
        guard.release().await.map(|_| granted)
    });
    assert!(
        eventually(ms(5_000), || async {
            fixture.etcd().keys(&fixture.queue("lock:line")).await.len() == 2
        })
        .await,
        "the waiter is in line"
    );
    held.release().await.unwrap();
    let again = client
        .lock("line")
        .wait(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let regranted = std::time::Instant::now();
    let waiter_granted = waiter.await.unwrap().unwrap();
    assert!(
        waiter_granted < regranted,
        "the holder's new acquisition went before the waiter"
    );
    let second = fixture.holder_key("lock:line").await.expect("held again");
    assert_eq!(second.key, first.key, "the same key name");
    assert!(second.create_revision > first.create_revision);
    again.release().await.unwrap();
    for name in ["lock:again", "lock:two", "lock:line"] {
        assert!(
            fixture.etcd().keys(&fixture.queue(name)).await.is_empty(),
            "{name} left behind"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_with_an_error_that_names_the_cause() {
    let nobody = format!("etcd://127.0.0.1:{}/x", support::free_port());
    support::nobody_listening_fails_within_the_connect_timeout(&nobody, "etcd").await;

    let member = EtcdMember::shared();
    for (url, says) in [
        (
            format!("{}?table=x", member.url("a")),
            "unknown parameters `table=x`",
        ),
        ("etcd://127.0.0.1:notaport/a".to_owned(), "not a port"),
        (
            "etcd://root:secret@127.0.0.1:notaport".to_owned(),
            "not a port",
        ),
        (
            "etcd://root@127.0.0.1:2379".to_owned(),
            "a user and a password",
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

/// An upgraded lock's release deletes its share's key and its upgrade's key in one
/// transaction: one revision (two deletions one after the other would make two), and both
/// keys gone; the writer queued behind the share is granted then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_locks_release_deletes_both_its_keys_at_one_revision() {
    let member = EtcdMember::start();
    let url = member.url("/up");
    let revision = || {
        let reply = http_call(member.client_port, "POST", "/v3/maintenance/status", "{}")
            .expect("status answers");
        let after = reply.split("\"revision\":\"").nth(1).expect(&reply);
        after[..after.find('"').unwrap()].parse::<i64>().unwrap()
    };
    let client = LockClient::connect(&url).await.unwrap();
    let other = LockClient::connect(&url).await.unwrap();
    let mut up = client.lock("k").upgradable().acquire().await.unwrap();
    up.upgrade().await.unwrap();
    let writer = tokio::spawn(async move {
        let guard = other.lock("k").wait(ms(10_000)).acquire().await;
        (guard, other)
    });
    tokio::time::sleep(ms(300)).await;
    assert!(
        !writer.is_finished(),
        "a writer got in beside the upgraded lock"
    );
    let before = revision();
    up.release().await.unwrap();
    let (granted, other) = tokio::time::timeout(ms(5_000), writer)
        .await
        .expect("the queued writer is granted after the release")
        .unwrap();
    // The writer's own key was put before the release: only the release's deletions count.
    assert_eq!(
        revision(),
        before + 1,
        "the two keys were deleted one by one"
    );
    let shown = other.inspect("k").await.unwrap().expect("the writer holds");
    assert!(shown.readers.is_empty(), "the share is gone");
    granted.unwrap().release().await.unwrap();
    assert_eq!(other.inspect("k").await.unwrap(), None);
}

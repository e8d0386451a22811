//! The conformance suite: every behaviour a backend must have, written once and run against
//! every backend (`memory://`, one `redis-server`, Redlock over three independent servers, a
//! three-master Redis Cluster, and a PostgreSQL lock table). A new backend adds a
//! [`Fixture`] and one line to the `conformance!` invocation at the bottom.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::{Feature, LockClient, LockError};
#[cfg(feature = "etcd")]
use support::fixture::EtcdFixture;
#[cfg(feature = "nats")]
use support::fixture::NatsFixture;
#[cfg(feature = "zookeeper")]
use support::fixture::ZookeeperFixture;
#[cfg(feature = "postgres")]
use support::fixture::{AdvisoryFixture, PostgresFixture};
use support::fixture::{
    ClusterFixture, Fixture, MemoryFixture, RedisFixture, RedlockFixture, SentinelFixture,
};
#[cfg(feature = "mysql")]
use support::fixture::{MysqlFixture, NamedFixture};
use support::helper::{TRY_ONCE_LEASE, try_once, wait_in_line};
use support::{eventually, history};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 64 tasks spread over 8 independent clients (8 owners contending at the store, each with
/// its own connections, as 8 processes would be) do a read-modify-write on shared state under
/// the lock, with a yield between the read and the write; without exclusion updates are lost
/// and the count comes out short. (On one client its tasks queue inside it, and the store saw
/// one contender at a time.)
pub async fn mutual_exclusion_under_contention(fixture: &dyn Fixture) {
    const CLIENTS: u64 = 8;
    const TASKS_PER_CLIENT: u64 = 8;
    const ROUNDS: u64 = 4;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    // Which client held the lock last: a grant to another client is a hand-over between
    // owners that only the store arbitrated.
    let last_client = Arc::new(AtomicU64::new(u64::MAX));
    let crossings = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = fixture.client().await;
        for _ in 0..TASKS_PER_CLIENT {
            let (client, counter, inside) = (client.clone(), counter.clone(), inside.clone());
            let (last_client, crossings) = (last_client.clone(), crossings.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = client
                        .lock("counter")
                        .lease(Duration::from_secs(10))
                        .wait(Duration::from_secs(120))
                        .acquire()
                        .await
                        .expect("acquire under contention");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    if last_client.swap(c, Ordering::SeqCst) != c {
                        crossings.fetch_add(1, Ordering::SeqCst);
                    }
                    let read = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(read + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("worker task");
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        CLIENTS * TASKS_PER_CLIENT * ROUNDS
    );
    // Every client held the lock at least once, each time after another client had it.
    assert!(
        crossings.load(Ordering::SeqCst) >= CLIENTS,
        "the lock passed between clients only {} times",
        crossings.load(Ordering::SeqCst)
    );
    assert_eq!(
        fixture.holder("lock:counter").await,
        None,
        "key left behind"
    );
}

/// Acquire stores the owner token under `<prefix><key>` with a TTL of at most the lease;
/// release deletes it.
pub async fn acquire_stores_a_token_with_a_ttl_and_release_deletes_it(fixture: &dyn Fixture) {
    let client = fixture.builder().prefix("app:").build().await.unwrap();
    let guard = client
        .lock("order:42")
        .lease(ms(5_000))
        .acquire()
        .await
        .unwrap();
    let token = fixture
        .holder("app:order:42")
        .await
        .expect("lock key present");
    // `<host>:<pid>:<unix ms>:<128 random bits in hex>`: names this process.
    let random = token.rsplit(':').next().unwrap_or_default();
    assert!(
        random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit()),
        "owner token ends in 128 random bits in hex, got {token:?}"
    );
    let holder = distlock::Holder::from_token(&token).expect("the token names its holder");
    assert_eq!(holder.pid, std::process::id(), "{token:?}");
    let ttl = fixture.ttl("app:order:42").await.expect("lock has a TTL");
    assert!(ttl <= ms(5_000) && ttl > ms(4_000), "ttl {ttl:?}");
    guard.release().await.unwrap();
    assert_eq!(fixture.holder("app:order:42").await, None);
}

/// `close()`: every lock still held through the client is given back at once (its guard told
/// it is lost, its release then asking the store nothing), a dropped guard's background
/// release is awaited, and later acquisitions through it are refused, writing nothing; another
/// client takes both keys at once, far inside their lease.
pub async fn close_gives_back_what_the_client_holds(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let lease = ms(30_000);
    let held = client
        .lock("closing:held")
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let dropped = client
        .lock("closing:dropped")
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    assert!(fixture.anything_at("lock:closing:held").await);
    drop(dropped); // given back in the background
    client.clone().close().await; // any clone closes the client
    assert!(
        !fixture.anything_at("lock:closing:held").await,
        "close gave back the lock its guard still held"
    );
    assert!(
        !fixture.anything_at("lock:closing:dropped").await,
        "close awaited the dropped guard's release"
    );
    assert!(held.is_lost(), "the holder is told its lock is gone");
    match held.release().await {
        Err(error) if error.is_lost() => {}
        other => panic!("a release after close: expected Lost, got {other:?}"),
    }
    match client.lock("closing:later").wait(ms(0)).acquire().await {
        Err(LockError::Config(message)) => assert!(
            message.contains("`closing:later`") && message.contains("closed"),
            "{message}"
        ),
        other => panic!("an acquisition after close: expected Config, got {other:?}"),
    }
    assert!(!fixture.anything_at("lock:closing:later").await);
    let other = fixture.client().await;
    for key in ["closing:held", "closing:dropped"] {
        let guard = other.lock(key).wait(ms(0)).acquire().await;
        let guard = guard.unwrap_or_else(|e| panic!("`{key}` still taken after close: {e}"));
        guard.release().await.unwrap();
    }
    client.close().await; // twice: harmless
}

/// `check()` (what `distlock check` prints): every check passes on a store as the services use
/// it — the server and its version, the round trip, what it serves, the store's own settings,
/// and a lock taken, read and given back — and that lock is gone afterwards.
pub async fn check_passes_and_leaves_nothing_behind(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let checkup = client.check().await;
    assert!(checkup.passed(), "{checkup:#?}");
    let checks: Vec<&str> = checkup.findings.iter().map(|f| f.check).collect();
    for check in ["server", "round trip", "kinds", "lock"] {
        assert!(checks.contains(&check), "no `{check}` in {checks:?}");
    }
    // Where the server judges leases by its own clock and tells its time, the clock is read
    // (the table modes of the SQL stores, every Redis deployment, ZooKeeper by a node's
    // creation time); etcd says why it compares none. A PostgreSQL table is checked for a
    // transaction pooler the URL does not declare.
    let url = fixture.url();
    let table_mode = !url.contains("mode=advisory") && !url.contains("mode=named");
    let starts = |schemes: &[&str]| schemes.iter().any(|scheme| url.starts_with(scheme));
    let coordinator = starts(&["zk", "etcd"]);
    let judged_by_server = starts(&["redis", "rediss", "postgres", "mysql"]) && table_mode;
    assert_eq!(
        checks.contains(&"clock"),
        judged_by_server || coordinator,
        "{url}: {checks:?}"
    );
    // The same stores say who the client is and whether its connection is encrypted.
    assert_eq!(
        checks.contains(&"identity"),
        judged_by_server || coordinator,
        "{url}: {checks:?}"
    );
    if judged_by_server || coordinator {
        let identity = checkup
            .findings
            .iter()
            .find(|f| f.check == "identity")
            .unwrap();
        assert!(identity.found.contains("logged in"), "{identity:?}");
        let tls = ["rediss", "sslmode=verify-full", "ssl-mode=VERIFY_IDENTITY"]
            .iter()
            .any(|asked| url.contains(asked))
            || starts(&["zks", "etcds"]);
        let said = if tls { "over TLS" } else { "in plain text" };
        assert!(identity.found.contains(said), "{url}: {identity:?}");
    }
    if starts(&["zk"]) {
        let clock = checkup
            .findings
            .iter()
            .find(|f| f.check == "clock")
            .unwrap();
        assert!(clock.found.contains("from this host's"), "{clock:?}");
    }
    // ZooKeeper names the chroot's ACL; etcd with a user names its roles' key ranges.
    assert_eq!(
        checks.contains(&"acl"),
        starts(&["zk"]),
        "{url}: {checks:?}"
    );
    if starts(&["etcd"]) {
        assert_eq!(
            checks.contains(&"role"),
            url.contains('@'),
            "{url}: {checks:?}"
        );
    }
    assert_eq!(
        checks.contains(&"pooler"),
        url.starts_with("postgres") && table_mode,
        "{url}: {checks:?}"
    );
    let lock = checkup.findings.iter().find(|f| f.check == "lock").unwrap();
    let key = lock
        .found
        .split('`')
        .nth(1)
        .expect("the lock's key is named");
    assert!(key.starts_with(distlock::admin::CHECK_KEY_PREFIX), "{key}");
    assert!(
        !fixture.anything_at(&format!("lock:{key}")).await,
        "{key} left behind"
    );
}

/// A's lease expires, B acquires; A's release reports "not held" and B's lock is intact.
pub async fn a_stale_owner_cannot_release_the_new_owners_lock(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let lease = ms(500);
    let a = client
        .lock("stale")
        .lease(lease)
        .renew(false)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(lease + ms(50)).await;
    assert!(a.is_lost(), "an unrenewed lease past its end is lost");
    // Granted once the store has let A's lock go: at once where it expires it (Redis, SQL);
    // where the store keeps it alive (ZooKeeper, etcd) when A's client deletes it, which a busy
    // machine may run late.
    let b = client
        .lock("stale")
        .lease(ms(5_000))
        .wait(ms(5_000))
        .acquire()
        .await
        .unwrap();
    let b_token = fixture.holder("lock:stale").await.expect("B holds it");
    let err = a.release().await.expect_err("A no longer holds the lock");
    assert!(
        matches!(&err, LockError::Lost { key } if key == "stale"),
        "{err}"
    );
    assert_eq!(
        fixture.holder("lock:stale").await,
        Some(b_token),
        "B's lock must be intact"
    );
    assert!(!b.is_lost());
    b.release().await.unwrap();
}

/// A's watchdog keeps running after A lost the lock to B: it must not extend B's lease.
pub async fn a_stale_owner_cannot_renew_the_new_owners_lock(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let a = client
        .lock("renew-stale")
        .lease(ms(300))
        .acquire()
        .await
        .unwrap();
    fixture.delete("lock:renew-stale").await;
    let b = client
        .lock("renew-stale")
        .lease(ms(3_000))
        .renew(false)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    let b_token = fixture.holder("lock:renew-stale").await.unwrap();
    // Let A's watchdog try (it renews every 100 ms).
    tokio::time::sleep(ms(350)).await;
    assert!(a.is_lost());
    assert_eq!(fixture.holder("lock:renew-stale").await, Some(b_token));
    let ttl = fixture.ttl("lock:renew-stale").await.unwrap();
    assert!(
        ttl > ms(1_000) && ttl <= ms(2_700),
        "B's TTL must run down untouched by A's renewals (A would set 300 ms): {ttl:?}"
    );
    drop(a);
    b.release().await.unwrap();
}

/// With a 1 s lease the lock is held for 5 s (5 leases): the key stays ours, others are
/// refused throughout, and the guard never reports lost. (A 300 ms lease left a renewal too
/// little room on a busy 2-core machine: ZooKeeper over TLS lost it once in a fresh clone's
/// run, with the doc tests compiling beside it.)
pub async fn renewal_keeps_a_lock_held_for_five_leases(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let guard = client
        .lock("long")
        .lease(ms(1_000))
        .acquire()
        .await
        .unwrap();
    let token = fixture.holder("lock:long").await.unwrap();
    let started = Instant::now();
    while started.elapsed() < ms(5_000) {
        assert_eq!(fixture.holder("lock:long").await.as_ref(), Some(&token));
        assert!(!guard.is_lost(), "lost after {:?}", started.elapsed());
        let other = client.lock("long").wait(Duration::ZERO).acquire().await;
        assert!(matches!(other, Err(LockError::Busy { .. })), "{other:?}");
        tokio::time::sleep(ms(50)).await;
    }
    guard.release().await.expect("still held after 5 leases");
    assert_eq!(fixture.holder("lock:long").await, None);
}

/// An upgradable read coexists with plain readers and keeps writers and other upgradable
/// readers out; its upgrade waits for the readers to leave (none joins meanwhile), is woken by
/// the last one's release, and holds the key as its writer with a new fencing token above
/// every earlier one — renewed as the writer from then on — while a writer that queued before
/// the upgrade comes after it. Stores without upgradable reads refuse them, writing nothing.
pub async fn an_upgradable_read_upgrades_without_letting_a_writer_in(fixture: &dyn Fixture) {
    use distlock::LockMode;
    let one = fixture.client().await;
    let two = fixture.client().await;
    // An earlier writer's fencing token, which the upgrade's must exceed.
    let earlier = one.lock("up").fencing(true).acquire().await.unwrap();
    let earlier_fence = earlier.fencing_token().unwrap();
    earlier.release().await.unwrap();

    // A 2 s lease: renewed every 667 ms, so a renewal, and the release queued behind it, may
    // wait 1.3 s for the store before the lease runs out. With 1 s (655 ms of slack) a stall
    // of the shared PgBouncer kept the release past the row's expiry, and it was rightly
    // told `Lost`.
    let mut up = one
        .lock("up")
        .upgradable()
        .lease(ms(2_000))
        .wait(ms(10_000))
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    assert_eq!(up.mode(), LockMode::Upgradable);
    let reader = two
        .lock("up")
        .read()
        .acquire()
        .await
        .expect("a plain reader joins");
    assert!(
        two.lock("up")
            .upgradable()
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a second upgradable read was granted"
    );
    assert!(
        two.lock("up").try_acquire().await.unwrap().is_none(),
        "a writer was granted beside an upgradable read"
    );
    // A writer that queues before the upgrade.
    let writer = tokio::spawn({
        let two = two.clone();
        async move {
            let guard = two
                .lock("up")
                .fencing(true)
                .wait(ms(20_000))
                .acquire()
                .await;
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(ms(200)).await;
    let upgrading = tokio::spawn(async move {
        let upgraded = up.upgrade().await;
        (up, upgraded, Instant::now())
    });
    tokio::time::sleep(ms(300)).await;
    assert!(
        !upgrading.is_finished(),
        "upgraded while a plain reader held the key"
    );
    assert!(
        two.lock("up").read().try_acquire().await.unwrap().is_none(),
        "a reader joined while the upgrade waited"
    );
    let released_at = Instant::now();
    reader.release().await.unwrap();
    let (up, upgraded, upgraded_at) = tokio::time::timeout(ms(5_000), upgrading)
        .await
        .expect("the upgrade ends once the reader left")
        .unwrap();
    upgraded.expect("upgraded");
    let woken_after = upgraded_at - released_at;
    assert!(
        woken_after < ms(1_000),
        "upgraded {woken_after:?} after the last reader left: not woken by its release"
    );
    assert_eq!(up.mode(), LockMode::Write);
    let fence = up.fencing_token().expect("a fencing token");
    assert!(
        fence > earlier_fence,
        "upgrade's token {fence} ≤ {earlier_fence}"
    );
    let token = distlock::__private::testing::owner_token(&up).to_owned();
    assert_eq!(
        fixture.holder("lock:up").await.as_deref(),
        Some(token.as_str())
    );
    // Past the lease: renewed as the writer it now is.
    tokio::time::sleep(ms(2_500)).await;
    assert!(!up.is_lost(), "the upgraded lock was not renewed");
    assert_eq!(
        fixture.holder("lock:up").await.as_deref(),
        Some(token.as_str())
    );
    assert!(
        !writer.is_finished(),
        "the queued writer got in beside the upgraded lock"
    );
    up.release().await.unwrap();
    let (granted, _) = tokio::time::timeout(ms(5_000), writer)
        .await
        .expect("the writer is granted after the upgraded lock's release")
        .unwrap();
    let granted = granted.expect("the queued writer");
    assert!(granted.fencing_token().unwrap() > fence);
    granted.release().await.unwrap();
    assert!(
        eventually(ms(2_000), || async {
            !fixture.anything_at("lock:up").await
        })
        .await,
        "lock:up left behind"
    );
}

/// A plain reader that joins behind a waiting upgradable request holds the key (readers wait
/// for writers only), and an upgrade waits for it: the queue stores once upgraded past it (the
/// history checker found a writer beside such a reader). The release of an upgradable read
/// wakes the next upgradable request, upgraded or not.
pub async fn an_upgrade_waits_for_a_reader_behind_a_waiting_upgradable_request(
    fixture: &dyn Fixture,
) {
    let one = fixture.client().await;
    let two = fixture.client().await;
    let three = fixture.client().await;
    let mut up = one
        .lock("behind")
        .upgradable()
        .wait(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let second = waiting_upgradable(two, "behind");
    tokio::time::sleep(ms(200)).await;
    assert!(
        !second.is_finished(),
        "a second upgradable read was granted"
    );
    let reader = tokio::time::timeout(ms(5_000), three.lock("behind").read().acquire())
        .await
        .expect("a plain reader joins beside a waiting upgradable request")
        .unwrap();
    let upgrading = tokio::spawn(async move {
        let upgraded = up.upgrade().await;
        (up, upgraded)
    });
    tokio::time::sleep(ms(300)).await;
    assert!(
        !upgrading.is_finished(),
        "upgraded while a plain reader held the key"
    );
    reader.release().await.unwrap();
    let (up, upgraded) = tokio::time::timeout(ms(5_000), upgrading)
        .await
        .expect("the upgrade ends once the reader left")
        .unwrap();
    upgraded.expect("upgraded");
    assert!(
        !second.is_finished(),
        "the waiting upgradable request got in beside the upgraded lock"
    );
    let released_at = Instant::now();
    up.release().await.unwrap();
    let (granted, granted_at) = tokio::time::timeout(ms(5_000), second)
        .await
        .expect("the waiting upgradable request is granted after the release")
        .unwrap();
    assert!(granted_at >= released_at);
    let granted = granted.expect("the second upgradable read");
    // An upgradable read released as it was (never upgraded, alone) wakes the next
    // upgradable request, which leaves no mark on the key.
    let third = waiting_upgradable(one, "behind");
    tokio::time::sleep(ms(300)).await;
    assert!(!third.is_finished(), "a second upgradable read was granted");
    let released_at = Instant::now();
    granted.release().await.unwrap();
    let (third, third_at) = tokio::time::timeout(ms(5_000), third)
        .await
        .expect("the third upgradable request is granted after the release")
        .unwrap();
    assert!(
        third_at - released_at < ms(1_000),
        "granted {:?} after the release: not woken by it",
        third_at - released_at
    );
    third.unwrap().release().await.unwrap();
    assert!(
        eventually(ms(2_000), || async {
            !fixture.anything_at("lock:behind").await
        })
        .await,
        "lock:behind left behind"
    );
}

/// An upgradable request of `key` by `client` that waits up to 20 s, in a task of its own:
/// its guard, and when it was granted.
fn waiting_upgradable(
    client: LockClient,
    key: &'static str,
) -> tokio::task::JoinHandle<(Result<distlock::LockGuard, LockError>, Instant)> {
    tokio::spawn(async move {
        let guard = client
            .lock(key)
            .upgradable()
            .wait(ms(20_000))
            .acquire()
            .await;
        (guard, Instant::now())
    })
}

/// An upgrade given up — its `wait` over, or its future dropped — leaves the upgradable read
/// as it was and lets new readers in again at once; a plain read cannot be upgraded; an
/// upgradable read whose lease ran out is lost, not upgraded.
pub async fn a_given_up_upgrade_leaves_the_upgradable_read_as_it_was(fixture: &dyn Fixture) {
    use distlock::LockMode;
    let one = fixture.client().await;
    let two = fixture.client().await;
    let mut up = one
        .lock("given-up")
        .upgradable()
        .wait(ms(300))
        .acquire()
        .await
        .unwrap();
    let reader = two.lock("given-up").read().acquire().await.unwrap();
    let started = Instant::now();
    let err = up.upgrade().await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(
        started.elapsed() >= ms(300),
        "gave up after {:?}",
        started.elapsed()
    );
    assert_eq!(up.mode(), LockMode::Upgradable);
    let joined = two
        .lock("given-up")
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("a reader joins at once after the upgrade gave up");
    joined.release().await.unwrap();
    // Dropped mid-wait: its mark is taken back in the background.
    assert!(tokio::time::timeout(ms(200), up.upgrade()).await.is_err());
    assert!(
        eventually(ms(1_000), || async {
            match two.lock("given-up").read().try_acquire().await.unwrap() {
                Some(guard) => {
                    guard.release().await.unwrap();
                    true
                }
                None => false,
            }
        })
        .await,
        "readers are still kept out after the upgrade was dropped"
    );
    assert_eq!(up.mode(), LockMode::Upgradable);
    assert!(!up.is_lost());
    assert!(
        two.lock("given-up").try_acquire().await.unwrap().is_none(),
        "a writer got in beside the upgradable read"
    );
    reader.release().await.unwrap();
    // Alone now: the upgrade goes through.
    up.upgrade().await.expect("upgraded once alone");
    assert_eq!(up.mode(), LockMode::Write);
    up.upgrade()
        .await
        .expect("upgrading an upgraded guard does nothing");
    up.release().await.unwrap();

    let mut plain = two.lock("given-up").read().acquire().await.unwrap();
    let err = plain.upgrade().await.unwrap_err();
    assert!(
        matches!(err, LockError::Config(_)) && err.to_string().contains("upgradable"),
        "{err}"
    );
    plain.release().await.unwrap();

    let mut unrenewed = one
        .lock("given-up")
        .upgradable()
        .lease(ms(200))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(400)).await;
    let err = unrenewed.upgrade().await.unwrap_err();
    assert!(matches!(err, LockError::Lost { .. }), "{err}");
    // Nobody holds the key: neither a writer (the lost share was not upgraded) nor a reader.
    // (A lock table may keep the expired row until the next acquisition takes it over.)
    assert!(
        eventually(ms(2_000), || async {
            fixture.holder("lock:given-up").await.is_none()
                && fixture.readers("lock:given-up").await.is_empty()
        })
        .await,
        "lock:given-up still held"
    );
}

/// Without renewal the lease runs out: the key is gone and the guard says lost.
pub async fn without_renewal_the_lease_ends_and_the_guard_says_lost(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    // 500 ms: the guard must still be held when `acquire` returns, which on a loaded host
    // (two CPU hogs beside twelve tests at once) took more than the 100 ms this lease was.
    let guard = client
        .lock("short")
        .lease(ms(500))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    assert!(!guard.is_lost());
    tokio::time::timeout(ms(2_000), guard.lost())
        .await
        .expect("lost() resolves when the lease ends");
    assert!(guard.is_lost());
    assert!(
        eventually(ms(500), || async {
            fixture.holder("lock:short").await.is_none()
        })
        .await
    );
}

/// A deleted lock is reported lost within one renewal interval (lease/3 = 100 ms), by both
/// `is_lost()` and the `lost()` future.
pub async fn a_deleted_lock_is_reported_lost_within_one_renewal_interval(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let guard = client
        .lock("deleted")
        .lease(ms(300))
        .acquire()
        .await
        .unwrap();
    let lost = guard.lost();
    let deleting = Instant::now();
    fixture.delete("lock:deleted").await;
    let deleted_at = Instant::now();
    let delete_took = deleted_at - deleting;
    tokio::time::timeout(ms(1_000), lost)
        .await
        .expect("lost() resolves");
    let after = deleted_at.elapsed();
    let bound = loss_bound(&client, delete_took).await;
    assert!(
        after <= bound,
        "reported lost after {after:?} (bound {bound:?})"
    );
    assert!(guard.is_lost());
    let err = guard
        .release()
        .await
        .expect_err("a lost lock cannot be released");
    assert!(err.is_lost(), "{err}");
}

/// How soon a 300 ms lease's holder must be told its lock is gone: one renewal interval (100
/// ms), plus the renewal's round trip and scheduling slack on a busy machine. How long a round
/// trip on this path takes now (through a pooler, beside busy cores) is the longer of a lock +
/// release just after (two round trips) and `seen`, the test's own call to the store that
/// removed the lock (taken as long as the renewal's, which ran beside it).
async fn loss_bound(client: &LockClient, seen: Duration) -> Duration {
    let measured = Instant::now();
    client
        .lock("round-trip")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    ms(100) + ms(80) + measured.elapsed().max(seen)
}

/// An overwritten lock is reported lost within one renewal interval, and the new owner's
/// value is left alone.
pub async fn an_overwritten_lock_is_reported_lost_within_one_renewal_interval(
    fixture: &dyn Fixture,
) {
    let client = fixture.client().await;
    let guard = client
        .lock("overwritten")
        .lease(ms(300))
        .acquire()
        .await
        .unwrap();
    let overwriting = Instant::now();
    fixture
        .overwrite("lock:overwritten", "intruder", ms(10_000))
        .await;
    let overwritten_at = Instant::now();
    let overwrite_took = overwritten_at - overwriting;
    tokio::time::timeout(ms(1_000), guard.lost())
        .await
        .expect("lost() resolves");
    let after = overwritten_at.elapsed();
    let bound = loss_bound(&client, overwrite_took).await;
    assert!(
        after <= bound,
        "reported lost after {after:?} (bound {bound:?})"
    );
    assert!(guard.release().await.is_err());
    assert_eq!(
        fixture.holder("lock:overwritten").await.as_deref(),
        Some("intruder")
    );
    let ttl = fixture.ttl("lock:overwritten").await.unwrap();
    assert!(ttl > ms(9_000), "the intruder's TTL was touched: {ttl:?}");
}

/// A guard dropped without `release()` — plain drop, panic, cancelled future — leaves no key.
pub async fn a_dropped_guard_is_released_promptly(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let gone = |name: &'static str| async move {
        eventually(ms(500), || async { fixture.holder(name).await.is_none() }).await
    };

    let guard = client
        .lock("dropped")
        .lease(ms(30_000))
        .acquire()
        .await
        .unwrap();
    assert!(fixture.holder("lock:dropped").await.is_some());
    drop(guard);
    assert!(gone("lock:dropped").await, "plain drop");

    let panicking = client.clone();
    let task = tokio::spawn(async move {
        let _guard = panicking
            .lock("panicked")
            .lease(ms(30_000))
            .acquire()
            .await
            .unwrap();
        panic!("the guarded work panics");
    });
    assert!(task.await.is_err());
    assert!(gone("lock:panicked").await, "panic");

    let cancelled = client.clone();
    let work = async move {
        let _guard = cancelled
            .lock("cancelled")
            .lease(ms(30_000))
            .acquire()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
    };
    assert!(tokio::time::timeout(ms(100), work).await.is_err());
    assert!(gone("lock:cancelled").await, "cancellation");
}

/// An acquisition cancelled while its attempt is in flight (the caller's timeout fires after
/// the command went out) must not leave a lock behind that nobody holds.
pub async fn a_cancelled_acquisition_leaves_no_lock_behind(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    for _ in 0..50 {
        let attempt = client.lock("cancel").lease(ms(30_000)).acquire();
        if let Ok(Ok(guard)) = tokio::time::timeout(Duration::from_nanos(1), attempt).await {
            guard.release().await.unwrap();
        }
    }
    // The background releases run behind up to 50 cancelled attempts on a busy machine (a
    // MySQL pool of 4 connections under two CPU hogs once needed more than 1 s): the promise is
    // that the lock goes well before its 30 s lease would have freed it, so allow a third of it.
    assert!(
        eventually(ms(10_000), || async {
            fixture.holder("lock:cancel").await.is_none()
        })
        .await,
        "an orphaned lock with a 30 s lease was left behind"
    );
    // A cancelled attempt's place in a queue (a ZooKeeper node that holds nothing, so the
    // holder check above does not see it) is taken back by the same background cleanup: the
    // key is free within the same bound.
    let free = eventually(ms(10_000), || async {
        match client.lock("cancel").try_acquire().await.unwrap() {
            Some(guard) => {
                guard.release().await.unwrap();
                true
            }
            None => false,
        }
    })
    .await;
    assert!(free, "the key is free again");
}

/// A waiter is woken by the release, long before the holder's 10 s lease would run out.
pub async fn a_waiter_is_woken_by_the_release(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let holder = client
        .lock("wake")
        .lease(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let waiter_client = fixture.client().await;
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = waiter_client
            .lock("wake")
            .wait(ms(5_000))
            .acquire()
            .await
            .expect("woken by the release");
        (started.elapsed(), guard)
    });
    tokio::time::sleep(ms(200)).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (waited, guard) = waiter.await.unwrap();
    let after_release = released_at.elapsed();
    assert!(waited >= ms(190), "acquired while held: {waited:?}");
    // Unwoken, the waiter would sleep until the holder's 10 s lease ran out, and its 5 s wait
    // would end first: a grant within 1.5 s of the release came from it. (The bound was
    // 500 ms; Redlock over three TLS servers once took 664 ms on a loaded machine.)
    assert!(
        after_release < ms(1_500),
        "woken {after_release:?} after the release"
    );
    guard.release().await.unwrap();
}

/// Without a release (the holder stops renewing and never releases) a waiter still gets the
/// lock once the holder's lease runs out.
pub async fn a_waiter_retries_when_the_holders_lease_runs_out(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    // The lease runs from the grant, which lies between this instant and the holder's
    // `acquire` returning (a grant that waits for a replica's acknowledgement returns later).
    let requested = Instant::now();
    let _holder = client
        .lock("expire")
        .lease(ms(300))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let started = Instant::now();
    let guard = client
        .lock("expire")
        .wait(ms(3_000))
        .acquire()
        .await
        .unwrap();
    let (waited, since_request) = (started.elapsed(), requested.elapsed());
    assert!(
        since_request >= ms(250),
        "acquired before the lease ran out: {since_request:?} after the holder asked"
    );
    assert!(waited < ms(1_000), "retried late: {waited:?}");
    guard.release().await.unwrap();
}

/// `wait = 0` tries once and fails at once; `try_acquire` says `None`; the holder is untouched.
pub async fn wait_zero_tries_once(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let holder = client
        .lock("busy")
        .lease(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let token = fixture.holder("lock:busy").await;
    let started = Instant::now();
    let err = client
        .lock("busy")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(started.elapsed() < ms(200), "{:?}", started.elapsed());
    let message = err.to_string();
    assert!(err.is_busy() && !err.is_timeout(), "{err}");
    match err {
        LockError::Busy { key } => assert_eq!(key, "busy"),
        other => panic!("expected Busy, got {other}"),
    }
    // A try-once is told the lock is busy, not advised to fail fast (it did).
    assert!(
        message.contains("`busy` is busy") && !message.contains("fail fast"),
        "{message}"
    );
    assert!(client.lock("busy").try_acquire().await.unwrap().is_none());
    assert_eq!(fixture.holder("lock:busy").await, token);
    holder.release().await.unwrap();
    let free = client.lock("busy").try_acquire().await.unwrap();
    assert!(free.is_some());
}

/// `Timeout` reports how long it waited and names the key.
pub async fn timeout_reports_how_long_it_waited(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let holder = client
        .lock("slow")
        .lease(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let err = client
        .lock("slow")
        .wait(ms(300))
        .acquire()
        .await
        .unwrap_err();
    let LockError::Timeout {
        ref key,
        waited,
        wait,
    } = err
    else {
        panic!("expected Timeout, got {err}");
    };
    assert_eq!(key, "slow");
    assert_eq!(wait, ms(300));
    assert!(waited >= ms(300) && waited < ms(800), "waited {waited:?}");
    let message = err.to_string();
    assert!(
        message.contains("`slow`") && message.contains("raise `wait`"),
        "{message}"
    );
    holder.release().await.unwrap();
}

/// Fencing tokens strictly increase across successive holders, clients and contention.
/// A backend that cannot keep tokens monotonic (Redlock) refuses, at build and per request,
/// with an error that says why.
pub async fn fencing_tokens_increase(fixture: &dyn Fixture) {
    let a = fixture.builder().fencing(true).build().await.unwrap();
    let b = fixture.client().await;
    let last = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let client = if i % 2 == 0 { a.clone() } else { b.clone() };
        let last = last.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let guard = client
                    .lock("fenced")
                    .fencing(true)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .unwrap();
                let token = guard.fencing_token().expect("fencing asked for");
                let previous = last.swap(token, Ordering::SeqCst);
                assert!(token > previous, "token {token} after {previous}");
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    if fixture.fencing_consecutive() {
        assert_eq!(
            last.load(Ordering::SeqCst),
            32,
            "one increment per acquisition"
        );
    }
    let plain = b.lock("fenced").acquire().await.unwrap();
    assert_eq!(plain.fencing_token(), None, "no token unless asked for");
}

/// Two clients of one backend exclude each other; tasks of one client are separate owners.
pub async fn clients_and_tasks_are_separate_owners(fixture: &dyn Fixture) {
    let one = fixture.client().await;
    let two: LockClient = fixture.client().await;
    let held = one.lock("shared").await.unwrap(); // a request is a future itself
    assert!(two.lock("shared").try_acquire().await.unwrap().is_none());
    let same_client = one.clone();
    let other_task = tokio::spawn(async move { same_client.lock("shared").try_acquire().await });
    assert!(other_task.await.unwrap().unwrap().is_none());
    held.release().await.unwrap();
    assert!(two.lock("shared").try_acquire().await.unwrap().is_some());
}

/// Keys that cannot be a lock name are refused before anything is sent, with a reason that
/// names the problem, and the backend holds nothing afterwards.
pub async fn bad_keys_are_refused_and_nothing_is_written(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let huge = "k".repeat(1 << 20);
    let cases: [(&str, &str); 5] = [
        ("", "empty"),
        (&huge, "1048576 bytes"),
        ("order\u{0}1", "control character '\\0'"),
        ("order\n1", "control character '\\n'"),
        (&huge[..distlock::LockClient::MAX_KEY_LEN + 1], "1025 bytes"),
    ];
    for (key, reason) in cases {
        let started = Instant::now();
        let err = client.lock(key).acquire().await.unwrap_err();
        assert!(started.elapsed() < ms(100), "refused at once");
        let LockError::InvalidKey { .. } = err else {
            panic!("expected InvalidKey for {:.20?}, got {err}", key);
        };
        let message = err.to_string();
        assert!(message.contains(reason), "{reason}: {message}");
        assert!(
            message.len() < 600,
            "the key is shortened: {} bytes",
            message.len()
        );
        assert_eq!(fixture.holder(&format!("lock:{key}")).await, None);
    }
}

/// Keys with non-ASCII text or another backend's special characters (Redis Cluster hash-tag
/// braces, ZooKeeper path slashes, Redis glob characters) are ordinary keys: each is locked,
/// stored verbatim, kept apart from its neighbours, fenced, and released.
pub async fn unusual_keys_are_stored_verbatim(fixture: &dyn Fixture) {
    let client = fixture
        .builder()
        .fencing(fixture.supports(Feature::Fencing).await)
        .build()
        .await
        .unwrap();
    let longest = "é".repeat(distlock::LockClient::MAX_KEY_LEN / 2);
    let keys = [
        "ünïcødé/κλειδί:🔒",
        "{user}:1",
        "{user}:2",
        "}{",
        "/orders/42/..",
        "orders:*?[a-z]",
        "with space %s \\ \" '",
        longest.as_str(),
    ];
    let mut guards = Vec::new();
    for key in keys {
        let guard = client.lock(key).wait(Duration::ZERO).acquire().await;
        let guard = guard.unwrap_or_else(|err| panic!("{key:?}: {err}"));
        let token = distlock::__private::testing::owner_token(&guard).to_owned();
        assert_eq!(
            fixture.holder(&format!("lock:{key}")).await,
            Some(token),
            "{key:?}"
        );
        assert_eq!(
            guard.fencing_token().is_some(),
            fixture.supports(Feature::Fencing).await
        );
        guards.push(guard);
    }
    // Every key is its own lock: all are held at once, and each one is busy.
    for key in keys {
        assert!(
            client.lock(key).try_acquire().await.unwrap().is_none(),
            "{key:?}"
        );
    }
    for guard in guards {
        let key = guard.key().to_owned();
        guard.release().await.unwrap();
        assert_eq!(
            fixture.holder(&format!("lock:{key}")).await,
            None,
            "{key:?}"
        );
    }
}

/// Leases and waits at the edges of `Duration` through the manual API: a clear error for a
/// lease too short (zero, one nanosecond) or too long (`Duration::MAX`), and waits of one
/// nanosecond and `Duration::MAX` behave as a try and as "forever" — no panic, no hang.
pub async fn durations_at_the_edges(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    for (lease, says) in [
        (Duration::ZERO, "too short"),
        (Duration::from_nanos(1), "too short"),
        (Duration::MAX, "too long"),
        (LockClient::MAX_LEASE + Duration::from_nanos(1), "too long"),
    ] {
        let err = client
            .lock("edge")
            .lease(lease)
            .acquire()
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, LockError::Config(_)), "{lease:?}: {message}");
        assert!(
            message.contains(says) && message.contains("`edge`"),
            "{message}"
        );
        assert_eq!(fixture.holder("lock:edge").await, None);
    }
    let err = fixture
        .builder()
        .default_lease(Duration::MAX)
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("too long"), "{err}");

    // The longest lease is accepted, and its TTL is what was asked for.
    let guard = client
        .lock("edge")
        .lease(LockClient::MAX_LEASE)
        .acquire()
        .await
        .unwrap();
    let ttl = fixture.ttl("lock:edge").await.expect("a TTL");
    assert!(ttl > LockClient::MAX_LEASE - ms(60_000), "{ttl:?}");

    // wait = 1 ns on a busy lock: one try, then Timeout.
    let started = Instant::now();
    let err = client
        .lock("edge")
        .wait(Duration::from_nanos(1))
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() < ms(500));

    // wait = Duration::MAX on a busy lock: waits, and wins once the holder releases.
    let waiter = tokio::spawn({
        let client = client.clone();
        async move { client.lock("edge").wait(Duration::MAX).acquire().await }
    });
    tokio::time::sleep(ms(100)).await;
    assert!(!waiter.is_finished());
    guard.release().await.unwrap();
    let won = tokio::time::timeout(ms(5_000), waiter)
        .await
        .expect("no hang")
        .unwrap()
        .unwrap();
    won.release().await.unwrap();
    // … and on a free lock it takes the lock at once.
    let free = client
        .lock("edge")
        .wait(Duration::MAX)
        .acquire()
        .await
        .unwrap();
    free.release().await.unwrap();
    assert_eq!(fixture.holder("lock:edge").await, None);
}

/// Replies come 60–120 ms late (a congested network, an overloaded server): acquisitions that
/// may wait all succeed, a held lock is renewed past its lease, the recorded holds never
/// overlap, and nothing is left on the servers afterwards.
pub async fn a_slow_backend_still_grants_waiting_acquisitions(fixture: &dyn Fixture) {
    const CLIENTS: usize = 2;
    const TASKS: usize = 2;
    const ROUNDS: usize = 3;
    let slow = fixture.slowed(ms(60), ms(120)).await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = LockClient::connect(&slow.url)
            .await
            .expect("connects through the slow path");
        for t in 0..TASKS {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut holds = Vec::new();
                for _ in 0..ROUNDS {
                    let guard = client
                        .lock("slow")
                        .lease(Duration::from_secs(5))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .unwrap_or_else(|e| panic!("a waiting acquisition failed: {e}"));
                    let acquired_at = history::now_ns();
                    tokio::time::sleep(ms(5)).await;
                    let released_at = history::now_ns();
                    guard
                        .release()
                        .await
                        .expect("release through the slow path");
                    holds.push(history::Hold {
                        key: "slow".into(),
                        holder: format!("c{c}.t{t}"),
                        token: None,
                        acquired_at,
                        released_at,
                        read: false,
                        permits: None,
                    });
                }
                holds
            }));
        }
    }
    // Meanwhile a lock with a 1.5 s lease is held for 2.5 s: renewals through the slow path
    // keep it.
    let client = LockClient::connect(&slow.url).await.unwrap();
    let started = Instant::now();
    let held = client
        .lock("slow-renewed")
        .lease(ms(1_500))
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire through the slow path");
    let took = started.elapsed();
    assert!(took >= ms(60), "the path is not slow: acquired in {took:?}");
    tokio::time::sleep(ms(2_500)).await;
    // The store first, then the guard (see `store_then_guard`).
    let holder = fixture.holder("lock:slow-renewed").await;
    store_then_guard(&held, &holder, "renewal through a slow path: the lock");
    assert!(holder.is_some(), "the renewed lock is gone from the server");
    held.release().await.expect("release of the renewed lock");
    let mut holds = Vec::new();
    for task in tasks {
        holds.extend(task.await.expect("contending task"));
    }
    let summary = history::check(&holds).unwrap_or_else(|violation| panic!("{violation}"));
    assert_eq!(summary.holds, CLIENTS * TASKS * ROUNDS);
    for name in ["lock:slow", "lock:slow-renewed"] {
        assert!(
            eventually(Duration::from_secs(3), || async {
                !fixture.anything_at(name).await
            })
            .await,
            "{name} left on the servers"
        );
    }
}

/// A watch reports the locks held when it starts, then each acquisition, release and expiry
/// under its glob (nothing outside it), each with the token the server holds. Where the store
/// announces changes (memory, every Redis deployment, ZooKeeper, etcd, NATS) it follows them, and polls
/// only once an hour here: every event must then come from the store's announcement.
pub async fn a_watch_reports_each_change_as_the_store_announces_it(fixture: &dyn Fixture) {
    use distlock::admin::LockEvent;
    let url = fixture.url();
    let announces = [
        "memory:", "redis", "redlock", "zk://", "zks://", "etcd", "nats",
    ]
    .iter()
    .any(|scheme| url.starts_with(scheme));
    let client = fixture.client().await;
    let holder = fixture.client().await;
    let before = holder.lock("w:before").acquire().await.unwrap();
    let watch = client.watch("w:*").await;
    assert_eq!(watch.follows_store(), announces, "{url}");
    let mut watch = watch.poll(if announces { ms(3_600_000) } else { ms(50) });
    let mut next = async || {
        tokio::time::timeout(ms(10_000), watch.next())
            .await
            .expect("an event within 10 s")
            .expect("a listing")
    };
    let held = next().await;
    assert!(
        matches!(&held, LockEvent::Held(l) if l.key == "w:before"),
        "{held:?}"
    );
    assert_eq!(held.lock().token, fixture.holder("lock:w:before").await);

    let guard = holder.lock("w:1").acquire().await.unwrap();
    let _outside = holder.lock("x:1").acquire().await.unwrap();
    let acquired = next().await;
    assert!(
        matches!(&acquired, LockEvent::Acquired(l) if l.key == "w:1"),
        "{acquired:?}"
    );
    let token = fixture.holder("lock:w:1").await;
    assert!(token.is_some());
    assert_eq!(acquired.lock().token, token);

    guard.release().await.unwrap();
    let released = next().await;
    assert!(
        matches!(&released, LockEvent::Released(l) if l.key == "w:1"),
        "{released:?}"
    );
    assert_eq!(released.lock().token, token);
    assert_eq!(fixture.holder("lock:w:1").await, None);

    // Not renewed: gone when its lease runs out — an expiry where the listing showed the
    // lease; where the store keeps locks alive itself, the client deletes it then.
    let lapsing = holder
        .lock("w:2")
        .lease(ms(1_500))
        .renew(false)
        .acquire()
        .await
        .unwrap();
    let acquired = next().await;
    assert!(
        matches!(&acquired, LockEvent::Acquired(l) if l.key == "w:2"),
        "{acquired:?}"
    );
    let ended = next().await;
    assert_eq!(ended.lock().key, "w:2", "{ended:?}");
    // etcd and NATS list a TTL in whole seconds, and the client deletes the lock at the lease
    // it asked for, which may come before that TTL's end: either name is right there.
    let expected: &[&str] = match acquired.lock().ttl {
        None => &["released"],
        Some(_) if url.starts_with("etcd") || url.starts_with("nats") => &["expired", "released"],
        Some(_) => &["expired"],
    };
    assert!(expected.contains(&ended.name()), "{ended:?}");
    assert_eq!(fixture.holder("lock:w:2").await, None);
    drop(lapsing);

    // Readers: each one joining is an acquisition, each one leaving a release.
    if fixture.supports(Feature::ReadLocks).await {
        let first = holder.lock("w:r").read().acquire().await.unwrap();
        let joined = next().await;
        assert!(
            matches!(&joined, LockEvent::Acquired(l) if l.readers.len() == 1),
            "{joined:?}"
        );
        let second = client.lock("w:r").read().acquire().await.unwrap();
        let joined = next().await;
        assert!(
            matches!(&joined, LockEvent::Acquired(l) if l.readers.len() == 2),
            "{joined:?}"
        );
        first.release().await.unwrap();
        let left = next().await;
        assert!(
            matches!(&left, LockEvent::Released(l) if l.key == "w:r"),
            "{left:?}"
        );
        assert_eq!(fixture.readers("lock:w:r").await.len(), 1);
        second.release().await.unwrap();
        let left = next().await;
        assert!(
            matches!(&left, LockEvent::Released(l) if l.key == "w:r"),
            "{left:?}"
        );
        assert!(fixture.readers("lock:w:r").await.is_empty());
    }

    // An election's observer is woken the same way: each new leader, and nobody after the
    // last resigns, seen within a round trip or two, not at its next (hourly) poll.
    if fixture.supports(Feature::Fencing).await {
        use futures_util::StreamExt;
        let poll = if announces { ms(3_600_000) } else { ms(50) };
        let observed = client.election("w:elect").poll(poll).observe();
        tokio::pin!(observed);
        let mut seen = async || {
            tokio::time::timeout(ms(10_000), observed.next())
                .await
                .expect("a change of leader within 10 s")
                .expect("the stream goes on")
                .expect("a look at the leader")
        };
        assert_eq!(seen().await, None);
        let leading = holder.election("w:elect").campaign("w-a").await.unwrap();
        let leader = seen().await.expect("a leader");
        assert_eq!((leader.identity(), leader.term()), ("w-a", leading.term()));
        leading.resign().await.unwrap();
        assert_eq!(seen().await, None);
        assert!(!fixture.anything_at("lock:w:elect").await);
    }
    drop(before);
}

/// The admin API (what `distlock list`/`show` print): a held lock names this process, its
/// token, lease and fencing token; a listing finds exactly the keys its glob matches; a free
/// key shows nothing; the server answers a ping.
pub async fn the_admin_api_shows_who_holds_what(fixture: &dyn Fixture) {
    let client = fixture
        .builder()
        .fencing(fixture.supports(Feature::Fencing).await)
        .build()
        .await
        .unwrap();
    let one = client
        .lock("admin:1")
        .lease(ms(20_000))
        .acquire()
        .await
        .unwrap();
    let _two = client
        .lock("admin:2")
        .lease(ms(20_000))
        .acquire()
        .await
        .unwrap();
    let _other = client
        .lock("other:1")
        .lease(ms(20_000))
        .acquire()
        .await
        .unwrap();
    let info = client
        .inspect("admin:1")
        .await
        .unwrap()
        .expect("admin:1 is held");
    assert_eq!(info.key, "admin:1");
    let holder = info.holder.as_ref().expect("the holder is named");
    assert_eq!(holder.pid, std::process::id(), "{info:?}");
    let age = std::time::SystemTime::now()
        .duration_since(holder.since)
        .unwrap_or_default();
    assert!(age < ms(60_000), "held since {age:?}? {info:?}");
    if let Some(stored) = fixture.holder(&format!("lock:{}", "admin:1")).await {
        assert_eq!(info.token.as_deref(), Some(stored.as_str()), "{info:?}");
    }
    if let Some(ttl) = info.ttl {
        assert!(ttl <= ms(20_000) && ttl > ms(5_000), "{info:?}");
    }
    assert_eq!(info.fencing_token, one.fencing_token(), "{info:?}");
    let listed = client.list("admin:*", 100).await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["admin:1", "admin:2"]);
    assert_eq!(client.list("admin:?", 1).await.unwrap().len(), 1);
    assert_eq!(client.list("*", 100).await.unwrap().len(), 3);
    assert!(client.list("nothing*", 100).await.unwrap().is_empty());
    assert_eq!(client.inspect("admin:3").await.unwrap(), None);
    let ping = client.ping().await.unwrap();
    assert_eq!(ping.backend, client.backend_kind());
    assert!(!ping.version.is_empty());
}

/// A forced release deletes the lock whoever holds it, returns what it removed, lets a waiter
/// in well before the holder's lease would have ended, and the holder learns it lost the lock
/// (at its next renewal at the latest).
pub async fn a_forced_release_frees_the_lock_and_tells_the_holder(fixture: &dyn Fixture) {
    let admin = fixture.client().await;
    let lease = ms(6_000);
    let holder = fixture.client().await;
    let guard = holder
        .lock("admin:stuck")
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let waiter = fixture.client().await;
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock("admin:stuck")
            .lease(lease)
            .wait(ms(30_000))
            .acquire()
            .await;
        (guard, Instant::now())
    });
    tokio::time::sleep(ms(200)).await;
    let forced_at = Instant::now();
    let removed = admin
        .force_release("admin:stuck")
        .await
        .unwrap()
        .expect("it was held");
    assert_eq!(removed.key, "admin:stuck");
    assert_eq!(
        removed.holder.as_ref().map(|h| h.pid),
        Some(std::process::id())
    );
    let (granted, at) = waiting.await.unwrap();
    let granted = granted.expect("the waiter gets the lock");
    assert!(
        at.duration_since(forced_at) < lease / 2,
        "the waiter got it {:?} after the forced release (lease {lease:?})",
        at.duration_since(forced_at)
    );
    assert!(
        eventually(lease, || async { guard.is_lost() }).await,
        "the holder never learned its lock was released"
    );
    // (Redlock's look may find a node too slow to answer on a busy machine: it then says it
    // cannot tell, and is asked again.)
    let mut now = admin.inspect("admin:stuck").await;
    let asked_until = Instant::now() + lease;
    while now.is_err() && Instant::now() < asked_until {
        tokio::time::sleep(ms(100)).await;
        now = admin.inspect("admin:stuck").await;
    }
    let now = now.unwrap().expect("the waiter holds it");
    assert_ne!(now.token, removed.token, "{now:?}");
    drop(granted);
    assert_eq!(admin.force_release("nobody:holds").await.unwrap(), None);
}

/// A process that asks once for a busy lock (`wait = 0`) and exits right after its answer leaves
/// nothing in line: the next waiter is granted the lock as soon as the holder releases it, not
/// one lease later. ShedLock's case: a job scheduled on many nodes, each asking once and exiting
/// when another node runs it.
pub async fn a_try_once_that_exits_leaves_nothing_in_line(fixture: &dyn Fixture) {
    let key = "try-once:exit";
    let fair = fixture.supports(Feature::Fair).await;
    let request = move |client: &LockClient| {
        let request = client.lock(key).lease(TRY_ONCE_LEASE);
        if fair { request.fair() } else { request }
    };
    let holding = fixture.client().await;
    let holder = request(&holding).acquire().await.unwrap();
    let answer = match fixture.one_process() {
        None => {
            let dir = history::scratch_dir("try-once");
            let env = [
                ("LOCK_URL", fixture.url()),
                ("LOCK_KEY", key.to_owned()),
                ("FAIR", if fair { "1" } else { "0" }.to_owned()),
            ];
            let mut helper = history::Helper::spawn("try_once", &dir, &env);
            helper.owns_dir = true;
            tokio::task::block_in_place(|| helper.wait_success(Duration::from_secs(60)));
            helper.read("answer", Duration::from_secs(5)).await
        }
        Some(why) => {
            // One process only: the try-once runs on a runtime of its own, shut down at once.
            println!("the try-once runs on a runtime of its own, not in a process ({why})");
            let url = fixture.url();
            tokio::task::block_in_place(|| {
                std::thread::spawn(move || try_once_and_exit(&url, key, fair))
                    .join()
                    .unwrap()
            })
        }
    };
    assert_eq!(answer, "busy", "the try-once's answer");
    next_waiter_is_granted_at_once(fixture, holder, key, fair, "the exited try-once").await;
}

/// Releases `holder` once a waiter of a fresh client queued for `key` (behind whatever was left
/// in line), and asserts that the waiter is granted the lock well within a lease of the
/// release (half of it) — not one lease later, as it would be behind a place `left` by someone
/// gone. (Woken by the release it takes milliseconds; a second bound failed at 1.5 s through
/// PgBouncer with two CPU hogs beside the suite.)
async fn next_waiter_is_granted_at_once(
    fixture: &dyn Fixture,
    holder: distlock::LockGuard,
    key: &'static str,
    fair: bool,
    left: &str,
) {
    let waiting = fixture.client().await;
    let waiter = tokio::spawn(async move {
        let request = waiting.lock(key).lease(TRY_ONCE_LEASE).wait(ms(30_000));
        let granted = if fair { request.fair() } else { request }.acquire().await;
        (granted, Instant::now(), waiting)
    });
    tokio::time::sleep(ms(300)).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (granted, at, _waiting) = waiter.await.unwrap();
    let granted = granted.expect("the waiter gets the lock");
    let handoff = at.duration_since(released_at);
    println!("handoff after {left}: {handoff:?}");
    assert!(
        handoff < TRY_ONCE_LEASE / 2,
        "the waiter was granted the lock {handoff:?} after the release (lease \
         {TRY_ONCE_LEASE:?}): {left} left a place in line behind"
    );
    granted.release().await.unwrap();
    assert_eq!(fixture.holder(&format!("lock:{key}")).await, None);
}

/// In one process: [`try_once`] on a runtime of its own, shut down at once after the answer.
fn try_once_and_exit(url: &str, key: &str, fair: bool) -> String {
    let runtime = history::helper_runtime();
    let answer = runtime.block_on(try_once(url, key, fair));
    drop(runtime);
    answer
}

/// A process whose waiter is still in line when the process ends normally (its `main`
/// returns: the runtime shuts down) leaves nothing in line: the next waiter is granted the lock
/// as soon as the holder releases it. On ZooKeeper and etcd the waiter's place is a node or key
/// on the client's session or lease, closed or revoked as the runtime shuts down; elsewhere a
/// plain waiter holds no place on the server.
pub async fn a_waiter_whose_process_ends_leaves_nothing_in_line(fixture: &dyn Fixture) {
    let key = "ended:waiter";
    let holding = fixture.client().await;
    let holder = holding
        .lock(key)
        .lease(TRY_ONCE_LEASE)
        .acquire()
        .await
        .unwrap();
    match fixture.one_process() {
        None => {
            let dir = history::scratch_dir("ended-waiter");
            let env = [("LOCK_URL", fixture.url()), ("LOCK_KEY", key.to_owned())];
            let mut helper = history::Helper::spawn("waiter", &dir, &env);
            helper.owns_dir = true;
            tokio::task::block_in_place(|| helper.wait_success(Duration::from_secs(60)));
            assert_eq!(
                helper.read("queued", Duration::from_secs(5)).await,
                "queued"
            );
        }
        Some(why) => {
            println!("the waiter runs on a runtime of its own, not in a process ({why})");
            let url = fixture.url();
            tokio::task::block_in_place(|| {
                std::thread::spawn(move || {
                    let runtime = history::helper_runtime();
                    runtime.block_on(wait_in_line(&url, key));
                    drop(runtime);
                })
                .join()
                .unwrap()
            });
        }
    }
    next_waiter_is_granted_at_once(fixture, holder, key, false, "a waiter's ended process").await;
}

/// A release whose first try reached the server and deleted the lock, but whose reply was lost
/// (the proxy drops replies, then cuts the connections): the retry finds the lock not ours — the
/// next owner took it meanwhile. That is no lost lease: `release()` is `Ok`, and the next owner's
/// lock is intact.
pub async fn a_release_whose_reply_was_lost_is_not_reported_lost(fixture: &dyn Fixture) {
    let path = fixture.slowed(Duration::ZERO, Duration::ZERO).await;
    let via_proxy = LockClient::builder(path.url.as_str())
        .response_timeout(ms(500))
        .node_timeout(ms(5_000))
        .build()
        .await
        .unwrap();
    let next = fixture.client().await;
    let guard = via_proxy
        .lock("lost-reply")
        .lease(ms(30_000))
        .acquire()
        .await
        .unwrap();
    let ours = fixture.holder("lock:lost-reply").await.expect("held");
    for proxy in path.proxies() {
        proxy.set_drop_replies(true);
    }
    let releasing = tokio::spawn(guard.release());
    assert!(
        eventually(Duration::from_secs(10), || async {
            fixture.holder("lock:lost-reply").await.is_none()
        })
        .await,
        "the release's first try never reached the server"
    );
    // Replies pass again (a cluster client reaches its nodes through the proxies too), but the
    // release's reply is gone: it waits out its response timeout, and retries after the next
    // owner took the lock.
    for proxy in path.proxies() {
        proxy.set_drop_replies(false);
    }
    let taken = next
        .lock("lost-reply")
        .lease(ms(30_000))
        .wait(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let theirs = fixture.holder("lock:lost-reply").await;
    assert!(
        theirs.is_some() && theirs.as_ref() != Some(&ours),
        "{theirs:?}"
    );
    // A connection that lost part of a reply stream is of no use: cut, the client reconnects.
    for proxy in path.proxies() {
        proxy.cut(Duration::ZERO);
    }
    let released = tokio::time::timeout(Duration::from_secs(60), releasing)
        .await
        .expect("the release ends")
        .unwrap();
    assert!(
        released.is_ok(),
        "a release that landed was reported {released:?}"
    );
    assert_eq!(
        fixture.holder("lock:lost-reply").await,
        theirs,
        "the next owner's lock is intact"
    );
    assert!(!taken.is_lost());
    taken.release().await.unwrap();
}

// ---- What a store lacks (its `Capabilities`: `LockError::Unsupported`, nothing written) ----

/// `result` is the typed refusal of `feature` by this store for `key`: `Unsupported` naming
/// the store, the feature and the key, in a message that says so.
fn assert_unsupported<T: std::fmt::Debug>(
    result: Result<T, LockError>,
    feature: Feature,
    key: &str,
) {
    let error = match result {
        Err(error) => error,
        Ok(granted) => panic!("{feature} on a store without them: granted {granted:?}"),
    };
    assert!(error.is_unsupported(), "not `Unsupported`: {error:?}");
    assert_eq!(error.key(), Some(key), "{error}");
    let message = error.to_string();
    match &error {
        LockError::Unsupported {
            backend,
            feature: refused,
            reason,
            ..
        } => {
            assert_eq!(*refused, feature, "{message}");
            assert!(!reason.is_empty() && message.contains(backend), "{message}");
            assert!(message.contains(&feature.to_string()), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// [`assert_unsupported`], and nothing is stored at the key.
async fn assert_refused<T: std::fmt::Debug>(
    fixture: &dyn Fixture,
    result: Result<T, LockError>,
    feature: Feature,
    key: &str,
) {
    assert_unsupported(result, feature, key);
    assert!(
        !fixture.anything_at(&format!("lock:{key}")).await,
        "the refusal of {feature} wrote at `{key}`"
    );
}

/// A store without read locks refuses them — one key, several keys, waiting or not — as
/// `Unsupported`, writing nothing; the plain lock of the same key is granted.
pub async fn read_locks_are_refused_writing_nothing(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    assert!(!serves_read_locks(fixture, &client, "catalog").await);
    let refused = client.lock("catalog").read().wait(ms(500)).acquire().await;
    assert_refused(fixture, refused, Feature::ReadLocks, "catalog").await;
    let refused = client
        .lock_all(["shelf:a", "shelf:b"])
        .read()
        .acquire()
        .await;
    assert_refused(fixture, refused, Feature::ReadLocks, "shelf:a").await;
    assert!(!fixture.anything_at("lock:shelf:b").await);
    client
        .lock("catalog")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A store without upgradable reads refuses them as `Unsupported`, writing nothing.
pub async fn upgradable_reads_are_refused_writing_nothing(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let refused = client.lock("up").upgradable().acquire().await;
    assert_refused(fixture, refused, Feature::Upgradable, "up").await;
    let refused = client.lock("up").upgradable().wait(ms(0)).acquire().await;
    assert_refused(fixture, refused, Feature::Upgradable, "up").await;
}

/// A store whose waiters are not served in arrival order refuses a fair request as
/// `Unsupported`, writing nothing.
pub async fn fair_locks_are_refused_writing_nothing(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let refused = client.lock("fair").fair().acquire().await;
    assert_refused(fixture, refused, Feature::Fair, "fair").await;
    let refused = client.lock("fair").fair().wait(ms(0)).acquire().await;
    assert_refused(fixture, refused, Feature::Fair, "fair").await;
}

/// A store without semaphores refuses a permit — and `available()` — as `Unsupported`,
/// writing nothing.
pub async fn semaphores_are_refused_writing_nothing(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let refused = client.semaphore("gpu", 2).wait(ms(0)).acquire().await;
    assert_refused(fixture, refused, Feature::Semaphores, "gpu").await;
    let refused = client.semaphore("gpu", 2).wait(ms(500)).acquire().await;
    assert_refused(fixture, refused, Feature::Semaphores, "gpu").await;
    let refused = client.semaphore("gpu", 2).available().await;
    assert_refused(fixture, refused, Feature::Semaphores, "gpu").await;
}

/// A store that cannot keep `min_hold` (a lock that ends with its holder's connection)
/// refuses a request with one as `Unsupported`, writing nothing; without it, the same request
/// is granted.
pub async fn min_hold_is_refused_writing_nothing(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let request = client.lock("min-hold:refused").lease(ms(3_000));
    let refused = request.min_hold(ms(1_000)).acquire().await;
    assert_refused(fixture, refused, Feature::MinHold, "min-hold:refused").await;
    let guard = client.lock("min-hold:refused").acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// A store that cannot keep a lock-delay refuses it as `Unsupported`, writing nothing — asked
/// per request, or as a client's default (the client connects; its acquisitions are refused).
pub async fn lock_delay_is_refused_writing_nothing(fixture: &dyn Fixture) {
    const DELAY: Duration = Duration::from_millis(1_500);
    let client = fixture.client().await;
    let refused = client.lock("delayed").lock_delay(DELAY).await;
    assert_refused(fixture, refused, Feature::LockDelay, "delayed").await;
    let delaying = fixture.builder().lock_delay(DELAY).build().await.unwrap();
    let refused = delaying.lock("delayed").await;
    assert_refused(fixture, refused, Feature::LockDelay, "delayed").await;
}

/// A store without fencing tokens refuses them — a client that asks for them on every lock
/// (at build), a request that asks — and elections, whose terms they are, as `Unsupported`,
/// writing nothing; a plain lock is granted, without a token.
pub async fn fencing_and_elections_are_refused_writing_nothing(fixture: &dyn Fixture) {
    match fixture.builder().fencing(true).build().await {
        Err(LockError::Unsupported {
            feature: Feature::Fencing,
            key: None,
            reason,
            ..
        }) => assert!(reason.contains("monotonic"), "{reason}"),
        other => panic!(
            "a fencing client on a store without fencing: {:?}",
            other.map(|_| ())
        ),
    }
    let client = fixture.client().await;
    let refused = client.lock("fenced").fencing(true).acquire().await;
    assert_refused(fixture, refused, Feature::Fencing, "fenced").await;
    let plain = client.lock("fenced").acquire().await.unwrap();
    assert_eq!(plain.fencing_token(), None);
    plain.release().await.unwrap();
    let refused = client.election("elect:x").campaign("a").await;
    assert_refused(fixture, refused, Feature::Elections, "elect:x").await;
    let refused = client.election("elect:x").leader().await;
    assert_refused(fixture, refused, Feature::Elections, "elect:x").await;
}

// ---- Read/write locks (`../shared/DESIGN.md`, "Lock kinds") ----

/// On a store without read locks: the typed refusal, nothing written. `true` when the store
/// serves them and the case goes on.
async fn serves_read_locks(fixture: &dyn Fixture, client: &LockClient, key: &str) -> bool {
    if fixture.supports(Feature::ReadLocks).await {
        return true;
    }
    let refused = client.lock(key).read().wait(ms(0)).acquire().await;
    assert_refused(fixture, refused, Feature::ReadLocks, key).await;
    false
}

/// Readers of one key hold it together, each with a share of its own on the server; a writer
/// excludes readers and is excluded by them; the last reader's release frees the key.
pub async fn readers_share_a_key_and_exclude_writers(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let lease = ms(10_000);
    let first = one.lock("catalog").read().lease(lease).wait(ms(0));
    let first = first.acquire().await.expect("a free key is read at once");
    let second = two.lock("catalog").read().lease(lease).wait(ms(0));
    let second = second.acquire().await.expect("readers share the key");
    assert_eq!(first.mode(), distlock::LockMode::Read);
    let mut stored: Vec<String> = fixture
        .readers("lock:catalog")
        .await
        .into_iter()
        .map(|(token, share)| {
            if let Some(share) = share {
                assert!(share <= lease && share > ms(5_000), "share {share:?}");
            }
            token
        })
        .collect();
    stored.sort();
    let mut ours = vec![
        distlock::__private::testing::owner_token(&first).to_owned(),
        distlock::__private::testing::owner_token(&second).to_owned(),
    ];
    ours.sort();
    assert_eq!(stored, ours, "one share per reader, under its own token");
    assert!(
        one.lock("catalog").try_acquire().await.unwrap().is_none(),
        "a writer got in beside readers"
    );
    first.release().await.unwrap();
    assert_eq!(fixture.readers("lock:catalog").await.len(), 1);
    assert!(
        two.lock("catalog").try_acquire().await.unwrap().is_none(),
        "a writer got in beside a reader"
    );
    second.release().await.unwrap();
    assert!(
        !fixture.anything_at("lock:catalog").await,
        "the last reader left its key behind"
    );
    let writer = one.lock("catalog").wait(ms(0)).acquire().await.unwrap();
    assert_eq!(writer.mode(), distlock::LockMode::Write);
    assert!(
        two.lock("catalog")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a reader got in beside a writer"
    );
    assert!(fixture.holder("lock:catalog").await.is_some());
    writer.release().await.unwrap();
    assert!(!fixture.anything_at("lock:catalog").await);
}

/// A renewed hold checked against what the store holds (`stored`, read just before): the guard
/// must not report it lost. Read in this order, a failure says which side gave way. If the
/// store no longer holds it and the guard says so too, a renewal did not get through within
/// the lease (the host or a pooler held it up), which this assertion reports. If the store
/// dropped it while the guard, asked after, still says held, the next assertion (the store's
/// contents) fails: a lost lease unreported, the safety bug.
fn store_then_guard(guard: &distlock::LockGuard, stored: &dyn std::fmt::Debug, what: &str) {
    assert!(
        !guard.is_lost(),
        "{what} was lost: no renewal confirmed within its lease (the store holds {stored:?})"
    );
}

/// Each reader's share lives on its own lease: an unrenewed reader's share ends one lease
/// later while a renewed reader's goes on, and one reader's renewal never extends another's
/// (Redisson #1604, #7098).
pub async fn each_reader_has_its_own_lease(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let short = one.lock("tenant").read().lease(ms(600)).renew(false);
    let short = short.acquire().await.unwrap();
    // The renewed share's lease is what a busy host (and a transaction pooler queueing its
    // statements) leaves it: renewed every second, it rides out a two-second stall.
    let long = two
        .lock("tenant")
        .read()
        .lease(ms(3_000))
        .acquire()
        .await
        .unwrap();
    let long_token = distlock::__private::testing::owner_token(&long).to_owned();
    // Past the short share's lease, and a renewal of the long one.
    tokio::time::sleep(ms(1_500)).await;
    assert!(short.is_lost(), "an unrenewed share outlived its lease");
    // The store first, then the guard (see `store_then_guard`).
    let readers = fixture.readers("lock:tenant").await;
    store_then_guard(&long, &readers, "a renewed share");
    assert_eq!(
        readers.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        [long_token.as_str()],
        "the unrenewed share is still there: another reader's renewal kept it alive"
    );
    assert!(
        one.lock("tenant").try_acquire().await.unwrap().is_none(),
        "a writer got in beside a live reader"
    );
    assert!(matches!(short.release().await, Err(LockError::Lost { .. })));
    long.release().await.unwrap();
    assert!(one.lock("tenant").try_acquire().await.unwrap().is_some());
}

/// No writer starvation: four clients keep overlapping read holds of 300 ms going for seconds
/// (the key is never without a reader), yet a writer with `wait = 4s` gets in — its waiting
/// stops new readers from joining — and nobody reads while it writes.
pub async fn a_waiting_writer_is_not_starved_by_readers(fixture: &dyn Fixture) {
    let writer_client = fixture.client().await;
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for i in 0..4u64 {
        let client = fixture.client().await;
        let (writing, stop, reads) = (writing.clone(), stop.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            // Staggered, so the holds overlap and the key always has a reader.
            tokio::time::sleep(ms(75 * i)).await;
            while !stop.load(Ordering::SeqCst) {
                let guard = client
                    .lock("prices")
                    .read()
                    .lease(ms(5_000))
                    .wait(ms(20_000))
                    .acquire()
                    .await
                    .expect("a reader waits out the writer");
                assert!(
                    !writing.load(Ordering::SeqCst),
                    "a reader beside the writer"
                );
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(ms(300)).await;
                assert!(!writing.load(Ordering::SeqCst), "a writer beside a reader");
                guard.release().await.expect("release a read");
            }
        }));
    }
    tokio::time::sleep(ms(1_000)).await;
    let before = reads.load(Ordering::SeqCst);
    assert!(before >= 4, "the readers are reading ({before} reads)");
    let started = Instant::now();
    let guard = writer_client
        .lock("prices")
        .lease(ms(5_000))
        .wait(ms(4_000))
        .acquire()
        .await
        .expect("a writer is not starved by overlapping readers");
    let waited = started.elapsed();
    writing.store(true, Ordering::SeqCst);
    tokio::time::sleep(ms(200)).await;
    writing.store(false, Ordering::SeqCst);
    guard.release().await.unwrap();
    // Readers come back after the writer.
    let after_write = reads.load(Ordering::SeqCst);
    tokio::time::sleep(ms(1_000)).await;
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.await.expect("reader task");
    }
    assert!(
        reads.load(Ordering::SeqCst) > after_write,
        "readers got back in after the writer"
    );
    println!("the writer waited {waited:?} behind {before} reads");
    assert!(!fixture.anything_at("lock:prices").await);
}

/// A writer's release wakes every waiting reader at once, and the last reader's release wakes
/// a waiting writer — by notification, long before the holders' 30 s leases end.
pub async fn releases_wake_readers_and_writers(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let lease = ms(30_000);
    let writer = client.lock("report").lease(lease).acquire().await.unwrap();
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let client = fixture.client().await;
        waiting.push(tokio::spawn(async move {
            let request = client.lock("report").read().lease(lease).wait(ms(10_000));
            (request.acquire().await, client)
        }));
    }
    tokio::time::sleep(ms(300)).await;
    assert!(fixture.readers("lock:report").await.is_empty());
    let released = Instant::now();
    writer.release().await.unwrap();
    let mut readers = Vec::new();
    for task in waiting {
        let (guard, client) = task.await.unwrap();
        readers.push((guard.expect("woken by the writer's release"), client));
    }
    let woken = released.elapsed();
    assert!(woken < ms(5_000), "readers took {woken:?} to get in");
    assert_eq!(fixture.readers("lock:report").await.len(), 3);
    let next = {
        let client = fixture.client().await;
        tokio::spawn(async move {
            let started = Instant::now();
            let guard = client
                .lock("report")
                .lease(lease)
                .wait(ms(10_000))
                .acquire()
                .await;
            (guard, started)
        })
    };
    tokio::time::sleep(ms(300)).await;
    let mut last = Instant::now();
    for (guard, _client) in readers {
        last = Instant::now();
        guard.release().await.unwrap();
    }
    let (guard, _) = next.await.unwrap();
    let guard = guard.expect("woken by the last reader's release");
    let woken = last.elapsed();
    assert!(woken < ms(5_000), "the writer took {woken:?} to get in");
    assert!(fixture.holder("lock:report").await.is_some());
    guard.release().await.unwrap();
}

/// A writer that gives up waiting takes back its mark: readers may join again at once, rather
/// than after the mark lapses.
pub async fn a_writer_that_gives_up_lets_readers_in_again(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let reader = client
        .lock("menu")
        .read()
        .lease(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let err = client
        .lock("menu")
        .wait(ms(400))
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let again = client.lock("menu").read().wait(ms(0)).acquire().await;
    let again = again.expect("a reader joins once the waiting writer left");
    assert_eq!(
        fixture.readers("lock:menu").await.len(),
        2,
        "{:?}",
        fixture.readers("lock:menu").await
    );
    again.release().await.unwrap();
    reader.release().await.unwrap();
    assert!(!fixture.anything_at("lock:menu").await);
}

/// Fencing: every write grant gets a new, higher token; a reader's token is at least the last
/// write grant's and below the next one's — the last write grant's itself on the backends that
/// keep a counter (memory, Redis, SQL), the reader's own grant's where tokens are the store's
/// transaction ids (ZooKeeper, etcd).
pub async fn readers_get_the_last_writers_fencing_token(fixture: &dyn Fixture) {
    let client = fixture
        .builder()
        .fencing(fixture.supports(Feature::Fencing).await)
        .build()
        .await
        .unwrap();
    let first = client.lock("version").acquire().await.unwrap();
    let written = first.fencing_token().expect("a write grant's token");
    first.release().await.unwrap();
    let reader = client.lock("version").read().acquire().await.unwrap();
    let read = reader.fencing_token().expect("a reader's token");
    if fixture.fencing_consecutive() {
        assert_eq!(read, written, "the last write grant's");
    }
    assert!(read >= written);
    reader.release().await.unwrap();
    let second = client.lock("version").acquire().await.unwrap();
    let rewritten = second.fencing_token().unwrap();
    assert!(rewritten > read, "{rewritten} after a read at {read}");
    second.release().await.unwrap();
    let reader = client.lock("version").read().acquire().await.unwrap();
    let read = reader.fencing_token().unwrap();
    if fixture.fencing_consecutive() {
        assert_eq!(read, rewritten);
    }
    assert!(read >= rewritten);
    reader.release().await.unwrap();
}

/// The admin API shows a read lock's readers, each with its holder and own lease.
pub async fn the_admin_api_shows_readers(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let one = client
        .lock("shown")
        .read()
        .lease(ms(20_000))
        .acquire()
        .await
        .unwrap();
    let two = client
        .lock("shown")
        .read()
        .lease(ms(10_000))
        .acquire()
        .await
        .unwrap();
    let info = client.inspect("shown").await.unwrap().expect("read-held");
    assert_eq!(info.mode, distlock::LockMode::Read, "{info:?}");
    assert_eq!(info.readers.len(), 2, "{info:?}");
    let tokens: Vec<&str> = info.readers.iter().map(|r| r.token.as_str()).collect();
    assert_eq!(
        tokens,
        [
            distlock::__private::testing::owner_token(&one),
            distlock::__private::testing::owner_token(&two)
        ],
        "longest share first"
    );
    for reader in &info.readers {
        assert_eq!(
            reader.holder.as_ref().map(|h| h.pid),
            Some(std::process::id())
        );
        // A backend that keeps shares alive by a session (ZooKeeper, etcd) has no TTL per share.
        assert!(reader.ttl.is_none_or(|t| t > ms(5_000)), "{reader:?}");
    }
    assert_eq!(client.list("sho*", 10).await.unwrap().len(), 1);
    let removed = client
        .force_release("shown")
        .await
        .unwrap()
        .expect("removed");
    assert_eq!(removed.readers.len(), 2);
    assert!(!fixture.anything_at("lock:shown").await);
    // (What their releases report is the forced-release case's: a cluster's retried release
    // is ambiguous, and settled by the lease.)
    drop((one, two));
}

// ---- Semaphores (`../shared/DESIGN.md`, "Lock kinds") ----

/// The tokens of `guards`, sorted.
fn tokens_of(guards: &[&distlock::LockGuard]) -> Vec<String> {
    let mut tokens: Vec<String> = guards
        .iter()
        .map(|g| distlock::__private::testing::owner_token(g).to_owned())
        .collect();
    tokens.sort();
    tokens
}

/// At most `n` permits at once, each stored under its holder's token; with more contenders
/// than permits all `n` are in use at once (the semaphore does not serialise); a release frees
/// one permit, the last one's leaves nothing behind.
pub async fn a_semaphore_admits_up_to_n_holders_at_once(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let take = |client: &LockClient| client.semaphore("gpu", 3).lease(ms(10_000)).wait(ms(0));
    let a = take(&one).acquire().await.expect("a free permit at once");
    let b = take(&two).acquire().await.expect("a second permit");
    let c = take(&one).acquire().await.expect("a third permit");
    assert_eq!(a.permits(), Some(3));
    assert!(
        take(&two).try_acquire().await.unwrap().is_none(),
        "a fourth holder of a semaphore of 3"
    );
    let mut stored: Vec<String> = fixture
        .permits("lock:gpu")
        .await
        .into_iter()
        .map(|(token, left)| {
            if let Some(left) = left {
                assert!(left <= ms(10_000) && left > ms(5_000), "permit {left:?}");
            }
            token
        })
        .collect();
    stored.sort();
    assert_eq!(stored, tokens_of(&[&a, &b, &c]), "one permit per holder");
    b.release().await.unwrap();
    assert_eq!(fixture.permits("lock:gpu").await.len(), 2);
    let d = take(&two).acquire().await.expect("the released permit");
    for guard in [a, c, d] {
        guard.release().await.unwrap();
    }
    assert!(
        !fixture.anything_at("lock:gpu").await,
        "the last permit left its key behind"
    );

    // Eight contenders in two clients, holding for a while: never more than three inside,
    // and three reached.
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let client = if i % 2 == 0 { one.clone() } else { two.clone() };
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let guard = client
                    .semaphore("gpu", 3)
                    .lease(ms(10_000))
                    .wait(ms(60_000))
                    .acquire()
                    .await
                    .expect("a permit under contention");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 3, "{now} holders of a semaphore of 3");
                tokio::time::sleep(ms(60)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("contender");
    }
    assert_eq!(most.load(Ordering::SeqCst), 3, "the semaphore serialised");
    assert!(!fixture.anything_at("lock:gpu").await);
}

/// Each permit lives on its own lease: an unrenewed permit comes back one lease later (not
/// before), while a renewed one goes on and never keeps another alive.
pub async fn each_permit_has_its_own_lease(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let short = one.semaphore("partner-api", 2).lease(ms(900)).renew(false);
    let short = short.acquire().await.unwrap();
    let started = Instant::now();
    // Renewed every second: it rides out a two-second stall of a busy host (or pooler).
    let long = two.semaphore("partner-api", 2).lease(ms(3_000));
    let long = long.acquire().await.unwrap();
    let long_token = distlock::__private::testing::owner_token(&long).to_owned();
    assert!(
        one.semaphore("partner-api", 2)
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a third permit beside two live ones"
    );
    // Past the short permit's lease, and a renewal of the long one.
    tokio::time::sleep(ms(1_800).saturating_sub(started.elapsed())).await;
    assert!(short.is_lost(), "an unrenewed permit outlived its lease");
    // The store first, then the guard (see `store_then_guard`).
    let stored = fixture.permits("lock:partner-api").await;
    store_then_guard(&long, &stored, "a renewed permit");
    assert_eq!(
        stored.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        [long_token.as_str()],
        "the unrenewed permit is still there: another holder's renewal kept it alive"
    );
    let back = one.semaphore("partner-api", 2).try_acquire().await.unwrap();
    let back = back.expect("the unrenewed permit came back one lease later");
    assert!(matches!(short.release().await, Err(LockError::Lost { .. })));
    back.release().await.unwrap();
    long.release().await.unwrap();
    assert!(!fixture.anything_at("lock:partner-api").await);
}

/// The limit travels with each request, and a name is one kind: another limit, a lock, a read
/// lock asked for on a semaphore's name (and a semaphore on a lock's) fail with
/// `LockError::Config` naming the key (and both limits) — after one try, not after `wait` —
/// and write nothing. `permits = 0` is refused before any round trip.
pub async fn a_semaphore_refuses_another_limit_and_another_kind(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let held = client.semaphore("migrations", 2).acquire().await.unwrap();
    let refused = |result: Result<distlock::LockGuard, LockError>, words: &[&str]| match result {
        Err(LockError::Config(message)) => {
            for word in words {
                assert!(message.contains(word), "{word:?} not in: {message}");
            }
            println!("refused: {message}");
        }
        other => panic!("expected a Config error with {words:?}, got {other:?}"),
    };
    let started = Instant::now();
    refused(
        client.semaphore("migrations", 3).wait(ms(5_000)).await,
        &["`migrations`", "2 permits", "asks for 3"],
    );
    let read = client.lock("migrations").read().wait(ms(5_000)).await;
    refused(read, &["`migrations`", "semaphore of 2 permits"]);
    let write = client.lock("migrations").wait(ms(5_000)).await;
    refused(write, &["`migrations`", "semaphore of 2 permits"]);
    // A fair request too: refused as a semaphore's name, or (`Unsupported`, before the store
    // is asked) as fair where fair locks are not.
    let fair = client.lock("migrations").fair().wait(ms(5_000)).await;
    if fixture.supports(Feature::Fair).await {
        refused(fair, &["`migrations`"]);
    } else {
        assert_unsupported(fair, Feature::Fair, "migrations");
    }
    assert!(
        started.elapsed() < ms(5_000),
        "a refusal waited out `wait`: {:?}",
        started.elapsed()
    );
    refused(
        client.semaphore("migrations", 0).await,
        &["`migrations`", "0 permits"],
    );
    assert_eq!(
        fixture
            .permits("lock:migrations")
            .await
            .into_iter()
            .map(|(t, _)| t)
            .collect::<Vec<_>>(),
        tokens_of(&[&held]),
        "a refused request left something behind"
    );
    held.release().await.unwrap();
    assert!(!fixture.anything_at("lock:migrations").await);
    // Free again: another limit is fine now.
    let other = client.semaphore("migrations", 3).wait(ms(0)).await.unwrap();
    other.release().await.unwrap();

    let lock = client.lock("schema").acquire().await.unwrap();
    let permit = client.semaphore("schema", 2).wait(ms(5_000)).await;
    refused(permit, &["`schema`", "held as a lock"]);
    assert_eq!(
        fixture.holder("lock:schema").await.as_deref(),
        Some(distlock::__private::testing::owner_token(&lock))
    );
    lock.release().await.unwrap();
    assert!(!fixture.anything_at("lock:schema").await);
}

/// A release wakes a waiter for a permit at once — long before the holders' leases run out.
pub async fn a_permit_release_wakes_a_waiter(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let lease = ms(20_000);
    let a = one.semaphore("pool", 2).lease(lease).await.unwrap();
    let b = one.semaphore("pool", 2).lease(lease).await.unwrap();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = two
            .semaphore("pool", 2)
            .lease(lease)
            .wait(ms(30_000))
            .await
            .expect("woken");
        (guard, started.elapsed())
    });
    tokio::time::sleep(ms(300)).await;
    assert!(!waiter.is_finished(), "granted a third permit of two");
    b.release().await.unwrap();
    let (guard, waited) = waiter.await.unwrap();
    // Not woken, it would have waited for a holder's lease (20 s).
    assert!(
        waited < ms(10_000),
        "waited {waited:?}: not woken by the release"
    );
    for guard in [a, guard] {
        guard.release().await.unwrap();
    }
    assert!(!fixture.anything_at("lock:pool").await);
}

/// On ZooKeeper and etcd, whose waiters queue on the server, permits go to waiters in arrival
/// order: each freed permit to the earliest waiter (elsewhere no order is promised).
pub async fn permit_waiters_are_served_in_arrival_order(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let lease = ms(20_000);
    let a = client
        .semaphore("queue-pool", 2)
        .lease(lease)
        .await
        .unwrap();
    let b = client
        .semaphore("queue-pool", 2)
        .lease(lease)
        .await
        .unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4u64 {
        let waiter = fixture.client().await;
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = waiter
                .semaphore("queue-pool", 2)
                .lease(lease)
                .wait(ms(20_000))
                .await
                .expect("granted in turn");
            order.lock().unwrap().push(i);
            tokio::time::sleep(ms(100)).await;
            guard.release().await.unwrap();
        }));
        // Each in line on the server (its place in the queue is there) before the next asks.
        let in_line = i + 1;
        assert!(
            eventually(ms(10_000), || async {
                let info = client.inspect("queue-pool").await.ok().flatten();
                info.and_then(|info| info.waiters) == Some(in_line)
            })
            .await,
            "waiter {i} never took its place in line"
        );
    }
    a.release().await.unwrap();
    tokio::time::sleep(ms(300)).await;
    b.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        [0, 1, 2, 3],
        "granted out of arrival order"
    );
    assert!(!fixture.anything_at("lock:queue-pool").await);
}

/// Fencing: every permit grant gets a new, higher token.
pub async fn permits_get_rising_fencing_tokens(fixture: &dyn Fixture) {
    let client = fixture
        .builder()
        .fencing(fixture.supports(Feature::Fencing).await)
        .build()
        .await
        .unwrap();
    let a = client.semaphore("fenced-pool", 2).await.unwrap();
    let b = client.semaphore("fenced-pool", 2).await.unwrap();
    let (ta, tb) = (a.fencing_token().unwrap(), b.fencing_token().unwrap());
    assert!(tb > ta, "{tb} after {ta}");
    a.release().await.unwrap();
    let c = client.semaphore("fenced-pool", 2).await.unwrap();
    let tc = c.fencing_token().unwrap();
    assert!(tc > tb, "{tc} after {tb}");
    b.release().await.unwrap();
    c.release().await.unwrap();
}

/// The admin API shows a semaphore's limit and its permits, each with its holder.
pub async fn the_admin_api_shows_permits(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let lease = ms(20_000);
    let one = client
        .semaphore("shown-pool", 3)
        .lease(lease)
        .await
        .unwrap();
    let two = client
        .semaphore("shown-pool", 3)
        .lease(lease)
        .await
        .unwrap();
    let info = client.inspect("shown-pool").await.unwrap().expect("held");
    assert_eq!(info.permits, Some(3), "{info:?}");
    let mut tokens: Vec<String> = info.readers.iter().map(|r| r.token.clone()).collect();
    tokens.sort();
    assert_eq!(tokens, tokens_of(&[&one, &two]), "{info:?}");
    for permit in &info.readers {
        assert_eq!(
            permit.holder.as_ref().map(|h| h.pid),
            Some(std::process::id())
        );
        assert!(permit.ttl.is_none_or(|t| t > ms(5_000)), "{permit:?}");
    }
    let listed = client.list("shown-*", 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].permits, Some(3));
    let removed = client.force_release("shown-pool").await.unwrap();
    assert_eq!(removed.expect("removed").readers.len(), 2);
    assert!(!fixture.anything_at("lock:shown-pool").await);
    drop((one, two));
}

/// `available()`: the permits not held — exact while nothing changes, never below zero with a
/// waiter in line, an expired permit counted free; nothing written by asking. Another limit, a
/// lock's name, or a store without semaphores: `Config`, as an acquisition.
pub async fn available_counts_the_permits_not_held(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    let pool = || client.semaphore("free-pool", 3).lease(ms(10_000));
    assert_eq!(pool().available().await.unwrap(), 3, "nothing held");
    assert!(
        !fixture.anything_at("lock:free-pool").await,
        "asking wrote something"
    );
    let a = pool().wait(ms(0)).await.unwrap();
    assert_eq!(pool().available().await.unwrap(), 2);
    let b = pool().wait(ms(0)).await.unwrap();
    let c = pool().wait(ms(0)).await.unwrap();
    assert_eq!(pool().available().await.unwrap(), 0, "all three held");
    // A fourth in line holds nothing, and takes nothing below zero.
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .semaphore("free-pool", 3)
                .lease(ms(10_000))
                .wait(ms(10_000))
                .await
        })
    };
    tokio::time::sleep(ms(300)).await;
    assert_eq!(
        pool().available().await.unwrap(),
        0,
        "with a waiter in line"
    );
    a.release().await.unwrap();
    let d = waiting
        .await
        .unwrap()
        .expect("the waiter is granted the freed permit");
    assert_eq!(
        pool().available().await.unwrap(),
        0,
        "the freed permit went on"
    );
    b.release().await.unwrap();
    d.release().await.unwrap();
    assert_eq!(pool().available().await.unwrap(), 2, "two given back");
    // An unrenewed permit counts until its lease runs out, not after.
    let short = client
        .semaphore("free-pool", 3)
        .lease(ms(400))
        .renew(false)
        .wait(ms(0))
        .await
        .unwrap();
    assert_eq!(pool().available().await.unwrap(), 1);
    tokio::time::sleep(ms(700)).await;
    assert!(short.is_lost());
    assert_eq!(
        pool().available().await.unwrap(),
        2,
        "an expired permit counted as held"
    );
    drop(short);
    // Another limit, and a lock's name: refused as an acquisition is.
    match client.semaphore("free-pool", 4).available().await {
        Err(LockError::Config(message)) => {
            assert!(
                message.contains("`free-pool`") && message.contains('3'),
                "{message}"
            );
        }
        other => panic!("available() under another limit: {other:?}"),
    }
    let lock = client.lock("free-lock").await.unwrap();
    assert!(matches!(
        client.semaphore("free-lock", 2).available().await,
        Err(LockError::Config(_))
    ));
    lock.release().await.unwrap();
    c.release().await.unwrap();
    assert_eq!(pool().available().await.unwrap(), 3, "all given back");
}

/// Several keys: named in any order and with repeats, taken once each in canonical order and
/// stored under one holder each; a lone lock of any of them is busy; release frees every key,
/// as does dropping the guard.
pub async fn several_keys_are_taken_together_and_given_back_together(fixture: &dyn Fixture) {
    let (one, two) = (
        fixture
            .builder()
            .fencing(fixture.supports(Feature::Fencing).await)
            .build()
            .await
            .unwrap(),
        fixture.client().await,
    );
    let set = one
        .lock_all(["acct:z", "acct:a", "acct:z"])
        .lease(ms(10_000))
        .wait(ms(0))
        .acquire()
        .await
        .expect("a free set at once");
    assert_eq!(
        set.keys().collect::<Vec<_>>(),
        ["acct:a", "acct:z"],
        "canonical order, once each"
    );
    for name in ["lock:acct:a", "lock:acct:z"] {
        assert!(fixture.holder(name).await.is_some(), "{name} not held");
        if let Some(ttl) = fixture.ttl(name).await {
            assert!(ttl <= ms(10_000) && ttl > ms(5_000), "{name}: {ttl:?}");
        }
    }
    if fixture.supports(Feature::Fencing).await {
        let tokens: Vec<u64> = set.fencing_tokens().collect();
        assert_eq!(tokens.len(), 2, "{tokens:?}");
    } else {
        assert_eq!(set.fencing_tokens().count(), 0);
    }
    for key in ["acct:a", "acct:z"] {
        assert!(
            two.lock(key).try_acquire().await.unwrap().is_none(),
            "{key} taken alone while the set holds it"
        );
    }
    assert!(!set.is_lost());
    set.release().await.expect("every key was ours");
    for name in ["lock:acct:a", "lock:acct:z"] {
        assert!(!fixture.anything_at(name).await, "{name} left behind");
    }

    // A dropped set guard gives every key back too.
    let dropped = one.lock_all(["acct:m", "acct:b"]).acquire().await.unwrap();
    assert!(fixture.holder("lock:acct:m").await.is_some());
    drop(dropped);
    assert!(
        eventually(ms(2_000), || async {
            !fixture.anything_at("lock:acct:b").await && !fixture.anything_at("lock:acct:m").await
        })
        .await,
        "a dropped set left a key behind"
    );
    // A set of one key is that key's lock.
    let one_key = one.lock_all(["acct:q", "acct:q"]).acquire().await.unwrap();
    assert_eq!(one_key.keys().collect::<Vec<_>>(), ["acct:q"]);
    one_key.release().await.unwrap();
}

/// `transfer(a, b)` and `transfer(b, a)`, 100 times each from two clients, beside a third
/// client locking `a` alone: nobody times out, and no key ever has two holders.
pub async fn opposite_orders_never_deadlock(fixture: &dyn Fixture) {
    const ROUNDS: usize = 100;
    let clients = [
        fixture.client().await,
        fixture.client().await,
        fixture.client().await,
    ];
    let inside: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, inside) = (client.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let (request, held): (_, &[usize]) = match i {
                    0 => (client.lock_all(["pair:a", "pair:b"]), &[0, 1]),
                    1 => (client.lock_all(["pair:b", "pair:a"]), &[0, 1]),
                    _ => (client.lock("pair:a"), &[0]),
                };
                let guard = request
                    .lease(ms(5_000))
                    .wait(ms(60_000))
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("contender {i}: {e}"));
                for &k in held {
                    assert_eq!(inside[k].fetch_add(1, Ordering::SeqCst), 0, "two holders");
                }
                tokio::task::yield_now().await;
                for &k in held {
                    inside[k].fetch_sub(1, Ordering::SeqCst);
                }
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("contender");
    }
    for name in ["lock:pair:a", "lock:pair:b"] {
        assert!(!fixture.anything_at(name).await, "{name} left behind");
    }
}

/// One `wait` covers the set: when it runs out on a busy key, the error names that key, and
/// every key taken meanwhile is back before the error returns; the busy key's holder is left
/// alone. With `wait = 0`, one try.
pub async fn a_set_that_times_out_gives_back_what_it_took(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let blocker = two
        .lock("span:z")
        .lease(ms(30_000))
        .acquire()
        .await
        .unwrap();
    let holder = fixture.holder("lock:span:z").await;
    for wait in [ms(0), ms(400)] {
        let started = Instant::now();
        let result = one
            .lock_all(["span:z", "span:a"])
            .wait(wait)
            .acquire()
            .await;
        match result {
            Err(LockError::Busy { key }) if wait.is_zero() => {
                assert_eq!(key, "span:z", "the busy key is named");
            }
            Err(LockError::Timeout { key, waited, .. }) if !wait.is_zero() => {
                assert_eq!(key, "span:z", "the busy key is named");
                assert!(waited >= wait, "{waited:?} < {wait:?}");
            }
            other => panic!("a set with a busy key: {other:?}"),
        }
        assert!(started.elapsed() < wait + ms(5_000));
        assert!(
            !fixture.anything_at("lock:span:a").await,
            "the free key stayed taken after a timeout (wait {wait:?})"
        );
        assert_eq!(fixture.holder("lock:span:z").await, holder);
    }
    // Freed meanwhile: the set waits for it, within one `wait`.
    let waiting = tokio::spawn({
        let one = one.clone();
        async move {
            one.lock_all(["span:a", "span:z"])
                .wait(ms(20_000))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(ms(200)).await;
    blocker.release().await.unwrap();
    let set = waiting
        .await
        .unwrap()
        .expect("the set once its busy key was freed");
    assert_eq!(set.keys().collect::<Vec<_>>(), ["span:a", "span:z"]);
    set.release().await.unwrap();
    assert!(!fixture.anything_at("lock:span:a").await);
    assert!(!fixture.anything_at("lock:span:z").await);
}

/// Every key of a set is renewed while the guard lives; deleting any one loses the whole
/// guard, and its release still gives the other key back.
pub async fn losing_any_key_loses_the_set(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    // A lease of 2 s, renewed every 667 ms, held 3 s: renewal is what keeps it, and it rides
    // out a stall of a busy host over a second long. (With 300 ms, a renewal starved for
    // 200 ms lost a set on `mode=advisory`, whose server ends the idle session at the lease;
    // with 900 ms, two renewals of a read share through a shared PgBouncer were held up.)
    let set = client
        .lock_all(["lose:a", "lose:b"])
        .lease(ms(2_000))
        .acquire()
        .await
        .unwrap();
    let tokens = (
        fixture.holder("lock:lose:a").await.expect("a held"),
        fixture.holder("lock:lose:b").await.expect("b held"),
    );
    let started = Instant::now();
    while started.elapsed() < ms(3_000) {
        assert_eq!(
            fixture.holder("lock:lose:a").await.as_ref(),
            Some(&tokens.0)
        );
        assert_eq!(
            fixture.holder("lock:lose:b").await.as_ref(),
            Some(&tokens.1)
        );
        assert!(!set.is_lost(), "lost after {:?}", started.elapsed());
        tokio::time::sleep(ms(50)).await;
    }
    let lost = set.lost();
    fixture.delete("lock:lose:b").await;
    let deleted = Instant::now();
    // Within a renewal interval (667 ms), with the margin a busy host needs.
    tokio::time::timeout(ms(4_000), lost)
        .await
        .expect("lost() resolves when one key is lost");
    assert!(set.is_lost());
    let err = set.release().await.expect_err("a set missing a key");
    match &err {
        LockError::Lost { key } if key == "lose:b" => {}
        // A host stalled past the lease (2 s) from the deletion to the release: the renewal
        // timed out rather than finding `b` gone, and `a` had expired by the release too, so
        // both keys were not ours and the first is named.
        LockError::Lost { key } if key == "lose:a" && deleted.elapsed() >= ms(2_000) => {}
        other => panic!(
            "a set missing `lose:b`, released {:?} after the deletion: {other:?}",
            deleted.elapsed()
        ),
    }
    assert!(
        eventually(ms(1_000), || async {
            !fixture.anything_at("lock:lose:a").await
        })
        .await,
        "the key still held was not given back"
    );
}

/// No keys, or a bad one among good ones: refused before anything is written, naming the bad
/// key.
pub async fn an_empty_or_bad_key_list_is_refused(fixture: &dyn Fixture) {
    let client = fixture.client().await;
    match client.lock_all(Vec::<String>::new()).acquire().await {
        Err(LockError::Config(message)) => assert!(message.contains("no keys"), "{message}"),
        other => panic!("an empty set: {other:?}"),
    }
    let long = "k".repeat(distlock::LockClient::MAX_KEY_LEN + 1);
    for bad in ["", long.as_str(), "bad\nkey"] {
        match client.lock_all(["good:1", bad]).wait(ms(0)).acquire().await {
            Err(LockError::InvalidKey { key, .. }) => assert!(
                key != "good:1" && key.starts_with(&bad[..bad.len().min(3)]),
                "the error names {key:?}, not the bad key {bad:?}"
            ),
            other => panic!("a set with the bad key {bad:?}: {other:?}"),
        }
    }
    match client.lock_all(["good:1", "good:2"]).fair().acquire().await {
        Err(LockError::Config(message)) => assert!(
            message.contains("fair") && message.contains("`good:1`"),
            "{message}"
        ),
        other => panic!("a fair set: {other:?}"),
    }
    assert!(!fixture.anything_at("lock:good:1").await, "a key was taken");
}

/// `.read()` takes every key of the set shared: two sets of readers hold them together, a
/// writer of either key waits; released, nothing is left.
pub async fn a_set_of_readers_shares_every_key(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let take = |client: &LockClient| client.lock_all(["shelf:y", "shelf:x"]).read().wait(ms(0));
    let a = take(&one).acquire().await.expect("readers of a free set");
    let b = take(&two).acquire().await.expect("readers share the set");
    assert_eq!(a.mode(), distlock::LockMode::Read);
    for key in ["shelf:x", "shelf:y"] {
        assert!(
            one.lock(key).try_acquire().await.unwrap().is_none(),
            "a writer of {key} beside its readers"
        );
        assert_eq!(
            fixture.readers(&format!("lock:{key}")).await.len(),
            2,
            "{key}"
        );
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
    for key in ["lock:shelf:x", "lock:shelf:y"] {
        assert!(!fixture.anything_at(key).await, "{key} left behind");
    }
}

// ---- `min_hold` (`../shared/DESIGN.md`, "Scheduled work and shell commands") ----

/// The minimum hold of the `min_hold` cases, and their lease.
const MIN_HOLD: Duration = Duration::from_millis(1_500);
const MIN_HOLD_LEASE: Duration = Duration::from_millis(5_000);

/// Polls `try_take` every 50 ms until it gets the lock; when it did, measured from
/// `acquired` (the grant of the early-released hold, at the latest) and `sent` (at the
/// earliest). The grant must not come before 2/3 of `min_hold` nor after `min_hold` + 1 s.
async fn free_again_after_min_hold<F, Fut>(
    what: &str,
    sent: Instant,
    acquired: Instant,
    mut try_take: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<distlock::LockGuard>>,
{
    let deadline = sent + MIN_HOLD + ms(5_000);
    loop {
        if let Some(guard) = try_take().await {
            let (early, late) = (acquired.elapsed(), sent.elapsed());
            println!("{what}: free again {early:?} after the grant (min_hold {MIN_HOLD:?})");
            // The grant lies between `sent` and `acquired` (a grant that waits for a replica's
            // acknowledgement, on a busy machine, returns well after the server took it): no
            // earlier than 2/3 of `min_hold` after the request went out.
            assert!(
                late >= MIN_HOLD * 2 / 3,
                "{what}: taken again {late:?} after the request ({early:?} after it returned), \
                 before 2/3 of min_hold {MIN_HOLD:?}"
            );
            assert!(
                late <= MIN_HOLD + ms(1_000),
                "{what}: free again only {late:?} after the grant (min_hold {MIN_HOLD:?})"
            );
            guard.release().await.unwrap();
            return;
        }
        assert!(Instant::now() < deadline, "{what}: never free again");
        tokio::time::sleep(ms(50)).await;
    }
}

/// A release before `min_hold` leaves the lock held on the server (for every kind the backend
/// serves: a plain lock, a reader's share, a semaphore's permit, a set of keys), a try-once by
/// another client is busy, and the lock is free again when `min_hold` has passed — not before
/// 2/3 of it, not after `min_hold` + 1 s.
pub async fn a_release_before_min_hold_keeps_the_lock_until_then(fixture: &dyn Fixture) {
    let (one, two) = (fixture.client().await, fixture.client().await);
    let early = |request: distlock::LockRequest| {
        request.lease(MIN_HOLD_LEASE).min_hold(MIN_HOLD).wait(ms(0))
    };
    let released_early = |request| async move {
        let sent = Instant::now();
        let guard = early(request).acquire().await.unwrap();
        let acquired = Instant::now();
        guard.release().await.unwrap();
        (sent, acquired)
    };
    // A plain lock.
    let plain = async {
        let (sent, acquired) = released_early(one.lock("min-hold:plain")).await;
        assert!(
            fixture.holder("lock:min-hold:plain").await.is_some(),
            "released before min_hold: the lock must stay on the server"
        );
        assert!(
            two.lock("min-hold:plain")
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
        free_again_after_min_hold("a plain lock", sent, acquired, || async {
            two.lock("min-hold:plain").try_acquire().await.unwrap()
        })
        .await;
        assert!(!fixture.anything_at("lock:min-hold:plain").await);
    };
    // A waiter already in line when the lock is released early (it saw the whole lease left)
    // is granted it when min_hold has passed, not when that lease would have ended.
    let waited = async {
        let sent = Instant::now();
        let guard = early(one.lock("min-hold:waited")).acquire().await.unwrap();
        let acquired = Instant::now();
        let waiting = two.clone();
        let waiter = tokio::spawn(async move {
            let granted = waiting
                .lock("min-hold:waited")
                .wait(ms(10_000))
                .acquire()
                .await;
            (granted, Instant::now())
        });
        tokio::time::sleep(ms(200)).await;
        guard.release().await.unwrap();
        let (granted, at) = waiter.await.unwrap();
        let granted = granted.expect("the waiter is granted the lock");
        let (early_by, late_by) = (at - acquired, at - sent);
        println!("a waiter in line: granted {early_by:?} after the grant");
        assert!(
            late_by >= MIN_HOLD * 2 / 3 && late_by <= MIN_HOLD + ms(1_000),
            "a waiter in line granted {early_by:?} after the grant (min_hold {MIN_HOLD:?}, lease {MIN_HOLD_LEASE:?})"
        );
        granted.release().await.unwrap();
    };
    // A dropped guard keeps it as well (the release in the background).
    let dropped = async {
        let sent = Instant::now();
        drop(early(one.lock("min-hold:dropped")).acquire().await.unwrap());
        let acquired = Instant::now();
        tokio::time::sleep(ms(200)).await;
        assert!(fixture.holder("lock:min-hold:dropped").await.is_some());
        free_again_after_min_hold("a dropped guard", sent, acquired, || async {
            two.lock("min-hold:dropped").try_acquire().await.unwrap()
        })
        .await;
    };
    // A set of keys: each key is kept.
    let set = async {
        let (sent, acquired) = released_early(one.lock_all(["min-hold:b", "min-hold:a"])).await;
        for key in ["min-hold:a", "min-hold:b"] {
            assert!(
                fixture.holder(&format!("lock:{key}")).await.is_some(),
                "{key}"
            );
        }
        free_again_after_min_hold("a set of keys", sent, acquired, || async {
            two.lock_all(["min-hold:a", "min-hold:b"])
                .try_acquire()
                .await
                .unwrap()
        })
        .await;
    };
    // A fair lock: the next in line is granted it when min_hold has passed.
    let fair = async {
        if fixture.supports(Feature::Fair).await {
            let (sent, acquired) = released_early(one.lock("min-hold:fair").fair()).await;
            assert!(fixture.holder("lock:min-hold:fair").await.is_some());
            free_again_after_min_hold("a fair lock", sent, acquired, || async {
                two.lock("min-hold:fair")
                    .fair()
                    .try_acquire()
                    .await
                    .unwrap()
            })
            .await;
            // A fair waiter (wait in line, not a try) is granted it then too.
            let (sent, acquired) = released_early(one.lock("min-hold:fair").fair()).await;
            let waiter = two.lock("min-hold:fair").fair().wait(ms(10_000)).acquire();
            let granted = waiter.await.expect("the waiter is granted the lock");
            let (early_by, late_by) = (acquired.elapsed(), sent.elapsed());
            println!("a fair waiter: granted {early_by:?} after the grant");
            assert!(
                late_by >= MIN_HOLD * 2 / 3 && late_by <= MIN_HOLD + ms(1_000),
                "{early_by:?}"
            );
            granted.release().await.unwrap();
        }
    };
    // A reader's share keeps writers out.
    let read = async {
        if fixture.supports(Feature::ReadLocks).await {
            let (sent, acquired) = released_early(one.lock("min-hold:read").read()).await;
            assert_eq!(
                fixture.readers("lock:min-hold:read").await.len(),
                1,
                "the share stays"
            );
            free_again_after_min_hold("a reader's share", sent, acquired, || async {
                two.lock("min-hold:read").try_acquire().await.unwrap()
            })
            .await;
        }
    };
    // A semaphore's permit stays in use.
    let permits = async {
        if fixture.supports(Feature::Semaphores).await {
            // (A semaphore's request is a type of its own: `early` by hand.)
            let sent = Instant::now();
            let guard = one
                .semaphore("min-hold:permits", 1)
                .lease(MIN_HOLD_LEASE)
                .min_hold(MIN_HOLD)
                .wait(ms(0))
                .acquire()
                .await
                .unwrap();
            let acquired = Instant::now();
            guard.release().await.unwrap();
            assert_eq!(
                fixture.permits("lock:min-hold:permits").await.len(),
                1,
                "the permit stays"
            );
            free_again_after_min_hold("a semaphore's permit", sent, acquired, || async {
                two.semaphore("min-hold:permits", 1)
                    .try_acquire()
                    .await
                    .unwrap()
            })
            .await;
        }
    };
    // The cases wait out `min_hold` side by side (each on keys of its own).
    tokio::join!(plain, waited, dropped, set, fair, read, permits);
    for key in [
        "min-hold:a",
        "min-hold:b",
        "min-hold:read",
        "min-hold:permits",
    ] {
        assert!(
            !fixture.anything_at(&format!("lock:{key}")).await,
            "{key} left behind"
        );
    }
}

/// A holder process that releases before `min_hold` and then exits normally (its runtime shuts
/// down, its client is dropped) leaves the lock held until `min_hold` has passed: on ZooKeeper
/// and etcd its session or lease is left to expire, not closed. (Lease = `min_hold`.)
pub async fn min_hold_outlives_a_holder_process_that_exits(fixture: &dyn Fixture) {
    let key = "min-hold:exited";
    let min_hold = ms(2_000);
    // Opened first: a `memory://` store lives while a client of it does.
    let client = fixture.client().await;
    let dir = history::scratch_dir("min-hold");
    let env = [
        ("LOCK_URL", fixture.url()),
        ("LOCK_KEY", key.to_owned()),
        ("MIN_HOLD_MS", min_hold.as_millis().to_string()),
    ];
    match fixture.one_process() {
        None => {
            let mut helper = history::Helper::spawn("min_hold", &dir, &env);
            tokio::task::block_in_place(|| helper.wait_success(Duration::from_secs(60)));
        }
        Some(why) => {
            println!("the holder runs on a runtime of its own, not in a process ({why})");
            let (url, dir) = (fixture.url(), dir.clone());
            tokio::task::block_in_place(|| {
                std::thread::spawn(move || {
                    let runtime = history::helper_runtime();
                    runtime.block_on(support::helper::min_hold_then_release(
                        &url, key, min_hold, &dir,
                    ));
                })
                .join()
                .unwrap()
            });
        }
    }
    let granted: u64 = history::read_when_there(&dir.join("granted"), Duration::from_secs(5))
        .await
        .parse()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        client.lock(key).try_acquire().await.unwrap().is_none(),
        "the holder exited {:?} after its grant: its lock must be kept for min_hold",
        Duration::from_nanos(history::now_ns() - granted)
    );
    let deadline = Instant::now() + ms(10_000);
    let guard = loop {
        if let Some(guard) = client.lock(key).try_acquire().await.unwrap() {
            break guard;
        }
        assert!(Instant::now() < deadline, "never free again");
        tokio::time::sleep(ms(50)).await;
    };
    let after = Duration::from_nanos(history::now_ns() - granted);
    println!(
        "free again {after:?} after the exited holder's grant (min_hold = lease = {min_hold:?})"
    );
    assert!(after >= min_hold * 2 / 3, "free again after {after:?}");
    assert!(
        after <= min_hold + ms(1_500),
        "free again only after {after:?}"
    );
    guard.release().await.unwrap();
    assert!(!fixture.anything_at(&format!("lock:{key}")).await);
}

/// `lock_delay`: a holder that dies without releasing (its process exits: no release, no more
/// renewals) leaves the key taken until its lease plus the delay — a waiter is granted no
/// sooner, and soon after; a release, or a forced one, frees the key at once. A store whose
/// locks end with a session refuses it with `Config`, writing nothing.
pub async fn lock_delay_keeps_a_dead_holders_key_past_its_lease(fixture: &dyn Fixture) {
    const LEASE: Duration = Duration::from_millis(1_000);
    const DELAY: Duration = Duration::from_millis(1_500);
    let key = "delayed";
    // Opened first: a `memory://` store lives while a client of it does.
    let client = fixture.client().await;
    // A release frees the key at once, delay or not.
    let other = fixture.client().await;
    let released = client
        .lock(key)
        .lease(LEASE)
        .lock_delay(DELAY)
        .await
        .unwrap();
    released.release().await.unwrap();
    let next = other.lock(key).try_acquire().await.unwrap();
    assert!(next.is_some(), "a released key kept for its lock-delay");
    drop(next);
    // So does a forced release.
    eventually(ms(2_000), || async {
        fixture.holder("lock:delayed").await.is_none()
    })
    .await;
    let forced = client
        .lock(key)
        .lease(LEASE)
        .lock_delay(DELAY)
        .await
        .unwrap();
    client.force_release(key).await.unwrap().expect("held");
    let next = other.lock(key).try_acquire().await.unwrap();
    assert!(
        next.is_some(),
        "a key released by force kept for its lock-delay"
    );
    drop((forced, next));
    eventually(ms(2_000), || async {
        fixture.holder("lock:delayed").await.is_none()
    })
    .await;

    // A holder that dies.
    let dir = history::scratch_dir("lock-delay");
    let env = [
        ("LOCK_URL", fixture.url()),
        ("LOCK_KEY", key.to_owned()),
        ("LEASE_MS", LEASE.as_millis().to_string()),
        ("LOCK_DELAY_MS", DELAY.as_millis().to_string()),
    ];
    match fixture.one_process() {
        None => {
            let mut helper = history::Helper::spawn("die_holding", &dir, &env);
            tokio::task::block_in_place(|| helper.wait_success(Duration::from_secs(60)));
        }
        Some(why) => {
            println!("the holder runs on a runtime of its own, dropped ({why})");
            let (url, dir) = (fixture.url(), dir.clone());
            tokio::task::block_in_place(|| {
                std::thread::spawn(move || {
                    let runtime = history::helper_runtime();
                    runtime.block_on(support::helper::take_and_keep(
                        &url, key, LEASE, DELAY, &dir,
                    ));
                })
                .join()
                .unwrap()
            });
        }
    }
    let sent: u64 = history::read_when_there(&dir.join("granted"), Duration::from_secs(5))
        .await
        .parse()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let guard = other.lock(key).wait(ms(15_000)).await.unwrap();
    let after = Duration::from_nanos(history::now_ns() - sent);
    println!("lock_delay: granted {after:?} after the dead holder's request");
    // No sooner than the lease plus the delay (the store counts both from the grant, after
    // the request was sent, by its own clock: `clock_drift`); no later than the store's usual
    // detection of an ended lease: a waiter retries when the TTL it was told runs out.
    assert!(
        after + support::clock_drift(LEASE + DELAY) >= LEASE + DELAY,
        "granted {after:?} after the dead holder's request (lease {LEASE:?}, lock-delay {DELAY:?})"
    );
    assert!(
        after <= LEASE + DELAY + ms(2_000),
        "granted {after:?} after the dead holder's request (lease {LEASE:?}, lock-delay {DELAY:?})"
    );
    guard.release().await.unwrap();
}

/// `max_hold`: renewal goes on past the lease until grant + `max_hold`, then stops; the guard
/// is lost then and not before, another client is granted the lock at most about one lease
/// later (the last renewal's lease runs out; ZooKeeper and etcd, whose locks live on a
/// session, are given back at `max_hold`), and the capped holder's release says `Lost`. A
/// `max_hold` shorter than the lease is refused before anything is written.
pub async fn max_hold_stops_renewal_and_loses_the_lock_then(fixture: &dyn Fixture) {
    const LEASE: Duration = Duration::from_millis(1_000);
    const MAX_HOLD: Duration = Duration::from_millis(2_500);
    let (one, two) = (fixture.client().await, fixture.client().await);
    let refused = one.lock("capped").lease(LEASE).max_hold(ms(999)).await;
    match refused {
        Err(LockError::Config(message)) => {
            assert!(
                message.contains("`capped`") && message.contains("max_hold"),
                "{message}"
            );
        }
        other => panic!("a max_hold under the lease: {other:?}"),
    }
    assert!(!fixture.anything_at("lock:capped").await, "a refusal wrote");

    let sent = Instant::now();
    let guard = one
        .lock("capped")
        .lease(LEASE)
        .max_hold(MAX_HOLD)
        .acquire()
        .await
        .unwrap();
    // Past the first lease: renewed, held, and nobody else gets it.
    tokio::time::sleep(LEASE * 3 / 2).await;
    assert!(!guard.is_lost(), "lost before max_hold");
    assert!(
        two.lock("capped").try_acquire().await.unwrap().is_none(),
        "another client got the lock before max_hold"
    );
    assert!(fixture.holder("lock:capped").await.is_some());
    let waiter = {
        let two = two.clone();
        tokio::spawn(async move {
            let granted = two.lock("capped").wait(ms(15_000)).acquire().await;
            (granted, Instant::now())
        })
    };
    guard.lost().await;
    let lost_at = sent.elapsed();
    assert!(guard.is_lost());
    assert!(
        lost_at >= MAX_HOLD,
        "lost {lost_at:?} after the request was sent, before max_hold {MAX_HOLD:?}"
    );
    let (granted, at) = waiter.await.unwrap();
    let granted = granted.expect("another client is granted the capped lock");
    let after = at - sent;
    println!("max_hold: lost {lost_at:?}, another client granted {after:?} after the request");
    // The promise: within one lease of max_hold. The slack is the store's expiry granularity
    // (MySQL's `wait_timeout` counts whole seconds, a ZooKeeper session's expiry is ticked),
    // not this machine's speed.
    assert!(
        after >= MAX_HOLD && after <= MAX_HOLD + LEASE + ms(2_500),
        "another client granted {after:?} after the request (max_hold {MAX_HOLD:?}, lease {LEASE:?})"
    );
    match guard.release().await {
        Err(LockError::Lost { key }) => assert_eq!(key, "capped"),
        other => panic!("the capped holder's release: {other:?}"),
    }
    assert!(!granted.is_lost());
    granted.release().await.unwrap();
    assert_eq!(fixture.holder("lock:capped").await, None);
}

/// A release after `min_hold` frees the lock at once; a `min_hold` longer than the lease is
/// refused with `Config`, naming the key, before anything is written.
pub async fn a_release_after_min_hold_is_plain_and_too_long_a_min_hold_is_refused(
    fixture: &dyn Fixture,
) {
    let client = fixture.client().await;
    let guard = client
        .lock("min-hold:late")
        .lease(ms(3_000))
        .min_hold(ms(200))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(400)).await;
    guard.release().await.unwrap();
    assert!(
        !fixture.anything_at("lock:min-hold:late").await,
        "released after min_hold"
    );
    match client
        .lock("min-hold:long")
        .lease(ms(1_000))
        .min_hold(ms(2_000))
        .acquire()
        .await
    {
        Err(LockError::Config(message)) => {
            assert!(
                message.contains("`min-hold:long`") && message.contains("min_hold"),
                "{message}"
            );
        }
        other => panic!("min_hold longer than the lease: {other:?}"),
    }
    assert!(!fixture.anything_at("lock:min-hold:long").await);
}

/// `share`: four concurrent callers on four clients run the body once and all get its value,
/// which the store holds for the share's length; a call within it gets the value without
/// locking (it succeeds with `wait = 0` while another client holds the lock); `forget` drops
/// it; an `Err` is never stored; after the share the body runs again; a value of another type
/// is a clear error. A store without shared results refuses them, naming itself.
pub async fn a_shared_result_is_computed_once_and_given_to_every_caller(fixture: &dyn Fixture) {
    let one = fixture.client().await;
    let share = Duration::from_secs(30);
    let runs = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for _ in 0..4 {
        let (client, runs) = (fixture.client().await, runs.clone());
        callers.push(tokio::spawn(async move {
            client
                .lock("report")
                .wait(Duration::from_secs(30))
                .share(share)
                .run(|| async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(ms(300)).await;
                    Ok::<_, LockError>(format!("report #{}", runs.load(Ordering::SeqCst)))
                })
                .await
        }));
    }
    for caller in callers {
        assert_eq!(caller.await.unwrap().unwrap(), "report #1");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the body ran more than once"
    );
    if fixture.one_process().is_none() {
        let ttl = fixture
            .shared_ttl("lock:report")
            .await
            .expect("the result is stored");
        assert!(
            ttl <= share && ttl > share - Duration::from_secs(10),
            "{ttl:?}"
        );
    }
    assert_eq!(
        fixture.holder("lock:report").await,
        None,
        "the lock was kept"
    );

    // Within the share: no lock taken (the lock is held elsewhere, and `wait` is zero).
    let held = one.lock("report").acquire().await.unwrap();
    let other = fixture.client().await;
    let again = other
        .lock("report")
        .wait(Duration::ZERO)
        .share(share)
        .run(|| async { Err::<String, _>(LockError::Config("the body ran".into())) })
        .await
        .unwrap();
    assert_eq!(again, "report #1");
    held.release().await.unwrap();

    // `forget` drops it: the next call computes again.
    assert!(one.forget_shared("report").await.unwrap());
    assert!(
        !one.forget_shared("report").await.unwrap(),
        "forgotten twice"
    );
    if fixture.one_process().is_none() {
        assert_eq!(fixture.shared_ttl("lock:report").await, None);
    }
    let fresh = one
        .lock("report")
        .share(share)
        .run(|| async { Ok::<_, LockError>("report #2".to_owned()) })
        .await
        .unwrap();
    assert_eq!(fresh, "report #2");

    // An error is never stored.
    let failures = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let failures = failures.clone();
        let error = one
            .lock("failing")
            .share(share)
            .run(|| async move {
                failures.fetch_add(1, Ordering::SeqCst);
                Err::<u64, _>(LockError::Config("the body failed".into()))
            })
            .await
            .unwrap_err();
        assert!(error.to_string().contains("the body failed"), "{error}");
    }
    assert_eq!(failures.load(Ordering::SeqCst), 2, "an error was shared");
    if fixture.one_process().is_none() {
        assert_eq!(fixture.shared_ttl("lock:failing").await, None);
    }

    // After the share, the body runs again. (Within it, it does not: shown above with a share
    // long enough for a loaded machine.)
    let short = ms(400);
    let counted = |n: u64| {
        one.lock("short")
            .share(short)
            .run(move || async move { Ok::<_, LockError>(n) })
    };
    assert_eq!(counted(1).await.unwrap(), 1);
    tokio::time::sleep(short + ms(200)).await;
    assert_eq!(counted(2).await.unwrap(), 2, "after the share");

    // A read lock would let every reader run the body: refused, naming the key.
    let error = one
        .lock("report")
        .read()
        .share(share)
        .run(|| async { Ok::<String, LockError>("read".into()) })
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LockError::Config(why) if why.contains("write lock") && why.contains("report")),
        "{error}"
    );

    // Another type under the same key: a clear error, and the stored value stays.
    let error = one
        .lock("report")
        .share(share)
        .run(|| async { Err::<u64, _>(LockError::Config("the body ran".into())) })
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LockError::Shared { key, reason } if key == "report"
            && reason.contains("String") && reason.contains("u64")),
        "{error}"
    );
}

/// `share` from four processes at once: the body runs in one, and all four get its value.
pub async fn four_processes_share_one_computed_result(fixture: &dyn Fixture) {
    support::helper::four_processes_share_one_result(&fixture.url(), "shared-by-processes").await;
}

/// `on_busy = "skip"` (ShedLock's behaviour): a lock another client holds past `wait` skips the
/// body and gives `Ok(Default::default())`, and leaves the holder's lock as it was and nothing
/// of its own; a free lock runs the body. Through `with_client`, the fixture's own client.
pub async fn on_busy_skip_runs_nothing_when_busy(fixture: &dyn Fixture) {
    #[distlock::distributed_lock(key = "skip:<name>", wait = "0s", on_busy = "skip")]
    async fn job(name: &str, ran: &AtomicUsize) -> Result<Option<u32>, LockError> {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(Some(7))
    }
    let client = fixture.client().await;
    let other = fixture.client().await;
    let ran = AtomicUsize::new(0);
    let held = other
        .lock("skip:x")
        .lease(ms(5_000))
        .acquire()
        .await
        .unwrap();
    let holder = fixture.holder("lock:skip:x").await;
    assert!(holder.is_some(), "the other client holds the lock");
    let skipped = distlock::with_client(&client, job("x", &ran)).await;
    assert!(matches!(skipped, Ok(None)), "{skipped:?}");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the body ran while the lock was busy"
    );
    assert_eq!(
        fixture.holder("lock:skip:x").await,
        holder,
        "the holder's lock changed"
    );
    held.release().await.unwrap();
    let done = distlock::with_client(&client, job("x", &ran)).await;
    assert!(matches!(done, Ok(Some(7))), "{done:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(
        !fixture.anything_at("lock:skip:x").await,
        "something left behind"
    );
}

/// Reentrancy is the same however the lock was entered: `client.lock(k).acquire()` in the body
/// of an annotated function holding `k`, and an annotated call or an acquire inside
/// `guard.scope(…)` of a manual guard, are granted at once (a try-once, so no fresh
/// acquisition could have succeeded: the server holds the key) and give nothing back; the
/// outer release frees the key. Outside the scope the same task is another owner, and a write
/// under a read fails with `WriteUnderRead`.
pub async fn reentrancy_is_the_same_however_the_lock_was_entered(fixture: &dyn Fixture) {
    #[distlock::distributed_lock(key = "re:<name>", client = client, wait = "0s")]
    async fn annotated(
        client: &LockClient,
        name: &str,
        fixture: &dyn Fixture,
        outer: Option<String>,
    ) -> Result<Option<String>, LockError> {
        let holder = fixture.holder(&format!("lock:re:{name}")).await;
        assert!(holder.is_some(), "the annotated call holds the key");
        if let Some(outer) = outer {
            assert_eq!(holder, Some(outer), "a nested call took the key anew");
        }
        let inner = client.lock(format!("re:{name}")).try_acquire().await?;
        let inner = inner.expect("a manual acquire under an annotated hold is granted");
        assert_eq!(inner.key(), format!("re:{name}"));
        inner.release().await?;
        assert_eq!(
            fixture.holder(&format!("lock:re:{name}")).await,
            holder,
            "the inner release gave the key back"
        );
        Ok(holder)
    }
    let client = fixture.client().await;
    let other = fixture.client().await;
    // Manual under annotated: the key is held until the annotated call returns.
    let held = annotated(&client, "a", fixture, None).await.unwrap();
    assert!(held.is_some());
    assert!(
        !fixture.anything_at("lock:re:a").await,
        "the annotated call's release did not free the key"
    );
    // Annotated (and manual) under a manual guard, inside its scope.
    let guard = client.lock("re:b").acquire().await.unwrap();
    let outer = fixture.holder("lock:re:b").await;
    assert!(outer.is_some());
    let inside = guard
        .scope(annotated(&client, "b", fixture, outer.clone()))
        .await
        .unwrap();
    assert_eq!(inside, outer);
    // Outside the scope, this task is another owner: a try-once fails.
    assert!(client.lock("re:b").try_acquire().await.unwrap().is_none());
    assert!(other.lock("re:b").try_acquire().await.unwrap().is_none());
    assert_eq!(
        fixture.holder("lock:re:b").await,
        outer,
        "still the guard's"
    );
    guard.release().await.unwrap();
    assert!(
        !fixture.anything_at("lock:re:b").await,
        "the outer release frees it"
    );
    // A write under a read fails at once with WriteUnderRead, and writes nothing.
    if !serves_read_locks(fixture, &client, "re:c").await {
        return;
    }
    let read = client.lock("re:c").read().acquire().await.unwrap();
    let refused = read
        .scope(async { client.lock("re:c").acquire().await })
        .await;
    assert!(
        matches!(refused, Err(LockError::WriteUnderRead { .. })),
        "{refused:?}"
    );
    let shared = read
        .scope(async { client.lock("re:c").read().try_acquire().await })
        .await
        .unwrap();
    assert!(shared.is_some(), "a read under a read is granted");
    drop(shared);
    read.release().await.unwrap();
    assert!(!fixture.anything_at("lock:re:c").await);
}

/// An election on every backend that fences (Redlock refuses with `Config`): three candidates
/// on three clients lead one at a time, each leader's own writes (to a shared log, under its
/// term) never overlapping another's and terms strictly rising; `leader()` from a fourth client
/// names each leader and term; `resign()` lets a waiting candidate lead at once (well within
/// the lease it would otherwise wait out); an observer never sees an older term after a newer
/// one; bad input and a name held as a plain lock or a semaphore are refused, nothing written.
pub async fn an_election_has_one_leader_at_a_time(fixture: &dyn Fixture) {
    use futures_util::StreamExt;
    let watcher = fixture.client().await;
    let lease = ms(10_000);
    let election = watcher.election("elect:one").poll(ms(20));
    assert_eq!(election.leader().await.unwrap(), None);
    let observed = tokio::spawn(
        election
            .observe()
            .take_while(|seen| {
                std::future::ready(!matches!(seen, Ok(Some(l)) if l.identity() == "stop"))
            })
            .collect::<Vec<_>>(),
    );
    let log = Arc::new(std::sync::Mutex::new(Vec::<(String, u64)>::new()));
    let mut candidates = Vec::new();
    for identity in ["host-a:1", "host-b:2", "host-c:3"] {
        let client = fixture.client().await;
        let (log, watcher) = (Arc::clone(&log), watcher.clone());
        candidates.push(tokio::spawn(async move {
            let leader = client
                .election("elect:one")
                .lease(lease)
                .campaign(identity)
                .await
                .unwrap();
            let started = Instant::now();
            log.lock()
                .unwrap()
                .push((format!("start {identity}"), leader.term()));
            let seen = watcher
                .election("elect:one")
                .leader()
                .await
                .unwrap()
                .unwrap();
            assert_eq!((seen.identity(), seen.term()), (identity, leader.term()));
            tokio::time::sleep(ms(150)).await;
            log.lock()
                .unwrap()
                .push((format!("end {identity}"), leader.term()));
            leader.resign().await.unwrap();
            started
        }));
    }
    let mut ends = Vec::new();
    for candidate in candidates {
        ends.push(candidate.await.unwrap());
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 6, "{log:?}");
    for pair in log.chunks(2) {
        let (start, end) = (&pair[0], &pair[1]);
        assert!(
            start.0.starts_with("start ") && end.0.starts_with("end "),
            "overlap: {log:?}"
        );
        assert_eq!(
            (&start.0[6..], start.1),
            (&end.0[4..], end.1),
            "overlap: {log:?}"
        );
    }
    let terms: Vec<u64> = log.iter().step_by(2).map(|e| e.1).collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms rise: {log:?}");
    // Handed over on resign, not when a lease ran out: all three led well within one lease.
    let first = ends.iter().min().unwrap();
    let last = ends.iter().max().unwrap();
    assert!(
        last.duration_since(*first) < lease / 2,
        "{:?}",
        last.duration_since(*first)
    );
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "nobody leads after the last resigns"
    );
    let stop = watcher
        .election("elect:one")
        .campaign("stop")
        .await
        .unwrap();
    let observed = tokio::time::timeout(ms(10_000), observed)
        .await
        .expect("the observer saw the last leader")
        .unwrap();
    stop.resign().await.unwrap();
    let mut newest = 0;
    for seen in &observed {
        if let Ok(Some(leader)) = seen {
            assert!(
                leader.term() > newest,
                "an older term after a newer one: {observed:?}"
            );
            newest = leader.term();
        }
    }
    assert!(observed.iter().all(Result::is_ok), "{observed:?}");
    // Bad input: nothing written.
    for (identity, why) in [
        ("", "empty"),
        ("a\nb", "control"),
        (&*"x".repeat(64), "too long"),
    ] {
        match watcher.election("elect:bad").campaign(identity).await {
            Err(LockError::Config(message)) => assert!(message.contains(why), "{message}"),
            other => panic!("identity {identity:?}: {other:?}"),
        }
    }
    assert!(matches!(
        watcher.election("").campaign("a").await,
        Err(LockError::InvalidKey { .. })
    ));
    assert!(!fixture.anything_at("lock:elect:bad").await);
    // A name held as a plain lock (or a semaphore) is not an election's.
    let plain = watcher.lock("elect:plain").acquire().await.unwrap();
    let holder = fixture.holder("lock:elect:plain").await;
    match watcher
        .election("elect:plain")
        .wait(ms(0))
        .campaign("a")
        .await
    {
        Err(LockError::Config(message)) => assert!(message.contains("plain lock"), "{message}"),
        other => panic!("a campaign on a plain lock: {other:?}"),
    }
    assert!(watcher.election("elect:plain").leader().await.is_err());
    assert_eq!(
        fixture.holder("lock:elect:plain").await,
        holder,
        "the lock was touched"
    );
    plain.release().await.unwrap();
    if fixture.supports(Feature::Semaphores).await {
        let permit = watcher
            .semaphore("elect:permits", 2)
            .acquire()
            .await
            .unwrap();
        match watcher
            .election("elect:permits")
            .wait(ms(0))
            .campaign("a")
            .await
        {
            Err(LockError::Config(message)) => assert!(message.contains("semaphore"), "{message}"),
            other => panic!("a campaign on a semaphore: {other:?}"),
        }
        permit.release().await.unwrap();
    }
}

/// The tests of `cases` for one fixture.
macro_rules! cases {
    ($fixture:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = $fixture;
                super::$case(&fixture).await;
            }
        )*
    };
}

/// The cases of one group — what a store serves (`serves`: its cases), or lacks (`lacks`: the
/// typed refusal, where the group is a feature) — in the full suite (`full`) or the TLS one.
macro_rules! group {
    (full $fixture:expr; serves read_locks) => {
        cases!($fixture;
            readers_share_a_key_and_exclude_writers,
            each_reader_has_its_own_lease,
            a_waiting_writer_is_not_starved_by_readers,
            releases_wake_readers_and_writers,
            a_writer_that_gives_up_lets_readers_in_again,
            readers_get_the_last_writers_fencing_token,
            the_admin_api_shows_readers,
            a_set_of_readers_shares_every_key,
        );
    };
    (full $fixture:expr; serves upgradable) => {
        cases!($fixture;
            an_upgradable_read_upgrades_without_letting_a_writer_in,
            a_given_up_upgrade_leaves_the_upgradable_read_as_it_was,
            an_upgrade_waits_for_a_reader_behind_a_waiting_upgradable_request,
        );
    };
    (full $fixture:expr; serves semaphores) => {
        cases!($fixture;
            a_semaphore_admits_up_to_n_holders_at_once,
            each_permit_has_its_own_lease,
            a_semaphore_refuses_another_limit_and_another_kind,
            a_permit_release_wakes_a_waiter,
            permits_get_rising_fencing_tokens,
            the_admin_api_shows_permits,
            available_counts_the_permits_not_held,
        );
    };
    (full $fixture:expr; serves queued_permits) => {
        cases!($fixture; permit_waiters_are_served_in_arrival_order);
    };
    (full $fixture:expr; serves min_hold) => {
        cases!($fixture;
            a_release_before_min_hold_keeps_the_lock_until_then,
            min_hold_outlives_a_holder_process_that_exits,
            a_release_after_min_hold_is_plain_and_too_long_a_min_hold_is_refused,
        );
    };
    (full $fixture:expr; serves lock_delay) => {
        cases!($fixture; lock_delay_keeps_a_dead_holders_key_past_its_lease);
    };
    (full $fixture:expr; serves fencing) => {
        cases!($fixture; fencing_tokens_increase, an_election_has_one_leader_at_a_time);
    };
    (full $fixture:expr; serves processes) => {
        cases!($fixture;
            a_release_whose_reply_was_lost_is_not_reported_lost,
            four_processes_share_one_computed_result,
        );
    };
    (tls $fixture:expr; serves read_locks) => {
        cases!($fixture; readers_share_a_key_and_exclude_writers);
    };
    (tls $fixture:expr; serves semaphores) => {
        cases!($fixture; a_semaphore_admits_up_to_n_holders_at_once);
    };
    (tls $fixture:expr; serves fencing) => {
        cases!($fixture; fencing_tokens_increase);
    };
    ($suite:ident $fixture:expr; serves $group:ident) => {};
    ($suite:ident $fixture:expr; lacks read_locks) => {
        cases!($fixture; read_locks_are_refused_writing_nothing);
    };
    ($suite:ident $fixture:expr; lacks upgradable) => {
        cases!($fixture; upgradable_reads_are_refused_writing_nothing);
    };
    ($suite:ident $fixture:expr; lacks semaphores) => {
        cases!($fixture; semaphores_are_refused_writing_nothing);
    };
    ($suite:ident $fixture:expr; lacks fair) => {
        cases!($fixture; fair_locks_are_refused_writing_nothing);
    };
    ($suite:ident $fixture:expr; lacks min_hold) => {
        cases!($fixture; min_hold_is_refused_writing_nothing);
    };
    ($suite:ident $fixture:expr; lacks lock_delay) => {
        cases!($fixture; lock_delay_is_refused_writing_nothing);
    };
    ($suite:ident $fixture:expr; lacks fencing) => {
        cases!($fixture; fencing_and_elections_are_refused_writing_nothing);
    };
    // Not features: a semaphore without arrival order, a store inside the process, have no
    // refusal to check.
    ($suite:ident $fixture:expr; lacks $group:ident) => {};
}

/// One fixture's module: the `cases` every store runs, each group it `serves` or `lacks`, and
/// a test that the two lists are what its client says it can do (`LockClient::supports`, the
/// store's `Capabilities`): a case exists exactly where it applies.
macro_rules! conformance {
    ($suite:ident $backend:ident => $fixture:expr;
        serves [$($serves:ident),* $(,)?]; lacks [$($lacks:ident),* $(,)?];
        $($case:ident),* $(,)?) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;
            cases!($fixture; $($case),*);
            $(group!($suite $fixture; serves $serves);)*
            $(group!($suite $fixture; lacks $lacks);)*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn its_cases_are_what_its_store_serves() {
                let fixture = $fixture;
                super::groups_are_capabilities(
                    &fixture,
                    &[$(stringify!($serves)),*],
                    &[$(stringify!($lacks)),*],
                )
                .await;
            }
        }
    };
}

/// Every group a fixture lists, in `serves` or `lacks`.
const GROUPS: [&str; 9] = [
    "read_locks",
    "upgradable",
    "semaphores",
    "queued_permits",
    "fair",
    "min_hold",
    "lock_delay",
    "fencing",
    "processes",
];

/// Whether the store of `fixture` (`client` one of its clients) has what `group` needs, from
/// the client's capabilities.
fn has(fixture: &dyn Fixture, client: &LockClient, group: &str) -> bool {
    match group {
        "read_locks" => client.supports(Feature::ReadLocks),
        "upgradable" => client.supports(Feature::Upgradable),
        "semaphores" => client.supports(Feature::Semaphores),
        "queued_permits" => {
            client.supports(Feature::Semaphores)
                && distlock::__private::testing::waiters_queue(client)
        }
        "fair" => client.supports(Feature::Fair),
        "min_hold" => client.supports(Feature::MinHold),
        "lock_delay" => client.supports(Feature::LockDelay),
        "fencing" => client.supports(Feature::Fencing) && client.supports(Feature::Elections),
        "processes" => fixture.one_process().is_none(),
        other => panic!("no group `{other}`"),
    }
}

/// The groups a fixture's module `serves` and `lacks` are every group, each where the store's
/// capabilities put it.
async fn groups_are_capabilities(fixture: &dyn Fixture, serves: &[&str], lacks: &[&str]) {
    let mut listed: Vec<&str> = serves.iter().chain(lacks).copied().collect();
    listed.sort_unstable();
    let mut all = GROUPS.to_vec();
    all.sort_unstable();
    assert_eq!(listed, all, "every group once, in `serves` or `lacks`");
    let client = fixture.client().await;
    for group in serves {
        assert!(
            has(fixture, &client, group),
            "listed as served, but the store lacks `{group}`"
        );
    }
    for group in lacks {
        assert!(
            !has(fixture, &client, group),
            "listed as lacking, but the store has `{group}`"
        );
    }
}

macro_rules! suite {
    ($($backend:ident => $fixture:expr;
        serves [$($serves:ident),* $(,)?]; lacks [$($lacks:ident),* $(,)?]),* $(,)?) => {
        $(
            conformance!(full $backend => $fixture;
                serves [$($serves),*]; lacks [$($lacks),*];
                mutual_exclusion_under_contention,
                close_gives_back_what_the_client_holds,
                check_passes_and_leaves_nothing_behind,
                acquire_stores_a_token_with_a_ttl_and_release_deletes_it,
                a_stale_owner_cannot_release_the_new_owners_lock,
                a_stale_owner_cannot_renew_the_new_owners_lock,
                renewal_keeps_a_lock_held_for_five_leases,
                without_renewal_the_lease_ends_and_the_guard_says_lost,
                a_deleted_lock_is_reported_lost_within_one_renewal_interval,
                an_overwritten_lock_is_reported_lost_within_one_renewal_interval,
                a_dropped_guard_is_released_promptly,
                a_cancelled_acquisition_leaves_no_lock_behind,
                a_waiter_is_woken_by_the_release,
                a_waiter_retries_when_the_holders_lease_runs_out,
                wait_zero_tries_once,
                timeout_reports_how_long_it_waited,
                clients_and_tasks_are_separate_owners,
                bad_keys_are_refused_and_nothing_is_written,
                unusual_keys_are_stored_verbatim,
                durations_at_the_edges,
                a_slow_backend_still_grants_waiting_acquisitions,
                the_admin_api_shows_who_holds_what,
                a_forced_release_frees_the_lock_and_tells_the_holder,
                a_watch_reports_each_change_as_the_store_announces_it,
                a_try_once_that_exits_leaves_nothing_in_line,
                a_waiter_whose_process_ends_leaves_nothing_in_line,
                several_keys_are_taken_together_and_given_back_together,
                opposite_orders_never_deadlock,
                a_set_that_times_out_gives_back_what_it_took,
                losing_any_key_loses_the_set,
                an_empty_or_bad_key_list_is_refused,
                max_hold_stops_renewal_and_loses_the_lock_then,
                on_busy_skip_runs_nothing_when_busy,
                a_shared_result_is_computed_once_and_given_to_every_caller,
                reentrancy_is_the_same_however_the_lock_was_entered,
            );
        )*
    };
}

suite! {
    memory => MemoryFixture::new();
        serves [read_locks, upgradable, semaphores, fair, min_hold, lock_delay, fencing];
        lacks [queued_permits, processes],
    redis => RedisFixture::new();
        serves [read_locks, upgradable, semaphores, fair, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits],
    redlock => RedlockFixture::new(3);
        serves [min_hold, lock_delay, processes];
        lacks [read_locks, upgradable, semaphores, queued_permits, fair, fencing],
    cluster => ClusterFixture::new();
        serves [read_locks, upgradable, semaphores, fair, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits],
    sentinel => SentinelFixture::new();
        serves [read_locks, upgradable, semaphores, fair, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits],
}

#[cfg(feature = "postgres")]
suite! {
    postgres => PostgresFixture::new();
        serves [read_locks, upgradable, semaphores, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits, fair],
    advisory => AdvisoryFixture::new();
        serves [read_locks, upgradable, fair, fencing, processes];
        lacks [semaphores, queued_permits, min_hold, lock_delay],
    // Through PgBouncer 1.18 in transaction mode (`pooler=transaction`): `LISTEN` on the
    // server itself (`listen_url`), or none (waiters poll).
    pgbouncer => PostgresFixture::pgbouncer(true);
        serves [read_locks, upgradable, semaphores, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits, fair],
    pgbouncer_polling => PostgresFixture::pgbouncer(false);
        serves [read_locks, upgradable, semaphores, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits, fair],
}

#[cfg(feature = "mysql")]
suite! {
    mysql => MysqlFixture::new();
        serves [read_locks, upgradable, semaphores, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits, fair],
    // `mode=named`: MySQL's and MariaDB's named locks (`GET_LOCK`).
    named => NamedFixture::new();
        serves [fencing, processes];
        lacks [read_locks, upgradable, semaphores, queued_permits, fair, min_hold, lock_delay],
}

#[cfg(feature = "zookeeper")]
suite! {
    zookeeper => ZookeeperFixture::new();
        serves [read_locks, upgradable, semaphores, queued_permits, fair, min_hold, lock_delay,
            fencing, processes];
        lacks [],
    zookeeper_rwlock => ZookeeperFixture::rwlock();
        serves [read_locks, upgradable, semaphores, queued_permits, fair, min_hold, lock_delay,
            fencing, processes];
        lacks [],
}

#[cfg(feature = "etcd")]
suite! {
    etcd => EtcdFixture::new();
        serves [read_locks, upgradable, semaphores, queued_permits, fair, min_hold, lock_delay,
            fencing, processes];
        lacks [],
}

#[cfg(feature = "nats")]
suite! {
    nats => NatsFixture::new();
        serves [read_locks, upgradable, semaphores, fair, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits],
}

/// The core cases again through TLS-only servers (`rediss://`, `redlocks://`, …, each with
/// the test CA named in the URL): what TLS must not change.
#[cfg(feature = "tls")]
macro_rules! tls_suite {
    ($($backend:ident => $fixture:expr;
        serves [$($serves:ident),* $(,)?]; lacks [$($lacks:ident),* $(,)?]),* $(,)?) => {
        $(
            conformance!(tls $backend => $fixture;
                serves [$($serves),*]; lacks [$($lacks),*];
                mutual_exclusion_under_contention,
                acquire_stores_a_token_with_a_ttl_and_release_deletes_it,
                a_stale_owner_cannot_release_the_new_owners_lock,
                renewal_keeps_a_lock_held_for_five_leases,
                a_deleted_lock_is_reported_lost_within_one_renewal_interval,
                a_dropped_guard_is_released_promptly,
                a_waiter_is_woken_by_the_release,
                a_slow_backend_still_grants_waiting_acquisitions,
                the_admin_api_shows_who_holds_what,
                a_watch_reports_each_change_as_the_store_announces_it,
                several_keys_are_taken_together_and_given_back_together,
            );
        )*
    };
}

#[cfg(feature = "tls")]
tls_suite! {
    redis_tls => RedisFixture::tls();
        serves [read_locks, upgradable, semaphores, fair, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits],
    redlock_tls => RedlockFixture::tls(3);
        serves [min_hold, lock_delay, processes];
        lacks [read_locks, upgradable, semaphores, queued_permits, fair, fencing],
    cluster_tls => ClusterFixture::tls();
        serves [read_locks, upgradable, semaphores, fair, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits],
}

#[cfg(all(feature = "tls", feature = "postgres"))]
tls_suite! {
    postgres_tls => PostgresFixture::tls();
        serves [read_locks, upgradable, semaphores, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits, fair],
}

#[cfg(all(feature = "tls", feature = "mysql"))]
tls_suite! {
    mysql_tls => MysqlFixture::tls();
        serves [read_locks, upgradable, semaphores, min_hold, lock_delay, fencing, processes];
        lacks [queued_permits, fair],
}

#[cfg(all(feature = "tls", feature = "zookeeper"))]
tls_suite! {
    zookeeper_tls => ZookeeperFixture::tls();
        serves [read_locks, upgradable, semaphores, queued_permits, fair, min_hold, lock_delay,
            fencing, processes];
        lacks [],
}

#[cfg(all(feature = "tls", feature = "etcd"))]
tls_suite! {
    etcd_tls => EtcdFixture::tls();
        serves [read_locks, upgradable, semaphores, queued_permits, fair, min_hold, lock_delay,
            fencing, processes];
        lacks [],
}

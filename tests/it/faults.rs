//! The fault suite: every scenario written once, as a function of the backend's
//! [`Faulty`] fixture, and run on every backend it applies to — one `redis-server`, Redlock over
//! three servers (a fault hits a majority: two), a three-master Redis Cluster (a fault hits the
//! master that owns the key's slot), PostgreSQL (directly and through PgBouncer), MariaDB,
//! ZooKeeper, etcd, NATS. A test exists exactly where its scenario applies ([`Scenario::applies`]),
//! each writes its outcome, and RELIABILITY.md's fault table is rendered from a run's outcomes
//! (`scripts/reliability.sh`; `reliability_md_is_the_fault_suites_outcomes`).
//!
//! 1. the holder process is killed (`kill -9`): the next grant comes after the lease, never before;
//! 2. the holder process is paused (SIGSTOP) past its lease, another process takes the lock and
//!    writes, the first resumes and writes: the fenced resource rejects the stale write;
//! 3. the holder's connection is blackholed past its lease: the guard declares the loss (on the
//!    monotonic clock) before the new holder's acquisition returns;
//! 4. a waiter's connection is cut while it waits and the holder releases: the waiter never
//!    believes it holds a lock it does not hold;
//! 5. the server restarts empty while a lock is held: the guard reports the loss before its lease
//!    would have ended, and a new holder succeeds;
//! 6. the server is killed and restarts with its data: the lock stays held, renewal goes on;
//! 7. the server dies mid-acquire, mid-renew and mid-release: each call fails within a bound,
//!    nothing panics, and once the server is back the lock works again;
//! 8. after every exit path of an annotated function, and after runtime shutdown, nothing is
//!    written again (the server's own counters);
//! 9. three servers that elect a leader lose it, then their majority: locks are kept through the
//!    first, refused (and the holder told) after the second.
//!
//! Processes are copies of this test binary in a role of `support::helper`.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use distlock::{Feature, LockClient, LockError};
use support::faults::{Backend, Faulty, Recorder, Scenario};
use support::fenced::Resource;
use support::fixture::Fixture;
use support::helper::{self, EXIT_PATHS};
use support::history::{self, Helper, Hold, check, now_ns};
use support::unique;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The test named `test` (`s<N>_<scenario>`) of backend `F`: runs its scenario, and writes
/// what it found where `scripts/test.sh` collects the outcomes of the run (see
/// [`support::faults::Recorder`]). A test exists only where its scenario applies
/// (`scenario_tests_exist_exactly_where_they_apply`).
async fn scenario<F: Faulty>(test: &str) {
    let scenario = Scenario::of_test(test).expect("a scenario's test name");
    if let Err(why) = scenario.applies(F::BACKEND) {
        panic!("{test} is no case of {:?}: {why}", F::BACKEND);
    }
    let recorder = Recorder::start(F::BACKEND, scenario);
    run::<F>(scenario).await;
    recorder.passed();
}

/// Runs `scenario` on backend `F`.
async fn run<F: Faulty>(scenario: Scenario) {
    match scenario {
        Scenario::HolderKilled => holder_killed(F::shared()).await,
        Scenario::PausedHolderIsFencedOff => paused_holder_is_fenced_off(F::shared()).await,
        Scenario::BlackholedHolder => blackholed_holder(F::shared()).await,
        Scenario::WaiterCutOff => waiter_cut_off(F::shared()).await,
        Scenario::ServerRestartsEmpty => server_restarts_empty(F::own()).await,
        Scenario::ServerRestartsWithItsData => server_restarts_with_its_data(F::own()).await,
        Scenario::ServerDiesMidCall => server_dies_mid_call(F::own()).await,
        Scenario::NoRenewalAfterExit => no_renewal_after_exit(F::own()).await,
        Scenario::LeaderThenMajorityLost => leader_then_majority_lost::<F>().await,
        Scenario::ReaderKilled => reader_killed(F::shared()).await,
        Scenario::PausedReaderLosesItsShare => paused_reader_loses_its_share(F::shared()).await,
        Scenario::PermitHolderKilled => permit_holder_killed(F::shared()).await,
        Scenario::PausedHolderKeptForItsLockDelay => {
            paused_holder_kept_for_its_lock_delay(F::shared()).await
        }
        Scenario::PausedPermitHolderLosesItsPermit => {
            paused_permit_holder_loses_its_permit(F::shared()).await
        }
        Scenario::SetHolderKilled => killed(F::shared(), Killed::Set).await,
    }
}

/// The owner token the servers hold for lock `key`.
async fn holder_of(fixture: &dyn Fixture, key: &str) -> Option<String> {
    fixture.holder(&format!("lock:{key}")).await
}

/// Asserts that the servers hold the lock `key` for `guard` (its owner token is stored).
async fn assert_holds(fixture: &dyn Fixture, key: &str, guard: &distlock::LockGuard, what: &str) {
    let mine = distlock::__private::testing::owner_token(guard).to_owned();
    assert_eq!(holder_of(fixture, key).await, Some(mine), "{what}");
}

/// A client of the fixture whose connect and response timeouts are `timeout` (what a scenario
/// exercises), connected patiently (its connection is the setup: see
/// `support::helper::connect_patiently`).
async fn short_timeout_client(fixture: &dyn Fixture, timeout: Duration) -> LockClient {
    support::helper::connect_patiently(|| {
        fixture
            .builder()
            .connect_timeout(timeout)
            .response_timeout(timeout)
            .build()
    })
    .await
}

/// A client of the fixture with fencing where the backend has it.
async fn fenced_client(fixture: &dyn Fixture) -> LockClient {
    fixture
        .builder()
        .fencing(fixture.supports(Feature::Fencing).await)
        .build()
        .await
        .unwrap()
}

/// A holder process of `key` (lease `lease`), in mode `hold` or `fenced` (writing `resource`).
async fn spawn_holder<F: Faulty>(
    fixture: &F,
    key: &str,
    lease: Duration,
    mode: &str,
    resource: &str,
) -> Helper {
    let fencing = fixture.supports(Feature::Fencing).await;
    helper::spawn(
        "holder",
        &[
            ("LOCK_URL", fixture.url()),
            ("LOCK_KEY", key.to_owned()),
            ("LEASE_MS", lease.as_millis().to_string()),
            ("FENCING", if fencing { "1" } else { "0" }.into()),
            ("MODE", mode.to_owned()),
            ("RESOURCE", resource.to_owned()),
        ],
    )
}

/// Whether the servers hold a reader's share of `key` under `token`.
async fn holds_share(fixture: &dyn Fixture, key: &str, token: &str) -> bool {
    let readers = fixture.readers(&format!("lock:{key}")).await;
    readers.iter().any(|(t, _)| t == token)
}

/// `(fencing token, acquired_at, owner token)` from a holder's `acquired` file.
async fn acquired(helper: &Helper) -> (Option<u64>, u64, String) {
    let line = helper.read("acquired", Duration::from_secs(30)).await;
    let parts: Vec<&str> = line.split(' ').collect();
    (
        parts[0].parse().ok(),
        parts[1].parse().unwrap(),
        parts[2].to_owned(),
    )
}

/// Asserts that a grant at `granted_at` came no sooner than the expiry the server held for a
/// holder that stopped at `before_read`, when the TTL read was `ttl` (see
/// [`Faulty::expiry_slack`]; 2 ms tolerance).
fn assert_not_before_expiry<F: Faulty>(
    fixture: &F,
    lease: Duration,
    before_read: u64,
    ttl: Duration,
    granted_at: u64,
) {
    let slack = fixture.expiry_slack(lease);
    let expiry = before_read + ttl.saturating_sub(slack).as_nanos() as u64;
    let drift = support::clock_drift(ttl).as_nanos() as u64;
    assert!(
        granted_at + drift >= expiry,
        "granted {} ms before the stopped holder's lease ended (TTL {ttl:?} read then, slack \
         {slack:?})",
        (expiry - granted_at) / 1_000_000
    );
}

// ---------------------------------------------------------------------------------------------
// 1. kill -9 of the holder process.

async fn holder_killed<F: Faulty>(fixture: F) {
    killed(fixture, Killed::Writer).await;
}

/// Who is killed in rows 1, 10 and 12.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Killed {
    /// The plain lock's holder; a writer waits.
    Writer,
    /// A reader; a writer waits.
    Reader,
    /// The holder of a semaphore's one permit; a waiter for a permit.
    Permit,
    /// The holder of two keys at once (`lock_all`); a waiter for both.
    Set,
}

/// Rows 1, 10 and 12: a holder (a writer, a reader, or the holder of a semaphore's one permit)
/// is killed; the waiter gets the lock (or the permit) one lease later, not before.
async fn killed<F: Faulty>(fixture: F, who: Killed) {
    let (name, mode) = match who {
        Killed::Writer => ("killed", "hold"),
        Killed::Reader => ("reader-killed", "read"),
        Killed::Permit => ("permit-killed", "permit"),
        Killed::Set => ("set-killed", "set"),
    };
    let key = unique(name);
    // The set's second key (the helper's `set` mode takes `<key>` and `<key>:2`).
    let second = format!("{key}:2");
    let lease = fixture.short_lease();
    let mut holder = spawn_holder(&fixture, &key, lease, mode, "").await;
    let (first_token, _, owner) = acquired(&holder).await;
    let second_owner = holder_of(&fixture, &second).await;
    match who {
        Killed::Writer => assert_eq!(holder_of(&fixture, &key).await, Some(owner)),
        Killed::Reader => assert!(
            holds_share(&fixture, &key, &owner).await,
            "the server holds the reader's share"
        ),
        Killed::Permit => assert_eq!(permit_holders(&fixture, &key).await, [owner]),
        Killed::Set => {
            // The helper wrote the token of the set's first key in canonical order: `<key>`,
            // or `<key>:2` in a cluster (`{lock:K:2}` sorts before `{lock:K}`).
            let first = holder_of(&fixture, &key).await;
            assert!(
                first.is_some() && second_owner.is_some(),
                "the server holds both keys of the set: {first:?}, {second_owner:?}"
            );
            assert!(first == Some(owner.clone()) || second_owner == Some(owner));
        }
    }
    // Let the holder renew a few times, so the lease is the renewed one.
    tokio::time::sleep(ms(500)).await;
    let before_read = now_ns();
    let Some(ttl) = fixture.ttl(&format!("lock:{key}")).await else {
        panic!(
            "the lock has no TTL 300 ms after its grant; the last the server logged:\n{}",
            fixture.recent_writes().await
        );
    };
    holder.signal(libc::SIGKILL);
    let killed_at = now_ns();
    let _ = holder.child.wait();

    let client = fenced_client(&fixture).await;
    let wait = Duration::from_secs(15);
    let acquisition = match who {
        Killed::Permit => {
            let request = client.semaphore(key.as_str(), 1);
            request.lease(lease).wait(wait).into_future()
        }
        Killed::Set => {
            let request = client.lock_all([second.as_str(), key.as_str()]);
            request.lease(lease).wait(wait).into_future()
        }
        Killed::Writer | Killed::Reader => {
            let request = client.lock(key.as_str());
            request.lease(lease).wait(wait).into_future()
        }
    };
    let guard = acquisition.await.unwrap();
    let granted_at = now_ns();
    // Never before the lease the server held at the kill (it can only have been extended since
    // `before_read`); and soon after it, since the waiter retries when the TTL runs out. (A
    // backend whose locks end with the holder's connection frees them at the kill: nobody
    // holds them any more.)
    if !fixture.frees_when_the_holder_dies() {
        assert_not_before_expiry(&fixture, lease, before_read, ttl, granted_at);
    }
    let after_kill = Duration::from_nanos(granted_at - killed_at);
    assert!(
        after_kill < lease + fixture.expiry_late(),
        "granted {after_kill:?} after the kill"
    );
    if fixture.supports(Feature::Fencing).await {
        // A writer's (or permit's) token is larger than the killed holder's; a reader's is the
        // last write grant's, or its own grant's (ZooKeeper, etcd): either way below the new one.
        assert!(guard.fencing_token() > first_token);
        if who == Killed::Set {
            assert_eq!(guard.fencing_tokens().count(), 2, "{guard:?}");
        }
    }
    if who == Killed::Set {
        let mut keys: Vec<&str> = guard.keys().collect();
        keys.sort_unstable();
        assert_eq!(keys, [key.as_str(), second.as_str()]);
        let now = holder_of(&fixture, &second).await;
        assert!(
            now.is_some() && now != second_owner,
            "the waiter holds the second key: {now:?}"
        );
    }
    if who == Killed::Permit {
        let mine = distlock::__private::testing::owner_token(&guard).to_owned();
        assert_eq!(
            permit_holders(&fixture, &key).await,
            [mine],
            "the waiter's permit, alone"
        );
    } else {
        // (Of a set, its first key in canonical order.)
        assert_holds(
            &fixture,
            guard.key(),
            &guard,
            "the new holder's token is stored",
        )
        .await;
    }
    guard.release().await.unwrap();
    let who = match who {
        Killed::Writer => "holder's lock",
        Killed::Reader => "reader's lock",
        Killed::Permit => "holder's permit",
        Killed::Set => "holder's two keys",
    };
    eprintln!(
        "{:?}: a killed {who} granted again {after_kill:?} after the kill (TTL then {ttl:?})",
        F::BACKEND
    );
}

// ---------------------------------------------------------------------------------------------
// 2. The holder is paused past its lease; the fenced resource rejects its stale write.

async fn paused_holder_is_fenced_off<F: Faulty>(fixture: F) {
    let key = unique("paused");
    let resource_name = unique("resource").replace('-', "_");
    let mut resource = Resource::open(&fixture.url(), &resource_name).await;
    let lease = fixture.short_lease() / 2;
    let holder = spawn_holder(&fixture, &key, lease, "fenced", &resource_name).await;
    let (stale_token, _, _) = acquired(&holder).await;
    let stale_token = stale_token.expect("fencing token");
    assert_eq!(holder.read("wrote1", Duration::from_secs(10)).await, "true");

    holder.signal(libc::SIGSTOP);
    let client = fenced_client(&fixture).await;
    let guard = client
        .lock(key.as_str())
        .lease(ms(10_000))
        .wait(Duration::from_secs(15))
        .acquire()
        .await
        .expect("granted once the paused holder's lease ran out");
    let token = guard.fencing_token().unwrap();
    assert!(token > stale_token, "{token} after {stale_token}");
    resource.plain_write("written by the new holder").await;
    assert!(
        resource
            .fenced_write("written by the new holder", token)
            .await,
        "the new holder's write goes through"
    );

    holder.signal(libc::SIGCONT);
    history::write_file(&holder.dir.join("write-again"), "go");
    let outcome = holder.read("wrote2", Duration::from_secs(10)).await;
    assert_eq!(
        outcome, "false plain lost=true",
        "the stale fenced write must be refused, and the paused holder told it lost the lock"
    );
    assert_eq!(
        resource.values().await,
        (
            "written by the new holder".to_owned(),
            "written by the stale holder".to_owned()
        ),
        "the fenced value is the new holder's; the stale plain write landed over the new one"
    );
    guard.release().await.unwrap();
    eprintln!(
        "{:?}: paused holder's fenced write refused (stale token {stale_token} < {token}); its \
         plain write landed",
        F::BACKEND
    );
}

// ---------------------------------------------------------------------------------------------
// 3. The holder's connection is blackholed past its lease.

async fn blackholed_holder<F: Faulty>(fixture: F) {
    let path = fixture.slowed(Duration::ZERO, Duration::ZERO).await;
    let key = unique("blackholed");
    // The holder's margin is the drift allowance (1 % + 2 ms = 22 ms) plus the waiter's retry
    // jitter: a longer lease keeps a busy machine's scheduling delays inside it.
    let lease = ms(2_000);
    let fencing = fixture.supports(Feature::Fencing).await;
    let holder = support::helper::connect_patiently(|| {
        LockClient::builder(path.url.as_str())
            .fencing(fencing)
            .response_timeout(ms(200))
            .connect_timeout(ms(200))
            .build()
    })
    .await;
    let guard = holder
        .lock(key.as_str())
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let held_token = guard.fencing_token();
    tokio::time::sleep(ms(300)).await;
    let before_read = now_ns();
    let Some(ttl) = fixture.ttl(&format!("lock:{key}")).await else {
        panic!(
            "the lock has no TTL 300 ms after its grant; the last the server logged:\n{}",
            fixture.recent_writes().await
        );
    };
    let (cut_at, cut_ns) = (Instant::now(), now_ns());
    for proxy in path.proxies() {
        proxy.set_blackhole(true);
    }
    let other = fenced_client(&fixture).await;
    let next = other
        .lock(key.as_str())
        .lease(lease)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let granted_at = now_ns();
    // Asked the moment the other's acquisition returned, the guard says it is lost (its lease
    // ran out on this process's clock, or its session's heartbeats failed): told before the
    // new grant, whenever a task that waits on `lost()` gets to run on a busy machine.
    assert!(
        guard.is_lost(),
        "the holder was not told before the new grant ({:?} after the cut)",
        cut_at.elapsed()
    );
    tokio::time::timeout(ms(1_000), guard.lost())
        .await
        .expect("lost() resolves once the guard is lost");
    assert_not_before_expiry(&fixture, lease, before_read, ttl, granted_at);
    if fixture.supports(Feature::Fencing).await {
        assert!(next.fencing_token() > held_token);
    }
    for proxy in path.proxies() {
        proxy.set_blackhole(false);
    }
    let err = guard.release().await.unwrap_err();
    assert!(
        err.is_lost() || matches!(err, LockError::Backend { .. }),
        "{err}"
    );
    assert_holds(&fixture, &key, &next, "the new holder's lock is intact").await;
    next.release().await.unwrap();
    eprintln!(
        "{:?}: blackholed holder lost (by its clock or heartbeats) when the new grant came, \
         {:?} after the cut",
        F::BACKEND,
        Duration::from_nanos(granted_at.saturating_sub(cut_ns)),
    );
}

// ---------------------------------------------------------------------------------------------
// 4. A waiter's connection is cut while it waits.

async fn waiter_cut_off<F: Faulty>(fixture: F) {
    let key = unique("cut");
    // Cluster nodes announce their own addresses: no proxy in between; the waiter's connections
    // are cut with `CLIENT KILL` instead.
    let path = match F::BACKEND {
        Backend::Cluster => None,
        _ => Some(fixture.slowed(Duration::ZERO, Duration::ZERO).await),
    };
    let waiter_url = path.as_ref().map_or(fixture.url(), |p| p.url.clone());
    let direct = fenced_client(&fixture).await;
    let fencing = fixture.supports(Feature::Fencing).await;
    let waiter_client = support::helper::connect_patiently(|| {
        LockClient::builder(waiter_url.as_str())
            .fencing(fencing)
            .response_timeout(ms(300))
            .connect_timeout(ms(300))
            .build()
    })
    .await;

    let first = direct
        .lock(key.as_str())
        .lease(ms(5_000))
        .acquire()
        .await
        .unwrap();
    let first_at = now_ns();
    let waiting = tokio::spawn({
        let key = key.clone();
        async move {
            let result = waiter_client
                .lock(key.as_str())
                .wait(Duration::from_secs(8))
                .acquire()
                .await;
            (result, now_ns())
        }
    });
    tokio::time::sleep(ms(150)).await;
    // Cut every connection of the waiter (for the cluster: every client connection of every
    // node, the holders' included) and keep it off for a while.
    match &path {
        Some(path) => path.proxies().for_each(|proxy| proxy.cut(ms(400))),
        None => fixture.cut_every_client().await,
    }
    tokio::time::sleep(ms(50)).await;
    // The holder releases while the waiter is cut off, and a third client takes the lock at
    // once, holds it for a while, and releases.
    let first_token = first.fencing_token();
    let first_released = now_ns();
    first.release().await.unwrap();
    let mut holds = vec![Hold {
        key: key.clone(),
        holder: "first".into(),
        token: first_token,
        acquired_at: first_at,
        released_at: first_released,
        read: false,
        permits: None,
    }];
    // Through the proxy the waiter stays cut off for 400 ms, so this is free — unless the
    // waiter keeps its place in line on the server (ZooKeeper, etcd: its session or lease
    // outlives a short cut), or reconnects at once (the cluster) and wins first: then this one
    // is refused.
    let mut free_at = now_ns();
    match direct
        .lock(key.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
    {
        Ok(second) => {
            let second_at = now_ns();
            tokio::time::sleep(ms(500)).await;
            holds.push(Hold {
                key: key.clone(),
                holder: "second".into(),
                token: second.fencing_token(),
                acquired_at: second_at,
                released_at: now_ns(),
                read: false,
                permits: None,
            });
            second.release().await.unwrap();
            free_at = now_ns();
        }
        Err(err) if err.is_busy() && (path.is_none() || fixture.queues_waiters()) => {}
        Err(err) => panic!("the lock is free while the waiter is cut off: {err}"),
    }

    let (result, returned_at) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter returns")
        .unwrap();
    let outcome = match result {
        Ok(guard) => {
            // It believes it holds the lock: the server must agree, and its hold must not
            // overlap the others.
            assert_holds(&fixture, &key, &guard, "the waiter holds what it thinks").await;
            holds.push(Hold {
                key: key.clone(),
                holder: "waiter".into(),
                token: guard.fencing_token(),
                acquired_at: returned_at,
                released_at: now_ns(),
                read: false,
                permits: None,
            });
            guard.release().await.unwrap();
            // Its notifications were cut too: it must not wait for the last holder's whole
            // lease (30 s by default) to notice the lock is free, but ask again once it can
            // listen again (a failed subscription is retried after 1 s).
            let after = Duration::from_nanos(returned_at.saturating_sub(free_at));
            assert!(
                after < ms(3_000),
                "the cut-off waiter was granted {after:?} after the lock was free"
            );
            format!("granted {after:?} after the lock was free")
        }
        Err(err) => {
            // It gave up: it must say so, and leave nothing behind.
            assert!(
                matches!(err, LockError::Backend { .. } | LockError::Timeout { .. }),
                "{err}"
            );
            assert!(
                support::eventually(ms(2_000), || async {
                    holder_of(&fixture, &key).await.is_none()
                })
                .await,
                "the waiter left a lock behind"
            );
            format!("gave up: {err}")
        }
    };
    let summary = check(&holds).unwrap_or_else(|violation| panic!("{violation}"));
    eprintln!(
        "{:?}: cut-off waiter {outcome}; {} holds, no overlap",
        F::BACKEND,
        summary.holds
    );
}

// ---------------------------------------------------------------------------------------------
// 5. The server restarts empty while a lock is held.

async fn server_restarts_empty<F: Faulty>(mut fixture: F) {
    let key = unique("restart");
    let client = short_timeout_client(&fixture, ms(300)).await;
    let lease = ms(3_000);
    let guard = client
        .lock(key.as_str())
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(200)).await;
    let victims = fixture.victims(&key);
    let before_read = now_ns();
    let Some(ttl) = fixture.ttl(&format!("lock:{key}")).await else {
        panic!(
            "the lock has no TTL 300 ms after its grant; the last the server logged:\n{}",
            fixture.recent_writes().await
        );
    };
    fixture.kill(&victims);
    fixture.restart(&victims);
    assert_eq!(holder_of(&fixture, &key).await, None, "restarted empty");
    tokio::time::timeout(lease, guard.lost())
        .await
        .expect("the holder is told within its lease");
    let told_at = now_ns();
    let lease_end = before_read + ttl.as_nanos() as u64;
    assert!(
        told_at < lease_end,
        "the loss was reported {} ms after the lease would have ended",
        (told_at - lease_end) / 1_000_000
    );
    let other = fixture.client().await;
    let next = other
        .lock(key.as_str())
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("a new holder succeeds");
    assert_holds(&fixture, &key, &next, "the new holder's token is stored").await;
    assert!(
        guard.release().await.is_err(),
        "the old holder cannot release"
    );
    next.release().await.unwrap();
    eprintln!(
        "{:?}: loss reported {} ms before the lease would have ended",
        F::BACKEND,
        (lease_end - told_at) / 1_000_000
    );
}

// ---------------------------------------------------------------------------------------------
// 6. The server is killed and restarts with its data while a lock is held.

async fn server_restarts_with_its_data<F: Faulty>(mut fixture: F) {
    let key = unique("kept");
    let holder = short_timeout_client(&fixture, ms(500)).await;
    let waiter = fixture.client().await;
    let lease = ms(8_000);
    let guard = holder
        .lock(key.as_str())
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    // The waiter asks once before the restart: whatever it waits with (a `LISTEN` connection, a
    // watch) dies with the server.
    assert!(
        waiter
            .lock(key.as_str())
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );

    let victims = fixture.victims(&key);
    let killed_at = Instant::now();
    fixture.kill(&victims);
    tokio::task::block_in_place(|| fixture.restart(&victims));
    let down_for = killed_at.elapsed();
    assert_holds(&fixture, &key, &guard, "still held after the restart").await;
    // Another client cannot take it. A server just restarted on a busy machine may not answer
    // the waiter within its response timeout yet (a `Backend` error: nothing was taken); it is
    // asked again until it answers, and then it must say busy.
    let answered_by = Instant::now() + Duration::from_secs(20);
    loop {
        let other = waiter
            .lock(key.as_str())
            .wait(Duration::ZERO)
            .acquire()
            .await;
        match other {
            Err(e) if e.is_busy() => break,
            Err(LockError::Backend { .. }) if Instant::now() < answered_by => {
                tokio::time::sleep(ms(200)).await;
            }
            other => panic!("another client cannot take it: {other:?}"),
        }
    }
    // A full lease after the kill: renewal went on with the restarted server.
    tokio::time::sleep_until((killed_at + lease + ms(500)).into()).await;
    assert!(
        !guard.is_lost(),
        "the guard reported a loss it did not have"
    );
    assert_holds(&fixture, &key, &guard, "held a full lease after the kill").await;

    // A waiter after the restart is woken by the release, not by the lease.
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move {
            let guard = waiter
                .lock(key.as_str())
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap();
            (Instant::now(), guard)
        }
    });
    tokio::time::sleep(ms(300)).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (granted_at, next) = waiting.await.unwrap();
    let handoff = granted_at - released_at;
    assert!(
        handoff < ms(2_000),
        "the waiter got the lock {handoff:?} after the release: not woken by it"
    );
    assert_holds(&fixture, &key, &next, "the waiter's token is stored").await;
    next.release().await.unwrap();
    eprintln!(
        "{:?}: down {down_for:?}, lock kept a full lease, handoff after it {handoff:?}",
        F::BACKEND
    );
}

// ---------------------------------------------------------------------------------------------
// 7. The server dies mid-acquire, mid-renew and mid-release.

async fn server_dies_mid_call<F: Faulty>(mut fixture: F) {
    let client = short_timeout_client(&fixture, ms(300)).await;
    let bound = Duration::from_secs(4);
    let mut report = Vec::new();

    // Mid-acquire: the request is sent to a hung server, which then dies.
    let key = unique("mid-acquire");
    let victims = fixture.victims(&key);
    let ports = fixture.ports(&victims);
    fixture.pause(&victims);
    let unread = support::faults::unread_at(&ports);
    let started = Instant::now();
    let acquiring = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move {
            let result = client.lock(key.as_str()).wait(ms(1_000)).acquire().await;
            (result, started.elapsed())
        }
    });
    reached(&ports, unread, "the acquisition").await;
    let killed_after = started.elapsed();
    fixture.kill(&victims);
    let (result, returned_after) = tokio::time::timeout(bound, acquiring)
        .await
        .expect("acquire returns within the bound")
        .expect("no panic");
    let err = result
        .map(|guard| (guard, fixture.url()))
        .expect_err(&format!(
            "nothing to acquire from a dead server (killed {killed_after:?} after the pause, the \
         acquisition returned after {returned_after:?})"
        ));
    assert_eq!(err.key(), Some(key.as_str()), "{err}");
    report.push(format!("acquire: {:?} ({err})", started.elapsed()));
    tokio::task::block_in_place(|| fixture.restart(&victims));
    works_again(&fixture, &client, &key).await;

    // Mid-renew: the renewal goes to a hung server, which then dies.
    let key = unique("mid-renew");
    let victims = fixture.victims(&key);
    let ports = fixture.ports(&victims);
    let lease = ms(900);
    let guard = client
        .lock(key.as_str())
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(ms(200)).await;
    fixture.pause(&victims); // the renewal due at 300 ms hangs
    let unread = support::faults::unread_at(&ports);
    reached(&ports, unread, "the renewal").await;
    fixture.kill(&victims);
    tokio::time::timeout(lease, guard.lost())
        .await
        .expect("the holder is told within its lease");
    let started = Instant::now();
    let release = tokio::time::timeout(bound, guard.release())
        .await
        .expect("release returns within the bound");
    assert!(release.is_err(), "a lost lock cannot be released cleanly");
    report.push(format!(
        "renew: lost in time, release {:?}",
        started.elapsed()
    ));
    tokio::task::block_in_place(|| fixture.restart(&victims));
    works_again(&fixture, &client, &key).await;

    // Mid-release: the release goes to a hung server, which then dies.
    let key = unique("mid-release");
    let victims = fixture.victims(&key);
    let ports = fixture.ports(&victims);
    let guard = client
        .lock(key.as_str())
        .lease(ms(3_000))
        .acquire()
        .await
        .unwrap();
    fixture.pause(&victims);
    let unread = support::faults::unread_at(&ports);
    let started = Instant::now();
    let releasing = tokio::spawn(guard.release());
    reached(&ports, unread, "the release").await;
    fixture.kill(&victims);
    let result = tokio::time::timeout(bound, releasing)
        .await
        .expect("release returns within the bound")
        .expect("no panic");
    let err = result.expect_err("a release the server never confirmed is an error");
    assert_eq!(err.key(), Some(key.as_str()), "{err}");
    report.push(format!("release: {:?} ({err})", started.elapsed()));
    tokio::task::block_in_place(|| fixture.restart(&victims));
    works_again(&fixture, &client, &key).await;
    eprintln!("{:?}: {}", F::BACKEND, report.join("; "));
}

/// Waits until the paused servers on `ports` hold more unread bytes than `before`: `call`'s
/// request reached them (and waits there, unanswered), so killing them now kills it mid-call,
/// not before it was sent. (On ZooKeeper and etcd a heartbeat may be what arrives first: those
/// clients send them on their own, and their lock is kept by them.)
async fn reached(ports: &[u16], before: u64, call: &str) {
    let arrived = support::eventually(Duration::from_secs(5), || async {
        support::faults::unread_at(ports) > before
    })
    .await;
    assert!(
        arrived,
        "{call} never reached the paused server on {ports:?} ({} bytes unread, {before} before \
         the call)",
        support::faults::unread_at(ports)
    );
}

fn futures_holder(fixture: &dyn Fixture, key: &str) -> Option<String> {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(holder_of(fixture, key))
    })
}

/// After the restart the same client takes and gives back the lock, and the server saw it (a
/// lock the dead server kept with its data is free once its lease ran out).
async fn works_again(fixture: &dyn Fixture, client: &LockClient, key: &str) {
    let guard = client
        .lock(key)
        .wait(Duration::from_secs(8))
        .acquire()
        .await
        .unwrap_or_else(|err| {
            panic!(
                "{key}: the lock works again after the restart: {err} (the server holds {:?})",
                futures_holder(fixture, key)
            )
        });
    assert_holds(fixture, key, &guard, "the holder's token is stored").await;
    let mine = distlock::__private::testing::owner_token(&guard).to_owned();
    guard
        .release()
        .await
        .unwrap_or_else(|err| panic!("{key}: released after the restart: {err}"));
    assert_eq!(
        holder_of(fixture, key).await,
        None,
        "{key}: a lock left behind after the release of {mine}, which held it"
    );
}

// ---------------------------------------------------------------------------------------------
// 8. Nothing written after any exit path of an annotated function, or after runtime shutdown.

async fn no_renewal_after_exit<F: Faulty>(fixture: F) {
    // The fixture's own look at the server first (a ZooKeeper session of its own, say), so the
    // counts below are the helper's alone.
    let _ = fixture.anything_at("lock:warm-up").await;
    let sessions_before = fixture.sessions().await;
    let helper = helper::spawn("exit_paths", &[("LOCK_URL", fixture.url())]);
    let dir = helper.dir.clone();
    let mut report = Vec::new();
    let mut start = fixture.renewals().await;
    for path in EXIT_PATHS {
        let outcome =
            history::read_when_there(&dir.join(format!("done-{path}")), Duration::from_secs(30))
                .await;
        // A host that stalled past the lease while the body ran loses the lock: the function
        // says so, and must still leave nothing behind. Anything else is a failure.
        let lost = outcome.starts_with(helper::EXIT_LOST);
        assert!(
            lost || outcome == helper::EXIT_AS_PLANNED,
            "{path}: the annotated function ended {outcome}"
        );
        let during = fixture.renewals().await - start;
        // Acquisition, and renewals every 200 ms for 700 ms, went to the servers: the counter
        // can see them (one renewal at least, on a host that runs the timer late). (On ZooKeeper and etcd the renewals are the session's or lease's
        // heartbeats, and the acquisition is one write.) A lock lost to a stall may have had
        // no renewal through.
        let least = if fixture.renews_per_lock() && !lost {
            2
        } else {
            1
        };
        assert!(
            during >= least,
            "{path}: only {during} lock commands while the body ran ({outcome})"
        );
        tokio::time::sleep(ms(50)).await; // a background release (panic, cancel) lands
        if path == "shutdown"
            && let Some(before) = sessions_before
        {
            // The runtime's shutdown closed the helper's session / revoked its lease: nothing
            // can renew it any more.
            let closed = support::eventually(ms(2_000), || async {
                fixture.sessions().await == Some(before)
            })
            .await;
            assert!(
                closed,
                "{path}: {:?} sessions or leases left, {before} before the helper",
                fixture.sessions().await
            );
        }
        let name = format!("exit:{path}");
        // The lock is released at the exit: by the function itself on a return, in the
        // background on a panic or a cancellation — which a busy host may run late, after the
        // 600 ms lease has expired the lock. Within seconds it is gone either way (an advisory
        // lock has no lease: only its release ends it).
        let looked_at = Instant::now();
        let gone = support::eventually(ms(5_000), || async {
            holder_of(&fixture, &name).await.is_none()
        })
        .await;
        let gone_after = looked_at.elapsed();
        assert!(
            gone,
            "{path}: the lock is still held 5 s after the exit; the last the server logged:\n{}",
            fixture.recent_writes().await
        );
        let gone_at = support::wall_clock();
        fixture.settle(&format!("lock:{name}")).await;
        // While the helper's client lives (every path but the shutdown), ZooKeeper and etcd
        // keep its session or lease alive like a connection: only writes count there.
        let count = async || {
            if path == "shutdown" {
                fixture.renewals().await
            } else {
                fixture.writes().await
            }
        };
        // A release that ran late lands now: wait until nothing has reached the server for
        // 300 ms (a renewal every 200 ms never lets that happen), for 5 s at most.
        let quiet_from = Instant::now();
        let mut settled = count().await;
        let mut quiet_since = Instant::now();
        while quiet_since.elapsed() < ms(300) && quiet_from.elapsed() < ms(5_000) {
            tokio::time::sleep(ms(50)).await;
            let now = count().await;
            if now != settled {
                (settled, quiet_since) = (now, Instant::now());
            }
        }
        tokio::time::sleep(helper::EXIT_LEASE).await; // three renewal intervals
        let after = count().await - settled;
        assert_eq!(
            after,
            0,
            "{path}: {after} lock commands after the function exited (at {}; the lock seen \
             gone at {gone_at}); the last the server logged:\n{}",
            std::fs::read_to_string(dir.join(format!("ended-{path}"))).unwrap_or_default(),
            fixture.recent_writes().await
        );
        report.push(format!(
            "{path}: {during} commands while running, gone {gone_after:?} after the exit, 0 \
             after{}",
            if lost { " (lost to a stall)" } else { "" }
        ));
        start = fixture.renewals().await;
        history::write_file(&dir.join(format!("next-{path}")), "next");
    }
    eprintln!("{:?}: {}", F::BACKEND, report.join("; "));
}

// ---------------------------------------------------------------------------------------------
// 9. Three servers lose their leader, then their majority.

async fn leader_then_majority_lost<F: Faulty>() {
    let (mut servers, lease) = F::quorum();
    let url = servers.url();
    let client = LockClient::builder(&url)
        .fencing(true)
        .connect_timeout(ms(2_000))
        .build()
        .await
        .unwrap();
    let held = client.lock("kept").lease(lease).acquire().await.unwrap();
    let token = held.fencing_token().unwrap();

    let leader =
        tokio::task::block_in_place(|| servers.leader(Duration::from_secs(10))).expect("a leader");
    servers.kill(leader);
    let killed_at = Instant::now();
    let new_leader = tokio::task::block_in_place(|| servers.leader(Duration::from_secs(30)))
        .expect("the remaining two elect a leader");
    assert_ne!(new_leader, leader);
    let elected_after = killed_at.elapsed();
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
    // Past a full lease after the kill: the heartbeats went on with the new leader.
    tokio::time::sleep_until((killed_at + lease + ms(500)).into()).await;
    assert!(
        !held.is_lost(),
        "the held lock was lost with the old leader"
    );

    // A majority down: nobody can be granted anything.
    let second = (0..3).find(|&i| servers.is_running(i)).unwrap();
    servers.kill(second);
    let started = Instant::now();
    let err = other
        .lock("refused")
        .wait(ms(3_000))
        .acquire()
        .await
        .unwrap_err();
    let took = started.elapsed();
    let message = err.to_string();
    let backend = F::BACKEND.names().1;
    assert!(
        matches!(err, LockError::Backend { .. }) && message.contains(backend),
        "{message}"
    );
    // The wait, then the last attempt's reply (at most the response timeout, 2 s by default),
    // then giving up its place in line before returning (at most the response timeout again).
    let bound = ms(3_000) + 2 * LockClient::DEFAULT_RESPONSE_TIMEOUT + ms(500);
    assert!(took < bound, "failed after {took:?}");
    // The held lock cannot be confirmed any more: it is reported lost within its lease.
    tokio::time::timeout(lease + ms(1_000), held.lost())
        .await
        .expect("the holder is told once its lease cannot be confirmed");
    eprintln!(
        "{:?}: new leader after {elected_after:?}; without a majority refused after {took:?}: \
         {message}",
        F::BACKEND
    );
}

// ---------------------------------------------------------------------------------------------
// RELIABILITY.md: the table is the suite's outcomes.

/// The scenario tests of this binary are exactly those of `support::faults::scenario_tests`
/// (one where a scenario applies, none where it does not: an empty cell of RELIABILITY.md's
/// table is a case that does not exist), read from the binary's own list of tests.
#[test]
fn scenario_tests_exist_exactly_where_they_apply() {
    let listed = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--format", "terse", "faults::scenarios::"])
        .output()
        .expect("the test binary lists its tests");
    let listed = String::from_utf8_lossy(&listed.stdout);
    let mut have: Vec<&str> = listed
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .filter_map(|name| name.strip_prefix("faults::scenarios::"))
        .collect();
    have.sort_unstable();
    let mut expected = support::faults::scenario_tests();
    // The backends whose features this build lacks have no tests.
    expected.retain(|test| {
        let module = test.split("::").next().unwrap_or_default();
        listed.contains(&format!("faults::scenarios::{module}::"))
    });
    expected.sort_unstable();
    assert_eq!(
        have, expected,
        "scenario tests vs where their scenarios apply"
    );
    assert!(have.len() > 100, "{} scenario tests", have.len());
}

/// RELIABILITY.md's fault table is the one rendered from the outcomes the fault suite's run
/// wrote (`support::faults::matrix`): a `pass` is a test that passed in that run. Run by
/// `scripts/test.sh` after the scenarios (ignored otherwise: it needs their outcomes);
/// `scripts/reliability.sh` runs the scenarios and rewrites the table from what they found.
#[test]
#[ignore = "needs a run's outcomes: scripts/test.sh and scripts/reliability.sh run it"]
fn reliability_md_is_the_fault_suites_outcomes() {
    let dir = std::env::var_os(support::faults::OUTCOMES_ENV)
        .expect("the folder of the fault suite's outcomes (scripts/reliability.sh sets it)");
    let outcomes = support::faults::read_outcomes(std::path::Path::new(&dir));
    assert!(!outcomes.is_empty(), "no outcomes in {dir:?}");
    let expected =
        support::faults::matrix(|backend, scenario| outcomes.get(&(backend, scenario)).copied());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/RELIABILITY.md");
    let text = std::fs::read_to_string(path).expect("RELIABILITY.md");
    let (begin, end) = (
        "<!-- fault matrix: generated by scripts/reliability.sh -->\n",
        "<!-- end of fault matrix -->",
    );
    let start = text
        .find(begin)
        .expect("RELIABILITY.md marks the fault matrix")
        + begin.len();
    let stop = start + text[start..].find(end).expect("the matrix's end marker");
    if std::env::var_os("DISTLOCK_WRITE_RELIABILITY").is_some() {
        let rewritten = format!("{}{expected}{}", &text[..start], &text[stop..]);
        std::fs::write(path, rewritten).expect("RELIABILITY.md written");
        return;
    }
    assert!(
        text[start..stop] == expected,
        "RELIABILITY.md's fault table is not this run's outcomes; scripts/reliability.sh \
         rewrites it from a run. This run's:\n{expected}"
    );
}

// ---------------------------------------------------------------------------------------------
// 0. The harness itself: nothing a test starts outlives its test binary.

/// Whether process `pid` still runs (a zombie waiting to be reaped does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        !state.starts_with('Z') && !state.starts_with('X')
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_and_helpers_die_with_their_test_binary() {
    for mode in ["abort", "kill"] {
        let dir = history::scratch_dir("orphans");
        let mut starter = Helper::spawn("process_starter", &dir, &[("MODE", mode.to_owned())]);
        starter.owns_dir = true;
        let line = starter.read("pids", Duration::from_secs(30)).await;
        let pids: Vec<u32> = line.split(' ').map(|p| p.parse().unwrap()).collect();
        assert!(
            pids.iter().all(|&pid| running(pid)),
            "{mode}: started {pids:?}"
        );
        if mode == "kill" {
            starter.signal(libc::SIGKILL);
        } else {
            history::write_file(&dir.join("die"), "die");
        }
        let gone = support::eventually(Duration::from_secs(5), || async {
            pids.iter().all(|&pid| !running(pid))
        })
        .await;
        assert!(
            gone,
            "{mode}: still running after their test binary died: {:?}",
            pids.iter().filter(|&&pid| running(pid)).collect::<Vec<_>>()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 10. A reader is killed; a writer gets the lock one lease later.

async fn reader_killed<F: Faulty>(fixture: F) {
    killed(fixture, Killed::Reader).await;
}

// ---------------------------------------------------------------------------------------------
// 11. A reader is paused past its lease: a writer gets in, and the reader is told.

async fn paused_reader_loses_its_share<F: Faulty>(fixture: F) {
    let key = unique("reader-paused");
    let lease = fixture.short_lease() / 2;
    let reader = spawn_holder(&fixture, &key, lease, "read-told", "").await;
    let (_, _, owner) = acquired(&reader).await;
    assert!(holds_share(&fixture, &key, &owner).await);
    let before_read = now_ns();
    let ttl = fixture
        .ttl(&format!("lock:{key}"))
        .await
        .expect("the readers' lock has a TTL");
    reader.signal(libc::SIGSTOP);
    let client = fenced_client(&fixture).await;
    let guard = client
        .lock(key.as_str())
        .lease(ms(10_000))
        .wait(Duration::from_secs(15))
        .acquire()
        .await
        .expect("granted once the paused reader's lease ran out");
    let granted_at = now_ns();
    assert_not_before_expiry(&fixture, lease, before_read, ttl, granted_at);
    assert_holds(&fixture, &key, &guard, "the writer holds the lock").await;
    reader.signal(libc::SIGCONT);
    history::write_file(&reader.dir.join("check-lost"), "go");
    let told = reader.read("told", Duration::from_secs(10)).await;
    assert_eq!(
        told, "true",
        "the resumed reader was not told its lock was lost"
    );
    assert_holds(
        &fixture,
        &key,
        &guard,
        "the resumed reader took nothing back",
    )
    .await;
    guard.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 12. The holder of a semaphore's one permit is killed; a waiter gets it one lease later.

/// The permits the servers hold for semaphore `key`: their owner tokens.
async fn permit_holders(fixture: &dyn Fixture, key: &str) -> Vec<String> {
    let permits = fixture.permits(&format!("lock:{key}")).await;
    permits.into_iter().map(|(token, _)| token).collect()
}

async fn permit_holder_killed<F: Faulty>(fixture: F) {
    killed(fixture, Killed::Permit).await;
}

// ---------------------------------------------------------------------------------------------
// 13. The holder of a semaphore's one permit is paused past its lease: a waiter gets the
// permit, and the holder is told.

async fn paused_permit_holder_loses_its_permit<F: Faulty>(fixture: F) {
    let key = unique("permit-paused");
    let lease = fixture.short_lease() / 2;
    let holder = spawn_holder(&fixture, &key, lease, "permit-told", "").await;
    let (_, _, owner) = acquired(&holder).await;
    assert_eq!(permit_holders(&fixture, &key).await, [owner]);
    let before_read = now_ns();
    let ttl = fixture
        .ttl(&format!("lock:{key}"))
        .await
        .expect("the semaphore has a TTL");
    holder.signal(libc::SIGSTOP);
    let client = fenced_client(&fixture).await;
    let guard = client
        .semaphore(key.as_str(), 1)
        .lease(ms(10_000))
        .wait(Duration::from_secs(15))
        .acquire()
        .await
        .expect("granted once the paused holder's lease ran out");
    let granted_at = now_ns();
    assert_not_before_expiry(&fixture, lease, before_read, ttl, granted_at);
    let mine = distlock::__private::testing::owner_token(&guard).to_owned();
    assert_eq!(
        permit_holders(&fixture, &key).await,
        std::slice::from_ref(&mine)
    );
    holder.signal(libc::SIGCONT);
    history::write_file(&holder.dir.join("check-lost"), "go");
    let told = holder.read("told", Duration::from_secs(10)).await;
    assert_eq!(
        told, "true",
        "the resumed holder was not told its permit was lost"
    );
    assert_eq!(
        permit_holders(&fixture, &key).await,
        [mine],
        "the resumed holder took nothing back"
    );
    guard.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// 15. A holder with a lock-delay, paused past its lease.

async fn paused_holder_kept_for_its_lock_delay<F: Faulty>(fixture: F) {
    let key = unique("delayed");
    let delay = ms(1_500);
    // On ZooKeeper and etcd a lock lives on a session or lease kept by heartbeats, which the
    // server expires on ticks of its own; etcd counts whole seconds (the delay rounded up too:
    // a second more than the delay at most, which the bound allows).
    // (A lease of a second: a holder that a busy host starves for a few hundred milliseconds
    // still renews it, as the scenario needs before its pause.)
    let (lease, kept_delay, late) = match fixture.renews_per_lock() {
        true => (ms(1_000), delay, ms(1_000)),
        false => (
            fixture.short_lease(),
            Duration::from_secs(delay.as_millis().div_ceil(1_000) as u64),
            fixture.expiry_late(),
        ),
    };
    let holder = helper::spawn(
        "holder",
        &[
            ("LOCK_URL", fixture.url()),
            ("LOCK_KEY", key.clone()),
            ("LEASE_MS", lease.as_millis().to_string()),
            ("LOCK_DELAY_MS", delay.as_millis().to_string()),
            ("FENCING", "0".into()),
            ("MODE", "delayed-told".into()),
            ("RESOURCE", String::new()),
        ],
    );
    let (_, _, owner) = acquired(&holder).await;
    assert_eq!(holder_of(&fixture, &key).await, Some(owner));
    // Let the holder renew, so the expiry is a renewed one.
    tokio::time::sleep(ms(300)).await;
    let before_read = now_ns();
    let Some(ttl) = fixture.ttl(&format!("lock:{key}")).await else {
        panic!(
            "the lock has no TTL 300 ms after its grant; the last the server logged:\n{}",
            fixture.recent_writes().await
        );
    };
    // Above the lease: only the delay can have put it there. (Not necessarily above the delay:
    // a renewal may be late on a busy machine or behind a `WAIT` for replicas.)
    assert!(
        ttl > lease,
        "the server keeps the lock {ttl:?}: not its lease {lease:?} plus the delay {delay:?}"
    );
    holder.signal(libc::SIGSTOP);
    let paused_at = now_ns();
    let client = fixture.client().await;
    let guard = client
        .lock(key.as_str())
        .lease(ms(10_000))
        .wait(Duration::from_secs(15))
        .acquire()
        .await
        .expect("granted once the paused holder's lease and lock-delay ran out");
    let granted_at = now_ns();
    assert_not_before_expiry(&fixture, lease, before_read, ttl, granted_at);
    let after = Duration::from_nanos(granted_at - paused_at);
    assert!(
        after <= lease + kept_delay + late,
        "granted {after:?} after the pause (lease {lease:?}, lock-delay {delay:?})"
    );
    assert_holds(&fixture, &key, &guard, "the waiter holds the lock").await;
    holder.signal(libc::SIGCONT);
    history::write_file(&holder.dir.join("check-lost"), "go");
    assert_eq!(
        holder.read("told", Duration::from_secs(10)).await,
        "true",
        "the resumed holder was not told its lock was lost"
    );
    guard.release().await.unwrap();
    eprintln!(
        "{:?}: a paused holder's lock kept {after:?} past the pause (lease {lease:?}, lock-delay \
         {delay:?})",
        F::BACKEND
    );
}

/// One test per scenario that applies to a backend (`scenarios::<backend>::s<N>_<scenario>`).
macro_rules! suite {
    ($($backend:ident => $fixture:ty: [$($test:ident),* $(,)?]),* $(,)?) => {
        $(
            mod $backend {
                #[allow(unused_imports)]
                use super::*;
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $test() {
                        scenario::<$fixture>(stringify!($test)).await;
                    }
                )*
            }
        )*
    };
}

/// The scenario tests: `scenarios::<backend>::s<N>_<scenario>`, where the scenario applies
/// (`support::faults::Scenario::applies`; `scenario_tests_exist_exactly_where_they_apply`
/// keeps these lists to it). They wait on servers and timers far more than they compute, so
/// `./scripts/test.sh` runs them eight at a time.
mod scenarios {
    use super::*;

    suite! {
        redis => support::fixture::RedisFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s5_server_restarts_empty, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s10_reader_killed, s11_paused_reader_loses_its_share,
            s12_permit_holder_killed, s13_paused_permit_holder_loses_its_permit,
            s14_holder_of_two_keys_killed, s15_paused_holder_kept_for_its_lock_delay,
        ],
        redlock => support::fixture::RedlockFixture: [
            s1_holder_killed, s3_blackholed_holder, s4_waiter_cut_off, s5_server_restarts_empty,
            s7_server_dies_mid_call, s8_no_renewal_after_exit, s14_holder_of_two_keys_killed,
            s15_paused_holder_kept_for_its_lock_delay,
        ],
        cluster => support::fixture::ClusterFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s4_waiter_cut_off,
            s5_server_restarts_empty, s7_server_dies_mid_call, s8_no_renewal_after_exit,
            s10_reader_killed, s11_paused_reader_loses_its_share, s12_permit_holder_killed,
            s13_paused_permit_holder_loses_its_permit, s14_holder_of_two_keys_killed,
            s15_paused_holder_kept_for_its_lock_delay,
        ],
        sentinel => support::fixture::SentinelFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s5_server_restarts_empty, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s10_reader_killed, s11_paused_reader_loses_its_share,
            s12_permit_holder_killed, s13_paused_permit_holder_loses_its_permit,
            s14_holder_of_two_keys_killed, s15_paused_holder_kept_for_its_lock_delay,
        ],
    }

    #[cfg(feature = "postgres")]
    suite! {
        postgres => support::fixture::PostgresFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s6_server_restarts_with_its_data, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s10_reader_killed, s11_paused_reader_loses_its_share,
            s12_permit_holder_killed, s13_paused_permit_holder_loses_its_permit,
            s14_holder_of_two_keys_killed, s15_paused_holder_kept_for_its_lock_delay,
        ],
        // Through PgBouncer in transaction mode, the server behind it faulted: every case of
        // the server's own column, through the pooler.
        behind_pgbouncer => support::faults::BehindPgBouncer: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s6_server_restarts_with_its_data, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s10_reader_killed, s11_paused_reader_loses_its_share,
            s12_permit_holder_killed, s13_paused_permit_holder_loses_its_permit,
            s14_holder_of_two_keys_killed, s15_paused_holder_kept_for_its_lock_delay,
        ],
        // PgBouncer itself faulted (paused with calls in it, killed, restarted) while the
        // server runs on: the cases that fault a server.
        pgbouncer_itself => support::faults::PgBouncerItself: [
            s6_server_restarts_with_its_data, s7_server_dies_mid_call,
        ],
        advisory => support::fixture::AdvisoryFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s5_server_restarts_empty, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s10_reader_killed, s11_paused_reader_loses_its_share,
            s14_holder_of_two_keys_killed,
        ],
    }

    #[cfg(feature = "mysql")]
    suite! {
        mysql => support::fixture::MysqlFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s6_server_restarts_with_its_data, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s10_reader_killed, s11_paused_reader_loses_its_share,
            s12_permit_holder_killed, s13_paused_permit_holder_loses_its_permit,
            s14_holder_of_two_keys_killed, s15_paused_holder_kept_for_its_lock_delay,
        ],
        named => support::fixture::NamedFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s5_server_restarts_empty, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s14_holder_of_two_keys_killed,
        ],
    }

    #[cfg(feature = "zookeeper")]
    suite! {
        zookeeper => support::fixture::ZookeeperFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s6_server_restarts_with_its_data, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s9_leader_then_majority_lost, s10_reader_killed,
            s11_paused_reader_loses_its_share, s12_permit_holder_killed,
            s13_paused_permit_holder_loses_its_permit, s14_holder_of_two_keys_killed,
            s15_paused_holder_kept_for_its_lock_delay,
        ],
    }

    #[cfg(feature = "etcd")]
    suite! {
        etcd => support::fixture::EtcdFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s6_server_restarts_with_its_data, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s9_leader_then_majority_lost, s10_reader_killed,
            s11_paused_reader_loses_its_share, s12_permit_holder_killed,
            s13_paused_permit_holder_loses_its_permit, s14_holder_of_two_keys_killed,
            s15_paused_holder_kept_for_its_lock_delay,
        ],
    }

    #[cfg(feature = "nats")]
    suite! {
        nats => support::fixture::NatsFixture: [
            s1_holder_killed, s2_paused_holder_is_fenced_off, s3_blackholed_holder,
            s4_waiter_cut_off, s6_server_restarts_with_its_data, s7_server_dies_mid_call,
            s8_no_renewal_after_exit, s10_reader_killed, s11_paused_reader_loses_its_share,
            s12_permit_holder_killed, s13_paused_permit_holder_loses_its_permit,
            s14_holder_of_two_keys_killed, s15_paused_holder_kept_for_its_lock_delay,
        ],
    }
}

/// `memory://` lives in one process: no scenario applies; each test says why.
mod memory {
    use super::*;

    #[test]
    fn no_fault_scenario_applies() {
        for scenario in Scenario::ALL {
            scenario
                .applies(Backend::Memory)
                .expect_err("no fault applies to memory://");
        }
    }
}

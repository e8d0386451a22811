//! Mutual exclusion proven on histories: four OS processes × 32 tasks contend for one key (512
//! acquisitions per backend; 5,120 in the long run, see [`rounds`]), every hold is recorded on
//! `CLOCK_MONOTONIC`, and the checker proves that no two holds overlap and that fencing tokens rise
//! in grant order. Under the lock each holder runs a non-atomic register increment (read, random
//! sleep, write): no acknowledged increment may be lost.
//!
//! Transfers (`lock_all`): the same four processes move money between random pairs of eight
//! accounts, holding both (512 transfers per backend, 5,120 in the long run): no two holds of one
//! account overlap, and the sum of the balances never changes.

use std::time::{Duration, Instant};

use distlock::Feature;
use support::cluster::RedisCluster;
use support::fixture::RedlockFixture;
use support::helper::MAX_SLEEP_US;
use support::history::{self, Contention, Helper, Hold, check};
use support::store::Store;
use support::{RedisServer, unique};

const PROCESSES: usize = 4;
const TASKS: usize = 32;
/// Rounds per contender in the long run (`DISTLOCK_HISTORY=long`); see [`rounds`].
const ROUNDS: usize = 40;

/// The rounds each contender makes: `long` (5,120 acquisitions per history) when
/// `DISTLOCK_HISTORY=long` — `scripts/soak.sh` runs the histories so, under two CPU hogs — and a
/// tenth of it in the default run (512 per history; 1,024 until 2026-11-28, when the histories'
/// 346 CPU-seconds were what kept the suite over 15 minutes on two cores).
///
/// Why 512 is enough to catch an overlap: with 128 tasks of four processes on one key, every
/// acquisition is contended, so each is a hand-over from one holder to another — the moment
/// a grant can come early. A defect that lets one hand-over in 200 overlap (0.5 %) shows in a
/// run of 512 with probability 1 − 0.995^512 ≈ 92 %, and a store runs four or five histories
/// (plain, readers and writers, permits, transfers, fair) through the same hand-over: in one of
/// them with probability ≈ 99.99 %. Rarer races are what the long run is for. The faults' histories (etcd's leader kills,
/// Sentinel's failovers) make a quarter of these and contend until the faults are over
/// ([`four_processes_during`]).
fn rounds(long: usize) -> usize {
    if std::env::var("DISTLOCK_HISTORY").is_ok_and(|run| run == "long") {
        long
    } else {
        long / 10
    }
}
/// The contenders' lease (renewed every third of it).
const LEASE: Duration = Duration::from_secs(5);

fn hold(holder: &str, token: Option<u64>, acquired_at: u64, released_at: u64) -> Hold {
    Hold {
        key: "k".into(),
        holder: holder.into(),
        token,
        acquired_at,
        released_at,
        read: false,
        permits: None,
    }
}

fn read(holder: &str, acquired_at: u64, released_at: u64) -> Hold {
    Hold {
        read: true,
        ..hold(holder, None, acquired_at, released_at)
    }
}

/// The read/write checker: readers may overlap each other, never a writer — before, inside or
/// after a writer's hold, nested or not.
#[test]
fn the_checker_lets_readers_share_but_never_with_a_writer() {
    let shared = [
        read("a.0", 10, 30),
        read("b.0", 20, 40),
        hold("c.0", Some(1), 40, 50),
        read("a.1", 50, 60),
    ];
    let summary = check(&shared).unwrap();
    assert_eq!((summary.reads, summary.shared_reads), (3, 1));
    let reader_then_writer = [read("a.0", 10, 30), hold("b.0", None, 25, 40)];
    assert!(check(&reader_then_writer).unwrap_err().contains("overlap"));
    let writer_then_reader = [hold("a.0", None, 10, 30), read("b.0", 25, 40)];
    assert!(check(&writer_then_reader).unwrap_err().contains("overlap"));
    // A writer inside a long read, after a short one that ended.
    let inside = [
        read("a.0", 10, 100),
        read("b.0", 20, 30),
        hold("c.0", None, 40, 50),
    ];
    assert!(check(&inside).unwrap_err().contains("overlap"));
    // A reader inside a long write.
    let under = [hold("a.0", None, 10, 100), read("b.0", 40, 50)];
    assert!(check(&under).unwrap_err().contains("overlap"));
    let line = shared[0].to_line();
    assert_eq!(Hold::parse(&line), shared[0]);
}

/// The checker itself: it must accept a valid history and name each kind of violation.
/// The upgradable mode: an upgradable read (holder `^…`) may overlap plain readers, never a
/// writer or another upgradable read; its upgraded write part may touch its read part.
#[test]
fn the_checker_keeps_upgradable_reads_apart_from_writers_and_each_other() {
    let upgradable = |holder: &str, a, b| read(&format!("^{holder}"), a, b);
    let fine = [
        upgradable("a.0", 10, 50),
        read("b.0", 20, 40),
        hold("a.0", None, 50, 60),
        upgradable("c.0", 70, 80),
    ];
    check(&fine).unwrap();
    let two_upgradable = [upgradable("a.0", 10, 50), upgradable("b.0", 40, 60)];
    assert!(check(&two_upgradable).unwrap_err().contains("overlap"));
    let writer_inside = [upgradable("a.0", 10, 50), hold("b.0", None, 30, 40)];
    assert!(check(&writer_inside).unwrap_err().contains("overlap"));
    let reader_in_the_upgrade = [
        upgradable("a.0", 10, 50),
        read("b.0", 20, 55),
        hold("a.0", None, 50, 60),
    ];
    assert!(
        check(&reader_in_the_upgrade)
            .unwrap_err()
            .contains("overlap")
    );
}

#[test]
fn the_checker_finds_overlaps_and_tokens_out_of_order() {
    let valid = [
        hold("a.0", Some(1), 10, 20),
        hold("b.0", Some(2), 20, 30),
        hold("a.1", Some(5), 31, 40),
    ];
    let summary = check(&valid).unwrap();
    assert_eq!((summary.holds, summary.holders, summary.fenced), (3, 3, 3));
    // Order of the records does not matter, only the timestamps.
    assert!(check(&[valid[2].clone(), valid[0].clone(), valid[1].clone()]).is_ok());

    let overlap = [hold("a.0", None, 10, 25), hold("b.0", None, 20, 30)];
    assert!(check(&overlap).unwrap_err().contains("overlap"));
    // An overlap with an earlier, longer hold (not only the previous one) is found too.
    let nested = [
        hold("a.0", None, 10, 100),
        hold("b.0", None, 20, 30),
        hold("c.0", None, 40, 50),
    ];
    assert!(check(&nested).unwrap_err().contains("overlap"));
    let repeated = [hold("a.0", Some(3), 10, 20), hold("b.0", Some(3), 21, 30)];
    assert!(check(&repeated).unwrap_err().contains("do not rise"));
    let backwards = [hold("a.0", Some(4), 10, 20), hold("b.0", Some(3), 21, 30)];
    assert!(check(&backwards).unwrap_err().contains("do not rise"));
    let inverted = [hold("a.0", None, 20, 10)];
    assert!(
        check(&inverted)
            .unwrap_err()
            .contains("ends before it starts")
    );
    // Different keys never conflict.
    let mut other = hold("b.0", None, 15, 25);
    other.key = "other".into();
    assert!(check(&[hold("a.0", None, 10, 20), other]).is_ok());
    // Lines round-trip.
    let line = valid[0].to_line();
    assert_eq!(Hold::parse(&line), valid[0]);
}

/// Runs the contending processes against `url`, checks the history and the register.
async fn four_processes(url: &str, fencing: bool) {
    contend_and_check(
        url,
        None,
        fencing,
        false,
        LEASE,
        0,
        rounds(ROUNDS),
        NO_FAULTS,
    )
    .await;
}

/// What a history without faults passes as its faults.
const NO_FAULTS: Option<std::future::Ready<u64>> = None;

/// [`four_processes`] (fencing on) with a lease of its own.
async fn four_processes_with(url: &str, lease: Duration) {
    contend_and_check(url, None, true, false, lease, 0, rounds(ROUNDS), NO_FAULTS).await;
}

/// Readers and writers of one key (three rounds in four read): a writer never overlaps anyone,
/// readers do overlap each other, no reader sees the register change under its read lock, and
/// no acknowledged increment is lost.
async fn readers_and_writers(url: &str, lease: Duration) {
    contend_and_check(url, None, true, false, lease, 3, rounds(ROUNDS), NO_FAULTS).await;
}

/// A semaphore of three: four processes × 8 tasks each take a permit 32 times (160 in the long run;
/// 512 or 5,120 permits, each held 1–10 ms); never more than three held at once, and three
/// reached. (Eight tasks, not 32: 128 contenders for three permits would test how long a polling
/// MySQL waiter can lose to newcomers — it has no queue, and promises no order — rather than the
/// limit.)
async fn semaphore_of_three(url: &str) {
    semaphore_of_three_with(url, None).await;
}

/// [`semaphore_of_three`], the helpers' register on another store (`register`: a Redis URL)
/// where the locks' store keeps none (NATS).
async fn semaphore_of_three_with(url: &str, register: Option<&str>) {
    let dir = history::scratch_dir("history");
    let started = Instant::now();
    let spec = Contention {
        url: url.to_owned(),
        key: unique("pool"),
        name: String::new(),
        tasks: PERMIT_TASKS,
        rounds: rounds(PERMIT_ROUNDS),
        fencing: false,
        fair: false,
        lease: LEASE,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4: 0,
        upgrades: false,
        permits: PERMITS,
        accounts: 0,
        until: None,
        register_url: register.map(str::to_owned),
    };
    let mut helpers = start_contenders(&dir, &spec, &unique("unused")).await;
    let contended = Instant::now();
    let (holds, _, lost) = collect(&dir, &mut helpers).await;
    let contention = contended.elapsed();
    let summary = check(&holds).unwrap_or_else(|violation| panic!("{violation}"));
    assert_eq!(
        summary.permits,
        PROCESSES * PERMIT_TASKS * rounds(PERMIT_ROUNDS)
    );
    assert_eq!(summary.holders, PROCESSES * PERMIT_TASKS);
    assert_eq!(lost, 0, "no lease may run out in a healthy run");
    assert_eq!(
        summary.most_permits, PERMITS as usize,
        "the semaphore never had all its permits in use: {summary:?}"
    );
    eprintln!(
        "{url}: {PROCESSES} processes x {PERMIT_TASKS} tasks, {} permits of a semaphore of {PERMITS} \
         in {contention:?} ({:.0}/s), total {:?}; never more than {} at once",
        summary.permits,
        summary.permits as f64 / contention.as_secs_f64(),
        started.elapsed(),
        summary.most_permits,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The semaphore runs' limit, contenders per process and rounds per contender.
const PERMITS: u16 = 3;
const PERMIT_TASKS: usize = 8;
const PERMIT_ROUNDS: usize = 160;

/// Starts the `PROCESSES` contender processes of `spec` (`p0`, `p1`, …), waits until each is
/// ready, and lets them all go at once.
async fn start_contenders(
    dir: &std::path::Path,
    spec: &Contention,
    namespace: &str,
) -> Vec<Helper> {
    let helpers: Vec<Helper> = (0..PROCESSES)
        .map(|p| Helper::spawn("contender", dir, &spec.env(&format!("p{p}"), namespace)))
        .collect();
    for p in 0..PROCESSES {
        history::read_when_there(&dir.join(format!("p{p}.ready")), Duration::from_secs(30)).await;
    }
    history::write_file(&dir.join("go"), "go");
    helpers
}

/// Every contender's history, the increments they acknowledged, and the leases they lost.
async fn collect(dir: &std::path::Path, helpers: &mut [Helper]) -> (Vec<Hold>, u64, u64) {
    let mut holds = Vec::new();
    let (mut increments, mut lost) = (0, 0);
    for (p, helper) in helpers.iter_mut().enumerate() {
        let out =
            history::read_when_there(&dir.join(format!("p{p}.out")), Duration::from_secs(300))
                .await;
        helper.wait_success(Duration::from_secs(30));
        let mut lines = out.lines();
        let (inc, los) = lines.next().unwrap().split_once(' ').unwrap();
        increments += inc.parse::<u64>().unwrap();
        lost += los.parse::<u64>().unwrap();
        holds.extend(lines.map(Hold::parse));
    }
    (holds, increments, lost)
}

/// [`four_processes`], with `faults` run from the moment the processes start contending; the
/// contenders go on past their rounds until the faults are over, and the test checks that a
/// hold ended after the last fault struck (`faults` returns when, on `CLOCK_MONOTONIC`,
/// [`history::now_ns`]).
///
/// The contenders make a quarter of the fault-free histories' rounds (256 acquisitions, 1,280
/// in the long run) before they may stop: what these histories test is the hand-overs around
/// the faults, and every contender keeps contending until the last fault is over whatever its
/// rounds. The fault-free histories of the same backend make the full count. (With the full
/// count, etcd's leader kills were over after about 5 s and the contention went on for 30 s
/// more: 54 s of the histories' 160 s, measured 2026-11-27.)
async fn four_processes_during(
    url: &str,
    fencing: bool,
    lease: Duration,
    faults: impl std::future::Future<Output = u64>,
) {
    let rounds = rounds(ROUNDS) / 4;
    contend_and_check(url, None, fencing, false, lease, 0, rounds, Some(faults)).await;
}

/// The processes contend `rounds` rounds each — `reads_in_4` of every 4 rounds as readers —
/// while `faults` run; a hold must end after the last fault struck. The register lives in the
/// lock's store, or at `register` (see [`Contention::register_url`]).
#[allow(clippy::too_many_arguments)]
async fn contend_and_check(
    url: &str,
    register: Option<&str>,
    fencing: bool,
    fair: bool,
    lease: Duration,
    reads_in_4: u64,
    rounds: usize,
    faults: Option<impl std::future::Future<Output = u64>>,
) {
    let dir = history::scratch_dir("history");
    let namespace = unique("register");
    let started = Instant::now();
    let spec = Contention {
        url: url.to_owned(),
        key: unique("hot"),
        name: String::new(),
        tasks: TASKS,
        rounds,
        fencing,
        fair,
        lease,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4,
        upgrades: false,
        permits: 0,
        accounts: 0,
        until: faults.is_some().then(|| dir.join("faults-over")),
        register_url: register.map(str::to_owned),
    };
    let mut helpers = start_contenders(&dir, &spec, &namespace).await;
    let contended = Instant::now();
    let last_fault = match faults {
        Some(faults) => {
            let last_fault = faults.await;
            history::write_file(&dir.join("faults-over"), "over");
            Some(last_fault)
        }
        None => None,
    };
    let (holds, increments, lost) = collect(&dir, &mut helpers).await;
    let contention = contended.elapsed();
    let summary = check(&holds).unwrap_or_else(|violation| panic!("{violation}"));
    let expected = PROCESSES * TASKS * rounds;
    match last_fault {
        Some(last_fault) => {
            // Every task made its rounds and went on until the faults were over: the faults
            // struck a running contention, not an idle store after it.
            assert!(summary.holds >= expected, "{summary:?}");
            let last_release = holds.iter().map(|hold| hold.released_at).max().unwrap_or(0);
            assert!(
                last_release > last_fault,
                "the contention was over before the last fault struck"
            );
        }
        None => assert_eq!(summary.holds, expected),
    }
    assert_eq!(summary.holders, PROCESSES * TASKS);
    let writes = summary.holds - summary.reads;
    assert_eq!(summary.fenced, if fencing { writes } else { 0 });
    assert_eq!(lost, 0, "no lease may run out in a healthy run");
    if reads_in_4 > 0 {
        // Readers and writers mixed, and readers did share the key.
        assert!(
            writes >= expected / 8 && summary.reads >= expected / 2,
            "{summary:?}"
        );
        assert!(
            summary.shared_reads > 0,
            "no two readers ever shared the key: {summary:?}"
        );
    }
    let store = Store::open(spec.register_url(), &namespace).await.unwrap();
    let register = store.get("register").await.unwrap();
    assert_eq!(increments, writes as u64);
    assert_eq!(register, increments, "acknowledged increments were lost");
    store.clear(&["register"]).await.unwrap();
    eprintln!(
        "{url}: {PROCESSES} processes x {TASKS} tasks, {} acquisitions ({} reads, {} of them \
         beside another reader) in {contention:?} ({:.0}/s), total {:?}; no overlap, {} \
         fencing tokens in order, register = {register}",
        summary.holds,
        summary.reads,
        summary.shared_reads,
        summary.holds as f64 / contention.as_secs_f64(),
        started.elapsed(),
        summary.fenced,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Upgradable reads beside plain readers and writers, four processes × `tasks` on one key:
/// a quarter of the rounds read, and of the others half write and half take an upgradable
/// read, which every other time upgrades and increments the register from the value it read
/// before the upgrade. No writer overlaps a reader, an upgradable read or the upgraded holder;
/// no two upgradable reads overlap; no increment is lost (a writer between an upgradable read
/// and its upgrade would lose one); upgrades happened, beside readers.
async fn upgradable_reads(url: &str, lease: Duration, tasks: usize) {
    upgradable_reads_with(url, None, lease, tasks).await;
}

/// [`upgradable_reads`] with the register on another store (`register`: a Redis URL) where the
/// locks' store keeps none (NATS).
async fn upgradable_reads_with(url: &str, register: Option<&str>, lease: Duration, tasks: usize) {
    let dir = history::scratch_dir("history");
    let namespace = unique("register");
    let spec = Contention {
        url: url.to_owned(),
        key: unique("up"),
        name: String::new(),
        tasks,
        rounds: rounds(ROUNDS),
        fencing: true,
        fair: false,
        lease,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4: 1,
        upgrades: true,
        permits: 0,
        accounts: 0,
        until: None,
        register_url: register.map(str::to_owned),
    };
    let started = Instant::now();
    let mut helpers = start_contenders(&dir, &spec, &namespace).await;
    let (holds, increments, lost) = collect(&dir, &mut helpers).await;
    let store = Store::open(register.unwrap_or(url), &namespace)
        .await
        .unwrap();
    check_upgradable_history(url, &store, &holds, (increments, lost), tasks, started).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// What [`upgradable_reads`] asserts of a history (also of `memory://`'s, made in-process).
async fn check_upgradable_history(
    url: &str,
    store: &Store,
    holds: &[Hold],
    (increments, lost): (u64, u64),
    tasks: usize,
    started: Instant,
) {
    let summary = check(holds).unwrap_or_else(|violation| panic!("{violation}"));
    assert_eq!(lost, 0, "no lease may run out in a healthy run");
    let upgradable = holds.iter().filter(|h| h.holder.starts_with('^')).count();
    let upgraded = holds
        .iter()
        .filter(|h| h.holder.starts_with('^'))
        .filter(|read| {
            holds.iter().any(|write| {
                !write.read
                    && write.acquired_at == read.released_at
                    && read.holder[1..] == write.holder
            })
        })
        .count();
    let writes = summary.holds - summary.reads;
    let expected = PROCESSES * tasks * rounds(ROUNDS);
    assert_eq!(summary.holds - upgraded, expected, "{summary:?}");
    assert!(
        upgradable >= expected / 8 && upgraded >= expected / 16,
        "too few upgradable reads ({upgradable}) or upgrades ({upgraded}) of {expected}"
    );
    assert!(summary.shared_reads > 0, "no read was shared: {summary:?}");
    assert_eq!(
        summary.fenced, writes,
        "every write, upgraded or not, has a token"
    );
    let register = store.get("register").await.unwrap();
    assert_eq!(increments, writes as u64);
    assert_eq!(register, increments, "acknowledged increments were lost");
    store.clear(&["register"]).await.unwrap();
    eprintln!(
        "{url}: {} holds, {upgradable} upgradable reads, {upgraded} upgraded, {} reads shared; no overlap, register = {register}, total {:?}",
        summary.holds,
        summary.shared_reads,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_upgradable_reads_never_let_a_writer_in() {
    let server = RedisServer::start();
    upgradable_reads(&server.url(), LEASE, TASKS).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_upgradable_reads_never_let_a_writer_in() {
    let server = support::postgres::PostgresServer::start();
    // A 10 s lease, for the reason `postgres_four_processes_never_overlap` gives.
    upgradable_reads(&server.url_with_own_table(), Duration::from_secs(10), TASKS).await;
}

/// `mode=advisory`: the share beside its mark, the upgrade queued ahead of the writers on
/// the share's own session (a server of its own: advisory locks are per database).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_upgradable_reads_never_let_a_writer_in() {
    let server = support::postgres::PostgresServer::start();
    // A 10 s lease, for the reason `postgres_four_processes_never_overlap` gives.
    let url = format!("{}?mode=advisory", server.url());
    upgradable_reads(&url, Duration::from_secs(10), TASKS).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_upgradable_reads_never_let_a_writer_in() {
    let server = support::zookeeper::ZkServer::start();
    upgradable_reads(
        &server.url(&format!("/{}", unique("history"))),
        LEASE,
        TASKS,
    )
    .await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_upgradable_reads_never_let_a_writer_in() {
    let member = support::etcd::EtcdMember::start();
    upgradable_reads(&member.url(&unique("history")), LEASE, TASKS).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_upgradable_reads_never_let_a_writer_in() {
    let server = support::mysql::MysqlServer::start();
    let table = unique("locks").replace('-', "_");
    // 8 tasks a process, not 32: waiters poll on MySQL, and the upgradable reads, one at a
    // time, were handed over once a poll came (38 s for 128 tasks alone; past the 60 s `wait`
    // beside the other MySQL tests). Still 4 processes contending, every kind beside the others.
    upgradable_reads(&format!("{}?table={table}", server.url()), LEASE, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_upgradable_reads_never_let_a_writer_in() {
    let url = format!("memory://{}", unique("history"));
    let store = Store::open(&url, "register").await.unwrap();
    let spec = Contention {
        url: url.clone(),
        key: "up".into(),
        name: String::new(),
        tasks: TASKS,
        rounds: rounds(ROUNDS),
        fencing: true,
        fair: false,
        lease: LEASE,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4: 1,
        upgrades: true,
        permits: 0,
        accounts: 0,
        until: None,
        register_url: None,
    };
    let started = Instant::now();
    let (holds, increments) = in_four_clients(&spec, &store).await;
    check_upgradable_history(&url, &store, &holds, (increments, 0), TASKS, started).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_four_processes_never_overlap() {
    let server = RedisServer::start();
    four_processes(&server.url(), true).await;
}

/// The fair lock (its queue scripts, wake-by-token) under the same contention: 128 waiters of
/// four processes in one queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fair_four_processes_never_overlap() {
    let server = RedisServer::start();
    contend_and_check(
        &server.url(),
        None,
        true,
        true,
        LEASE,
        0,
        rounds(ROUNDS),
        NO_FAULTS,
    )
    .await;
    let mut conn = server.connection().await;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("lock-queue*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(left.is_empty(), "the queue is gone: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_four_processes_never_overlap() {
    let fixture = RedlockFixture::new(3);
    four_processes(&RedlockFixture::url_of(&fixture.servers), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_four_processes_never_overlap() {
    let cluster = RedisCluster::start(3, 0);
    four_processes(&cluster.url(), true).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_four_processes_never_overlap() {
    let server = support::postgres::PostgresServer::start();
    // A 10 s lease: 128 tasks on one row, the register in the same database, and every other
    // history test beside it; under the soak's two busy loops single statements took over the
    // 2 s response timeout, and a 5 s lease then ran out for real (renewals retried until it
    // ended). What this test checks — no overlap, fencing order, no lost update — does not
    // depend on the lease.
    let lease = Duration::from_secs(10);
    four_processes_with(&server.url_with_own_table(), lease).await;
}

/// `mode=advisory`: 128 tasks of four processes, each waiting inside the server on a
/// connection of its own (the 10 s lease for the reason above).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_advisory_four_processes_never_overlap() {
    let server = support::postgres::PostgresServer::start();
    let lease = Duration::from_secs(10);
    four_processes_with(&format!("{}?mode=advisory", server.url()), lease).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_four_processes_never_overlap() {
    let server = support::mysql::MysqlServer::start();
    let table = unique("locks").replace('-', "_");
    four_processes(&format!("{}?table={table}", server.url()), true).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_four_processes_never_overlap() {
    let server = support::zookeeper::ZkServer::start();
    four_processes(&server.url(&format!("/{}", unique("history"))), true).await;
}

/// `memory://` lives in one process: four clients (separate owners) × 32 tasks in this one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_four_clients_never_overlap() {
    memory_four_clients(false, 0).await;
}

/// `memory://`'s fair queue under the same contention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_fair_four_clients_never_overlap() {
    memory_four_clients(true, 0).await;
}

/// Runs `spec` as four clients of this process (`c0`…`c3`, separate owners) at once: their
/// holds and acknowledged increments; no lease may be lost.
async fn in_four_clients(spec: &Contention, store: &Store) -> (Vec<Hold>, u64) {
    let mut runs = Vec::new();
    for p in 0..PROCESSES {
        let spec = Contention {
            name: format!("c{p}"),
            ..spec.clone()
        };
        let store = store.clone();
        runs.push(tokio::spawn(async move {
            history::contend(&spec, &store, None).await
        }));
    }
    let (mut holds, mut increments) = (Vec::new(), 0);
    for run in runs {
        let outcome = run.await.unwrap();
        assert_eq!(outcome.lost, 0);
        increments += outcome.increments;
        holds.extend(outcome.holds);
    }
    (holds, increments)
}

/// Four clients (separate owners) × 32 tasks of this process contend, `reads_in_4` rounds in
/// four as readers.
async fn memory_four_clients(fair: bool, reads_in_4: u64) {
    let url = format!("memory://{}", unique("history"));
    let store = Store::open(&url, "register").await.unwrap();
    let spec = Contention {
        url,
        key: "hot".into(),
        name: String::new(),
        tasks: TASKS,
        rounds: rounds(ROUNDS),
        fencing: true,
        fair,
        lease: LEASE,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4,
        upgrades: false,
        permits: 0,
        accounts: 0,
        until: None,
        register_url: None,
    };
    let (holds, increments) = in_four_clients(&spec, &store).await;
    let summary = check(&holds).unwrap_or_else(|violation| panic!("{violation}"));
    assert_eq!(summary.holds, PROCESSES * TASKS * rounds(ROUNDS));
    assert_eq!(summary.fenced, summary.holds - summary.reads);
    if reads_in_4 > 0 {
        assert!(summary.shared_reads > 0, "{summary:?}");
    }
    assert_eq!(store.get("register").await.unwrap(), increments);
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_four_processes_never_overlap() {
    let member = support::etcd::EtcdMember::start();
    four_processes(&member.url(&unique("history")), true).await;
}

/// Four processes contend on a three-member etcd cluster while its leader is killed twice
/// (and brought back each time): still no overlap, fencing tokens in grant order, no lease
/// lost, and no acknowledged increment of the register lost.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_four_processes_never_overlap_through_leader_kills() {
    let mut cluster = support::etcd::EtcdCluster::start();
    let url = cluster.url(&unique("history"));
    let faults = async {
        let mut last_fault = 0;
        for round in 0..2 {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let leader = cluster.leader(Duration::from_secs(10)).expect("a leader");
            cluster.members[leader].kill();
            last_fault = history::now_ns();
            let killed_at = Instant::now();
            let next = cluster
                .leader(Duration::from_secs(30))
                .expect("a new leader");
            eprintln!(
                "etcd history: leader m{leader} killed (round {round}), m{next} leads after {:?}",
                killed_at.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            cluster.members[leader].restart();
        }
        last_fault
    };
    // A lease of 10 s: the promise tested is that a leader change (≈ 0.5–1 s here) shorter
    // than the lease loses no lock; with 5 s, four contending processes, three members and the
    // history test beside it on two cores once starved a keepalive past the lease.
    four_processes_during(&url, true, Duration::from_secs(10), faults).await;
}

/// Four processes on a bucket of a `nats-server` of the test's own (`fair` requests, or
/// `reads_in_4` rounds of four reading), the register on a Redis server of the test's own (the
/// harness's stores have no NATS register).
#[cfg(feature = "nats")]
async fn nats_four_processes(fair: bool, reads_in_4: u64) {
    let server = support::nats::NatsServer::start();
    let register = RedisServer::start();
    let url = server.url("history");
    let rounds = rounds(ROUNDS);
    let register = Some(register.url());
    let register = register.as_deref();
    contend_and_check(
        &url, register, true, fair, LEASE, reads_in_4, rounds, NO_FAULTS,
    )
    .await;
}

/// NATS: plain locks.
#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_four_processes_never_overlap() {
    nats_four_processes(false, 0).await;
}

/// NATS's fair lock (a queue of places in the key's table, the oldest waiting one granted):
/// 128 waiters of four processes in one table.
#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_fair_four_processes_never_overlap() {
    nats_four_processes(true, 0).await;
}

/// NATS: readers and writers of one key's table (three rounds in four read).
#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_readers_and_writers_never_overlap() {
    nats_four_processes(false, 3).await;
}

/// NATS: a semaphore of three in one key's table.
#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_semaphore_never_exceeds_its_permits() {
    let server = support::nats::NatsServer::start();
    let register = RedisServer::start();
    semaphore_of_three_with(&server.url("history"), Some(&register.url())).await;
}

/// NATS: upgradable reads, upgrades, readers and writers in one key's table, the register on a
/// Redis server of the test's own.
#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_upgradable_reads_never_let_a_writer_in() {
    let server = support::nats::NatsServer::start();
    let register = RedisServer::start();
    upgradable_reads_with(&server.url("history"), Some(&register.url()), LEASE, TASKS).await;
}

/// Four processes contend on NATS while its server is killed (`kill -9`) twice and started
/// again with its store each time, calls in flight: no overlap, fencing tokens in grant order,
/// no lease lost (the server is back well within it), no acknowledged increment lost.
#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_four_processes_never_overlap_through_server_kills() {
    let mut server = support::nats::NatsServer::start();
    let register = RedisServer::start();
    let url = server.url("history");
    let faults = async {
        let mut last_fault = 0;
        for round in 0..2 {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            server.kill();
            last_fault = history::now_ns();
            let killed_at = Instant::now();
            tokio::time::sleep(Duration::from_millis(500)).await;
            tokio::task::block_in_place(|| server.restart());
            eprintln!(
                "nats history: server killed (round {round}), serving again after {:?}",
                killed_at.elapsed()
            );
        }
        last_fault
    };
    // A lease of 10 s: the promise tested is that a restart shorter than the lease loses no
    // lock (the store keeps the keys; the holders renew once the server is back).
    let lease = Duration::from_secs(10);
    contend_and_check(
        &url,
        Some(&register.url()),
        true,
        false,
        lease,
        0,
        rounds(ROUNDS) / 4,
        Some(faults),
    )
    .await;
}

/// Four processes contend through `redis+sentinel://…?replicas=1` while the master is killed
/// twice (each time a replica is promoted, and the killed server comes back empty as a replica):
/// no overlap, fencing tokens in grant order, no lease lost, and no acknowledged increment of
/// the register (written with `WAIT 1`) lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_four_processes_never_overlap_through_two_failovers() {
    let mut group = support::sentinel::SentinelGroup::start(2, 3);
    tokio::task::block_in_place(|| group.wait_until_watched(Duration::from_secs(30)));
    let url = group.url("?replicas=1");
    let faults = async {
        let mut last_fault = 0;
        for round in 0..2 {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let killed = tokio::task::block_in_place(|| group.kill_master());
            last_fault = history::now_ns();
            let killed_at = Instant::now();
            let next = tokio::task::block_in_place(|| {
                group.wait_for_failover(killed, Duration::from_secs(30))
            });
            eprintln!(
                "sentinel history: master {killed} killed (round {round}), server {next} \
                 promoted after {:?}",
                killed_at.elapsed()
            );
            tokio::task::block_in_place(|| {
                group.restart(killed);
                // Back as a replica of the new master (the sentinels reconfigure it), so the
                // next round again has a replica to promote and one to acknowledge grants.
                group.wait_for_replicas(next, 2, Duration::from_secs(30));
                group.wait_until_watched(Duration::from_secs(30));
            });
        }
        last_fault
    };
    // A lease of 10 s: a failover (≈ 3 s here: the sentinels call the master down after
    // 1.5 s of silence, then elect and promote) shorter than the lease loses no lock.
    four_processes_during(&url, true, Duration::from_secs(10), faults).await;
}

// ---- Readers and writers mixed (`.read()`): four processes, three rounds in four read ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_readers_and_writers_never_overlap() {
    let server = RedisServer::start();
    readers_and_writers(&server.url(), LEASE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_readers_and_writers_never_overlap() {
    let cluster = RedisCluster::start(3, 0);
    readers_and_writers(&cluster.url(), LEASE).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_readers_and_writers_never_overlap() {
    let server = support::postgres::PostgresServer::start();
    // A 10 s lease, for the reason `postgres_four_processes_never_overlap` gives.
    readers_and_writers(&server.url_with_own_table(), Duration::from_secs(10)).await;
}

/// `mode=advisory`: readers hold the key's shared advisory lock, each on its own connection.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_advisory_readers_and_writers_never_overlap() {
    let server = support::postgres::PostgresServer::start();
    // A 10 s lease, for the reason `postgres_four_processes_never_overlap` gives.
    readers_and_writers(
        &format!("{}?mode=advisory", server.url()),
        Duration::from_secs(10),
    )
    .await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_readers_and_writers_never_overlap() {
    let server = support::mysql::MysqlServer::start();
    let table = unique("locks").replace('-', "_");
    readers_and_writers(&format!("{}?table={table}", server.url()), LEASE).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_readers_and_writers_never_overlap() {
    let server = support::zookeeper::ZkServer::start();
    readers_and_writers(&server.url(&format!("/{}", unique("history"))), LEASE).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_readers_and_writers_never_overlap() {
    let member = support::etcd::EtcdMember::start();
    readers_and_writers(&member.url(&unique("history")), LEASE).await;
}

/// `memory://`: four clients in this process, three rounds in four read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_readers_and_writers_never_overlap() {
    memory_four_clients(false, 3).await;
}

// ---- Semaphores (`client.semaphore(k, 3)`): four processes, 512 permits (5,120 long) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_semaphore_never_exceeds_its_permits() {
    let server = RedisServer::start();
    semaphore_of_three(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_semaphore_never_exceeds_its_permits() {
    let cluster = RedisCluster::start(3, 0);
    semaphore_of_three(&cluster.url()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_semaphore_never_exceeds_its_permits() {
    let server = support::postgres::PostgresServer::start();
    semaphore_of_three(&server.url_with_own_table()).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_semaphore_never_exceeds_its_permits() {
    let server = support::mysql::MysqlServer::start();
    let table = unique("locks").replace('-', "_");
    semaphore_of_three(&format!("{}?table={table}", server.url())).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_semaphore_never_exceeds_its_permits() {
    let server = support::zookeeper::ZkServer::start();
    semaphore_of_three(&server.url(&format!("/{}", unique("history")))).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_semaphore_never_exceeds_its_permits() {
    let member = support::etcd::EtcdMember::start();
    semaphore_of_three(&member.url(&unique("history"))).await;
}

/// `memory://`: four clients in this process share a semaphore of three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_semaphore_never_exceeds_its_permits() {
    let url = format!("memory://{}", unique("history"));
    let store = Store::open(&url, "register").await.unwrap();
    let spec = Contention {
        url,
        key: "pool".into(),
        name: String::new(),
        tasks: PERMIT_TASKS,
        rounds: rounds(PERMIT_ROUNDS),
        fencing: false,
        fair: false,
        lease: LEASE,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4: 0,
        upgrades: false,
        permits: PERMITS,
        accounts: 0,
        until: None,
        register_url: None,
    };
    let (holds, _) = in_four_clients(&spec, &store).await;
    let summary = check(&holds).unwrap_or_else(|violation| panic!("{violation}"));
    assert_eq!(
        summary.permits,
        PROCESSES * PERMIT_TASKS * rounds(PERMIT_ROUNDS)
    );
    assert_eq!(summary.most_permits, PERMITS as usize, "{summary:?}");
}

/// The semaphore checker: never more than the limit at once (touching records do not
/// overlap), one limit per key.
#[test]
fn the_checker_counts_permits_held_at_once() {
    let permit = |holder: &str, at: u64, until: u64| Hold {
        permits: Some(2),
        ..hold(holder, None, at, until)
    };
    let valid = [
        permit("a.0", 10, 30),
        permit("b.0", 20, 40),
        permit("c.0", 30, 50),
        permit("d.0", 40, 60),
    ];
    let summary = check(&valid).unwrap();
    assert_eq!((summary.permits, summary.most_permits), (4, 2));
    let three = [
        permit("a.0", 10, 30),
        permit("b.0", 20, 40),
        permit("c.0", 25, 50),
    ];
    assert!(check(&three).unwrap_err().contains("3 holders"));
    let mut other = permit("c.0", 45, 50);
    other.permits = Some(3);
    assert!(
        check(&[permit("a.0", 10, 30), other])
            .unwrap_err()
            .contains("as Some(3)")
    );
    let line = valid[0].to_line();
    assert_eq!(Hold::parse(&line), valid[0]);
}

// ---- Several keys (`client.lock_all`): four processes, 512 transfers (5,120 long) ----

/// The accounts of the transfer runs, and their contenders per process and rounds each.
const ACCOUNTS: usize = 8;
const TRANSFER_TASKS: usize = 8;
const TRANSFER_ROUNDS: usize = 160;

/// Four processes × 8 tasks each make 32 transfers (160 in the long run) between random pairs of
/// the 8 accounts, each holding both accounts' locks (named in a random order): no overlap on any
/// account, fencing tokens in grant order per account, the sum of the balances unchanged, no
/// timeout.
async fn transfers(url: &str, fencing: bool) {
    let dir = history::scratch_dir("history");
    let namespace = unique("accounts");
    let started = Instant::now();
    let spec = Contention {
        url: url.to_owned(),
        key: unique("account"),
        name: String::new(),
        tasks: TRANSFER_TASKS,
        rounds: rounds(TRANSFER_ROUNDS),
        fencing,
        fair: false,
        lease: LEASE,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4: 0,
        upgrades: false,
        permits: 0,
        accounts: ACCOUNTS,
        until: None,
        register_url: None,
    };
    let mut helpers = start_contenders(&dir, &spec, &namespace).await;
    let contended = Instant::now();
    let (holds, made, lost) = collect(&dir, &mut helpers).await;
    let contention = contended.elapsed();
    let store = Store::open(url, &namespace).await.unwrap();
    check_transfers(&holds, made, lost, fencing, &store).await;
    eprintln!(
        "{url}: {PROCESSES} processes x {TRANSFER_TASKS} tasks, {made} transfers between \
         {ACCOUNTS} accounts in {contention:?} ({:.0}/s), total {:?}; no overlap, the sum kept",
        made as f64 / contention.as_secs_f64(),
        started.elapsed(),
    );
    let names: Vec<String> = (0..ACCOUNTS).map(|n| format!("account{n}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    store.clear(&names).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// What every transfer run must show: each of the `made` transfers recorded on both its
/// accounts, no two holds of an account overlapping, tokens in order, the balances' sum kept.
async fn check_transfers(holds: &[Hold], made: u64, lost: u64, fencing: bool, store: &Store) {
    let summary = check(holds).unwrap_or_else(|violation| panic!("{violation}"));
    let expected = PROCESSES * TRANSFER_TASKS * rounds(TRANSFER_ROUNDS);
    assert_eq!(made, expected as u64, "every transfer was made");
    assert_eq!(
        summary.holds,
        2 * expected,
        "two accounts held per transfer"
    );
    assert_eq!(summary.keys, ACCOUNTS, "{summary:?}");
    assert_eq!(summary.fenced, if fencing { 2 * expected } else { 0 });
    assert_eq!(lost, 0, "no lease may run out in a healthy run");
    let mut sum = 0;
    let mut moved = false;
    for n in 0..ACCOUNTS {
        let balance = history::balance(store, n).await;
        moved |= balance != history::OPENING_BALANCE;
        sum += balance;
    }
    assert!(moved, "no balance changed: the transfers wrote nothing");
    assert_eq!(
        sum,
        ACCOUNTS as u64 * history::OPENING_BALANCE,
        "the balances' sum changed: two transfers overlapped on an account"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_transfers_never_overlap() {
    let server = RedisServer::start();
    transfers(&server.url(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_transfers_never_overlap() {
    let fixture = RedlockFixture::new(3);
    transfers(&RedlockFixture::url_of(&fixture.servers), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_transfers_never_overlap() {
    let cluster = RedisCluster::start(3, 0);
    transfers(&cluster.url(), true).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_transfers_never_overlap() {
    let server = support::postgres::PostgresServer::start();
    transfers(&server.url_with_own_table(), true).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_advisory_transfers_never_overlap() {
    let server = support::postgres::PostgresServer::start();
    transfers(&format!("{}?mode=advisory", server.url()), true).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_transfers_never_overlap() {
    let server = support::mysql::MysqlServer::start();
    let table = unique("locks").replace('-', "_");
    transfers(&format!("{}?table={table}", server.url()), true).await;
}

#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_transfers_never_overlap() {
    let server = support::zookeeper::ZkServer::start();
    transfers(&server.url(&format!("/{}", unique("history"))), true).await;
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_transfers_never_overlap() {
    let member = support::etcd::EtcdMember::start();
    transfers(&member.url(&unique("history")), true).await;
}

/// `memory://`: four clients in this process make the transfers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_transfers_never_overlap() {
    let url = format!("memory://{}", unique("history"));
    let store = Store::open(&url, "accounts").await.unwrap();
    let spec = Contention {
        url,
        key: "account".into(),
        name: String::new(),
        tasks: TRANSFER_TASKS,
        rounds: rounds(TRANSFER_ROUNDS),
        fencing: true,
        fair: false,
        lease: LEASE,
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4: 0,
        upgrades: false,
        permits: 0,
        accounts: ACCOUNTS,
        until: None,
        register_url: None,
    };
    let (holds, made) = in_four_clients(&spec, &store).await;
    check_transfers(&holds, made, 0, true, &store).await;
}

// ---------------------------------------------------------------------------------------------
// The modes and transports whose locks are taken by other code paths than their store's plain
// one: `mode=named` (`GET_LOCK`), PostgreSQL through a transaction pooler (polling, and with
// `listen_url`), ZooKeeper's `recipe=rwlock` layout, and one TLS store of each family. The
// register lives on a plain Redis server of the test's own (any linearizable store will do):
// the harness's own clients cannot open a TLS-only server, nor keep prepared statements
// through PgBouncer.

/// Four processes × 32 tasks through `fixture`'s URL (`reads_in_4` of every 4 rounds as
/// readers), the register on a Redis server of the test's own.
async fn through_fixture(
    fixture: &dyn support::fixture::Fixture,
    reads_in_4: u64,
    lease: Duration,
) {
    let register = RedisServer::start();
    contend_and_check(
        &fixture.url(),
        Some(&register.url()),
        fixture.supports(Feature::Fencing).await,
        false,
        lease,
        reads_in_4,
        rounds(ROUNDS),
        NO_FAULTS,
    )
    .await;
}

/// `mode=named`: each waiter blocks in `GET_LOCK` on a connection of its own.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_named_four_processes_never_overlap() {
    let fixture = support::fixture::NamedFixture::new();
    through_fixture(&fixture, 0, Duration::from_secs(10)).await;
}

/// Through PgBouncer in transaction mode, waiters polling (no `listen_url`): the 10 s lease of
/// the PostgreSQL histories (see `postgres_four_processes_never_overlap`).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_polling_four_processes_never_overlap() {
    let fixture = support::fixture::PostgresFixture::pgbouncer(false);
    through_fixture(&fixture, 0, Duration::from_secs(10)).await;
}

/// Through PgBouncer, waiters woken through `listen_url` (the server itself); readers too.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_listening_readers_and_writers_never_overlap() {
    let fixture = support::fixture::PostgresFixture::pgbouncer(true);
    through_fixture(&fixture, 3, Duration::from_secs(10)).await;
}

/// Curator's `InterProcessReadWriteLock` layout (`recipe=rwlock`): readers and writers.
#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_rwlock_readers_and_writers_never_overlap() {
    let fixture = support::fixture::ZookeeperFixture::rwlock();
    through_fixture(&fixture, 3, LEASE).await;
}

/// `rediss://` (the Redis family over TLS).
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tls_four_processes_never_overlap() {
    let fixture = support::fixture::RedisFixture::tls();
    through_fixture(&fixture, 0, LEASE).await;
}

/// PostgreSQL with `sslmode=verify-full` (the SQL family over TLS).
#[cfg(all(feature = "tls", feature = "postgres"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls_four_processes_never_overlap() {
    let fixture = support::fixture::PostgresFixture::tls();
    through_fixture(&fixture, 0, Duration::from_secs(10)).await;
}

/// `zks://`.
#[cfg(all(feature = "tls", feature = "zookeeper"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_tls_four_processes_never_overlap() {
    let fixture = support::fixture::ZookeeperFixture::tls();
    through_fixture(&fixture, 0, LEASE).await;
}

/// `etcds://` (mutual TLS).
#[cfg(all(feature = "tls", feature = "etcd"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tls_four_processes_never_overlap() {
    let fixture = support::fixture::EtcdFixture::tls();
    through_fixture(&fixture, 0, LEASE).await;
}

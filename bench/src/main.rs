//! distlock's benchmark: `cargo run --release -p distlock-bench`.
//!
//! Starts its own `redis-server`, then measures, each against a baseline taken in the same run
//! (interleaved rounds, medians) so machine noise cancels:
//!
//! 1. an uncontended `#[distributed_lock]` call vs the raw floor (`SET NX PX` + compare-and-delete
//!    `EVALSHA` on the same kind of redis-rs connection);
//!    Rows 1b: an uncontended read lock + release (`.read()`), and a semaphore's permit +
//!    release (`client.semaphore(k, 4)`), and two keys at once (`client.lock_all`, vs two
//!    plain locks one after the other), each vs the plain lock's and the raw
//!    floor; where the store serves them, an upgradable read (`.upgradable()`) and an
//!    upgradable read upgraded before its release (`guard.upgrade()`), each vs a plain read
//!    lock, and the upgrade alone (timed by itself) vs a plain read lock's acquisition alone
//!    (each database's first row has the same);
//! 2. throughput of 64 concurrent tasks on distinct keys vs raw pairs at the same concurrency;
//! 3. handoff: 16 tasks contending for one key — handoffs/s and release → next-acquire latency;
//! 4. renewal at scale: 50,000 locks held with a 3 s lease for 10 s — renewal commands/s from
//!    `INFO commandstats` vs the ideal (one per lock per lease/3), and the client's CPU time;
//! 5. a nested same-key (reentrant) call vs a plain function call;
//! 6. `memory://` uncontended calls per second;
//! 7. PostgreSQL (a server of its own, `initdb` + `postgres`): uncontended lock + release vs the
//!    two raw statements of a lock table, 64-task throughput vs raw pairs on as many
//!    connections, and handoff between four clients (`bench/src/sql.rs`);
//!    Row 7b: distlock's `mode=advisory` beside the same peer (the distributed-lock crate) and
//!    raw advisory locks, and its handoff between four clients.
//! 8. MariaDB (`mariadb-install-db` + `mariadbd`): the same rows.
//! 9. ZooKeeper (a standalone server of its own): uncontended lock + release vs a raw create +
//!    delete of an ephemeral node on the same server, 64-task throughput vs raw pairs on one
//!    session, and handoff between four clients (`bench/src/zk.rs`).
//! 10. etcd (a single member of its own): uncontended lock + release vs a raw put-if-absent
//!     transaction on a lease + delete on the same member, 64-task throughput vs raw pairs on
//!     one connection, the same beside the floor of a queue lock (that transaction with the
//!     queue's head read in it and a value as long as distlock's) and beside etcd's lock
//!     service, and handoff between four clients (`bench/src/etcd.rs`).
//! 11. contention on one key (`bench/src/contention.rs`): 16 tasks of one process and 4 × 4
//!     tasks of four processes taking turns with 1 ms holds — acquisitions/s, release → grant
//!     gap, server commands per acquisition, most overtakes of one waiter — for distlock and
//!     rslock side by side on the same server.
//! 12. Redis Sentinel (a master, two replicas, three sentinels of its own): an uncontended
//!     lock and release through `redis+sentinel://` vs `redis://` to the same master, and with
//!     `?replicas=1` vs the raw floor: `SET NX PX` and `WAIT 1`, then compare-and-delete
//!     (`bench/src/sentinel.rs`).
//! 13. a shared result found (`.share(d).run(..)` within its share) vs a plain cache `GET` of
//!     the same stored value (`bench/src/share.rs`).
//! 14. Redlock (`redlock://` over three `redis-server`s of its own): uncontended lock +
//!     release and 64-task throughput vs the raw floor, `SET NX PX` on each of the three at
//!     once, then the compare-and-delete on each at once (`bench/src/redlock.rs`).
//! 15. Redis Cluster (`redis+cluster://`, three masters of its own): the same vs raw
//!     `SET NX PX` + compare-and-delete `EVALSHA` through redis-rs's cluster connection on
//!     keys of the same slots (`bench/src/redlock.rs`).
//! 16. NATS JetStream KV (a `nats-server -js` of its own): uncontended lock + release vs the
//!     raw writes on one connection of the bench's own (a put expecting no revision, with the
//!     lease's TTL, then a delete expecting its revision) into a bucket created as distlock's,
//!     64-task throughput vs raw pairs on that connection, the same beside the lock written by
//!     hand with async-nats's key-value API (`create_with_ttl`, `delete_expect_revision`), and
//!     handoff between four clients vs a raw handoff woken by the bucket's republish
//!     (`bench/src/nats.rs`).
//!
//! Prints each row as it is measured and writes them, as records (store, row id, figure,
//! baseline, ratio, date, environment, server version) beside loose numeric fields, to
//! `target/distlock-bench.json` (`$CARGO_TARGET_DIR/distlock-bench.json` when that is set);
//! `scripts/bench.sh` runs the benchmark and turns that file into BENCHMARKS.md
//! (`bench/results.py`, through `bench/results.json`).
//!
//! Environment:
//! - `DISTLOCK_BENCH_QUICK=1` skips the 10 s renewal measurement (for quick comparisons);
//! - `DISTLOCK_BENCH_REDIS_ONLY=1` skips the database rows (7–10, 16): Redis alone, Sentinel,
//!   Redlock and Cluster;
//! - `DISTLOCK_BENCH_REDLOCK_ONLY=1` runs only the Redlock rows (14);
//! - `DISTLOCK_BENCH_CLUSTER_ONLY=1` runs only the Redis Cluster rows (15);
//! - `DISTLOCK_BENCH_CONTENTION_ONLY=1` runs only the contention rows (11);
//! - `DISTLOCK_BENCH_SQL_ONLY=1` runs only the database rows (7, 8, 9, 10 and 16);
//! - `DISTLOCK_BENCH_KINDS_ONLY=1` (or `DISTLOCK_BENCH_READ_ONLY=1`) runs only the lock kinds'
//!   rows (1b, and each database's: read lock, semaphore permit, two keys, upgradable read,
//!   upgrade, the upgrade alone);
//! - `DISTLOCK_BENCH_PG_ONLY=1`, `DISTLOCK_BENCH_MARIADB_ONLY=1` run only row 7, or 8;
//! - `DISTLOCK_BENCH_ZK_ONLY=1` runs only the ZooKeeper rows (9), then etcd's;
//! - `DISTLOCK_BENCH_ETCD_ONLY=1` runs only the etcd rows (10);
//! - `DISTLOCK_BENCH_NATS_ONLY=1` runs only the NATS rows (16);
//! - `DISTLOCK_BENCH_SENTINEL_ONLY=1` runs only the Sentinel rows (12);
//! - `DISTLOCK_BENCH_SHARE_ONLY=1` runs only row 13 (a shared result found, beside a `GET`);
//! - `DISTLOCK_BENCH_PROFILE=ours|raw|rawpub` runs only one side of the throughput measurement
//!   (for 20 s, or `DISTLOCK_BENCH_PROFILE_SECS`) and prints its CPU per call and the server's
//!   reads/writes per call — for `perf record -g` or `valgrind --tool=callgrind`. `rawpub` is the
//!   raw floor with a `PUBLISH` added to the release script, to price the wake-up alone.
//! - `DISTLOCK_BENCH_PAIRS=memory|etcd|etcd-raw|etcd-queue|postgres|postgres-advisory|postgres-raw`
//!   runs only `DISTLOCK_BENCH_PAIRS_N` (2,000) lock + release pairs (or the raw floors' pairs)
//!   on fresh keys by `DISTLOCK_BENCH_PAIRS_TASKS` (1) tasks, after 200 to warm up, and prints
//!   the client's and the servers' CPU per pair: under `valgrind --tool=callgrind`, a run of `N`
//!   pairs less a run of none is the client's instructions per pair, repeatable on a busy
//!   machine.
//! - `DISTLOCK_BENCH_NO_PYTHON=1` leaves redis-py out of row 11 (no `pip install`);
//! - `BENCH_PEER_POOL=64` gives the `distributed-lock-postgres` and `distributed-lock-mysql`
//!   peers a pool of 64 connections (sqlx's default is 10; row 8b's peer has 64 unless set).
//!   `DISTLOCK_BENCH_PAIRS_PARAMS=pool_size=8` adds URL parameters to distlock's side;
//!   `DISTLOCK_BENCH_PAIRS_PG_URL` runs the PostgreSQL modes against a server of one's own (with
//!   `pg_stat_statements` loaded, to see each statement's time inside the server).

mod contention;
mod cpu;
mod curator;
mod etcd;
/// The measuring code shared with `distlock bench` (rows both give are computed alike).
#[path = "../../lock-cli/src/measure.rs"]
mod measure;
mod nats;
mod peer;
mod record;
mod redlock;
mod sentinel;
mod share;
mod sql;
mod versions;
mod zk;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::{LockClient, LockError, distributed_lock};
use measure::percentile;
use record::{Base, Better, Report, at, ns, per_s, us};
use redis::aio::MultiplexedConnection;
use support::RedisServer;

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// The compare-and-delete of the Redis documentation's single-instance lock: the raw floor.
pub(crate) const RAW_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

#[distributed_lock(key = "bench:<id>", lease = "30s", wait = "0s")]
async fn empty_call(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "bench:handoff", lease = "30s", wait = "forever")]
async fn handoff_call(log: &std::sync::Mutex<Vec<(Instant, Instant)>>) -> Result<(), LockError> {
    let acquired = Instant::now();
    log.lock().unwrap().push((acquired, Instant::now()));
    Ok(())
}

#[distributed_lock(key = "bench:reentrant", lease = "30s")]
async fn reentrant_outer(n: u64) -> Result<(Duration, Duration), LockError> {
    let started = Instant::now();
    for _ in 0..n {
        reentrant_inner().await?;
    }
    let nested = started.elapsed();
    let started = Instant::now();
    for _ in 0..n {
        plain_inner().await?;
    }
    Ok((nested, started.elapsed()))
}

#[distributed_lock(key = "bench:reentrant", lease = "30s")]
async fn reentrant_inner() -> Result<(), LockError> {
    Ok(())
}

#[inline(never)]
async fn plain_inner() -> Result<(), LockError> {
    std::hint::black_box(Ok(()))
}

async fn raw_pair(
    conn: &mut MultiplexedConnection,
    release: &redis::Script,
    key: &str,
    token: &str,
) -> Result<(), Error> {
    let _: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await?;
    let _: i64 = release.key(key).arg(token).invoke_async(conn).await?;
    Ok(())
}

/// The SQL backends' default pool size (the raw side gets as many connections).
fn distlock_pool_size() -> usize {
    4
}

pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Numeric fields of one `INFO` section, e.g. `("cpu", ["used_cpu_user", …])`.
async fn server_info<const N: usize>(
    server: &RedisServer,
    section: &str,
    names: [&str; N],
) -> [f64; N] {
    let mut conn = server.connection().await;
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    names.map(|name| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    })
}

/// The server's CPU time (user + sys) so far, from `INFO cpu`.
async fn server_cpu(server: &RedisServer) -> Duration {
    let [user, sys] = server_info(server, "cpu", ["used_cpu_user", "used_cpu_sys"]).await;
    Duration::from_secs_f64(user + sys)
}

/// Runs `task(t, counter, stop)` for each of `tasks` tasks for `window`; each counts its calls
/// until `stop` is set. Returns calls per second.
async fn run_tasks<F, Fut>(tasks: u64, window: Duration, task: F) -> f64
where
    F: Fn(u64, Arc<AtomicU64>, Arc<AtomicBool>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|t| tokio::spawn(task(t, done.clone(), stop.clone())))
        .collect();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / window.as_secs_f64()
}

/// Calls per second of `tasks` tasks calling `empty_call` on distinct keys for `window`
/// (measured by the code `distlock bench` measures its throughput with).
async fn throughput_ours(round: u64, tasks: u64, window: Duration) -> f64 {
    let tasks = (0..tasks)
        .map(|t| {
            let mut id = 10_000_000 * (round + 1) + t * 100_000;
            move || {
                id += 1;
                empty_call(id)
            }
        })
        .collect();
    measure::throughput(window, tasks).await.unwrap()
}

/// Raw `SET NX PX` + compare-and-delete pairs per second of `tasks` tasks on distinct keys,
/// sharing one multiplexed connection as distlock does.
async fn throughput_raw(
    raw: &MultiplexedConnection,
    release: &redis::Script,
    round: u64,
    tasks: u64,
    window: Duration,
) -> f64 {
    let tasks = (0..tasks)
        .map(|t| {
            let (conn, release) = (raw.clone(), release.clone());
            let mut i = 0u64;
            move || {
                let (mut conn, release) = (conn.clone(), release.clone());
                let key = format!("rawtp:{round}:{t}:{i}");
                i += 1;
                async move {
                    let token = "t0123456789abcdef0123456789abcdef";
                    raw_pair(&mut conn, &release, &key, token).await
                }
            }
        })
        .collect();
    measure::throughput(window, tasks).await.unwrap()
}

/// Rows 7 and 8: PostgreSQL and MariaDB servers of the bench's own; then 9 and 10, and 16.
async fn sql_rows(report: &mut Report) -> Result<(), Error> {
    pg_rows(report).await?;
    mariadb_rows(report).await?;
    zk_rows(report).await?;
    nats_rows(report).await
}

/// Row 7: a PostgreSQL server of the bench's own.
async fn pg_rows(report: &mut Report) -> Result<(), Error> {
    let postgres = support::postgres::PostgresServer::start();
    let pg_url = postgres.url();
    let version = versions::postgres(&pg_url).await;
    report.server("postgres", version.clone());
    let (row7, row7b, row7c) = (
        at("postgres", "7"),
        at("postgres", "7b"),
        at("postgres", "7c"),
    );
    let direct = sql::rows(
        report,
        row7,
        "postgres",
        &pg_url,
        sql::PgRaw::connect(&pg_url, distlock_pool_size()).await?,
        "the lock table's two raw statements, prepared",
    )
    .await?;
    // mode=advisory's kinds (no semaphores), against raw advisory locks.
    let advisory = LockClient::connect(&format!("{pg_url}?mode=advisory")).await?;
    let floor = sql::PgAdvisory::connect(&pg_url, distlock_pool_size()).await?;
    sql::kind_rows(report, row7b, "postgres_advisory", &advisory, |name| {
        let floor = floor.clone();
        async move { sql::RawPair::pair(&floor, 0, &name, true).await }
    })
    .await?;
    drop(advisory);
    let Some(direct) = direct else {
        return Ok(());
    };
    // Against the same work done by hand: distlock's statements on its table shape.
    by_hand(
        report,
        row7,
        "postgres_by_hand",
        &pg_url,
        &sql::PgByHand::connect(&pg_url, distlock_pool_size()).await?,
        "distlock's two statements on its table shape, by hand, prepared",
    )
    .await?;
    // Through PgBouncer in transaction mode: waiters woken by `LISTEN` on the server itself
    // (`listen_url`), or polling; against distlock's handoff straight to the server.
    let bouncer = support::pgbouncer::PgBouncer::start(&postgres);
    report.server("postgres", format!("{version}, {}", versions::pgbouncer()));
    for (key, listen, how) in [
        ("pgbouncer_listen", true, "with `listen_url`"),
        (
            "pgbouncer_polling",
            false,
            "without `listen_url` (waiters poll, 2–50 ms)",
        ),
    ] {
        let listen = match listen {
            true => format!("&listen_url={pg_url}"),
            false => String::new(),
        };
        let url = format!("{}?pooler=transaction{listen}", bouncer.url());
        let ours = sql::handoff(report, key, &url).await?;
        handoff_rows_through(report, row7c, key, ours, how, direct);
    }
    drop(bouncer);
    report.server("postgres", version);
    // Beside its peer, the distributed-lock crate (advisory locks), and advisory locks raw.
    let peer = sql::distributed_lock("distributed-lock-postgres", &pg_url).await?;
    let peer_name = format!("`{}` ({})", peer.name(), sql::pool_said(None));
    let floor = sql::PgAdvisory::connect(&pg_url, distlock_pool_size()).await?;
    let floor_name = "advisory locks by hand, prepared";
    sql::beside_peer(
        report, row7, "postgres", &pg_url, &peer, &peer_name, &floor, floor_name,
    )
    .await?;
    let theirs = sql::peer_handoff(report, "postgres", &peer).await?;
    sql::handoff_rows(report, row7, "postgres", direct, &peer_name, theirs);
    // distlock's own advisory-lock mode beside the same peer and floor, and its handoff.
    let advisory_url = format!("{pg_url}?mode=advisory");
    sql::beside_peer(
        report,
        row7b,
        "postgres_advisory",
        &advisory_url,
        &peer,
        &peer_name,
        &floor,
        floor_name,
    )
    .await?;
    let ours = sql::handoff(report, "postgres_advisory", &advisory_url).await?;
    sql::handoff_rows(report, row7b, "postgres_advisory", ours, &peer_name, theirs);
    Ok(())
}

/// Row 7c's handoff through PgBouncer (`how`) against distlock's straight to the server.
fn handoff_rows_through(
    report: &mut Report,
    at: record::At<'_>,
    key: &str,
    ours: sql::Handoff,
    how: &str,
    direct: sql::Handoff,
) {
    let baseline = "distlock straight to the server (row 7)";
    let (ms, rate) = (
        |v: f64| record::Fig {
            value: v / 1e3,
            unit: "ms",
        },
        record::per_s,
    );
    report.row(
        at,
        format!("{key}_handoffs"),
        format!("through PgBouncer 1.18 (transaction mode) {how}: handoff, 4 clients × 4 tasks, grants/s"),
        rate(ours.rate),
        Base::quotient(baseline, rate(ours.rate), rate(direct.rate)),
        Better::Higher,
    );
    for (what, field, o, d) in [
        ("p50", "p50", ours.p50, direct.p50),
        ("p99", "p99", ours.p99, direct.p99),
    ] {
        report.row(
            at,
            format!("{key}_handoff_{field}"),
            format!("through PgBouncer {how}: release → another client's grant, {what}"),
            ms(o),
            Base::quotient(baseline, ms(o), ms(d)),
            Better::Lower,
        );
    }
}

/// A database's row against the same work done by hand (`by_hand`): uncontended lock +
/// release on fresh keys and on one reused key, and 64-task throughput, interleaved.
async fn by_hand(
    report: &mut Report,
    at: record::At<'_>,
    key: &str,
    url: &str,
    by_hand: &impl sql::RawPair,
    described: &str,
) -> Result<(), Error> {
    let client = LockClient::connect(url).await?;
    sql::warm_and_against(report, at, key, &client, by_hand, described).await?;
    Ok(())
}

/// Row 8: a MariaDB server of the bench's own.
async fn mariadb_rows(report: &mut Report) -> Result<(), Error> {
    let mariadb = support::mysql::MysqlServer::start();
    let my_url = mariadb.url();
    report.server("mariadb", versions::mariadb(&my_url).await);
    let (row8, row8b) = (at("mariadb", "8"), at("mariadb", "8b"));
    let direct = sql::rows(
        report,
        row8,
        "mariadb",
        &my_url,
        sql::MyRaw::connect(&my_url, distlock_pool_size()).await?,
        "the lock table's two raw statements, prepared",
    )
    .await?;
    let Some(direct) = direct else {
        return Ok(());
    };
    by_hand(
        report,
        row8,
        "mariadb_by_hand",
        &my_url,
        &sql::MyByHand::connect(&my_url, distlock_pool_size()).await?,
        "distlock's two statements on its table shape, by hand",
    )
    .await?;
    // Beside its peer, the distributed-lock crate (`GET_LOCK`), and named locks raw.
    let peer = sql::distributed_lock("distributed-lock-mysql", &my_url).await?;
    let peer_name = format!("`{}` ({})", peer.name(), sql::pool_said(None));
    let floor = sql::MyNamedLock::connect(&my_url, distlock_pool_size()).await?;
    sql::beside_peer(
        report,
        row8,
        "mariadb",
        &my_url,
        &peer,
        &peer_name,
        &floor,
        "`GET_LOCK` / `RELEASE_LOCK` by hand",
    )
    .await?;
    let theirs = sql::peer_handoff(report, "mariadb", &peer).await?;
    sql::handoff_rows(report, row8, "mariadb", direct, &peer_name, theirs);
    drop(peer);
    // Row 8b: `mode=named` (the peer's design, `GET_LOCK`) beside the peer at equal
    // connections: each holds one connection per held lock, so both may open 64 (the
    // throughput line's tasks; `BENCH_PEER_POOL` to change the peer's).
    let pool = std::env::var("BENCH_PEER_POOL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let peer = sql::distributed_lock_pooled("distributed-lock-mysql", &my_url, Some(pool)).await?;
    let peer_name = format!("`{}` ({})", peer.name(), sql::pool_said(Some(pool)));
    let named = LockClient::builder(format!("{my_url}?mode=named"))
        .build()
        .await?;
    for i in 0..300 {
        sql::lock_release(&named, format!("warm:{i}")).await?;
    }
    sql::against(
        report,
        row8b,
        "mariadb_named_peer",
        &named,
        &peer,
        &peer_name,
    )
    .await?;
    let named_url = format!("{my_url}?mode=named");
    let ours = sql::handoff(report, "mariadb_named", &named_url).await?;
    let theirs = sql::peer_handoff(report, "mariadb_named", &peer).await?;
    sql::handoff_rows(report, row8b, "mariadb_named", ours, &peer_name, theirs);
    Ok(())
}

/// Row 9: a ZooKeeper server of the bench's own.
async fn zk_rows(report: &mut Report) -> Result<(), Error> {
    let server = support::zookeeper::ZkServer::start();
    report.server("zookeeper", versions::zookeeper(server.client_port));
    let row9 = at("zookeeper", "9");
    let hosts = format!("127.0.0.1:{}", server.client_port);
    // distlock's client uses one session per lease: one session, as the raw side.
    let raw = zk::ZkRaw::connect(&hosts, 1).await?;
    let raw_name = "the recipe by hand: create, list, delete";
    let direct = sql::rows(
        report,
        row9,
        "zookeeper",
        &server.url("/bench"),
        raw.clone(),
        raw_name,
    )
    .await?;
    let Some(direct) = direct else {
        return etcd_rows(report).await;
    };
    // Beside its peer: Apache Curator's InterProcessMutex, same server, same run.
    let client = LockClient::connect(&server.url("/bench-peer")).await?;
    let curator = curator::start(&hosts).await?;
    let curator_name = "Apache Curator's `InterProcessMutex`";
    for i in 0..300 {
        sql::lock_release(&client, format!("warm:{i}")).await?;
    }
    sql::against(
        report,
        row9,
        "zookeeper_curator",
        &client,
        &curator,
        curator_name,
    )
    .await?;
    // What each costs the server: requests received and packets sent per lock + release.
    for reused in [false, true] {
        let port = server.client_port;
        let prefix = |side: &str| {
            if reused {
                format!("count:{side}")
            } else {
                format!("count:{side}:")
            }
        };
        let ours = sql::Ours(&client);
        let ours = zk::requests_per_call(port, &ours, &prefix("ours"), 200, reused).await?;
        let raw = zk::requests_per_call(port, &raw, &prefix("raw"), 200, reused).await?;
        let peer = zk::requests_per_call(port, &curator, &prefix("curator"), 200, reused).await?;
        let (what, field) = if reused {
            ("one reused key", "reused")
        } else {
            ("fresh keys", "fresh")
        };
        for (name, theirs, side) in [(raw_name, raw, "raw"), (curator_name, peer, "curator")] {
            for (unit, figure, mine, other) in [
                ("requests", "requests", ours.0, theirs.0),
                ("packets", "packets sent", ours.1, theirs.1),
            ] {
                let (mine, other) = (record::count(mine, unit), record::count(other, unit));
                report.row(
                    row9,
                    format!("zookeeper_{field}_{unit}_vs_{side}"),
                    format!("server {figure} per lock + release, {what}"),
                    mine,
                    Base::quotient(name, mine, other),
                    Better::Lower,
                );
            }
        }
        report.field(&format!("zookeeper_{field}_requests_per_call"), ours.0);
        report.field(&format!("zookeeper_{field}_raw_requests_per_call"), raw.0);
        report.field(
            &format!("zookeeper_{field}_curator_requests_per_call"),
            peer.0,
        );
    }
    let (rate, p50, p99) = curator.handoff("handoff", Duration::from_secs(3)).await?;
    report.field("zookeeper_curator_handoffs_per_s", rate);
    report.field("zookeeper_curator_handoff_p50_us", p50);
    report.field("zookeeper_curator_handoff_p99_us", p99);
    let theirs = sql::Handoff { rate, p50, p99 };
    sql::handoff_rows(report, row9, "zookeeper", direct, curator_name, theirs);
    drop(curator);
    drop(server);
    etcd_rows(report).await
}

/// `DISTLOCK_BENCH_PAIRS`: pairs on `store` alone, the client's CPU per pair.
async fn pairs(store: &str) -> Result<(), Error> {
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
    };
    let (calls, tasks) = (
        number("DISTLOCK_BENCH_PAIRS_N", 2_000),
        number("DISTLOCK_BENCH_PAIRS_TASKS", 1).max(1),
    );
    let member = store
        .starts_with("etcd")
        .then(support::etcd::EtcdMember::start);
    // `DISTLOCK_BENCH_PAIRS_PG_URL`: a PostgreSQL server of one's own (with
    // `pg_stat_statements` loaded, say) instead of one started here.
    let own_pg = std::env::var("DISTLOCK_BENCH_PAIRS_PG_URL").ok();
    let postgres = (store.starts_with("postgres") && own_pg.is_none())
        .then(support::postgres::PostgresServer::start);
    let pg_url = own_pg.or_else(|| postgres.as_ref().map(|p| p.url()));
    let host = member
        .as_ref()
        .map(|m| format!("127.0.0.1:{}", m.client_port));
    // One side: `pair(t, key)` for each task `t`'s keys, all tasks at once.
    async fn run<F, Fut>(tasks: u64, calls: u64, prefix: &str, pair: F) -> Result<(), Error>
    where
        F: Fn(String) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<(), Error>> + Send,
    {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let (pair, prefix) = (pair.clone(), prefix.to_owned());
                tokio::spawn(async move {
                    for i in 0..calls / tasks {
                        pair(format!("{prefix}{t}:{i}")).await?;
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for handle in handles {
            handle.await??;
        }
        Ok(())
    }
    // The side to measure: one lock + release (or raw pair) on a key.
    type Pair = Arc<
        dyn Fn(String) -> std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>
            + Send
            + Sync,
    >;
    fn side<R: sql::RawPair>(raw: R) -> Pair {
        Arc::new(move |key: String| {
            let raw = raw.clone();
            Box::pin(async move { raw.pair(key.len(), &key, true).await })
        })
    }
    let pair: Pair = match (store, host) {
        ("memory", _) | ("etcd", Some(_)) | ("postgres", _) | ("postgres-advisory", _) => {
            let url = match (&member, &pg_url) {
                (Some(member), _) => member.url("pairs"),
                (_, Some(pg_url)) => pg_url.clone(),
                _ => "memory://".into(),
            };
            // The mode's own parameter, then `DISTLOCK_BENCH_PAIRS_PARAMS=pool_size=8`: more of
            // distlock's URL parameters.
            let params: Vec<String> = (store == "postgres-advisory")
                .then(|| "mode=advisory".to_owned())
                .into_iter()
                .chain(std::env::var("DISTLOCK_BENCH_PAIRS_PARAMS").ok())
                .filter(|param| !param.is_empty())
                .collect();
            let url = match params.is_empty() {
                true => url,
                false => {
                    let join = if url.contains('?') { '&' } else { '?' };
                    format!("{url}{join}{}", params.join("&"))
                }
            };
            let client = LockClient::connect(&url).await?;
            Arc::new(move |key| {
                let client = client.clone();
                Box::pin(async move { sql::lock_release(&client, key).await })
            })
        }
        ("postgres-raw", _) => {
            let url = pg_url.clone().unwrap_or_default();
            side(sql::PgRaw::connect(&url, distlock_pool_size()).await?)
        }
        ("etcd-queue", Some(host)) => side(etcd::EtcdQueueFloor(
            etcd::EtcdRaw::connect(&host).await?,
            150,
        )),
        ("etcd-raw", Some(host)) => side(etcd::EtcdRaw::connect(&host).await?),
        _ => {
            return Err(format!(
                "DISTLOCK_BENCH_PAIRS={store}: memory, etcd, etcd-raw, etcd-queue, postgres, \
                 postgres-advisory or postgres-raw"
            )
            .into());
        }
    };
    let call = move |key: String| pair(key);
    run(tasks, 200.max(tasks), "warm:", call.clone()).await?;
    let (cpu0, servers0, t0) = (cpu_time(), cpu::sample(None), Instant::now());
    // `call` (and the client in it) lives until the servers are sampled: a client dropped
    // before would close its connections, and their servers' time would go with them.
    run(tasks, calls, "pair:", call.clone()).await?;
    let done = calls / tasks * tasks;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / done.max(1) as f64;
    let (elapsed, client) = (t0.elapsed(), cpu_time() - cpu0);
    let (_, servers) = servers0.per_pair(&cpu::sample(None), done as f64);
    println!(
        "{store}: {done} pairs by {tasks} tasks, {:.1} µs each, client CPU {:.1} µs per pair, \
         servers {servers:.1} µs",
        per(elapsed),
        per(client)
    );
    drop(call);
    Ok(())
}

/// Row 10: an etcd member of the bench's own.
async fn etcd_rows(report: &mut Report) -> Result<(), Error> {
    let member = support::etcd::EtcdMember::start();
    report.server("etcd", versions::etcd(member.client_port));
    let row10 = at("etcd", "10");
    let host = format!("127.0.0.1:{}", member.client_port);
    let direct = sql::rows(
        report,
        row10,
        "etcd",
        &member.url("bench"),
        etcd::EtcdRaw::connect(&host).await?,
        "a raw put-if-absent transaction on a lease + delete",
    )
    .await?;
    let Some(direct) = direct else {
        return Ok(());
    };
    // Beside the floor of any queue lock: the raw pair with the queue's head read in its
    // transaction and a value as long as distlock's (130–160 bytes: token, holder, lease,
    // renewal, join time).
    let client = LockClient::connect(&member.url("bench-queue-floor")).await?;
    sql::against(
        report,
        row10,
        "etcd_queue_floor",
        &client,
        &etcd::EtcdQueueFloor(etcd::EtcdRaw::connect(&host).await?, 150),
        "the floor of a queue lock",
    )
    .await?;
    // Beside its peer: etcd's own lock service, same member, same run.
    let client = LockClient::connect(&member.url("bench-peer")).await?;
    let service = "etcd's lock service (`v3lockpb`)";
    sql::against(
        report,
        row10,
        "etcd_lock_service",
        &client,
        &etcd::EtcdLockService::connect(&host).await?,
        service,
    )
    .await?;
    let (rate, p50, p99) = etcd::lock_service_handoff(&host, Duration::from_secs(3)).await?;
    report.field("etcd_lock_service_handoffs_per_s", rate);
    report.field("etcd_lock_service_handoff_p50_us", p50);
    report.field("etcd_lock_service_handoff_p99_us", p99);
    let theirs = sql::Handoff { rate, p50, p99 };
    sql::handoff_rows(
        report,
        row10,
        "etcd",
        direct,
        "etcd's lock service (`v3lockpb`)",
        theirs,
    );
    drop(member);
    Ok(())
}

/// Row 16: a NATS server (JetStream) of the bench's own.
async fn nats_rows(report: &mut Report) -> Result<(), Error> {
    let server = support::nats::NatsServer::start();
    report.server("nats", versions::nats(&nats::connect(server.port).await?));
    let row16 = at("nats", "16");
    // Each side in a bucket of its own (the sides use the same key names), every bucket with
    // distlock's settings.
    let raw_name = "raw put expecting no revision, with the TTL, + delete expecting its revision";
    let direct = sql::rows(
        report,
        row16,
        "nats",
        &server.url("bench"),
        nats::NatsRaw::connect(server.port, "bench-raw").await?,
        raw_name,
    )
    .await?;
    let Some(direct) = direct else {
        return Ok(());
    };
    // Against the same lock written by hand with async-nats's key-value API.
    by_hand(
        report,
        row16,
        "nats_by_hand",
        &server.url("bench-by-hand"),
        &nats::NatsByHand::connect(server.port, "bench-hand").await?,
        "by hand with async-nats's KV API: `create_with_ttl`, `delete_expect_revision`",
    )
    .await?;
    // The handoff against the raw floor's: waiters woken by the bucket's republish, putting
    // over the delete's revision it carries.
    let (rate, p50, p99) =
        nats::raw_handoff(server.port, "bench-raw", Duration::from_secs(3)).await?;
    report.field("nats_raw_handoffs_per_s", rate);
    report.field("nats_raw_handoff_p50_us", p50);
    report.field("nats_raw_handoff_p99_us", p99);
    let theirs = sql::Handoff { rate, p50, p99 };
    sql::handoff_rows(
        report,
        row16,
        "nats",
        direct,
        "the raw writes, woken by the republished delete",
        theirs,
    );
    drop(server);
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    // A helper process of row 11's four-process case.
    if std::env::var("DISTLOCK_BENCH_CHILD").as_deref() == Ok("contend") {
        return contention::child_main().await;
    }
    if let Ok(store) = std::env::var("DISTLOCK_BENCH_PAIRS") {
        return pairs(&store).await;
    }
    let mut report = Report::new();
    // Whatever the rows measured before a failure are written too.
    let outcome = run(&mut report).await;
    if !report.is_empty() {
        let path = report.write()?;
        println!("wrote {}", path.display());
    }
    outcome
}

/// Every row this run's environment asks for.
async fn run(report: &mut Report) -> Result<(), Error> {
    if std::env::var_os("DISTLOCK_BENCH_REDLOCK_ONLY").is_some() {
        return redlock::redlock_rows(report).await;
    }
    if std::env::var_os("DISTLOCK_BENCH_CLUSTER_ONLY").is_some() {
        return redlock::cluster_rows(report).await;
    }
    let server = RedisServer::start();
    let url = server.url();
    report.server("redis", versions::redis(&server).await);
    report.server("sentinel", versions::redis(&server).await);
    distlock::init(LockClient::connect(&url).await?)?;
    let raw_client = redis::Client::open(url.as_str())?;
    let mut raw = raw_client.get_multiplexed_async_connection().await?;
    let release = redis::Script::new(RAW_RELEASE);
    release.load_async(&mut raw).await?;
    if std::env::var_os("DISTLOCK_BENCH_CONTENTION_ONLY").is_some() {
        contention::rows(report, &server).await?;
        return Ok(());
    }
    // The database rows alone (DISTLOCK_BENCH_SQL_ONLY=1).
    if std::env::var_os("DISTLOCK_BENCH_ETCD_ONLY").is_some() {
        etcd_rows(report).await?;
        return Ok(());
    }
    if std::env::var_os("DISTLOCK_BENCH_NATS_ONLY").is_some() {
        nats_rows(report).await?;
        return Ok(());
    }
    if std::env::var_os("DISTLOCK_BENCH_SENTINEL_ONLY").is_some() {
        sentinel::rows(report).await?;
        return Ok(());
    }
    if std::env::var_os("DISTLOCK_BENCH_SHARE_ONLY").is_some() {
        share::rows(report, &server).await?;
        return Ok(());
    }
    if std::env::var_os("DISTLOCK_BENCH_ZK_ONLY").is_some() {
        zk_rows(report).await?;
        return Ok(());
    }
    if std::env::var_os("DISTLOCK_BENCH_PG_ONLY").is_some() {
        pg_rows(report).await?;
        return Ok(());
    }
    if std::env::var_os("DISTLOCK_BENCH_MARIADB_ONLY").is_some() {
        mariadb_rows(report).await?;
        return Ok(());
    }
    if std::env::var_os("DISTLOCK_BENCH_SQL_ONLY").is_some() {
        sql_rows(report).await?;
        return Ok(());
    }
    // The lock kinds' rows alone (DISTLOCK_BENCH_KINDS_ONLY=1): 1b, then each database's,
    // ZooKeeper's, etcd's and NATS's.
    if sql::read_only() {
        let manual = LockClient::connect(&server.url()).await?;
        sql::kind_rows(report, at("redis", "1b"), "redis", &manual, |name| {
            let (mut raw, release) = (raw.clone(), release.clone());
            async move { raw_pair(&mut raw, &release, &name, "t0123456789abcdef").await }
        })
        .await?;
        return sql_rows(report).await;
    }
    // For profilers (`perf record -g`): only one side of the throughput measurement, 20 s.
    if let Ok(side) = std::env::var("DISTLOCK_BENCH_PROFILE") {
        let secs = std::env::var("DISTLOCK_BENCH_PROFILE_SECS").ok();
        let window = Duration::from_secs(secs.and_then(|s| s.parse().ok()).unwrap_or(20));
        let io = ["total_reads_processed", "total_writes_processed"];
        let [reads, writes] = server_info(&server, "stats", io).await;
        let cpu = ["used_cpu_user", "used_cpu_sys"];
        let [cpu0, sys0] = server_info(&server, "cpu", cpu).await;
        let client0 = cpu_time();
        let rate = match side.as_str() {
            "raw" => throughput_raw(&raw, &release, 0, 64, window).await,
            "rawpub" => {
                let script = redis::Script::new(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[1], 'released') return 1 end return 0",
                );
                script.load_async(&mut raw).await?;
                throughput_raw(&raw, &script, 0, 64, window).await
            }
            _ => throughput_ours(0, 64, window).await,
        };
        let [reads_after, writes_after] = server_info(&server, "stats", io).await;
        let client1 = cpu_time();
        let [cpu1, sys1] = server_info(&server, "cpu", cpu).await;
        let calls = rate * window.as_secs_f64();
        println!(
            "{side}: {rate:.0} calls/s; redis-server reads / writes per call: {:.3} / {:.3}; \
             CPU µs per call: client {:.2}, redis-server user {:.2} + sys {:.2}",
            (reads_after - reads) / calls,
            (writes_after - writes) / calls,
            (client1 - client0).as_secs_f64() * 1e6 / calls,
            (cpu1 - cpu0) * 1e6 / calls,
            (sys1 - sys0) * 1e6 / calls,
        );
        return Ok(());
    }
    println!(
        "redis-server on 127.0.0.1:{}; machine: {} cores",
        server.port(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // Warm up both paths (connections, scripts, allocator).
    for i in 0..2_000u64 {
        empty_call(i).await?;
        raw_pair(&mut raw, &release, &format!("raw:{i}"), "warm").await?;
    }

    // 1. Uncontended call vs raw floor: interleaved rounds, median per-call time.
    let (rounds, per_round) = (21, 400u64);
    let (mut ours, mut floor, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut next = 1_000_000u64;
    for round in 0..rounds {
        let mut measure_ours = || {
            let start = next;
            next += per_round;
            async move {
                let t = Instant::now();
                for id in start..start + per_round {
                    empty_call(id).await?;
                }
                Ok::<_, Error>(t.elapsed().as_secs_f64() * 1e6 / per_round as f64)
            }
        };
        let mut measure_raw = async || {
            let t = Instant::now();
            for i in 0..per_round {
                let key = format!("raw:{round}:{i}");
                raw_pair(
                    &mut raw,
                    &release,
                    &key,
                    "t0123456789abcdef0123456789abcdef",
                )
                .await?;
            }
            Ok::<_, Error>(t.elapsed().as_secs_f64() * 1e6 / per_round as f64)
        };
        // Alternate which goes first, so drift within a round favours neither.
        let (a, b) = if round % 2 == 0 {
            let a = measure_ours().await?;
            (a, measure_raw().await?)
        } else {
            let b = measure_raw().await?;
            (measure_ours().await?, b)
        };
        ours.push(a);
        floor.push(b);
        ratios.push(a / b);
    }
    let (ours_us, floor_us, ratio) = (median(&mut ours), median(&mut floor), median(&mut ratios));
    let raw_floor = "raw `SET NX PX` + compare-and-delete `EVALSHA`";
    report.row(
        at("redis", "1"),
        "uncontended",
        "uncontended `#[distributed_lock]` call, empty body, distinct keys",
        us(ours_us),
        Base::with_ratio(raw_floor, us(floor_us), ratio),
        Better::Lower,
    );
    report.field("uncontended_call_us", ours_us);
    report.field("uncontended_raw_floor_us", floor_us);
    report.field("uncontended_ratio", ratio);

    // 2. Throughput: 64 tasks on distinct keys vs raw pairs at the same concurrency.
    let tasks = 64u64;
    // Many short interleaved windows: the noise of a shared machine comes in bursts of seconds,
    // and a ratio taken over two adjacent 0.4 s windows mostly sees the same conditions.
    let window = Duration::from_millis(400);
    let (mut ours_rate, mut raw_rate, mut rate_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ours_cpu, mut raw_cpu) = (Vec::new(), Vec::new());
    for round in 0..31u64 {
        let run_ours = throughput_ours(round, tasks, window);
        let run_raw = throughput_raw(&raw, &release, round, tasks, window);
        let cpu = |rate: f64, client: Duration, srv: Duration| {
            let calls = rate * window.as_secs_f64();
            (
                client.as_secs_f64() * 1e6 / calls,
                srv.as_secs_f64() * 1e6 / calls,
            )
        };
        let measure = |fut| async {
            let (c0, s0) = (cpu_time(), server_cpu(&server).await);
            let rate: f64 = fut.await;
            let (c1, s1) = (cpu_time(), server_cpu(&server).await);
            (rate, cpu(rate, c1 - c0, s1 - s0))
        };
        let (a, b) = if round % 2 == 0 {
            let a = measure(
                Box::pin(run_ours) as std::pin::Pin<Box<dyn std::future::Future<Output = f64>>>
            )
            .await;
            (a, measure(Box::pin(run_raw)).await)
        } else {
            let b = measure(
                Box::pin(run_raw) as std::pin::Pin<Box<dyn std::future::Future<Output = f64>>>
            )
            .await;
            (measure(Box::pin(run_ours)).await, b)
        };
        ours_cpu.push(a.1);
        raw_cpu.push(b.1);
        let (a, b) = (a.0, b.0);
        ours_rate.push(a);
        raw_rate.push(b);
        rate_ratios.push(a / b);
    }
    let (a, b, r) = (
        median(&mut ours_rate),
        median(&mut raw_rate),
        median(&mut rate_ratios),
    );
    let raw_pairs = "raw pairs at the same concurrency";
    report.row(
        at("redis", "2"),
        "throughput",
        "throughput, 64 tasks, distinct keys",
        per_s(a),
        Base::with_ratio(raw_pairs, per_s(b), r),
        Better::Higher,
    );
    // Medians of each component over the rounds.
    let cpu_median = |cpu: &[(f64, f64)]| {
        let (mut client, mut server): (Vec<f64>, Vec<f64>) = cpu.iter().copied().unzip();
        (median(&mut client), median(&mut server))
    };
    let (oc, rc) = (cpu_median(&ours_cpu), cpu_median(&raw_cpu));
    report.row(
        at("redis", "2"),
        "cpu_client",
        "the client's CPU per call at that throughput",
        us(oc.0),
        Base::quotient(raw_pairs, us(oc.0), us(rc.0)),
        Better::Lower,
    );
    report.row(
        at("redis", "2"),
        "cpu_server",
        "redis-server's CPU per call at that throughput",
        us(oc.1),
        Base::quotient(raw_pairs, us(oc.1), us(rc.1)),
        Better::Lower,
    );
    report.field("client_cpu_us_per_call", oc.0);
    report.field("server_cpu_us_per_call", oc.1);
    report.field("raw_client_cpu_us_per_call", rc.0);
    report.field("raw_server_cpu_us_per_call", rc.1);
    report.field("throughput_calls_per_s", a);
    report.field("throughput_raw_pairs_per_s", b);
    report.field("throughput_ratio", r);

    // 3. Handoff: 16 tasks of one process contending for one key.
    server.reset_stats().await;
    let log = Arc::new(std::sync::Mutex::new(Vec::with_capacity(100_000)));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for _ in 0..16 {
        let (log, stop) = (log.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                handoff_call(&log).await.unwrap();
            }
        }));
    }
    let window = Duration::from_secs(3);
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await?;
    }
    let commands = server
        .commands_calls(&[
            "set",
            "evalsha",
            "get",
            "del",
            "pttl",
            "publish",
            "subscribe",
            "unsubscribe",
            "incr",
            "pexpire",
        ])
        .await;
    let log = log.lock().unwrap().clone();
    let mut gaps: Vec<Duration> = log
        .windows(2)
        .map(|w| w[1].0.duration_since(w[0].1))
        .collect();
    gaps.sort();
    let rate = log.len() as f64 / window.as_secs_f64();
    let (p50, p99) = (percentile(&gaps, 0.5), percentile(&gaps, 0.99));
    let row3 = at("redis", "3");
    report.row(
        row3,
        "handoffs",
        "handoff, 16 tasks of one process on one key: grants/s",
        per_s(rate),
        Base::none(
            "the rate of tasks that do nothing while they hold it; row 11 sets a peer beside it",
        ),
        Better::Higher,
    );
    let round_trip = "one round trip: half of row 1's raw pair";
    for (field, what, gap) in [("p50", "p50", p50), ("p99", "p99", p99)] {
        report.row(
            row3,
            format!("handoff_{field}"),
            format!("handoff: release → next grant, {what}"),
            us(gap.as_secs_f64() * 1e6),
            Base::quotient(round_trip, us(gap.as_secs_f64() * 1e6), us(floor_us / 2.0)),
            Better::Lower,
        );
    }
    let per_acquisition = commands as f64 / log.len() as f64;
    let commands = |n| record::count(n, "commands");
    report.row(
        row3,
        "handoff_commands",
        "handoff: server commands per acquisition (`INFO commandstats`)",
        commands(per_acquisition),
        Base::quotient(
            "a grant and a release, one command each",
            commands(per_acquisition),
            commands(2.0),
        ),
        Better::Lower,
    );
    report.field("handoff_commands_per_acquisition", per_acquisition);
    report.field("handoffs_per_s", rate);
    report.field("handoff_p50_us", p50.as_secs_f64() * 1e6);
    report.field("handoff_p99_us", p99.as_secs_f64() * 1e6);

    // 5. Reentrant call vs plain call (before 4, which loads the machine for 10 s).
    let n = 200_000;
    let before = server.command_calls("set").await + server.command_calls("evalsha").await;
    let (nested, plain) = reentrant_outer(n).await?;
    let after = server.command_calls("set").await + server.command_calls("evalsha").await;
    let (nested_ns, plain_ns) = (
        nested.as_secs_f64() * 1e9 / n as f64,
        plain.as_secs_f64() * 1e9 / n as f64,
    );
    report.row(
        at("redis", "5"),
        "reentrant",
        "nested same-key (reentrant) call",
        ns(nested_ns),
        Base::quotient(
            "a plain `async fn` call",
            ns(nested_ns),
            ns(plain_ns.max(0.1)),
        ),
        Better::Lower,
    );
    report.row(
        at("redis", "5"),
        "reentrant_commands",
        "server commands sent by 200,000 nested calls",
        record::count((after - before - 2) as f64, "commands"),
        Base::none("a nested call must send none"),
        Better::Lower,
    );
    report.field("reentrant_call_ns", nested_ns);
    report.field("plain_call_ns", plain_ns);
    report.field("reentrant_commands", (after - before - 2) as f64);

    // 1b. An uncontended read lock + release vs the plain lock's and the raw floor.
    let manual = LockClient::connect(&server.url()).await?;
    sql::kind_rows(report, at("redis", "1b"), "redis", &manual, |name| {
        let (mut raw, release) = (raw.clone(), release.clone());
        async move { raw_pair(&mut raw, &release, &name, "t0123456789abcdef").await }
    })
    .await?;

    // 6. memory:// uncontended calls per second (manual API).
    let memory = LockClient::connect("memory://bench").await?;
    let t = Instant::now();
    let calls = 200_000u64;
    for i in 0..calls {
        memory
            .lock(format!("m:{i}"))
            .wait(Duration::ZERO)
            .acquire()
            .await?
            .release()
            .await?;
    }
    let rate = calls as f64 / t.elapsed().as_secs_f64();
    report.row(
        at("memory", "6"),
        "uncontended",
        "uncontended acquire + release (manual API), one task",
        per_s(rate),
        Base::none("in-process, no store to set it against"),
        Better::Higher,
    );
    report.field("memory_calls_per_s", rate);

    // 11. Contention on one key, distlock beside its peers.
    contention::rows(report, &server).await?;

    // 13. A shared result found, beside a plain cache GET.
    share::rows(report, &server).await?;

    if std::env::var_os("DISTLOCK_BENCH_REDIS_ONLY").is_none() {
        sql_rows(report).await?;
    }

    // 4. Renewal at scale: 50,000 locks (issue 88's figure), 3 s lease, held 10 s (skipped
    // with DISTLOCK_BENCH_QUICK=1, for quick comparisons of the other figures).
    if std::env::var_os("DISTLOCK_BENCH_QUICK").is_none() {
        const HELD: u64 = 50_000;
        let holder = LockClient::connect(&url).await?;
        let mut guards = Vec::with_capacity(HELD as usize);
        for i in 0..HELD {
            guards.push(
                holder
                    .lock(format!("held:{i}"))
                    .lease(Duration::from_secs(3))
                    .acquire()
                    .await?,
            );
        }
        server.reset_stats().await;
        let cpu_before = cpu_time();
        let held_for = Duration::from_secs(10);
        tokio::time::sleep(held_for).await;
        let cpu = cpu_time() - cpu_before;
        let renew_commands = server.command_calls("evalsha").await;
        let lost = guards.iter().filter(|g| g.is_lost()).count();
        let per_s = renew_commands as f64 / held_for.as_secs_f64();
        let ideal = HELD as f64 / 1.0; // one renewal per lock per lease/3 = 1 s
        let row4 = at("redis", "4");
        report.row(
            row4,
            "renewal",
            "renewal, 50,000 locks held 10 s with a 3 s lease: server commands/s",
            record::per_s(per_s),
            Base::quotient(
                "one command per lock per lease/3",
                record::per_s(per_s),
                record::per_s(ideal),
            ),
            Better::Lower,
        );
        report.row(
            row4,
            "renewal_cpu",
            "renewal: the client's CPU while holding them",
            record::count(cpu.as_secs_f64() * 10.0, "% of a core"),
            Base::none("what holding 50,000 locks costs the client"),
            Better::Lower,
        );
        report.row(
            row4,
            "renewal_lost",
            "renewal: locks lost while held",
            record::count(lost as f64, "locks"),
            Base::none("none may be lost"),
            Better::Lower,
        );
        report.field("renewal_commands_per_s", per_s);
        report.field("renewal_ideal_per_s", ideal);
        report.field("renewal_client_cpu_ms_per_10s", cpu.as_secs_f64() * 1e3);
        report.field("renewal_locks_lost", lost as f64);
        for guard in guards {
            let _ = guard.release().await;
        }
    }

    sentinel::rows(report).await?;
    drop(server);
    redlock::redlock_rows(report).await?;
    redlock::cluster_rows(report).await
}

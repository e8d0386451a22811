//! The SQL backends' rows: uncontended lock + release against the two raw statements of the
//! classic lock table on the same server, 64-task throughput on distinct keys against raw pairs
//! on as many connections as distlock's pool, and handoff between clients (a release wakes the
//! other clients' waiters through the database: `LISTEN`/`NOTIFY` on PostgreSQL, polling on
//! MySQL / MariaDB).

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use distlock::LockClient;

use crate::peer::LinePeer;
use crate::record::{At, Base, Better, Fig, per_s, us};
use crate::{Error, Report, measure, median, run_tasks};

/// A raw lock table's two statements: take (`INSERT … ON CONFLICT DO NOTHING`), release
/// (`DELETE … WHERE token`), on connections of the bench's own.
pub trait RawPair: Clone + Send + Sync + 'static {
    /// Takes and releases `key` once; `conn` picks one of the connections. `fresh`: `key` was
    /// never used before (a floor that needs a parent for a new key makes it first).
    fn pair(
        &self,
        conn: usize,
        key: &str,
        fresh: bool,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// One side of a comparison: distlock ([`Ours`]), a raw floor (every [`RawPair`]), or a peer
/// library running in a process of its own.
pub trait Peer: Send + Sync {
    /// `calls` lock + release pairs one after another, on the fresh keys `{prefix}{i}`, or
    /// (`reused`) all on the key `prefix`; µs per pair.
    fn sequential(
        &self,
        prefix: &str,
        calls: u64,
        reused: bool,
    ) -> impl Future<Output = Result<f64, Error>> + Send;

    /// Pairs per second of 64 tasks on the distinct fresh keys `{prefix}{task}:{i}`, for
    /// `window`.
    fn throughput(
        &self,
        prefix: &str,
        window: Duration,
    ) -> impl Future<Output = Result<f64, Error>> + Send;

    /// The process that does this side's work, when it is not the bench's own (a peer
    /// library's): its CPU is the client's in [`crate::cpu`].
    fn pid(&self) -> Option<u32> {
        None
    }
}

impl<R: RawPair> Peer for R {
    async fn sequential(&self, prefix: &str, calls: u64, reused: bool) -> Result<f64, Error> {
        let t = Instant::now();
        for i in 0..calls {
            if reused {
                self.pair(0, prefix, false).await?;
            } else {
                self.pair(0, &format!("{prefix}{i}"), true).await?;
            }
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / calls as f64)
    }

    async fn throughput(&self, prefix: &str, window: Duration) -> Result<f64, Error> {
        let prefix = prefix.to_owned();
        Ok(run_tasks(64, window, move |t, done, stop| {
            let (raw, prefix) = (self.clone(), prefix.clone());
            async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    raw.pair(t as usize, &format!("{prefix}{t}:{i}"), true)
                        .await
                        .unwrap();
                    i += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .await)
    }
}

/// distlock's side: [`lock_release`] on `client`.
pub struct Ours<'a>(pub &'a LockClient);

impl Peer for Ours<'_> {
    async fn sequential(&self, prefix: &str, calls: u64, reused: bool) -> Result<f64, Error> {
        let t = Instant::now();
        for i in 0..calls {
            let key = if reused {
                prefix.to_owned()
            } else {
                format!("{prefix}{i}")
            };
            lock_release(self.0, key).await?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / calls as f64)
    }

    async fn throughput(&self, prefix: &str, window: Duration) -> Result<f64, Error> {
        let prefix = prefix.to_owned();
        Ok(run_tasks(64, window, move |t, done, stop| {
            let (client, prefix) = (self.0.clone(), prefix.clone());
            async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    lock_release(&client, format!("{prefix}{t}:{i}"))
                        .await
                        .unwrap();
                    i += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .await)
    }
}

/// Connections, each with its two prepared statements (take, release).
type PgConns = Arc<
    Vec<(
        tokio_postgres::Client,
        tokio_postgres::Statement,
        tokio_postgres::Statement,
    )>,
>;

/// `connections` connections to `url`, each with `take` and `release` prepared, after `setup`
/// (if any) ran on the first.
async fn pg_conns(
    url: &str,
    connections: usize,
    setup: &str,
    take: &str,
    release: &str,
) -> Result<PgConns, Error> {
    let mut prepared = Vec::new();
    for i in 0..connections {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        if i == 0 && !setup.is_empty() {
            client.batch_execute(setup).await?;
        }
        // As distlock's own connections: a table the planner believes empty (autovacuum
        // truncated it) is still read by its index, not scanned whole for every statement.
        client.batch_execute("SET enable_seqscan = off").await?;
        let (take, release) = (client.prepare(take).await?, client.prepare(release).await?);
        prepared.push((client, take, release));
    }
    Ok(Arc::new(prepared))
}

/// PostgreSQL raw pairs on a table shaped like distlock's.
#[derive(Clone)]
pub struct PgRaw {
    clients: PgConns,
}

impl PgRaw {
    pub async fn connect(url: &str, connections: usize) -> Result<PgRaw, Error> {
        let clients = pg_conns(
            url,
            connections,
            "CREATE TABLE IF NOT EXISTS bench_raw_locks (name text PRIMARY KEY, token text NOT \
             NULL, expires_at timestamptz NOT NULL)",
            "INSERT INTO bench_raw_locks VALUES ($1, $2, now() + interval '30 seconds') ON \
             CONFLICT (name) DO NOTHING",
            "DELETE FROM bench_raw_locks WHERE name = $1 AND token = $2",
        )
        .await?;
        Ok(PgRaw { clients })
    }
}

impl RawPair for PgRaw {
    async fn pair(&self, conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let (client, take, release) = &self.clients[conn % self.clients.len()];
        let token = "t0123456789abcdef0123456789abcdef";
        let taken = client.execute(take, &[&key, &token]).await?;
        assert_eq!(taken, 1, "raw key {key} was taken");
        client.execute(release, &[&key, &token]).await?;
        Ok(())
    }
}

/// PostgreSQL, the same work as distlock's done by hand: its own table shape (holder record
/// and acquisition time), its take-over-if-expired `INSERT … ON CONFLICT … DO UPDATE … WHERE`,
/// and the owner-checked `DELETE`, prepared on as many connections as distlock's pool, with
/// `enable_seqscan = off` as distlock's connections have. What distlock adds beyond this is
/// the library: building the call, renewal bookkeeping, the guard.
#[derive(Clone)]
pub struct PgByHand {
    clients: PgConns,
}

impl PgByHand {
    pub async fn connect(url: &str, connections: usize) -> Result<PgByHand, Error> {
        let clients = pg_conns(
            url,
            connections,
            "CREATE TABLE IF NOT EXISTS bench_hand_locks (name text PRIMARY KEY, token text NOT \
             NULL, expires_at timestamptz NOT NULL, holder text NOT NULL, acquired_at \
             timestamptz NOT NULL)",
            "INSERT INTO bench_hand_locks AS l (name, token, expires_at, holder, acquired_at) \
             VALUES ($1, $2, now() + $3::int8 * interval '1 millisecond', $4, now()) \
             ON CONFLICT (name) DO UPDATE SET token = excluded.token, \
             expires_at = excluded.expires_at, holder = excluded.holder, \
             acquired_at = excluded.acquired_at \
             WHERE l.expires_at <= now() OR l.token = excluded.token",
            "DELETE FROM bench_hand_locks WHERE name = $1 AND token = $2",
        )
        .await?;
        Ok(PgByHand { clients })
    }
}

impl RawPair for PgByHand {
    async fn pair(&self, conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let (client, take, release) = &self.clients[conn % self.clients.len()];
        let token = "vm:12345:1795857007586:14558175949166d4e243ddc8cb66402d";
        let (lease, holder) = (30_000_i64, "vm pid 12345");
        let taken = client
            .execute(take, &[&key, &token, &lease, &holder])
            .await?;
        assert_eq!(taken, 1, "key {key} was taken by hand");
        client.execute(release, &[&key, &token]).await?;
        Ok(())
    }
}

/// distlock's acquisition on MySQL, by hand: take the row if it expired or is ours, the
/// assignments in order (`token` decided from the old row, `expires_at` following it).
const MY_BY_HAND_TAKE: &str = "INSERT INTO bench_hand_locks \
    (name, token, expires_at, holder, acquired_at) \
    VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6)) \
    ON DUPLICATE KEY UPDATE \
    holder = IF(expires_at <= UTC_TIMESTAMP(6) OR token = VALUES(token), VALUES(holder), holder), \
    acquired_at = IF(expires_at <= UTC_TIMESTAMP(6) OR token = VALUES(token), \
        VALUES(acquired_at), acquired_at), \
    token = IF(expires_at <= UTC_TIMESTAMP(6) OR token = VALUES(token), VALUES(token), token), \
    expires_at = IF(token = VALUES(token), VALUES(expires_at), expires_at)";

/// MySQL / MariaDB, the same work as distlock's done by hand: its table shape (holder record,
/// acquisition time), its take-over-if-expired `INSERT … ON DUPLICATE KEY UPDATE`, and the
/// owner-checked `DELETE`, one statement at a time per connection as distlock's run.
#[derive(Clone)]
pub struct MyByHand(MyRaw);

impl MyByHand {
    pub async fn connect(url: &str, connections: usize) -> Result<MyByHand, Error> {
        use mysql_async::prelude::Queryable;
        let raw = MyRaw::connect(url, connections).await?;
        raw.conns[0]
            .lock()
            .await
            .query_drop(
                "CREATE TABLE IF NOT EXISTS bench_hand_locks (name VARBINARY(2048) NOT NULL \
                 PRIMARY KEY, token VARCHAR(255) CHARACTER SET ascii NOT NULL, expires_at \
                 DATETIME(6) NOT NULL, holder VARCHAR(255) NOT NULL, acquired_at DATETIME(6) \
                 NOT NULL) ENGINE=InnoDB",
            )
            .await?;
        Ok(MyByHand(raw))
    }
}

impl RawPair for MyByHand {
    async fn pair(&self, conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        use mysql_async::prelude::Queryable;
        let MyByHand(raw) = self;
        let mut conn = raw.conns[conn % raw.conns.len()].lock().await;
        let token = "vm:12345:1795857007586:14558175949166d4e243ddc8cb66402d";
        conn.exec_drop(
            MY_BY_HAND_TAKE,
            (key.as_bytes(), token, 30_000_000_i64, "vm pid 12345"),
        )
        .await?;
        assert_eq!(conn.affected_rows(), 1, "key {key} was taken by hand");
        conn.exec_drop(
            "DELETE FROM bench_hand_locks WHERE name = ? AND token = ?",
            (key.as_bytes(), token),
        )
        .await?;
        Ok(())
    }
}

/// MySQL / MariaDB raw pairs on a table shaped like distlock's, one statement at a time per
/// connection (as distlock's connections run them).
#[derive(Clone)]
pub struct MyRaw {
    conns: Arc<Vec<tokio::sync::Mutex<mysql_async::Conn>>>,
}

impl MyRaw {
    pub async fn connect(url: &str, connections: usize) -> Result<MyRaw, Error> {
        use mysql_async::prelude::Queryable;
        let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(url)?)
            .prefer_socket(false);
        let mut conns = Vec::new();
        for _ in 0..connections {
            conns.push(tokio::sync::Mutex::new(
                mysql_async::Conn::new(opts.clone()).await?,
            ));
        }
        conns[0]
            .lock()
            .await
            .query_drop(
                "CREATE TABLE IF NOT EXISTS bench_raw_locks (name VARBINARY(2048) PRIMARY KEY, \
                 token VARCHAR(64) NOT NULL, expires_at DATETIME(6) NOT NULL)",
            )
            .await?;
        Ok(MyRaw {
            conns: Arc::new(conns),
        })
    }
}

impl RawPair for MyRaw {
    async fn pair(&self, conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        use mysql_async::prelude::Queryable;
        let mut conn = self.conns[conn % self.conns.len()].lock().await;
        let token = "t0123456789abcdef0123456789abcdef";
        conn.exec_drop(
            "INSERT IGNORE INTO bench_raw_locks VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL 30 \
             SECOND)",
            (key.as_bytes(), token),
        )
        .await?;
        assert_eq!(conn.affected_rows(), 1, "raw key {key} was taken");
        conn.exec_drop(
            "DELETE FROM bench_raw_locks WHERE name = ? AND token = ?",
            (key.as_bytes(), token),
        )
        .await?;
        Ok(())
    }
}

/// PostgreSQL's advisory locks, raw: `pg_try_advisory_lock(hashtext(key))` and
/// `pg_advisory_unlock`, prepared, on as many connections as distlock's pool (the lock belongs
/// to the connection's session — what the distributed-lock crate builds on).
#[derive(Clone)]
pub struct PgAdvisory {
    clients: PgConns,
}

impl PgAdvisory {
    pub async fn connect(url: &str, connections: usize) -> Result<PgAdvisory, Error> {
        let clients = pg_conns(
            url,
            connections,
            "",
            "SELECT pg_try_advisory_lock(hashtext($1))",
            "SELECT pg_advisory_unlock(hashtext($1))",
        )
        .await?;
        Ok(PgAdvisory { clients })
    }
}

impl RawPair for PgAdvisory {
    async fn pair(&self, conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        let (client, take, release) = &self.clients[conn % self.clients.len()];
        let taken: bool = client.query_one(take, &[&key]).await?.get(0);
        assert!(taken, "advisory lock {key} was taken");
        client.query_one(release, &[&key]).await?;
        Ok(())
    }
}

/// MySQL / MariaDB named locks, raw: `GET_LOCK(key, 0)` and `RELEASE_LOCK(key)` on as many
/// connections as distlock's pool (a lock belongs to the connection).
#[derive(Clone)]
pub struct MyNamedLock(MyRaw);

impl MyNamedLock {
    pub async fn connect(url: &str, connections: usize) -> Result<MyNamedLock, Error> {
        Ok(MyNamedLock(MyRaw::connect(url, connections).await?))
    }
}

impl RawPair for MyNamedLock {
    async fn pair(&self, conn: usize, key: &str, _fresh: bool) -> Result<(), Error> {
        use mysql_async::prelude::Queryable;
        let MyNamedLock(raw) = self;
        let mut conn = raw.conns[conn % raw.conns.len()].lock().await;
        let taken: Option<i64> = conn.exec_first("SELECT GET_LOCK(?, 0)", (key,)).await?;
        assert_eq!(taken, Some(1), "named lock {key} was taken");
        let _: Option<i64> = conn.exec_first("SELECT RELEASE_LOCK(?)", (key,)).await?;
        Ok(())
    }
}

/// The distributed-lock crate (`distributed-lock-postgres` or `distributed-lock-mysql`, from
/// the peers' workspace, built on first use) against `url`.
pub async fn distributed_lock(crate_name: &'static str, url: &str) -> Result<LinePeer, Error> {
    distributed_lock_pooled(crate_name, url, None).await
}

/// [`distributed_lock`] with a pool of `pool` connections (`BENCH_PEER_POOL`) instead of
/// sqlx's default 10.
pub async fn distributed_lock_pooled(
    crate_name: &'static str,
    url: &str,
    pool: Option<usize>,
) -> Result<LinePeer, Error> {
    let mut command = std::process::Command::new(crate::contention::peers_binary()?);
    command.env("BENCH_PEER", crate_name).env("BENCH_URL", url);
    if let Some(pool) = pool {
        command.env("BENCH_PEER_POOL", pool.to_string());
    }
    LinePeer::start(crate_name, command).await
}

/// distlock beside a peer library (`peer`, described as `peer_name`) and a raw floor of the
/// peer's own design (`floor`, `floor_name`) (rows 7 and 8): uncontended (fresh keys, one
/// reused key) and 64-task throughput against each. Returns distlock's µs of an uncontended
/// lock + release on fresh keys.
#[allow(clippy::too_many_arguments)]
pub async fn beside_peer(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    url: &str,
    peer: &LinePeer,
    peer_name: &str,
    floor: &impl RawPair,
    floor_name: &str,
) -> Result<f64, Error> {
    let client = LockClient::builder(url).build().await?;
    for i in 0..300 {
        lock_release(&client, format!("warm:{i}")).await?;
        floor.pair(0, &format!("warm:{i}"), true).await?;
    }
    against(report, at, &format!("{key}_peer"), &client, peer, peer_name).await?;
    let fresh = against(
        report,
        at,
        &format!("{key}_floor"),
        &client,
        floor,
        floor_name,
    )
    .await?;
    Ok(fresh)
}

/// A peer's handoff between clients (4 clients × 4 tasks, 3 s), its fields written under
/// `{key}_peer_…`.
pub async fn peer_handoff(
    report: &mut Report,
    key: &str,
    peer: &LinePeer,
) -> Result<Handoff, Error> {
    let (rate, p50, p99) = peer.handoff("handoff", Duration::from_secs(3)).await?;
    report.field(&format!("{key}_peer_handoffs_per_s"), rate);
    report.field(&format!("{key}_peer_handoff_p50_us"), p50);
    report.field(&format!("{key}_peer_handoff_p99_us"), p99);
    Ok(Handoff { rate, p50, p99 })
}

/// How a peer's pool is sized: `pool`, else `BENCH_PEER_POOL`, else sqlx's default.
pub fn pool_said(pool: Option<usize>) -> String {
    let set = std::env::var("BENCH_PEER_POOL").ok();
    match pool.map(|p| p.to_string()).or(set) {
        Some(size) => format!("with a pool of {size}"),
        None => "sqlx's default pool of 10".to_owned(),
    }
}

/// Another kind than the plain lock, for [`kind_row`].
#[derive(Clone, Copy)]
pub enum Kind {
    /// A read lock (`.read()`).
    Read,
    /// A permit of a semaphore of 4 (`client.semaphore(k, 4)`).
    Permit,
    /// Two keys at once (`client.lock_all([k1, k2])`), against two plain locks taken one
    /// after the other.
    Set,
    /// An upgradable read (`.upgradable()`), against a plain read lock.
    Upgradable,
    /// An upgradable read upgraded (`guard.upgrade()`) before its release, against a plain
    /// read lock: the upgrade's own cost is this row's time less the one above.
    Upgrade,
    /// The upgrade alone (`guard.upgrade()`, timed by itself) against a plain read lock's
    /// acquisition alone (`acquire()`, timed by itself): one operation against one. The
    /// upgradable read before it and both releases run untimed.
    UpgradeAlone,
}

/// The read-lock row, the semaphore row and the two-key row (see [`kind_row`]).
pub async fn kind_rows<F, Fut>(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    client: &LockClient,
    floor: F,
) -> Result<(), Error>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    // Read locks, semaphores and upgradable reads where the store serves them (it refuses
    // them, writing nothing, where it does not: NATS serves plain locks only).
    let read = client.lock("read-probe").read().wait(Duration::ZERO);
    if served(read.await).await? {
        kind_row(report, at, key, client, &floor, Kind::Read).await?;
    }
    let permit = client.semaphore("permit-probe", 4).wait(Duration::ZERO);
    if served(permit.await).await? {
        kind_row(report, at, key, client, &floor, Kind::Permit).await?;
    }
    kind_row(report, at, key, client, &floor, Kind::Set).await?;
    let upgradable = client.lock("upgradable-probe").upgradable();
    if served(upgradable.wait(Duration::ZERO).await).await? {
        kind_row(report, at, key, client, &floor, Kind::Upgradable).await?;
        kind_row(report, at, key, client, &floor, Kind::Upgrade).await?;
        kind_row(report, at, key, client, &floor, Kind::UpgradeAlone).await?;
    }
    Ok(())
}

/// Whether a probe's acquisition was served (and then released), or refused as a kind the
/// store does not serve.
async fn served(probe: Result<distlock::LockGuard, distlock::LockError>) -> Result<bool, Error> {
    match probe {
        Ok(guard) => {
            guard.release().await?;
            Ok(true)
        }
        // Refused as a kind the store does not serve (`Unsupported`; `Config` before).
        Err(distlock::LockError::Config(_) | distlock::LockError::Unsupported { .. }) => Ok(false),
        Err(other) => Err(other.into()),
    }
}

/// A lock kind's row: an uncontended read lock (or semaphore permit) + release against the
/// plain lock's and against the raw floor `floor` (the backend's own take + release of one
/// key), in interleaved rounds; medians of µs per pair and of the per-round ratios. For two
/// keys at once, the "plain" side is two plain locks taken one after the other (and released),
/// and the floor stays one key's: a ratio near 1 is a set taken in one round trip. For an
/// upgradable read (upgraded or not), the other side is a plain read lock; for the upgrade
/// alone, the time of `upgrade()` against the time of a plain read lock's `acquire()` (each
/// side's other steps untimed), and the floor stays the raw take + release.
pub async fn kind_row<F, Fut>(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    client: &LockClient,
    floor: &F,
    kind: Kind,
) -> Result<(), Error>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    // One pair of `kind` (`other`) or of what it is set against; the time it counts.
    let pair = |name: String, other: bool| {
        let client = client.clone();
        async move {
            let started = Instant::now();
            let request = match (other, kind) {
                (false, Kind::Set) => {
                    let a = client.lock(format!("{name}:a")).wait(Duration::ZERO);
                    let a = a.acquire().await?;
                    let b = client.lock(format!("{name}:b")).wait(Duration::ZERO);
                    b.acquire().await?.release().await?;
                    a.release().await?;
                    return Ok(started.elapsed());
                }
                (false, Kind::UpgradeAlone) => {
                    let guard = client.lock(name).read().wait(Duration::ZERO).await?;
                    let took = started.elapsed();
                    guard.release().await?;
                    return Ok(took);
                }
                (true, Kind::UpgradeAlone) => {
                    let request = client.lock(name).upgradable().wait(Duration::ZERO);
                    let mut guard = request.acquire().await?;
                    let started = Instant::now();
                    guard.upgrade().await?;
                    let took = started.elapsed();
                    guard.release().await?;
                    return Ok(took);
                }
                (false, Kind::Upgradable | Kind::Upgrade) => {
                    client.lock(name).read().wait(Duration::ZERO).into_future()
                }
                (false, _) => client.lock(name).wait(Duration::ZERO).into_future(),
                (true, Kind::Read) => client.lock(name).read().wait(Duration::ZERO).into_future(),
                (true, Kind::Permit) => {
                    client.semaphore(name, 4).wait(Duration::ZERO).into_future()
                }
                (true, Kind::Set) => client
                    .lock_all([format!("{name}:a"), format!("{name}:b")])
                    .wait(Duration::ZERO)
                    .into_future(),
                (true, Kind::Upgradable) => client
                    .lock(name)
                    .upgradable()
                    .wait(Duration::ZERO)
                    .into_future(),
                (true, Kind::Upgrade) => {
                    let request = client.lock(name).upgradable().wait(Duration::ZERO);
                    let mut guard = request.acquire().await?;
                    guard.upgrade().await?;
                    guard.release().await?;
                    return Ok(started.elapsed());
                }
            };
            request.await?.release().await?;
            Ok::<_, Error>(started.elapsed())
        }
    };
    for i in 0..200 {
        pair(format!("rw-warm:{i}"), true).await?;
        pair(format!("rw-warm:{i}"), false).await?;
    }
    let per_round = 100u64;
    let (mut reads, mut plains, mut raws) = (Vec::new(), Vec::new(), Vec::new());
    let (mut vs_plain, mut vs_raw) = (Vec::new(), Vec::new());
    for round in 0..15u64 {
        let mut times = [0f64; 3];
        // Rotate the order, so drift within a round favours none of the three.
        for k in 0..3u64 {
            let which = ((round + k) % 3) as usize;
            let mut took = Duration::ZERO;
            for i in 0..per_round {
                let name = format!("rw:{round}:{which}:{i}");
                took += match which {
                    0 => pair(name, true).await?,
                    1 => pair(name, false).await?,
                    _ => {
                        let t = Instant::now();
                        floor(name).await?;
                        t.elapsed()
                    }
                };
            }
            times[which] = took.as_secs_f64() * 1e6 / per_round as f64;
        }
        reads.push(times[0]);
        plains.push(times[1]);
        raws.push(times[2]);
        vs_plain.push(times[0] / times[1]);
        vs_raw.push(times[0] / times[2]);
    }
    let (r, p, f) = (median(&mut reads), median(&mut plains), median(&mut raws));
    let (rp, rf) = (median(&mut vs_plain), median(&mut vs_raw));
    let (what, field) = match kind {
        Kind::Read => ("read lock, uncontended acquire + release", "read"),
        Kind::Permit => ("permit of a semaphore of 4, acquire + release", "permit"),
        Kind::Set => ("two keys at once (`lock_all`), acquire + release", "set"),
        Kind::Upgradable => (
            "upgradable read (`.upgradable()`), acquire + release",
            "upgradable",
        ),
        Kind::Upgrade => (
            "upgradable read upgraded before its release (`guard.upgrade()`)",
            "upgrade",
        ),
        Kind::UpgradeAlone => (
            "the upgrade alone (`guard.upgrade()` timed by itself)",
            "upgrade_alone",
        ),
    };
    let plain = match kind {
        Kind::Set => "two plain locks taken in turn",
        Kind::Upgradable | Kind::Upgrade => "a plain read lock",
        Kind::UpgradeAlone => "a plain read lock's acquisition timed by itself",
        _ => "a plain lock",
    };
    report.row(
        at,
        format!("{key}_{field}_vs_plain"),
        what,
        us(r),
        Base::with_ratio(plain, us(p), rp),
        Better::Lower,
    );
    let floor = match kind {
        Kind::Set => "the raw floor of one key",
        Kind::UpgradeAlone => "the raw take + release of one key (both timed)",
        _ => "the raw take + release of one key",
    };
    report.row(
        at,
        format!("{key}_{field}_vs_raw"),
        what,
        us(r),
        Base::with_ratio(floor, us(f), rf),
        Better::Lower,
    );
    report.field(&format!("{key}_{field}_uncontended_us"), r);
    report.field(&format!("{key}_{field}_vs_plain_ratio"), rp);
    report.field(&format!("{key}_{field}_vs_raw_ratio"), rf);
    Ok(())
}

/// Whether only the lock kinds' rows run (`DISTLOCK_BENCH_KINDS_ONLY=1`, or its older name
/// `DISTLOCK_BENCH_READ_ONLY=1`): read locks, semaphores and two keys at once.
pub fn read_only() -> bool {
    std::env::var_os("DISTLOCK_BENCH_KINDS_ONLY").is_some()
        || std::env::var_os("DISTLOCK_BENCH_READ_ONLY").is_some()
}

/// One lock + release of `key`, not waiting (the uncontended rows of every backend).
pub async fn lock_release(client: &LockClient, key: String) -> Result<(), Error> {
    client
        .lock(key)
        .wait(Duration::ZERO)
        .acquire()
        .await?
        .release()
        .await?;
    Ok(())
}

/// Interleaved rounds of `measure(side, round)` for distlock (`a`) and `b`, the order
/// alternating; the medians of each side and of the per-round ratios a / b.
async fn interleaved<'a, A: Peer, B: Peer, F, Fut>(
    a: &'a A,
    b: &'a B,
    rounds: u64,
    measure: F,
) -> Result<(f64, f64, f64), Error>
where
    F: Fn(Side<'a, A, B>, u64) -> Fut,
    Fut: Future<Output = Result<f64, Error>>,
{
    let (mut xs, mut ys, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (x, y) = if round % 2 == 0 {
            let x = measure(Side::A(a), round).await?;
            (x, measure(Side::B(b), round).await?)
        } else {
            let y = measure(Side::B(b), round).await?;
            (measure(Side::A(a), round).await?, y)
        };
        xs.push(x);
        ys.push(y);
        ratios.push(x / y);
    }
    Ok((median(&mut xs), median(&mut ys), median(&mut ratios)))
}

/// One of the two sides [`interleaved`] compares.
enum Side<'a, A, B> {
    A(&'a A),
    B(&'a B),
}

impl<A: Peer, B: Peer> Side<'_, A, B> {
    async fn sequential(&self, prefix: &str, calls: u64, reused: bool) -> Result<f64, Error> {
        match self {
            Side::A(a) => a.sequential(prefix, calls, reused).await,
            Side::B(b) => b.sequential(prefix, calls, reused).await,
        }
    }

    async fn throughput(&self, prefix: &str, window: Duration) -> Result<f64, Error> {
        match self {
            Side::A(a) => a.throughput(prefix, window).await,
            Side::B(b) => b.throughput(prefix, window).await,
        }
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Side::A(a) => a.pid(),
            Side::B(b) => b.pid(),
        }
    }
}

/// Uncontended lock + release on distinct fresh keys and on one reused key, and 64-task
/// throughput on distinct keys: distlock (`client`) against `other` (the floor, or a peer),
/// `baseline` naming it in the rows; interleaved rounds, medians. `key` names the rows and
/// prefixes the JSON fields. Returns distlock's uncontended µs per call on fresh keys.
pub async fn against(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    client: &LockClient,
    other: &impl Peer,
    baseline: &str,
) -> Result<f64, Error> {
    let ours = Ours(client);
    let per_round = 100u64;
    let mut fresh = 0.0;
    for reused in [false, true] {
        let (o, f, r) = interleaved(&ours, other, 15, |side, round| async move {
            let prefix = if reused {
                format!("reused:{key}")
            } else {
                format!("u:{round}:")
            };
            side.sequential(&prefix, per_round, reused).await
        })
        .await?;
        let (what, field) = if reused {
            ("uncontended lock + release, one reused key", "reused")
        } else {
            ("uncontended lock + release, fresh keys", "uncontended")
        };
        report.row(
            at,
            format!("{key}_{field}"),
            what,
            us(o),
            Base::with_ratio(baseline, us(f), r),
            Better::Lower,
        );
        report.field(&format!("{key}_{field}_us"), o);
        report.field(&format!("{key}_{field}_raw_us"), f);
        report.field(&format!("{key}_{field}_ratio"), r);
        if !reused {
            fresh = o;
        }
    }
    // Throughput: 64 tasks on distinct keys, interleaved windows; the CPU each window cost the
    // client's process and the servers', per pair.
    let window = Duration::from_millis(500);
    let cpu = std::sync::Mutex::new([(Vec::new(), Vec::new()), (Vec::new(), Vec::new())]);
    let (a, b, r) = interleaved(&ours, other, 11, |side, round| {
        let cpu = &cpu;
        async move {
            let before = crate::cpu::sample(side.pid());
            let rate = side.throughput(&format!("tp:{round}:"), window).await?;
            let (client, servers) =
                before.per_pair(&crate::cpu::sample(side.pid()), rate * window.as_secs_f64());
            let mut cpu = cpu.lock().unwrap();
            let mine = &mut cpu[usize::from(matches!(side, Side::B(_)))];
            mine.0.push(client);
            mine.1.push(servers);
            Ok(rate)
        }
    })
    .await?;
    report.row(
        at,
        format!("{key}_throughput"),
        "throughput, 64 tasks, distinct keys",
        per_s(a),
        Base::with_ratio(baseline, per_s(b), r),
        Better::Higher,
    );
    let [(mut oc, mut os), (mut bc, mut bs)] = cpu.into_inner().unwrap();
    let (oc, os, bc, bs) = (
        median(&mut oc),
        median(&mut os),
        median(&mut bc),
        median(&mut bs),
    );
    report.row(
        at,
        format!("{key}_cpu_client"),
        "the client's CPU per pair at that throughput",
        us(oc),
        Base::quotient(baseline, us(oc), us(bc)),
        Better::Lower,
    );
    report.row(
        at,
        format!("{key}_cpu_servers"),
        "the servers' CPU per pair at that throughput",
        us(os),
        Base::quotient(baseline, us(os), us(bs)),
        Better::Lower,
    );
    report.field(&format!("{key}_throughput_per_s"), a);
    report.field(&format!("{key}_throughput_raw_per_s"), b);
    report.field(&format!("{key}_throughput_ratio"), r);
    report.field(&format!("{key}_cpu_client_us"), oc);
    report.field(&format!("{key}_cpu_servers_us"), os);
    report.field(&format!("{key}_cpu_client_raw_us"), bc);
    report.field(&format!("{key}_cpu_servers_raw_us"), bs);
    Ok(fresh)
}

/// A store's rows against its raw floor (`raw`, described as `raw_name`): the lock kinds,
/// then (unless only the kinds run) uncontended and throughput, and the handoff between
/// clients, measured here and returned for its rows ([`handoff_rows`]) once the baseline it
/// is set against is measured too.
pub async fn rows(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    url: &str,
    raw: impl RawPair,
    raw_name: &str,
) -> Result<Option<Handoff>, Error> {
    let client = LockClient::builder(url).build().await?;
    kind_rows(report, at, key, &client, |name| {
        let raw = raw.clone();
        async move { raw.pair(0, &name, true).await }
    })
    .await?;
    if read_only() {
        return Ok(None);
    }
    warm_and_against(report, at, key, &client, &raw, raw_name).await?;
    Ok(Some(handoff(report, key, url).await?))
}

/// [`against`] after 300 warm-up pairs on each side (`other` a raw floor).
pub async fn warm_and_against(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    client: &LockClient,
    other: &impl RawPair,
    baseline: &str,
) -> Result<f64, Error> {
    for i in 0..300 {
        lock_release(client, format!("warm:{i}")).await?;
        other.pair(0, &format!("warm:{i}"), true).await?;
    }
    against(report, at, key, client, other, baseline).await
}

/// A handoff's figures: grants per second, and the p50 / p99 gap from one client's release to
/// another client's grant (µs).
#[derive(Clone, Copy)]
pub struct Handoff {
    pub rate: f64,
    pub p50: f64,
    pub p99: f64,
}

/// Handoff between 4 clients (separate owners, each with its own connections and listener),
/// 4 tasks each, one key, for 3 s (its fields written under `{key}_…`).
pub async fn handoff(report: &mut Report, key: &str, url: &str) -> Result<Handoff, Error> {
    let mut tasks = Vec::new();
    for c in 0..4 {
        let client = LockClient::builder(url).build().await?;
        for _ in 0..4 {
            let client = client.clone();
            tasks.push((c, move || {
                let client = client.clone();
                async move {
                    let guard = client
                        .lock("handoff")
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    let acquired = Instant::now();
                    guard.release().await?;
                    Ok::<_, Error>(acquired)
                }
            }));
        }
    }
    let window = Duration::from_secs(3);
    // Only handoffs from one client to another: those go through the database (a notification
    // or a poll); within a client, the next task is let through in-process.
    let (rate, p50, p99) = measure::handoff(window, tasks).await?;
    report.field(&format!("{key}_handoffs_per_s"), rate);
    report.field(&format!("{key}_handoff_p50_us"), p50);
    report.field(&format!("{key}_handoff_p99_us"), p99);
    Ok(Handoff { rate, p50, p99 })
}

/// The handoff's rows: distlock's figures (`ours`) against `baseline`'s (`theirs`), measured
/// in the same run.
pub fn handoff_rows(
    report: &mut Report,
    at: At<'_>,
    key: &str,
    ours: Handoff,
    baseline: &str,
    theirs: Handoff,
) {
    let ms = |v: f64| Fig {
        value: v / 1e3,
        unit: "ms",
    };
    report.row(
        at,
        format!("{key}_handoffs"),
        "handoff, 4 clients × 4 tasks on one key: grants/s",
        per_s(ours.rate),
        Base::quotient(baseline, per_s(ours.rate), per_s(theirs.rate)),
        Better::Higher,
    );
    report.row(
        at,
        format!("{key}_handoff_p50"),
        "handoff: one client's release → another's grant, p50",
        ms(ours.p50),
        Base::quotient(baseline, ms(ours.p50), ms(theirs.p50)),
        Better::Lower,
    );
    report.row(
        at,
        format!("{key}_handoff_p99"),
        "handoff: one client's release → another's grant, p99",
        ms(ours.p99),
        Base::quotient(baseline, ms(ours.p99), ms(theirs.p99)),
        Better::Lower,
    );
}

//! Row 11: contention on one key, distlock beside its peers on the same redis-server.
//!
//! Tasks take turns on one key (take it, hold it, give it back, again) for a window, in one
//! process or spread over four processes (copies of this binary, started through
//! [`child_main`]). Reported per contender: acquisitions per second, the gap from one holder's
//! release to the next holder's grant (p50/p99), the server commands each acquisition cost
//! (from `INFO commandstats`, which counts the commands scripts run too, as
//! `total_commands_processed` does), and fairness: the most acquisitions that overtook one
//! waiter (asked after it, granted before it).
//!
//! Contenders: distlock's default lock, its fair lock (`.fair()`), and
//! [rslock](https://crates.io/crates/rslock) (Redlock over one server, its default
//! retries: 3 tries, a random 0–200 ms pause between them).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::LockClient;

use super::{Error, Report};
use crate::record::{Base, Better, at, count, per_s, us};
use support::RedisServer;

/// Who takes the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Distlock,
    /// distlock's fair lock (`.fair()`): granted in arrival order through a queue on the server.
    DistlockFair,
    Rslock,
    /// redis-py's `Lock` (threads of a `python3` process), installed on demand.
    RedisPy,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Distlock => "distlock",
            Peer::DistlockFair => "distlock-fair",
            Peer::Rslock => "rslock",
            Peer::RedisPy => "redis-py",
        }
    }

    fn parse(name: &str) -> Option<Peer> {
        [
            Peer::Distlock,
            Peer::DistlockFair,
            Peer::Rslock,
            Peer::RedisPy,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

/// One acquisition: when it was asked for, granted and given back (ns since the UNIX epoch,
/// so processes on one machine share the clock).
#[derive(Clone, Copy, Debug)]
struct Turn {
    asked: u64,
    granted: u64,
    released: u64,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A connected contender of one process.
#[derive(Clone)]
enum Taker {
    Distlock(LockClient, bool),
}

impl Taker {
    async fn connect(peer: Peer, url: &str) -> Result<Taker, Error> {
        Ok(match peer {
            Peer::Distlock => Taker::Distlock(LockClient::connect(url).await?, false),
            Peer::DistlockFair => Taker::Distlock(LockClient::connect(url).await?, true),
            Peer::Rslock | Peer::RedisPy => {
                return Err(format!("{} runs in a process of its own", peer.name()).into());
            }
        })
    }

    /// Takes `key`, holds it `hold`, gives it back.
    async fn turn(&self, key: &str, hold: Duration) -> Result<Turn, Error> {
        let asked = now_ns();
        let lease = Duration::from_secs(30);
        match self {
            Taker::Distlock(client, fair) => {
                let mut request = client.lock(key).lease(lease).wait_forever();
                if *fair {
                    request = request.fair();
                }
                let guard = request.acquire().await?;
                let granted = now_ns();
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                let released = now_ns();
                guard.release().await?;
                Ok(Turn {
                    asked,
                    granted,
                    released,
                })
            }
        }
    }
}

/// `tasks` tasks of this process taking turns on `key` from `start` (ns since the epoch) for
/// `window`.
async fn run_tasks(
    taker: &Taker,
    key: &str,
    tasks: usize,
    start: u64,
    window: Duration,
    hold: Duration,
) -> Result<Vec<Turn>, Error> {
    let turns = Arc::new(Mutex::new(Vec::new()));
    let end = start + window.as_nanos() as u64;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (taker, key, turns) = (taker.clone(), key.to_owned(), Arc::clone(&turns));
        handles.push(tokio::spawn(async move {
            let wait = start.saturating_sub(now_ns());
            tokio::time::sleep(Duration::from_nanos(wait)).await;
            while now_ns() < end {
                let turn = taker.turn(&key, hold).await?;
                turns.lock().unwrap().push(turn);
            }
            Ok::<_, Error>(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let turns = std::mem::take(&mut *turns.lock().unwrap());
    Ok(turns)
}

/// The entry point of a helper process (`DISTLOCK_BENCH_CHILD=contend`): takes turns as told
/// by its arguments and prints one `asked granted released` line per acquisition.
pub async fn child_main() -> Result<(), Error> {
    let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let peer = Peer::parse(&var("BENCH_PEER")?).ok_or("unknown BENCH_PEER")?;
    let url = var("BENCH_URL")?;
    let key = var("BENCH_KEY")?;
    let tasks: usize = var("BENCH_TASKS")?.parse()?;
    let start: u64 = var("BENCH_START_NS")?.parse()?;
    let window = Duration::from_millis(var("BENCH_WINDOW_MS")?.parse()?);
    let hold = Duration::from_micros(var("BENCH_HOLD_US")?.parse()?);
    let taker = Taker::connect(peer, &url).await?;
    let turns = run_tasks(&taker, &key, tasks, start, window, hold).await?;
    let mut out = String::with_capacity(turns.len() * 64);
    for t in turns {
        use std::fmt::Write as _;
        let _ = writeln!(out, "{} {} {}", t.asked, t.granted, t.released);
    }
    print!("{out}");
    Ok(())
}

/// Builds the peers' binary (`bench/peers`, a workspace of its own so that a peer's
/// dependencies' features never reach distlock's build) and returns its path.
pub(crate) fn peers_binary() -> Result<std::path::PathBuf, Error> {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    if let Some(path) = BUILT.get() {
        return Ok(path.clone());
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("peers");
    let target = crate::record::target_dir().join("peers");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .status()?;
    if !status.success() {
        return Err(format!("building the peers' binary ({}) failed", dir.display()).into());
    }
    let path = target.join("release/distlock-bench-peers");
    Ok(BUILT.get_or_init(|| path).clone())
}

/// The Python peer's script.
fn python_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/python/contend.py")
}

/// Where redis-py is installed for it: `target/peers/python`, beside the Rust peers' build.
fn python_lib() -> std::path::PathBuf {
    crate::record::target_dir().join("peers/python")
}

/// `python3` with redis-py importable from [`python_lib`] (installed there with pip on first
/// use, never into the system's Python); an error that says how to get it otherwise.
fn redis_py() -> Result<std::path::PathBuf, Error> {
    let lib = python_lib();
    let importable = || {
        Command::new("python3")
            .args(["-c", "import redis"])
            .env("PYTHONPATH", &lib)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !importable() {
        let status = Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--target"])
            .arg(&lib)
            .arg("redis==5.*")
            .status()?;
        if !status.success() || !importable() {
            return Err(format!(
                "redis-py is not installed and `python3 -m pip install --target {} redis` \
                 failed: install python3 and pip, or set DISTLOCK_BENCH_NO_PYTHON=1",
                lib.display()
            )
            .into());
        }
    }
    Ok("python3".into())
}

/// What one contention run measured.
pub struct Outcome {
    pub acquisitions: usize,
    pub per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub commands_per_acquisition: f64,
    /// Commands per acquisition by name, largest first.
    pub breakdown: Vec<(String, f64)>,
    pub max_overtakes: usize,
    /// Acquisitions per process (four-process case).
    pub shares: Vec<usize>,
    /// The median round trip of a `PING` sent every 5 ms on a connection of its own *during*
    /// the window (µs): the gap's baseline under the same load as the gap.
    pub ping_p50_us: f64,
}

/// `PING`s to `server` every 5 ms from `start` (ns since the epoch) for `window`, on a
/// connection of their own: the median round trip in µs (`None` if none was answered).
async fn pings_during(
    mut conn: redis::aio::MultiplexedConnection,
    start: u64,
    window: Duration,
) -> Option<f64> {
    tokio::time::sleep(Duration::from_nanos(start.saturating_sub(now_ns()))).await;
    let end = std::time::Instant::now() + window;
    let mut times = Vec::new();
    while std::time::Instant::now() < end {
        let started = std::time::Instant::now();
        if redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .is_ok()
        {
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).map(|t| t.max(1.0))
}

/// `INFO commandstats` as name → calls.
pub(crate) async fn command_stats(server: &RedisServer) -> BTreeMap<String, u64> {
    let mut conn = server.connection().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Runs `processes` × `tasks` contenders of `peer` on one fresh key for `window`, each holding
/// the lock `hold` per turn.
pub async fn measure(
    server: &RedisServer,
    peer: Peer,
    processes: usize,
    tasks: usize,
    window: Duration,
    hold: Duration,
) -> Result<Outcome, Error> {
    let url = server.url();
    let key = format!("contend:{}:{}", peer.name(), support::unique("k"));
    // Helper processes run this binary, or the peers' (built first, outside the window).
    let exe = match peer {
        Peer::Distlock | Peer::DistlockFair if processes == 1 => None,
        Peer::Distlock | Peer::DistlockFair => Some(std::env::current_exe()?),
        Peer::Rslock => Some(peers_binary()?),
        Peer::RedisPy => Some(redis_py()?),
    };
    // Connect (and let helper processes start) before the window opens.
    let start = now_ns()
        + if processes > 1 {
            1_500_000_000
        } else {
            200_000_000
        };
    let pinger = tokio::spawn(pings_during(server.connection().await, start, window));
    let before = command_stats(server).await;
    let mut turns = Vec::new();
    let mut shares = Vec::new();
    if processes == 1 && matches!(peer, Peer::Distlock | Peer::DistlockFair) {
        let taker = Taker::connect(peer, &url).await?;
        turns = run_tasks(&taker, &key, tasks, start, window, hold).await?;
    } else {
        let exe = exe.expect("a binary for helper processes");
        let mut children = Vec::new();
        for _ in 0..processes {
            let mut command = Command::new(&exe);
            if peer == Peer::RedisPy {
                command.arg(python_script());
                command.env("PYTHONPATH", python_lib());
            }
            command
                .env("DISTLOCK_BENCH_CHILD", "contend")
                .env("BENCH_PEER", peer.name())
                .env("BENCH_URL", &url)
                .env("BENCH_KEY", &key)
                .env("BENCH_TASKS", tasks.to_string())
                .env("BENCH_START_NS", start.to_string())
                .env("BENCH_WINDOW_MS", window.as_millis().to_string())
                .env("BENCH_HOLD_US", hold.as_micros().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            children.push(support::spawn_tied(command)?);
        }
        for child in children {
            let before = turns.len();
            let output = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
            if !output.status.success() {
                return Err(format!("a contending process failed: {}", output.status).into());
            }
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                let mut fields = line.split(' ').map(str::parse::<u64>);
                if let (Some(Ok(asked)), Some(Ok(granted)), Some(Ok(released))) =
                    (fields.next(), fields.next(), fields.next())
                {
                    turns.push(Turn {
                        asked,
                        granted,
                        released,
                    });
                }
            }
            shares.push(turns.len() - before);
        }
    }
    let after = command_stats(server).await;
    if turns.len() < 2 {
        return Err(format!("{}: only {} acquisitions", peer.name(), turns.len()).into());
    }
    // The two INFO calls of this measurement are not the contenders'.
    let mut spent: Vec<(String, u64)> = after
        .iter()
        .map(|(name, calls)| {
            let own = u64::from(name == "info");
            let delta = calls.saturating_sub(before.get(name).copied().unwrap_or(0));
            (name.clone(), delta.saturating_sub(own))
        })
        // Neither are the pings of the round-trip baseline.
        .filter(|(name, delta)| *delta > 0 && name != "config" && name != "ping")
        .collect();
    spent.sort_by_key(|(_, calls)| std::cmp::Reverse(*calls));
    let n = turns.len() as f64;
    let total: u64 = spent.iter().map(|(_, d)| d).sum();

    turns.sort_by_key(|t| t.granted);
    let mut gaps: Vec<u64> = turns
        .windows(2)
        .map(|w| w[1].granted.saturating_sub(w[0].released))
        .collect();
    gaps.sort_unstable();
    let pct = |p: f64| gaps[((gaps.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
    // Overtakes: acquisitions asked after this one and granted before it (sorted by grant).
    let max_overtakes = (0..turns.len())
        .map(|i| {
            turns[..i]
                .iter()
                .filter(|earlier| earlier.asked > turns[i].asked)
                .count()
        })
        .max()
        .unwrap_or(0);
    Ok(Outcome {
        acquisitions: turns.len(),
        per_s: n / window.as_secs_f64(),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        commands_per_acquisition: total as f64 / n,
        breakdown: spent
            .into_iter()
            .map(|(name, d)| (name, d as f64 / n))
            .collect(),
        max_overtakes,
        shares,
        ping_p50_us: pinger.await?.ok_or("no PING answered during the window")?,
    })
}

/// The median round trip of a `PING` to `server` on a connection of its own (500 of them), in
/// µs: the gap's baseline.
async fn ping_p50_us(server: &RedisServer) -> f64 {
    let mut conn = server.connection().await;
    let mut times = Vec::with_capacity(500);
    for _ in 0..500 {
        let started = std::time::Instant::now();
        let _: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2].max(1.0)
}

/// Row 11: each contender in the 16-task one-process and the 4 × 4-task four-process case,
/// 1 ms holds; the gap also in round trips of a `PING` measured during the window (and, for
/// comparison, just before it on an idle server). distlock's rows are set against rslock's
/// (and redis-py's, unless `DISTLOCK_BENCH_NO_PYTHON`), the fair lock's against distlock's
/// default lock.
pub async fn rows(report: &mut Report, server: &RedisServer) -> Result<(), Error> {
    let window = Duration::from_secs(3);
    let hold = Duration::from_millis(1);
    for (processes, tasks) in [(1, 16), (4, 4)] {
        let mut peers = vec![Peer::Distlock, Peer::DistlockFair, Peer::Rslock];
        if std::env::var_os("DISTLOCK_BENCH_NO_PYTHON").is_none() {
            peers.push(Peer::RedisPy);
        }
        let mut outcomes = Vec::new();
        for peer in peers {
            // The baseline of the gap: one round trip to the same server (`PING`), measured on
            // an idle server just before, and during the window under the contenders' load.
            let idle_round_trip_us = ping_p50_us(server).await;
            let o = measure(server, peer, processes, tasks, window, hold).await?;
            let round_trip_us = o.ping_p50_us;
            println!(
                "  11. {} {processes}×{tasks} one key, 1 ms hold: {:.0}/s, {:.2} cmds/acq, gap \
                 p50 {:.0} µs ({:.1} RT of {:.0} µs; {:.1} idle) p99 {:.0} µs, ≤{} overtakes",
                peer.name(),
                o.per_s,
                o.commands_per_acquisition,
                o.p50_us,
                o.p50_us / round_trip_us,
                round_trip_us,
                o.p50_us / idle_round_trip_us,
                o.p99_us,
                o.max_overtakes
            );
            let detail: Vec<String> = o
                .breakdown
                .iter()
                .take(8)
                .map(|(name, per)| format!("{name} {per:.2}"))
                .collect();
            println!("      per acquisition: {}", detail.join(", "));
            if o.shares.len() > 1 {
                println!("      acquisitions per process: {:?}", o.shares);
            }
            let field = format!(
                "contention_{}_{}x{}",
                peer.name().replace('-', "_"),
                processes,
                tasks
            );
            report.field(&format!("{field}_per_s"), o.per_s);
            report.field(&format!("{field}_cmds_per_acq"), o.commands_per_acquisition);
            report.field(&format!("{field}_p50_us"), o.p50_us);
            report.field(
                &format!("{field}_p50_round_trips"),
                o.p50_us / round_trip_us,
            );
            report.field(&format!("{field}_ping_p50_us"), round_trip_us);
            report.field(&format!("{field}_idle_ping_p50_us"), idle_round_trip_us);
            report.field(&format!("{field}_p99_us"), o.p99_us);
            report.field(&format!("{field}_max_overtakes"), o.max_overtakes as f64);
            let _ = o.acquisitions;
            outcomes.push((peer, o));
        }
        let of = |wanted: Peer| outcomes.iter().find(|(p, _)| *p == wanted).map(|(_, o)| o);
        let (Some(ours), Some(fair)) = (of(Peer::Distlock), of(Peer::DistlockFair)) else {
            continue;
        };
        let layout = match processes {
            1 => format!("{tasks} tasks of one process"),
            _ => format!("{processes} processes × {tasks} tasks"),
        };
        let slug = format!("{processes}x{tasks}");
        for (peer, name) in [
            (Peer::Rslock, "rslock 0.10 (polls)"),
            (Peer::RedisPy, "redis-py 5's `Lock` (polls)"),
        ] {
            if let Some(theirs) = of(peer) {
                let side = peer.name().replace('-', "_");
                contention_rows(report, &slug, &side, "", &layout, ours, name, theirs);
            }
        }
        let fair_name = "distlock's default lock";
        contention_rows(
            report, &slug, "distlock", "fair_", &layout, fair, fair_name, ours,
        );
    }
    Ok(())
}

/// Row 11's records of one layout: `ours` (distlock's lock, or with `fair_` its fair lock)
/// against `theirs` (`name`, whose rows' keys end in `_vs_{side}`).
#[allow(clippy::too_many_arguments)]
fn contention_rows(
    report: &mut Report,
    slug: &str,
    side: &str,
    fair: &str,
    layout: &str,
    ours: &Outcome,
    name: &str,
    theirs: &Outcome,
) {
    let at = at("redis", "11");
    let lock = match fair {
        "" => "",
        _ => "`fair`, ",
    };
    let what =
        |figure: &str| format!("contention, {lock}{layout} on one key, 1 ms holds: {figure}");
    let key = |figure: &str| format!("contention_{slug}_{fair}{figure}_vs_{side}");
    let ratio = |a: f64, b: f64| match (a, b) {
        (a, b) if a == b => 1.0,
        (a, b) => a / b,
    };
    let rows = [
        (
            "commands",
            "server commands per acquisition (`INFO commandstats`)",
            count(ours.commands_per_acquisition, "commands"),
            count(theirs.commands_per_acquisition, "commands"),
            Better::Lower,
        ),
        (
            "gap_p50",
            "release → next grant, p50",
            us(ours.p50_us),
            us(theirs.p50_us),
            Better::Lower,
        ),
        (
            "gap_round_trips",
            "that gap in round trips of a `PING` sent every 5 ms meanwhile",
            count(ours.p50_us / ours.ping_p50_us, "round trips"),
            count(theirs.p50_us / theirs.ping_p50_us, "round trips"),
            Better::Lower,
        ),
        (
            "gap_p99",
            "release → next grant, p99",
            us(ours.p99_us),
            us(theirs.p99_us),
            Better::Lower,
        ),
        (
            "overtakes",
            "most acquisitions asked after a waiter's and granted before it",
            count(ours.max_overtakes as f64, "overtakes"),
            count(theirs.max_overtakes as f64, "overtakes"),
            Better::Lower,
        ),
        (
            "grants",
            "grants/s (bounded by the 1 ms hold)",
            per_s(ours.per_s),
            per_s(theirs.per_s),
            Better::Higher,
        ),
    ];
    for (figure, said, mine, other, better) in rows {
        report.row(
            at,
            key(figure),
            what(said),
            mine,
            Base::with_ratio(name, other, ratio(mine.value, other.value)),
            better,
        );
    }
}

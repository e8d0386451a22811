//! `distlock elect` and `distlock leader` on every backend that holds elections, with three
//! or more candidate processes: one leader at a time (checked by the leaders' own writes under
//! their terms), hand-over on exit, a `kill -9`ed leader replaced within its lease, a paused
//! leader told when it resumes, an observer that never sees an older term after a newer one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use distlock::LockClient;
use serde_json::Value;
use support::fixture::Fixture;
use support::unique;
use tokio::process::Child;

use super::{distlock, end_of_run, file_in, ms, stderr};

/// `distlock elect URL NAME --identity ID --lease LEASE -- sh -c SCRIPT` in the background,
/// with `D` (a scratch directory) in its environment.
fn candidate(
    url: &str,
    name: &str,
    identity: &str,
    lease: &str,
    script: &str,
    dir: &Path,
) -> Child {
    distlock()
        .args([
            "elect",
            url,
            name,
            "--identity",
            identity,
            "--lease",
            lease,
            "--grace",
            "1s",
        ])
        .args(["--", "sh", "-c", script])
        .env("D", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("distlock elect runs")
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("distlock-elect"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill takes plain integers; a process that is gone only returns ESRCH.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

fn signal_group(pid: u32, signal: libc::c_int) {
    // SAFETY: as above.
    unsafe {
        libc::killpg(pid as libc::pid_t, signal);
    }
}

/// Who leads `name`, by the library from this process.
async fn leader_of(client: &LockClient, name: &str) -> Option<(String, u64)> {
    let leader = client.election(name).leader().await.unwrap();
    leader.map(|l| (l.identity().to_owned(), l.term()))
}

/// Every path on the backend at `url`.
pub(super) async fn elections(fixture: &impl Fixture) {
    let url = fixture.url();
    let client = fixture.client().await;
    one_leader_at_a_time(&url, &client).await;
    killed_and_paused_leaders_are_replaced(&url, &client).await;
    bad_input(&url, &client).await;
}

/// Three candidates, each leading for a second and writing `start`/`end` lines with its term
/// to a shared log: the lines never interleave, terms strictly rise, each hand-over takes far
/// less than the lease (resign wakes the next), and an observer process (`distlock leader
/// --watch --json`) sees each leader with terms only rising.
async fn one_leader_at_a_time(url: &str, client: &LockClient) {
    let dir = scratch();
    let lease = Duration::from_secs(10);
    let observer = distlock()
        .args([
            "leader",
            url,
            "jobs",
            "--watch",
            "--json",
            "--interval",
            "50ms",
            "--for",
            "120s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let script = r#"echo "start $DISTLOCK_TERM $DISTLOCK_IDENTITY $(date +%s%N)" >> "$D/log"; sleep 1; echo "end $DISTLOCK_TERM $DISTLOCK_IDENTITY $(date +%s%N)" >> "$D/log""#;
    let candidates: Vec<Child> = ["c1", "c2", "c3"]
        .iter()
        .map(|id| candidate(url, "jobs", id, "10s", script, &dir))
        .collect();
    for child in candidates {
        let (status, err) = end_of_run(child, Duration::from_secs(60)).await;
        assert_eq!(status, 0, "{err}");
    }
    assert_eq!(
        leader_of(client, "jobs").await,
        None,
        "a leader left behind"
    );
    // Let the observer see the last change, then stop it (SIGINT ends --watch cleanly).
    tokio::time::sleep(ms(300)).await;
    signal(observer.id().unwrap(), libc::SIGINT);
    let watched = tokio::time::timeout(Duration::from_secs(30), observer.wait_with_output())
        .await
        .expect("the observer stops")
        .unwrap();
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 6, "{log}");
    let mut identities = Vec::new();
    let mut last_term = 0;
    let mut last_end: Option<u128> = None;
    for pair in lines.chunks(2) {
        let (start, end) = (&pair[0], &pair[1]);
        assert_eq!(
            (start[0], end[0]),
            ("start", "end"),
            "two leaders at once:\n{log}"
        );
        assert_eq!(
            (start[1], start[2]),
            (end[1], end[2]),
            "two leaders at once:\n{log}"
        );
        let term: u64 = start[1].parse().unwrap();
        assert!(term > last_term, "terms rise:\n{log}");
        last_term = term;
        let (began, ended): (u128, u128) = (start[3].parse().unwrap(), end[3].parse().unwrap());
        if let Some(previous) = last_end {
            let gap = Duration::from_nanos((began - previous) as u64);
            assert!(
                gap < lease / 2,
                "handed over in {gap:?}, not at once:\n{log}"
            );
        }
        last_end = Some(ended);
        identities.push(start[2].to_owned());
    }
    identities.sort();
    assert_eq!(identities, ["c1", "c2", "c3"]);
    let seen: Vec<Value> = String::from_utf8_lossy(&watched.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut newest = 0;
    let mut leaders = Vec::new();
    for change in &seen {
        assert_eq!(change["election"], "jobs");
        if let Some(term) = change["leader"]["term"].as_u64() {
            assert!(term > newest, "an older term after a newer one: {seen:?}");
            newest = term;
            leaders.push(change["leader"]["identity"].as_str().unwrap().to_owned());
        }
    }
    leaders.sort();
    assert_eq!(leaders, ["c1", "c2", "c3"], "{seen:?}");
    assert_eq!(seen.last().unwrap()["leader"], Value::Null, "{seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A leader killed with `kill -9` is replaced once its lease (2 s) runs out (or its session
/// ends), by a candidate
/// with a higher term; that leader, paused with SIGSTOP past its lease, is replaced too, and
/// when it resumes it is told: its COMMAND is stopped and it exits 121 — its term is stale.
async fn killed_and_paused_leaders_are_replaced(url: &str, client: &LockClient) {
    let dir = scratch();
    let lead = |who: &str| {
        format!(r#"echo $$ > "$D/{who}-pid"; echo $DISTLOCK_TERM > "$D/{who}"; exec sleep 60"#)
    };
    let a = candidate(url, "ops", "a", "2s", &lead("a"), &dir);
    let a_term: u64 = file_in(&dir, "a").await.parse().unwrap();
    assert_eq!(
        leader_of(client, "ops").await,
        Some(("a".to_owned(), a_term))
    );
    let b = candidate(url, "ops", "b", "2s", &lead("b"), &dir);
    // `b` is a candidate now (give it time to be in line), then `a` dies without a word.
    tokio::time::sleep(ms(500)).await;
    assert!(!dir.join("b").exists(), "b led beside a");
    let killed = Instant::now();
    signal(a.id().unwrap(), libc::SIGKILL);
    signal_group(file_in(&dir, "a-pid").await.parse().unwrap(), libc::SIGKILL);
    let b_term: u64 = file_in(&dir, "b").await.parse().unwrap();
    let replaced = killed.elapsed();
    assert!(b_term > a_term, "{b_term} after {a_term}");
    assert_eq!(
        leader_of(client, "ops").await,
        Some(("b".to_owned(), b_term))
    );
    // Within the lease (2 s) plus the backend's detection bound (a session-bound store, the
    // advisory locks, frees it as the connection closes).
    assert!(
        replaced < ms(12_000),
        "b led only {replaced:?} after a died"
    );
    drop(a);
    // `b` is paused past its lease: `c` leads; `b`, resumed, learns it lost and stops.
    let c = candidate(url, "ops", "c", "2s", &lead("c"), &dir);
    tokio::time::sleep(ms(500)).await;
    assert!(!dir.join("c").exists(), "c led beside b");
    let b_pid = b.id().unwrap();
    signal(b_pid, libc::SIGSTOP);
    let c_term: u64 = file_in(&dir, "c").await.parse().unwrap();
    assert!(c_term > b_term, "{c_term} after {b_term}");
    signal(b_pid, libc::SIGCONT);
    let (status, err) = end_of_run(b, Duration::from_secs(30)).await;
    assert_eq!(status, 121, "{err}");
    assert!(err.contains("lost leadership of `ops`"), "{err}");
    assert_eq!(
        leader_of(client, "ops").await,
        Some(("c".to_owned(), c_term)),
        "b's exit touched c's leadership"
    );
    // SIGTERM to `c` goes to its COMMAND; it resigns as it exits.
    signal(c.id().unwrap(), libc::SIGTERM);
    let (status, err) = end_of_run(c, Duration::from_secs(30)).await;
    assert_eq!(status, 128 + libc::SIGTERM, "{err}");
    assert_eq!(leader_of(client, "ops").await, None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An empty identity, one too long, and a name held as a plain lock: exit 2 with the reason,
/// COMMAND never started, the plain lock untouched. `distlock leader` of a free name: exit 4.
async fn bad_input(url: &str, client: &LockClient) {
    let dir = scratch();
    let long = "x".repeat(64);
    for (identity, why) in [("", "empty"), (long.as_str(), "too long")] {
        let child = candidate(url, "bad", identity, "2s", r#"touch "$D/ran""#, &dir);
        let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
        assert_eq!(status, 2, "{err}");
        assert!(err.contains(why), "{err}");
    }
    let plain = client.lock("held").acquire().await.unwrap();
    let token = client.inspect("held").await.unwrap().and_then(|i| i.token);
    let child = candidate(url, "held", "a", "2s", r#"touch "$D/ran""#, &dir);
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 2, "{err}");
    assert!(err.contains("plain lock"), "{err}");
    assert_eq!(
        client.inspect("held").await.unwrap().and_then(|i| i.token),
        token
    );
    plain.release().await.unwrap();
    assert!(!dir.join("ran").exists(), "COMMAND ran");
    let output = super::run(&["leader", url, "nobody-here"]).await;
    assert_eq!(super::code(&output), 4, "{}", stderr(&output));
    assert!(stderr(&output).contains("nobody leads `nobody-here`"));
    let _ = std::fs::remove_dir_all(&dir);
}

macro_rules! on_every_backend {
    ($($backend:ident => $fixture:expr),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $backend() {
                let fixture = $fixture;
                elections(&fixture).await;
            }
        )*
    };
}

on_every_backend! {
    redis => support::fixture::RedisFixture::new(),
    cluster => support::fixture::ClusterFixture::new(),
    sentinel => support::fixture::SentinelFixture::new(),
    postgres => support::fixture::PostgresFixture::new(),
    advisory => support::fixture::AdvisoryFixture::new(),
    mysql => support::fixture::MysqlFixture::new(),
    zookeeper => support::fixture::ZookeeperFixture::new(),
    etcd => support::fixture::EtcdFixture::new(),
}

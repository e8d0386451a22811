//! A history checker for locks, and the contending processes that produce histories.
//!
//! Every holder records `(key, holder, fencing token, acquired_at, released_at)` with
//! `CLOCK_MONOTONIC` timestamps, which are comparable across the processes of one machine.
//! `acquired_at` is read *after* the acquisition returned and `released_at` *before* the release
//! is sent, so each recorded interval lies inside the real one: if two recorded intervals
//! overlap, the real holds overlapped. [`check`] proves that no two holds of one key overlap
//! and that fencing tokens rise in grant order.
//!
//! The holders also run a Jepsen-style register under the lock: read, sleep a random short
//! while, write the value + 1. Without mutual exclusion, acknowledged increments are lost.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};

use super::store::Store;

/// Nanoseconds on `CLOCK_MONOTONIC`: one clock for every process of this machine.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One hold of a lock, as its holder saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub key: String,
    pub holder: String,
    pub token: Option<u64>,
    pub acquired_at: u64,
    pub released_at: u64,
    /// A reader's hold (`.read()`): it may overlap other readers', never a writer's.
    pub read: bool,
    /// A permit of a semaphore of this many (then `read` is false).
    pub permits: Option<u16>,
}

impl Hold {
    /// One line: `key holder token|- acquired released r|w` (keys and holders have no spaces).
    pub fn to_line(&self) -> String {
        let token = self.token.map_or("-".to_string(), |t| t.to_string());
        let mode = match (self.read, self.permits) {
            (_, Some(n)) => format!("p{n}"),
            (true, None) => "r".to_owned(),
            (false, None) => "w".to_owned(),
        };
        format!(
            "{} {} {token} {} {} {mode}",
            self.key, self.holder, self.acquired_at, self.released_at
        )
    }

    pub fn parse(line: &str) -> Hold {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 6, "history line {line:?}");
        Hold {
            key: parts[0].to_owned(),
            holder: parts[1].to_owned(),
            token: (parts[2] != "-").then(|| parts[2].parse().expect("token")),
            acquired_at: parts[3].parse().expect("acquired_at"),
            released_at: parts[4].parse().expect("released_at"),
            read: parts[5] == "r",
            permits: parts[5]
                .strip_prefix('p')
                .map(|n| n.parse().expect("permits")),
        }
    }
}

/// What a valid history contained.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub holds: usize,
    pub keys: usize,
    pub holders: usize,
    pub fenced: usize,
    /// Readers' holds.
    pub reads: usize,
    /// Readers' holds that began while another reader held the key: the readers did share it.
    pub shared_reads: usize,
    /// Permits of semaphores among the holds, and the most of them held at once (of one key).
    pub permits: usize,
    pub most_permits: usize,
}

/// Checks a history: for every key, a writer's hold overlaps no other hold, a reader's overlaps
/// no writer's (readers may share), and writers' fencing tokens (where present) strictly rise
/// in the order the holds were granted. The error names the first violation.
pub fn check(holds: &[Hold]) -> Result<Summary, String> {
    let mut by_key: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in holds {
        if hold.released_at < hold.acquired_at {
            return Err(format!("a hold ends before it starts: {hold:?}"));
        }
        by_key.entry(&hold.key).or_default().push(hold);
    }
    let mut summary = Summary {
        holds: holds.len(),
        keys: by_key.len(),
        ..Summary::default()
    };
    let mut holders = std::collections::BTreeSet::new();
    for (key, mut holds) in by_key {
        if let Some(limit) = holds.iter().find_map(|h| h.permits) {
            let most = check_permits(key, &holds, limit)?;
            summary.permits += holds.len();
            summary.most_permits = summary.most_permits.max(most);
            holders.extend(holds.iter().map(|h| &h.holder));
            continue;
        }
        holds.sort_by_key(|h| h.acquired_at);
        // The hold that ends last so far: of any kind, of writers, of readers.
        let mut latest_end: Option<&Hold> = None;
        let mut latest_write: Option<&Hold> = None;
        let mut latest_read: Option<&Hold> = None;
        let mut latest_upgradable: Option<&Hold> = None;
        let mut last_token: Option<&Hold> = None;
        for hold in holds {
            holders.insert(&hold.holder);
            // A writer must not begin before every earlier hold ended; a reader, before every
            // earlier writer's; an upgradable reader (holder `^…`), before every earlier
            // writer's and upgradable reader's.
            let upgradable = hold.read && hold.holder.starts_with('^');
            let conflicting = match (hold.read, upgradable) {
                (false, _) => latest_end,
                (true, false) => latest_write,
                (true, true) => [latest_write, latest_upgradable]
                    .into_iter()
                    .flatten()
                    .max_by_key(|h| h.released_at),
            };
            if let Some(before) = conflicting
                && hold.acquired_at < before.released_at
            {
                return Err(format!(
                    "two holders of `{key}` overlap by {} µs: {before:?} and {hold:?}",
                    (before.released_at - hold.acquired_at) / 1_000
                ));
            }
            let later = |b: Option<&Hold>| b.is_none_or(|b| hold.released_at > b.released_at);
            if later(latest_end) {
                latest_end = Some(hold);
            }
            if upgradable && later(latest_upgradable) {
                latest_upgradable = Some(hold);
            }
            if hold.read {
                summary.reads += 1;
                if latest_read.is_some_and(|r| hold.acquired_at < r.released_at) {
                    summary.shared_reads += 1;
                }
                if later(latest_read) {
                    latest_read = Some(hold);
                }
                // A reader's token is the last write grant's (or its own grant's): only writers'
                // tokens must rise.
                continue;
            }
            if later(latest_write) {
                latest_write = Some(hold);
            }
            if let Some(token) = hold.token {
                summary.fenced += 1;
                if let Some(before) = last_token
                    && before.token >= Some(token)
                {
                    return Err(format!(
                        "fencing tokens of `{key}` do not rise in grant order: {before:?} then {hold:?}"
                    ));
                }
                last_token = Some(hold);
            }
        }
    }
    summary.holders = holders.len();
    Ok(summary)
}

/// What one contender (a process, or a client in this process) does.
/// The permits of semaphore `key` (of `limit`): never more than `limit` held at once, every
/// hold a permit of that limit. Each hold's record lies inside its real hold (taken after the
/// grant, ended before the release), so an overlap of more than `limit` records is a real one.
/// The most held at once.
fn check_permits(key: &str, holds: &[&Hold], limit: u16) -> Result<usize, String> {
    let mut events = Vec::with_capacity(holds.len() * 2);
    for hold in holds {
        if hold.permits != Some(limit) {
            return Err(format!(
                "`{key}` was held as a semaphore of {limit} and as {:?}: {hold:?}",
                hold.permits
            ));
        }
        // At one instant, releases before grants: touching records do not overlap.
        events.push((hold.acquired_at, 1i64, *hold));
        events.push((hold.released_at, -1i64, *hold));
    }
    events.sort_by_key(|(at, change, _)| (*at, *change));
    let (mut inside, mut most) = (0i64, 0i64);
    for (_, change, hold) in events {
        inside += change;
        if inside > i64::from(limit) {
            return Err(format!(
                "{inside} holders of `{key}`, a semaphore of {limit}, at once: {hold:?} came in \
                 beside {} others",
                inside - 1
            ));
        }
        most = most.max(inside);
    }
    Ok(most as usize)
}

#[derive(Clone, Debug)]
pub struct Contention {
    pub url: String,
    pub key: String,
    /// Holder ids are `<name>.<task>`.
    pub name: String,
    pub tasks: usize,
    pub rounds: usize,
    pub fencing: bool,
    /// Take the lock as a fair lock (`.fair()`).
    pub fair: bool,
    /// The locks' lease.
    pub lease: Duration,
    /// Upper bound of the random sleep between the register's read and write.
    pub max_sleep_us: u64,
    /// Of every 4 rounds, how many take the lock as readers (0: every round writes). A reader
    /// reads the register twice, with the same pause in between: a writer in between would show.
    pub reads_in_4: u64,
    /// Of the rounds that are not plain reads (`reads_in_4`), half take an upgradable read
    /// (`.upgradable()`) and half of those upgrade it to write the register; the other rounds
    /// write. Each upgradable hold is recorded as its read part (holder `^<holder>`, from the
    /// grant until the upgrade returned, or the release) and, when upgraded, its write part
    /// (from the upgrade's return to the release).
    pub upgrades: bool,
    /// Every acquisition a permit of a semaphore of this many (0: locks).
    pub permits: u16,
    /// Every acquisition a transfer between two of this many accounts, holding both (`lock_all`
    /// of `<key>:<a>` and `<key>:<b>`; 0: one key).
    pub accounts: usize,
    /// With a file: each task goes on past its `rounds` until the file exists (a history under
    /// faults, whose contention must outlast them however long they take).
    pub until: Option<PathBuf>,
    /// Where the register lives, when not in the lock's own store: a store the test harness
    /// cannot open at the lock's URL (a TLS-only server; PgBouncer, through which the harness's
    /// prepared statements do not survive transaction pooling).
    pub register_url: Option<String>,
}

/// What a contender did: its holds, and how many register increments were acknowledged.
impl Contention {
    /// The URL of the store that keeps the register: [`register_url`](Self::register_url), or
    /// the lock's.
    pub fn register_url(&self) -> &str {
        self.register_url.as_deref().unwrap_or(&self.url)
    }

    /// The environment of a `contender` helper process (`support::helper` reads it back) for
    /// contender `name` of a run whose register lives in `namespace`.
    pub fn env(&self, name: &str, namespace: &str) -> Vec<(&'static str, String)> {
        let flag = |on: bool| if on { "1" } else { "0" }.to_owned();
        vec![
            ("LOCK_URL", self.url.clone()),
            ("REGISTER_URL", self.register_url().to_owned()),
            ("LOCK_KEY", self.key.clone()),
            ("HOLDER", name.to_owned()),
            ("TASKS", self.tasks.to_string()),
            ("ROUNDS", self.rounds.to_string()),
            ("FENCING", flag(self.fencing)),
            ("FAIR", flag(self.fair)),
            ("LEASE_MS", self.lease.as_millis().to_string()),
            ("NAMESPACE", namespace.to_owned()),
            ("READS_IN_4", self.reads_in_4.to_string()),
            ("UPGRADES", flag(self.upgrades)),
            ("PERMITS", self.permits.to_string()),
            ("ACCOUNTS", self.accounts.to_string()),
            (
                "UNTIL",
                self.until
                    .as_ref()
                    .map(|file| file.display().to_string())
                    .unwrap_or_default(),
            ),
        ]
    }
}

pub struct Outcome {
    pub holds: Vec<Hold>,
    pub increments: u64,
    pub lost: u64,
}

/// What a reader saw change under its read lock: the register's two reads disagreed.
const TORN: &str = "a reader saw the register change under its read lock";

/// Runs `tasks` tasks of one client, each taking the lock `rounds` times (and on until the file
/// `until` exists, with one) and incrementing the register under it. With
/// `start = Some((ready, go))` it creates the file `ready` once connected and begins when the
/// file `go` appears, so that every process contends from the first round.
pub async fn contend(spec: &Contention, store: &Store, start: Option<(&Path, &Path)>) -> Outcome {
    // Connecting is not what this measures: four processes set up at once while other history
    // tests run beside them, on a machine the soak keeps busy.
    let client = LockClient::builder(spec.url.as_str())
        .connect_timeout(Duration::from_secs(15))
        .fencing(spec.fencing)
        .default_lease(spec.lease)
        .default_wait(Duration::from_secs(60))
        .build()
        .await
        .expect("contender connects");
    if let Some((ready, start)) = start {
        write_file(ready, "ready");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !start.exists() {
            assert!(Instant::now() < deadline, "the start signal never came");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let increments = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..spec.tasks {
        let (client, store, spec) = (client.clone(), store.clone(), spec.clone());
        let (increments, lost) = (increments.clone(), lost.clone());
        tasks.push(tokio::spawn(async move {
            let holder = format!("{}.{task}", spec.name);
            let mut holds = Vec::with_capacity(spec.rounds);
            for round in 0.. {
                if round >= spec.rounds && spec.until.as_ref().is_none_or(|until| until.exists()) {
                    break;
                }
                let read = fastrand::u64(0..4) < spec.reads_in_4;
                if spec.permits > 0 {
                    holds.push(hold_a_permit(&client, &spec, &holder, &lost).await);
                    continue;
                }
                if spec.accounts > 0 {
                    holds.extend(transfer(&client, &spec, &store, &holder, &lost).await);
                    increments.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if spec.upgrades && !read && fastrand::bool() {
                    let (taken, increment) =
                        upgradable_round(&client, &spec, &store, &holder, &lost).await;
                    holds.extend(taken);
                    increments.fetch_add(increment, Ordering::Relaxed);
                    continue;
                }
                let request = client.lock(spec.key.as_str());
                let request = if spec.fair { request.fair() } else { request };
                let request = if read { request.read() } else { request };
                let guard = request.acquire().await;
                let guard = guard.unwrap_or_else(|e| panic!("{holder}: {e}"));
                let acquired_at = now_ns();
                let value = store.get("register").await.expect("register read");
                // Work between the read and the write: a yield to the other tasks, or a
                // blocking pause of up to `max_sleep_us` (tokio's timer cannot sleep for less
                // than a millisecond).
                match fastrand::u64(0..=spec.max_sleep_us) {
                    0..50 => tokio::task::yield_now().await,
                    pause => std::thread::sleep(Duration::from_micros(pause)),
                }
                if read {
                    let again = store.get("register").await.expect("register read");
                    assert_eq!(again, value, "{holder}: {TORN}");
                } else {
                    store
                        .set("register", value + 1)
                        .await
                        .expect("register write");
                    increments.fetch_add(1, Ordering::Relaxed);
                }
                let token = guard.fencing_token();
                let released_at = now_ns();
                match guard.release().await {
                    Ok(()) => {}
                    Err(LockError::Lost { .. }) => {
                        // Said on stderr (a helper's reaches the test's output): when, and after
                        // how long a hold, for whoever reads a failed run.
                        eprintln!(
                            "{holder}: lease lost, reported at release after holding {:?} \
                             (lease {:?}, at {} ns since the epoch)",
                            Duration::from_nanos(released_at.saturating_sub(acquired_at)),
                            spec.lease,
                            released_at
                        );
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{holder}: release: {e}"),
                }
                holds.push(Hold {
                    key: spec.key.clone(),
                    holder: holder.clone(),
                    token,
                    acquired_at,
                    released_at,
                    read,
                    permits: None,
                });
            }
            holds
        }));
    }
    let mut holds = Vec::new();
    for task in tasks {
        holds.extend(task.await.expect("contender task"));
    }
    Outcome {
        holds,
        increments: increments.load(Ordering::Relaxed),
        lost: lost.load(Ordering::Relaxed),
    }
}

/// One upgradable round: the register read twice under an upgradable read (no writer may
/// change it), then — every other time — the read upgraded and the register incremented
/// from the value read before the upgrade (a writer in between would lose its increment).
/// Its holds (see [`Contention::upgrades`]) and increments.
async fn upgradable_round(
    client: &LockClient,
    spec: &Contention,
    store: &Store,
    holder: &str,
    lost: &AtomicU64,
) -> (Vec<Hold>, u64) {
    let mut guard = client
        .lock(spec.key.as_str())
        .upgradable()
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{holder}: upgradable: {e}"));
    let acquired_at = now_ns();
    let value = store.get("register").await.expect("register read");
    match fastrand::u64(0..=spec.max_sleep_us) {
        0..50 => tokio::task::yield_now().await,
        pause => std::thread::sleep(Duration::from_micros(pause)),
    }
    let again = store.get("register").await.expect("register read");
    assert_eq!(again, value, "{holder}: {TORN} (upgradable)");
    let read_part = |released_at| Hold {
        key: spec.key.clone(),
        holder: format!("^{holder}"),
        token: None,
        acquired_at,
        released_at,
        read: true,
        permits: None,
    };
    let mut holds = Vec::with_capacity(2);
    let mut increment = 0;
    if fastrand::bool() {
        guard
            .upgrade()
            .await
            .unwrap_or_else(|e| panic!("{holder}: upgrade: {e}"));
        let upgraded_at = now_ns();
        holds.push(read_part(upgraded_at));
        store
            .set("register", value + 1)
            .await
            .expect("register write");
        increment = 1;
        let token = guard.fencing_token();
        let released_at = now_ns();
        holds.push(Hold {
            key: spec.key.clone(),
            holder: holder.to_owned(),
            token,
            acquired_at: upgraded_at,
            released_at,
            read: false,
            permits: None,
        });
    } else {
        holds.push(read_part(now_ns()));
    }
    match guard.release().await {
        Ok(()) => {}
        Err(LockError::Lost { .. }) => {
            eprintln!("{holder}: an upgradable hold's lease was lost");
            lost.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => panic!("{holder}: release: {e}"),
    }
    (holds, increment)
}

/// The environment variable that turns a test binary's helper entry point on.
/// One round of a semaphore's contender: a permit held for a random while (no register: a
/// semaphore lets several in).
async fn hold_a_permit(
    client: &LockClient,
    spec: &Contention,
    holder: &str,
    lost: &AtomicU64,
) -> Hold {
    let guard = client.semaphore(spec.key.as_str(), spec.permits).acquire();
    let guard = guard.await.unwrap_or_else(|e| panic!("{holder}: {e}"));
    let acquired_at = now_ns();
    // Held 1–10 ms (the register's read-modify-write is not done here: a semaphore lets
    // several in): long enough beside an acquisition's round trips that permits overlap.
    tokio::time::sleep(Duration::from_micros(fastrand::u64(1_000..=10_000))).await;
    let token = guard.fencing_token();
    let released_at = now_ns();
    match guard.release().await {
        Ok(()) => {}
        Err(LockError::Lost { .. }) => {
            eprintln!("{holder}: a permit's lease was lost");
            lost.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => panic!("{holder}: release: {e}"),
    }
    Hold {
        key: spec.key.clone(),
        holder: holder.to_owned(),
        token,
        acquired_at,
        released_at,
        read: false,
        permits: Some(spec.permits),
    }
}

/// What an account holds before any transfer (the store reads a missing value as 0).
pub const OPENING_BALANCE: u64 = 1_000_000;

/// Account `n`'s balance (in `store`).
pub async fn balance(store: &Store, n: usize) -> u64 {
    match store
        .get(&format!("account{n}"))
        .await
        .expect("balance read")
    {
        0 => OPENING_BALANCE,
        value => value,
    }
}

/// One round of a transfer's contender: both accounts locked at once (named in a random
/// order), an amount moved from one to the other with a pause between the reads and the
/// writes. Without mutual exclusion on both, the sum of the balances drifts.
async fn transfer(
    client: &LockClient,
    spec: &Contention,
    store: &Store,
    holder: &str,
    lost: &AtomicU64,
) -> [Hold; 2] {
    let from = fastrand::usize(0..spec.accounts);
    let to = (from + fastrand::usize(1..spec.accounts)) % spec.accounts;
    let keys = [format!("{}:{from}", spec.key), format!("{}:{to}", spec.key)];
    let guard = client
        .lock_all(keys.clone())
        .fencing(spec.fencing)
        .acquire();
    let guard = guard.await.unwrap_or_else(|e| panic!("{holder}: {e}"));
    let acquired_at = now_ns();
    assert_eq!(guard.keys().count(), 2, "{holder}: {guard:?}");
    let (a, b) = (balance(store, from).await, balance(store, to).await);
    match fastrand::u64(0..=spec.max_sleep_us) {
        0..50 => tokio::task::yield_now().await,
        pause => std::thread::sleep(Duration::from_micros(pause)),
    }
    let amount = fastrand::u64(1..=10);
    store
        .set(&format!("account{from}"), a - amount)
        .await
        .expect("write");
    store
        .set(&format!("account{to}"), b + amount)
        .await
        .expect("write");
    // One token per key, in the guard's (canonical) order.
    let tokens: Vec<(String, u64)> = guard
        .keys()
        .map(|k| k.to_string())
        .zip(guard.fencing_tokens())
        .collect();
    let token_of = |key: &str| tokens.iter().find(|(k, _)| k == key).map(|(_, t)| *t);
    let released_at = now_ns();
    match guard.release().await {
        Ok(()) => {}
        Err(LockError::Lost { .. }) => {
            eprintln!("{holder}: a transfer's lease was lost");
            lost.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => panic!("{holder}: release: {e}"),
    }
    keys.map(|key| Hold {
        token: token_of(&key),
        key,
        holder: holder.to_owned(),
        acquired_at,
        released_at,
        read: false,
        permits: None,
    })
}

pub const HELPER_ENV: &str = "DISTLOCK_TEST_HELPER";

/// In a helper copy (see [`Helper`]): its directory; `None` in a normal test run, where the
/// helper entry point returns at once.
pub fn helper_dir() -> Option<PathBuf> {
    std::env::var_os(HELPER_ENV)?;
    Some(PathBuf::from(helper_var("HELPER_DIR")))
}

/// An instruction the parent test passed to its helper copy.
pub fn helper_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set for the helper"))
}

/// The runtime a helper copy runs on: two workers, like the tests.
pub fn helper_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("helper runtime")
}

/// A copy of the running test binary, started to run its `helper_process` test (see
/// [`super::helper`]) in role `role`, which reads its instructions from the environment and
/// talks through files in `dir`.
pub struct Helper {
    pub child: Child,
    pub dir: PathBuf,
    /// Remove `dir` when dropped (a directory of this helper's own).
    pub owns_dir: bool,
}

impl Helper {
    pub fn spawn(role: &str, dir: &Path, env: &[(&str, String)]) -> Helper {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args([
                "helper_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, "1")
            .env("ROLE", role)
            .env("HELPER_DIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
        }
        Helper {
            child: super::spawn_tied(command).expect("spawn a helper copy of the test binary"),
            dir: dir.to_owned(),
            owns_dir: false,
        }
    }

    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: signalling our own child process.
        let sent = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(sent, 0, "kill({}, {signal})", self.pid());
    }

    /// Waits for the helper to exit successfully.
    pub fn wait_success(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("helper status") {
                assert!(status.success(), "helper failed: {status}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "helper did not finish within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The contents of `name` in the helper's directory once it exists (written atomically by
    /// [`write_file`]).
    pub async fn read(&self, name: &str, within: Duration) -> String {
        read_when_there(&self.dir.join(name), within).await
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Writes `contents` to `path` atomically (through a temporary file and a rename), so a reader
/// never sees half of it.
pub fn write_file(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).expect("write helper file");
    std::fs::rename(&tmp, path).expect("rename helper file");
}

/// Waits until `path` exists and returns its contents.
pub async fn read_when_there(path: &Path, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(contents) = std::fs::read_to_string(path) {
            return contents;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {within:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A fresh directory for one test's helper files.
pub fn scratch_dir(label: &str) -> PathBuf {
    // Named like the servers' scratch (`distlock-…`): a killed run's is swept by the next.
    let dir = std::env::temp_dir().join(super::unique(&format!("distlock-{label}")));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

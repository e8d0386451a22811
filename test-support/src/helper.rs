//! The one helper-process entry point. A test starts a copy of its own binary
//! ([`Helper::spawn`](super::history::Helper::spawn)) running the test `helper_process`, which
//! the integration-test binary (`tests/it/main.rs`) declares, once, at its root:
//!
//! ```ignore
//! #[test]
//! fn helper_process() {
//!     support::helper::run();
//! }
//! ```
//!
//! In a normal test run it returns at once. In a copy it reads its role (`ROLE`), its backend
//! (`LOCK_URL`) and the rest of its instructions from the environment, and talks to the test
//! through files in its directory (`HELPER_DIR`). The roles:
//!
//! - `holder` — takes `LOCK_KEY` and reports it; in mode `fenced` it then writes the fenced
//!   resource, waits to be told to write again, and writes again (the fault suite);
//! - `exit_paths` — runs an annotated function out by every exit path in turn (the fault suite);
//! - `contender` — a contending process of the history checker;
//! - `try_once`, `waiter` — a try-once that exits at once, and a waiter whose process ends (the
//!   conformance suite);
//! - `min_hold` — takes a lock with `min_hold`, releases it at once and exits normally (the
//!   conformance suite);
//! - `share` — one shared call (`.share(…)`) once told to go (the conformance suite's
//!   processes that compute once); `share_hang` — one whose body never ends (a holder that dies
//!   mid-body);
//! - `process_starter` — starts servers and a helper, then dies without cleaning up (the
//!   harness's own test).

use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use distlock::{LockClient, LockError, distributed_lock};

use super::RedisServer;
use super::fenced::Resource;
use super::history::{self, Contention, Helper, helper_var as var, now_ns, write_file};
use super::store::Store;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The body of the `helper_process` test.
pub fn run() {
    let Some(dir) = history::helper_dir() else {
        return;
    };
    match var("ROLE").as_str() {
        "holder" => holder(&dir),
        "exit_paths" => exit_paths(&dir),
        "contender" => contender(&dir),
        "try_once" => try_once_and_exit_at_once(&dir),
        "waiter" => waiter(&dir),
        "process_starter" => process_starter(&dir),
        "min_hold" => min_hold_then_exit(&dir),
        "die_holding" => die_holding(&dir),
        "share" => share_once(&dir),
        "share_hang" => share_and_hang(&dir),
        role => panic!("no helper role `{role}`"),
    }
}

/// Spawns a helper copy of this binary in role `role`, in a directory of its own.
pub fn spawn(role: &str, env: &[(&str, String)]) -> Helper {
    let dir = history::scratch_dir(role);
    let mut helper = Helper::spawn(role, &dir, env);
    helper.owns_dir = true;
    helper
}

/// Connects by `build`, tried again (for up to 20 s) while it fails: for a client whose short
/// timeouts are what a scenario exercises, its connection is the setup, not the test (on a
/// loaded machine the first connect can take longer than those timeouts).
pub async fn connect_patiently<F, Fut>(build: F) -> LockClient
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<LockClient, distlock::LockError>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match build().await {
            Ok(client) => return client,
            Err(error) if tokio::time::Instant::now() < deadline => {
                eprintln!("helper: connecting again after: {error}");
                tokio::time::sleep(ms(100)).await;
            }
            Err(error) => panic!("helper: could not connect within 20 s: {error}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `holder`

/// Takes `LOCK_KEY` (lease `LEASE_MS`, fencing when `FENCING=1`; as a reader in modes `read`
/// and `read-told`) and writes `acquired`:
/// `fencing-token|- now-ns owner-token`. Mode `hold` then holds until killed. Mode `fenced`
/// writes the resource `RESOURCE` (fenced), writes `wrote1`, waits for the file `write-again`,
/// then writes the resource again — plain and fenced, without asking whether it still holds
/// the lock — and writes `wrote2`: `fenced-written plain lost=<told within 2 s>`. Mode `read`
/// holds as a reader until killed; mode `read-told` waits for the file `check-lost` and writes
/// `told`: whether the guard said, within 2 s, that its lock was lost.
fn holder(dir: &Path) {
    history::helper_runtime().block_on(async {
        let url = var("LOCK_URL");
        let fencing = var("FENCING") == "1";
        // A 300 ms response timeout: what the faults exercise (a blackholed renewal gives up
        // soon). Connecting runs statements under it too (PostgreSQL's `LISTEN`, the tables'
        // checks), which on a loaded machine took longer (seen in a fresh clone's run, CPU 100 %
        // busy with the background's compiling): the connection is the scenario's setup, not
        // what it tests, so it is tried again for up to 20 s.
        let client = connect_patiently(|| {
            LockClient::builder(url.as_str())
                .fencing(fencing)
                .response_timeout(ms(300))
                .build()
        })
        .await;
        let mode = var("MODE");
        let request = client
            .lock(var("LOCK_KEY"))
            .lease(ms(var("LEASE_MS").parse().unwrap()))
            .wait(Duration::from_secs(10));
        // Mode `delayed-told`: with `lock_delay` LOCK_DELAY_MS.
        let request = match std::env::var("LOCK_DELAY_MS") {
            Ok(delay) => request.lock_delay(ms(delay.parse().unwrap())),
            Err(_) => request,
        };
        let reader = mode.starts_with("read");
        let request = if reader { request.read() } else { request };
        // Modes `permit` and `permit-told`: the one permit of a semaphore of 1.
        let acquisition = if mode.starts_with("permit") {
            client
                .semaphore(var("LOCK_KEY"), 1)
                .lease(ms(var("LEASE_MS").parse().unwrap()))
                .wait(Duration::from_secs(10))
                .into_future()
        } else if mode == "set" {
            // Mode `set`: `<key>` and `<key>:2` at once.
            let key = var("LOCK_KEY");
            client
                .lock_all([format!("{key}:2"), key])
                .lease(ms(var("LEASE_MS").parse().unwrap()))
                .wait(Duration::from_secs(10))
                .into_future()
        } else {
            request.into_future()
        };
        let guard = acquisition.await.unwrap();
        let token = guard.fencing_token();
        let line = format!(
            "{} {} {}",
            token.map_or("-".into(), |t| t.to_string()),
            now_ns(),
            distlock::__private::testing::owner_token(&guard)
        );
        write_file(&dir.join("acquired"), &line);
        if mode == "read-told" || mode == "permit-told" || mode == "delayed-told" {
            // Paused past its lease, then resumed: is it told its lock was lost?
            history::read_when_there(&dir.join("check-lost"), Duration::from_secs(60)).await;
            let told = tokio::time::timeout(Duration::from_secs(2), guard.lost())
                .await
                .is_ok();
            write_file(&dir.join("told"), &told.to_string());
            std::future::pending::<()>().await;
        }
        if mode != "fenced" {
            std::future::pending::<()>().await;
        }
        let token = token.expect("fencing is on");
        let mut resource = Resource::open(&url, &var("RESOURCE")).await;
        let first = resource
            .fenced_write("written by the first holder", token)
            .await;
        write_file(&dir.join("wrote1"), &first.to_string());
        history::read_when_there(&dir.join("write-again"), Duration::from_secs(60)).await;
        // The stale holder writes without asking whether it still holds the lock: the pause can
        // fall between any check and the write, so only the resource can refuse.
        resource.plain_write("written by the stale holder").await;
        let second = resource
            .fenced_write("written by the stale holder", token)
            .await;
        let told = tokio::time::timeout(Duration::from_secs(2), guard.lost())
            .await
            .is_ok();
        write_file(&dir.join("wrote2"), &format!("{second} plain lost={told}"));
    });
}

// ---------------------------------------------------------------------------------------------
// `exit_paths`

#[derive(Clone, Copy, Debug)]
enum Exit {
    Return,
    Error,
    Panic,
    Forever,
}

/// How long the annotated function's body runs before it exits (or is cancelled, or the
/// runtime shut down): three renewal intervals of [`EXIT_LEASE`] and a bit.
pub const EXIT_BODY: Duration = Duration::from_millis(700);

/// The lease of the annotated function of [`exit_paths`]: renewed every 200 ms while the body
/// runs, so a host that stalls 400 ms (a busy CI machine) does not lose it.
pub const EXIT_LEASE: Duration = Duration::from_millis(600);

#[distributed_lock(key = "exit:<path>", lease = "600ms", wait = "5s")]
async fn guarded(path: &str, how: Exit) -> Result<(), LockError> {
    tokio::time::sleep(EXIT_BODY).await;
    match how {
        Exit::Return => Ok(()),
        Exit::Error => {
            let failed: Result<(), LockError> = Err(LockError::Config("the body failed".into()));
            failed?;
            unreachable!()
        }
        Exit::Panic => panic!("the body panics"),
        Exit::Forever => std::future::pending().await,
    }
}

/// The exit paths of [`exit_paths`], in the order it runs them.
pub const EXIT_PATHS: [&str; 5] = ["return", "error", "panic", "cancel", "shutdown"];

/// What `done-<path>` says when the path ran as planned.
pub const EXIT_AS_PLANNED: &str = "as planned";

/// What `done-<path>` starts with when the lock was lost while the body ran (a host that
/// stalled past the lease): an outcome the product promises, which still has to leave nothing
/// behind.
pub const EXIT_LOST: &str = "lost";

/// The outcome of one exit path, as `done-<path>` reports it.
fn exit_outcome(
    result: Result<(), LockError>,
    planned: impl Fn(&Result<(), LockError>) -> bool,
) -> String {
    if planned(&result) {
        return EXIT_AS_PLANNED.to_owned();
    }
    match result {
        Err(LockError::Lost { key }) => format!("{EXIT_LOST}: {key}"),
        other => format!("unexpected: {other:?}"),
    }
}

/// Runs the annotated function out by each exit path in turn; after each it writes
/// `done-<path>` (its outcome: [`EXIT_AS_PLANNED`], [`EXIT_LOST`] or what else it returned)
/// and waits for `next-<path>`.
fn exit_paths(dir: &Path) {
    let url = var("LOCK_URL");
    let runtime = history::helper_runtime();
    let step = |path: &str, outcome: String| {
        // When it ended, for a failure's report.
        write_file(&dir.join(format!("ended-{path}")), &crate::wall_clock());
        write_file(&dir.join(format!("done-{path}")), &outcome);
        let next = dir.join(format!("next-{path}"));
        while !next.exists() {
            std::thread::sleep(ms(2));
        }
    };
    runtime.block_on(async {
        distlock::init(connect_patiently(|| LockClient::connect(&url)).await).unwrap();
    });
    let result = runtime.block_on(guarded("return", Exit::Return));
    step("return", exit_outcome(result, Result::is_ok));
    let result = runtime.block_on(guarded("error", Exit::Error));
    step(
        "error",
        exit_outcome(result, |result| matches!(result, Err(LockError::Config(_)))),
    );
    let result = runtime.block_on(runtime.spawn(guarded("panic", Exit::Panic)));
    let outcome = match result {
        Err(join) if join.is_panic() => EXIT_AS_PLANNED.to_owned(),
        Err(join) => format!("unexpected: {join}"),
        Ok(result) => exit_outcome(result, |_| false),
    };
    step("panic", outcome);
    let result = runtime.block_on(async {
        tokio::time::timeout(EXIT_BODY, guarded("cancel", Exit::Forever)).await
    });
    let outcome = match result {
        Err(_elapsed) => EXIT_AS_PLANNED.to_owned(),
        Ok(result) => exit_outcome(result, |_| false),
    };
    step("cancel", outcome);
    runtime.spawn(guarded("shutdown", Exit::Forever));
    runtime.block_on(async { tokio::time::sleep(EXIT_BODY).await });
    runtime.shutdown_timeout(ms(100));
    step("shutdown", EXIT_AS_PLANNED.to_owned());
}

// ---------------------------------------------------------------------------------------------
// `contender`

/// Upper bound of a contender's random pause between the register's read and write.
pub const MAX_SLEEP_US: u64 = 200;

/// A contending process of the history checker: contends as [`Contention`] says (from the
/// environment), then writes `<HOLDER>.out`: `increments lost`, then one hold per line.
fn contender(dir: &Path) {
    let spec = Contention {
        url: var("LOCK_URL"),
        key: var("LOCK_KEY"),
        name: var("HOLDER"),
        tasks: var("TASKS").parse().unwrap(),
        rounds: var("ROUNDS").parse().unwrap(),
        fencing: var("FENCING") == "1",
        fair: var("FAIR") == "1",
        lease: ms(var("LEASE_MS").parse().unwrap()),
        max_sleep_us: MAX_SLEEP_US,
        reads_in_4: var("READS_IN_4").parse().unwrap(),
        upgrades: var("UPGRADES") == "1",
        permits: var("PERMITS").parse().unwrap(),
        accounts: var("ACCOUNTS").parse().unwrap(),
        until: Some(var("UNTIL"))
            .filter(|until| !until.is_empty())
            .map(PathBuf::from),
        register_url: Some(var("REGISTER_URL")),
    };
    history::helper_runtime().block_on(async {
        let store = Store::open(spec.register_url(), &var("NAMESPACE"))
            .await
            .unwrap();
        let ready = dir.join(format!("{}.ready", spec.name));
        let go = dir.join("go");
        let outcome = history::contend(&spec, &store, Some((&ready, &go))).await;
        let mut out = format!("{} {}\n", outcome.increments, outcome.lost);
        for hold in &outcome.holds {
            out.push_str(&hold.to_line());
            out.push('\n');
        }
        write_file(&dir.join(format!("{}.out", spec.name)), &out);
    });
}

// ---------------------------------------------------------------------------------------------
// `try_once`, `waiter`

/// The lease of the locks in the try-once and waiter scenarios: a place left in line would hold
/// up the next waiter this long (the session or lease it lives on), far past the bound the
/// tests allow.
pub const TRY_ONCE_LEASE: Duration = Duration::from_secs(5);

/// One try for `key` (`wait = 0`): `busy`, `acquired` or the error.
pub async fn try_once(url: &str, key: &str, fair: bool) -> String {
    let client = LockClient::connect(url).await.unwrap();
    let mut request = client.lock(key).lease(TRY_ONCE_LEASE).wait(Duration::ZERO);
    if fair {
        request = request.fair();
    }
    match request.acquire().await {
        Err(LockError::Busy { .. }) => "busy".to_owned(),
        Ok(_) => "acquired".to_owned(),
        Err(error) => format!("error: {error}"),
    }
}

/// One try (`LOCK_KEY`, fair when `FAIR=1`), its answer in the file `answer`, then `exit(0)`
/// from inside the runtime — no destructor, no runtime shutdown: only what the acquisition did
/// before it returned is done.
fn try_once_and_exit_at_once(dir: &Path) {
    // One thread: nothing spawned in the background (a release left to a task) runs between
    // the answer and the exit, so only what the acquisition awaited is done.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let answer = try_once(&var("LOCK_URL"), &var("LOCK_KEY"), var("FAIR") == "1").await;
        write_file(&dir.join("answer"), &answer);
        std::process::exit(0);
    });
}

/// Takes `LOCK_KEY` with lease and `min_hold` both `MIN_HOLD_MS`, writes `granted` (the
/// `CLOCK_MONOTONIC` ns just before the request went out), releases it at once, and returns
/// from `main` normally: the runtime shuts down, the client is dropped.
pub fn min_hold_then_exit(dir: &Path) {
    let runtime = history::helper_runtime();
    let min_hold = ms(var("MIN_HOLD_MS").parse().unwrap());
    runtime.block_on(min_hold_then_release(
        &var("LOCK_URL"),
        &var("LOCK_KEY"),
        min_hold,
        dir,
    ));
    drop(runtime);
}

/// Takes `LOCK_KEY` (lease `LEASE_MS`, lock-delay `LOCK_DELAY_MS`), writes `granted` (the
/// send time, `now_ns`), and exits at once without giving it back: a holder that dies (no
/// destructor runs, so no release is sent).
pub fn die_holding(dir: &Path) {
    let runtime = history::helper_runtime();
    runtime.block_on(take_and_keep(
        &var("LOCK_URL"),
        &var("LOCK_KEY"),
        ms(var("LEASE_MS").parse().unwrap()),
        ms(var("LOCK_DELAY_MS").parse().unwrap()),
        dir,
    ));
    std::process::exit(0);
}

/// [`die_holding`]'s acquisition; the guard is forgotten (never released), and its watchdog
/// dies with the runtime that runs this (one process only: on a runtime of its own, dropped
/// after).
pub async fn take_and_keep(url: &str, key: &str, lease: Duration, delay: Duration, dir: &Path) {
    let client = LockClient::connect(url).await.unwrap();
    let before = now_ns();
    let guard = client
        .lock(key)
        .lease(lease)
        .lock_delay(delay)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    write_file(&dir.join("granted"), &before.to_string());
    std::mem::forget(guard);
}

/// [`min_hold_then_exit`] without the exit (one process only: on a runtime of its own).
pub async fn min_hold_then_release(url: &str, key: &str, min_hold: Duration, dir: &Path) {
    let client = LockClient::connect(url).await.unwrap();
    let before = now_ns();
    let guard = client
        .lock(key)
        .lease(min_hold)
        .min_hold(min_hold)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
    write_file(&dir.join("granted"), &before.to_string());
}

/// Starts waiting for `key` (forever) and returns once the server counts the waiter (or, on a
/// backend that counts no plain waiters, after 3 s), the wait still under way.
pub async fn wait_in_line(url: &str, key: &'static str) {
    let client = LockClient::connect(url).await.unwrap();
    let waiting = client.clone();
    tokio::spawn(async move {
        let _ = waiting
            .lock(key)
            .lease(TRY_ONCE_LEASE)
            .wait_forever()
            .acquire()
            .await;
    });
    // A plain waiter on Redis or SQL is counted nowhere: it is simply under way after this.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        tokio::time::sleep(ms(20)).await;
        let info = client.inspect(key).await.ok().flatten();
        if info.and_then(|i| i.waiters).is_some_and(|n| n >= 1) {
            return;
        }
    }
}

/// Waits in line for `LOCK_KEY`, writes `queued`, and ends normally (its runtime shuts down
/// with the wait under way).
fn waiter(dir: &Path) {
    let runtime = history::helper_runtime();
    let key: &'static str = var("LOCK_KEY").leak();
    runtime.block_on(wait_in_line(&var("LOCK_URL"), key));
    write_file(&dir.join("queued"), "queued");
    drop(runtime);
}

// ---------------------------------------------------------------------------------------------
// `process_starter`

/// Starts servers (one of its own, the binary's shared one) and a helper process of its own,
/// writes their pids, then dies without running a destructor: aborted (`MODE=abort`), or
/// waiting to be killed with SIGKILL.
fn process_starter(dir: &Path) {
    if std::env::var_os("NESTED").is_some() {
        write_file(&dir.join("nested"), &std::process::id().to_string());
        loop {
            std::thread::park();
        }
    }
    let own = RedisServer::start();
    let shared = RedisServer::shared();
    let nested = Helper::spawn("process_starter", dir, &[("NESTED", "1".into())]);
    history::helper_runtime().block_on(async {
        history::read_when_there(&dir.join("nested"), Duration::from_secs(30)).await;
    });
    let pids = [own.pid(), shared.pid(), nested.pid() as u32];
    let line: Vec<String> = pids.iter().map(u32::to_string).collect();
    write_file(&dir.join("pids"), &line.join(" "));
    history::helper_runtime().block_on(async {
        history::read_when_there(&dir.join("die"), Duration::from_secs(60)).await;
    });
    if var("MODE") == "abort" {
        std::process::abort();
    }
    loop {
        std::thread::park();
    }
}

// ---------------------------------------------------------------------------------------------
// `share`

/// Connects to `LOCK_URL`, writes `ready`, waits for `go`, then makes one shared call for
/// `LOCK_KEY` (`share` of `SHARE_MS`): its body writes `ran`, takes 300 ms and returns this
/// process's id. What the call returned goes to `answer` (`error: …` for an error).
fn share_once(dir: &Path) {
    let runtime = history::helper_runtime();
    runtime.block_on(async {
        let client = LockClient::connect(&var("LOCK_URL")).await.unwrap();
        write_file(&dir.join("ready"), "1");
        history::read_when_there(&dir.join("go"), Duration::from_secs(60)).await;
        let answer = client
            .lock(var("LOCK_KEY"))
            .wait(Duration::from_secs(30))
            .share(ms(var("SHARE_MS").parse().unwrap()))
            .run(|| async {
                write_file(&dir.join("ran"), "1");
                tokio::time::sleep(ms(300)).await;
                Ok::<_, LockError>(std::process::id())
            })
            .await;
        let answer = match answer {
            Ok(pid) => pid.to_string(),
            Err(error) => format!("error: {error}"),
        };
        write_file(&dir.join("answer"), &answer);
    });
}

/// Makes a shared call for `LOCK_KEY` (lease `LEASE_MS`) whose body writes `ran` and never
/// ends: a holder that dies mid-body when the test kills it.
fn share_and_hang(dir: &Path) {
    let runtime = history::helper_runtime();
    runtime.block_on(async {
        let client = LockClient::connect(&var("LOCK_URL")).await.unwrap();
        let _ = client
            .lock(var("LOCK_KEY"))
            .lease(ms(var("LEASE_MS").parse().unwrap()))
            .share(Duration::from_secs(60))
            .run(|| async {
                write_file(&dir.join("ran"), "1");
                std::future::pending::<Result<u64, LockError>>().await
            })
            .await;
    });
}

/// Four processes make the same shared call at once (`share` helpers): the body runs in
/// exactly one of them, and all four return its value (that process's id).
pub async fn four_processes_share_one_result(url: &str, key: &str) {
    let helpers: Vec<Helper> = (0..4)
        .map(|_| {
            spawn(
                "share",
                &[
                    ("LOCK_URL", url.to_owned()),
                    ("LOCK_KEY", key.to_owned()),
                    ("SHARE_MS", "30000".to_owned()),
                ],
            )
        })
        .collect();
    for helper in &helpers {
        helper.read("ready", Duration::from_secs(60)).await;
    }
    for helper in &helpers {
        write_file(&helper.dir.join("go"), "1");
    }
    let mut answers = Vec::new();
    for helper in &helpers {
        answers.push(helper.read("answer", Duration::from_secs(60)).await);
    }
    let ran: Vec<u32> = helpers
        .iter()
        .filter(|h| h.dir.join("ran").exists())
        .map(|h| h.child.id())
        .collect();
    assert_eq!(ran.len(), 1, "the body ran in {ran:?}; answers {answers:?}");
    for answer in &answers {
        assert_eq!(
            answer,
            &ran[0].to_string(),
            "every process gets the one result: {answers:?}"
        );
    }
}

//! The `distlock` binary against real servers started by the tests: what it prints, its exit
//! codes, and what the servers hold afterwards.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use distlock::LockClient;
use serde_json::Value;
use support::postgres::PostgresServer;
use support::{RedisServer, eventually, unique};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The binary, without the caller's `DISTLOCK_URL`.
fn distlock() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command
        .env_remove("DISTLOCK_URL")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `distlock args…` to its end (bounded: a hung command fails the test).
async fn run(args: &[&str]) -> Output {
    run_with(distlock().args(args)).await
}

async fn run_with(command: &mut Command) -> Output {
    let output = command.output();
    tokio::time::timeout(Duration::from_secs(60), output)
        .await
        .expect("distlock ended within 60 s")
        .expect("distlock runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// Starts a long-running `distlock args…` and waits for its first line of output.
async fn spawn_until_line(args: &[&str]) -> (Child, String) {
    let mut child = distlock()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("distlock starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a first line within 30 s")
        .unwrap()
        .unwrap_or_default();
    // Keep reading the rest in the background so the child never blocks on a full pipe.
    let rest = tokio::spawn(async move {
        let mut all = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    child_rest(&mut child, rest);
    (child, first)
}

/// Where the rest of a spawned child's output goes: collected by `finish`.
fn child_rest(child: &mut Child, rest: tokio::task::JoinHandle<String>) {
    OUTPUTS
        .lock()
        .unwrap()
        .push((child.id().unwrap_or_default(), rest));
}

static OUTPUTS: std::sync::Mutex<Vec<(u32, tokio::task::JoinHandle<String>)>> =
    std::sync::Mutex::new(Vec::new());

/// Waits (bounded) for a spawned child to end: its exit code, the rest of its stdout, its
/// stderr.
async fn finish(mut child: Child, within: Duration) -> (i32, String, String) {
    let pid = child.id().unwrap_or_default();
    let status = tokio::time::timeout(within, child.wait())
        .await
        .unwrap_or_else(|_| panic!("distlock (pid {pid}) did not end within {within:?}"))
        .unwrap();
    let rest = {
        let mut outputs = OUTPUTS.lock().unwrap();
        let at = outputs.iter().position(|(p, _)| *p == pid).unwrap();
        outputs.remove(at).1
    };
    let out = rest.await.unwrap();
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = stderr.read_to_string(&mut err).await;
    }
    (status.code().unwrap_or(-1), out, err)
}

async fn server_value(server: &RedisServer, name: &str) -> Option<String> {
    server.get(name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_and_ping_tell_who_holds_what() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::builder(url.as_str())
        .fencing(true)
        .build()
        .await
        .unwrap();
    let first = client
        .lock("order:1")
        .lease(ms(20_000))
        .acquire()
        .await
        .unwrap();
    let _second = client
        .lock("order:2")
        .lease(ms(20_000))
        .acquire()
        .await
        .unwrap();
    let _other = client
        .lock("invoice:9")
        .lease(ms(20_000))
        .acquire()
        .await
        .unwrap();
    // A fair waiter of order:2 shows in its queue.
    let waiter = client.clone();
    let queued = tokio::spawn(async move {
        waiter
            .lock("order:2")
            .fair()
            .wait(ms(30_000))
            .acquire()
            .await
    });
    let pid = std::process::id().to_string();

    assert!(
        eventually(ms(5_000), || async {
            client
                .inspect("order:2")
                .await
                .unwrap()
                .is_some_and(|i| i.waiters == Some(1))
        })
        .await,
        "the fair waiter joined the queue"
    );
    let listed = run(&["list", &url, "order:*", "--json"]).await;
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let json: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let locks = json.as_array().unwrap();
    let keys: Vec<&str> = locks.iter().map(|l| l["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["order:1", "order:2"]);
    for lock in locks {
        assert_eq!(lock["holder"]["pid"].to_string(), pid, "{lock}");
        let ttl = lock["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 5_000 && ttl <= 20_000, "{lock}");
        let stored = server_value(&server, lock["name"].as_str().unwrap()).await;
        assert_eq!(lock["token"].as_str(), stored.as_deref(), "{lock}");
    }
    assert_eq!(locks[0]["fencing_token"].as_u64(), first.fencing_token());
    assert_eq!(locks[1]["waiters"].as_u64(), Some(1));

    // The table, with the URL from DISTLOCK_URL.
    let table = run_with(distlock().env("DISTLOCK_URL", &url).arg("list")).await;
    assert_eq!(code(&table), 0, "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.starts_with("KEY"), "{text}");
    for key in ["order:1", "order:2", "invoice:9"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("{key} in {text}"));
        assert!(line.contains(&format!("pid {pid}")), "{line}");
    }

    let show = run(&["show", &url, "order:1"]).await;
    assert_eq!(code(&show), 0, "{}", stderr(&show));
    let token = server_value(&server, "lock:order:1").await.unwrap();
    assert!(stdout(&show).contains(&token), "{}", stdout(&show));
    assert!(stdout(&show).contains(&format!("pid {pid} since ")));

    let free = run(&["show", &url, "order:3"]).await;
    assert_eq!(code(&free), 4, "{}", stderr(&free));
    assert!(stderr(&free).contains("nobody holds `order:3`"));

    let nothing = run(&["list", &url, "nothing:*"]).await;
    assert_eq!((code(&nothing), stdout(&nothing).as_str()), (0, ""));

    let ping = run(&["ping", &url]).await;
    assert_eq!(code(&ping), 0, "{}", stderr(&ping));
    assert!(stdout(&ping).contains("Redis "), "{}", stdout(&ping));
    assert!(stdout(&ping).contains("round trip"), "{}", stdout(&ping));

    drop(first);
    drop(_second);
    let _ = tokio::time::timeout(ms(10_000), queued).await;
}

/// A read-held key: `list` and `show` name its readers (and `--json` lists them), each with its
/// holder and own lease, the tokens being the ones the server holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_are_listed_and_shown_with_their_holders() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::connect(&url).await.unwrap();
    let one = client.lock("catalog").read().lease(ms(20_000));
    let one = one.acquire().await.unwrap();
    let two = client.lock("catalog").read().lease(ms(10_000));
    let two = two.acquire().await.unwrap();
    let pid = std::process::id().to_string();
    let mut conn = server.connection().await;
    let stored: Vec<String> = redis::cmd("ZRANGE")
        .arg("lock:catalog")
        .arg(0)
        .arg(-1)
        .arg("REV")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored.len(), 2, "two shares on the server");

    let listed = run(&["list", &url, "--json"]).await;
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let json: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let lock = &json.as_array().unwrap()[0];
    assert_eq!(lock["mode"], "read", "{lock}");
    let readers = lock["readers"].as_array().unwrap();
    let tokens: Vec<&str> = readers
        .iter()
        .map(|r| r["token"].as_str().unwrap())
        .collect();
    assert_eq!(
        tokens, stored,
        "longest share first, as the server holds them"
    );
    for reader in readers {
        assert_eq!(reader["holder"]["pid"].to_string(), pid, "{reader}");
        assert!(reader["ttl_ms"].as_u64().unwrap() > 5_000, "{reader}");
    }
    let table = run(&["list", &url]).await;
    let line = stdout(&table);
    assert!(line.contains("2 readers"), "{line}");

    let show = run(&["show", &url, "catalog"]).await;
    assert_eq!(code(&show), 0, "{}", stderr(&show));
    let text = stdout(&show);
    assert!(text.contains("2 reader(s)"), "{text}");
    for token in &stored {
        assert!(text.contains(token.as_str()), "{text}");
    }
    assert_eq!(
        text.matches(&format!("pid {pid} since")).count(),
        2,
        "{text}"
    );
    one.release().await.unwrap();
    two.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_listed_and_shown_with_their_holders() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::connect(&url).await.unwrap();
    let one = client.semaphore("gpu-pool", 4).lease(ms(20_000));
    let one = one.acquire().await.unwrap();
    let two = client.semaphore("gpu-pool", 4).lease(ms(10_000));
    let two = two.acquire().await.unwrap();
    let pid = std::process::id().to_string();

    let listed = run(&["list", &url, "--json"]).await;
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let json: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let lock = &json.as_array().unwrap()[0];
    assert_eq!(lock["permits"], 4, "{lock}");
    let permits = lock["readers"].as_array().unwrap();
    assert_eq!(permits.len(), 2, "{lock}");
    for permit in permits {
        assert_eq!(permit["holder"]["pid"].to_string(), pid, "{permit}");
    }
    let table = run(&["list", &url]).await;
    let line = stdout(&table);
    assert!(line.contains("2 of 4 permits"), "{line}");

    let show = run(&["show", &url, "gpu-pool"]).await;
    assert_eq!(code(&show), 0, "{}", stderr(&show));
    let text = stdout(&show);
    assert!(text.contains("2 of 4 permits"), "{text}");
    assert_eq!(text.matches("permit ").count(), 2, "{text}");
    for guard in [&one, &two] {
        let token = distlock::__private::testing::owner_token(guard);
        assert!(text.contains(token), "{text}");
    }
    one.release().await.unwrap();
    two.release().await.unwrap();
    let empty = run(&["list", &url, "--json"]).await;
    assert_eq!(stdout(&empty).trim(), "[]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_released_by_force_is_reported_lost_by_its_holder() {
    let server = RedisServer::start();
    let url = server.url();
    // Renewed every 500 ms: the holder finds out at its next renewal.
    let (hold, first) = spawn_until_line(&["hold", &url, "job:nightly", "--lease", "1500ms"]).await;
    let hold_pid = hold.id().unwrap();
    assert!(first.contains("holding `job:nightly`"), "{first}");
    let stored = server_value(&server, "lock:job:nightly")
        .await
        .expect("the lock is on the server");
    assert!(
        stored.contains(&format!(":{hold_pid}:")),
        "the value names the hold process: {stored}"
    );

    // Without --force, or without --yes and no terminal: refused, nothing removed.
    let refused = run(&["release", &url, "job:nightly"]).await;
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"));
    let unconfirmed = run(&["release", &url, "job:nightly", "--force"]).await;
    assert_eq!(code(&unconfirmed), 2, "{}", stderr(&unconfirmed));
    assert!(stderr(&unconfirmed).contains("--yes"));
    assert_eq!(
        server_value(&server, "lock:job:nightly").await,
        Some(stored.clone())
    );

    let released_at = Instant::now();
    let released = run(&["release", &url, "job:nightly", "--force", "--yes"]).await;
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    assert!(
        stdout(&released).contains(&format!("pid {hold_pid}")),
        "{}",
        stdout(&released)
    );
    assert_eq!(server_value(&server, "lock:job:nightly").await, None);

    let (status, out, err) = finish(hold, ms(15_000)).await;
    assert_eq!(status, 121, "hold exits with `lost`: {out} {err}");
    assert!(out.contains("lost `job:nightly`"), "{out}");
    assert!(
        released_at.elapsed() < ms(15_000),
        "told after {:?}",
        released_at.elapsed()
    );
    // It did not take the lock back.
    assert_eq!(server_value(&server, "lock:job:nightly").await, None);

    let again = run(&["release", &url, "job:nightly", "--force", "--yes"]).await;
    assert_eq!(code(&again), 4, "{}", stderr(&again));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_releases_on_ctrl_c_when_its_time_is_up_and_refuses_a_busy_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let (hold, first) = spawn_until_line(&["hold", &url, "maintenance", "--for", "60s"]).await;
    assert!(first.contains("for 1m00s"), "{first}");
    assert!(server_value(&server, "lock:maintenance").await.is_some());
    // SAFETY: kill(2) on the child we started.
    unsafe { libc::kill(hold.id().unwrap() as libc::pid_t, libc::SIGINT) };
    let (status, out, err) = finish(hold, ms(15_000)).await;
    assert_eq!(status, 0, "{out} {err}");
    assert!(
        out.contains("released `maintenance` (interrupted)"),
        "{out}"
    );
    assert_eq!(server_value(&server, "lock:maintenance").await, None);

    let timed = run(&["hold", &url, "maintenance", "--for", "300ms"]).await;
    assert_eq!(code(&timed), 0, "{}", stderr(&timed));
    assert!(stdout(&timed).contains("(its time was up)"));
    assert_eq!(server_value(&server, "lock:maintenance").await, None);

    // Busy past --wait (or at once with -n): exit 120, naming the holder; the holder's lock
    // untouched.
    let client = LockClient::connect(&url).await.unwrap();
    let guard = client.lock("maintenance").acquire().await.unwrap();
    let value = server_value(&server, "lock:maintenance").await;
    let waits: [&[&str]; 5] = [
        &["--wait", "0s"],
        &["--wait", "300ms"],
        &["-w", "300ms"],
        &["-n"],
        &["--nonblock"],
    ];
    for wait in waits {
        let started = Instant::now();
        let busy = run_with(distlock().args(["hold", &url, "maintenance"]).args(wait)).await;
        assert_eq!(code(&busy), 120, "{wait:?}: {}", stderr(&busy));
        assert!(
            stderr(&busy).contains(&format!("pid {}", std::process::id())),
            "{}",
            stderr(&busy)
        );
        let why = match wait.last() {
            Some(&"300ms") => "not taken within --wait 300ms",
            _ => "not taken at once",
        };
        assert!(stderr(&busy).contains(why), "{wait:?}: {}", stderr(&busy));
        assert!(stdout(&busy).is_empty(), "{}", stdout(&busy));
        assert!(started.elapsed() < ms(10_000), "{wait:?}");
    }
    assert_eq!(server_value(&server, "lock:maintenance").await, value);

    // By default it waits as long as it takes (saying so on stderr after a second), and takes
    // the lock once it is released.
    let (hold, first) = {
        let spawned = tokio::spawn({
            let url = url.clone();
            async move { spawn_until_line(&["hold", &url, "maintenance", "--for", "500ms"]).await }
        });
        tokio::time::sleep(ms(2_500)).await;
        assert!(
            !spawned.is_finished(),
            "hold did not wait for the busy lock"
        );
        assert_eq!(server_value(&server, "lock:maintenance").await, value);
        guard.release().await.unwrap();
        spawned.await.unwrap()
    };
    assert!(first.contains("holding `maintenance`"), "{first}");
    let (status, out, err) = finish(hold, ms(15_000)).await;
    assert_eq!(status, 0, "{out} {err}");
    assert!(
        err.contains("`maintenance` is held by")
            && err.contains(&format!("pid {}", std::process::id()))
            && err.contains("waiting for it as long as it takes"),
        "{err}"
    );
    assert!(
        out.contains("released `maintenance` (its time was up)"),
        "{out}"
    );
    assert_eq!(server_value(&server, "lock:maintenance").await, None);

    // `--wait forever` too; Ctrl-C stops the wait: 128 + SIGINT, nothing taken, the holder's
    // lock untouched.
    let guard = client.lock("maintenance").acquire().await.unwrap();
    let value = server_value(&server, "lock:maintenance").await;
    let waiting = distlock()
        .args(["hold", &url, "maintenance", "--wait", "forever"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(ms(1_500)).await;
    // SAFETY: kill(2) on the child we started.
    unsafe { libc::kill(waiting.id().unwrap() as libc::pid_t, libc::SIGINT) };
    let output = tokio::time::timeout(ms(15_000), waiting.wait_with_output())
        .await
        .expect("Ctrl-C stopped the wait")
        .unwrap();
    assert_eq!(code(&output), 128 + libc::SIGINT, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("SIGINT while waiting for `maintenance`: not taken"),
        "{}",
        stderr(&output)
    );
    assert_eq!(stdout(&output), "");
    assert_eq!(server_value(&server, "lock:maintenance").await, value);
    guard.release().await.unwrap();
}

/// `hold --json`: one JSON object per line, from the grant to the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_prints_json_events() {
    let server = RedisServer::start();
    let url = server.url();
    let (hold, first) = spawn_until_line(&[
        "hold",
        &url,
        "j:1",
        "--json",
        "--fencing",
        "--lease",
        "3s",
        "--for",
        "60s",
    ])
    .await;
    let held: Value = serde_json::from_str(&first).unwrap();
    let pid = hold.id().unwrap();
    assert_eq!(held["event"], "held", "{held}");
    assert_eq!(held["key"], "j:1", "{held}");
    assert_eq!(held["pid"].as_u64(), Some(u64::from(pid)), "{held}");
    assert_eq!(held["lease_ms"].as_u64(), Some(3_000), "{held}");
    assert!(held["fencing_token"].as_u64().is_some(), "{held}");
    let stored = server_value(&server, "lock:j:1").await.expect("held");
    assert!(stored.contains(&format!(":{pid}:")), "{stored}");
    // SAFETY: kill(2) on the child we started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let (status, out, err) = finish(hold, ms(15_000)).await;
    assert_eq!(status, 0, "{out} {err}");
    let released: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        released,
        serde_json::json!({"event": "released", "key": "j:1", "reason": "interrupted"})
    );
    assert_eq!(server_value(&server, "lock:j:1").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_acquisitions_and_releases() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::connect(&url).await.unwrap();
    let _before = client.lock("w:before").acquire().await.unwrap();
    let watch = distlock()
        .args([
            "watch",
            &url,
            "w:*",
            // One Redis server announces changes: no listing is due before --for ends, so
            // every event below comes from an announcement.
            "--interval",
            "10m",
            "--for",
            "4s",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(ms(1_000)).await;
    let guard = client.lock("w:1").acquire().await.unwrap();
    let _unwatched = client.lock("x:1").acquire().await.unwrap();
    tokio::time::sleep(ms(800)).await;
    guard.release().await.unwrap();
    let output = tokio::time::timeout(ms(30_000), watch.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let events: Vec<Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["key"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("held", "w:before"),
            ("acquired", "w:1"),
            ("released", "w:1")
        ],
        "{}",
        stdout(&output)
    );
    for event in &events {
        assert_eq!(
            event["holder"]["pid"].as_u64(),
            Some(u64::from(std::process::id()))
        );
    }

    // In text, it says how it learns of changes, then one line per lock.
    let text = run(&["watch", &url, "w:*", "--for", "1s"]).await;
    assert_eq!(code(&text), 0, "{}", stderr(&text));
    assert!(
        stderr(&text).contains("woken by the store's announcements"),
        "{}",
        stderr(&text)
    );
    let lines: Vec<String> = stdout(&text).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("held") && lines[0].contains("w:before"),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_reason_and_its_exit_code() {
    let no_url = run(&["list"]).await;
    assert_eq!(code(&no_url), 2);
    assert!(
        stderr(&no_url).contains("DISTLOCK_URL"),
        "{}",
        stderr(&no_url)
    );

    let memory = run(&["list", "memory://"]).await;
    assert_eq!(code(&memory), 3);
    assert!(
        stderr(&memory).contains("inside the process"),
        "{}",
        stderr(&memory)
    );

    let port = support::free_port();
    let down = format!("redis://127.0.0.1:{port}");
    let unreachable = run(&["ping", &down, "--connect-timeout", "1s"]).await;
    assert_eq!(code(&unreachable), 122);
    assert!(
        stderr(&unreachable).contains(&down),
        "{}",
        stderr(&unreachable)
    );
    // Every command exits 122 when the backend cannot be reached.
    let commands: [&[&str]; 8] = [
        &["list"],
        &["show", "k"],
        &["release", "k", "--force", "--yes"],
        &["hold", "k"],
        &["watch", "--for", "5s"],
        &["leader", "n"],
        &["run", "k", "--", "true"],
        &["elect", "n", "--identity", "a", "--", "true"],
    ];
    for command in commands {
        let output = run_with(
            distlock()
                .args(&command[..1])
                .args([down.as_str(), "--connect-timeout", "1s"])
                .args(&command[1..]),
        )
        .await;
        assert_eq!(code(&output), 122, "{command:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(&down), "{}", stderr(&output));
    }

    let scheme = run(&["list", "mongodb://127.0.0.1"]).await;
    assert_eq!(code(&scheme), 2, "{}", stderr(&scheme));

    let server = RedisServer::start();
    let url = server.url();
    let empty_key = run(&["show", &url, ""]).await;
    assert_eq!(code(&empty_key), 2, "{}", stderr(&empty_key));
    assert!(
        stderr(&empty_key).contains("empty"),
        "{}",
        stderr(&empty_key)
    );
    let long_key = "k".repeat(distlock::LockClient::MAX_KEY_LEN + 1);
    let too_long = run(&["release", &url, &long_key, "--force", "--yes"]).await;
    assert_eq!(code(&too_long), 2, "{}", stderr(&too_long));

    let duration = run(&["hold", &url, "k", "--for", "10"]).await;
    assert_eq!(code(&duration), 2);
    assert!(stderr(&duration).contains("unit"), "{}", stderr(&duration));

    let extra = run(&["show", &url, "a", "b"]).await;
    assert_eq!(code(&extra), 2, "{}", stderr(&extra));

    // Usage errors of the wait, -c and --json flags: exit 2 with the reason, nothing taken,
    // COMMAND never started.
    let dir = std::env::temp_dir().join(unique("distlock-usage"));
    std::fs::create_dir_all(&dir).unwrap();
    let touch = r#"touch "$D/ran""#;
    let cases: [(&[&str], &str); 10] = [
        (
            &["hold", &url, "k", "-n", "--wait", "1s"],
            "cannot be used with",
        ),
        (&["hold", &url, "k", "--wait", "never"], "forever"),
        (
            &["run", &url, "k", "-n", "-w", "1s", "-c", touch],
            "cannot be used with",
        ),
        (&["run", &url, "k"], "-c <STRING>|COMMAND"),
        (
            &["run", &url, "k", "-c", touch, "--", "sh", "-c", touch],
            "cannot be used with",
        ),
        (
            &["run", &url, "k", "--json", "-c", touch],
            "unexpected argument '--json'",
        ),
        (
            &["elect", &url, "n", "--identity", "a"],
            "-c <STRING>|COMMAND",
        ),
        (
            &["elect", &url, "n", "--identity", "a", "--json", "-c", touch],
            "'--json'",
        ),
        (
            &[
                "elect",
                &url,
                "n",
                "--identity",
                "a",
                "-n",
                "--wait",
                "1s",
                "-c",
                touch,
            ],
            "cannot be used with",
        ),
        // `--json` belongs to the subcommand now, not before it.
        (&["--json", "list", &url], "unexpected argument '--json'"),
    ];
    for (args, why) in cases {
        let output = run_with(distlock().args(args).env("D", &dir)).await;
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(why),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert!(!dir.join("ran").exists(), "COMMAND ran");
    let mut conn = server.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "something was taken: {keys:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same commands on a lock table: PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_locks_are_listed_and_released_by_force() {
    let table = unique("cli").replace('-', "_");
    let url = format!("{}?table={table}", PostgresServer::shared().url());
    tables_and_queues(&url, false).await;
}

/// The same commands on etcd, where waiters queue: their count shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_locks_show_their_queue() {
    let url = support::etcd::EtcdMember::shared().url(&unique("cli"));
    tables_and_queues(&url, true).await;
}

/// The same commands on ZooKeeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_locks_show_their_queue() {
    let url = support::zookeeper::ZkServer::shared().url(&format!("/{}", unique("cli")));
    tables_and_queues(&url, true).await;
}

/// The same commands on MariaDB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_locks_are_listed_and_released_by_force() {
    let table = unique("cli").replace('-', "_");
    let url = format!(
        "{}?table={table}",
        support::mysql::MysqlServer::shared().url()
    );
    tables_and_queues(&url, false).await;
}

/// A lock held by this process (and, where the backend queues waiters, one waiter): listed
/// with its holder, released by force, its holder told, nothing left.
async fn tables_and_queues(url: &str, queues: bool) {
    let client = LockClient::builder(url)
        .fencing(true)
        .build()
        .await
        .unwrap();
    let guard = client
        .lock("svc:1")
        .lease(ms(3_000))
        .acquire()
        .await
        .unwrap();
    let waiter = LockClient::connect(url).await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("svc:1")
            .lease(ms(3_000))
            .wait(ms(60_000))
            .acquire()
            .await
            .map(|g| (g, Instant::now()))
    });
    if queues {
        assert!(
            eventually(ms(10_000), || async {
                client
                    .inspect("svc:1")
                    .await
                    .unwrap()
                    .is_some_and(|i| i.waiters == Some(1))
            })
            .await
        );
    }
    let listed = run(&["list", url, "svc:*", "--json"]).await;
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let json: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let locks = json.as_array().unwrap();
    assert_eq!(locks.len(), 1, "{json}");
    assert_eq!(locks[0]["key"], "svc:1");
    assert_eq!(
        locks[0]["holder"]["pid"].as_u64(),
        Some(u64::from(std::process::id()))
    );
    assert_eq!(locks[0]["fencing_token"].as_u64(), guard.fencing_token());
    if queues {
        assert_eq!(locks[0]["waiters"].as_u64(), Some(1), "{json}");
    }
    let released = run(&["release", url, "svc:1", "--force", "--yes"]).await;
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    let released_at = Instant::now();
    let (next, granted_at) = waiting.await.unwrap().unwrap();
    assert!(
        granted_at.duration_since(released_at) < ms(1_500),
        "the waiter got it {:?} after the forced release",
        granted_at.duration_since(released_at)
    );
    assert!(
        eventually(ms(5_000), || async { guard.is_lost() }).await,
        "the holder was told"
    );
    next.release().await.unwrap();
    let free = run(&["show", url, "svc:1"]).await;
    assert_eq!(code(&free), 4, "{}", stderr(&free));
}

// ---- `distlock run` ----

/// `distlock run args…` in the background with `D` (a scratch directory) in its environment,
/// stderr captured.
fn spawn_run(args: &[&str], dir: &std::path::Path) -> Child {
    distlock()
        .arg("run")
        .args(args)
        .env("D", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("distlock runs")
}

/// Waits (bounded) for a `distlock run`: its exit code and stderr.
async fn end_of_run(child: Child, within: Duration) -> (i32, String) {
    let output = tokio::time::timeout(within, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("distlock run did not end within {within:?}"))
        .unwrap();
    (code(&output), stderr(&output))
}

/// Waits for the file `name` in `dir` (written by COMMAND); its contents.
async fn file_in(dir: &std::path::Path, name: &str) -> String {
    let path = dir.join(name);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(&path)
            && !text.is_empty()
        {
            return text.trim().to_owned();
        }
        assert!(Instant::now() < deadline, "COMMAND never wrote {name}");
        tokio::time::sleep(ms(20)).await;
    }
}

/// Whether process `pid` still runs (a zombie does not count).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Every path of `distlock run` against the backend at `url`, checking what the server holds
/// (through the admin API, which reads the server) after each.
async fn run_paths(url: &str) {
    let dir = std::env::temp_dir().join(unique("distlock-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let client = LockClient::connect(url).await.unwrap();
    let holder_pid = |info: Option<distlock::LockInfo>| info.and_then(|i| i.holder).map(|h| h.pid);

    // COMMAND runs while the lock is held (by the `distlock run` process), sees DISTLOCK_KEY,
    // and its exit status is the run's; the lock is gone afterwards.
    let child = spawn_run(
        &[
            url,
            "job:a",
            "--",
            "sh",
            "-c",
            r#"echo "$DISTLOCK_KEY" > "$D/key"; while [ ! -e "$D/go" ]; do sleep 0.02; done; exit 7"#,
        ],
        &dir,
    );
    let pid = child.id().unwrap();
    assert_eq!(file_in(&dir, "key").await, "job:a");
    assert_eq!(
        holder_pid(client.inspect("job:a").await.unwrap()),
        Some(pid)
    );
    std::fs::write(dir.join("go"), "1").unwrap();
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 7, "COMMAND's own status: {err}");
    assert!(err.is_empty(), "nothing to say: {err}");
    assert!(client.inspect("job:a").await.unwrap().is_none(), "released");

    // Busy past --wait: exit 120 naming the key and its holder; COMMAND never starts; the
    // holder's lock untouched.
    let held = client.lock("job:b").acquire().await.unwrap();
    let before = client.inspect("job:b").await.unwrap().unwrap().token;
    let waits: [&[&str]; 4] = [
        &["--wait", "0s"],
        &["--wait", "300ms"],
        &["-w", "300ms"],
        &["-n"],
    ];
    for wait in waits {
        let mut args = vec![url, "job:b"];
        args.extend_from_slice(wait);
        args.extend(["--", "sh", "-c", r#"touch "$D/ran""#]);
        let child = spawn_run(&args, &dir);
        let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
        assert_eq!(status, 120, "{err}");
        assert!(err.contains("`job:b`"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert!(!dir.join("ran").exists(), "COMMAND ran without the lock");
    }
    assert_eq!(
        client.inspect("job:b").await.unwrap().unwrap().token,
        before
    );

    // A signal while waiting for the lock stops the wait: 128 + 15, COMMAND never starts.
    let child = spawn_run(
        &[
            url,
            "job:b",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            r#"touch "$D/ran""#,
        ],
        &dir,
    );
    tokio::time::sleep(ms(500)).await;
    // SAFETY: kill(2) on the child we started.
    unsafe { libc::kill(child.id().unwrap() as libc::pid_t, libc::SIGTERM) };
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 128 + libc::SIGTERM, "{err}");
    assert!(!dir.join("ran").exists());

    // Without --wait it waits as long as it takes, as flock(1) does: COMMAND runs once the
    // holder lets go, under the lock.
    let child = spawn_run(
        &[url, "job:b", "--", "sh", "-c", r#"echo $PPID > "$D/ran""#],
        &dir,
    );
    let waiter = child.id().unwrap();
    tokio::time::sleep(ms(1_500)).await;
    assert!(!dir.join("ran").exists(), "COMMAND ran without the lock");
    assert_eq!(
        client.inspect("job:b").await.unwrap().unwrap().token,
        before
    );
    held.release().await.unwrap();
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 0, "{err}");
    assert_eq!(file_in(&dir, "ran").await, waiter.to_string());
    assert!(client.inspect("job:b").await.unwrap().is_none(), "released");
    std::fs::remove_file(dir.join("ran")).unwrap();

    // SIGINT, SIGTERM and SIGHUP go to COMMAND; the lock is released once it has exited.
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let _ = std::fs::remove_file(dir.join("started"));
        let child = spawn_run(
            &[
                url,
                "job:c",
                "--",
                "sh",
                "-c",
                r#"trap 'echo $0 > "$D/trapped"; exit 3' INT TERM HUP; echo 1 > "$D/started"; while true; do sleep 0.02; done"#,
            ],
            &dir,
        );
        file_in(&dir, "started").await;
        let _ = std::fs::remove_file(dir.join("trapped"));
        // SAFETY: kill(2) on the child we started.
        unsafe { libc::kill(child.id().unwrap() as libc::pid_t, signal) };
        let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
        assert_eq!(
            status, 3,
            "signal {signal}: COMMAND's trap ran and exited 3: {err}"
        );
        assert!(dir.join("trapped").exists(), "COMMAND got signal {signal}");
        assert!(client.inspect("job:c").await.unwrap().is_none(), "released");
    }

    // The lock lost while COMMAND runs (released by force): COMMAND's whole group gets SIGTERM
    // (ignored here), then SIGKILL after --grace; exit 121; the lock is not taken back.
    let child = spawn_run(
        &[
            url,
            "job:d",
            "--lease",
            "1s",
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            r#"trap '' TERM; sleep 120 & echo $! > "$D/grandchild"; echo $$ > "$D/pid"; wait"#,
        ],
        &dir,
    );
    let command_pid: u32 = file_in(&dir, "pid").await.parse().unwrap();
    let grandchild: u32 = file_in(&dir, "grandchild").await.parse().unwrap();
    assert!(alive(command_pid) && alive(grandchild));
    let forced = Instant::now();
    assert!(client.force_release("job:d").await.unwrap().is_some());
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    println!("stopped {:?} after the forced release", forced.elapsed());
    assert_eq!(status, 121, "{err}");
    assert!(err.contains("lost `job:d`"), "{err}");
    assert!(
        eventually(ms(5_000), || async {
            !alive(command_pid) && !alive(grandchild)
        })
        .await,
        "COMMAND's process group outlived the lost lock"
    );
    assert!(client.inspect("job:d").await.unwrap().is_none());

    // --min-hold: COMMAND exits at once, the lock stays until min_hold has passed.
    let started = Instant::now();
    let child = spawn_run(
        &[
            url,
            "job:e",
            "--lease",
            "5s",
            "--min-hold",
            "2s",
            "--",
            "true",
        ],
        &dir,
    );
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 0, "{err}");
    assert!(
        client.lock("job:e").try_acquire().await.unwrap().is_none(),
        "--min-hold 2s: still held {:?} after the start",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let guard = loop {
        if let Some(guard) = client.lock("job:e").try_acquire().await.unwrap() {
            break guard;
        }
        assert!(Instant::now() < deadline, "never free again");
        tokio::time::sleep(ms(50)).await;
    };
    let after = started.elapsed();
    assert!(after >= ms(1_300), "free again after {after:?}");
    guard.release().await.unwrap();

    // A read lock and a permit: COMMAND runs beside another reader / permit holder.
    let reader = client.lock("job:f").read().acquire().await;
    if let Ok(reader) = reader {
        let child = spawn_run(&[url, "job:f", "--read", "--", "true"], &dir);
        assert_eq!(end_of_run(child, Duration::from_secs(30)).await.0, 0);
        let child = spawn_run(&[url, "job:f", "-n", "--", "true"], &dir);
        assert_eq!(
            end_of_run(child, Duration::from_secs(30)).await.0,
            120,
            "a writer beside a reader"
        );
        reader.release().await.unwrap();
    }
    let permit = client.semaphore("job:g", 2).acquire().await;
    if let Ok(permit) = permit {
        let child = spawn_run(&[url, "job:g", "--permits", "2", "--", "true"], &dir);
        assert_eq!(end_of_run(child, Duration::from_secs(30)).await.0, 0);
        let other = client.semaphore("job:g", 2).acquire().await.unwrap();
        let child = spawn_run(&[url, "job:g", "--permits", "2", "-n", "--", "true"], &dir);
        assert_eq!(
            end_of_run(child, Duration::from_secs(30)).await.0,
            120,
            "both permits in use"
        );
        permit.release().await.unwrap();
        other.release().await.unwrap();
    }
    for key in ["job:a", "job:b", "job:c", "job:d", "job:f", "job:g"] {
        assert!(
            client.inspect(key).await.unwrap().is_none(),
            "{key} left held"
        );
    }

    // COMMAND that cannot be found: 127, the lock given back.
    let child = spawn_run(&[url, "job:h", "--", "/nonexistent/command"], &dir);
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 127, "{err}");
    assert!(err.contains("/nonexistent/command"), "{err}");
    assert!(client.inspect("job:h").await.unwrap().is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_the_lock_for_a_command_on_redis() {
    let server = RedisServer::start();
    run_paths(&server.url()).await;
    // A backend that cannot be reached: 122, COMMAND never starts.
    let dir = std::env::temp_dir().join(unique("distlock-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let child = spawn_run(
        &[
            "redis://127.0.0.1:1",
            "job",
            "--",
            "sh",
            "-c",
            r#"touch "$D/ran""#,
        ],
        &dir,
    );
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 122, "{err}");
    assert!(err.contains("redis://127.0.0.1:1"), "{err}");
    assert!(!dir.join("ran").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --max-hold`: a COMMAND that hangs is renewed past its lease, then terminated at
/// --max-hold as for any lost lock (exit 121), and the lock is free again on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_terminates_a_command_that_outlives_max_hold() {
    let server = RedisServer::start();
    let dir = std::env::temp_dir().join(unique("distlock-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let child = spawn_run(
        &[
            &server.url(),
            "hung-job",
            "--lease",
            "300ms",
            "--max-hold",
            "1500ms",
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            r#"touch "$D/ran"; sleep 30; touch "$D/done""#,
        ],
        &dir,
    );
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    let ended = started.elapsed();
    assert_eq!(status, 121, "{err}");
    assert!(dir.join("ran").exists(), "COMMAND never started: {err}");
    assert!(!dir.join("done").exists(), "COMMAND ran to its end");
    assert!(
        ended >= ms(1_500) && ended < Duration::from_secs(20),
        "ended {ended:?} after the start (--max-hold 1.5s)"
    );
    assert!(
        eventually(ms(1_000), || async {
            server_value(&server, "lock:hung-job").await.is_none()
        })
        .await,
        "the capped lock is still on the server"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run --lock-delay`: the lock is kept on the server for its lease plus the delay while
/// COMMAND runs (a dead `distlock run` would leave it that long), and a normal exit frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_its_lock_delay_on_the_server_and_frees_the_lock_on_exit() {
    let server = RedisServer::start();
    let dir = std::env::temp_dir().join(unique("distlock-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let child = spawn_run(
        &[
            &server.url(),
            "delayed-job",
            "--lease",
            "1s",
            "--lock-delay",
            "3s",
            "--",
            "sh",
            "-c",
            r#"echo ran > "$D/ran"; sleep 2"#,
        ],
        &dir,
    );
    let _ = file_in(&dir, "ran").await;
    let mut conn = server.connection().await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg("lock:delayed-job")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        (3_000..=4_000).contains(&pttl),
        "PTTL {pttl} while COMMAND runs (lease 1s + lock-delay 3s)"
    );
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    assert_eq!(status, 0, "{err}");
    assert_eq!(server_value(&server, "lock:delayed-job").await, None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-c STRING` runs STRING with `sh -c` (as `flock -c`), for `run` and `elect`: a pipeline,
/// with the lock's variables in its environment, under the lock (seen from inside by
/// `distlock show` / `leader`), its output and exit status the run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_elect_run_a_shell_string_with_c() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::connect(&url).await.unwrap();
    let shell = |args: &[&str]| {
        let mut command = distlock();
        command
            .args(args)
            .env("DL", env!("CARGO_BIN_EXE_distlock"))
            .env("U", &url);
        command
    };
    let output = run_with(&mut shell(&[
        "run",
        &url,
        "job:sh",
        "--fencing",
        "-c",
        r#"echo "$DISTLOCK_KEY" | tr a-z A-Z; echo "$PPID $DISTLOCK_FENCING_TOKEN"; "$DL" show "$U" "$DISTLOCK_KEY" --json"#,
    ]))
    .await;
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let out = stdout(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "JOB:SH", "{out}");
    let (run_pid, token) = lines[1].split_once(' ').unwrap();
    let shown: Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(shown["key"], "job:sh", "{shown}");
    assert_eq!(shown["holder"]["pid"].to_string(), run_pid, "{shown}");
    assert_eq!(shown["fencing_token"].to_string(), token, "{shown}");
    assert!(
        client.inspect("job:sh").await.unwrap().is_none(),
        "released"
    );

    // STRING's status is the run's; a command the shell cannot find is its 127.
    for (string, status) in [("exit 7", 7), ("no-such-command-here", 127)] {
        let output = run(&["run", &url, "job:sh", "-c", string]).await;
        assert_eq!(code(&output), status, "{string}: {}", stderr(&output));
    }
    assert!(
        client.inspect("job:sh").await.unwrap().is_none(),
        "released"
    );

    let output = run_with(&mut shell(&[
        "elect",
        &url,
        "reports",
        "--identity",
        "web-1",
        "-c",
        r#"echo "$DISTLOCK_ELECTION $DISTLOCK_IDENTITY" | tr a-z A-Z; echo "$DISTLOCK_TERM"; "$DL" leader "$U" "$DISTLOCK_ELECTION" --json"#,
    ]))
    .await;
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let out = stdout(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "REPORTS WEB-1", "{out}");
    let leader: Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(leader["election"], "reports", "{leader}");
    assert_eq!(leader["leader"]["identity"], "web-1", "{leader}");
    assert_eq!(leader["leader"]["term"].to_string(), lines[1], "{leader}");
    let nobody = run(&["leader", &url, "reports"]).await;
    assert_eq!(code(&nobody), 4, "resigned: {}", stderr(&nobody));
}

/// `elect` waits as `run` does: -n and -w give up (120) while another leads, naming it; by
/// default it waits to lead, and runs COMMAND once the leader resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_waits_to_lead_unless_told_not_to() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::connect(&url).await.unwrap();
    let dir = std::env::temp_dir().join(unique("distlock-elect-wait"));
    std::fs::create_dir_all(&dir).unwrap();
    let leading = client.election("ops").campaign("lib").await.unwrap();
    let term = leading.term();
    let waits: [&[&str]; 4] = [
        &["-n"],
        &["--nonblock"],
        &["-w", "300ms"],
        &["--wait", "0s"],
    ];
    for wait in waits {
        let started = Instant::now();
        let output = run_with(
            distlock()
                .args(["elect", &url, "ops", "--identity", "cli"])
                .args(wait)
                .args(["-c", r#"touch "$D/ran""#])
                .env("D", &dir),
        )
        .await;
        assert_eq!(code(&output), 120, "{wait:?}: {}", stderr(&output));
        let says =
            format!("distlock elect: `lib` (term {term}) leads `ops`; this candidate did not lead");
        assert!(stderr(&output).contains(&says), "{}", stderr(&output));
        assert!(started.elapsed() < ms(10_000), "{wait:?}");
    }
    assert!(!dir.join("ran").exists(), "COMMAND ran while another led");
    let waiting = distlock()
        .args(["elect", &url, "ops", "--identity", "cli"])
        .args(["-c", r#"echo "$DISTLOCK_TERM" > "$D/ran""#])
        .env("D", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(ms(1_500)).await;
    assert!(!dir.join("ran").exists(), "COMMAND ran while another led");
    leading.resign().await.unwrap();
    let (status, err) = end_of_run(waiting, Duration::from_secs(30)).await;
    assert_eq!(status, 0, "{err}");
    let led: u64 = file_in(&dir, "ran").await.parse().unwrap();
    assert!(led > term, "{led} after {term}");
    assert!(client.election("ops").leader().await.unwrap().is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hold` creates a missing SQL lock table, as `run` and `elect` (and the services' clients)
/// do: on a table that does not exist yet, `hold --for` takes the lock and gives it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_creates_a_missing_postgres_lock_table() {
    let server = PostgresServer::shared();
    let table = unique("cli_fresh").replace('-', "_");
    let url = format!("{}?table={table}", server.url());
    let db = server.client().await;
    async fn exists(db: &tokio_postgres::Client, table: &str) -> bool {
        db.query_one("SELECT to_regclass($1)::text", &[&table])
            .await
            .unwrap()
            .get::<_, Option<String>>(0)
            .is_some()
    }
    assert!(!exists(&db, &table).await, "{table} exists before the test");
    let (hold, first) = spawn_until_line(&["hold", &url, "maint:1", "--for", "1s"]).await;
    assert!(first.contains("holding `maint:1`"), "{first}");
    assert!(exists(&db, &table).await, "{table} created");
    let client = LockClient::connect(&url).await.unwrap();
    let holder = client
        .inspect("maint:1")
        .await
        .unwrap()
        .and_then(|i| i.holder);
    assert_eq!(holder.map(|h| h.pid), hold.id(), "held by the hold process");
    let (status, out, err) = finish(hold, ms(15_000)).await;
    assert_eq!(status, 0, "{out} {err}");
    assert!(
        out.contains("released `maint:1` (its time was up)"),
        "{out}"
    );
    assert!(
        client.inspect("maint:1").await.unwrap().is_none(),
        "released"
    );
    let rows: i64 = db
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "nothing left in {table}");
    // Looking (`list`) still does not create a table.
    let other = unique("cli_fresh").replace('-', "_");
    let listed = run(&["list", &format!("{}?table={other}", server.url())]).await;
    println!(
        "list on a missing table: {} {}",
        code(&listed),
        stderr(&listed)
    );
    assert!(!exists(&db, &other).await, "list created {other}");
    db.batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_the_lock_for_a_command_on_etcd() {
    let url = support::etcd::EtcdMember::shared().url(&unique("cli-run"));
    run_paths(&url).await;
}

/// The backend goes away while COMMAND runs (Redis killed): the lease cannot be renewed, so
/// the lock counts as lost once it may have expired; COMMAND is stopped and the run exits 121
/// promptly — the release that cannot reach the server does not hold it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_the_command_when_the_backend_goes_away() {
    let mut server = RedisServer::start();
    let url = server.url();
    let dir = std::env::temp_dir().join(unique("distlock-run"));
    std::fs::create_dir_all(&dir).unwrap();
    let child = spawn_run(
        &[
            &url,
            "job:gone",
            "--lease",
            "1s",
            "--grace",
            "500ms",
            "--",
            "sh",
            "-c",
            r#"echo $$ > "$D/pid"; exec sleep 120"#,
        ],
        &dir,
    );
    let command_pid: u32 = file_in(&dir, "pid").await.parse().unwrap();
    assert!(
        server.get("lock:job:gone").await.is_some(),
        "held while COMMAND runs"
    );
    server.kill();
    let killed = Instant::now();
    let (status, err) = end_of_run(child, Duration::from_secs(30)).await;
    let took = killed.elapsed();
    println!("stopped {took:?} after the server was killed: {err}");
    assert_eq!(status, 121, "{err}");
    assert!(err.contains("lost `job:gone`"), "{err}");
    // Why, from the runtime's own warnings (which the command line prints): the renewals that
    // failed, then the loss and its reason.
    assert!(
        err.contains("distlock: renewal failed") && err.contains("key=job:gone"),
        "{err}"
    );
    assert!(
        err.contains("distlock: lock lost key=job:gone")
            && (err.contains("why=no renewal confirmed before the lease ended")
                || err.contains("why=renewal did not answer before the lease ended")),
        "{err}"
    );
    assert!(!alive(command_pid), "COMMAND outlived the lost lock");
    // Lost within the lease (1 s) of the last renewal, stopped within the grace (0.5 s), and
    // out without waiting on the unreachable server for long.
    assert!(
        took < Duration::from_secs(10),
        "exited {took:?} after the server went away"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CLI's default build speaks TLS; `--url` keeps the password out of the arguments other
/// users see in `ps`, and every message keeps it out too.
#[tokio::test]
async fn the_url_from_the_flag_reaches_a_tls_server_with_a_password() {
    let server =
        RedisServer::start_tls_with(&["--tls-auth-clients", "optional", "--requirepass", "cli-pw"]);
    let client = LockClient::connect(&server.url()).await.unwrap();
    let _held = client.lock("tls:1").acquire().await.unwrap();
    let listed = run(&["list", "--json", "--url", &server.url()]).await;
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let json: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    assert_eq!(json[0]["key"].as_str(), Some("tls:1"), "{json}");
    let wrong = server.url().replace("cli-pw", "wrong-pw");
    let refused = run(&["ping", "--url", &wrong, "--connect-timeout", "2s"]).await;
    assert_eq!(code(&refused), 122, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("authentication failed"),
        "{}",
        stderr(&refused)
    );
    assert!(
        !stderr(&refused).contains("wrong-pw"),
        "{}",
        stderr(&refused)
    );
}

// ---- `distlock elect` and `distlock leader` ----

#[path = "cli/elect.rs"]
mod elect;

/// Whether a script of [`the_readmes_command_lines_run_as_written`] ran in `dir`.
fn ran_in(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|entry| {
        entry
            .unwrap()
            .path()
            .extension()
            .is_some_and(|e| e == "ran")
    })
}

/// The `distlock …` lines of a README's `sh` blocks, as written.
fn command_lines(readme: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        if in_sh && trimmed.starts_with("distlock ") {
            lines.push(trimmed.to_owned());
        }
    }
    lines
}

/// Every `distlock` line of the README's and the CLI's README's shell blocks runs as written
/// (through `sh`, in a directory with the scripts it names) against a real Redis, and does what
/// the README says: the cron line `run -n backup:nightly --min-hold 10m -- ./backup` exits 0
/// and leaves the lock held for 10 minutes; `show` of a free lock exits 4; `release --force`
/// without a terminal to ask on refuses (2) and leaves the holder; the long-running commands
/// (`hold --for 1h`, `watch`, `leader --watch`) keep running. A line this test has no
/// expectation for fails it: a new README line gets one here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_command_lines_run_as_written() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut lines = Vec::new();
    for readme in ["README.md", "lock-cli/README.md"] {
        let text = std::fs::read_to_string(format!("{root}/{readme}")).unwrap();
        let found = command_lines(&text);
        assert!(
            !found.is_empty(),
            "{readme} has no `distlock` lines in sh blocks"
        );
        lines.extend(found);
    }
    assert!(
        lines
            .iter()
            .any(|line| line.contains("run -n backup:nightly --min-hold 10m -- ./backup")),
        "the cron line is in a README: {lines:#?}"
    );
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_distlock"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    for line in lines {
        // A fresh directory per line, with the scripts the README's lines run.
        let dir = std::env::temp_dir().join(unique("distlock-readme"));
        std::fs::create_dir_all(&dir).unwrap();
        // Every `./script` the line names: it says it ran, and leaves `<script>.ran`.
        let scripts = line
            .split(|c: char| c.is_whitespace() || c == '\'' || c == '"')
            .filter_map(|word| word.strip_prefix("./"))
            .filter(|name| !name.is_empty());
        for script in scripts {
            let file = dir.join(script);
            std::fs::write(
                &file,
                format!("#!/bin/sh\necho {script} ran\ntouch {script}.ran\n"),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // The README's URL is the default local Redis; the test's server is elsewhere.
        let written = line.replace("redis://127.0.0.1:6379", &server.url());
        let mut command = Command::new("sh");
        command
            .args(["-c", &written])
            .current_dir(&dir)
            .env("PATH", &path)
            .env("DISTLOCK_URL", server.url())
            .env("HOSTNAME", "readme-host")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // The words before the line's comment, if any.
        let words: Vec<&str> = line
            .split(" #")
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let said = |output: &Output| format!("`{line}`:\n{}{}", stdout(output), stderr(output));
        match words[1] {
            // Long-running: still running a moment later, and doing what it says.
            "hold" | "watch" | "leader" => {
                let mut child = command.spawn().unwrap();
                tokio::time::sleep(ms(1_500)).await;
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "`{line}` ended at once: {:?}",
                    child.wait_with_output().await.map(|o| said(&o))
                );
                if words[1] == "hold" {
                    let key = words[2];
                    assert!(
                        client.inspect(key).await.unwrap().is_some(),
                        "`{line}` holds {key}"
                    );
                }
                child.start_kill().unwrap();
                let _ = child.wait().await;
            }
            "run" if line.contains("--min-hold 10m") => {
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 0, "{}", said(&output));
                assert!(ran_in(&dir), "its COMMAND ran: {}", said(&output));
                // Kept for 10 minutes after the grant, though ./backup took no time.
                let ttl: i64 = redis::cmd("PTTL")
                    .arg("lock:backup:nightly")
                    .query_async(&mut server.connection().await)
                    .await
                    .unwrap();
                assert!(
                    ttl > 9 * 60_000 && ttl <= 10 * 60_000,
                    "PTTL {ttl} ms after `{line}`"
                );
                // A second host's cron, minutes early or late: busy, ./backup not run again.
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.extension().is_some_and(|e| e == "ran") {
                        std::fs::remove_file(path).unwrap();
                    }
                }
                let again = run_with(&mut command).await;
                assert_eq!(code(&again), 120, "{}", said(&again));
                assert!(!ran_in(&dir), "ran again: {}", said(&again));
            }
            "run" | "elect" => {
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 0, "{}", said(&output));
                assert!(ran_in(&dir), "its COMMAND ran: {}", said(&output));
            }
            "show" => {
                // "exit 4 if free"; with a holder, 0 and the holder.
                let key = words.last().unwrap();
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 4, "{}", said(&output));
                let guard = client.lock(*key).acquire().await.unwrap();
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 0, "{}", said(&output));
                assert!(stdout(&output).contains(key), "{}", said(&output));
                guard.release().await.unwrap();
            }
            "release" => {
                // Asks first: with no terminal to ask on it refuses, and the holder keeps it.
                let guard = client.lock(words[2]).acquire().await.unwrap();
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 2, "{}", said(&output));
                assert!(stderr(&output).contains("--yes"), "{}", said(&output));
                assert!(client.inspect(words[2]).await.unwrap().is_some());
                guard.release().await.unwrap();
            }
            "list" | "ping" => {
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 0, "{}", said(&output));
            }
            "check" => {
                // Every check passes on the test's server: exit 0, no ✘.
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 0, "{}", said(&output));
                assert!(!stdout(&output).contains('✘'), "{}", said(&output));
            }
            "bench" => {
                // The defaults: 200 pairs, 64 tasks, 3 s windows; a table, nothing left.
                let output = run_with(&mut command).await;
                assert_eq!(code(&output), 0, "{}", said(&output));
                let text = stdout(&output);
                assert!(text.contains("64 tasks, 3 s windows"), "{}", said(&output));
                assert!(text.contains("raw floor"), "{}", said(&output));
                let left: i64 = redis::cmd("DBSIZE")
                    .query_async(&mut server.connection().await)
                    .await
                    .unwrap();
                assert_eq!(left, 0, "`{line}` left keys behind");
            }
            _ => panic!("no expectation for the README's line `{line}`: add one to this test"),
        }
        let _ = std::fs::remove_dir_all(&dir);
        // The next line starts from an empty store.
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut server.connection().await)
            .await
            .unwrap();
    }
}

/// What the store lacks — a read lock, a permit, a fencing token, an election, on Redlock —
/// exits 3 (`this store cannot do that`), saying which store cannot serve what, and runs
/// nothing and takes nothing; the same `run` without the flag runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_store_lacks_exits_3_and_runs_nothing() {
    use support::fixture::Fixture;
    let fixture = support::fixture::RedlockFixture::new(3);
    let url = fixture.url();
    let dir = std::env::temp_dir().join(unique("distlock-lacks"));
    std::fs::create_dir_all(&dir).unwrap();
    let ran = dir.join("ran");
    let touch = format!("touch {}", ran.display());
    for (flags, says) in [
        (&["--read"][..], "cannot serve read locks"),
        (&["--permits", "2"][..], "cannot serve semaphores"),
        (&["--fencing"][..], "cannot serve fencing tokens"),
    ] {
        let mut args = vec!["run", url.as_str(), "job:lacks"];
        args.extend_from_slice(flags);
        args.extend(["-c", touch.as_str()]);
        let refused = run(&args).await;
        assert_eq!(code(&refused), 3, "{flags:?}: {}", stderr(&refused));
        assert!(
            stderr(&refused).contains(says),
            "{flags:?}: {}",
            stderr(&refused)
        );
        assert!(!ran.exists(), "{flags:?}: COMMAND ran");
        assert!(!fixture.anything_at("lock:job:lacks").await, "{flags:?}");
    }
    let refused = run(&[
        "elect",
        &url,
        "leader:lacks",
        "--identity",
        "a",
        "-c",
        &touch,
    ])
    .await;
    assert_eq!(code(&refused), 3, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("cannot serve elections"),
        "{}",
        stderr(&refused)
    );
    assert!(!ran.exists(), "elect: COMMAND ran");
    assert!(!fixture.anything_at("lock:leader:lacks").await);
    let plain = run(&["run", &url, "job:lacks", "-c", &touch]).await;
    assert_eq!(code(&plain), 0, "{}", stderr(&plain));
    assert!(ran.exists(), "the plain run ran COMMAND");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The keys `distlock check`'s lock left on `server` (none: it gives it back).
async fn check_keys_left(server: &RedisServer) -> Vec<String> {
    let mut conn = server.connection().await;
    redis::cmd("KEYS")
        .arg("*distlock-check:*")
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// `distlock check` on a ready store: one ✔ line per check (the server and its version, the
/// round trip, what it serves, its clock, a lock taken and given back), exit 0, the same as
/// JSON, and nothing left on the server.
#[tokio::test]
async fn check_passes_on_a_ready_store_one_line_per_check() {
    let server = RedisServer::start();
    let url = server.url();
    let check = run(&["check", &url]).await;
    let text = stdout(&check);
    assert_eq!(code(&check), 0, "{text}{}", stderr(&check));
    for line in [
        "✔ server",
        "✔ round trip",
        "✔ kinds",
        "✔ identity",
        "✔ clock",
        "✔ lock",
        "every check passed",
    ] {
        assert!(text.contains(line), "no `{line}` in\n{text}");
    }
    assert!(!text.contains('✘'), "{text}");
    let json = run(&["check", &url, "--json"]).await;
    assert_eq!(code(&json), 0, "{}", stderr(&json));
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["passed"], true, "{json}");
    let checks: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    assert_eq!(
        checks,
        ["server", "round trip", "kinds", "identity", "clock", "lock"]
    );
    assert_eq!(check_keys_left(&server).await, Vec::<String>::new());
}

/// A user the server lets in and run scripts, but not write where the locks live (an ACL
/// limited to other keys): `distlock check` connects, then its lock fails — ✘ with the
/// server's NOPERM and what to do — and it exits 1.
#[tokio::test]
async fn check_fails_naming_the_fix_for_a_user_without_the_right_to_lock() {
    let server = RedisServer::start();
    let mut conn = server.connection().await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "reports",
            "on",
            ">secret",
            "~reports:*",
            "&*",
            "+@all",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = server.url().replace("redis://", "redis://reports:secret@");
    let check = run(&["check", &url]).await;
    let text = stdout(&check);
    assert_eq!(code(&check), 1, "{text}{}", stderr(&check));
    assert!(text.contains("✔ server"), "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains('✘')).collect();
    assert_eq!(failed.len(), 1, "{text}");
    assert!(
        failed[0].contains("✘ lock") && failed[0].to_lowercase().contains("noperm"),
        "{text}"
    );
    assert!(text.contains("→ "), "the fix is printed: {text}");
    assert!(
        text.contains("ACL over the lock keys"),
        "the fix is Redis's: {text}"
    );
    assert!(text.contains("1 of 6 checks failed"), "{text}");
    assert!(
        text.contains("✔ identity    logged in as `reports`"),
        "{text}"
    );
    assert!(
        !text.contains("secret"),
        "the password is never printed: {text}"
    );
    assert_eq!(check_keys_left(&server).await, Vec::<String>::new());
}

/// A PostgreSQL server whose clock is five seconds off this host's (libfaketime in the
/// server): the `clock` line fails naming the offset and what to do, and the check exits 1;
/// the lock itself still works (leases are judged by the server's clock alone).
#[tokio::test]
async fn check_names_a_server_clock_off_by_seconds() {
    let server = PostgresServer::start_with_clock_off("+5s");
    let check = run(&["check", &server.url(), "--json"]).await;
    assert_eq!(code(&check), 1, "{}", stderr(&check));
    let json: Value = serde_json::from_slice(&check.stdout).unwrap();
    let findings = json["findings"].as_array().unwrap();
    let failed: Vec<&Value> = findings.iter().filter(|f| f["passed"] == false).collect();
    assert_eq!(failed.len(), 1, "{json}");
    assert_eq!(failed[0]["check"], "clock", "{json}");
    let found = failed[0]["found"].as_str().unwrap();
    let offset: f64 = found
        .strip_prefix("the server's clock is ")
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{found}"));
    assert!((4_000.0..6_000.0).contains(&offset), "{found}");
    assert!(failed[0]["fix"].as_str().unwrap().contains("NTP"), "{json}");
    assert!(
        findings
            .iter()
            .any(|f| f["check"] == "lock" && f["passed"] == true),
        "{json}"
    );
}

/// A ZooKeeper identity without `cdr` on the chroot (a chroot anyone may only read), and an
/// etcd user whose one role covers another prefix: `distlock check` says who the client is,
/// names what is missing the store's own way — the ACL entry to add with `setAcl`, the role
/// grant to give with `etcdctl` — and exits 1.
#[tokio::test]
async fn check_names_the_zookeeper_acl_and_the_etcd_role_a_user_lacks() {
    use zookeeper_client as zk;
    let server = support::zookeeper::ZkServer::shared();
    let chroot = format!("/{}", unique("read-only"));
    let admin = zk::Client::connect(&format!("127.0.0.1:{}", server.client_port))
        .await
        .unwrap();
    admin
        .create(
            &chroot,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_read()),
        )
        .await
        .unwrap();
    let url = server.url(&chroot).replace("zk://", "zk://app:secret@");
    let check = run(&["check", &url]).await;
    let text = stdout(&check);
    assert_eq!(code(&check), 1, "{text}{}", stderr(&check));
    assert!(
        text.contains("✔ identity") && text.contains("digest:app"),
        "{text}"
    );
    let acl = text
        .lines()
        .find(|l| l.contains("✘ acl"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        acl.contains(&format!("`{chroot}` grants this identity `r`")),
        "{text}"
    );
    assert!(
        text.contains(&format!("setAcl {chroot} digest:app:<its digest>:cdrwa")),
        "the fix names the ACL entry: {text}"
    );
    assert!(text.contains("✘ lock"), "{text}");
    assert!(
        !text.contains("secret"),
        "the password is never printed: {text}"
    );
    // Nothing made under the chroot (the clock's node could not be made either).
    assert_eq!(
        admin.list_children(&chroot).await.unwrap(),
        Vec::<String>::new()
    );

    let member = support::etcd::EtcdMember::start();
    member.enable_auth_granting("app", "app-pw", Some("other/"));
    let url = format!("etcd://app:app-pw@127.0.0.1:{}/locks", member.client_port);
    let check = run(&["check", &url]).await;
    let text = stdout(&check);
    assert_eq!(code(&check), 1, "{text}{}", stderr(&check));
    assert!(text.contains("✔ identity    logged in as `app`"), "{text}");
    let role = text
        .lines()
        .find(|l| l.contains("✘ role"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        role.contains("`app` may not read or write every key under `locks/`")
            && role.contains("app-role: readwrite [`other/`, `other0`)"),
        "{text}"
    );
    assert!(
        text.contains("etcdctl role grant-permission locks readwrite --prefix=true locks/"),
        "the fix names the grant: {text}"
    );
    assert!(
        text.contains("✔ clock") && text.contains("✘ lock"),
        "{text}"
    );
    assert!(
        !text.contains("app-pw"),
        "the password is never printed: {text}"
    );
    // The same user on the prefix its role covers: every line passes.
    let url = format!("etcd://app:app-pw@127.0.0.1:{}/other", member.client_port);
    let check = run(&["check", &url]).await;
    let text = stdout(&check);
    assert_eq!(code(&check), 0, "{text}{}", stderr(&check));
    assert!(
        text.contains("✔ role") && text.contains("may read and write every key under `other/`"),
        "{text}"
    );
}

/// A store that cannot be reached: one ✘ `connect` line naming the cause, and the exit code of
/// a backend failure (122); a URL with a password that is wrong says so, and a plain-text URL to
/// a server that speaks TLS only names the TLS form (`rediss://`, `natss://`).
#[tokio::test]
async fn check_of_a_store_it_cannot_use_is_one_connect_line() {
    let refused = run(&["check", "redis://127.0.0.1:1"]).await;
    let text = stdout(&refused);
    assert_eq!(code(&refused), 122, "{text}{}", stderr(&refused));
    assert!(
        text.contains("✘ connect") && text.contains("connection refused"),
        "{text}"
    );
    assert_eq!(stderr(&refused), "", "said once, on stdout");
    let server = RedisServer::start_with(&["--requirepass", "right"]);
    let url = server.url().replace("redis://", "redis://:wrong@");
    let wrong = run(&["check", &url, "--json"]).await;
    assert_eq!(code(&wrong), 122, "{}", stderr(&wrong));
    let json: Value = serde_json::from_slice(&wrong.stdout).unwrap();
    assert_eq!(json["passed"], false);
    let found = json["findings"][0]["found"].as_str().unwrap();
    assert!(
        found.contains("authentication failed") && !found.contains("wrong"),
        "{found}"
    );
    // A plain-text URL to a server that speaks TLS only: the line names the TLS form.
    let tls = RedisServer::start_tls();
    let plain = format!("redis://127.0.0.1:{}", tls.port());
    let output = run(&["check", &plain]).await;
    let text = stdout(&output);
    assert_ne!(code(&output), 0, "{text}");
    assert!(
        text.contains("✘ connect") && text.contains("rediss://"),
        "{text}"
    );
    let nats = support::nats::NatsServer::start_tls(false);
    let plain = format!("nats://127.0.0.1:{}", nats.port);
    let output = run(&["check", &plain]).await;
    let text = stdout(&output);
    assert_ne!(code(&output), 0, "{text}");
    assert!(
        text.contains("✘ connect") && text.contains("natss://"),
        "{text}"
    );
}

/// The rows of `distlock bench --json` against `url`, short windows; the run's stderr says what
/// it measures as it goes.
async fn bench_rows(url: &str) -> Vec<Value> {
    let output = run(&[
        "bench",
        url,
        "--seconds",
        "1",
        "--pairs",
        "20",
        "--tasks",
        "4",
        "--json",
    ])
    .await;
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let progress = stderr(&output);
    for phase in ["uncontended", "throughput", "hand-over"] {
        assert!(progress.contains(phase), "no `{phase}` in\n{progress}");
    }
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = json["rows"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 6, "{json}");
    for row in &rows {
        let distlock = row["distlock"].as_f64().unwrap();
        assert!(distlock > 0.0 && distlock.is_finite(), "{row}");
    }
    rows
}

/// `distlock bench` on Redis and on a PostgreSQL lock table: every figure measured, the
/// uncontended pairs and the throughput beside the store's raw floor of the same run (a
/// positive ratio), the hand-overs without one; the table form has the same rows; and the
/// store is left as it was (no key, no row).
#[tokio::test]
async fn bench_measures_beside_the_raw_floor_and_leaves_nothing() {
    let server = RedisServer::start();
    let rows = bench_rows(&server.url()).await;
    for row in &rows[..3] {
        assert!(row["floor"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["ratio"].as_f64().unwrap() > 0.0, "{row}");
    }
    for row in &rows[3..] {
        assert!(row["floor"].is_null(), "{row}");
    }
    let mut conn = server.connection().await;
    let left: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(left, 0, "keys left behind");
    let table = run(&[
        "bench",
        &server.url(),
        "--seconds",
        "1",
        "--pairs",
        "10",
        "--tasks",
        "2",
    ])
    .await;
    let text = stdout(&table);
    for line in [
        "uncontended acquire + release, p50",
        "throughput",
        "raw floor",
        "×",
    ] {
        assert!(text.contains(line), "no `{line}` in\n{text}");
    }

    let table_name = format!("bench_{}", std::process::id());
    let url = format!("{}?table={table_name}", PostgresServer::shared().url());
    let rows = bench_rows(&url).await;
    assert!(rows[0]["floor"].as_f64().unwrap() > 0.0, "{:?}", rows[0]);
    let admin = PostgresServer::shared().client().await;
    let left: i64 = admin
        .query_one(&format!("SELECT count(*) FROM {table_name}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "rows left behind");
}

/// `distlock bench` on MariaDB, ZooKeeper, etcd and NATS: every figure measured, and the
/// uncontended pairs and throughput beside each store's raw floor.
#[tokio::test]
async fn bench_runs_on_every_store_with_a_floor() {
    let nats = support::nats::NatsServer::start();
    let urls = [
        support::mysql::MysqlServer::shared().url(),
        support::zookeeper::ZkServer::shared().url(&format!("/{}", unique("bench"))),
        support::etcd::EtcdMember::shared().url(&unique("bench")),
        nats.url("bench"),
    ];
    for url in urls {
        let rows = bench_rows(&url).await;
        for row in &rows[..3] {
            assert!(row["floor"].as_f64().unwrap() > 0.0, "{url}: {row}");
        }
    }
}

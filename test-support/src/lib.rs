//! Test harness: real servers on free loopback ports, started and stopped by the tests.
//!
//! A missing server binary fails the test with a message naming the README's test command;
//! it is never skipped.
//!
//! A crate of the workspace (`publish = false`), compiled once and shared by the integration
//! tests (`tests/it`, one binary with a module per area, and the few binaries that need a
//! process of their own), the CLI's tests and the benchmark.

// A fixture's `new()` starts servers: a `Default` that does so would surprise. The harness is
// no public API, so `Result<_, ()>` ("it did not happen in time") needs no error type.
#![allow(clippy::new_without_default, clippy::result_unit_err)]

pub mod certs;
pub mod cluster;
pub mod curator;
pub mod etcd;
pub mod faults;
pub mod fenced;
pub mod fixture;
pub mod helper;
pub mod history;
pub mod mysql;
pub mod nats;
/// The NATS client the fixture uses, for tests that look at a bucket themselves.
pub use async_nats;
/// NKey pairs, for the NATS authentication tests.
pub use nkeys;
pub mod pgbouncer;
pub mod postgres;
pub mod proxy;
pub mod queue;
pub mod sentinel;
pub mod sql;
pub mod store;
pub mod unprivileged;
pub mod zookeeper;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The README's test command, named in every "binary missing" failure.
pub const TEST_COMMAND: &str = "./scripts/test.sh";

/// Spawns `command` so that its process dies with this test process, however that ends: a
/// passing run, a failed assertion, a panic that aborts, a `kill -9` of the test binary.
///
/// The child asks the kernel for `SIGKILL` when its parent goes (`PR_SET_PDEATHSIG`). The
/// kernel sends it when the *thread* that forked the child ends, and every test runs on a
/// thread of its own that ends with the test, so all children are forked by one spawner thread
/// that lives as long as the process. Servers, helper copies of the test binary and the
/// examples' processes all start here; `Drop` still stops them at the end of each test.
pub fn spawn_tied(mut command: Command) -> std::io::Result<Child> {
    type Job = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and raise are async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The parent may have died between fork and prctl: then nobody would signal us.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("test-process-spawner".into())
            .spawn(move || {
                // Lives until the process exits: the parent-death signal of every child is tied
                // to this thread.
                for (mut command, reply) in queue {
                    let _ = reply.send(command.spawn());
                }
                loop {
                    std::thread::park();
                }
            })
            .expect("the process spawner thread");
        std::sync::Mutex::new(jobs)
    });
    let (reply, answer) = std::sync::mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((command, reply))
        .expect("the process spawner thread is alive");
    answer.recv().expect("the process spawner answers")
}

/// Sends `signal` to process `pid` (one the tests started). A SIGSTOP returns once every thread
/// of the process has stopped (a stop takes effect when each thread next leaves the kernel: on a
/// busy machine, a thread could otherwise still answer a request sent after this returns).
pub fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: sending a signal to a process by pid.
    let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(sent, 0, "kill({pid}, {signal})");
    if signal == libc::SIGSTOP {
        let stopped = |task: &std::path::Path| {
            std::fs::read_to_string(task.join("stat")).is_ok_and(|stat| {
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                state.starts_with('T') || state.starts_with('t')
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let threads: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|dir| dir.flatten().map(|t| t.path()).collect())
                .unwrap_or_default();
            if threads.iter().all(|t| stopped(t)) || Instant::now() > deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The process of a server the tests started (etcd, ZooKeeper, MariaDB): killed when dropped.
#[derive(Default)]
pub struct ServerChild(Option<Child>);

impl ServerChild {
    /// Starts `command` through [`spawn_tied`].
    pub fn spawn(&mut self, command: Command, what: &str) -> Result<(), String> {
        assert!(self.0.is_none(), "{what} is running already");
        self.0 = Some(spawn_tied(command).map_err(|e| format!("cannot run {what}: {e}"))?);
        Ok(())
    }

    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("the server is running").id()
    }

    /// Whether the process was started and not killed since.
    pub fn is_running(&self) -> bool {
        self.0.is_some()
    }

    /// SIGSTOP: connections stay open, nothing is answered, like a hung host.
    pub fn pause(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// SIGKILL: a crash. The server's data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until `ready` says the server serves; `Err` (the process killed) when it exits or
    /// `within` passes first.
    pub fn wait_ready(
        &mut self,
        within: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), ()> {
        let deadline = Instant::now() + within;
        loop {
            if ready() {
                return Ok(());
            }
            let exited = self
                .0
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some());
            if exited || Instant::now() > deadline {
                self.kill();
                return Err(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client of `url` (a port nobody listens on) fails within its 1 s connect timeout, with an
/// error that names the backend (`says`), the URL, and that it is not reachable.
pub async fn nobody_listening_fails_within_the_connect_timeout(url: &str, says: &str) {
    let started = Instant::now();
    let e = distlock::LockClient::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(says) && e.contains(url) && e.contains("reachable"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Polls `find` until it finds something (a leader, say), for up to `within`.
pub fn poll_for<T>(within: Duration, mut find: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = find() {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `command` to completion through [`spawn_tied`] and collects its output, like
/// [`Command::output`].
pub fn output_tied(mut command: Command) -> std::io::Result<std::process::Output> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    spawn_tied(command)?.wait_with_output()
}

/// A `redis-server` process of this test's own, on a free loopback port, with persistence off.
/// Killed when dropped.
pub struct RedisServer {
    port: u16,
    password: Option<String>,
    extra: Vec<String>,
    /// TLS only (the process's [`certs::Certificates`]); the test's own connection then goes
    /// through a Unix socket.
    tls: bool,
    /// A data directory of this server's own, removed when it is dropped.
    data_dir: Option<std::path::PathBuf>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server with default settings.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`["--requirepass", "pw"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_inner(extra, false)
    }

    /// Starts a server that persists every write before answering (`appendonly yes`,
    /// `appendfsync always`) in a directory of its own, so [`restart`](Self::restart) brings
    /// its data back: the mitigation the Redis documentation gives for Redlock node restarts.
    pub fn start_persistent() -> RedisServer {
        let dir = std::env::temp_dir().join(unique("distlock-aof"));
        std::fs::create_dir_all(&dir).expect("data directory");
        let mut server = RedisServer::start_with(&[
            "--dir",
            dir.to_str().expect("utf-8 temp dir"),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]);
        server.data_dir = Some(dir);
        server
    }

    /// Starts a server that speaks TLS only on its TCP port, with the process's test
    /// certificates ([`certs::Certificates`]); client certificates are checked when given,
    /// not required.
    pub fn start_tls() -> RedisServer {
        RedisServer::start_tls_with(&["--tls-auth-clients", "optional"])
    }

    /// [`start_tls`](Self::start_tls) with extra arguments (`["--tls-auth-clients", "yes"]`
    /// requires a client certificate: mutual TLS).
    pub fn start_tls_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_inner(extra, true)
    }

    /// Starts a server, trying a few free ports (one can be taken between picking and binding).
    fn start_inner(extra: &[&str], tls: bool) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let password = extra
            .iter()
            .position(|a| a == "--requirepass")
            .and_then(|i| extra.get(i + 1).cloned());
        let mut last_error = String::new();
        for _ in 0..5 {
            let mut server = RedisServer {
                port: free_port(),
                password: password.clone(),
                extra: extra.clone(),
                tls,
                data_dir: None,
                child: None,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new(redis_server_binary());
        if self.tls {
            let certs = certs::Certificates::shared();
            command
                .args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(&certs.server_cert)
                .arg("--tls-key-file")
                .arg(&certs.server_key)
                .arg("--tls-ca-cert-file")
                .arg(&certs.ca)
                .arg("--unixsocket")
                .arg(self.socket());
        } else {
            command.arg("--port").arg(self.port.to_string());
        }
        // A replica's full sync writes an RDB file even with `--save ''`, and a server loads
        // the one in its directory at start: each server has a file name of its own, removed
        // before it starts (a restart comes back empty) and when it is dropped.
        if self.data_dir.is_none() {
            let _ = std::fs::remove_file(self.rdb_file());
        }
        command
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(std::env::temp_dir())
            .arg("--dbfilename")
            .arg(format!("distlock-{}.rdb", self.port))
            .args(["--loglevel", "warning"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = match spawn_tied(command) {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed (not found on PATH). Run the README's test \
                 command, `{TEST_COMMAND}`, which installs it from Debian packages, or install \
                 it yourself (apt-get install redis-server); set REDIS_SERVER to use another binary."
            ),
            Err(error) => return Err(format!("spawning redis-server failed: {error}")),
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "redis-server exited at start with {status} (port {} taken?)",
                    self.port
                ));
            }
            if self.answers_ping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err("redis-server did not answer PING within 10 s".into())
    }

    /// The Unix socket of a TLS server, for the test's own connection.
    fn socket(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("distlock-redis-{}.sock", self.port))
    }

    /// Where a replica's full sync leaves its RDB file (see `spawn`).
    fn rdb_file(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("distlock-{}.rdb", self.port))
    }

    /// Whether `reply` to a PING says the server is up and serving: +PONG, or -NOAUTH when a
    /// password is set. Not -LOADING: a persistent server restarted accepts connections while
    /// it still loads its data, and answers every command with that error until done. (Anything
    /// else — our own PING echoed by a socket connected to itself — is not a server.)
    fn answers_ping(&self) -> bool {
        fn up(reply: &[u8]) -> bool {
            matches!(reply.first(), Some(b'+' | b'-')) && !reply.starts_with(b"-LOADING")
        }
        if self.tls {
            // The TLS port would not answer a plain-text PING: ask through the Unix socket.
            let Ok(mut stream) = std::os::unix::net::UnixStream::connect(self.socket()) else {
                return false;
            };
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut reply = [0u8; 64];
            return stream.write_all(b"PING\r\n").is_ok()
                && matches!(stream.read(&mut reply), Ok(n) if up(&reply[..n]));
        }
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 64];
        matches!(stream.read(&mut reply), Ok(n) if up(&reply[..n]))
    }

    /// One server for all the tests of this binary, stopped when the test process exits (no
    /// `Drop` reaches a static: the parent-death signal of [`spawn_tied`] does it).
    pub fn shared() -> &'static RedisServer {
        static SHARED: std::sync::OnceLock<RedisServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(RedisServer::start)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// `redis://[:password@]127.0.0.1:port`; with TLS `rediss://…/?cacert=<the test CA>`.
    pub fn url(&self) -> String {
        if self.tls {
            let ca = &certs::Certificates::shared().ca;
            return match &self.password {
                Some(password) => format!(
                    "rediss://:{password}@127.0.0.1:{}/?cacert={}",
                    self.port,
                    ca.display()
                ),
                None => format!("rediss://127.0.0.1:{}/?cacert={}", self.port, ca.display()),
            };
        }
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// Kills the server (SIGKILL: no clean shutdown, like a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process is up (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Stops the process (SIGSTOP): connections stay open, nothing is answered, like a long GC
    /// pause or a hung host.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("server is running");
        crate::signal(child.id(), signal);
    }

    /// Starts the server again on the same port: empty, unless it was started with
    /// persistence ([`start_persistent`](Self::start_persistent)).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(error) if Instant::now() > deadline => panic!("restart failed: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The URL of the test's own connections: [`url`](Self::url), or for a TLS server its
    /// Unix socket (plain).
    pub fn local_url(&self) -> String {
        if !self.tls {
            return self.url();
        }
        match &self.password {
            Some(password) => format!("redis+unix://{}?pass={password}", self.socket().display()),
            None => format!("redis+unix://{}", self.socket().display()),
        }
    }

    /// A fresh connection of the test's own, to look at what the server holds.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.local_url())
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("the test's own connection to redis-server")
    }

    /// The string value at `key`, read with the test's own connection.
    pub async fn get(&self, key: &str) -> Option<String> {
        let mut conn = self.connection().await;
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("GET")
    }

    /// How many times `command` (lowercase, e.g. `set`, `evalsha`) ran since the last reset,
    /// from `INFO commandstats`.
    pub async fn command_calls(&self, command: &str) -> u64 {
        self.commands_calls(&[command]).await
    }

    /// The calls of all of `commands` together, from one `INFO commandstats`.
    pub async fn commands_calls(&self, commands: &[&str]) -> u64 {
        let mut conn = self.connection().await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO commandstats");
        commands
            .iter()
            .filter_map(|command| {
                let prefix = format!("cmdstat_{command}:calls=");
                info.lines()
                    .find_map(|line| line.strip_prefix(&prefix))
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .sum()
    }

    /// Clears `INFO commandstats`.
    pub async fn reset_stats(&self) {
        let mut conn = self.connection().await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .expect("CONFIG RESETSTAT");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if self.data_dir.is_none() {
            let _ = std::fs::remove_file(self.rdb_file());
        }
        if let Some(dir) = &self.data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        if self.tls {
            let _ = std::fs::remove_file(self.socket());
        }
    }
}

fn redis_server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// A loopback port nobody listens on right now, for a server to bind.
///
/// Picked below the kernel's ephemeral range (32768–60999 on Linux), from 10000–21999, so
/// that the many outgoing connections of a test run cannot take it between this check and the
/// server's bind (which made a server fail to start, or a test connect to nothing). The port
/// 10000 above it — a cluster node's bus port — is checked free too.
pub fn free_port() -> u16 {
    // Never the same port twice in one test binary: two servers started at once by parallel
    // tests could otherwise both be handed a port that is free until the first binds it.
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    for _ in 0..1000 {
        let port = fastrand::u16(10_000..22_000);
        let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if !handed_out.contains(&port) && free(port) && free(port + 10_000) {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free loopback port between 10000 and 22000")
}

/// A name no other test in this process uses.
///
/// Scratch directories are named by it (`<label>-<pid>-<n>`): the first call also removes those
/// left by test processes that no longer run (see [`sweep_stale_scratch`]).
pub fn unique(label: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(sweep_stale_scratch);
    format!(
        "{label}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// How far a store's clock may run from this process's over `span`: 1 % of it and 2 ms, the
/// margin distlock itself leaves for it (`backend::drift` in lock-runtime). A server judges
/// expiry by its wall clock, the tests measure on `CLOCK_MONOTONIC`, and a virtual machine's
/// wall clock is slewed (seen here: 0.5 % fast over 10 s), so a bound that compares the two
/// allows this much.
pub fn clock_drift(span: Duration) -> Duration {
    span / 100 + Duration::from_millis(2)
}

/// Polls `check` every 5 ms until it is true or `within` has passed; returns whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Removes the scratch directories (`distlock-…-<pid>-<n>`, in the temporary directory and in
/// `/dev/shm`) of test processes that no longer run. A test process stopped by `kill -9` (a
/// time limit, a hung run killed by hand) never reaches its clean-up: its servers die with it
/// (parent-death signal), but a PostgreSQL or MariaDB data directory (up to 600 MB) and etcd's
/// in-memory one stayed behind, run after run. A directory of a live process (this one's
/// included), or one whose name does not end in a pid, is left alone.
pub fn sweep_stale_scratch() {
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    for base in [std::env::temp_dir(), std::path::PathBuf::from("/dev/shm")] {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("distlock-") {
                continue;
            }
            let mut tail = name.rsplitn(3, '-');
            let (Some(n), Some(pid), Some(_label)) = (tail.next(), tail.next(), tail.next()) else {
                continue;
            };
            let (Ok(_), Ok(pid)) = (n.parse::<u64>(), pid.parse::<u32>()) else {
                continue;
            };
            if !alive(pid) && entry.path().is_dir() {
                // As at exit: a server process left working in it goes first.
                unprivileged::kill_processes_in(&entry.path());
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// This host's time of day, `HH:MM:SS.mmm UTC`, to set beside a server log's timestamps in a
/// failure's report.
pub fn wall_clock() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
        % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1_000 % 60,
        ms % 1_000
    )
}

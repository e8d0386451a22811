//! Apache Curator (Java) as a peer of the interop tests: `peers/CuratorLock.java`, compiled
//! with `javac` on first use against Debian's `libcurator-recipes-java` (which
//! `./scripts/test.sh` installs), run in a JVM of its own — Curator's `InterProcessMutex` on a
//! ZooKeeper path, the lock distlock's plain lock on ZooKeeper shares.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::TEST_COMMAND;

/// The jars Curator 5 and its ZooKeeper client need (Debian's names, `/usr/share/java`).
const JARS: &[&str] = &[
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
];

fn classpath() -> String {
    let mut paths = Vec::new();
    for jar in JARS {
        let path = Path::new("/usr/share/java").join(format!("{jar}.jar"));
        assert!(
            path.exists(),
            "{} is missing: the Curator peer needs Debian's libcurator-recipes-java; run \
             {TEST_COMMAND} (it installs it)",
            path.display()
        );
        paths.push(path.display().to_string());
    }
    paths.join(":")
}

/// `CuratorLock.class`'s directory, compiled once per source change (and looked at once per
/// process). Each test process compiles into a directory of its own and renames it into
/// place, so concurrent first uses never see a half-written class.
fn compiled(classpath: &str) -> PathBuf {
    static COMPILED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COMPILED.get_or_init(|| compile(classpath)).clone()
}

fn compile(classpath: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/CuratorLock.java");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers/curator-lock");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let class = out.join("CuratorLock.class");
    if modified(&class).is_some() && modified(&class) >= modified(&source) {
        return out;
    }
    let scratch = out.with_extension(format!("{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let status = std::process::Command::new("javac")
        .arg("-cp")
        .arg(classpath)
        .arg("-d")
        .arg(&scratch)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run javac ({e}): install a JDK by running {TEST_COMMAND}")
        });
    assert!(status.success(), "javac {} failed", source.display());
    let _ = std::fs::remove_dir_all(&out);
    if std::fs::rename(&scratch, &out).is_err() {
        // Another test process put its copy in place first.
        let _ = std::fs::remove_dir_all(&scratch);
    }
    out
}

/// `java … CuratorLock <connect> <session ms> <path> <args…>`.
fn command(connect: &str, session: Duration, path: &str, args: &[&str]) -> Command {
    let classpath = classpath();
    let classes = compiled(&classpath);
    let mut command = Command::new("java");
    command
        .arg("-cp")
        .arg(format!("{classpath}:{}", classes.display()))
        .arg("CuratorLock")
        .arg(connect)
        .arg(session.as_millis().to_string())
        .arg(path)
        .args(args)
        .kill_on_drop(true);
    command
}

/// A Curator process that takes `InterProcessMutex` on a path and holds it until told.
pub struct CuratorHold {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl CuratorHold {
    /// Starts it: it asks for the lock at once and waits as long as it takes.
    pub fn start(connect: &str, session: Duration, path: &str) -> CuratorHold {
        CuratorHold::start_side(connect, session, path, Side::Mutex)
    }

    /// [`start`](Self::start) with `InterProcessMutex` or a side of
    /// `InterProcessReadWriteLock`.
    pub fn start_side(connect: &str, session: Duration, path: &str, side: Side) -> CuratorHold {
        let mode = format!("{}hold", side.prefix());
        let mut child = command(connect, session, path, &[&mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run java ({e}): run {TEST_COMMAND}"));
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        CuratorHold {
            child,
            stdin,
            lines,
        }
    }

    /// Waits up to `within` for Curator to hold the lock: its lock node's name, or `None`.
    pub async fn acquired(&mut self, within: Duration) -> Option<String> {
        match tokio::time::timeout(within, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Some(
                line.strip_prefix("ACQUIRED ")
                    .unwrap_or_else(|| panic!("Curator said {line:?}"))
                    .to_owned(),
            ),
            Ok(other) => panic!("the Curator peer ended: {other:?}"),
            Err(_) => None,
        }
    }

    /// Tells it to release, and waits until it did: when (by this process's clock).
    pub async fn release(&mut self) -> Instant {
        let mut stdin = self.stdin.take().expect("released once");
        stdin.write_all(b"release\n").await.unwrap();
        stdin.flush().await.unwrap();
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("Curator released within 30 s")
            .unwrap();
        assert_eq!(line.as_deref(), Some("RELEASED"));
        let released = Instant::now();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        released
    }

    /// Kills the JVM with SIGKILL: its session ends only when ZooKeeper times it out.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Which of Curator's locks a peer takes on its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `InterProcessMutex`.
    Mutex,
    /// `InterProcessReadWriteLock`'s read lock.
    Read,
    /// `InterProcessReadWriteLock`'s write lock.
    Write,
}

impl Side {
    fn prefix(self) -> &'static str {
        match self {
            Side::Mutex => "",
            Side::Read => "read-",
            Side::Write => "write-",
        }
    }
}

/// `n` read-pause-write increments of the number in `file`, each under Curator's mutex (or
/// write lock) on `path`: the running JVM (wait for it with `wait_with_output`).
pub fn increments(
    connect: &str,
    session: Duration,
    path: &str,
    side: Side,
    file: &Path,
    n: u32,
) -> Child {
    let mode = format!("{}increment", side.prefix());
    command(
        connect,
        session,
        path,
        &[&mode, &file.display().to_string(), &n.to_string()],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap_or_else(|e| panic!("cannot run java ({e}): run {TEST_COMMAND}"))
}

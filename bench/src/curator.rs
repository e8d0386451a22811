//! Row 9's peer: Apache Curator's `InterProcessMutex` — the ZooKeeper lock recipe distlock
//! implements — in a JVM of its own (`bench/peers/java/CuratorPeer.java`, compiled with `javac`
//! into `target/peers/java` on first use, against Debian's `libcurator-recipes-java`, which
//! `./scripts/test.sh` installs). The JVM times its own calls, so neither its start-up nor the
//! pipe to the bench is measured; the bench drives it one command at a time over stdin/stdout.

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::Error;
use crate::sql::Peer;

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
    "netty-handler",
    "netty-transport",
    "netty-common",
    "netty-buffer",
    "netty-resolver",
    "netty-codec",
    "netty-transport-native-epoll",
    "netty-transport-native-unix-common",
];

/// A running `CuratorPeer` JVM.
pub struct Curator {
    child: Child,
    io: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
}

fn classpath() -> Result<String, Error> {
    let mut paths = Vec::new();
    for jar in JARS {
        let path = Path::new("/usr/share/java").join(format!("{jar}.jar"));
        if !path.exists() {
            return Err(format!(
                "{} is missing: the Curator peer needs Debian's libcurator-recipes-java \
                 (./scripts/test.sh installs it: `apt-get install libcurator-recipes-java`)",
                path.display()
            )
            .into());
        }
        paths.push(path.display().to_string());
    }
    Ok(paths.join(":"))
}

/// Compiles `CuratorPeer.java` into `target/peers/java` unless its class is newer.
fn compiled(classpath: &str) -> Result<PathBuf, Error> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/java/CuratorPeer.java");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers/java");
    let class = out.join("CuratorPeer.class");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&class).is_some() && modified(&class) >= modified(&source) {
        return Ok(out);
    }
    std::fs::create_dir_all(&out)?;
    let status = std::process::Command::new("javac")
        .arg("-cp")
        .arg(classpath)
        .arg("-d")
        .arg(&out)
        .arg(&source)
        .status()
        .map_err(|e| format!("cannot run javac ({e}): install a JDK (default-jdk-headless)"))?;
    if !status.success() {
        return Err(format!("javac {} failed", source.display()).into());
    }
    Ok(out)
}

impl Curator {
    /// Starts the JVM against the ZooKeeper at `hosts` and warms its JIT up.
    pub async fn start(hosts: &str) -> Result<Curator, Error> {
        let classpath = classpath()?;
        let classes = compiled(&classpath)?;
        let mut child = Command::new("java")
            .arg("-cp")
            .arg(format!("{classpath}:{}", classes.display()))
            .arg("CuratorPeer")
            .arg(hosts)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run java ({e})"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let curator = Curator {
            child,
            io: Mutex::new((stdin, stdout)),
        };
        // The JIT compiles the hot paths after some thousands of calls.
        for round in 0..3 {
            curator
                .sequential(&format!("warm:{round}:"), 1000, false)
                .await?;
            curator.sequential("warm", 1000, true).await?;
        }
        curator
            .throughput("warm:tp:", Duration::from_secs(1))
            .await?;
        Ok(curator)
    }

    /// Sends one command, returns its answer's words. (Blocks this worker thread while the JVM
    /// works: nothing else of the bench runs meanwhile.)
    async fn ask(&self, command: String) -> Result<Vec<f64>, Error> {
        let line = tokio::task::block_in_place(|| {
            let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
            let (stdin, stdout) = &mut *io;
            stdin.write_all(format!("{command}\n").as_bytes())?;
            stdin.flush()?;
            stdout
                .next()
                .ok_or("the Curator peer exited (its error is above)")?
                .map_err(Error::from)
        })?;
        line.split_whitespace()
            .map(|w| {
                w.parse()
                    .map_err(|_| format!("the Curator peer answered `{line}`").into())
            })
            .collect()
    }

    /// 4 clients (sessions) × 4 threads on one key for `window`: grants per second, and the
    /// p50 / p99 of the gaps from one client's release to another's grant.
    pub async fn handoff(&self, key: &str, window: Duration) -> Result<(f64, f64, f64), Error> {
        match self
            .ask(format!("handoff {key} {}", window.as_millis()))
            .await?[..]
        {
            [rate, p50, p99] => Ok((rate, p50, p99)),
            _ => Err("the Curator peer's handoff answer is not three numbers".into()),
        }
    }
}

impl Drop for Curator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer for Curator {
    async fn sequential(&self, prefix: &str, calls: u64, reused: bool) -> Result<f64, Error> {
        let answer = self
            .ask(format!("seq {prefix} {calls} {}", u8::from(reused)))
            .await?;
        answer.first().copied().ok_or_else(|| "no answer".into())
    }

    async fn throughput(&self, prefix: &str, window: Duration) -> Result<f64, Error> {
        let answer = self
            .ask(format!("tp {prefix} {}", window.as_millis()))
            .await?;
        answer.first().copied().ok_or_else(|| "no answer".into())
    }
}

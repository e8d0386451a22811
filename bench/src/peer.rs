//! A peer library in a process of its own (a JVM, or the peers' Rust binary), driven one
//! command per line over stdin/stdout — the protocol of `bench/peers/java/CuratorPeer.java`
//! and `bench/peers/src/lines.rs`. The peer times its own calls, so neither its start-up nor
//! the pipe is measured.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::Error;
use crate::sql::Peer;

/// A running peer process.
pub struct LinePeer {
    name: &'static str,
    child: Child,
    io: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
}

impl LinePeer {
    /// Starts `command` (its stdin and stdout become the protocol's) and warms it up: a JIT
    /// compiles the hot paths after some thousands of calls, a pool fills its connections.
    pub async fn start(name: &'static str, mut command: Command) -> Result<LinePeer, Error> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the {name} peer ({e})"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let peer = LinePeer {
            name,
            child,
            io: Mutex::new((stdin, stdout)),
        };
        for round in 0..3 {
            peer.sequential(&format!("warm:{round}:"), 1000, false)
                .await?;
            peer.sequential("warm", 1000, true).await?;
        }
        peer.throughput("warm:tp:", Duration::from_secs(1)).await?;
        Ok(peer)
    }

    /// The peer's name, for the rows.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Sends one command, returns its answer's words. (Blocks this worker thread while the
    /// peer works: nothing else of the bench runs meanwhile.)
    async fn ask(&self, command: String) -> Result<Vec<f64>, Error> {
        let line = tokio::task::block_in_place(|| {
            let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
            let (stdin, stdout) = &mut *io;
            stdin.write_all(format!("{command}\n").as_bytes())?;
            stdin.flush()?;
            stdout
                .next()
                .ok_or_else(|| format!("the {} peer exited (its error is above)", self.name))?
                .map_err(Error::from)
        })?;
        line.split_whitespace()
            .map(|w| {
                w.parse()
                    .map_err(|_| format!("the {} peer answered `{line}`", self.name).into())
            })
            .collect()
    }

    /// 4 clients × 4 tasks (threads) on one key for `window`: grants per second, and the
    /// p50 / p99 of the gaps from one client's release to another's grant, in µs.
    pub async fn handoff(&self, key: &str, window: Duration) -> Result<(f64, f64, f64), Error> {
        match self
            .ask(format!("handoff {key} {}", window.as_millis()))
            .await?[..]
        {
            [rate, p50, p99] => Ok((rate, p50, p99)),
            _ => Err(format!(
                "the {} peer's handoff answer is not three numbers",
                self.name
            )
            .into()),
        }
    }
}

impl Drop for LinePeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer for LinePeer {
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

    fn pid(&self) -> Option<u32> {
        Some(self.child.id())
    }
}

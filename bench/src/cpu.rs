//! CPU per pair on both sides of a throughput row: the client's process (the bench itself, or
//! a peer's process and its children) and the servers' (every other process the bench started,
//! with their children: PostgreSQL's backends, say). On two shared cores a throughput row
//! follows the CPU a pair costs everyone, so these say where a ratio comes from — rates alone
//! cannot tell the client's work from the server's.
//!
//! Read around each window from `/proc/<pid>/task/<tid>/schedstat` (each thread's time on a
//! CPU, in nanoseconds), or where the kernel has no schedstat from `/proc/<pid>/stat` (user +
//! system time in clock ticks, which truncates each process to 10 ms: with 64 PostgreSQL
//! backends, up to ±0.6 s a window). Per-pair figures are medians over a row's windows. A
//! process or thread that ends inside a window takes its time with it (a connection closed
//! meanwhile).

use std::collections::HashMap;
use std::time::Duration;

/// CPU used so far by each process of the bench's tree, split in two.
#[derive(Clone, Default)]
pub struct Sample {
    /// The client: the bench process (`peer: None`) or the peer process's tree.
    client: HashMap<u32, Duration>,
    /// Every other process the bench started, and their children.
    servers: HashMap<u32, Duration>,
}

/// Per-process user + system time, and parents, of every process now running.
fn processes() -> HashMap<u32, (u32, Duration)> {
    let tick = Duration::from_secs(1) / clock_ticks();
    let precise = std::fs::metadata("/proc/self/schedstat").is_ok();
    let mut all = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's name (in parentheses, possibly with spaces): state, ppid, …,
        // utime (14th field of the line), stime (15th).
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        if let (Some(ppid), Some(user), Some(system)) = (number(1), number(11), number(12)) {
            let used = match precise {
                true => on_cpu(pid),
                false => None,
            };
            all.insert(
                pid,
                (ppid as u32, used.unwrap_or(tick * (user + system) as u32)),
            );
        }
    }
    all
}

/// The time `pid`'s threads have run on a CPU, from their `schedstat` (its first field, in
/// nanoseconds).
fn on_cpu(pid: u32) -> Option<Duration> {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        // A thread that ended between the listing and the read counts nothing.
        if let Some(ns) = stat.split_whitespace().next().and_then(|f| f.parse().ok()) {
            total += Duration::from_nanos(ns);
        }
    }
    Some(total)
}

fn clock_ticks() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as u32 } else { 100 }
}

/// Whether `pid` is `root` or one of its descendants.
fn under(all: &HashMap<u32, (u32, Duration)>, mut pid: u32, root: u32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        match all.get(&pid) {
            Some(&(parent, _)) if parent != pid && parent != 0 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// CPU so far of the client (`peer`'s process tree, or the bench's own process) and of every
/// other process under the bench.
pub fn sample(peer: Option<u32>) -> Sample {
    let all = processes();
    let me = std::process::id();
    let mut sample = Sample::default();
    for (&pid, &(_, used)) in &all {
        if pid == me {
            if peer.is_none() {
                sample.client.insert(pid, used);
            }
        } else if peer.is_some_and(|peer| under(&all, pid, peer)) {
            sample.client.insert(pid, used);
        } else if under(&all, pid, me) {
            sample.servers.insert(pid, used);
        }
    }
    sample
}

impl Sample {
    /// µs of CPU per pair on each side between `self` and `later`, for `pairs` pairs: process
    /// by process, so that one that ended in between (an autovacuum worker, a closed
    /// connection) takes only its own time with it, and one that started in between counts
    /// whole.
    pub fn per_pair(&self, later: &Sample, pairs: f64) -> (f64, f64) {
        let us = |from: &HashMap<u32, Duration>, to: &HashMap<u32, Duration>| {
            let spent: Duration = to
                .iter()
                .map(|(pid, now)| now.saturating_sub(from.get(pid).copied().unwrap_or_default()))
                .sum();
            spent.as_secs_f64() * 1e6
        };
        let pairs = pairs.max(1.0);
        (
            us(&self.client, &later.client) / pairs,
            us(&self.servers, &later.servers) / pairs,
        )
    }
}

//! `distlock run [URL] KEY [options] -- COMMAND ARGS…`: a cluster-wide `flock(1)`; and
//! `distlock elect [URL] NAME --identity ID -- COMMAND ARGS…`, the same while leading an
//! election.
//!
//! The lock is taken first (COMMAND never starts without it), then COMMAND runs in a process
//! group of its own while the lock's watchdog renews it. Whatever ends the run — COMMAND
//! exiting, a signal, the lock lost — the lock is given back (or was not ours any more) before
//! this process exits, and COMMAND and everything it started has exited.

use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use std::future::{Future, IntoFuture};

use distlock_runtime::{Leadership, LockClient, LockError, LockGuard};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::exit::{BACKEND, BUSY, CANNOT_RUN, LOST, NOT_FOUND, SIGNALLED};
use crate::format::duration;
use crate::{
    Cli, Command, Failure, Wait, connect_as, election_of, holder_of, key_of, signal_name,
    url_and_rest,
};

/// `distlock run --help`'s and `distlock elect --help`'s epilogue: the exit codes (one table
/// for every command), and what signals do.
pub(crate) const AFTER_HELP: &str = concat!(
    crate::exit_table!(),
    "

Signals: SIGINT, SIGTERM and SIGHUP are passed on to COMMAND's process group; the lock is
released once COMMAND has exited. A signal while waiting for the lock stops the wait
(exit 128 + N, COMMAND not started).

The URL is the first argument when it contains `://`; otherwise --url, then DISTLOCK_URL."
);

/// How a run ended: an exit code and, unless COMMAND's own status, what to say on stderr.
struct Ended {
    code: u8,
    message: Option<String>,
}

impl Ended {
    fn with(code: u8, message: String) -> Ended {
        Ended {
            code,
            message: Some(message),
        }
    }
}

/// `distlock run`'s and `distlock elect`'s `main` (exit codes: [`crate::EXIT_CODES`]).
pub(crate) fn main(cli: Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("distlock run: cannot start the async runtime: {e}");
            return ExitCode::from(BACKEND);
        }
    };
    let what = match cli.command {
        Command::Elect { .. } => "elect",
        _ => "run",
    };
    let ended = runtime.block_on(run(&cli));
    // The runtime goes before the process exits: a lock kept for its `min_hold` on a backend
    // whose locks live on a session is left to expire, not closed (see `LockRequest::min_hold`).
    drop(runtime);
    if let Some(message) = ended.message {
        eprintln!("distlock {what}: {message}");
    }
    ExitCode::from(ended.code)
}

/// The run's setup errors, with their exit codes (usage 2, an unusable backend 3, …).
fn setup_failed(failure: Failure) -> Ended {
    Ended::with(failure.code(), failure.message().to_owned())
}

/// What to start: `sh -c STRING` for `-c STRING`, else COMMAND and its arguments.
fn argv(shell: Option<&String>, command: &[String]) -> Vec<String> {
    match shell {
        Some(string) => vec!["sh".to_owned(), "-c".to_owned(), string.clone()],
        None => command.to_vec(),
    }
}

/// What COMMAND runs under: a lock, or leadership of an election.
trait Held {
    /// Resolves when it is lost.
    fn lost(&self) -> impl Future<Output = ()> + Send + 'static;
    /// Gives it back (`Lost` if it was not held any more).
    fn give_back(self) -> impl Future<Output = Result<(), LockError>>;
}

impl Held for LockGuard {
    fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        LockGuard::lost(self)
    }
    fn give_back(self) -> impl Future<Output = Result<(), LockError>> {
        self.release()
    }
}

impl Held for Leadership {
    fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        Leadership::lost(self)
    }
    fn give_back(self) -> impl Future<Output = Result<(), LockError>> {
        self.resign()
    }
}

async fn run(cli: &Cli) -> Ended {
    if let Command::Elect { .. } = &cli.command {
        return elect(cli).await;
    }
    let Command::Run {
        args,
        command,
        shell,
        lease,
        wait,
        min_hold,
        max_hold,
        lock_delay,
        read,
        permits,
        grace,
        fencing,
    } = &cli.command
    else {
        unreachable!("called for `distlock run` only");
    };
    // Checked before connecting: a usage error needs no server.
    let lease = match lease_for(*lease, *min_hold, *max_hold) {
        Ok(lease) => lease,
        Err(failure) => return setup_failed(failure),
    };
    let (client, key, mut signals) = match prepare(cli, args, key_of).await {
        Ok(prepared) => prepared,
        Err(ended) => return ended,
    };
    let wait = wait.wait();
    let min_hold = min_hold.unwrap_or_default();
    // A semaphore's request is a type of its own; both give the same boxed future.
    let acquisition = match permits {
        Some(n) => {
            let request = client.semaphore(key.as_str(), *n);
            let request = match wait {
                Wait::Forever => request.wait_forever(),
                Wait::Up(wait) => request.wait(wait),
            };
            let request = request.lease(lease).fencing(*fencing).min_hold(min_hold);
            let request = match max_hold {
                Some(max_hold) => request.max_hold(*max_hold),
                None => request,
            };
            let request = match lock_delay {
                Some(delay) => request.lock_delay(*delay),
                None => request,
            };
            request.into_future()
        }
        None => {
            let request = client.lock(key.as_str());
            let request = if *read { request.read() } else { request };
            let request = wait.apply(request).lease(lease).fencing(*fencing);
            let request = request.min_hold(min_hold);
            let request = match max_hold {
                Some(max_hold) => request.max_hold(*max_hold),
                None => request,
            };
            let request = match lock_delay {
                Some(delay) => request.lock_delay(*delay),
                None => request,
            };
            request.into_future()
        }
    };
    let guard = tokio::select! {
        acquired = acquisition => match acquired {
            Ok(guard) => guard,
            Err(LockError::Busy { .. } | LockError::Timeout { .. }) => return busy(&client, &key, wait).await,
            Err(error) => return setup_failed(error.into()),
        },
        signal = signals.recv() => {
            return Ended::with(
                SIGNALLED + signal as u8,
                format!("{} while waiting for `{key}`: COMMAND not started", signal_name(signal)),
            );
        }
    };
    let mut env = vec![("DISTLOCK_KEY", key.clone())];
    if let Some(token) = guard.fencing_token() {
        env.push(("DISTLOCK_FENCING_TOKEN", token.to_string()));
    }
    let command = argv(shell.as_ref(), command);
    run_while_held(&command, &env, guard, &format!("`{key}`"), *grace, signals).await
}

/// Starts COMMAND (with `env`) in a process group of its own and supervises it while `held`
/// lasts; if it cannot start, gives `held` back and says why (126, or 127 if not found).
async fn run_while_held(
    command: &[String],
    env: &[(&str, String)],
    held: impl Held,
    what: &str,
    grace: Duration,
    signals: Signals,
) -> Ended {
    let mut child = tokio::process::Command::new(&command[0]);
    child
        .args(&command[1..])
        .envs(env.iter().map(|(name, value)| (*name, value)))
        .process_group(0)
        .kill_on_drop(false);
    match child.spawn() {
        Ok(child) => supervise(child, held, what, grace, signals).await,
        Err(error) => {
            let code = match error.kind() {
                std::io::ErrorKind::NotFound => NOT_FOUND,
                _ => CANNOT_RUN,
            };
            let _ = held.give_back().await;
            Ended::with(code, format!("cannot run `{}`: {error}", command[0]))
        }
    }
}

/// What `run` and `elect` start from: the client (creating a missing SQL table: they take
/// locks as the services do), the key or election name `name_of` finds after the URL, and the
/// signals, listened for from the start (a signal while waiting stops the wait).
async fn prepare(
    cli: &Cli,
    args: &[String],
    name_of: fn(&[String]) -> Result<&str, Failure>,
) -> Result<(LockClient, String, Signals), Ended> {
    let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1).map_err(setup_failed)?;
    let name = name_of(&rest).map_err(setup_failed)?.to_owned();
    let signals = Signals::listen();
    let client = connect_as(cli, &url, true).await.map_err(setup_failed)?;
    Ok((client, name, signals))
}

/// `distlock run`'s lease: `--lease` when given (it must cover `--min-hold`, which the lock
/// outlives a release by), else the client's default lease, or `--min-hold` when that is
/// longer — so `--min-hold 10m` alone just works.
///
/// With `--max-hold`, the lease must fit in it (renewal stops there): an explicit `--lease` or
/// `--min-hold` longer than `--max-hold` is a usage error, and the default lease is cut to
/// `--max-hold` — so `--max-hold 10s` alone just works too.
fn lease_for(
    lease: Option<Duration>,
    min_hold: Option<Duration>,
    max_hold: Option<Duration>,
) -> Result<Duration, Failure> {
    let chosen = lease_within(lease, min_hold)?;
    let Some(max_hold) = max_hold else {
        return Ok(chosen);
    };
    if chosen <= max_hold {
        return Ok(chosen);
    }
    match (lease, min_hold) {
        (Some(lease), _) => Err(Failure::Usage(format!(
            "--max-hold {} is shorter than --lease {}: renewal stops at --max-hold, which must \
             leave the lease to run at least once; raise --max-hold to {} or more, or shorten \
             --lease",
            duration(max_hold),
            duration(lease),
            duration(lease),
        ))),
        (None, Some(min_hold)) if min_hold > max_hold => Err(Failure::Usage(format!(
            "--min-hold {} is longer than --max-hold {}: the lock cannot be kept longer than it \
             may be held",
            duration(min_hold),
            duration(max_hold),
        ))),
        _ => Ok(max_hold),
    }
}

/// [`lease_for`] without `--max-hold`.
fn lease_within(lease: Option<Duration>, min_hold: Option<Duration>) -> Result<Duration, Failure> {
    match (lease, min_hold) {
        (Some(lease), Some(min_hold)) if min_hold > lease => Err(Failure::Usage(format!(
            "--min-hold {} is longer than --lease {}: the lock must live at least as long as it \
             is kept; raise --lease to {} or more, or leave --lease out (the lease then covers \
             --min-hold)",
            duration(min_hold),
            duration(lease),
            duration(min_hold),
        ))),
        (Some(lease), _) => Ok(lease),
        (None, min_hold) => Ok(min_hold.map_or(LockClient::DEFAULT_LEASE, |min_hold| {
            min_hold.max(LockClient::DEFAULT_LEASE)
        })),
    }
}

/// `distlock elect`: campaigns, then runs COMMAND while leading.
async fn elect(cli: &Cli) -> Ended {
    let Command::Elect {
        args,
        identity,
        command,
        shell,
        lease,
        wait,
        grace,
    } = &cli.command
    else {
        unreachable!("called for `distlock elect` only");
    };
    let (client, name, mut signals) = match prepare(cli, args, election_of).await {
        Ok(prepared) => prepared,
        Err(ended) => return ended,
    };
    let mut election = client.election(name.as_str()).lease(*lease);
    let wait = wait.wait();
    if let Wait::Up(wait) = wait {
        election = election.wait(wait);
    }
    let leadership = tokio::select! {
        campaigned = election.campaign(identity.as_str()) => match campaigned {
            Ok(leadership) => leadership,
            Err(LockError::Busy { .. } | LockError::Timeout { .. }) => {
                let leader = match election.leader().await {
                    Ok(Some(leader)) => format!("`{}` (term {})", leader.identity(), leader.term()),
                    _ => "another candidate".to_owned(),
                };
                return Ended::with(
                    BUSY,
                    format!(
                        "{leader} leads `{name}`; this candidate did not lead {}: COMMAND not \
                         started",
                        wait.missed()
                    ),
                );
            }
            Err(error) => return setup_failed(error.into()),
        },
        signal = signals.recv() => {
            return Ended::with(
                SIGNALLED + signal as u8,
                format!(
                    "{} while campaigning for `{name}`: COMMAND not started",
                    signal_name(signal)
                ),
            );
        }
    };
    let env = [
        ("DISTLOCK_ELECTION", name.clone()),
        ("DISTLOCK_IDENTITY", identity.clone()),
        ("DISTLOCK_TERM", leadership.term().to_string()),
    ];
    let what = format!("leadership of `{name}`");
    let command = argv(shell.as_ref(), command);
    run_while_held(&command, &env, leadership, &what, *grace, signals).await
}

/// The lock was busy past `wait`: who holds it, where the backend knows.
async fn busy(client: &LockClient, key: &str, wait: Wait) -> Ended {
    let holder = holder_of(client, key).await;
    Ended::with(
        BUSY,
        format!(
            "`{key}` is held by {holder}; not taken {}: COMMAND not started",
            wait.missed()
        ),
    )
}

/// Runs until COMMAND exits: passes signals on, stops it if the lock is lost, then gives the
/// lock back.
async fn supervise(
    mut child: tokio::process::Child,
    guard: impl Held,
    what: &str,
    grace: Duration,
    mut signals: Signals,
) -> Ended {
    let group = child.id().map(|pid| pid as libc::pid_t);
    let lost = guard.lost();
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            signal = signals.recv() => send(group, signal),
            () = &mut lost => {
                let message = format!(
                    "lost {what} while COMMAND ran (its lease could not be renewed in time, or \
                     it was released by force): stopped COMMAND (SIGTERM, SIGKILL after {})",
                    duration(grace)
                );
                stop(&mut child, group, grace).await;
                // Not ours any more: the release only confirms it (and leaves the new owner's
                // lock alone).
                let _ = guard.give_back().await;
                return Ended::with(LOST, message);
            }
        }
    };
    let released = guard.give_back().await;
    let status = match status {
        Ok(status) => status,
        Err(error) => {
            return Ended::with(BACKEND, format!("lost track of COMMAND: {error}"));
        }
    };
    match released {
        Ok(()) => Ended {
            code: code_of(status),
            message: None,
        },
        Err(LockError::Lost { .. }) => Ended::with(
            LOST,
            format!(
                "COMMAND exited ({status}), but {what} was no longer held at its release: its \
                 lease ran out or it was released by force while COMMAND ran"
            ),
        ),
        Err(error) => Ended::with(
            BACKEND,
            format!(
                "COMMAND exited ({status}), but giving back {what} failed: {error}; it ends \
                 with its lease"
            ),
        ),
    }
}

/// SIGTERM to the group, then SIGKILL after `grace`; returns once COMMAND has exited.
async fn stop(child: &mut tokio::process::Child, group: Option<libc::pid_t>, grace: Duration) {
    send(group, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        send(group, libc::SIGKILL);
        let _ = child.wait().await;
    }
    // Whatever else of the group outlived its leader goes too.
    send(group, libc::SIGKILL);
}

/// Sends `signal` to COMMAND's process group.
fn send(group: Option<libc::pid_t>, signal: libc::c_int) {
    if let Some(group) = group {
        // SAFETY: killpg takes plain integers; a group that is gone only returns ESRCH.
        unsafe {
            libc::killpg(group, signal);
        }
    }
}

/// COMMAND's exit status as this process's: its code, or 128 + the signal that ended it.
fn code_of(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => SIGNALLED.wrapping_add(signal as u8),
        (None, None) => BACKEND,
    }
}

/// SIGINT, SIGTERM and SIGHUP, listened for from creation on (a signal is kept until
/// received, and does not kill this process).
struct Signals(Vec<(libc::c_int, Signal)>);

impl Signals {
    fn listen() -> Signals {
        let kinds = [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
        ];
        Signals(
            kinds
                .into_iter()
                .filter_map(|(number, kind)| signal(kind).ok().map(|s| (number, s)))
                .collect(),
        )
    }

    /// The next signal that arrives.
    async fn recv(&mut self) -> libc::c_int {
        std::future::poll_fn(|cx| {
            for (number, signal) in &mut self.0 {
                if signal.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*number);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn the_lease_covers_min_hold_when_no_lease_is_given() {
        assert_eq!(
            lease_for(None, None, None).ok(),
            Some(LockClient::DEFAULT_LEASE)
        );
        assert_eq!(lease_for(None, Some(10 * MIN), None).ok(), Some(10 * MIN));
        // A short min_hold keeps the default lease.
        let short = Duration::from_secs(5);
        assert_eq!(
            lease_for(None, Some(short), None).ok(),
            Some(LockClient::DEFAULT_LEASE)
        );
        assert_eq!(lease_for(Some(MIN), Some(MIN), None).ok(), Some(MIN));
    }

    #[test]
    fn a_lease_shorter_than_min_hold_is_a_usage_error_naming_both_flags() {
        let Err(failure) = lease_for(Some(Duration::from_secs(30)), Some(10 * MIN), None) else {
            panic!("a 30 s lease under a 10 min min_hold was accepted");
        };
        assert_eq!(failure.code(), crate::exit::USAGE);
        let message = failure.message();
        assert!(message.contains("--min-hold 10m00s"), "{message}");
        assert!(message.contains("--lease 30.0s"), "{message}");
    }

    /// `--max-hold` alone cuts the default lease to fit; an explicit `--lease` or `--min-hold`
    /// longer than it is a usage error naming both flags.
    #[test]
    fn max_hold_cuts_the_default_lease_and_refuses_a_longer_one() {
        let ten = Duration::from_secs(10);
        assert_eq!(lease_for(None, None, Some(ten)).ok(), Some(ten));
        assert_eq!(
            lease_for(None, None, Some(10 * MIN)).ok(),
            Some(LockClient::DEFAULT_LEASE)
        );
        assert_eq!(lease_for(Some(ten), None, Some(ten)).ok(), Some(ten));
        let Err(failure) = lease_for(Some(MIN), None, Some(ten)) else {
            panic!("a 1 min lease under a 10 s max_hold was accepted");
        };
        assert_eq!(failure.code(), crate::exit::USAGE);
        let message = failure.message();
        assert!(message.contains("--max-hold 10.0s"), "{message}");
        assert!(message.contains("--lease 1m00s"), "{message}");
        let Err(failure) = lease_for(None, Some(MIN), Some(ten)) else {
            panic!("a 1 min min_hold under a 10 s max_hold was accepted");
        };
        let message = failure.message();
        assert!(message.contains("--min-hold 1m00s"), "{message}");
        assert!(message.contains("--max-hold 10.0s"), "{message}");
    }
}

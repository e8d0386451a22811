//! `distlock`: look at and operate the locks of services that use distlock.
//!
//! ```text
//! distlock list    [URL] [PATTERN]          held locks: key, holder, since, lease left, fencing token, waiters
//! distlock show    [URL] KEY                one lock in detail
//! distlock release [URL] KEY --force [--yes]  delete a lock whoever holds it
//! distlock hold    [URL] KEY [--for 30s]    take a lock by hand; Ctrl-C releases it
//! distlock watch   [URL] [PATTERN]          print acquisitions and releases as they happen
//! distlock ping    [URL]                    is the backend reachable from here?
//! distlock run     [URL] KEY -- COMMAND…    run COMMAND while holding the lock (a cluster-wide flock)
//! distlock elect   [URL] NAME --identity ID -- COMMAND…   run COMMAND while leading election NAME
//! distlock leader  [URL] NAME [--watch]     who leads election NAME (each change with --watch)
//! ```
//!
//! The URL is the one the services use (`redis://…`, `postgres://…`, `zk://…`, …); without it,
//! `DISTLOCK_URL` is read. See `distlock --help` for options and exit codes.

mod format;
mod run;

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use lock_runtime::{LockClient, LockError, LockInfo};

use format::{duration, info_json, since, table};

const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the backend failed or could not be reached
  2  bad usage: arguments, URL, key, or a release not confirmed
  3  this backend cannot do that (memory:// from outside its process)
  4  not held: the lock to show or release is free
  5  busy: `hold` could not take the lock within --wait
  6  lost: `hold` lost its lock (its lease ran out, or it was released by force)

The URL is the first argument when it contains `://`; otherwise --url, then DISTLOCK_URL
(both keep a password out of the command line other users can read in `ps`).";

/// Look at and operate distributed locks taken with distlock.
#[derive(Parser)]
#[command(name = "distlock", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    /// The backend URL, when the first argument is none (else DISTLOCK_URL).
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    /// Print JSON instead of tables (`watch`: one object per line).
    #[arg(long, global = true)]
    json: bool,
    /// The key prefix of the services' lock client (`LockClientBuilder::prefix`).
    #[arg(long, global = true, value_name = "PREFIX", default_value = "lock:")]
    prefix: String,
    /// Where the services keep fencing counters (`LockClientBuilder::fencing_prefix`).
    #[arg(
        long,
        global = true,
        value_name = "PREFIX",
        default_value = "lock-fence:"
    )]
    fencing_prefix: String,
    /// The SQL backends' lock table (or `?table=` in the URL).
    #[arg(long, global = true, value_name = "TABLE")]
    table: Option<String>,
    /// How long to wait for the backend to accept a connection.
    #[arg(long, global = true, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    connect_timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// The held locks whose key matches PATTERN (`*` any characters, `?` one, `\` escapes;
    /// all when omitted), with holder, age, lease left, fencing token and waiters.
    List {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the key glob
        #[arg(value_name = "URL] [PATTERN", num_args = 0..=2)]
        args: Vec<String>,
        /// At most this many locks.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// One lock in detail (exit code 4 if nobody holds it).
    Show {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the lock key
        #[arg(value_name = "URL] [KEY", num_args = 1..=2, required = true)]
        args: Vec<String>,
    },
    /// Deletes a lock whoever holds it and wakes its waiters. The holder is not asked: it
    /// learns at its next renewal that the lock is gone, and may still be inside its critical
    /// section until then. Asks for confirmation unless --yes.
    Release {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the lock key
        #[arg(value_name = "URL] [KEY", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// Required: a forced release overrides the lock's holder.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
    /// Takes a lock by hand and keeps it (renewed) until --for ends or Ctrl-C / SIGTERM, then
    /// releases it: e.g. to keep a scheduled job from running during maintenance.
    Hold {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the lock key
        #[arg(value_name = "URL] [KEY", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// How long to hold it (default: until interrupted).
        #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
        hold_for: Option<Duration>,
        /// The lease, renewed every third of it while held.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
        lease: Duration,
        /// How long to wait for a busy lock (0: fail at once, exit code 5).
        #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
        wait: Duration,
        /// Ask for a fencing token.
        #[arg(long)]
        fencing: bool,
    },
    /// Prints acquisitions and releases of the locks matching PATTERN as they happen, by
    /// comparing listings taken every --interval (a lock held for less than that may be
    /// missed). Runs until Ctrl-C or --for.
    Watch {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the key glob
        #[arg(value_name = "URL] [PATTERN", num_args = 0..=2)]
        args: Vec<String>,
        /// Time between two listings.
        #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
        interval: Duration,
        /// Stop after this long.
        #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
        watch_for: Option<Duration>,
    },
    /// Runs COMMAND while holding the lock — a cluster-wide `flock(1)`: takes KEY (waiting up
    /// to --wait), runs COMMAND in a process group of its own with the lock renewed, releases
    /// it when COMMAND exits, and exits with COMMAND's status. SIGINT, SIGTERM and SIGHUP go to
    /// COMMAND; if the lock is lost, COMMAND gets SIGTERM, then SIGKILL after --grace.
    /// COMMAND sees DISTLOCK_KEY (and DISTLOCK_FENCING_TOKEN with --fencing).
    #[command(after_help = run::EXIT_CODES)]
    Run {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the lock key
        #[arg(value_name = "URL] [KEY", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
        /// The lease, renewed every third of it while COMMAND runs (how long the lock outlives
        /// this process if it dies).
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
        lease: Duration,
        /// How long to wait for a busy lock (0: fail at once, exit code 120).
        #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
        wait: Duration,
        /// Keep the lock at least this long after it was granted, however soon COMMAND exits
        /// (a job started by cron on several hosts runs once per period even when their clocks
        /// differ). At most --lease.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        min_hold: Option<Duration>,
        /// Take a read lock: COMMAND runs beside other readers, never beside a writer.
        #[arg(long, conflicts_with = "permits")]
        read: bool,
        /// Take one permit of the semaphore KEY of N permits: up to N COMMANDs at once.
        #[arg(long, value_name = "N")]
        permits: Option<u32>,
        /// After SIGTERM to a COMMAND whose lock was lost, how long until SIGKILL.
        #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
        grace: Duration,
        /// Ask for a fencing token (passed to COMMAND as DISTLOCK_FENCING_TOKEN).
        #[arg(long)]
        fencing: bool,
    },
    /// Runs COMMAND while this process leads the election NAME: campaigns as --identity
    /// (waiting until it leads, or up to --wait), runs COMMAND in a process group of its own
    /// while the leadership's lease is renewed, resigns when COMMAND exits (the next candidate
    /// leads at once), and exits with COMMAND's status. If leadership is lost, COMMAND gets
    /// SIGTERM, then SIGKILL after --grace. COMMAND sees DISTLOCK_ELECTION, DISTLOCK_IDENTITY
    /// and DISTLOCK_TERM (the leader's fencing token, strictly rising with every leader).
    #[command(after_help = run::EXIT_CODES)]
    Elect {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the election's name
        #[arg(value_name = "URL] [NAME", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// What names this candidate to the others (`distlock leader` prints it): a host and
        /// port, a pod name.
        #[arg(long, value_name = "ID", required = true)]
        identity: String,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
        /// The leader's lease, renewed every third of it while COMMAND runs: a standby leads
        /// at most this long after this process dies.
        #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
        lease: Duration,
        /// How long to wait to lead (default: until it leads; exit code 120 when it ends).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        wait: Option<Duration>,
        /// After SIGTERM to a COMMAND whose leadership was lost, how long until SIGKILL.
        #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
        grace: Duration,
    },
    /// Who leads the election NAME: identity, term and since when (exit code 4 if nobody
    /// does); with --watch, each change as it is seen, until Ctrl-C or --for.
    Leader {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the election's name
        #[arg(value_name = "URL] [NAME", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// Print every change of leader (`--json`: one object per line).
        #[arg(long)]
        watch: bool,
        /// With --watch: how often to ask.
        #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
        interval: Duration,
        /// With --watch: stop after this long.
        #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
        watch_for: Option<Duration>,
    },
    /// Checks the backend answers: server version and one request's round trip.
    Ping {
        /// The URL (else DISTLOCK_URL)
        #[arg(value_name = "URL", num_args = 0..=1)]
        args: Vec<String>,
    },
}

/// Why the command failed, and its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    Error(String),
    Usage(String),
    Unsupported(String),
    NotHeld(String),
    Busy(String),
    Lost(String),
}

impl Failure {
    pub(crate) fn code(&self) -> u8 {
        match self {
            Failure::Error(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Unsupported(_) => 3,
            Failure::NotHeld(_) => 4,
            Failure::Busy(_) => 5,
            Failure::Lost(_) => 6,
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            Failure::Error(m)
            | Failure::Usage(m)
            | Failure::Unsupported(m)
            | Failure::NotHeld(m)
            | Failure::Busy(m)
            | Failure::Lost(m) => m,
        }
    }
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Failure {
        let message = error.to_string();
        match error {
            LockError::Config(_) | LockError::InvalidKey { .. } => Failure::Usage(message),
            LockError::Unsupported { .. } => Failure::Unsupported(message),
            LockError::Timeout { .. } => Failure::Busy(message),
            LockError::Lost { .. } => Failure::Lost(message),
            _ => Failure::Error(message),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Run { .. } | Command::Elect { .. } = cli.command {
        return run::main(cli);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("distlock: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("distlock: {}", failure.message());
            ExitCode::from(failure.code())
        }
    }
}

/// Splits `args` into the URL (the first argument if it contains `://`, else `--url`'s value
/// `flag`, else `DISTLOCK_URL`) and the rest, of which at most `max_rest` may remain.
pub(crate) fn url_and_rest(
    flag: Option<&str>,
    args: &[String],
    max_rest: usize,
) -> Result<(String, Vec<String>), Failure> {
    let (url, rest) = match args.split_first() {
        Some((first, rest)) if first.contains("://") => (first.clone(), rest.to_vec()),
        _ if flag.is_some_and(|url| !url.trim().is_empty()) => {
            (flag.unwrap_or_default().trim().to_owned(), args.to_vec())
        }
        _ => match std::env::var(lock_runtime::URL_ENV) {
            Ok(url) if !url.trim().is_empty() => (url.trim().to_owned(), args.to_vec()),
            _ => {
                return Err(Failure::Usage(format!(
                    "no backend URL: give it first (`distlock list redis://127.0.0.1:6379`), with \
                     --url, or in {} (the URL your services use)",
                    lock_runtime::URL_ENV
                )));
            }
        },
    };
    if rest.len() > max_rest {
        return Err(Failure::Usage(format!(
            "unexpected argument `{}` (the URL goes first, and must contain `://`)",
            rest[max_rest]
        )));
    }
    Ok((url, rest))
}

pub(crate) async fn connect(cli: &Cli, url: &str) -> Result<LockClient, Failure> {
    connect_as(cli, url, false).await
}

/// [`connect`], creating the SQL lock table if it is missing when `participant` (`run` and
/// `elect` take locks as the services do; looking must not create the services' tables).
pub(crate) async fn connect_as(
    cli: &Cli,
    url: &str,
    participant: bool,
) -> Result<LockClient, Failure> {
    if url.starts_with("memory:") {
        return Err(Failure::Unsupported(
            "memory:// locks live inside the process that took them; nothing outside it can \
             see them. Point distlock at the networked backend your services use (redis://, \
             postgres://, zk://, …)"
                .into(),
        ));
    }
    let mut builder = LockClient::builder(url)
        .prefix(cli.prefix.clone())
        .fencing_prefix(cli.fencing_prefix.clone())
        .connect_timeout(cli.connect_timeout)
        .create_table(participant);
    if let Some(table) = &cli.table {
        builder = builder.table(table.clone());
    }
    Ok(builder.build().await?)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    match &cli.command {
        Command::List { args, limit } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let pattern = rest.first().map_or("*", String::as_str);
            let client = connect(&cli, &url).await?;
            let locks = client.list(pattern, *limit).await?;
            if cli.json {
                let all: Vec<_> = locks.iter().map(info_json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if locks.is_empty() {
                eprintln!("no held lock matches `{pattern}` on {}", client.url());
            } else {
                print!("{}", table(&locks));
            }
            Ok(())
        }
        Command::Show { args } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let key = key_of(&rest)?;
            let client = connect(&cli, &url).await?;
            match client.inspect(key).await? {
                Some(info) if cli.json => {
                    println!("{}", info_json(&info));
                    Ok(())
                }
                Some(info) => {
                    print!("{}", details(&info));
                    Ok(())
                }
                None => Err(Failure::NotHeld(format!(
                    "nobody holds `{key}` on {}",
                    client.url()
                ))),
            }
        }
        Command::Release { args, force, yes } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let key = key_of(&rest)?;
            if !force {
                return Err(Failure::Usage(format!(
                    "refusing to release `{key}` without --force: a forced release takes the \
                     lock from a holder that may still be working under it (its work is not \
                     stopped; it learns of the loss at its next renewal)"
                )));
            }
            let client = connect(&cli, &url).await?;
            let Some(current) = client.inspect(key).await? else {
                return Err(Failure::NotHeld(format!(
                    "nobody holds `{key}` on {}: nothing to release",
                    client.url()
                )));
            };
            if !yes {
                confirm(&current)?;
            }
            match client.force_release(key).await? {
                Some(removed) if cli.json => {
                    println!("{}", info_json(&removed));
                    Ok(())
                }
                Some(removed) => {
                    println!("released `{key}`, held by {}", who(&removed));
                    Ok(())
                }
                None => Err(Failure::NotHeld(format!(
                    "`{key}` was released by its holder meanwhile: nothing removed"
                ))),
            }
        }
        Command::Hold {
            args,
            hold_for,
            lease,
            wait,
            fencing,
        } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let key = key_of(&rest)?;
            let client = connect(&cli, &url).await?;
            hold(&client, key, *hold_for, *lease, *wait, *fencing, cli.json).await
        }
        Command::Watch {
            args,
            interval,
            watch_for,
        } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let pattern = rest.first().map_or("*", String::as_str);
            if interval.is_zero() {
                return Err(Failure::Usage("--interval must be more than 0".into()));
            }
            let client = connect(&cli, &url).await?;
            watch(&client, pattern, *interval, *watch_for, cli.json).await
        }
        Command::Run { .. } | Command::Elect { .. } => {
            unreachable!("`distlock run` and `elect` have a main of their own")
        }
        Command::Leader {
            args,
            watch,
            interval,
            watch_for,
        } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let name = election_of(&rest)?;
            if interval.is_zero() {
                return Err(Failure::Usage("--interval must be more than 0".into()));
            }
            let client = connect(&cli, &url).await?;
            let election = client.election(name).poll(*interval);
            if *watch {
                return watch_leader(&election, *watch_for, cli.json).await;
            }
            match election.leader().await? {
                Some(leader) => {
                    println!("{}", leader_line(name, Some(&leader), cli.json));
                    Ok(())
                }
                None if cli.json => {
                    println!("{}", leader_line(name, None, true));
                    Err(Failure::NotHeld(format!(
                        "nobody leads `{name}` on {}",
                        client.url()
                    )))
                }
                None => Err(Failure::NotHeld(format!(
                    "nobody leads `{name}` on {}",
                    client.url()
                ))),
            }
        }
        Command::Ping { args } => {
            let (url, _) = url_and_rest(cli.url.as_deref(), args, 0)?;
            let client = connect(&cli, &url).await?;
            let info = client.ping().await?;
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "backend": info.backend,
                        "url": info.url,
                        "version": info.version,
                        "round_trip_ms": info.round_trip.as_secs_f64() * 1e3,
                    })
                );
            } else {
                println!(
                    "{} ({}): {}, round trip {}",
                    info.url,
                    info.backend,
                    info.version,
                    duration(info.round_trip)
                );
            }
            Ok(())
        }
    }
}

pub(crate) fn election_of(rest: &[String]) -> Result<&str, Failure> {
    rest.first()
        .map(String::as_str)
        .ok_or_else(|| Failure::Usage("which election? give its NAME (e.g. `reports`)".into()))
}

pub(crate) fn key_of(rest: &[String]) -> Result<&str, Failure> {
    rest.first()
        .map(String::as_str)
        .ok_or_else(|| Failure::Usage("which lock? give its KEY (e.g. `order:42`)".into()))
}

/// Who holds the busy lock `key`, where the backend can say: for a message.
pub(crate) async fn holder_of(client: &LockClient, key: &str) -> String {
    client
        .inspect(key)
        .await
        .ok()
        .flatten()
        .map_or_else(|| "another owner".to_owned(), |info| who(&info))
}

/// "web-1 pid 42 since 13:22:52 UTC (12.3s ago)", or what is known; for a read lock, how many
/// readers hold it; for a semaphore, how many of its permits are held.
pub(crate) fn who(info: &LockInfo) -> String {
    if let Some(n) = info.permits {
        return format!("{} of {n} permits, listed below", info.readers.len());
    }
    if !info.readers.is_empty() {
        return format!("{} reader(s), listed below", info.readers.len());
    }
    match &info.holder {
        Some(holder) => format!("{holder} since {}", since(holder.since)),
        None => "an unknown holder (a value distlock did not write)".to_owned(),
    }
}

fn details(info: &LockInfo) -> String {
    let none = || "-".to_owned();
    let mut out = String::new();
    let mut line = |name: &str, value: String| out.push_str(&format!("{name:<14}{value}\n"));
    line("key", info.key.clone());
    line("backend key", info.name.clone());
    line("holder", who(info));
    line(
        "lease left",
        info.ttl
            .map_or_else(|| "- (kept alive by the holder's session)".into(), duration),
    );
    line(
        "fencing token",
        info.fencing_token.map_or_else(none, |t| t.to_string()),
    );
    line(
        "waiters",
        info.waiters.map_or_else(
            || "- (not recorded by this backend)".into(),
            |w| w.to_string(),
        ),
    );
    line("owner token", info.token.clone().unwrap_or_else(none));
    for reader in &info.readers {
        let holder = reader.holder.as_ref().map_or_else(
            || "an unknown holder".to_owned(),
            |h| format!("{h} since {}", since(h.since)),
        );
        let left = reader.ttl.map_or_else(none, duration);
        let what = if info.permits.is_some() {
            "permit"
        } else {
            "reader"
        };
        line(what, format!("{holder}, lease left {left}"));
        line("  token", reader.token.clone());
    }
    out
}

/// Asks on the terminal; refuses when there is none to ask on.
fn confirm(current: &LockInfo) -> Result<(), Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::Usage(format!(
            "not releasing `{}` (held by {}): no terminal to confirm on; pass --yes",
            current.key,
            who(current)
        )));
    }
    eprint!(
        "release `{}`, held by {}? [y/N] ",
        current.key,
        who(current)
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES") {
        Ok(())
    } else {
        Err(Failure::Usage(format!("not releasing `{}`", current.key)))
    }
}

async fn hold(
    client: &LockClient,
    key: &str,
    hold_for: Option<Duration>,
    lease: Duration,
    wait: Duration,
    fencing: bool,
    json: bool,
) -> Result<(), Failure> {
    let mut interrupts = Interrupts::listen();
    let guard = match client
        .lock(key)
        .lease(lease)
        .wait(wait)
        .fencing(fencing)
        .acquire()
        .await
    {
        Ok(guard) => guard,
        Err(LockError::Timeout { .. }) => {
            let holder = holder_of(client, key).await;
            return Err(Failure::Busy(format!(
                "`{key}` is held by {holder}; not taken within {} (raise --wait)",
                duration(wait)
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let fence = guard
        .fencing_token()
        .map_or_else(String::new, |t| format!(", fencing token {t}"));
    if json {
        println!(
            "{}",
            serde_json::json!({"event": "held", "key": key, "pid": std::process::id(),
                "fencing_token": guard.fencing_token(), "lease_ms": lease.as_millis() as u64})
        );
    } else {
        let until = hold_for.map_or_else(
            || "until Ctrl-C".to_owned(),
            |d| format!("for {}", duration(d)),
        );
        println!(
            "holding `{key}` (pid {}{fence}) {until}; Ctrl-C releases it",
            std::process::id()
        );
    }
    let _ = std::io::stdout().flush();
    let deadline = async {
        match hold_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let lost = guard.lost();
    let ended = tokio::select! {
        () = deadline => "its time was up",
        () = interrupts.recv() => "interrupted",
        () = lost => {
            let message = format!(
                "lost `{key}`: its lease ran out or it was released by force; whatever relied \
                 on it is no longer protected"
            );
            if json {
                println!("{}", serde_json::json!({"event": "lost", "key": key}));
            } else {
                println!("{message}");
            }
            return Err(Failure::Lost(message));
        }
    };
    match guard.release().await {
        Ok(()) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"event": "released", "key": key, "reason": ended})
                );
            } else {
                println!("released `{key}` ({ended})");
            }
            Ok(())
        }
        Err(error) => {
            // Lost before the release found out (e.g. released by force since the last
            // renewal), or the backend failed.
            if json {
                let event = if error.is_lost() { "lost" } else { "error" };
                println!("{}", serde_json::json!({"event": event, "key": key}));
            }
            Err(error.into())
        }
    }
}

/// Ctrl-C (SIGINT) and SIGTERM, listened for from creation on: a signal that arrives before
/// anyone awaits [`Interrupts::recv`] is kept, not lost (nor does it kill the process).
struct Interrupts {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    fn listen() -> Interrupts {
        use tokio::signal::unix::{SignalKind, signal};
        Interrupts {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Ctrl-C / SIGTERM, or the end of `limit` (`--for`), whichever comes first.
    async fn or_after(&mut self, limit: Option<Duration>) {
        let end = async {
            match limit {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = end => {}
            () = self.recv() => {}
        }
    }

    async fn recv(&mut self) {
        /// One signal's next delivery; never, for a signal that could not be listened for.
        async fn next(signal: Option<&mut tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(self.interrupt.as_mut()) => {}
            () = next(self.terminate.as_mut()) => {}
        }
    }
}

async fn watch(
    client: &LockClient,
    pattern: &str,
    interval: Duration,
    watch_for: Option<Duration>,
    json: bool,
) -> Result<(), Failure> {
    const LIMIT: usize = 10_000;
    let mut interrupts = Interrupts::listen();
    let started = Instant::now();
    if !json {
        eprintln!(
            "watching `{pattern}` on {} every {} (Ctrl-C to stop)",
            client.url(),
            duration(interval)
        );
    }
    let mut known: HashMap<String, LockInfo> = HashMap::new();
    let mut first = true;
    let stop = interrupts.or_after(watch_for);
    tokio::pin!(stop);
    loop {
        let now: HashMap<String, LockInfo> = client
            .list(pattern, LIMIT)
            .await?
            .into_iter()
            .map(|info| (info.key.clone(), info))
            .collect();
        let mut events: Vec<(&str, &LockInfo)> = Vec::new();
        for (key, old) in &known {
            match now.get(key) {
                Some(new) if new.token == old.token => {}
                _ => {
                    // Gone (or taken over): by a release, unless its lease was about to end.
                    let ran_out = old.ttl.is_some_and(|ttl| ttl <= interval);
                    events.push((if ran_out { "expired" } else { "released" }, old));
                }
            }
        }
        for (key, new) in &now {
            match known.get(key) {
                Some(old) if old.token == new.token => {}
                _ => events.push((if first { "held" } else { "acquired" }, new)),
            }
        }
        events.sort_by(|a, b| (a.1.key.as_str(), a.0).cmp(&(b.1.key.as_str(), b.0)));
        for (event, info) in events {
            if json {
                let mut line = info_json(info);
                line["event"] = event.into();
                line["at_ms"] = (started.elapsed().as_millis() as u64).into();
                println!("{line}");
            } else {
                println!(
                    "{:>9}  {event:<8}  {}  {}",
                    duration(started.elapsed()),
                    info.key,
                    who(info)
                );
            }
        }
        let _ = std::io::stdout().flush();
        known = now;
        first = false;
        tokio::select! {
            () = &mut stop => return Ok(()),
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// One line of `distlock leader`: who leads `name` (`None`: nobody), as text or JSON
/// (`election`, `leader`: `identity`, `term`, `since_unix_ms`, or null).
fn leader_line(name: &str, leader: Option<&lock_runtime::Leader>, json: bool) -> String {
    if json {
        let leader = leader.map(|l| {
            serde_json::json!({
                "identity": l.identity(),
                "term": l.term(),
                "since_unix_ms": l
                    .since()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            })
        });
        return serde_json::json!({ "election": name, "leader": leader }).to_string();
    }
    match leader {
        Some(l) => format!(
            "`{}` leads `{name}`: term {}, since {}",
            l.identity(),
            l.term(),
            since(l.since())
        ),
        None => format!("nobody leads `{name}`"),
    }
}

/// `distlock leader --watch`: every change of leader until Ctrl-C or `watch_for`.
async fn watch_leader(
    election: &lock_runtime::Election,
    watch_for: Option<Duration>,
    json: bool,
) -> Result<(), Failure> {
    use futures_util::StreamExt;
    let mut interrupts = Interrupts::listen();
    let stop = interrupts.or_after(watch_for);
    tokio::pin!(stop);
    let changes = election.observe();
    tokio::pin!(changes);
    loop {
        tokio::select! {
            () = &mut stop => return Ok(()),
            change = changes.next() => match change {
                Some(Ok(leader)) => {
                    println!("{}", leader_line(election.name(), leader.as_ref(), json));
                    let _ = std::io::stdout().flush();
                }
                Some(Err(error)) => eprintln!("distlock: {error}"),
                None => return Ok(()),
            },
        }
    }
}

/// `30s`, `500ms`, `2m`, `1h`, `0`: what the options take.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let digits = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: use e.g. 500ms, 30s, 2m, 1h"))?;
    let seconds = match unit {
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => {
            return Err(format!(
                "`{text}` has no known unit: use ms, s, m or h (e.g. 30s)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").unwrap_err().contains("unit"));
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn the_url_is_the_first_argument_with_a_scheme() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (url, rest) = url_and_rest(None, &args(&["redis://h:1", "order:*"]), 1).unwrap();
        assert_eq!((url.as_str(), rest), ("redis://h:1", args(&["order:*"])));
        let e = url_and_rest(None, &args(&["redis://h:1", "a", "b"]), 1).unwrap_err();
        assert_eq!(e.code(), 2);
        // `--url` when the first argument is no URL; the argument wins over it.
        let (url, rest) = url_and_rest(Some("etcds://h:1"), &args(&["order:*"]), 1).unwrap();
        assert_eq!((url.as_str(), rest), ("etcds://h:1", args(&["order:*"])));
        let (url, _) = url_and_rest(Some("etcds://h:1"), &args(&["redis://h:2"]), 1).unwrap();
        assert_eq!(url, "redis://h:2");
    }
}

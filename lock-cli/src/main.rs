//! `distlock`: look at and operate the locks of services that use distlock.
//!
//! ```text
//! distlock list    [URL] [PATTERN]           held locks: key, holder, since, lease left, fencing token, waiters
//! distlock show    [URL] KEY                 one lock in detail
//! distlock release [URL] KEY --force [--yes] delete a lock whoever holds it
//! distlock hold    [URL] KEY [--for 30s]     take a lock by hand (waiting for it); Ctrl-C releases it
//! distlock watch   [URL] [PATTERN]           print acquisitions and releases as they happen
//! distlock ping    [URL]                     is the backend reachable from here?
//! distlock run     [URL] KEY -- COMMAND…     run COMMAND while holding the lock (a cluster-wide flock)
//! distlock run     [URL] KEY -c 'STRING'     the same, running STRING with `sh -c`
//! distlock elect   [URL] NAME --identity ID -- COMMAND…   run COMMAND while leading election NAME
//! distlock leader  [URL] NAME [--watch]      who leads election NAME (each change with --watch)
//! ```
//!
//! As `flock(1)`, `etcdctl lock` and `consul lock` do, `hold`, `run` and `elect` wait for the
//! lock (or to lead) as long as it takes: `-w`/`--wait DURATION` bounds the wait (`forever`
//! is the default), `-n`/`--nonblock` tries once. `--json` belongs to the commands that print
//! results (`list`, `show`, `release`, `hold`, `watch`, `ping`, `leader`).
//!
//! Every command exits with the codes of one table, [`EXIT_CODES`] (in `distlock --help`),
//! whose numbers are the constants of [`exit`].
//!
//! The URL is the one the services use (`redis://…`, `postgres://…`, `zk://…`, …); without it,
//! `DISTLOCK_URL` is read. See `distlock --help` for options and exit codes.

mod bench;
mod format;
mod measure;
mod run;
mod warnings;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{ArgGroup, Args, Parser, Subcommand};
use distlock_runtime::{LockClient, LockError, LockInfo, LockRequest};

use format::{duration, info_json, since, table};

/// The exit codes of every command; [`EXIT_CODES`] is their table.
pub(crate) mod exit {
    /// Bad usage: arguments, URL, key, durations, a release not confirmed (clap's own usage
    /// errors exit 2 too).
    pub(crate) const USAGE: u8 = 2;
    /// This store cannot do that: a kind or setting it lacks, or memory:// from outside its
    /// process.
    pub(crate) const UNSUPPORTED: u8 = 3;
    /// Nobody holds the lock (`show`, `release`) or leads the election (`leader`).
    pub(crate) const NOT_HELD: u8 = 4;
    /// Not taken (not led) within --wait.
    pub(crate) const BUSY: u8 = 120;
    /// Lost while held.
    pub(crate) const LOST: u8 = 121;
    /// The backend failed or could not be reached.
    pub(crate) const BACKEND: u8 = 122;
    /// A check of `distlock check` failed (each is printed with what to do).
    pub(crate) const CHECK_FAILED: u8 = 1;
    /// COMMAND could not be started (not executable).
    pub(crate) const CANNOT_RUN: u8 = 126;
    /// COMMAND was not found.
    pub(crate) const NOT_FOUND: u8 = 127;
    /// Plus the signal's number: a signal ended COMMAND, or stopped a wait.
    pub(crate) const SIGNALLED: u8 = 128;
}

/// The table of [`exit`]'s codes, as a literal (so `concat!` can add to it).
macro_rules! exit_table {
    () => {
        "\
Exit codes (every command):
  0      done (`run`, `elect`: COMMAND's own exit status instead)
  1      a check failed (`check`: each is printed with what to do)
  2      bad usage: arguments, URL, key, durations, or a release not confirmed
  3      this store cannot do that: a kind or setting it lacks (--read,
         --permits, --lock-delay, --min-hold, --fencing, `elect` where the
         store has none; see distlock::guide::backends), or memory:// from
         outside its process
  4      not held: nobody holds the lock (`show`, `release`) or leads the
         election (`leader`)
  120    busy: not taken within --wait (`hold`, `run`; `elect`: did not lead
         within it)
  121    lost while held: lease ran out, or released by force (`hold`, `run`,
         `elect`)
  122    the backend failed or could not be reached
  126    COMMAND is not executable (`run`, `elect`)
  127    COMMAND was not found (`run`, `elect`)
  128+N  signal N ended COMMAND (`run`, `elect`), or stopped the wait for the
         lock (`hold`, `run`, `elect`: nothing taken, COMMAND not started)"
    };
}
pub(crate) use exit_table;

/// The exit codes, and where the URL comes from: `distlock --help`'s epilogue.
pub(crate) const EXIT_CODES: &str = concat!(
    exit_table!(),
    "

The URL is the first argument when it contains `://`; otherwise --url, then
DISTLOCK_URL (both keep a password out of the command line other users can
read in `ps`)."
);

/// Look at and operate distributed locks taken with distlock.
#[derive(Parser)]
#[command(name = "distlock", version, after_help = EXIT_CODES, max_term_width = 80)]
pub(crate) struct Cli {
    /// The backend URL, when the first argument is none (else DISTLOCK_URL).
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
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

/// How long `hold`, `run` and `elect` wait for the lock (to lead): `-w`/`--wait`, `-n`.
#[derive(Args, Clone, Copy, Debug)]
pub(crate) struct WaitArgs {
    /// How long to wait for the lock (`elect`: to lead) before giving up with exit code 120:
    /// a duration (`30s`, `2m`; `0s` tries once) or `forever`.
    #[arg(short = 'w', long, value_name = "DURATION", default_value = "forever", value_parser = parse_wait)]
    wait: Wait,
    /// Do not wait: try once, exit code 120 if busy (the same as `--wait 0s`).
    #[arg(short = 'n', long, conflicts_with = "wait")]
    nonblock: bool,
}

impl WaitArgs {
    pub(crate) fn wait(self) -> Wait {
        if self.nonblock {
            Wait::Up(Duration::ZERO)
        } else {
            self.wait
        }
    }
}

/// How long to wait for a lock: `forever` or a duration (`-w`, `--wait`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    Forever,
    Up(Duration),
}

impl Wait {
    /// `request` waiting this long.
    pub(crate) fn apply(self, request: LockRequest) -> LockRequest {
        match self {
            Wait::Forever => request.wait_forever(),
            Wait::Up(wait) => request.wait(wait),
        }
    }

    /// For a message: "at once (-n)", "within --wait 300ms".
    pub(crate) fn missed(self) -> String {
        match self {
            Wait::Up(wait) if wait.is_zero() => "at once (-n, --wait 0s)".to_owned(),
            Wait::Up(wait) => format!("within --wait {}", duration(wait)),
            Wait::Forever => "(the backend gave up waiting)".to_owned(),
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Lists the held locks whose key matches PATTERN.
    ///
    /// The held locks whose key matches PATTERN (`*` any characters, `?` one, `\` escapes;
    /// all when omitted), with holder, age, lease left, fencing token and waiters.
    List {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the key glob
        #[arg(value_name = "URL] [PATTERN", num_args = 0..=2)]
        args: Vec<String>,
        /// At most this many locks.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print a JSON array of the locks instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Shows one lock in detail (exit code 4 if nobody holds it).
    #[command(override_usage = "distlock show [OPTIONS] [URL] KEY")]
    Show {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the lock key
        #[arg(value_name = "URL] [KEY", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// Print the lock as a JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Deletes a lock whoever holds it, and wakes its waiters.
    ///
    /// Deletes a lock whoever holds it and wakes its waiters. The holder is not asked: it
    /// learns at its next renewal that the lock is gone, and may still be inside its critical
    /// section until then. Asks for confirmation unless --yes.
    #[command(override_usage = "distlock release [OPTIONS] --force [URL] KEY")]
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
        /// Print the released lock as a JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Takes a lock by hand and keeps it until --for ends or Ctrl-C.
    ///
    /// Takes a lock by hand — waiting for it as long as it takes, unless --wait or --nonblock
    /// — and keeps it (renewed) until --for ends or Ctrl-C / SIGTERM, then releases it: e.g.
    /// to keep a scheduled job from running during maintenance. Creates a missing SQL lock
    /// table, as the services' clients do.
    #[command(after_help = exit_table!(), override_usage = "distlock hold [OPTIONS] [URL] KEY")]
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
        #[command(flatten)]
        wait: WaitArgs,
        /// Ask for a fencing token.
        #[arg(long)]
        fencing: bool,
        /// Print one JSON object per line on stdout as the lock is held, released or lost
        /// (`event`: `held`, `released`, `lost`, `error`).
        #[arg(long)]
        json: bool,
    },
    /// Prints acquisitions, releases and expiries as they happen.
    ///
    /// Prints acquisitions, releases and expiries of the locks matching PATTERN as they
    /// happen: it lists them again whenever the store announces a change, else every
    /// --interval (which stores do: distlock::guide::backends), and prints what changed — a hold
    /// shorter than one listing may be missed. Runs until Ctrl-C or --for.
    Watch {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the key glob
        #[arg(value_name = "URL] [PATTERN", num_args = 0..=2)]
        args: Vec<String>,
        /// Time between two listings when the store announces no changes.
        #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
        interval: Duration,
        /// Stop after this long.
        #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
        watch_for: Option<Duration>,
        /// Print one JSON object per event, one per line (`event`: `held`, `acquired`,
        /// `released`, `expired`).
        #[arg(long)]
        json: bool,
    },
    /// Runs COMMAND while holding the lock: a cluster-wide flock(1).
    ///
    /// Runs COMMAND while holding the lock — a cluster-wide `flock(1)`: takes KEY (waiting as
    /// long as it takes, unless --wait or --nonblock), runs COMMAND in a process group of its
    /// own with the lock renewed, releases it when COMMAND exits, and exits with COMMAND's
    /// status. SIGINT, SIGTERM and SIGHUP go to COMMAND; if the lock is lost, COMMAND gets
    /// SIGTERM, then SIGKILL after --grace. COMMAND sees DISTLOCK_KEY (and
    /// DISTLOCK_FENCING_TOKEN with --fencing). Creates a missing SQL lock table.
    #[command(after_help = run::AFTER_HELP)]
    #[command(
        override_usage = "distlock run [OPTIONS] [URL] KEY (-c STRING | -- COMMAND [ARGS]...)"
    )]
    #[command(group(ArgGroup::new("what").required(true).args(["shell", "command"])))]
    Run {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the lock key
        #[arg(value_name = "URL] [KEY", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// The command and its arguments, after `--` (or -c).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
        /// Run STRING with `sh -c` instead of `-- COMMAND…` (as `flock -c`).
        #[arg(short = 'c', value_name = "STRING")]
        shell: Option<String>,
        /// The lease, renewed every third of it while COMMAND runs (how long the lock outlives
        /// this process if it dies). Default: 30s, or --min-hold when that is longer.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        lease: Option<Duration>,
        #[command(flatten)]
        wait: WaitArgs,
        /// Keep the lock at least this long after it was granted, however soon COMMAND exits
        /// (a job started by cron on several hosts runs once per period even when their clocks
        /// differ). Without --lease the lease covers it; an explicit --lease must be at least
        /// as long.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        min_hold: Option<Duration>,
        /// Hold the lock at most this long after it was granted: renewal stops then, the lock
        /// is lost, and COMMAND is terminated as for any lost lock (SIGTERM, then SIGKILL after
        /// --grace; exit 121), so a hung COMMAND cannot keep it forever. Without --lease the
        /// lease is cut to fit it; an explicit --lease must be at most as long.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        max_hold: Option<Duration>,
        /// If this process dies or hangs without giving the lock back, keep the lock taken
        /// this long after its lease ran out (a COMMAND the lock's loss has not yet stopped
        /// finds nobody else inside); a normal exit frees it at once. A store that cannot keep
        /// it exits 3 saying why.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        lock_delay: Option<Duration>,
        /// Take a read lock: COMMAND runs beside other readers, never beside a writer.
        #[arg(long, conflicts_with = "permits")]
        read: bool,
        /// Take one permit of the semaphore KEY of N permits (1 to 65535): up to N COMMANDs at
        /// once.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
        permits: Option<u16>,
        /// After SIGTERM to a COMMAND whose lock was lost, how long until SIGKILL.
        #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
        grace: Duration,
        /// Ask for a fencing token (passed to COMMAND as DISTLOCK_FENCING_TOKEN).
        #[arg(long)]
        fencing: bool,
    },
    /// Runs COMMAND while this process leads the election NAME.
    ///
    /// Runs COMMAND while this process leads the election NAME: campaigns as --identity
    /// (waiting until it leads, unless --wait or --nonblock), runs COMMAND in a process group
    /// of its own while the leadership's lease is renewed, resigns when COMMAND exits (the
    /// next candidate leads at once), and exits with COMMAND's status. If leadership is lost,
    /// COMMAND gets SIGTERM, then SIGKILL after --grace. COMMAND sees DISTLOCK_ELECTION,
    /// DISTLOCK_IDENTITY and DISTLOCK_TERM (the leader's fencing token, strictly rising with
    /// every leader). Creates a missing SQL lock table.
    #[command(after_help = run::AFTER_HELP)]
    #[command(
        override_usage = "distlock elect [OPTIONS] [URL] NAME --identity ID -- COMMAND [ARGS]..."
    )]
    #[command(group(ArgGroup::new("what").required(true).args(["shell", "command"])))]
    Elect {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the election's name
        #[arg(value_name = "URL] [NAME", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// What names this candidate to the others (`distlock leader` prints it): a host and
        /// port, a pod name.
        #[arg(long, value_name = "ID", required = true)]
        identity: String,
        /// The command and its arguments, after `--` (or -c).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
        /// Run STRING with `sh -c` instead of `-- COMMAND…` (as `flock -c`).
        #[arg(short = 'c', value_name = "STRING")]
        shell: Option<String>,
        /// The leader's lease, renewed every third of it while COMMAND runs: a standby leads
        /// at most this long after this process dies (the same default as `run` and `hold`).
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
        lease: Duration,
        #[command(flatten)]
        wait: WaitArgs,
        /// After SIGTERM to a COMMAND whose leadership was lost, how long until SIGKILL.
        #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
        grace: Duration,
    },
    /// Shows who leads the election NAME (exit code 4 if nobody does).
    ///
    /// Who leads the election NAME: identity, term and since when (exit code 4 if nobody
    /// does); with --watch, each change as it is seen, until Ctrl-C or --for.
    #[command(override_usage = "distlock leader [OPTIONS] [URL] NAME")]
    Leader {
        /// The URL (when it contains `://`; else DISTLOCK_URL), then the election's name
        #[arg(value_name = "URL] [NAME", num_args = 1..=2, required = true)]
        args: Vec<String>,
        /// Print every change of leader.
        #[arg(long)]
        watch: bool,
        /// With --watch: how often to ask.
        #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration)]
        interval: Duration,
        /// With --watch: stop after this long.
        #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
        watch_for: Option<Duration>,
        /// Print a JSON object (`election`, `leader`: `identity`, `term`, `since_unix_ms`, or
        /// null); with --watch, one per line for each change.
        #[arg(long)]
        json: bool,
    },
    /// Checks the store is ready for distlock: ✔ or ✘ and what to do
    ///
    /// Connects as the services would (the SQL lock table created if missing), then reports
    /// the server and its version, the median round trip, what the store serves, who the
    /// server says the client is and whether the connection is encrypted, what the store lets
    /// it do (a ZooKeeper chroot's ACL, an etcd user's roles), the store's own settings that
    /// matter (the replicas `?replicas=` asks for, a Cluster's slots, the
    /// server's clock against this host's, a transaction pooler in front of PostgreSQL
    /// without `pooler=transaction`), and takes, reads and gives back a lock under
    /// `distlock-check:` (the right to write where locks live). Exits 0 when every check
    /// passes, 1 when one fails, and as any command when it cannot connect.
    #[command(override_usage = "distlock check [OPTIONS] [URL]")]
    Check {
        /// The URL (else DISTLOCK_URL)
        #[arg(value_name = "URL", num_args = 0..=1)]
        args: Vec<String>,
        /// Print a JSON object (`backend`, `url`, `passed`, `findings`: each `check`,
        /// `passed`, `found`, `fix`).
        #[arg(long)]
        json: bool,
    },
    /// Measures locks on the store beside the store's own floor
    ///
    /// Uncontended acquire + release (p50, p99), throughput of `--tasks` tasks on keys of their
    /// own, and hand-overs between four clients on one key, each beside the raw floor measured
    /// in the same run on the same connection: the store's own create and delete of a key
    /// with nothing around them (Redis `SET NX PX` + `DEL`; the SQL lock table's own
    /// statements; etcd's put-if-absent and delete; a ZooKeeper ephemeral node; NATS's two
    /// publishes). Keys under `--keys`, given back as it goes: the
    /// store is left as it was. Prints what it measures on stderr while it runs, then a table.
    #[command(override_usage = "distlock bench [OPTIONS] [URL]")]
    Bench {
        /// The URL (else DISTLOCK_URL)
        #[arg(value_name = "URL", num_args = 0..=1)]
        args: Vec<String>,
        /// Tasks of the throughput measure, each on a key of its own.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
        tasks: u16,
        /// Uncontended pairs of each kind.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(10..=100_000))]
        pairs: u32,
        /// Each timed window (throughput, hand-over), in seconds.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=600))]
        seconds: u16,
        /// The keys it takes start with this (after the client's own `--prefix`).
        #[arg(long, value_name = "START", default_value = "distlock-bench:")]
        keys: String,
        /// Print a JSON object (`backend`, `url`, `server`, `tasks`, `rows`: each `what`,
        /// `unit`, `distlock`, `floor`, `ratio`).
        #[arg(long)]
        json: bool,
    },
    /// Checks the store answers: its version and one round trip.
    Ping {
        /// The URL (else DISTLOCK_URL)
        #[arg(value_name = "URL", num_args = 0..=1)]
        args: Vec<String>,
        /// Print a JSON object (`backend`, `url`, `version`, `round_trip_ms`).
        #[arg(long)]
        json: bool,
    },
}

/// Why the command failed, and its exit code (of [`exit`]).
#[derive(Debug)]
pub(crate) enum Failure {
    /// The backend failed or could not be reached.
    Error(String),
    Usage(String),
    Unsupported(String),
    NotHeld(String),
    Busy(String),
    Lost(String),
    /// Signal N stopped a wait: 128 + N.
    Signalled(libc::c_int, String),
    /// Said already on stdout (`check`'s lines): exits with the code, prints nothing more.
    Reported(u8),
}

impl Failure {
    pub(crate) fn code(&self) -> u8 {
        match self {
            Failure::Error(_) => exit::BACKEND,
            Failure::Usage(_) => exit::USAGE,
            Failure::Unsupported(_) => exit::UNSUPPORTED,
            Failure::NotHeld(_) => exit::NOT_HELD,
            Failure::Busy(_) => exit::BUSY,
            Failure::Lost(_) => exit::LOST,
            Failure::Signalled(signal, _) => exit::SIGNALLED.wrapping_add(*signal as u8),
            Failure::Reported(code) => *code,
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            Failure::Error(m)
            | Failure::Usage(m)
            | Failure::Unsupported(m)
            | Failure::NotHeld(m)
            | Failure::Busy(m)
            | Failure::Lost(m)
            | Failure::Signalled(_, m) => m,
            Failure::Reported(_) => "",
        }
    }
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Failure {
        let message = error.to_string();
        match error {
            LockError::Config(_) | LockError::InvalidKey { .. } => Failure::Usage(message),
            LockError::Unsupported { .. } => Failure::Unsupported(message),
            LockError::Busy { .. } | LockError::Timeout { .. } => Failure::Busy(message),
            LockError::Lost { .. } => Failure::Lost(message),
            _ => Failure::Error(message),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    warnings::Warnings::install();
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
            return ExitCode::from(exit::BACKEND);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Reported(code)) => ExitCode::from(code),
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
        _ => match std::env::var(distlock_runtime::LockClient::URL_ENV) {
            Ok(url) if !url.trim().is_empty() => (url.trim().to_owned(), args.to_vec()),
            _ => {
                return Err(Failure::Usage(format!(
                    "no backend URL: give it first (`distlock list redis://127.0.0.1:6379`), with \
                     --url, or in {} (the URL your services use)",
                    distlock_runtime::LockClient::URL_ENV
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
        Command::List { args, limit, json } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let pattern = rest.first().map_or("*", String::as_str);
            let client = connect(&cli, &url).await?;
            let locks = client.list(pattern, *limit).await?;
            if *json {
                let all: Vec<_> = locks.iter().map(info_json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else if locks.is_empty() {
                eprintln!("no held lock matches `{pattern}` on {}", client.url());
            } else {
                print!("{}", table(&locks));
            }
            Ok(())
        }
        Command::Show { args, json } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let key = key_of(&rest)?;
            let client = connect(&cli, &url).await?;
            match client.inspect(key).await? {
                Some(info) if *json => {
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
        Command::Release {
            args,
            force,
            yes,
            json,
        } => {
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
                Some(removed) if *json => {
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
            json,
        } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let key = key_of(&rest)?;
            // Listening before anything else: Ctrl-C while connecting or waiting stops it.
            let interrupts = Interrupts::listen();
            // It takes the lock as the services do: a missing SQL table is created.
            let client = connect_as(&cli, &url, true).await?;
            let hold = Hold {
                hold_for: *hold_for,
                lease: *lease,
                wait: wait.wait(),
                fencing: *fencing,
                json: *json,
            };
            hold.run(&client, key, interrupts).await
        }
        Command::Watch {
            args,
            interval,
            watch_for,
            json,
        } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let pattern = rest.first().map_or("*", String::as_str);
            if interval.is_zero() {
                return Err(Failure::Usage("--interval must be more than 0".into()));
            }
            let client = connect(&cli, &url).await?;
            watch(&client, pattern, *interval, *watch_for, *json).await
        }
        Command::Run { .. } | Command::Elect { .. } => {
            unreachable!("`distlock run` and `elect` have a main of their own")
        }
        Command::Leader {
            args,
            watch,
            interval,
            watch_for,
            json,
        } => {
            let (url, rest) = url_and_rest(cli.url.as_deref(), args, 1)?;
            let name = election_of(&rest)?;
            if interval.is_zero() {
                return Err(Failure::Usage("--interval must be more than 0".into()));
            }
            let client = connect(&cli, &url).await?;
            let election = client.election(name).poll(*interval);
            if *watch {
                return watch_leader(&election, *watch_for, *json).await;
            }
            match election.leader().await? {
                Some(leader) => {
                    println!("{}", leader_line(name, Some(&leader), *json));
                    Ok(())
                }
                None if *json => {
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
        Command::Check { args, json } => {
            let (url, _) = url_and_rest(cli.url.as_deref(), args, 0)?;
            let client = match connect_as(&cli, &url, true).await {
                Ok(client) => client,
                Err(failure) => {
                    // (The message names the URL, its password redacted.)
                    if *json {
                        println!(
                            "{}",
                            serde_json::json!({
                                "passed": false,
                                "findings": [{
                                    "check": "connect",
                                    "passed": false,
                                    "found": failure.message(),
                                    "fix": serde_json::Value::Null,
                                }],
                            })
                        );
                    } else {
                        println!("distlock check");
                        println!("  ✘ {:<11} {}", "connect", failure.message());
                    }
                    return Err(Failure::Reported(failure.code()));
                }
            };
            let checkup = client.check().await;
            if *json {
                let findings: Vec<_> = checkup
                    .findings
                    .iter()
                    .map(|f| {
                        serde_json::json!({
                            "check": f.check,
                            "passed": f.passed,
                            "found": f.found,
                            "fix": f.fix,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({
                        "backend": checkup.backend,
                        "url": checkup.url,
                        "passed": checkup.passed(),
                        "findings": findings,
                    })
                );
            } else {
                println!("distlock check {} ({})", checkup.url, checkup.backend);
                for finding in &checkup.findings {
                    let mark = if finding.passed { '✔' } else { '✘' };
                    println!("  {mark} {:<11} {}", finding.check, finding.found);
                    if let Some(fix) = &finding.fix {
                        println!("    {:<11} → {fix}", "");
                    }
                }
                let failed = checkup.findings.iter().filter(|f| !f.passed).count();
                if failed == 0 {
                    println!("every check passed ({})", checkup.findings.len());
                } else {
                    println!("{failed} of {} checks failed", checkup.findings.len());
                }
            }
            if checkup.passed() {
                Ok(())
            } else {
                Err(Failure::Reported(exit::CHECK_FAILED))
            }
        }
        Command::Bench {
            args,
            tasks,
            pairs,
            seconds,
            keys,
            json,
        } => {
            let (url, _) = url_and_rest(cli.url.as_deref(), args, 0)?;
            let mut clients = Vec::new();
            for _ in 0..4 {
                clients.push(connect_as(&cli, &url, true).await?);
            }
            let server = clients[0].ping().await?;
            let setup = bench::Setup {
                prefix: keys.clone(),
                pairs: *pairs as usize,
                tasks: usize::from(*tasks),
                window: Duration::from_secs(u64::from(*seconds)),
            };
            eprintln!(
                "distlock bench {} ({}, {})",
                server.url, server.backend, server.version
            );
            let report =
                bench::run(&clients, &setup, |what| eprintln!("distlock bench: {what}")).await?;
            if *json {
                println!(
                    "{}",
                    serde_json::json!({
                        "backend": server.backend,
                        "url": server.url,
                        "server": server.version,
                        "tasks": tasks,
                        "rows": bench::json_rows(&report),
                    })
                );
            } else {
                println!(
                    "distlock bench {} ({}, {}), {tasks} tasks, {seconds} s windows",
                    server.url, server.backend, server.version
                );
                print!("{}", bench::table(&report));
            }
            Ok(())
        }
        Command::Ping { args, json } => {
            let (url, _) = url_and_rest(cli.url.as_deref(), args, 0)?;
            let client = connect(&cli, &url).await?;
            let info = client.ping().await?;
            if *json {
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

/// `distlock hold`'s options.
struct Hold {
    hold_for: Option<Duration>,
    lease: Duration,
    wait: Wait,
    fencing: bool,
    json: bool,
}

/// How long `hold` waits for a busy lock before saying so on stderr.
const SAY_WAITING_AFTER: Duration = Duration::from_secs(1);

impl Hold {
    /// Takes `key` (waiting as long as `wait` says; a signal stops the wait), holds it until
    /// `hold_for` ends or a signal, then releases it.
    async fn run(
        self,
        client: &LockClient,
        key: &str,
        mut interrupts: Interrupts,
    ) -> Result<(), Failure> {
        let Hold {
            hold_for,
            lease,
            wait,
            fencing,
            json,
        } = self;
        let acquire = wait
            .apply(client.lock(key).lease(lease).fencing(fencing))
            .acquire();
        tokio::pin!(acquire);
        let say_waiting = tokio::time::sleep(SAY_WAITING_AFTER);
        tokio::pin!(say_waiting);
        let mut said = false;
        let guard = loop {
            tokio::select! {
                acquired = &mut acquire => match acquired {
                    Ok(guard) => break guard,
                    Err(LockError::Busy { .. } | LockError::Timeout { .. }) => {
                        let holder = holder_of(client, key).await;
                        return Err(Failure::Busy(format!(
                            "`{key}` is held by {holder}; not taken {}",
                            wait.missed()
                        )));
                    }
                    Err(e) => return Err(e.into()),
                },
                () = &mut say_waiting, if !said => {
                    said = true;
                    let holder = holder_of(client, key).await;
                    let until = match wait {
                        Wait::Forever => "as long as it takes".to_owned(),
                        Wait::Up(d) => format!("up to {}", duration(d)),
                    };
                    eprintln!(
                        "distlock: `{key}` is held by {holder}; waiting for it {until} \
                         (Ctrl-C gives up)"
                    );
                }
                signal = interrupts.recv() => {
                    return Err(Failure::Signalled(
                        signal,
                        format!("{} while waiting for `{key}`: not taken", signal_name(signal)),
                    ));
                }
            }
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
            _ = interrupts.recv() => "interrupted",
            () = lost => {
                let message = format!(
                    "lost `{key}`: its lease ran out or it was released by force; whatever \
                     relied on it is no longer protected"
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
}

/// "SIGINT", "SIGTERM", "SIGHUP": for messages.
pub(crate) fn signal_name(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
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
            _ = self.recv() => {}
        }
    }

    /// The next SIGINT or SIGTERM: its number.
    async fn recv(&mut self) -> libc::c_int {
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
            () = next(self.interrupt.as_mut()) => libc::SIGINT,
            () = next(self.terminate.as_mut()) => libc::SIGTERM,
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
    let mut interrupts = Interrupts::listen();
    let started = Instant::now();
    let mut watch = client.watch(pattern).await.poll(interval);
    if !json {
        let how = if watch.follows_store() {
            "woken by the store's announcements".to_owned()
        } else {
            format!("listing every {}", duration(interval))
        };
        eprintln!(
            "watching `{pattern}` on {} ({how}; Ctrl-C to stop)",
            client.url()
        );
    }
    let stop = interrupts.or_after(watch_for);
    tokio::pin!(stop);
    loop {
        let event = tokio::select! {
            () = &mut stop => return Ok(()),
            event = watch.next() => event?,
        };
        let info = event.lock();
        if json {
            let mut line = info_json(info);
            line["event"] = event.name().into();
            line["at_ms"] = (started.elapsed().as_millis() as u64).into();
            println!("{line}");
        } else {
            println!(
                "{:>9}  {:<8}  {}  {}",
                duration(started.elapsed()),
                event.name(),
                info.key,
                who(info)
            );
        }
        let _ = std::io::stdout().flush();
    }
}

/// One line of `distlock leader`: who leads `name` (`None`: nobody), as text or JSON
/// (`election`, `leader`: `identity`, `term`, `since_unix_ms`, or null).
fn leader_line(name: &str, leader: Option<&distlock_runtime::Leader>, json: bool) -> String {
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
    election: &distlock_runtime::Election,
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

/// `forever`, or a duration (`30s`, `0s`): what `-w`/`--wait` takes.
fn parse_wait(text: &str) -> Result<Wait, String> {
    match text.trim() {
        "forever" => Ok(Wait::Forever),
        _ => parse_duration(text)
            .map(Wait::Up)
            .map_err(|e| format!("{e}; or `forever`")),
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

    /// `distlock --help` lists each command on one line of at most 80 columns (its summary:
    /// the first paragraph of its docs; the details are in `distlock COMMAND --help`), and each
    /// command's usage line names its arguments as they are typed.
    #[test]
    fn each_command_is_one_short_line_and_every_help_fits_80_columns() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let help = cli.render_help().to_string();
        let commands: Vec<&str> = help
            .lines()
            .skip_while(|line| !line.starts_with("Commands:"))
            .skip(1)
            .take_while(|line| !line.is_empty())
            .collect();
        assert_eq!(commands.len(), 12, "{help}");
        for line in commands {
            assert!(
                line.chars().count() <= 80,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        for sub in cli.get_subcommands_mut() {
            let usage = sub.render_usage().to_string();
            assert!(
                !usage.contains("<URL]") && !usage.contains("KEY>"),
                "{usage}"
            );
        }
        // Every line of every help, short (`-h`) and long (`--help`), fits 80 columns.
        let mut helps = vec![help, cli.render_long_help().to_string()];
        for sub in cli.get_subcommands_mut() {
            helps.push(sub.render_help().to_string());
            helps.push(sub.render_long_help().to_string());
        }
        for help in helps {
            for line in help.lines() {
                let columns = line.chars().count();
                assert!(columns <= 80, "{columns} columns: {line}\nin\n{help}");
            }
        }
    }

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
    fn waits_parse() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("0s"), Ok(Wait::Up(Duration::ZERO)));
        assert_eq!(parse_wait("2m"), Ok(Wait::Up(Duration::from_secs(120))));
        assert!(parse_wait("never").unwrap_err().contains("forever"));
    }

    /// `-w`, `--wait`, `-n` and their defaults, the same on `hold`, `run` and `elect`.
    #[test]
    fn hold_run_and_elect_wait_forever_unless_told() {
        fn wait_of(args: &[&str]) -> Result<Wait, clap::Error> {
            let cli = Cli::try_parse_from(["distlock"].iter().chain(args))?;
            Ok(match cli.command {
                Command::Hold { wait, .. }
                | Command::Run { wait, .. }
                | Command::Elect { wait, .. } => wait.wait(),
                _ => unreachable!(),
            })
        }
        let commands: [&[&str]; 3] = [
            &["hold", "k"],
            &["run", "k", "-c", "true"],
            &["elect", "k", "--identity", "a", "-c", "true"],
        ];
        for command in commands {
            let with = |extra: &[&str]| {
                let mut args = command.to_vec();
                args.extend_from_slice(extra);
                wait_of(&args)
            };
            assert_eq!(with(&[]).unwrap(), Wait::Forever, "{command:?}");
            assert_eq!(with(&["--wait", "forever"]).unwrap(), Wait::Forever);
            assert_eq!(
                with(&["-w", "3s"]).unwrap(),
                Wait::Up(Duration::from_secs(3))
            );
            assert_eq!(with(&["--wait", "0s"]).unwrap(), Wait::Up(Duration::ZERO));
            assert_eq!(with(&["-n"]).unwrap(), Wait::Up(Duration::ZERO));
            assert_eq!(with(&["--nonblock"]).unwrap(), Wait::Up(Duration::ZERO));
            let both = with(&["-n", "-w", "3s"]).unwrap_err();
            assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict);
            assert_eq!(both.exit_code(), 2);
        }
    }

    /// The table in `--help` names every code of [`exit`], each once.
    #[test]
    fn the_exit_table_has_every_code() {
        let codes = [
            exit::CHECK_FAILED,
            exit::USAGE,
            exit::UNSUPPORTED,
            exit::NOT_HELD,
            exit::BUSY,
            exit::LOST,
            exit::BACKEND,
            exit::CANNOT_RUN,
            exit::NOT_FOUND,
        ];
        for code in codes {
            let lines = EXIT_CODES
                .lines()
                .filter(|l| l.trim_start().starts_with(&format!("{code} ")))
                .count();
            assert_eq!(lines, 1, "{code} in\n{EXIT_CODES}");
        }
        assert!(EXIT_CODES.contains(&format!("{}+N", exit::SIGNALLED)));
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
